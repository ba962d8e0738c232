"""The kernels one compiled loss call runs, forward and backward, by name and device µs (GPU).

    python3 benchmarks/compiled_loss_kernels.py --out FILE.json \
        [--shapes 64x131072,256x131072,256x32768] [--losses cross_entropy,reverse_kl]

Inductor reads a user kernel's TTIR to find the tensors it writes. An input it takes as written
is copied before every call (functionalization's clone, which its reinplacing cannot drop for a
graph input): for a loss, an (M, V) copy of the logits. Each case compiles
``normlab.<loss>(x, other)`` with ``fullgraph=True`` (form "auto": below 4 rows an SM, the fused
or chunked form, whose kernels write the gradient), runs three warm forward+backward calls,
then profiles one: every kernel's name and device µs, and their sum. bf16 logits.
"""

import argparse
import json
import os
import sys
from pathlib import Path


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        m, _, v = item.partition("x")
        if not (m.isdigit() and v.isdigit()) or int(m) < 1 or int(v) < 1:
            raise ValueError(f"--shapes: {item!r} is not MxV with positive integers")
        shapes.append((int(m), int(v)))
    return shapes


def _kernels(fn, x, other) -> list[tuple[str, float]]:
    """(name, device µs) of each kernel one forward+backward call runs, in launch order."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def call():
        x.grad = None
        fn(x, other).backward()

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                    key=lambda e: e.time_range.start)  # fmt: skip
    return [(e.name, round(e.time_range.elapsed_us(), 2)) for e in events]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default="64x131072,256x131072,256x32768")
    parser.add_argument("--losses", default="cross_entropy,reverse_kl")
    args = parser.parse_args(argv)
    try:
        shapes = _parse_shapes(args.shapes)
    except ValueError as err:
        parser.error(str(err))
    losses = args.losses.split(",")
    known = ("cross_entropy", "reverse_kl", "soft_cross_entropy")
    if any(loss not in known for loss in losses):
        parser.error(f"--losses: each one of {', '.join(known)}")
    import torch

    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (Inductor's compiled graph and its kernels are timed)")
    import normlab

    records = []
    for loss in losses:
        fn = torch.compile(getattr(normlab, loss), fullgraph=True)
        for m, v in shapes:
            torch._dynamo.reset()
            x = torch.randn(m, v, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            if loss == "cross_entropy":
                other = torch.randint(0, v, (m,), device="cuda")
            else:
                other = torch.randn(m, v, device="cuda", dtype=torch.bfloat16)
            kernels = _kernels(fn, x, other)
            rec = {"loss": loss, "shape": [m, v], "kernels": kernels,
                   "device_us": round(sum(us for _, us in kernels), 2)}  # fmt: skip
            records.append(rec)
            print(f"{loss:14s} {m}x{v}: {rec['device_us']:9.2f} µs in {len(kernels)} kernels: "
                  + ", ".join(f"{name[:48]} {us}" for name, us in kernels), flush=True)
    meta = {"torch": torch.__version__, "triton": __import__("triton").__version__,
            "device": torch.cuda.get_device_name(), "python": sys.version.split()[0],
            "commit": os.environ.get("NORMLAB_COMMIT", "unknown"), "dtype": "bfloat16"}  # fmt: skip
    Path(args.out).write_text(json.dumps({"meta": meta, "records": records}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
