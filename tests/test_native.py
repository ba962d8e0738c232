"""The C++ replay and autograd node (``normlab/_native.cpp``) driven on CPU: the extension is
built here and launches through its recording stand-in; every norm kernel is a stand-in with
the real kernel's parameters (``benchmarks/emulated_gpu.py``). The kernels compute nothing, so
these tests check what reaches ``cuLaunchKernel`` against what the Python replay hands Triton's
launcher for the same call, and the node's autograd behaviour; ``benchmarks/gpu_check.py --only
replay`` checks the values against fp64 on a GPU."""

import shutil
import struct

import pytest
import torch
from helpers import load_script, norm_outputs, small_split_rows

from normlab import _launch, _native
from normlab.norms import op

emulated_gpu = load_script("benchmarks/emulated_gpu.py")

needs_toolchain = pytest.mark.skipif(
    shutil.which("ninja") is None or shutil.which("c++") is None,
    reason="building the C++ replay needs ninja and a C++ compiler")  # fmt: skip


@pytest.fixture(scope="module")
def native():
    mod = _native.record_launches()
    assert mod is not None, "the C++ replay did not build (see stderr)"
    return mod


@pytest.fixture
def gpu_path(monkeypatch, native):
    for name in ("ENABLED", "REPLAY"):
        monkeypatch.setattr(_launch, name, getattr(_launch, name))
    monkeypatch.setattr(_native, "ENABLED", True)
    small_split_rows(monkeypatch)
    with emulated_gpu.emulate() as jits:
        native.records()
        emulated_gpu.RUNS.clear()
        yield jits


def _compiled_by_function(jits) -> dict:
    return {c.function: c for jit in jits.values() for c in jit.compiled}


def _python_launches(jits) -> list:
    """The Python replay's launches since the last call, as the driver would take them:
    (function, grid, block, the non-constexpr values, floats as their fp32 bits)."""
    by_function = _compiled_by_function(jits)
    out = []
    for function, grid, values in emulated_gpu.RUNS:
        kernel = by_function[function]
        kept = []
        for ty, v in zip(kernel.src.signature.values(), values, strict=True):
            if ty == "constexpr":
                continue
            kept.append(struct.unpack("<i", struct.pack("<f", v))[0] if ty == "fp32" else int(v))
        out.append((function, tuple(grid), 32 * kernel.metadata.num_warps, kept))
    emulated_gpu.RUNS.clear()
    return out


def _native_launches(native) -> list:
    return [(f, tuple(grid), block, list(values))
            for f, grid, block, _shared, _stream, values in native.records()]  # fmt: skip


def _pattern(launches, fixed) -> list:
    """Each launch with its pointers renamed by first appearance (``fixed``: {pointer: name}
    for the caller's tensors, which both paths must hand over as they are)."""
    names = dict(fixed)
    out = []
    for function, grid, block, values in launches:
        shown = []
        for v in values:
            if v in names:
                shown.append(names[v])
            elif v > 2**32 and v % 16 == 0:  # a buffer's pointer (CPU allocations are this high)
                names[v] = f"buffer{len(names)}"
                shown.append(names[v])
            else:
                shown.append(v)
        out.append((function, grid, block, shown))
    return out


def _call(kind, x, w, b, r, ones=True):
    outs = norm_outputs(kind, x, w, b, r)
    grads = [torch.ones_like(o) if ones else torch.full_like(o, 2.0) for o in outs]
    torch.autograd.backward(outs, grads)


CASES = [("rms", 37, 1000), ("ln", 37, 1000), ("rms", 300, 48), ("ln", 9, 5),
         ("add_rms", 7, 130), ("add_ln", 300, 48), ("rms", 1, 1), ("ln", 11, 257)]  # fmt: skip


