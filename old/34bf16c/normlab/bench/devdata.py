"""Readers for the recorded measurements the notebooks show that are not benchmark records.

Both ship in ``normlab/data/``: the host overhead of every op beside torch's
(``nvidia-h200-host-overhead.json``, from ``normlab.bench.overhead``; a copy of
``benchmarks/data/overhead_*_h200.json``), and two runs of the launch-config sweeps
(``nvidia-h200-launch-sweeps.json``: the two timing modes at 16384x1024 and a registers/spills
A/B; the full file is ``benchmarks/data/dev/sweep_launch_configs_h200.json``), and a run of the
loss options and the fused residual add beside their base ops (``nvidia-h200-loss-options.json``,
written by ``benchmarks/loss_options.py --ship`` from a ``benchmarks/data/loss_options_*.jsonl``),
and the loss kernels' SASS counts compiled for sm_90 (``sm90-loss-loops.json``, written by
``benchmarks/kernel_loops.py --ship`` from ``benchmarks/data/kernel_loops_*_sm90.txt``; counts,
not a measurement). Each reader returns None when its file is not there.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from normlab.bench.overhead import HostCost
from normlab.bench.records import DATA_DIR

DATA = DATA_DIR
HOST_OVERHEAD = "nvidia-h200-host-overhead.json"
SWEEPS = "nvidia-h200-launch-sweeps.json"
LOSS_OPTIONS = "loss-options.json"  # after the card's slug: nvidia-h200-loss-options.json
LOSS_LOOPS = "sm90-loss-loops.json"


def _path(name: str, data_dir: str | Path | None) -> Path | None:
    path = Path(data_dir or DATA) / name
    return path if path.is_file() else None


def host_overhead(name: str = HOST_OVERHEAD,
                  data_dir: str | Path | None = None) -> tuple[dict, list[HostCost]] | None:
    """(meta, costs) of a recorded host-overhead run: card, commit, date and note, and one
    ``HostCost`` per (op, impl, direction)."""
    path = _path(name, data_dir)
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["meta"], [HostCost(**c) for c in data["costs"]]


def sweep_run(commit: str, data_dir: str | Path | None = None) -> tuple[dict, list[dict]] | None:
    """(meta, results) of the launch-config sweep run at ``commit`` (as its meta names it, e.g.
    "fd6ed74" or "4dd23b8+ab"): card, date, commit, torch, triton and note, and its raw rows."""
    path = _path(SWEEPS, data_dir)
    if path is None:
        return None
    runs = json.loads(path.read_text(encoding="utf-8"))["runs"]
    run = next((r for r in runs if r["meta"].get("commit") == commit), None)
    if run is None:
        raise ValueError(f"{path}: no run at commit {commit!r}")
    meta = {k: run["meta"].get(k) for k in ("card", "date", "commit", "torch", "triton", "note")}
    return meta, run["results"]


def register_ab(commit: str, data_dir: str | Path | None = None) -> tuple[dict, list[dict]] | None:
    """(meta, rows) of one A/B run of the launch-config sweeps (``commit`` as in its meta, e.g.
    "4dd23b8+ab"): per (op, M, N, variant) the compiled kernel's registers and spills per thread
    and the median device µs over the run's rounds."""
    run = sweep_run(commit, data_dir)
    if run is None:
        return None
    meta, results = run
    cells: dict[tuple, dict] = {}
    for r in results:
        key = (r["op"], r["M"], r["N"], r["variant"])
        cell = cells.setdefault(key, {"op": r["op"], "M": r["M"], "N": r["N"],
                                      "variant": r["variant"], "n_regs": None, "n_spills": None,
                                      "samples": []})
        cell["samples"].append(r["device_us"])
        if r.get("n_regs") is not None:
            cell["n_regs"], cell["n_spills"] = r["n_regs"], r["n_spills"]
    rows = [{**{k: v for k, v in c.items() if k != "samples"},
             "device_us": statistics.median(c["samples"]), "rounds": len(c["samples"])}
            for c in cells.values()]
    return meta, rows


def loss_options(card_slug: str = "nvidia-h200",
                 data_dir: str | Path | None = None) -> tuple[dict, list[dict]] | None:
    """(meta, rows) of a recorded loss-options run: card, date, commit, versions and command, and
    per measurement its variant ("cross_entropy softcap"), base variant (None for a base op or
    the fused add), op, impl, M, N, dtype, target dtype (None: the logits') and device µs."""
    path = _path(f"{card_slug}-{LOSS_OPTIONS}", data_dir)
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["meta"], data["rows"]


def loss_loops(name: str = LOSS_LOOPS,
               data_dir: str | Path | None = None) -> tuple[dict, list[dict]] | None:
    """(meta, rows) of the loss kernels' recorded SASS counts: the model's SM count, clock and
    pipe rates (``normlab.bench.pipes``), and per compiled variant ("cross_entropy softcap") its
    source file, commit, kernel (fused or chunked), tile, warps, register cap, switches
    (``poly_exp2``), registers, stack, and instructions and MUFU operations a logit."""
    path = _path(name, data_dir)
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["meta"], data["rows"]
