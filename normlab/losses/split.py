"""The split form: a stats kernel stores per-row statistics, a backward kernel reloads them.

``_entropy_stats_kernel`` (one program per row) runs in the forward; ``_entropy_backward_kernel``
(a 2-D grid of row x column tile, elementwise given the statistics) in autograd's backward; each
has its own tile (Fast-LLM's reverse-KL issue, https://github.com/ServiceNow/Fast-LLM/issues/497,
option B). This is also the tensor-parallel path: between the two, the raw per-row statistics
(max, sum-exp of both distributions, the loss accumulator) are all-reduced (``sharded``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from normlab._host import cdiv
from normlab._launch import launch
from normlab.losses import config
from normlab.losses.online import (
    CE,
    JSD,
    RKL,
    check_label,
    finish_loss,
    fp32_options,
    jsd_loss,
    jsd_sums,
    kl_shift_of,
    load_edge_tile,
    loss_logit,
    masked_out,
    nan_if_nan_loss,
    row_frames,
    row_statistics,
    safe_max,
    store_edge_grad,
    store_grad,
    store_raw_stats,
    tile_grad,
    transform,
)


@triton.jit
def _entropy_stats_kernel(
    # Pointers the flags leave unread are None: constexprs, which no launch passes.
    x_ptr,  # (n_rows, n_cols) logits (this rank's vocab shard)
    t_ptr,  # (n_rows, n_cols) target logits (not label CE)
    labels_ptr,  # (n_rows,) global int labels (label CE)
    # (5, n_rows) fp32 raw m_x, s_x, m_t, s_t, acc (written when not FINALIZE); JSD_SUMS: (2,
    # n_rows) this shard's jsd_sums
    partial_ptr,
    # (6, n_rows) fp32 shift_x, shift_t, log s_x, log s_t, acc / s_x, loss (FINALIZE; JSD:
    # R_p in place of acc / s_x); JSD_SUMS: the global ones, read
    row_stats_ptr,
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
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    ALIGN: tl.constexpr,  # see row_frames; > 1 only when the row strides are equal
    FRAME: tl.constexpr,
    # The options (config.kernel_args; online's module docstring), off by default:
    mask_ptr=None,  # (n_rows,) bool loss_mask (HAS_MASK only)
    xparam=1.0,
    beta=0.5,
    smoothing=0.0,
    uniform_weight=0.0,
    z_loss=0.0,
    XFORM: tl.constexpr = 0,
    HAS_MASK: tl.constexpr = False,
    SMOOTH: tl.constexpr = False,
    ZLOSS: tl.constexpr = False,
    JSD_SUMS: tl.constexpr = False,  # sharded JSD's second pass (see partial_ptr)
):
    """Per-row statistics of the split form. Label CE: acc is x[label] when this shard owns it.
    Masked rows are read as any other, their loss 0 (the backward writes their zeros)."""
    xparam, beta, smoothing, uniform_weight, z_loss = fp32_options(xparam, beta, smoothing,
                                                                   uniform_weight, z_loss)
    row = tl.program_id(0).to(tl.int64)
    x_off, t_off, _grad_off, lead = row_frames(row, x_row_stride, t_row_stride, 0, ALIGN, FRAME)
    x_row = x_ptr + x_off
    t_row = x_row  # label CE: t_ptr is None, and the helpers never read t_row
    if KIND != CE:
        t_row = t_ptr + t_off
    if JSD_SUMS:
        r_p, r_q = jsd_sums(x_row, t_row, lead, lead + n_cols, tl.load(row_stats_ptr + row),
                            tl.load(row_stats_ptr + n_rows + row),
                            tl.load(row_stats_ptr + 2 * n_rows + row),
                            tl.load(row_stats_ptr + 3 * n_rows + row), xparam, beta, BLOCK, LANE,
                            ALIGN, XFORM)  # fmt: skip
        tl.store(partial_ptr + row, r_p)
        tl.store(partial_ptr + n_rows + row, r_q)
        return
    x_label = 0.0
    ignored = False
    if KIND == CE:
        label, ignored, bad = check_label(tl.load(labels_ptr + row), ignore_index, vocab_start,
                                          vocab_size)
        owned = (label >= 0) & (label < n_cols) & (ignored == 0)
        x_label = tl.load(x_row + lead + tl.where(owned, label, 0)).to(tl.float32)
        x_label = tl.where(owned, loss_logit(x_label, xparam, XFORM), 0.0)
        x_label = tl.where(bad, float("nan"), x_label)
    if HAS_MASK:
        ignored = ignored | masked_out(mask_ptr, row)
    m_x, s_x, m_t, s_t, acc, _x_last, _t_last = row_statistics(
        x_row, t_row, lead, lead + n_cols, xparam, KIND, BLOCK, LANE, ALIGN, True, XFORM, SMOOTH
    )
    if KIND == CE:
        acc = x_label
    if FINALIZE:
        if KIND == JSD:  # a second pass, now that p and q are known
            log_s_x = tl.log(s_x)
            log_s_t = tl.log(s_t)
            acc, r_q = jsd_sums(x_row, t_row, lead, lead + n_cols, safe_max(m_x),
                                safe_max(m_t), log_s_x, log_s_t, xparam, beta, BLOCK, LANE,
                                ALIGN, XFORM)  # fmt: skip
            loss = jsd_loss(acc, r_q, log_s_x, log_s_t, beta)  # acc: R_p
        else:
            loss = finish_loss(m_x, s_x, s_t, acc, x_label, smoothing, uniform_weight, z_loss,
                               KIND, SMOOTH, ZLOSS)  # fmt: skip
        if (KIND == CE) or HAS_MASK:
            loss = tl.where(ignored, 0.0, loss)
        tl.store(row_stats_ptr + row, safe_max(m_x))
        tl.store(row_stats_ptr + n_rows + row, safe_max(m_t))
        tl.store(row_stats_ptr + 2 * n_rows + row, tl.log(s_x))
        tl.store(row_stats_ptr + 3 * n_rows + row, tl.log(s_t))
        tl.store(row_stats_ptr + 4 * n_rows + row, kl_shift_of(acc, s_x, KIND))
        tl.store(row_stats_ptr + 5 * n_rows + row, loss)
    else:
        store_raw_stats(partial_ptr, row, n_rows, m_x, s_x, m_t, s_t, acc)


@triton.jit
def _entropy_backward_kernel(
    # Pointers the flags leave unread are None: constexprs, which no launch passes.
    x_ptr,  # (n_rows, n_cols) logits
    t_ptr,  # (n_rows, n_cols) target logits (not label CE)
    labels_ptr,  # (n_rows,) global int labels (label CE)
    # (6, n_rows) fp32 shift_x, shift_t, log s_x, log s_t, acc / s_x (JSD: R_p), loss
    # (global)
    row_stats_ptr,
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
    ALIGN: tl.constexpr,  # see row_frames; > 1 only when the three row strides are equal
    FRAME: tl.constexpr,
    # The options (config.kernel_args; online's module docstring), off by default:
    mask_ptr=None,  # (n_rows,) bool loss_mask (HAS_MASK only)
    xparam=1.0,
    beta=0.5,
    smoothing=0.0,
    uniform_weight=0.0,
    z_loss=0.0,
    XFORM: tl.constexpr = 0,
    HAS_MASK: tl.constexpr = False,
    SMOOTH: tl.constexpr = False,
    ZLOSS: tl.constexpr = False,
):
    """Gradient of one (row, column tile) from the stored row statistics: elementwise only.

    With ALIGN > 1 the tiles cut the row's frame (cdiv(n_cols + FRAME - 1, BLOCK) of them): whole
    tiles load and store unmasked, the row's first and last tile as load_edge_tile and
    store_edge_grad do (a row's last tile may be empty).
    """
    xparam, beta, smoothing, uniform_weight, z_loss = fp32_options(xparam, beta, smoothing,
                                                                   uniform_weight, z_loss)
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x_off, t_off, grad_off, lead = row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off
    t_row = x_row  # label CE: t_ptr is None, and the helpers never read t_row
    if KIND != CE:
        t_row = t_ptr + t_off
    grad_row = grad_ptr + grad_off
    scale = tl.cast(grad_scale, tl.float32) * tl.load(grad_out_ptr + row * grad_out_stride).to(
        tl.float32
    )
    if MEAN_OVER_VALID:
        scale = scale / tl.load(n_valid_ptr)
    label = 0
    ignored = False
    if KIND == CE:
        label, ignored, bad = check_label(tl.load(labels_ptr + row), ignore_index, vocab_start,
                                          vocab_size)
    if HAS_MASK:
        ignored = ignored | masked_out(mask_ptr, row)
    if (KIND == CE) or HAS_MASK:
        scale = tl.where(ignored, 0.0, scale)
        if KIND == CE:
            scale = tl.where(bad, float("nan"), scale)
            label = label + lead
        if ALIGN > 1:  # a constexpr branch, as the kernels were measured
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
    if (KIND == RKL) or (KIND == JSD):
        scale = nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift, KIND)
    if ALIGN > 1:
        tile_lo = tl.program_id(1) * BLOCK
        lo = tl.maximum(lead, tile_lo)  # this tile's own columns are [lo, hi)
        hi = tl.minimum(lead + n_cols, tile_lo + BLOCK)
        if (lo == tile_lo) & (hi == tile_lo + BLOCK):  # a whole tile
            x = transform(tl.load(x_row + offs).to(tl.float32), xparam, XFORM)
            t = x if KIND == CE else transform(tl.load(t_row + offs).to(tl.float32), xparam, XFORM)
            g = tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH,
                           ZLOSS)  # fmt: skip
            store_grad(grad_row + offs, g, None, ACCUMULATE, "")
        else:
            x, t = load_edge_tile(x_row, t_row, offs, lead, lead + n_cols, xparam, KIND, "", ALIGN,
                                  XFORM)  # fmt: skip
            g = tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH,
                           ZLOSS)  # fmt: skip
            store_edge_grad(x_row, t_row, grad_row, offs, g, lo, hi, shift_x, shift_t, log_s_x,
                             log_s_t, kl_shift, label, scale, xparam, beta, smoothing,
                             uniform_weight, z_loss, KIND, ACCUMULATE, ALIGN, XFORM, SMOOTH,
                             ZLOSS)  # fmt: skip
    else:
        x, t = load_edge_tile(x_row, t_row, offs, 0, n_cols, xparam, KIND, "", ALIGN, XFORM)
        g = tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                       xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH,
                       ZLOSS)  # fmt: skip
        if (KIND == CE) or HAS_MASK:
            g = tl.where(ignored, 0.0, g)  # exact zeros even if the ignored row holds NaN / inf
        # No eviction hint here: evict_first measured slower for this kernel (see row_statistics).
        store_grad(grad_row + offs, g, offs < n_cols, ACCUMULATE, "")


def launch_stats(spec, x, t, labels, finalize, mask=None, jsd_row_stats=None):
    """(partial, row_stats): the raw (5, M) statistics of this shard (not finalize), or the
    (6, M) row statistics the backward reads, the loss rows last (finalize). mask: the flat
    loss_mask or None. With ``jsd_row_stats`` (sharded JSD's global row statistics): (the (2, M)
    jsd_sums over this shard, jsd_row_stats)."""
    n_rows, n_cols = x.shape
    block = config.tile(n_cols, min(spec.block_cap, config.ENTROPY_STATS_BLOCK))
    jsd_sums = jsd_row_stats is not None
    if jsd_sums:
        partial, row_stats = x.new_empty((2, n_rows), dtype=torch.float32), jsd_row_stats
    else:
        partial = x.new_empty((5, n_rows), dtype=torch.float32) if not finalize else None
        row_stats = x.new_empty((6, n_rows), dtype=torch.float32)
    warps = config.entropy_num_warps(block, {config.ENTROPY_STATS_BLOCK:
                                             config.ENTROPY_STATS_WARPS})  # fmt: skip
    launch(_entropy_stats_kernel, (n_rows,),
           x, *config.launched_targets(spec, t, labels), partial, row_stats,
           spec.ignore_index, spec.vocab_start, spec.vocab_size, n_rows, n_cols,
           x.stride(0), t.stride(0),
           KIND=spec.kind, FINALIZE=finalize, BLOCK=block, LANE=config.entropy_lane(block),
           **config.frames(x, t, None, block), **config.kernel_args(spec, mask, x.element_size()),
           JSD_SUMS=jsd_sums, num_warps=warps)  # fmt: skip
    return partial, row_stats


def launch_backward(spec, x, t, labels, row_stats, grad_out, n_valid, grad, accumulate,
                    mask=None):  # fmt: skip
    """The gradient into grad (added with accumulate), times grad_out (fp32, a scalar or one
    value per row). mask: the flat loss_mask or None."""
    n_rows, n_cols = x.shape
    if n_rows * n_cols == 0:  # a zero-width vocab shard: no gradient entry
        return
    block = config.tile(n_cols, min(spec.block_cap, config.ENTROPY_BACKWARD_BLOCK))
    scale, over_valid = config.grad_scale(spec, n_rows)
    frames = config.frames(x, t, grad, block)
    warps = config.entropy_num_warps(block, {config.ENTROPY_BACKWARD_BLOCK:
                                             config.ENTROPY_BACKWARD_WARPS})  # fmt: skip
    grid = (n_rows, cdiv(n_cols + frames["FRAME"] - 1, block))
    launch(_entropy_backward_kernel, grid,
           x, *config.launched_targets(spec, t, labels), row_stats, grad_out,
           n_valid if over_valid else None, grad,
           scale, spec.ignore_index, spec.vocab_start, spec.vocab_size, n_rows, n_cols,
           x.stride(0), t.stride(0), grad.stride(0), 1 if grad_out.dim() else 0,
           KIND=spec.kind, ACCUMULATE=accumulate, MEAN_OVER_VALID=over_valid, BLOCK=block,
           **frames, **config.kernel_args(spec, mask, x.element_size()),
           num_warps=warps)  # fmt: skip
