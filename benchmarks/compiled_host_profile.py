"""Where the host time of a compiled forward goes (GPU): normlab's op against torch's.

    python3 benchmarks/compiled_host_profile.py [--calls 2000] [--shape 4x1024]
        [--op rms_norm,layer_norm,cross_entropy,reverse_kl]

For the RMSNorm, LayerNorm, label cross-entropy and reverse KL forwards (no gradient; the
losses at 4 times the width; reverse KL against torch's ``log_softmax`` + ``kl_div``), each
under ``torch.compile(fullgraph=True)``,
prints the host µs per call in a launch-bound loop, the Python functions that run per call
(cProfile over ``--calls`` calls, by own time), and the wrapper code Inductor generated: what it
allocates and how it launches each kernel.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time


def _fns(op: str):
    import torch.nn.functional as F

    import normlab

    if op == "rms_norm":
        return {"normlab": lambda x, w, b: normlab.rms_norm(x, w, 1e-6),
                "torch": lambda x, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)}  # fmt: skip
    if op == "cross_entropy":  # w: the logits, b: the labels
        return {"normlab": lambda x, w, b: normlab.cross_entropy(w, b),
                "torch": lambda x, w, b: F.cross_entropy(w, b)}  # fmt: skip
    if op == "reverse_kl":  # w: the logits, b: the target logits; torch's: the composite
        return {"normlab": lambda x, w, b: normlab.reverse_kl(w, b),
                "torch": lambda x, w, b: F.kl_div(F.log_softmax(b.float(), -1),
                                                  F.log_softmax(w.float(), -1),
                                                  reduction="batchmean", log_target=True)}
    return {"normlab": lambda x, w, b: normlab.layer_norm(x, w, b, 1e-5),
            "torch": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)}  # fmt: skip


def _host_us(fn, args, calls: int) -> float:
    import torch

    for _ in range(20):
        fn(*args)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--shape", default="4x1024")
    parser.add_argument("--op", default="rms_norm,layer_norm,cross_entropy")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error("--calls must be >= 1")
    try:
        M, N = (int(v) for v in args.shape.split("x"))
    except ValueError:
        parser.error(f"--shape: {args.shape!r} is not MxN")
    ops = args.op.split(",")
    for op in ops:
        if op not in ("rms_norm", "layer_norm", "cross_entropy", "reverse_kl"):
            parser.error(f"--op: {op!r} is not rms_norm, layer_norm, cross_entropy or reverse_kl")
    import torch
    from torch._inductor.utils import run_and_get_code

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (Inductor's GPU wrapper is what this profiles)")
    x = torch.randn(M, N, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(N, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(N, dtype=torch.bfloat16, device="cuda")
    logits = torch.randn(M, 4 * N, dtype=torch.bfloat16, device="cuda")
    labels = torch.randint(0, 4 * N, (M,), device="cuda")
    target = torch.randn(M, 4 * N, dtype=torch.bfloat16, device="cuda")
    for op in ops:
        inputs = {"cross_entropy": (x, logits, labels),
                  "reverse_kl": (x, logits, target)}.get(op, (x, w, b))  # fmt: skip
        for impl, fn in _fns(op).items():
            compiled = torch.compile(fn, fullgraph=True)
            _, code = run_and_get_code(compiled, *inputs)
            host = [_host_us(compiled, inputs, args.calls) for _ in range(3)]
            print(f"\n=== {op} {impl}: host µs per call {', '.join(f'{h:.1f}' for h in host)}")
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                compiled(*inputs)
            prof.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(24)
            print(out.getvalue().split("Ordered by:")[-1])
            src = code[-1]
            start = src.find("def call(")
            print(src[start:src.find("\n\n\n", start)] if start >= 0 else src[-3000:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
