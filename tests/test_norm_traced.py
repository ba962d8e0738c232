"""The norms' Triton ops as torch.compile traces them, on CPU.

With static shapes the body of ``normlab::norm_fwd`` / ``normlab::norm_bwd`` runs on fake tensors
and each launch becomes a ``wrap_triton`` node. The interpreter's kernels cannot become nodes, so
these tests record the traced launches instead and check them against the launches of an eager
call of the same signature: the same kernels, grids, argument layouts and meta-parameters. With
symbolic shapes the body is one call of the opaque ``norm_*_planned`` op, which runs here.
(On a GPU, ``benchmarks/compile_check.py`` and ``gpu_check.py --only compile`` run the traced
kernels under Inductor against eager.)
"""

from __future__ import annotations

import pytest
import torch
import triton.language as tl
from helpers import assert_close, mutation_analysis, traced_launch_spy
from torch._subclasses.fake_tensor import FakeTensorMode

import normlab
from normlab import _launch, ref
from normlab.norms import block_row, config, op, reduce, row, split_row

EPS = {True: 1e-6, False: 1e-5}


def _signature(v):
    if isinstance(v, torch.Tensor):
        return (v.dtype, tuple(v.shape), v.stride())
    return v


@pytest.fixture
def launches(monkeypatch):
    """Every launch the norms' launchers make, as (kernel, grid, arguments' signatures,
    keywords); traced launches are recorded and not run."""
    return traced_launch_spy(monkeypatch, (row, block_row, split_row, reduce), op, _signature)


# (n_rows, n_cols, layout, strategy): a plan kind each, at awkward sizes.
CASES = [
    (7, 1000, "auto", "auto"),  # one row per program, persistent backward
    (1, 4099, "auto", "auto"),  # one row, a width just past a power of two
    (37, 64, "auto", "auto"),  # narrow rows: block-row tiles
    (5, 131, "row", "two_stage"),
    (3, 97, "row", "atomic"),
    (2, 16411, "auto", "auto"),  # few wide rows: the split-row kernels
]


def _args(n_rows, n_cols, is_rms, residual):
    x = torch.randn(n_rows, n_cols)
    r = torch.randn(n_rows, n_cols) if residual else None
    w = torch.randn(n_cols)
    b = None if is_rms else torch.randn(n_cols)
    return x, r, w, b


@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_traced_body_launches_what_an_eager_call_launches(launches, is_rms, case, residual):
    _traced_against_eager(launches, is_rms, case, residual)


@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_traced_backward_by_role(launches, monkeypatch, is_rms, residual):
    """A decode batch's backward by role (config.bwd_roles, switched on) traces to the one
    launch an eager call makes."""
    monkeypatch.setattr(config, "NORM_BWD_ROLES", True)
    eager = _traced_against_eager(launches, is_rms, (14, 1022, "row", "auto"), residual)
    kernels = [name for name, *_ in eager]
    assert kernels[-1] == "_norm_bwd_roles_kernel" and "_reduce_partials_kernel" not in kernels


