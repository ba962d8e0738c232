"""``patch(model)``: swap a model's norms (and, where asked, its loss) for normlab's, in place.

Liger-Kernel calls its version ``apply_liger_kernel_to_llama``. Here one function walks any
``torch.nn.Module``: every norm whose forward is ``weight * x / rms(x)`` (torch.nn.RMSNorm and the
Hugging Face classes in ``RMS_NORM_CLASSES``), Gemma's zero-centred ``(1 + weight) * x / rms(x)``
(``ZERO_CENTERED_RMS_NORM_CLASSES``, normlab's RMSNorm with ``offset=1``) or torch.nn.LayerNorm
becomes normlab's module over the *same* parameters, so optimizers, state_dict keys and tied
weights are unchanged. Norms of another form are left alone and listed in the returned report.
With ``fused_add=True`` the Llama-style decoder layers also move their mid-block residual add into
the post-attention norm's kernel (``add_rms_norm``), as Inductor fuses it into its own norms.
"""

from __future__ import annotations

import dataclasses

import torch

from normlab import nn as _nn
from normlab.norms import add_rms_norm

# Hugging Face RMSNorm classes whose forward is Llama's: fp32 statistics, weight * x_hat.
RMS_NORM_CLASSES = frozenset({
    "LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen2MoeRMSNorm",
    "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "Phi3RMSNorm", "GraniteRMSNorm", "T5LayerNorm",
})  # fmt: skip
# Hugging Face RMSNorm classes whose forward is ``(x_hat * (1.0 + weight.float())).type_as(x)``
# with fp32 statistics and a zero-initialized weight (transformers 5.x). Listed by name, not
# matched on "Gemma": Gemma3nRMSNorm and Gemma4RMSNorm scale by the weight itself.
ZERO_CENTERED_RMS_NORM_CLASSES = frozenset({
    "GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "RecurrentGemmaRMSNorm",
    "T5GemmaRMSNorm", "T5Gemma2RMSNorm", "VaultGemmaRMSNorm", "Qwen3NextRMSNorm",
    "Qwen3_5RMSNorm", "Qwen3_5MoeRMSNorm",
})  # fmt: skip


@dataclasses.dataclass
class PatchReport:
    """What ``patch`` did: the names of the swapped modules, the norms it left alone (with their
    class), whether the loss was swapped, and the decoder layers whose residual add moved into a
    norm's kernel."""

    replaced: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    loss: bool = False
    fused_add: list[str] = dataclasses.field(default_factory=list)


# Hugging Face RMSNorm classes whose output takes the weight's dtype (T5: x_hat is cast to a
# half weight's dtype, then times the weight); the other RMS_NORM_CLASSES return
# ``weight * x_hat.to(x.dtype)``: promote(x, weight). normlab's module returns x's dtype.
WEIGHT_DTYPE_RMS_NORM_CLASSES = frozenset({"T5LayerNorm"})


class HFRMSNorm(_nn.RMSNorm):
    """normlab's RMSNorm with a Hugging Face RMSNorm's output dtype (``out_dtype``: "promote"
    or "weight"); where it is x's dtype, no cast runs."""

    out_dtype = "promote"

    def forward(self, x):
        return self.cast_out(super().forward(x))

    def cast_out(self, y):
        """y in the output dtype of the Hugging Face class this module replaced."""
        if self.weight is None or self.weight.dtype == y.dtype:
            return y
        if self.out_dtype == "weight":
            return y.to(self.weight.dtype)
        return y.to(torch.promote_types(y.dtype, self.weight.dtype))


def _rms_eps(module) -> float:
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if eps is None:
        raise ValueError(f"{type(module).__name__} has no eps attribute")
    return float(eps)


def _torch_norm(module, cls) -> bool:
    """A ``cls`` (torch.nn.LayerNorm / RMSNorm) that runs torch's forward: a subclass with its
    own (timm's channels-first LayerNorm2d, normlab's modules with their offset) is another
    form."""
    return isinstance(module, cls) and type(module).forward is cls.forward


