"""The lean launch path's cache key tells apart every pair of arguments Triton's specializer
does."""

import itertools

import pytest
import torch
from triton._C.libtriton import native_specialize_impl
from triton.backends.nvidia.compiler import CUDABackend

from normlab import _launch

INTS = [0, 1, 2, 15, 16, 17, 32, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -1, -16, -(2**31),
        -(2**31) - 1, 2**63 - 16, 2**63, 2**63 + 16]  # fmt: skip


def _triton(v):
    return native_specialize_impl(CUDABackend, v, False, True, True)


def _tensors():
    out = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        base = torch.empty(64, dtype=dtype)
        out += [base, base[1:], base[8:], base[16:]]
    return out


class _Param:
    def __init__(self, name, is_constexpr, default=None, has_default=False):
        self.name, self.is_constexpr = name, is_constexpr
        self.default, self.has_default = default, has_default


class _FakeKernel:
    """A compiled kernel's stand-in: records what its launcher is handed."""

    function = packed_metadata = None

    def __init__(self, tag):
        self.tag, self.runs = tag, []

    def run(self, *launch_args):
        self.runs.append(launch_args)


class _FakeJit:
    """A JITFunction's stand-in: (x_ptr, n, SCALE: constexpr, FLAG: constexpr = False,
    w_ptr = None), a runtime pointer after the constexprs as the losses' options are;
    ``fn[grid](...)`` 'compiles' a new kernel each time."""

    __name__ = "fake_kernel"
    params = (_Param("x_ptr", False), _Param("n", False), _Param("SCALE", True),
              _Param("FLAG", True, False, True), _Param("w_ptr", False, None, True))  # fmt: skip

    def __init__(self):
        self.compiled = []

    def __getitem__(self, grid):
        def compile_and_run(*args, **kwargs):
            self.compiled.append((grid, args, kwargs))
            return _FakeKernel(len(self.compiled))

        return compile_and_run


@pytest.fixture
def lean(monkeypatch):
    monkeypatch.setattr(_launch, "ENABLED", True)
    monkeypatch.setattr(_launch, "_get_device", lambda: 0)
    monkeypatch.setattr(_launch, "_get_stream", lambda device: 7)
    monkeypatch.setattr(_launch, "_SITES", {})
    return _FakeJit()


def test_a_known_key_launches_with_int_pointers_and_the_keyword_tail(lean):
    x = torch.empty(64)
    _launch.launch(lean, (3,), x, 100, SCALE=4, num_warps=2)
    assert len(lean.compiled) == 1  # the first call compiles through fn[grid]
    kernel = next(iter(_launch._SITES[id(lean)].compiled.values()))[0]
    y = torch.empty(64)
    _launch.launch(lean, (5, 2), y, 100, SCALE=4, num_warps=2)  # same key: no compile
    assert len(lean.compiled) == 1
    (g0, g1, g2, stream, _, _, meta, enter, leave, *values), = kernel.runs
    assert (g0, g1, g2, stream, meta, enter, leave) == (5, 2, 1, 7, None, None, None)
    assert values == [y.data_ptr(), 100, 4, False, None]  # then SCALE, FLAG and w_ptr's defaults


@pytest.mark.parametrize("change", ["constexpr", "positional_constexpr", "option", "dtype",
                                    "alignment", "int_one", "int_div16", "int_width"])  # fmt: skip
def test_what_triton_specializes_on_compiles_anew(lean, change):
    base = torch.empty(64)
    _launch.launch(lean, (1,), base, 32, SCALE=4, num_warps=2)
    x, n, scale, warps = base, 32, 4, 2
    if change == "constexpr":
        scale = 8
    elif change == "option":
        warps = 4
    elif change == "dtype":
        x = torch.empty(64, dtype=torch.float16)
    elif change == "alignment":
        x = base[1:]
    elif change != "positional_constexpr":
        n = {"int_one": 1, "int_div16": 33, "int_width": 2**31 + 32}[change]
    if change == "positional_constexpr":
        _launch.launch(lean, (1,), x, n, 4, num_warps=warps)  # SCALE=4 by position: keyed apart
        _launch.launch(lean, (1,), x, n, 8, num_warps=warps)
        assert len(lean.compiled) == 3
        return
    _launch.launch(lean, (1,), x, n, SCALE=scale, num_warps=warps)
    assert len(lean.compiled) == 2


@pytest.mark.parametrize("values", [INTS, [1.0, 0.5, 3], [True, False, 1, 0], _tensors()],
                         ids=["ints", "floats", "bools", "pointers"])  # fmt: skip
def test_key_separates_what_triton_separates(lean, values):
    """Two runtime arguments that Triton's specializer tells apart never share a kernel."""
    for a, b in itertools.combinations(values, 2):
        if _triton(a) != _triton(b):
            _launch._SITES.clear()
            lean.compiled.clear()
            _launch.launch(lean, (1,), torch.empty(4), a, SCALE=1)
            _launch.launch(lean, (1,), torch.empty(4), b, SCALE=1)
            assert len(lean.compiled) == 2, (a, b)


