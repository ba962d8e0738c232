"""Adversarial checks of the norms' public API and of ``normlab.patch``: paths that used to give
a silently wrong result (an fp64 reference, the unpatched module's output, or the exact error
expected)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import assert_close

import normlab
from normlab import ref

# ---- double backward ---------------------------------------------------------------------------

NORM_CALLS = {
    "rms_norm": lambda x, w, b: normlab.rms_norm(x, w),
    "layer_norm": lambda x, w, b: normlab.layer_norm(x, w, b),
    "add_rms_norm": lambda x, w, b: normlab.add_rms_norm(x, x.flip(0), w)[0],
    "add_layer_norm": lambda x, w, b: normlab.add_layer_norm(x, x.flip(0), w, b)[0],
}
REF_CALLS = {
    "rms_norm": lambda x, w, b: ref.rms_norm(x, w),
    "layer_norm": lambda x, w, b: ref.layer_norm(x, w, b),
    "add_rms_norm": lambda x, w, b: ref.rms_norm(x + x.flip(0), w),
    "add_layer_norm": lambda x, w, b: ref.layer_norm(x + x.flip(0), w, b),
}


@pytest.mark.parametrize("op", list(NORM_CALLS))
def test_double_backward_is_refused_not_wrong(op):
    # The backward is a kernel autograd cannot differentiate: a gradient taken with
    # create_graph=True had no path back to x, so a second derivative through it (a gradient
    # penalty, a Hessian-vector product) silently missed the norm's terms. It must raise.
    x0, w, b = torch.randn(5, 19), torch.randn(19), torch.randn(19)
    x = x0.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad(NORM_CALLS[op](x, w, b).sin().sum(), x, create_graph=True)
    # without create_graph, the gradient is the fp64 reference's
    (g,) = torch.autograd.grad(NORM_CALLS[op](x, w, b).sin().sum(), x)
    xd = x0.double().requires_grad_()
    exp = REF_CALLS[op](xd, w.double(), b.double()).sin().sum()
    assert_close(g, torch.autograd.grad(exp, xd)[0].float())


# ---- patch: subclasses with their own forward, normlab's own modules ---------------------------


class ChannelsFirstLayerNorm(torch.nn.LayerNorm):
    """timm's LayerNorm2d: a torch.nn.LayerNorm over dim 1 of (N, C, H, W)."""

    def forward(self, x):
        y = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias,
                         self.eps)  # fmt: skip
        return y.permute(0, 3, 1, 2)


class DoubledRMSNorm(torch.nn.RMSNorm):
    def forward(self, x):
        return 2 * super().forward(x)


class PlainLayerNormSubclass(torch.nn.LayerNorm):
    """A subclass that keeps torch's forward: safe to swap."""


def _randomized(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p))
    return module


@pytest.mark.parametrize("make,shape", [
    (lambda: ChannelsFirstLayerNorm(8), (2, 8, 3, 8)),  # last dim 8 too: no shape error
    (lambda: DoubledRMSNorm(8), (3, 8)),
])  # fmt: skip
def test_patch_leaves_a_subclass_with_its_own_forward(make, shape):
    model = torch.nn.Sequential(_randomized(make()))
    x = torch.randn(shape)
    expected = model(x)
    report = normlab.patch(model)
    assert report.replaced == []
    assert report.skipped == [("0", type(model[0]).__name__)]
    assert type(model[0]) is type(make())
    assert_close(model(x), expected)


def test_patch_swaps_a_subclass_that_keeps_torch_s_forward():
    model = torch.nn.Sequential(_randomized(PlainLayerNormSubclass(8)))
    x = torch.randn(3, 8)
    expected = ref.layer_norm(x.double(), model[0].weight.double(), model[0].bias.double())
    assert normlab.patch(model).replaced == ["0"]
    assert isinstance(model[0], normlab.LayerNorm)
    assert_close(model(x), expected.float())


@pytest.mark.parametrize("make", [
    lambda: normlab.RMSNorm(8, offset=1.0, strategy="atomic"),
    lambda: normlab.LayerNorm(8, offset=0.5, layout="row"),
])  # fmt: skip
def test_patch_keeps_normlab_s_own_modules(make):
    # Re-creating a normlab module from torch's arguments dropped its offset (Gemma's 1 + w).
    model = torch.nn.Sequential(_randomized(make()))
    module = model[0]
    x = torch.randn(3, 8)
    w = module.weight.double() + module.offset
    b = getattr(module, "bias", None)
    expected = (ref.rms_norm(x.double(), w) if isinstance(module, normlab.RMSNorm)
                else ref.layer_norm(x.double(), w, b.double()))  # fmt: skip
    report = normlab.patch(model)
    assert report.replaced == [] and report.skipped == []
    assert model[0] is module
    assert_close(model(x), expected.float())


# ---- patch: Hugging Face norms keep their output dtype ----------------------------------------


def _hf_norm(kind, weight_dtype):
    transformers = pytest.importorskip("transformers")
    if kind == "llama":
        from transformers.models.llama.modeling_llama import LlamaRMSNorm as cls
    else:
        from transformers.models.t5.modeling_t5 import T5LayerNorm as cls
    assert transformers  # imported for the skip
    module = cls(24, eps=1e-6).to(weight_dtype)
    with torch.no_grad():
        module.weight.copy_(1 + 0.3 * torch.randn(24))
    return module


@pytest.mark.parametrize("kind,weight_dtype,x_dtype", [
    ("llama", torch.float32, torch.bfloat16),  # weight * x_hat.to(x.dtype): float32
    ("llama", torch.bfloat16, torch.float32),  # float32
    ("llama", torch.bfloat16, torch.bfloat16),
    ("t5", torch.bfloat16, torch.float32),  # x_hat.to(weight.dtype) * weight: bfloat16
    ("t5", torch.float32, torch.float16),  # float32
])  # fmt: skip
def test_patch_keeps_a_hugging_face_norm_s_output_dtype(kind, weight_dtype, x_dtype):
    # Llama's RMSNorm returns promote(x, weight), T5's the weight's dtype; normlab's returns x's.
    model = torch.nn.Sequential(_hf_norm(kind, weight_dtype))
    x = torch.randn(3, 5, 24).to(x_dtype)
    expected = model(x)
    assert normlab.patch(model).replaced == ["0"]
    got = model(x)
    assert got.dtype == expected.dtype
    # one rounding to the narrower dtype apart (HF rounds x_hat, normlab x_hat * weight)
    narrow = next(d for d in (torch.bfloat16, torch.float16) if d in (weight_dtype, x_dtype))
    assert_close(got, expected, dtype=narrow)


# ---- the CLI: a strategy/layout pair that cannot run is a usage error --------------------------


@pytest.mark.parametrize("strategies", ["atomic", "two_stage,atomic"])
def test_cli_refuses_strategies_that_block_row_lacks(strategies, capsys):
    # Every case was skipped (a ValueError each) and the run exited 0.
    from normlab import __main__ as cli

    args = ["bench", "--quick", "--op", "rms_norm", "--impl", "normlab", "--strategy",
            strategies, "--layout", "block_row"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--strategy" in err and "block_row" in err and "Traceback" not in err


def test_numpy_eps_and_offset_are_numbers():
    """A numpy float eps or offset normalizes as the Python float does; a numpy NaN is refused."""
    x, w = torch.randn(5, 24), torch.rand(24)
    want = normlab.rms_norm(x, w, 1e-5, offset=1.0)
    got = normlab.rms_norm(x, w, np.float32(1e-5), offset=np.float64(1.0))
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="eps"):
        normlab.layer_norm(x, w, None, np.float32("nan"))
