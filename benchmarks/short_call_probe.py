"""Short calls: what a kernel of one or a few programs pays beyond its loads and stores.

    python3 benchmarks/short_call_probe.py --out FILE [--reps 40]

At decode batches (1-14 rows) and rows of one column (5265 and 53711 rows), normlab's forwards
took 0.2-0.4 µs more than Liger-Kernel's or torch.compile's kernels in every run, at any warps
and grid (``norm_launch_variants_*``, ``norm_pointwise_variants_35cca21``). This times, in one
process and with the harness's flush before each call (device time, µs):
- probe kernels of one program: a store of one value with 1 or 20 parameters; a row of 2048
  bf16 loaded and stored, with and without a large untaken branch (code the SM must fetch past);
  the same row with a second row loaded after the first arrives (one more round trip);
- normlab's decode forward (default, and its kernel with the parameters loaded late) beside
  Liger's forward function and torch.compile's, on the same tensors;
- the rows of one column: normlab's pointwise forward beside torch.compile's and a minimal
  pointwise kernel (x * rsqrt(x * x + eps) * w at 1024 rows a program).
Records carry ``shape_set="short_call_probe"``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from norm_population import _compiled_peer

from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import op as norm_op
from normlab.norms import row

DECODE = ((1, 2048), (8, 1024), (8, 4096), (12, 973), (14, 1022))
ONE_COLUMN = (5265, 53711)


@triton.jit
def _store_one(out_ptr):
    tl.store(out_ptr, 1.0)


@triton.jit
def _store_one_wide(out_ptr, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
                    i1, i2, i3, i4):  # fmt: skip
    tl.store(out_ptr, 1.0)


@triton.jit
def _copy_row(x_ptr, y_ptr, flag, n_cols, BLOCK: tl.constexpr, BIG_BRANCH: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    if BIG_BRANCH:
        if flag != 0:  # never taken: code the SM fetches past
            for k in tl.static_range(64):
                x = tl.sin(x * 1.0001 + k) * tl.exp(x - k)
    tl.store(y_ptr + cols, x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_row_dependent(x_ptr, w_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(x, axis=0)
    w = tl.load(w_ptr + cols + (s != s).to(tl.int32), mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + cols, (x * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _pointwise_rms(x_ptr, w_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr).to(tl.float32)
    tl.store(y_ptr + offs, (x * tl.rsqrt(x * x + eps) * w).to(y_ptr.dtype.element_ty), mask=mask)


def probes():
    out = torch.empty(1, device="cuda")
    x = torch.randn(2048, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(2048, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    d = [out] * 15
    return {
        "store one, 1 parameter": lambda: _store_one[(1,)](out),
        "store one, 20 parameters": lambda: _store_one_wide[(1,)](out, *d, 1, 2, 3, 4),
        "copy 2048": lambda: _copy_row[(1,)](x, y, 0, 2048, BLOCK=2048, BIG_BRANCH=False,
                                             num_warps=8),  # fmt: skip
        "copy 2048, large untaken branch": lambda: _copy_row[(1,)](x, y, 0, 2048, BLOCK=2048,
                                                                   BIG_BRANCH=True, num_warps=8),
        "copy 2048, dependent second load": lambda: _copy_row_dependent[(1,)](
            x, w, y, 2048, BLOCK=2048, num_warps=8),
    }


def decode(op, m, n):
    from liger_kernel.ops.rms_norm import rms_norm_forward

    x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    eps = 1e-6
    return {
        "normlab default": lambda: norm_op._forward(x, None, w, None, eps, 0.0, True, "auto",
                                                    "auto")[0],  # fmt: skip
        "normlab late params": lambda: row.norm_forward(x, w, None, eps, True,
                                                        early_params=False)[0],  # fmt: skip
        "liger function": lambda: rms_norm_forward(x, w, eps, 0.0, "llama", False)[0],
    }


def one_column(m):
    x = torch.randn(m, 1, dtype=torch.bfloat16, device="cuda")
    w = (1 + 0.1 * torch.randn(1, device="cuda")).to(torch.bfloat16)
    y = torch.empty_like(x)
    eps = 1e-6
    runs = {"normlab default": lambda: norm_op._forward(x, None, w, None, eps, 0.0, True, "auto",
                                                        "auto")[0]}  # fmt: skip
    for block, warps in ((1024, 4), (512, 4), (256, 2)):
        runs[f"pointwise probe {block}x{warps}"] = (
            lambda block=block, warps=warps: _pointwise_rms[(triton.cdiv(m, block),)](
                x, w, y, m, eps, BLOCK=block, num_warps=warps))  # fmt: skip
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=40)
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    dev = device_info()
    command = portable_command(["python3", "benchmarks/short_call_probe.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []

    def timed(label, runs, m, n, op="rms_norm", peers=()):
        runs = dict(runs)
        for peer in peers:
            runs[peer] = (registry.norm_case(_compiled_peer(op), op, m, n, torch.bfloat16, "fwd",
                                             "cuda")  # fmt: skip
                          if peer == "compile"
                          else registry.get(op, peer).build(m, n, torch.bfloat16, "fwd", "cuda"))
        line = [f"{label}:"]
        for name, run in runs.items():
            rec = measure(run, op, name, m, n, "bf16", "fwd", device=dev, reps=args.reps,
                          command=command, shape_set="short_call_probe")  # fmt: skip
            records.append(rec)
            line.append(f"{name} {rec.device_us:.2f}")
        print(" | ".join(line), flush=True)
        write_jsonl(records, args.out)

    timed("probes (one program)", probes(), 1, 2048)
    for m, n in DECODE:
        timed(f"rms_norm fwd {m}x{n}", decode("rms_norm", m, n), m, n, peers=("liger", "compile"))
    for m in ONE_COLUMN:
        timed(f"rms_norm fwd {m}x1", one_column(m), m, 1, peers=("compile",))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