def _replacement(module, strategy: str, layout: str):
    """normlab's module over ``module``'s parameters, or None where the form differs."""
    name = type(module).__name__
    if _torch_norm(module, torch.nn.LayerNorm):
        new = _nn.LayerNorm(module.normalized_shape, module.eps, module.elementwise_affine,
                            bias=module.bias is not None, device="meta",
                            strategy=strategy, layout=layout)  # fmt: skip
        new.weight, new.bias = module.weight, module.bias
        return new
    if _torch_norm(module, torch.nn.RMSNorm):
        new = _nn.RMSNorm(module.normalized_shape, module.eps, module.elementwise_affine,
                          device="meta", strategy=strategy, layout=layout)  # fmt: skip
        new.weight = module.weight
        return new
    if name in RMS_NORM_CLASSES or name in ZERO_CENTERED_RMS_NORM_CLASSES:
        weight = module.weight
        # Gemma's (x_hat * (1 + weight)).type_as(x) is x's dtype, as normlab's module
        zero_centered = name in ZERO_CENTERED_RMS_NORM_CLASSES
        cls = _nn.RMSNorm if zero_centered else HFRMSNorm
        new = cls(weight.shape[-1], _rms_eps(module), device="meta",
                  offset=1.0 if zero_centered else 0.0, strategy=strategy,
                  layout=layout)  # fmt: skip
        if name in WEIGHT_DTYPE_RMS_NORM_CLASSES:
            new.out_dtype = "weight"
        new.weight = weight
        return new
    return None


def _looks_like_norm(module) -> bool:
    name = type(module).__name__
    is_norm = (name.endswith(("RMSNorm", "LayerNorm"))
               or isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm)))  # fmt: skip
    return is_norm and not isinstance(module, (_nn.RMSNorm, _nn.LayerNorm))


# Hugging Face decoder layers whose forward (transformers 5) is Llama's pre-norm block:
#   h = x + self_attn(input_layernorm(x)); return h + mlp(post_attention_layernorm(h)).
FUSED_ADD_DECODER_CLASSES = frozenset({
    "LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer",
    "GemmaDecoderLayer",
})  # fmt: skip


def _fused_add_forward(self, hidden_states, **kwargs):
    """A Llama-style decoder layer whose mid-block residual add runs inside
    post_attention_layernorm's kernel (:func:`normlab.add_rms_norm`). The arguments go to
    self_attn by keyword, as the layer's own forward passes them; the layer's output, and so the
    next layer's input norm, is unchanged."""
    attn_out, _ = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **kwargs)
    norm = self.post_attention_layernorm
    y, h = add_rms_norm(attn_out, hidden_states, norm.weight, norm.eps, offset=norm.offset,
                        strategy=norm.strategy, layout=norm.layout)  # fmt: skip
    if isinstance(norm, HFRMSNorm):
        y = norm.cast_out(y)
    return h + self.mlp(y)


_FUSED_ADD_CLASSES: dict[type, type] = {}


def _fused_add_class(cls: type) -> type:
    """``cls`` with :func:`_fused_add_forward`, under the same name (model code that matches layer
    classes by name, as ``_no_split_modules`` does, still matches). A subclass, not a forward set
    on the instance: transformers wraps each subclass's forward for gradient checkpointing."""
    if cls not in _FUSED_ADD_CLASSES:
        attrs = {"forward": _fused_add_forward, "__qualname__": cls.__qualname__,
                 "__doc__": cls.__doc__, "_normlab_fused_add": True}  # fmt: skip
        _FUSED_ADD_CLASSES[cls] = type(cls.__name__, (cls,), attrs)
    return _FUSED_ADD_CLASSES[cls]


