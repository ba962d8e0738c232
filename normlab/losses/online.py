"""The @triton.jit helpers the loss kernels share: online statistics, frames, tiles, gradients.

Per row r of ``logits`` x and ``target_logits`` t (shape (..., V), flattened to (M, V)), with
p = softmax(x) and q = softmax(t), all math in fp32:

====================  ============================================  ============================
loss                  L_r                                           dL_r / dx
====================  ============================================  ============================
reverse_kl            KL(p || q) = sum_j p_j (log p_j - log q_j)    p * ((log p - log q) - L_r)
soft_cross_entropy    -sum_j q_j log p_j                            p - q
cross_entropy         logsumexp(x) - x[label_r]                     p - onehot(label_r)
====================  ============================================  ============================

Terms with p_j = 0 (reverse KL) or q_j = 0 (soft CE) count 0, so -inf logits (a masked vocab)
are allowed; NaN or +inf anywhere in a row makes that row's loss and every entry of its
gradient NaN (as torch's autograd). Masked lanes load as -inf, never 0, so they cannot move a
max or a log-sum-exp.

A row's statistics are built tile by tile (``row_statistics`` over ``online_tile``, lanes
folded by ``fold_stats``); ``grad_pass`` writes a row's (or chunk's) gradient from them. Rows
that do not start on a 16-byte boundary (V = 50257) are indexed from the frame boundary before
them (``row_frames``), so whole tiles stay vector loads; their edge tiles load whole vectors
(``load_edge_tile``) and store exactly their own columns (``store_edge_grad``).
"""

from __future__ import annotations

import triton
import triton.language as tl

from normlab import _runtime

NEG_INF: tl.constexpr = tl.constexpr(float("-inf"))
# Loss kinds, the kernels' KIND constexpr (config.KINDS on the host).
RKL: tl.constexpr = tl.constexpr(0)
SCE: tl.constexpr = tl.constexpr(1)
CE: tl.constexpr = tl.constexpr(2)
# A tile's two maxima (x's and t's) in one two-operand tl.reduce: one cross-warp exchange on a
# GPU. The interpreter runs a custom combine element by element in Python (seconds per tile of
# a wide row), so it takes two plain tl.max there; a max is exact, so both give the same bits.
# tests/test_entropy.py runs the paired path too.
PAIRED_MAXIMA: tl.constexpr = tl.constexpr(not _runtime.INTERPRET)


@triton.jit
def safe_max(m):
    """A running max usable as a shift: 0 while the row has seen only -inf (avoids inf - inf)."""
    return tl.where(m == NEG_INF, 0.0, m)


@triton.jit
def max_pair(a0, b0, a1, b1):
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, d_x, d_t, KIND: tl.constexpr):
    """acc (see online_tile) moved to a new max frame: d_x = new - old x shift (d_t: target's),
    alpha_* = exp(old - new) the matching sum rescales. Soft CE and reverse KL only."""
    if KIND == RKL:
        acc = alpha_x * (acc + (d_t - d_x) * s_x)
    else:
        acc = alpha_t * (acc - d_x * s_t)
    return acc


