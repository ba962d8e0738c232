"""RMSNorm and LayerNorm over rows: the one-row-per-program forward, the three backward dγ/dβ
strategies, and their launchers (``norms.config`` plans which one runs).

    RMSNorm    y = x * rstd * w              rstd = 1 / sqrt(mean(x^2) + eps)
    LayerNorm  y = (x - mean) * rstd * w + b  rstd = 1 / sqrt(var(x) + eps)

with w = offset + weight (Gemma's zero-centred weight: offset 1). The same kernels run the fused
residual add (HAS_RESIDUAL / HAS_DH): the forward reads x and the residual, writes
h = x + residual and normalizes h; the backward takes h as its x and adds h's own gradient dh
into dx (the gradient of both x and the residual).

How dw/db are summed over the rows is the ``strategy``:

* ``"atomic"``: one program per row tile; ``tl.atomic_add`` into one fp32 vector (the first
  design of the fused-RMSNorm write-up; contended and not deterministic).
* ``"two_stage"``: each program takes a contiguous block of rows and writes one fp32 partial
  row to a workspace ``(ceil(n_rows / rows_per_program), n_cols)``; a second kernel sums it.
* ``"persistent"``: the kernel_1 of Fast-LLM's normalization-backward rewrite
  (https://github.com/ServiceNow/Fast-LLM/pull/546): about ``programs_per_sm * SMs`` programs
  grid-stride ``BLOCK_ROWS x BLOCK_COLS`` row tiles and fold them into one fp32 partial per
  program, so the workspace is bounded whatever n_rows (with ``paired_partials``, above
  ``NORM_BWD_PARTIALS_PER_SM`` per SM, two programs add into one zeroed partial row, which two
  fp32 addends keep bitwise deterministic); each program loads its next row tile while it works
  on the current one. Rows that do not fit one register tile take the two-pass kernel (pass 1
  reduces c1/c2 over column chunks, pass 2 re-reads x/dy, writes dx and adds into the program's
  partial row). A grid of one program writes dw/db itself, with no workspace and no second
  kernel. One-row tiles past the compile-time width split each row at its first 16-byte
  boundary, the body in one or two blocks (``_shifted_bwd_rows``); RMSNorm's aligned rows past
  12288 columns instead run in Liger-Kernel's order (``tiles.bwd_tile_dw_first``,
  ``config.bwd_liger_order``). A decode
  batch splits its programs by role, rows' dx and columns' dw/db in one launch
  (``_norm_bwd_roles_kernel``, ``config.bwd_roles``).

Partials are fp32 and summed in fp32 by ``_reduce_partials_kernel``, which can add into an
existing ``.grad``; ``two_stage`` and ``persistent`` are bitwise deterministic. The kernel names
are stable (the benchmark's per-kernel breakdown keys on them).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from normlab import _runtime
from normlab._host import cdiv, fused_add_buffers, next_pow2, unit_col_stride
from normlab._launch import buffer, launch, not_replayable
from normlab.norms import config
from normlab.norms.reduce import reduce_partials
from normlab.norms.tiles import (
    add_pair,
    bwd_tile_dw_first,
    bwd_tile_single_pass,
    bwd_tile_two_pass,
    known_bwd_layout,
    known_multiple,
    load_f32,
    load_param_f32,
    load_row_stats,
    load_tile,
    load_weight,
    load_x_dy,
    put_row,
    store_cast,
    store_partials,
    store_sum,
    xhat_wdy,
)

AUTOTUNE = os.environ.get("NORMLAB_AUTOTUNE", "0") == "1" and not _runtime.INTERPRET
# LayerNorm's two row sums in one tl.reduce of a pair: one cross-warp exchange on a GPU. The
# interpreter runs a custom combine element by element in Python (minutes per test), so it takes
# two plain sums there; tests/test_norm.py runs the paired path too.
PAIRED_ROW_SUMS = not _runtime.INTERPRET


@triton.jit
def _shifted_split(start, n_cols, VEC: tl.constexpr):
    """A row ``start`` elements from a 16-byte aligned pointer, split at its first 16-byte
    boundary -> (head, n_body, tail): the head's length (under VEC), the body's whole vectors
    (n_body elements, a known multiple of VEC; n_cols >= VEC), and where the tail starts."""
    head = (VEC - start % VEC) % VEC
    n_body = known_multiple(n_cols - head, VEC)
    return head, n_body, head + n_body


@triton.jit
def _shifted_row(x_ptr, y_ptr, w_ptr, b_ptr, w_shifted_ptr, b_shifted_ptr, shifted_pitch,
                 x_start, y_start, n_cols: tl.constexpr, eps, offset, IS_RMS: tl.constexpr,
                 HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_SIZE: tl.constexpr,
                 VEC: tl.constexpr, SHIFTED_PARAMS: tl.constexpr):  # fmt: skip
    """Normalize one row that starts off a 16-byte boundary, in one block -> (mean, rstd). The
    row starts x_start elements from x_ptr and y_start from y_ptr, y_start = x_start mod VEC
    (the launch checks); the split below is exact wherever x_ptr and y_ptr lie, and its body
    loads vectors where they are 16-byte aligned.

    Loaded from the row's start, its elements would load one at a time, 64 bytes a warp per
    request. So the row is three parts: the head up to the first 16-byte boundary, the body of
    whole VEC-element vectors after it (vector loads and stores), and the tail; head and tail
    hold under VEC elements each and load alone. w and b are read at the body's columns, which
    start at the head's length: unaligned, so they load in a layout of their own, or with
    SHIFTED_PARAMS as vectors from row ``head`` of their shifted copies (_shift_params_kernel)."""
    head, n_body, tail = _shifted_split(x_start, n_cols, VEC)  # n_cols >= VEC: launch checks
    cols = tl.arange(0, BLOCK_SIZE)
    edge = tl.arange(0, VEC)
    body_mask = cols < n_body
    head_mask = edge < head
    tail_mask = tail + edge < n_cols
    x_body = x_ptr + known_multiple(x_start + head, VEC) + cols
    x_row = x_ptr + x_start
    xb = tl.load(x_body, mask=body_mask, other=0.0).to(tl.float32)
    xh = tl.load(x_row + edge, mask=head_mask, other=0.0).to(tl.float32)
    xt = tl.load(x_row + tail + edge, mask=tail_mask, other=0.0).to(tl.float32)
    if IS_RMS:
        mean = 0.0
    else:
        mean = (tl.sum(xb, axis=0) + tl.sum(xh, axis=0) + tl.sum(xt, axis=0)) / n_cols
        xb = tl.where(body_mask, xb - mean, 0.0)
        xh = tl.where(head_mask, xh - mean, 0.0)
        xt = tl.where(tail_mask, xt - mean, 0.0)
    sq = tl.sum(xb * xb, axis=0) + tl.sum(xh * xh, axis=0) + tl.sum(xt * xt, axis=0)
    rstd = tl.rsqrt(sq / n_cols + eps)
    yb = xb * rstd
    yh = xh * rstd
    yt = xt * rstd
    shifted_row = head * known_multiple(shifted_pitch, VEC)
    if HAS_WEIGHT:
        if SHIFTED_PARAMS:
            wb = load_f32(w_shifted_ptr + shifted_row + cols, body_mask, False, "evict_last")
        else:
            wb = load_param_f32(w_ptr + head + cols, body_mask, False, "", True)
        yb = yb * (wb + offset)
        yh = yh * (tl.load(w_ptr + edge, mask=head_mask, other=0.0).to(tl.float32) + offset)
        yt = yt * (tl.load(w_ptr + tail + edge, mask=tail_mask, other=0.0).to(tl.float32)
                   + offset)  # fmt: skip
    if HAS_BIAS:
        if SHIFTED_PARAMS:
            yb = yb + load_f32(b_shifted_ptr + shifted_row + cols, body_mask, False, "evict_last")
        else:
            yb = yb + load_param_f32(b_ptr + head + cols, body_mask, False, "", True)
        yh = yh + tl.load(b_ptr + edge, mask=head_mask, other=0.0).to(tl.float32)
        yt = yt + tl.load(b_ptr + tail + edge, mask=tail_mask, other=0.0).to(tl.float32)
    y_row = y_ptr + y_start
    store_cast(y_ptr + known_multiple(y_start + head, VEC) + cols, yb, body_mask, False)
    store_cast(y_row + edge, yh, head_mask, False)
    store_cast(y_row + tail + edge, yt, tail_mask, False)
    return mean, rstd


@triton.jit
def _shift_params_kernel(w_ptr, b_ptr, w_shifted_ptr, b_shifted_ptr, n_cols, shifted_pitch,
                         HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
                         BLOCK: tl.constexpr):  # fmt: skip
    """Row k of the shifted copies (VEC, shifted_pitch) holds w[k:] and b[k:], zero past the
    end: a shifted row with a head of k elements reads its body's parameters there as vectors."""
    k = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    src_mask = k + cols < n_cols
    dst_mask = cols < shifted_pitch
    dst = k * shifted_pitch + cols
    if HAS_WEIGHT:
        tl.store(w_shifted_ptr + dst, tl.load(w_ptr + k + cols, mask=src_mask, other=0.0),
                 mask=dst_mask)  # fmt: skip
    if HAS_BIAS:
        tl.store(b_shifted_ptr + dst, tl.load(b_ptr + k + cols, mask=src_mask, other=0.0),
                 mask=dst_mask)  # fmt: skip


