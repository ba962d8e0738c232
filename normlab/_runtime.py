"""Runtime mode: compiled Triton kernels on a CUDA GPU, or the Triton interpreter on CPU.

The mode is decided once, when ``normlab`` is first imported, *before* any kernel is
defined: ``triton.jit`` reads ``TRITON_INTERPRET`` at decoration time, so setting it
later leaves compiled-mode kernels that fail with "0 active drivers" on a CPU host.

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


MODE: str = _select_mode()
INTERPRET: bool = MODE == "interpret"
DEVICE: str = "cpu" if INTERPRET else "cuda"

if INTERPRET:
    os.environ["TRITON_INTERPRET"] = "1"
    import warnings

    # The interpreter evaluates masked-off lanes too (numpy): -inf - -inf there is NaN by design
    # and discarded by the masked store, but numpy warns about it.
    warnings.filterwarnings(
        "ignore", message="invalid value encountered", category=RuntimeWarning,
        module=r"triton\.runtime\.interpreter",
    )
    if "triton" in sys.modules:
        # Kernels decorated before this point would be compiled-mode; ours are not yet.
        try:
            from triton import knobs

            knobs.runtime.interpret = True
        except (ImportError, AttributeError):
            pass
    print(
        "normlab: no CUDA GPU in use -> Triton interpreter on CPU tensors "
        "(correctness only; timings say nothing about GPU bandwidth)",
        file=sys.stderr,
    )


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
