"""The card: name, SMs, L2, datasheet bandwidth from a small table, and measured copy bandwidth.

The roofline every GB/s is divided by is the *measured* device-to-device copy bandwidth (bytes
read + written), taken in the same run; the datasheet figure is printed beside it only.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

from normlab import _launch, _runtime
from normlab.bench import traffic
from normlab.losses import config as loss_config

# Datasheet HBM bandwidth in GB/s, matched in order against the device name (case-insensitive).
# Sources: NVIDIA datasheets for T4, A100 (40/80 GB), H100 (SXM5 / PCIe), H200 SXM, B200 (HGX).
DATASHEET_GBPS: tuple[tuple[str, float], ...] = (
    (r"\bB200\b", 8000.0),
    (r"\bH200\b", 4800.0),
    (r"\bH100\b.*\bPCIe\b", 2000.0),
    (r"\bH100\b.*\b(SXM\d?|HBM3)\b", 3350.0),  # "NVIDIA H100 80GB HBM3" is the SXM5 part
    (r"\bA100\b.*\b80GB\b.*\bPCIe\b", 1935.0),
    (r"\bA100\b.*\b80GB\b", 2039.0),
    (r"\bA100\b", 1555.0),
    (r"\bT4\b", 320.0),
)
COPY_BYTES_GPU = 2**30  # >= 1 GiB per buffer: far beyond L2, so the copy streams from HBM
COPY_BYTES_CPU = 64 * 2**20  # CPU: big enough to leave the caches, quick enough for tests
COPY_REPS = 10
CPU_LABEL = "CPU/interpreter timings: say nothing about GPU bandwidth"


def datasheet_gbps(card: str) -> float | None:
    """Datasheet bandwidth of a card from its device name; None for an unknown card."""
    for pattern, value in DATASHEET_GBPS:
        if re.search(pattern, card, flags=re.IGNORECASE):
            return value
    return None


def card_name() -> str:
    if _runtime.DEVICE == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU {platform.machine() or 'unknown'}"


def git_commit() -> str:
    """Short commit of the checkout normlab runs from ("+dirty" with local changes), or "unknown".

    ``NORMLAB_COMMIT`` overrides it, for a copy of the tree without its .git (a remote GPU run)."""
    if os.environ.get("NORMLAB_COMMIT"):
        return os.environ["NORMLAB_COMMIT"]
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", "normlab"],
            capture_output=True,
            timeout=10,
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}+dirty" if dirty else sha


@dataclass
class CopyBandwidth:
    """A device-to-device copy of ``n_bytes``: ``gbps`` = 2·n_bytes / median device time."""

    gbps: float
    device_us: float
    n_bytes: int
    reps: int
    mode: str


def measure_copy_bandwidth(n_bytes: int | None = None, reps: int = COPY_REPS) -> CopyBandwidth:
    """Median bandwidth of ``dst.copy_(src)`` over ``reps`` cold-L2 calls (bytes read + written)."""
    from normlab.bench.timing import time_call

    if n_bytes is None:
        n_bytes = COPY_BYTES_GPU if _runtime.DEVICE == "cuda" else COPY_BYTES_CPU
    if n_bytes < 1:
        raise ValueError(f"n_bytes must be positive, got {n_bytes}")
    src = torch.randint(0, 255, (n_bytes,), dtype=torch.uint8, device=_runtime.DEVICE)
    dst = torch.empty_like(src)
    timing = time_call(lambda: dst.copy_(src), reps=reps, warmup=2)
    us = timing.device_us_median
    src = dst = None  # free 2 GiB before the sweep allocates
    if _runtime.DEVICE == "cuda":
        torch.cuda.empty_cache()
    return CopyBandwidth(
        gbps=traffic.gbps(2 * n_bytes, us), device_us=us, n_bytes=n_bytes, reps=reps,
        mode=timing.mode,
    )


@dataclass
class DeviceInfo:
    card: str
    mode: str
    torch: str
    triton: str
    python: str
    sm_count: int
    l2_bytes: int
    datasheet_gbps: float | None
    copy: CopyBandwidth | None = None

    @property
    def roofline_gbps(self) -> float | None:
        return self.copy.gbps if self.copy else None

    def lines(self) -> list[str]:
        """Human-readable summary, one fact per line."""
        mode = {
            "gpu": "gpu (compiled Triton kernels)",
            "interpret": "interpret (Triton interpreter on CPU tensors)",
        }.get(self.mode, self.mode)
        out = [
            f"card            {self.card}",
            f"mode            {mode}",
            f"torch           {self.torch}",
            f"triton          {self.triton}",
            f"python          {self.python}",
            f"SMs             {self.sm_count}"
            + ("  (interpreter stand-in)" if self.mode != "gpu" else ""),
            f"L2              {self.l2_bytes / 2**20:.1f} MiB",
            "datasheet       "
            + (f"{self.datasheet_gbps:.0f} GB/s" if self.datasheet_gbps else "unknown card"),
        ]
        if self.copy:
            out.append(
                f"measured copy   {self.copy.gbps:.0f} GB/s  ({self.copy.n_bytes / 2**30:.2f} GiB "
                f"device-to-device copy, bytes read + written, median of {self.copy.reps})"
            )
        switches = host_switches()
        out.append("host path       " + (", ".join(switches) if switches else "defaults")
                   + "  (docs/notes/2026-12-01-host-replay.md)")
        if self.mode != "gpu":
            out.append(f"note            {CPU_LABEL}")
        return out


def device_info(measure_copy: bool = True, copy_bytes: int | None = None) -> DeviceInfo:
    """What normlab runs on; with ``measure_copy`` also the copy roofline (a second or so)."""
    card = card_name()
    return DeviceInfo(
        card=card,
        mode=_runtime.MODE,
        torch=torch.__version__,
        triton=triton.__version__,
        python=platform.python_version(),
        sm_count=_runtime.sm_count(),
        l2_bytes=_runtime.l2_bytes(),
        datasheet_gbps=datasheet_gbps(card) if _runtime.DEVICE == "cuda" else None,
        copy=measure_copy_bandwidth(copy_bytes) if measure_copy else None,
    )


def host_switches() -> list[str]:
    """The switches that differ from this mode's default (records note them: they change which
    launches a call makes, or what a kernel does): the replay, the losses' in-kernel sum, the
    lean launch, label smoothing's partial logit sums, label CE's one-hot after the gradient
    loops, the losses' one-instruction exp, softcap's gradient exp on the FMA pipe, label CE's
    statistics per thread."""
    from normlab.losses import online  # a kernel module: imported only where asked

    out = []
    if _launch.REPLAY != (not _runtime.INTERPRET):  # on by default on a GPU
        out.append(f"NORMLAB_REPLAY={int(_launch.REPLAY)}")
    if not _runtime.INTERPRET:
        if not loss_config.REDUCE_IN_KERNEL:
            out.append("NORMLAB_LOSS_REDUCE=0")
        if not _launch.ENABLED:
            out.append("NORMLAB_LEAN_LAUNCH=0")
    if not online.SMOOTH_TILE_SUM:
        out.append("NORMLAB_LOSS_SMOOTH_TILE_SUM=0")
    if not online.LABEL_AFTER:
        out.append("NORMLAB_LOSS_LABEL_AFTER=0")
    if not _runtime.INTERPRET and not online.FAST_EXP:  # on by default on a GPU
        out.append("NORMLAB_LOSS_FAST_EXP=0")
    if online.SOFTCAP_POLY_EXP2:
        out.append("NORMLAB_LOSS_POLY_EXP2=1")
    if not loss_config.ENTROPY_THREAD_STATS:
        out.append("NORMLAB_LOSS_THREAD_STATS=0")
    return out