@triton.jit
def _norm_fwd_kernel(
    # Pointers the flags leave unread are None: constexprs, which no launch passes.
    x_ptr,  # (n_rows, n_cols) input
    r_ptr,  # (n_rows, n_cols) residual (HAS_RESIDUAL)
    y_ptr,  # (n_rows, n_cols) output, x's dtype
    h_ptr,  # (n_rows, n_cols) x + residual, x's dtype, written (HAS_RESIDUAL)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT)
    b_ptr,  # (n_cols,) bias (HAS_BIAS)
    mean_ptr,  # (n_rows,) fp32 mean, written (STORE_STATS, LayerNorm)
    rstd_ptr,  # (n_rows,) fp32 1 / std, written (STORE_STATS)
    w_shifted_ptr,  # (VEC, shifted_pitch) w[k:] in row k (SHIFTED_PARAMS)
    b_shifted_ptr,  # (VEC, shifted_pitch) b[k:] in row k (SHIFTED_PARAMS)
    x_row_stride,
    r_row_stride,
    y_row_stride,
    h_row_stride,
    shifted_pitch,  # the shifted copies' row stride, a multiple of SHIFT_VEC
    n_cols: tl.constexpr,  # one compiled kernel per width: static loop bounds (configs cites why)
    eps,
    offset,  # y = xhat * (offset + weight): a runtime float, one compiled kernel for every value
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,  # normalize h = x + residual and write h
    BLOCK_SIZE: tl.constexpr,
    SINGLE_BLOCK: tl.constexpr,  # n_cols <= BLOCK_SIZE: the row in registers, read once
    EVEN_COLS: tl.constexpr,  # n_cols a multiple of BLOCK_SIZE: no predicates
    INT64_ROWS: tl.constexpr,  # row offsets may pass int32
    ROW_ALIGN: tl.constexpr,  # the row strides are multiples of this (elements): vector loads
    EARLY_PARAMS: tl.constexpr = False,  # load w and b with x, before the row's reductions
    STORE_STATS: tl.constexpr = True,  # write mean/rstd (a backward will read them)
    PARAMS_APART: tl.constexpr = False,  # w/b in a layout of their own (tiles.load_param_f32)
    SHIFT_VEC: tl.constexpr = 0,  # rows not vector aligned: _shifted_row's vector (elements)
    SHIFTED_PARAMS: tl.constexpr = False,  # _shifted_row reads w/b from their shifted copies
):
    """One row per program; fp32 statistics. Rows wider than BLOCK_SIZE loop over chunks.
    EARLY_PARAMS (one block): with few rows nothing hides w's round trip, so it starts before the
    row's sums (ptxas still issues it once x has arrived)."""
    row = tl.program_id(0)
    if INT64_ROWS:
        row = row.to(tl.int64)
    x_row_stride = known_multiple(x_row_stride, ROW_ALIGN)
    y_row_stride = known_multiple(y_row_stride, ROW_ALIGN)
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    if HAS_RESIDUAL:  # r_ptr and h_ptr are None without (constexprs: not launch arguments)
        r_row = r_ptr + row * known_multiple(r_row_stride, ROW_ALIGN)
        h_row = h_ptr + row * known_multiple(h_row_stride, ROW_ALIGN)
    # Inductor may pass eps as fp64, which would promote the whole row to fp64.
    eps = tl.cast(eps, tl.float32)
    offset = tl.cast(offset, tl.float32)
    cols = tl.arange(0, BLOCK_SIZE)
    if SHIFT_VEC > 0:
        mean, rstd = _shifted_row(x_ptr, y_ptr, w_ptr, b_ptr, w_shifted_ptr, b_shifted_ptr,
                                  shifted_pitch, row * x_row_stride, row * y_row_stride, n_cols,
                                  eps, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, BLOCK_SIZE,
                                  SHIFT_VEC, SHIFTED_PARAMS)  # fmt: skip
    elif SINGLE_BLOCK:
        mask = cols < n_cols
        x = load_f32(x_row + cols, mask, EVEN_COLS, "")
        if EARLY_PARAMS:
            w = (load_param_f32(w_ptr + cols, mask, EVEN_COLS, "", PARAMS_APART) + offset
                 if HAS_WEIGHT else 1.0)  # fmt: skip
            b = load_param_f32(b_ptr + cols, mask, EVEN_COLS, "", PARAMS_APART) if HAS_BIAS else 0.0
        if HAS_RESIDUAL:
            x = store_sum(x, load_f32(r_row + cols, mask, EVEN_COLS, ""), h_row + cols, mask,
                          EVEN_COLS)  # fmt: skip
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
        if EARLY_PARAMS:
            y = y * w
            if HAS_BIAS:  # (+ 0.0 would turn a -0.0 into +0.0; torch's keeps its sign)
                y = y + b
        else:
            if HAS_WEIGHT:
                y = y * (load_param_f32(w_ptr + cols, mask, EVEN_COLS, "", PARAMS_APART) + offset)
            if HAS_BIAS:
                y = y + load_param_f32(b_ptr + cols, mask, EVEN_COLS, "", PARAMS_APART)
        store_cast(y_row + cols, y, mask, EVEN_COLS)
    else:
        # Pass 1: sums over chunks. LayerNorm sums d = x - x[0] so that var = E[d^2] - E[d]^2
        # does not cancel catastrophically when |mean| >> std.
        if IS_RMS:
            shift = 0.0
        else:
            shift = tl.load(x_row).to(tl.float32)
            if HAS_RESIDUAL:
                shift += tl.load(r_row).to(tl.float32)
        acc1 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            if HAS_RESIDUAL:  # x and the residual are read once; pass 2 re-reads h
                x = load_f32(x_row + start + cols, mask, EVEN_COLS, "evict_first")
                r = load_f32(r_row + start + cols, mask, EVEN_COLS, "evict_first")
                d = store_sum(x, r, h_row + start + cols, mask, EVEN_COLS) - shift
            else:
                d = load_f32(x_row + start + cols, mask, EVEN_COLS, "evict_last") - shift
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
        if HAS_RESIDUAL:
            src_row = h_row
            tl.debug_barrier()  # pass 2 reads the h this program's threads wrote
        else:
            src_row = x_row
        # Pass 2: normalize (the row is re-read, mostly from L2).
        for start in range(0, n_cols, BLOCK_SIZE):
            mask = start + cols < n_cols
            y = (load_f32(src_row + start + cols, mask, EVEN_COLS, "evict_first") - mean) * rstd
            if HAS_WEIGHT:
                w = load_param_f32(w_ptr + start + cols, mask, EVEN_COLS, "evict_last",
                                   PARAMS_APART)  # fmt: skip
                y = y * (w + offset)
            if HAS_BIAS:
                y = y + load_param_f32(b_ptr + start + cols, mask, EVEN_COLS, "evict_last",
                                       PARAMS_APART)  # fmt: skip
            store_cast(y_row + start + cols, y, mask, EVEN_COLS)
    if STORE_STATS:
        if not IS_RMS:
            tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


