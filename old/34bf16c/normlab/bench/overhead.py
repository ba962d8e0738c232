"""Host overhead: what one call costs the CPU, beside what it costs the GPU.

On a tiny input the GPU finishes each kernel long before the CPU has launched the next one, so a
loop of calls runs at the speed of the Python and C++ host path: argument checks, dispatch,
autograd bookkeeping, the Triton launcher, allocations. Two numbers per call:

* ``host_us``: CPU µs per call in a launch-bound loop (``LOOP_CALLS`` calls back to back, one
  synchronize at the end; the loop's time over its calls).
* ``wall_us``: one isolated call, from an idle GPU to its last kernel's end (synchronize,
  call, synchronize; the median over ``ISOLATED_CALLS``). It is what a lone call costs a step.

A shared host's speed drifts within a run, by 2× at times, so one loop per implementation can
compare a fast moment with a slow one. Each (op, direction) is measured in ``ROUNDS`` rounds that
take every implementation in turn (each round in another order), and each number is the median
over the rounds: peers sample the same moments.

Peers run the same op on the same input in the same process: torch's own op
(``F.rms_norm``, ``F.layer_norm``, ``F.cross_entropy``; reverse KL and soft cross-entropy as
``F.kl_div`` / a sum over ``log_softmax``), ``torch.compile`` of it, and Liger-Kernel where it is
importable. Under the interpreter the numbers are interpreter figures: they say how slow the
interpreter is, nothing about a GPU's host path.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from normlab import _runtime
from normlab.bench.records import dtype_name, parse_dtype

LOOP_CALLS = {"gpu": 400, "cpu": 3}  # per round
ISOLATED_CALLS = {"gpu": 40, "cpu": 3}  # per round
ROUNDS = {"gpu": 5, "cpu": 1}
WARMUP_CALLS = 20
TINY = {"norm": (4, 1024), "loss": (4, 4096)}  # a few rows: the GPU is never the bottleneck
DIRECTIONS = ("fwd", "fwd+bwd")
NORM_OPS = ("rms_norm", "layer_norm")
LOSS_OPS = ("cross_entropy", "reverse_kl", "soft_cross_entropy")
OPS = NORM_OPS + LOSS_OPS
IMPLS = ("normlab", "torch", "compile", "normlab+compile", "liger")


@dataclasses.dataclass(frozen=True)
class HostCost:
    """One op's host cost in one direction. ``mode`` is "gpu" or "interpret"."""

    op: str
    impl: str
    direction: str
    M: int
    N: int
    dtype: str
    host_us: float
    wall_us: float
    mode: str


def _norm_fn(op: str, impl: str) -> Callable | None:
    if impl in ("normlab", "normlab+compile"):
        import normlab

        fn = (lambda x, w, b: normlab.rms_norm(x, w, 1e-6)) if op == "rms_norm" else (
            lambda x, w, b: normlab.layer_norm(x, w, b, 1e-5))  # fmt: skip
    elif impl in ("torch", "compile"):
        fn = (lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)) if op == "rms_norm" else (
            lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5))  # fmt: skip
    elif impl == "liger":
        try:
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        except ImportError:
            return None
        fn = (lambda x, w, b: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)) \
            if op == "rms_norm" else (lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5))
    else:
        raise ValueError(f"unknown impl {impl!r}")
    return torch.compile(fn, fullgraph=True) if impl.endswith("compile") else fn


def _loss_fn(op: str, impl: str) -> Callable | None:
    if impl in ("normlab", "normlab+compile"):
        import normlab

        fn = getattr(normlab, op)
    elif impl in ("torch", "compile"):
        if op == "cross_entropy":
            fn = F.cross_entropy
        elif op == "reverse_kl":  # KL(p||q), p = softmax(logits): kl_div takes log q, log p
            fn = lambda x, t: F.kl_div(
                F.log_softmax(t.float(), -1), F.log_softmax(x.float(), -1),
                reduction="batchmean", log_target=True)  # fmt: skip
        else:
            fn = lambda x, t: -(F.softmax(t.float(), -1) * F.log_softmax(x.float(), -1)).sum(-1).mean()  # noqa: E501
    elif impl == "liger":
        if op != "cross_entropy":
            return None
        try:
            from liger_kernel.transformers.functional import liger_cross_entropy
        except ImportError:
            return None
        fn = liger_cross_entropy
    else:
        raise ValueError(f"unknown impl {impl!r}")
    return torch.compile(fn, fullgraph=True) if impl.endswith("compile") else fn


