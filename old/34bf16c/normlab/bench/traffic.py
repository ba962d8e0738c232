"""Bytes-moved models: the numerator of every GB/s that normlab reports.

Two models, per op and direction (M rows or tokens, N columns or vocabulary, e = element size):

``minimal`` (the default; the model of the H200 peer measurements) counts only the
unavoidable HBM traffic of the activations, so its GB/s never flatters a kernel:

==================================  =========  ==============================================
op                                  direction  bytes
==================================  =========  ==============================================
rms_norm, layer_norm                fwd        2·M·N·e   read x, write y
rms_norm, layer_norm                bwd        3·M·N·e   read x (or y), read dy, write dx
rms_norm, layer_norm                fwd+bwd    5·M·N·e
add_rms_norm, add_layer_norm        fwd        4·M·N·e   read x, residual; write y, h
add_rms_norm, add_layer_norm        bwd        4·M·N·e   read h, dy, dh; write dx (= dresidual)
add_rms_norm, add_layer_norm        fwd+bwd    8·M·N·e
reverse_kl, soft_cross_entropy,     fwd        2·M·N·e   read logits and target
forward_kl, jsd                     fwd+bwd    3·M·N·e   read both, write d logits
cross_entropy (labels)              fwd        1·M·N·e   read logits
cross_entropy (labels)              fwd+bwd    2·M·N·e   read logits, write d logits
copy                                fwd        2·M·N·e   read src, write dst
==================================  =========  ==============================================

A soft loss's target may come in its own dtype (``target_dtype``, e.g. an fp32 teacher beside
bf16 logits): its read then counts ``M·N·e_target`` in place of ``M·N·e``.

The add-norms' backward writes one dx, the gradient of both x and the residual. Peers that add
and normalize in separate kernels move more (h is written, then read back); their GB/s here is
the effective bandwidth of the fused op's bytes.

``full`` adds what a real kernel also moves: the weight (and bias) read once per pass, the
parameter gradients written once, the fp32 row statistics (rstd, plus mean for LayerNorm, plus
the row log-sum-exp / loss for losses) written in the forward and read in the backward, int64
labels, and ``n_partials`` fp32 rows of dγ (and dβ) partials written then read back. It is
still a lower bound of the hardware's traffic (no re-reads from cache misses are counted).
"""

from __future__ import annotations

import torch

NORM_OPS = ("rms_norm", "layer_norm")
ADD_NORM_OPS = ("add_rms_norm", "add_layer_norm")  # the residual add fused before the norm
SOFT_LOSS_OPS = ("reverse_kl", "soft_cross_entropy", "forward_kl", "jsd")
LABEL_LOSS_OPS = ("cross_entropy",)
OPS = NORM_OPS + ADD_NORM_OPS + SOFT_LOSS_OPS + LABEL_LOSS_OPS + ("copy",)
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
MODELS = ("minimal", "full")

# Multiples of M·N·e in the minimal model, keyed by (op family, direction).
_MINIMAL = {
    ("norm", "fwd"): 2,
    ("norm", "bwd"): 3,
    ("norm", "fwd+bwd"): 5,
    ("add_norm", "fwd"): 4,
    ("add_norm", "bwd"): 4,
    ("add_norm", "fwd+bwd"): 8,
    ("soft", "fwd"): 2,
    ("soft", "fwd+bwd"): 3,
    ("label", "fwd"): 1,
    ("label", "fwd+bwd"): 2,
    ("copy", "fwd"): 2,
}
_FP32 = 4
_INT64 = 8


def _family(op: str) -> str:
    if op in NORM_OPS:
        return "norm"
    if op in ADD_NORM_OPS:
        return "add_norm"
    if op in SOFT_LOSS_OPS:
        return "soft"
    if op in LABEL_LOSS_OPS:
        return "label"
    if op == "copy":
        return "copy"
    raise ValueError(f"unknown op {op!r}: expected one of {', '.join(OPS)}")


def element_size(dtype: torch.dtype | str) -> int:
    """Bytes per element of a torch dtype or of a short name ("bf16", "fp16", "fp32")."""
    from normlab.bench.records import parse_dtype

    return torch.empty((), dtype=parse_dtype(dtype)).element_size()


