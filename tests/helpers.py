"""A verbose ``assert_close`` for the tests, on ``normlab.ref``'s tolerance table (one row per
dtype, atol scaled by sqrt(reduce_len) for reduced quantities; see ``normlab.ref.tolerance``),
and the loader of the repository's scripts.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normlab.ref import TOLERANCES, tolerance  # noqa: F401  (re-exported for the tests)


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    reduce_len: int | None = None,
    dtype: torch.dtype | None = None,
    msg: str = "",
) -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise, in fp64.

    ``dtype`` picks the tolerance row (default: ``actual.dtype``). NaN must sit at the same
    positions in both (never silently equal to a number). Shapes must match exactly. On failure
    the message lists the worst mismatches with their indices.
    """
    if actual.shape != expected.shape:
        raise AssertionError(
            f"{msg} shape mismatch: {tuple(actual.shape)} vs {tuple(expected.shape)}"
        )
    atol, rtol = tolerance(dtype or actual.dtype, reduce_len)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    if not torch.equal(nan_a, nan_e):
        bad = (nan_a != nan_e).nonzero()[:5].tolist()
        raise AssertionError(f"{msg} NaN positions differ, e.g. at {bad}")
    finite = ~nan_a
    err = torch.zeros_like(a)
    err[finite] = (a[finite] - e[finite]).abs() - (atol + rtol * e[finite].abs())
    inf_mismatch = finite & (torch.isinf(a) | torch.isinf(e)) & (a != e)
    err[inf_mismatch] = math.inf
    if (err > 0).any():
        n_bad = int((err > 0).sum())
        worst = torch.topk(err.flatten(), min(5, n_bad)).indices
        lines = []
        for flat in worst.tolist():
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
            lines.append(f"  at {idx}: actual {a[idx].item():.6g} expected {e[idx].item():.6g}")
        max_abs = (a[finite] - e[finite]).abs().max().item()
        raise AssertionError(
            f"{msg} {n_bad}/{a.numel()} elements outside atol={atol:.3g} rtol={rtol:.3g} "
            f"(max abs err {max_abs:.3g}):\n" + "\n".join(lines)
        )


def latin(*axes, keep: int = 1, quick: int | None = None) -> list:
    """A thinned cross product for ``pytest.mark.parametrize``: every combination of all axes but
    the last, each with ``keep`` values of the last axis, picked in rotation by the sum of the
    other axes' indices (a Latin square). Stepping any other axis by one steps the pick by one,
    so the last axis's values spread evenly over each other axis's values; all of them run
    (checked). ``quick``: only the first ``quick`` picks of each combination run in
    ``make test-quick``; the others are marked slow. A value that is a tuple fills several
    arguments; an id joins the values."""
    *others, last = axes
    if not 1 <= keep <= len(last):
        raise ValueError(f"keep must be in 1..{len(last)}, got {keep}")
    rows, picked = [], set()
    for idx in itertools.product(*(range(len(axis)) for axis in others)):
        head = [axis[i] for axis, i in zip(others, idx, strict=True)]
        for j in range(keep):
            pick = (sum(idx) + j) % len(last)
            picked.add(pick)
            values = [*head, last[pick]]
            flat = [v for value in values
                    for v in (value if isinstance(value, tuple) else (value,))]  # fmt: skip
            marks = pytest.mark.slow if quick is not None and j >= quick else ()
            rows.append(pytest.param(*flat, id="-".join(_param_id(v) for v in flat),
                                     marks=marks))  # fmt: skip
    if len(picked) < len(last):
        raise ValueError(f"too few combinations to run every value of {last}")
    return rows


def _param_id(value) -> str:
    return str(value).removeprefix("torch.")


REPO = Path(__file__).resolve().parents[1]


def load_script(relpath: str):
    """A repository script (``benchmarks/NAME.py``) as a module; its folder is on sys.path while
    it loads, as when it runs (the benchmarks import their siblings)."""
    path = REPO / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def norm_outputs(kind: str, x, w, b=None, r=None, **options) -> tuple:
    """The outputs of one public norm call, as a tuple: ``kind`` "rms" or "ln" (y), "add_rms" or
    "add_ln" (y and h = x + r); ``options`` are the calls' keywords (eps, offset, ...)."""
    import normlab

    if kind == "rms":
        return (normlab.rms_norm(x, w, **options),)
    if kind == "ln":
        return (normlab.layer_norm(x, w, b, **options),)
    if kind == "add_rms":
        return normlab.add_rms_norm(x, r, w, **options)
    return normlab.add_layer_norm(x, r, w, b, **options)