def _prune_fwd_configs(configs_, named_args, **kwargs):
    """Drop blocks narrower than the row; keep the widest if none is wide enough."""
    n_cols = named_args["n_cols"]
    fitting = [c for c in configs_ if c.kwargs["BLOCK_SIZE"] >= n_cols]
    if fitting:
        narrowest = min(c.kwargs["BLOCK_SIZE"] for c in fitting)
        return [c for c in fitting if c.kwargs["BLOCK_SIZE"] == narrowest]
    widest = max(c.kwargs["BLOCK_SIZE"] for c in configs_)
    return [c for c in configs_ if c.kwargs["BLOCK_SIZE"] == widest]


if AUTOTUNE:
    # The flags that depend on the tuned BLOCK_SIZE are set per config by heuristics.
    _norm_fwd_kernel_tuned = triton.autotune(
        configs=[
            triton.Config({"BLOCK_SIZE": b}, num_warps=w)
            for b in config.NORM_FWD_AUTOTUNE_BLOCKS
            for w in config.NORM_FWD_AUTOTUNE_WARPS
        ],
        key=["n_cols", "IS_RMS", "HAS_WEIGHT", "HAS_BIAS", "HAS_RESIDUAL"],
        prune_configs_by={"early_config_prune": _prune_fwd_configs},
    )(triton.heuristics({
        "SINGLE_BLOCK": lambda args: args["n_cols"] <= args["BLOCK_SIZE"],
        "EVEN_COLS": lambda args: args["n_cols"] % args["BLOCK_SIZE"] == 0,
    })(_norm_fwd_kernel))  # fmt: skip


@triton.jit
def _norm_bwd_atomic_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_ptr,  # (n_cols,) fp32 dweight accumulator (atomics)
    db_ptr,  # (n_cols,) fp32 dbias accumulator (atomics)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    TWO_PASS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
):
    """One row tile per program; its dw/db column sums go straight into one shared fp32 vector
    with tl.atomic_add: every program hits the same n_cols addresses (the fused-RMSNorm
    write-up's first design)."""
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    tile = tl.program_id(0)
    if TWO_PASS:
        bwd_tile_two_pass(
            tile, False, x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr,
            n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, offset,
            IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_DH, True, BLOCK_ROWS, BLOCK_COLS,
        )  # fmt: skip
    else:
        cols = tl.arange(0, BLOCK_COLS)
        col_mask = cols < n_cols
        w = load_weight(w_ptr, cols, col_mask, offset, HAS_WEIGHT)
        dw, db = bwd_tile_single_pass(
            tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
            x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, IS_RMS, HAS_WEIGHT, HAS_DH,
            BLOCK_ROWS, BLOCK_COLS,
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
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (written)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (written)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    tiles_per_program,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    TWO_PASS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
):
    """two_stage: program p takes the contiguous row tiles [p * tiles_per_program, ...) and
    writes one fp32 partial row p; the workspace grows with n_rows."""
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    pid = tl.program_id(0)
    first_tile = pid * tiles_per_program
    last_tile = tl.minimum(first_tile + tiles_per_program, tl.cdiv(n_rows, BLOCK_ROWS))
    row_start = pid.to(tl.int64) * n_cols  # of the program's partial row
    if TWO_PASS:
        dw_out, db_out = dw_partial_ptr, db_partial_ptr  # None where absent
        if HAS_WEIGHT:
            dw_out = dw_partial_ptr + row_start
        if HAS_BIAS:
            db_out = db_partial_ptr + row_start
        for tile in range(first_tile, last_tile):
            bwd_tile_two_pass(
                tile, tile == first_tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr,
                rstd_ptr, dw_out, db_out, n_rows, n_cols, x_row_stride, dy_row_stride,
                dx_row_stride, dh_row_stride, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_DH, False,
                BLOCK_ROWS, BLOCK_COLS,
            )  # fmt: skip
    else:
        cols = tl.arange(0, BLOCK_COLS)
        w = load_weight(w_ptr, cols, cols < n_cols, offset, HAS_WEIGHT)
        dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
        for tile in range(first_tile, last_tile):
            dw, db = bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, IS_RMS, HAS_WEIGHT,
                HAS_DH, BLOCK_ROWS, BLOCK_COLS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
        store_partials(dw_partial_ptr, db_partial_ptr, row_start, dw_acc, db_acc, n_cols,
                       HAS_WEIGHT, HAS_BIAS, BLOCK_COLS)  # fmt: skip


@triton.jit
def _load_shifted(ptr, start, head, tail, cols, cols_b, edge, head_mask, body_mask, body_b_mask,
                  tail_mask, BLOCK_B: tl.constexpr, VEC: tl.constexpr):  # fmt: skip
    """The parts (head, body, body_b, tail) of the row ``start`` elements from ptr, split as in
    _shifted_row. The body starts at start + head, a multiple of VEC (the launch checks), so it
    loads whole vectors; with BLOCK_B its columns past the first block (cols_b) are a second
    block, body_b (else body_b is the head again, unread). 0 where masked."""
    body_ptr = ptr + known_multiple(start + head, VEC)
    first = tl.load(ptr + start + edge, mask=head_mask, other=0.0)
    body = tl.load(body_ptr + cols, mask=body_mask, other=0.0)
    body_b = first
    if BLOCK_B > 0:
        body_b = tl.load(body_ptr + cols_b, mask=body_b_mask, other=0.0)
    last = tl.load(ptr + start + tail + edge, mask=tail_mask, other=0.0)
    return first, body, body_b, last


