"""What each option costs: the loss options and the fused residual add against their base ops.

    python3 benchmarks/loss_options.py --out out/loss_options.jsonl [--M 4096 --V 131072]
    python3 benchmarks/loss_options.py --summary out/loss_options.jsonl    # the verdicts, no GPU
    python3 benchmarks/loss_options.py --out out/smoke.jsonl --quick       # CPU: the interpreter
    python3 benchmarks/loss_options.py --ship out/loss_options.jsonl       # -> normlab/data/

Times forward+backward of each normlab variant (temperature, loss mask, forward KL, JSD, label
smoothing, z-loss, softcap, an fp32 teacher) beside its base op, and Liger-Kernel's equivalent
where it has one (cross-entropy with the same options, JSD), in one process. Then the fused
residual add: ``add_rms_norm`` against ``rms_norm`` on a separately computed sum, and Liger's
fused-add RMSNorm (``liger_kernel.ops.fused_add_rms_norm``). Prints each variant's device µs, its
ratio to the base op (target <= 1.05) and to Liger's (target: below 1, normlab faster), what the
fused add saves against the bytes it does not move, and writes one record per measurement (the
variant named in its note), rewritten after each measurement.

``--ship`` copies a recorded run into ``normlab/data/<card>-loss-options.json`` (what notebook 07
plots, read by ``normlab.bench.devdata.loss_options``): each measurement's variant, its base
variant, impl, shape, dtypes and device µs, with the run's card, date, commit and command.

Liger's cross-entropy writes its gradient into its input, so its calls get their own copy of the
logits. Liger's JSD takes log-probabilities: its timed call includes the two fp32 log-softmaxes.
``--max-seconds`` / ``--deadline`` stop starting measurements (``normlab.bench.budget``);
``--warm-workers`` processes compile the Triton kernels first (``normlab.bench.prewarm``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

import normlab
from normlab.bench import budget, devdata, device_info, prewarm
from normlab.bench.device import git_commit
from normlab.bench.population import OPTION_COST_TARGET
from normlab.bench.records import card_slug, portable_command, read_records, replace_jsonl
from normlab.bench.sweep import CPU_LABEL, measure
from normlab.bench.traffic import bytes_moved, separate_add_bytes
from normlab.losses import config as loss_config


def register_caps(text: str) -> dict[int, int]:
    """'2048:64,4096:64' -> {2048: 64, 4096: 64}; 'none' -> {}."""
    if text.strip() == "none":
        return {}
    caps = {}
    for item in text.split(","):
        tile, sep, regs = item.partition(":")
        if not sep or not tile.strip().isdigit() or not regs.strip().isdigit():
            raise ValueError(f"{item!r} is not TILE:REGS")
        if not 24 <= int(regs) <= 255:
            raise ValueError(f"{item!r}: registers must be in [24, 255]")
        caps[int(tile)] = int(regs)
    return caps


LABEL_CE_OPTIONS = {"label_smoothing": 0.1, "z_loss": 1e-4, "softcap": 30.0}  # each one's value
# variant -> (its base variant or None, the op of its bytes model)
VARIANTS = {
    "reverse_kl": (None, "reverse_kl"),
    "reverse_kl T=2": ("reverse_kl", "reverse_kl"),
    "reverse_kl loss_mask": ("reverse_kl", "reverse_kl"),
    "reverse_kl fp32 teacher": ("reverse_kl", "reverse_kl"),
    "forward_kl": ("reverse_kl", "forward_kl"),
    "jsd": ("reverse_kl", "jsd"),
    "soft_cross_entropy": (None, "soft_cross_entropy"),
    "soft_cross_entropy T=2": ("soft_cross_entropy", "soft_cross_entropy"),
    "cross_entropy": (None, "cross_entropy"),
    "cross_entropy label_smoothing": ("cross_entropy", "cross_entropy"),
    "cross_entropy z_loss": ("cross_entropy", "cross_entropy"),
    "cross_entropy softcap": ("cross_entropy", "cross_entropy"),
    "cross_entropy all three": ("cross_entropy", "cross_entropy"),
}
TARGET_DTYPES = {"reverse_kl fp32 teacher": "fp32"}  # the others' targets are in the logits' dtype
FUSED_ADD = "add_rms_norm"
SEPARATE_ADD = "rms_norm on a separate add"
LIGER_ADD = "liger fused add"


def _loss_calls(M, V, dtype, device):
    """(normlab variant -> fwd+bwd call, Liger variant -> fwd+bwd call); Liger's need
    liger_kernel and get their own logits (its cross-entropy overwrites them)."""
    x = torch.randn(M, V, dtype=dtype, device=device, requires_grad=True)
    t = torch.randn(M, V, dtype=dtype, device=device)
    t32 = t.float()
    labels = torch.randint(0, V, (M,), device=device)
    mask = torch.rand(M, device=device) > 0.25

    def grad(fn, logits=x):
        return lambda: torch.autograd.grad(fn(), (logits,))

    rkl, sce, ce = normlab.reverse_kl, normlab.soft_cross_entropy, normlab.cross_entropy
    calls = {
        "reverse_kl": grad(lambda: rkl(x, t)),
        "reverse_kl T=2": grad(lambda: rkl(x, t, temperature=2.0)),
        "reverse_kl loss_mask": grad(lambda: rkl(x, t, loss_mask=mask)),
        "reverse_kl fp32 teacher": grad(lambda: rkl(x, t32)),
        "forward_kl": grad(lambda: normlab.forward_kl(x, t)),
        "jsd": grad(lambda: normlab.jsd(x, t)),
        "soft_cross_entropy": grad(lambda: sce(x, t)),
        "soft_cross_entropy T=2": grad(lambda: sce(x, t, temperature=2.0)),
        "cross_entropy": grad(lambda: ce(x, labels)),
        **{f"cross_entropy {name}": grad(lambda kw={name: value}: ce(x, labels, **kw))
           for name, value in LABEL_CE_OPTIONS.items()},
        "cross_entropy all three": grad(lambda: ce(x, labels, **LABEL_CE_OPTIONS)),
    }  # fmt: skip
    assert set(calls) == set(VARIANTS)
    liger = {}
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy as lce
        from liger_kernel.transformers.jsd import LigerJSD
    except Exception as exc:  # missing, or importable but broken
        return calls, liger, f"liger_kernel: {exc!r}"[:200]
    xl = x.detach().clone().requires_grad_()
    jsd = LigerJSD(beta=0.5)
    liger = {
        "cross_entropy": grad(lambda: lce(xl, labels), xl),
        "cross_entropy label_smoothing": grad(lambda: lce(xl, labels, label_smoothing=0.1), xl),
        "cross_entropy z_loss": grad(lambda: lce(xl, labels, lse_square_scale=1e-4), xl),
        "cross_entropy softcap": grad(lambda: lce(xl, labels, softcap=30.0), xl),
        "cross_entropy all three": grad(lambda: lce(xl, labels, label_smoothing=0.1,
                                                    lse_square_scale=1e-4, softcap=30.0), xl),
        "jsd": grad(lambda: jsd(xl.float().log_softmax(-1), t.float().log_softmax(-1)), xl),
    }  # fmt: skip
    return calls, liger, None


def _add_norm_calls(M, N, dtype, device):
    """(name -> fwd+bwd call, why Liger's is missing or None): the fused add against a
    separate add, and Liger's fused add (in_place=False: its in-place backward overwrites dy)."""
    x = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    r = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=device)).to(dtype).requires_grad_()
    gy, gh = torch.randn_like(x), torch.randn_like(x)
    eps = 1e-6

    def fused():
        y, h = normlab.add_rms_norm(x, r, w, eps)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

    def separate():
        h = x + r
        y = normlab.rms_norm(h, w, eps)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

    calls = {FUSED_ADD: fused, SEPARATE_ADD: separate}
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as Fn
    except Exception as exc:
        return calls, f"liger_kernel.ops.fused_add_rms_norm: {exc!r}"[:200]

    def liger():
        y, h = Fn.apply(x, r, w, eps, 0.0, "llama", False)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

    calls[LIGER_ADD] = liger
    return calls, None


