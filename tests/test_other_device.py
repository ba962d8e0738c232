"""Inputs on a GPU that is not the current one (Hugging Face's ``device_map="auto"`` runs layers
on cuda:1 while cuda:0 stays current) launch on their own GPU: every public op enters
``_launch.on_device`` then, and only then. Two GPUs are emulated here: every input lives on
"GPU 1", "GPU 0" is current until ``on_device``, and each interpreted launch notes the current
one. ``benchmarks/gpu_check.py --only devices`` runs the same calls on a machine with two GPUs.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from triton.runtime import interpreter

import normlab
from normlab import _launch, ref
from tests.helpers import assert_close


class TwoGPUs:
    def __init__(self, current: int):
        self.current = current
        self.entered = 0  # on_device contexts entered
        self.launches: list[int] = []  # the current GPU at each launch


@pytest.fixture
def gpus(monkeypatch):
    g = TwoGPUs(current=0)
    monkeypatch.setattr(_launch, "SEVERAL_GPUS", True)
    monkeypatch.setattr(_launch, "off_device",
                        lambda t: isinstance(t, torch.Tensor) and g.current != 1)  # fmt: skip

    @contextlib.contextmanager
    def on_device(t):
        assert isinstance(t, torch.Tensor)
        g.entered += 1
        before, g.current = g.current, 1
        try:
            yield
        finally:
            g.current = before

    monkeypatch.setattr(_launch, "on_device", on_device)
    run = interpreter.InterpretedFunction.run

    def noting_run(self, *args, **kwargs):
        g.launches.append(g.current)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(interpreter.InterpretedFunction, "run", noting_run)
    return g


NORM_CALLS = {
    "rms_norm": (lambda x, r, w, b: normlab.rms_norm(x, w, 1e-6),
                 lambda x, r, w, b: ref.rms_norm(x, w, 1e-6)),
    "layer_norm": (lambda x, r, w, b: normlab.layer_norm(x, w, b, 1e-5),
                   lambda x, r, w, b: ref.layer_norm(x, w, b, 1e-5)),
    "add_rms_norm": (lambda x, r, w, b: normlab.add_rms_norm(x, r, w, 1e-6)[0],
                     lambda x, r, w, b: ref.add_rms_norm(x, r, w, 1e-6)[0]),
    "add_layer_norm": (lambda x, r, w, b: normlab.add_layer_norm(x, r, w, b, 1e-5)[0],
                       lambda x, r, w, b: ref.add_layer_norm(x, r, w, b, 1e-5)[0]),
}  # fmt: skip


@pytest.mark.parametrize("name", NORM_CALLS)
def test_norm_on_another_gpu_launches_there(gpus, name):
    call, want = NORM_CALLS[name]
    x, r = torch.randn(7, 33), torch.randn(7, 33)
    w, b = torch.randn(33), torch.randn(33)
    y = call(x, r, w, b)
    assert gpus.entered == 1
    assert gpus.launches and set(gpus.launches) == {1}, gpus.launches
    assert gpus.current == 0  # left as it was
    assert_close(y, want(x.double(), r.double(), w.double(), b.double()).float())


@pytest.mark.parametrize("name", NORM_CALLS)
def test_norm_on_the_current_gpu_enters_nothing(gpus, name):
    gpus.current = 1
    call, want = NORM_CALLS[name]
    x, r = torch.randn(5, 19), torch.randn(5, 19)
    w, b = torch.randn(19), torch.randn(19)
    y = call(x, r, w, b)
    assert gpus.entered == 0 and set(gpus.launches) == {1}
    assert_close(y, want(x.double(), r.double(), w.double(), b.double()).float())


LOSS_CALLS = {
    "cross_entropy": (lambda x, t, labels: normlab.cross_entropy(x, labels, label_smoothing=0.1),
                      lambda x, t, labels: ref.cross_entropy_ref(x, labels,
                                                                 label_smoothing=0.1)),
    "reverse_kl": (lambda x, t, labels: normlab.reverse_kl(x, t, temperature=2.0),
                   lambda x, t, labels: ref.reverse_kl_ref(x, t, temperature=2.0)),
    "forward_kl": (lambda x, t, labels: normlab.forward_kl(x, t),
                   lambda x, t, labels: ref.forward_kl_ref(x, t)),
    "jsd": (lambda x, t, labels: normlab.jsd(x, t, beta=0.3),
            lambda x, t, labels: ref.jsd_ref(x, t, beta=0.3)),
    "soft_cross_entropy": (lambda x, t, labels: normlab.soft_cross_entropy(x, t),
                           lambda x, t, labels: ref.soft_cross_entropy_ref(x, t)),
}  # fmt: skip


@pytest.mark.parametrize("name", LOSS_CALLS)
def test_loss_on_another_gpu_launches_there(gpus, name):
    call, want = LOSS_CALLS[name]
    x, t = torch.randn(6, 129, requires_grad=True), torch.randn(6, 129)
    labels = torch.randint(0, 129, (6,))
    loss = call(x, t, labels)  # with a gradient: the forward writes it
    assert gpus.entered == 1
    assert gpus.launches and set(gpus.launches) == {1}, gpus.launches
    assert gpus.current == 0
    (grad,) = torch.autograd.grad(loss, x)
    xd = x.detach().double().requires_grad_()
    want_loss = want(xd, t.double(), labels)
    (want_grad,) = torch.autograd.grad(want_loss, xd)
    assert_close(loss, want_loss.float(), reduce_len=x.numel())
    assert_close(grad, want_grad.float())


def test_off_device_of_what_is_not_on_a_gpu():
    assert not _launch.off_device(torch.zeros(2))  # a CPU tensor: no GPU of its own
    assert not _launch.off_device([1.0, 2.0])  # not a tensor: the op's own error follows