def test_runtime_arguments_by_keyword_are_per_call(lean):
    """A runtime argument passed by keyword (w_ptr) is keyed by its spec, not its value, and each
    call's own pointer reaches the launcher; a call recorded with one is not replayed."""
    x, w1, w2 = torch.empty(64), torch.empty(64), torch.empty(64)
    for w in (w1, w1, w2):
        _launch.launch(lean, (1,), x, 32, SCALE=4, w_ptr=w)
    assert len(lean.compiled) == 1
    kernel = lean.compiled and next(iter(_launch._SITES[id(lean)].compiled.values()))[0]
    assert [values[-1] for values in kernel.runs] == [w1.data_ptr(), w2.data_ptr()]
    _launch.launch(lean, (1,), x, 32, SCALE=4, w_ptr=torch.empty(64, dtype=torch.float16))
    assert len(lean.compiled) == 2  # another dtype: another kernel
    _, replay = _launch.record(lambda: _launch.launch(lean, (1,), x, 32, SCALE=4, w_ptr=w1) or (),
                               (x, w1))  # fmt: skip
    assert replay is None


def test_empty_hook_chains_are_inactive():
    from triton import knobs

    chain = knobs.HookChain()
    assert not _launch._active(None) and not _launch._active(chain)
    chain.add(print)
    assert _launch._active(chain) and _launch._active(print)


def test_disabled_under_the_interpreter():
    assert not _launch.ENABLED  # CPU tests run the interpreter: launch is kernel[grid](...)


def test_a_replay_hands_the_launcher_what_a_launch_does(lean, monkeypatch):
    """A recorded launch, replayed, reaches the compiled kernel's launcher with the same
    arguments as a direct launch of the same call: grid, stream, the three hook slots, the
    pointers as ints, then the keyword tail."""
    x = torch.empty(64)

    def call(t):
        _launch.launch(lean, (3,), t, 100, SCALE=4, num_warps=2)
        return ()

    _, replay = _launch.record(lambda: call(x), (x,))  # the first call compiles
    kernel = next(iter(_launch._SITES[id(lean)].compiled.values()))[0]
    y = torch.empty(64)
    call(y)  # a direct launch: the known key
    replay((y,), "cpu")
    direct, replayed = kernel.runs
    assert replayed == direct
    assert replayed[9:] == (y.data_ptr(), 100, 4, False, None)


class _ForwardingLauncher:
    """Triton 3.6's CudaLauncher, as its driver.py reads: ``__call__`` allocates scratch memory
    (none here) and forwards to the C ``launch`` with the kernel's cooperative-grid and PDL
    flags and the two scratch pointers."""

    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self, scratch=0, calls=None):
        self.global_scratch_size, self.profile_scratch_size = scratch, 0
        self.calls = [] if calls is None else calls
        self.launch = _CLaunch(self.calls)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        assert not self.global_scratch_size  # a stand-in: no allocator
        self.launch(gridX, gridY, gridZ, stream, function, self.launch_cooperative_grid,
                    self.launch_pdl, None, None, *args)  # fmt: skip


class _CLaunch:
    """The C launch function's stand-in (not a Python function, as a builtin is not)."""

    def __init__(self, calls):
        self.calls = calls

    def __call__(self, *args):
        self.calls.append(args)


class _WrappedLauncher(_ForwardingLauncher):
    """Another release's launcher: a different ``__call__`` signature."""

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, *args):
        raise AssertionError("not taken directly")


@pytest.mark.parametrize("replayed", [False, True], ids=["launch", "replay"])
def test_a_forwarding_launcher_is_called_beneath_its_wrapper(lean, monkeypatch, replayed):
    """Where Triton's launcher object only forwards (3.6, no scratch memory), the C function
    receives exactly what the wrapper would pass it; a launcher with scratch memory or another
    signature is called as before."""
    x = torch.empty(64)

    def call(t):
        _launch.launch(lean, (3, 2), t, 100, SCALE=4, num_warps=2)
        return ()

    _launch.record(lambda: call(x), (x,))  # compiles
    site = _launch._SITES[id(lean)]
    (key, entry), = site.compiled.items()
    kernel = entry[0]
    for launcher, direct in ((_ForwardingLauncher(), True), (_ForwardingLauncher(scratch=8), False),
                             (_WrappedLauncher(), False)):  # fmt: skip
        kernel.run = launcher
        site.compiled[key] = (*entry[:3], _launch._direct_launch(kernel))
        assert (site.compiled[key][3] is not None) == direct
        if not direct:
            continue
        y = torch.empty(64)
        _, replay = _launch.record(lambda y=y: call(y), (y,))
        if replayed:
            replay((y,), "cpu")
        else:
            call(y)
        wrapped = []
        _ForwardingLauncher(calls=wrapped)(3, 2, 1, 7, None, None, None, None, None,
                                           y.data_ptr(), 100, 4, False, None)  # fmt: skip
        assert launcher.calls[-1] == wrapped[0]
