"""Block-row RMSNorm / LayerNorm: many rows per program, for narrow rows.

One program per row leaves a GPU idle when rows hold 16-256 elements: each program moves a few
hundred bytes and the launch, the reduction and the DRAM latency dominate. Here one program
normalises a (BLOCK_ROWS, BLOCK_COLS) tile of many rows in the forward (the design of
Liger-Kernel's block-row pull request, https://github.com/linkedin/Liger-Kernel/pull/1620), and
the backward runs a persistent grid that grid-strides row tiles, keeping dγ/dβ in fp32 registers
and writing one fp32 partial row per program (summed by ``norms.reduce``; no atomics,
deterministic). Where ``config.block_row_recompute_stats`` says so, the forward stores no
mean/rstd and the backward recomputes them from the x tile it reads anyway. The same forward
kernel, with a persistent prefetching grid, runs the wide-row tiles of
``config.NORM_FWD_BLOCK_ROW``. Rows of one column, contiguous, take a pointwise forward
instead (``config.PointwiseFwdConfig``): each row is its own reduction. Both directions take the
weight offset and the fused residual add (HAS_RESIDUAL / HAS_DH) as ``norms.row`` does.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from normlab import _runtime
from normlab._host import (
    FLOAT_DTYPES,
    cdiv,
    fused_add_buffers,
    is_valid_eps,
    next_pow2,
    unit_col_stride,
)
from normlab._launch import buffer, launch
from normlab.norms import config
from normlab.norms.reduce import reduce_partials
from normlab.norms.tiles import known_bwd_layout, known_multiple, load_f32, store_cast, store_sum

STRATEGIES = config.BLOCK_ROW_STRATEGIES


# ============================================================================================
# Kernels
# ============================================================================================


@triton.jit
def _tile_rows(tile, BLOCK_ROWS: tl.constexpr, INT64_ROWS: tl.constexpr):
    """The row indices of row tile ``tile``: int64 only where a row offset may pass int32
    (``row_offsets_int64``); an int32 offset is one multiply-add an element, not a wide one."""
    if INT64_ROWS:
        tile = tl.cast(tile, tl.int64)
    return tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)


@triton.jit
def _load_row_tile(ptr, tile, n_rows, col_mask, row_stride, BLOCK_ROWS: tl.constexpr,
                   BLOCK_COLS: tl.constexpr, INT64_ROWS: tl.constexpr):  # fmt: skip
    """One row tile of a matrix in its storage dtype; rows past n_rows (a tile past the end)
    read 0."""
    rows = _tile_rows(tile, BLOCK_ROWS, INT64_ROWS)
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    cols = tl.arange(0, BLOCK_COLS)
    return tl.load(ptr + rows[:, None] * row_stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def _load_x_r_tile(x_ptr, r_ptr, tile, n_rows, col_mask, x_row_stride, r_row_stride,
                   HAS_RESIDUAL: tl.constexpr, BLOCK_ROWS: tl.constexpr,
                   BLOCK_COLS: tl.constexpr, INT64_ROWS: tl.constexpr):  # fmt: skip
    """x and (HAS_RESIDUAL) residual row tiles; without a residual, x stands in (unread)."""
    x = _load_row_tile(x_ptr, tile, n_rows, col_mask, x_row_stride, BLOCK_ROWS, BLOCK_COLS,
                       INT64_ROWS)  # fmt: skip
    if HAS_RESIDUAL:
        r = _load_row_tile(r_ptr, tile, n_rows, col_mask, r_row_stride, BLOCK_ROWS, BLOCK_COLS,
                           INT64_ROWS)  # fmt: skip
    else:
        r = x
    return x, r


@triton.jit
def _normalize_tile(
    x, r, tile, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, y_row_stride,
    h_row_stride, eps, offset, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr, STORE_STATS: tl.constexpr, INT64_ROWS: tl.constexpr,
):  # fmt: skip
    """Normalize one loaded row tile (HAS_RESIDUAL: store h = x + r, then normalize h) and store
    y (and, with STORE_STATS, mean and rstd)."""
    rows = _tile_rows(tile, BLOCK_ROWS, INT64_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    col_mask = cols < n_cols
    mask = row_mask[:, None] & col_mask[None, :]
    if HAS_RESIDUAL:
        x = store_sum(x, r, h_ptr + rows[:, None] * h_row_stride + cols[None, :], mask, False)
    else:
        x = x.to(tl.float32)
    inv_n = 1.0 / n_cols
    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=1) * inv_n
        # padding columns must stay 0 so they add nothing to the variance
        xc = tl.where(mask, x - mean[:, None], 0.0)
        if STORE_STATS:
            tl.store(mean_ptr + rows, mean, mask=row_mask)
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) * inv_n + eps)
    if STORE_STATS:
        tl.store(rstd_ptr + rows, rstd, mask=row_mask)

    y = xc * rstd[:, None]
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32) + offset
        y = y * w[None, :]
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        y = y + b[None, :]
    tl.store(
        y_ptr + rows[:, None] * y_row_stride + cols[None, :],
        y.to(y_ptr.dtype.element_ty),
        mask=mask,
    )


@triton.jit
def _block_row_fwd_kernel(
    x_ptr,  # (n_rows, n_cols) input
    r_ptr,  # (n_rows, n_cols) residual; read only if HAS_RESIDUAL
    y_ptr,  # (n_rows, n_cols) output, dtype of x
    h_ptr,  # (n_rows, n_cols) x + residual, dtype of x; written only if HAS_RESIDUAL
    w_ptr,  # (n_cols,) weight; read only if HAS_WEIGHT
    b_ptr,  # (n_cols,) bias; read only if HAS_BIAS
    mean_ptr,  # (n_rows,) fp32 row mean; written only for LayerNorm with STORE_STATS
    rstd_ptr,  # (n_rows,) fp32 1 / sqrt(var + eps); written only with STORE_STATS
    n_rows,
    n_cols,
    x_row_stride,
    r_row_stride,
    y_row_stride,
    h_row_stride,
    eps,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    PERSISTENT: tl.constexpr,
    STORE_STATS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
    INT64_ROWS: tl.constexpr,  # a row offset may pass int32 (row_offsets_int64)
):
    """y = (x - mean) * rstd * w + b, rstd = rsqrt(var + eps), w = offset + weight; RMSNorm:
    mean = 0 and no b. HAS_RESIDUAL: x is h = x + residual, also written.

    One program per row tile; PERSISTENT: a fixed grid grid-strides the row tiles, each program
    loading its next tile before it normalizes and stores the current one, so its loads stay in
    flight while it stores (the persistent backward's prefetch)."""
    pid = tl.program_id(0)
    n_cols = known_multiple(n_cols, ROW_ALIGN)  # the host took n_cols into ROW_ALIGN
    x_row_stride = known_multiple(x_row_stride, ROW_ALIGN)
    y_row_stride = known_multiple(y_row_stride, ROW_ALIGN)
    if HAS_RESIDUAL:
        r_row_stride = known_multiple(r_row_stride, ROW_ALIGN)
        h_row_stride = known_multiple(h_row_stride, ROW_ALIGN)
    col_mask = tl.arange(0, BLOCK_COLS) < n_cols
    eps = tl.cast(eps, tl.float32)  # torch.compile may hand us an fp64 scalar
    offset = tl.cast(offset, tl.float32)
    if PERSISTENT:
        n_programs = tl.num_programs(0)
        x_next, r_next = _load_x_r_tile(x_ptr, r_ptr, pid, n_rows, col_mask, x_row_stride,
                                        r_row_stride, HAS_RESIDUAL, BLOCK_ROWS, BLOCK_COLS,
                                        INT64_ROWS)  # fmt: skip
        for tile in tl.range(pid, tl.cdiv(n_rows, BLOCK_ROWS), n_programs):
            x, r = x_next, r_next
            # past the last tile this reads nothing: every row is masked
            x_next, r_next = _load_x_r_tile(x_ptr, r_ptr, tile + n_programs, n_rows, col_mask,
                                            x_row_stride, r_row_stride, HAS_RESIDUAL,
                                            BLOCK_ROWS, BLOCK_COLS, INT64_ROWS)  # fmt: skip
            _normalize_tile(x, r, tile, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows,
                            n_cols, y_row_stride, h_row_stride, eps, offset, IS_RMS, HAS_WEIGHT,
                            HAS_BIAS, HAS_RESIDUAL, BLOCK_ROWS, BLOCK_COLS,
                            STORE_STATS, INT64_ROWS)  # fmt: skip
    else:
        x, r = _load_x_r_tile(x_ptr, r_ptr, pid, n_rows, col_mask, x_row_stride, r_row_stride,
                              HAS_RESIDUAL, BLOCK_ROWS, BLOCK_COLS, INT64_ROWS)  # fmt: skip
        _normalize_tile(x, r, pid, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_rows, n_cols,
                        y_row_stride, h_row_stride, eps, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS,
                        HAS_RESIDUAL, BLOCK_ROWS, BLOCK_COLS, STORE_STATS, INT64_ROWS)  # fmt: skip


@triton.jit
def _normalize_points(x_ptr, r_ptr, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, rows, mask,
                      eps, offset, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                      HAS_BIAS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                      STORE_STATS: tl.constexpr, EVEN: tl.constexpr):  # fmt: skip
    """Normalize rows of one column (no predicate under EVEN), as _normalize_tile does: RMSNorm
    rstd = rsqrt(x * x + eps); LayerNorm mean = x, rstd = rsqrt((x - mean)^2 + eps), so y = b
    where x is finite and NaN where it is not (x - x), as torch's. The scalar w and b load after
    x: loaded before the branch, their wait came ahead of x's loads in the SASS (the change
    measured level on the H200: the 2026-12-04 short-calls note)."""
    x = load_f32(x_ptr + rows, mask, EVEN, "")
    w = tl.load(w_ptr).to(tl.float32) + offset if HAS_WEIGHT else 1.0
    b = tl.load(b_ptr).to(tl.float32) if HAS_BIAS else 0.0
    if HAS_RESIDUAL:
        x = store_sum(x, load_f32(r_ptr + rows, mask, EVEN, ""), h_ptr + rows, mask, EVEN)
    if IS_RMS:
        xc = x
    else:
        mean = x
        xc = x - mean
        if STORE_STATS:
            store_cast(mean_ptr + rows, mean, mask, EVEN)
    rstd = tl.rsqrt(xc * xc + eps)
    if STORE_STATS:
        store_cast(rstd_ptr + rows, rstd, mask, EVEN)
    y = xc * rstd
    if HAS_WEIGHT:
        y = y * w
    if HAS_BIAS:
        y = y + b
    store_cast(y_ptr + rows, y, mask, EVEN)


@triton.jit
def _pointwise_fwd_kernel(
    x_ptr,  # (n_rows,) input: rows of one column, contiguous
    r_ptr,  # (n_rows,) residual; read only if HAS_RESIDUAL
    y_ptr,  # (n_rows,) output, dtype of x
    h_ptr,  # (n_rows,) x + residual, dtype of x; written only if HAS_RESIDUAL
    w_ptr,  # (1,) weight; read only if HAS_WEIGHT
    b_ptr,  # (1,) bias; read only if HAS_BIAS
    mean_ptr,  # (n_rows,) fp32 row mean; written only for LayerNorm with STORE_STATS
    rstd_ptr,  # (n_rows,) fp32 1 / sqrt(var + eps); written only with STORE_STATS
    n_rows,
    eps,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    STORE_STATS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The forward of rows of one column, each its own reduction (_normalize_points). One
    program per BLOCK consecutive rows: unit strides, so the loads and stores are 16-byte
    vectors, every block but the last without a predicate (a mask of an odd n_rows would split
    them into single elements)."""
    start = tl.cast(tl.program_id(0), tl.int64) * BLOCK
    rows = start + tl.arange(0, BLOCK)
    eps = tl.cast(eps, tl.float32)  # torch.compile may hand us an fp64 scalar
    offset = tl.cast(offset, tl.float32)
    mask = rows < n_rows
    if start + BLOCK <= n_rows:
        _normalize_points(x_ptr, r_ptr, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, rows,
                          mask, eps, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_RESIDUAL,
                          STORE_STATS, True)  # fmt: skip
    else:
        _normalize_points(x_ptr, r_ptr, y_ptr, h_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, rows,
                          mask, eps, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_RESIDUAL,
                          STORE_STATS, False)  # fmt: skip


@triton.jit
def _load_tile(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) upstream gradient
    tile,
    n_rows,
    col_mask,
    x_row_stride,
    dy_row_stride,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    INT64_ROWS: tl.constexpr,
):
    """x and dy of one row tile in their storage dtype; rows past n_rows read as 0."""
    x = _load_row_tile(x_ptr, tile, n_rows, col_mask, x_row_stride, BLOCK_ROWS, BLOCK_COLS,
                       INT64_ROWS)  # fmt: skip
    dy = _load_row_tile(dy_ptr, tile, n_rows, col_mask, dy_row_stride, BLOCK_ROWS, BLOCK_COLS,
                        INT64_ROWS)  # fmt: skip
    return x, dy


@triton.jit
def _block_row_bwd_kernel(
    dy_ptr,  # (n_rows, n_cols) upstream gradient
    x_ptr,  # (n_rows, n_cols) forward input
    w_ptr,  # (n_cols,) weight; read only if HAS_WEIGHT
    mean_ptr,  # (n_rows,) fp32 row mean from the forward; read only for LayerNorm, not RECOMPUTE
    rstd_ptr,  # (n_rows,) fp32 rstd from the forward; read only without RECOMPUTE_STATS
    dx_ptr,  # (n_rows, n_cols) input gradient, dtype of x
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h; read only if HAS_DH
    dw_partial_ptr,  # (n_programs, n_cols) fp32 per-program dγ (one program: dγ); if HAS_WEIGHT
    db_partial_ptr,  # (n_programs, n_cols) fp32 per-program dβ (one program: dβ); if HAS_BIAS
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    eps,  # the forward's eps; used only with RECOMPUTE_STATS
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ACC_TILE: tl.constexpr,
    PREFETCH: tl.constexpr,
    RECOMPUTE_STATS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
    INT64_ROWS: tl.constexpr,  # int64 row offsets (bwd_offsets_int64)
):
    """xhat = (x - mean) * rstd, g = dy * (offset + weight):
    dx = rstd * (g - xhat * mean(g * xhat) - mean(g)) (RMSNorm drops the mean(g) term), plus dh
    with HAS_DH;  dγ = Σ_rows dy * xhat,  dβ = Σ_rows dy.

    RECOMPUTE_STATS: mean and rstd come from the x tile already in registers, with the forward's
    fp32 arithmetic, instead of from memory (the forward then stores none).
    ACC_TILE: accumulate dγ/dβ as whole fp32 tiles and reduce over rows once at the end (no
    per-tile cross-warp reduction, but two tile-sized register accumulators); otherwise reduce
    each tile's columns into fp32 vectors. PREFETCH: issue the loads of this program's next
    tile before working on the current one, so DRAM latency overlaps the math and the stores.
    """
    pid = tl.program_id(0)
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    n_programs = tl.num_programs(0)
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    inv_n = 1.0 / n_cols
    eps = tl.cast(eps, tl.float32)  # torch.compile may hand us an fp64 scalar
    cols = tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        w += tl.cast(offset, tl.float32)
    if ACC_TILE:
        dw_acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=tl.float32)
    else:
        dw_acc = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
        db_acc = tl.zeros((BLOCK_COLS,), dtype=tl.float32)
    if PREFETCH:
        x_next, dy_next = _load_tile(x_ptr, dy_ptr, pid, n_rows, col_mask, x_row_stride,
                                     dy_row_stride, BLOCK_ROWS, BLOCK_COLS, INT64_ROWS)

    for tile in tl.range(pid, n_tiles, n_programs):
        if PREFETCH:
            x, dy = x_next, dy_next
            # past the last tile this reads nothing: every row is masked
            x_next, dy_next = _load_tile(
                x_ptr, dy_ptr, tile + n_programs, n_rows, col_mask, x_row_stride, dy_row_stride,
                BLOCK_ROWS, BLOCK_COLS, INT64_ROWS,
            )  # fmt: skip
        else:
            x, dy = _load_tile(x_ptr, dy_ptr, tile, n_rows, col_mask, x_row_stride,
                               dy_row_stride, BLOCK_ROWS, BLOCK_COLS, INT64_ROWS)
        rows = _tile_rows(tile, BLOCK_ROWS, INT64_ROWS)
        row_mask = rows < n_rows
        mask = row_mask[:, None] & col_mask[None, :]
        x = x.to(tl.float32)
        dy = dy.to(tl.float32)
        if RECOMPUTE_STATS:
            # as _normalize_tile; rows past n_rows get rstd 0 (not rsqrt(eps), inf at eps = 0)
            if IS_RMS:
                xc = x
            else:
                mean = tl.sum(x, axis=1) * inv_n
                xc = tl.where(mask, x - mean[:, None], 0.0)
            rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) * inv_n + eps)
            rstd = tl.where(row_mask, rstd, 0.0)
            xhat = xc * rstd[:, None]
        else:
            rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
            if IS_RMS:
                xhat = x * rstd[:, None]
            else:
                mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        if HAS_WEIGHT:
            g = dy * w[None, :]
        else:
            g = dy
        c1 = tl.sum(xhat * g, axis=1) * inv_n
        if IS_RMS:
            dx = (g - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(g, axis=1) * inv_n
            dx = (g - xhat * c1[:, None] - c2[:, None]) * rstd[:, None]
        if HAS_DH:
            dh_offs = rows[:, None] * dh_row_stride + cols[None, :]
            dx += tl.load(dh_ptr + dh_offs, mask=mask, other=0.0).to(tl.float32)
        dx_offs = rows[:, None] * dx_row_stride + cols[None, :]
        tl.store(dx_ptr + dx_offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
        # dy and xhat are fp32 here: the dγ/dβ sums never run in bf16/fp16
        if HAS_WEIGHT:
            if ACC_TILE:
                dw_acc += dy * xhat
            else:
                dw_acc += tl.sum(dy * xhat, axis=0)
        if HAS_BIAS:
            if ACC_TILE:
                db_acc += dy
            else:
                db_acc += tl.sum(dy, axis=0)

    if ACC_TILE:
        dw_acc = tl.sum(dw_acc, axis=0)
        db_acc = tl.sum(db_acc, axis=0)
    # one program: its partial row is dγ/dβ itself, stored in the parameter's dtype
    if HAS_WEIGHT:
        tl.store(dw_partial_ptr + pid * n_cols + cols,
                 dw_acc.to(dw_partial_ptr.dtype.element_ty), mask=col_mask)  # fmt: skip
    if HAS_BIAS:
        tl.store(db_partial_ptr + pid * n_cols + cols,
                 db_acc.to(db_partial_ptr.dtype.element_ty), mask=col_mask)  # fmt: skip


# ============================================================================================
# Launchers
# ============================================================================================


def _check_matrix(name: str, t, n_rows: int | None = None, n_cols: int | None = None) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}.dtype is {t.dtype}; block_row supports float32, float16, bfloat16")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D (n_rows, n_cols), got shape {tuple(t.shape)}")
    if n_rows is not None and tuple(t.shape) != (n_rows, n_cols):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {(n_rows, n_cols)}")


def _check_vector(name: str, t, n: int, like: torch.Tensor, dtype=None) -> None:
    if t is None:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if t.dtype not in ((dtype,) if dtype is not None else FLOAT_DTYPES):
        raise TypeError(
            f"{name}.dtype is {t.dtype}, expected {dtype or 'float32/float16/bfloat16'}"
        )
    if tuple(t.shape) != (n,):
        raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({n},)")
    if t.device != like.device:
        raise ValueError(f"{name} is on {t.device} but x is on {like.device}")


def one_warp_rows(x, *others) -> bool:
    """``config.one_warp_rows`` at the ROW_ALIGN the launchers give rows of x and ``others``
    (None: absent) beside fresh outputs of x's width."""
    strides = [t.stride(0) for t in (x, *others) if t is not None]
    size = x.element_size()
    align = config.kernel_row_align(math.gcd(x.shape[1], *strides), size)
    return config.one_warp_rows(x.shape[1], align, size)


def tile_offsets_int64(n_tiles: int, n_programs: int, block_rows: int, *row_strides: int) -> bool:
    """``config.row_offsets_int64`` for a grid of row tiles: a persistent program's prefetch
    indexes one tile past its last, so rows reach (n_tiles + n_programs) tiles."""
    return config.row_offsets_int64((n_tiles + n_programs) * block_rows, *row_strides)


def bwd_offsets_int64(n_tiles: int, n_programs: int, block_rows: int, n_cols: int,
                      *row_strides: int) -> bool:  # fmt: skip
    """The backward's row offsets: int32 only in tiny-width tiles (rows of per-row scalars) that
    fit it. LayerNorm 1000003 x 31 and x 127 took 183 and 368 µs in int32, 139 and 277 in int64;
    rows of 5 and 7 columns, with the prefetch, 168 (RMSNorm), 236 (LayerNorm) and 145 µs in
    int32, 214, 289 and 175 in int64 (norm_narrow_odd*_0ab8648, norm_narrow_after_9327280)."""
    return n_cols >= config.BLOCK_ROW_TINY_COLS or tile_offsets_int64(
        n_tiles, n_programs, block_rows, n_cols, *row_strides)


def launch_forward(x, weight, bias, eps, is_rms, cfg: config.BlockRowFwdConfig, store_stats=True,
                   *, offset=0.0, residual=None, h_out=None, int64_rows=None):  # fmt: skip
    """Launch the forward with an explicit config (tuning scripts call this; no width limit).
    ``offset``, ``residual`` and ``h_out`` as for ``row.norm_forward``; ``int64_rows`` True
    forces int64 row offsets (None: ``tile_offsets_int64``).

    -> (y, mean, rstd); mean is None for RMSNorm, both are None without ``store_stats``."""
    n_rows, n_cols = x.shape
    x = unit_col_stride(x)
    residual, h_out = fused_add_buffers(x, residual, h_out)
    y = buffer((n_rows, n_cols), x.dtype, x.device)
    rstd = mean = None
    if store_stats:
        rstd = buffer(n_rows, torch.float32, x.device)
        mean = None if is_rms else buffer(n_rows, torch.float32, x.device)
    # Absent tensors go as None (constexprs); without a residual its rows and h's take x's and
    # y's strides, which keeps ROW_ALIGN and the int64 rule as they were.
    r, h = residual, h_out
    strides = (x.stride(0), (r if r is not None else x).stride(0), y.stride(0),
               (h if h is not None else y).stride(0))  # fmt: skip
    params = (weight, bias, mean, rstd)
    flags = {"IS_RMS": is_rms, "HAS_WEIGHT": weight is not None, "HAS_BIAS": bias is not None,
             "HAS_RESIDUAL": residual is not None, "STORE_STATS": store_stats}
    if cfg.pointwise is not None and n_cols == 1 and strides == (1, 1, 1, 1):
        launch(_pointwise_fwd_kernel, (cdiv(n_rows, cfg.pointwise.block),), x, r, y, h, *params,
               n_rows, float(eps), float(offset), **flags, BLOCK=cfg.pointwise.block,
               num_warps=cfg.pointwise.num_warps)  # fmt: skip
        return y, mean, rstd
    n_tiles = cdiv(n_rows, cfg.block_rows)
    n_programs = n_tiles
    if cfg.programs_per_sm:
        n_programs = min(n_tiles, cfg.programs_per_sm * _runtime.sm_count(x.device.index))
    launch(
        _block_row_fwd_kernel, (n_programs,),
        x,
        r,
        y,
        h,
        *params,
        n_rows,
        n_cols,
        *strides,
        float(eps),
        float(offset),
        **flags,
        BLOCK_ROWS=cfg.block_rows,
        BLOCK_COLS=next_pow2(n_cols),
        PERSISTENT=n_programs < n_tiles,
        ROW_ALIGN=config.kernel_row_align(math.gcd(*strides, n_cols), x.element_size()),
        INT64_ROWS=int64_rows or tile_offsets_int64(n_tiles, n_programs, cfg.block_rows, n_cols,
                                                    *strides),
        num_warps=cfg.num_warps,
    )
    return y, mean, rstd


def launch_backward(dy, x, weight, bias, mean, rstd, is_rms, cfg: config.BlockRowBwdConfig,
                    eps=None, grad_weight=None, grad_bias=None, *, offset=0.0, dh=None,
                    int64_rows=None):  # fmt: skip
    """Launch the backward with an explicit config (tuning scripts call this; no width limit).
    ``rstd`` None: recompute mean and rstd from x with the forward's ``eps``. ``offset`` and
    ``dh`` as for ``row.norm_backward``; ``int64_rows`` True forces int64 row offsets (None:
    ``bwd_offsets_int64``).

    -> (dx, dweight | None, dbias | None), dweight/dbias summed in fp32 in the parameter's dtype
    (added into ``grad_weight``/``grad_bias`` where given, as the row launcher does)."""
    has_bias = bias is not None
    recompute = rstd is None
    if recompute and eps is None:
        raise ValueError("recomputing the row statistics (rstd=None) needs the forward's eps")
    n_rows, n_cols = x.shape
    x = unit_col_stride(x)
    dy = unit_col_stride(dy)
    if dh is not None:
        _check_matrix("dh", dh, n_rows, n_cols)
        dh = unit_col_stride(dh)
    n_programs = cfg.programs_per_sm * _runtime.sm_count(x.device.index if x.is_cuda else None)
    n_programs = max(1, min(n_programs, cdiv(n_rows, cfg.block_rows)))
    dx = buffer((n_rows, n_cols), x.dtype, x.device)
    has_weight = weight is not None
    # One program holds every row: its partial row is the result, written in the parameter's
    # dtype (no workspace, no reduce launch), as row.norm_backward's persistent grid does.
    direct = n_programs == 1 and grad_weight is None and grad_bias is None
    if direct:
        dw_partial = buffer(n_cols, weight.dtype, x.device) if has_weight else None
        db_partial = buffer(n_cols, bias.dtype, x.device) if has_bias else None
    else:
        dw_partial = buffer((n_programs, n_cols), torch.float32, x.device) if has_weight else None
        db_partial = buffer((n_programs, n_cols), torch.float32, x.device) if has_bias else None
    strides = (x.stride(0), dy.stride(0), dx.stride(0),
               dh.stride(0) if dh is not None else dx.stride(0))  # fmt: skip
    launch(
        _block_row_bwd_kernel, (n_programs,),
        dy,
        x,
        weight,  # None where absent (a constexpr), as are the statistics, dh and partials
        mean,
        rstd,
        dx,
        dh,
        dw_partial,
        db_partial,
        n_rows,
        n_cols,
        *strides,
        float(eps) if recompute else 0.0,
        float(offset),
        IS_RMS=is_rms,
        HAS_WEIGHT=has_weight,
        HAS_BIAS=has_bias,
        HAS_DH=dh is not None,
        BLOCK_ROWS=cfg.block_rows,
        BLOCK_COLS=next_pow2(n_cols),
        ACC_TILE=cfg.acc_tile,
        PREFETCH=cfg.prefetch,
        RECOMPUTE_STATS=recompute,
        ROW_ALIGN=config.kernel_row_align(math.gcd(*strides, n_cols), x.element_size()),
        INT64_ROWS=int64_rows or bwd_offsets_int64(cdiv(n_rows, cfg.block_rows), n_programs,
                                                   cfg.block_rows, n_cols, *strides),
        num_warps=cfg.num_warps,
        **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}),
    )
    if direct:
        return dx, dw_partial, db_partial
    dw = grad_weight if grad_weight is not None else (
        buffer(n_cols, weight.dtype, x.device) if has_weight else None)
    db = grad_bias if grad_bias is not None else (
        buffer(n_cols, bias.dtype, x.device) if has_bias else None)
    if has_weight or has_bias:
        reduce_partials(dw_partial, db_partial, dw, db, accumulate_w=grad_weight is not None,
                        accumulate_b=grad_bias is not None)  # fmt: skip
    return dx, dw, db


