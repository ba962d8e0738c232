"""A lean launch path for normlab's Triton kernels on a GPU.

``kernel[grid](*args, **meta)`` costs 10-20 µs of CPU per launch in Triton 3.6: it binds the
arguments, specializes each one in C++, turns the options into a string for the cache key,
checks the kernel's globals and builds launch metadata. A training step launches normlab's
kernels thousands of times with a handful of argument signatures, so ``launch`` keeps, per kernel,
a dict from a cheap key to the compiled kernel, and calls its launcher directly.

The key refines what Triton specializes on: per pointer its dtype and whether it is 16-byte
aligned; floats by type; ints, bools, constexprs and options by value (an int's value fixes
whether it equals 1, divides by 16 and fits 32 bits; keying the value costs less than deriving
those). Two calls Triton would tell apart never share a key (``tests/test_launch.py`` checks that
against Triton's own specializer). A miss goes through ``kernel[grid]`` once and stores what it
compiled; past 4096 keys per kernel (many distinct row counts) the cache starts over. The cost of
keying ints by value: a call with a row count not seen before pays Triton's own dispatch once
per kernel (a training loop of fixed shapes never does; one of varying token counts, once per
new count, and its other layers hit).

Pointers reach the launcher as ints: for a tensor it calls ``data_ptr()`` and then
``cuPointerGetAttribute``, a driver call, per pointer and launch; for an int it does neither.

Under the interpreter, for wrapped kernels (heuristics, autotune), or with
``NORMLAB_LEAN_LAUNCH=0`` (in-process: ``ENABLED = False``, as ``benchmarks/gpu_check.py`` does to
compare the two paths), ``launch`` is exactly ``kernel[grid](*args, **meta)``. Launch hooks
(profilers such as Proton) are called as Triton calls them.

Inside an op body that torch.compile traces (``traced``), ``launch`` is
``torch.library.wrap_triton(fn)[grid](...)``: the launch enters the graph, and Inductor launches
the kernel from its own generated code.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from triton import knobs

from normlab import _runtime

ENABLED = (not _runtime.INTERPRET) and os.environ.get("NORMLAB_LEAN_LAUNCH", "1") != "0"
# Ops replay the first call of a signature (below) on a GPU; NORMLAB_REPLAY=0 turns it off.
# Checked on an H200 in every norm path, under CUDA graphs and torch.compile (gpu_check.py --only
# replay). Off under the interpreter, where tests edit the plans' tables (the replay tests switch
# it on).
REPLAY = (not _runtime.INTERPRET) and os.environ.get("NORMLAB_REPLAY", "1") != "0"


_get_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else None
_get_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_device() -> int | None:
    """The current CUDA device's index (None under the interpreter): where launches go."""
    return None if _runtime.INTERPRET else _get_device()


# Launches go to the current device, but a tensor may sit on another GPU: Hugging Face's
# device_map="auto" runs layers on cuda:1 while cuda:0 stays current. The public calls then run
# under ``on_device(x)``; with one GPU there is nothing to check.
SEVERAL_GPUS = (not _runtime.INTERPRET) and torch.cuda.device_count() > 1


def off_device(t) -> bool:
    """Is ``t`` a tensor on a GPU other than the current one?"""
    return isinstance(t, torch.Tensor) and t.is_cuda and t.get_device() != _get_device()


def on_device(t):
    """The context in which ``t``'s GPU is the current device."""
    return torch.cuda.device(t.device)


def _active(hook) -> bool:
    """Does a launch hook call anything (a HookChain with calls, or a plain function)?"""
    return hook is not None and bool(getattr(hook, "calls", True))


def lean() -> bool:
    """Do launches and replays skip Triton's dispatch: the lean launch on, and no launch hook
    (a profiler's) that must see each launch?"""
    runtime = knobs.runtime
    return ENABLED and not _active(runtime.launch_enter_hook) and not _active(
        runtime.launch_exit_hook)


class _Site:
    """Per-kernel state: the parameter names, which are constexpr, their defaults, and the
    compiled kernels by call key."""

    __slots__ = ("compiled", "constexpr", "defaults", "fn", "names", "runtime")

    def __init__(self, fn):
        self.fn = fn
        params = fn.params
        self.names = [p.name for p in params]
        self.constexpr = [p.is_constexpr for p in params]
        self.runtime = frozenset(p.name for p in params if not p.is_constexpr)
        self.defaults = {p.name: p.default for p in params if p.has_default}
        self.compiled: dict = {}


_SITES: dict[int, _Site] = {}  # by id(fn); each site holds its fn


