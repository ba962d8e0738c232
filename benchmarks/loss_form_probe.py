"""Where an option's cost comes from: one loss in each form and tile, with the option, without
it, and with its arithmetic moved onto the data.

    python3 benchmarks/loss_form_probe.py --out out/probe.jsonl [--M 4096 --V 131072]
        [--cases "reverse_kl T=2,jsd"] [--caps 1024,2048] [--chunked-maxnreg 2048:72]
    python3 benchmarks/loss_form_probe.py --out out/smoke.jsonl --quick     # CPU: the interpreter

Times forward+backward (device µs, L2 flushed) of reverse KL with temperature 1 and 2, and with
temperature 1 on logits and targets divided by 2 beforehand (the same distributions: when that
case costs what T = 2 does, the data's spread, not the option's arithmetic, costs the time);
JSD, whose form and tile ``form="auto"`` took from reverse KL's unmeasured, and label CE alone
and with label smoothing, z-loss and softcap together; each in the
chunked and the fused form at tiles 1024, 2048 and 4096 (``--caps``), the chunked form's register
caps replaced by ``--chunked-maxnreg`` (``loss_options.py``'s). One record per case (the case
and the caps in its note), rewritten after each.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch
from loss_options import LABEL_CE_OPTIONS, register_caps

import normlab
from normlab.bench import budget, device_info
from normlab.bench.device import git_commit
from normlab.bench.records import portable_command, replace_jsonl
from normlab.bench.sweep import CPU_LABEL, measure
from normlab.losses import config as loss_config

FORMS = ("chunked", "fused")
CAPS = (1024, 2048, 4096)
CASES = ("reverse_kl", "reverse_kl T=2", "reverse_kl on x/2, t/2", "jsd", "cross_entropy",
         "cross_entropy all three")


def _cases(M, V, dtype, device):
    """case name -> (op, fwd+bwd call taking form and block_cap)."""
    x = torch.randn(M, V, dtype=dtype, device=device, requires_grad=True)
    t = torch.randn(M, V, dtype=dtype, device=device)
    x_half = (x.detach() / 2).requires_grad_()
    t_half = t / 2
    labels = torch.randint(0, V, (M,), device=device)

    def grad(fn, logits):
        return lambda **kw: (lambda: torch.autograd.grad(fn(**kw), (logits,)))

    cases = {
        "reverse_kl": ("reverse_kl", grad(lambda **kw: normlab.reverse_kl(x, t, **kw), x)),
        "reverse_kl T=2": ("reverse_kl", grad(
            lambda **kw: normlab.reverse_kl(x, t, temperature=2.0, **kw), x)),
        "reverse_kl on x/2, t/2": ("reverse_kl", grad(
            lambda **kw: normlab.reverse_kl(x_half, t_half, **kw), x_half)),
        "jsd": ("jsd", grad(lambda **kw: normlab.jsd(x, t, **kw), x)),
        "cross_entropy": ("cross_entropy", grad(
            lambda **kw: normlab.cross_entropy(x, labels, **kw), x)),
        "cross_entropy all three": ("cross_entropy", grad(
            lambda **kw: normlab.cross_entropy(x, labels, **LABEL_CE_OPTIONS, **kw), x)),
    }  # fmt: skip
    assert tuple(cases) == CASES
    return cases


def main(argv=None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--V", type=int, default=131072)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 reps (CPU smoke)")
    parser.add_argument("--cases", help="a comma list of the cases (default: all)")
    parser.add_argument("--caps", default=",".join(map(str, CAPS)), help="column tiles' caps")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--chunked-maxnreg", metavar="TILE:REGS,...",
                        help="replace the chunked form's register caps ('none': no cap)")
    budget.add_arguments(parser)
    args = parser.parse_args(argv)
    if min(args.M, args.V, args.reps) < 1:
        parser.error("--M, --V and --reps must be >= 1")
    try:
        caps = [int(c) for c in args.caps.split(",")]
    except ValueError:
        parser.error("--caps takes a comma list of integers")
    if any(c < 16 or c & (c - 1) for c in caps):
        parser.error("--caps: powers of two from 16")
    chosen = list(CASES) if args.cases is None else args.cases.split(",")
    if unknown := [c for c in chosen if c not in CASES]:
        parser.error(f"--cases: unknown {unknown}; choose from {list(CASES)}")
    forms = args.forms.split(",")
    if unknown := [f for f in forms if f not in FORMS]:
        parser.error(f"--forms: unknown {unknown}; choose from {list(FORMS)}")
    note = ""
    if args.chunked_maxnreg is not None:
        try:
            regs = register_caps(args.chunked_maxnreg)
        except ValueError as exc:
            parser.error(f"--chunked-maxnreg: {exc}")
        loss_config.ENTROPY_CHUNKED_MAXNREG.clear()
        loss_config.ENTROPY_CHUNKED_MAXNREG.update(regs)
        note = f"; chunked register caps {regs or 'none'}"
    run_budget = budget.from_args(parser, args)
    if args.quick:
        args.M, args.V, args.reps = 3, 300, 2
    elif not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (or --quick for a CPU smoke run in the interpreter)")
    if args.quick:
        caps = [16, 64]
    dev = device_info()
    commit = git_commit()
    command = portable_command(["python3", "benchmarks/loss_form_probe.py", *argv])
    if normlab.INTERPRET:
        print(CPU_LABEL)
    print(f"{'case':<26}{'form':>9}{'cap':>6}{'µs':>10}   ({args.M}x{args.V}, bf16, fwd+bwd, "
          f"{dev.card})")
    records, last_s = [], 0.0
    cases = _cases(args.M, args.V, torch.bfloat16, normlab.DEVICE)
    for name in chosen:
        op, call = cases[name]
        for form in forms:
            for cap in caps:
                if not run_budget.allows(last_s):
                    print(f"stopped at the time limit: {len(records)} measured")
                    return 0
                t0 = time.time()
                rec = measure(call(form=form, block_cap=cap), op, "normlab", args.M, args.V,
                              torch.bfloat16, "fwd+bwd", device=dev, strategy=form,
                              block_cap=cap, reps=args.reps, warmup=1 if args.quick else 3,
                              command=command, commit=commit)  # fmt: skip
                last_s = time.time() - t0
                records.append(dataclasses.replace(rec, note=f"{rec.note}; case {name}{note}"))
                replace_jsonl(records, args.out)
                print(f"{name:<26}{form:>9}{cap:>6}{rec.device_us:>10.1f}", flush=True)
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