@triton.jit
def _xhat_wdy_part(x, dy, w, mask, mean, rstd, IS_RMS: tl.constexpr):
    """fp32 (xhat, dy, w * dy) of one part of a shifted row; 0 where masked."""
    xhat = (x.to(tl.float32) - mean) * rstd
    if not IS_RMS:  # masked columns would give -mean * rstd
        xhat = tl.where(mask, xhat, 0.0)
    dy = dy.to(tl.float32)
    return xhat, dy, dy * w


@triton.jit
def _store_dx_part(ptrs, xhat, wdy, dh, c1, c2, rstd, mask, HAS_DH: tl.constexpr):
    """dx of one part of a shifted row (plus dh with HAS_DH), stored in dx's dtype."""
    dx = (wdy - (xhat * c1 + c2)) * rstd
    if HAS_DH:
        dx += dh.to(tl.float32)
    store_cast(ptrs, dx, mask, False)


@triton.jit
def _put_shifted(out_ptr, head, tail, cols, cols_b, edge, head_mask, body_mask, body_b_mask,
                 tail_mask, acc_h, acc_a, acc_b, acc_t, BLOCK_B: tl.constexpr,
                 ADD: tl.constexpr):  # fmt: skip
    """Store (ADD: atomically add) a partial row summed in the parts of _load_shifted."""
    put_row(out_ptr + edge, acc_h, head_mask, ADD)
    put_row(out_ptr + head + cols, acc_a, body_mask, ADD)
    if BLOCK_B > 0:
        put_row(out_ptr + head + cols_b, acc_b, body_b_mask, ADD)
    put_row(out_ptr + tail + edge, acc_t, tail_mask, ADD)