_MAX_KEYS = 4096  # per kernel; past it the cache starts over (ints are keyed by value)


def _arg_key(v):
    """A runtime argument's part of the key: a pointer's dtype and 16-byte alignment, a float's
    type, anything else by value (bools apart from ints: True == 1 in Python)."""
    if isinstance(v, torch.Tensor):
        return (v.dtype, not v.data_ptr() & 15)
    kind = type(v)
    return v if kind is int else float if kind is float else (kind, v)


# Triton 3.6's launcher object (CudaLauncher) wraps a C function: its ``__call__`` allocates no
# scratch memory for kernels that need none, then forwards its arguments with the kernel's
# cooperative-grid and PDL flags. Calling the C function directly skips that Python frame
# (about 1 µs a launch). Taken only where ``__call__`` has that exact signature; other Triton
# releases keep their own wrapper.
_FORWARDING_CALL = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
_FORWARDS: dict[type, bool] = {}


def _direct_launch(kernel):
    """(C launch function, cooperative grid, PDL) of a compiled kernel whose launcher only forwards
    to it (no scratch memory); else None."""
    run = getattr(kernel, "run", None)
    c_launch = getattr(run, "launch", None)
    if c_launch is None or inspect.isfunction(c_launch):  # absent, or wrapped (descriptors)
        return None
    if getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    cls = type(run)
    forwards = _FORWARDS.get(cls)
    if forwards is None:
        try:
            params = list(inspect.signature(cls.__call__).parameters)
        except (TypeError, ValueError):
            params = []
        forwards = _FORWARDS[cls] = params == _FORWARDING_CALL
    if not forwards:
        return None
    return c_launch, run.launch_cooperative_grid, run.launch_pdl


def _compile(site: _Site, grid, args, kwargs, key):
    """A call key's first launch: through ``fn[grid]``, which compiles. Stores the kernel, the
    arguments after the positional ones (constexprs and defaults: fixed by the key) and where
    among them runtime arguments passed by keyword go (filled per call)."""
    if any(c and isinstance(a, float) for c, a in zip(site.constexpr, args, strict=False)):
        name = getattr(site.fn, "__name__", "kernel")
        raise TypeError(f"{name}: pass float constexprs by keyword (positional floats are keyed "
                        "by type)")  # fmt: skip
    kernel = site.fn[grid](*args, **kwargs)
    if hasattr(kernel, "result"):
        kernel = kernel.result()
    if len(site.compiled) >= _MAX_KEYS:
        site.compiled.clear()
    names = site.names[len(args):]
    tail = tuple(kwargs[n] if n in kwargs else site.defaults[n] for n in names)
    by_keyword = tuple((i, n) for i, n in enumerate(names) if n in kwargs and n in site.runtime)
    entry = site.compiled[key] = (kernel, tail, by_keyword, _direct_launch(kernel))
    return entry


# ---- traced launches: a Triton op's body under torch.compile -------------------------------------

_TRACING = False  # set by ``traced`` while an op body runs on torch.compile's traced tensors


def is_traced(t) -> bool:
    """Is t one of torch.compile's tracing tensors (fake, or functionalized), not memory?"""
    return isinstance(t, (FakeTensor, FunctionalTensor))


@contextlib.contextmanager
def traced():
    """Launches inside become graph nodes (``wrap_triton``) instead of kernel launches."""
    global _TRACING
    before, _TRACING = _TRACING, True
    try:
        yield
    finally:
        _TRACING = before


def _traced_launch(fn, grid, args, kwargs):
    if kwargs.get("ROW_ALIGN", 1) > 1:
        # No row-stride hint: Inductor's mutation analysis (torch 2.11) builds the kernel with
        # its int arguments as constants, and the hint's first form, tl.multiple_of, rejected a
        # constant (failing, the analysis takes every input as written and clones the
        # placeholder arguments apart). Its product form (tiles.known_multiple) folds a
        # constant; compiled calls with it were not checked on a GPU, so they keep ROW_ALIGN 1.
        kwargs = {**kwargs, "ROW_ALIGN": 1}
    if "maxnreg" in kwargs:
        # Inductor takes num_warps, num_stages and num_ctas as a user kernel's launch options
        # (torch 2.11), not maxnreg, which it would read as a kernel argument: ptxas's own count.
        kwargs = {k: v for k, v in kwargs.items() if k != "maxnreg"}
    # Every parameter by value: Inductor (torch 2.11) hands an omitted one with a default to the
    # kernel as None, and its mutation analysis refuses the call.
    missing = {p.name: p.default for p in fn.params[len(args):]
               if p.has_default and p.name not in kwargs}  # fmt: skip
    if missing:
        kwargs = {**kwargs, **missing}
    torch.library.wrap_triton(fn)[grid](*args, **kwargs)  # (ops trace only JIT kernels)


