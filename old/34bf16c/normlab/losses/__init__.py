"""Reverse / forward KL, JSD, soft-target and label cross-entropy over a vocabulary: one family,
read top to bottom.

``config`` (the planner: forms, tiles, frames, chunks, form="auto", the options' kernel
arguments) -> ``online`` (the shared @triton.jit helpers: online statistics, frames, the
gradient pass, the options) -> the three forms, each its kernels and launchers: ``fused`` (one
program per row), ``chunked`` (a row's chunks meet at a per-row counter) and ``split`` (stats
kernel, then backward kernel) -> ``sharded`` (the split form over a vocab-sharded
torch.distributed group) -> ``op`` (validation, autograd, torch.compile, the public functions).
"""

from normlab.losses.op import (
    FORMS,
    cross_entropy,
    forward_kl,
    jsd,
    reverse_kl,
    soft_cross_entropy,
)

__all__ = ["FORMS", "cross_entropy", "forward_kl", "jsd", "reverse_kl", "soft_cross_entropy"]
