"""Launch heuristics and dispatch thresholds, each beside the measurement that justifies it.

Imports only the standard library (and torch/triton for types); kernels read from here,
never the reverse. Recorded measurements live in ``normlab/data/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

# ============================================================================================
# Row-per-program norms (forward, backward strategies)
# ============================================================================================



def _next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


# Forward: one row per program. Rows up to this many columns are held in registers in one
# block; wider rows loop over chunks of this size (pass 1: statistics, pass 2: normalize).
# (16384 bf16 over 16 warps = 32 fp32 values per thread.) The single block at 16384 measured
# 37.3 µs RMS / 41.2 LN at 2048x16384 (H200, 2026-11-29), the chunked path was not timed.
NORM_FWD_MAX_BLOCK = 16384

# Warps per forward program by block size (block <= key -> warps). Measured (H200, 2026-11-29,
# torch 2.11, triton 3.6, bf16, cold L2, device time; scripts/gpu_check_norm.py: first sweep in
# benchmarks/data/dev/norm_tuning_h200_sweep1.json, second in norm_tuning_h200.json):
# N=1024: 4 warps 11.2 µs vs 8 warps 14.0 (RMS 8192x1024); 2 warps then 12.0/20.6/37.1 vs 4 warps
# 12.3/21.7/39.5 for LN 8192/16384/32768x1024 (RMS equal within 1%); N=2048: 4 -> 34.5 vs 8 -> 36.3
# (16384x2048); N=4096: 8 -> 19.8 vs 16 -> 21.8 (4096x4096); N=8192: 8 -> 261 vs 16 -> 265
# (32768x8192, RMS), LN 1024x8192 16 -> 13.2 vs 8 -> 14.3 (a tie within noise: keep 8);
# N=16384: 16 -> 37.0/40.9 (RMS/LN 2048x16384) vs 32 -> 36.6/60.6.
NORM_FWD_WARPS = ((1024, 2), (2048, 4), (8192, 8), (16384, 16))
# Second sweep (benchmarks/data/dev/sweep_launch_configs_h200.json, "fwd", "fwd-multirow"): on the
# shapes where torch.compile is faster, other warps or a chunked 8192 block win by <= 5%
# (RMS 512x16384 11.6 µs at 8192 / 8 warps vs 12.1 default, compile 10.2) and 2-8 rows per
# program (the block-row kernel at 1024-4096 columns) by 0-3% (RMS 8192x1024 10.9 vs 11.2):
# within run-to-run noise, so one row per program stays there (a persistent grid with a
# prefetch does win in a window of row counts, and two-row tiles above it at 1024 columns:
# NORM_FWD_BLOCK_ROW below).

# The forward kernel (kernels/norm.py, _norm_fwd_kernel) takes the row width as a compile-time
# constant, as torch.compile specialises its kernel to the static shape: one compiled kernel per
# width, with static loop bounds. Run "fwd_static_cols" at 02c77ac+ab (H200, torch 2.11, triton
# 3.6, bf16, cold L2, six rounds rotated, fresh inputs), RMSNorm with n_cols constexpr / runtime,
# same code, same (chunk, warps), medians, us: 32768x8192 250.22 / 251.63 (torch.compile 250.02),
# 1024x8192 9.03 / 9.69 (10.37), 512x16384 9.12 / 9.77 (10.70), 4096x4096 18.52 / 18.89 (21.59),
# 16384x1024 18.52 / 18.75 (18.96), 32768x1024 34.11 / 34.23 (34.84).

# Opt-in autotune space (NORMLAB_AUTOTUNE=1, GPU only), seed 002: blocks 512..8192, 4..16 warps;
# the prune hook drops blocks narrower than the row (all but the widest when none fits).
NORM_FWD_AUTOTUNE_BLOCKS = (512, 1024, 2048, 4096, 8192)
NORM_FWD_AUTOTUNE_WARPS = (4, 8, 16)


@dataclass(frozen=True)
class NormFwdConfig:
    block_size: int  # columns per chunk (>= n_cols means one register-resident block)
    num_warps: int


# RMSNorm forward at 1024-16384 columns (next_pow2): the row looped in two passes over chunks of
# 8 elements per thread (one 16-byte bf16 vector; pass 1 sums squares with evict_last loads, pass
# 2 re-reads the row from L2 with evict_first), as torch.compile generates it at 8192 columns
# (16 warps, 32 registers, 93% achieved occupancy against 47% for the register-resident row: Nsight
# Compute, H200, 32768x8192). next_pow2(n_cols) -> (chunk, warps). Measured (H200, torch 2.11,
# triton 3.6, bf16, cold L2; benchmarks/data/dev/sweep_launch_configs_h200.json, runs "fwd_looped" and
# "fwd_looped_rows" at 7e9c754+wip), looped / previous default (block-row windows or the
# register-resident row): 32768x8192 255.4 vs 261.9 / 262.0 us; 4096x4096 18.9 / 19.1 vs 20.2 /
# 20.0; 8192x4096 34.5 / 34.4 vs 35.2 / 36.3; 16384x1024 18.8 / 18.9 vs 19.2 / 19.4; 32768x1024
# 34.2 / 34.4 vs 35.2 / 35.1; 16384x2048 34.0 vs 35.4; 512x16384 10.0 / 10.3 vs 11.4 / 10.4;
# 256x8192 3.6 vs 4.3; 1024x8192 10.7 / 10.7 vs 10.8 / 10.4 (a tie); behind at 2048x4096 (10.5 vs
# 10.2) and 8192x1024 (10.4 vs 9.3 in the second run, 10.5 vs 10.6 in the first). The records of
# b9e2e8c against 2a07d86's: 32768x8192 255.7 vs 261.4 us, 2048x4096 10.3 vs 10.9, 8192x1024 10.5
# vs 11.0. LayerNorm measured slower looped (32768x8192: 376 us at 4096 / 16 warps vs 284) and
# keeps the defaults. At 1024 columns one register-resident row per warp (torch.compile's kernel
# there) has two speeds with the same code and buffers, set by what ran before it: after matrix
# products 3-12% slower than the looped row at 4096-32768 rows (16384x1024: 19.32 vs 18.54 us, run
# "fwd_1024_warm" at 25c84e8), timed after other timings of the shape 2-4% faster (17.72-18.18 vs
# 18.23-18.69, run "fwd_1024_modes" at fd6ed74); the looped row is steady in both.
NORM_FWD_RMS_LOOPED = {1024: (512, 2), 2048: (1024, 4), 4096: (2048, 8), 8192: (4096, 16),
                       16384: (4096, 16)}  # fmt: skip


# RMSNorm's looped row at 8192 columns when the rows need two waves of its 16-warp programs (4 per
# SM by warps: 64 warps a SM) but fit in one wave at 8 warps (8 per SM): 4 x SMs < rows <= 8 x
# SMs (528-1056 rows on 132 SMs). next_pow2(n_cols) -> (lower, upper programs per SM, (chunk,
# warps)). Run "fwd_8192_rows" at 6c13c44 (the production kernel, fresh inputs, six rounds; H200,
# torch 2.11, triton 3.6, bf16, cold L2), medians, 4096 x 8 warps / default 4096 x 16 /
# torch.compile, us: 768 rows 7.34 / 8.15 / 7.36, 1024 rows 9.70 / 10.55 / 10.50; outside the
# window the 16-warp default is as fast or faster: 512 rows 5.38 / 5.14, 1280 rows 13.79 / 13.30.
# (The same run: torch.compile leads the default at 512, 1280 and 1536 rows by 1-3%.)
NORM_FWD_RMS_ONE_WAVE = {8192: (4, 8, (4096, 8))}


def norm_fwd_config(n_cols: int, is_rms: bool = False, n_rows: int | None = None,
                    sm_count: int | None = None) -> NormFwdConfig:  # fmt: skip
    """Heuristic forward launch config (the default; the only one under the interpreter).
    ``n_rows``/``sm_count``: the row-count rule of NORM_FWD_RMS_ONE_WAVE (left out: ignored)."""
    looped = NORM_FWD_RMS_LOOPED.get(_next_pow2(n_cols)) if is_rms else None
    if looped is not None:
        wave = NORM_FWD_RMS_ONE_WAVE.get(_next_pow2(n_cols))
        if wave and n_rows is not None and sm_count:
            lo, hi, cfg = wave
            if lo * sm_count < n_rows <= hi * sm_count:
                return NormFwdConfig(*cfg)
        return NormFwdConfig(*looped)
    block = min(_next_pow2(n_cols), NORM_FWD_MAX_BLOCK)
    warps = next((w for limit, w in NORM_FWD_WARPS if block <= limit), NORM_FWD_WARPS[-1][1])
    return NormFwdConfig(block_size=block, num_warps=warps)


# Forward with the block-row kernel (kernels/narrow.py) instead of one row per program, in
# row-count windows per norm (is_rms) and next_pow2(n_cols) (layout="auto" only): (min rows, max
# rows or None, (tile rows, warps, programs per SM)); programs per SM 0 = one program per tile.
# RMSNorm has no windows at 2048-16384 columns since its looped row (NORM_FWD_RMS_LOOPED)
# measured faster in them, except at 2048x4096.
#
# 512 columns (257-512: above the block-row layout's BLOCK_ROW_MAX_COLS, so the backward stays on
# the row path), short tiles, one program each. Run "fwd_wide_tiles" at 94531ef (two interleaved
# rounds, torch.compile in the same run), tile vs one row per program, us: RMS 4 x 4 warps 11.7 /
# 11.5 vs 12.7 / 12.2 at 16384 rows, 35.6 / 35.4 vs 41.9 / 41.8 at 65536, 130.5 / 130.8 vs 161.0 /
# 160.5 at 262144, 509.8 / 510.7 vs 636.2 / 635.7 at 1048576, 3793.4 / 3807.8 vs 4753.4 / 4754.1
# at 7864320 (torch.compile 3835.0 / 3836.8); LN 8 x 4 warps 12.6 / 12.7 vs 12.4 / 12.6 at 16384
# (a tie: the window starts at the next row count measured), 36.6 / 36.5 vs 42.6 / 42.3 at
# 65536, 132.4 / 132.8 vs 161.4 at 262144, 523.0 / 523.5 vs 638.7 at 1048576, 3889.6 / 3885.3 vs
# 4772.5 / 4772.2 at 7864320 (torch.compile 3887.5 / 3885.9). Fewer rows: not measured.
#
# A persistent grid (programs per SM > 0): programs grid-stride row tiles and load their next tile
# before they normalize and store the current one. With one row per program, a launch of a few
# waves loads every row, then stores every row, and nothing overlaps the two; the prefetch
# overlaps them. Measured (H200, torch 2.11, triton 3.6, 2026-11-29;
# benchmarks/data/dev/sweep_launch_configs_h200.json, runs "fwd_persistent" at 0ad59d4 and
# "fwd_persistent_rows" at e59d49c), persistent / one-row time, RMS then LN: 1024 cols 0.92 / 0.97
# at 2048 rows, 0.88 / 0.91 at 4096, 0.95 / 1.04 at 8192; 2048 cols 0.94 / 0.83 at 2048,
# 0.97 / 0.93 at 4096, 1.04 / 1.01 at 8192; 4096 cols 0.99 / 0.82 at 1024, 0.92 / 0.89 at 2048,
# 1.02 / 0.99 at 4096; 8192 cols 0.87 / 0.99 at 256, 0.90 / 0.85 at 1024, 0.99 / 0.92 at 4096,
# 1.01 / 0.94 at 8192; 16384 cols 11.0 / 12.7 us vs 12.2 / 14.2 at 512 rows, 0.93 / 0.92 at
# 1024, 0.98 / 0.95 at 2048, 1.01 / 0.98 at 4096, 1.03 / 1.03 at 256.
#
# Two-row tiles at 4 warps, one program per tile, above the persistent window at 1024 columns:
# faster than one row per program in all 12 comparisons of two runs ("fwd-multirow" at
# 581b5e0, "fwd_1024" at 0e50d9d): RMS 8192 / 16384 / 32768 rows 10.92 / 19.41 / 35.15 vs 11.18 /
# 19.73 / 35.55 us, then 10.76 / 19.05 / 34.93 vs 11.32 / 19.56 / 35.55; LN 11.72 / 19.91 / 35.72
# vs 12.12 / 20.52 / 36.08, then 11.51 / 19.55 / 35.31 vs 11.81 / 20.48 / 35.89. At 2048 columns
# no tile beat one row per program (16384 rows). Outside the windows (and below 1024 columns,
# not measured) one row per program stays. Dropping the loads' and stores' predicates where the
# tiles cover the matrix exactly measured no faster (0.97-1.01x; run "fwd_unmasked" at 52d0e40,
# reverted).
#
# RMSNorm at 1024 columns: LayerNorm's two-row tiles at 4 warps, up to 6144 rows. Run
# "fwd_1024_window" at 9d70d09 (the benchmark's own build, fresh inputs every time, ten rounds,
# the order rotated; H200, torch 2.11, triton 3.6, bf16, cold L2), tile / looped row /
# torch.compile, us, medians [ranges]: 4096 rows 5.42 [5.28-5.56] / 5.74 [5.67-5.77] / 5.71
# [5.12-6.01]; at 588609e (four rounds) 1024 rows 2.42 / 2.65 / 2.75, 2048 3.16 [3.07-3.45] /
# 3.75 [3.67-3.80] / 3.35; on the same buffers (run "fwd_1024_rows" at c9207bc, three rounds)
# 6144 rows 7.14 [7.09-7.17] / 8.14 [8.13-8.18] / 7.50. From 8192 rows the tile's times (and
# torch.compile's, one warp per row) split into two modes over fresh builds (new inputs each),
# ~10% apart, where the looped row's do not: 8192 rows 9.21-9.47 in 6 rounds, 10.23-10.32 in 4,
# against 9.98-10.39; in the records run of 7699519, a fresh machine, the tile drew 10.9 against
# the looped row's 10.3 (16384 rows: 18.8 each; dev data "fwd_1024_window_record"). Its median
# still led up to 24576 rows (16384: 17.54 against 18.55), but the looped row is never slow, so
# it keeps those row counts.
NORM_FWD_BLOCK_ROW = {
    False: {  # LayerNorm
        512: ((65536, None, (8, 4, 0)),),
        1024: ((2048, 4096, (4, 4, 4)), (4097, None, (2, 4, 0))),
        2048: ((2048, 4096, (2, 8, 4)),),
        4096: ((1024, 2048, (1, 8, 4)),),
        8192: ((256, 4096, (1, 16, 2)),),
        16384: ((512, 2048, (1, 32, 1)),),
    },
    True: {  # RMSNorm
        512: ((16384, None, (4, 4, 0)),),
        1024: ((1, 6144, (2, 4, 0)),),
    },
}


def norm_fwd_block_row_config(n_rows: int, n_cols: int,
                              is_rms: bool = False) -> BlockRowFwdConfig | None:  # fmt: skip
    """The block-row forward's config where it measured faster than one row per program."""
    for lo, hi, tile in NORM_FWD_BLOCK_ROW[bool(is_rms)].get(_next_pow2(n_cols), ()):
        if lo <= n_rows and (hi is None or n_rows <= hi):
            return BlockRowFwdConfig(*tile)
    return None