def launch(fn, grid, *args, **kwargs):
    """``fn[grid](*args, **kwargs)``, through the compiled kernel's launcher when it is known.

    ``grid`` is a tuple of ints. Keyword arguments are the kernel's remaining parameters (by name)
    and the launch options (``num_warps``, ``num_stages``, ...)."""
    if _TRACING:
        _traced_launch(fn, grid, args, kwargs)
        return
    if not ENABLED or not hasattr(fn, "params"):  # off, or a wrapper (heuristics, autotune)
        fn[grid](*args, **kwargs)
        if _recorder is not None:
            _recorder.step(fn, grid, args, kwargs, None)
        return
    site = _SITES.get(id(fn))  # by id: a JITFunction hashes its source's cache key
    if site is None:
        site = _SITES[id(fn)] = _Site(fn)
    device = _get_device()
    # The key: per pointer its dtype and 16-byte alignment, floats by type, everything else
    # (ints, bools, constexprs, options) by value: a refinement of what Triton specializes on.
    if site.runtime.isdisjoint(kwargs):  # keywords are constexprs and options only
        key = [device, *kwargs.items()]
    else:  # runtime arguments by keyword too (the losses' options)
        key = [device, *((n, _arg_key(v) if n in site.runtime else v) for n, v in kwargs.items())]
    values = []  # pointers as ints: Triton's launcher then skips cuPointerGetAttribute per pointer
    for a in args:
        if isinstance(a, torch.Tensor):
            ptr = a.data_ptr()
            values.append(ptr)
            key.append(a.dtype)
            key.append(not ptr & 15)
        else:
            values.append(a)
            kind = type(a)  # bools apart from ints (True == 1), floats by type
            key.append(a if kind is int else float if kind is float else (kind, a))
    key = tuple(key)
    entry = site.compiled.get(key)
    if entry is None:
        entry = _compile(site, grid, args, kwargs, key)
        if _recorder is not None:
            _recorder.step(fn, grid, args, kwargs, entry)
        return
    if _recorder is not None:
        _recorder.step(fn, grid, args, kwargs, entry)
    kernel, tail, by_keyword, direct = entry
    if by_keyword:
        tail = list(tail)
        for i, name in by_keyword:
            v = kwargs[name]
            tail[i] = v.data_ptr() if isinstance(v, torch.Tensor) else v
    stream = _get_stream(device)
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    # Launch metadata only feeds the hooks (profilers); Triton builds it for every launch. Its
    # hooks are HookChain objects, present even when empty.
    if _active(enter) or _active(leave):
        meta = kernel.launch_metadata(grid, stream, *args, *tail)
    else:  # the launcher then calls no (empty) hook chain either
        enter = leave = meta = None
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    if direct is not None and meta is None:
        c_launch, cooperative, pdl = direct
        c_launch(grid[0], g1, g2, stream, kernel.function, cooperative, pdl, None, None,
                 kernel.packed_metadata, None, None, None, *values, *tail)  # fmt: skip
        return
    kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, meta, enter,
               leave, *values, *tail)  # fmt: skip


# ---- replay: one host call's launches, repeated for calls of the same signature ----------------
#
# An op records its first call of a signature (shapes, strides, dtypes, alignment, options): every
# launch, with each tensor argument resolved to one of the call's inputs ("roles") or to a buffer
# the launchers allocated through ``buffer``. A later call of the signature allocates the buffers
# and relaunches the kernels with its own pointers: no checks, plans or configs, and on the GPU no
# per-launch key. A recording is kept only when every tensor launched or returned resolves, and
# no launcher called ``not_replayable`` (a host-side torch op, e.g. ``zero_``, that replay would
# skip).


class _Recorder:
    __slots__ = ("buffers", "index", "keep", "n_roles", "ok", "steps")

    def __init__(self, roles):
        self.index = {id(t): i for i, t in enumerate(roles) if t is not None}
        self.keep = list(roles)  # the ids above stay valid while recording
        self.n_roles = len(self.keep)
        self.buffers: list = []
        self.steps: list = []
        self.ok = True

    def slot(self, t) -> int | None:
        return self.index.get(id(t))

    def step(self, fn, grid, args, kwargs, entry):
        if (entry is not None and entry[2]) or any(isinstance(v, torch.Tensor)
                                                 for v in kwargs.values()):  # fmt: skip
            self.ok = False  # runtime arguments by keyword: not replayed
            return
        template, slots = list(args), []
        for pos, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                i = self.slot(a)
                if i is None:
                    self.ok = False
                    return
                slots.append((pos, i))
                template[pos] = None
        g = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self.steps.append((fn, g, template, tuple(slots), kwargs, entry))


