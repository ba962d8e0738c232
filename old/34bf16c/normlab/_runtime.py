"""Runtime mode: compiled Triton kernels on a CUDA GPU, or the Triton interpreter on CPU.

The mode is decided once, when ``normlab`` is first imported, *before* any kernel is
defined: ``triton.jit`` decides at decoration time whether a function is compiled
(``JITFunction``) or interpreted (``InterpretedFunction``), from ``TRITON_INTERPRET`` (the
``triton.knobs.runtime.interpret`` knob in newer triton).

Interpret mode has two more things to set right:

* If triton was imported before normlab (``import triton``, ``import torch._dynamo``, a
  ``torch.compile`` call...), triton.language's own ``@jit`` library functions (``tl.sum``,
  ``tl.max``, ``tl.cdiv``, ...) were decorated compiled-mode and cannot be called from an
  interpreted kernel ("Cannot call @triton.jit'd outside of the scope of a kernel").
  :func:`_interpret_triton_library` re-wraps them as interpreted functions.
* The interpreter casts fp32 to bf16 by truncation; :func:`_install_bf16_rounding` makes it
  round to nearest even, as the GPU's ``cvt.rn.bf16.f32`` does.

Override with ``NORMLAB_MODE=gpu`` or ``NORMLAB_MODE=interpret`` (default ``auto``).
"""

from __future__ import annotations

import functools
import os
import sys

MODE_ENV = "NORMLAB_MODE"
_MODES = ("auto", "gpu", "interpret")


def _select_mode() -> str:
    requested = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if requested not in _MODES:
        raise ValueError(f"{MODE_ENV}={requested!r}: expected one of {', '.join(_MODES)}")
    import torch

    has_cuda = torch.cuda.is_available()
    if requested == "gpu" and not has_cuda:
        raise RuntimeError(f"{MODE_ENV}=gpu but torch sees no CUDA device")
    if requested == "interpret" or os.environ.get("TRITON_INTERPRET") == "1" or not has_cuda:
        return "interpret"
    return "gpu"


