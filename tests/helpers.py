"""Shared test tolerances and a verbose ``assert_close`` (import from any test module).

One table per dtype: the tolerance for comparing a kernel's output in that dtype against an
fp64 (or fp32) reference computed from the *same* (already rounded) inputs. The rtol is about
two ulps of the dtype (rounding the output is half an ulp; fp32 arithmetic inside adds a little).

Reductions: a value that sums ``reduce_len`` terms (e.g. dweight over M rows) has a magnitude
and a summation-order error that both grow like ``sqrt(reduce_len)`` for random data, so
``reduce_len`` scales the atol by ``sqrt(reduce_len)`` (quack's ``5e-6 * M**0.5``).
"""

from __future__ import annotations

import math

import torch

# dtype -> (atol, rtol); ulp at 1.0: fp32 1.2e-7, fp16 9.8e-4, bf16 7.8e-3.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-10, 1e-10),
    torch.float32: (2e-5, 2e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def tolerance(dtype: torch.dtype, reduce_len: int | None = None) -> tuple[float, float]:
    """(atol, rtol) for ``dtype``; atol scaled by sqrt(reduce_len) for reduced quantities."""
    if dtype not in TOLERANCES:
        raise KeyError(f"no tolerance for {dtype}; add it to tests/helpers.TOLERANCES")
    atol, rtol = TOLERANCES[dtype]
    if reduce_len is not None:
        atol *= math.sqrt(max(int(reduce_len), 1))
    return atol, rtol


def assert_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    reduce_len: int | None = None,
    dtype: torch.dtype | None = None,
    msg: str = "",
) -> None:
    """Assert ``|actual - expected| <= atol + rtol * |expected|`` elementwise, in fp64.

    ``dtype`` picks the tolerance row (default: ``actual.dtype``). NaN must sit at the same
    positions in both (never silently equal to a number). Shapes must match exactly. On failure
    the message lists the worst mismatches with their indices.
    """
    if actual.shape != expected.shape:
        raise AssertionError(
            f"{msg} shape mismatch: {tuple(actual.shape)} vs {tuple(expected.shape)}"
        )
    atol, rtol = tolerance(dtype or actual.dtype, reduce_len)
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    if not torch.equal(nan_a, nan_e):
        bad = (nan_a != nan_e).nonzero()[:5].tolist()
        raise AssertionError(f"{msg} NaN positions differ, e.g. at {bad}")
    finite = ~nan_a
    err = torch.zeros_like(a)
    err[finite] = (a[finite] - e[finite]).abs() - (atol + rtol * e[finite].abs())
    inf_mismatch = finite & (torch.isinf(a) | torch.isinf(e)) & (a != e)
    err[inf_mismatch] = math.inf
    if (err > 0).any():
        n_bad = int((err > 0).sum())
        worst = torch.topk(err.flatten(), min(5, n_bad)).indices
        lines = []
        for flat in worst.tolist():
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
            lines.append(f"  at {idx}: actual {a[idx].item():.6g} expected {e[idx].item():.6g}")
        max_abs = (a[finite] - e[finite]).abs().max().item()
        raise AssertionError(
            f"{msg} {n_bad}/{a.numel()} elements outside atol={atol:.3g} rtol={rtol:.3g} "
            f"(max abs err {max_abs:.3g}):\n" + "\n".join(lines)
        )
