"""Where an RMSNorm forward's host µs go, piece by piece, in launch-bound loops (GPU).

    python3 benchmarks/host_breakdown.py [--rows 4 --cols 1024 --calls 20000]

Each line times one piece alone (the least of five loops of ``--calls`` calls, µs per call):
torch's own op, normlab's public call (inference, grad on, forward+backward), its replayed
forward and backward, the allocations, Triton's launcher (its Python wrapper and the C function
under it) with fixed pointers, an autograd Function that launches nothing (the floor of any
Python Function's forward+backward; with and without a weight's gradient), each half of
normlab's forward+backward beside a launchless other half, and an empty Python call for scale.
The pieces do not add up exactly (caches warm differently), but they rank.
"""

from __future__ import annotations

import argparse
import inspect
import time
from typing import ClassVar

import torch
import torch.nn.functional as F

import normlab
from normlab import _launch
from normlab.norms import op as norm_op


class _Launchless(torch.autograd.Function):
    """An autograd Function that launches no kernel (an empty output, dy passed through): the
    floor of any Python Function's forward+backward on this host."""

    @staticmethod
    def forward(ctx, x, w):
        return x.new_empty(x.shape)

    @staticmethod
    def backward(ctx, dy):
        return dy, None


class _LaunchlessWithWeight(torch.autograd.Function):
    """As _Launchless, with the weight's gradient too (a tensor made once, ``DW``)."""

    DW = None

    @staticmethod
    def forward(ctx, x, w):
        return x.new_empty(x.shape)

    @staticmethod
    def backward(ctx, dy):
        return dy, _LaunchlessWithWeight.DW


class _NormlabForwardOnly(norm_op.NormFunction):
    """normlab's forward; a backward that launches nothing (dy and a made-once dweight)."""

    @staticmethod
    def backward(ctx, dy):
        return dy, None, _LaunchlessWithWeight.DW, None, None, None, None, None, None


