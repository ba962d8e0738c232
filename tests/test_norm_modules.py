"""normlab.RMSNorm / normlab.LayerNorm as drop-ins for torch.nn.RMSNorm / torch.nn.LayerNorm."""

import copy

import pytest
import torch
from helpers import assert_close

import normlab

CASES = [
    # (normlab class, torch class, constructor kwargs)
    (normlab.RMSNorm, torch.nn.RMSNorm, {"normalized_shape": 24}),
    (normlab.RMSNorm, torch.nn.RMSNorm, {"normalized_shape": (3, 8), "eps": 1e-5}),
    (normlab.RMSNorm, torch.nn.RMSNorm, {"normalized_shape": 24, "elementwise_affine": False}),
    (normlab.LayerNorm, torch.nn.LayerNorm, {"normalized_shape": 24}),
    (normlab.LayerNorm, torch.nn.LayerNorm, {"normalized_shape": (3, 8), "eps": 1e-6}),
    (normlab.LayerNorm, torch.nn.LayerNorm, {"normalized_shape": 24, "bias": False}),
    (normlab.LayerNorm, torch.nn.LayerNorm, {"normalized_shape": 24, "elementwise_affine": False}),
]
IDS = ["rms", "rms-2d-shape", "rms-no-affine", "ln", "ln-2d-shape", "ln-no-bias", "ln-no-affine"]


def _pair(ours_cls, torch_cls, kwargs, **extra):
    theirs = torch_cls(**kwargs)
    with torch.no_grad():  # non-trivial parameters so that a swapped weight/bias would show
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p))
    ours = ours_cls(**kwargs, **extra)
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


@pytest.mark.parametrize("ours_cls,torch_cls,kwargs", CASES, ids=IDS)
def test_matches_torch_module(ours_cls, torch_cls, kwargs):
    ours, theirs = _pair(ours_cls, torch_cls, kwargs)
    assert isinstance(ours, torch_cls)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    x = torch.randn(2, 5, 24).reshape(2, 5, *theirs.normalized_shape)
    xo, xt = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    yo, yt = ours(xo), theirs(xt)
    assert yo.shape == yt.shape
    assert_close(yo, yt.double())
    dy = torch.randn_like(yt)
    yo.backward(dy)
    yt.backward(dy)
    assert_close(xo.grad, xt.grad.double())
    for (name, po), pt in zip(ours.named_parameters(), theirs.parameters()):
        assert_close(po.grad, pt.grad.double(), reduce_len=10, msg=name)


@pytest.mark.parametrize("ours_cls,torch_cls,kwargs", CASES[:1] + CASES[3:4], ids=["rms", "ln"])
def test_state_dict_round_trip(ours_cls, torch_cls, kwargs):
    ours, theirs = _pair(ours_cls, torch_cls, kwargs, strategy="two_stage")
    back = torch_cls(**kwargs)
    back.load_state_dict(ours.state_dict())
    for a, b in zip(back.state_dict().values(), theirs.state_dict().values()):
        assert torch.equal(a, b)
    assert ours.strategy == "two_stage" and "strategy='two_stage'" in repr(ours)


def test_rms_eps_none_uses_dtype_eps():
    """torch.nn.RMSNorm(eps=None) uses finfo(x.dtype).eps; with x ~ 1e-4 the eps matters."""
    ours, theirs = _pair(normlab.RMSNorm, torch.nn.RMSNorm, {"normalized_shape": 16})
    assert ours.eps is None
    x = 1e-4 * torch.randn(3, 16)
    assert_close(ours(x), theirs(x).double())


@pytest.mark.parametrize("strategy", ["atomic", "two_stage", "persistent"])
def test_training_step_matches_torch(strategy):
    """Three SGD steps of Linear -> LayerNorm -> RMSNorm -> Linear agree with the torch model."""

    def model(ln, rms):
        torch.manual_seed(1)
        return torch.nn.Sequential(
            torch.nn.Linear(12, 20), ln, torch.nn.GELU(), rms, torch.nn.Linear(20, 3)
        )

    ours = model(normlab.LayerNorm(20, strategy=strategy), normlab.RMSNorm(20, strategy=strategy))
    theirs = model(torch.nn.LayerNorm(20), torch.nn.RMSNorm(20))
    theirs.load_state_dict(ours.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, theirs)]
    x, target = torch.randn(17, 12), torch.randn(17, 3)
    for _ in range(3):
        for m, opt in zip((ours, theirs), opts):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), target).backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        assert_close(a, b.double(), reduce_len=17, msg=name)


def test_module_under_torch_compile():
    layer = normlab.LayerNorm(16)
    ref_layer = copy.deepcopy(layer)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 16, requires_grad=True)
    xr = x.detach().clone().requires_grad_(True)
    compiled(x).pow(2).sum().backward()
    ref_layer(xr).pow(2).sum().backward()
    assert_close(x.grad, xr.grad.double())
    assert_close(layer.weight.grad, ref_layer.weight.grad.double(), reduce_len=4)


@pytest.mark.parametrize("cls", [normlab.RMSNorm, normlab.LayerNorm])
def test_bad_module_arguments(cls):
    with pytest.raises(ValueError, match="strategy"):
        cls(8, strategy="fast")
    with pytest.raises(ValueError, match="layout"):
        cls(8, layout="columns")
    with pytest.raises(ValueError, match="normalized_shape"):
        cls((2, 4))(torch.randn(3, 8))