@triton.jit
def _shifted_bwd_rows(
    x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
    n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, offset,
    IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_DH: tl.constexpr,
    BLOCK_COLS: tl.constexpr, BLOCK_B: tl.constexpr, PAIRED: tl.constexpr,
    PAIR_SUMS: tl.constexpr, VEC: tl.constexpr,
):  # fmt: skip
    """_persistent_single_pass over one-row tiles, each row split as in _shifted_row: a head up
    to its first 16-byte boundary, a body of whole vectors, a tail. The body is one block of
    BLOCK_COLS columns or, with BLOCK_B, two (BLOCK_COLS, then BLOCK_B), which pad a width just
    past a power of two less (config.bwd_body_blocks). The grid is a multiple of VEC and the row
    strides of x, dy, dx and dh agree modulo VEC (the launch sees to both), so every row of a
    program starts as far into a vector: one split for all of them, w loaded once at the body's
    columns, dγ/dβ summed in that split and stored once at the end. No prefetch: past the
    compile-time width the next row's registers spill (config.NORM_BWD_SHIFT_MIN_COLS)."""
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    first = pid.to(tl.int64)  # the program's rows: first, first + n_programs, ...
    head, n_body, tail = _shifted_split((first * x_row_stride % VEC).to(tl.int32), n_cols, VEC)
    cols = tl.arange(0, BLOCK_COLS)
    edge = tl.arange(0, VEC)
    if BLOCK_B > 0:
        cols_b = BLOCK_COLS + tl.arange(0, BLOCK_B)  # the second block's body columns
    else:
        cols_b = edge  # unread
    head_mask, tail_mask = edge < head, tail + edge < n_cols
    body_mask, body_b_mask = cols < n_body, cols_b < n_body
    if HAS_WEIGHT:
        offset = tl.cast(offset, tl.float32)
        w_h = tl.load(w_ptr + edge, mask=head_mask, other=0.0).to(tl.float32) + offset
        w_a = load_param_f32(w_ptr + head + cols, body_mask, False, "", True) + offset
        w_b = w_h
        if BLOCK_B > 0:
            w_b = load_param_f32(w_ptr + head + cols_b, body_b_mask, False, "", True) + offset
        w_t = tl.load(w_ptr + tail + edge, mask=tail_mask, other=0.0).to(tl.float32) + offset
    else:
        w_h, w_a, w_b, w_t = 1.0, 1.0, 1.0, 1.0
    dw_h, dw_t = tl.zeros([VEC], dtype=tl.float32), tl.zeros([VEC], dtype=tl.float32)
    dw_a = tl.zeros([BLOCK_COLS], dtype=tl.float32)
    dw_b = tl.zeros(cols_b.shape, dtype=tl.float32)
    db_h, db_a, db_b, db_t = dw_h, dw_a, dw_b, dw_t
    for i in tl.range(0, tl.cdiv(n_rows - pid, n_programs)):
        row = first + i * n_programs
        x_h, x_a, x_b, x_t = _load_shifted(
            x_ptr, row * x_row_stride, head, tail, cols, cols_b, edge, head_mask, body_mask,
            body_b_mask, tail_mask, BLOCK_B, VEC)  # fmt: skip
        dy_h, dy_a, dy_b, dy_t = _load_shifted(
            dy_ptr, row * dy_row_stride, head, tail, cols, cols_b, edge, head_mask, body_mask,
            body_b_mask, tail_mask, BLOCK_B, VEC)  # fmt: skip
        dh_h, dh_a, dh_b, dh_t = x_h, x_a, x_b, x_t  # unread without HAS_DH
        if HAS_DH:
            dh_h, dh_a, dh_b, dh_t = _load_shifted(
                dh_ptr, row * dh_row_stride, head, tail, cols, cols_b, edge, head_mask,
                body_mask, body_b_mask, tail_mask, BLOCK_B, VEC)  # fmt: skip
        rstd = tl.load(rstd_ptr + row)
        if IS_RMS:
            mean = 0.0
        else:
            mean = tl.load(mean_ptr + row)
        xhat_h, dy_h, wdy_h = _xhat_wdy_part(x_h, dy_h, w_h, head_mask, mean, rstd, IS_RMS)
        xhat_a, dy_a, wdy_a = _xhat_wdy_part(x_a, dy_a, w_a, body_mask, mean, rstd, IS_RMS)
        xhat_t, dy_t, wdy_t = _xhat_wdy_part(x_t, dy_t, w_t, tail_mask, mean, rstd, IS_RMS)
        s1 = tl.sum(xhat_h * wdy_h, axis=0) + tl.sum(xhat_t * wdy_t, axis=0)
        s2 = tl.sum(wdy_h, axis=0) + tl.sum(wdy_t, axis=0)
        if IS_RMS:
            s1 += tl.sum(xhat_a * wdy_a, axis=0)
        elif PAIR_SUMS:
            s1_a, s2_a = tl.reduce((xhat_a * wdy_a, wdy_a), 0, add_pair)
            s1, s2 = s1 + s1_a, s2 + s2_a
        else:
            s1, s2 = s1 + tl.sum(xhat_a * wdy_a, axis=0), s2 + tl.sum(wdy_a, axis=0)
        if BLOCK_B > 0:
            xhat_b, dy_b, wdy_b = _xhat_wdy_part(x_b, dy_b, w_b, body_b_mask, mean, rstd, IS_RMS)
            s1 += tl.sum(xhat_b * wdy_b, axis=0)
            s2 += tl.sum(wdy_b, axis=0)
        c1 = s1 / n_cols
        if IS_RMS:
            c2 = 0.0
        else:
            c2 = s2 / n_cols
        dx_start = row * dx_row_stride
        dx_body = dx_ptr + known_multiple(dx_start + head, VEC)
        _store_dx_part(dx_ptr + dx_start + edge, xhat_h, wdy_h, dh_h, c1, c2, rstd, head_mask,
                       HAS_DH)  # fmt: skip
        _store_dx_part(dx_body + cols, xhat_a, wdy_a, dh_a, c1, c2, rstd, body_mask, HAS_DH)
        _store_dx_part(dx_ptr + dx_start + tail + edge, xhat_t, wdy_t, dh_t, c1, c2, rstd,
                       tail_mask, HAS_DH)  # fmt: skip
        dw_h, dw_a, dw_t = dw_h + dy_h * xhat_h, dw_a + dy_a * xhat_a, dw_t + dy_t * xhat_t
        db_h, db_a, db_t = db_h + dy_h, db_a + dy_a, db_t + dy_t
        if BLOCK_B > 0:
            _store_dx_part(dx_body + cols_b, xhat_b, wdy_b, dh_b, c1, c2, rstd, body_b_mask,
                           HAS_DH)  # fmt: skip
            dw_b, db_b = dw_b + dy_b * xhat_b, db_b + dy_b
    slot = (pid // 2 if PAIRED else pid).to(tl.int64)
    if HAS_WEIGHT:
        _put_shifted(dw_partial_ptr + slot * n_cols, head, tail, cols, cols_b, edge, head_mask,
                     body_mask, body_b_mask, tail_mask, dw_h, dw_a, dw_b, dw_t, BLOCK_B, PAIRED)
    if HAS_BIAS:
        _put_shifted(db_partial_ptr + slot * n_cols, head, tail, cols, cols_b, edge, head_mask,
                     body_mask, body_b_mask, tail_mask, db_h, db_a, db_b, db_t, BLOCK_B, PAIRED)


@triton.jit
def _persistent_single_pass(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
    PAIR_SUMS: tl.constexpr,  # LayerNorm's two row sums in one reduction
    ROW_ALIGN: tl.constexpr,  # the row strides and n_cols are multiples of this: vector loads
    SHIFT_VEC: tl.constexpr = 0,  # one-row tiles split at a 16-byte boundary: _shifted_bwd_rows
    BODY_B: tl.constexpr = 0,  # _shifted_bwd_rows' second body block (0: one block)
    LIGER_ORDER: tl.constexpr = False,  # tiles.bwd_tile_dw_first, w loaded every tile
    WHOLE_COLS: tl.constexpr = False,  # n_cols == BLOCK_COLS at compile time: x̂ unmasked
):
    """The persistent backward, single pass: a fixed grid grid-strides BLOCK_ROWS x BLOCK_COLS row
    tiles (BLOCK_COLS >= n_cols) and folds them into one fp32 partial row per program (PAIRED:
    programs 2k and 2k + 1 add into partial row k).
    PREFETCH issues the loads of the program's next tile before working on the current one
    (registers, not shared memory), so two tiles' loads are in flight per program."""
    if SHIFT_VEC > 0:
        _shifted_bwd_rows(
            x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr,
            db_partial_ptr, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
            dh_row_stride, offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_DH, BLOCK_COLS, BODY_B,
            PAIRED, PAIR_SUMS, SHIFT_VEC,
        )  # fmt: skip
        return
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_COLS)
    w = load_weight(w_ptr, cols, cols < n_cols, offset, HAS_WEIGHT)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    if PREFETCH:
        x_next, dy_next, dh_next = load_tile(x_ptr, dy_ptr, dh_ptr, pid, n_rows, n_cols,
                                             x_row_stride, dy_row_stride, dh_row_stride,
                                             BLOCK_ROWS, BLOCK_COLS, HAS_DH)  # fmt: skip
        for tile in tl.range(pid, n_tiles, n_programs):
            x_cur, dy_cur, dh_cur = x_next, dy_next, dh_next
            # Past the last tile the mask is all false: nothing is read.
            x_next, dy_next, dh_next = load_tile(x_ptr, dy_ptr, dh_ptr, tile + n_programs,
                                                 n_rows, n_cols, x_row_stride, dy_row_stride,
                                                 dh_row_stride, BLOCK_ROWS, BLOCK_COLS,
                                                 HAS_DH)  # fmt: skip
            dw, db = bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, IS_RMS, HAS_WEIGHT,
                HAS_DH, BLOCK_ROWS, BLOCK_COLS, x_cur, dy_cur, True, PAIR_SUMS, dh_cur,
                WHOLE_COLS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
    elif LIGER_ORDER:  # w, like dy, live for a tile only: x̂, w·dy and dγ across its row sums
        for tile in tl.range(pid, n_tiles, n_programs, num_stages=LOOP_STAGES):
            dw_acc, db_acc = bwd_tile_dw_first(
                tile, x_ptr, dy_ptr, dx_ptr, dh_ptr,
                load_weight(w_ptr, cols, cols < n_cols, offset, HAS_WEIGHT), mean_ptr, rstd_ptr,
                dw_acc, db_acc, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride,
                dh_row_stride, IS_RMS, HAS_WEIGHT, HAS_DH, BLOCK_ROWS, BLOCK_COLS,
            )  # fmt: skip
    else:
        for tile in tl.range(pid, n_tiles, n_programs, num_stages=LOOP_STAGES):
            dw, db = bwd_tile_single_pass(
                tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
                x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, IS_RMS, HAS_WEIGHT,
                HAS_DH, BLOCK_ROWS, BLOCK_COLS, PAIR_SUMS=PAIR_SUMS, WHOLE_COLS=WHOLE_COLS,
            )  # fmt: skip
            dw_acc += dw
            db_acc += db
    slot = (pid // 2 if PAIRED else pid).to(tl.int64)
    store_partials(dw_partial_ptr, db_partial_ptr, slot * n_cols, dw_acc, db_acc, n_cols,
                   HAS_WEIGHT, HAS_BIAS, BLOCK_COLS, PAIRED)  # fmt: skip


@triton.jit
def _norm_bwd_persistent_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    SHIFT_VEC: tl.constexpr = 0,
    BODY_B: tl.constexpr = 0,
    LIGER_ORDER: tl.constexpr = False,
):
    """The single-pass persistent backward (_persistent_single_pass) at a runtime width."""
    _persistent_single_pass(
        x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
        n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, offset, IS_RMS,
        HAS_WEIGHT, HAS_BIAS, HAS_DH, BLOCK_ROWS, BLOCK_COLS, LOOP_STAGES, PREFETCH, PAIRED, False,
        ROW_ALIGN, SHIFT_VEC, BODY_B, LIGER_ORDER,
    )  # fmt: skip


@triton.jit
def _norm_bwd_persistent_static_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (PAIRED: zeroed, n_programs / 2)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (PAIRED: as dweight's)
    n_rows,
    n_cols: tl.constexpr,  # one compiled kernel per width
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    LOOP_STAGES: tl.constexpr,
    PREFETCH: tl.constexpr,
    PAIRED: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    PAIR_SUMS: tl.constexpr,  # LayerNorm's two row sums in one reduction
    SHIFT_VEC: tl.constexpr = 0,
    BODY_B: tl.constexpr = 0,
    LIGER_ORDER: tl.constexpr = False,
):
    """The same at a compile-time width, LayerNorm's row sums paired where PAIR_SUMS
    (config.NORM_BWD_STATIC_COLS: where it measured faster)."""
    _persistent_single_pass(
        x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_partial_ptr, db_partial_ptr,
        n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, offset, IS_RMS,
        HAS_WEIGHT, HAS_BIAS, HAS_DH, BLOCK_ROWS, BLOCK_COLS, LOOP_STAGES, PREFETCH, PAIRED,
        PAIR_SUMS, ROW_ALIGN, SHIFT_VEC, BODY_B, LIGER_ORDER, n_cols == BLOCK_COLS,
    )  # fmt: skip


