"""Run one case between cudaProfilerStart/Stop, for Nsight Compute (GPU only).

    ncu --clock-control none --profile-from-start off --metrics ... \
        python3 benchmarks/profile_kernels.py reverse_kl:chunked:2048:4096x50257
    python3 benchmarks/profile_kernels.py cross_entropy:chunked:-:4096x131072 --options softcap=30

Case: ``<op>:<form or impl>:<block cap or ->:<rows>x<cols>``; ops reverse_kl, soft_cross_entropy,
cross_entropy (forms of normlab, or ``compile``), rms_norm / layer_norm (``normlab``, ``compile``;
direction fwd, the training forward as the benchmarks time it (inputs require grad, so the
saved statistics are written), or ``bwd`` as ``rms_norm-bwd``). ``--options`` passes a loss's
float options (``softcap=30,label_smoothing=0.1``) to normlab's op and the reference. The case
runs three times unprofiled (compiles, warms the allocator), then once profiled. With ``--code
DIR``, torch.compile's generated code for the case is written to DIR.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
import torch.nn.functional as F


def _case(spec: str, options: dict[str, float] | None = None):
    op, impl, cap, shape = spec.split(":")
    rows, cols = (int(v) for v in shape.split("x"))
    cap = None if cap == "-" else int(cap)
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    if op.startswith(("rms_norm", "layer_norm")):
        import normlab

        name, _, direction = op.partition("-")
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16, generator=gen)
        w = torch.randn(cols, device=dev, dtype=torch.bfloat16, generator=gen)
        params = [w]  # LayerNorm with a bias, as the population times it
        if name == "layer_norm":
            params.append(torch.randn(cols, device=dev, dtype=torch.bfloat16, generator=gen))
        if impl == "normlab":
            fn = getattr(normlab, name)
        else:
            torch_fn = F.rms_norm if name == "rms_norm" else F.layer_norm
            fn = torch.compile(lambda a, *ps: torch_fn(a, (cols,), *ps), dynamic=False)
        x.requires_grad_(True)
        for p in params:
            p.requires_grad_(True)
        if direction == "bwd":
            dy = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16, generator=gen)

            def run():
                y = fn(x, *params)
                torch.cuda.synchronize()
                return lambda: y.backward(dy)

            return run, True
        return (lambda: fn(x, *params)), False
    import normlab
    from normlab import ref

    x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16, generator=gen) * 2
    if op == "cross_entropy":
        other = torch.randint(0, cols, (rows,), device=dev, generator=gen)
    else:
        other = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16, generator=gen) * 2
    options = options or {}
    if impl == "compile":
        reference = getattr(ref, f"{op}_ref")
        fn = torch.compile(lambda a, b: reference(a, b, **options), dynamic=False)
    else:
        public = getattr(normlab, op)
        fn = lambda a, b: public(a, b, form=impl, block_cap=cap, **options)
    x.requires_grad_(True)

    def step():
        x.grad = None
        fn(x, other).backward()

    return step, False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--code", default=None)
    parser.add_argument("--options", default="", help="a loss's float options: name=value,...")
    args = parser.parse_args()
    try:
        options = {k: float(v) for k, v in (o.split("=") for o in args.options.split(",") if o)}
    except ValueError:
        parser.error(f"--options: name=value pairs separated by commas, not {args.options!r}")
    parts = args.case.split(":")
    if len(parts) != 4 or not re.fullmatch(r"[1-9]\d*x[1-9]\d*", parts[3]) or not (
            parts[2] == "-" or parts[2].isdigit()):  # fmt: skip
        parser.error(f"case: <op>:<form or impl>:<block cap or ->:<rows>x<cols>, not {args.case!r}")
    if options and args.case.startswith(("rms_norm", "layer_norm")):
        parser.error("--options: for the losses only")
    run, two_phase = _case(args.case, options)
    for _ in range(3):
        r = run()
        if two_phase:
            r()
    torch.cuda.synchronize()
    if args.code and "compile" in args.case:
        from torch._inductor.utils import run_and_get_code

        torch._dynamo.reset()
        run2, _ = _case(args.case, options)
        _, codes = run_and_get_code(lambda: run2()() if two_phase else run2())
        os.makedirs(args.code, exist_ok=True)
        with open(os.path.join(args.code, args.case.replace(":", "_") + ".py"), "w") as f:
            f.write("\n\n# ---- next module ----\n\n".join(codes))
    r = run() if two_phase else None
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    if two_phase:
        r()
    else:
        run()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
