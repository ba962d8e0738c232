"""RMSNorm and LayerNorm with each row split over several programs: a few wide rows, and (the
backward) rows wider than the single pass holds.

With fewer rows than SMs, one program per row leaves most of the card idle, and each busy
program walks its row chunk by chunk, one memory latency after another (1 x 53991 ran at
6 GB/s). Past the single pass's width, one program per SM holds one row at a time and waits on
each (LayerNorm 4096 x 12288: 1.2 TB/s). Here the row's columns are split into chunks instead,
and every pass is two kernels:

* ``_split_row_sums_kernel``: grid (rows, chunks); each program writes two fp32 partial sums of
  its chunk: (sum d, sum d^2) with d = x - x[row, 0] in the forward (the looped forward's shift,
  against cancellation), (sum xhat * wdy, sum wdy) in the backward.
* forward, ``_split_row_fwd_kernel``: grid (rows, chunks); each program adds its row's partial
  sums, derives mean and rstd (chunk 0 stores them) and normalizes its chunk.
* backward, ``_split_row_bwd_kernel``: grid (column chunks, row groups); each program walks its
  group's rows over its column chunk, a few rows a step: dx from the rows' summed partials (plus
  the fused add's dh), and dγ/dβ of its columns added up in registers. One group writes them
  directly; several write one fp32 partial row each, which ``reduce_partials`` sums.

The second kernel re-reads the chunk (x and dy twice: 5 units of traffic against the single
pass's 3). ``norms.config.plan`` picks this path (``NormPlan.fwd_split``/``bwd_split``), the
chunk widths and the row groups (``split_row_*``).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from normlab import _runtime
from normlab._host import cdiv, next_pow2
from normlab._launch import buffer, launch
from normlab.norms import config
from normlab.norms.reduce import reduce_partials
from normlab.norms.tiles import known_bwd_layout, known_multiple, load_weight


@triton.jit
def _split_row_sums_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient (BACKWARD only)
    w_ptr,  # (n_cols,) weight (BACKWARD with HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (BACKWARD LayerNorm only)
    rstd_ptr,  # (n_rows,) fp32 rstd (BACKWARD only)
    sums_ptr,  # (n_rows, n_chunks, 2) fp32 partial sums (written)
    n_cols,
    x_row_stride,
    dy_row_stride,
    offset,  # y = xhat * (offset + w): the weight's offset (BACKWARD only)
    BACKWARD: tl.constexpr,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    CHUNK: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
):
    """Two fp32 partial sums of one (row, chunk): see the module docstring."""
    n_cols = known_multiple(n_cols, ROW_ALIGN)  # the host took n_cols into ROW_ALIGN
    x_row_stride = known_multiple(x_row_stride, ROW_ALIGN)
    dy_row_stride = known_multiple(dy_row_stride, ROW_ALIGN)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if BACKWARD:
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
        wdy = dy * load_weight(w_ptr, cols, mask, offset, HAS_WEIGHT)
        rstd = tl.load(rstd_ptr + row)
        if IS_RMS:
            xhat = x * rstd
        else:
            xhat = tl.where(mask, (x - tl.load(mean_ptr + row)) * rstd, 0.0)
        s1 = tl.sum(xhat * wdy, axis=0)
        s2 = tl.sum(wdy, axis=0)
    else:
        if IS_RMS:
            d = x
        else:
            d = tl.where(mask, x - tl.load(x_ptr + row * x_row_stride).to(tl.float32), 0.0)
        s1 = tl.sum(d, axis=0)
        s2 = tl.sum(d * d, axis=0)
    out = sums_ptr + (row * tl.num_programs(1) + chunk) * 2
    tl.store(out, s1)
    tl.store(out + 1, s2)


@triton.jit
def _row_sums(sums_ptr, row, n_chunks, CHUNKS_BLOCK: tl.constexpr):
    """The row's two sums over its n_chunks partials."""
    parts = tl.arange(0, CHUNKS_BLOCK)
    at = sums_ptr + (row * n_chunks + parts) * 2
    present = parts < n_chunks
    s1 = tl.sum(tl.load(at, mask=present, other=0.0), axis=0)
    s2 = tl.sum(tl.load(at + 1, mask=present, other=0.0), axis=0)
    return s1, s2