def _traced_against_eager(launches, is_rms, case, residual):
    """The launches of an eager forward and backward, checked equal to the traced ones."""
    n_rows, n_cols, layout, strategy = case
    x, r, w, b = _args(n_rows, n_cols, is_rms, residual)
    options = (EPS[is_rms], 0.0, is_rms, strategy, layout)
    y, h, mean, rstd = torch.ops.normlab.norm_fwd(x, r, w, b, *options)
    dy, dh = torch.randn_like(x), (torch.randn_like(x) if residual else None)
    normed = h if residual else x
    torch.ops.normlab.norm_bwd(dy, dh, normed, w, b, mean, rstd, *options)
    eager = list(launches)
    assert eager, "the eager call launched nothing"
    launches.clear()

    with FakeTensorMode() as mode:
        fake = [None if t is None else mode.from_tensor(t)
                for t in (x, r, w, b, dy, dh, mean, rstd, normed)]  # fmt: skip
        fx, fr, fw, fb, fdy, fdh, fmean, frstd, fnormed = fake
        out = torch.ops.normlab.norm_fwd(fx, fr, fw, fb, *options)
        grads = torch.ops.normlab.norm_bwd(fdy, fdh, fnormed, fw, fb, fmean, frstd, *options)
    assert launches == eager
    for traced, real in zip((*out, *grads), (y, h, mean, rstd), strict=False):
        assert (traced.shape, traced.dtype) == (real.shape, real.dtype)
    assert grads[0].shape == x.shape and grads[1].shape == w.shape
    return eager


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-{c[2]}-{c[3]}")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_forward_without_statistics(launches, is_rms, case):
    """need_stats=False (a compiled call that needs no gradient): empty statistics, eager and
    traced alike, the same launches, and y against fp64."""
    n_rows, n_cols, layout, strategy = case
    x, _, w, b = _args(n_rows, n_cols, is_rms, False)
    options = (EPS[is_rms], 0.0, is_rms, strategy, layout, False)
    y, _, mean, rstd = torch.ops.normlab.norm_fwd(x, None, w, b, *options)
    assert mean.numel() == rstd.numel() == 0
    want = (ref.rms_norm(x.double(), w.double(), EPS[True]) if is_rms
            else ref.layer_norm(x.double(), w.double(), b.double(), EPS[False]))  # fmt: skip
    assert_close(y, want)
    eager = list(launches)
    launches.clear()
    with FakeTensorMode() as mode:
        fake = [None if t is None else mode.from_tensor(t) for t in (x, w, b)]
        _, _, fmean, frstd = torch.ops.normlab.norm_fwd(fake[0], None, *fake[1:], *options)
    assert launches == eager and fmean.numel() == frstd.numel() == 0


def _kernel(x_ptr, x_row_stride, ROW_ALIGN: tl.constexpr):  # a signature: never compiled here
    pass


def test_traced_launch_drops_the_row_stride_hint(monkeypatch):
    """A traced launch is a wrap_triton call with ROW_ALIGN 1 (the hint under Inductor's
    mutation analysis, which makes constants of ints, is unchecked on a GPU: _traced_launch)
    and no maxnreg (not a launch option Inductor takes), the rest as given."""
    from triton.runtime.jit import JITFunction

    kernel, seen = JITFunction(_kernel), []

    class WrapTriton:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append((self.fn, grid, args, kwargs))

    monkeypatch.setattr(torch.library, "wrap_triton", WrapTriton)
    with _launch.traced():
        _launch.launch(kernel, (3,), "x", 1000, ROW_ALIGN=8, num_warps=4)
        _launch.launch(kernel, (2,), "x", 1001, ROW_ALIGN=1, num_warps=2)
        _launch.launch(kernel, (1,), "x", 1002, ROW_ALIGN=1, num_warps=8, maxnreg=128)
    assert seen == [(kernel, (3,), ("x", 1000), {"ROW_ALIGN": 1, "num_warps": 4}),
                    (kernel, (2,), ("x", 1001), {"ROW_ALIGN": 1, "num_warps": 2}),
                    (kernel, (1,), ("x", 1002), {"ROW_ALIGN": 1, "num_warps": 8})]  # fmt: skip


def _kernel_with_defaults(x_ptr, n, mask_ptr=None, scale=1.0, MODE: tl.constexpr = 0):
    pass


def test_traced_launch_passes_every_default(monkeypatch):
    """A traced launch names every parameter left to its default (Inductor would hand the kernel
    None for it), and keeps what the caller passed."""
    from triton.runtime.jit import JITFunction

    kernel, seen = JITFunction(_kernel_with_defaults), []

    class WrapTriton:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.append((args, kwargs))

    monkeypatch.setattr(torch.library, "wrap_triton", WrapTriton)
    with _launch.traced():
        _launch.launch(kernel, (1,), "x", 7, num_warps=4)
        _launch.launch(kernel, (1,), "x", 7, "m", MODE=2, num_warps=4)
    assert seen == [(("x", 7), {"num_warps": 4, "mask_ptr": None, "scale": 1.0, "MODE": 0}),
                    (("x", 7, "m"), {"MODE": 2, "num_warps": 4, "scale": 1.0})]  # fmt: skip


