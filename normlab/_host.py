"""Host-side pieces the kernel modules' launchers share."""

from __future__ import annotations

import numbers

import torch


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for ints (``triton.cdiv`` costs ~2 µs per host call: it unwraps constexprs)."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1); ``triton.next_power_of_2`` for the host."""
    return 1 << (int(n) - 1).bit_length() if n > 1 else 1


def prev_pow2(n: int) -> int:
    """The largest power of two <= n (1 for n <= 1)."""
    return 1 << (int(n).bit_length() - 1) if n > 1 else 1


# The dtypes the Triton kernels take (fp64 and integers raise: use normlab.ref for fp64).
FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def unit_col_stride(t: torch.Tensor) -> torch.Tensor:
    """A 2-D tensor whose columns are unit-stride (rows may be strided, e.g. a view of a wider
    buffer): ``t`` itself when it already is, else a contiguous copy."""
    return t if t.stride(1) == 1 or t.shape[1] == 1 else t.contiguous()


def fused_add_buffers(x2d: torch.Tensor, residual, h_out):
    """A launcher's fused residual add, checked: (None, None), or the residual with x2d's shape
    (unit column stride) and ``h_out``, the (n_rows, n_cols) unit-column-stride buffer that
    receives h = x + residual."""
    if (residual is None) != (h_out is None):
        raise ValueError("the fused residual add takes residual and h_out together")
    if residual is None:
        return None, None
    if residual.shape != x2d.shape or h_out.shape != x2d.shape:
        raise ValueError(f"residual {tuple(residual.shape)} and h_out {tuple(h_out.shape)} must "
                         f"have x's shape {tuple(x2d.shape)}")  # fmt: skip
    if h_out.dtype != x2d.dtype or unit_col_stride(h_out) is not h_out:
        raise ValueError("h_out must be a unit-column-stride buffer of x's dtype")
    return unit_col_stride(residual), h_out


def _real(v) -> bool:
    """A real number: Python's int or float, or numpy's (not a bool)."""
    return isinstance(v, (int, float, numbers.Real)) and not isinstance(v, bool)


def is_finite_real(v) -> bool:
    """A finite real number (not a bool); comparisons, not math.isfinite, so that
    torch.compile(dynamic=True) can trace it."""
    inf = float("inf")
    return _real(v) and -inf < v < inf


def is_valid_eps(eps) -> bool:
    """A norm's eps: a finite real number >= 0 (not a bool)."""
    return _real(eps) and 0.0 <= eps < float("inf")


def rows_view(t, flat: bool = False):
    """t's rows as a (n_rows, n_cols) view of its own memory (``flat``: a (n,) view), or None
    when that would take a copy (or t is None): what a replayed call hands its launches."""
    if t is None:
        return None
    if flat:
        rows = t if t.dim() == 1 else t.flatten()
    else:  # (not reshape(-1, n_cols): -1 is ambiguous when n_cols is 0)
        rows = t if t.dim() == 2 else t.reshape(1, -1) if t.dim() == 1 else t.flatten(0, -2)
    return rows if rows.data_ptr() == t.data_ptr() else None


def plain_tensor(t) -> bool:
    """A torch.Tensor itself, outside any functorch transform: its pointer is its own memory,
    which a replayed call may key and hand to a launcher (a subclass or a transform's wrapper
    takes the full path)."""
    return type(t) is torch.Tensor and not _transforms_active()


_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_functorch = getattr(torch._C, "_functorch", None)
_is_batched = getattr(_functorch, "is_batchedtensor", lambda t: False)
_is_grad_tracking = getattr(_functorch, "is_gradtrackingtensor", lambda t: False)


def check_kernel_tensor(name: str, arg: str, t: torch.Tensor) -> None:
    """What a kernel cannot read whatever its dtype and device: a sparse (or other non-strided)
    layout, and a torch.func transform's wrapper (vmap's batched tensor, grad's tracking tensor),
    whose memory is not its values."""
    if t.layout is not torch.strided:
        raise TypeError(f"{name}: {arg} must be a dense (strided) tensor, got layout {t.layout}")
    if _is_batched(t) or _is_grad_tracking(t):
        raise RuntimeError(f"{name}: {arg} is inside a torch.func transform (vmap, grad, jacrev, "
                           "...), which normlab's kernels do not support; call it outside one")


def function_apply(cls):
    """``cls.apply`` (a ``torch.autograd.Function``) less its Python wrapper, about 2 µs a call:
    the C++ apply that ``Function.apply`` itself ends in when no functorch transform is active,
    after unwrapping dead functorch wrappers as it does. ``cls.apply`` itself under a transform,
    or where this torch lacks those pieces. For Functions whose forward takes ctx (no
    ``setup_context``) and positional arguments."""
    try:
        c_apply = super(torch.autograd.Function, cls).apply
        unwrap = torch._C._functorch.unwrap_if_dead
        active = torch._C._are_functorch_transforms_active
    except AttributeError:  # pragma: no cover - another torch's internals
        return cls.apply

    def apply(*args):
        if active():
            return cls.apply(*args)
        return c_apply(*[unwrap(a) if isinstance(a, torch.Tensor) else a for a in args])

    return apply