@needs_toolchain
@pytest.mark.parametrize(("kind", "m", "n"), CASES, ids=[f"{k}-{m}x{n}" for k, m, n in CASES])
def test_node_launches_what_the_python_replay_launches(gpu_path, native, monkeypatch, kind, m,
                                                       n):  # fmt: skip
    """Call 1 records in Python; call 2's forward runs in C++ and its backward in Python, which
    hands the node its program; a call with the node switched off replays in Python; the next
    runs forward and backward in C++ and launches the same kernels, grids, blocks, constants
    and pointers."""
    x = torch.randn(2, m, n, requires_grad=True)  # N-D: the node lays y out as x
    r = torch.randn(2, m, n, requires_grad=True)
    w = torch.rand(n, requires_grad=True)
    b = torch.rand(n, requires_grad=True)
    _call(kind, x, w, b, r)
    assert native.records() == []
    (sig,) = op._GRAD.values()
    assert sig.native is not None and sig.native.n_backwards == 0

    _call(kind, x, w, b, r)  # C++ forward, Python backward (recording the node's program)
    forward_only = _native_launches(native)
    assert forward_only and sig.native.n_backwards == 1
    _python_launches(gpu_path)

    node, sig.native = sig.native, None  # one call through the Python Function and replay
    _call(kind, x, w, b, r)
    python = _python_launches(gpu_path)
    assert native.records() == []
    sig.native = node

    _call(kind, x, w, b, r)
    cpp = _native_launches(native)
    assert _python_launches(gpu_path) == []
    assert len(cpp) == len(python) > len(forward_only)
    fixed = {t.data_ptr(): name for name, t in (("x", x), ("r", r), ("w", w), ("b", b))}
    assert _pattern(cpp, fixed) == _pattern(python, fixed)
    # the same forward as call 2's
    assert _pattern(cpp[:len(forward_only)], fixed) == _pattern(forward_only, fixed)
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


@needs_toolchain
@pytest.mark.parametrize(("kind", "m", "n"), CASES, ids=[f"{k}-{m}x{n}" for k, m, n in CASES])
def test_inference_calls_launch_what_the_python_replay_launches(gpu_path, native, monkeypatch,
                                                                kind, m, n):  # fmt: skip
    """A call without a gradient replays its recording from C++ after its first call, with the
    launches of the Python replay, and hands back y (and h) in x's shape."""
    x, r = torch.randn(2, m, n), torch.randn(2, m, n)
    w, b = torch.rand(n), torch.rand(n)
    norm_outputs(kind, x, w, b, r)
    assert native.records() == []
    (replay,) = op._INFERENCE.values()
    program, replay.native = replay.native, False  # one call through the Python replay
    norm_outputs(kind, x, w, b, r)
    python = _python_launches(gpu_path)
    replay.native = program
    outs = norm_outputs(kind, x, w, b, r)
    cpp = _native_launches(native)
    assert _python_launches(gpu_path) == []
    fixed = {t.data_ptr(): name for name, t in (("x", x), ("r", r), ("w", w), ("b", b))}
    assert cpp and _pattern(cpp, fixed) == _pattern(python, fixed)
    assert [o.shape for o in outs] == [x.shape] * len(outs)


@needs_toolchain
def test_node_gradients_reach_the_inputs_that_need_them(gpu_path, native):
    """With a residual, h's gradient alone (y unused) flows to x and the residual as is; the
    node returns no gradient for an input that needs none."""
    n = 64
    x = torch.randn(5, n, requires_grad=True)
    r = torch.randn(5, n)  # needs no gradient
    w = torch.rand(n, requires_grad=True)
    for _ in range(3):
        y, h = norm_outputs("add_rms", x, w, None, r)
    assert "NormlabNormBackward" in y.grad_fn.name()  # the C++ node
    dh = torch.randn_like(h)
    (gx,) = torch.autograd.grad(h, [x], dh)
    torch.testing.assert_close(gx, dh, rtol=0, atol=0)
    native.records()


@needs_toolchain
def test_node_refuses_a_second_derivative(gpu_path, native):
    x = torch.randn(4, 32, requires_grad=True)
    w = torch.rand(32, requires_grad=True)
    for _ in range(3):
        y = norm_outputs("rms", x, w)[0]
        torch.autograd.backward(y, torch.ones_like(y))
    y = norm_outputs("rms", x, w)[0]
    with pytest.raises(RuntimeError, match="cannot differentiate their gradient"):
        torch.autograd.grad(y, [x], torch.ones_like(y), create_graph=True)
    native.records()


