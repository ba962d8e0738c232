"""The losses' forms inside torch.compile: device time of a compiled forward+backward, each way
the graph can run the loss.

    python3 benchmarks/compiled_loss_forms.py --out out/compiled_forms.jsonl
        [--shapes 256x131072,...] [--losses cross_entropy,reverse_kl] [--reps 20]

Three ways, each compiled afresh (Inductor's caches off, ``torch._dynamo.reset()``):

* ``traced``: as shipped. ``form="auto"`` picks the form; Inductor launches its kernels.
* ``opaque``: the same form through the opaque op (``losses.op.TRACEABLE`` off), whose
  launches are the eager ones (the chunked form's register cap included).
* ``split``: the split form traced (``config.compiled_split_min_rows`` 0).

bf16, L2 flushed, device µs (``normlab.bench.sweep.measure``): one record per loss, shape and way
(``impl`` "normlab+compile", the way in its note), rewritten after each.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from pathlib import Path

import torch

import normlab
from normlab.bench import device_info
from normlab.bench.device import git_commit
from normlab.bench.records import portable_command, replace_jsonl
from normlab.bench.sweep import measure, parse_shapes
from normlab.losses import config as loss_config
from normlab.losses import op as loss_op

WAYS = ("traced", "opaque", "split")
LOSSES = ("cross_entropy", "reverse_kl", "soft_cross_entropy")
# Around config.compiled_split_min_rows (132 SMs: 132 rows for label CE, 528 for the others);
# below it the auto form (chunked at V >= 65536).
SHAPES = "132x131072,256x131072,400x131072,256x65536,256x151936,64x131072,528x131072"


@contextlib.contextmanager
def _way(way):
    saved = (loss_op.TRACEABLE, loss_config.compiled_split_min_rows)
    if way == "opaque":
        loss_op.TRACEABLE = False
    elif way == "split":
        loss_config.compiled_split_min_rows = lambda loss, sm_count: 0
    try:
        yield
    finally:
        loss_op.TRACEABLE, loss_config.compiled_split_min_rows = saved


def _call(loss, n_rows, n_cols):
    x = torch.randn(n_rows, n_cols, device=normlab.DEVICE, dtype=torch.bfloat16, requires_grad=True)
    if loss == "cross_entropy":
        other = torch.randint(0, n_cols, (n_rows,), device=normlab.DEVICE)
    else:
        other = torch.randn(n_rows, n_cols, device=normlab.DEVICE, dtype=torch.bfloat16)
    fn = getattr(normlab, loss)
    compiled = torch.compile(lambda a, b: fn(a, b), fullgraph=True)
    return lambda: torch.autograd.grad(compiled(x, other), (x,))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shapes", default=SHAPES)
    parser.add_argument("--losses", default=",".join(LOSSES))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as err:
        parser.error(f"--shapes takes positive MxV,...: {err}")
    losses = [s for s in args.losses.split(",") if s]
    ways = [s for s in args.ways.split(",") if s]
    if not losses or set(losses) - set(LOSSES):
        parser.error(f"--losses: unknown {sorted(set(losses) - set(LOSSES))}; from {LOSSES}")
    if not ways or set(ways) - set(WAYS):
        parser.error(f"--ways: unknown {sorted(set(ways) - set(WAYS))}; from {WAYS}")
    if args.reps < 1:
        parser.error(f"--reps must be >= 1, got {args.reps}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"  # a cached graph ignores the way
    dev = device_info()
    commit = git_commit()
    argv = sys.argv[1:] if argv is None else argv
    command = portable_command(["python3", "benchmarks/compiled_loss_forms.py", *argv])
    records = []
    for n_rows, n_cols in shapes:
        for loss in losses:
            row = []
            for way in ways:
                torch._dynamo.reset()
                with _way(way):
                    rec = measure(_call(loss, n_rows, n_cols), loss, "normlab+compile", n_rows,
                                  n_cols, torch.bfloat16, "fwd+bwd", device=dev, reps=args.reps,
                                  command=command, commit=commit)  # fmt: skip
                records.append(dataclasses.replace(rec, note=f"{rec.note}; way {way}"))
                row.append(f"{way} {rec.device_us:8.1f}")
                torch.cuda.empty_cache()
            print(f"{loss:>18} {n_rows:>5}x{n_cols:<7} " + "  ".join(row), flush=True)
            replace_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
