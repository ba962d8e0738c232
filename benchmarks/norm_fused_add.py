"""The fused residual add: its forward's warps, its backward's register budget and prefetch,
against the plain norm's.

    python3 benchmarks/norm_fused_add.py --out out/norm_fused_add.jsonl [--reps 10] [--cells ...]
        [--ops rms_norm,layer_norm] [--bwd "fused add planned,liger fused add backward"]
        [--dtype bf16|fp16|fp32]

For each cell (op, M x N, ``--dtype``: bf16 unless named), timed in one process (device time,
L2 flushed):

- the forward of ``add_rms_norm`` / ``add_layer_norm`` (it reads x and the residual, writes y
  and h) planned, at other warps and as a persistent grid of one-row tiles, beside the plain
  norm's forward planned at the same shape;
- the backward of ``add_rms_norm`` / ``add_layer_norm`` (it reads h, dy and dh, writes dx):
  planned (``config.norm_bwd_config``'s ``fused_add`` rules), with no register cap, without
  the prefetch (with and without the cap), and with it (LayerNorm's planned one has none), and
  on 32 warps;
- the plain norm's backward at the same shape, planned, capped at the same budget
  (``config.register_budget``: a rule for every backward would have to leave it level), and
  without and with its prefetch;
- Liger-Kernel's fused-add RMSNorm backward alone, its kernel and its dW sum;
- the planned backward on inputs whose rows lie 64 columns apart, the two-pass kernel at
  several tiles and the split-row backward;
- the single pass over one-row tiles shifted, unshifted on 8 and 16 warps, and in Liger-Kernel's
  order (``liger_order``: dγ/dβ before the row sums, dh after them, w loaded every row); the
  planned tile on 8 and 32 warps, and two programs an SM on 8;
- forward+backward: the fused add, the norm on a separately computed sum, and Liger-Kernel's
  fused-add RMSNorm.

``--bwd`` times only the backward variants it names. Every variant's outputs are checked
against the planned one's before it is timed.
Records carry ``shape_set="norm_fused_add"`` and the variant in ``impl``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch
from norm_bwd_variants import close, parse_cells

import normlab
from normlab import _runtime
from normlab.bench import device_info
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import config, row, split_row

# About 16.8M elements a cell (32 MiB a bf16 tensor), across the single-pass widths.
CELLS = "21845x768,16384x1024,8192x2048,5461x3072,4096x4096,3276x5120,2048x8192"
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
FWD_WARPS = (4, 8, 16)  # the forward's warps beside its planned ones
FWD_PERSISTENT_PER_SM = (2, 4)  # programs a SM of the forward's persistent one-row grid


def _backward_variants(h, w, b, dy, dh, mean, rstd, is_rms):
    """name -> (op for the bytes model, zero-argument backward)."""
    budget = config.register_budget(*_planned_warps(h.shape, is_rms))

    def fused(**kw):
        return "add_" + ("rms_norm" if is_rms else "layer_norm"), (
            lambda: row.norm_backward(dy, h, w, b, mean, rstd, is_rms, dh=dh, **kw))

    def plain(**kw):
        return "rms_norm" if is_rms else "layer_norm", (
            lambda: row.norm_backward(dy, h, w, b, mean, rstd, is_rms, **kw))

    variants = {
        "fused add planned": fused(),
        "fused add no register cap": fused(maxnreg=0),
        "fused add no prefetch": fused(prefetch=False),
        "fused add no prefetch, no cap": fused(prefetch=False, maxnreg=0),
        "fused add prefetching": fused(prefetch=True),
        "plain planned": plain(),
        "plain at the register budget": plain(maxnreg=budget),
        "plain no prefetch": plain(prefetch=False),
        "plain prefetching": plain(prefetch=True),
    }
    # The single pass over one-row tiles: shifted (the plan past 8192 columns up to 12288),
    # unshifted in the planned order, and in Liger-Kernel's (liger_order) on 8 and 16 warps.
    for who, make in (("fused add", fused), ("plain", plain)):
        planned_order = {"liger_order": False, "prefetch": False}
        variants.update({
            f"{who} shifted": make(shift=True, **planned_order),
            f"{who} unshifted 8 warps": make(shift=False, num_warps=8, **planned_order),
            f"{who} unshifted 16 warps": make(shift=False, num_warps=16, **planned_order),
            f"{who} Liger order 8 warps": make(liger_order=True, num_warps=8),
            f"{who} Liger order 16 warps": make(liger_order=True, num_warps=16),
            f"{who} on 8 warps": make(num_warps=8),
            f"{who} on 32 warps": make(num_warps=32),
            f"{who} 2 a SM on 8 warps": make(num_warps=8, programs_per_sm=2),
        })  # fmt: skip
    # Two passes over column chunks (the second mostly from L2), and the split-row backward.
    two = {"two_pass": True, "strategy": "persistent"}
    for who, make in (("fused add", fused), ("plain", plain)):
        variants.update({
            f"{who} two pass 4x4096": make(**two),
            f"{who} two pass 1x4096 on 8 warps 4 a SM": make(**two, block_rows=1, block_cols=4096,
                                                           num_warps=8, programs_per_sm=4),
            f"{who} two pass 2x4096": make(**two, block_rows=2, block_cols=4096),
            f"{who} two pass 1x8192": make(**two, block_rows=1, block_cols=8192),
        })  # fmt: skip
    split = config.split_row_bwd_plan(*h.shape, _runtime.sm_count())
    for who, gh in (("fused add", dh), ("plain", None)):
        variants[f"{who} split rows"] = (
            ("add_" if gh is not None else "") + ("rms_norm" if is_rms else "layer_norm"),
            lambda gh=gh: split_row.split_row_backward(
                dy, h, w, b, mean, rstd, is_rms, split.chunk, dh=gh,
                rows_per_group=split.rows_per_group, sums_chunk=split.sums))  # fmt: skip
    # The inputs' rows 64 columns apart: a row stride that is not a power of two (the copies
    # made at the variant's first call, its check, so unselected variants allocate nothing).
    padded = functools.cache(lambda: tuple(_padded(t) for t in (h, dy, dh)))
    variants["fused add padded inputs"] = ("add_" + ("rms_norm" if is_rms else "layer_norm"), (
        lambda: row.norm_backward(padded()[1], padded()[0], w, b, mean, rstd, is_rms,
                                  dh=padded()[2])))  # fmt: skip
    variants["plain padded inputs"] = ("rms_norm" if is_rms else "layer_norm", (
        lambda: row.norm_backward(padded()[1], padded()[0], w, b, mean, rstd, is_rms)))
    liger = liger_backward(h, w, dy, dh, rstd) if is_rms else None
    if liger is not None:
        variants["liger fused add backward"] = ("add_rms_norm", liger)
    return variants


def _padded(t, pad=64):
    """t's values in rows ``pad`` columns longer than t's (a view of its first columns)."""
    return torch.empty(t.shape[0], t.shape[1] + pad, dtype=t.dtype, device=t.device)[
        :, : t.shape[1]].copy_(t)  # fmt: skip


def liger_backward(h, w, dy, dh, rstd):
    """Liger-Kernel's fused-add RMSNorm backward alone (its kernel and dW sum, as its autograd
    Function calls them, casting mode "llama"); None without Liger."""
    try:
        from liger_kernel.ops import fused_add_rms_norm as liger
        from liger_kernel.ops.utils import calculate_settings
    except Exception:  # not installed: no peer
        return None
    block, warps = calculate_settings(h.shape[1])
    llama = liger._str_to_casting_mode["llama"]

    def run():  # (dx, dw, no db) as row.norm_backward returns them
        dx, _, dw = liger.fused_add_rms_norm_backward(dy, dh, h, w, rstd, 0.0, llama, block,
                                                      warps, 2, False)  # fmt: skip
        return dx, dw, None

    return run


def _forward_variants(x, r, w, b, is_rms):
    """name -> (op for the bytes model, zero-argument forward)."""
    eps = EPS["rms_norm" if is_rms else "layer_norm"]
    op = "rms_norm" if is_rms else "layer_norm"
    planned = config.norm_fwd_config(x.shape[1], is_rms, x.shape[0], _runtime.sm_count(),
                                     fused_add=True).num_warps  # fmt: skip

    def fused(**kw):
        def run():  # (y, mean, rstd, h)
            h = torch.empty_like(x)
            return (*row.norm_forward(x, w, b, eps, is_rms, residual=r, h_out=h, **kw), h)

        return "add_" + op, run

    variants = {"fused add forward planned": fused()}
    for warps in FWD_WARPS:
        if warps != planned:
            variants[f"fused add forward at {warps} warps"] = fused(num_warps=warps)
    for per_sm in FWD_PERSISTENT_PER_SM:  # one row a step, the next row prefetched
        variants[f"fused add forward persistent, {per_sm} a SM"] = fused(
            tile=config.BlockRowFwdConfig(1, planned, per_sm))
    variants["plain forward planned"] = (op, lambda: row.norm_forward(x, w, b, eps, is_rms))
    return variants


def _planned_warps(shape, is_rms):
    cfg = config.norm_bwd_config("persistent", *shape, is_rms=is_rms,
                                 sm_count=_runtime.sm_count())
    return cfg.num_warps, cfg.programs_per_sm


def _forward_backward(x, r, w, b, gy, gh, is_rms):
    """name -> fwd+bwd call: the fused add, a separate add, Liger's fused add (RMSNorm)."""
    eps = EPS["rms_norm" if is_rms else "layer_norm"]
    params = (w,) if is_rms else (w, b)

    def norm(h):
        return normlab.rms_norm(h, w, eps) if is_rms else normlab.layer_norm(h, w, b, eps)

    def fused():
        y, h = (normlab.add_rms_norm(x, r, w, eps) if is_rms
                else normlab.add_layer_norm(x, r, w, b, eps))  # fmt: skip
        return torch.autograd.grad((y, h), (x, r, *params), (gy, gh))

    def separate():
        h = x + r
        return torch.autograd.grad((norm(h), h), (x, r, *params), (gy, gh))

    calls = {"fused add": fused, "separate add": separate}
    if is_rms:
        try:
            from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction as Fn
        except Exception:  # not installed: no peer
            return calls

        def liger():
            y, h = Fn.apply(x, r, w, eps, 0.0, "llama", False)
            return torch.autograd.grad((y, h), (x, r, w), (gy, gh))

        calls["liger fused add"] = liger
    return calls


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...]")
    parser.add_argument("--ops", default="rms_norm,layer_norm")
    parser.add_argument("--bwd", default=None,
                        help="only these backward variants, comma-separated (no forwards)")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    cells = parse_cells(parser, args.cells)
    ops = args.ops.split(",")
    if any(op not in EPS for op in ops):
        parser.error(f"--ops: a comma list of {', '.join(EPS)}")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_fused_add.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []

    def time_checked(name, bytes_op, run, want, m, n, direction):
        """Time one variant (its record kept) once its outputs match ``want`` (None: unchecked)."""
        if want is not None and not all(close(g, e) for g, e in zip(run(), want, strict=True)):
            return f"{name} MISMATCH"
        impl = name if name.startswith("liger") else f"normlab {name}"
        rec = measure(run, bytes_op, impl, m, n, args.dtype, direction, device=dev,
                      reps=args.reps, command=command, shape_set="norm_fused_add")
        records.append(rec)
        return f"{name} {rec.device_us:.1f}"

    for m, n in cells:
        for op in ops:
            is_rms = op == "rms_norm"
            dtype = DTYPES[args.dtype]
            like = {"dtype": dtype, "device": "cuda"}
            x, r = torch.randn(m, n, **like), torch.randn(m, n, **like)
            w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
            b = None if is_rms else (0.1 * torch.randn(n, device="cuda")).to(dtype)
            dy, dh = torch.randn(m, n, **like), torch.randn(m, n, **like)
            h = (x.float() + r.float()).to(dtype)
            _, mean, rstd = row.norm_forward(h, w, b, EPS[op], is_rms)
            if args.bwd is None:
                forwards = _forward_variants(x, r, w, b, is_rms)
                want = forwards["fused add forward planned"][1]()
                line = [f"{op} {m}x{n} fwd:"]
                for name, (bytes_op, run) in forwards.items():  # the plain one: no h to check
                    check = None if name.startswith("plain") else want
                    line.append(time_checked(name, bytes_op, run, check, m, n, "fwd"))
                print(" | ".join(line), flush=True)
            variants = _backward_variants(h, w, b, dy, dh, mean, rstd, is_rms)
            unknown = set(args.bwd.split(",")) - set(variants) if args.bwd is not None else ()
            if unknown:
                parser.error(f"--bwd: no variant {', '.join(sorted(unknown))} for {op}; "
                             f"they are: {', '.join(variants)}")  # fmt: skip
            wants = {plain: variants["plain planned" if plain else "fused add planned"][1]()
                     for plain in (False, True)}  # fmt: skip
            line = [f"{op} {m}x{n} bwd:"]
            for name, (bytes_op, run) in variants.items():
                if args.bwd is not None and name not in args.bwd.split(","):
                    continue
                check = wants[name.startswith("plain")]
                line.append(time_checked(name, bytes_op, run, check, m, n, "bwd"))
            print(" | ".join(line), flush=True)
            if args.bwd is not None:
                write_jsonl(records, args.out)
                continue
            xg, rg = x.clone().requires_grad_(), r.clone().requires_grad_()
            wg = w.clone().requires_grad_()
            bg = None if b is None else b.clone().requires_grad_()
            line = [f"{op} {m}x{n} fwd+bwd:"]
            add_op = "add_" + op
            for name, run in _forward_backward(xg, rg, wg, bg, dy, dh, is_rms).items():
                impl = "liger" if name.startswith("liger") else "normlab"
                rec = measure(run, add_op, f"{impl} {name}" if impl == "normlab" else impl, m, n,
                              args.dtype, "fwd+bwd", device=dev, reps=args.reps, command=command,
                              shape_set="norm_fused_add")  # fmt: skip
                records.append(rec)
                line.append(f"{name} {rec.device_us:.1f}")
            print(" | ".join(line), flush=True)
            write_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