def bytes_moved(
    op: str,
    direction: str,
    n_rows: int,
    n_cols: int,
    dtype: torch.dtype | str = torch.bfloat16,
    *,
    model: str = "minimal",
    weight_dtype: torch.dtype | str | None = None,
    n_partials: int = 0,
    target_dtype: torch.dtype | str | None = None,
) -> int:
    """Bytes one call of ``op`` in ``direction`` moves to or from HBM (see the module docstring).

    ``weight_dtype`` defaults to ``dtype``; ``n_partials`` (``full`` model only) is the number of
    fp32 partial rows a two-stage parameter-gradient reduction writes and reads back;
    ``target_dtype`` (soft losses only) is the target logits' dtype, by default ``dtype``.
    """
    family = _family(op)
    if (family, direction) not in _MINIMAL:
        raise ValueError(f"op {op!r} has no direction {direction!r}")
    if model not in MODELS:
        raise ValueError(f"unknown bytes model {model!r}: expected one of {', '.join(MODELS)}")
    if n_rows < 1 or n_cols < 1:
        raise ValueError(f"shape must be positive, got {n_rows}x{n_cols}")
    if n_partials < 0:
        raise ValueError(f"n_partials must be >= 0, got {n_partials}")
    if target_dtype is not None and family != "soft":
        raise ValueError(f"op {op!r} has no target logits: target_dtype is for {SOFT_LOSS_OPS}")
    e = element_size(dtype)
    total = _MINIMAL[(family, direction)] * n_rows * n_cols * e
    if target_dtype is not None:  # the target read once, in its own dtype
        total += n_rows * n_cols * (element_size(target_dtype) - e)
    if model == "minimal" or family == "copy":
        return total

    ew = element_size(weight_dtype if weight_dtype is not None else dtype)
    fwd, bwd = direction in ("fwd", "fwd+bwd"), direction in ("bwd", "fwd+bwd")
    if family in ("norm", "add_norm"):
        is_ln = op in ("layer_norm", "add_layer_norm")
        n_params = 2 if is_ln else 1  # weight (+ bias)
        n_stats = 2 if is_ln else 1  # rstd (+ mean), fp32 per row
        if fwd:
            total += n_params * n_cols * ew + n_stats * n_rows * _FP32
        if bwd:
            total += n_cols * ew  # weight read (bias is not needed by the backward)
            total += n_stats * n_rows * _FP32  # stats read
            total += n_params * n_cols * ew  # dγ (+ dβ) written
            total += 2 * n_params * n_partials * n_cols * _FP32  # partials written, read back
        return total
    # Losses: one fp32 per-row loss/log-sum-exp written (and read by a split backward).
    total += n_rows * _FP32 * (2 if bwd else 1)
    if family == "label":
        total += n_rows * _INT64
    return total


ADD_UNITS = 3  # an elementwise add of two M×N tensors in its own kernel: read both, write one


def separate_add_bytes(op: str, direction: str, n_rows: int, n_cols: int,
                       dtype: torch.dtype | str = torch.bfloat16) -> int:
    """Minimal bytes of ``op`` (an add-norm) computed the unfused way: the residual add in its own
    kernel, then the norm; backward, the norm's, then autograd's sum of h's two gradients. The
    fused op moves ``bytes_moved(op, ...)``: forward+backward 11 against 8 units of M·N·e."""
    if _family(op) != "add_norm":
        raise ValueError(f"op {op!r} has no separate add: expected one of {ADD_NORM_OPS}")
    norm = op.removeprefix("add_")
    adds = {"fwd": 1, "bwd": 1, "fwd+bwd": 2}[direction]
    return (bytes_moved(norm, direction, n_rows, n_cols, dtype)
            + adds * ADD_UNITS * n_rows * n_cols * element_size(dtype))  # fmt: skip


def gbps(n_bytes: float, time_us: float | None) -> float | None:
    """Achieved bandwidth in GB/s (1 GB = 1e9 B); None when there is no time."""
    if time_us is None:
        return None
    if time_us <= 0:
        raise ValueError(f"time must be positive, got {time_us} us")
    return n_bytes / time_us / 1e3


def fraction_of_roofline(achieved_gbps: float | None, roofline_gbps: float | None) -> float | None:
    """achieved / roofline (the measured copy bandwidth); None when either is unknown."""
    if achieved_gbps is None or not roofline_gbps:
        return None
    return achieved_gbps / roofline_gbps