@triton.jit
def _split_row_fwd_kernel(
    x_ptr,  # (n_rows, n_cols) input
    y_ptr,  # (n_rows, n_cols) output, x's dtype
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    b_ptr,  # (n_cols,) bias (HAS_BIAS; else None)
    mean_ptr,  # (n_rows,) fp32 mean, written for LayerNorm
    rstd_ptr,  # (n_rows,) fp32 rstd, written
    sums_ptr,  # (n_rows, n_chunks, 2) fp32 partial (sum d, sum d^2)
    n_cols,
    x_row_stride,
    y_row_stride,
    eps,
    offset,  # y = xhat * (offset + w) + b
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    CHUNK: tl.constexpr,
    CHUNKS_BLOCK: tl.constexpr,  # >= n_chunks, a power of two
    ROW_ALIGN: tl.constexpr,
):
    """y of one (row, chunk) from the row's summed partials."""
    n_cols = known_multiple(n_cols, ROW_ALIGN)  # the host took n_cols into ROW_ALIGN
    x_row_stride = known_multiple(x_row_stride, ROW_ALIGN)
    y_row_stride = known_multiple(y_row_stride, ROW_ALIGN)
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = cols < n_cols
    # Every load is issued before the sums are combined: a latency-bound grid.
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = load_weight(w_ptr, cols, mask, offset, HAS_WEIGHT)
    if HAS_BIAS:
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    s1, s2 = _row_sums(sums_ptr, row, tl.num_programs(1), CHUNKS_BLOCK)
    eps = tl.cast(eps, tl.float32)  # torch.compile may pass an fp64 scalar
    if IS_RMS:
        mean = 0.0
        var = s2 / n_cols
    else:
        mean_d = s1 / n_cols
        mean = tl.load(x_ptr + row * x_row_stride).to(tl.float32) + mean_d
        var = tl.maximum(s2 / n_cols - mean_d * mean_d, 0.0)
    rstd = tl.rsqrt(var + eps)
    y = (x - mean) * rstd * w
    if HAS_BIAS:
        y = y + b
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if chunk == 0:
        if not IS_RMS:
            tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _split_row_bwd_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    sums_ptr,  # (n_rows, n_parts, 2) fp32 partial (sum xhat * wdy, sum wdy)
    dw_ptr,  # (n_cols,) dweight in its dtype, or (n_groups, n_cols) fp32 partials (PARTIALS)
    db_ptr,  # (n_cols,) dbias in its dtype, or (n_groups, n_cols) fp32 partials (PARTIALS)
    n_rows,
    n_cols,
    n_parts,  # partial sums per row
    rows_per_group,  # rows each program walks (a multiple of BLOCK_ROWS)
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + w) + b
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    PARTIALS: tl.constexpr,  # several row groups: fp32 partial rows, summed by reduce_partials
    BLOCK_ROWS: tl.constexpr,  # rows per step: their loads in flight together
    CHUNK: tl.constexpr,
    PARTS_BLOCK: tl.constexpr,  # >= n_parts, a power of two
    ROW_ALIGN: tl.constexpr,
):
    """dx of one group of rows in one column chunk (grid: chunks x row groups), BLOCK_ROWS rows
    a step; that chunk's dγ/dβ summed over the group's rows."""
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    chunk = tl.program_id(0)
    group = tl.program_id(1)
    cols = chunk * CHUNK + tl.arange(0, CHUNK)
    col_mask = cols < n_cols
    w = load_weight(w_ptr, cols, col_mask, offset, HAS_WEIGHT)
    parts = tl.arange(0, PARTS_BLOCK)
    dw_acc = tl.zeros([BLOCK_ROWS, CHUNK], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_ROWS, CHUNK], dtype=tl.float32)
    first = group * rows_per_group
    last = tl.minimum(first + rows_per_group, n_rows)
    for start in range(first, last, BLOCK_ROWS):
        rows = start + tl.arange(0, BLOCK_ROWS).to(tl.int64)
        row_mask = rows < last
        mask = row_mask[:, None] & col_mask[None, :]
        x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=0.0)
        dy = tl.load(dy_ptr + rows[:, None] * dy_row_stride + cols[None, :], mask=mask,
                     other=0.0).to(tl.float32)  # fmt: skip
        at = sums_ptr + (rows[:, None] * n_parts + parts[None, :]) * 2
        present = row_mask[:, None] & (parts < n_parts)[None, :]
        c1 = tl.sum(tl.load(at, mask=present, other=0.0), axis=1) / n_cols
        rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
        if IS_RMS:
            xhat = x.to(tl.float32) * rstd[:, None]
            dx = (dy * w - xhat * c1[:, None]) * rstd[:, None]
        else:
            c2 = tl.sum(tl.load(at + 1, mask=present, other=0.0), axis=1) / n_cols
            mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
            xhat = tl.where(mask, (x.to(tl.float32) - mean[:, None]) * rstd[:, None], 0.0)
            dx = (dy * w - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
        if HAS_DH:
            dx += tl.load(dh_ptr + rows[:, None] * dh_row_stride + cols[None, :], mask=mask,
                          other=0.0).to(tl.float32)  # fmt: skip
        tl.store(dx_ptr + rows[:, None] * dx_row_stride + cols[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=mask)  # fmt: skip
        dw_acc += dy * xhat
        db_acc += dy
    out = group.to(tl.int64) * n_cols + cols if PARTIALS else cols
    if HAS_WEIGHT:
        tl.store(dw_ptr + out, tl.sum(dw_acc, axis=0).to(dw_ptr.dtype.element_ty), mask=col_mask)
    if HAS_BIAS:
        tl.store(db_ptr + out, tl.sum(db_acc, axis=0).to(db_ptr.dtype.element_ty), mask=col_mask)


# ============================================================================================
# Launchers
# ============================================================================================


def _align(*tensors) -> int:
    """ROW_ALIGN: of the row strides and the width, which the kernels hint (known_multiple)."""
    stride = math.gcd(tensors[0].shape[1], *(t.stride(0) for t in tensors))
    return config.kernel_row_align(stride, tensors[0].element_size())


def _sums(x2d, dy, weight, mean, rstd, is_rms, chunk, offset=0.0):
    """Launch the partial sums: -> fp32 (n_rows, n_chunks, 2)."""
    n_rows, n_cols = x2d.shape
    n_chunks = cdiv(n_cols, chunk.cols)
    sums = buffer((n_rows, n_chunks, 2), torch.float32, x2d.device)
    backward = dy is not None
    launch(
        _split_row_sums_kernel, (n_rows, n_chunks),
        x2d, dy, weight, mean, rstd,  # None where absent (the forward reads x alone)
        sums, n_cols, x2d.stride(0), dy.stride(0) if backward else x2d.stride(0), float(offset),
        BACKWARD=backward, IS_RMS=bool(is_rms), HAS_WEIGHT=weight is not None,
        CHUNK=chunk.cols, ROW_ALIGN=_align(x2d, dy) if backward else _align(x2d),
        num_warps=chunk.num_warps,
    )  # fmt: skip
    return sums


def split_row_forward(x2d, weight, bias, eps, is_rms, chunk: config.SplitRowChunk, offset=0.0):
    """(y, mean | None, rstd) of x2d (n_rows, n_cols), each row over cdiv(n_cols, chunk.cols)
    programs."""
    n_rows, n_cols = x2d.shape
    y = buffer(x2d.shape, x2d.dtype, x2d.device)
    rstd = buffer(n_rows, torch.float32, x2d.device)
    mean = None if is_rms else buffer(n_rows, torch.float32, x2d.device)
    sums = _sums(x2d, None, None, None, None, is_rms, chunk)
    n_chunks = sums.shape[1]
    launch(
        _split_row_fwd_kernel, (n_rows, n_chunks),
        x2d, y, weight, bias, mean, rstd, sums,  # None where absent
        n_cols, x2d.stride(0), y.stride(0), float(eps), float(offset),
        IS_RMS=bool(is_rms), HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        CHUNK=chunk.cols, CHUNKS_BLOCK=next_pow2(n_chunks),
        ROW_ALIGN=_align(x2d, y), num_warps=chunk.num_warps,
    )  # fmt: skip
    return y, mean, rstd


def split_row_backward(dy, x2d, weight, bias, mean, rstd, is_rms, chunk: config.SplitRowChunk,
                       offset=0.0, *, dh=None, rows_per_group=None, sums_chunk=None):  # fmt: skip
    """(dx, dweight | None, dbias | None): partial sums over (row, sums chunk) programs, then a
    (column chunk, row group) grid for dx and dγ/dβ; more than one row group writes fp32
    partial rows that reduce_partials sums. ``dh``: the fused add's gradient of h, added into
    dx. ``rows_per_group`` overrides ``config.split_row_bwd_group_rows``; ``sums_chunk`` (default
    ``chunk``) is the sums kernel's own chunk."""
    n_rows, n_cols = x2d.shape
    sums_chunk = sums_chunk or chunk
    sums = _sums(x2d, dy, weight, mean, rstd, is_rms, sums_chunk, offset)
    tile = config.split_row_bwd_tile(n_rows, chunk.cols)
    n_chunks = cdiv(n_cols, chunk.cols)
    if rows_per_group is None:
        rows_per_group = config.split_row_bwd_group_rows(
            n_rows, n_chunks, tile.rows, _runtime.sm_count(x2d.device.index))
    rows_per_group = cdiv(max(1, min(rows_per_group, n_rows)), tile.rows) * tile.rows
    n_groups = cdiv(n_rows, rows_per_group)
    partials = n_groups > 1
    dx = buffer((n_rows, n_cols), x2d.dtype, x2d.device)
    dw = buffer(weight.shape, weight.dtype, x2d.device) if weight is not None else None
    db = buffer(bias.shape, bias.dtype, x2d.device) if bias is not None else None

    def out(param):
        if param is None:
            return None
        return buffer((n_groups, n_cols), torch.float32, x2d.device) if partials else param

    dw_out, db_out = out(dw), out(db)
    dh_rows = dh if dh is not None else dx  # (its stride and alignment only)
    launch(
        _split_row_bwd_kernel, (n_chunks, n_groups),
        x2d, dy, dx, dh, weight, mean, rstd, sums, dw_out, db_out,  # None where absent
        n_rows, n_cols, sums.shape[1], rows_per_group,
        x2d.stride(0), dy.stride(0), dx.stride(0), dh_rows.stride(0), float(offset),
        IS_RMS=bool(is_rms), HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        HAS_DH=dh is not None, PARTIALS=partials, BLOCK_ROWS=tile.rows, CHUNK=chunk.cols,
        PARTS_BLOCK=next_pow2(sums.shape[1]), ROW_ALIGN=_align(x2d, dy, dx, dh_rows),
        num_warps=tile.num_warps,
    )  # fmt: skip
    if partials and (dw is not None or db is not None):
        reduce_partials(dw_out, db_out, dw, db)
    return dx, dw, db