def _fusable_decoder(layer) -> bool:
    """A transformers layer of FUSED_ADD_DECODER_CLASSES, not yet fused and with no forward of its
    own on the instance, whose post-attention norm is normlab's RMSNorm over the last dimension."""
    cls = type(layer)
    if (cls.__name__ not in FUSED_ADD_DECODER_CLASSES or "forward" in vars(layer)
            or not cls.__module__.startswith("transformers.")
            or getattr(cls, "_normlab_fused_add", False)):  # fmt: skip
        return False
    norm = getattr(layer, "post_attention_layernorm", None)
    return (isinstance(norm, _nn.RMSNorm) and len(norm.normalized_shape) == 1
            and all(hasattr(layer, a) for a in ("self_attn", "mlp", "input_layernorm")))


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def causal_lm_loss(logits, labels, vocab_size: int, num_items_in_batch=None,
                   ignore_index: int = -100, shift_labels=None, *, label_smoothing: float = 0.0,
                   z_loss: float = 0.0, softcap: float | None = None, form: str = "auto",
                   **kwargs):  # fmt: skip
    """Hugging Face's ``ForCausalLMLoss`` over :func:`normlab.cross_entropy`: labels shifted
    left by one, mean over non-ignored tokens (or a sum over ``num_items_in_batch``). The logits
    stay in their dtype; the kernel reduces in fp32. ``label_smoothing``, ``z_loss``,
    ``softcap`` and ``form`` go to cross_entropy (bind them with functools.partial before
    assigning the function as a model's loss_function; Hugging Face's own call passes none).
    Inside torch.compile, ``form="auto"`` takes the split form from one row an SM; its backward
    holds the logits and the gradient together. ``form="chunked"`` peaks one (M, V) tensor
    lower, at one more pass over it."""
    from normlab.losses import cross_entropy

    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    logits = logits.reshape(-1, vocab_size)
    shift_labels = shift_labels.reshape(-1).to(logits.device)
    options = {"ignore_index": ignore_index, "label_smoothing": label_smoothing,
               "z_loss": z_loss, "softcap": softcap, "form": form}  # fmt: skip
    if num_items_in_batch is None:
        return cross_entropy(logits, shift_labels, reduction="mean", **options)
    loss = cross_entropy(logits, shift_labels, reduction="sum", **options)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def patch(model: torch.nn.Module, *, norms: bool = True, loss: bool = False,
          fused_add: bool = False, strategy: str = "auto",
          layout: str = "auto") -> PatchReport:  # fmt: skip
    """Swap ``model``'s norms for normlab's modules (same parameters) and, with ``loss=True``,
    a Hugging Face causal LM's loss for :func:`causal_lm_loss`. With ``fused_add=True`` (needs
    ``norms`` and transformers 5), each Llama-style decoder layer (``FUSED_ADD_DECODER_CLASSES``)
    computes its mid-block residual add and post-attention norm in one kernel,
    :func:`normlab.add_rms_norm`. Returns what it did."""
    if fused_add and not norms:
        raise ValueError("patch(fused_add=True) moves residual adds into normlab's norms; it "
                         "needs norms=True")  # fmt: skip
    report = PatchReport()
    if norms:
        for parent_name, parent in list(model.named_modules()):
            for child_name, child in list(parent.named_children()):
                full = f"{parent_name}.{child_name}" if parent_name else child_name
                new = _replacement(child, strategy, layout)
                if new is not None:
                    new.train(child.training)
                    setattr(parent, child_name, new)
                    report.replaced.append(full)
                elif _looks_like_norm(child):
                    report.skipped.append((full, type(child).__name__))
    if fused_add:
        layers = [(name, layer) for name, layer in model.named_modules() if _fusable_decoder(layer)]
        if layers and _transformers_major() < 5:
            raise ValueError("patch(fused_add=True) rewrites transformers 5's decoder layers, "
                             "which return a tensor; this transformers is older")  # fmt: skip
        for name, layer in layers:
            layer.__class__ = _fused_add_class(type(layer))
            report.fused_add.append(name)
    if loss:
        if not isinstance(getattr(type(model), "loss_function", None), property):
            raise TypeError(
                f"patch(loss=True): {type(model).__name__} has no Hugging Face loss_function to "
                "replace; call normlab.cross_entropy in your training step instead"
            )
        model.loss_function = causal_lm_loss
        report.loss = True
    return report