def host_case(op: str, impl: str, direction: str, dtype: torch.dtype, device: str):
    """(M, N, zero-argument call) or None where the impl lacks the op."""
    if op in NORM_OPS:
        M, N = TINY["norm"]
        fn = _norm_fn(op, impl)
        if fn is None:
            return None
        x = torch.randn(M, N, dtype=dtype, device=device, requires_grad=direction != "fwd")
        w = torch.ones(N, dtype=dtype, device=device, requires_grad=direction != "fwd")
        b = torch.zeros(N, dtype=dtype, device=device, requires_grad=direction != "fwd") \
            if op == "layer_norm" else None
        inputs = [t for t in (x, w, b) if t is not None]
        dy = torch.randn(M, N, dtype=dtype, device=device)
        if direction == "fwd":
            return M, N, lambda: fn(x, w, b)
        return M, N, lambda: torch.autograd.grad(fn(x, w, b), inputs, dy)
    M, N = TINY["loss"]
    fn = _loss_fn(op, impl)
    if fn is None:
        return None
    logits = torch.randn(M, N, dtype=dtype, device=device, requires_grad=direction != "fwd")
    other = (torch.randint(0, N, (M,), device=device) if op == "cross_entropy"
             else torch.randn(M, N, dtype=dtype, device=device))  # fmt: skip
    if direction == "fwd":
        return M, N, lambda: fn(logits, other)
    return M, N, lambda: torch.autograd.grad(fn(logits, other), (logits,))


def _sync() -> None:
    if _runtime.DEVICE == "cuda":
        torch.cuda.synchronize()


def host_cost(run: Callable[[], object], *, loop_calls: int, isolated_calls: int,
              warmup: int = WARMUP_CALLS) -> tuple[float, float]:  # fmt: skip
    """(host_us, wall_us) of ``run()``: a launch-bound loop's µs per call, and the median µs of
    an isolated call (synchronized before and after)."""
    host, walls = _host_round(run, loop_calls, isolated_calls, warmup)
    return host, statistics.median(walls)


def _host_round(run, loop_calls: int, isolated_calls: int, warmup: int):
    """One round: (the loop's µs per call, each isolated call's µs)."""
    for _ in range(warmup):
        run()
    _sync()
    t0 = time.perf_counter()
    for _ in range(loop_calls):
        run()
    _sync()
    host = (time.perf_counter() - t0) * 1e6 / loop_calls
    walls = []
    for _ in range(isolated_calls):
        _sync()
        t0 = time.perf_counter()
        run()
        _sync()
        walls.append((time.perf_counter() - t0) * 1e6)
    return host, walls