_recorder: _Recorder | None = None


def buffer(shape, dtype, device, *, zero: bool = False) -> torch.Tensor:
    """``torch.empty`` (``torch.zeros`` with ``zero``) for a launcher's output or workspace,
    which a replay allocates again."""
    if _TRACING and shape == () and not zero:
        # Inductor (torch 2.11-2.13) fills a 0-dim empty with a kernel of its own (its lowering
        # marks a buffer kernel-free by zero ranges, one per dim, and a 0-dim one has none); a
        # view of a (1,) buffer launches nothing.
        return torch.empty((1,), dtype=dtype, device=device).view(())
    t = (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)
    if _recorder is not None:
        rec = _recorder
        rec.index[id(t)] = len(rec.keep)
        rec.keep.append(t)
        first = rec.keep[0]
        # an output laid out as the first role (y of x, dx of dy): empty_like copies its sizes
        # in C++ (about half of new_empty's parsing of a shape)
        like = (not zero and first is not None and t.dtype == first.dtype
                and t.shape == first.shape)  # fmt: skip
        rec.buffers.append((t.shape, dtype, zero, like))
    return t


def not_replayable() -> None:
    """Called next to a host-side torch op on a launcher's tensors: the call is not replayed."""
    if _recorder is not None:
        _recorder.ok = False


class Replay:
    """A recorded call: ``replay(roles, device)`` allocates its buffers, launches its kernels with
    the roles' and buffers' pointers and returns its outputs. Where every step has a compiled
    kernel and the first role is a tensor, that runs as one generated function (``source``):
    the same allocations and launcher calls, unrolled."""

    __slots__ = ("buffers", "n_roles", "native", "outputs", "source", "steps", "unrolled")

    def __init__(self, rec: _Recorder, outputs):
        self.buffers = rec.buffers
        self.steps = rec.steps
        self.outputs = outputs
        self.n_roles = rec.n_roles
        self.native = None  # its C++ program (``_native.program``), False where it has none
        self.source = self.unrolled = None
        if rec.keep[0] is not None and all(step[5] is not None for step in self.steps):
            self.source, self.unrolled = _unrolled(self, rec.n_roles)

    def __call__(self, roles, device):
        if self.unrolled is not None:
            return self.unrolled(roles, device)
        return self.generic(roles, device)

    def generic(self, roles, device):
        tensors = list(roles)
        # The first role is an input on the call's device (the ops check that every input is):
        # new_empty parses no device argument, empty_like not even a shape. A caller may hand
        # the first role in another shape of the same elements (an N-D x for its rows): a
        # buffer laid out like it then comes back in that shape.
        first = roles[0]
        for shape, dtype, zero, like in self.buffers:
            if first is None:
                t = (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)
            elif like:
                t = torch.empty_like(first, memory_format=torch.contiguous_format)
            else:
                t = first.new_zeros(shape, dtype=dtype) if zero else first.new_empty(shape,
                                                                                  dtype=dtype)
            tensors.append(t)
        if not lean():  # interpreter, lean launch off, or hooks
            for fn, grid, template, slots, kwargs, _ in self.steps:
                values = template.copy()
                for pos, i in slots:
                    values[pos] = tensors[i]
                launch(fn, grid, *values, **kwargs)
            return tuple(None if i is None else tensors[i] for i in self.outputs)
        stream = _get_stream(_get_device())
        ptrs = [None if t is None else t.data_ptr() for t in tensors]  # once per tensor
        for fn, grid, template, slots, kwargs, entry in self.steps:
            values = template.copy()
            if entry is None:  # a wrapped kernel (Triton's own dispatch)
                for pos, i in slots:
                    values[pos] = tensors[i]
                launch(fn, grid, *values, **kwargs)
                continue
            for pos, i in slots:
                values[pos] = ptrs[i]
            kernel, tail, _, direct = entry
            # no launch metadata, no enter or exit hook (none is active)
            if direct is not None:
                c_launch, cooperative, pdl = direct
                c_launch(grid[0], grid[1], grid[2], stream, kernel.function, cooperative, pdl,
                         None, None, kernel.packed_metadata, None, None, None, *values,
                         *tail)  # fmt: skip
                continue
            kernel.run(grid[0], grid[1], grid[2], stream, kernel.function,
                       kernel.packed_metadata, None, None, None, *values, *tail)  # fmt: skip
        return tuple(None if i is None else tensors[i] for i in self.outputs)