def test_traced_body_needs_traceable_kernels(launches, monkeypatch):
    """Under the interpreter (TRACEABLE off) a traced body launches nothing: it calls the
    opaque op."""
    monkeypatch.setattr(op, "TRACEABLE", False)
    x, _, w, _ = _args(4, 40, True, False)
    with FakeTensorMode() as mode:
        y, *_ = torch.ops.normlab.norm_fwd(mode.from_tensor(x), None, mode.from_tensor(w), None,
                                          1e-6, 0.0, True, "auto", "auto")  # fmt: skip
    assert launches == [] and y.shape == x.shape


@pytest.mark.slow  # seconds each (compile): out of make test-quick
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_symbolic_shapes_take_the_planned_op(launches, monkeypatch, is_rms):
    """dynamic=True: the compiled graphs call the opaque planned ops (no traced launch), which
    plan on the real shape; forward and gradients against fp64. With the plans memoized, as on a
    GPU: the fake kernels must not hash symbolic sizes."""

    def no_traced_launch(fn, grid, args, kwargs):
        raise AssertionError("a launch was traced with symbolic shapes")

    monkeypatch.setattr(_launch, "_traced_launch", no_traced_launch)
    for name in config._MEMOIZED:  # memoized as on a GPU (restored after the test)
        monkeypatch.setattr(config, name, getattr(config, name))
    config.memoize()
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep)
    x, r, w, b = _args(6, 21, is_rms, True)

    def loss(x, r, w, b):
        fn = normlab.add_rms_norm if is_rms else normlab.add_layer_norm
        y, h = fn(x, r, w, eps=EPS[is_rms]) if is_rms else fn(x, r, w, b, eps=EPS[is_rms])
        return (y * torch.arange(21.0)).sum() + h.sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend=backend, dynamic=True)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, w)]
    grads = torch.autograd.grad(compiled(*leaves, b), leaves)
    assert len(graphs) == 2
    assert "normlab.norm_fwd_planned" in graphs[0] and "normlab.norm_bwd_planned" in graphs[1]
    assert launches  # the planned ops launched on the real tensors

    xd, rd, wd = (t.double().requires_grad_(True) for t in (x, r, w))
    hd = xd + rd
    yd = ref.rms_norm(hd, wd, EPS[True]) if is_rms else ref.layer_norm(hd, wd, b.double(),
                                                                       EPS[False])  # fmt: skip
    want = torch.autograd.grad((yd * torch.arange(21.0).double()).sum() + hd.sum(), (xd, rd, wd))
    assert_close(grads[0], want[0], msg="dx")
    assert_close(grads[1], want[1], msg="dresidual")
    assert_close(grads[2], want[2], reduce_len=6, msg="dweight")


# ---- a compiled call: the checks in the op's body ---------------------------------------------


@pytest.mark.slow  # seconds each (compile): out of make test-quick
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_compiled_call_of_strided_nd_inputs(is_rms):
    """A compiled call hands the op x as the caller shaped it (3-D, columns strided) and a
    strided weight: the op's body makes the rows and the unit-stride weight. Forward and
    gradients against fp64."""
    base = torch.randn(2, 37, 5)
    x = base.transpose(1, 2)  # (2, 5, 37), column stride 5
    w = torch.randn(37, 2)[:, 0]  # stride 2
    b = None if is_rms else torch.randn(37)
    scale = torch.arange(37.0)

    def loss(x, w, b):
        fn = normlab.rms_norm if is_rms else normlab.layer_norm
        y = fn(x, w, eps=EPS[is_rms]) if is_rms else fn(x, w, b, eps=EPS[is_rms])
        return (y * scale).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xc, wc = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    got = compiled(xc, wc, b)
    grads = torch.autograd.grad(got, (xc, wc))
    xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
    yd = ref.rms_norm(xd, wd, EPS[True]) if is_rms else ref.layer_norm(xd, wd, b.double(),
                                                                       EPS[False])  # fmt: skip
    want = (yd * scale.double()).sum()
    expect = torch.autograd.grad(want, (xd, wd))
    assert_close(got, want.detach(), reduce_len=yd.numel(), msg="loss")
    assert_close(grads[0], expect[0], msg="dx")
    assert_close(grads[1], expect[1], reduce_len=10, msg="dweight")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"eps": -1.0}, "eps must be a finite float >= 0"),
     ({"offset": 1.0, "weight": None}, "needs a weight"),
     ({"layout": "tiles"}, "layout='tiles'"),
     ({"weight": torch.ones(7)}, r"weight must have shape \(8,\)")],
)  # fmt: skip
def test_compiled_call_names_a_bad_argument(kwargs, message):
    """Inside torch.compile the public checks run at trace time in the op's body: the error
    Dynamo raises carries the public message."""
    args = {"weight": torch.ones(8), **kwargs}
    fn = torch.compile(lambda x: normlab.rms_norm(x, **args), backend="eager", fullgraph=True)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):
        fn(torch.randn(2, 8))


