"""Host-side pieces the kernel modules' launchers share."""

from __future__ import annotations

import torch

# The dtypes the Triton kernels take (fp64 and integers raise: use normlab.ref for fp64).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def unit_col_stride(t: torch.Tensor) -> torch.Tensor:
    """A 2-D tensor whose columns are unit-stride (rows may be strided, e.g. a view of a wider
    buffer): ``t`` itself when it already is, else a contiguous copy."""
    return t if t.stride(1) == 1 or t.shape[1] == 1 else t.contiguous()


def is_valid_eps(eps) -> bool:
    """A norm's eps: a finite real number >= 0 (not a bool)."""
    return isinstance(eps, (int, float)) and not isinstance(eps, bool) and 0.0 <= eps < float("inf")
