"""Recorded launches replayed from C++: the norms' autograd node without Python.

A norm call that needs a gradient paid a Python ``autograd.Function``: its forward and, on the
autograd engine's thread, its backward, each taking the GIL and running Python around two or
three launches. On an H200's host that Function alone, launching nothing, cost 0.60× torch's
whole RMSNorm forward+backward (docs/notes/2026-12-02-replayed-signatures-with-a-gradient.md).
``_native.cpp`` holds the same replay (``_launch.Replay``: allocate the buffers, launch the
compiled kernels with the call's pointers) and an autograd Function written in C++ around it,
so a checked signature's forward and backward run with no Python past the call itself.

It is built on first use on a GPU, with ``torch.utils.cpp_extension`` (a C++ compiler and ninja;
16 s on this project's CPU machine, 35 s on an H100 machine, once, then cached), and launches
through the driver's ``cuLaunchKernel``. A program is made only for kernels whose parameter list
the driver confirms: ``cuFuncGetParamInfo`` must report one parameter per non-constexpr
argument, of its size, then Triton's scratch pointers. Anything else, a failed build,
``NORMLAB_NATIVE=0``, the lean launch off, launch hooks (``_launch.lean``) or a functorch
transform (``_host.plain_tensor``), takes the Python replay, as before. Under the interpreter
nothing here runs; the CPU tests build the module and launch through its recording stand-in.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import time

import torch

from normlab import _runtime

ENABLED = (not _runtime.INTERPRET) and os.environ.get("NORMLAB_NATIVE", "1") != "0"
SOURCE = os.path.join(os.path.dirname(__file__), "_native.cpp")

_module = None
_failed = False
norm_apply = None  # the module's norm_apply, once built: (sig, x, residual, weight, bias, stream)
_param_info = None  # the driver's cuFuncGetParamInfo, or False where it has none

# Argument kinds as _native.cpp numbers them, by Triton signature type.
_POINTER, _INT32, _INT64, _FLOAT32, _FLOAT64 = range(5)
_KINDS = {"i1": _INT32, "i32": _INT32, "u1": _INT32, "u32": _INT32, "i64": _INT64,
          "u64": _INT64, "fp16": _FLOAT32, "bf16": _FLOAT32, "fp32": _FLOAT32,
          "f32": _FLOAT32, "fp64": _FLOAT64}  # fmt: skip
_SIZES = {_POINTER: 8, _INT32: 4, _INT64: 8, _FLOAT32: 4, _FLOAT64: 8}


_stand_in_launch = False  # launches go to a stand-in (tests, CPU timing), not the driver


def module():
    """The built extension, launching through libcuda (or the recording stand-in after
    ``record_launches``); None where it cannot be built or launch."""
    global _module, _failed, norm_apply
    if _module is None and not _failed:
        try:
            from torch.utils import cpp_extension

            start = time.perf_counter()
            _module = cpp_extension.load("normlab_native", [SOURCE], extra_cflags=["-O2"],
                                         verbose=False)  # fmt: skip
            seconds = time.perf_counter() - start
            if seconds > 2:  # a build, not the cached module
                print(f"normlab: built the C++ replay in {seconds:.0f} s (cached from now on)",
                      file=sys.stderr)  # fmt: skip
        except Exception as err:  # no compiler or ninja, or headers that do not build
            _failed = True
            first = str(err).splitlines()[0] if str(err) else ""
            print(f"normlab: the C++ replay did not build ({type(err).__name__}: {first}); "
                  "the Python replay runs", file=sys.stderr)  # fmt: skip
            return None
        norm_apply = _module.norm_apply
    if _module is None or not (_stand_in_launch or _set_driver_launch()):
        return None
    return _module


def record_launches():
    """From now on launch through the stand-in that records each launch (tests on a CPU):
    ``module().records()`` hands them over. Returns the module, or None."""
    return _stand_in("record_launches")


def null_launches():
    """From now on launch through a stand-in that does nothing (timing the host path on a CPU,
    ``benchmarks/host_profile.py --emulate --native``). Returns the module, or None."""
    return _stand_in("null_launches")


def _stand_in(setter: str):
    global _stand_in_launch
    _stand_in_launch = True
    mod = module()
    if mod is not None:
        getattr(mod, setter)()
    return mod


_driver_set = False


def _set_driver_launch() -> bool:
    global _driver_set, _param_info
    if _driver_set:
        return True
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        address = ctypes.cast(libcuda.cuLaunchKernel, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return False
    info = getattr(libcuda, "cuFuncGetParamInfo", None)
    if info is not None:
        info.restype = ctypes.c_int
        info.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t),
                         ctypes.POINTER(ctypes.c_size_t)]  # fmt: skip
    _param_info = info or False
    _module.set_launch(address)
    _driver_set = True
    return True


def driver_param_sizes(function: int) -> list[int] | None:
    """The byte sizes of a CUfunction's parameters, from the driver (None where it cannot say)."""
    if not _param_info:
        return None
    sizes, offset, size = [], ctypes.c_size_t(), ctypes.c_size_t()
    while len(sizes) < 4096:
        if _param_info(function, len(sizes), ctypes.byref(offset), ctypes.byref(size)) != 0:
            break  # past the last parameter: CUDA_ERROR_INVALID_VALUE
        sizes.append(size.value)
    return sizes