def _plan(M, V, N, dtype, device, norm_rows=None):
    """[(name, op, impl, call, rows, cols)] in run order (each normlab variant, then Liger's),
    and the reasons Liger's calls are missing. The fused add has ``norm_rows`` rows (M by
    default)."""
    norm_rows = M if norm_rows is None else norm_rows
    losses, liger, why = _loss_calls(M, V, dtype, device)
    norms, why_norm = _add_norm_calls(norm_rows, N, dtype, device)
    plan = []
    for name, call in losses.items():
        plan.append((name, VARIANTS[name][1], "normlab", call, M, V))
        if name in liger:
            plan.append((name, VARIANTS[name][1], "liger", liger[name], M, V))
    for name, call in norms.items():
        impl = "liger" if name == LIGER_ADD else "normlab"
        plan.append((name, "add_rms_norm", impl, call, norm_rows, N))
    return plan, [w for w in (why, why_norm) if w]


def warm(M, V, N, dtype, device, shard: str) -> int:
    """Call this shard's share of the plan once each, untimed (a warm-up process): the losses at
    a small row count with the same Triton specializations, the fused add at its own (the norm
    planner picks kernels by the row count; its inputs are small)."""
    plan, _ = _plan(prewarm.warm_rows(M), V, N, dtype, device, norm_rows=M)
    mine = prewarm.take_shard(plan, shard)
    done = 0
    for name, _op, impl, call, _m, _n in mine:
        try:
            call()
            done += 1
        except Exception as exc:
            print(f"warm {impl} {name}: {exc!r}"[:300], flush=True)
    print(prewarm.shard_line(shard, done, len(mine)), flush=True)
    return 0


