"""The norms' launch planner: which kernel runs a call, and with what tile, in one place.

``plan(...)`` takes the call (RMSNorm or LayerNorm, M rows of N columns) and the user's
``strategy``/``layout`` and returns a frozen ``NormPlan``: the forward's kernel family and tile,
and the backward's, decided together (whether the forward stores its row statistics depends on
which backward will run). The launchers add what depends on the tensors themselves (the SM count
for persistent grids, the row-alignment load hint). Every rule below is a named quantity with a
one-line reason; the measurements behind each rule are in ``docs/planner.md`` (which links the
dated notes of ``docs/notes/`` and the runs of ``benchmarks/data/``).

The lower-level ``*_config`` functions build one kernel's launch config and take keyword
overrides; the benchmarks sweep those. Nothing here imports a kernel. On a GPU the plans are
memoized (a training loop repeats a few shapes; ``memoize``).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import NamedTuple

from normlab import _runtime
from normlab._host import cdiv, next_pow2, prev_pow2


def _ladder(table, key: int):
    """The value of the first (limit, value) entry with key <= limit (else the last one's)."""
    return next((v for limit, v in table if key <= limit), table[-1][1])


# ---- named quantities --------------------------------------------------------------------------

VECTOR_BYTES = 16  # one 128-bit load per thread: the widest global access


def warps_with_elements(num_warps: int, tile_elems: int) -> int:
    """``num_warps`` cut so that every thread holds an element of the tile, one warp at least."""
    return max(1, min(num_warps, tile_elems // 32))


def row_align(row_stride: int, element_size: int) -> int:
    """Elements every row start is known to be a multiple of, up to one 16-byte vector.

    Triton only learns "divisible by 16" of an int argument, so a row stride of 200 bf16
    elements (400 bytes, every row 16-byte aligned) would otherwise give 2-byte loads. The
    kernels take it with the width (the gcd of both) and hint both (tiles.known_multiple)."""
    vector = VECTOR_BYTES // element_size
    align = 1
    while align < vector and row_stride % (2 * align) == 0:
        align *= 2
    return align


INT32_OFFSET_LIMIT = 2**31  # a row offset at or past this takes int64 arithmetic


def row_offsets_int64(max_rows: int, *row_strides: int) -> bool:
    """Whether row * stride, for a row index below ``max_rows`` and any of ``row_strides`` (with
    the width among them), can reach int32's limit. Only then do the forward kernels index rows
    in int64: an int32 offset is one multiply-add an element, an int64 one a wide multiply-add
    and a carry (docs/planner.md#row-offsets-in-int32). The block-row backward takes int32 only
    at tiny widths (block_row.bwd_offsets_int64)."""
    return max_rows * max(row_strides) >= INT32_OFFSET_LIMIT


# The kernels take the row-alignment hint (tiles.known_multiple). NORMLAB_NORM_ROW_ALIGN=0
# launches them without it, as they ran before it worked (an A/B switch; plans do not change).
ROW_ALIGN_HINT = os.environ.get("NORMLAB_NORM_ROW_ALIGN", "1") != "0"


def kernel_row_align(row_stride: int, element_size: int) -> int:
    """The ROW_ALIGN a kernel is launched with: row_align, or 1 with the hint off."""
    return row_align(row_stride, element_size) if ROW_ALIGN_HINT else 1


def params_apart(row_align: int, element_size: int, values_per_thread: int,
                 n_params: int = 1) -> bool:  # fmt: skip
    """Load the parameter row of a one-row forward in a layout of its own
    (tiles.load_param_f32): rows that are not vector aligned, whose loads w's alignment would
    otherwise split into strided ones, whose row leaves a thread registers for w in a second
    layout (NORM_FWD_EARLY_MAX_PER_THREAD row values a thread at most), and one parameter row
    (``n_params``: w and b count two; NORM_FWD_PARAMS_APART_MAX_ROWS)."""
    return (row_align < VECTOR_BYTES // element_size
            and values_per_thread <= NORM_FWD_EARLY_MAX_PER_THREAD
            and n_params <= NORM_FWD_PARAMS_APART_MAX_ROWS)  # fmt: skip


# One parameter row apart beats strided loads; two (LayerNorm's w and b) cost more than they
# save (docs/planner.md#parameters-in-a-layout-of-their-own). NORMLAB_NORM_PARAMS_APART=0: never.
NORM_FWD_PARAMS_APART_MAX_ROWS = 1
PARAMS_APART = os.environ.get("NORMLAB_NORM_PARAMS_APART", "1") != "0"


# An odd-width row loads element by element, too few bytes in flight to cover DRAM latency; the
# one-block forward loads it in vectors from its first 16-byte boundary on, the head and tail
# alone (row._shifted_row; docs/planner.md#shifted-rows-forward). w and b are read at shifted
# columns (element loads, or shifted copies: below). y's rows must start as far into a vector as
# x's. NORMLAB_NORM_SHIFT=0: never (an A/B switch).
NORM_FWD_SHIFT = os.environ.get("NORMLAB_NORM_SHIFT", "1") != "0"
NORM_FWD_SHIFT_MIN_VECTORS = 8  # a row of fewer vectors is mostly head and tail
# In a decode batch the head's and tail's loads and sums add to a latency-bound call; a row of at
# least this many elements loaded element by element (a request per element a lane, whatever its
# size) costs its program more than they do (docs/planner.md#shifted-rows-forward).
NORM_FWD_DECODE_SHIFT_MIN_ELEMS = 16384
# A shifted row's w and b as vectors, from copies that one small kernel shifts into place
# (row._shift_params_kernel), in calls whose x takes longer to read than several such launches
# (docs/planner.md#shifted-parameter-copies). NORMLAB_NORM_SHIFTED_PARAMS=0: never.
NORM_FWD_SHIFTED_PARAMS = os.environ.get("NORMLAB_NORM_SHIFTED_PARAMS", "1") != "0"
NORM_FWD_SHIFTED_PARAMS_MIN_BYTES = 8 << 20  # of x: about 2.5 µs of reads at copy bandwidth
SHIFT_PARAMS_BLOCK = 1024  # columns a program copies: 8 bf16 a thread at 4 warps
SHIFT_PARAMS_WARPS = 4


def shifted_params(x_bytes: int) -> bool:
    """A shifted row's w/b from their shifted copies (NORM_FWD_SHIFTED_PARAMS_MIN_BYTES)."""
    return NORM_FWD_SHIFTED_PARAMS and x_bytes >= NORM_FWD_SHIFTED_PARAMS_MIN_BYTES


def shift_possible(vec: int, n_cols: int, strides: tuple[int, ...]) -> bool:
    """Can rows be split at their first 16-byte boundary (``vec`` elements)? A row holds a vector,
    and every tensor's row stride agrees modulo it, so each row's tensors start as far into one."""
    return n_cols >= vec and all((s - strides[0]) % vec == 0 for s in strides)


def shift_vec(row_align: int, element_size: int, n_rows: int, n_cols: int, sm_count: int,
              x_row_stride: int, y_row_stride: int, force: bool = False) -> int:
    """The vector (elements) of ``row._shifted_row`` for a one-block forward, or 0. It can run
    where a row holds a vector and y's rows start as far into a vector as x's; it is taken
    (``force``: wherever it can run) for rows loaded element by element (``row_align`` 1), at
    least NORM_FWD_SHIFT_MIN_VECTORS vectors wide, more than a decode batch unless a row holds
    NORM_FWD_DECODE_SHIFT_MIN_ELEMS."""
    vec = VECTOR_BYTES // element_size
    possible = shift_possible(vec, n_cols, (x_row_stride, y_row_stride))
    wanted = (NORM_FWD_SHIFT and row_align == 1 and n_cols >= NORM_FWD_SHIFT_MIN_VECTORS * vec
              and (not decode_rows(n_rows, n_cols, sm_count)
                   or n_cols >= NORM_FWD_DECODE_SHIFT_MIN_ELEMS))  # fmt: skip
    return vec if possible and (force or wanted) else 0


# The single-pass backward's one-row tiles past its compile-time width (NORM_BWD_STATIC_COLS)
# split the same way, on 8 warps, aligned or not: one program a SM walks them without a prefetch,
# one row's latency after another (row._shifted_bwd_rows; docs/planner.md#shifted-rows-backward).
# The grid is a multiple of the vector, so that a program's rows all start as far into one; it is
# rounded down where that adds at most NORM_BWD_SHIFT_MAX_ROW_GROWTH to the rows a program walks.
# NORMLAB_NORM_BWD_SHIFT=0: never (an A/B switch).
NORM_BWD_SHIFT = os.environ.get("NORMLAB_NORM_BWD_SHIFT", "1") != "0"
NORM_BWD_SHIFT_MIN_COLS = 8192  # wider rows only: the runtime-width single pass
NORM_BWD_SHIFT_WARPS = 8
NORM_BWD_SHIFT_MAX_ROW_GROWTH = 1 / 16  # 132 programs -> 128: 3% more rows each
# A row padded to the next power of two leaves threads idle that each row still waits on; two
# body blocks pad it less (docs/planner.md#two-body-blocks). NORMLAB_NORM_BWD_TWO_BLOCKS=0: one.
NORM_BWD_TWO_BODY_BLOCKS = os.environ.get("NORMLAB_NORM_BWD_TWO_BLOCKS", "1") != "0"


# RMSNorm's vector-aligned rows whose shifted tile would hold more than
# NORM_BWD_SHIFT_MAX_PER_THREAD elements a thread (one 16384-column block past 12288 columns)
# spill it: 240 B a thread with the fused add's dh. They take the unshifted single pass in
# Liger-Kernel's order instead (tiles.bwd_tile_dw_first, w loaded every row), which holds x̂, w·dy
# and dγ across the row sum: on NORM_BWD_LIGER_ORDER_WARPS warps 16 B of spill with dh, none
# without. LayerNorm's dβ and second row sum ran slower in that order
# (docs/planner.md#liger-kernels-order).
# NORMLAB_NORM_BWD_LIGER_ORDER=0: never (an A/B switch).
NORM_BWD_LIGER_ORDER = os.environ.get("NORMLAB_NORM_BWD_LIGER_ORDER", "1") != "0"
NORM_BWD_SHIFT_MAX_PER_THREAD = 48  # 12288 columns on 8 warps: x, dy, dh, w, dγ in 255 registers
NORM_BWD_LIGER_ORDER_WARPS = 16  # 32 elements a thread at 16384 columns: 3 x 32 registers live


def bwd_liger_order(n_cols: int, is_rms: bool, row_align: int, element_size: int) -> bool:
    """Does the single-pass backward of one-row tiles run in Liger-Kernel's order, unshifted
    (above)? RMSNorm, rows vector aligned (``row_align``), the shifted tile past
    NORM_BWD_SHIFT_MAX_PER_THREAD elements a thread."""
    vec = VECTOR_BYTES // element_size
    per_thread = sum(bwd_body_blocks(n_cols, vec)) // (32 * NORM_BWD_SHIFT_WARPS)
    return (NORM_BWD_LIGER_ORDER and is_rms and row_align == vec
            and per_thread > NORM_BWD_SHIFT_MAX_PER_THREAD)  # fmt: skip


def bwd_shift_vec(element_size: int, n_cols: int, strides: tuple[int, ...],
                  force: bool = False) -> int:
    """The vector (elements) of the shifted backward for one-row tiles, or 0 (the grid is
    ``bwd_shift_programs``'s). It can run where ``shift_possible`` over the row strides of x, dy,
    dx and dh; it is taken (``force``: wherever it can run) for rows wider than
    NORM_BWD_SHIFT_MIN_COLS."""
    vec = VECTOR_BYTES // element_size
    possible = shift_possible(vec, n_cols, strides)
    wanted = NORM_BWD_SHIFT and n_cols > NORM_BWD_SHIFT_MIN_COLS
    return vec if possible and (force or wanted) else 0


def bwd_body_blocks(n_cols: int, vec: int) -> tuple[int, int]:
    """The shifted backward's body blocks (the first; the second or 0) for rows of ``vec``-element
    vectors: the power of two under the width and one over the rest, where the two pad the row
    less than one block of next_pow2(n_cols) (12288: 8192 + 4096, no padding; 9693: 8192 + 2048,
    6%, where one block pads 69%); the first alone where the rest is under a vector (the tail
    holds it); else one block (NORM_BWD_TWO_BODY_BLOCKS off: always)."""
    one, first = next_pow2(n_cols), prev_pow2(n_cols)
    if not NORM_BWD_TWO_BODY_BLOCKS:
        return one, 0
    rest = n_cols - first
    if rest < vec:
        return first, 0
    second = next_pow2(rest)
    return (first, second) if first + second < one else (one, 0)


def bwd_shift_programs(n_programs: int, n_rows: int, vec: int, force: bool = False) -> int:
    """The shifted backward's grid: ``n_programs`` rounded down to a multiple of ``vec``, or 0
    where that leaves none or (unless ``force``) adds more than NORM_BWD_SHIFT_MAX_ROW_GROWTH to
    the rows a program walks."""
    programs = n_programs // vec * vec
    if not programs:
        return 0
    rows, planned = -(-n_rows // programs), -(-n_rows // n_programs)
    return programs if force or rows <= planned * (1 + NORM_BWD_SHIFT_MAX_ROW_GROWTH) else 0


def waves(n_programs: int, programs_per_sm: int, sm_count: int) -> float:
    """How many times the grid fills the card (below 1, SMs idle)."""
    return n_programs / max(1, programs_per_sm * sm_count)


# ---- rows wider than a warp's lanes -------------------------------------------------------------

# An unaligned row spreads over several warps, every row sum crossing them through shared memory
# and a barrier; one warp a program keeps each row inside its warp
# (docs/planner.md#one-warp-a-program).
ONE_WARP_MAX_COLS = 1024  # the widest row one warp takes: 32 elements a lane
ONE_WARP_FWD_TILE_ELEMS = 1024  # the block-row forward's tile: 32 elements a lane
ONE_WARP_BWD_TILE_ELEMS = 512  # the backward's (x, dy, two fp32 accumulators): 16 a lane
MAX_WARPS_PER_SM = 64  # resident warps an SM holds (sm_80, sm_90)
ONE_WARP_PROGRAMS_PER_SM = 32  # the most programs an SM holds: 32 of its 64 warps


def one_warp_rows(n_cols: int, row_align: int, element_size: int) -> bool:
    """Run one warp a program: the rows are not vector aligned (``row_align``, the launch's
    ROW_ALIGN), a row needs more than a warp's 32 lanes, and one warp holds it."""
    block_cols = next_pow2(n_cols)
    return (row_align < VECTOR_BYTES // element_size and block_cols // row_align > 32
            and block_cols <= ONE_WARP_MAX_COLS)  # fmt: skip


def one_warp_contiguous(n_cols: int, element_size: int = 2) -> bool:
    """``one_warp_rows`` for contiguous rows: their alignment is the width's."""
    return one_warp_rows(n_cols, kernel_row_align(n_cols, element_size), element_size)


# ---- forward: one row per program --------------------------------------------------------------

# The widest row held in registers and read once: 64 fp32 values a thread at 16 warps
# (docs/planner.md#the-forwards-block).
NORM_FWD_MAX_BLOCK = 32768
NORM_FWD_WARPS = ((1024, 2), (2048, 4), (8192, 8), (32768, 16))  # ~16 B per thread per load
# A row of up to 256 padded columns (8 values a lane) runs one row a program on one warp: its sums
# stay inside the warp, with no shared-memory exchange and barrier between warps
# (docs/planner.md#narrow-rows-on-one-warp). NORMLAB_NORM_FWD_ONE_WARP=0: NORM_FWD_WARPS' warps.
NORM_FWD_ONE_WARP_MAX_BLOCK = 256
NORM_FWD_ONE_WARP = os.environ.get("NORMLAB_NORM_FWD_ONE_WARP", "1") != "0"
# Up to 8 row values a thread, w and b load with x at any row count: loaded after the row's sums
# they are a second round trip each program waits on, and holding them costs a few registers,
# not a program an SM (docs/planner.md#the-parameters-with-x). NORMLAB_NORM_FWD_EARLY_ROWS=0:
# only decode batches load them early.
NORM_FWD_EARLY_ANY_ROWS_MAX_PER_THREAD = 8
NORM_FWD_EARLY_ANY_ROWS = os.environ.get("NORMLAB_NORM_FWD_EARLY_ROWS", "1") != "0"
# Rows wider than one block are walked twice (sums, then normalize from L2) in small chunks of
# one 16-byte vector a thread, which leave registers for several rows in flight per SM.
NORM_FWD_WIDE_CHUNK = 2048
NORM_FWD_WIDE_WARPS = 8
NORM_FWD_MAX_PAD_WASTE = 0.125  # the masked tail a row's chunks may add (split-row sums)
NORM_FWD_AUTOTUNE_BLOCKS = (512, 1024, 2048, 4096, 8192)  # the opt-in NORMLAB_AUTOTUNE space
NORM_FWD_AUTOTUNE_WARPS = (4, 8, 16)
# RMSNorm reads a wide row twice (the second time from L2) in 16-byte-per-thread chunks: fewer
# registers per program, so more programs per SM hide the DRAM latency (width -> chunk, warps;
# docs/planner.md#rmsnorms-looped-row).
NORM_FWD_RMS_LOOPED = {1024: (512, 2), 2048: (1024, 4), 4096: (2048, 8), 8192: (4096, 16),
                       16384: (4096, 16)}  # fmt: skip
# The rows the looped programs hold between their two reads (resident programs x row bytes) stay
# within this share of the L2, which y's stores and the next rows' first reads pass through too;
# past it the second read goes to DRAM, so the row is one block read once.
# NORMLAB_NORM_FWD_LOOP_L2=0: the L2 is not asked.
NORM_FWD_LOOP_L2_SHARE = 0.5
NORM_FWD_LOOP_L2 = os.environ.get("NORMLAB_NORM_FWD_LOOP_L2", "1") != "0"
# At 8192 columns, grids of 4-8 rows per SM fit one wave of 8-warp programs but not of 16-warp ones.
NORM_FWD_RMS_ONE_WAVE = {8192: (4, 8, (4096, 8))}
# fp32 RMSNorm rows of 513-1024 columns run one row a program on one warp: the row's one sum
# stays inside the warp; LayerNorm's two were slower so (docs/planner.md#fp32-rmsnorm-on-one-warp).
NORM_FWD_RMS_FP32_ONE_WARP_COLS = ONE_WARP_MAX_COLS  # the padded width it covers


def rms_fp32_one_warp(n_cols: int, is_rms: bool, element_size: int) -> bool:
    """NORM_FWD_RMS_FP32_ONE_WARP_COLS: an fp32 RMSNorm row of that padded width."""
    return (is_rms and element_size == 4
            and next_pow2(n_cols) == NORM_FWD_RMS_FP32_ONE_WARP_COLS)  # fmt: skip


# Decode batches: up to these rows per SM (by padded width) the card is latency-bound, so a row
# is held whole in registers, w/b load beside x and no rows share a tile
# (docs/planner.md#decode-batches).
NORM_FWD_DECODE_ROWS_PER_SM = ((2048, 4), (1 << 62, 1))
# w/b beside x hold a second row in registers: only up to this many row values a thread.
NORM_FWD_EARLY_MAX_PER_THREAD = 32
# Up to one row a SM, a row's loads are all the latency there is: a row of up to 2048 columns is
# spread to at most 8 values a thread, fewer loads a thread to wait on
# (docs/planner.md#decode-rows-on-more-warps). NORMLAB_DECODE_WARPS=0: NORM_FWD_WARPS' warps.
NORM_FWD_DECODE_MAX_PER_THREAD = 8
NORM_FWD_DECODE_SPREAD_MAX_BLOCK = 2048
NORM_FWD_DECODE_WARPS = os.environ.get("NORMLAB_DECODE_WARPS", "1") != "0"


# ---- few wide rows: each row split over several programs (norms/split_row.py) -------------

SPLIT_ROW_FWD_MIN_COLS = 16384  # up to here a few rows run one program each, one launch
# A row that fits one block is read once in one launch; split, it is read twice over two (its
# sums, then the normalize reading it again from L2). That pays only while one program a row
# would leave at least three quarters of the SMs idle (docs/planner.md#split-rows).
SPLIT_ROW_FWD_MAX_ROWS_PER_SM = 0.25
SPLIT_ROW_BWD_MIN_COLS = 8192  # past the compile-time-width single pass, one program per row tile
SPLIT_ROW_FWD_COLS = 4096  # forward chunk: 8 KB of bf16 per program, one load per thread-vector
SPLIT_ROW_BWD_CHUNKS = (2048, 1024, 512, 256, 128)  # the dx kernel's column chunks, widest first
SPLIT_ROW_SUMS_CHUNKS = (4096, 2048, 1024, 512, 256, 128)  # the sums kernel's, widest first
SPLIT_ROW_ELEMS_PER_THREAD = 8  # one 16-byte bf16 vector per thread per load


class SplitRowChunk(NamedTuple):
    cols: int  # columns per program (a power of two)
    num_warps: int


def split_chunk(cols: int) -> SplitRowChunk:
    """A split-row chunk of ``cols`` columns with its warps (8 elements per thread, 1-16)."""
    warps = cols // (32 * SPLIT_ROW_ELEMS_PER_THREAD)
    return SplitRowChunk(cols, max(1, min(16, warps)))


def split_row_fwd(n_rows: int, n_cols: int, sm_count: int) -> bool:
    """Does the forward split its rows? Fewer rows than SMs, each wider than
    SPLIT_ROW_FWD_MIN_COLS (one program a row would leave SMs idle while each busy one walks its
    row), and either wider than one block (one program would walk its row twice anyway) or at
    most SPLIT_ROW_FWD_MAX_ROWS_PER_SM a SM."""
    if not (0 < n_rows < sm_count and n_cols > SPLIT_ROW_FWD_MIN_COLS):
        return False
    return n_cols > NORM_FWD_MAX_BLOCK or n_rows <= SPLIT_ROW_FWD_MAX_ROWS_PER_SM * sm_count


def split_row_fwd_chunk(n_cols: int) -> SplitRowChunk:
    """The forward's chunk: a fixed width, so the grid grows with the row."""
    return split_chunk(min(SPLIT_ROW_FWD_COLS, next_pow2(n_cols)))


# A (column chunk, row group) grid: enough programs for every SM, each group's fp32 partial row
# (8 B a column) at most 1/24 of its rows' traffic (x, dy read and dx written: 6 B a column each).
SPLIT_ROW_BWD_PROGRAMS_PER_SM = 8
SPLIT_ROW_BWD_MIN_GROUP_ROWS = 32
# Two programs per SM at least, each walking its chunk's rows one latency at a time
# (docs/planner.md#split-rows).
SPLIT_ROW_BWD_MIN_PROGRAMS_PER_SM = 2


def split_row_bwd_min_cols(is_rms: bool, n_rows: int, sm_count: int) -> int:
    """Rows wider than this take the split-row backward: under one row per SM any row past the
    single pass's compile-time width (one program per row would leave SMs idle); with more rows,
    rows the single pass cannot hold with a prefetched next row: LayerNorm past that width (its
    two row sums per row leave the single pass latency-bound), RMSNorm past one register tile."""
    if n_rows < sm_count or not is_rms:
        return SPLIT_ROW_BWD_MIN_COLS
    return NORM_BWD_SINGLE_PASS_MAX_COLS


def split_row_bwd_chunk(n_cols: int, sm_count: int, n_rows: int = 1) -> SplitRowChunk:
    """The dx kernel's chunk: the widest whose grid (column chunks x row groups of
    SPLIT_ROW_BWD_MIN_GROUP_ROWS) gives every SM SPLIT_ROW_BWD_MIN_PROGRAMS_PER_SM programs;
    else the narrowest."""
    groups = -(-n_rows // SPLIT_ROW_BWD_MIN_GROUP_ROWS)
    for cols in SPLIT_ROW_BWD_CHUNKS:
        if -(-n_cols // cols) * groups >= SPLIT_ROW_BWD_MIN_PROGRAMS_PER_SM * sm_count:
            return split_chunk(cols)
    return split_chunk(SPLIT_ROW_BWD_CHUNKS[-1])


def split_row_sums_chunk(n_cols: int, n_rows: int, sm_count: int) -> SplitRowChunk:
    """The sums kernel's chunk (grid rows x chunks): the widest whose masked tail wastes at most
    NORM_FWD_MAX_PAD_WASTE of the row and whose grid still gives every SM a program."""
    for cols in SPLIT_ROW_SUMS_CHUNKS:
        n_chunks = -(-n_cols // cols)
        if (n_chunks * cols <= n_cols * (1 + NORM_FWD_MAX_PAD_WASTE)
                and n_chunks * n_rows >= sm_count):  # fmt: skip
            return split_chunk(cols)
    return split_chunk(SPLIT_ROW_SUMS_CHUNKS[-1])


def split_row_bwd_group_rows(n_rows: int, n_chunks: int, block_rows: int, sm_count: int,
                             programs_per_sm: int | None = None) -> int:  # fmt: skip
    """Rows each backward program walks: the grid reaches SPLIT_ROW_BWD_PROGRAMS_PER_SM per SM
    (``programs_per_sm`` overrides it), no group under SPLIT_ROW_BWD_MIN_GROUP_ROWS rows (n_rows
    or fewer: one group, no partials)."""
    per_sm = SPLIT_ROW_BWD_PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    groups = max(1, -(-per_sm * sm_count // n_chunks))
    rows = max(-(-n_rows // groups), SPLIT_ROW_BWD_MIN_GROUP_ROWS)
    return -(-rows // block_rows) * block_rows


class SplitRowBwdPlan(NamedTuple):
    chunk: SplitRowChunk  # the dx kernel's column chunk
    sums: SplitRowChunk  # the partial sums' column chunk
    rows_per_group: int  # rows each dx program walks (n_rows or more: no partials)


def split_row_bwd_plan(n_rows: int, n_cols: int, sm_count: int) -> SplitRowBwdPlan:
    """The split-row backward of one call: its dx chunk, sums chunk and row groups."""
    chunk = split_row_bwd_chunk(n_cols, sm_count, n_rows)
    tile = split_row_bwd_tile(n_rows, chunk.cols)
    rows = split_row_bwd_group_rows(n_rows, -(-n_cols // chunk.cols), tile.rows, sm_count)
    return SplitRowBwdPlan(chunk, split_row_sums_chunk(n_cols, n_rows, sm_count), rows)


class SplitRowBwdTile(NamedTuple):
    rows: int  # rows per step of the dx kernel
    num_warps: int


def split_row_bwd_tile(n_rows: int, chunk_cols: int) -> SplitRowBwdTile:
    """The dx kernel steps NORM_BWD_TILE_ELEMS elements at a time (rows x chunk), so several
    rows' loads are in flight; 8 elements per thread."""
    rows = min(next_pow2(n_rows), max(1, NORM_BWD_TILE_ELEMS // chunk_cols))
    warps = rows * chunk_cols // (32 * SPLIT_ROW_ELEMS_PER_THREAD)
    return SplitRowBwdTile(rows, max(1, min(16, warps)))


@dataclass(frozen=True)
class NormFwdConfig:
    block_size: int  # columns per chunk (>= n_cols means one register-resident block)
    num_warps: int
    early_params: bool = False  # few rows: load w/b with x, before the row's sums


def decode_rows(n_rows: int, n_cols: int, sm_count: int) -> bool:
    """A decode batch (NORM_FWD_DECODE_ROWS_PER_SM): one block a row, parameters early, no tile."""
    return n_rows <= _ladder(NORM_FWD_DECODE_ROWS_PER_SM, next_pow2(n_cols)) * sm_count


def looped_rows_fit_l2(n_rows: int, n_cols: int, num_warps: int, element_size: int,
                       sm_count: int, l2_bytes: int) -> bool:
    """Do the rows a looped forward holds between its two reads fit NORM_FWD_LOOP_L2_SHARE of the
    L2? Resident rows: the programs of ``num_warps`` warps every SM holds, at most ``n_rows``."""
    per_sm = min(MAX_WARPS_PER_SM // num_warps, ONE_WARP_PROGRAMS_PER_SM)
    held = min(n_rows, per_sm * sm_count) * n_cols * element_size
    return held <= NORM_FWD_LOOP_L2_SHARE * l2_bytes


def norm_fwd_config(n_cols: int, is_rms: bool = False, n_rows: int | None = None,
                    sm_count: int | None = None, fused_add: bool = False,
                    element_size: int = 2,
                    l2_bytes: int | None = None) -> NormFwdConfig:  # fmt: skip
    """The one-row-per-program forward's chunk and warps (``n_rows``/``sm_count`` left out: the
    row-count rules are ignored). ``fused_add``: the row is h = x + residual, which a looped
    forward would write in its first pass and read back in its second, so it stays one block.
    ``element_size``: bytes per element of x. ``l2_bytes`` (left out or 0: not asked): the
    looped row only where its re-read rows fit the L2 (``looped_rows_fit_l2``)."""
    if n_cols > NORM_FWD_MAX_BLOCK:  # (the last chunk's padding is under 2048 / 32768 = 6%)
        return NormFwdConfig(block_size=NORM_FWD_WIDE_CHUNK, num_warps=NORM_FWD_WIDE_WARPS)
    block = min(next_pow2(n_cols), NORM_FWD_MAX_BLOCK)
    warps = _ladder(NORM_FWD_WARPS, block)
    if NORM_FWD_ONE_WARP and block <= NORM_FWD_ONE_WARP_MAX_BLOCK:
        warps = 1
    few_rows = n_rows is not None and sm_count and decode_rows(n_rows, n_cols, sm_count)
    if (few_rows and NORM_FWD_DECODE_WARPS and n_rows <= sm_count
            and block <= NORM_FWD_DECODE_SPREAD_MAX_BLOCK):  # fmt: skip
        warps = max(warps, block // (32 * NORM_FWD_DECODE_MAX_PER_THREAD))
    if rms_fp32_one_warp(n_cols, is_rms, element_size) and not few_rows and not fused_add:
        return NormFwdConfig(block_size=block, num_warps=1)
    looped = (NORM_FWD_RMS_LOOPED.get(next_pow2(n_cols)) if is_rms and not few_rows
              and not fused_add else None)  # fmt: skip
    if looped is not None and n_cols % looped[0]:
        looped = None  # a ragged last chunk is masked and re-read: one block reads the row once
    wave = NORM_FWD_RMS_ONE_WAVE.get(next_pow2(n_cols))
    if looped is not None and wave and n_rows is not None and sm_count:
        lo, hi, cfg = wave
        if lo * sm_count < n_rows <= hi * sm_count:
            looped = cfg
    if (looped is not None and NORM_FWD_LOOP_L2 and l2_bytes and n_rows and sm_count
            and not looped_rows_fit_l2(n_rows, n_cols, looped[1], element_size, sm_count,
                                       l2_bytes)):  # fmt: skip
        looped = None  # the second read would come from DRAM: one block reads the row once
    if looped is None:
        per_thread = block // (32 * warps)
        early = ((few_rows and per_thread <= NORM_FWD_EARLY_MAX_PER_THREAD)
                 or (NORM_FWD_EARLY_ANY_ROWS
                     and per_thread <= NORM_FWD_EARLY_ANY_ROWS_MAX_PER_THREAD))  # fmt: skip
        return NormFwdConfig(block_size=block, num_warps=warps, early_params=bool(early))
    return NormFwdConfig(*looped)


# ---- forward: block-row tiles ------------------------------------------------------------------

BLOCK_ROW_MAX_COLS = 256  # the widest row the narrow block-row kernels take (layout="block_row")
BLOCK_ROW_MIN_ROWS = 16384  # below this, narrow rows fill under ~4 waves of one-row programs
BLOCK_ROW_TINY_COLS = 16  # under 32 bytes of bf16 a one-row program is all launch and latency
BLOCK_ROW_TINY_TILE_ELEMS = 2048  # the measured tiles' size (32-256 columns), rows however many
# The fewest elements a shrunk tiny-width tile keeps (1 KB of bf16): below it a program's time is
# its launch and one DRAM round trip, so fewer, fuller programs finish first
# (docs/planner.md#tiny-widths).
BLOCK_ROW_TINY_MIN_TILE_ELEMS = 512
BLOCK_ROW_TILE_ELEMS = 8192  # elements per forward tile (rows x padded width)
BLOCK_ROW_MAX_ROWS = 64  # rows per tile: beyond this the per-row statistics cost registers
BLOCK_ROW_FWD_ELEMS_PER_WARP = 512  # 16 elements per thread
BLOCK_ROW_MIN_WARPS = 4
BLOCK_ROW_MAX_WARPS = 8
# Measured tiles (rows, warps) per padded width; other widths follow the element rule.
BLOCK_ROW_FWD_TILES = {
    True: {16: (64, 4), 32: (64, 4), 64: (32, 4), 128: (16, 4), 256: (8, 4)},
    False: {16: (64, 2), 32: (64, 4), 64: (32, 4), 128: (16, 2), 256: (8, 2)},
}
# Where the wider forward's row tiles and a persistent, prefetching grid measured faster than
# one row per program: (padded width) -> ((min rows, max rows | None, (rows, warps, per SM)),).
# LayerNorm at 1024-16384 columns when the rows fill only a few waves; 512-column short tiles
# (docs/planner.md#wide-row-tiles).
# The grid holds its prefetched next tile as loaded; an fp32 tile holds twice the registers, so
# fp32 rows take the tile without the grid.
NORM_FWD_PERSISTENT_MAX_ELEM_BYTES = 2
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


# Rows of one column: each is its own reduction, so with unit row strides the forward is
# pointwise over the M elements in 16-byte vectors (a [rows, 1] tile loads 1 element per row).
POINTWISE_FWD_WARPS = 4
POINTWISE_FWD_VECTORS = 2  # 16-byte loads per thread: two in flight amortize a program's launch
# elements per program: every thread's bf16 vectors (2048; fp32 rows take twice the loads)
POINTWISE_FWD_BLOCK = VECTOR_BYTES // 2 * POINTWISE_FWD_VECTORS * 32 * POINTWISE_FWD_WARPS
POINTWISE_FWD_MIN_BLOCK = VECTOR_BYTES // 2 * 32  # one warp, one bf16 vector per thread


class PointwiseFwdConfig(NamedTuple):
    block: int  # rows (elements) per program
    num_warps: int


def pointwise_fwd_config(n_rows: int | None = None,
                         sm_count: int | None = None) -> PointwiseFwdConfig:  # fmt: skip
    """POINTWISE_FWD_BLOCK elements a program; with too few rows for one program per SM the
    block halves (its warps with it) down to one warp's vectors, so more SMs share the latency
    (docs/planner.md#rows-of-one-column)."""
    block = POINTWISE_FWD_BLOCK
    if n_rows is not None and sm_count:
        while block > POINTWISE_FWD_MIN_BLOCK and -(-n_rows // block) < sm_count:
            block //= 2
    warps = max(1, POINTWISE_FWD_WARPS * block // POINTWISE_FWD_BLOCK)
    return PointwiseFwdConfig(block, warps)


class BlockRowFwdConfig(NamedTuple):
    block_rows: int
    num_warps: int
    programs_per_sm: int = 0  # 0: one program per row tile; else a persistent grid (prefetch)
    pointwise: PointwiseFwdConfig | None = None  # N = 1: taken where every row stride is 1


def norm_fwd_block_row_config(n_rows: int, n_cols: int, is_rms: bool = False,
                              aligned: bool = True,
                              elem_size: int = 2) -> BlockRowFwdConfig | None:  # fmt: skip
    """The wide-row block-row forward's tile where it measured faster than one row per program.
    The tiles were measured on 16-byte aligned rows (vector loads); rows that are not run one
    row per program (docs/planner.md#wide-row-tiles). Rows of ``elem_size`` bytes above
    NORM_FWD_PERSISTENT_MAX_ELEM_BYTES take the tile without its persistent grid."""
    if not aligned:
        return None
    for lo, hi, tile in NORM_FWD_BLOCK_ROW[bool(is_rms)].get(next_pow2(n_cols), ()):
        if lo <= n_rows and (hi is None or n_rows <= hi):
            cfg = BlockRowFwdConfig(*tile)
            if elem_size > NORM_FWD_PERSISTENT_MAX_ELEM_BYTES:
                cfg = cfg._replace(programs_per_sm=0)
            return cfg
    return None


def block_row_fwd_config(n_cols: int, is_rms: bool, *, tile_elems: int | None = None,
                         max_rows: int | None = None, num_warps: int | None = None,
                         n_rows: int | None = None, sm_count: int | None = None,
                         one_warp: bool = False) -> BlockRowFwdConfig:  # fmt: skip
    """Narrow block-row forward tile: the measured one, the tiny-width rule, or the element rule
    (overrides given, or a width with no measured tile). ``n_rows``/``sm_count``: tiny-width
    tiles shrink until the grid fills one wave, to BLOCK_ROW_TINY_MIN_TILE_ELEMS at least. One
    column: also the pointwise kernel's config (``POINTWISE_FWD_*``), which the launcher takes
    where the rows are contiguous.
    ``one_warp`` (``one_warp_rows``): one warp a tile of ONE_WARP_FWD_TILE_ELEMS."""
    block_cols = next_pow2(n_cols)
    if one_warp and tile_elems is None and max_rows is None and num_warps is None:
        return BlockRowFwdConfig(max(1, ONE_WARP_FWD_TILE_ELEMS // block_cols), 1)
    if n_cols < BLOCK_ROW_TINY_COLS and tile_elems is None and max_rows is None:
        rows = BLOCK_ROW_TINY_TILE_ELEMS // block_cols
        if n_rows is not None and sm_count:
            rows = min(rows, max(prev_pow2(n_rows // sm_count),
                                 BLOCK_ROW_TINY_MIN_TILE_ELEMS // block_cols))  # fmt: skip
        # a row of one column is its own reduction: vector loads across rows, no row tile
        pointwise = pointwise_fwd_config(n_rows, sm_count) if n_cols == 1 else None
        return BlockRowFwdConfig(rows, BLOCK_ROW_MIN_WARPS if num_warps is None else num_warps,
                                 0, pointwise)  # fmt: skip
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


# ---- backward: the dγ/dβ strategies ------------------------------------------------------------

NORM_BWD_STRATEGIES = ("atomic", "two_stage", "persistent")
NORM_BWD_SINGLE_PASS_MAX_COLS = 16384  # widest row one program holds (x, dy, fp32 accumulators)
# LayerNorm with few rows: below 2048 rows a 16384-wide single pass is one wave of spilling
# programs; two passes over 4096-column chunks keep more in flight.
NORM_BWD_LN_FEW_ROWS_MAX_COLS = 8192
NORM_BWD_LN_SINGLE_PASS_MIN_ROWS = 2048
NORM_BWD_STATIC_COLS = (1024, 8192)  # compile-time width: fewer registers (spills above 8192)
NORM_BWD_TILE_ELEMS = 2048  # elements per single-pass row tile (rows x padded width)
NORM_BWD_MAX_BLOCK_ROWS = 16
# Rows share a tile only once every SM has one. Rows that fit NORM_BWD_ONE_PROGRAM_TILES tiles
# run one program, which writes dγ/dβ itself: a tile's latency against the reduce's launch,
# workspace and host time (docs/planner.md#backward-row-tiles-for-few-rows).
NORM_BWD_TILES_PER_SM = 1
NORM_BWD_ONE_PROGRAM_TILES = 2
NORM_BWD_TWO_PASS_BLOCK_ROWS = 4
NORM_BWD_TWO_PASS_PROGRAMS_PER_SM = 2
NORM_BWD_TWO_PASS_BLOCK_COLS = 4096
NORM_BWD_TWO_PASS_WARPS = 16
# By tile elements: 16 per thread, at most 16 warps. Rows not 16-byte aligned load narrower
# vectors: their 16384-element tiles keep 32 warps, which do not spill
# (docs/planner.md#backward-warps).
NORM_BWD_WARPS = ((2048, 4), (4096, 8), (1 << 62, 16))
NORM_BWD_UNALIGNED_WARPS = ((2048, 4), (4096, 8), (8192, 16), (1 << 62, 32))
# Programs per SM by width: as many as the registers of a row tile allow (x, dy, accumulators).
NORM_BWD_PROGRAMS_PER_SM = ((2048, 4), (4096, 2), (1 << 62, 1))
NORM_BWD_PARTIALS_PER_SM = 2  # the partial rows' bound: past it, paired programs share a row
# The plan pairs no programs: a grid's partial rows (at most 4 a SM: 8.6 MB for LayerNorm's two
# at 2048 columns) are written and read back in the L2, so halving them saves little, and the
# zeroed rows cost a fill launch (docs/planner.md#paired-partial-rows). NORMLAB_NORM_BWD_PAIR=1:
# pair past the bound, as before 2026-12-07.
NORM_BWD_PAIR_PARTIALS = os.environ.get("NORMLAB_NORM_BWD_PAIR", "0") == "1"
# The fp32 partial rows are written, then read back by the reduce (8 B a column per parameter):
# a grid moves at most this share of the rows' own bytes through them
# (docs/planner.md#the-partial-rows-share).
NORM_BWD_PARTIALS_MAX_SHARE = 0.5
NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM = 32
NORM_BWD_ATOMIC_BLOCK_ROWS = 1
NORM_BWD_LOOP_STAGES = 1  # software pipelining measured slower than the register prefetch,
# but for LayerNorm's one-row tiles of NORM_BWD_LN_STAGED_COLS padded columns: beside its second
# row sum and dβ, one prefetched row in flight leaves the loads' latency uncovered, and the loop
# pipelined through shared memory in NORM_BWD_LN_STAGES stages keeps two rows in flight
# (docs/planner.md#layernorms-row-loop-in-stages). NORMLAB_NORM_BWD_LN_STAGES=0: the prefetch.
NORM_BWD_LN_STAGES = 3
NORM_BWD_LN_STAGED_COLS = (2048, 8192)
NORM_BWD_LN_STAGED = os.environ.get("NORMLAB_NORM_BWD_LN_STAGES", "1") != "0"
NORM_BWD_PREFETCH = ((8192, True), (1 << 62, False))  # the next tile's loads fit in registers
# The prefetched next tile is held as loaded beside the working tile's fp32 values. The fused
# add's fp32 rows prefetch three tiles (h, dy, dh) of 16 elements a thread, 48 registers, and
# spill 88-112 B at the fused add's 128-register budget; bf16's 24 and the plain fp32 backward's
# 32 do not. Past the bound each tile loads in turn (docs/planner.md#the-prefetchs-registers);
# NORMLAB_NORM_BWD_PREFETCH_REGS=0: no bound.
NORM_BWD_PREFETCH_MAX_REGS = 32
NORM_BWD_PREFETCH_REGS_BOUND = os.environ.get("NORMLAB_NORM_BWD_PREFETCH_REGS", "1") != "0"
# An SM's register file (64K 32-bit registers on sm_70 through sm_90).
SM_REGISTERS = 65536
# The fused add's single-pass backward prefetches a third row tile (dh): left alone, ptxas takes
# registers enough to lose a planned program a SM, so it compiles within the register budget of
# its planned programs per SM (docs/planner.md#the-fused-adds-backward).
NORM_BWD_FUSED_ADD_REGISTER_BUDGET = True
# LayerNorm's fused-add backward does not prefetch: its two row sums beside three prefetched
# tiles ran slower than loading each tile in turn. A backward of one program does: alone on its
# SM, it loses no program to the prefetch's registers, and its first tile's loads go out first
# (docs/planner.md#the-fused-adds-backward).
NORM_BWD_FUSED_ADD_LN_PREFETCH = False
NORM_REDUCE_TILES = {  # (BLOCK_M, BLOCK_N, warps) of the reduce kernel, by width and buffers
    1: ((1024, (128, 8, 8)), (4096, (128, 16, 8)), (1 << 62, (16, 32, 8))),
    2: ((1024, (128, 8, 8)), (1 << 62, (128, 32, 4))),
}
# The reduce tile holds at most the partial rows there are: rows past them are masked loads that
# every thread still issues (docs/planner.md#the-reduce-tile).
NORM_REDUCE_TILE_FITS_PARTIALS = os.environ.get("NORMLAB_NORM_REDUCE_FIT", "1") != "0"


def norm_reduce_config(n_cols: int, n_buffers: int,
                       n_partials: int | None = None) -> tuple[int, int, int]:  # fmt: skip
    """(BLOCK_M, BLOCK_N, warps) of the reduce kernel summing n_buffers partial workspaces of
    ``n_partials`` rows: NORM_REDUCE_TILES' tile, its rows cut to next_pow2(n_partials) and its
    warps to one element a thread at least."""
    block_m, block_n, warps = _ladder(NORM_REDUCE_TILES[n_buffers], n_cols)
    if n_partials is not None and NORM_REDUCE_TILE_FITS_PARTIALS:
        block_m = min(block_m, next_pow2(max(1, n_partials)))
        warps = warps_with_elements(warps, block_m * block_n)
    return block_m, block_n, warps


def norm_bwd_static_width(n_cols: int) -> bool:
    """Whether the single-pass persistent backward takes n_cols as a compile-time constant."""
    lo, hi = NORM_BWD_STATIC_COLS
    return lo <= n_cols <= hi


def norm_bwd_single_pass_max_cols(is_rms: bool, n_rows: int) -> int:
    """Widest row the default backward takes in one pass (wider rows are two-pass)."""
    if is_rms or n_rows >= NORM_BWD_LN_SINGLE_PASS_MIN_ROWS:
        return NORM_BWD_SINGLE_PASS_MAX_COLS
    return NORM_BWD_LN_FEW_ROWS_MAX_COLS


def norm_bwd_two_pass(n_cols: int, is_rms: bool, n_rows: int) -> bool:
    """Two passes over column chunks: the row does not fit one register tile."""
    return n_cols > norm_bwd_single_pass_max_cols(is_rms, n_rows)


def norm_bwd_block_rows(n_rows: int, block_cols: int, sm_count: int = 0) -> int:
    """Rows per single-pass tile: NORM_BWD_TILE_ELEMS elements, unless the rows would then
    leave SMs without a tile (NORM_BWD_TILES_PER_SM; ``sm_count`` 0: no bound). Rows that fit
    one program's NORM_BWD_ONE_PROGRAM_TILES tiles keep them (norm_bwd_one_program). A tile
    holds at most the call's rows (padded to a power of two): a masked row costs every thread its
    registers and instructions all the same."""
    rows = max(1, min(NORM_BWD_TILE_ELEMS // block_cols, NORM_BWD_MAX_BLOCK_ROWS,
                      next_pow2(max(1, n_rows))))  # fmt: skip
    if sm_count and n_rows > NORM_BWD_ONE_PROGRAM_TILES * rows:
        rows = min(rows, prev_pow2(max(1, n_rows // (NORM_BWD_TILES_PER_SM * sm_count))))
    return rows


def norm_bwd_one_program(n_tiles: int) -> bool:
    """Does one persistent program take every row tile (and write dγ/dβ itself)?"""
    return n_tiles <= NORM_BWD_ONE_PROGRAM_TILES


# A decode batch's backward in one launch: a program a row writes its dx, and a program a column
# block sums dγ/dβ over the batch's rows from x, dy and the stored statistics, so there are no
# partial rows and no reduce launch (row._norm_bwd_roles_kernel). Bounded by the batches timed on
# the H200 (docs/planner.md#decode-backward-in-one-launch); NORMLAB_NORM_BWD_ROLES=0 turns it off.
NORM_BWD_ROLES = os.environ.get("NORMLAB_NORM_BWD_ROLES", "1") != "0"
NORM_BWD_ROLES_MAX_ROWS = 32  # the most rows timed by role (32 x 4096 and 32 x 8192)
NORM_BWD_ROLES_MAX_COLS = 8192  # a column program per 128 columns: at 12288 two launches won
NORM_BWD_ROLES_COL_BLOCK = 128  # columns a column program sums: 256 B of a bf16 row, 2 sectors
# Warps of every roles program, whatever the row plan's: the grid is under one wave, so a program
# runs alone on its SM and takes as long as its threads' dependent chain. Four warps keep a row of
# 8192 columns to 64 elements a thread with one cross-warp sum; one warp ran LayerNorm 12x973 in
# 6.62 µs against 2.03 on four, sixteen ran 16x8192 in 6.33 against 3.20 (H200).
NORM_BWD_ROLES_WARPS = 4


def bwd_roles(n_rows: int, n_cols: int, n_programs: int, block_rows: int,
              block_cols: int) -> bool:  # fmt: skip
    """Does the backward split its programs by role (above)? Where the persistent grid runs one
    row a program, more than one program, over at most NORM_BWD_ROLES_MAX_ROWS rows of at most
    NORM_BWD_ROLES_MAX_COLS columns, and where a column program loads every row in one step
    (bwd_roles_col_tile on NORM_BWD_ROLES_WARPS warps, ``block_cols`` the row tile): a second
    step is a second load latency on the launch's longest program (LayerNorm 32 x 1024, two
    steps, 4.87 µs against 3.72 for two launches; 32 x 4096, one step, 3.30 against 4.75)."""
    if not (NORM_BWD_ROLES and block_rows == 1 and n_programs > 1
            and n_rows <= NORM_BWD_ROLES_MAX_ROWS and n_cols <= NORM_BWD_ROLES_MAX_COLS):
        return False  # fmt: skip
    _, step_rows = bwd_roles_col_tile(n_rows, n_cols, block_cols, NORM_BWD_ROLES_WARPS)
    return n_rows <= step_rows


def bwd_roles_col_tile(n_rows: int, n_cols: int, row_tile_elems: int,
                      num_warps: int) -> tuple[int, int]:  # fmt: skip
    """(columns, rows) of a column program's tile: NORM_BWD_ROLES_COL_BLOCK columns (fewer in a
    narrower row), and rows up to the row programs' tile elements or 16 a thread of the launch's
    warps, whichever is more (so a narrow row's batch takes few steps), and no more than the
    batch has."""
    cols = min(NORM_BWD_ROLES_COL_BLOCK, next_pow2(n_cols))
    elems = max(row_tile_elems, num_warps * 32 * 16)
    return cols, min(next_pow2(n_rows), max(1, elems // cols))


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
    maxnreg: int | None = None  # persistent single-pass only: registers a thread (None: ptxas's)


def prefetch_registers(tile_elems: int, num_warps: int, elem_bytes: int, fused_add: bool) -> int:
    """32-bit registers a thread holds for the prefetched next tile: x and dy (and the fused
    add's dh), ``tile_elems`` elements each of ``elem_bytes``, as loaded."""
    return (3 if fused_add else 2) * tile_elems * elem_bytes // (4 * 32 * num_warps)


def _bwd_prefetch(n_cols: int, is_rms: bool, fused_add: bool, prefetch_regs: int,
                  one_program: bool = False) -> bool:  # fmt: skip
    """Does the single-pass backward load its next tile before working on this one?
    ``one_program``: the call's tiles run in one program (norm_bwd_one_program)."""
    if fused_add and not is_rms and not one_program:
        return NORM_BWD_FUSED_ADD_LN_PREFETCH
    if NORM_BWD_PREFETCH_REGS_BOUND and prefetch_regs > NORM_BWD_PREFETCH_MAX_REGS:
        return False
    return _ladder(NORM_BWD_PREFETCH, n_cols)


def bwd_ln_staged(block_cols: int, block_rows: int, is_rms: bool, fused_add: bool) -> bool:
    """Does a LayerNorm single pass pipeline its row loop in NORM_BWD_LN_STAGES stages instead
    of prefetching (above)? One-row tiles of NORM_BWD_LN_STAGED_COLS padded columns, not the
    fused add's (it does not prefetch)."""
    lo, hi = NORM_BWD_LN_STAGED_COLS
    return (NORM_BWD_LN_STAGED and not is_rms and not fused_add and block_rows == 1
            and lo <= block_cols <= hi)  # fmt: skip


def register_budget(num_warps: int, programs_per_sm: int) -> int:
    """Registers a thread may take with ``programs_per_sm`` programs of ``num_warps`` warps
    resident on one SM: the register file over their threads, in ptxas' steps of 8, at most
    255 (a launch's ``maxnreg``)."""
    return min(255, SM_REGISTERS // (32 * num_warps * programs_per_sm) // 8 * 8)


def planned_maxnreg(num_warps: int, programs_per_sm: int, one_warp: bool) -> int | None:
    """The ``maxnreg`` that keeps a persistent grid's planned programs per SM resident; none for
    one-warp tiles, whose programs per SM is the SM's warp limit, not a register plan."""
    return None if one_warp else register_budget(num_warps, programs_per_sm)


def pair_partials(n_programs: int, sm_count: int) -> bool:
    """Where a config pairs (``paired_partials``), do programs 2k and 2k + 1 add into one zeroed
    partial row? Only when the grid has more programs than the bound on partial rows
    (NORM_BWD_PARTIALS_PER_SM per SM): within it, pairing saves no bound and costs the zero
    fill, a memset launch per buffer (docs/planner.md#paired-partial-rows)."""
    return n_programs > NORM_BWD_PARTIALS_PER_SM * sm_count


def norm_bwd_partials_cap(n_rows: int, row_bytes_per_col: int, n_params: int) -> int | None:
    """Most programs whose partial rows (written and read back, 8 B a column per parameter)
    move at most NORM_BWD_PARTIALS_MAX_SHARE of the rows' bytes (``row_bytes_per_col``: x and dy
    read, dx written, and dh with the fused add); None without parameters (no partial rows)."""
    if not n_params:
        return None
    return int(NORM_BWD_PARTIALS_MAX_SHARE * n_rows * row_bytes_per_col // (8 * n_params))


def norm_bwd_persistent_programs(n_tiles: int, programs_per_sm: int, sm_count: int,
                                 partials_cap: int | None = None) -> int:  # fmt: skip
    """The persistent grid: one program for tiles that fit it (``norm_bwd_one_program``); else
    programs_per_sm per SM, no more than the row tiles, and no more than ``partials_cap``
    (``norm_bwd_partials_cap``) but never under one program per SM."""
    if norm_bwd_one_program(n_tiles):
        return 1
    programs = min(n_tiles, programs_per_sm * sm_count)
    if partials_cap is not None:
        programs = min(programs, max(partials_cap, sm_count))
    return max(1, programs)


def norm_bwd_config(strategy: str, n_rows: int, n_cols: int, *, is_rms: bool = True,
                    two_pass: bool | None = None, block_rows: int | None = None,
                    block_cols: int | None = None, num_warps: int | None = None,
                    programs_per_sm: int | None = None, loop_stages: int | None = None,
                    prefetch: bool | None = None, paired_partials: bool | None = None,
                    aligned: bool = True, sm_count: int = 0, one_warp: bool = False,
                    fused_add: bool = False, elem_bytes: int = 2,
                    maxnreg: int | None = None) -> NormBwdConfig:  # fmt: skip
    """Row backward launch config for ``strategy`` (not "auto"); keywords override the rules.
    ``aligned``: every row starts on a 16-byte boundary (``row_align``), so loads are vectors;
    ``sm_count`` (0: unknown) bounds the rows a tile shares (norm_bwd_block_rows).
    ``one_warp`` (``one_warp_rows``): single-pass persistent tiles of ONE_WARP_BWD_TILE_ELEMS
    (one row at least) in one warp, ONE_WARP_PROGRAMS_PER_SM. ``fused_add``: the backward of
    add_rms_norm / add_layer_norm (it reads dh too); ``elem_bytes``: the rows' element size.
    ``maxnreg``: 0 for no register cap."""
    if two_pass is None:
        two_pass = norm_bwd_two_pass(n_cols, is_rms, n_rows)
    if block_cols is None:
        block_cols = NORM_BWD_TWO_PASS_BLOCK_COLS if two_pass else next_pow2(n_cols)
        block_cols = min(block_cols, next_pow2(n_cols))
    elif not two_pass and block_cols < n_cols:
        raise ValueError(
            f"single-pass backward needs block_cols >= n_cols ({block_cols} < {n_cols})"
        )
    single_pass = strategy == "persistent" and not two_pass  # the persistent single pass
    one_warp = one_warp and single_pass
    if one_warp:
        if block_rows is None:
            block_rows = max(1, ONE_WARP_BWD_TILE_ELEMS // next_pow2(block_cols))
        num_warps = 1 if num_warps is None else num_warps
        programs_per_sm = ONE_WARP_PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    if block_rows is None:
        if strategy == "atomic":
            block_rows = NORM_BWD_ATOMIC_BLOCK_ROWS
        elif two_pass:
            block_rows = NORM_BWD_TWO_PASS_BLOCK_ROWS
        else:
            block_rows = norm_bwd_block_rows(n_rows, next_pow2(block_cols), sm_count)
    block_rows, block_cols = next_pow2(block_rows), next_pow2(block_cols)
    if num_warps is None:
        num_warps = (NORM_BWD_TWO_PASS_WARPS if two_pass and strategy == "persistent"
                     else _ladder(NORM_BWD_WARPS if aligned else NORM_BWD_UNALIGNED_WARPS,
                                  block_rows * block_cols))  # fmt: skip
    if programs_per_sm is None:
        programs_per_sm = (NORM_BWD_TWO_PASS_PROGRAMS_PER_SM if two_pass
                           else _ladder(NORM_BWD_PROGRAMS_PER_SM, n_cols))  # fmt: skip
    rows_per_program = max(NORM_BWD_TWO_STAGE_ROWS_PER_PROGRAM, block_rows)
    rows_per_program = (rows_per_program + block_rows - 1) // block_rows * block_rows
    if paired_partials is None:
        paired_partials = (NORM_BWD_PAIR_PARTIALS and programs_per_sm > NORM_BWD_PARTIALS_PER_SM
                           and single_pass)  # fmt: skip
    if (loop_stages is None and prefetch is None and single_pass and not one_warp
            and bwd_ln_staged(block_cols, block_rows, is_rms, fused_add)):
        loop_stages, prefetch = NORM_BWD_LN_STAGES, False
    if maxnreg is None and fused_add and NORM_BWD_FUSED_ADD_REGISTER_BUDGET and single_pass:
        maxnreg = planned_maxnreg(num_warps, programs_per_sm, one_warp)
    if prefetch is None:
        one_program = single_pass and norm_bwd_one_program(cdiv(n_rows, block_rows))
        prefetch = _bwd_prefetch(n_cols, is_rms, fused_add, prefetch_registers(
            block_rows * block_cols, num_warps, elem_bytes, fused_add), one_program)
    return NormBwdConfig(
        strategy=strategy,
        two_pass=bool(two_pass),
        block_rows=block_rows,
        block_cols=block_cols,
        num_warps=num_warps,
        programs_per_sm=programs_per_sm,
        rows_per_program=rows_per_program,
        loop_stages=NORM_BWD_LOOP_STAGES if loop_stages is None else loop_stages,
        prefetch=bool(prefetch),
        paired_partials=bool(paired_partials),
        maxnreg=maxnreg or None,
    )


# ---- backward: block-row tiles -----------------------------------------------------------------

BLOCK_ROW_BWD_TILE_ELEMS = 2048
BLOCK_ROW_BWD_WARPS = 8
BLOCK_ROW_BWD_PROGRAMS_PER_SM = 4
BLOCK_ROW_BWD_ACC_TILE = True  # accumulate dγ/dβ per tile row, sum once per program
BLOCK_ROW_BWD_PREFETCH = False
# The grid plans BLOCK_ROW_BWD_PROGRAMS_PER_SM programs of BLOCK_ROW_BWD_WARPS warps on an SM,
# which holds only at register_budget(8, 4) = 64 registers a thread or fewer: the backward that
# loads stored mean/rstd is capped there (a small spill, a full grid). The recomputing one is
# not: a cap spills its many rows' scalars (docs/planner.md#block-row-backward-registers).
# NORMLAB_NORM_BLOCK_ROW_BUDGET=0: no cap.
BLOCK_ROW_BWD_REGISTER_BUDGET = os.environ.get("NORMLAB_NORM_BLOCK_ROW_BUDGET", "1") == "1"
# Recomputing mean/rstd from the x tile the backward reads anyway saves the forward's stores
# and the backward's loads; it paid up to 256 columns (RMSNorm) and 64 (LayerNorm's two sums).
BLOCK_ROW_RECOMPUTE_MAX_COLS = {True: 256, False: 64}
# Overrides of the recomputing backward's tile, by norm: (widest row, overrides) ladders. A
# prefetch pays at narrow unaligned rows; rows of one column are pointwise, where a prefetched
# tile only holds registers (docs/planner.md#the-recomputing-block-row-backward).
BLOCK_ROW_BWD_RECOMPUTE_TILES = {
    True: ((1, {}), (32, {"prefetch": True}), (BLOCK_ROW_MAX_COLS, {})),
    False: ((1, {}), (16, {"prefetch": True}), (32, {"num_warps": 4, "prefetch": True}),
            (BLOCK_ROW_MAX_COLS, {})),
}


class BlockRowBwdConfig(NamedTuple):
    block_rows: int
    num_warps: int
    programs_per_sm: int
    acc_tile: bool
    prefetch: bool
    maxnreg: int | None = None  # registers a thread (None: ptxas's count)


def block_row_recompute_stats(n_cols: int, is_rms: bool) -> bool:
    """Does the block-row path recompute mean/rstd in the backward (the forward storing none)?"""
    return n_cols <= BLOCK_ROW_RECOMPUTE_MAX_COLS[bool(is_rms)]


def block_row_bwd_config(n_cols: int, *, tile_elems: int | None = None,
                         max_rows: int | None = None, num_warps: int | None = None,
                         programs_per_sm: int | None = None, acc_tile: bool | None = None,
                         prefetch: bool | None = None, one_warp: bool = False,
                         maxnreg: int | None = None) -> BlockRowBwdConfig:  # fmt: skip
    """Persistent block-row backward launch config; keywords override the rules. ``one_warp``
    (``one_warp_rows``): one warp a tile of ONE_WARP_BWD_TILE_ELEMS, ONE_WARP_PROGRAMS_PER_SM.
    ``maxnreg``: 0 for no register cap (None: BLOCK_ROW_BWD_REGISTER_BUDGET's rule)."""
    if one_warp:
        tile_elems = ONE_WARP_BWD_TILE_ELEMS if tile_elems is None else tile_elems
        num_warps = 1 if num_warps is None else num_warps
        programs_per_sm = ONE_WARP_PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    tile_elems = BLOCK_ROW_BWD_TILE_ELEMS if tile_elems is None else tile_elems
    if max_rows is None:  # tiny widths: the tile's rows are per-row scalars, not registers
        max_rows = BLOCK_ROW_MAX_ROWS if n_cols >= BLOCK_ROW_TINY_COLS else tile_elems
    num_warps = BLOCK_ROW_BWD_WARPS if num_warps is None else num_warps
    programs_per_sm = (BLOCK_ROW_BWD_PROGRAMS_PER_SM if programs_per_sm is None
                       else programs_per_sm)  # fmt: skip
    if maxnreg is None and BLOCK_ROW_BWD_REGISTER_BUDGET:
        maxnreg = planned_maxnreg(num_warps, programs_per_sm, one_warp)
    return BlockRowBwdConfig(
        block_rows=max(1, min(max_rows, tile_elems // next_pow2(n_cols))),
        num_warps=num_warps,
        programs_per_sm=programs_per_sm,
        acc_tile=BLOCK_ROW_BWD_ACC_TILE if acc_tile is None else acc_tile,
        prefetch=BLOCK_ROW_BWD_PREFETCH if prefetch is None else prefetch,
        maxnreg=maxnreg or None,
    )


def block_row_bwd_recompute_config(n_cols: int, is_rms: bool,
                                   one_warp: bool = False) -> BlockRowBwdConfig:  # fmt: skip
    """The block-row backward's config when it recomputes mean/rstd from x."""
    if one_warp:
        return block_row_bwd_config(n_cols, one_warp=True)
    tile = _ladder(BLOCK_ROW_BWD_RECOMPUTE_TILES[bool(is_rms)], n_cols)
    return block_row_bwd_config(n_cols, maxnreg=0, **tile)  # no cap: BLOCK_ROW_BWD_REGISTER_BUDGET


# ---- the plan ----------------------------------------------------------------------------------

STRATEGIES = ("auto", *NORM_BWD_STRATEGIES)
LAYOUTS = ("auto", "row", "block_row")
BLOCK_ROW_STRATEGIES = ("auto", "persistent")  # the block-row backward's only reduction


@dataclass(frozen=True)
class NormPlan:
    """How one norm call runs, forward and backward.

    ``layout``: "block_row" (narrow rows, many per tile, both directions) or "row".
    ``fwd_tile``: the forward's row tile, of wide rows (``norm_fwd_block_row_config``) or narrow
    ones (``narrow_fwd_tile``); None: one row per program.
    ``store_stats``: whether the forward writes mean/rstd (the block-row backward can recompute
    them from x). ``strategy``: the backward's dγ/dβ reduction. ``fwd_split``: the forward's
    column chunk for a few wide rows; ``bwd_split``: the split-row backward's chunks and row
    groups, for a few wide rows or rows wider than the single pass (None: not split; a split
    backward sums dγ/dβ per column chunk and row group, so ``strategy`` is unused). (Each
    launcher adds the ``row_align`` load hint from the strides of the tensors it is given.)"""

    layout: str
    fwd_tile: BlockRowFwdConfig | None
    store_stats: bool
    strategy: str
    fwd_split: SplitRowChunk | None = None
    bwd_split: SplitRowBwdPlan | None = None


# Narrow rows below BLOCK_ROW_MIN_ROWS keep the row layout's backward, but their forward shares
# row tiles: a one-row program moves a few hundred bytes, so the programs' launches, not DRAM,
# set its time. A tile holds at most NARROW_FWD_TILE_ELEMS padded elements, and the grid keeps
# NARROW_FWD_PROGRAMS_PER_SM programs a SM: bigger tiles leave too few in flight to hide a tile's
# latency; below two rows a tile one row a program is faster
# (docs/planner.md#narrow-rows-below-the-block-row-layout).
NARROW_FWD_PROGRAMS_PER_SM = 4
NARROW_FWD_TILE_ELEMS = 1024


def narrow_fwd_tile(n_rows: int, n_cols: int, is_rms: bool,
                    sm_count: int) -> BlockRowFwdConfig | None:  # fmt: skip
    """The forward's row tile for narrow rows too few for the block-row layout (above), with the
    measured block-row tile's warps; None past BLOCK_ROW_MAX_COLS or at one row a tile."""
    if n_cols > BLOCK_ROW_MAX_COLS:
        return None
    block_cols = next_pow2(n_cols)
    per_sm = n_rows // (NARROW_FWD_PROGRAMS_PER_SM * sm_count)
    rows = min(prev_pow2(per_sm), NARROW_FWD_TILE_ELEMS // block_cols)
    if rows < 2:
        return None
    warps = BLOCK_ROW_FWD_TILES[bool(is_rms)][max(block_cols, 16)][1]
    return BlockRowFwdConfig(rows, warps_with_elements(warps, rows * block_cols))


# Unaligned rows a little wider than the block-row layout, in many rows: one row per program
# moves a few hundred bytes at 4 warps, each row sum across them, so one-warp tiles of two rows
# (ONE_WARP_FWD_TILE_ELEMS) take them (docs/planner.md#unaligned-rows-past-the-block-row-width).
def unaligned_fwd_tile(n_rows: int, n_cols: int) -> BlockRowFwdConfig | None:
    """The forward's one-warp row tile for rows that are not 16-byte aligned, wider than
    BLOCK_ROW_MAX_COLS, two or more to a tile, BLOCK_ROW_MIN_ROWS rows or more; else None."""
    rows = ONE_WARP_FWD_TILE_ELEMS // next_pow2(n_cols)
    if n_cols <= BLOCK_ROW_MAX_COLS or rows < 2 or n_rows < BLOCK_ROW_MIN_ROWS:
        return None
    return BlockRowFwdConfig(rows, 1)


def use_block_row(n_rows: int, n_cols: int) -> bool:
    """Narrow rows in many-row tiles: one row per program would move a few hundred bytes per
    program, and there are enough rows for the tiles to fill the card; below
    BLOCK_ROW_TINY_COLS a one-row program moves a few bytes, whatever the row count."""
    if n_cols > BLOCK_ROW_MAX_COLS:
        return False
    return n_rows >= BLOCK_ROW_MIN_ROWS or n_cols < BLOCK_ROW_TINY_COLS


def uses_block_row(n_rows: int, n_cols: int, strategy: str, layout: str) -> bool:
    """Does the call run the block-row kernels? Not memoized: torch.compile's fake kernels
    call it with symbolic sizes."""
    if layout == "auto":
        return strategy in BLOCK_ROW_STRATEGIES and use_block_row(n_rows, n_cols)
    return layout == "block_row"


def plan(is_rms: bool, n_rows: int, n_cols: int, strategy: str = "auto",
         layout: str = "auto", sm_count: int | None = None, aligned: bool = True,
         elem_size: int = 2) -> NormPlan:  # fmt: skip
    """The plan of one call (arguments already validated; without ``sm_count`` no split-row
    kernels are planned). ``aligned``: every row starts on a 16-byte boundary (``row_align``);
    ``elem_size``: bytes per element of x."""
    if uses_block_row(n_rows, n_cols, strategy, layout):
        return NormPlan("block_row", None, not block_row_recompute_stats(n_cols, is_rms),
                        "persistent")  # fmt: skip
    auto = layout == "auto" and sm_count is not None
    split_fwd = auto and split_row_fwd(n_rows, n_cols, sm_count)
    split_bwd = (auto and strategy == "auto" and n_rows > 0
                 and n_cols > split_row_bwd_min_cols(is_rms, n_rows, sm_count))  # fmt: skip
    # Row tiles (the wide rows' windows, the narrow rows' tiles) start above the decode rows.
    decode = sm_count is not None and decode_rows(n_rows, n_cols, sm_count)
    tile = None
    if layout == "auto" and not rms_fp32_one_warp(n_cols, is_rms, elem_size):
        tile = norm_fwd_block_row_config(n_rows, n_cols, is_rms, aligned, elem_size)
        if tile is None and sm_count:
            tile = narrow_fwd_tile(n_rows, n_cols, is_rms, sm_count)
        if tile is None and not aligned:
            tile = unaligned_fwd_tile(n_rows, n_cols)
    return NormPlan(
        "row",
        None if decode else tile,
        True,
        "persistent" if strategy == "auto" else strategy,
        fwd_split=split_row_fwd_chunk(n_cols) if split_fwd else None,
        bwd_split=split_row_bwd_plan(n_rows, n_cols, sm_count) if split_bwd else None,
    )


_MEMOIZED = ("norm_fwd_config", "norm_fwd_block_row_config", "block_row_fwd_config",
             "norm_reduce_config", "norm_bwd_config", "block_row_bwd_config",
             "block_row_bwd_recompute_config", "plan", "row_align", "one_warp_rows",
             "split_row_fwd_chunk", "split_row_bwd_chunk", "split_row_bwd_tile",
             "split_row_bwd_group_rows", "split_row_sums_chunk", "split_row_bwd_plan",
             "pointwise_fwd_config")  # fmt: skip


def memoize() -> None:
    """Memoize the plans and configs: pure functions of their arguments and this module's tables,
    called with a few shapes per training loop. On by default on a GPU, where host time counts;
    off under the interpreter, where tests edit the tables."""
    for name in _MEMOIZED:
        fn = globals()[name]
        if not hasattr(fn, "cache_clear"):
            globals()[name] = functools.lru_cache(maxsize=4096)(fn)


if not _runtime.INTERPRET:
    memoize()