def cancelling_partials(n_rows: int, n_cols: int, tile_rows: int):
    """(x, dy, w) whose per-tile dγ partials cancel: equal rows, dy +1 and -1 in alternate blocks
    of ``tile_rows`` rows plus a little noise, a bf16 weight. Each partial is large and their sum
    small, so only fp32 partials leave dγ within a bf16 rounding of fp64's
    (``assert_bf16_rounding_of``)."""
    x = torch.randn(1, n_cols).expand(n_rows, n_cols).contiguous()
    sign = torch.where((torch.arange(n_rows) // tile_rows) % 2 == 0, 1.0, -1.0)
    dy = sign[:, None] + 0.01 * torch.randn(n_rows, n_cols)
    w = (1 + 0.5 * torch.randn(n_cols)).bfloat16()
    return x, dy, w


def assert_bf16_rounding_of(got: torch.Tensor, want: torch.Tensor) -> None:
    """got is bf16 and within one bf16 rounding of the fp64 ``want``."""
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want.bfloat16().double(), rtol=2**-7, atol=1e-3)


def replays_on(monkeypatch) -> list:
    """Turn the replay on (the interpreter runs it off by default) for one test; returns the
    list each replayed call (``normlab._launch.Replay``) appends itself to."""
    from normlab import _launch

    monkeypatch.setattr(_launch, "REPLAY", True)
    calls = []
    replay_call = _launch.Replay.__call__

    def counted(self, roles, device):
        calls.append(self)
        return replay_call(self, roles, device)

    monkeypatch.setattr(_launch.Replay, "__call__", counted)
    return calls


def traced_launch_spy(monkeypatch, modules, op_module, signature) -> list:
    """Every launch the launchers of ``modules`` make, as (kernel, grid, arguments, keywords),
    each tensor as ``signature`` gives it; traced launches are recorded and not run, and
    ``op_module``'s bodies trace as on a GPU (``TRACEABLE``). Returns the list."""
    from normlab import _launch

    seen = []
    real = _launch.launch

    def spy(fn, grid, *args, **kwargs):
        name = getattr(getattr(fn, "fn", fn), "__name__", repr(fn))
        seen.append((name, tuple(grid), tuple(map(signature, args)),
                     {k: signature(v) for k, v in kwargs.items()}))  # fmt: skip
        return real(fn, grid, *args, **kwargs)

    for module in modules:
        monkeypatch.setattr(module, "launch", spy)
    monkeypatch.setattr(_launch, "_traced_launch", lambda fn, grid, args, kwargs: None)
    monkeypatch.setattr(op_module, "TRACEABLE", True)
    return seen


SMALL_SPLIT_ROWS = {"SPLIT_ROW_FWD_MIN_COLS": 48, "SPLIT_ROW_FWD_MAX_ROWS_PER_SM": 1.0,
                    "SPLIT_ROW_BWD_MIN_COLS": 48, "SPLIT_ROW_FWD_COLS": 16,
                    "SPLIT_ROW_BWD_CHUNKS": (16,), "SPLIT_ROW_SUMS_CHUNKS": (16,)}  # fmt: skip


def small_split_rows(monkeypatch) -> None:
    """Rows split from 48 columns, in 16-column chunks forward, backward and for the sums: the
    split-row kernels at small widths, with several chunks and a ragged last one."""
    from normlab.norms import config

    for name, value in SMALL_SPLIT_ROWS.items():
        monkeypatch.setattr(config, name, value)


# A stand-in sm_90 target: Triton compiles kernels to TTIR for it without a GPU. ``body`` records
# its launches with ``record_launch`` and hands each case to ``analyse``.
_STAND_IN_SM90 = r"""
import json, os, sys
import torch
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
import triton
from triton.backends.compiler import GPUTarget

class StandIn:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)
    def get_current_device(self):
        return 0
    def get_active_torch_device(self):
        return torch.device("cpu")

triton.runtime.driver.set_active(StandIn())
os.environ["NORMLAB_MODE"] = "gpu"
os.environ["NORMLAB_REPLAY"] = "0"
from torch._higher_order_ops.triton_kernel_wrap import identify_accessed_tensors
from normlab import _runtime

_runtime.sm_count = lambda *a: 132
_runtime.l2_bytes = lambda *a: 50 << 20
CASES = json.loads(sys.argv[1])
launched, out = [], []

def record_launch(fn, grid, *args, **kw):
    launched.append((fn, args, kw))

def analyse(case, inputs):
    inputs = [t for t in inputs if t is not None]
    for fn, args, kw in launched:
        kwargs = {**dict(zip(fn.arg_names, args)), **kw}
        kwargs = {k: v for k, v in kwargs.items() if k in fn.arg_names}
        kwargs.update({p.name: p.default for p in fn.params if p.name not in kwargs})
        accessed = identify_accessed_tensors(fn, kwargs, {})
        writes = sorted(d.name for d in accessed.read_writes.writes)
        out.append({"case": case, "kernel": fn.__name__, "writes": writes,
                    "inputs_written": [k for k in writes if any(kwargs[k] is t for t in inputs)],
                    "tensors": sorted(k for k, v in kwargs.items()
                                      if isinstance(v, torch.Tensor))})
    launched.clear()
"""


def mutation_analysis(body: str, cases: list) -> list[dict]:
    """Inductor's mutation analysis (it reads a traced kernel's TTIR to find the tensors it
    writes; where that fails it takes every input as written, and a graph may clone them)
    of every launch ``body`` records for each of ``cases``, in a subprocess with a stand-in sm_90
    target (kernels compile only outside the interpreter; none runs). Returns one record a
    launch: its case, kernel, written parameters, the inputs among them and the parameters
    given a tensor."""
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NORMLAB_MODE")}
    script = _STAND_IN_SM90 + body + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], cwd=root,
                          capture_output=True, text=True, timeout=600,
                          env={**env, "PYTHONPATH": str(root)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Encountered an exception" not in proc.stderr, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