def _variant(rec) -> str:
    return rec.note.rsplit("; variant ", 1)[-1]


def summary(records) -> str:
    """The verdicts of recorded measurements: each option against its base op, normlab against
    Liger-Kernel, the fused add against a separate add and against Liger's."""
    us = {(r.impl, _variant(r)): r for r in records if r.valid and r.device_us}
    lines = []
    options = [n for n, (base, _) in VARIANTS.items() if base and ("normlab", n) in us
               and ("normlab", base) in us]  # fmt: skip
    if options:
        worst = max(us[("normlab", n)].device_us / us[("normlab", VARIANTS[n][0])].device_us
                    for n in options)  # fmt: skip
        over = [n for n in options if us[("normlab", n)].device_us
                > OPTION_COST_TARGET * us[("normlab", VARIANTS[n][0])].device_us]  # fmt: skip
        lines.append(f"options over their base op: {len(options)} measured, worst {worst:.3f}x, "
                     f"{len(over)} above {OPTION_COST_TARGET}x (target 0): "
                     f"{'met' if not over else 'missed: ' + ', '.join(over)}")
    vs_liger = [n for n in VARIANTS if ("normlab", n) in us and ("liger", n) in us]
    if vs_liger:
        slower = [n for n in vs_liger if us[("normlab", n)].device_us >= us[("liger", n)].device_us]
        ratios = ", ".join(f"{n} {us[('normlab', n)].device_us / us[('liger', n)].device_us:.3f}"
                           for n in vs_liger)  # fmt: skip
        lines.append(f"normlab / Liger-Kernel (target below 1): {ratios}: "
                     f"{'met' if not slower else 'missed: ' + ', '.join(slower)}")
    else:
        lines.append("normlab / Liger-Kernel: no Liger measurement")
    if ("normlab", FUSED_ADD) in us and ("normlab", SEPARATE_ADD) in us:
        fused, separate = us[("normlab", FUSED_ADD)], us[("normlab", SEPARATE_ADD)]
        saved_us = separate.device_us - fused.device_us
        shape = ("fwd+bwd", fused.M, fused.N, fused.dtype)
        saved_bytes = separate_add_bytes(FUSED_ADD, *shape) - bytes_moved(FUSED_ADD, *shape)
        if fused.roofline_gbps:
            bytes_us = saved_bytes / fused.roofline_gbps / 1e3
            verdict = "met" if saved_us >= bytes_us else "missed"
            lines.append(f"fused residual add saves {saved_us:.1f} µs of {separate.device_us:.1f} "
                         f"({fused.M}x{fused.N} {fused.dtype}); the {saved_bytes / 1e6:.1f} MB it "
                         f"does not move take {bytes_us:.1f} µs at the {fused.roofline_gbps:.0f} "
                         f"GB/s copy (target: saves at least that): {verdict}")
        if ("liger", LIGER_ADD) in us:
            ratio = fused.device_us / us[("liger", LIGER_ADD)].device_us
            lines.append(f"add_rms_norm / Liger's fused add: {ratio:.3f} (target below 1): "
                         f"{'met' if ratio < 1 else 'missed'}")
    return "\n".join(lines) if lines else "no loss_options records"


