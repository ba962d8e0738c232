"""Drop-in modules over normlab's kernels: norms that subclass torch's, and the losses."""

import math

import torch

from normlab import losses as _losses
from normlab._host import is_finite_real
from normlab.norms import op as _norm

# ---- norms -----------------------------------------------------------------------------------


def _check_knobs(cls_name, strategy, layout, offset, elementwise_affine):
    if strategy not in _norm.STRATEGIES:
        raise ValueError(f"{cls_name}: strategy={strategy!r}; expected one of {_norm.STRATEGIES}")
    if layout not in _norm.LAYOUTS:
        raise ValueError(f"{cls_name}: layout={layout!r}; expected one of {_norm.LAYOUTS}")
    if not is_finite_real(offset):
        raise ValueError(f"{cls_name}: offset must be a finite float, got {offset!r}")
    if offset != 0 and not elementwise_affine:
        raise ValueError(f"{cls_name}: offset={offset!r} scales by (offset + weight) and needs "
                         "elementwise_affine=True")  # fmt: skip


def _reset_weight(module):
    """Start the scale (offset + weight) at 1, as torch's weight of ones: weight = 1 - offset
    (Gemma's zeros at offset 1); the torch default where offset is 0."""
    offset = getattr(module, "offset", 0.0)  # torch's __init__ resets before offset is set
    if offset and module.weight is not None:
        with torch.no_grad():
            module.weight.fill_(1.0 - offset)


def _knobs_repr(module):
    offset = f", offset={module.offset}" if module.offset else ""
    return f"strategy={module.strategy!r}, layout={module.layout!r}{offset}"


def _flatten_trailing(module, x):
    """x (..., *normalized_shape) -> (..., prod(normalized_shape)) for the 1-D kernels."""
    shape = tuple(module.normalized_shape)
    if not shape:  # torch raises too: there is no dimension to normalize over
        raise ValueError(f"{type(module).__name__}: normalized_shape is empty; it needs >= 1 dim")
    if tuple(x.shape[x.dim() - len(shape) :]) != shape:
        raise ValueError(
            f"{type(module).__name__}: input shape {tuple(x.shape)} does not end with "
            f"normalized_shape {shape}"
        )
    return x.reshape(*x.shape[: x.dim() - len(shape)], math.prod(shape)) if len(shape) != 1 else x


def _flat(p):
    return p.reshape(-1) if p is not None else None


class RMSNorm(torch.nn.RMSNorm):
    """Drop-in ``torch.nn.RMSNorm`` (same arguments and state_dict) over :func:`normlab.rms_norm`.

    ``eps=None`` means ``torch.finfo(torch.float32).eps`` for every input dtype, as in torch,
    whose fp16/bf16 RMSNorm computes in fp32 and takes the eps of that compute dtype (not
    ``finfo(x.dtype).eps``: 0.0078 for bf16). Keyword-only ``strategy`` and ``layout`` choose the
    backward dweight reduction and the row/block-row kernels; ``offset`` scales by
    ``(offset + weight)`` (Gemma: 1), the weight then starting at ``1 - offset``.
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None,
                 *, offset=0.0, strategy="auto", layout="auto"):  # fmt: skip
        _check_knobs("RMSNorm", strategy, layout, offset, elementwise_affine)
        super().__init__(normalized_shape, eps, elementwise_affine, device=device, dtype=dtype)
        self.strategy, self.layout, self.offset = strategy, layout, float(offset)
        _reset_weight(self)

    def reset_parameters(self):
        super().reset_parameters()
        _reset_weight(self)

    def forward(self, x):
        y = _norm.rms_norm(_flatten_trailing(self, x), _flat(self.weight), self.eps,
                           offset=self.offset, strategy=self.strategy,
                           layout=self.layout)  # fmt: skip
        return y.view(x.shape)

    def extra_repr(self):
        return f"{super().extra_repr()}, {_knobs_repr(self)}"


class LayerNorm(torch.nn.LayerNorm):
    """Drop-in ``torch.nn.LayerNorm`` (same arguments and state_dict) over
    :func:`normlab.layer_norm`.

    Keyword-only ``offset``, ``strategy`` and ``layout`` as for :class:`RMSNorm`.
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                 dtype=None, *, offset=0.0, strategy="auto", layout="auto"):  # fmt: skip
        _check_knobs("LayerNorm", strategy, layout, offset, elementwise_affine)
        super().__init__(
            normalized_shape, eps, elementwise_affine, bias, device=device, dtype=dtype
        )
        self.strategy, self.layout, self.offset = strategy, layout, float(offset)
        _reset_weight(self)

    def reset_parameters(self):
        super().reset_parameters()
        _reset_weight(self)

    def forward(self, x):
        y = _norm.layer_norm(_flatten_trailing(self, x), _flat(self.weight), _flat(self.bias),
                             self.eps, offset=self.offset, strategy=self.strategy,
                             layout=self.layout)  # fmt: skip
        return y.view(x.shape)

    def extra_repr(self):
        return f"{super().extra_repr()}, {_knobs_repr(self)}"


