"""Tile helpers the norm kernels share: loads, the normalized row, dx, and the dγ/dβ partials.

With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), w = offset + weight and wdy = w * dy:

    dx = rstd * (wdy - xhat * c1 - c2)    c1 = mean(xhat * wdy), c2 = mean(wdy) (0 for RMSNorm)
    dw = sum_rows(dy * xhat)              db = sum_rows(dy)

With the fused residual add (y = norm(h), h = x + residual also an output), x is h and
dx = dresidual = dh + the norm's dx (HAS_DH).
"""

import triton
import triton.language as tl


@triton.jit
def known_multiple(value, ROW_ALIGN: tl.constexpr):
    """value (a row stride, or the row width), as one Triton knows is a multiple of ROW_ALIGN
    (the host checked it is), so that row * stride + cols loads whole vectors and cols < n_cols
    masks whole vectors. Not tl.multiple_of: Triton puts that hint on the op defining its value,
    and a kernel argument has none, so the hint is dropped. The product's divisibility is
    derived, and a constant (Inductor's) folds through it. A hinted stride under an unhinted
    runtime width is worse than none: vector-shaped tiles, loaded element by element."""
    if ROW_ALIGN > 1:
        value = value // ROW_ALIGN * ROW_ALIGN
    return value


@triton.jit
def known_bwd_layout(n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride,
                     ROW_ALIGN: tl.constexpr):  # fmt: skip
    """The backward kernels' width and row strides, each a known multiple of ROW_ALIGN (the host
    took the width into it: a hinted stride under an unhinted width is worse than none)."""
    return (known_multiple(n_cols, ROW_ALIGN), known_multiple(x_row_stride, ROW_ALIGN),
            known_multiple(dy_row_stride, ROW_ALIGN), known_multiple(dx_row_stride, ROW_ALIGN),
            known_multiple(dh_row_stride, ROW_ALIGN))


@triton.jit
def load_weight(w_ptr, cols, col_mask, offset, HAS_WEIGHT: tl.constexpr):  # w_ptr: (n_cols,)
    """fp32 (offset + weight) chunk, or a scalar 1 placeholder when there is no weight (the op
    refuses an offset without one)."""
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        return w + tl.cast(offset, tl.float32)
    else:
        return 1.0


@triton.jit
def load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS: tl.constexpr):
    """fp32 (mean, rstd) of a tile's rows; mean = 0 for RMSNorm."""
    rstd = tl.load(rstd_ptr + rows, mask=row_mask, other=0.0)
    if IS_RMS:
        mean = tl.zeros_like(rstd)
    else:
        mean = tl.load(mean_ptr + rows, mask=row_mask, other=0.0)
    return mean, rstd


@triton.jit
def load_xhat_wdy(
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
    x, dy = load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride)
    return xhat_wdy(x, dy, w, mask, mean, rstd, IS_RMS, HAS_WEIGHT)


@triton.jit
def load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride):
    """x and dy of a [rows, cols] tile in their own dtype; masked entries are 0 (and not read)."""
    return (load_rows(x_ptr, rows64, cols, mask, x_row_stride),
            load_rows(dy_ptr, rows64, cols, mask, dy_row_stride))  # fmt: skip


@triton.jit
def xhat_wdy(x, dy, w, mask, mean, rstd, IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):
    """fp32 (xhat, dy, w * dy) from a loaded tile (see load_xhat_wdy); ``mask`` None: the tile's
    columns are whole (rows past the matrix load x and rstd as 0: their x̂ is 0 unmasked)."""
    x = x.to(tl.float32)
    dy = dy.to(tl.float32)
    if IS_RMS:
        xhat = x * rstd[:, None]
    elif mask is None:
        xhat = (x - mean[:, None]) * rstd[:, None]
    else:
        # Masked columns would give -mean * rstd; zero them so they add nothing to c1 or dw.
        xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
    if HAS_WEIGHT:
        wdy = dy * w[None, :]
    else:
        wdy = dy
    return xhat, dy, wdy


