"""RMSNorm and LayerNorm: a row-per-program forward and three backward dweight strategies.

The forward runs one program per row (RMSNorm at 1024-16384 columns looped in two passes over
16-byte-per-thread chunks, ``configs.NORM_FWD_RMS_LOOPED``), except under ``layout="auto"`` in
the row-count windows of ``configs.NORM_FWD_BLOCK_ROW``, where the block-row kernel
(``kernels/narrow.py``) takes it: short row tiles at 512 columns (both norms); for LayerNorm at
1024-16384 columns, a persistent grid that prefetches each program's next row tile when the rows
fill only a few waves, and two-row tiles at 1024 columns above that.

    RMSNorm    y = x * rstd * w              rstd = 1 / sqrt(mean(x^2) + eps)
    LayerNorm  y = (x - mean) * rstd * w + b  rstd = 1 / sqrt(var(x) + eps)

Backward with xhat = (x - mean) * rstd (mean = 0 for RMSNorm) and wdy = w * dy:

    dx = rstd * (wdy - xhat * c1 - c2)    c1 = mean(xhat * wdy), c2 = mean(wdy) (0 for RMSNorm)
    dw = sum_rows(dy * xhat)              db = sum_rows(dy)

How dw/db are summed over the rows is the ``strategy``:

* ``"atomic"``: one program per row tile; ``tl.atomic_add`` into one fp32 vector (seed 002's
  first design; contended and not deterministic).
* ``"two_stage"``: each program takes a contiguous block of rows and writes one fp32 partial
  row to a workspace ``(ceil(n_rows / rows_per_program), n_cols)``; a second kernel sums it.
* ``"persistent"``: seed 000's kernel_1: about ``programs_per_sm * SMs`` programs grid-stride
  ``BLOCK_ROWS x BLOCK_COLS`` row tiles and fold them into one fp32 partial per program, so the
  workspace is ``<= programs_per_sm * SMs * n_cols * 4`` bytes whatever n_rows (above
  ``configs.NORM_BWD_PARTIALS_PER_SM`` per SM, programs add into a zeroed partial row in pairs,
  which two fp32 addends keep bitwise deterministic); each program
  loads its next row tile while it works on the current one (``configs.NORM_BWD_PREFETCH``,
  up to 8192 columns). Rows wider than
  ``configs.norm_bwd_single_pass_max_cols(is_rms, n_rows)`` take the two-pass kernel (pass 1 reduces
  c1/c2 over column chunks, pass 2 re-reads x/dy, writes dx and adds into the program's partial
  row).

Partials are always fp32 and reduced in fp32 by ``_reduce_partials_kernel``, which can add into
an existing ``.grad``; ``two_stage`` and ``persistent`` are bitwise deterministic.

The Triton kernel names are stable (the bench's per-kernel breakdown keys on them):
``_norm_fwd_kernel``, ``_norm_bwd_atomic_kernel``, ``_norm_bwd_partials_kernel``,
``_norm_bwd_persistent_kernel`` and ``_norm_bwd_persistent_static_kernel`` (the single pass at a
runtime and at a compile-time width), ``_norm_bwd_persistent_two_pass_kernel``,
``_reduce_partials_kernel`` (and ``kernels/narrow.py``'s ``_block_row_fwd_kernel`` in the
forward's block-row windows).

Inputs: any leading shape, normalized over the last dim; fp32/fp16/bf16 (fp64 and integer
dtypes raise ``TypeError``: use ``normlab.ref`` for fp64). A tensor whose last dim is not
contiguous, or whose rows are not evenly strided, is copied once (``x.flatten(0, -2)``
then ``.contiguous()``); a row-strided view such as ``x[:, :n]`` is read in place. An empty
input (no rows, or a zero-width last dim) gives an empty y and dx and zero dweight/dbias, as
torch, with no kernel launch.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from normlab import _runtime, configs
from normlab.kernels._host import FLOAT_DTYPES, is_valid_eps, unit_col_stride

STRATEGIES = ("auto",) + configs.NORM_BWD_STRATEGIES
LAYOUTS = ("auto", "row", "block_row")
AUTOTUNE = os.environ.get("NORMLAB_AUTOTUNE", "0") == "1" and not _runtime.INTERPRET


# ============================================================================================
# @triton.jit helpers
# ============================================================================================


@triton.jit
def _load_weight(w_ptr, cols, col_mask, HAS_WEIGHT: tl.constexpr):  # w_ptr: (n_cols,) weight
    """fp32 weight chunk, or a scalar 1 placeholder when there is no weight."""
    if HAS_WEIGHT:
        return tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
    else:
        return 1.0


@triton.jit
def _load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS: tl.constexpr):
    """fp32 (mean, rstd) of a tile's rows; mean = 0 for RMSNorm."""
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
    if IS_RMS:
        mean = tl.zeros_like(rstd)
    else:
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
    return mean, rstd


@triton.jit
def _load_xhat_wdy(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    w,
    rows64,
    cols,
    mask,
    mean,
    rstd,
    x_row_stride,
    dy_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
):
    """fp32 (xhat, dy, w * dy) of a [rows, cols] tile (w: fp32 [cols]); masked entries are 0."""
    x, dy = _load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride)
    return _xhat_wdy(x, dy, w, mask, mean, rstd, IS_RMS, HAS_WEIGHT)