@triton.jit
def _norm_bwd_roles_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_ptr,  # (n_cols,) dweight, the weight's dtype (written)
    db_ptr,  # (n_cols,) dbias, the bias's dtype (written)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_COLS: tl.constexpr,  # a row program's row (>= n_cols)
    COL_BLOCK: tl.constexpr,  # a column program's columns
    CHUNK_ROWS: tl.constexpr,  # rows a column program loads at a time
    PAIR_SUMS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
):
    """A decode batch's backward by role (config.bwd_roles): program r < n_rows writes row r's
    dx; program n_rows + k sums dw = sum_r dy * xhat and db = sum_r dy over every row for the
    k-th block of COL_BLOCK columns and stores them in the parameters' dtypes. The roles share
    nothing but their inputs: no partial rows, no reduce launch."""
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    pid = tl.program_id(0)
    if pid < n_rows:  # (names differ between the branches: their shapes do)
        row_cols = tl.arange(0, BLOCK_COLS)
        w = load_weight(w_ptr, row_cols, row_cols < n_cols, offset, HAS_WEIGHT)
        bwd_tile_single_pass(
            pid, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, n_rows, n_cols,
            x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, IS_RMS, HAS_WEIGHT,
            HAS_DH, 1, BLOCK_COLS, PAIR_SUMS=PAIR_SUMS,
        )  # fmt: skip
    else:
        cols = (pid - n_rows) * COL_BLOCK + tl.arange(0, COL_BLOCK)
        col_mask = cols < n_cols
        dw = tl.zeros([COL_BLOCK], dtype=tl.float32)
        db = tl.zeros([COL_BLOCK], dtype=tl.float32)
        for start in range(0, n_rows, CHUNK_ROWS):
            rows = start + tl.arange(0, CHUNK_ROWS)
            row_mask = rows < n_rows
            mask = row_mask[:, None] & col_mask[None, :]
            x, dy = load_x_dy(x_ptr, dy_ptr, rows.to(tl.int64), cols, mask, x_row_stride,
                              dy_row_stride)  # fmt: skip
            mean, rstd = load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
            xhat, dy, _ = xhat_wdy(x, dy, 1.0, mask, mean, rstd, IS_RMS, False)
            dw += tl.sum(dy * xhat, axis=0)
            db += tl.sum(dy, axis=0)
        if HAS_WEIGHT:
            tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=col_mask)
        if HAS_BIAS:
            tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=col_mask)


@triton.jit
def _norm_bwd_persistent_two_pass_kernel(
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_partial_ptr,  # (n_programs, n_cols) fp32 dweight partials (written)
    db_partial_ptr,  # (n_programs, n_cols) fp32 dbias partials (written)
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    offset,  # y = xhat * (offset + weight)
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
):
    """The persistent backward, two pass, for rows wider than one register tile: each grid-strided
    row tile is walked twice in BLOCK_COLS chunks (c1/c2, then dx + partials); the re-read of
    the tile is mostly served by L2."""
    n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride = known_bwd_layout(
        n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride, ROW_ALIGN)
    pid = tl.program_id(0)
    dw_out, db_out = dw_partial_ptr, db_partial_ptr  # None where absent
    if HAS_WEIGHT:
        dw_out = dw_partial_ptr + pid.to(tl.int64) * n_cols  # the program's partial rows
    if HAS_BIAS:
        db_out = db_partial_ptr + pid.to(tl.int64) * n_cols
    n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
    for tile in range(pid, n_tiles, tl.num_programs(0)):
        bwd_tile_two_pass(
            tile, tile == pid, x_ptr, dy_ptr, dx_ptr, dh_ptr, w_ptr, mean_ptr, rstd_ptr, dw_out,
            db_out, n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride,
            offset, IS_RMS, HAS_WEIGHT, HAS_BIAS, HAS_DH, False, BLOCK_ROWS, BLOCK_COLS,
        )  # fmt: skip


# ============================================================================================
# Launchers
# ============================================================================================


def _empty_forward(x2d, is_rms, store_stats=True):
    """Uninitialized (y, mean | None, rstd | None) for x2d: (n_rows, n_cols); mean/rstd fp32
    (n_rows,), None without ``store_stats``."""
    n_rows = x2d.shape[0]
    y = buffer(x2d.shape, x2d.dtype, x2d.device)
    if not store_stats:
        return y, None, None
    rstd = buffer(n_rows, torch.float32, x2d.device)
    mean = None if is_rms else buffer(n_rows, torch.float32, x2d.device)
    return y, mean, rstd