# ---- losses ----------------------------------------------------------------------------------


class ReverseKLLoss(torch.nn.Module):
    """``KL(softmax(logits / T) || softmax(target_logits / T))`` per row; see
    :func:`normlab.reverse_kl`. ``forward(logits, target_logits, loss_mask=None)``."""

    _loss = staticmethod(_losses.reverse_kl)

    def __init__(self, reduction="mean", form="auto", block_cap=None, group=None, *,
                 temperature=1.0):  # fmt: skip
        super().__init__()
        self.reduction, self.form, self.block_cap, self.group = reduction, form, block_cap, group
        self.temperature = temperature

    def _options(self):
        return {"temperature": self.temperature}

    def forward(self, logits, target_logits, loss_mask=None):
        return self._loss(logits, target_logits, form=self.form, block_cap=self.block_cap,
                          reduction=self.reduction, group=self.group, loss_mask=loss_mask,
                          **self._options())  # fmt: skip

    def extra_repr(self):
        options = "".join(f", {k}={v!r}" for k, v in self._options().items())
        return (f"reduction={self.reduction!r}, form={self.form!r}, block_cap={self.block_cap}"
                f"{options}")  # fmt: skip


class SoftCrossEntropyLoss(ReverseKLLoss):
    """``-sum softmax(target_logits / T) * log_softmax(logits / T)`` per row; see
    :func:`normlab.soft_cross_entropy`."""

    _loss = staticmethod(_losses.soft_cross_entropy)


class ForwardKLLoss(ReverseKLLoss):
    """``KL(softmax(target_logits / T) || softmax(logits / T))`` per row; see
    :func:`normlab.forward_kl`."""

    _loss = staticmethod(_losses.forward_kl)


class JSDLoss(ReverseKLLoss):
    """``beta KL(q || m) + (1 - beta) KL(p || m)``, m = beta q + (1 - beta) p, per row; see
    :func:`normlab.jsd`."""

    _loss = staticmethod(_losses.jsd)

    def __init__(self, reduction="mean", form="auto", block_cap=None, group=None, *, beta=0.5,
                 temperature=1.0):  # fmt: skip
        super().__init__(reduction, form, block_cap, group, temperature=temperature)
        self.beta = beta

    def _options(self):
        return {"beta": self.beta, "temperature": self.temperature}


class CrossEntropyLoss(torch.nn.CrossEntropyLoss):
    """``torch.nn.CrossEntropyLoss`` on class-index targets, by :func:`normlab.cross_entropy`.

    Logits are (..., V) with the classes *last* (the LM-head layout, not torch's (N, C, d1...)).
    ``label_smoothing`` is torch's; keyword-only ``z_loss`` and ``softcap`` as in
    :func:`normlab.cross_entropy`; ``forward(logits, labels, loss_mask=None)``. The positional
    arguments are torch's (``weight`` first); ``weight`` is not supported (ValueError).
    """

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0, *, form="auto", block_cap=None,
                 group=None, z_loss=0.0, softcap=None):  # fmt: skip
        if weight is not None:
            raise ValueError("normlab.nn.CrossEntropyLoss: weight is not supported")
        super().__init__(None, size_average, ignore_index, reduce, reduction,
                         label_smoothing)  # fmt: skip
        self.form, self.block_cap, self.group = form, block_cap, group
        self.z_loss, self.softcap = z_loss, softcap

    def extra_repr(self):
        knobs = {"label_smoothing": 0.0, "z_loss": 0.0, "softcap": None, "form": "auto",
                 "block_cap": None}
        changed = "".join(f", {k}={getattr(self, k)!r}" for k, default in knobs.items()
                          if getattr(self, k) != default)  # fmt: skip
        return f"ignore_index={self.ignore_index}, reduction={self.reduction!r}{changed}"

    def forward(self, logits, labels, loss_mask=None):
        return _losses.cross_entropy(logits, labels, ignore_index=self.ignore_index,
                                     reduction=self.reduction, form=self.form,
                                     block_cap=self.block_cap, group=self.group,
                                     label_smoothing=self.label_smoothing, z_loss=self.z_loss,
                                     softcap=self.softcap, loss_mask=loss_mask)  # fmt: skip
