"""Rows in flight in the fused loss kernel: one program a row against persistent grids.

    python3 benchmarks/fused_grid.py --out out/fused_grid.jsonl [--M 4096]
        [--V 16384,32768,65536] [--ops cross_entropy,reverse_kl] [--per-sm 2,3,4,5,6,8]
        [--dtype bf16|fp32] [--ignored 0.5]
    python3 benchmarks/fused_grid.py --out out/smoke.jsonl --quick     # CPU: the interpreter

The fused kernel reads a row twice: the statistics pass, then the gradient pass, in reverse tile
order, which finds the row in L2 only while the rows in flight (programs resident on the SMs times
the bytes of a row) fit in it. One program a row puts as many rows in flight as the registers
allow; a persistent grid of P programs an SM (``fused.launch_fused(programs=)``), which take
the rows from a queue, puts P × SMs.
Times forward+backward (device µs, L2 flushed; bf16 or fp32 logits) of each loss in the fused
form at its ``auto`` tile, one program a row and P an SM, with the rows in flight against L2
printed beside it. One record per case (the grid in its note), rewritten after each. Replay is
off in this process, so each case launches its own grid. Each grid's loss and gradient must
equal one program a row's bitwise (the exit status says whether they did).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from pathlib import Path

import torch

import normlab
from normlab import _launch, _runtime
from normlab.bench import budget, device_info
from normlab.bench.device import git_commit
from normlab.bench.records import portable_command, replace_jsonl
from normlab.bench.sweep import CPU_LABEL, measure
from normlab.losses import config as loss_config
from normlab.losses import op as loss_op

OPS = {"cross_entropy": normlab.cross_entropy, "reverse_kl": normlab.reverse_kl}


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _call(name, M, V, dtype, device, ignored=0.0):
    """A forward+backward of loss ``name`` in the fused form at its auto tile cap; label CE with
    a random ``ignored`` share of its rows' labels at ignore_index (skipped rows)."""
    x = torch.randn(M, V, device=device, dtype=dtype) * 3
    if name == "cross_entropy":
        other = torch.randint(0, V, (M,), device=device)
        other[torch.rand(M, device=device) < ignored] = -100
    else:
        other = torch.randn(M, V, device=device, dtype=dtype) * 3
    _, cap = loss_config.entropy_auto(name, V, distributed=False)
    logits = x.requires_grad_()

    def run():
        logits.grad = None
        loss = OPS[name](logits, other, form="fused", block_cap=cap)
        loss.backward()
        return loss.detach(), logits.grad

    return run, cap


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--V", default="16384,32768,65536", help="vocabularies, a comma list")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--per-sm", default="1,2,3,4,5,6,8", help="persistent programs an SM")
    parser.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="the logits'")
    parser.add_argument("--ignored", type=float, default=0.0,
                        help="label CE: the share of rows whose label is ignore_index")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 reps (CPU smoke)")
    budget.add_arguments(parser)
    args = parser.parse_args(argv)
    run_budget = budget.from_args(parser, args)
    try:
        vocabs, per_sm = _ints(args.V), _ints(args.per_sm)
    except ValueError as exc:
        parser.error(f"--V and --per-sm take comma lists of integers: {exc}")
    ops = [o for o in args.ops.split(",") if o]
    unknown = sorted(set(ops) - set(OPS))
    if unknown or not vocabs or not per_sm or min(vocabs + per_sm) < 1 or args.M < 1:
        parser.error(f"ops from {sorted(OPS)}, positive M, V and --per-sm (unknown: {unknown})")
    if not 0.0 <= args.ignored < 1.0:
        parser.error("--ignored is a share of the rows, in [0, 1)")
    if args.quick:
        args.M, vocabs, args.reps = 16, [300], 2
    _launch.REPLAY = False  # each case's grid launches as given
    device = normlab.DEVICE
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    dev = device_info()
    sms, l2 = _runtime.sm_count(), _runtime.l2_bytes()
    command = portable_command(["python3", "benchmarks/fused_grid.py", *argv])
    commit = git_commit()
    if normlab.INTERPRET:
        print(CPU_LABEL)
    print(f"{dev.card}: {sms} SMs, L2 {l2 / 2**20:.0f} MiB; {args.M} rows, {args.dtype}, fwd+bwd;"
          " grids take the rows from a queue")
    records, last_s, failed = [], 0.0, 0
    launch_fused = loss_op.launch_fused
    try:
        for name in ops:
            for V in vocabs:
                run, cap = _call(name, args.M, V, dtype, device, args.ignored)
                row_bytes = V * dtype.itemsize * (1 if name == "cross_entropy" else 2)
                base = expect = None
                for grid in [None, *per_sm]:
                    if not run_budget.allows(last_s):
                        print(f"stopped at the time limit: {len(records)} measured")
                        raise StopIteration
                    programs = args.M if grid is None else grid * sms
                    loss_op.launch_fused = functools.partial(launch_fused, programs=programs)
                    t0 = time.time()
                    rec = measure(run, name, "normlab", args.M, V, dtype, "fwd+bwd",
                                  device=dev, strategy="fused", block_cap=cap, reps=args.reps,
                                  warmup=1 if args.quick else 3, command=command,
                                  commit=commit)  # fmt: skip
                    last_s = time.time() - t0
                    got = run()
                    expect = got if grid is None else expect
                    same = all(torch.equal(a, b) for a, b in zip(got, expect, strict=True))
                    label = "one a row" if grid is None else f"{grid} an SM"
                    skipped = f"; {args.ignored:g} of the labels ignored" \
                        if args.ignored and name == "cross_entropy" else ""  # fmt: skip
                    taken = "" if grid is None else " from a queue"
                    rec = dataclasses.replace(rec, note=f"{rec.note}; grid {label}{taken}{skipped}")
                    records.append(rec)
                    replace_jsonl(records, args.out)
                    base = rec.device_us if grid is None else base
                    flight = "" if grid is None or not l2 else \
                        f"{programs * row_bytes / l2:6.2f}x L2 in flight"  # fmt: skip
                    print(f"{name:<14}{V:>7} cap {cap:<5} {label:<10}{rec.device_us:>9.1f} µs"
                          f"{rec.device_us / base:>7.3f}  {flight}"
                          f"{'' if same else '  DIFFERS from one a row'}", flush=True)
                    failed += not same
    except StopIteration:
        pass
    finally:
        loss_op.launch_fused = launch_fused
    replace_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {args.out}; {failed} grids differ from one a row "
          "(loss and gradient, bitwise)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
