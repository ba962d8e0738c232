"""normlab.bench: the measurement harness behind the CLI, the notebooks and the recorded data.

Device time per call from ``torch.profiler`` with a cold L2 (``timing``), an explicit
bytes-moved model (``traffic``), the measured copy bandwidth as roofline (``device``), one record
schema in JSONL/CSV (``records``), baselines and normlab in one registry (``registry``), sweeps
with a progress hook (``sweep``, ``progress``) built on one timed record (``measure``). Never
imports ipywidgets or plotly.
"""

from normlab import _runtime  # noqa: F401  (runtime mode before any kernel is defined)
from normlab.bench.device import (
    DATASHEET_GBPS,
    CopyBandwidth,
    DeviceInfo,
    datasheet_gbps,
    device_info,
    measure_copy_bandwidth,
)
from normlab.bench.progress import TerminalProgress
from normlab.bench.records import (
    Record,
    check_sanity,
    load_recorded,
    read_records,
    recorded_path,
    write_records,
)
from normlab.bench.registry import REGISTRY, Impl, implementations
from normlab.bench.sweep import SHAPES, Results, format_table, measure, parse_shapes, sweep
from normlab.bench.timing import BenchError, Timing, time_call, time_warm
from normlab.bench.traffic import bytes_moved, fraction_of_roofline, gbps

__all__ = [
    "DATASHEET_GBPS",
    "REGISTRY",
    "SHAPES",
    "BenchError",
    "CopyBandwidth",
    "DeviceInfo",
    "Impl",
    "Record",
    "Results",
    "TerminalProgress",
    "Timing",
    "bytes_moved",
    "check_sanity",
    "datasheet_gbps",
    "device_info",
    "format_table",
    "fraction_of_roofline",
    "gbps",
    "implementations",
    "load_recorded",
    "measure",
    "measure_copy_bandwidth",
    "parse_shapes",
    "read_records",
    "recorded_path",
    "sweep",
    "time_call",
    "time_warm",
    "write_records",
]
