"""The fused form: a program writes a row's loss and its gradient, in one launch.

``_entropy_fused_kernel`` (KIND: the loss) runs an online max / sum-exp pass over column tiles of
``min(next_pow2(V), block_cap)``, then the gradient pass in reverse tile order (the last tile is
reused from registers; Fast-LLM's reverse-KL issue,
https://github.com/ServiceNow/Fast-LLM/issues/497, for the block cap). The gradient (times the
reduction's 1/n) is written during the forward and saved; the backward only rescales it by
grad_output (``_entropy_grad_rescale_kernel``, in place; ``op`` decides when). The loss rows'
sum or mean is the kernel's too: its last program adds them up (``online.finish_reduction``), so
a call is one launch. The gradient pass reads the row a second time, from L2 while few rows are in
flight: for label CE's long aligned rows a grid of a few programs an SM takes the rows from a
queue instead of one program a row (``config.entropy_fused_programs``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from normlab import _runtime
from normlab._launch import launch
from normlab.losses import config
from normlab.losses.online import (
    CE,
    JSD,
    check_label,
    counted_rows,
    fill_zero,
    finish_loss,
    finish_reduction,
    fp32_options,
    grad_pass,
    jsd_loss,
    jsd_sums,
    loss_logit,
    masked_out,
    row_frames,
    row_statistics,
    safe_max,
    tile_span,
)


@triton.jit
def _entropy_fused_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    # Pointers the flags leave unread are None: constexprs, which no launch passes.
    t_ptr,  # (n_rows, n_cols) target logits, in their own dtype (not label CE)
    labels_ptr,  # (n_rows,) int labels (label CE)
    grad_ptr,  # (n_rows, n_cols) d loss / d logits, written (or added into) here (COMPUTE_GRAD)
    loss_ptr,  # (n_rows,) fp32 per-row loss (0 where ignored or masked)
    n_valid_ptr,  # (1,) fp32 count of counted rows (MEAN_OVER_VALID without COUNT)
    out_ptr,  # () fp32 reduced loss (REDUCE; see online.finish_reduction)
    ticket_ptr,  # (2,) int32, 0 between launches: the reduction's ticket, the row queue
    grad_scale,
    ignore_index,
    n_rows,
    n_cols,
    x_row_stride,
    t_row_stride,
    grad_row_stride,
    KIND: tl.constexpr,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    COUNT: tl.constexpr,  # MEAN_OVER_VALID: count the counted rows here (online.counted_rows)
    REDUCE: tl.constexpr,  # 0: the loss rows only; 1: and their sum, 2: and their mean, at out_ptr
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
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
    THREADS: tl.constexpr = 0,  # label CE's statistics per thread (config.entropy_threads)
    PERSISTENT: tl.constexpr = False,  # fewer programs than rows, taking them from a queue
):
    """Each row's loss and gradient in one launch (see module docstring): one program a row, or
    (PERSISTENT) a grid of fewer programs that take the rows from a queue in ticket_ptr[1]
    (config.entropy_fused_programs)."""
    xparam, beta, smoothing, uniform_weight, z_loss = fp32_options(xparam, beta, smoothing,
                                                                   uniform_weight, z_loss)
    scale = tl.cast(grad_scale, tl.float32)
    if COMPUTE_GRAD and MEAN_OVER_VALID:
        scale = scale / counted_rows(n_valid_ptr, labels_ptr, mask_ptr, ignore_index, n_rows,
                                     KIND, HAS_MASK, COUNT)  # fmt: skip
    if PERSISTENT:  # a queue of rows: each program takes the next row no program has taken
        queue_ptr = ticket_ptr + 1
        row = tl.atomic_add(queue_ptr, 1, sem="relaxed")
        while row < n_rows:
            next_row = tl.atomic_add(queue_ptr, 1, sem="relaxed")  # taken before the row's work
            _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, mask_ptr,
                       tl.cast(row, tl.int64), scale, ignore_index, n_cols, x_row_stride,
                       t_row_stride, grad_row_stride, xparam, beta, smoothing, uniform_weight,
                       z_loss, KIND, COMPUTE_GRAD, ACCUMULATE, BLOCK, LANE, ALIGN, FRAME, XFORM,
                       HAS_MASK, SMOOTH, ZLOSS, THREADS)  # fmt: skip
            row = next_row
        # Each program's last take is its one past the rows: the highest is the queue's last use.
        if row == n_rows + tl.num_programs(0) - 1:
            tl.store(queue_ptr, 0)
    else:  # one program a row keeps no loop: its code as timed before the grid
        _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, mask_ptr,
                   tl.program_id(0).to(tl.int64), scale, ignore_index, n_cols, x_row_stride,
                   t_row_stride, grad_row_stride, xparam, beta, smoothing, uniform_weight, z_loss,
                   KIND, COMPUTE_GRAD, ACCUMULATE, BLOCK, LANE, ALIGN, FRAME, XFORM, HAS_MASK,
                   SMOOTH, ZLOSS, THREADS)  # fmt: skip
    if REDUCE > 0:
        finish_reduction(loss_ptr, out_ptr, ticket_ptr, tl.num_programs(0), n_rows, n_valid_ptr,
                         labels_ptr, mask_ptr, ignore_index, KIND, REDUCE, MEAN_OVER_VALID, COUNT,
                         HAS_MASK)  # fmt: skip


@triton.jit
def _fused_row(x_ptr, t_ptr, labels_ptr, grad_ptr, loss_ptr, mask_ptr, row, scale, ignore_index,
               n_cols, x_row_stride, t_row_stride, grad_row_stride, xparam, beta, smoothing,
               uniform_weight, z_loss, KIND: tl.constexpr, COMPUTE_GRAD: tl.constexpr,
               ACCUMULATE: tl.constexpr, BLOCK: tl.constexpr, LANE: tl.constexpr,
               ALIGN: tl.constexpr, FRAME: tl.constexpr, XFORM: tl.constexpr,
               HAS_MASK: tl.constexpr, SMOOTH: tl.constexpr, ZLOSS: tl.constexpr,
               THREADS: tl.constexpr):  # fmt: skip
    """Row ``row``'s loss into loss_ptr and (COMPUTE_GRAD) its gradient times ``scale``."""
    skipped = False
    if KIND == CE:
        skipped = tl.load(labels_ptr + row) == ignore_index
    if HAS_MASK:
        skipped = skipped | masked_out(mask_ptr, row)
    if skipped:  # loss 0, gradient 0, logits never read
        tl.store(loss_ptr + row, 0.0)
        if COMPUTE_GRAD and not ACCUMULATE:
            fill_zero(grad_ptr + row * grad_row_stride, 0, n_cols, BLOCK)
    else:
        x_off, t_off, grad_off, lead = row_frames(row, x_row_stride, t_row_stride,
                                                   grad_row_stride, ALIGN, FRAME)  # fmt: skip
        x_row = x_ptr + x_off
        t_row = x_row  # label CE: t_ptr is None, and the helpers never read t_row
        if KIND != CE:
            t_row = t_ptr + t_off
        label = 0
        x_label = 0.0
        bad = False
        if KIND == CE:
            label, _ignored, bad = check_label(tl.load(labels_ptr + row), ignore_index, 0, n_cols)
            x_label = tl.load(x_row + lead + tl.where(bad, 0, label)).to(tl.float32)
            x_label = tl.where(bad, float("nan"), loss_logit(x_label, xparam, XFORM))
            label = label + lead
        m_x, s_x, m_t, s_t, acc, x_last, t_last = row_statistics(
            x_row, t_row, lead, lead + n_cols, xparam, KIND, BLOCK, LANE, ALIGN, True, XFORM,
            SMOOTH, THREADS,
        )
        if KIND == JSD:  # a second pass, now that p and q are known; acc becomes R_p
            log_s_x = tl.log(s_x)
            log_s_t = tl.log(s_t)
            acc, r_q = jsd_sums(x_row, t_row, lead, lead + n_cols, safe_max(m_x), safe_max(m_t),
                                 log_s_x, log_s_t, xparam, beta, BLOCK, LANE, ALIGN,
                                 XFORM)  # fmt: skip
            loss = jsd_loss(acc, r_q, log_s_x, log_s_t, beta)
        else:
            loss = finish_loss(m_x, s_x, s_t, acc, x_label, smoothing, uniform_weight, z_loss,
                               KIND, SMOOTH, ZLOSS)  # fmt: skip
        tl.store(loss_ptr + row, loss)
        if COMPUTE_GRAD:
            n_full, first = tile_span(lead, lead + n_cols, BLOCK, ALIGN, True)
            grad_pass(x_row, t_row, grad_ptr + grad_off, lead, lead + n_cols, x_last, t_last,
                      n_full, first, m_x, s_x, m_t, s_t, acc, label, bad, scale, xparam, beta,
                      smoothing, uniform_weight, z_loss, KIND, ACCUMULATE, BLOCK, LANE, ALIGN,
                      XFORM, SMOOTH, ZLOSS)  # fmt: skip


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