class _NormlabBackwardOnly(torch.autograd.Function):
    """A forward that launches nothing (its statistics made once, ``STATS``); normlab's
    backward (``norms.op.planned_backward``)."""

    STATS = None
    INSIDE_NS: ClassVar[list] = [0, 0]  # time spent in planned_backward itself, calls

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x.new_empty(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        t0 = time.perf_counter_ns()
        dx, dw, _ = norm_op.planned_backward(dy, None, x, w, None, None,
                                             _NormlabBackwardOnly.STATS, 1e-6, 0.0, True,
                                             "auto", "auto")  # fmt: skip
        inside = _NormlabBackwardOnly.INSIDE_NS
        inside[0] += time.perf_counter_ns() - t0
        inside[1] += 1
        return dx, dw


class _AllocatingBackward(torch.autograd.Function):
    """A forward that launches nothing; a backward that allocates what normlab's does (dx, dw
    and the fp32 partial rows) and launches nothing."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x.new_empty(x.shape)

    @staticmethod
    def backward(ctx, dy):
        (w,) = ctx.saved_tensors
        dx = torch.empty_like(dy)
        torch.empty((4, w.shape[0]), dtype=torch.float32, device=dy.device)
        return dx, w.new_empty(w.shape)


def _per_call(run, calls: int) -> float:
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            run()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) * 1e6 / calls)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--source", action="store_true", help="print Triton's launcher source")
    args = parser.parse_args(argv)
    if min(args.rows, args.cols, args.calls) < 1:
        parser.error("--rows, --cols and --calls must be >= 1")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    x = torch.randn(args.rows, args.cols, dtype=torch.bfloat16, device="cuda")
    w = torch.ones(args.cols, dtype=torch.bfloat16, device="cuda")
    eps = 1e-6
    normlab.rms_norm(x, w, eps)
    fwd_args = (x, None, w, None, eps, 0.0, True, "auto", "auto")
    norm_op.planned_forward(*fwd_args)
    replay = next(r for key, r in norm_op._FWD_REPLAYS.items() if key[-1])  # stats stored
    _, grid, template, slots, _, entry = replay.steps[0]
    kernel, tail, _, direct = entry
    y, rstd = torch.empty_like(x), torch.empty(args.rows, dtype=torch.float32, device="cuda")
    tensors = [x, None, w, None, y, rstd]
    values = template.copy()
    for pos, i in slots:  # roles (x, None, w, None), then the replay's buffers y and rstd
        values[pos] = tensors[i].data_ptr()
    stream = torch._C._cuda_getCurrentRawStream(0)
    launcher = kernel.run
    if args.source:
        print(inspect.getsource(type(launcher)))

    def empty_fn(*a):
        return None

    xg = x.detach().requires_grad_()
    wg = w.detach().requires_grad_()
    dy = torch.randn_like(x)
    _, _, mean, rstd = norm_op.planned_forward(*fwd_args)
    bwd_args = (dy, None, x, w, None, mean, rstd, eps, 0.0, True, "auto", "auto")
    norm_op.planned_backward(*bwd_args)
    device = x.device
    _LaunchlessWithWeight.DW = torch.zeros_like(w)
    _NormlabBackwardOnly.STATS = rstd

    pieces = {
        "F.rms_norm (torch)": lambda: F.rms_norm(x, (args.cols,), w, eps),
        "normlab.rms_norm": lambda: normlab.rms_norm(x, w, eps),
        "norms.op.planned_forward (replayed)": lambda: norm_op.planned_forward(*fwd_args),
        "Replay.__call__": lambda: replay((x, None, w, None), 0),
        "torch.empty (4x1024 bf16)": lambda: torch.empty((args.rows, args.cols),
                                                         dtype=torch.bfloat16, device="cuda"),
        "torch.empty, device=torch.device": lambda: torch.empty(
            (args.rows, args.cols), dtype=torch.bfloat16, device=device),
        "x.new_empty((rows,), dtype=float32)": lambda: x.new_empty((args.rows,),
                                                                   dtype=torch.float32),
        "x.new_empty(x.shape, dtype=bf16)": lambda: x.new_empty(x.shape, dtype=torch.bfloat16),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "F.rms_norm, grad on (forward)": lambda: F.rms_norm(xg, (args.cols,), wg, eps),
        "normlab.rms_norm, grad on (forward)": lambda: normlab.rms_norm(xg, wg, eps),
        "F.rms_norm forward+backward": lambda: torch.autograd.grad(
            F.rms_norm(xg, (args.cols,), wg, eps), (xg, wg), dy),
        "normlab.rms_norm forward+backward": lambda: torch.autograd.grad(
            normlab.rms_norm(xg, wg, eps), (xg, wg), dy),
        "norms.op.planned_backward (replayed)": lambda: norm_op.planned_backward(*bwd_args),
        "a launchless Python Function, forward+backward": lambda: torch.autograd.grad(
            _Launchless.apply(xg, wg), (xg,), dy),
        "the same with dweight, forward+backward": lambda: torch.autograd.grad(
            _LaunchlessWithWeight.apply(xg, wg), (xg, wg), dy),
        "normlab's forward, a launchless backward": lambda: torch.autograd.grad(
            _NormlabForwardOnly.apply(xg, None, wg, None, eps, 0.0, True, "auto", "auto"),
            (xg, wg), dy),
        "a launchless forward, normlab's backward": lambda: torch.autograd.grad(
            _NormlabBackwardOnly.apply(xg, wg), (xg, wg), dy),
        "a launchless forward, a backward that allocates": lambda: torch.autograd.grad(
            _AllocatingBackward.apply(xg, wg), (xg, wg), dy),
        "kernel.run (Triton's launcher)": lambda: launcher(
            grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, None,
            None, None, *values, *tail),
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(0),
        "torch.compiler.is_compiling": torch.compiler.is_compiling,
        "x.data_ptr()": x.data_ptr,
        "norm_op._tensor_key(x)": lambda: norm_op._tensor_key(x),
        "_launch.current_device": _launch.current_device,
        "empty Python call, 9 args": lambda: empty_fn(1, 2, 3, 4, 5, 6, 7, 8, 9),
    }
    if direct is not None:  # Triton's C launch function under its Python wrapper
        c_launch, cooperative, pdl = direct
        pieces["the C launch function alone"] = lambda: c_launch(
            grid[0], grid[1], grid[2], stream, kernel.function, cooperative, pdl, None, None,
            kernel.packed_metadata, None, None, None, *values, *tail)
    else:
        print("no direct launch: this Triton's launcher does not only forward")
    for name, run in pieces.items():
        print(f"{name:45s} {_per_call(run, args.calls):8.2f} µs", flush=True)
        if name == "a launchless forward, normlab's backward":  # the same, timed from inside
            ns, calls = _NormlabBackwardOnly.INSIDE_NS
            print(f"{'  of which planned_backward, timed inside':45s} {ns / 1e3 / calls:8.2f} µs",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