@triton.jit
def tile_cols(BLOCK: tl.constexpr, LANE: tl.constexpr):
    """Column offsets of a tile as a (BLOCK // LANE, LANE) grid: each grid row is one lane of
    the running statistics (see online_tile; config.entropy_lane)."""
    return tl.arange(0, BLOCK // LANE)[:, None] * LANE + tl.arange(0, LANE)[None, :]


@triton.jit
def online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND: tl.constexpr):
    """Fold one fp32 tile (a tile_cols grid, -inf on masked lanes) into running statistics kept
    per lane (per grid row: vectors of BLOCK // LANE). Lanes of a few columns reduce within a
    thread, so a tile costs no cross-warp round trip; fold_stats folds the lanes once a row.

    s_x = sum exp(x - safe(m_x)); s_t likewise. acc, in the same shifted frame:
      reverse KL  sum e_x ((x - m_x) - (t - m_t))   ->  L = acc / s_x - log s_x + log s_t
      soft CE     sum e_t (x - m_x)                 ->  L = log s_x - acc / s_t
    Both tile maxima come from one two-operand reduction (PAIRED_MAXIMA; two tl.max under the
    interpreter). The three sums stay separate tl.sum calls: the Triton interpreter folds a
    multi-operand reduction sequentially in fp32, which the CPU tests can tell apart.
    """
    # The rescale factors use the raw old max: exp(-inf - new) = 0 while nothing was summed yet
    # (the safe 0 would give exp(0 - new) = inf for a row whose logits all sit below -88).
    raw_x = m_x
    old_x = safe_max(m_x)
    if KIND == CE:
        m_x = tl.maximum(m_x, tl.max(x, axis=1))
        new_x = safe_max(m_x)
        e_x = tl.exp(x - new_x[:, None])
        s_x = s_x * tl.exp(raw_x - new_x) + tl.sum(e_x, axis=1)
    else:
        raw_t = m_t
        old_t = safe_max(m_t)
        if PAIRED_MAXIMA:
            tile_max_x, tile_max_t = tl.reduce((x, t), 1, max_pair)
        else:
            tile_max_x = tl.max(x, axis=1)
            tile_max_t = tl.max(t, axis=1)
        m_x = tl.maximum(m_x, tile_max_x)
        m_t = tl.maximum(m_t, tile_max_t)
        new_x = safe_max(m_x)
        new_t = safe_max(m_t)
        alpha_x = tl.exp(raw_x - new_x)
        alpha_t = tl.exp(raw_t - new_t)
        xs = x - new_x[:, None]
        ts = t - new_t[:, None]
        e_x = tl.exp(xs)
        e_t = tl.exp(ts)
        # p_j = 0 terms are skipped (x = -inf would give 0 * inf).
        if KIND == RKL:
            term = tl.where(e_x > 0, e_x * (xs - ts), 0.0)
        else:
            term = tl.where(e_t > 0, e_t * xs, 0.0)
        tile_s_x = tl.sum(e_x, axis=1)
        tile_s_t = tl.sum(e_t, axis=1)
        tile_acc = tl.sum(term, axis=1)
        acc = reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, new_x - old_x, new_t - old_t,
                           KIND) + tile_acc  # fmt: skip
        s_x = s_x * alpha_x + tile_s_x
        s_t = s_t * alpha_t + tile_s_t
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def row_frames(row, x_row_stride, t_row_stride, grad_row_stride, ALIGN: tl.constexpr,
                FRAME: tl.constexpr):  # fmt: skip
    """(x, t, grad offsets, lead) of a row's frame: the columns the kernels index.

    ALIGN == 1: the row itself (lead 0). ALIGN > 1 (ALIGN columns per 16 bytes, for rows that do
    not start on a 16-byte boundary, e.g. V = 50257; the host checked that the three strides are
    equal): the frame starts at the FRAME-column boundary at or before the row (FRAME a multiple
    of ALIGN; the host checked that the tensors start on one), lead columns early, so every whole
    tile is one aligned vector load per thread. Triton cannot prove row * stride aligned there
    and falls back to 2-byte loads. See config.ENTROPY_FRAME_BYTES for FRAME > ALIGN.
    """
    x_off = row * x_row_stride
    t_off = row * t_row_stride
    grad_off = row * grad_row_stride
    lead = 0
    if ALIGN > 1:
        lead = x_off % FRAME
        x_off = tl.multiple_of(x_off - lead, ALIGN)
        t_off = x_off
        grad_off = x_off
    return x_off, t_off, grad_off, lead


