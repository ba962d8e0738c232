"""Adversarial checks of the losses' public API: arguments whose value torch would reject or
read differently, and paths that used to give a silently wrong result (an fp64 reference or
the exact error expected)."""

import inspect
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

import normlab
from normlab import nn, ref

FORMS = ["fused", "chunked", "split"]
V = 23


def _fp64_ce(x, labels, **kw):
    """fp64 loss and its gradient wrt x."""
    xd = x.detach().double().requires_grad_()
    out = ref.cross_entropy_ref(xd, labels, **kw)
    out.backward()
    return out.detach(), xd.grad


# ---- ignore_index ------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("ignore_index", [2**40, 2**32 + 3, -(2**32) + 7])
def test_int32_labels_with_ignore_index_beyond_int32(form, ignore_index):
    # No int32 label equals an ignore_index outside int32's range: every row counts. torch's
    # `int32_tensor != python_int` wraps the int to int32 (2**40 -> 0, 2**32 + 3 -> 3), so the
    # host-side count of rows disagreed with the kernels (a wrong mean).
    x = torch.randn(6, V, requires_grad=True)
    labels = torch.tensor([0, 3, 0, V - 1, 7, 0], dtype=torch.int32)
    loss = normlab.cross_entropy(x, labels, ignore_index=ignore_index, form=form, block_cap=16)
    loss.backward()
    exp, exp_grad = _fp64_ce(x, labels.long())  # nothing ignored
    assert_close(loss, exp.float())
    assert_close(x.grad, exp_grad.float())


def test_int32_label_equal_to_a_wrapped_ignore_index_is_out_of_range():
    # -100 is not 2**32 - 100: the label is out of range, as it is for int64 labels.
    x = torch.randn(3, V)
    labels = torch.tensor([1, -100, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match="label -100 outside"):
        normlab.cross_entropy(x, labels, ignore_index=2**32 - 100)
    with pytest.raises(ValueError, match="label -100 outside"):
        normlab.cross_entropy(x, labels.long(), ignore_index=2**32 - 100)


@pytest.mark.parametrize("bad", [-100.5, -100.0, True, "x", None])
def test_ignore_index_must_be_an_int(bad):
    # torch: "argument 'ignore_index' must be int, not float" (bool too); -100.5 was truncated.
    x, labels = torch.randn(3, V), torch.tensor([1, 2, 3])
    with pytest.raises(TypeError, match="ignore_index"):
        normlab.cross_entropy(x, labels, ignore_index=bad)
    with pytest.raises(TypeError, match="ignore_index"):
        nn.CrossEntropyLoss(ignore_index=bad)(x, labels)


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1])
def test_ignore_index_outside_int64(bad):
    x, labels = torch.randn(3, V), torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="ignore_index"):
        normlab.cross_entropy(x, labels, ignore_index=bad)


@pytest.mark.parametrize("index", [np.int64(2), torch.tensor(2), np.int32(2)])
def test_ignore_index_integer_likes(index):
    x, labels = torch.randn(4, V), torch.tensor([1, 2, 3, 2])
    exp = F.cross_entropy(x.double(), labels, ignore_index=2)
    assert_close(normlab.cross_entropy(x, labels, ignore_index=index), exp.float())


# ---- nn.CrossEntropyLoss: torch's signature ---------------------------------------------------


def test_cross_entropy_module_positional_arguments_are_torch_s():
    torch_params = list(inspect.signature(torch.nn.CrossEntropyLoss.__init__).parameters)
    ours = list(inspect.signature(nn.CrossEntropyLoss.__init__).parameters)
    assert ours[: len(torch_params)] == torch_params
    x, labels = torch.randn(5, V), torch.tensor([3, 1, 3, 0, V - 1])
    # (weight, size_average, ignore_index, reduce, reduction, label_smoothing), positionally
    args = (None, None, 3, None, "sum", 0.2)
    got = nn.CrossEntropyLoss(*args)(x, labels)
    exp = torch.nn.CrossEntropyLoss(*args)(x.double(), labels)
    assert_close(got, exp.float())


def test_cross_entropy_module_class_weights_are_refused_by_name():
    # torch's first positional argument is the class weight: it must not become ignore_index.
    with pytest.raises(ValueError, match="weight"):
        nn.CrossEntropyLoss(torch.ones(V))


def test_cross_entropy_module_legacy_reduce():
    x, labels = torch.randn(5, V), torch.tensor([3, 1, 3, 0, V - 1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        ours, theirs = nn.CrossEntropyLoss(reduce=False), torch.nn.CrossEntropyLoss(reduce=False)
    assert ours.reduction == theirs.reduction == "none"
    assert_close(ours(x, labels), theirs(x.double(), labels).float())


# ---- double backward ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("loss", ["cross_entropy", "reverse_kl"])
def test_double_backward_is_refused_not_wrong(loss, form):
    # The backward is a kernel autograd cannot differentiate: a gradient taken with
    # create_graph=True had no path back to x, so a second derivative through it silently
    # missed this loss's terms (torch's own ops give them). It must raise, naming the cause.
    x0 = torch.randn(4, V)
    labels, t = torch.tensor([1, 5, -100, V - 1]), torch.randn(4, V)

    def fn(x):
        if loss == "cross_entropy":
            return normlab.cross_entropy(x, labels, form=form, block_cap=16)
        return normlab.reverse_kl(x, t, form=form, block_cap=16)

    x = x0.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad(fn(x) ** 2, x, create_graph=True)
    # without create_graph, the same call's gradient (fp64 reference)
    (g,) = torch.autograd.grad(fn(x) ** 2, x)
    xd = x0.double().requires_grad_()
    if loss == "cross_entropy":
        exp = ref.cross_entropy_ref(xd, labels)
    else:
        exp = ref.reverse_kl_ref(xd, t.double())
    assert_close(g, torch.autograd.grad(exp**2, xd)[0].float())


def test_numpy_scalars_are_numbers():
    """numpy's ints and floats are accepted where Python's are, with the same result: a
    block_cap of np.int64, a temperature of np.float32; a non-power-of-two numpy int is still
    refused, naming the argument."""
    x, t = torch.randn(4, 40), torch.randn(4, 40)
    want = normlab.reverse_kl(x, t, block_cap=16, temperature=2.0)
    got = normlab.reverse_kl(x, t, block_cap=np.int64(16), temperature=np.float32(2.0))
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="block_cap"):
        normlab.reverse_kl(x, t, block_cap=np.int64(24))


@pytest.mark.parametrize("bad", [1, "yes", np.bool_(True)])
def test_check_labels_is_a_bool(bad):
    x, labels = torch.randn(3, 10), torch.randint(0, 10, (3,))
    with pytest.raises(TypeError, match="check_labels"):
        normlab.cross_entropy(x, labels, check_labels=bad)