def shipped(records, sources) -> dict:
    """The recorded run as ``normlab/data/<card>-loss-options.json`` holds it: ``meta`` (card,
    date, commit, versions, command, source files) and one row per valid measurement."""
    records = [r for r in records if r.valid and r.device_us]
    if not records:
        raise ValueError("no valid loss_options records to ship")
    runs = {(r.card, r.commit) for r in records}
    if len(runs) > 1:
        raise ValueError(f"records of several runs (card, commit): {sorted(runs)}; ship one")
    first = records[0]
    meta = {"card": first.card, "date": min(r.date for r in records)[:10], "commit": first.commit,
            "torch": first.torch, "triton": first.triton, "command": first.command,
            "source": [Path(s).name for s in sources],
            "note": "forward+backward device µs, L2 flushed (benchmarks/loss_options.py)"}
    rows = []
    for r in records:
        variant = _variant(r)
        base = VARIANTS[variant][0] if variant in VARIANTS else None
        rows.append({"variant": variant, "base": base, "op": r.op, "impl": r.impl, "M": r.M,
                     "N": r.N, "dtype": r.dtype, "target_dtype": TARGET_DTYPES.get(variant),
                     "device_us": r.device_us, "roofline_gbps": r.roofline_gbps})
    return {"meta": meta, "rows": rows}