def test_compiled_call_guards_no_normlab_global_but_its_path():
    """Dynamo checks a guard per global its trace read on every call of the compiled code; a
    compiled rms_norm reads the public function, the compiled path and the op, none of the
    checks' or the planner's globals."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    def call(x, w):
        return normlab.rms_norm(x, w)

    torch._dynamo.reset()
    def backend(gm, _inputs):  # no Inductor: the guards are Dynamo's
        return gm.forward

    torch.compile(call, backend=backend, fullgraph=True)(torch.randn(2, 8), torch.ones(8))
    (entry,) = _debug_get_cache_entry_list(call.__code__)
    module = "G['__import_normlab_dot_norms_dot_op']"
    read = {line.split(module, 1)[1].split(",")[0].split(".")[1]
            for line in str(entry.guard_manager).splitlines() if f"source={module}." in line}
    assert read == {"_compiled_call", "_needs_grad", "torch"}


@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_traced_body_of_strided_nd_input(launches, is_rms, residual):
    """The traced body of a compiled call's 3-D input with strided columns launches what an
    eager call of its contiguous rows launches, forward and backward, and hands back y, h and
    dx in the input's shape."""
    n_cols = 1000
    base = torch.randn(2, n_cols, 3)
    x = base.transpose(1, 2)  # (2, 3, 1000), column stride 3
    _, r, w, b = _args(6, n_cols, is_rms, residual)
    r3 = None if r is None else r.view(2, 3, n_cols)
    options = (EPS[is_rms], 0.0, is_rms, "auto", "auto")
    rows = x.reshape(6, n_cols).contiguous()
    _, h, mean, rstd = torch.ops.normlab.norm_fwd(rows, r, w, b, *options)
    dy = torch.randn(6, n_cols)
    torch.ops.normlab.norm_bwd(dy, None, h if residual else rows, w, b, mean, rstd, *options)
    eager = list(launches)
    launches.clear()
    dy3 = dy.view(2, 3, n_cols)
    with FakeTensorMode() as mode:
        fx, fw, fdy = mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(dy3)
        fr = None if r3 is None else mode.from_tensor(r3)
        fb = None if b is None else mode.from_tensor(b)
        y, fh, fmean, frstd = torch.ops.normlab.norm_fwd(fx, fr, fw, fb, *options)
        normed = fh if residual else fx
        dx, dw, _ = torch.ops.normlab.norm_bwd(fdy, None, normed, fw, fb, fmean, frstd, *options)
    assert launches == eager
    assert y.shape == dx.shape == (2, 3, n_cols) and dw.shape == (n_cols,)
    assert fh.shape == ((2, 3, n_cols) if residual else (0,))