@triton.jit
def _load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride):
    """x and dy of a [rows, cols] tile in their own dtype; masked entries are 0 (and not read)."""
    x = tl.load(x_ptr + rows64[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0)
    dy = tl.load(dy_ptr + rows64[:, None] * dy_row_stride + cols[None, :], mask=mask, other=0.0)
    return x, dy


@triton.jit
def _xhat_wdy(x, dy, w, mask, mean, rstd, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    """fp32 (xhat, dy, w * dy) from a loaded tile (see _load_xhat_wdy)."""
    x = x.to(tl.float32)
    dy = dy.to(tl.float32)
    if IS_RMS:
        xhat = x * rstd[:, None]
    else:
        # Masked columns would give -mean * rstd; zero them so they add nothing to c1 or dw.
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    if HAS_WEIGHT:
        wdy = dy * w[None, :]
    else:
        wdy = dy
    return xhat, dy, wdy


@triton.jit
def _store_dx(
    dx_ptr,  # (n_rows, n_cols) input gradient
    rows64,
    cols,
    mask,
    xhat,
    wdy,
    c1,
    c2,
    rstd,
    dx_row_stride,
    IS_RMS: tl.constexpr,
):
    if IS_RMS:
        dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
    else:
        dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
    dx_ptrs = dx_ptr + rows64[:, None] * dx_row_stride + cols[None, :]
    tl.store(dx_ptrs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_tile(x_ptr, dy_ptr, tile, n_rows, n_cols, x_row_stride, dy_row_stride,
               BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):  # fmt: skip
    """x and dy of row tile ``tile`` (their own dtype; 0 outside the matrix)."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    return _load_x_dy(x_ptr, dy_ptr, rows.to(tl.int64), cols, mask, x_row_stride, dy_row_stride)


@triton.jit
def _add_pair(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def _bwd_tile_single_pass(
    tile,
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w,
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    x_pre=None,
    dy_pre=None,
    PRELOADED: tl.constexpr = False,
    PAIR_SUMS: tl.constexpr = False,
):
    """dx of one BLOCK_ROWS tile whose rows fit in BLOCK_COLS (w: fp32 [BLOCK_COLS], loaded
    once per program); returns the fp32 tile contributions (dy * xhat, dy) to dw and db.
    With PRELOADED, x_pre / dy_pre are this tile's x and dy, already loaded (_load_tile).
    PAIR_SUMS: LayerNorm's two row sums in one reduction (one cross-warp exchange, not two)."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)
    mean, rstd = _load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
    if PRELOADED:
        xhat, dy, wdy = _xhat_wdy(x_pre, dy_pre, w, mask, mean, rstd, IS_RMS, HAS_WEIGHT)
    else:
        xhat, dy, wdy = _load_xhat_wdy(
            x_ptr, dy_ptr, w, rows64, cols, mask, mean, rstd,
            x_row_stride, dy_row_stride, IS_RMS, HAS_WEIGHT,
        )  # fmt: skip
    if IS_RMS:
        c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        c2 = c1  # unread
    elif PAIR_SUMS:
        s1, s2 = tl.reduce((xhat * wdy, wdy), 1, _add_pair)
        c1 = s1 / n_cols
        c2 = s2 / n_cols
    else:
        c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        c2 = tl.sum(wdy, axis=1) / n_cols
    _store_dx(dx_ptr, rows64, cols, mask, xhat, wdy, c1, c2, rstd, dx_row_stride, IS_RMS)
    return dy * xhat, dy


@triton.jit
def _bwd_tile_two_pass(
    tile,
    is_first,
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_out_ptr,  # (n_cols,) fp32 partial row (or the atomic accumulator) for dweight
    db_out_ptr,  # (n_cols,) fp32 partial row (or the atomic accumulator) for dbias
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ATOMIC: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    """dx of one row tile in column chunks: pass 1 reduces c1/c2, pass 2 re-reads and writes dx
    and adds the tile's dw/db column sums into dw_out/db_out (atomically, or read-add-write of
    the program's own partial row, which starts from 0 when ``is_first``)."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    rows64 = rows.to(tl.int64)
    mean, rstd = _load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
    c1 = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    c2 = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        w = _load_weight(w_ptr, cols, col_mask, HAS_WEIGHT)
        xhat, dy, wdy = _load_xhat_wdy(
            x_ptr, dy_ptr, w, rows64, cols, mask, mean, rstd,
            x_row_stride, dy_row_stride, IS_RMS, HAS_WEIGHT,
        )  # fmt: skip
        c1 += tl.sum(xhat * wdy, axis=1)
        c2 += tl.sum(wdy, axis=1)
    c1 = c1 / n_cols
    c2 = c2 / n_cols
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        w = _load_weight(w_ptr, cols, col_mask, HAS_WEIGHT)
        xhat, dy, wdy = _load_xhat_wdy(
            x_ptr, dy_ptr, w, rows64, cols, mask, mean, rstd,
            x_row_stride, dy_row_stride, IS_RMS, HAS_WEIGHT,
        )  # fmt: skip
        _store_dx(dx_ptr, rows64, cols, mask, xhat, wdy, c1, c2, rstd, dx_row_stride, IS_RMS)
        if not ATOMIC:
            # The first tile starts the partial row (the workspace is uninitialized).
            keep_mask = col_mask & ((tl.zeros_like(cols) + is_first.to(tl.int32)) == 0)
        if HAS_WEIGHT:
            dw = tl.sum(dy * xhat, axis=0)
            if ATOMIC:
                tl.atomic_add(dw_out_ptr + cols, dw, mask=col_mask)
            else:
                prev = tl.load(dw_out_ptr + cols, mask=keep_mask, other=0.0)
                tl.store(dw_out_ptr + cols, prev + dw, mask=col_mask)
        if HAS_BIAS:
            db = tl.sum(dy, axis=0)
            if ATOMIC:
                tl.atomic_add(db_out_ptr + cols, db, mask=col_mask)
            else:
                prev = tl.load(db_out_ptr + cols, mask=keep_mask, other=0.0)
                tl.store(db_out_ptr + cols, prev + db, mask=col_mask)
    # The partial row is read back by other threads of this program on its next tile.
    tl.debug_barrier()


@triton.jit
def _store_partials(
    dw_out_ptr,  # (n_cols,) fp32 partial row for dweight
    db_out_ptr,  # (n_cols,) fp32 partial row for dbias
    dw_acc,
    db_acc,
    n_cols,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ADD: tl.constexpr = False,
):
    """Store (or, ADD, atomically add into a zeroed row shared by two programs) a partial row."""
    cols = tl.arange(0, BLOCK_COLS)
    if HAS_WEIGHT:
        _put_row(dw_out_ptr + cols, tl.sum(dw_acc, axis=0), cols < n_cols, ADD)
    if HAS_BIAS:
        _put_row(db_out_ptr + cols, tl.sum(db_acc, axis=0), cols < n_cols, ADD)


@triton.jit
def _put_row(ptrs, values, mask, ADD: tl.constexpr):
    if ADD:
        tl.atomic_add(ptrs, values, mask=mask, sem="relaxed")
    else:
        tl.store(ptrs, values, mask=mask)


# ============================================================================================
# @triton.jit kernels
# ============================================================================================


@triton.jit
def _load_f32(ptrs, mask, EVEN: tl.constexpr, EVICTION: tl.constexpr):
    """fp32 values; no predicate when the chunks tile the row exactly (EVEN)."""
    if EVEN:
        return tl.load(ptrs, eviction_policy=EVICTION).to(tl.float32)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)


@triton.jit
def _store_cast(ptrs, values, mask, EVEN: tl.constexpr):
    """values in the pointers' dtype; no predicate under EVEN."""
    if EVEN:
        tl.store(ptrs, values.to(ptrs.dtype.element_ty))
    else:
        tl.store(ptrs, values.to(ptrs.dtype.element_ty), mask=mask)


def _row_offsets_need_int64(args) -> bool:
    """Whether row * row_stride can pass int32 for x or y (2-D tensors)."""
    return max(args["x_ptr"].shape[0] * args["x_row_stride"],
               args["y_ptr"].shape[0] * args["y_row_stride"]) >= 2**31  # fmt: skip


# The chunk masks and int64 row offsets cost 2.2% at RMSNorm 32768x8192 (run
# "fwd_looped_variants" at 614e101+ab in benchmarks/data/dev/sweep_launch_configs_h200.json: the
# looped row unmasked with int32 offsets 250.4 us vs 254.4 for the default, torch.compile 249.6),
# so both go where they are not needed.
@triton.heuristics({
    "SINGLE_BLOCK": lambda args: args["n_cols"] <= args["BLOCK_SIZE"],
    "EVEN_COLS": lambda args: args["n_cols"] % args["BLOCK_SIZE"] == 0,
    "INT64_ROWS": _row_offsets_need_int64,
})  # fmt: skip
@triton.jit
def _norm_fwd_kernel(
    x_ptr,  # (n_rows, n_cols) input
    y_ptr,  # (n_rows, n_cols) output, x's dtype
    w_ptr,  # (n_cols,) weight (unused without HAS_WEIGHT)
    b_ptr,  # (n_cols,) bias (unused without HAS_BIAS)
    mean_ptr,  # (n_rows,) fp32 mean, written for LayerNorm
    rstd_ptr,  # (n_rows,) fp32 1 / std, written
    x_row_stride,
    y_row_stride,
    n_cols: tl.constexpr,  # one compiled kernel per width: static loop bounds (configs cites why)
    eps,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    SINGLE_BLOCK: tl.constexpr,
    EVEN_COLS: tl.constexpr,  # n_cols a multiple of BLOCK_SIZE: no predicates
    INT64_ROWS: tl.constexpr,  # row offsets may pass int32
):
    """One row per program; fp32 statistics. Rows wider than BLOCK_SIZE loop over chunks."""
    row = tl.program_id(0)
    if INT64_ROWS:
        row = row.to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    # Inductor may pass eps as fp64, which would promote the whole row to fp64.
    eps = tl.cast(eps, tl.float32)
    cols = tl.arange(0, BLOCK_SIZE)
    if SINGLE_BLOCK:
        mask = cols < n_cols
        x = _load_f32(x_row + cols, mask, EVEN_COLS, "")
        if IS_RMS:
            mean = 0.0
            xc = x
        else:
            mean = tl.sum(x, axis=0) / n_cols
            xc = x - mean
            if not EVEN_COLS:
                xc = tl.where(mask, xc, 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
        y = xc * rstd
        if HAS_WEIGHT:
            y = y * _load_f32(w_ptr + cols, mask, EVEN_COLS, "")
        if HAS_BIAS:
            y = y + _load_f32(b_ptr + cols, mask, EVEN_COLS, "")
        _store_cast(y_row + cols, y, mask, EVEN_COLS)
    else:
        # Pass 1: sums over chunks. LayerNorm sums d = x - x[0] so that var = E[d^2] - E[d]^2
        # does not cancel catastrophically when |mean| >> std.
        if IS_RMS:
            shift = 0.0
        else:
            shift = tl.load(x_row).to(tl.float32)
        acc1 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            d = _load_f32(x_row + start + cols, mask, EVEN_COLS, "evict_last") - shift
            if not EVEN_COLS:
                d = tl.where(mask, d, 0.0)
            acc1 += d
            acc2 += d * d
        mean_d = tl.sum(acc1, axis=0) / n_cols
        if IS_RMS:
            mean = 0.0
            var = tl.sum(acc2, axis=0) / n_cols
        else:
            mean = shift + mean_d
            var = tl.maximum(tl.sum(acc2, axis=0) / n_cols - mean_d * mean_d, 0.0)
        rstd = tl.rsqrt(var + eps)
        # Pass 2: normalize (the row is re-read, mostly from L2).
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            y = (_load_f32(x_row + start + cols, mask, EVEN_COLS, "evict_first") - mean) * rstd
            if HAS_WEIGHT:
                y = y * _load_f32(w_ptr + start + cols, mask, EVEN_COLS, "evict_last")
            if HAS_BIAS:
                y = y + _load_f32(b_ptr + start + cols, mask, EVEN_COLS, "evict_last")
            _store_cast(y_row + start + cols, y, mask, EVEN_COLS)
    if not IS_RMS:
        tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


def _prune_fwd_configs(configs_, named_args, **kwargs):
    """Seed 002: drop blocks narrower than the row; keep the widest if none is wide enough."""
    n_cols = named_args["n_cols"]
    fitting = [c for c in configs_ if c.kwargs["BLOCK_SIZE"] >= n_cols]
    if fitting:
        narrowest = min(c.kwargs["BLOCK_SIZE"] for c in fitting)
        return [c for c in fitting if c.kwargs["BLOCK_SIZE"] == narrowest]
    widest = max(c.kwargs["BLOCK_SIZE"] for c in configs_)
    return [c for c in configs_ if c.kwargs["BLOCK_SIZE"] == widest]


if AUTOTUNE:
    _norm_fwd_kernel_tuned = triton.autotune(
        configs=[
            triton.Config({"BLOCK_SIZE": b}, num_warps=w)
            for b in configs.NORM_FWD_AUTOTUNE_BLOCKS
            for w in configs.NORM_FWD_AUTOTUNE_WARPS
        ],
        key=["n_cols", "IS_RMS", "HAS_WEIGHT", "HAS_BIAS"],
        prune_configs_by={"early_config_prune": _prune_fwd_configs},
    )(_norm_fwd_kernel)


@triton.jit
def _norm_bwd_atomic_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_ptr,  # (n_cols,) fp32 dweight accumulator (atomics)
    db_ptr,  # (n_cols,) fp32 dbias accumulator (atomics)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    TWO_PASS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    """One row tile per program; its dw/db column sums go straight into one shared fp32 vector
    with tl.atomic_add: every program hits the same n_cols addresses (seed 002)."""
    tile = tl.program_id(0)
    if TWO_PASS:
        _bwd_tile_two_pass(
            tile, False, x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr,
            n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
            IS_RMS, HAS_WEIGHT, HAS_BIAS, True, BLOCK_ROWS, BLOCK_COLS,
        )  # fmt: skip
    else:
        cols = tl.arange(0, BLOCK_COLS)
        col_mask = cols < n_cols
        w = _load_weight(w_ptr, cols, col_mask, HAS_WEIGHT)
        dw, db = _bwd_tile_single_pass(
            tile, x_ptr, dy_ptr, dx_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
            x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT, BLOCK_ROWS, BLOCK_COLS,
        )  # fmt: skip
        if HAS_WEIGHT:
            tl.atomic_add(dw_ptr + cols, tl.sum(dw, axis=0), mask=col_mask)
        if HAS_BIAS:
            tl.atomic_add(db_ptr + cols, tl.sum(db, axis=0), mask=col_mask)


@triton.jit
def _norm_bwd_partials_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (written)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (written)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    tiles_per_program,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    TWO_PASS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    """two_stage: program p takes the contiguous row tiles [p * tiles_per_program, ...) and
    writes one fp32 partial row p; the workspace grows with n_rows."""
    pid = tl.program_id(0)
    first_tile = pid * tiles_per_program
    last_tile = tl.minimum(first_tile + tiles_per_program, tl.cdiv(n_rows, BLOCK_ROWS))
    dw_out = dw_partial_ptr + pid.to(tl.int64) * n_cols
    db_out = db_partial_ptr + pid.to(tl.int64) * n_cols
    if TWO_PASS:
        for tile in range(first_tile, last_tile):
            _bwd_tile_two_pass(
                tile, tile == first_tile, x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr,
                dw_out, db_out, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
                IS_RMS, HAS_WEIGHT, HAS_BIAS, False, BLOCK_ROWS, BLOCK_COLS,
            )  # fmt: skip
    else:
        cols = tl.arange(0, BLOCK_COLS)
        w = _load_weight(w_ptr, cols, cols < n_cols, HAS_WEIGHT)
        dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        for tile in range(first_tile, last_tile):
            dw, db = _bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT,
                BLOCK_ROWS, BLOCK_COLS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
        _store_partials(dw_out, db_out, dw_acc, db_acc, n_cols, HAS_WEIGHT, HAS_BIAS, BLOCK_COLS)


@triton.jit
def _persistent_single_pass(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
    PAIR_SUMS: tl.constexpr,  # LayerNorm's two row sums in one reduction
):
    """Seed 000 kernel_1, single pass: a fixed grid grid-strides BLOCK_ROWS x BLOCK_COLS row
    tiles (BLOCK_COLS >= n_cols) and folds them into one fp32 partial row per program (PAIRED:
    programs 2k and 2k + 1 add into partial row k).
    PREFETCH issues the loads of the program's next tile before working on the current one
    (registers, not shared memory), so two tiles' loads are in flight per program."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_COLS)
    w = _load_weight(w_ptr, cols, cols < n_cols, HAS_WEIGHT)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    if PREFETCH:
        x_next, dy_next = _load_tile(x_ptr, dy_ptr, pid, n_rows, n_cols, x_row_stride,
                                     dy_row_stride, BLOCK_ROWS, BLOCK_COLS)  # fmt: skip
        for tile in tl.range(pid, n_tiles, n_programs):
            x_cur, dy_cur = x_next, dy_next
            # Past the last tile the mask is all false: nothing is read.
            x_next, dy_next = _load_tile(x_ptr, dy_ptr, tile + n_programs, n_rows, n_cols,
                                         x_row_stride, dy_row_stride, BLOCK_ROWS, BLOCK_COLS)
            dw, db = _bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT, BLOCK_ROWS,
                BLOCK_COLS, x_cur, dy_cur, True, PAIR_SUMS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
    else:
        for tile in tl.range(pid, n_tiles, n_programs, num_stages=LOOP_STAGES):
            dw, db = _bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT, BLOCK_ROWS,
                BLOCK_COLS, PAIR_SUMS=PAIR_SUMS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
    slot = (pid // 2 if PAIRED else pid).to(tl.int64)
    _store_partials(dw_partial_ptr + slot * n_cols, db_partial_ptr + slot * n_cols, dw_acc,
                    db_acc, n_cols, HAS_WEIGHT, HAS_BIAS, BLOCK_COLS, PAIRED)  # fmt: skip


@triton.jit
def _norm_bwd_persistent_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
):
    """The single-pass persistent backward (_persistent_single_pass) at a runtime width."""
    _persistent_single_pass(
        x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, n_rows,
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT, HAS_BIAS,
        BLOCK_ROWS, BLOCK_COLS, LOOP_STAGES, PREFETCH, PAIRED, False,
    )  # fmt: skip


@triton.jit
def _norm_bwd_persistent_static_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols: tl.constexpr,  # one compiled kernel per width
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
):
    """The same at a compile-time width, LayerNorm's row sums paired
    (configs.NORM_BWD_STATIC_COLS: where it measured faster)."""
    _persistent_single_pass(
        x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr, n_rows,
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, IS_RMS, HAS_WEIGHT, HAS_BIAS,
        BLOCK_ROWS, BLOCK_COLS, LOOP_STAGES, PREFETCH, PAIRED, True,
    )  # fmt: skip


@triton.jit
def _norm_bwd_persistent_two_pass_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    w_ptr,  # (n_cols,) weight
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (written)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (written)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
):
    """Seed 000 kernel_1, two pass, for rows wider than one register tile: each grid-strided
    row tile is walked twice in BLOCK_COLS chunks (c1/c2, then dx + partials); the re-read of
    the tile is mostly served by L2."""
    pid = tl.program_id(0)
    dw_out = dw_partial_ptr + pid.to(tl.int64) * n_cols
    db_out = db_partial_ptr + pid.to(tl.int64) * n_cols
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    for tile in range(pid, n_tiles, tl.num_programs(0)):
        _bwd_tile_two_pass(
            tile, tile == pid, x_ptr, dy_ptr, dx_ptr, w_ptr, mean_ptr, rstd_ptr, dw_out, db_out,
            n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
            IS_RMS, HAS_WEIGHT, HAS_BIAS, False, BLOCK_ROWS, BLOCK_COLS,
        )  # fmt: skip


@triton.jit
def _reduce_partials_kernel(
    dw_partial_ptr,  # (n_partials, n_cols) fp32 dweight partials
    db_partial_ptr,  # (n_partials, n_cols) fp32 dbias partials
    dw_ptr,  # (n_cols,) dweight out, param dtype (added into when ACCUMULATE_W)
    db_ptr,  # (n_cols,) dbias out, param dtype (added into when ACCUMULATE_B)
    n_partials,
    n_cols,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACCUMULATE_W: tl.constexpr,
    ACCUMULATE_B: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Column-parallel fp32 sum of the partial rows, in a fixed order (deterministic)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows < n_partials)[:, None] & col_mask[None, :]
        offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        if HAS_WEIGHT:
            dw_acc += tl.load(dw_partial_ptr + offsets, mask=mask, other=0.0)
        if HAS_BIAS:
            db_acc += tl.load(db_partial_ptr + offsets, mask=mask, other=0.0)
    if HAS_WEIGHT:
        dw = tl.sum(dw_acc, axis=0)
        if ACCUMULATE_W:
            dw += tl.load(dw_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=col_mask)
    if HAS_BIAS:
        db = tl.sum(db_acc, axis=0)
        if ACCUMULATE_B:
            db += tl.load(db_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=col_mask)


# ============================================================================================
# Launchers
# ============================================================================================


def _empty_forward(x2d, is_rms):
    """Uninitialized (y, mean | None, rstd) for x2d: (n_rows, n_cols); mean/rstd fp32 (n_rows,)."""
    n_rows = x2d.shape[0]
    y = torch.empty(x2d.shape, dtype=x2d.dtype, device=x2d.device)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    mean = None if is_rms else torch.empty(n_rows, dtype=torch.float32, device=x2d.device)
    return y, mean, rstd


def norm_forward(x2d, weight, bias, eps, is_rms, *, block_size=None, num_warps=None,
                 block_row=False):  # fmt: skip
    """Forward launcher: x2d (n_rows, n_cols) -> (y, mean | None, rstd), mean/rstd fp32 (n_rows,).

    ``block_size``/``num_warps`` override the heuristic (``configs.norm_fwd_config``); with
    ``NORMLAB_AUTOTUNE=1`` on a GPU and no override, the autotuned kernel picks them.
    ``block_row=True`` takes the block-row kernel (multi-row tiles, or a persistent grid) where
    ``configs.norm_fwd_block_row_config`` measured it faster; elsewhere one row per program.
    """
    x2d = unit_col_stride(x2d)
    n_rows, n_cols = x2d.shape
    if x2d.numel() == 0:  # no rows or no columns: empty y, nothing to launch
        return _empty_forward(x2d, is_rms)
    tile_cfg = configs.norm_fwd_block_row_config(n_rows, n_cols, is_rms) if block_row else None
    if tile_cfg is not None and block_size is None and num_warps is None:
        from normlab.kernels import narrow

        return narrow._fwd(x2d, weight, bias, eps, is_rms, tile_cfg)
    y, mean, rstd = _empty_forward(x2d, is_rms)
    args = (
        x2d, y,
        weight if weight is not None else rstd,
        bias if bias is not None else rstd,
        mean if mean is not None else rstd,
        rstd, x2d.stride(0), y.stride(0), n_cols, float(eps),
    )  # fmt: skip
    flags = {"IS_RMS": bool(is_rms), "HAS_WEIGHT": weight is not None, "HAS_BIAS": bias is not None}
    if AUTOTUNE and block_size is None and num_warps is None:
        _norm_fwd_kernel_tuned[(n_rows,)](*args, **flags)
    else:
        cfg = configs.norm_fwd_config(n_cols, is_rms, n_rows, _runtime.sm_count(x2d.device.index))
        block = triton.next_power_of_2(block_size) if block_size else cfg.block_size
        _norm_fwd_kernel[(n_rows,)](
            *args, **flags, BLOCK_SIZE=block, num_warps=num_warps or cfg.num_warps
        )
    return y, mean, rstd


def norm_backward(
    dy2d,
    x2d,
    weight,
    bias,
    mean,
    rstd,
    is_rms,
    *,
    strategy="auto",
    programs_per_sm=None,
    two_pass=None,
    grad_weight=None,
    grad_bias=None,
    block_rows=None,
    block_cols=None,
    num_warps=None,
    loop_stages=None,
    prefetch=None,
    paired_partials=None,
):
    """Backward launcher -> (dx, dweight | None, dbias | None).

    ``strategy`` picks the dweight/dbias reduction (module docstring); the keywords override
    ``configs.norm_bwd_config`` (``two_pass=True`` with a small ``block_cols`` exercises the
    wide-row path on small shapes). ``grad_weight``/``grad_bias``: existing fp32 or param-dtype
    buffers that the result is added into (fused ``.grad`` accumulation); they are returned.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: expected one of {STRATEGIES}")
    x2d, dy2d = unit_col_stride(x2d), unit_col_stride(dy2d)
    n_rows, n_cols = x2d.shape
    device = x2d.device
    has_w, has_b = weight is not None, bias is not None
    for name, buf, param in (("grad_weight", grad_weight, weight), ("grad_bias", grad_bias, bias)):
        if buf is not None and (param is None or buf.shape != (n_cols,) or buf.device != device):
            raise ValueError(
                f"{name} must be a ({n_cols},) tensor on {device} beside its parameter"
            )
    if strategy == "auto":
        strategy = configs.norm_bwd_auto_strategy(n_rows, n_cols)
    dx = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=device)
    dw = grad_weight if grad_weight is not None else (
        torch.empty(n_cols, dtype=weight.dtype, device=device) if has_w else None
    )  # fmt: skip
    db = grad_bias if grad_bias is not None else (
        torch.empty(n_cols, dtype=bias.dtype, device=device) if has_b else None
    )  # fmt: skip
    if dx.numel() == 0:  # no rows (dweight/dbias are 0) or no columns: nothing to launch
        for out, buf in ((dw, grad_weight), (db, grad_bias)):
            if out is not None and buf is None:
                out.zero_()
        return dx, dw, db
    cfg = configs.norm_bwd_config(
        strategy, n_rows, n_cols, is_rms=bool(is_rms), two_pass=two_pass, block_rows=block_rows,
        block_cols=block_cols, num_warps=num_warps, programs_per_sm=programs_per_sm,
        loop_stages=loop_stages, prefetch=prefetch, paired_partials=paired_partials,
    )  # fmt: skip
    dummy = rstd
    common = (
        x2d, dy2d, dx,
        weight if has_w else dummy,
        mean if mean is not None else dummy,
        rstd,
    )  # fmt: skip
    strides = (x2d.stride(0), dy2d.stride(0), dx.stride(0))
    flags = {"IS_RMS": bool(is_rms), "HAS_WEIGHT": has_w, "HAS_BIAS": has_b}
    tile = {"BLOCK_ROWS": cfg.block_rows, "BLOCK_COLS": cfg.block_cols, "num_warps": cfg.num_warps}
    n_tiles = triton.cdiv(n_rows, cfg.block_rows)

    if strategy == "atomic":
        # fp32 accumulators; a caller's fp32 .grad is accumulated into directly.
        def accumulator(buf, present):
            if not present:
                return dummy
            if buf is not None and buf.dtype == torch.float32:
                return buf
            return torch.zeros(n_cols, dtype=torch.float32, device=device)

        acc_w, acc_b = accumulator(grad_weight, has_w), accumulator(grad_bias, has_b)
        _norm_bwd_atomic_kernel[(n_tiles,)](
            *common, acc_w, acc_b, n_rows, n_cols, *strides, **flags,
            TWO_PASS=cfg.two_pass, **tile,
        )  # fmt: skip
        for out, buf, acc, present in (
            (dw, grad_weight, acc_w, has_w),
            (db, grad_bias, acc_b, has_b),
        ):
            if present and acc is not out:
                if buf is not None:
                    out.add_(acc)
                else:
                    out.copy_(acc)
        return dx, dw, db

    if strategy == "persistent":
        n_programs = min(n_tiles, cfg.programs_per_sm * _runtime.sm_count(device.index))
    else:
        tiles_per_program = cfg.rows_per_program // cfg.block_rows
        n_programs = triton.cdiv(n_tiles, tiles_per_program)
    paired = cfg.paired_partials and strategy == "persistent" and not cfg.two_pass
    workspace = torch.zeros if paired else torch.empty
    n_partials = triton.cdiv(n_programs, 2) if paired else n_programs
    dw_partial = (
        workspace((n_partials, n_cols), dtype=torch.float32, device=device) if has_w else dummy
    )
    db_partial = (
        workspace((n_partials, n_cols), dtype=torch.float32, device=device) if has_b else dummy
    )
    grid = (n_programs,)
    if strategy == "two_stage":
        _norm_bwd_partials_kernel[grid](
            *common, dw_partial, db_partial, n_rows, n_cols, *strides, tiles_per_program,
            **flags, TWO_PASS=cfg.two_pass, **tile,
        )  # fmt: skip
    elif cfg.two_pass:
        _norm_bwd_persistent_two_pass_kernel[grid](
            *common, dw_partial, db_partial, n_rows, n_cols, *strides, **flags, **tile
        )
    else:
        static = configs.norm_bwd_static_width(n_cols)
        kernel = _norm_bwd_persistent_static_kernel if static else _norm_bwd_persistent_kernel
        kernel[grid](
            *common, dw_partial, db_partial, n_rows, n_cols, *strides, **flags, **tile,
            LOOP_STAGES=cfg.loop_stages, PREFETCH=cfg.prefetch, PAIRED=paired,
        )  # fmt: skip
    if has_w or has_b:
        reduce_partials(
            dw_partial if has_w else None,
            db_partial if has_b else None,
            dw,
            db,
            accumulate_w=grad_weight is not None,
            accumulate_b=grad_bias is not None,
        )
    return dx, dw, db


def reduce_partials(
    dw_partial,
    db_partial,
    dw,
    db,
    *,
    accumulate_w=False,
    accumulate_b=False,
    block_m=None,
    block_n=None,
    num_warps=None,
):
    """Sum (n_partials, n_cols) fp32 partials over rows into dw/db (param dtype), in fp32."""
    ref = dw_partial if dw_partial is not None else db_partial
    n_partials, n_cols = ref.shape
    tile_m, tile_n, warps = configs.norm_reduce_config(
        n_cols, int(dw_partial is not None) + int(db_partial is not None)
    )
    block_m, block_n = block_m or tile_m, block_n or tile_n
    _reduce_partials_kernel[(triton.cdiv(n_cols, block_n),)](
        ref if dw_partial is None else dw_partial,
        ref if db_partial is None else db_partial,
        dw if dw is not None else ref,
        db if db is not None else ref,
        n_partials, n_cols,
        HAS_WEIGHT=dw_partial is not None, HAS_BIAS=db_partial is not None,
        ACCUMULATE_W=bool(accumulate_w), ACCUMULATE_B=bool(accumulate_b),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps or warps,
    )  # fmt: skip
    return dw, db


def _use_block_row(layout: str, strategy: str, n_rows: int, n_cols: int) -> bool:
    """Block-row kernels for this call? "auto" takes them only where configs.use_block_row says
    so and the backward strategy exists there (the block-row backward is always persistent)."""
    from normlab.kernels import narrow

    if layout != "auto":
        return layout == "block_row"
    return strategy in narrow.STRATEGIES and configs.use_block_row(n_rows, n_cols)


def _recomputes_stats(layout: str, strategy: str, n_rows: int, n_cols: int, is_rms: bool) -> bool:
    """Does this call's forward store no mean/rstd (the block-row backward recomputes them)?"""
    return (_use_block_row(layout, strategy, n_rows, n_cols)
            and configs.block_row_recompute_stats(n_cols, is_rms))  # fmt: skip


# ============================================================================================
# Custom ops (torch.compile-able) and autograd
# ============================================================================================


@torch.library.custom_op("normlab::norm_fwd", mutates_args=())
def _norm_fwd_op(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    is_rms: bool,
    strategy: str,
    layout: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd); absent statistics are empty tensors (custom ops return no None): mean for
    RMSNorm, both where the block-row backward recomputes them (configs.block_row_recompute_stats)."""
    n_rows, n_cols = x.shape
    if _use_block_row(layout, strategy, n_rows, n_cols):
        from normlab.kernels import narrow

        y, mean, rstd = narrow.block_row_forward(
            x.contiguous(), weight, bias, eps, is_rms,
            store_stats=not _recomputes_stats(layout, strategy, n_rows, n_cols, is_rms),
        )  # fmt: skip
    else:
        y, mean, rstd = norm_forward(x, weight, bias, eps, is_rms, block_row=layout == "auto")
    none = x.new_empty((0,), dtype=torch.float32)
    return y, (mean if mean is not None else none), (rstd if rstd is not None else none.clone())


@_norm_fwd_op.register_fake
def _(x, weight, bias, eps, is_rms, strategy, layout):
    n_rows, n_cols = x.shape
    n_stats = 0 if _recomputes_stats(layout, strategy, n_rows, n_cols, is_rms) else n_rows
    stat = x.new_empty((n_stats,), dtype=torch.float32)
    mean = x.new_empty((0,), dtype=torch.float32) if is_rms else stat.new_empty((n_stats,))
    return x.new_empty((n_rows, n_cols)), mean, stat


@torch.library.custom_op("normlab::norm_bwd", mutates_args=())
def _norm_bwd_op(
    dy: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    mean: torch.Tensor,
    rstd: torch.Tensor,
    eps: float,
    is_rms: bool,
    strategy: str,
    layout: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias); absent parameter gradients are empty tensors. An empty rstd (the
    block-row forward stored none) means: recompute the statistics from x and eps."""
    n_rows, n_cols = x.shape
    mean_ = None if is_rms or mean.numel() == 0 else mean
    if _use_block_row(layout, strategy, n_rows, n_cols):
        from normlab.kernels import narrow

        dx, dw, db = narrow.block_row_backward(
            dy.contiguous(), x.contiguous(), weight, bias, mean_,
            rstd if rstd.numel() else None, is_rms, strategy, eps=eps,
        )  # fmt: skip
    else:
        # layout="row" is seed 003's row_mode=True: one row per tile, however narrow the rows.
        block_rows = 1 if layout == "row" else None
        dx, dw, db = norm_backward(dy, x, weight, bias, mean_, rstd, is_rms, strategy=strategy,
                                   block_rows=block_rows)
    # Custom-op outputs may not alias each other: one fresh empty tensor per absent gradient.
    dw = dw if dw is not None else rstd.new_empty(0)
    db = db if db is not None else rstd.new_empty(0)
    return dx, dw, db


@_norm_bwd_op.register_fake
def _(dy, x, weight, bias, mean, rstd, eps, is_rms, strategy, layout):
    dw = weight.new_empty(weight.shape) if weight is not None else rstd.new_empty((0,))
    db = bias.new_empty(bias.shape) if bias is not None else rstd.new_empty((0,))
    return x.new_empty(x.shape), dw, db


def _setup_context(ctx, inputs, output):
    x, weight, bias, eps, is_rms, strategy, layout = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.eps, ctx.is_rms, ctx.strategy, ctx.layout = eps, is_rms, strategy, layout
    # mean/rstd get no gradient: left unmaterialized, autograd launches no zero-fill per backward
    # (0.7-1.8 us in the records of 2a07d86, "FillFunctor<float>").
    ctx.set_materialize_grads(False)


def _backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dw, db = torch.ops.normlab.norm_bwd(
        dy, x, weight, bias, mean, rstd, ctx.eps, ctx.is_rms, ctx.strategy, ctx.layout
    )
    return (
        dx,
        dw if weight is not None else None,
        db if bias is not None else None,
        None, None, None, None,
    )  # fmt: skip


_norm_fwd_op.register_autograd(_backward, setup_context=_setup_context)


# ============================================================================================
# Public functional API
# ============================================================================================


def _prepare(name, x, weight, bias, eps, strategy, layout):
    """Validate the public arguments; return x as a (n_rows, n_cols) view (or copy)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: x has dtype {x.dtype}; the kernels take float32/float16/bfloat16 "
            f"(for float64 use normlab.ref.{name})"
        )
    if x.dim() == 0:
        raise ValueError(f"{name}: x must have a last dimension to normalize, got a 0-d tensor")
    if x.device.type != _runtime.DEVICE:
        raise ValueError(
            f"{name}: x is on {x.device} but normlab runs on {_runtime.DEVICE!r} "
            f"(mode {_runtime.MODE!r})"
        )
    n_cols = x.shape[-1]
    for pname, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{name}: {pname} must be a torch.Tensor or None")
        if p.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"{name}: {pname} has dtype {p.dtype}; expected float32/float16/bfloat16"
            )
        if tuple(p.shape) != (n_cols,):
            raise ValueError(f"{name}: {pname} must have shape ({n_cols},), got {tuple(p.shape)}")
        if p.device != x.device:
            raise ValueError(
                f"{name}: {pname} is on device {p.device} but x is on device {x.device}"
            )
    if not is_valid_eps(eps):
        raise ValueError(f"{name}: eps must be a finite float >= 0, got {eps!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"{name}: strategy={strategy!r}; expected one of {STRATEGIES}")
    if layout not in LAYOUTS:
        raise ValueError(f"{name}: layout={layout!r}; expected one of {LAYOUTS}")
    from normlab.kernels import narrow

    if layout == "block_row" and strategy not in narrow.STRATEGIES:
        raise ValueError(
            f"{name}: strategy={strategy!r} does not exist for layout='block_row' (its backward is "
            "always persistent); use strategy='auto' or 'persistent', or layout='row'/'auto'"
        )
    # Not reshape(-1, n_cols): -1 is ambiguous when n_cols is 0.
    x2d = x.reshape(1, n_cols) if x.dim() == 1 else x.flatten(0, -2)
    return unit_col_stride(x2d)


def rms_norm(x, weight=None, eps=1e-6, *, strategy="auto", layout="auto"):
    """RMSNorm over the last dim: ``x / sqrt(mean(x^2) + eps) * weight``; fp32 statistics.

    ``strategy`` in ("auto", "atomic", "two_stage", "persistent") picks the backward dweight
    reduction; ``layout`` in ("auto", "row", "block_row") picks the row kernels or the block-row
    kernels of ``normlab.kernels.narrow`` ("row": one row per program forward and one row per
    tile backward, seed 003's single-row path). Output dtype = x dtype.
    """
    x2d = _prepare("rms_norm", x, weight, None, eps, strategy, layout)
    y, _, _ = torch.ops.normlab.norm_fwd(x2d, weight, None, float(eps), True, strategy, layout)
    return y.view(x.shape)


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, strategy="auto", layout="auto"):
    """LayerNorm over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased
    variance, fp32 statistics). ``strategy``/``layout`` as for :func:`rms_norm`."""
    x2d = _prepare("layer_norm", x, weight, bias, eps, strategy, layout)
    y, _, _ = torch.ops.normlab.norm_fwd(x2d, weight, bias, float(eps), False, strategy, layout)
    return y.view(x.shape)
