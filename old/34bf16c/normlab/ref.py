"""Reference implementations, one per op, in plain PyTorch at fp32 (or fp64 if given fp64).

These are the oracle for the tests, the ``eager`` baseline of the benchmarks and the check
cell of every notebook, with the tolerance a kernel must meet against them. They import only
torch.
"""

from __future__ import annotations

import math

import torch

# ============================================================================================
# Tolerances
# ============================================================================================

# dtype -> (atol, rtol) for a kernel's output in that dtype against this reference computed from
# the same (already rounded) inputs: about two ulps of the dtype (ulp at 1.0: fp32 1.2e-7, fp16
# 9.8e-4, bf16 7.8e-3). Tests, the notebooks' check lines and the GPU check scripts use it.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype, reduce_len: int | None = None) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``. A value summing ``reduce_len`` terms (dweight over M rows) has
    a magnitude and a summation-order error growing like sqrt(reduce_len) for random data, so
    the atol is scaled by it (quack's ``5e-6 * M**0.5``)."""
    if dtype not in TOLERANCES:
        raise KeyError(f"no tolerance for {dtype}; expected one of {list(TOLERANCES)}")
    atol, rtol = TOLERANCES[dtype]
    if reduce_len is not None:
        atol *= math.sqrt(max(int(reduce_len), 1))
    return atol, rtol

# ============================================================================================
# Norms
# ============================================================================================


def _ref_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def rms_norm(x, weight=None, eps: float = 1e-6, offset: float = 0.0):
    """y = x / sqrt(mean(x^2) + eps) * (offset + weight) over the last dim, at fp32 (fp64 if x is
    fp64).

    Returns the result in the compute dtype (not cast back), so tests compare against it directly.
    """
    dt = _ref_dtype(x)
    xf = x.to(dt)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = xf * rstd
    return y * (offset + weight.to(dt)) if weight is not None else y


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, offset: float = 0.0):
    """y = (x - mean) / sqrt(var + eps) * (offset + weight) + bias over the last dim (biased
    variance)."""
    dt = _ref_dtype(x)
    xf = x.to(dt)
    mean = xf.mean(-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (offset + weight.to(dt))
    return y + bias.to(dt) if bias is not None else y


def residual_sum(x, residual):
    """h = x + residual summed at fp32 (fp64 if x is fp64) and stored in x's dtype, as the fused
    add-norms store it."""
    dt = _ref_dtype(x)
    return (x.to(dt) + residual.to(dt)).to(x.dtype)


def add_rms_norm(x, residual, weight=None, eps: float = 1e-6, offset: float = 0.0):
    """(rms_norm(h), h) for h = residual_sum(x, residual): y in the compute dtype, h in x's."""
    h = residual_sum(x, residual)
    return rms_norm(h, weight, eps, offset), h


def add_layer_norm(x, residual, weight=None, bias=None, eps: float = 1e-5, offset: float = 0.0):
    """(layer_norm(h), h) for h = residual_sum(x, residual)."""
    h = residual_sum(x, residual)
    return layer_norm(h, weight, bias, eps, offset), h


def norm_backward(dy, x, weight=None, bias=None, eps: float = 1e-6, is_rms: bool = True,
                  offset: float = 0.0):  # fmt: skip
    """(dx, dweight, dbias) of rms_norm / layer_norm by autograd at fp32/fp64 (None if absent)."""
    dt = _ref_dtype(x)
    xf = x.detach().to(dt).requires_grad_(True)
    wf = weight.detach().to(dt).requires_grad_(True) if weight is not None else None
    bf = bias.detach().to(dt).requires_grad_(True) if bias is not None else None
    y = rms_norm(xf, wf, eps, offset) if is_rms else layer_norm(xf, wf, bf, eps, offset)
    inputs = [t for t in (xf, wf, bf) if t is not None]
    grads = iter(torch.autograd.grad(y, inputs, dy.to(dt)))
    dx = next(grads)
    dw = next(grads) if wf is not None else None
    db = next(grads) if bf is not None else None
    return dx, dw, db


# ============================================================================================
# Entropy losses
# ============================================================================================


def _loss_upcast(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def _reduce_rows(per_row: torch.Tensor, reduction: str, lead_shape: torch.Size,
                 loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """Rows reduced; with a bool ``loss_mask`` the rows where it is False count 0 and "mean"
    divides by the number of True rows."""
    if loss_mask is not None:
        keep = loss_mask.reshape(-1)
        per_row = torch.where(keep, per_row, 0.0)
        if reduction == "mean":
            return per_row.sum() / keep.sum()
    if reduction == "mean":
        return per_row.mean()
    if reduction == "sum":
        return per_row.sum()
    if reduction == "none":
        return per_row.reshape(lead_shape)
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _log_probs(logits, target_logits, temperature):
    """log softmax(logits / T), log softmax(target_logits / T), at fp32 (fp64 if given fp64)."""
    dt = torch.float64 if torch.float64 in (logits.dtype, target_logits.dtype) else torch.float32
    return ((logits.to(dt) / temperature).log_softmax(-1),
            (target_logits.to(dt) / temperature).log_softmax(-1))  # fmt: skip


def reverse_kl_ref(logits: torch.Tensor, target_logits: torch.Tensor, reduction: str = "mean",
                   temperature: float = 1.0,
                   loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """KL(p || q) per row, p = softmax(logits / T), q = softmax(target_logits / T), over the last
    dim.

    ``sum_j p_j (log p_j - log q_j)``; terms with p_j = 0 count 0 (so -inf logits are allowed);
    a NaN probability (a NaN or +inf logit) makes its row's loss and gradient NaN, as torch's.
    "mean" averages over rows (batchmean), or over the rows where ``loss_mask`` is True (the
    others count 0). No T^2 factor. fp32 math (fp64 if given fp64).
    """
    log_p, log_q = _log_probs(logits, target_logits, temperature)
    p = log_p.exp()
    # where() inside the product keeps autograd free of 0 * inf at p = 0 (masked vocab).
    per_row = (p * torch.where(p != 0, log_p - log_q, 0.0)).sum(-1)  # NaN p: NaN, as torch
    return _reduce_rows(per_row.flatten(), reduction, logits.shape[:-1], loss_mask)


def forward_kl_ref(logits: torch.Tensor, target_logits: torch.Tensor, reduction: str = "mean",
                   temperature: float = 1.0,
                   loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """KL(q || p) = ``sum_j q_j (log q_j - log p_j)`` per row, p = softmax(logits / T) (the
    student), q = softmax(target_logits / T); terms with q_j = 0 count 0. Reductions as
    :func:`reverse_kl_ref`."""
    log_p, log_q = _log_probs(logits, target_logits, temperature)
    q = log_q.exp()
    per_row = (q * torch.where(q != 0, log_q - log_p, 0.0)).sum(-1)
    return _reduce_rows(per_row.flatten(), reduction, logits.shape[:-1], loss_mask)


def jsd_ref(logits: torch.Tensor, target_logits: torch.Tensor, reduction: str = "mean",
            beta: float = 0.5, temperature: float = 1.0,
            loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``beta KL(q || m) + (1 - beta) KL(p || m)`` per row, m = beta q + (1 - beta) p,
    p = softmax(logits / T), q = softmax(target_logits / T); terms with a zero probability
    count 0. Reductions as :func:`reverse_kl_ref`."""
    log_p, log_q = _log_probs(logits, target_logits, temperature)
    p, q = log_p.exp(), log_q.exp()
    m = beta * q + (1 - beta) * p
    log_m = torch.where(m != 0, m, 1.0).log()  # m = 0 only where p = q = 0 (terms skipped)
    kl_p = (p * torch.where(p != 0, log_p - log_m, 0.0)).sum(-1)
    kl_q = (q * torch.where(q != 0, log_q - log_m, 0.0)).sum(-1)
    per_row = beta * kl_q + (1 - beta) * kl_p
    return _reduce_rows(per_row.flatten(), reduction, logits.shape[:-1], loss_mask)


def soft_cross_entropy_ref(logits: torch.Tensor, target_logits: torch.Tensor,
                           reduction: str = "mean", temperature: float = 1.0,
                           loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``-sum_j q_j log p_j`` per row, q = softmax(target_logits / T), p = softmax(logits / T).

    Terms with q_j = 0 count 0. Reductions as :func:`reverse_kl_ref`. fp32 math (fp64 if given
    fp64).
    """
    log_p, log_q = _log_probs(logits, target_logits, temperature)
    q = log_q.exp()
    per_row = -(q * torch.where(q != 0, log_p, 0.0)).sum(-1)
    return _reduce_rows(per_row.flatten(), reduction, logits.shape[:-1], loss_mask)


def cross_entropy_ref(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = -100,
                      reduction: str = "mean", label_smoothing: float = 0.0, z_loss: float = 0.0,
                      softcap: float | None = None,
                      loss_mask: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """``F.cross_entropy`` on fp32 (or fp64) logits flattened to (M, V): torch semantics,
    ``label_smoothing`` included.

    "mean" is over non-ignored rows (NaN when every row is ignored, as in torch). ``softcap``
    c: the logits become c tanh(logits / c) first; ``z_loss`` z adds z logsumexp^2 per
    non-ignored row (PaLM); rows where ``loss_mask`` is False count as ignored.
    """
    n_cols = logits.shape[-1]
    x = _loss_upcast(logits).reshape(labels.numel(), n_cols)  # V = 0 too (no -1 to infer)
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    flat = labels.reshape(-1).long()
    if loss_mask is not None:
        flat = torch.where(loss_mask.reshape(-1), flat, ignore_index)
    out = torch.nn.functional.cross_entropy(x, flat, ignore_index=ignore_index,
                                            reduction=reduction,
                                            label_smoothing=label_smoothing)  # fmt: skip
    if z_loss:
        valid = flat != ignore_index
        z_rows = torch.where(valid, z_loss * x.logsumexp(-1) ** 2, 0.0)
        if reduction == "none":
            out = out + z_rows
        elif reduction == "sum":
            out = out + z_rows.sum()
        else:
            out = out + z_rows.sum() / valid.sum()
    return out.reshape(logits.shape[:-1]) if reduction == "none" else out