@triton.jit
def tile_span(lo, hi, BLOCK: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr):
    """(n_full, first) of the columns [lo, hi) of a frame: n_full tiles come before the last
    (maybe partial) one; first = 1 when the first of them holds lanes before lo (ALIGN > 1).

    An empty chunk (-ALIGN < hi <= 0, see _entropy_chunked_kernel) gets n_full 0 on a GPU
    (division truncates) and -1 in the interpreter (floors), or 0 with CLAMP_HI: either way its
    only tile is masked out. CLAMP_HI changes no value the kernels pass, only triton 3.6's code:
    with it the fused label CE ran 196.7 against 202.4 us at V = 32768, without it the chunked
    4096 tile 756.2 against 812.5 at 131072 (dev/sweep_launch_configs_h200.json, "8cebc9b+ab").
    """
    if CLAMP_HI:
        hi = tl.maximum(hi, 1)
    n_full = (hi - 1) // BLOCK
    first = 0
    if ALIGN > 1:
        first = ((lo > 0) & (n_full > 0)).to(tl.int32)
    return n_full, first


@triton.jit
def row_statistics(x_row, t_row, lo, hi, KIND: tl.constexpr, BLOCK: tl.constexpr,
                    LANE: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr):  # fmt: skip
    """Online statistics of the columns [lo, hi) of a frame (lo < FRAME, 0 when ALIGN == 1):
    whole tiles unmasked in a loop, then the last tile (masked unless whole: see grad_pass);
    with lo > 0 the first tile is masked too.

    Returns the raw statistics (lanes folded), the last tile (fp32) so a gradient pass can reuse
    it, the number of tiles before it and whether the first one was peeled. Loads are marked
    evict_last so the row stays in L2 for the fused kernel's gradient pass, whose own loads and
    stores are evict_first (H200, reverse KL 4096 x 32768: 321 us against 343 us without the
    hints; benchmarks/data/dev/sweep_launch_configs_h200.json, "entropy").
    """
    cols = tile_cols(BLOCK, LANE)
    m_x = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
    s_x = tl.zeros([BLOCK // LANE], tl.float32)
    m_t = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
    s_t = tl.zeros([BLOCK // LANE], tl.float32)
    acc = tl.zeros([BLOCK // LANE], tl.float32)
    n_full, first = tile_span(lo, hi, BLOCK, ALIGN, CLAMP_HI)
    if ALIGN > 1:  # a constexpr branch: compiled only for the aligned frames
        if first > 0:
            x, t = load_edge_tile(x_row, t_row, cols, lo, hi, KIND, "evict_last", ALIGN)
            m_x, s_x, m_t, s_t, acc = online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND)
    for i in range(first, n_full):
        x = tl.load(x_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
        m_x, s_x, m_t, s_t, acc = online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND)
    if ALIGN > 1:
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):  # whole (an inner chunk's)
            x_last = tl.load(x_row + n_full * BLOCK + cols,
                             eviction_policy="evict_last").to(tl.float32)  # fmt: skip
            if KIND == CE:
                t_last = x_last
            else:
                t_last = tl.load(t_row + n_full * BLOCK + cols,
                                 eviction_policy="evict_last").to(tl.float32)  # fmt: skip
        else:
            x_last, t_last = load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, KIND,
                                             "evict_last", ALIGN)  # fmt: skip
    else:
        x_last, t_last = load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, KIND,
                                         "evict_last", ALIGN)  # fmt: skip
    m_x, s_x, m_t, s_t, acc = online_tile(x_last, t_last, m_x, s_x, m_t, s_t, acc, KIND)
    m_x, s_x, m_t, s_t, acc = fold_stats(m_x, s_x, m_t, s_t, acc,
                                          tl.full([BLOCK // LANE], 1, tl.int1), KIND)  # fmt: skip
    return m_x, s_x, m_t, s_t, acc, x_last, t_last, n_full, first


@triton.jit
def load_edge_tile(x_row, t_row, offs, lo, hi, KIND: tl.constexpr, EVICTION: tl.constexpr,
                    ALIGN: tl.constexpr):  # fmt: skip
    """Columns offs of a frame as fp32, -inf outside [lo, hi) (the first or last tile).

    ALIGN > 1: loaded in whole 16-byte vectors, the outside lanes dropped in registers; an exact
    mask would split every vector into 2-byte loads. A vector loaded here holds one of the row's
    own columns, so it lies in the same 16-byte granule as an element of the tensor: inside the
    allocation (the host checked the data pointer is 16-byte aligned; CUDA allocations are whole
    512-byte blocks).
    """
    if ALIGN > 1:
        keep = (offs >= lo) & (offs < hi)
        hi_vec = tl.multiple_of(tl.cdiv(tl.maximum(hi, 0), ALIGN) * ALIGN, ALIGN)
        in_vec = (offs >= 0) & (offs < hi_vec)
        x = tl.load(x_row + offs, mask=in_vec, other=NEG_INF, eviction_policy=EVICTION)
        x = tl.where(keep, x.to(tl.float32), NEG_INF)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + offs, mask=in_vec, other=NEG_INF, eviction_policy=EVICTION)
            t = tl.where(keep, t.to(tl.float32), NEG_INF)
    else:
        keep = offs < hi
        x = tl.load(x_row + offs, mask=keep, other=NEG_INF, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + offs, mask=keep, other=NEG_INF, eviction_policy=EVICTION)
            t = t.to(tl.float32)
    return x, t


@triton.jit
def finish_loss(m_x, s_x, s_t, acc, x_label, KIND: tl.constexpr):
    """Row loss from the statistics (see online_tile for acc; x_label only for label CE)."""
    if KIND == RKL:
        loss = acc / s_x - tl.log(s_x) + tl.log(s_t)
    elif KIND == SCE:
        loss = tl.log(s_x) - acc / s_t
    else:
        loss = (safe_max(m_x) - x_label) + tl.log(s_x)
    return loss


@triton.jit
def tile_grad(
    x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND: tl.constexpr
):
    """Gradient of one tile, times scale, in the max-shifted frame of the row statistics.

    log p - log q - KL = (x - shift_x) - (t - shift_t) - acc / s_x: no O(|logit|) terms cancel,
    so the result stays exact to fp32 even at |logits| ~ 1e4 (lse + KL would lose ~1e-3).
    """
    xs = x - shift_x
    p = tl.exp(xs - log_s_x)
    if KIND == RKL:
        g = tl.where(p > 0, p * ((xs - (t - shift_t)) - kl_shift), 0.0)
    elif KIND == SCE:
        g = p - tl.exp((t - shift_t) - log_s_t)
    else:
        g = p - tl.where(cols == label, 1.0, 0.0)
    return g * scale


@triton.jit
def nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift):
    """Reverse KL: a NaN gradient scale for a row whose loss is NaN (NaN or +inf in logits or
    target, or no finite logit). tile_grad's p > 0 test would zero such a row's entries; torch's
    autograd gives NaN for all of them. Once per row, from the final statistics."""
    loss = kl_shift - log_s_x + log_s_t  # as finish_loss and sharded.combine_partials
    return tl.where(loss != loss, float("nan"), scale)  # a NaN test


@triton.jit
def store_grad(grad_ptrs, g, mask, ACCUMULATE: tl.constexpr, EVICTION: tl.constexpr):
    if ACCUMULATE:  # masked lanes (mask may be None: a whole tile) are not stored
        g += tl.load(grad_ptrs, mask=mask).to(tl.float32)
    tl.store(grad_ptrs, g.to(grad_ptrs.dtype.element_ty), mask=mask, eviction_policy=EVICTION)


@triton.jit
def store_edge_grad(x_row, t_row, grad_row, offs, g, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                     kl_shift, label, scale, KIND: tl.constexpr, ACCUMULATE: tl.constexpr,
                     ALIGN: tl.constexpr):  # fmt: skip
    """Store the gradient g of an edge tile (columns offs of a frame) to exactly its columns in
    [lo, hi): whole 16-byte vectors from g with one vector store each, the partial vector at
    either end recomputed on ALIGN lanes. (An exact mask over the tile would split every store
    into 2-byte stores: measured 735.7 against 534.0 us for reverse KL fused4096 at V = 50257 vs
    50256.)"""
    lo_vec = tl.multiple_of(tl.cdiv(lo, ALIGN) * ALIGN, ALIGN)  # first whole vector
    hi_vec = tl.multiple_of(tl.maximum(hi, 0) // ALIGN * ALIGN, ALIGN)  # end of the last one
    store_grad(grad_row + offs, g, (offs >= lo_vec) & (offs < hi_vec), ACCUMULATE, "evict_first")
    store_lanes(x_row, t_row, grad_row, lo_vec - ALIGN, lo, tl.minimum(hi, lo_vec), shift_x,
                shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND,
                ACCUMULATE, ALIGN)  # fmt: skip
    store_lanes(x_row, t_row, grad_row, hi_vec, tl.maximum(lo_vec, hi_vec), hi, shift_x, shift_t,
                 log_s_x, log_s_t, kl_shift, label, scale, KIND, ACCUMULATE, ALIGN)  # fmt: skip


@triton.jit
def store_lanes(x_row, t_row, grad_row, start, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                 kl_shift, label, scale, KIND: tl.constexpr, ACCUMULATE: tl.constexpr,
                 ALIGN: tl.constexpr):  # fmt: skip
    """Gradient of the columns [lo, hi) of the ALIGN columns from start (one partial vector)."""
    cols = start + tl.arange(0, ALIGN)
    mask = (cols >= lo) & (cols < hi)
    x = tl.load(x_row + cols, mask=mask, other=NEG_INF).to(tl.float32)
    t = x if KIND == CE else tl.load(t_row + cols, mask=mask, other=NEG_INF).to(tl.float32)
    g = tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND)
    store_grad(grad_row + cols, g, mask, ACCUMULATE, "evict_first")


@triton.jit
def fill_zero(ptr, lo, hi, BLOCK: tl.constexpr):
    """Store zeros of ptr's dtype to columns [lo, hi) (the gradient of an ignored label CE row)."""
    zeros = tl.zeros([BLOCK], tl.float32).to(ptr.dtype.element_ty)
    for i in range(tl.cdiv(tl.maximum(hi, 0), BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs, zeros, mask=(offs >= lo) & (offs < hi))


@triton.jit
def load_label(labels_ptr, row, ignore_index, vocab_start, vocab_size):
    """(local label, ignored, bad) for label CE: bad = not ignored and outside [0, vocab_size)."""
    label = tl.load(labels_ptr + row).to(tl.int64)
    ignored = label == ignore_index
    bad = (label != ignore_index) & ((label < 0) | (label >= vocab_size))
    return label - vocab_start, ignored, bad


@triton.jit
def store_raw_stats(ptr, slot, n_slots, m_x, s_x, m_t, s_t, acc):
    """Raw statistics (see online_tile) into column ``slot`` of a (5, n_slots) fp32 buffer."""
    tl.store(ptr + slot, m_x)
    tl.store(ptr + n_slots + slot, s_x)
    tl.store(ptr + 2 * n_slots + slot, m_t)
    tl.store(ptr + 3 * n_slots + slot, s_t)
    tl.store(ptr + 4 * n_slots + slot, acc)


@triton.jit
def fold_stats(m_xk, s_xk, m_tk, s_tk, acc_k, keep, KIND: tl.constexpr):
    """Fold raw statistics k (vectors: a tile's lanes or a row's chunks; see online_tile for the
    frames) into one set; k that saw only -inf weighs exactly 0, k outside ``keep`` nothing.
    Label CE reads only m_xk and s_xk (and returns m_t = m_x, s_t = s_x, acc = 0)."""
    m_x = tl.max(m_xk, axis=0)
    new_x = safe_max(m_x)
    alpha_x = tl.exp(m_xk - new_x)
    s_x = tl.sum(s_xk * alpha_x, axis=0)
    if KIND == CE:
        m_t = m_x
        s_t = s_x
        acc = tl.zeros([], tl.float32)
    else:
        m_t = tl.max(m_tk, axis=0)
        new_t = safe_max(m_t)
        alpha_t = tl.exp(m_tk - new_t)
        s_t = tl.sum(s_tk * alpha_t, axis=0)
        acc_k = reframe_acc(acc_k, s_xk, s_tk, alpha_x, alpha_t, new_x - safe_max(m_xk),
                             new_t - safe_max(m_tk), KIND)  # fmt: skip
        acc = tl.sum(tl.where(keep, acc_k, 0.0), axis=0)
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def grad_pass(
    x_row,  # frame of the row or chunk (see row_frames)
    t_row,
    grad_row,
    lo,  # the columns [lo, hi) of the frame are the row's
    hi,
    x_last,  # fp32 last tile, still in registers
    t_last,
    n_full,  # tiles before the last one
    first,  # 1 when the first of them starts before lo (peeled by row_statistics)
    m_x,  # raw row statistics (see online_tile)
    s_x,
    m_t,
    s_t,
    acc,
    label,  # label CE: column of the label in the frame
    bad,  # label CE: the label is out of range (the gradient becomes NaN)
    grad_scale,  # host scale of the reduction (1/n for "mean" over rows)
    n_valid_ptr,  # (1,) fp32 non-ignored row count (MEAN_OVER_VALID only)
    KIND: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,
    ALIGN: tl.constexpr,
):
    """Write the gradient of the columns [lo, hi) from the row statistics, in reverse tile order:
    the last tile is still in registers, its neighbour likely in L2. Whole tiles store unmasked
    (vectorized); edge tiles store exactly their own columns."""
    shift_x = safe_max(m_x)
    shift_t = safe_max(m_t)
    log_s_x = tl.log(s_x)
    log_s_t = tl.log(s_t)
    kl_shift = acc / s_x
    scale = tl.cast(grad_scale, tl.float32)
    if MEAN_OVER_VALID:
        scale = scale / tl.load(n_valid_ptr)
    if KIND == CE:
        scale = tl.where(bad, float("nan"), scale)
    if KIND == RKL:
        scale = nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift)
    cols = tile_cols(BLOCK, LANE)
    last_cols = n_full * BLOCK + cols
    g = tile_grad(x_last, t_last, last_cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift,
                   label, scale, KIND)  # fmt: skip
    if ALIGN > 1:
        # An inner chunk's last tile is whole (a row's almost never): stored unmasked. The
        # statistics pass loaded it unmasked too. (Measured with the code as it stands: moving
        # these loads into a helper changed the compiled kernels by -4% to +5%; config.)
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):
            store_grad(grad_row + last_cols, g, None, ACCUMULATE, "evict_first")
        else:
            store_edge_grad(x_row, t_row, grad_row, last_cols, g, tl.maximum(lo, n_full * BLOCK),
                             hi, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND,
                             ACCUMULATE, ALIGN)  # fmt: skip
    else:
        store_grad(grad_row + last_cols, g, last_cols < hi, ACCUMULATE, "evict_first")
    for j in range(n_full - first):
        offs = (n_full - 1 - j) * BLOCK + cols
        x = tl.load(x_row + offs, eviction_policy="evict_first").to(tl.float32)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + offs, eviction_policy="evict_first").to(tl.float32)
        g = tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                       KIND)  # fmt: skip
        store_grad(grad_row + offs, g, None, ACCUMULATE, "evict_first")  # unmasked: vectorized
    if ALIGN > 1:  # a constexpr branch, as the kernels were measured
        if first > 0:  # the peeled first tile: lanes before lo are the previous row's
            x, t = load_edge_tile(x_row, t_row, cols, lo, hi, KIND, "evict_first", ALIGN)
            g = tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           KIND)  # fmt: skip
            store_edge_grad(x_row, t_row, grad_row, cols, g, lo, BLOCK, shift_x, shift_t,
                             log_s_x, log_s_t, kl_shift, label, scale, KIND, ACCUMULATE,
                             ALIGN)  # fmt: skip
