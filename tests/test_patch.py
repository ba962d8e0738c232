"""normlab.patch on a real model: Hugging Face's LlamaForCausalLM from a tiny random config."""

import pytest
import torch
import transformers  # a test dependency (pyproject [test])

import normlab
from normlab.patching import patch


def _tiny_llama(seed=0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=203, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5,
    )
    return transformers.LlamaForCausalLM(config).float()


def _step(model, ids, labels):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.loss.detach(), out.logits.detach(), grads


def _assert_steps_match(model, ref_model, ids, labels):
    """One training step of each: logits, loss and every parameter's gradient agree."""
    loss_ref, logits_ref, grads_ref = _step(ref_model, ids, labels)
    loss, logits, grads = _step(model, ids, labels)
    torch.testing.assert_close(logits, logits_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-5)
    assert grads.keys() == grads_ref.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ref[name], rtol=1e-4, atol=1e-5, msg=name)


def _set_norm_weights(*models):
    """Non-trivial norm weights, the same in each model, so a dropped weight would show."""
    with torch.no_grad():
        for m in models:
            gen = torch.Generator().manual_seed(1)
            for name, p in m.named_parameters():
                if "norm" in name:
                    p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))


def test_patch_llama_matches_unpatched():
    ref_model, model = _tiny_llama(), _tiny_llama()
    _set_norm_weights(ref_model, model)
    norm_params = {n: p for n, p in model.named_parameters() if "norm" in n}
    report = patch(model, loss=True)
    assert len(report.replaced) == 2 * 2 + 1 and report.loss and not report.skipped
    assert all(isinstance(model.get_submodule(n), normlab.RMSNorm) for n in report.replaced)
    # the same Parameter objects: optimizers and state_dict keys are unchanged
    assert all(dict(model.named_parameters())[n] is p for n, p in norm_params.items())
    assert model.state_dict().keys() == ref_model.state_dict().keys()

    ids = torch.randint(0, 203, (2, 17))
    labels = ids.clone()
    labels[0, :5] = -100  # ignored tokens, as a padded batch has
    _assert_steps_match(model, ref_model, ids, labels)


def test_patch_leaves_other_norm_forms_alone():
    class LearnedEpsRMSNorm(torch.nn.Module):  # a form normlab's modules do not compute
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(8))
            self.log_eps = torch.nn.Parameter(torch.zeros(()))

    model = torch.nn.Sequential(torch.nn.LayerNorm(8), LearnedEpsRMSNorm(), torch.nn.RMSNorm(8))
    report = patch(model)
    assert report.replaced == ["0", "2"]
    assert report.skipped == [("1", "LearnedEpsRMSNorm")]
    assert isinstance(model[0], normlab.LayerNorm) and isinstance(model[2], normlab.RMSNorm)
    x = torch.randn(3, 8)
    torch.testing.assert_close(model[0](x), torch.nn.functional.layer_norm(x, (8,)))


def test_patch_loss_needs_a_hugging_face_model():
    with pytest.raises(TypeError, match="loss_function"):
        patch(torch.nn.Linear(2, 2), loss=True)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_patch_fused_add_matches_unpatched(monkeypatch, checkpointing):
    ref_model, model = _tiny_llama(), _tiny_llama()
    _set_norm_weights(ref_model, model)
    calls = []
    fused = normlab.patching.add_rms_norm

    def counted(x, residual, *args, **kwargs):
        calls.append(x.shape)
        return fused(x, residual, *args, **kwargs)

    monkeypatch.setattr(normlab.patching, "add_rms_norm", counted)
    report = patch(model, loss=True, fused_add=True)
    assert report.fused_add == ["model.layers.0", "model.layers.1"]
    if checkpointing:  # the layer's forward runs again in the backward
        for m in (ref_model, model):  # the newer name where transformers has it
            getattr(m, "activation_checkpointing_enable", m.gradient_checkpointing_enable)()
            m.train()
    ids = torch.randint(0, 203, (2, 17))
    labels = ids.clone()
    labels[1, -4:] = -100
    _assert_steps_match(model, ref_model, ids, labels)
    assert len(calls) == (4 if checkpointing else 2) and calls[0] == (2, 17, 48)


def test_patch_fused_add_gemma_offset():
    """Gemma's zero-centred norm: the fused add scales by (1 + weight), as the unfused one."""
    torch.manual_seed(0)
    config = transformers.GemmaConfig(
        vocab_size=101, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=32,
    )
    ref_model = transformers.GemmaForCausalLM(config).float()
    model = transformers.GemmaForCausalLM(config).float()
    model.load_state_dict(ref_model.state_dict())
    _set_norm_weights(ref_model, model)
    report = patch(model, fused_add=True)
    assert report.fused_add == ["model.layers.0"]
    assert model.model.layers[0].post_attention_layernorm.offset == 1.0
    ids = torch.randint(0, 101, (1, 9))
    torch.testing.assert_close(model(input_ids=ids).logits, ref_model(input_ids=ids).logits,
                               rtol=1e-4, atol=1e-4)  # fmt: skip


def test_patch_fused_add_needs_the_norms():
    with pytest.raises(ValueError, match="norms=True"):
        patch(_tiny_llama(), norms=False, fused_add=True)
    model = torch.nn.Sequential(torch.nn.RMSNorm(8))  # no decoder layer: nothing to fuse
    assert patch(model, fused_add=True).fused_add == []


