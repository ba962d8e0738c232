"""Reverse KL, soft-target and label cross-entropy over a vocabulary, in two kernel forms.

Per row r of ``logits`` x and ``target_logits`` t (shape (..., V), flattened to (M, V)), with
p = softmax(x) and q = softmax(t), all math in fp32:

====================  =====================================  ==================================
loss                  L_r                                    dL_r / dx
====================  =====================================  ==================================
reverse_kl            KL(p || q) = sum_j p_j (log p_j - log q_j)   p * ((log p - log q) - L_r)
soft_cross_entropy    -sum_j q_j log p_j                      p - q
cross_entropy         logsumexp(x) - x[label_r]               p - onehot(label_r)
====================  =====================================  ==================================

Terms with p_j = 0 (reverse KL) or q_j = 0 (soft CE) count 0, so -inf logits (a masked vocab)
are allowed; NaN or +inf anywhere in a row makes that row's loss and every entry of its
gradient NaN (as torch's autograd).

Forms (seed 004):

* ``"fused"``: ``_{loss}_fused_kernel``, one program per row: an online max / sum-exp pass over
  column tiles of ``min(next_pow2(V), block_cap)``, then the gradient pass in reverse tile order
  (the last tile is reused from registers). The gradient (times the reduction's 1/n) is written
  during the forward and saved; the backward only rescales it by ``grad_output``, in place in
  an eager backward that frees the graph (``_entropy_grad_rescale_kernel``, which exits on the
  device when grad_output == 1), out of place with retain_graph=True or in a compiled backward.
* ``"chunked"``: ``_entropy_chunked_kernel``, a row cut into chunks of whole tiles, one program
  per chunk. Each program folds its chunk into raw statistics and stores them; the row's
  programs meet at a per-row counter (in-kernel, on a GPU), merge the chunk statistics and
  write their chunk's gradient, so the re-read of a chunk is a short L2 round trip and not the
  whole row's. The gradient is saved and rescaled as in the fused form.
* ``"split"``: ``_entropy_stats_kernel`` stores per-row statistics to memory, then
  ``_entropy_backward_kernel`` (run by autograd's backward) reloads them; each has its own tile.
  This is also the tensor-parallel path: between the two, the raw per-row statistics
  (max, sum-exp of both distributions, and the loss accumulator) are all-reduced.

Masked lanes are loaded as -inf, never 0, so they cannot move a max or a log-sum-exp. All three
forms index rows that do not start on a 16-byte boundary (a ragged V such as 50257) from the
128-byte boundary before them (``_row_frames``), so their tiles stay 16-byte vector loads and
stores.

The unsharded losses are custom ops (``normlab::entropy_fwd``, ``normlab::entropy_split_bwd``,
autograd registered), so torch.compile sees them as opaque calls; the sharded one
(``ShardedEntropyLoss``) is an autograd Function (a process group is no custom-op argument).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from normlab import _runtime
from normlab.losses import config as configs
from normlab._host import FLOAT_DTYPES

_NEG_INF: tl.constexpr = tl.constexpr(float("-inf"))
# Loss kinds (a constexpr of the shared kernels).
_RKL: tl.constexpr = tl.constexpr(0)
_SCE: tl.constexpr = tl.constexpr(1)
_CE: tl.constexpr = tl.constexpr(2)
_KINDS = {"reverse_kl": 0, "soft_cross_entropy": 1, "cross_entropy": 2}
_REDUCTIONS = ("mean", "sum", "none")
FORMS = ("auto", "fused", "chunked", "split")
_GRAD_IN_FORWARD = ("fused", "chunked")  # forms whose forward writes the gradient


# ============================================================================================
# @triton.jit helpers
# ============================================================================================


@triton.jit
def _safe_max(m):
    """A running max usable as a shift: 0 while the row has seen only -inf (avoids inf - inf)."""
    return tl.where(m == _NEG_INF, 0.0, m)


@triton.jit
def _max_pair(a0, b0, a1, b1):
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def _reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, d_x, d_t, KIND: tl.constexpr):
    """acc (see _online_tile) moved to a new max frame: d_x = new - old x shift (d_t: target's),
    alpha_* = exp(old - new) the matching sum rescales. Soft CE and reverse KL only."""
    if KIND == _RKL:
        acc = alpha_x * (acc + (d_t - d_x) * s_x)
    else:
        acc = alpha_t * (acc - d_x * s_t)
    return acc


@triton.jit
def _tile_cols(BLOCK: tl.constexpr, LANE: tl.constexpr):
    """Column offsets of a tile as a (BLOCK // LANE, LANE) grid: each grid row is one lane of
    the running statistics (see _online_tile; configs.entropy_lane)."""
    return tl.arange(0, BLOCK // LANE)[:, None] * LANE + tl.arange(0, LANE)[None, :]


@triton.jit
def _online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND: tl.constexpr):
    """Fold one fp32 tile (a _tile_cols grid, -inf on masked lanes) into running statistics kept
    per lane (per grid row: vectors of BLOCK // LANE). Lanes of a few columns reduce within a
    thread, so a tile costs no cross-warp round trip; _fold_stats folds the lanes once a row.

    s_x = sum exp(x - safe(m_x)); s_t likewise. acc, in the same shifted frame:
      reverse KL  sum e_x ((x - m_x) - (t - m_t))   ->  L = acc / s_x - log s_x + log s_t
      soft CE     sum e_t (x - m_x)                 ->  L = log s_x - acc / s_t
    Both tile maxima come from one two-operand reduction. The three sums stay separate tl.sum
    calls: the Triton interpreter folds a multi-operand reduction sequentially in fp32, which the
    CPU tests can tell apart.
    """
    # The rescale factors use the raw old max: exp(-inf - new) = 0 while nothing was summed yet
    # (the safe 0 would give exp(0 - new) = inf for a row whose logits all sit below -88).
    raw_x = m_x
    old_x = _safe_max(m_x)
    if KIND == _CE:
        m_x = tl.maximum(m_x, tl.max(x, axis=1))
        new_x = _safe_max(m_x)
        e_x = tl.exp(x - new_x[:, None])
        s_x = s_x * tl.exp(raw_x - new_x) + tl.sum(e_x, axis=1)
    else:
        raw_t = m_t
        old_t = _safe_max(m_t)
        tile_max_x, tile_max_t = tl.reduce((x, t), 1, _max_pair)
        m_x = tl.maximum(m_x, tile_max_x)
        m_t = tl.maximum(m_t, tile_max_t)
        new_x = _safe_max(m_x)
        new_t = _safe_max(m_t)
        alpha_x = tl.exp(raw_x - new_x)
        alpha_t = tl.exp(raw_t - new_t)
        xs = x - new_x[:, None]
        ts = t - new_t[:, None]
        e_x = tl.exp(xs)
        e_t = tl.exp(ts)
        # p_j = 0 terms are skipped (x = -inf would give 0 * inf).
        if KIND == _RKL:
            term = tl.where(e_x > 0, e_x * (xs - ts), 0.0)
        else:
            term = tl.where(e_t > 0, e_t * xs, 0.0)
        tile_s_x = tl.sum(e_x, axis=1)
        tile_s_t = tl.sum(e_t, axis=1)
        tile_acc = tl.sum(term, axis=1)
        acc = _reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, new_x - old_x, new_t - old_t,
                           KIND) + tile_acc  # fmt: skip
        s_x = s_x * alpha_x + tile_s_x
        s_t = s_t * alpha_t + tile_s_t
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def _row_frames(row, x_row_stride, t_row_stride, grad_row_stride, ALIGN: tl.constexpr,
                FRAME: tl.constexpr):  # fmt: skip
    """(x, t, grad offsets, lead) of a row's frame: the columns the kernels index.

    ALIGN == 1: the row itself (lead 0). ALIGN > 1 (ALIGN columns per 16 bytes, for rows that do
    not start on a 16-byte boundary, e.g. V = 50257; the host checked that the three strides are
    equal): the frame starts at the FRAME-column boundary at or before the row (FRAME a multiple
    of ALIGN; the host checked that the tensors start on one), lead columns early, so every whole
    tile is one aligned vector load per thread. Triton cannot prove row * stride aligned there
    and falls back to 2-byte loads. See configs.ENTROPY_FRAME_BYTES for FRAME > ALIGN.
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
def _tile_span(lo, hi, BLOCK: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr):
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
def _row_statistics(x_row, t_row, lo, hi, KIND: tl.constexpr, BLOCK: tl.constexpr,
                    LANE: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr):  # fmt: skip
    """Online statistics of the columns [lo, hi) of a frame (lo < FRAME, 0 when ALIGN == 1):
    whole tiles unmasked in a loop, then the last tile (masked unless whole: see _grad_pass);
    with lo > 0 the first tile is masked too.

    Returns the raw statistics (lanes folded), the last tile (fp32) so a gradient pass can reuse
    it, the number of tiles before it and whether the first one was peeled. Loads are marked
    evict_last so the row stays in L2 for the fused kernel's gradient pass, whose own loads and
    stores are evict_first (H200, reverse KL 4096 x 32768: 321 us against 343 us without the
    hints; benchmarks/data/dev/sweep_launch_configs_h200.json, "entropy").
    """
    cols = _tile_cols(BLOCK, LANE)
    m_x = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
    s_x = tl.zeros([BLOCK // LANE], tl.float32)
    m_t = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
    s_t = tl.zeros([BLOCK // LANE], tl.float32)
    acc = tl.zeros([BLOCK // LANE], tl.float32)
    n_full, first = _tile_span(lo, hi, BLOCK, ALIGN, CLAMP_HI)
    if ALIGN > 1:  # compiled only for the aligned frames
        if first > 0:
            x, t = _load_edge_tile(x_row, t_row, cols, lo, hi, KIND, "evict_last", ALIGN)
            m_x, s_x, m_t, s_t, acc = _online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND)
    for i in range(first, n_full):
        x = tl.load(x_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
        if KIND == _CE:
            t = x
        else:
            t = tl.load(t_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
        m_x, s_x, m_t, s_t, acc = _online_tile(x, t, m_x, s_x, m_t, s_t, acc, KIND)
    if ALIGN > 1:
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):  # whole (an inner chunk's)
            x_last = tl.load(x_row + n_full * BLOCK + cols,
                             eviction_policy="evict_last").to(tl.float32)  # fmt: skip
            if KIND == _CE:
                t_last = x_last
            else:
                t_last = tl.load(t_row + n_full * BLOCK + cols,
                                 eviction_policy="evict_last").to(tl.float32)  # fmt: skip
        else:
            x_last, t_last = _load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, KIND,
                                             "evict_last", ALIGN)  # fmt: skip
    else:
        x_last, t_last = _load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, KIND,
                                         "evict_last", ALIGN)  # fmt: skip
    m_x, s_x, m_t, s_t, acc = _online_tile(x_last, t_last, m_x, s_x, m_t, s_t, acc, KIND)
    m_x, s_x, m_t, s_t, acc = _fold_stats(m_x, s_x, m_t, s_t, acc,
                                          tl.full([BLOCK // LANE], 1, tl.int1), KIND)  # fmt: skip
    return m_x, s_x, m_t, s_t, acc, x_last, t_last, n_full, first


@triton.jit
def _load_edge_tile(x_row, t_row, offs, lo, hi, KIND: tl.constexpr, EVICTION: tl.constexpr,
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
        x = tl.load(x_row + offs, mask=in_vec, other=_NEG_INF, eviction_policy=EVICTION)
        x = tl.where(keep, x.to(tl.float32), _NEG_INF)
        if KIND == _CE:
            t = x
        else:
            t = tl.load(t_row + offs, mask=in_vec, other=_NEG_INF, eviction_policy=EVICTION)
            t = tl.where(keep, t.to(tl.float32), _NEG_INF)
    else:
        keep = offs < hi
        x = tl.load(x_row + offs, mask=keep, other=_NEG_INF, eviction_policy=EVICTION)
        x = x.to(tl.float32)
        if KIND == _CE:
            t = x
        else:
            t = tl.load(t_row + offs, mask=keep, other=_NEG_INF, eviction_policy=EVICTION)
            t = t.to(tl.float32)
    return x, t


@triton.jit
def _finish_loss(m_x, s_x, s_t, acc, x_label, KIND: tl.constexpr):
    """Row loss from the statistics (see _online_tile for acc; x_label only for label CE)."""
    if KIND == _RKL:
        loss = acc / s_x - tl.log(s_x) + tl.log(s_t)
    elif KIND == _SCE:
        loss = tl.log(s_x) - acc / s_t
    else:
        loss = (_safe_max(m_x) - x_label) + tl.log(s_x)
    return loss


@triton.jit
def _tile_grad(
    x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND: tl.constexpr
):
    """Gradient of one tile, times scale, in the max-shifted frame of the row statistics.

    log p - log q - KL = (x - shift_x) - (t - shift_t) - acc / s_x: no O(|logit|) terms cancel,
    so the result stays exact to fp32 even at |logits| ~ 1e4 (lse + KL would lose ~1e-3).
    """
    xs = x - shift_x
    p = tl.exp(xs - log_s_x)
    if KIND == _RKL:
        g = tl.where(p > 0, p * ((xs - (t - shift_t)) - kl_shift), 0.0)
    elif KIND == _SCE:
        g = p - tl.exp((t - shift_t) - log_s_t)
    else:
        g = p - tl.where(cols == label, 1.0, 0.0)
    return g * scale


@triton.jit
def _nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift):
    """Reverse KL: a NaN gradient scale for a row whose loss is NaN (NaN or +inf in logits or
    target, or no finite logit). _tile_grad's p > 0 test would zero such a row's entries; torch's
    autograd gives NaN for all of them. Once per row, from the final statistics."""
    loss = kl_shift - log_s_x + log_s_t  # as _finish_loss and _combine_partials
    return tl.where(loss != loss, float("nan"), scale)


@triton.jit
def _store_grad(grad_ptrs, g, mask, ACCUMULATE: tl.constexpr, EVICTION: tl.constexpr):
    if ACCUMULATE:  # masked lanes (mask may be None: a whole tile) are not stored
        g += tl.load(grad_ptrs, mask=mask).to(tl.float32)
    tl.store(grad_ptrs, g.to(grad_ptrs.dtype.element_ty), mask=mask, eviction_policy=EVICTION)


@triton.jit
def _store_edge_grad(x_row, t_row, grad_row, offs, g, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                     kl_shift, label, scale, KIND: tl.constexpr, ACCUMULATE: tl.constexpr,
                     ALIGN: tl.constexpr):  # fmt: skip
    """Store the gradient g of an edge tile (columns offs of a frame) to exactly its columns in
    [lo, hi): whole 16-byte vectors from g with one vector store each, the partial vector at
    either end recomputed on ALIGN lanes. (An exact mask over the tile would split every store
    into 2-byte stores: measured 735.7 against 534.0 us for reverse KL fused4096 at V = 50257 vs
    50256.)"""
    lo_vec = tl.multiple_of(tl.cdiv(lo, ALIGN) * ALIGN, ALIGN)  # first whole vector
    hi_vec = tl.multiple_of(tl.maximum(hi, 0) // ALIGN * ALIGN, ALIGN)  # end of the last one
    _store_grad(grad_row + offs, g, (offs >= lo_vec) & (offs < hi_vec), ACCUMULATE, "evict_first")
    _store_lanes(x_row, t_row, grad_row, lo_vec - ALIGN, lo, tl.minimum(hi, lo_vec), shift_x,
                 shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND, ACCUMULATE, ALIGN)  # fmt: skip
    _store_lanes(x_row, t_row, grad_row, hi_vec, tl.maximum(lo_vec, hi_vec), hi, shift_x, shift_t,
                 log_s_x, log_s_t, kl_shift, label, scale, KIND, ACCUMULATE, ALIGN)  # fmt: skip


@triton.jit
def _store_lanes(x_row, t_row, grad_row, start, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                 kl_shift, label, scale, KIND: tl.constexpr, ACCUMULATE: tl.constexpr,
                 ALIGN: tl.constexpr):  # fmt: skip
    """Gradient of the columns [lo, hi) of the ALIGN columns from start (one partial vector)."""
    cols = start + tl.arange(0, ALIGN)
    mask = (cols >= lo) & (cols < hi)
    x = tl.load(x_row + cols, mask=mask, other=_NEG_INF).to(tl.float32)
    t = x if KIND == _CE else tl.load(t_row + cols, mask=mask, other=_NEG_INF).to(tl.float32)
    g = _tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND)
    _store_grad(grad_row + cols, g, mask, ACCUMULATE, "evict_first")


@triton.jit
def _fill_zero(ptr, lo, hi, BLOCK: tl.constexpr):
    """Store zeros of ptr's dtype to columns [lo, hi) (the gradient of an ignored label CE row)."""
    zeros = tl.zeros([BLOCK], tl.float32).to(ptr.dtype.element_ty)
    for i in range(tl.cdiv(tl.maximum(hi, 0), BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs, zeros, mask=(offs >= lo) & (offs < hi))


@triton.jit
def _load_label(labels_ptr, row, ignore_index, vocab_start, vocab_size):
    """(local label, ignored, bad) for label CE: bad = not ignored and outside [0, vocab_size)."""
    label = tl.load(labels_ptr + row).to(tl.int64)
    ignored = label == ignore_index
    bad = (label != ignore_index) & ((label < 0) | (label >= vocab_size))
    return label - vocab_start, ignored, bad


@triton.jit
def _fused_row(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits (unused for label CE)
    labels_ptr,  # (n_rows,) int labels (label CE only)
    grad_ptr,  # (n_rows, n_cols) d loss / d logits, written (or added into) here
    loss_ptr,  # (n_rows,) fp32 per-row loss
    n_valid_ptr,  # (1,) fp32 count of non-ignored rows (label CE, reduction="mean" only)
    grad_scale,
    ignore_index,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    KIND: tl.constexpr,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    ALIGN: tl.constexpr,  # see _row_frames; > 1 only when the three row strides are equal
    FRAME: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_off, t_off, grad_off, lead = _row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off
    t_row = t_ptr + t_off
    grad_row = grad_ptr + grad_off
    label = 0
    x_label = 0.0
    bad = False
    if KIND == _CE:
        # Ignored rows already returned in _cross_entropy_fused_kernel.
        label, _ignored, bad = _load_label(labels_ptr, row, ignore_index, 0, n_cols)
        x_label = tl.load(x_row + lead + tl.where(bad, 0, label)).to(tl.float32)
        x_label = tl.where(bad, float("nan"), x_label)
        label = label + lead
    m_x, s_x, m_t, s_t, acc, x_last, t_last, n_full, first = _row_statistics(
        x_row, t_row, lead, lead + n_cols, KIND, BLOCK, LANE, ALIGN, True
    )
    loss = _finish_loss(m_x, s_x, s_t, acc, x_label, KIND)
    tl.store(loss_ptr + row, loss)
    if COMPUTE_GRAD:
        _grad_pass(x_row, t_row, grad_row, lead, lead + n_cols, x_last, t_last, n_full, first,
                   m_x, s_x, m_t, s_t, acc, label, bad, grad_scale, n_valid_ptr, KIND, ACCUMULATE,
                   MEAN_OVER_VALID, BLOCK, LANE, ALIGN)  # fmt: skip


@triton.jit
def _grad_pass(
    x_row,  # frame of the row or chunk (see _row_frames)
    t_row,
    grad_row,
    lo,  # the columns [lo, hi) of the frame are the row's
    hi,
    x_last,  # fp32 last tile, still in registers
    t_last,
    n_full,  # tiles before the last one
    first,  # 1 when the first of them starts before lo (peeled by _row_statistics)
    m_x,  # raw row statistics (see _online_tile)
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
    shift_x = _safe_max(m_x)
    shift_t = _safe_max(m_t)
    log_s_x = tl.log(s_x)
    log_s_t = tl.log(s_t)
    kl_shift = acc / s_x
    scale = tl.cast(grad_scale, tl.float32)
    if MEAN_OVER_VALID:
        scale = scale / tl.load(n_valid_ptr)
    if KIND == _CE:
        scale = tl.where(bad, float("nan"), scale)
    if KIND == _RKL:
        scale = _nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift)
    cols = _tile_cols(BLOCK, LANE)
    last_cols = n_full * BLOCK + cols
    g = _tile_grad(x_last, t_last, last_cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift,
                   label, scale, KIND)  # fmt: skip
    if ALIGN > 1:
        # An inner chunk's last tile is whole (a row's almost never): stored unmasked. The
        # statistics pass loaded it unmasked too. (Measured with the code as it stands: moving
        # these loads into a helper changed the compiled kernels by -4% to +5%; configs.)
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):
            _store_grad(grad_row + last_cols, g, None, ACCUMULATE, "evict_first")
        else:
            _store_edge_grad(x_row, t_row, grad_row, last_cols, g, tl.maximum(lo, n_full * BLOCK),
                             hi, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, KIND,
                             ACCUMULATE, ALIGN)  # fmt: skip
    else:
        _store_grad(grad_row + last_cols, g, last_cols < hi, ACCUMULATE, "evict_first")
    for j in range(n_full - first):
        offs = (n_full - 1 - j) * BLOCK + cols
        x = tl.load(x_row + offs, eviction_policy="evict_first").to(tl.float32)
        if KIND == _CE:
            t = x
        else:
            t = tl.load(t_row + offs, eviction_policy="evict_first").to(tl.float32)
        g = _tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                       KIND)  # fmt: skip
        _store_grad(grad_row + offs, g, None, ACCUMULATE, "evict_first")  # unmasked: vectorized
    if ALIGN > 1:
        if first > 0:  # the peeled first tile: lanes before lo are the previous row's
            x, t = _load_edge_tile(x_row, t_row, cols, lo, hi, KIND, "evict_first", ALIGN)
            g = _tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           KIND)  # fmt: skip
            _store_edge_grad(x_row, t_row, grad_row, cols, g, lo, BLOCK, shift_x, shift_t,
                             log_s_x, log_s_t, kl_shift, label, scale, KIND, ACCUMULATE,
                             ALIGN)  # fmt: skip


# ============================================================================================
# @triton.jit kernels
# ============================================================================================


@triton.jit
def _reverse_kl_fused_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits
    labels_ptr,  # unused
    grad_ptr,  # (n_rows, n_cols) d loss / d logits
    loss_ptr,  # (n_rows,) fp32 per-row KL(p || q)
    n_valid_ptr,  # unused
    grad_scale,
    ignore_index,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Reverse KL loss and gradient of one row in one launch (see module docstring)."""
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride,
               _RKL, COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


@triton.jit
def _soft_cross_entropy_fused_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits
    labels_ptr,  # unused
    grad_ptr,  # (n_rows, n_cols) d loss / d logits
    loss_ptr,  # (n_rows,) fp32 per-row -sum q log p
    n_valid_ptr,  # unused
    grad_scale,
    ignore_index,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Soft-target cross-entropy loss and gradient of one row in one launch."""
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride,
               _SCE, COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


@triton.jit
def _cross_entropy_fused_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # unused
    labels_ptr,  # (n_rows,) int32/int64 labels
    grad_ptr,  # (n_rows, n_cols) d loss / d logits
    loss_ptr,  # (n_rows,) fp32 per-row loss (0 where ignored)
    n_valid_ptr,  # (1,) fp32 non-ignored row count (MEAN_OVER_VALID only)
    grad_scale,
    ignore_index,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Label cross-entropy loss and gradient of one row in one launch."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(labels_ptr + row) == ignore_index:  # loss 0, gradient 0, logits never read
        tl.store(loss_ptr + row, 0.0)
        if COMPUTE_GRAD and not ACCUMULATE:
            _fill_zero(grad_ptr + row * grad_row_stride, 0, n_cols, BLOCK)
        return
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride,
               _CE, COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


@triton.jit
def _store_raw_stats(ptr, slot, n_slots, m_x, s_x, m_t, s_t, acc):
    """Raw statistics (see _online_tile) into column ``slot`` of a (5, n_slots) fp32 buffer."""
    tl.store(ptr + slot, m_x)
    tl.store(ptr + n_slots + slot, s_x)
    tl.store(ptr + 2 * n_slots + slot, m_t)
    tl.store(ptr + 3 * n_slots + slot, s_t)
    tl.store(ptr + 4 * n_slots + slot, acc)


@triton.jit
def _fold_stats(m_xk, s_xk, m_tk, s_tk, acc_k, keep, KIND: tl.constexpr):
    """Fold raw statistics k (vectors: a tile's lanes or a row's chunks; see _online_tile for the
    frames) into one set; k that saw only -inf weighs exactly 0, k outside ``keep`` nothing.
    Label CE reads only m_xk and s_xk (and returns m_t = m_x, s_t = s_x, acc = 0)."""
    m_x = tl.max(m_xk, axis=0)
    new_x = _safe_max(m_x)
    alpha_x = tl.exp(m_xk - new_x)
    s_x = tl.sum(s_xk * alpha_x, axis=0)
    if KIND == _CE:
        m_t = m_x
        s_t = s_x
        acc = tl.zeros([], tl.float32)
    else:
        m_t = tl.max(m_tk, axis=0)
        new_t = _safe_max(m_t)
        alpha_t = tl.exp(m_tk - new_t)
        s_t = tl.sum(s_tk * alpha_t, axis=0)
        acc_k = _reframe_acc(acc_k, s_xk, s_tk, alpha_x, alpha_t, new_x - _safe_max(m_xk),
                             new_t - _safe_max(m_tk), KIND)  # fmt: skip
        acc = tl.sum(tl.where(keep, acc_k, 0.0), axis=0)
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def _merge_chunk_stats(stats_ptr, base, n_slots, n_chunks, KIND: tl.constexpr,
                       CHUNKS_POW2: tl.constexpr):  # fmt: skip
    """Fold the raw statistics of a row's n_chunks column chunks into the row's (_fold_stats).

    stats_ptr: (5, n_slots) fp32 m_x, s_x, m_t, s_t, acc; the row's chunks sit at base + k.
    Loads bypass L1 (.cg): other programs wrote them during this launch.
    """
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < n_chunks
    p = stats_ptr + base + ks
    m_xk = tl.load(p, mask=kmask, other=_NEG_INF, cache_modifier=".cg")
    s_xk = tl.load(p + n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    if KIND == _CE:
        m_tk = m_xk
        s_tk = s_xk
        acc_k = s_xk
    else:
        m_tk = tl.load(p + 2 * n_slots, mask=kmask, other=_NEG_INF, cache_modifier=".cg")
        s_tk = tl.load(p + 3 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
        acc_k = tl.load(p + 4 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    return _fold_stats(m_xk, s_xk, m_tk, s_tk, acc_k, kmask, KIND)


@triton.jit
def _entropy_chunked_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits (unused for label CE)
    labels_ptr,  # (n_rows,) int labels (label CE only)
    grad_ptr,  # (n_rows, n_cols) d loss / d logits, written (or added into) here
    loss_ptr,  # (n_rows,) fp32 per-row loss
    n_valid_ptr,  # (1,) fp32 non-ignored row count (MEAN_OVER_VALID only)
    stats_ptr,  # (5, n_rows * n_chunks) fp32 raw statistics of each (row, chunk)
    sync_ptr,  # (1 + n_rows,) int32 zeros: [0] ticket counter, [1 + r] chunks of row r done
    grad_scale,
    ignore_index,
    n_rows,
    n_cols,
    n_chunks,
    chunk_tiles,  # tiles per chunk; the first n_long chunks take one more, the last may be short
    n_long,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    KIND: tl.constexpr,
    PHASE: tl.constexpr,  # 1: statistics only, 2: gradient only, 3: both, meeting in-kernel
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    CHUNKS_POW2: tl.constexpr,
    ALIGN: tl.constexpr,  # see _row_frames; > 1 only when the three row strides are equal
    FRAME: tl.constexpr,
):
    """Chunked form: n_chunks programs share one row, each owning a chunk of whole tiles.

    Each program folds its chunk into raw statistics and stores them; the row's programs then
    wait for each other at a per-row counter, merge the n_chunks statistics and write the
    gradient of their own chunk. The chunk's last tile is still in registers and the others were
    read moments ago, so the gradient pass re-reads them from L2, where the fused form's
    whole-row re-read goes back to DRAM once the rows in flight overflow L2 (5 passes of
    traffic instead of 3). One tile per chunk would re-read nothing, but every program pays a
    chain of round trips (ticket, loads, publish, wait, merge): measured slower (configs).

    Forward progress (PHASE 3): a program takes its (row, chunk) from a global ticket counter
    when it starts, so the tickets taken are always a prefix of row-major order. Every running
    program waits only on its own row, and only the last row of the prefix can be waiting for
    a program that has not started: at most n_chunks - 1 programs wait on it, so whenever more
    than n_chunks - 1 programs fit on the GPU, one more can start and take the next ticket.
    The Triton interpreter runs one program at a time and would wait forever: it runs PHASE 1
    then PHASE 2 as two launches (program id = ticket), the same arithmetic without the wait.

    Chunks cut the row's frame (see _row_frames): chunk 0 starts lead columns before the row, and
    with ALIGN > 1 n_chunks covers n_cols + FRAME - 1 columns, so a row's last chunk may be empty
    (its statistics are those of no column, which weigh 0 in the merge).
    """
    if PHASE == 3:
        item = tl.atomic_add(sync_ptr, 1)
    else:
        item = tl.program_id(0)
    row = (item // n_chunks).to(tl.int64)
    chunk = item % n_chunks
    start = (chunk * chunk_tiles + tl.minimum(chunk, n_long)) * BLOCK
    chunk_cols = (chunk_tiles + (chunk < n_long).to(tl.int32)) * BLOCK
    x_off, t_off, grad_off, lead = _row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off + start
    t_row = t_ptr + t_off + start
    grad_row = grad_ptr + grad_off + start
    lo = tl.maximum(lead - start, 0)  # the chunk's own columns are [lo, hi)
    hi = tl.minimum(chunk_cols, lead + n_cols - start)
    label = 0
    x_label = 0.0
    bad = False
    if KIND == _CE:
        label, ignored, bad = _load_label(labels_ptr, row, ignore_index, 0, n_cols)
        if ignored:  # every chunk of the row sees it: no one waits, nothing is read
            if PHASE != 2 and chunk == 0:
                tl.store(loss_ptr + row, 0.0)
            if PHASE != 1 and COMPUTE_GRAD and not ACCUMULATE:
                _fill_zero(grad_row, lo, hi, BLOCK)
            return
        if chunk == 0:
            x_label = tl.load(x_ptr + row * x_row_stride + tl.where(bad, 0, label))
            x_label = tl.where(bad, float("nan"), x_label.to(tl.float32))
        label = label + lead - start
    n_slots = n_rows * n_chunks
    if PHASE != 2:
        m_x, s_x, m_t, s_t, acc, x_last, t_last, n_full, first = _row_statistics(
            x_row, t_row, lo, hi, KIND, BLOCK, LANE, ALIGN, False
        )
        _store_raw_stats(stats_ptr, row * n_chunks + chunk, n_slots, m_x, s_x, m_t, s_t, acc)
    else:
        n_full, first = _tile_span(lo, hi, BLOCK, ALIGN, False)
        x_last, t_last = _load_edge_tile(x_row, t_row, n_full * BLOCK + _tile_cols(BLOCK, LANE),
                                         lo, hi, KIND, "evict_first", ALIGN)  # fmt: skip
    if PHASE == 3:
        # Every thread's stores above happen before the release that publishes them.
        tl.debug_barrier()
        tl.atomic_add(sync_ptr + 1 + row, 1, sem="release")
        done = tl.atomic_add(sync_ptr + 1 + row, 0, sem="acquire")
        while done < n_chunks:
            done = tl.atomic_add(sync_ptr + 1 + row, 0, sem="acquire")
        tl.debug_barrier()
    if PHASE != 1:
        m_x, s_x, m_t, s_t, acc = _merge_chunk_stats(
            stats_ptr, row * n_chunks, n_slots, n_chunks, KIND, CHUNKS_POW2
        )
        if chunk == 0:
            tl.store(loss_ptr + row, _finish_loss(m_x, s_x, s_t, acc, x_label, KIND))
        if COMPUTE_GRAD:
            _grad_pass(x_row, t_row, grad_row, lo, hi, x_last, t_last, n_full, first, m_x, s_x,
                       m_t, s_t, acc, label, bad, grad_scale, n_valid_ptr, KIND, ACCUMULATE,
                       MEAN_OVER_VALID, BLOCK, LANE, ALIGN)  # fmt: skip


@triton.jit
def _entropy_stats_kernel(
    x_ptr,  # (n_rows, n_cols) logits (this rank's vocab shard)
    t_ptr,  # (n_rows, n_cols) target logits (unused for label CE)
    labels_ptr,  # (n_rows,) global int labels (label CE only)
    partial_ptr,  # (5, n_rows) fp32 raw m_x, s_x, m_t, s_t, acc (written when not FINALIZE)
    row_stats_ptr,  # (6, n_rows) fp32 shift_x, shift_t, log s_x, log s_t, acc / s_x, loss (FINALIZE)
    ignore_index,
    vocab_start,
    vocab_size,
    n_rows,
    n_cols,
    x_row_stride,
    t_row_stride,
    KIND: tl.constexpr,
    FINALIZE: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (configs.entropy_lane)
    ALIGN: tl.constexpr,  # see _row_frames; > 1 only when the row strides are equal
    FRAME: tl.constexpr,
):
    """Per-row statistics of the split form. Label CE: acc is x[label] when this shard owns it."""
    row = tl.program_id(0).to(tl.int64)
    x_off, t_off, _grad_off, lead = _row_frames(row, x_row_stride, t_row_stride, 0, ALIGN, FRAME)
    x_row = x_ptr + x_off
    t_row = t_ptr + t_off
    x_label = 0.0
    ignored = False
    if KIND == _CE:
        label, ignored, bad = _load_label(labels_ptr, row, ignore_index, vocab_start, vocab_size)
        owned = (label >= 0) & (label < n_cols) & (ignored == 0)
        x_label = tl.load(x_row + lead + tl.where(owned, label, 0)).to(tl.float32)
        x_label = tl.where(owned, x_label, 0.0)
        x_label = tl.where(bad, float("nan"), x_label)
    m_x, s_x, m_t, s_t, acc, _x_last, _t_last, _n_full, _first = _row_statistics(
        x_row, t_row, lead, lead + n_cols, KIND, BLOCK, LANE, ALIGN, True
    )
    if KIND == _CE:
        acc = x_label
    if FINALIZE:
        loss = _finish_loss(m_x, s_x, s_t, acc, x_label, KIND)
        if KIND == _CE:
            loss = tl.where(ignored, 0.0, loss)
        tl.store(row_stats_ptr + row, _safe_max(m_x))
        tl.store(row_stats_ptr + n_rows + row, _safe_max(m_t))
        tl.store(row_stats_ptr + 2 * n_rows + row, tl.log(s_x))
        tl.store(row_stats_ptr + 3 * n_rows + row, tl.log(s_t))
        tl.store(row_stats_ptr + 4 * n_rows + row, acc / s_x)
        tl.store(row_stats_ptr + 5 * n_rows + row, loss)
    else:
        _store_raw_stats(partial_ptr, row, n_rows, m_x, s_x, m_t, s_t, acc)


@triton.jit
def _entropy_backward_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits (unused for label CE)
    labels_ptr,  # (n_rows,) global int labels (label CE only)
    row_stats_ptr,  # (6, n_rows) fp32 shift_x, shift_t, log s_x, log s_t, acc / s_x, loss (global)
    grad_out_ptr,  # (n_rows,) or scalar fp32 d total / d loss (row stride grad_out_stride)
    n_valid_ptr,  # (1,) fp32 non-ignored row count (MEAN_OVER_VALID only)
    grad_ptr,  # (n_rows, n_cols) d loss / d logits, written (or added into) here
    grad_scale,
    ignore_index,
    vocab_start,
    vocab_size,
    n_rows,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    grad_out_stride,
    KIND: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGN: tl.constexpr,  # see _row_frames; > 1 only when the three row strides are equal
    FRAME: tl.constexpr,
):
    """Gradient of one (row, column tile) from the stored row statistics: elementwise only.

    With ALIGN > 1 the tiles cut the row's frame (cdiv(n_cols + FRAME - 1, BLOCK) of them): whole
    tiles load and store unmasked, the row's first and last tile as _load_edge_tile and
    _store_edge_grad do (a row's last tile may be empty).
    """
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x_off, t_off, grad_off, lead = _row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off
    t_row = t_ptr + t_off
    grad_row = grad_ptr + grad_off
    scale = tl.cast(grad_scale, tl.float32) * tl.load(grad_out_ptr + row * grad_out_stride).to(
        tl.float32
    )
    if MEAN_OVER_VALID:
        scale = scale / tl.load(n_valid_ptr)
    label = 0
    if KIND == _CE:
        label, ignored, bad = _load_label(labels_ptr, row, ignore_index, vocab_start, vocab_size)
        scale = tl.where(ignored, 0.0, scale)
        scale = tl.where(bad, float("nan"), scale)
        label = label + lead
        if ALIGN > 1:
            if ignored:  # exact zeros even if the row holds NaN / inf; nothing to add
                if not ACCUMULATE:
                    zeros = tl.zeros([BLOCK], tl.float32).to(grad_ptr.dtype.element_ty)
                    own = (offs >= lead) & (offs < lead + n_cols)
                    tl.store(grad_row + offs, zeros, mask=own)
                return
    shift_x = tl.load(row_stats_ptr + row)
    shift_t = tl.load(row_stats_ptr + n_rows + row)
    log_s_x = tl.load(row_stats_ptr + 2 * n_rows + row)
    log_s_t = tl.load(row_stats_ptr + 3 * n_rows + row)
    kl_shift = tl.load(row_stats_ptr + 4 * n_rows + row)
    if KIND == _RKL:
        scale = _nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift)
    if ALIGN > 1:
        tile_lo = tl.program_id(1) * BLOCK
        lo = tl.maximum(lead, tile_lo)  # this tile's own columns are [lo, hi)
        hi = tl.minimum(lead + n_cols, tile_lo + BLOCK)
        if (lo == tile_lo) & (hi == tile_lo + BLOCK):  # a whole tile
            x = tl.load(x_row + offs).to(tl.float32)
            t = x if KIND == _CE else tl.load(t_row + offs).to(tl.float32)
            g = _tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           KIND)  # fmt: skip
            _store_grad(grad_row + offs, g, None, ACCUMULATE, "")
        else:
            x, t = _load_edge_tile(x_row, t_row, offs, lead, lead + n_cols, KIND, "", ALIGN)
            g = _tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           KIND)  # fmt: skip
            _store_edge_grad(x_row, t_row, grad_row, offs, g, lo, hi, shift_x, shift_t, log_s_x,
                             log_s_t, kl_shift, label, scale, KIND, ACCUMULATE, ALIGN)  # fmt: skip
    else:
        x, t = _load_edge_tile(x_row, t_row, offs, 0, n_cols, KIND, "", ALIGN)
        g = _tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                       KIND)  # fmt: skip
        if KIND == _CE:
            g = tl.where(ignored, 0.0, g)  # exact zeros even if the ignored row holds NaN / inf
        # No eviction hint here: evict_first measured slower for this kernel (see _row_statistics).
        _store_grad(grad_row + offs, g, offs < n_cols, ACCUMULATE, "")


@triton.jit
def _entropy_grad_rescale_kernel(
    grad_ptr,  # (n_rows, n_cols) gradient written by a fused forward, rescaled in place
    grad_out_ptr,  # (n_rows,) or scalar fp32 grad_output (row stride grad_out_stride)
    n_rows,
    n_cols,
    grad_row_stride,
    grad_out_stride,
    BLOCK: tl.constexpr,
):
    """grad *= grad_output[row]; a device-side no-op when it is 1 (the common loss.backward()).

    A bounded grid strides the rows. A scalar grad_output of 1 (the usual loss.backward())
    makes each program exit after one load; per-row values skip the rows whose value is 1.
    """
    if grad_out_stride == 0:  # one grad_output for every row
        if tl.load(grad_out_ptr).to(tl.float32) == 1.0:
            return
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        g_out = tl.load(grad_out_ptr + tl.cast(row, tl.int64) * grad_out_stride).to(tl.float32)
        if g_out != 1.0:
            grad_row = grad_ptr + tl.cast(row, tl.int64) * grad_row_stride
            for i in range(tl.cdiv(n_cols, BLOCK)):
                offs = i * BLOCK + tl.arange(0, BLOCK)
                mask = offs < n_cols
                g = tl.load(grad_row + offs, mask=mask, other=0.0).to(tl.float32) * g_out
                tl.store(grad_row + offs, g.to(grad_ptr.dtype.element_ty), mask=mask)


_FUSED_KERNELS = {0: _reverse_kl_fused_kernel, 1: _soft_cross_entropy_fused_kernel,
                  2: _cross_entropy_fused_kernel}  # fmt: skip


# ============================================================================================
# Launchers
# ============================================================================================


@dataclasses.dataclass(frozen=True)
class _Spec:
    """Static arguments of one loss call (everything that is not a tensor)."""

    kind: int
    form: str
    block_cap: int
    reduction: str
    ignore_index: int
    group: object
    vocab_start: int
    vocab_size: int


def _block(n_cols: int, cap: int) -> int:
    """Column tile: the row's next power of two up to ``cap``, at least ENTROPY_MIN_BLOCK (a
    _tile_cols grid needs BLOCK >= a lane)."""
    return max(min(triton.next_power_of_2(n_cols), cap), configs.ENTROPY_MIN_BLOCK)


def _frame_align(x, t, grad, block) -> dict[str, int]:
    """ALIGN and FRAME of the kernels (see _row_frames). ALIGN: the columns per 16 bytes (V =
    50257 in bf16: 8); 1 when Triton already sees aligned rows (strides and V multiples of 16),
    when the tensors' rows are not aligned alike, or when a tile is narrower than 16 bytes.
    FRAME: the columns per configs.ENTROPY_FRAME_BYTES where every tensor starts on such a
    boundary and a tile is that wide, else ALIGN."""
    tensors = [x, t] + ([grad] if grad is not None else [])
    if all(v.stride(0) % 16 == 0 for v in tensors) and x.shape[1] % 16 == 0:
        return {"ALIGN": 1, "FRAME": 1}
    align = 16 // x.element_size()
    alike = all(v.stride(0) == x.stride(0) and v.element_size() == x.element_size()
                and v.data_ptr() % 16 == 0 for v in tensors)  # fmt: skip
    if not alike or block < align:
        return {"ALIGN": 1, "FRAME": 1}
    frame_bytes = max(16, configs.ENTROPY_FRAME_BYTES)
    frame = frame_bytes // x.element_size()
    if block < frame or any(v.data_ptr() % frame_bytes for v in tensors):
        frame = align
    return {"ALIGN": align, "FRAME": frame}


def _grad_scale(spec: _Spec, n_rows: int) -> tuple[float, bool]:
    """(host scale, divide by the device count of valid rows?) for the reduction."""
    if spec.reduction != "mean":
        return 1.0, False
    if spec.kind == _KINDS["cross_entropy"]:
        return 1.0, True
    return 1.0 / n_rows, False


def _launch_fused(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate):
    n_rows, n_cols = x.shape
    block = _block(n_cols, spec.block_cap)
    scale, over_valid = _grad_scale(spec, n_rows)
    is_ce = spec.kind == _KINDS["cross_entropy"]
    table = configs.ENTROPY_FUSED_WARPS_LABEL if is_ce else configs.ENTROPY_FUSED_WARPS
    _FUSED_KERNELS[spec.kind][(n_rows,)](
        x, t, labels, grad if grad is not None else x, loss_rows, n_valid,
        scale, spec.ignore_index, n_cols,
        x.stride(0), t.stride(0), grad.stride(0) if grad is not None else 0,
        COMPUTE_GRAD=compute_grad, ACCUMULATE=accumulate, MEAN_OVER_VALID=over_valid,
        BLOCK=block, LANE=configs.entropy_lane(block), **_frame_align(x, t, grad, block),
        num_warps=configs.entropy_num_warps(block, table),
    )  # fmt: skip


def _maxnreg(cap: int | None) -> dict:
    """Launch option capping registers per thread (more programs resident per SM)."""
    return {} if cap is None else {"maxnreg": cap}


class ChunkLayout(NamedTuple):
    """How the chunked form cuts a row: n_chunks chunks of chunk_tiles tiles, the first n_long
    of them one tile longer (the last chunk may end early, where the row does)."""

    chunk_tiles: int
    n_long: int
    n_chunks: int

    def starts(self, block: int) -> list[int]:
        """First column of each chunk (tests and sweeps)."""
        return [(k * self.chunk_tiles + min(k, self.n_long)) * block for k in range(self.n_chunks)]


def chunk_layout(n_cols: int, block: int, tiles_per_chunk: int, sm_count: int) -> ChunkLayout:
    """The chunked form's layout: chunks of whole tiles, ``tiles_per_chunk`` or one more each
    (whichever leaves the last chunk fuller), evened out over the row, at most ``sm_count``
    chunks per row (so the waiting programs of one row always fit on the GPU, one per SM). A
    short last chunk's program waits on the others: 25 tiles as 5 chunks of 5, not 6 of 4 and
    1 of 1, ran 8-10% faster at V = 50257 on the H200, and 75 tiles as 15 of 5, not 18 of 4 and
    1 of 3, 1.4-6.7% faster at 151936 (dev/sweep_launch_configs_h200.json). n_long is 0: chunks
    of q and q + 1 tiles measured slower than these layouts at every V (run "chunked_layouts" at
    a868c1c); sweeps force such layouts through it."""
    n_tiles = triton.cdiv(n_cols, block)
    tiles = min((tiles_per_chunk, tiles_per_chunk + 1), key=lambda k: (-n_tiles % k, k))
    n_chunks = min(max(1, round(n_tiles / tiles)), sm_count)
    chunk_tiles = triton.cdiv(n_tiles, n_chunks)
    return ChunkLayout(chunk_tiles, 0, triton.cdiv(n_tiles, chunk_tiles))


def _launch_chunked(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate,
                    *, phases=None, tiles_per_chunk=None):  # fmt: skip
    """Chunked form. ``phases``: 1 = one launch that meets in-kernel (the GPU default), 2 = a
    statistics launch then a gradient launch (the interpreter's only option: see the kernel)."""
    n_rows, n_cols = x.shape
    block = _block(n_cols, spec.block_cap)
    tiles = configs.entropy_chunk_tiles(block) if tiles_per_chunk is None else tiles_per_chunk
    frames = _frame_align(x, t, grad, block)
    layout = chunk_layout(n_cols + frames["FRAME"] - 1, block, tiles,
                          _runtime.sm_count(x.device.index))  # fmt: skip
    n_chunks = layout.n_chunks
    if 5 * n_rows * n_chunks >= 2**31:  # tickets and statistics offsets are int32
        raise ValueError(
            f"chunked form: {n_rows} rows x {n_chunks} chunks is too many; use form='fused'"
        )
    phases = (2 if _runtime.INTERPRET else 1) if phases is None else phases
    if phases == 1 and _runtime.INTERPRET:
        raise ValueError("chunked form: the interpreter cannot run the one-launch version")
    scale, over_valid = _grad_scale(spec, n_rows)
    stats = x.new_empty((5, n_rows * n_chunks), dtype=torch.float32)
    sync = torch.zeros(1 + n_rows, dtype=torch.int32, device=x.device) if phases == 1 else stats
    for phase in ((3,) if phases == 1 else (1, 2)):
        _entropy_chunked_kernel[(n_rows * n_chunks,)](
            x, t, labels, grad if grad is not None else x, loss_rows, n_valid, stats, sync,
            scale, spec.ignore_index, n_rows, n_cols, n_chunks, layout.chunk_tiles, layout.n_long,
            x.stride(0), t.stride(0), grad.stride(0) if grad is not None else 0,
            KIND=spec.kind, PHASE=phase, COMPUTE_GRAD=compute_grad, ACCUMULATE=accumulate,
            MEAN_OVER_VALID=over_valid, BLOCK=block, LANE=configs.entropy_lane(block), **frames,
            CHUNKS_POW2=triton.next_power_of_2(n_chunks), num_warps=configs.ENTROPY_CHUNKED_WARPS,
            **_maxnreg(configs.ENTROPY_CHUNKED_MAXNREG.get(block)),
        )  # fmt: skip


def _launch_stats(spec, x, t, labels, finalize):
    n_rows, n_cols = x.shape
    block = _block(n_cols, min(spec.block_cap, configs.ENTROPY_STATS_BLOCK))
    partial = x.new_empty((5, n_rows), dtype=torch.float32) if not finalize else None
    row_stats = x.new_empty((6, n_rows), dtype=torch.float32)
    _entropy_stats_kernel[(n_rows,)](
        x, t, labels, partial if partial is not None else row_stats, row_stats,
        spec.ignore_index, spec.vocab_start, spec.vocab_size, n_rows, n_cols,
        x.stride(0), t.stride(0),
        KIND=spec.kind, FINALIZE=finalize, BLOCK=block, LANE=configs.entropy_lane(block),
        **_frame_align(x, t, None, block),
        num_warps=configs.entropy_num_warps(block, {configs.ENTROPY_STATS_BLOCK: configs.ENTROPY_STATS_WARPS}),
    )  # fmt: skip
    return partial, row_stats


def _launch_backward(spec, x, t, labels, row_stats, grad_out, n_valid, grad, accumulate):
    n_rows, n_cols = x.shape
    if n_rows * n_cols == 0:  # a zero-width vocab shard: no gradient entry
        return
    block = _block(n_cols, min(spec.block_cap, configs.ENTROPY_BACKWARD_BLOCK))
    scale, over_valid = _grad_scale(spec, n_rows)
    frames = _frame_align(x, t, grad, block)
    _entropy_backward_kernel[(n_rows, triton.cdiv(n_cols + frames["FRAME"] - 1, block))](
        x, t, labels, row_stats, grad_out, n_valid, grad,
        scale, spec.ignore_index, spec.vocab_start, spec.vocab_size, n_rows, n_cols,
        x.stride(0), t.stride(0), grad.stride(0), 1 if grad_out.dim() else 0,
        KIND=spec.kind, ACCUMULATE=accumulate, MEAN_OVER_VALID=over_valid, BLOCK=block, **frames,
        num_warps=configs.entropy_num_warps(block, {configs.ENTROPY_BACKWARD_BLOCK: configs.ENTROPY_BACKWARD_WARPS}),
    )  # fmt: skip


def _launch_rescale(grad, grad_out):
    n_rows, n_cols = grad.shape
    block = _block(n_cols, configs.ENTROPY_RESCALE_BLOCK)
    per_sm = configs.ENTROPY_RESCALE_PROGRAMS_PER_SM
    programs = min(n_rows, per_sm * _runtime.sm_count(grad.device.index))
    _entropy_grad_rescale_kernel[(programs,)](
        grad, grad_out, n_rows, n_cols, grad.stride(0), 1 if grad_out.dim() else 0, BLOCK=block,
        num_warps=configs.entropy_num_warps(block, {configs.ENTROPY_RESCALE_BLOCK: configs.ENTROPY_RESCALE_WARPS}),
    )  # fmt: skip


def _combine_partials(spec, partial, labels):
    """Tensor parallel: all-reduce the raw statistics into the global (6, n_rows) row statistics."""
    import torch.distributed as dist

    m_x, s_x, m_t, s_t, acc = partial.unbind(0)
    maxes = torch.stack([m_x, m_t])
    dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=spec.group)
    safe = torch.where(maxes == float("-inf"), 0.0, maxes)
    raw = torch.stack([m_x, m_t])
    local = torch.where(raw == float("-inf"), 0.0, raw)
    # (2, n_rows): rescale local sums to the global max; 0 for a shard that saw only -inf.
    alpha = torch.exp(raw - safe)
    sums = torch.stack([s_x * alpha[0], s_t * alpha[1], acc])
    if spec.kind == _KINDS["reverse_kl"]:
        shift = (safe[1] - local[1]) - (safe[0] - local[0])
        sums[2] = alpha[0] * (acc + shift * s_x)
    elif spec.kind == _KINDS["soft_cross_entropy"]:
        sums[2] = alpha[1] * (acc - (safe[0] - local[0]) * s_t)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=spec.group)
    g_sx, g_st, g_acc = sums.unbind(0)
    log_sx, log_st = g_sx.log(), g_st.log()
    kl_shift = g_acc / g_sx if spec.kind == _KINDS["reverse_kl"] else torch.zeros_like(g_acc)
    if spec.kind == _KINDS["reverse_kl"]:
        loss = kl_shift - log_sx + log_st
    elif spec.kind == _KINDS["soft_cross_entropy"]:
        loss = log_sx - g_acc / g_st
    else:
        loss = torch.where(labels == spec.ignore_index, 0.0, (safe[0] - g_acc) + log_sx)
    return torch.stack([safe[0], safe[1], log_sx, log_st, kl_shift, loss])


def _forward_rows(spec, x, t, labels, n_valid, grad, compute_grad, accumulate):
    """Run the forward of any form; returns (loss_rows, row_stats or None: the split form only)."""
    if spec.form in _GRAD_IN_FORWARD:
        loss_rows = x.new_empty(x.shape[0], dtype=torch.float32)
        launch = _launch_fused if spec.form == "fused" else _launch_chunked
        launch(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate)
        return loss_rows, None
    distributed = spec.group is not None
    if distributed and x.shape[1] == 0:  # a zero-width vocab shard
        partial, row_stats = _no_column_partials(spec, x, labels), None
    else:
        partial, row_stats = _launch_stats(spec, x, t, labels, finalize=not distributed)
    if distributed:
        row_stats = _combine_partials(spec, partial, labels)
    return row_stats[5], row_stats


def _no_column_partials(spec, x, labels):
    """The (5, n_rows) raw statistics of no column (a zero-width vocab shard, group=), as the
    stats kernel would store them: max -inf, sums 0; label CE's acc is x[label], owned by no
    column here: 0, or NaN for an out-of-range label."""
    n_rows = x.shape[0]
    partial = torch.zeros((5, n_rows), dtype=torch.float32, device=x.device)
    partial[0] = partial[2] = float("-inf")
    if spec.kind == _KINDS["cross_entropy"]:
        bad = (labels != spec.ignore_index) & ((labels < 0) | (labels >= spec.vocab_size))
        partial[4] = torch.where(bad, float("nan"), 0.0)
    return partial


def _reduce(spec, loss_rows, n_valid, lead_shape):
    if spec.reduction == "none":
        return loss_rows.reshape(lead_shape)
    if spec.reduction == "mean" and spec.kind != _KINDS["cross_entropy"]:
        return loss_rows.mean()  # one reduction kernel, no separate division
    total = loss_rows.sum()
    if spec.reduction == "sum":
        return total
    return total / n_valid[0]  # label CE: the mean over non-ignored rows


# ============================================================================================
# Custom ops (torch.compile-able) and autograd
# ============================================================================================


def _loss_forward(spec, logits, other, compute_grad):
    """(loss, grad | None, row_stats | None, n_valid): the reduced loss; the gradient for
    grad_output = 1 (fused and chunked forms); the split form's (6, M) row statistics."""
    x, t, labels, n_valid = _rows(spec, logits, other)
    grad = torch.empty_like(x) if (compute_grad and spec.form in _GRAD_IN_FORWARD) else None
    loss_rows, row_stats = _forward_rows(spec, x, t, labels, n_valid, grad, compute_grad, False)
    return _reduce(spec, loss_rows, n_valid, logits.shape[:-1]), grad, row_stats, n_valid


def _split_grad(spec, logits, other, row_stats, g_out, n_valid):
    """The split form's gradient from its row statistics, times grad_output ``g_out``
    (``n_valid`` may be empty where _counts_valid says the kernels do not read it)."""
    x, t, labels, _ = _rows(spec, logits, other, count_valid=False)
    n_valid = n_valid if n_valid.numel() else row_stats  # unread: a pointer argument only
    grad = torch.empty_like(x)
    _launch_backward(spec, x, t, labels, row_stats, g_out, n_valid, grad, False)
    return grad.view(logits.shape)


def _grad_output(grad_loss):
    """grad_output as the kernels read it: fp32, a scalar or one value per row."""
    return grad_loss.float().reshape(-1).contiguous() if grad_loss.dim() else grad_loss.float()


def _local_spec(kind, form, block_cap, reduction, ignore_index, n_cols):
    return _Spec(kind, form, block_cap, reduction, ignore_index, None, 0, n_cols)


@torch.library.custom_op("normlab::entropy_fwd", mutates_args=())
def _entropy_fwd_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    kind: int,
    form: str,
    block_cap: int,
    reduction: str,
    ignore_index: int,
    compute_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, grad, row_stats, n_valid) of one unsharded call (see _loss_forward); absent ones
    are empty tensors (custom ops return no None). ``other``: target logits, or the labels."""
    spec = _local_spec(kind, form, block_cap, reduction, ignore_index, logits.shape[-1])
    loss, grad, row_stats, n_valid = _loss_forward(spec, logits, other, compute_grad)
    if row_stats is not None and reduction == "none":
        loss = loss.clone()  # the split form's per-row losses are a row of its statistics
    empty = logits.new_empty((0,), dtype=torch.float32)
    return (loss, grad if grad is not None else logits.new_empty((0,)),
            row_stats if row_stats is not None else empty,
            n_valid if _counts_valid(kind, reduction) else empty.clone())  # fmt: skip


@_entropy_fwd_op.register_fake
def _(logits, other, kind, form, block_cap, reduction, ignore_index, compute_grad):
    n_cols = logits.shape[-1]
    n_rows = logits.numel() // n_cols
    f32 = torch.float32
    loss = logits.new_empty(logits.shape[:-1] if reduction == "none" else (), dtype=f32)
    grad_shape = (n_rows, n_cols) if compute_grad and form in _GRAD_IN_FORWARD else (0,)
    stats_shape = (6, n_rows) if form == "split" else (0,)
    return (loss, logits.new_empty(grad_shape), logits.new_empty(stats_shape, dtype=f32),
            logits.new_empty((1 if _counts_valid(kind, reduction) else 0,), dtype=f32))  # fmt: skip


@torch.library.custom_op("normlab::entropy_split_bwd", mutates_args=())
def _entropy_split_bwd_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    row_stats: torch.Tensor,
    g_out: torch.Tensor,
    n_valid: torch.Tensor,
    kind: int,
    block_cap: int,
    reduction: str,
    ignore_index: int,
) -> torch.Tensor:
    """The split form's d loss / d logits (see _split_grad)."""
    spec = _local_spec(kind, "split", block_cap, reduction, ignore_index, logits.shape[-1])
    return _split_grad(spec, logits, other, row_stats, g_out, n_valid)


@_entropy_split_bwd_op.register_fake
def _(logits, other, row_stats, g_out, n_valid, kind, block_cap, reduction, ignore_index):
    return logits.new_empty(logits.shape)


def _setup_context(ctx, inputs, output):
    logits, other, kind, form, block_cap, reduction, ignore_index, _compute_grad = inputs
    _, grad, row_stats, n_valid = output
    ctx.args = (kind, form, block_cap, reduction, ignore_index)
    ctx.logits_shape = logits.shape
    if form in _GRAD_IN_FORWARD:
        ctx.save_for_backward(grad)
    else:
        ctx.save_for_backward(logits, other, row_stats, n_valid)
    ctx.set_materialize_grads(False)


def _backward(ctx, grad_loss, _dgrad, _dstats, _dn_valid):
    kind, form, block_cap, reduction, ignore_index = ctx.args
    if grad_loss is None:
        return (None,) * 8
    g_out = _grad_output(grad_loss)
    if form not in _GRAD_IN_FORWARD:
        logits, other, row_stats, n_valid = ctx.saved_tensors
        grad = torch.ops.normlab.entropy_split_bwd(logits, other, row_stats, g_out, n_valid, kind,
                                                   block_cap, reduction, ignore_index)  # fmt: skip
        return (grad,) + (None,) * 7
    (grad,) = ctx.saved_tensors
    traced = torch.compiler.is_compiling() or type(grad) is not torch.Tensor  # fake / functional
    if not traced and not _graph_kept():
        # Eager, the graph's last backward: scale the saved gradient in place (no new M x V
        # buffer; nothing reads it again).
        _launch_rescale(grad, g_out)
        return (grad.view(ctx.logits_shape),) + (None,) * 7
    # retain_graph=True (another backward may read the saved gradient) or a traced (compiled)
    # backward, which may be replayed: out of place, the saved gradient kept unscaled.
    scale = g_out[:, None] if g_out.dim() else g_out
    return ((grad.float() * scale).to(grad.dtype).view(ctx.logits_shape),) + (None,) * 7


def _graph_kept():
    """Whether the running backward keeps the graph (retain_graph / create_graph): torch's
    private query, as torch's own AOT autograd uses it; True (the safe answer) where absent."""
    query = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if query is None else bool(query())


_entropy_fwd_op.register_autograd(_backward, setup_context=_setup_context)


class ShardedEntropyLoss(torch.autograd.Function):
    """Vocab-sharded (tensor-parallel) loss, split form: the row statistics are all-reduced over
    ``spec.group`` between the two kernels. Eager only (a process group is no custom-op
    argument)."""

    @staticmethod
    def forward(ctx, logits, other, spec):
        loss, _, row_stats, n_valid = _loss_forward(spec, logits, other, False)
        ctx.spec = spec
        ctx.save_for_backward(logits, other, row_stats, n_valid)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        logits, other, row_stats, n_valid = ctx.saved_tensors
        grad = _split_grad(ctx.spec, logits, other, row_stats, _grad_output(grad_loss), n_valid)
        return grad, None, None


def _rows(spec, logits, other, count_valid=True):
    """(x, t, labels, n_valid): logits and target as (M, V) rows (t = x for label CE), the labels
    (a 1-element placeholder for the distribution losses) and the non-ignored row count (None
    without ``count_valid``)."""
    n_cols = logits.shape[-1]
    n_rows = logits.shape[:-1].numel()  # not -1: a zero-width vocab shard has V = 0
    x = logits.reshape(n_rows, n_cols)
    is_ce = spec.kind == _KINDS["cross_entropy"]
    labels = other.reshape(-1) if is_ce else x.new_empty(1, dtype=torch.int64)
    t = x if is_ce else other.reshape(n_rows, n_cols)
    return x, t, labels, (_n_valid(spec, labels) if count_valid else None)


def _counts_valid(kind, reduction):
    """Whether the loss divides by the non-ignored row count (label CE's mean)."""
    return kind == _KINDS["cross_entropy"] and reduction == "mean"


def _n_valid(spec, labels):
    if _counts_valid(spec.kind, spec.reduction):
        return (labels != spec.ignore_index).sum(dtype=torch.float32).reshape(1)
    return labels.new_empty(1, dtype=torch.float32)  # unread: a pointer argument only


# ============================================================================================
# Public functional API
# ============================================================================================


def _check_common(name, logits, form, block_cap, reduction, group):
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name}: logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: logits dtype must be float32, float16 or bfloat16, got {logits.dtype}"
        )
    if logits.dim() < 1:
        raise ValueError(f"{name}: logits must have a vocabulary last dim, got a 0-dim tensor")
    if _runtime.INTERPRET and logits.device.type != "cpu":
        raise ValueError(f"{name}: the Triton interpreter runs on CPU tensors, got {logits.device}")
    if not _runtime.INTERPRET and logits.device.type != "cuda":
        raise ValueError(f"{name}: logits must be on a CUDA device, got {logits.device}")
    if form not in FORMS:
        raise ValueError(f"{name}: form must be one of {FORMS}, got {form!r}")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    if block_cap is not None:
        lo, hi = configs.ENTROPY_MIN_BLOCK, configs.ENTROPY_MAX_BLOCK
        if (not isinstance(block_cap, int) or isinstance(block_cap, bool) or block_cap < lo
                or block_cap > hi or block_cap & (block_cap - 1)):  # fmt: skip
            raise ValueError(
                f"{name}: block_cap must be one of {configs.ENTROPY_BLOCK_CAPS} (or any power of two "
                f"in [{lo}, {hi}]), got {block_cap!r}"
            )
    if group is not None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(f"{name}: group= given but torch.distributed is not initialized")
        if form in _GRAD_IN_FORWARD:
            raise ValueError(
                f"{name}: form={form!r} cannot all-reduce mid-kernel; use 'split' (or 'auto') with group="
            )


def _resolve(name, n_cols, form, block_cap, group):
    auto_form, auto_cap = configs.entropy_auto(name, n_cols, group is not None)
    return (auto_form if form == "auto" else form), (auto_cap if block_cap is None else block_cap)


def _contiguous_rows(x):
    """Rows may be strided, columns must be unit-stride: copy otherwise (documented)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    try:
        x.view(-1, x.shape[-1])
    except RuntimeError:
        x = x.contiguous()
    return x


def _check_grad_accumulate(name, grad_accumulate, logits):
    if not isinstance(grad_accumulate, torch.Tensor):
        raise TypeError(
            f"{name}: grad_accumulate must be a tensor, got {type(grad_accumulate).__name__}"
        )
    if grad_accumulate.shape != logits.shape:
        raise ValueError(
            f"{name}: grad_accumulate shape {tuple(grad_accumulate.shape)} != logits shape {tuple(logits.shape)}"
        )
    if grad_accumulate.dtype not in (torch.float32, logits.dtype):
        raise TypeError(
            f"{name}: grad_accumulate dtype must be float32 or {logits.dtype}, got {grad_accumulate.dtype}"
        )
    if grad_accumulate.device != logits.device or not grad_accumulate.is_contiguous():
        raise ValueError(f"{name}: grad_accumulate must be contiguous and on {logits.device}")


def _run(name, logits, other, spec, grad_accumulate):
    if grad_accumulate is not None:
        _check_grad_accumulate(name, grad_accumulate, logits)
    # No element: torch's values without a kernel. (A zero-width vocab shard of non-empty rows
    # still joins its group's all-reduces, below.)
    if logits.numel() == 0 and (spec.group is None or logits.shape[:-1].numel() == 0):
        return _empty_loss(spec, logits, other, grad_accumulate is None)
    if grad_accumulate is None and spec.group is not None:
        return ShardedEntropyLoss.apply(logits, other, spec)
    if grad_accumulate is None:
        compute_grad = torch.is_grad_enabled() and logits.requires_grad
        loss, *_ = torch.ops.normlab.entropy_fwd(
            logits, other, spec.kind, spec.form, spec.block_cap, spec.reduction,
            spec.ignore_index, compute_grad,
        )  # fmt: skip
        return loss
    # Eager: loss and gradient now, the gradient added into the caller's buffer.
    with torch.no_grad():
        x, t, labels, n_valid = _rows(spec, logits, other)
        grad = grad_accumulate.view(x.shape)
        loss_rows, row_stats = _forward_rows(spec, x, t, labels, n_valid, grad, True, True)
        if spec.form == "split":
            ones = x.new_ones((), dtype=torch.float32)
            _launch_backward(spec, x, t, labels, row_stats, ones, n_valid, grad, True)
        return _reduce(spec, loss_rows, n_valid, logits.shape[:-1])


def _empty_loss(spec, logits, other, with_graph):
    """The loss of logits with no element (zero rows, or V = 0), as torch's: each row an empty
    sum, 0 (label CE: 0 where ignored, NaN for any other label, which has no column: the
    kernels' unchecked out-of-range value); "mean" of zero rows NaN, "sum" 0. The gradient
    (with_graph) is empty, shaped like logits."""
    rows = logits.float().sum(-1) * 0.0  # zeros shaped logits.shape[:-1], an autograd path
    if not with_graph:
        rows = rows.detach()
    if spec.kind == _KINDS["cross_entropy"]:
        rows = torch.where(other == spec.ignore_index, rows, float("nan"))
    if spec.reduction == "none":
        return rows
    if spec.reduction == "sum":
        return rows.sum()
    if spec.kind == _KINDS["cross_entropy"]:  # over the non-ignored rows
        return rows.sum() / (other != spec.ignore_index).sum(dtype=torch.float32)
    return rows.mean()


def _distribution_loss(
    name, logits, target_logits, form, block_cap, reduction, group, grad_accumulate
):
    _check_common(name, logits, form, block_cap, reduction, group)
    if not isinstance(target_logits, torch.Tensor):
        raise TypeError(
            f"{name}: target_logits must be a torch.Tensor, got {type(target_logits).__name__}"
        )
    if target_logits.shape != logits.shape:
        raise ValueError(
            f"{name}: target_logits shape {tuple(target_logits.shape)} != logits shape {tuple(logits.shape)}"
        )
    if target_logits.dtype != logits.dtype:
        raise TypeError(
            f"{name}: target_logits dtype {target_logits.dtype} != logits dtype {logits.dtype}"
        )
    if target_logits.device != logits.device:
        raise ValueError(
            f"{name}: target_logits on {target_logits.device}, logits on {logits.device}"
        )
    if target_logits.requires_grad and torch.is_grad_enabled():
        raise ValueError(
            f"{name}: no gradient with respect to target_logits is computed; pass target_logits.detach()"
        )
    n_cols = int(logits.shape[-1])  # a symbolic vocab under torch.compile: specialised
    form, cap = _resolve(name, n_cols, form, block_cap, group)
    spec = _Spec(_KINDS[name], form, cap, reduction, 0, group, 0, n_cols)
    return _run(
        name, _contiguous_rows(logits), _contiguous_rows(target_logits), spec, grad_accumulate
    )


def reverse_kl(logits, target_logits, *, form="auto", block_cap=None, reduction="mean", group=None,
               grad_accumulate=None):  # fmt: skip
    """Reverse KL divergence ``KL(p || q) = sum_j p_j (log p_j - log q_j)`` per row.

    p = softmax(logits), q = softmax(target_logits) over the last dim; both (..., V), same dtype
    (float32, float16 or bfloat16), flattened to (M, V). Math in fp32; the loss is fp32.

    Args:
        form: "fused" (one kernel writes loss and gradient; backward only rescales), "chunked"
            (as fused, with each row shared by several programs that meet at a per-row
            counter), "split" (a stats kernel, then a backward kernel from the stored row
            statistics) or "auto" (``configs.ENTROPY_AUTO``, from measurements).
        block_cap: column tile cap, one of 4096, 8192, 16384, 32768 (any power of two in
            [16, 65536] is accepted for experiments); None takes the auto table's.
        reduction: "mean" over rows (the batchmean convention), "sum", or "none" (shape (...)).
        group: a ``torch.distributed`` process group over which the vocabulary is sharded (each
            rank holds a contiguous slice of logits and target, uneven sizes allowed). The row
            statistics are all-reduced; each rank gets the full loss and its gradient slice.
        grad_accumulate: a contiguous tensor shaped like logits (float32 or logits' dtype). The
            gradient of the (reduced) loss for grad_output = 1 is computed now and *added* into
            it in place, and the returned loss is detached (no autograd graph).

    Gradient with respect to logits: ``p * ((log p - log q) - KL_row)`` times grad_output (and
    1/M for "mean"). target_logits must not require grad (ValueError). A row holding NaN or
    +inf (in logits or target) gives a NaN loss and an all-NaN gradient row, as torch's
    autograd does. No element (zero rows, or V = 0: each row an empty sum, 0) gives torch's
    values: "mean" of zero rows NaN, "sum" 0, "none" empty; an empty gradient. Non-unit-stride
    columns are copied first.
    """
    return _distribution_loss("reverse_kl", logits, target_logits, form, block_cap, reduction, group,
                              grad_accumulate)  # fmt: skip


def soft_cross_entropy(logits, target_logits, *, form="auto", block_cap=None, reduction="mean",
                       group=None, grad_accumulate=None):  # fmt: skip
    """Soft-target cross-entropy ``-sum_j q_j log p_j`` per row (Fast-LLM's cross_entropy_logits).

    q = softmax(target_logits), p = softmax(logits). Gradient with respect to logits: ``p - q``
    (times grad_output, and 1/M for "mean"). Arguments and conventions as :func:`reverse_kl`.
    """
    return _distribution_loss("soft_cross_entropy", logits, target_logits, form, block_cap, reduction,
                              group, grad_accumulate)  # fmt: skip


def _vocab_layout(group, n_cols):
    """(vocab_start, vocab_size) of this rank's shard: all-gathers the shard sizes (host side)."""
    import torch.distributed as dist

    sizes = [None] * dist.get_world_size(group)
    dist.all_gather_object(sizes, int(n_cols), group=group)
    rank = dist.get_rank(group)
    return sum(sizes[:rank]), sum(sizes)


def cross_entropy(logits, labels, *, ignore_index=-100, reduction="mean", form="auto", block_cap=None,
                  group=None, grad_accumulate=None, check_labels=None):  # fmt: skip
    """Cross-entropy with integer labels, torch semantics: ``logsumexp(x_r) - x_r[label_r]``.

    logits (..., V) float32/float16/bfloat16; labels (...) int64 or int32, each in [0, V) or
    equal to ``ignore_index``. Ignored rows have loss 0 and gradient 0; "mean" divides by the
    number of non-ignored rows (NaN when all are ignored, as torch; the gradient is then 0).
    Gradient ``softmax(x) - onehot(label)`` times grad_output. The loss is fp32. With V = 0
    every label must be ignored (any other is out of range, as torch's IndexError).

    Out-of-range labels: ``check_labels`` (default: True on CPU, False on GPU, where it would
    cost a host sync, and inside torch.compile) raises ValueError on the host; unchecked, the
    kernels never read out of bounds: such a row gets a NaN loss and a NaN gradient row.

    With ``group``, the vocab is sharded over the ranks (labels are global ids, the same on
    every rank); each rank finds its ``vocab_start`` by all-gathering the shard sizes
    (``all_gather_object``, a host-side collective, once per call). Other arguments as
    :func:`reverse_kl`.
    """
    name = "cross_entropy"
    _check_common(name, logits, form, block_cap, reduction, group)
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{name}: labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name}: labels dtype must be int64 or int32, got {labels.dtype}")
    if labels.shape != logits.shape[:-1]:
        raise ValueError(
            f"{name}: labels shape {tuple(labels.shape)} != logits.shape[:-1] {tuple(logits.shape[:-1])}"
        )
    if labels.device != logits.device:
        raise ValueError(f"{name}: labels on {labels.device}, logits on {logits.device}")
    n_cols = int(logits.shape[-1])  # a symbolic vocab under torch.compile: specialised
    vocab_start, vocab_size = _vocab_layout(group, n_cols) if group is not None else (0, n_cols)
    compiling = torch.compiler.is_compiling()
    if check_labels is None:
        check_labels = logits.device.type == "cpu" and not compiling
    if check_labels and compiling:
        raise ValueError(f"{name}: check_labels=True syncs with the host; not inside torch.compile")
    if check_labels:
        bad = (labels != ignore_index) & ((labels < 0) | (labels >= vocab_size))
        if bool(bad.any()):
            first = labels[bad].flatten()[0].item()
            raise ValueError(
                f"{name}: label {first} outside [0, {vocab_size}) and != ignore_index={ignore_index}"
            )
    form, cap = _resolve(name, n_cols, form, block_cap, group)
    spec = _Spec(
        _KINDS[name], form, cap, reduction, int(ignore_index), group, vocab_start, vocab_size
    )
    return _run(name, _contiguous_rows(logits), labels.contiguous(), spec, grad_accumulate)
