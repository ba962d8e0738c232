"""The chunked form: a row cut into chunks of whole tiles, one program per chunk.

Each program folds its chunk into raw statistics and stores them; the row's programs meet at a
per-row counter (in-kernel, on a GPU), merge the chunk statistics and write their chunk's
gradient, so the re-read of a chunk is a short L2 round trip and not the whole row's. The
gradient is saved and rescaled as in the fused form. Layout: ``config.chunk_layout``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from normlab import _launch, _runtime
from normlab._host import next_pow2
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
    fold_stats,
    fp32_options,
    grad_pass,
    jsd_loss,
    jsd_sums,
    load_edge_tile,
    loss_logit,
    masked_out,
    row_frames,
    row_statistics,
    safe_max,
    store_raw_stats,
    tile_cols,
    tile_span,
)


@triton.jit
def _merge_chunk_stats(stats_ptr, base, n_slots, n_chunks, KIND: tl.constexpr,
                       CHUNKS_POW2: tl.constexpr, SMOOTH: tl.constexpr):  # fmt: skip
    """Fold the raw statistics of a row's n_chunks column chunks into the row's (fold_stats).

    stats_ptr: (5, n_slots) fp32 m_x, s_x, m_t, s_t, acc (JSD: 7, its chunk sums of jsd_sums
    after them); the row's chunks sit at base + k. Loads bypass L1 (.cg): other
    programs wrote them during this launch.
    """
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < n_chunks
    p = stats_ptr + base + ks
    m_xk = tl.load(p, mask=kmask, other=float("-inf"), cache_modifier=".cg")
    s_xk = tl.load(p + n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    if KIND == CE:
        m_tk = m_xk
        s_tk = s_xk
        if SMOOTH:  # the chunks' logit sums
            s_tk = tl.load(p + 3 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
        acc_k = s_xk
    else:
        m_tk = tl.load(p + 2 * n_slots, mask=kmask, other=float("-inf"), cache_modifier=".cg")
        s_tk = tl.load(p + 3 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
        acc_k = tl.load(p + 4 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    return fold_stats(m_xk, s_xk, m_tk, s_tk, acc_k, kmask, KIND, SMOOTH)


@triton.jit
def _merge_chunk_sums(stats_ptr, base, n_slots, n_chunks, CHUNKS_POW2: tl.constexpr):
    """JSD: the row's jsd_sums, summed over its chunks (stats rows 5 and 6)."""
    ks = tl.arange(0, CHUNKS_POW2)
    kmask = ks < n_chunks
    p = stats_ptr + base + ks
    r_p = tl.load(p + 5 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    r_q = tl.load(p + 6 * n_slots, mask=kmask, other=0.0, cache_modifier=".cg")
    return tl.sum(r_p, axis=0), tl.sum(r_q, axis=0)


@triton.jit
def _wait_for_row(sync_ptr, row, target):
    """Publish this program's stores and wait until the row's counter reaches target (PHASE 3)."""
    # Every thread's stores happen before the release that publishes them.
    tl.debug_barrier()
    tl.atomic_add(sync_ptr + 1 + row, 1, sem="release")
    done = tl.atomic_add(sync_ptr + 1 + row, 0, sem="acquire")
    while done < target:
        done = tl.atomic_add(sync_ptr + 1 + row, 0, sem="acquire")
    tl.debug_barrier()


@triton.jit
def _entropy_chunked_kernel(
    x_ptr,  # (n_rows, n_cols) logits
    # Pointers the flags leave unread are None: constexprs, which no launch passes.
    t_ptr,  # (n_rows, n_cols) target logits (not label CE)
    labels_ptr,  # (n_rows,) int labels (label CE)
    grad_ptr,  # (n_rows, n_cols) d loss / d logits, written (or added into) here (COMPUTE_GRAD)
    loss_ptr,  # (n_rows,) fp32 per-row loss
    n_valid_ptr,  # (1,) fp32 counted row count (MEAN_OVER_VALID without COUNT)
    out_ptr,  # () fp32 reduced loss (REDUCE; see online.finish_reduction)
    ticket_ptr,  # (1,) int32, 0 between launches (REDUCE)
    stats_ptr,  # (5, n_rows * n_chunks) fp32 raw statistics of each (row, chunk); JSD: (7, ...)
    # (1 + n_rows,) int32 zeros (PHASE 3): [0] the ticket counter, [1 + r] row r's chunks done
    sync_ptr,
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
    # 1: statistics only, 2: gradient only, 3: both, meeting in-kernel; 4: JSD's sums only
    PHASE: tl.constexpr,
    COMPUTE_GRAD: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    MEAN_OVER_VALID: tl.constexpr,
    COUNT: tl.constexpr,  # MEAN_OVER_VALID: count the counted rows here (online.counted_rows)
    # 0: the loss rows only; 1: and their sum, 2: and their mean, at out_ptr (the last launch:
    # chunk 0 of each row takes a ticket)
    REDUCE: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,  # columns per lane of the running statistics (config.entropy_lane)
    CHUNKS_POW2: tl.constexpr,
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
):
    """Chunked form: n_chunks programs share one row, each owning a chunk of whole tiles.

    Each program folds its chunk into raw statistics and stores them; the row's programs then
    wait for each other at a per-row counter, merge the n_chunks statistics and write the
    gradient of their own chunk. The chunk's last tile is still in registers and the others were
    read moments ago, so the gradient pass re-reads them from L2, where the fused form's
    whole-row re-read goes back to DRAM once the rows in flight overflow L2 (5 passes of
    traffic instead of 3). One tile per chunk would re-read nothing, but every program pays a
    chain of round trips (ticket, loads, publish, wait, merge): measured slower (config).

    Forward progress (PHASE 3): a program takes its (row, chunk) from a global ticket counter
    when it starts, so the tickets taken are always a prefix of row-major order. Every running
    program waits only on its own row, and only the last row of the prefix can be waiting for
    a program that has not started: at most n_chunks - 1 programs wait on it, so whenever more
    than n_chunks - 1 programs fit on the GPU, one more can start and take the next ticket.
    The Triton interpreter runs one program at a time and would wait forever: it runs PHASE 1
    then PHASE 2 as two launches (program id = ticket), the same arithmetic without the wait.

    Chunks cut the row's frame (see row_frames): chunk 0 starts lead columns before the row, and
    with ALIGN > 1 n_chunks covers n_cols + FRAME - 1 columns, so a row's last chunk may be empty
    (its statistics are those of no column, which weigh 0 in the merge).

    JSD meets twice: after the merge each program takes its chunk's jsd_sums (stats rows 5-6),
    the row's programs wait again (the counter at 2 n_chunks) and add them up; the interpreter
    runs PHASE 1, 4 (those sums) and 2.
    """
    xparam, beta, smoothing, uniform_weight, z_loss = fp32_options(xparam, beta, smoothing,
                                                                   uniform_weight, z_loss)
    if PHASE == 3:
        item = tl.atomic_add(sync_ptr, 1)
    else:
        item = tl.program_id(0)
    row = (item // n_chunks).to(tl.int64)
    chunk = item % n_chunks
    start = (chunk * chunk_tiles + tl.minimum(chunk, n_long)) * BLOCK
    chunk_cols = (chunk_tiles + (chunk < n_long).to(tl.int32)) * BLOCK
    x_off, t_off, grad_off, lead = row_frames(row, x_row_stride, t_row_stride, grad_row_stride,
                                               ALIGN, FRAME)  # fmt: skip
    x_row = x_ptr + x_off + start
    t_row = x_row  # label CE: t_ptr is None, and the helpers never read t_row
    if KIND != CE:
        t_row = t_ptr + t_off + start
    grad_row = x_row  # without COMPUTE_GRAD grad_ptr is None, and grad_row is never read
    if COMPUTE_GRAD:
        grad_row = grad_ptr + grad_off + start
    lo = tl.maximum(lead - start, 0)  # the chunk's own columns are [lo, hi)
    hi = tl.minimum(chunk_cols, lead + n_cols - start)
    label = 0
    x_label = 0.0
    bad = False
    skipped = False
    if KIND == CE:
        label, skipped, bad = check_label(tl.load(labels_ptr + row), ignore_index, 0, n_cols)
    if HAS_MASK:
        skipped = skipped | masked_out(mask_ptr, row)
    if (KIND == CE) or HAS_MASK:
        if skipped:  # every chunk of the row sees it: no one waits, nothing is read
            if (PHASE != 2) and (PHASE != 4) and (chunk == 0):
                tl.store(loss_ptr + row, 0.0)
            if (PHASE != 1) and (PHASE != 4) and COMPUTE_GRAD and not ACCUMULATE:
                fill_zero(grad_row, lo, hi, BLOCK)
            if REDUCE > 0:
                if chunk == 0:
                    finish_reduction(loss_ptr, out_ptr, ticket_ptr, n_rows, n_rows, n_valid_ptr,
                                     labels_ptr, mask_ptr, ignore_index, KIND, REDUCE,
                                     MEAN_OVER_VALID, COUNT, HAS_MASK)  # fmt: skip
            return
    if KIND == CE:
        if chunk == 0:
            x_label = tl.load(x_ptr + row * x_row_stride + tl.where(bad, 0, label))
            x_label = tl.where(bad, float("nan"), loss_logit(x_label.to(tl.float32), xparam,
                                                            XFORM))  # fmt: skip
        label = label + lead - start
    n_slots = n_rows * n_chunks
    n_full, first = tile_span(lo, hi, BLOCK, ALIGN, False)
    if (PHASE == 1) or (PHASE == 3):
        m_x, s_x, m_t, s_t, acc, x_last, t_last = row_statistics(
            x_row, t_row, lo, hi, xparam, KIND, BLOCK, LANE, ALIGN, False, XFORM, SMOOTH,
            THREADS,
        )
        store_raw_stats(stats_ptr, row * n_chunks + chunk, n_slots, m_x, s_x, m_t, s_t, acc)
    else:
        x_last, t_last = load_edge_tile(x_row, t_row, n_full * BLOCK + tile_cols(BLOCK, LANE),
                                         lo, hi, xparam, KIND, "evict_first", ALIGN,
                                         XFORM)  # fmt: skip
    if PHASE == 3:
        _wait_for_row(sync_ptr, row, n_chunks)
    if PHASE != 1:
        m_x, s_x, m_t, s_t, acc = _merge_chunk_stats(
            stats_ptr, row * n_chunks, n_slots, n_chunks, KIND, CHUNKS_POW2, SMOOTH
        )
        if KIND == JSD:
            log_s_x = tl.log(s_x)
            log_s_t = tl.log(s_t)
            if PHASE != 2:
                r_p, r_q = jsd_sums(x_row, t_row, lo, hi, safe_max(m_x), safe_max(m_t), log_s_x,
                                    log_s_t, xparam, beta, BLOCK, LANE, ALIGN, XFORM)  # fmt: skip
                slot = stats_ptr + row * n_chunks + chunk
                tl.store(slot + 5 * n_slots, r_p)
                tl.store(slot + 6 * n_slots, r_q)
            if PHASE == 3:
                _wait_for_row(sync_ptr, row, 2 * n_chunks)
            if PHASE != 4:  # acc becomes R_p (grad_pass)
                acc, r_q = _merge_chunk_sums(stats_ptr, row * n_chunks, n_slots, n_chunks,
                                              CHUNKS_POW2)  # fmt: skip
        if PHASE != 4:
            if chunk == 0:
                if KIND == JSD:
                    loss = jsd_loss(acc, r_q, log_s_x, log_s_t, beta)
                else:
                    loss = finish_loss(m_x, s_x, s_t, acc, x_label, smoothing, uniform_weight,
                                       z_loss, KIND, SMOOTH, ZLOSS)  # fmt: skip
                tl.store(loss_ptr + row, loss)
            if COMPUTE_GRAD:
                scale = tl.cast(grad_scale, tl.float32)
                if MEAN_OVER_VALID:
                    scale = scale / counted_rows(n_valid_ptr, labels_ptr, mask_ptr, ignore_index,
                                                 n_rows, KIND, HAS_MASK, COUNT)  # fmt: skip
                grad_pass(x_row, t_row, grad_row, lo, hi, x_last, t_last, n_full, first, m_x,
                           s_x, m_t, s_t, acc, label, bad, scale, xparam, beta, smoothing,
                           uniform_weight, z_loss, KIND, ACCUMULATE, BLOCK, LANE, ALIGN, XFORM,
                           SMOOTH, ZLOSS)  # fmt: skip
            if REDUCE > 0:
                if chunk == 0:
                    finish_reduction(loss_ptr, out_ptr, ticket_ptr, n_rows, n_rows, n_valid_ptr,
                                     labels_ptr, mask_ptr, ignore_index, KIND, REDUCE,
                                     MEAN_OVER_VALID, COUNT, HAS_MASK)  # fmt: skip


def launch_chunked(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate,
                   mask=None, out=None, ticket=None, *, phases=None,
                   tiles_per_chunk=None):  # fmt: skip
    """Chunked form. ``phases``: 1 = one launch that meets in-kernel (the GPU default), 2 = a
    statistics launch then a gradient launch (the interpreter's only option: see the kernel;
    JSD's sums launch between them). Other arguments as ``fused.launch_fused``'s."""
    n_rows, n_cols = x.shape
    block = config.tile(n_cols, spec.block_cap)
    tiles = config.entropy_chunk_tiles(block) if tiles_per_chunk is None else tiles_per_chunk
    frames = config.frames(x, t, grad, block)
    layout = config.chunk_layout(n_cols + frames["FRAME"] - 1, block, tiles,
                                 _runtime.sm_count(x.device.index),
                                 n_rows if tiles_per_chunk is None else 0)  # fmt: skip
    n_chunks = layout.n_chunks
    n_stats = 7 if spec.kind == config.JSD else 5  # JSD: and its chunk sums
    if n_stats * n_rows * n_chunks >= 2**31:  # tickets and statistics offsets are int32
        raise ValueError(
            f"chunked form: {n_rows} rows x {n_chunks} chunks is too many; use form='fused'"
        )
    phases = (2 if _runtime.INTERPRET else 1) if phases is None else phases
    if phases == 1 and _runtime.INTERPRET:
        raise ValueError("chunked form: the interpreter cannot run the one-launch version")
    scale, over_valid = config.grad_scale(spec, n_rows)
    stats = _launch.buffer((n_stats, n_rows * n_chunks), torch.float32, x.device)
    # The tickets and per-row counters start at 0 (one memset); two launches need none.
    sync = _launch.buffer((1 + n_rows,), torch.int32, x.device, zero=True) if phases == 1 else None
    maxnreg = config.ENTROPY_CHUNKED_MAXNREG.get(block)
    options = {"num_warps": config.ENTROPY_CHUNKED_WARPS}
    if maxnreg is not None:  # a register cap per thread: more programs resident per SM
        options["maxnreg"] = maxnreg
    grad_row_stride = grad.stride(0) if grad is not None else 0
    if phases == 1:
        launches = (3,)
    else:
        launches = (1, 4, 2) if n_stats == 7 else (1, 2)
    extra = config.kernel_args(spec, mask, x.element_size())
    threads = config.entropy_threads(spec.kind, block, options["num_warps"], x.element_size())
    reduce = 0 if out is None else config.REDUCE_CODES[spec.reduction]
    for phase in launches:
        launch(_entropy_chunked_kernel, (n_rows * n_chunks,),
               x, *config.launched_targets(spec, t, labels), grad, loss_rows, n_valid, out,
               ticket, stats, sync, scale, spec.ignore_index, n_rows, n_cols, n_chunks,
               layout.chunk_tiles, layout.n_long, x.stride(0), t.stride(0), grad_row_stride,
               KIND=spec.kind, PHASE=phase, COMPUTE_GRAD=compute_grad, ACCUMULATE=accumulate,
               MEAN_OVER_VALID=over_valid, COUNT=over_valid and n_valid is None,
               REDUCE=reduce if phase == launches[-1] else 0, BLOCK=block,
               LANE=config.entropy_lane(block), CHUNKS_POW2=next_pow2(n_chunks), **frames,
               **extra, THREADS=threads, **options)  # fmt: skip