# Inductor reads a traced kernel's TTIR to find the tensors it writes: see
# helpers.mutation_analysis, which runs this body after a stand-in sm_90 target.
_NORM_MUTATIONS = r"""
from normlab.norms import block_row, op, reduce, row, split_row

for module in (row, block_row, reduce, split_row):
    module.launch = record_launch
for m, n, is_rms, fused, strategy, layout in CASES:
    x = torch.randn(m, n, dtype=torch.bfloat16)
    w = torch.randn(n, dtype=torch.bfloat16)
    b = None if is_rms else torch.randn(n, dtype=torch.bfloat16)
    r = torch.randn_like(x) if fused else None
    dy, dh = torch.randn_like(x), torch.randn_like(x) if fused else None
    launched.clear()
    y, h, mean, rstd = op.planned_forward(x, r, w, b, 1e-6, 0.0, is_rms, strategy, layout)
    normed = h if fused else x
    op.planned_backward(dy, dh, normed, w, b, mean, rstd, 1e-6, 0.0, is_rms, strategy, layout)
    analyse([m, n, is_rms, fused, strategy, layout], [x, r, w, b, dy, dh])
"""


# Each norm kernel's output parameters: written wherever a launch gives them a tensor.
_FWD_OUTPUTS = {"y_ptr", "h_ptr", "mean_ptr", "rstd_ptr"}
_BWD_OUTPUTS = {"dx_ptr", "dw_ptr", "db_ptr", "dw_partial_ptr", "db_partial_ptr"}
_NORM_OUTPUTS = {
    "_norm_fwd_kernel": _FWD_OUTPUTS, "_block_row_fwd_kernel": _FWD_OUTPUTS,
    "_pointwise_fwd_kernel": _FWD_OUTPUTS, "_split_row_fwd_kernel": _FWD_OUTPUTS,
    "_shift_params_kernel": {"w_shifted_ptr", "b_shifted_ptr"},
    "_split_row_sums_kernel": {"sums_ptr"},
    "_norm_bwd_atomic_kernel": _BWD_OUTPUTS, "_norm_bwd_partials_kernel": _BWD_OUTPUTS,
    "_norm_bwd_persistent_kernel": _BWD_OUTPUTS, "_norm_bwd_persistent_static_kernel": _BWD_OUTPUTS,
    "_norm_bwd_persistent_two_pass_kernel": _BWD_OUTPUTS, "_norm_bwd_roles_kernel": _BWD_OUTPUTS,
    "_block_row_bwd_kernel": _BWD_OUTPUTS, "_split_row_bwd_kernel": _BWD_OUTPUTS,
    "_reduce_partials_kernel": {"dw_ptr", "db_ptr"},  # (it reads the partial rows)
}


def test_inductor_finds_what_the_norm_kernels_write():
    """Inductor's mutation analysis of every launch of a planned forward and backward (row,
    block-row and split-row plans, each dγ strategy, with and without the fused add) succeeds and
    names no input as written; each kernel's writes are exactly the outputs it was given. A
    failed analysis names every tensor argument, and a compiled graph would clone them."""
    cases = [[3, 256, True, False, "auto", "auto"], [3, 256, False, True, "auto", "auto"],
             [5, 1000, False, False, "atomic", "row"], [5, 1000, True, True, "two_stage", "row"],
             [600, 48, False, False, "auto", "block_row"], [600, 48, True, True, "auto", "auto"],
             [2, 20011, True, False, "auto", "auto"], [2, 20011, False, True, "auto", "auto"]]
    launches = mutation_analysis(_NORM_MUTATIONS, cases)
    assert {tuple(rec["case"]) for rec in launches} == {tuple(c) for c in cases}
    assert [rec for rec in launches if rec["inputs_written"] or not rec["writes"]] == []
    row_forwards = {tuple(rec["case"][:4]): rec["writes"] for rec in launches
                    if rec["kernel"] == "_norm_fwd_kernel"}  # fmt: skip
    assert row_forwards[(3, 256, True, False)] == ["rstd_ptr", "y_ptr"]
    assert row_forwards[(3, 256, False, True)] == ["h_ptr", "mean_ptr", "rstd_ptr", "y_ptr"]
    for rec in launches:
        outputs = _NORM_OUTPUTS[rec["kernel"]]
        assert rec["writes"] == [p for p in rec["tensors"] if p in outputs], rec
