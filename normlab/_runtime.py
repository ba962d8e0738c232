"""Runtime mode: compiled Triton kernels on a CUDA GPU, or the Triton interpreter on CPU.

The mode is decided once, when ``normlab`` is first imported, *before* any kernel is
defined: ``triton.jit`` decides at decoration time whether a function is compiled
(``JITFunction``) or interpreted (``InterpretedFunction``), from ``TRITON_INTERPRET`` (the
``triton.knobs.runtime.interpret`` knob in newer triton).

If triton was imported before normlab (``import triton``, ``import torch._dynamo``, a
``torch.compile`` call...), triton.language's own ``@jit`` library functions (``tl.sum``,
``tl.max``, ``tl.cdiv``, ...) were decorated compiled-mode and cannot be called from an
interpreted kernel ("Cannot call @triton.jit'd outside of the scope of a kernel");
:func:`_interpret_triton_library` re-wraps them as interpreted functions.

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
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    import triton.language as tl

    interpreted: dict[int, object] = {}  # id(JITFunction) -> its InterpretedFunction

    def as_interpreted(jit_fn):
        if id(jit_fn) not in interpreted:
            interpreted[id(jit_fn)] = InterpretedFunction(jit_fn.fn)
        return interpreted[id(jit_fn)]

    # Module attributes are the functions' globals, so library functions that call each other
    # (tl.softmax -> max, sum; sum -> _sum_combine) see the replacements too.
    modules = [m for name, m in list(sys.modules.items())
               if m is not None and (name == "triton.language" or name.startswith("triton.language."))]
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


@functools.lru_cache(maxsize=None)
def sm_count(device: str | int | None = None) -> int:
    """Streaming multiprocessors of the CUDA device; a fixed 4 under the interpreter."""
    if INTERPRET:
        return 4
    import torch

    return torch.cuda.get_device_properties(device or torch.cuda.current_device()).multi_processor_count


@functools.lru_cache(maxsize=None)
def l2_bytes(device: str | int | None = None) -> int:
    """L2 cache size of the CUDA device in bytes; 0 under the interpreter."""
    if INTERPRET:
        return 0
    import torch

    props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 50 * 2**20))
