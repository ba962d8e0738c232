"""Reference implementations, one per op, in plain PyTorch at fp32 (or fp64 if given fp64).

These are the oracle for the tests, the ``eager`` baseline of the benchmarks and the check
cell of every notebook. They import only torch.
"""

from __future__ import annotations

import torch  # noqa: F401

# ============================================================================================
# Norms                                                           -- owned by the norm kernels
# ============================================================================================


def _ref_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def rms_norm(x, weight=None, eps: float = 1e-6):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dim, at fp32 (fp64 if x is fp64).

    Returns the result in the compute dtype (not cast back), so tests compare against it directly.
    """
    dt = _ref_dtype(x)
    xf = x.to(dt)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = xf * rstd
    return y * weight.to(dt) if weight is not None else y


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance)."""
    dt = _ref_dtype(x)
    xf = x.to(dt)
    mean = xf.mean(-1, keepdim=True)
    xc = xf - mean
    y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.to(dt)
    return y + bias.to(dt) if bias is not None else y


def norm_backward(dy, x, weight=None, bias=None, eps: float = 1e-6, is_rms: bool = True):
    """(dx, dweight, dbias) of rms_norm / layer_norm by autograd at fp32/fp64 (None if absent)."""
    dt = _ref_dtype(x)
    xf = x.detach().to(dt).requires_grad_(True)
    wf = weight.detach().to(dt).requires_grad_(True) if weight is not None else None
    bf = bias.detach().to(dt).requires_grad_(True) if bias is not None else None
    y = rms_norm(xf, wf, eps) if is_rms else layer_norm(xf, wf, bf, eps)
    inputs = [t for t in (xf, wf, bf) if t is not None]
    grads = iter(torch.autograd.grad(y, inputs, dy.to(dt)))
    dx = next(grads)
    dw = next(grads) if wf is not None else None
    db = next(grads) if bf is not None else None
    return dx, dw, db


# ============================================================================================
# Entropy losses                                                  -- owned by the entropy kernels
# ============================================================================================