# Backward. Rows up to this many columns are single-pass (the whole row in one register tile); wider
# rows are two-pass (pass 1 reduces the per-row c1/c2 corrections over column chunks, pass 2 re-
# reads x/dy to write dx and the dweight partials). Measured (H200, 2026-11-29, torch 2.11, triton
# 3.6, bf16, cold L2; benchmarks/data/dev/sweep_launch_configs_h200.json): at N=16384 single-pass with
# one 1 x 16384 tile of 16 warps, 1 program/SM: RMSNorm 30.8 µs at 512 rows (32 warps 31.6);
# LayerNorm 119.8 µs at 2048 rows vs the best two-pass 126.4 (4 x 8192 tile, 16 warps), but
# 43.0 at 512 rows vs two-pass 37.9 (4 x 4096, 16 warps): with few rows the two-pass tiles keep
# more loads in flight. (The first sweep ran single-pass at 32 warps, 164.7 µs at 2048 rows, and
# had switched LayerNorm to two-pass above 8192 columns at every row count.)
NORM_BWD_SINGLE_PASS_MAX_COLS = 16384
# LayerNorm rows wider than this take the two-pass kernel when there are fewer than
# NORM_BWD_LN_SINGLE_PASS_MIN_ROWS rows (measured at 512 and 2048 rows only, see above).
NORM_BWD_LN_FEW_ROWS_MAX_COLS = 8192
NORM_BWD_LN_SINGLE_PASS_MIN_ROWS = 2048

