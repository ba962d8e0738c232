"""The fused form: one program per row writes its loss and its gradient in one launch.

``_{loss}_fused_kernel`` runs an online max / sum-exp pass over column tiles of
``min(next_pow2(V), block_cap)``, then the gradient pass in reverse tile order (the last tile is
reused from registers; Fast-LLM's reverse-KL issue,
https://github.com/ServiceNow/Fast-LLM/issues/497, for the block cap). The gradient (times the
reduction's 1/n) is written during the forward and saved; the backward only rescales it by
grad_output (``_entropy_grad_rescale_kernel``, in place; ``op`` decides when).
"""

from __future__ import annotations

import triton
import triton.language as tl

from normlab import _runtime
from normlab._launch import launch
from normlab.losses import config
from normlab.losses.online import (
    CE,
    RKL,
    SCE,
    fill_zero,
    finish_loss,
    grad_pass,
    load_label,
    row_frames,
    row_statistics,
)


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
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    ALIGN: tl.constexpr,  # see row_frames; > 1 only when the three row strides are equal
    FRAME: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_off, t_off, grad_off, lead = row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off
    t_row = t_ptr + t_off
    grad_row = grad_ptr + grad_off
    label = 0
    x_label = 0.0
    bad = False
    if KIND == CE:
        # Ignored rows already returned in _cross_entropy_fused_kernel.
        label, _ignored, bad = load_label(labels_ptr, row, ignore_index, 0, n_cols)
        x_label = tl.load(x_row + lead + tl.where(bad, 0, label)).to(tl.float32)
        x_label = tl.where(bad, float("nan"), x_label)
        label = label + lead
    m_x, s_x, m_t, s_t, acc, x_last, t_last, n_full, first = row_statistics(
        x_row, t_row, lead, lead + n_cols, KIND, BLOCK, LANE, ALIGN, True
    )
    loss = finish_loss(m_x, s_x, s_t, acc, x_label, KIND)
    tl.store(loss_ptr + row, loss)
    if COMPUTE_GRAD:
        grad_pass(x_row, t_row, grad_row, lead, lead + n_cols, x_last, t_last, n_full, first,
                   m_x, s_x, m_t, s_t, acc, label, bad, grad_scale, n_valid_ptr, KIND, ACCUMULATE,
                   MEAN_OVER_VALID, BLOCK, LANE, ALIGN)  # fmt: skip


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
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Reverse KL loss and gradient of one row in one launch (see module docstring)."""
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride, RKL,
               COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


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
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Soft-target cross-entropy loss and gradient of one row in one launch."""
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride, SCE,
               COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


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
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    ALIGN: tl.constexpr,
    FRAME: tl.constexpr,
):
    """Label cross-entropy loss and gradient of one row in one launch."""
    row = tl.program_id(0).to(tl.int64)
    if tl.load(labels_ptr + row) == ignore_index:  # loss 0, gradient 0, logits never read
        tl.store(loss_ptr + row, 0.0)
        if COMPUTE_GRAD and not ACCUMULATE:
            fill_zero(grad_ptr + row * grad_row_stride, 0, n_cols, BLOCK)
        return
    _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, n_valid_ptr, grad_scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride, CE,
               COMPUTE_GRAD, ACCUMULATE, MEAN_OVER_VALID, BLOCK, LANE, ALIGN, FRAME)  # fmt: skip


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


def launch_fused(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate):
    """Loss rows of x (and, with compute_grad, the gradient into grad) in one launch. Unread
    pointers (labels, n_valid, grad) may be any tensor."""
    n_rows, n_cols = x.shape
    block = config.tile(n_cols, spec.block_cap)
    scale, over_valid = config.grad_scale(spec, n_rows)
    is_ce = spec.kind == config.CE
    table = config.ENTROPY_FUSED_WARPS_LABEL if is_ce else config.ENTROPY_FUSED_WARPS
    grad_row_stride = grad.stride(0) if grad is not None else 0
    launch(_FUSED_KERNELS[spec.kind], (n_rows,),
           x, t, labels, grad if grad is not None else x, loss_rows, n_valid,
           scale, spec.ignore_index, n_cols, x.stride(0), t.stride(0), grad_row_stride,
           COMPUTE_GRAD=compute_grad, ACCUMULATE=accumulate, MEAN_OVER_VALID=over_valid,
           BLOCK=block, LANE=config.entropy_lane(block), **config.frames(x, t, grad, block),
           num_warps=config.entropy_num_warps(block, table))  # fmt: skip


def launch_rescale(grad, grad_out):
    """grad *= grad_output, in place (grad_out: a fp32 scalar or one value per row)."""
    n_rows, n_cols = grad.shape
    block = config.tile(n_cols, config.ENTROPY_RESCALE_BLOCK)
    per_sm = config.ENTROPY_RESCALE_PROGRAMS_PER_SM
    programs = min(n_rows, per_sm * _runtime.sm_count(grad.device.index))
    warps = config.entropy_num_warps(block, {config.ENTROPY_RESCALE_BLOCK:
                                             config.ENTROPY_RESCALE_WARPS})  # fmt: skip
    launch(_entropy_grad_rescale_kernel, (programs,),
           grad, grad_out, n_rows, n_cols, grad.stride(0), 1 if grad_out.dim() else 0,
           BLOCK=block, num_warps=warps)  # fmt: skip
