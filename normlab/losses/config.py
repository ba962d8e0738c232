"""Launch heuristics and dispatch thresholds, each beside the measurement that justifies it.

Imports only the standard library (and torch/triton for types); kernels read from here,
never the reverse. Recorded measurements live in ``normlab/data/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


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