def _unrolled(replay: Replay, n_roles: int):
    """(source, function) of ``replay``'s call unrolled: each buffer allocated and each launcher
    called with its arguments spelled out, each pointer read once. It falls back to
    ``replay.generic`` where that takes Triton's own dispatch (lean launch off, launch hooks)."""
    names = {}  # constants, kernels and launchers, by the name the source gives them

    def const(value, name):
        names[name] = value
        return name

    roles = ", ".join(f"t{i}" for i in range(n_roles)) + ("," if n_roles == 1 else "")
    src = ["def replay(roles, device):",
           "    if not _L.lean():",
           "        return _generic(roles, device)",
           f"    {roles} = roles"]  # fmt: skip
    for j, (shape, dtype, zero, like) in enumerate(replay.buffers):
        i = n_roles + j
        if like:
            src.append(f"    t{i} = _empty_like(t0, memory_format=_contiguous)")
        else:
            alloc = "new_zeros" if zero else "new_empty"
            src.append(f"    t{i} = t0.{alloc}({const(shape, f'_shape{i}')}, "
                       f"dtype={const(dtype, f'_dtype{i}')})")  # fmt: skip
    used = sorted({i for step in replay.steps for _, i in step[3]})
    src += [f"    p{i} = t{i}.data_ptr()" for i in used]
    src.append("    stream = _L._get_stream(_L._get_device())")
    for k, (_, grid, template, slots, _, entry) in enumerate(replay.steps):
        kernel, tail, _, direct = entry
        by_pos = dict(slots)
        args = ", ".join(f"p{by_pos[pos]}" if pos in by_pos else const(v, f"_c{k}_{pos}")
                         for pos, v in enumerate(template))  # fmt: skip
        k_name, tail_name = const(kernel, f"_kernel{k}"), const(tail, f"_tail{k}")
        g = ", ".join(str(v) for v in grid)
        if direct is not None:
            c_launch, cooperative, pdl = direct
            src.append(f"    {const(c_launch, f'_launch{k}')}({g}, stream, {k_name}.function, "
                       f"{const(cooperative, f'_cooperative{k}')}, {const(pdl, f'_pdl{k}')}, "
                       f"None, None, {k_name}.packed_metadata, None, None, None, {args}, "
                       f"*{tail_name})")  # fmt: skip
        else:
            src.append(f"    {k_name}.run({g}, stream, {k_name}.function, "
                       f"{k_name}.packed_metadata, None, None, None, {args}, *{tail_name})")
    outs = ", ".join("None" if i is None else f"t{i}" for i in replay.outputs)
    src.append(f"    return ({outs}{',' if len(replay.outputs) == 1 else ''})")
    source = "\n".join(src) + "\n"
    names.update(_L=sys.modules[__name__], _generic=replay.generic, _empty_like=torch.empty_like,
                 _contiguous=torch.contiguous_format)  # fmt: skip
    exec(compile(source, "<normlab._launch replay>", "exec"), names)
    return source, names["replay"]


def record(run, roles):
    """(run()'s result, a Replay of it or None): run() returns a tuple of tensors or Nones,
    ``roles`` are the tensors (or Nones) a replay is handed in the same order."""
    global _recorder
    if _recorder is not None:  # nested (an op inside a recorded op): run plainly
        return run(), None
    rec = _recorder = _Recorder(roles)
    try:
        out = run()
    finally:
        _recorder = None
    outputs = []
    for t in out:
        i = None if t is None else rec.slot(t)
        if t is not None and i is None:
            rec.ok = False
        outputs.append(i)
    return out, (Replay(rec, tuple(outputs)) if rec.ok else None)


UNSEEN = object()  # a cache's missing entry (None is a key that does not replay)
MAX_REPLAYS = 4096  # per op; past it the cache starts over


def replayed(cache: dict, key, run, roles, device):
    """run(), replayed from ``cache[key]`` after the key's first call (recorded then). A key
    whose first call did not record cleanly runs plainly every time."""
    replay = cache.get(key, UNSEEN)
    if replay is UNSEEN:
        out, replay = record(run, roles)
        if len(cache) >= MAX_REPLAYS:
            cache.clear()
        cache[key] = replay
        return out
    if replay is None:
        return run()
    return replay(roles, device)
