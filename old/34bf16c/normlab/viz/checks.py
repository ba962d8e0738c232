"""Correctness verdicts for the notebooks' check cells: one deterministic line per comparison.

The line carries no measured error (that varies by machine), only OK or FAIL against the
tolerance, so nbval can compare it exactly. The tolerances are ``normlab.ref``'s, the tests'
own.
"""

from __future__ import annotations

import math

import torch

from normlab.ref import TOLERANCES, tolerance


def max_violation(actual: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> float:
    """max(|a - e| - (atol + rtol·|e|)) in fp64; > 0 means outside the tolerance. NaN/Inf must
    sit at the same places in both (a mismatch counts as +inf)."""
    a = actual.detach().to("cpu", torch.float64)
    e = expected.detach().to("cpu", torch.float64)
    if a.shape != e.shape:
        raise ValueError(f"shape mismatch: {tuple(a.shape)} vs {tuple(e.shape)}")
    same_nonfinite = (torch.isnan(a) & torch.isnan(e)) | (torch.isinf(a) & (a == e))
    finite = torch.isfinite(a) & torch.isfinite(e)
    if not bool((finite | same_nonfinite).all()):
        return math.inf
    if not bool(finite.any()):
        return -math.inf
    return float(((a - e).abs() - (atol + rtol * e.abs()))[finite].max())


def verdict(label: str, actual: torch.Tensor, expected: torch.Tensor, *,
            dtype: torch.dtype | None = None, reduce_len: int | None = None) -> str:
    """``"<label>: OK (max |err| within tol)"`` or ``"<label>: FAIL (...)"``, tolerance per
    dtype."""
    dtype = dtype or actual.dtype
    if dtype not in TOLERANCES:
        raise ValueError(f"no tolerance for {dtype}; expected one of {list(TOLERANCES)}")
    atol, rtol = tolerance(dtype, reduce_len)
    worst = max_violation(actual, expected, atol, rtol)
    tol = f"atol {atol:.2g} + rtol {rtol:.2g}·|ref|"
    if worst <= 0:
        return f"{label}: OK (max |err| within {tol})"
    return f"{label}: FAIL (exceeds {tol} by {worst:.3g})"