def measure_overhead(ops=OPS, impls=IMPLS, directions=DIRECTIONS, dtype="bf16",
                     progress: Callable[[str], None] | None = None) -> list[HostCost]:  # fmt: skip
    """Host cost of every (op, impl, direction); impls that lack an op (or are not importable,
    or torch.compile under the interpreter) are left out."""
    device = _runtime.DEVICE
    kind = "gpu" if device == "cuda" else "cpu"
    mode = "gpu" if device == "cuda" else "interpret"
    torch_dtype = parse_dtype(dtype)
    out = []
    for op in ops:
        for direction in directions:
            cases = {}
            for impl in impls:
                if impl.endswith("compile") and device != "cuda":
                    continue  # a C++ compile per case on CPU, and nothing to learn from it
                case = host_case(op, impl, direction, torch_dtype, device)
                if case is not None:
                    cases[impl] = case
            hosts = {impl: [] for impl in cases}
            walls = {impl: [] for impl in cases}
            names = list(cases)
            for r in range(ROUNDS[kind]):
                for impl in names[r % len(names):] + names[:r % len(names)]:
                    if progress:
                        progress(f"{op} {direction} {impl} (round {r + 1} of {ROUNDS[kind]})")
                    host, wall = _host_round(cases[impl][2], LOOP_CALLS[kind],
                                             ISOLATED_CALLS[kind],
                                             WARMUP_CALLS if kind == "gpu" else 1)  # fmt: skip
                    hosts[impl].append(host)
                    walls[impl].extend(wall)
            for impl, (M, N, _) in cases.items():
                out.append(HostCost(op, impl, direction, M, N, dtype_name(torch_dtype),
                                    round(statistics.median(hosts[impl]), 2),
                                    round(statistics.median(walls[impl]), 2), mode))  # fmt: skip
    return out


def format_overhead(costs: list[HostCost]) -> str:
    """A Markdown table: one row per (op, direction), µs per impl, and normlab ÷ torch."""
    impls = [i for i in IMPLS if any(c.impl == i for c in costs)]
    keys = list(dict.fromkeys((c.op, c.direction) for c in costs))
    by = {(c.op, c.direction, c.impl): c for c in costs}
    mode = costs[0].mode if costs else "?"
    head = ["op", "direction"] + [f"{i} host/wall µs" for i in impls] + ["normlab ÷ torch (host)"]
    lines = [("Interpreter figures (CPU): they measure the interpreter, not a GPU's host path.\n"
              if mode == "interpret" else ""),  # fmt: skip
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op, direction in keys:
        cells = []
        for i in impls:
            c = by.get((op, direction, i))
            cells.append(f"{c.host_us:.1f} / {c.wall_us:.1f}" if c else "–")
        ours, theirs = by.get((op, direction, "normlab")), by.get((op, direction, "torch"))
        ratio = f"{ours.host_us / theirs.host_us:.2f}×" if ours and theirs else "–"
        lines.append(f"| {op} | {direction} | " + " | ".join(cells) + f" | {ratio} |")
    return "\n".join(lines).lstrip("\n")


def graph_replay(op: str = "rms_norm", calls: int = 500,
                 dtype: torch.dtype = torch.bfloat16) -> tuple[float, float] | None:  # fmt: skip
    """(eager, CUDA-graph replay) wall µs per call of normlab's tiny forward ``op``, each a loop
    of ``calls`` calls then one synchronize: the replay launches the captured kernels without
    Python, argument checks or Triton's launcher. None without a GPU."""
    if _runtime.DEVICE != "cuda":
        return None
    _, _, run = host_case(op, "normlab", "fwd", dtype, "cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up (compile, allocate) off the capture
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()

    def per_call(fn) -> float:
        fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6

    return per_call(run), per_call(graph.replay)


def write_overhead(costs: list[HostCost], path, *, command: str = "", note: str = "") -> None:
    """``{"meta": {card, torch, triton, date, commit, command, note}, "costs": [...]}`` as JSON
    (the form ``normlab.bench.devdata.host_overhead`` reads)."""
    import json
    from pathlib import Path

    import triton

    from normlab.bench.device import git_commit

    card = torch.cuda.get_device_name() if _runtime.DEVICE == "cuda" else "cpu (interpreter)"
    kind = "gpu" if _runtime.DEVICE == "cuda" else "cpu"
    loop, rounds = LOOP_CALLS[kind], ROUNDS[kind]
    meta = {
        "card": card, "torch": torch.__version__, "triton": triton.__version__,
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "commit": git_commit(),
        "command": command,
        "note": note or (f"host_us: CPU µs per call in a loop of {loop} calls on a tiny input, "
                         f"the median over {rounds} rounds that take the implementations in "
                         "turn; wall_us: median of isolated calls"),
    }  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "costs": [dataclasses.asdict(c) for c in costs]},
                               indent=1) + "\n", encoding="utf-8")  # fmt: skip
