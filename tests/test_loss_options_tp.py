"""The losses' options over a vocab-sharded group (gloo, 2 processes, CPU): forward KL, JSD (its
second pass and all-reduce), temperature, loss_mask, label smoothing (the logits' sum across
shards), z-loss (the global log-sum-exp) and softcap, against the unsharded fp64 references.

Uneven shards, one of them zero-width; one spawn runs every case (tests/test_entropy_tp.py's
harness).
"""

import pytest
import torch
import torch.distributed as dist
from test_entropy_tp import _spawn

import normlab
from normlab import ref

pytestmark = pytest.mark.slow  # process start-up under the interpreter: out of make test-quick

LAYOUTS = [(40, 17), (0, 57)]
MASK = torch.tensor([True, False, True, True, True])


def _cases(n_cols):
    g = torch.Generator().manual_seed(4321)
    t = torch.randn(5, n_cols, generator=g) * 3
    labels = torch.randint(0, n_cols, (5,), generator=g)
    labels[2] = -100
    yield "forward_kl", t, {"temperature": 2.0, "loss_mask": MASK}, "mean"
    yield "jsd", t, {"beta": 0.3, "temperature": 0.5, "loss_mask": MASK}, "mean"
    yield "jsd", t, {"beta": 0.8}, "none"
    yield "reverse_kl", t, {"temperature": 0.5, "loss_mask": MASK}, "sum"
    yield "soft_cross_entropy", t, {"temperature": 4.0}, "none"
    yield "cross_entropy", labels, {"label_smoothing": 0.2, "z_loss": 1e-2, "softcap": 4.0,
                                    "loss_mask": MASK}, "mean"  # fmt: skip
    yield "cross_entropy", labels, {"label_smoothing": 0.1}, "none"


def _check_layout(rank, sizes):
    start = sum(sizes[:rank])
    cols = slice(start, start + sizes[rank])
    g = torch.Generator().manual_seed(99)
    x = torch.randn(5, sum(sizes), generator=g) * 3
    for loss, other, kw, reduction in _cases(sum(sizes)):
        fn, rfn = getattr(normlab, loss), getattr(ref, f"{loss}_ref")
        xr = x.double().requires_grad_()
        r = rfn(xr, other.double() if other.is_floating_point() else other, reduction=reduction,
                **kw)  # fmt: skip
        weight = torch.tensor([1.0, 2.0, -1.0, 0.5, 3.0]) if reduction == "none" else 2.0
        (r * weight).sum().backward()
        xs = x[:, cols].clone().requires_grad_()
        os_ = other[:, cols].contiguous() if other.is_floating_point() else other
        out = fn(xs, os_, group=dist.group.WORLD, block_cap=16, reduction=reduction, **kw)
        (out * weight).sum().backward()
        tag = f"rank {rank} shards {sizes} {loss} {kw} {reduction}"
        torch.testing.assert_close(out.double(), r.detach(), rtol=2e-5, atol=1e-5,
                                   msg=tag + " loss")  # fmt: skip
        torch.testing.assert_close(xs.grad.double(), xr.grad[:, cols], rtol=2e-5, atol=1e-6,
                                   msg=tag + " grad")  # fmt: skip


def _check_layouts(rank):
    for sizes in LAYOUTS:
        _check_layout(rank, sizes)


def test_sharded_options_match_unsharded():
    _spawn(2, _check_layouts)
