"""What each option costs: the loss options and the fused residual add against their base ops.

    python3 benchmarks/loss_options.py --out out/loss_options.jsonl [--M 4096 --V 131072]
    python3 benchmarks/loss_options.py --out out/smoke.jsonl --quick    # CPU: the interpreter

Times forward+backward of each normlab variant (temperature, loss mask, forward KL, JSD, label
smoothing, z-loss, softcap, an fp32 teacher) beside its base op, and Liger-Kernel's equivalent
where it has one (cross-entropy with the same options, JSD), in one process. Then the fused
residual add: ``add_rms_norm`` against ``rms_norm`` on a separately computed sum, and Liger's
fused-add RMSNorm. Prints each variant's device µs, its ratio to the base op (target <= 1.05)
and to Liger's (target: normlab faster), and writes one record per measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import torch

import normlab
from normlab.bench import device_info
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import CPU_LABEL, measure

OPTION_COST_TARGET = 1.05  # an option's forward+backward over its base op's


def _loss_variants(M, V, dtype, device):
    """name -> (base name, op for the bytes model, zero-argument fwd+bwd call)."""
    x = torch.randn(M, V, dtype=dtype, device=device, requires_grad=True)
    t = torch.randn(M, V, dtype=dtype, device=device)
    t32 = t.float()
    labels = torch.randint(0, V, (M,), device=device)
    mask = torch.rand(M, device=device) > 0.25

    def grad(fn):
        return lambda: torch.autograd.grad(fn(), (x,))

    rkl, sce, ce = normlab.reverse_kl, normlab.soft_cross_entropy, normlab.cross_entropy
    out = {
        "reverse_kl": (None, "reverse_kl", grad(lambda: rkl(x, t))),
        "reverse_kl T=2": ("reverse_kl", "reverse_kl", grad(lambda: rkl(x, t, temperature=2.0))),
        "reverse_kl loss_mask": ("reverse_kl", "reverse_kl",
                                 grad(lambda: rkl(x, t, loss_mask=mask))),
        "reverse_kl fp32 teacher": ("reverse_kl", "reverse_kl", grad(lambda: rkl(x, t32))),
        "forward_kl": ("reverse_kl", "forward_kl", grad(lambda: normlab.forward_kl(x, t))),
        "jsd": ("reverse_kl", "jsd", grad(lambda: normlab.jsd(x, t))),
        "soft_cross_entropy": (None, "soft_cross_entropy", grad(lambda: sce(x, t))),
        "soft_cross_entropy T=2": ("soft_cross_entropy", "soft_cross_entropy",
                                   grad(lambda: sce(x, t, temperature=2.0))),
        "cross_entropy": (None, "cross_entropy", grad(lambda: ce(x, labels))),
        "cross_entropy label_smoothing": ("cross_entropy", "cross_entropy",
                                          grad(lambda: ce(x, labels, label_smoothing=0.1))),
        "cross_entropy z_loss": ("cross_entropy", "cross_entropy",
                                 grad(lambda: ce(x, labels, z_loss=1e-4))),
        "cross_entropy softcap": ("cross_entropy", "cross_entropy",
                                  grad(lambda: ce(x, labels, softcap=30.0))),
        "cross_entropy all three": ("cross_entropy", "cross_entropy", grad(
            lambda: ce(x, labels, label_smoothing=0.1, z_loss=1e-4, softcap=30.0))),
    }  # fmt: skip
    liger = {}
    try:
        from liger_kernel.transformers.functional import liger_cross_entropy
        from liger_kernel.transformers.jsd import LigerJSD

        jsd = LigerJSD(beta=0.5)
        liger = {
            "cross_entropy": grad(lambda: liger_cross_entropy(x, labels)),
            "cross_entropy label_smoothing": grad(
                lambda: liger_cross_entropy(x, labels, label_smoothing=0.1)),
            "cross_entropy z_loss": grad(
                lambda: liger_cross_entropy(x, labels, lse_square_scale=1e-4)),
            "cross_entropy softcap": grad(lambda: liger_cross_entropy(x, labels, softcap=30.0)),
            "jsd": grad(lambda: jsd(x.float().log_softmax(-1), t.float().log_softmax(-1))),
        }  # fmt: skip
    except ImportError:
        pass
    return out, liger


def _add_norm_variants(M, N, dtype, device):
    """name -> (op for the bytes model, fwd+bwd call): the fused add against a separate add."""
    x = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    r = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    w = torch.ones(N, dtype=dtype, device=device, requires_grad=True)
    gy, gh = torch.randn_like(x), torch.randn_like(x)

    def fused():
        y, h = normlab.add_rms_norm(x, r, w)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

    def separate():
        h = x + r
        y = normlab.rms_norm(h, w)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

    out = {"add_rms_norm": fused, "rms_norm on a separate add": separate}
    try:
        from liger_kernel.transformers import LigerFusedAddRMSNorm

        module = LigerFusedAddRMSNorm(N, eps=1e-6).to(device=device, dtype=dtype)

        def liger():
            y, h = module(x, r)
            return torch.autograd.grad((y, h), (x, r, module.weight), (gy, gh))

        out["liger fused add"] = liger
    except ImportError:
        pass
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--M", type=int, default=4096)
    parser.add_argument("--V", type=int, default=131072)
    parser.add_argument("--N", type=int, default=4096, help="the fused add's hidden size")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, 2 reps (CPU smoke)")
    args = parser.parse_args(argv)
    if min(args.M, args.V, args.N, args.reps) < 1:
        parser.error("--M, --V, --N and --reps must be >= 1")
    if args.quick:
        args.M, args.V, args.N, args.reps = 4, 300, 64, 2
    elif not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (or --quick for a CPU smoke run in the interpreter)")
    device = normlab.DEVICE
    dev = device_info()
    command = portable_command(["python3", "benchmarks/loss_options.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    dtype = torch.bfloat16
    records, times = [], {}

    def run(name, op, impl, call, M, N, direction="fwd+bwd"):
        rec = measure(call, op, impl, M, N, dtype, direction, device=dev, reps=args.reps,
                      warmup=1 if args.quick else 3, command=command)  # fmt: skip
        rec = dataclasses.replace(rec, note=f"{rec.note}; variant {name}")
        records.append(rec)
        times[(impl, name)] = rec.device_us
        return rec.device_us

    if normlab.INTERPRET:
        print(CPU_LABEL)
    variants, liger = _loss_variants(args.M, args.V, dtype, device)
    print(f"{'variant':<32}{'µs':>10}{'÷ base':>9}{'÷ Liger':>9}   ({args.M}x{args.V}, bf16, "
          f"fwd+bwd, {dev.card})")
    for name, (base, op, call) in variants.items():
        us = run(name, op, "normlab", call, args.M, args.V)
        ratio = f"{us / times[('normlab', base)]:.3f}" if base else ""
        lig = ""
        if name in liger:
            lus = run(name, op if op != "jsd" else "jsd", "liger", liger[name], args.M, args.V)
            lig = f"{us / lus:.3f}"
        print(f"{name:<32}{us:>10.1f}{ratio:>9}{lig:>9}")
    print(f"target: each option <= {OPTION_COST_TARGET}x its base; below 1 against Liger")
    print(f"\nfused residual add, {args.M}x{args.N} bf16 fwd+bwd:")
    for name, call in _add_norm_variants(args.M, args.N, dtype, device).items():
        impl = "liger" if name.startswith("liger") else "normlab"
        us = run(name, "add_rms_norm", impl, call, args.M, args.N)
        print(f"  {name:<30}{us:>10.1f} µs")
    write_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
