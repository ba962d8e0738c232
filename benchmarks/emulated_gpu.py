"""The GPU host path (lean launch, replay) on a CPU: Triton's launchers replaced by stand-ins.

    from emulated_gpu import emulate   # benchmarks/ on sys.path
    with emulate() as jits: ...      # the kernels "launch" without running

Every norm and loss kernel is swapped for a stand-in with the real kernel's parameters. Its
"compiled kernel" checks what Triton's launcher would be handed (exactly 9 + one argument per
parameter, pointers as ints or None, no hooks) and computes nothing: outputs hold garbage. What
it measures is the Python on the way to ``cuLaunchKernel`` (``benchmarks/host_profile.py
--emulate``); what it tests is that the lean launch and the replay hand the launcher the right
arguments (``tests/test_launch_emulated.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import types

import torch
import triton

from normlab import _launch
from normlab.losses import chunked, fused, split
from normlab.losses import op as loss_op
from normlab.norms import block_row, op, reduce, row, split_row

MODULES = (row, block_row, split_row, reduce, fused, chunked, split)
RUNS: list[tuple] = []  # every stand-in launch, in order: (function, grid, values)


_FUNCTIONS = itertools.count(0x1000)  # the stand-ins' CUfunction handles

# Triton's signature type of an argument (``triton.runtime.jit`` specializes the same way):
# tensors by dtype, None and ints equal to 1 as constexprs, ints by whether they fit 32 bits.
_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
          torch.int32: "*i32", torch.int64: "*i64", torch.uint8: "*u8",
          torch.bool: "*i1"}  # fmt: skip


def signature_type(param, value) -> str:
    """The type Triton's signature gives ``param`` called with ``value``."""
    if param.is_constexpr or value is None or (type(value) is int and value == 1):
        return "constexpr"
    if isinstance(value, torch.Tensor):
        return _TYPES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"{param.name}: {type(value).__name__}")


class Compiled:
    """A compiled kernel's stand-in: its launcher checks the argument count and the pointers.
    Like a compiled kernel it has a CUfunction handle, a signature (``src.signature``) and
    launch metadata, which the C++ replay (``normlab._native``) reads."""

    packed_metadata = None

    def __init__(self, jit, keep_runs=True, values=None, options=None):
        self.jit, self.runs, self.keep_runs = jit, [], keep_runs
        self.n_params = len(jit.params)
        self.pointers = [i for i, p in enumerate(jit.params) if p.name.endswith("_ptr")]
        self.function = next(_FUNCTIONS)
        if values is not None:
            self.src = types.SimpleNamespace(signature={
                p.name: signature_type(p, v) for p, v in zip(jit.params, values, strict=True)})
        options = options or {}
        self.metadata = types.SimpleNamespace(num_warps=options.get("num_warps", 4),
                                              shared=0, num_ctas=options.get("num_ctas", 1))

    def run(self, *launch_args):
        if not self.keep_runs:  # timing (host_profile.py --emulate): check nothing, cost nothing
            return
        values = launch_args[9:]
        assert len(values) == self.n_params, (self.jit.__name__, len(values))
        assert launch_args[6:9] == (None, None, None)  # no metadata, no hooks
        for i in self.pointers:
            v = values[i]  # an int, or None (a null pointer: a kernel option left out)
            assert v is None or (isinstance(v, int) and v > 0), (self.jit.__name__, i, v)
        self.runs.append(values)
        self.jit.launches.append(values)
        RUNS.append((self.function, launch_args[:3], values))


class Jit:
    """A JITFunction's stand-in with the real kernel's parameters; ``fn[grid](...)`` compiles.
    ``launches``: every launch's arguments in parameter order, pointers as ints, whether it
    compiled (``fn[grid]``) or ran a compiled kernel (a CPU tensor's 16-byte alignment, and with
    it the key, can differ between calls where a GPU's allocator would not)."""

    def __init__(self, kernel, keep_runs=True):
        real = triton.runtime.jit.JITFunction(kernel.fn)
        self.params, self.__name__ = real.params, real.__name__
        self.keep_runs = keep_runs
        self.compiled: list[Compiled] = []
        self.launches: list[tuple] = []

    def __getitem__(self, grid):
        def compile_(*args, **kwargs):
            names = [p.name for p in self.params]
            missing = [n for n in names[len(args):] if n not in kwargs
                       and not self.params[names.index(n)].has_default]  # fmt: skip
            assert not missing, (self.__name__, missing)
            values = [*args, *(kwargs.get(p.name, p.default) for p in self.params[len(args):])]
            if self.keep_runs:
                self.launches.append(tuple(v.data_ptr() if hasattr(v, "data_ptr") else v
                                           for v in values))  # fmt: skip
            self.compiled.append(Compiled(self, self.keep_runs, values, kwargs))
            return self.compiled[-1]

        return compile_


@contextlib.contextmanager
def emulate(replay: bool = True, keep_runs: bool = True):
    """Within: the lean launch on (and the replay, if ``replay``), every kernel a ``Jit``.
    Yields {kernel name: Jit}; restores everything on exit."""
    saved = [(_launch, n, getattr(_launch, n))
             for n in ("ENABLED", "REPLAY", "_get_device", "_get_stream", "_SITES")]
    saved += [(op, n, getattr(op, n)) for n in ("_FWD_REPLAYS", "_BWD_REPLAYS", "_INFERENCE",
                                                "_GRAD")]
    jits: dict[str, Jit] = {}
    for module in MODULES:
        for name in dir(module):
            kernel = getattr(module, name)
            if name.endswith("_kernel") and hasattr(kernel, "fn"):
                saved.append((module, name, kernel))
                jits[name] = jits.get(name) or Jit(kernel, keep_runs)
                setattr(module, name, jits[name])
    _launch.ENABLED, _launch.REPLAY = True, replay
    _launch._get_device, _launch._get_stream = (lambda: 0), (lambda device: 1)
    _launch._SITES, op._FWD_REPLAYS, op._BWD_REPLAYS, op._INFERENCE = {}, {}, {}, {}
    op._GRAD = {}
    saved.append((loss_op, "_SIGNATURES", loss_op._SIGNATURES))
    loss_op._SIGNATURES = {}
    RUNS.clear()
    try:
        yield jits
    finally:
        RUNS.clear()
        for owner, name, value in saved:
            setattr(owner, name, value)