def test_patch_fused_add_keeps_the_class_name_and_fuses_once():
    model = _tiny_llama()
    patch(model, fused_add=True)
    layer = model.model.layers[0]
    assert type(layer).__name__ == "LlamaDecoderLayer"
    assert isinstance(layer, transformers.models.llama.modeling_llama.LlamaDecoderLayer)
    assert patch(model, fused_add=True).fused_add == []  # already fused


def test_patch_fused_add_refuses_transformers_4(monkeypatch):
    """transformers 4's decoder layers return tuples: the fused forward would break the model."""
    monkeypatch.setattr(normlab.patching, "_transformers_major", lambda: 4)
    model = _tiny_llama()
    with pytest.raises(ValueError, match="transformers 5"):
        patch(model, fused_add=True)
    assert type(model.model.layers[0]) is transformers.models.llama.modeling_llama.LlamaDecoderLayer


def test_patch_fused_add_leaves_a_lookalike_class_alone():
    """Only transformers' own classes: a user's layer of the same name may compute another form."""

    class LlamaDecoderLayer(torch.nn.Module):  # same name, not transformers' forward
        def __init__(self):
            super().__init__()
            self.post_attention_layernorm = torch.nn.RMSNorm(8)

    model = torch.nn.Sequential(LlamaDecoderLayer())
    report = patch(model, fused_add=True)
    assert report.replaced == ["0.post_attention_layernorm"] and report.fused_add == []


def test_llama_step_summary_against_hugging_face():
    """benchmarks/llama_step.py's closing lines: each variant over Hugging Face's in its mode,
    with the profiled step's device time where both were profiled."""
    from helpers import load_script

    llama_step = load_script("benchmarks/llama_step.py")

    def run(variant, mode, tok_s, losses, device_us=None):
        r = {"variant": variant, "mode": mode, "tokens_per_s": tok_s, "losses": losses}
        return r | ({"profile": {"device_us": device_us}} if device_us else {})

    results = [run("hf", "compile", 100.0, [2.0, 1.0], 130740.0),
               run("normlab", "compile", 101.0, [2.0, 1.05], 131870.0),
               run("hf", "eager", 80.0, [2.0, 1.0]), run("normlab", "eager", 100.0, [1.9, 1.0]),
               {"variant": "liger", "mode": "eager", "error": ["ImportError"]}]
    assert llama_step.summary_lines(results) == [
        "normlab compile: tokens/s 1.010x hf's; max relative loss difference over 2 steps "
        "5.00e-02; profiled step's device time 131.87 ms against 130.74",
        "normlab eager: tokens/s 1.250x hf's; max relative loss difference over 2 steps 5.00e-02",
    ]


def test_patch_keeps_eps_and_eval_mode_of_torch_norms():
    """The swapped modules keep the originals' eps (not the defaults) and their eval mode; on
    inputs of 1e-2 a default eps would show in the outputs."""
    torch.manual_seed(0)
    ref_model = torch.nn.Sequential(torch.nn.LayerNorm(8, eps=1e-3), torch.nn.RMSNorm(8, eps=1e-3))
    model = torch.nn.Sequential(torch.nn.LayerNorm(8, eps=1e-3), torch.nn.RMSNorm(8, eps=1e-3))
    model.load_state_dict(ref_model.state_dict())
    model.eval()
    ref_model.eval()
    patch(model)
    assert isinstance(model[0], normlab.LayerNorm) and isinstance(model[1], normlab.RMSNorm)
    assert model[0].eps == model[1].eps == 1e-3
    assert not model[0].training and not model[1].training
    x = 1e-2 * torch.randn(5, 8)
    torch.testing.assert_close(model(x), ref_model(x), rtol=1e-5, atol=1e-6)


def test_causal_lm_loss_pads_with_its_own_ignore_index():
    """ignore_index=-1: the label shifted in past the last position is -1 too, so that position
    is ignored, as torch's cross_entropy over logits[:, :-1] and labels[:, 1:]."""
    from normlab.patching import causal_lm_loss

    V = 11
    logits, labels = torch.randn(2, 6, V), torch.randint(0, V, (2, 6))
    labels[0, 2] = -1
    got = causal_lm_loss(logits, labels, V, ignore_index=-1)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V).double(),
                                             labels[:, 1:].reshape(-1), ignore_index=-1)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def test_patch_t5_layer_norm_returns_the_weight_dtype():
    """T5's norm returns its weight's dtype (fp16 here) for fp32 input, as Hugging Face's."""
    from transformers.models.t5.modeling_t5 import T5LayerNorm

    torch.manual_seed(0)
    hf = T5LayerNorm(16).half()
    with torch.no_grad():
        hf.weight.copy_(1 + 0.3 * torch.randn(16))
    model = torch.nn.Sequential(hf)
    x = torch.randn(3, 16)
    want = hf(x)
    patch(model)
    assert isinstance(model[0], normlab.RMSNorm)
    got = model(x)
    assert want.dtype == got.dtype == torch.float16
    torch.testing.assert_close(got.float(), want.float(), rtol=2e-3, atol=2e-3)