def main(argv=None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, nargs="+", help="recorded runs: print, no GPU")
    parser.add_argument("--ship", type=Path, nargs="+",
                        help="a recorded run: copy it into normlab/data/ for notebook 07, no GPU")
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--V", type=int, default=131072)
    parser.add_argument("--N", type=int, default=4096, help="the fused add's hidden size")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 reps (CPU smoke)")
    for form in ("chunked", "fused"):
        parser.add_argument(f"--{form}-maxnreg", metavar="TILE:REGS,...",
                            help=f"replace the {form} form's register caps (config."
                                 f"ENTROPY_{form.upper()}_MAXNREG; 'none': no cap)")
    prewarm.add_arguments(parser, 60.0)
    budget.add_arguments(parser)
    args = parser.parse_args(argv)
    maxnreg_note = ""
    for form in ("chunked", "fused"):
        text = getattr(args, f"{form}_maxnreg")
        if text is None:
            continue
        try:
            caps = register_caps(text)
        except ValueError as exc:
            parser.error(f"--{form}-maxnreg: {exc}")
        table = getattr(loss_config, f"ENTROPY_{form.upper()}_MAXNREG")
        table.clear()
        table.update(caps)
        maxnreg_note += f"; {form} register caps {caps or 'none'}"
    if args.summary:
        print(summary([r for path in args.summary for r in read_records(path)]))
        return 0
    if args.ship:
        missing = [str(p) for p in args.ship if not p.is_file()]
        if missing:
            parser.error(f"--ship: no such file: {', '.join(missing)}")
        try:
            data = shipped([r for p in args.ship for r in read_records(p)], args.ship)
        except ValueError as exc:
            parser.error(f"--ship: {exc}")
        out = Path(devdata.DATA) / f"{card_slug(data['meta']['card'])}-{devdata.LOSS_OPTIONS}"
        rows = ",\n".join(f"  {json.dumps(row)}" for row in data["rows"])  # a row a line
        out.write_text(f'{{"meta": {json.dumps(data["meta"])},\n "rows": [\n{rows}\n]}}\n',
                       encoding="utf-8")  # fmt: skip
        print(f"wrote {len(data['rows'])} rows to {out}")
        return 0
    if args.out is None and args.warm_shard is None:
        parser.error("--out is required (or --summary FILE.jsonl)")
    if min(args.M, args.V, args.N, args.reps) < 1:
        parser.error("--M, --V, --N and --reps must be >= 1")
    run_budget = budget.from_args(parser, args)
    if args.quick:
        args.M, args.V, args.N, args.reps = 4, 300, 64, 2
    elif not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (or --quick for a CPU smoke run in the interpreter)")
    device = normlab.DEVICE
    dtype = torch.bfloat16
    if args.warm_shard is not None:
        return warm(args.M, args.V, args.N, dtype, device, args.warm_shard)
    workers = prewarm.workers(args, device)
    if workers > 0:
        print(f"{workers} warm-up processes compile the kernels", flush=True)
        prewarm.report(prewarm.Pool(prewarm.shard_commands(__file__, argv, workers)), args,
                       run_budget)  # fmt: skip
    dev = device_info()
    commit = git_commit()
    command = portable_command(["python3", "benchmarks/loss_options.py", *argv])
    plan, missing = _plan(args.M, args.V, args.N, dtype, device)
    for why in missing:
        print(f"left out: Liger-Kernel's calls: {why}", flush=True)
    if normlab.INTERPRET:
        print(CPU_LABEL)
    print(f"{'variant':<32}{'µs':>10}{'÷ base':>9}{'÷ Liger':>9}   ({args.M}x{args.V}, bf16, "
          f"fwd+bwd, {dev.card})")
    records, times, last_s = [], {}, 0.0
    for name, op, impl, call, M, N in plan:
        if not run_budget.allows(last_s):
            print(f"stopped at the time limit: {len(records)} of {len(plan)} measured")
            break
        t0 = time.time()
        try:
            rec = measure(call, op, impl, M, N, dtype, "fwd+bwd", device=dev, reps=args.reps,
                          warmup=1 if args.quick else 3, command=command, commit=commit,
                          target_dtype=TARGET_DTYPES.get(name))  # fmt: skip
        except Exception as exc:  # one that cannot run is reported, the others go on
            print(f"skip {impl} {name}: {exc!r}"[:300], flush=True)
            continue
        finally:
            last_s = time.time() - t0
        rec = dataclasses.replace(rec, note=f"{rec.note}; variant {name}{maxnreg_note}",
                                  strategy="separate add" if name == SEPARATE_ADD else None)
        records.append(rec)
        replace_jsonl(records, args.out)
        times[(impl, name)] = rec.device_us
        if op == "add_rms_norm":
            print(f"  {name:<30}{rec.device_us:>10.1f} µs   ({M}x{N} bf16 fwd+bwd)")
            continue
        base = VARIANTS[name][0]
        ratio = f"{rec.device_us / times[('normlab', base)]:.3f}" \
            if impl == "normlab" and ("normlab", base) in times else ""  # fmt: skip
        lig = f"{times[('normlab', name)] / rec.device_us:.3f}" \
            if impl == "liger" and ("normlab", name) in times else ""  # fmt: skip
        print(f"{name if impl == 'normlab' else '  Liger':<32}{rec.device_us:>10.1f}{ratio:>9}"
              f"{lig:>9}")
    plan = None  # free the inputs
    replace_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {args.out} at {run_budget.elapsed():.0f} s")
    print(summary(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
