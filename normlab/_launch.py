"""A lean launch path for normlab's Triton kernels on a GPU.

``kernel[grid](*args, **meta)`` costs 10-20 µs of CPU per launch in Triton 3.6: it binds the
arguments, specializes each one in C++, turns the options into a string for the cache key,
checks the kernel's globals and builds launch metadata. A training step launches normlab's
kernels thousands of times with a handful of argument signatures, so ``launch`` keeps, per kernel,
a dict from a cheap key to the compiled kernel, and calls its launcher directly.

The key holds everything Triton specializes on: the constexprs and options by value; per pointer
its dtype and whether it is 16-byte aligned; per int whether it equals 1, its width class (i32 /
i64 / u64) and whether it divides by 16; floats and bools by type. A key Triton would tell apart
from another must differ here too (``tests/test_launch.py`` checks that against Triton's own
specializer). A miss goes through ``kernel[grid]`` once and stores what it compiled.

Under the interpreter, for wrapped kernels (heuristics, autotune), or with
``NORMLAB_LEAN_LAUNCH=0`` (in-process: ``ENABLED = False``, as ``benchmarks/gpu_check.py`` does to
compare the two paths), ``launch`` is exactly ``kernel[grid](*args, **meta)``. Launch hooks
(profilers such as Proton) are called as Triton calls them.
"""

from __future__ import annotations

import os

import torch
from triton import knobs

from normlab import _runtime

_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
ENABLED = (not _runtime.INTERPRET) and os.environ.get("NORMLAB_LEAN_LAUNCH", "1") != "0"


def _spec(v):
    """What Triton specializes on for one runtime argument (a hashable, cheap to compute)."""
    if isinstance(v, torch.Tensor):
        return (v.dtype, v.data_ptr() & 15 == 0)
    if isinstance(v, bool):
        return ("u1", v)  # a type of its own; (True,) == (1,) in Python, so tag it
    if v is None:
        return None  # a constexpr
    if isinstance(v, int):
        if v == 1:
            return 1  # Triton makes an int equal to 1 a constexpr
        width = 0 if -(2**31) <= v < 2**31 else (1 if -(2**63) <= v < 2**63 else 2)
        return (width, v & 15 == 0)
    if isinstance(v, float):
        return float
    return v  # dtypes, constexprs, strings: by value


def _active(hook) -> bool:
    """Does a launch hook call anything (a HookChain with calls, or a plain function)?"""
    return hook is not None and bool(getattr(hook, "calls", True))


def _key(constexpr: list[bool], values: list) -> tuple:
    """The specialization key of one call: constexprs by value, runtime arguments by ``_spec``."""
    return tuple(v if const else _spec(v) for const, v in zip(constexpr, values, strict=False))


class _Site:
    """Per-kernel state: the parameter order, which parameters are constexpr, the compiled
    kernels."""

    __slots__ = ("compiled", "constexpr", "defaults", "fn", "names")

    def __init__(self, fn):
        self.fn = fn
        params = fn.params
        self.names = [p.name for p in params]
        self.constexpr = [p.is_constexpr for p in params]
        self.defaults = {p.name: p.default for p in params if p.has_default}
        self.compiled: dict = {}


_SITES: dict[int, _Site] = {}


def _site(fn) -> _Site:
    site = _SITES.get(id(fn))
    if site is None:
        site = _SITES[id(fn)] = _Site(fn)
    return site


def launch(fn, grid, *args, **kwargs):
    """``fn[grid](*args, **kwargs)``, through the compiled kernel's launcher when it is known.

    ``grid`` is a tuple of ints. Keyword arguments are the kernel's remaining parameters (by name)
    and the launch options (``num_warps``, ``num_stages``, ...)."""
    if not ENABLED or not hasattr(fn, "params"):  # off, or a wrapper (heuristics, autotune)
        return fn[grid](*args, **kwargs)
    site = _site(fn)
    names, defaults = site.names, site.defaults
    values = list(args)
    for name in names[len(args):]:
        values.append(kwargs[name] if name in kwargs else defaults[name])
    device = torch.cuda.current_device()
    key = (device, _key(site.constexpr, values), tuple(kwargs.get(o) for o in _OPTIONS))
    kernel = site.compiled.get(key)
    if kernel is None:
        kernel = fn[grid](*args, **kwargs)
        if hasattr(kernel, "result"):
            kernel = kernel.result()
        site.compiled[key] = kernel
        return kernel
    g0 = grid[0]
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    stream = torch._C._cuda_getCurrentRawStream(device)
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    # Launch metadata only feeds the hooks (profilers); Triton builds it for every launch. Its
    # hooks are HookChain objects, present even when empty.
    hooked = _active(enter) or _active(leave)
    if not hooked:  # the launcher then calls no (empty) hook chain either
        enter = leave = None
    meta = kernel.launch_metadata(grid, stream, *values) if hooked else None
    kernel.run(g0, g1, g2, stream, kernel.function, kernel.packed_metadata, meta, enter, leave,
               *values)  # fmt: skip
    return kernel
