"""normlab.RMSNorm / normlab.LayerNorm as drop-ins for torch.nn.RMSNorm / torch.nn.LayerNorm."""

import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

import normlab
from normlab import ref

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
    for (name, po), pt in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert_close(po.grad, pt.grad.double(), reduce_len=10, msg=name)


@pytest.mark.parametrize("ours_cls,torch_cls,kwargs", CASES[:1] + CASES[3:4], ids=["rms", "ln"])
def test_state_dict_round_trip(ours_cls, torch_cls, kwargs):
    ours, theirs = _pair(ours_cls, torch_cls, kwargs, strategy="two_stage")
    back = torch_cls(**kwargs)
    back.load_state_dict(ours.state_dict())
    for a, b in zip(back.state_dict().values(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert ours.strategy == "two_stage" and "strategy='two_stage'" in repr(ours)


DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("scale", [1e-2, 1.0, 1e2], ids=["x1e-2", "x1", "x1e2"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("ours_cls,torch_cls,kwargs", CASES, ids=IDS)
def test_matches_torch_module_per_dtype_and_scale(ours_cls, torch_cls, kwargs, dtype, scale):
    """Outputs and gradients of the same-argument torch module, parameters in ``dtype``, inputs
    of scale 1e-2 / 1 / 1e2 (where a default eps of the wrong size would show)."""
    ours, theirs = _pair(ours_cls, torch_cls, {**kwargs, "dtype": dtype})
    x = (scale * torch.randn(2, 5, 24)).reshape(2, 5, *theirs.normalized_shape).to(dtype)
    xo, xt = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    yo, yt = ours(xo), theirs(xt)
    assert yo.dtype == yt.dtype == dtype
    assert_close(yo, yt.double(), msg="y")
    dy = torch.randn_like(yt)
    yo.backward(dy)
    yt.backward(dy)
    # dx scales like 1 / scale: compared in units of it, so that the atol cannot swamp it
    assert_close(xo.grad * scale, xt.grad.double() * scale, dtype=dtype, msg="dx")
    for (name, po), pt in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert po.grad.dtype == pt.grad.dtype == dtype
        assert_close(po.grad, pt.grad.double(), reduce_len=10, msg=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rms_eps_none_is_the_fp32_eps_as_torch(dtype):
    """torch.nn.RMSNorm(eps=None) computes half inputs in fp32 with finfo(float32).eps, not
    finfo(x.dtype).eps (0.0078 in bf16, which moves activations of scale 1e-2 by up to ~3)."""
    ours, theirs = _pair(normlab.RMSNorm, torch.nn.RMSNorm, {"normalized_shape": 64})
    assert ours.eps is None
    x = (1e-2 * torch.randn(8, 64)).to(dtype)
    assert_close(ours(x), theirs(x).double())
    xd = x.double()  # the fp64 reference with fp32's eps
    y_ref = ref.rms_norm(xd, theirs.weight.detach().double(), torch.finfo(torch.float32).eps)
    assert_close(ours(x), y_ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_functional_eps_none_is_the_fp32_eps_as_torch(dtype):
    """``rms_norm``/``add_rms_norm`` take ``eps=None`` as ``F.rms_norm`` does: fp32's eps for
    every input dtype. Rows of mean square ~1e-7 (eps's size) show any other eps, 1e-6 too."""
    x, r = (3e-4 * torch.randn(2, 7, 40)).to(dtype), (1e-4 * torch.randn(2, 7, 40)).to(dtype)
    w = torch.rand(40, dtype=dtype) + 0.5
    want = F.rms_norm(x.double(), (40,), w.double(), eps=torch.finfo(torch.float32).eps)
    assert_close(normlab.rms_norm(x, w, eps=None), want)
    assert_close(normlab.rms_norm(x, w, None), F.rms_norm(x, (40,), w, eps=None).double())
    with pytest.raises(AssertionError):  # the default 1e-6 differs here: the test can fail
        assert_close(normlab.rms_norm(x, w), want)
    h = (x.float() + r.float()).to(dtype)
    y, h_out = normlab.add_rms_norm(x, r, w, eps=None)
    assert torch.equal(h_out, h)
    assert_close(y, F.rms_norm(h.double(), (40,), w.double(), eps=torch.finfo(torch.float32).eps))


MODULE_ARGS = [
    (torch.nn.RMSNorm, {"normalized_shape": 24}),
    (torch.nn.RMSNorm, {"normalized_shape": [3, 8], "eps": 1e-5, "elementwise_affine": False}),
    (torch.nn.RMSNorm, {"normalized_shape": (4,), "dtype": torch.bfloat16}),
    (torch.nn.RMSNorm, {"normalized_shape": 6, "device": "meta", "dtype": torch.float16}),
    (torch.nn.LayerNorm, {"normalized_shape": 24}),
    (torch.nn.LayerNorm, {"normalized_shape": [3, 8], "eps": 1e-6, "bias": False}),
    (torch.nn.LayerNorm, {"normalized_shape": 24, "elementwise_affine": False}),
    (torch.nn.LayerNorm, {"normalized_shape": 24, "elementwise_affine": False, "bias": False}),
    (torch.nn.LayerNorm, {"normalized_shape": (4,), "dtype": torch.bfloat16}),
    (torch.nn.LayerNorm, {"normalized_shape": 6, "device": "meta", "dtype": torch.float16}),
]


@pytest.mark.parametrize("torch_cls,kwargs", MODULE_ARGS, ids=str)
def test_module_attributes_match_torch(torch_cls, kwargs):
    """Defaults, factory kwargs, shapes given as int/list/tuple: the same attributes, parameters
    (name, shape, dtype, device, initial value) and state_dict keys as torch's module."""
    ours_cls = {torch.nn.RMSNorm: normlab.RMSNorm, torch.nn.LayerNorm: normlab.LayerNorm}[torch_cls]
    ours, theirs = ours_cls(**kwargs), torch_cls(**kwargs)
    for attr in ("normalized_shape", "eps", "elementwise_affine"):
        assert getattr(ours, attr) == getattr(theirs, attr), attr
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    named = dict(theirs.named_parameters())
    assert [n for n, _ in ours.named_parameters()] == list(named)
    for name, p in ours.named_parameters():
        q = named[name]
        assert (p.shape, p.dtype, p.device) == (q.shape, q.dtype, q.device), name
        if p.device.type != "meta":
            assert torch.equal(p, q), name  # ones / zeros
    for name in ("weight", "bias"):
        assert (getattr(ours, name, None) is None) == (getattr(theirs, name, None) is None), name
    assert repr(ours).startswith(f"{type(ours).__name__}({theirs.extra_repr()}, strategy=")


@pytest.mark.parametrize("shape", [(0, 24), (2, 0, 24)], ids=str)
@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("ours_cls,torch_cls,kwargs", [CASES[0], CASES[3]], ids=["rms", "ln"])
def test_empty_batch_matches_torch_module(ours_cls, torch_cls, kwargs, layout, shape):
    """No rows: an empty output and dx, zero parameter gradients, as torch's module."""
    ours, theirs = _pair(ours_cls, torch_cls, kwargs, layout=layout)
    xo, xt = torch.randn(shape, requires_grad=True), torch.randn(shape, requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    assert yo.shape == yt.shape == shape
    yo.sum().backward()
    yt.sum().backward()
    assert xo.grad.shape == xt.grad.shape == shape
    for (name, po), pt in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert torch.equal(po.grad, pt.grad) and not po.grad.any(), name


@pytest.mark.parametrize("torch_cls", [torch.nn.RMSNorm, torch.nn.LayerNorm])
def test_zero_width_normalized_shape_matches_torch_module(torch_cls):
    ours_cls = {torch.nn.RMSNorm: normlab.RMSNorm, torch.nn.LayerNorm: normlab.LayerNorm}[torch_cls]
    for normalized_shape in (0, (2, 0)):
        ours, theirs = ours_cls(normalized_shape), torch_cls(normalized_shape)
        x = torch.randn(3, 2, 0, requires_grad=True)
        y = ours(x)
        assert y.shape == theirs(x).shape == (3, 2, 0)
        y.sum().backward()
        assert x.grad.shape == x.shape
        assert all(p.grad.shape == p.shape for p in ours.parameters())
        x.grad = None


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
        for m, opt in zip((ours, theirs), opts, strict=True):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x), target).backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert_close(a, b.double(), reduce_len=17, msg=name)


def test_module_under_torch_compile():
    layer = normlab.LayerNorm(16)
    with torch.no_grad():
        layer.weight.copy_(1 + 0.5 * torch.randn(16))
        layer.bias.copy_(torch.randn(16))
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    x = torch.randn(4, 16, requires_grad=True)
    y = compiled(x)
    y.pow(2).sum().backward()
    # fp64 reference of the same loss
    xd = x.detach().double().requires_grad_(True)
    wd = layer.weight.detach().double().requires_grad_(True)
    bd = layer.bias.detach().double().requires_grad_(True)
    yd = ref.layer_norm(xd, wd, bd, layer.eps)
    dx, dw, db = torch.autograd.grad(yd.pow(2).sum(), (xd, wd, bd))
    assert_close(y, yd.detach())
    assert_close(x.grad, dx)
    assert_close(layer.weight.grad, dw, reduce_len=4)
    assert_close(layer.bias.grad, db, reduce_len=4)


@pytest.mark.parametrize("cls", [normlab.RMSNorm, normlab.LayerNorm])
def test_bad_module_arguments(cls):
    with pytest.raises(ValueError, match="strategy"):
        cls(8, strategy="fast")
    with pytest.raises(ValueError, match="layout"):
        cls(8, layout="columns")
    with pytest.raises(ValueError, match="normalized_shape"):
        cls((2, 4))(torch.randn(3, 8))
    with pytest.raises(ValueError, match="normalized_shape is empty"):
        cls(())(torch.randn(3, 8))  # torch raises too
