"""Why a launch-bound RMSNorm forward trails Liger-Kernel's: one difference at a time (GPU).

    python3 benchmarks/norm_fwd_ablation.py --out out/norm_fwd_ablation.jsonl [--reps 8]

At the same launch (one row per program, a block of next_pow2(N), 4 warps) normlab's forward
took 2.12-2.51 µs at 512x768 and Liger's 1.76-1.78
(`docs/notes/2026-12-02-launch-rules-and-inference-host-path.md`). The kernel
below starts as normlab's single-block RMSNorm forward and moves one trait at a time towards
Liger's: the width as a runtime argument, 64-bit row offsets, the statistic stored before y,
the weight loaded with x, no alignment hints. Each variant is checked against fp64 before it is
timed beside normlab's planned call and Liger's (device time, L2 flushed). Records carry
``shape_set="norm_fwd_ablation"`` and the variant in ``impl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from norm_bwd_variants import parse_cells

from normlab import ref
from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import op as norm_op

CELLS = "1x768,1x8192,8x4096,14x1024,261x1104,512x768,512x1024,783x120,4096x1024"
BASE = {"RUNTIME_COLS": False, "INT64_ROW": False, "STATS_FIRST": False, "EARLY_W": False,
        "HINTS": True}  # fmt: skip
# Each variant moves one trait from BASE (normlab's kernel) towards Liger's; "all" moves every one.
VARIANTS = {
    "base": {},
    "runtime width": {"RUNTIME_COLS": True},
    "int64 rows": {"INT64_ROW": True},
    "rstd first": {"STATS_FIRST": True},
    "w early": {"EARLY_W": True},
    "no hints": {"HINTS": False},
    "all": {"RUNTIME_COLS": True, "INT64_ROW": True, "STATS_FIRST": True, "EARLY_W": True,
            "HINTS": False},
}


@triton.jit
def _ablation_kernel(x_ptr, y_ptr, w_ptr, rstd_ptr, row_stride, n_cols_rt, eps,
                     N_COLS: tl.constexpr, BLOCK: tl.constexpr, RUNTIME_COLS: tl.constexpr,
                     INT64_ROW: tl.constexpr, STATS_FIRST: tl.constexpr, EARLY_W: tl.constexpr,
                     HINTS: tl.constexpr):  # fmt: skip
    """RMSNorm of one row in one block: y = x * rsqrt(mean(x^2) + eps) * w, fp32 arithmetic."""
    row = tl.program_id(0)
    if INT64_ROW:
        row = row.to(tl.int64)
    if HINTS:
        row_stride = tl.multiple_of(row_stride, 8)
    n_cols = n_cols_rt if RUNTIME_COLS else N_COLS
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if EARLY_W:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + tl.cast(eps, tl.float32))
    if STATS_FIRST:
        tl.store(rstd_ptr + row, rstd)
    if not EARLY_W:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(y_ptr + row * row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if not STATS_FIRST:
        tl.store(rstd_ptr + row, rstd)


def ablation_forward(x, w, eps, traits, num_warps=4):
    """(y, rstd) of a contiguous x (n_rows, n_cols) with the variant's traits."""
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    _ablation_kernel[(n_rows,)](x, y, w, rstd, x.stride(0), n_cols, eps, N_COLS=n_cols,
                                BLOCK=triton.next_power_of_2(n_cols), num_warps=num_warps,
                                **{**BASE, **traits})  # fmt: skip
    return y, rstd


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...] (bf16, N a multiple of 8)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    cells = parse_cells(parser, args.cells)
    if any(m < 1 or n < 8 or n % 8 for m, n in cells):
        parser.error("--cells: M >= 1 and N a multiple of 8 (the kernel's alignment hint)")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_fwd_ablation.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []
    for m, n in cells:
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        want = ref.rms_norm(x.double(), w.double(), 1e-6)
        line = [f"{m}x{n}:"]

        def timed(run, impl, m=m, n=n, line=line):
            rec = measure(run, "rms_norm", impl, m, n, "bf16", "fwd", device=dev, reps=args.reps,
                          command=command, shape_set="norm_fwd_ablation")  # fmt: skip
            records.append(rec)
            line.append(f"{impl} {rec.device_us:.2f}")

        timed(lambda x=x, w=w: norm_op._forward(x, None, w, None, 1e-6, 0.0, True, "auto",
                                                "auto"), "normlab planned")  # fmt: skip
        for name, traits in VARIANTS.items():
            y, _ = ablation_forward(x, w, 1e-6, traits)
            err = (y.double() - want).abs().max().item()
            if err > 0.05 * want.abs().max().item():
                line.append(f"{name} WRONG ({err:.3g})")
                continue
            timed(lambda x=x, w=w, traits=traits: ablation_forward(x, w, 1e-6, traits), name)
        liger = registry.get("rms_norm", "liger")
        if liger.unavailable() is None:
            timed(liger.build(m, n, torch.bfloat16, "fwd", "cuda"), "liger")
        print(" | ".join(line), flush=True)
        write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