# In this column range the single-pass persistent backward runs _norm_bwd_persistent_static_kernel
# (the row width a compile-time constant) and sums LayerNorm's two row sums in one reduction. Run
# "norm_bwd_ab" at 7101f5b+ab (benchmarks/data/dev/sweep_launch_configs_h200.json; H200, torch 2.11,
# triton 3.6, bf16, cold L2, three rounds, medians, us), base / pair / pair + constant width:
# LayerNorm 32768x8192 517.9 / 513.6 / 501.6, 8192x4096 64.2 / 61.4 / 60.8, 1024x8192 24.1 / 24.1
# / 23.9; RMSNorm 32768x8192 419.5 / 417.4 / 406.3 (bitwise equal, no spills). At 16384 columns,
# where the tile already spills, both cost (run at 4dd23b8+ab, base / pair / constant / both):
# LayerNorm 2048x16384 116.7 / 121.4 / 125.2 / 308.7 us (60 / 68 / 72 / 152 spilled registers).
# One kernel that took the constant width from a constexpr switch (commit e866894, reverted) ran
# LayerNorm 32768x8192 in 521.0 us against 502.8 for the constant-width kernel of 6298661. Below
# 1024 columns (the narrow rows' row path) it was not measured and the runtime width stays.
NORM_BWD_STATIC_COLS = (1024, 8192)


def norm_bwd_static_width(n_cols: int) -> bool:
    """Whether the single-pass persistent backward takes n_cols as a compile-time constant."""
    lo, hi = NORM_BWD_STATIC_COLS
    return lo <= n_cols <= hi


# Single-pass register tile: BLOCK_ROWS x next_pow2(n_cols) with about this many elements. Measured
# (H200, 2026-11-29, torch 2.11, triton 3.6): N=1024 2x1024/4 warps 21.8 µs vs 4x1024/8 warps 23.6
# vs 8x1024 24.4 (RMS 8192x1024); N=2048 1x2048/4 warps 63.5 vs 2x2048/8 warps 65.6 (16384x2048).
NORM_BWD_TILE_ELEMS = 2048
NORM_BWD_MAX_BLOCK_ROWS = 16

# Two-pass tile: rows x column chunk, and its grid. Measured (H200, 2026-11-29, torch 2.11, triton
# 3.6): first sweep 2x4096/16 warps beat 1x8192 and 1x4096 (LN 2048x16384 154.2 µs vs 161.4); second
# sweep 4x4096/16 warps at 2 programs/SM: LN 2048x16384 130.2 µs (vs 160.3 for 2x4096 at 1/SM), LN
# 512x16384 37.8 (vs 45.6).
NORM_BWD_TWO_PASS_BLOCK_ROWS = 4
NORM_BWD_TWO_PASS_PROGRAMS_PER_SM = 2
NORM_BWD_TWO_PASS_BLOCK_COLS = 4096
# Those sweeps ran the 4x4096 two-pass tile at 16 warps. The element ladder below would give it 32:
# the record run at commit 06e714036363 (H200, 2026-11-29) took LN 2048x16384 273.5 µs and
# 512x16384 77.7 µs that way, against the 130.2 / 37.8 µs measured at 16 warps.
NORM_BWD_TWO_PASS_WARPS = 16

# Warps per backward program by tile elements (elements <= key -> warps). Measured (H200,
# 2026-11-29, torch 2.11, triton 3.6): 2048 -> 4, 4096 -> 8 (4096x4096 37.8 µs vs 16 warps 38.2),
# 8192 -> 16 (32768x8192 489.7 vs 32 warps 498.0; second sweep RMS 490.4 vs 497.2, LN 541.7 vs
# 571.9), 16384 -> 16 (second sweep: LN 2048x16384 119.8 vs 32 warps 164.7, RMS 512x16384 30.8
# vs 31.6).
NORM_BWD_WARPS = ((2048, 4), (4096, 8), (1 << 62, 16))

# With the prefetch below, 2 programs per SM (workspace 2 x SMs x N) stayed slower than 4 at
# N <= 2048 whatever the tile (second sweep, "bwd-prefetch-workspace": best 2/SM vs 4/SM, RMS
# 32768x1024 58.7 vs 56.7 µs, 16384x2048 64.3 vs 57.0; LN 32768x1024 70.8 vs 60.7, 16384x2048
# 76.3 vs 61.4), so 4 programs per SM stay there, sharing partial rows in pairs
# (NORM_BWD_PARTIALS_PER_SM below).
# Persistent grid = min(row tiles, programs_per_sm * SMs); (n_cols <= key -> programs per SM). Seed
# 000 found 2 per SM the knee on H100; on the H200 (H200, 2026-11-29, torch 2.11, triton 3.6) narrow
# rows want more programs, wide rows fewer (the reduce kernel grows with the count): N=1024 4/SM
# 21.8 µs vs 2/SM 27.0 vs 8/SM 25.1 (RMS 8192x1024); N=2048 4/SM 63.5 vs 8/SM 69.9 (16384x2048);
# N=4096 2/SM 37.8 vs 4/SM 41.0 (4096x4096); N=8192 1/SM 24.8 vs 2/SM 26.5 (1024x8192) and 489.7 vs
# 490.5 (32768x8192). Two-pass rows: NORM_BWD_TWO_PASS_PROGRAMS_PER_SM below.
NORM_BWD_PROGRAMS_PER_SM = ((2048, 4), (4096, 2), (1 << 62, 1))
# Partial rows per SM the persistent single-pass backward may write (issue 3's bound: workspace
# <= 2 x SMs x N x 4 bytes). Above it, programs share a zeroed partial row in pairs (fp32 atomic
# adds: with exactly two addends into 0 the sum is the same in either order, so the result stays
# bitwise deterministic). Measured (H200, torch 2.11, triton 3.6, 2026-11-29, commit f972972;
# benchmarks/data/dev/sweep_launch_configs_h200.json, "bwd-paired"), 4/SM unpaired -> paired -> 2/SM:
# RMS 8192x1024 19.1 -> 19.6 -> 22.4 us, 32768x1024 56.6 -> 57.2 -> 70.1, 16384x2048 57.0 -> 60.8
# -> 69.7; LN 32768x1024 60.3 -> 62.3 -> 81.1, 16384x2048 60.9 -> 63.8 -> 75.8. The pairs cost
# 0.5-3.9 us (a 1-2.6 us memset of the workspace, atomics at 2048 columns) where halving the
# programs cost 3-21 us; the bound is kept at that price.
NORM_BWD_PARTIALS_PER_SM = 2

# two_stage: rows per program, hence partial rows = ceil(n_rows / this). The workspace grows
# with n_rows by design (the contrast with persistent). Initial guess, not swept; as measured
# (H200, 2026-11-29) two_stage trails persistent most where the workspace is tallest or widest
# (RMS 32768x1024 66.8 vs 63.2 µs, 512x16384 107.5 vs 32.6).
NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM = 32