@triton.jit
def store_dx(
    dx_ptr,  # (n_rows, n_cols) input gradient
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's output h (read with HAS_DH)
    rows64,
    cols,
    mask,
    xhat,
    wdy,
    c1,
    c2,
    rstd,
    dx_row_stride,
    dh_row_stride,
    IS_RMS: tl.constexpr,
    HAS_DH: tl.constexpr,
    dh=None,
    DH_LOADED: tl.constexpr = False,
):
    """dx of a tile from its row constants; HAS_DH adds dh (loaded here, or with DH_LOADED the
    tile's dh as the caller loaded it)."""
    if IS_RMS:
        dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
    else:
        dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
    if HAS_DH:
        if not DH_LOADED:
            dh = load_rows(dh_ptr, rows64, cols, mask, dh_row_stride)
        dx += dh.to(tl.float32)
    dx_ptrs = dx_ptr + rows64[:, None] * dx_row_stride + cols[None, :]
    tl.store(dx_ptrs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def load_rows(ptr, rows64, cols, mask, row_stride):
    """A [rows, cols] tile in its own dtype; masked entries are 0 (and not read)."""
    return tl.load(ptr + rows64[:, None] * row_stride + cols[None, :], mask=mask, other=0.0)


@triton.jit
def load_tile(x_ptr, dy_ptr, dh_ptr, tile, n_rows, n_cols, x_row_stride, dy_row_stride,
              dh_row_stride, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
              HAS_DH: tl.constexpr):  # fmt: skip
    """x, dy and (HAS_DH; else x again, unread) dh of row tile ``tile`` (their own dtype; 0
    outside the matrix)."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)
    x, dy = load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride)
    dh = load_rows(dh_ptr, rows64, cols, mask, dh_row_stride) if HAS_DH else x
    return x, dy, dh


@triton.jit
def add_pair(a0, b0, a1, b1):
    return a0 + a1, b0 + b1


@triton.jit
def bwd_tile_single_pass(
    tile,
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w,
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    n_rows,
    n_cols,
    x_row_stride,
    dy_row_stride,
    dx_row_stride,
    dh_row_stride,
    IS_RMS: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    x_pre=None,
    dy_pre=None,
    PRELOADED: tl.constexpr = False,
    PAIR_SUMS: tl.constexpr = False,
    dh_pre=None,
    WHOLE_COLS: tl.constexpr = False,
):
    """dx of one BLOCK_ROWS tile whose rows fit in BLOCK_COLS (w: fp32 offset + weight
    [BLOCK_COLS], loaded once per program; HAS_DH adds dh into dx); returns the fp32 tile
    contributions (dy * xhat, dy) to dw and db.
    With PRELOADED, x_pre / dy_pre (and with HAS_DH dh_pre) are this tile's x and dy (and dh),
    already loaded (load_tile). Otherwise dh is loaded with the tile, before its row sums, so
    its memory round trip overlaps them instead of following them.
    PAIR_SUMS: LayerNorm's two row sums in one reduction (one cross-warp exchange, not two).
    WHOLE_COLS: n_cols == BLOCK_COLS at compile time: x̂ unmasked (xhat_wdy)."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)
    dh = dh_pre
    if HAS_DH and not PRELOADED:
        dh = load_rows(dh_ptr, rows64, cols, mask, dh_row_stride)
    mean, rstd = load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
    if PRELOADED:
        x, dy = x_pre, dy_pre
    else:
        x, dy = load_x_dy(x_ptr, dy_ptr, rows64, cols, mask, x_row_stride, dy_row_stride)
    if WHOLE_COLS:
        xhat, dy, wdy = xhat_wdy(x, dy, w, None, mean, rstd, IS_RMS, HAS_WEIGHT)
    else:
        xhat, dy, wdy = xhat_wdy(x, dy, w, mask, mean, rstd, IS_RMS, HAS_WEIGHT)
    if IS_RMS:
        c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        c2 = c1  # unread
    elif PAIR_SUMS:
        s1, s2 = tl.reduce((xhat * wdy, wdy), 1, add_pair)
        c1 = s1 / n_cols
        c2 = s2 / n_cols
    else:
        c1 = tl.sum(xhat * wdy, axis=1) / n_cols
        c2 = tl.sum(wdy, axis=1) / n_cols
    store_dx(dx_ptr, dh_ptr, rows64, cols, mask, xhat, wdy, c1, c2, rstd, dx_row_stride,
             dh_row_stride, IS_RMS, HAS_DH, dh, True)  # fmt: skip
    return dy * xhat, dy


@triton.jit
def bwd_tile_dw_first(tile, x_ptr, dy_ptr, dx_ptr, dh_ptr, w, mean_ptr, rstd_ptr, dw_acc, db_acc,
                      n_rows, n_cols, x_row_stride, dy_row_stride, dx_row_stride, dh_row_stride,
                      IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, HAS_DH: tl.constexpr,
                      BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):  # fmt: skip
    """bwd_tile_single_pass in Liger-Kernel's order: the tile's dγ/dβ added into ``dw_acc`` and
    ``db_acc`` before the row sums, so dy's registers are free across them, and dh loaded after
    them. Returns the accumulators."""
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    rows64 = rows.to(tl.int64)
    mean, rstd = load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
    xhat, dy, wdy = load_xhat_wdy(x_ptr, dy_ptr, w, rows64, cols, mask, mean, rstd,
                                  x_row_stride, dy_row_stride, IS_RMS, HAS_WEIGHT)  # fmt: skip
    dw_acc += dy * xhat
    db_acc += dy
    c1 = tl.sum(xhat * wdy, axis=1) / n_cols
    c2 = c1  # unread by RMSNorm
    if not IS_RMS:
        c2 = tl.sum(wdy, axis=1) / n_cols
    store_dx(dx_ptr, dh_ptr, rows64, cols, mask, xhat, wdy, c1, c2, rstd, dx_row_stride,
             dh_row_stride, IS_RMS, HAS_DH)  # fmt: skip
    return dw_acc, db_acc


@triton.jit
def bwd_tile_two_pass(
    tile,
    is_first,
    x_ptr,  # (n_rows, n_cols) forward input
    dy_ptr,  # (n_rows, n_cols) output gradient
    dx_ptr,  # (n_rows, n_cols) input gradient (written)
    dh_ptr,  # (n_rows, n_cols) gradient of the fused add's h (HAS_DH; else None)
    w_ptr,  # (n_cols,) weight (HAS_WEIGHT; else None)
    mean_ptr,  # (n_rows,) fp32 mean (LayerNorm; else None)
    rstd_ptr,  # (n_rows,) fp32 rstd
    dw_out_ptr,  # (n_cols,) fp32 partial row (or the atomic accumulator) for dweight
    db_out_ptr,  # (n_cols,) fp32 partial row (or the atomic accumulator) for dbias
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
    mean, rstd = load_row_stats(mean_ptr, rstd_ptr, rows, row_mask, IS_RMS)
    c1 = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    c2 = tl.zeros([BLOCK_ROWS], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK_COLS):
        cols = start + tl.arange(0, BLOCK_COLS)
        col_mask = cols < n_cols
        mask = row_mask[:, None] & col_mask[None, :]
        w = load_weight(w_ptr, cols, col_mask, offset, HAS_WEIGHT)
        xhat, dy, wdy = load_xhat_wdy(
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
        w = load_weight(w_ptr, cols, col_mask, offset, HAS_WEIGHT)
        xhat, dy, wdy = load_xhat_wdy(
            x_ptr, dy_ptr, w, rows64, cols, mask, mean, rstd,
            x_row_stride, dy_row_stride, IS_RMS, HAS_WEIGHT,
        )  # fmt: skip
        store_dx(dx_ptr, dh_ptr, rows64, cols, mask, xhat, wdy, c1, c2, rstd, dx_row_stride,
                 dh_row_stride, IS_RMS, HAS_DH)  # fmt: skip
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
def store_partials(
    dw_partial_ptr,  # (n_partials, n_cols) fp32 dweight partials (HAS_WEIGHT; else None)
    db_partial_ptr,  # (n_partials, n_cols) fp32 dbias partials (HAS_BIAS; else None)
    row_start,  # the partial row's first element
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
        put_row(dw_partial_ptr + row_start + cols, tl.sum(dw_acc, axis=0), cols < n_cols, ADD)
    if HAS_BIAS:
        put_row(db_partial_ptr + row_start + cols, tl.sum(db_acc, axis=0), cols < n_cols, ADD)


@triton.jit
def put_row(ptrs, values, mask, ADD: tl.constexpr):
    if ADD:
        tl.atomic_add(ptrs, values, mask=mask, sem="relaxed")
    else:
        tl.store(ptrs, values, mask=mask)




@triton.jit
def load_f32(ptrs, mask, EVEN: tl.constexpr, EVICTION: tl.constexpr):
    """fp32 values; no predicate when the chunks tile the row exactly (EVEN)."""
    if EVEN:
        return tl.load(ptrs, eviction_policy=EVICTION).to(tl.float32)
    return tl.load(ptrs, mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)


@triton.jit
def load_param_f32(ptrs, mask, EVEN: tl.constexpr, EVICTION: tl.constexpr, APART: tl.constexpr):
    """A row of w or b in fp32, loaded beside a row of x. Triton gives the loads of one shape that
    feed each other the widest vector any of them allows, so an aligned w would split an
    unaligned x row into strided element loads. APART (rows not vector aligned) loads it as
    [1, BLOCK], a shape of its own: x's loads then take their own width, consecutive elements
    to consecutive threads."""
    if APART:
        v = load_f32(ptrs[None, :], mask[None, :], EVEN, EVICTION)
        return tl.reshape(v, [ptrs.shape[0]])
    return load_f32(ptrs, mask, EVEN, EVICTION)


@triton.jit
def store_cast(ptrs, values, mask, EVEN: tl.constexpr):
    """values in the pointers' dtype; no predicate under EVEN."""
    if EVEN:
        tl.store(ptrs, values.to(ptrs.dtype.element_ty))
    else:
        tl.store(ptrs, values.to(ptrs.dtype.element_ty), mask=mask)


@triton.jit
def store_sum(x, r, h_ptrs, mask, EVEN: tl.constexpr):
    """The fused residual add: h = x + r summed in fp32 and stored in h's dtype (no predicate
    under EVEN); returns the stored h in fp32, the values the norm then normalizes."""
    h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptrs.dtype.element_ty)
    store_cast(h_ptrs, h, mask, EVEN)
    return h.to(tl.float32)
