"""The vocab-sharded (tensor-parallel) path: each rank holds a contiguous slice of the vocabulary.

The split form's stats kernel stores this shard's raw row statistics; ``row_stats`` all-reduces
them (max, then the rescaled sums) into the global (6, M) row statistics its backward kernel
reads, so each rank gets the full loss and its own gradient slice. Eager only (a process group
is no custom-op argument): ``op.ShardedFunction``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from normlab.losses import config
from normlab.losses.split import launch_stats


def row_stats(spec, x, t, labels):
    """The global (6, M) row statistics of this rank's shard x (M, V_local), all-reduced over
    ``spec.group`` (a zero-width shard still joins the all-reduces)."""
    if x.shape[1] == 0:
        partial = no_column_partials(spec, x, labels)
    else:
        partial, _ = launch_stats(spec, x, t, labels, finalize=False)
    return combine_partials(spec, partial, labels)


def combine_partials(spec, partial, labels):
    """Tensor parallel: all-reduce the raw statistics into the global (6, n_rows) row statistics."""
    m_x, s_x, m_t, s_t, acc = partial.unbind(0)
    maxes = torch.stack([m_x, m_t])
    dist.all_reduce(maxes, op=dist.ReduceOp.MAX, group=spec.group)
    safe = torch.where(maxes == float("-inf"), 0.0, maxes)
    raw = torch.stack([m_x, m_t])
    local = torch.where(raw == float("-inf"), 0.0, raw)
    # (2, n_rows): rescale local sums to the global max; 0 for a shard that saw only -inf.
    alpha = torch.exp(raw - safe)
    sums = torch.stack([s_x * alpha[0], s_t * alpha[1], acc])
    if spec.kind == config.KINDS["reverse_kl"]:
        shift = (safe[1] - local[1]) - (safe[0] - local[0])
        sums[2] = alpha[0] * (acc + shift * s_x)
    elif spec.kind == config.KINDS["soft_cross_entropy"]:
        sums[2] = alpha[1] * (acc - (safe[0] - local[0]) * s_t)
    dist.all_reduce(sums, op=dist.ReduceOp.SUM, group=spec.group)
    g_sx, g_st, g_acc = sums.unbind(0)
    log_sx, log_st = g_sx.log(), g_st.log()
    kl_shift = g_acc / g_sx if spec.kind == config.KINDS["reverse_kl"] else torch.zeros_like(g_acc)
    if spec.kind == config.KINDS["reverse_kl"]:
        loss = kl_shift - log_sx + log_st
    elif spec.kind == config.KINDS["soft_cross_entropy"]:
        loss = log_sx - g_acc / g_st
    else:
        loss = torch.where(labels == spec.ignore_index, 0.0, (safe[0] - g_acc) + log_sx)
    return torch.stack([safe[0], safe[1], log_sx, log_st, kl_shift, loss])


def no_column_partials(spec, x, labels):
    """The (5, n_rows) raw statistics of no column (a zero-width vocab shard, group=), as the
    stats kernel would store them: max -inf, sums 0; label CE's acc is x[label], owned by no
    column here: 0, or NaN for an out-of-range label."""
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