def _check_width(n_cols: int) -> None:
    if n_cols > config.BLOCK_ROW_MAX_COLS:
        raise ValueError(
            f"block_row handles rows of at most {config.BLOCK_ROW_MAX_COLS} columns, "
            f'got {n_cols}; use layout="row" (or "auto") for wider rows'
        )


def _check_input(x) -> tuple[int, int]:
    """x must be an (n_rows, n_cols) matrix narrow enough for block-row tiles (empty is fine)."""
    _check_matrix("x", x)
    n_rows, n_cols = x.shape
    _check_width(n_cols)
    return n_rows, n_cols


def block_row_forward(x, weight, bias, eps, is_rms, *, store_stats=True):
    """x: (n_rows, n_cols) contiguous -> (y, mean or None, rstd) with mean/rstd fp32 (n_rows,);
    without ``store_stats`` -> (y, None, None), for a backward that recomputes them."""
    n_rows, n_cols = _check_input(x)
    _check_vector("weight", weight, n_cols, x)
    _check_vector("bias", bias, n_cols, x)
    if is_rms and bias is not None:
        raise ValueError("RMSNorm has no bias; pass bias=None with is_rms=True")
    if x.numel() == 0:  # no rows or no columns (as torch): empty y, nothing to launch
        y = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        if not store_stats:
            return y, None, None
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        return y, None if is_rms else torch.empty_like(rstd), rstd
    cfg = config.block_row_fwd_config(n_cols, is_rms, one_warp=one_warp_rows(x))
    return launch_forward(x, weight, bias, eps, is_rms, cfg, store_stats=store_stats)


