"""The vocab-sharded (tensor-parallel) path: each rank holds a contiguous slice of the vocabulary.

The split form's stats kernel stores this shard's raw row statistics; ``row_stats`` all-reduces
them (max, then the rescaled sums) into the global (6, M) row statistics its backward kernel
reads, so each rank gets the full loss and its own gradient slice. Eager only (a process group
is no custom-op argument): ``op.ShardedFunction``.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from normlab.losses import config
from normlab.losses.split import launch_stats


def row_stats(spec, x, t, labels, mask=None):
    """The global (6, M) row statistics of this rank's shard x (M, V_local), all-reduced over
    ``spec.group`` (a zero-width shard still joins the all-reduces). JSD takes a second pass
    over the shard once the global statistics are known, and a second all-reduce of its sums."""
    if x.shape[1] == 0:
        partial = no_column_partials(spec, x, labels)
    else:
        partial, _ = launch_stats(spec, x, t, labels, finalize=False, mask=mask)
    stats = combine_partials(spec, partial, labels, mask)
    if spec.kind == config.JSD:
        if x.shape[1] == 0:
            sums = torch.zeros((2, x.shape[0]), dtype=torch.float32, device=x.device)
        else:
            sums, _ = launch_stats(spec, x, t, labels, False, mask, jsd_row_stats=stats)
        dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=spec.group)
        beta = spec.options.beta
        stats[4] = sums[0]  # R_p
        # As online.jsd_loss: NaN where either distribution is.
        entropy = -beta * math.log(beta) - (1.0 - beta) * math.log(1.0 - beta)
        loss = (entropy - beta * sums[1] - (1.0 - beta) * sums[0]) + (stats[2] + stats[3]) * 0.0
        stats[5] = loss if mask is None else torch.where(mask, loss, 0.0)
    return stats


def combine_partials(spec, partial, labels, mask=None):
    """Tensor parallel: all-reduce the raw statistics into the global (6, n_rows) row statistics
    (JSD's R_p and loss are row_stats's second pass)."""
    kinds = config.KINDS
    opts = spec.options
    smooth = spec.kind == config.CE and opts is not None and opts.label_smoothing > 0
    m_x, s_x, m_t, s_t, acc = partial.unbind(0)
    maxes = torch.stack([m_x, m_t])
    dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=spec.group)
    safe = torch.where(maxes == float("-inf"), 0.0, maxes)
    raw = torch.stack([m_x, m_t])
    local = torch.where(raw == float("-inf"), 0.0, raw)
    # (2, n_rows): rescale local sums to the global max; 0 for a shard that saw only -inf.
    alpha = torch.exp(raw - safe)
    sums = torch.stack([s_x * alpha[0], s_t if smooth else s_t * alpha[1], acc])
    if spec.kind == kinds["reverse_kl"]:
        shift = (safe[1] - local[1]) - (safe[0] - local[0])
        sums[2] = alpha[0] * (acc + shift * s_x)
    elif spec.kind == kinds["forward_kl"]:
        shift = (safe[0] - local[0]) - (safe[1] - local[1])
        sums[2] = alpha[1] * (acc + shift * s_t)
    elif spec.kind == kinds["soft_cross_entropy"]:
        sums[2] = alpha[1] * (acc - (safe[0] - local[0]) * s_t)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=spec.group)
    g_sx, g_st, g_acc = sums.unbind(0)
    log_sx, log_st = g_sx.log(), g_st.log()
    kl_shift = g_acc / g_sx if spec.kind == kinds["reverse_kl"] else torch.zeros_like(g_acc)
    if spec.kind == kinds["reverse_kl"]:
        loss = kl_shift - log_sx + log_st
    elif spec.kind == kinds["soft_cross_entropy"]:
        loss = log_sx - g_acc / g_st
    elif spec.kind == kinds["forward_kl"]:
        loss = g_acc / g_st - log_st + log_sx
    elif spec.kind == config.JSD:
        loss = torch.zeros_like(g_acc)  # row_stats's second pass
    else:
        loss = (safe[0] - g_acc) + log_sx  # g_acc: x[label], from the shard that owns it
        if opts is not None:  # as online.finish_loss; g_st: the logits' sum when smoothing
            lse = safe[0] + log_sx
            if smooth:
                eps = opts.label_smoothing
                loss = (1.0 - eps) * loss + (eps * lse - eps / spec.vocab_size * g_st)
            if opts.z_loss > 0:
                loss = loss + opts.z_loss * lse * lse
        loss = torch.where(labels == spec.ignore_index, 0.0, loss)
    if mask is not None:
        loss = torch.where(mask, loss, 0.0)
    return torch.stack([safe[0], safe[1], log_sx, log_st, kl_shift, loss])


def no_column_partials(spec, x, labels):
    """The (5, n_rows) raw statistics of no column (a zero-width vocab shard, group=), as the
    stats kernel would store them: max -inf, sums 0 (a smoothed label CE's logit sum too);
    label CE's acc is x[label], owned by no column here: 0, or NaN for an out-of-range label."""
    n_rows = x.shape[0]
    partial = torch.zeros((5, n_rows), dtype=torch.float32, device=x.device)
    partial[0] = partial[2] = float("-inf")
    if spec.kind == config.CE:
        bad = (labels != spec.ignore_index) & ((labels < 0) | (labels >= spec.vocab_size))
        partial[4] = torch.where(bad, float("nan"), 0.0)
    return partial


def vocab_layout(group, n_cols):
    """(vocab_start, vocab_size) of this rank's shard: all-gathers the shard sizes (host side)."""
    sizes = [None] * dist.get_world_size(group)
    dist.all_gather_object(sizes, int(n_cols), group=group)
    rank = dist.get_rank(group)
    return sum(sizes[:rank]), sum(sizes)