def norm_forward(x2d, weight, bias, eps, is_rms, *, offset=0.0, residual=None, h_out=None,
                 tile=None, block_size=None, num_warps=None, store_stats=True,
                 early_params=None, params_apart=None, shift=None,
                 shifted_params=None):  # fmt: skip
    """Forward launcher: x2d (n_rows, n_cols) -> (y, mean | None, rstd), mean/rstd fp32 (n_rows,);
    both None without ``store_stats`` (no backward will read them: no allocation, no stores).

    ``offset``: y = xhat * (offset + weight). ``residual`` with ``h_out`` (x2d's shape and dtype):
    the fused residual add, h = x2d + residual written to h_out and normalized.
    ``tile``: the plan's row tile (``config.NormPlan.fwd_tile``, wide or narrow rows; None: one
    row per program). ``block_size``/``num_warps``/``early_params`` override
    ``config.norm_fwd_config``, ``params_apart`` the rule (``config.PARAMS_APART``) and
    ``shift`` whether a one-block row not vector aligned loads from its first 16-byte boundary
    (``config.shift_vec``; True forces it wherever x and y allow it), ``shifted_params``
    whether such a row reads w/b as vectors from shifted copies (``config.shifted_params``); with
    ``NORMLAB_AUTOTUNE=1`` on a GPU and no override, the autotuned kernel picks them.
    """
    x2d = unit_col_stride(x2d)
    residual, h_out = fused_add_buffers(x2d, residual, h_out)
    n_rows, n_cols = x2d.shape
    if x2d.numel() == 0:  # no rows or no columns: empty y, nothing to launch
        return _empty_forward(x2d, is_rms, store_stats)
    if tile is not None and block_size is None and num_warps is None:
        from normlab.norms import block_row

        return block_row.launch_forward(x2d, weight, bias, eps, is_rms, tile, store_stats,
                                        offset=offset, residual=residual,
                                        h_out=h_out)  # fmt: skip
    y, mean, rstd = _empty_forward(x2d, is_rms, store_stats)
    strides = (x2d.stride(0), 0 if residual is None else residual.stride(0), y.stride(0),
               0 if residual is None else h_out.stride(0))  # fmt: skip
    # Absent tensors go as None: a constexpr each, where a placeholder tensor would cost every
    # launch a pointer (inside torch.compile, a data_ptr() and a driver call in Triton's launcher).
    args = (x2d, residual, y, h_out, weight, bias, mean, rstd)
    w_arg, b_arg = None, None  # the shifted copies, when made below
    row_align = config.kernel_row_align(math.gcd(*strides), x2d.element_size())
    device = x2d.device.index
    cfg = config.norm_fwd_config(n_cols, is_rms, n_rows, _runtime.sm_count(device),
                                 residual is not None, x2d.element_size(),
                                 _runtime.l2_bytes(device))  # fmt: skip
    block = next_pow2(block_size) if block_size else cfg.block_size
    warps = num_warps or cfg.num_warps
    if params_apart is None:
        params_apart = config.PARAMS_APART and config.params_apart(
            row_align, x2d.element_size(), block // (32 * warps),
            (weight is not None) + (bias is not None))  # fmt: skip
    flags = {"IS_RMS": bool(is_rms), "HAS_WEIGHT": weight is not None, "HAS_BIAS": bias is not None,
             "HAS_RESIDUAL": residual is not None,
             "INT64_ROWS": config.row_offsets_int64(n_rows, *strides),
             "ROW_ALIGN": row_align, "STORE_STATS": bool(store_stats),
             "PARAMS_APART": bool(params_apart)}
    tail = (*strides, 0, n_cols, float(eps), float(offset))
    if AUTOTUNE and block_size is None and num_warps is None:
        not_replayable()  # the autotuner launches through Triton, unrecorded
        launch(_norm_fwd_kernel_tuned, (n_rows,), *args, w_arg, b_arg, *tail, **flags)
        return y, mean, rstd
    vec = (config.shift_vec(row_align, x2d.element_size(), n_rows, n_cols,
                            _runtime.sm_count(x2d.device.index), x2d.stride(0), y.stride(0),
                            force=bool(shift))
           if n_cols <= block and residual is None and shift is not False else 0)  # fmt: skip
    if shifted_params is None:
        shifted_params = config.shifted_params(x2d.numel() * x2d.element_size())
    shifted = vec and (weight is not None or bias is not None) and shifted_params
    if shifted:  # w[k:] and b[k:] in row k of a copy each: the body's parameters as vectors
        pitch = cdiv(n_cols, vec) * vec
        w_arg = buffer((vec, pitch), weight.dtype, x2d.device) if weight is not None else None
        b_arg = buffer((vec, pitch), bias.dtype, x2d.device) if bias is not None else None
        launch(_shift_params_kernel, (vec, cdiv(pitch, config.SHIFT_PARAMS_BLOCK)),
               weight, bias, w_arg, b_arg, n_cols, pitch, HAS_WEIGHT=weight is not None,
               HAS_BIAS=bias is not None, BLOCK=config.SHIFT_PARAMS_BLOCK,
               num_warps=config.SHIFT_PARAMS_WARPS)  # fmt: skip
        tail = (*strides, pitch, *tail[len(strides) + 1:])
    launch(_norm_fwd_kernel, (n_rows,), *args, w_arg, b_arg, *tail, **flags, BLOCK_SIZE=block,
           SHIFT_VEC=vec, SHIFTED_PARAMS=bool(shifted),
           SINGLE_BLOCK=n_cols <= block, EVEN_COLS=n_cols % block == 0,
           EARLY_PARAMS=(cfg.early_params if early_params is None else early_params)
           and n_cols <= block,
           num_warps=warps)  # fmt: skip
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
    offset=0.0,
    dh=None,
    maxnreg=None,
    shift=None,
    roles=None,
    liger_order=None,
):
    """Backward launcher -> (dx, dweight | None, dbias | None).

    ``strategy`` picks the dweight/dbias reduction (module docstring); the keywords override
    ``config.norm_bwd_config`` (``two_pass=True`` with a small ``block_cols`` exercises the
    wide-row path on small shapes). ``grad_weight``/``grad_bias``: existing fp32 or param-dtype
    buffers that the result is added into (fused ``.grad`` accumulation); they are returned.
    ``offset``: the forward's. ``dh`` (x2d's shape): the fused residual add's gradient of h
    (x2d is then h), added into dx. ``shift``: whether the persistent single pass splits rows
    off a 16-byte boundary at their first one (``_shifted_bwd_rows``; None: ``config``'s rule,
    True: wherever it can run). ``roles``: whether a persistent single pass over one-row tiles
    is the roles kernel's one launch (None: ``config.bwd_roles``). ``liger_order``: whether it
    runs in Liger-Kernel's order, unshifted (``tiles.bwd_tile_dw_first``, w loaded every tile;
    None: ``config.bwd_liger_order``).
    """
    if strategy not in config.STRATEGIES:
        raise ValueError(f"strategy={strategy!r}: expected one of {config.STRATEGIES}")
    x2d, dy2d = unit_col_stride(x2d), unit_col_stride(dy2d)
    if dh is not None:
        if dh.shape != x2d.shape:
            raise ValueError(f"dh has shape {tuple(dh.shape)}, expected {tuple(x2d.shape)}")
        dh = unit_col_stride(dh)
    n_rows, n_cols = x2d.shape
    device = x2d.device
    has_w, has_b = weight is not None, bias is not None
    for name, buf, param in (("grad_weight", grad_weight, weight), ("grad_bias", grad_bias, bias)):
        if buf is not None and (param is None or buf.shape != (n_cols,) or buf.device != device):
            raise ValueError(
                f"{name} must be a ({n_cols},) tensor on {device} beside its parameter"
            )
    if strategy == "auto":
        strategy = "persistent"  # measured the fastest of the three at every peer shape
    dx = buffer((n_rows, n_cols), x2d.dtype, device)
    dw = grad_weight if grad_weight is not None else (
        buffer(n_cols, weight.dtype, device) if has_w else None
    )  # fmt: skip
    db = grad_bias if grad_bias is not None else (
        buffer(n_cols, bias.dtype, device) if has_b else None
    )  # fmt: skip
    if dx.numel() == 0:  # no rows (dweight/dbias are 0) or no columns: nothing to launch
        for out, buf in ((dw, grad_weight), (db, grad_bias)):
            if out is not None and buf is None:
                not_replayable()
                out.zero_()
        return dx, dw, db
    strides = (x2d.stride(0), dy2d.stride(0), dx.stride(0),
               dh.stride(0) if dh is not None else dx.stride(0))  # fmt: skip
    # the width too: the backward kernels take n_cols at run time and hint it (known_multiple)
    align = config.kernel_row_align(math.gcd(*strides, n_cols), x2d.element_size())
    sm_count = _runtime.sm_count(device.index)

    def plan(shifted):  # shifted rows are one-row tiles
        warps = (config.NORM_BWD_SHIFT_WARPS if shifted
                 else config.NORM_BWD_LIGER_ORDER_WARPS if liger_order else None)  # fmt: skip
        return config.norm_bwd_config(
            strategy, n_rows, n_cols, is_rms=bool(is_rms), two_pass=two_pass,
            block_rows=1 if shifted else block_rows, block_cols=block_cols,
            num_warps=warps if num_warps is None else num_warps,
            programs_per_sm=programs_per_sm, loop_stages=loop_stages,
            prefetch=False if shifted or liger_order else prefetch,
            paired_partials=paired_partials,
            aligned=align * x2d.element_size() == config.VECTOR_BYTES,
            sm_count=sm_count, fused_add=dh is not None, elem_bytes=x2d.element_size(),
            maxnreg=maxnreg,
            one_warp=not shifted and config.one_warp_rows(n_cols, align, x2d.element_size()),
        )  # fmt: skip

    def persistent_grid(cfg):
        # an explicit programs_per_sm is taken as given (sweeps); the rule caps partial traffic
        cap = None if programs_per_sm is not None else config.norm_bwd_partials_cap(
            n_rows, x2d.element_size() * (3 + (dh is not None)), has_w + has_b)  # fmt: skip
        return config.norm_bwd_persistent_programs(cdiv(n_rows, cfg.block_rows),
                                                   cfg.programs_per_sm, sm_count, cap)  # fmt: skip

    vec = 0
    one_pass = not two_pass if two_pass is not None else not config.norm_bwd_two_pass(
        n_cols, bool(is_rms), n_rows)  # fmt: skip
    one_row_tiles = strategy == "persistent" and one_pass and block_rows in (None, 1)
    if liger_order is None:
        liger_order = (one_row_tiles and not shift and not prefetch
                       and config.bwd_liger_order(n_cols, bool(is_rms), align,
                                                  x2d.element_size()))  # fmt: skip
    elif liger_order and (not (strategy == "persistent" and one_pass) or shift or prefetch):
        raise ValueError("liger_order=True: the persistent single pass, unshifted, no prefetch")
    if one_row_tiles and shift is not False and not liger_order:
        vec = config.bwd_shift_vec(x2d.element_size(), n_cols, strides, force=bool(shift))
    cfg = plan(bool(vec))
    if vec:
        shifted_programs = config.bwd_shift_programs(persistent_grid(cfg), n_rows, vec,
                                                     force=bool(shift))  # fmt: skip
        if not shifted_programs:
            vec, cfg = 0, plan(False)
    common = (x2d, dy2d, dx, dh, weight, mean, rstd)  # None where absent (constexprs)
    flags = {"IS_RMS": bool(is_rms), "HAS_WEIGHT": has_w, "HAS_BIAS": has_b,
             "HAS_DH": dh is not None}  # fmt: skip
    tile = {"BLOCK_ROWS": cfg.block_rows, "BLOCK_COLS": cfg.block_cols, "num_warps": cfg.num_warps}
    body_b = 0
    if vec and block_cols is None:  # the shifted rows' body in one block or two
        tile["BLOCK_COLS"], body_b = config.bwd_body_blocks(n_cols, vec)
    n_tiles = cdiv(n_rows, cfg.block_rows)

    if strategy == "atomic":
        # fp32 accumulators; a caller's fp32 .grad is accumulated into directly.
        def accumulator(buf, present):
            if not present:
                return None
            if buf is not None and buf.dtype == torch.float32:
                return buf
            return torch.zeros(n_cols, dtype=torch.float32, device=device)

        acc_w, acc_b = accumulator(grad_weight, has_w), accumulator(grad_bias, has_b)
        not_replayable()  # host-side ops (the zeroed accumulators, their copy) around it
        launch(_norm_bwd_atomic_kernel, (n_tiles,), *common, acc_w, acc_b, n_rows, n_cols,
               *strides, float(offset), **flags, TWO_PASS=cfg.two_pass, **tile,
               ROW_ALIGN=align)  # fmt: skip
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
        n_programs = shifted_programs if vec else persistent_grid(cfg)
    else:
        tiles_per_program = cfg.rows_per_program // cfg.block_rows
        n_programs = cdiv(n_tiles, tiles_per_program)
    if (strategy == "persistent" and not cfg.two_pass and not vec and not liger_order
            and (has_w or has_b)
            and grad_weight is None and grad_bias is None
            and (config.bwd_roles(n_rows, n_cols, n_programs, cfg.block_rows, tile["BLOCK_COLS"])
                 if roles is None
                 else roles and cfg.block_rows == 1)):  # fmt: skip
        roles_warps = num_warps if num_warps is not None else config.NORM_BWD_ROLES_WARPS
        col_block, chunk_rows = config.bwd_roles_col_tile(n_rows, n_cols, tile["BLOCK_COLS"],
                                                          roles_warps)  # fmt: skip
        launch(_norm_bwd_roles_kernel, (n_rows + cdiv(n_cols, col_block),), *common,
               dw, db, n_rows, n_cols, *strides,
               float(offset), **flags, BLOCK_COLS=tile["BLOCK_COLS"], COL_BLOCK=col_block,
               CHUNK_ROWS=chunk_rows, PAIR_SUMS=PAIRED_ROW_SUMS, ROW_ALIGN=align,
               num_warps=roles_warps)  # fmt: skip
        return dx, dw, db
    # One program holds every row: its partial row is the result, written in the parameter's
    # dtype (no workspace, no reduce launch).
    direct = (strategy == "persistent" and n_programs == 1 and grad_weight is None
              and grad_bias is None)  # fmt: skip
    # Pairs where the grid exceeds the partial rows' bound (a paired_partials= keyword forces it).
    may_pair = (cfg.paired_partials if paired_partials is not None else cfg.paired_partials
                and config.pair_partials(n_programs, sm_count))  # fmt: skip
    paired = may_pair and strategy == "persistent" and not cfg.two_pass and not direct
    n_partials = cdiv(n_programs, 2) if paired else n_programs
    if direct:
        dw_partial, db_partial = dw, db
    else:
        dw_partial = (buffer((n_partials, n_cols), torch.float32, device, zero=paired)
                      if has_w else None)  # fmt: skip
        db_partial = (buffer((n_partials, n_cols), torch.float32, device, zero=paired)
                      if has_b else None)  # fmt: skip
    grid = (n_programs,)
    if strategy == "two_stage":
        launch(_norm_bwd_partials_kernel, grid, *common, dw_partial, db_partial, n_rows, n_cols,
               *strides, float(offset), tiles_per_program, **flags, TWO_PASS=cfg.two_pass,
               **tile, ROW_ALIGN=align)  # fmt: skip
    elif cfg.two_pass:
        launch(_norm_bwd_persistent_two_pass_kernel, grid, *common, dw_partial, db_partial,
               n_rows, n_cols, *strides, float(offset), **flags, **tile,
               ROW_ALIGN=align)  # fmt: skip
    else:
        static = config.norm_bwd_static_width(n_cols)
        kernel = _norm_bwd_persistent_static_kernel if static else _norm_bwd_persistent_kernel
        launch(kernel, grid, *common, dw_partial, db_partial, n_rows, n_cols, *strides,
               float(offset), **flags, **tile, LOOP_STAGES=cfg.loop_stages,
               PREFETCH=cfg.prefetch, PAIRED=paired, ROW_ALIGN=align, SHIFT_VEC=vec, BODY_B=body_b,
               LIGER_ORDER=bool(liger_order),
               **({"PAIR_SUMS": PAIRED_ROW_SUMS} if static else {}),
               **({"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}))  # fmt: skip
    if (has_w or has_b) and not direct:
        reduce_partials(
            dw_partial,
            db_partial,
            dw,
            db,
            accumulate_w=grad_weight is not None,
            accumulate_b=grad_bias is not None,
        )
    return dx, dw, db