def launch_fused(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate,
                 mask=None, out=None, ticket=None, *, programs=None):  # fmt: skip
    """Loss rows of x (and, with compute_grad, the gradient into grad) in one launch; with
    ``out`` (a () fp32 tensor) and ``ticket`` (``op._reduction_buffers``': its row queue too),
    also their sum or mean (spec.reduction) into ``out``. ``n_valid``: the fp32 count a mean
    over counted rows divides by, or None: the kernel counts (``config.count_in_kernel``).
    ``t`` and ``labels`` as ``op._rows`` gives them (the one a kind does not read is launched as
    None); mask: the flat loss_mask or None.
    ``programs``: the grid (None: ``config.entropy_fused_programs``' for a call that
    ``config.takes_fused_grid`` and has a ticket; else one program a row). Fewer programs than
    rows take them from the ticket's queue."""
    n_rows, n_cols = x.shape
    if programs is None and ticket is not None and config.takes_fused_grid(spec, compute_grad):
        device = x.device.index
        programs = config.entropy_fused_programs(n_rows, n_cols, x.element_size(),
                                                 config.rows_seen_aligned(x, t, grad),
                                                 _runtime.sm_count(device),
                                                 _runtime.l2_bytes(device))  # fmt: skip
    programs = n_rows if programs is None else max(1, min(programs, n_rows))
    persistent = programs < n_rows
    if persistent and ticket is None:  # a grid asked for without the reduction's ticket
        ticket = torch.zeros(2, dtype=torch.int32, device=x.device)
    block = config.tile(n_cols, spec.block_cap)
    scale, over_valid = config.grad_scale(spec, n_rows)
    is_ce = spec.kind == config.CE
    table = config.ENTROPY_FUSED_WARPS_LABEL if is_ce else config.ENTROPY_FUSED_WARPS
    reduce = 0 if out is None else config.REDUCE_CODES[spec.reduction]
    options = {"num_warps": config.entropy_num_warps(block, table)}
    maxnreg = config.ENTROPY_FUSED_MAXNREG.get(block)
    if maxnreg is not None:  # a register cap per thread (none by default: config)
        options["maxnreg"] = maxnreg
    extra = config.kernel_args(spec, mask, x.element_size())
    threads = config.entropy_threads(spec.kind, block, options["num_warps"], x.element_size(),
                                     extra.get("XFORM", 0) >= config.XFORMS["softcap"])  # fmt: skip
    # Absent tensors go as None: constexprs, where a placeholder would cost a pointer a launch.
    launch(_entropy_fused_kernel, (programs,),
           x, *config.launched_targets(spec, t, labels), grad, loss_rows, n_valid, out, ticket,
           scale, spec.ignore_index, n_rows, n_cols, x.stride(0), t.stride(0),
           grad.stride(0) if grad is not None else 0,
           KIND=spec.kind, COMPUTE_GRAD=compute_grad, ACCUMULATE=accumulate,
           MEAN_OVER_VALID=over_valid, COUNT=over_valid and n_valid is None, REDUCE=reduce,
           BLOCK=block, LANE=config.entropy_lane(block), **config.frames(x, t, grad, block),
           **extra, THREADS=threads, PERSISTENT=persistent, **options)  # fmt: skip


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