# atomic: rows per program (1 = one fp32 atomic per column per row, seed 002's design).
NORM_BWD_ATOMIC_BLOCK_ROWS = 1

# Partial-sum reduce kernel tile (rows of partials x columns, warps), by the number of partial
# buffers it sums (1: dweight; 2: dweight and dbias, LayerNorm) and n_cols (<= key). Fast-LLM's
# kernel_2 uses 64 x 8. The first two sweeps (H200, 2026-11-29, torch 2.11, triton 3.6, cold fp32
# partials) chose 128 x 16 / 8 warps (e.g. 264x1024 3.14 µs vs 64x8 3.34 vs 32x32 6.07) and 128 x 8
# at N=1024 (264 partials 2.78 vs 3.21 µs). Run "reduce_tiles" (commit 489fb1c+reduce_tiles,
# benchmarks/data/dev/sweep_launch_configs_h200.json: 28 tiles inside the default backward at the 11
# peer shapes, reduce kernel µs) found wider column strips faster from 2048 columns with two
# buffers and from 8192 with one: LayerNorm 512x16384 128x32/4 warps 4.79 vs 128x16/8 8.45,
# 2048x16384 4.84 vs 8.10, 1024x8192 3.24 vs 4.44, 2048x4096 3.34 vs 3.79, 16384x2048 3.08 vs 3.41
# (but 2.83 vs 2.58 at 1024 columns); RMSNorm 512x16384 16x32/8 warps 3.09 vs 4.04, 2048x16384
# 3.19 vs 4.03, 1024x8192 2.54 vs 2.79 (but 2.87 vs 2.54 at 2048x4096).
NORM_REDUCE_TILES = {
    1: ((1024, (128, 8, 8)), (4096, (128, 16, 8)), (1 << 62, (16, 32, 8))),
    2: ((1024, (128, 8, 8)), (1 << 62, (128, 32, 4))),
}