def test_launch_hooks_and_the_lean_launch_off_take_the_python_replay(monkeypatch):
    """A profiler's launch hook sees every launch, so calls leave the node (and the C++ replay)
    while one is set, as with the lean launch off. (A functorch transform never reaches it:
    ``_host.plain_tensor`` sends such calls down the full path, ``tests/test_replay.py``.)"""
    from triton import knobs

    monkeypatch.setattr(_launch, "ENABLED", True)
    assert _launch.lean()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    assert not _launch.lean()
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", lambda *a: None)
    assert not _launch.lean()
    monkeypatch.setattr(knobs.runtime, "launch_exit_hook", None)
    monkeypatch.setattr(_launch, "ENABLED", False)  # NORMLAB_LEAN_LAUNCH=0
    assert not _launch.lean()


def test_a_failed_build_says_so_once_and_the_python_replay_runs(monkeypatch, capsys):
    from torch.utils import cpp_extension

    calls = []

    def no_compiler(*args, **kwargs):
        calls.append(args)
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(_native, "_module", None)
    monkeypatch.setattr(_native, "_failed", False)
    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    assert _native.module() is None and _native.module() is None
    assert len(calls) == 1
    err = capsys.readouterr().err
    assert err.count("did not build") == 1 and "Ninja is required" in err


class _Kernel:
    """A compiled kernel's attributes as ``launch_spec`` reads them."""

    def __init__(self, signature, num_warps=4, **run):
        from types import SimpleNamespace

        self.src = SimpleNamespace(signature=signature)
        self.metadata = SimpleNamespace(num_warps=num_warps, shared=128, num_ctas=1)
        self.function = 0x1234
        self.run = SimpleNamespace(**run)


SIGNATURE = {"x_ptr": "*bf16", "n": "i32", "stride": "i64", "eps": "fp32", "ONE": "constexpr",
             "BLOCK": "constexpr"}  # fmt: skip
VALUES = [None, 1000, 2**40, 1e-6, 1, 1024]


def test_launch_spec_packs_arguments_as_the_signature_types_them():
    spec = _native.launch_spec(_Kernel(SIGNATURE, num_warps=8), VALUES, {0: 3}, (7, 1, 1),
                               param_sizes=lambda f: [8, 4, 8, 4, 8])  # fmt: skip
    eps_bits = struct.unpack("<i", struct.pack("<f", 1e-6))[0]
    assert spec == (0x1234, (7, 1, 1), 256, 128,
                    [(0, 3), (1, 1000), (2, 2**40), (3, eps_bits)], 1)  # fmt: skip


@pytest.mark.parametrize("why", ["sizes", "cooperative", "pdl", "scratch", "untyped", "int-ptr"])
def test_launch_spec_refuses_what_it_cannot_pass_exactly(why):
    """Any doubt about the parameters, or a launch attribute cuLaunchKernel does not set: no
    program, and the Python replay runs."""
    sizes = [8, 4, 8, 4, 8]
    kernel, slots, signature = _Kernel(SIGNATURE), {0: 3}, SIGNATURE
    if why == "sizes":
        sizes = [8, 4, 4, 4, 8]  # the driver disagrees with the signature
    elif why in ("cooperative", "pdl", "scratch"):
        attr = {"cooperative": "launch_cooperative_grid", "pdl": "launch_pdl",
                "scratch": "global_scratch_size"}[why]  # fmt: skip
        kernel = _Kernel(SIGNATURE, **{attr: 1})
    elif why == "untyped":
        signature = {**SIGNATURE, "n": "i8"}
        kernel = _Kernel(signature)
    else:
        slots = {}  # a pointer that is no recorded tensor
    assert _native.launch_spec(kernel, VALUES, slots, (1, 1, 1),
                               param_sizes=lambda f: sizes) is None  # fmt: skip