def _interpret_triton_library() -> int:
    """Replace the compiled-mode ``JITFunction`` objects of ``triton.language`` (decorated when
    triton was imported before interpret mode was set) with interpreted ones, as they would
    have been had ``TRITON_INTERPRET=1`` been set first. Returns how many were replaced."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    interpreted: dict[int, object] = {}  # id(JITFunction) -> its InterpretedFunction

    def as_interpreted(jit_fn):
        if id(jit_fn) not in interpreted:
            interpreted[id(jit_fn)] = InterpretedFunction(jit_fn.fn)
        return interpreted[id(jit_fn)]

    # Module attributes are the functions' globals, so library functions that call each other
    # (tl.softmax -> max, sum; sum -> _sum_combine) see the replacements too.
    modules = [m for name, m in list(sys.modules.items()) if m is not None
               and (name == "triton.language" or name.startswith("triton.language."))]
    for module in modules:
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                setattr(module, attr, as_interpreted(value))

    # Tensor methods (x.sum(), x.to...): a JITFunction is set on tl.tensor as is, anything else
    # through a plain forwarding function (triton.language.core._tensor_member_fn).
    for attr, value in list(vars(tl.tensor).items()):
        if isinstance(value, JITFunction):
            setattr(tl.tensor, attr, _tensor_method(as_interpreted(value)))
    return len(interpreted)


def _tensor_method(fn):
    def method(*args, **kwargs):
        return fn(*args, **kwargs)

    method.__name__ = getattr(fn, "__name__", "method")
    return method


def fp32_to_bf16_bits(values):
    """bfloat16 bit patterns (``np.uint16``) of float32 ``values``, rounded to nearest even;
    NaN stays NaN (quieted), values past the largest bfloat16 round to +-inf."""
    import numpy as np

    f32 = np.asarray(values, dtype=np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)  # room for the carry out of 0xFFFF_xxxx
    # Adding 0x7FFF plus the kept lowest bit rounds the dropped 16 bits half-to-even; a carry
    # runs into the exponent (up to inf) as it should.
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    quiet_nan = (bits >> 16) | 0x0040
    return np.where(np.isnan(f32), quiet_nan, rounded).astype(np.uint16)


def bf16_bits_to_fp32(bits):
    """float32 values of bfloat16 bit patterns (exact: the bits are the float32's high half)."""
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def _install_bf16_rounding() -> bool:
    """Make the interpreter's fp32 <-> bf16 casts match the GPU: fp32 -> bf16 rounds to nearest
    even (the interpreter truncates), bf16 -> fp32 is exact for subnormals too (the
    interpreter's renormalisation gets them wrong).

    Patches ``InterpreterBuilder.cast_impl`` (``x.to(...)``, loads from and stores into bf16,
    bf16 constants) and ``create_fp_to_fp`` with rounding "rtne"; other casts are untouched.
    Returns False, changing nothing, where this triton's interpreter is not laid out as
    expected (3.6 to 3.9 are)."""
    import inspect

    try:
        import triton.language as tl
        from triton.runtime import interpreter

        builder_cls = interpreter.InterpreterBuilder
        tensor_handle = interpreter.TensorHandle
        rtne = interpreter._ir.ROUNDING_MODE.RTNE
        cast_impl = builder_cls.cast_impl
        fp_to_fp = builder_cls.create_fp_to_fp
        cast_params = list(inspect.signature(cast_impl).parameters)
        fp_to_fp_params = list(inspect.signature(fp_to_fp).parameters)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    if getattr(cast_impl, "_normlab_rne", False):
        return True
    if (cast_params != ["self", "src", "dst_type"]
            or fp_to_fp_params != ["self", "src", "dst_type", "rounding_mode"]):
        return False

    def is_fp32_to_bf16(src, dst_type) -> bool:
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def rounded_cast_impl(self, src, dst_type):
        if is_fp32_to_bf16(src, dst_type):
            return tensor_handle(fp32_to_bf16_bits(src.data), dst_type.scalar)
        if src.dtype.scalar == tl.bfloat16 and dst_type.scalar == tl.float32:
            return tensor_handle(bf16_bits_to_fp32(src.data), dst_type.scalar)
        return cast_impl(self, src, dst_type)

    def rounded_fp_to_fp(self, src, dst_type, rounding_mode):
        if rounding_mode == rtne and is_fp32_to_bf16(src, dst_type):
            return tensor_handle(fp32_to_bf16_bits(src.data), dst_type.scalar)
        return fp_to_fp(self, src, dst_type, rounding_mode)

    rounded_cast_impl._normlab_rne = True
    builder_cls.cast_impl = rounded_cast_impl
    builder_cls.create_fp_to_fp = rounded_fp_to_fp
    return True


def _setup_interpreter() -> None:
    os.environ["TRITON_INTERPRET"] = "1"
    import warnings

    # The interpreter evaluates masked-off lanes too (numpy): -inf - -inf there is NaN by design
    # and discarded by the masked store, but numpy warns about it.
    warnings.filterwarnings(
        "ignore", message="invalid value encountered", category=RuntimeWarning,
        module=r"triton\.runtime\.interpreter",
    )
    triton_was_imported = "triton" in sys.modules
    try:
        from triton import knobs  # triton >= 3.4: an explicit setting outranks the env var

        knobs.runtime.interpret = True
    except (ImportError, AttributeError):
        pass
    if triton_was_imported:
        _interpret_triton_library()
    if not _install_bf16_rounding():
        warnings.warn(
            "normlab: this triton's interpreter could not be patched to round fp32 -> bf16 to "
            "nearest even; bf16 outputs on CPU are truncated (up to 1 ulp below the GPU's)",
            RuntimeWarning, stacklevel=2,
        )
    print(
        "normlab: no CUDA GPU in use -> Triton interpreter on CPU tensors "
        "(correctness only; timings say nothing about GPU bandwidth)",
        file=sys.stderr,
    )


MODE: str = _select_mode()
INTERPRET: bool = MODE == "interpret"
DEVICE: str = "cpu" if INTERPRET else "cuda"

if INTERPRET:
    _setup_interpreter()


@functools.cache
def sm_count(device: str | int | None = None) -> int:
    """Streaming multiprocessors of the CUDA device; a fixed 4 under the interpreter."""
    if INTERPRET:
        return 4
    import torch

    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return props.multi_processor_count


@functools.cache
def l2_bytes(device: str | int | None = None) -> int:
    """L2 cache size of the CUDA device in bytes; 0 under the interpreter."""
    if INTERPRET:
        return 0
    import torch

    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20))
