"""Does a short kernel's device time depend on the state the L2 flush leaves, and on the host?

    python3 benchmarks/l2_flush_state.py [--reps 20] [--out FILE]

The harness flushes the L2 before each timed call by writing a buffer twice the L2's size
(``normlab.bench.timing``), which leaves the L2 full of dirty lines; a call that then reads
its inputs evicts them, and their write-back shares DRAM with the call. Whether that happens
inside the call's window may depend on how long the GPU idled first, which is the host's
launch time: different for each implementation. Liger-Kernel's LayerNorm forward at
4096 x 1024 measured 5.78 µs in three runs and 7.66 in a fourth, normlab's 6.86 in all four.

Per cell, in one process and on the same tensors, each implementation is timed after:
``write`` (the harness's flush), ``write+read`` (the flush, then a read of another buffer twice
the L2's size: the L2 is left holding clean lines), ``write+idle`` (the flush, then the GPU
idles about 100 µs in a sleep kernel before the call is launched) and ``write+read+idle``.
Device time is the call's own kernels from the profiler; the extra kernels are not counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.profiler import ProfilerActivity, profile

from normlab import _runtime
from normlab.bench import timing
from normlab.bench.records import portable_command
from normlab.bench.sweep import parse_op_shapes
from normlab.norms import op as norm_op

CELLS = "layer_norm:4096x1024,rms_norm:4096x1024,layer_norm:8192x1024,rms_norm:512x2880"
MODES = ("write", "write+read", "write+idle", "write+read+idle")
IDLE_CYCLES = 200_000  # about 100 µs at the H200's 1.98 GHz
READ_KERNEL = "_l2_read_kernel"


@triton.jit
def _l2_read_kernel(buf_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """Read the buffer (the L2 keeps clean lines); store only what no value can make true."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(buf_ptr + offs, mask=offs < n, other=0)
    if tl.sum(v, axis=0) == -12345:
        tl.store(out_ptr, 1)


def impls(op: str, x, w, b):
    is_rms, eps = op == "rms_norm", 1e-6 if op == "rms_norm" else 1e-5
    out = {"normlab": lambda: norm_op._forward(x, None, w, b, eps, 0.0, is_rms, "auto",
                                               "auto")[0]}  # fmt: skip
    try:
        if is_rms:
            from liger_kernel.ops.rms_norm import rms_norm_forward

            out["liger"] = lambda: rms_norm_forward(x, w, eps, 0.0, "llama", False)[0]
        else:
            from liger_kernel.ops.layer_norm import layer_norm_forward

            out["liger"] = lambda: layer_norm_forward(x, w, b, eps)[0]
    except ImportError:
        pass
    n = x.shape[1]
    out["torch"] = ((lambda: F.rms_norm(x, (n,), w, eps)) if is_rms
                    else (lambda: F.layer_norm(x, (n,), w, b, eps)))  # fmt: skip
    return out


def device_us(run, mode: str, reps: int, tools, read_buf, sink) -> float:
    """Mean device µs of run()'s kernels over reps calls, each after the flush ``mode``."""
    n_read = read_buf.numel()
    grid = (triton.cdiv(n_read, 4096),)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            tools.flush()
            if "read" in mode:
                _l2_read_kernel[grid](read_buf, n_read, sink, BLOCK=4096)
            if "idle" in mode:
                torch.cuda._sleep(IDLE_CYCLES)
            run()
            tools.marker()
        torch.cuda.synchronize()
    calls, current = [], None
    for _, dur, name in timing._gpu_events(prof):
        if any(k in name for k in (timing.FLUSH_KERNEL, READ_KERNEL, "spin_kernel", "sleep")):
            current = []
        elif timing.MARKER_KERNEL in name:
            calls.append(sum(current))
            current = None
        elif current is not None:
            current.append(dur)
    if len(calls) != reps:
        raise timing.BenchError(f"{len(calls)} calls seen, {reps} timed")
    return statistics.fmean(calls)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cells", default=CELLS, help="op:MxN,... (bf16)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    try:
        cells = parse_op_shapes(args.cells, ("rms_norm", "layer_norm"))
    except ValueError as exc:
        parser.error(f"--cells takes op:MxN,... ({exc})")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    tools = timing._tools()
    read_buf = torch.ones(2 * _runtime.l2_bytes() // 4, dtype=torch.int32, device="cuda")
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")
    command = portable_command(["python3", "benchmarks/l2_flush_state.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    results = {"command": command, "torch": torch.__version__, "triton": triton.__version__,
               "card": torch.cuda.get_device_name(), "cells": []}  # fmt: skip
    for op, m, n in cells:
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        b = None if op == "rms_norm" else (0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        for rnd in range(2):  # twice, modes interleaved, to see the spread
            for mode in MODES:
                row = {name: round(device_us(run, mode, args.reps, tools, read_buf, sink), 2)
                       for name, run in impls(op, x, w, b).items()}  # fmt: skip
                results["cells"].append({"op": op, "M": m, "N": n, "round": rnd, "mode": mode,
                                         "device_us": row})  # fmt: skip
                print(f"{op} {m}x{n} round {rnd} {mode:16s} " +
                      " | ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
