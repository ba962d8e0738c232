"""Tensor-parallel (vocab-sharded) split path on CPU: gloo, 2 and 3 processes, uneven shards
(one of them zero-width), every reduction, the gradient and grad_accumulate.

Every rank builds the same full tensors from one seed, keeps its contiguous vocab slice, and
checks the sharded loss and its gradient slice against the unsharded fp64 reference. One spawn
per world size runs every case, since process start-up dominates under the interpreter.
"""

import functools
import os
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import normlab
from normlab import ref

pytestmark = pytest.mark.slow  # process start-up under the interpreter: out of make test-quick

# world size -> shard sizes: uneven, one shard narrower than a 16-wide tile, and one of width
# 0 (that rank's statistics are those of no column; it still joins the all-reduces).
LAYOUTS = {2: [(130, 70), (0, 200)], 3: [(90, 7, 103)]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cases(sizes):
    """(loss, reduction, dtype) cases with full inputs, identical on every rank."""
    n_cols = sum(sizes)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(6, n_cols, generator=g) * 3
    t = torch.randn(6, n_cols, generator=g) * 3
    x[4] *= 3000  # a row with |logits| ~ 1e4
    # A row far below exp's range whose first shard is all -inf: that shard's sums must be
    # rescaled by exactly 0 (exp(0 - max) overflows fp32).
    x[5] -= 1000.0
    t[5] -= 1000.0
    x[5, : sizes[0]] = t[5, : sizes[0]] = float("-inf")
    labels = torch.randint(0, n_cols, (6,), generator=g)
    labels[1] = -100
    labels[3] = sizes[0]  # the first column of the second shard
    labels[5] = sizes[0] + 1
    for loss, other in (("reverse_kl", t), ("soft_cross_entropy", t), ("cross_entropy", labels)):
        for reduction in ("mean", "sum", "none"):
            yield loss, reduction, x, other


def _worker(rank, world, port, check, errors):
    """One process of a gloo world: check(rank), its traceback put in errors."""
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
        )
        check(rank)
    except BaseException:
        errors.put(f"rank {rank}: {traceback.format_exc()}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _check_layout(rank, sizes):
    start = sum(sizes[:rank])
    cols = slice(start, start + sizes[rank])
    fns = {"reverse_kl": (normlab.reverse_kl, ref.reverse_kl_ref),
           "soft_cross_entropy": (normlab.soft_cross_entropy, ref.soft_cross_entropy_ref),
           "cross_entropy": (normlab.cross_entropy, ref.cross_entropy_ref)}  # fmt: skip
    for loss, reduction, x, other in _cases(sizes):
        fn, rfn = fns[loss]
        xr = x.double().requires_grad_()
        r = rfn(xr, other.double() if other.is_floating_point() else other, reduction=reduction)
        # The reference gradient for grad_output 1 (what grad_accumulate adds), then weighted.
        (unit_grad,) = torch.autograd.grad(r.sum(), xr, retain_graph=True)
        weight = (
            torch.tensor([1.0, 2.0, -1.0, 0.5, 3.0, 1.5])
            if reduction == "none"
            else torch.tensor(3.0)
        )
        (r * weight.double()).sum().backward()
        xs = x[:, cols].clone().requires_grad_()
        os_ = other[:, cols].contiguous() if other.is_floating_point() else other
        out = fn(xs, os_, group=dist.group.WORLD, block_cap=16, reduction=reduction)
        (out * weight).sum().backward()
        tag = f"rank {rank} shards {sizes} {loss} {reduction}"
        torch.testing.assert_close(
            out.double(), r.detach(), rtol=2e-5, atol=1e-5, msg=tag + " loss"
        )
        # fp32 grad vs fp64: row 4 (|logits| ~ 1e4) reverse KL keeps an fp32 floor ~ ulp(KL).
        atol = 4e-3 if loss == "reverse_kl" else 1e-6
        torch.testing.assert_close(
            xs.grad.double(), xr.grad[:, cols], rtol=2e-5, atol=atol, msg=tag + " grad"
        )
        # grad_accumulate on the split path adds the gradient slice (grad_output 1: one per row
        # for "none") into a buffer.
        buf = torch.ones_like(xs)
        fn(xs.detach(), os_, group=dist.group.WORLD, block_cap=16, reduction=reduction,
           grad_accumulate=buf)  # fmt: skip
        expect = 1.0 + unit_grad[:, cols]
        torch.testing.assert_close(
            buf.double(), expect, rtol=2e-5, atol=atol, msg=tag + " accumulate"
        )
    # The forms that write the gradient in the forward cannot all-reduce mid-kernel: a clear
    # error, not a wrong answer.
    for form in ("fused", "chunked"):
        try:
            normlab.reverse_kl(x[:, cols], x[:, cols], form=form, group=dist.group.WORLD)
            raise AssertionError(f"{form} + group did not raise")
        except ValueError as e:
            assert "split" in str(e)


def _spawn(world, check):
    """check(rank) in each of ``world`` processes; every rank's failure reported."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    errors = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_worker, args=(world, _free_port(), check, errors), nprocs=world, join=True)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, "\n".join(found)


def _check_layouts(layouts, rank):
    for sizes in layouts:
        _check_layout(rank, sizes)


@pytest.mark.parametrize("world", sorted(LAYOUTS))
def test_sharded_vocab_matches_unsharded(world):
    _spawn(world, functools.partial(_check_layouts, LAYOUTS[world]))


SUBGROUP_SIZES = (30, 50)  # the shards of group ranks 0 and 1 (global ranks 1 and 2)


def _check_subgroup(rank):
    """Global rank 0 stays out of the group [1, 2]: a shard's place in the vocabulary is its
    rank in the group, not in the world."""
    group = dist.new_group(ranks=[1, 2])
    if rank == 0:
        return
    g_rank = dist.get_rank(group)
    start = sum(SUBGROUP_SIZES[:g_rank])
    cols = slice(start, start + SUBGROUP_SIZES[g_rank])
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, sum(SUBGROUP_SIZES), generator=g) * 3
    t = torch.randn(4, sum(SUBGROUP_SIZES), generator=g) * 3
    labels = torch.tensor([3, 31, 79, -100])  # in either shard, and one ignored
    for name, other in (("cross_entropy", labels), ("reverse_kl", t)):
        xd = x.double().requires_grad_()
        full = other.double() if name == "reverse_kl" else other
        want = getattr(ref, f"{name}_ref")(xd, full)
        want.backward()
        xs = x[:, cols].clone().requires_grad_()
        shard = other[:, cols].contiguous() if name == "reverse_kl" else other
        loss = getattr(normlab, name)(xs, shard, group=group, block_cap=16)
        loss.backward()
        torch.testing.assert_close(loss.double(), want.detach(), rtol=2e-5, atol=1e-5)
        torch.testing.assert_close(xs.grad.double(), xd.grad[:, cols], rtol=2e-5, atol=1e-6)


def test_sharded_loss_on_a_subgroup_takes_its_group_ranks():
    _spawn(3, _check_subgroup)