def block_row_backward(dy, x, weight, bias, mean, rstd, is_rms, strategy="auto", *, eps=None):
    """-> (dx, dweight or None, dbias or None); dweight/dbias fp32-reduced, cast to param dtype.

    ``mean``/``rstd`` are the forward's statistics; with both None the kernel recomputes them
    from x and ``eps`` (the forward's), which it reads anyway."""
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} does not exist for layout='block_row': its backward is "
            f"always a persistent grid with fp32 per-program partials; use one of {STRATEGIES}"
        )
    n_rows, n_cols = _check_input(x)
    _check_matrix("dy", dy, n_rows, n_cols)
    if dy.device != x.device:
        raise ValueError(f"dy is on {dy.device} but x is on {x.device}")
    _check_vector("weight", weight, n_cols, x)
    _check_vector("bias", bias, n_cols, x)
    if is_rms and bias is not None:
        raise ValueError("RMSNorm has no bias; pass bias=None with is_rms=True")
    if rstd is None:
        if mean is not None:
            raise ValueError("mean without rstd: pass both from block_row_forward, or neither")
        if eps is None:
            raise ValueError(
                "rstd is None: pass the forward's eps to recompute the statistics, or the fp32 "
                "mean/rstd returned by block_row_forward"
            )
        if not is_valid_eps(eps):
            raise ValueError(f"eps must be a finite float >= 0, got {eps!r}")
    else:
        _check_vector("rstd", rstd, n_rows, x, torch.float32)
        if not is_rms:
            if mean is None:
                raise ValueError(
                    "LayerNorm backward needs the fp32 mean returned by block_row_forward"
                )
            _check_vector("mean", mean, n_rows, x, torch.float32)
    if x.numel() == 0:  # empty dx; no rows add to dweight/dbias, which are 0 (as torch)
        dx = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        dw = torch.zeros_like(weight) if weight is not None else None
        db = torch.zeros_like(bias) if bias is not None else None
        return dx, dw, db
    one_warp = one_warp_rows(x, dy)
    if rstd is None:
        cfg = config.block_row_bwd_recompute_config(n_cols, is_rms, one_warp)
    else:
        cfg = config.block_row_bwd_config(n_cols, one_warp=one_warp)
    return launch_backward(dy, x, weight, bias, mean, rstd, is_rms, cfg, eps=eps)