def norm_reduce_config(n_cols: int, n_buffers: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, warps) of the reduce kernel summing n_buffers partial workspaces."""
    return _ladder(NORM_REDUCE_TILES[n_buffers], n_cols)


# Software-pipelining depth of the persistent row-tile loop (tl.range num_stages). Measured (H200,
# 2026-11-29, torch 2.11, triton 3.6): 2 stages was slower than 1 on every shape tried (e.g.
# 4096x4096 40.0 vs 37.8 µs).
NORM_BWD_LOOP_STAGES = 1

# Register prefetch of the next row tile in the single-pass persistent loop (n_cols <= key ->
# on/off): two tiles' loads in flight per program instead of one. Second sweep (H200, 2026-11-29,
# torch 2.11, triton 3.6; benchmarks/data/dev/sweep_launch_configs_h200.json, "bwd-prefetch"), default
# tiles, off -> on: RMS 32768x8192 496.4 -> 420.6 µs, 8192x4096 66.2 -> 57.3, 32768x1024 63.7 ->
# 57.0, 1024x8192 25.2 -> 21.1; LN 32768x8192 547.1 -> 521.4, 16384x2048 68.2 -> 60.9: faster on
# all 19 single-pass shapes up to 8192 columns. At 16384 columns the 1 x 16384 tile spills:
# RMS 512x16384 31.4 -> 228.5 µs (16 warps), 39.5 at 32 warps.
NORM_BWD_PREFETCH = ((8192, True), (1 << 62, False))

NORM_BWD_STRATEGIES = ("atomic", "two_stage", "persistent")


@dataclass(frozen=True)
class NormBwdConfig:
    strategy: str  # "atomic" | "two_stage" | "persistent"
    two_pass: bool
    block_rows: int
    block_cols: int
    num_warps: int
    programs_per_sm: int  # persistent only
    rows_per_program: int  # two_stage only
    loop_stages: int
    prefetch: bool  # persistent single-pass only
    paired_partials: bool  # persistent single-pass only: two programs per partial row


def _ladder(table, key: int):
    """The value of the first (limit, value) entry with key <= limit (else the last one's)."""
    return next((v for limit, v in table if key <= limit), table[-1][1])


def norm_bwd_auto_strategy(n_rows: int, n_cols: int) -> str:
    """strategy="auto": persistent on every shape. Measured (H200, 2026-11-29, torch 2.11,
    triton 3.6, the 11 peer shapes, bf16, backward device time): persistent was the fastest of
    the three everywhere, e.g. RMS 32768x1024 63.2 µs vs two_stage 66.8 vs atomic 439.5;
    RMS 512x16384 32.6 vs 107.5 vs 44.6."""
    return "persistent"


def norm_bwd_single_pass_max_cols(is_rms: bool, n_rows: int) -> int:
    """Widest row the default backward takes in one pass (wider rows are two-pass)."""
    if is_rms or n_rows >= NORM_BWD_LN_SINGLE_PASS_MIN_ROWS:
        return NORM_BWD_SINGLE_PASS_MAX_COLS
    return NORM_BWD_LN_FEW_ROWS_MAX_COLS


def norm_bwd_config(
    strategy: str,
    n_rows: int,
    n_cols: int,
    *,
    is_rms: bool = True,
    two_pass: bool | None = None,
    block_rows: int | None = None,
    block_cols: int | None = None,
    num_warps: int | None = None,
    programs_per_sm: int | None = None,
    loop_stages: int | None = None,
    prefetch: bool | None = None,
    paired_partials: bool | None = None,
) -> NormBwdConfig:
    """Backward launch config for ``strategy`` (not "auto"); any keyword overrides the heuristic."""
    if two_pass is None:
        two_pass = n_cols > norm_bwd_single_pass_max_cols(is_rms, n_rows)
    if block_cols is None:
        block_cols = NORM_BWD_TWO_PASS_BLOCK_COLS if two_pass else _next_pow2(n_cols)
        block_cols = min(block_cols, _next_pow2(n_cols))
    elif not two_pass and block_cols < n_cols:
        raise ValueError(
            f"single-pass backward needs block_cols >= n_cols ({block_cols} < {n_cols})"
        )
    if block_rows is None:
        if strategy == "atomic":
            block_rows = NORM_BWD_ATOMIC_BLOCK_ROWS
        elif two_pass:
            block_rows = NORM_BWD_TWO_PASS_BLOCK_ROWS
        else:
            block_rows = max(1, min(NORM_BWD_TILE_ELEMS // block_cols, NORM_BWD_MAX_BLOCK_ROWS))
    block_rows, block_cols = _next_pow2(block_rows), _next_pow2(block_cols)
    if num_warps is None:
        num_warps = (NORM_BWD_TWO_PASS_WARPS if two_pass and strategy == "persistent"
                     else _ladder(NORM_BWD_WARPS, block_rows * block_cols))  # fmt: skip
    if programs_per_sm is None:
        programs_per_sm = (NORM_BWD_TWO_PASS_PROGRAMS_PER_SM if two_pass
                           else _ladder(NORM_BWD_PROGRAMS_PER_SM, n_cols))  # fmt: skip
    rows_per_program = max(NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM, block_rows)
    rows_per_program = (rows_per_program + block_rows - 1) // block_rows * block_rows
    return NormBwdConfig(
        strategy=strategy,
        two_pass=bool(two_pass),
        block_rows=block_rows,
        block_cols=block_cols,
        num_warps=num_warps,
        programs_per_sm=programs_per_sm,
        rows_per_program=rows_per_program,
        loop_stages=NORM_BWD_LOOP_STAGES if loop_stages is None else loop_stages,
        prefetch=bool(_ladder(NORM_BWD_PREFETCH, n_cols) if prefetch is None else prefetch),
        paired_partials=bool(
            (programs_per_sm > NORM_BWD_PARTIALS_PER_SM and strategy == "persistent"
             and not two_pass) if paired_partials is None else paired_partials
        ),  # fmt: skip
    )


# ============================================================================================
# Block-row (narrow) norms
# ============================================================================================


# Measured in benchmarks/data/dev/narrow_tuning_h200.json ("H200 run" below): NVIDIA H200, 132 SMs,
# torch 2.11.0+cu130, triton 3.6.0, 2026-11-29, 7,864,320 rows, bf16, LayerNorm unless noted,
# CUDA-event time per call with L2 flushed before each; copy bandwidth 4274 GB/s.

# Widest row the block-row kernels take. H200 run, forward vs the row path: 33.6x at 16 columns,
# 2.66x at 256, 1.48x at 512; backward: 512 was not measured with the tuned backward below and
# its first (column-sum) backward lost 2.8x to the row path there, so 512 stays out.
BLOCK_ROW_MAX_COLS = 256
# layout="auto" takes block-row only from this many rows. H200 run, 16 columns, forward +
# backward per call: 1024 rows 20.9 vs 16.0 us (row path), 4096 rows 25.9 vs 19.4 us, 16384 rows
# 22.3 vs 29.7 us: the backward's extra kernels (partial sums, casts) cost more than they save
# below ~16k rows. (That run's backward was the untuned column-sum variant; at 256 columns it lost
# at every row count, so the threshold at 256 columns is not yet measured with the tuned one.)
BLOCK_ROW_MIN_ROWS = 16384
# Forward tile: BLOCK_ROWS x next_pow2(n_cols), at most this many elements and rows (the rule for
# widths outside BLOCK_ROW_FWD_TILES and for the tuning scripts' overrides). H200 run: 4096-element
# tiles beat 2048 (501 vs 546 us at 64 columns, 1984 vs 2273 us at 256, at 4-8 warps); at 16
# columns 128- or 256-row tiles measured 146 / 144 us against 155 us for 64 rows in the same
# pass, but the 64-row default took 141 us in another pass, so the difference is within noise
# and seed 003's 64-row cap stays. Second sweep (benchmarks/data/dev/sweep_launch_configs_h200.json,
# device time, same card and versions): 8192-element tiles at 256 columns (32 rows) 1920 us vs
# 1945 / 2011 us for 4096 at 4 / 8 warps (LayerNorm; RMSNorm 1928-1936 either way); at 128
# columns ("narrow128") 980 vs 1001 us (LayerNorm, 8 warps), RMSNorm 976 vs 972 (a tie).
BLOCK_ROW_TILE_ELEMS = 8192
BLOCK_ROW_MAX_ROWS = 64
# Forward warps under that rule: one per this many tile elements, clamped to [4, 8]. Second
# sweep: 2048-element tiles (32 columns) at 4 warps 253 / 246 us vs 8 warps 282 / 254 us
# (LayerNorm / RMSNorm); 4096 (64 columns) at 8 warps 491 us vs 4 warps 497 (RMSNorm).
BLOCK_ROW_FWD_ELEMS_PER_WARP = 512
BLOCK_ROW_MIN_WARPS = 4
BLOCK_ROW_MAX_WARPS = 8
# Forward tile per norm (is_rms) and next_pow2(n_cols): (rows, warps); narrower rows take the 16
# entry. Third sweep (sweep_launch_configs_h200.json, run "narrow_fwd_tiles" at 6e9b8f9: tile
# heights 16-256 x 1-8 warps, with normlab's previous default and torch.compile in the same run,
# two interleaved rounds, us per call): the first run above (CUDA-event timing, that commit's
# kernel) had 2048-element tiles losing at 64 columns and no sweep tried fewer than 4 warps;
# measured again, smaller tiles win at 64-256 columns, as in torch.compile's own kernel (32 rows x
# 2 warps at 64 columns):
#   64 cols:  RMS 32 x 4 482.4 / 479.2 vs previous 490.6 / 490.3 (torch.compile 481.6 / 482.5);
#             LN 32 x 4 491.9 / 491.9 vs 498.5 / 498.4 (compile 492.7 / 493.0).
#   128 cols: RMS 16 x 4 948.1 / 948.7 vs 977.3 / 977.2 (compile 950.4 / 951.6);
#             LN 16 x 2 962.2 / 962.1 vs 979.5 / 980.1 (compile 983.5 / 982.2).
#   256 cols: (16-64 rows) RMS 32 x 4 1936.8 / 1934.0 vs 1944.4 / 1943.3 (compile 1918.1 /
#             1917.7); LN 32 x 8 1918.5 / 1919.4 (compile 1950.6 / 1949.7). Shorter tiles (run
#             "fwd_wide_tiles" at 94531ef): RMS 8 x 4 1892.0 / 1891.8 vs default 32 x 4 1946.6 /
#             1946.8 (compile 1926.9 / 1927.2); LN 8 x 2 1902.5 / 1900.6 vs 32 x 8 1943.6 / 1942.5
#             (compile 1959.2 / 1958.9).
#   16 cols:  LN 64 x 2 136.7 / 136.6 vs 64 x 4 140.6 / 140.5 (compile 136.3 / 136.9); RMS keeps
#             64 x 4, 127.7 / 129.1 (compile 128.4 / 128.5).
# 32 columns (not in that sweep) keep the rule's tiles.
BLOCK_ROW_FWD_TILES = {
    True: {16: (64, 4), 32: (64, 4), 64: (32, 4), 128: (16, 4), 256: (8, 4)},
    False: {16: (64, 2), 32: (64, 4), 64: (32, 4), 128: (16, 2), 256: (8, 2)},
}
# Backward tiles, warps and persistent programs per SM. Swept in benchmarks/data/dev/
# narrow_bwd_sweep_h200.json (scripts/tune_narrow_bwd.py; H200, torch 2.11, triton 3.6,
# 2026-11-29, commit 06e714036363, 7,864,320 rows, bf16, tile {2048, 4096} x warps {4, 8} x
# programs/SM {2, 4, 8, 16}): 2048-element tiles, 8 warps, 4 programs per SM is best or within
# 2% of best at every width for both norms: LayerNorm 400 / 776 / 1540 / 3113 us at 32 / 64 /
# 128 / 256 columns, RMSNorm 381 / 740 / 1473 / 2964 us, against 489 / 951 / 1876 / 3094 and
# 465 / 913 / 1795 / 3029 us for the previous defaults (2048 x 4 warps x 4 below 128 columns,
# 4096 x 8 warps x 2 from 128). Two programs per SM starve the loads (up to 2x slower at 4 warps).
BLOCK_ROW_BWD_TILE_ELEMS = 2048
BLOCK_ROW_BWD_WARPS = 8
BLOCK_ROW_BWD_PROGRAMS_PER_SM = 4
# Backward dγ/dβ accumulation: whole fp32 tiles reduced once at the end (True) or column sums
# per tile (False). H200 run: tiles 269 / 958 / 3862 us at 16 / 64 / 256 columns, column sums
# 413 / 1552 / 18465 us (a cross-warp shared-memory reduction per tile).
BLOCK_ROW_BWD_ACC_TILE = True
# Backward register prefetch of the next row tile. H200 run with tile accumulators: 266 / 1267 /
# 4951 us with it against 269 / 958 / 3862 us without (16 / 64 / 256 columns): the extra
# registers cost more occupancy than the overlap gains.
BLOCK_ROW_BWD_PREFETCH = False


# Widest row (per norm, is_rms) whose block-row forward stores no statistics: it writes y only,
# and the backward recomputes mean and rstd from the x tile it reads anyway, with the forward's
# fp32 arithmetic (y bitwise the same). The statistics are 4 (RMSNorm) or 8 (LayerNorm) bytes a
# row against 64 for x and y at 16 bf16 columns. Measured (H200, torch 2.11, triton 3.6, bf16,
# 7,864,320 rows; benchmarks/data/dev/sweep_launch_configs_h200.json, runs "narrow_recompute" at
# 6168a46, three interleaved rounds, and "narrow_recompute_tiles" at 847d200, two), forward
# without / with the stores, medians of three, us: RMSNorm 119.5 / 128.4 at 16 columns, 237.5 /
# 245.4 at 32, 472.7 / 480.1 at 64, 936.6 / 946.9 at 128, 1878.0 / 1885.0 at 256 (torch.compile
# 127.9 / 246.9 / 482.9 / 950.9 / 1917.7); LayerNorm 119.7 / 136.6, 236.6 / 252.5, 470.1 / 489.7,
# 942.0 / 959.7, 1881.8 / 1897.1 (torch.compile 150.8 / 256.4 / 492.2 / 981.7 / 1947.4).
# Backward recomputing / reading them: RMSNorm at the default tile 224.8 / 227.8, 368.2 / 373.0,
# 732.9 / 733.0, 1470.7 / 1469.5, 2955.7 / 2953.3 (ties or better); LayerNorm, each at its best
# tile, 220.4 / 246.1 at 16, 382.6 / 389.2 at 32, 770.3 / 763.5 at 64 (+7 against the forward's
# -20), but 1573.7 / 1532.2 at 128 and 3189.2 / 3101.7 at 256 (+42 and +87 against -18 and -15):
# LayerNorm's two more row reductions (the mean, then the variance) cost more than the stores
# save in wide tiles, so it keeps the stores there.
BLOCK_ROW_RECOMPUTE_MAX_COLS = {True: 256, False: 64}
# The recomputing backward's tile where it differs from the default (LayerNorm, by
# next_pow2(n_cols); overrides of block_row_bwd_config), from the same "narrow_recompute_tiles"
# run: 16 columns with the prefetch 220.4 / 220.6 us against 237.8 / 237.9 without; 32 columns
# at 4 warps with the prefetch 382.6 / 382.9 against 527.5 at the default 8 warps without.
BLOCK_ROW_BWD_RECOMPUTE_TILES = {
    16: {"prefetch": True},
    32: {"num_warps": 4, "prefetch": True},
}


def block_row_recompute_stats(n_cols: int, is_rms: bool) -> bool:
    """Does the block-row path recompute mean/rstd in the backward (the forward storing none)?"""
    return n_cols <= BLOCK_ROW_RECOMPUTE_MAX_COLS[bool(is_rms)]


class BlockRowFwdConfig(NamedTuple):
    block_rows: int
    num_warps: int
    programs_per_sm: int = 0  # 0: one program per row tile; else a persistent grid (prefetch)


class BlockRowBwdConfig(NamedTuple):
    block_rows: int
    num_warps: int
    programs_per_sm: int
    acc_tile: bool
    prefetch: bool


def use_block_row(n_rows: int, n_cols: int) -> bool:
    """layout="auto": pack many narrow rows per program (True) or one row per program (False)?"""
    return n_cols <= BLOCK_ROW_MAX_COLS and n_rows >= BLOCK_ROW_MIN_ROWS


def block_row_fwd_config(
    n_cols: int,
    is_rms: bool,
    *,
    tile_elems: int | None = None,
    max_rows: int | None = None,
    num_warps: int | None = None,
) -> BlockRowFwdConfig:
    """Block-row forward launch config: the measured tile of BLOCK_ROW_FWD_TILES, or the element
    rule where ``tile_elems``/``max_rows`` override it (tuning scripts) or the width has no entry."""
    block_cols = _next_pow2(n_cols)
    tile = BLOCK_ROW_FWD_TILES[bool(is_rms)].get(max(block_cols, 16))
    if tile is not None and tile_elems is None and max_rows is None:
        return BlockRowFwdConfig(tile[0], tile[1] if num_warps is None else num_warps)
    tile_elems = BLOCK_ROW_TILE_ELEMS if tile_elems is None else tile_elems
    max_rows = BLOCK_ROW_MAX_ROWS if max_rows is None else max_rows
    block_rows = max(1, min(max_rows, tile_elems // block_cols))
    if num_warps is None:
        warps = (block_rows * block_cols) // BLOCK_ROW_FWD_ELEMS_PER_WARP
        num_warps = max(BLOCK_ROW_MIN_WARPS, min(BLOCK_ROW_MAX_WARPS, warps))
    return BlockRowFwdConfig(block_rows, num_warps)


def block_row_bwd_config(
    n_cols: int,
    *,
    tile_elems: int | None = None,
    max_rows: int | None = None,
    num_warps: int | None = None,
    programs_per_sm: int | None = None,
    acc_tile: bool | None = None,
    prefetch: bool | None = None,
) -> BlockRowBwdConfig:
    """Persistent block-row backward launch config; keywords override the heuristic. (The
    backward that recomputes the statistics takes block_row_bwd_recompute_config.)"""
    tile_elems = BLOCK_ROW_BWD_TILE_ELEMS if tile_elems is None else tile_elems
    num_warps = BLOCK_ROW_BWD_WARPS if num_warps is None else num_warps
    programs_per_sm = BLOCK_ROW_BWD_PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    max_rows = BLOCK_ROW_MAX_ROWS if max_rows is None else max_rows
    block_rows = max(1, min(max_rows, tile_elems // _next_pow2(n_cols)))
    return BlockRowBwdConfig(
        block_rows=block_rows,
        num_warps=num_warps,
        programs_per_sm=programs_per_sm,
        acc_tile=BLOCK_ROW_BWD_ACC_TILE if acc_tile is None else acc_tile,
        prefetch=BLOCK_ROW_BWD_PREFETCH if prefetch is None else prefetch,
    )


def block_row_bwd_recompute_config(n_cols: int, is_rms: bool) -> BlockRowBwdConfig:
    """The block-row backward's config when it recomputes mean/rstd from x."""
    overrides = {} if is_rms else BLOCK_ROW_BWD_RECOMPUTE_TILES.get(max(16, _next_pow2(n_cols)), {})
    return block_row_bwd_config(n_cols, **overrides)


# ============================================================================================
# Entropy losses (reverse KL, soft / label cross-entropy)
# ============================================================================================

# Column-tile caps a caller may pass as ``block_cap`` (seed 004's option A sweep). Any other power
# of two in [ENTROPY_MIN_BLOCK, ENTROPY_MAX_BLOCK] is accepted too (tiny caps let the CPU tests
# exercise multi-tile paths cheaply); these four are the ones measured.
ENTROPY_BLOCK_CAPS = (4096, 8192, 16384, 32768)
ENTROPY_MIN_BLOCK = 16
ENTROPY_MAX_BLOCK = 65536

# Measurements cited below: benchmarks/data/dev/entropy_tuning_h200.json -- NVIDIA H200, torch
# 2.11.0+cu130, triton 3.6.0, 2026-11-29; 4096 tokens x V, bf16, forward+backward device time
# (torch.profiler kernel sum, L2 flushed before each call), scripts/gpu_check_entropy.py.

# Fused kernel (one program per row): warps per column tile, reverse KL / soft CE. At 4096, 4
# warps beat 8/16/32: reverse KL 376 / 419 / 445 / 756 us at V=32768 and 1539 / 1729 / 1820 /
# 3109 us at V=131072 (fewer warps per CTA = cheaper per-tile cross-warp reductions). At 16384,
# 16 warps beat 4/8/32 (377 vs 1750 / 544 / 396 us at 32768). 8192: 16 best at 32768 (434 vs
# 484 / 451 / 504 us), 4 best at 131072 (1726 vs 1892 / 1866 / 2109): kept 16. 32768: only 32
# measured (1005 us at 32768: the seed-004 occupancy cliff, 2.7x slower than the 16384 cap).
# Second sweep, with both tile maxima in one reduction (benchmarks/data/dev/
# sweep_launch_configs_h200.json, "losses"): 4096 at 2 / 4 / 8 warps 432 / 344 / 378 us (reverse
# KL, 32768); 2048 (4 warps, the fallback below) 350 us.
ENTROPY_FUSED_WARPS = {4096: 4, 8192: 16, 16384: 16, 32768: 32, 65536: 32}
# Label CE (one input), second sweep: cap 4096 at 4 warps 215 / 831 / 973 us at V = 32768 /
# 131072 / 151936 against 217 / 851 / 1001 at 8 warps (50257: 436 vs 415); 2048 / 8192 / 16384 /
# 32768 caps slower at every V but 8192 at 32768 (215 us).
ENTROPY_FUSED_WARPS_LABEL = {4096: 4, 8192: 16, 16384: 16, 32768: 32, 65536: 32}

# Split form: the stats kernel (one program per row, online max/sum-exp) and the backward kernel
# (2-D grid: row x column tile, purely elementwise given the row statistics) each have their own
# tile. Stats 2048 / 4 warps + backward 4096 / 8: reverse KL 376 us at 32768, 1513 us at 131072,
# vs 395 / 1590 us with stats 4096 / 8 and 435 / 1715 us with stats 8192 / 16. The backward tile
# barely matters (395.0 / 395.2 / 395.3 us at 32768 for 8192 / 4096 / 2048 with stats 4096).
ENTROPY_STATS_BLOCK = 2048
ENTROPY_STATS_WARPS = 4
ENTROPY_BACKWARD_BLOCK = 4096
ENTROPY_BACKWARD_WARPS = 8
# Chunked form: a row is cut into chunks of entropy_chunk_tiles(tile) column tiles (block_cap
# wide), one program per chunk, meeting at a per-row counter (kernels/entropy.py). Swept (H200,
# torch 2.11, triton 3.6, 2026-11-29, commit f972972, 4096 rows; sweep_launch_configs_h200.json,
# "chunked"): longer chunks win although one tile per chunk never re-reads a logit, because
# each program's chain of round trips (ticket, loads, publish, wait, merge) is paid per chunk:
# reverse KL V=131072, tile 2048 at 4 warps, 1 / 2 / 4 tiles per chunk: 1914 / 1513 / 1327 us,
# 8 / 16 tiles (commit ed5d1ff): 1334 / 1385; 8 warps slower everywhere (1644 at 4 tiles).
# Label CE V=131072, tile 4096: 888 / 744 / 699 us at 1 / 2 / 4 tiles, 844 / 821 at 8 / 16.
ENTROPY_CHUNKED_TILES = 4
# Tile 1024 (lane statistics; run "chunked-lanes-unaligned" at c949859+lanes, two rounds, us):
# 6 / 8 / 10 / 12 tiles per chunk, reverse KL V = 50257: 483.1-484.3 / 488.0 / 484.1-485.0 /
# 490.6-490.8; 32001: 319.5 / 320.6-321.0 / 322.7-323.0 / 322.1-322.6; soft CE 50257:
# 487.3-487.8 / 492.4-492.8 / 487.8-488.0 / 492.1-493.1. Tile 1024 at 4 tiles: 497.1.
ENTROPY_CHUNKED_TILES_BY_BLOCK = {1024: 6}
ENTROPY_CHUNKED_WARPS = 4
# Registers per thread of the chunked kernel by tile (a launch cap; other tiles: the compiler's
# choice). At tile 2048 the compiler takes 72 for reverse KL (7 programs of 4 warps per SM); 64
# fits 8, without spills: 1305.5 vs 1319.9 us at V = 131072, 661.7 vs 668.3 at 65536; 48 spills
# (1338 us) (sweep_launch_configs_h200.json, "chunked-occupancy", commit 16b07d0). The cap on
# the 4096 tile spills: reverse KL chunked4096 463 us at 32768 in the records of f4508b9. Waiting
# on volatile loads instead of acquire atomics was slower (1369 vs 1317 us; at 16b07d0 only).
# With lane statistics (ENTROPY_LANE) the cap spills at V = 50257, whose aligned frames take more
# registers: 16 spills at 64, 6 at 72, 2 at 80; reverse KL 519.3-520.0 / 489.7-490.6 /
# 492.6-492.8 us (run "chunked-lanes-unaligned"), but 0 spills at 50256 (64: 470.9 us, none:
# 473.3, 80: 486.5; run "chunked-lanes"). Unaligned vocabularies take tile 1024 instead (40
# registers, no cap, no spills; ENTROPY_AUTO).
ENTROPY_CHUNKED_MAXNREG = {2048: 64}
# Lanes of the running statistics (kernels/entropy.py, _online_tile): tiles up to
# ENTROPY_LANE_MAX_BLOCK keep a max / sum-exp per ENTROPY_LANE columns, reduced within a thread,
# and fold the lanes once per row or chunk; wider tiles are one lane (a cross-warp reduction per
# tile). H200, 4096 rows, bf16, forward+backward, us, whole-tile lanes -> 8-column lanes
# (dev/sweep_launch_configs_h200.json, run "entropy" at c949859+ab, variants base / lanes):
#   tile 2048   reverse KL chunked 336.1 -> 304.4 (V = 32768), 1267.5 -> 1154.0 (131072), 515.3
#               -> 520.3 (50257); fused 326.3 -> 300.8, 1369.4 -> 1265.9, 529.6 -> 503.6; split
#               (stats tile 2048) 387.4 -> 350.2, 1585.7 -> 1420.2, 592.9 -> 547.8
#   tile 4096   reverse KL fused 321.1 -> 340.6, chunked 384.1 -> 480.6 (32768): 4 lanes per
#               thread at 4 warps (16-column lanes, 2 per thread: 331.4 / 350.8)
ENTROPY_LANE = 8
ENTROPY_LANE_MAX_BLOCK = 2048
# In-place grad_output rescale after a fused forward, on a grid of PROGRAMS_PER_SM x SMs that
# strides rows; a scalar grad_output == 1 makes every program exit after one load: 1.1-1.6 us at
# 4096 rows against 3.5 us for one program per row (H200, entropy check at 16b07d0). The
# scaling path itself is not tuned.
ENTROPY_RESCALE_BLOCK = 4096
ENTROPY_RESCALE_WARPS = 8
ENTROPY_RESCALE_PROGRAMS_PER_SM = 2

# Frames of unaligned rows (kernels/entropy.py, _row_frames): a row that does not start on 16
# bytes is read from the ENTROPY_FRAME_BYTES boundary at or before it (16 bytes or more; a
# multiple of 16), so that whole tiles are aligned vector loads, and with 32 bytes or more on
# whole 32-byte sectors. H200, 4096 x 50257 bf16 (dev/sweep_launch_configs_h200.json, run
# "frame_bytes" at bdb8c58), 16 / 32 / 64 / 128-byte frames, us: reverse KL fused2048 532.2 /
# 530.6 / 529.3 / 526.1, split 646.3 / 643.6 / 641.6 / 639.8; soft CE fused2048 582.9 / 579.7 /
# 578.3 / 574.3; label CE fused2048 345.6 / 338.8 / 336.4 / 331.7, fused4096 361.0 / 350.4 /
# 348.9 / 347.5; the chunked form within 1% either way.
ENTROPY_FRAME_BYTES = 128

# form="auto": per loss, (form, cap) for four classes of V (entropy_auto): "even" (V <=
# ENTROPY_AUTO_TILE or V % ENTROPY_AUTO_TILE == 0), "ragged" (otherwise, V % 16 == 0), "unaligned"
# (V % 16 != 0: contiguous rows start off 16-byte boundaries and the kernels run aligned frames)
# and "wide" (V >= ENTROPY_AUTO_WIDE_COLS). Measured in the second sweep
# (us, fused caps at the warps above; "split" with the split tiles above; before the eviction
# hints of kernels/entropy.py, which took the fused forms a further 1-6% down):
#   reverse KL   V=32768: fused4096 344, fused2048 350, fused16384 369, split 397; 131072: 1387,
#                1405, 1509, 1560. Ragged V: 50257: fused2048 714 < split 770 < fused4096 803;
#                151936: fused4096 1638 ~ fused2048 1649 < split 1805.
#   soft CE      32768: fused2048 340, fused4096 350, split 380; 131072: 1367, 1400, 1485;
#                50257: split 709 < fused2048 737; 151936: fused2048 1602 < split 1714 (fused2048
#                is taken for ragged V too: 4% behind at 50257, 7% ahead at 151936).
#   label CE     fused4096 best or within 5% at every V: 215 / 831 / 415-436 / 973 us at 32768 /
#                131072 / 50257 / 151936 (split 231 / 886 / 451 / 999).
# V <= 4096 is not measured: fused there is a single register-resident tile (one read).
# Wide vocabularies (V >= ENTROPY_AUTO_WIDE_COLS) take the last entry. Since the chunked
# kernel's 64-register cap at tile 2048 (ENTROPY_CHUNKED_MAXNREG) it wins at every V but 32768
# (records of f4508b9, us; "x" marks the entry taken then; the 50257 entries are now those of
# the aligned frames below):
#   reverse KL   32768: fused4096 316.6 x, chunked2048 340.6; 65536: chunked2048 641.3 x, fused4096
#                662.3; 131072: 1272.3 x vs 1360.4; 50257: chunked2048 626.0 x, fused2048 721.0;
#                151936: chunked2048 1511.4 x, fused4096 1613.6.
#   soft CE      32768: fused2048 322.9 x, chunked2048 333.9; 65536: chunked2048 633.0 x, fused2048
#                655.7; 131072: 1250.3 x vs 1333.7; 50257: 647.7 x vs split 697.4; 151936: 1476.9 x
#                vs 1565.6.
#   label CE     32768: fused4096 205.9 x, chunked4096 215.2; 65536: chunked4096 405.5 x, fused4096
#                413.1; 131072: 766.3 x vs 841.7, chunked2048 931.5; 50257: chunked2048 408.6 x,
#                chunked4096 445.1; 151936: chunked4096 911.9 x, chunked2048 1108.4.
# Unaligned vocabularies (50257) run the kernels' aligned frames (kernels/entropy.py,
# _row_frames); ragged but aligned ones (50256) do not need them. At V = 50257 and 50256
# (dev/sweep_launch_configs_h200.json, the last "78ac7b1+ab" run and the one before, us;
# "x" = taken then):
#   reverse KL   50257: fused2048 533.0 x, chunked2048 551.4, fused4096 600.3;
#                50256: chunked2048 511.7 x, fused2048 529.8, fused4096 534.8
#   soft CE      50257: chunked2048 543.5 x, fused2048 582.6; 50256: chunked2048 500.9 x,
#                fused2048 518.4
#   label CE     50257: fused2048 345.0 x, fused4096 361.9, chunked2048 365.9;
#                50256: fused4096 321.5 x, fused2048 336.2, chunked2048 345.1
# (At 50257 before the frames, every access 2-byte: 598-736, 564-642 and 360-466 us.)
# Since 128-byte frames and whole last tiles of inner chunks (kernels/entropy.py, _grad_pass;
# run "entropy" at bdb8c58+ab, variant "entropy_whole2", two rounds, us):
#   reverse KL   50257: chunked2048 519.6-522.1 x, fused2048 530.0-534.2, split 592.9
#   soft CE      50257: fused2048 515.9-516.1 x, chunked2048 519.3-523.0, split 579.7-583.6
#   label CE     50257: fused4096 331.2-332.2 x, fused2048 349.8-350.9, chunked2048 355.4-356.2
# (the chunked form's gain is its inner chunks' whole last tiles, 552 -> 520 for reverse KL; the
# fused and split kernels almost never take the new branch, and their changes, both ways, are
# the compiler's: the same kernels without it measured fused2048 525-528 / 576 / 331-332 and
# split 638 / 607-609 us). The same branches for aligned rows measured slower for the forms
# "auto" takes there (reverse KL fused4096 at 32768 319 -> 341 us; run "entropy" at 3ee70cd+ab):
# not adopted.
# The entries now: since lane statistics (ENTROPY_LANE; runs "entropy" (base / lanes_t),
# "chunked-lanes" and "chunked-lanes-unaligned" at c949859, us; "x" = taken):
#   reverse KL   32768: fused2048 300.5-301.7 x, chunked2048 305.8-307.8, fused4096 322.7;
#                50256: chunked2048 470.9 x, fused2048 493.3; 50257: chunked1024 483.1-484.3 x,
#                fused2048 502.9-504.1, chunked2048 519.3-520.0; 65536: chunked2048 587.2 x,
#                fused2048 614.8; 131072: 1155.1 x vs 1259.8; 151936: 1338.3 x vs 1476.4.
#   soft CE      32768: fused2048 308.6-311.0 x, chunked2048 306.4-307.6 (within 1.5%, and no
#                workspace); 50256: chunked2048 467.5 x, fused2048 504.6; 50257: chunked1024
#                487.3-487.8 x, chunked2048 511.1-512.3, fused2048 516.2; 65536: chunked2048
#                585.3 x vs fused2048 620.4; 131072: 1165.7 x vs 1264.5; 151936: 1330.4 x vs 1480.3.
#   label CE     32768: fused4096 194.7 x, fused2048 198.5, chunked4096 212.1; 50257: fused2048
#                325.0-325.8 x, fused4096 329.1, chunked1024 324.0-324.5 (at 10 tiles per chunk
#                314.7-315.3, but 212.4 against fused2048's 202.5 at V = 32001); 65536:
#                chunked4096 385.3 x, fused4096 399.5; 131072: 754.5 x vs 820.4.
ENTROPY_AUTO_TILE = 4096
ENTROPY_AUTO_WIDE_COLS = 65536
ENTROPY_AUTO_CLASSES = ("even", "ragged", "unaligned", "wide")
ENTROPY_AUTO = {
    "reverse_kl": (("fused", 2048), ("chunked", 2048), ("chunked", 1024), ("chunked", 2048)),
    "soft_cross_entropy": (("fused", 2048), ("chunked", 2048), ("chunked", 1024),
                           ("chunked", 2048)),
    "cross_entropy": (("fused", 4096), ("fused", 4096), ("fused", 2048), ("chunked", 4096)),
}


def entropy_chunk_tiles(block: int) -> int:
    """Tiles per chunk of the chunked form at a column tile of ``block`` elements."""
    return ENTROPY_CHUNKED_TILES_BY_BLOCK.get(block, ENTROPY_CHUNKED_TILES)


def entropy_lane(block: int) -> int:
    """Columns per lane of the running statistics for a column tile of ``block`` elements."""
    return min(ENTROPY_LANE, block) if block <= ENTROPY_LANE_MAX_BLOCK else block


def entropy_num_warps(block: int, table: dict[int, int] | None = None) -> int:
    """Warps for a column tile of ``block`` elements (fused table by default)."""
    table = ENTROPY_FUSED_WARPS if table is None else table
    if block in table:
        return table[block]
    return max(1, min(32, block // 512))  # tiny test-only tiles: ~16 elements per thread


def entropy_auto(loss: str, n_cols: int, distributed: bool) -> tuple[str, int]:
    """form="auto": (form, block_cap) for ``loss`` over ``n_cols`` local vocabulary columns.

    Tensor parallel always takes the split form: the row statistics must be all-reduced between
    the stats pass and the gradient pass.
    """
    form, cap = ENTROPY_AUTO[loss][ENTROPY_AUTO_CLASSES.index(entropy_vocab_class(n_cols))]
    return ("split" if distributed else form), cap


def entropy_vocab_class(n_cols: int) -> str:
    """The class of ENTROPY_AUTO_CLASSES that a vocabulary of ``n_cols`` columns falls in."""
    if n_cols >= ENTROPY_AUTO_WIDE_COLS:
        return "wide"
    if n_cols <= ENTROPY_AUTO_TILE or n_cols % ENTROPY_AUTO_TILE == 0:
        return "even"
    return "ragged" if n_cols % 16 == 0 else "unaligned"