def _scratch_count(kernel) -> int:
    """The null pointers Triton appends after a kernel's arguments: a global scratch pointer, and
    a profile scratch pointer where this Triton has one."""
    return 2 if hasattr(kernel.run, "profile_scratch_size") else 1


def launch_spec(kernel, values, slots, grid, *, param_sizes=driver_param_sizes):
    """One launch as ``_native.Program`` takes it, or None where it cannot say exactly what the
    kernel's parameters are. ``values``: every parameter in order (positional arguments, then
    the tail), tensors as None; ``slots``: {position: tensor index}."""
    try:
        types = list(kernel.src.signature.values())
        meta = kernel.metadata
        function = kernel.function
    except AttributeError:
        return None
    if len(types) != len(values) or not function or getattr(meta, "num_ctas", 1) != 1:
        return None
    run = kernel.run
    if (getattr(run, "launch_cooperative_grid", False) or getattr(run, "launch_pdl", False)
            or getattr(run, "global_scratch_size", 0) or getattr(run, "profile_scratch_size", 0)):
        return None  # launch attributes, or scratch memory that Triton's launcher allocates
    args = []
    for pos, (ty, v) in enumerate(zip(types, values, strict=True)):
        if ty == "constexpr":
            continue
        if not isinstance(ty, str):
            return None  # tuples, tensor descriptors
        if ty.startswith("*"):
            if pos not in slots:
                return None  # a pointer passed as an int: not recorded as a tensor
            args.append((_POINTER, slots[pos]))
            continue
        kind = _KINDS.get(ty)
        if kind is None or isinstance(v, torch.Tensor) or v is None:
            return None
        if kind == _FLOAT32:
            bits = struct.unpack("<i", struct.pack("<f", float(v)))[0]
        elif kind == _FLOAT64:
            bits = struct.unpack("<q", struct.pack("<d", float(v)))[0]
        else:
            bits = int(v)
            if kind == _INT32 and bits >= 2**31:
                bits -= 2**32  # an unsigned 32-bit value: the same bits
        args.append((kind, bits))
    scratch = _scratch_count(kernel)
    if param_sizes is not None:
        sizes = param_sizes(function)
        if sizes != [_SIZES[k] for k, _ in args] + [8] * scratch:
            return None
    block = 32 * meta.num_warps
    return (function, tuple(grid), block, meta.shared, args, scratch)


def program(replay, *, param_sizes=driver_param_sizes):
    """A ``_native.Program`` of a ``_launch.Replay`` (cached on it), or None. The recording
    stand-in checks no parameter sizes (no driver to ask)."""
    cached = replay.native
    if cached is not None:
        return cached or None
    replay.native = False
    mod = _module
    if mod is None or replay.unrolled is None:  # not built, or a step without a compiled kernel
        return None
    launches = []
    for _fn, grid, template, slots, _kwargs, entry in replay.steps:
        kernel, tail, _, _ = entry
        spec = launch_spec(kernel, [*template, *tail], dict(slots), grid,
                           param_sizes=None if _stand_in_launch else param_sizes)  # fmt: skip
        if spec is None:
            return None
        launches.append(spec)
    buffers = [(list(shape), dtype, zero, like) for shape, dtype, zero, like in replay.buffers]
    outputs = [-1 if i is None else i for i in replay.outputs]
    replay.native = mod.Program(replay.n_roles, buffers, launches, outputs)
    return replay.native
