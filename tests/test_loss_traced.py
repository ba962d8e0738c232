"""The losses' Triton ops as torch.compile traces them, on CPU (as ``test_norm_traced.py`` for the
norms).

With static shapes the body of ``normlab::entropy_fwd`` / ``normlab::entropy_split_bwd`` runs on
fake tensors and each launch becomes a ``wrap_triton`` node. The interpreter's kernels cannot
become nodes, so these tests record the traced launches and check them against the launches of
an eager call of the same arguments: the same kernels, grids, scalars and meta-parameters. With
symbolic shapes the body is one call of the opaque ``entropy_*_planned`` op, which runs here.
(On a GPU, ``benchmarks/compile_check.py --losses`` runs the traced kernels under Inductor
against eager.)
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import assert_close, mutation_analysis, traced_launch_spy
from test_entropy import FNS, _check, _inputs, _ref
from torch._subclasses.fake_tensor import FakeTensorMode

import normlab
from normlab import _launch, ref
from normlab.losses import chunked, config, fused, op, split


def _signature(v):
    # A tensor by dtype only: the eager call reduces through kept buffers of a rounded-up size,
    # the traced one through fresh buffers of its own.
    return v.dtype if isinstance(v, torch.Tensor) else v


@pytest.fixture
def launches(monkeypatch):
    """Every launch the losses' launchers make, as (kernel, grid, arguments, keywords); traced
    launches are recorded and not run."""
    monkeypatch.setattr(_launch, "REPLAY", False)
    return traced_launch_spy(monkeypatch, (fused, chunked, split), op, _signature)


# (loss, form, block_cap, reduction, compute_grad, options): each form, a kind and an option each.
CASES = [
    ("reverse_kl", "fused", 64, "mean", True, {}),
    ("soft_cross_entropy", "chunked", 64, "sum", True, {}),
    ("cross_entropy", "split", 64, "mean", True, {}),
    ("cross_entropy", "fused", 4096, "none", False, {}),
    ("cross_entropy", "chunked", 64, "mean", True, {"label_smoothing": 0.1, "z_loss": 1e-3}),
    ("reverse_kl", "split", 64, "none", True, {"temperature": 2.0}),
    ("soft_cross_entropy", "fused", 64, "mean", True, {"loss_mask": True}),
]
N_ROWS, N_COLS = 5, 304  # a vocabulary of whole 16-byte vectors: frames as eager's


def _op_args(loss, form, cap, reduction, compute_grad, options, x, other, mask):
    kw = {k: v for k, v in options.items() if k != "loss_mask"}
    kind = config.KINDS[loss]
    opts = config.options(kind, kw.get("temperature", 1.0), 0.5, kw.get("label_smoothing", 0.0),
                          kw.get("z_loss", 0.0), 0.0, mask is not None)  # fmt: skip
    spec = config.Spec(kind, form, cap, reduction, -100, None, 0, x.shape[-1], opts)
    o = spec.options
    extra = () if o is None else (mask, o.temperature, o.beta, o.label_smoothing, o.z_loss, None)
    return (x, other, kind, form, cap, reduction, -100, compute_grad, *extra)


def _bwd_args(args):
    """The split backward op's arguments after (logits, other, row_stats, g_out, n_valid), from
    the forward op's: kind, block_cap, reduction, ignore_index, then the mask and options."""
    return (args[2], args[4], args[5], args[6], *args[8:])


def _case_inputs(loss, options, n_cols=N_COLS):
    x, other = _inputs(loss, (N_ROWS, n_cols), torch.float32)
    mask = torch.tensor([True, False, True, True, False]) if options.get("loss_mask") else None
    return x, other, mask


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[3]}-{sorted(c[5])}")
def test_traced_body_launches_what_an_eager_call_launches(launches, case):
    loss, form, cap, reduction, compute_grad, options = case
    x, other, mask = _case_inputs(loss, options)
    args = _op_args(loss, form, cap, reduction, compute_grad, options, x, other, mask)
    out = torch.ops.normlab.entropy_fwd(*args)
    g_out = torch.rand(N_ROWS) + 0.5 if reduction == "none" else torch.tensor(1.5)
    if form == "split" and compute_grad:
        torch.ops.normlab.entropy_split_bwd(x, other, out[2], g_out, out[3], *_bwd_args(args))
    eager = list(launches)
    assert eager, "the eager call launched nothing"
    launches.clear()

    with FakeTensorMode() as mode:
        fake = [None if t is None else mode.from_tensor(t) for t in (x, other, mask, g_out)]
        fx, fother, fmask, fg = fake
        fargs = (fx, fother, *args[2:8], *((fmask, *args[9:]) if len(args) > 8 else ()))
        traced = torch.ops.normlab.entropy_fwd(*fargs)
        if form == "split" and compute_grad:
            fgrad = torch.ops.normlab.entropy_split_bwd(fx, fother, traced[2], fg, traced[3],
                                                        *_bwd_args(fargs))  # fmt: skip
            assert fgrad.shape == x.shape and fgrad.dtype == x.dtype
    assert launches == eager
    for t, real in zip(traced, out, strict=True):
        assert (t.shape, t.dtype) == (real.shape, real.dtype)


@pytest.mark.parametrize("loss", list(FNS))
def test_ragged_rows_keep_the_opaque_op(launches, loss):
    """Rows not of whole 16-element vectors (V = 301) are read in 16-byte frames from their
    addresses (config.frames, ALIGN > 1 in the eager call), which a traced tensor does not
    have: the traced body calls the opaque op and launches nothing; a vocabulary of 304 traces.
    The rule's other side: a row stride off 16 elements (a slice of wider rows) also keeps the
    opaque op."""
    x, other, _ = _case_inputs(loss, {}, n_cols=301)
    args = _op_args(loss, "fused", 64, "mean", True, {}, x, other, None)
    torch.ops.normlab.entropy_fwd(*args)
    (eager,) = launches
    assert eager[3]["ALIGN"] == 4  # fp32: 4 columns a 16-byte vector
    launches.clear()
    wide, wide_other, _ = _case_inputs(loss, {}, n_cols=312)
    sliced = wide[:, :304]  # 304 columns, rows 312 apart
    sliced_other = wide_other if loss == "cross_entropy" else wide_other[:, :304]
    with FakeTensorMode() as mode:
        loss_value, grad, *_ = torch.ops.normlab.entropy_fwd(
            mode.from_tensor(x), mode.from_tensor(other), *args[2:])
        assert launches == [] and loss_value.shape == () and grad.shape == x.shape
        torch.ops.normlab.entropy_fwd(mode.from_tensor(sliced), mode.from_tensor(sliced_other),
                                      *args[2:])  # fmt: skip
        assert launches == []
        aligned, aligned_other, _ = _case_inputs(loss, {}, n_cols=304)
        torch.ops.normlab.entropy_fwd(mode.from_tensor(aligned), mode.from_tensor(aligned_other),
                                      *args[2:])  # fmt: skip
    assert len(launches) == 1


def test_traced_body_needs_traceable_kernels(launches, monkeypatch):
    """Under the interpreter (TRACEABLE off) a traced body launches nothing: it calls the
    opaque op."""
    monkeypatch.setattr(op, "TRACEABLE", False)
    x, other, _ = _case_inputs("reverse_kl", {})
    args = _op_args("reverse_kl", "fused", 64, "mean", True, {}, x, other, None)
    with FakeTensorMode() as mode:
        loss, grad, *_ = torch.ops.normlab.entropy_fwd(mode.from_tensor(x),
                                                       mode.from_tensor(other), *args[2:])
    assert launches == [] and loss.shape == () and grad.shape == x.shape


@pytest.mark.slow  # seconds each (compile): out of make test-quick
@pytest.mark.parametrize("form", ["fused", "split"])
def test_symbolic_shapes_take_the_planned_op(launches, monkeypatch, form):
    """dynamic=True: the compiled graphs call the opaque planned ops (no traced launch), which
    run on the real tensors; loss and gradient against fp64 at two row counts."""

    def no_traced_launch(fn, grid, args, kwargs):
        raise AssertionError("a launch was traced with symbolic shapes")

    monkeypatch.setattr(_launch, "_traced_launch", no_traced_launch)
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm.code)
        return make_boxed_func(gm.forward)

    backend = aot_autograd(fw_compiler=keep, bw_compiler=keep)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, t: FNS["reverse_kl"][0](a, t, form=form, block_cap=64),
                             fullgraph=True, backend=backend, dynamic=True)  # fmt: skip
    for rows in (3, 5):
        x, t = _inputs("reverse_kl", (rows, 70), torch.float32)
        xc = x.clone().requires_grad_()
        out = compiled(xc, t)
        (grad,) = torch.autograd.grad(out, xc)
        ref_out, ref_grad = _ref("reverse_kl", x, t)
        _check("reverse_kl", out.detach(), grad, ref_out, ref_grad, torch.float32, 70)
    assert "normlab.entropy_fwd_planned" in graphs[0]
    if form == "split":
        assert "normlab.entropy_split_bwd_planned" in graphs[1]
    assert launches  # the planned ops launched on the real tensors


def test_frames_of_a_traced_tensor_are_none():
    """config.frames reads the rows' addresses for a ragged vocabulary; a traced tensor has none,
    so it gets element loads (ALIGN 1) where its real tensor gets 16-byte frames."""
    x = torch.randn(3, 301)
    assert config.frames(x, x, None, 64)["ALIGN"] == 4
    with FakeTensorMode() as mode:
        assert dict(config.frames(mode.from_tensor(x), mode.from_tensor(x), None, 64)) == {
            "ALIGN": 1, "FRAME": 1}


@pytest.mark.slow  # seconds (compile): out of make test-quick
def test_traced_graph_allocates_no_zero_dim_buffer(launches):
    """Inductor fills a 0-dim ``empty`` with a kernel of its own, so a reduced loss in a graph is
    a () view of a (1,) buffer: the compiled forward's graph allocates nothing 0-dim, and the
    loss it returns is that view."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    graphs = []

    def keep(gm, _inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    torch._dynamo.reset()
    compiled = torch.compile(lambda a, t: FNS["cross_entropy"][0](a, t, form="fused"),
                             fullgraph=True, backend=aot_autograd(fw_compiler=keep))  # fmt: skip
    x, labels, _ = _case_inputs("cross_entropy", {})
    compiled(x, labels)
    assert launches, "the body traced no launch"
    nodes = list(graphs[0].graph.nodes)
    allocations = [n for n in nodes if n.target in (torch.ops.aten.empty.memory_format,
                                                    torch.ops.aten.zeros.default)]  # fmt: skip
    assert allocations and all(len(n.args[0]) >= 1 for n in allocations)
    (loss,) = nodes[-1].args[0]
    assert loss.target == torch.ops.aten.view.default and loss.args[1] == []
    assert loss.args[0].target == torch.ops.aten.empty.memory_format
    assert loss.args[0].args[0] == [1]


# ---- a compiled call: the checks and the form in the op's body -----------------------------------

# (loss, form, options): the form "auto" resolves in the op's body; options travel as given.
COMPILED = [
    ("reverse_kl", "auto", {"temperature": 2.0}),
    ("jsd", "split", {"beta": 0.3}),
    ("cross_entropy", "auto", {"softcap": 5.0, "label_smoothing": 0.1}),
    ("cross_entropy", "split", {"z_loss": 1e-2, "ignore_index": 3}),
    ("forward_kl", "fused", {}),
]
REFS = {"reverse_kl": ref.reverse_kl_ref, "jsd": ref.jsd_ref, "forward_kl": ref.forward_kl_ref,
        "cross_entropy": ref.cross_entropy_ref}  # fmt: skip


@pytest.mark.slow  # seconds each (compile): out of make test-quick
@pytest.mark.parametrize("case", COMPILED, ids=lambda c: f"{c[0]}-{c[1]}-{sorted(c[2])}")
def test_compiled_call_of_strided_nd_logits(case):
    """A compiled call hands the op the caller's (2, 3, V) logits with strided columns (and a
    masked row): the op's body checks them, resolves the form and makes the rows; the split
    backward makes them again from the saved inputs. Loss and gradient against fp64."""
    loss, form, options = case
    v = 70
    x = (torch.randn(2, v, 3) * 3).transpose(1, 2)  # (2, 3, 70), column stride 3
    if loss == "cross_entropy":
        other = torch.randint(0, v, (2, 3))
        other[0, 1] = options.get("ignore_index", -100)
    else:
        other = (torch.randn(2, v, 3) * 3).transpose(1, 2)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    fn = getattr(normlab, loss)

    def call(x, other, mask):
        return fn(x, other, form=form, loss_mask=mask, **options)

    torch._dynamo.reset()
    compiled = torch.compile(call, fullgraph=True, backend="aot_eager")
    xc = x.clone().requires_grad_()
    got = compiled(xc, other, mask)
    (grad,) = torch.autograd.grad(got, xc)
    xd = x.double().requires_grad_()
    od = other if loss == "cross_entropy" else other.double()
    want = REFS[loss](xd, od, loss_mask=mask, **options)
    (want_grad,) = torch.autograd.grad(want, xd)
    assert_close(got, want.detach(), reduce_len=v, msg="loss")
    assert_close(grad, want_grad, reduce_len=v, msg="grad")


@pytest.mark.parametrize(
    ("loss", "kwargs", "message"),
    [("cross_entropy", {"softcap": 0.0}, "softcap must be > 0"),
     ("cross_entropy", {"block_cap": 3}, "block_cap must be one of"),
     ("cross_entropy", {"form": "tiles"}, "form must be one of"),
     ("reverse_kl", {"temperature": -1.0}, r"temperature must be in \[2\*\*-14"),
     ("jsd", {"beta": 1.0}, r"beta must be in \(0, 1\)"),
     ("reverse_kl", {"reduction": "avg"}, "reduction must be one of")],
)  # fmt: skip
def test_compiled_call_names_a_bad_argument(loss, kwargs, message):
    """Inside torch.compile the public checks run at trace time in the op's body: the error
    Dynamo raises carries the public message."""
    x, other = _inputs("cross_entropy" if loss == "cross_entropy" else "reverse_kl", (4, 64),
                       torch.float32)  # fmt: skip
    fn = getattr(normlab, loss)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, o: fn(x, o, **kwargs), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match=message):
        compiled(x, other)


@pytest.mark.parametrize(
    ("loss", "read"),
    [("cross_entropy", {"CE", "_compiled_loss", "torch"}),
     ("reverse_kl", {"KINDS", "_compiled_loss", "_distribution_loss", "torch"})],
)  # fmt: skip
def test_compiled_call_guards_no_normlab_global_but_its_path(loss, read):
    """Dynamo checks a guard per global its trace read on every call of the compiled code; a
    compiled loss reads its path to the op, none of the checks' or the planner's globals."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    fn = getattr(normlab, loss)

    def call(x, other):
        return fn(x, other)

    def backend(gm, _inputs):  # no Inductor: the guards are Dynamo's
        return gm.forward

    torch._dynamo.reset()
    torch.compile(call, backend=backend, fullgraph=True)(*_inputs(loss, (4, 64), torch.float32))
    (entry,) = _debug_get_cache_entry_list(call.__code__)
    module = "G['__import_normlab_dot_losses_dot_op']"
    lines = str(entry.guard_manager).splitlines()
    got = {ln.split(module, 1)[1].split(",")[0].split(".")[1].split("[")[0]
           for ln in lines if f"source={module}." in ln}  # fmt: skip
    assert got == read


@pytest.mark.parametrize("loss", ["cross_entropy", "reverse_kl"])
def test_traced_body_of_strided_nd_logits(launches, loss):
    """The traced body of a compiled call's (2, 3, V) logits with strided columns, form "auto"
    and block_cap None as the public call hands them, launches what an eager call of the
    resolved form on contiguous rows launches, forward and split backward."""
    v = 304
    x = torch.randn(2, v, 3).transpose(1, 2)  # (2, 3, 304), column stride 3
    if loss == "cross_entropy":
        other = torch.randint(0, v, (2, 3))
        other_rows = other.reshape(6)
    else:
        other = torch.randn(2, v, 3).transpose(1, 2)
        other_rows = other.reshape(6, v).contiguous()
    rows = x.reshape(6, v).contiguous()
    kind = config.KINDS[loss]
    with FakeTensorMode() as mode:
        fx, fo = mode.from_tensor(x), mode.from_tensor(other)
        form, cap = op._op_form(fx, fo, kind, "auto", None, True, 1.0)
        traced = torch.ops.normlab.entropy_fwd(fx, fo, kind, "auto", None, "mean", -100, True)
        fg = mode.from_tensor(torch.tensor(1.0))
        if form == "split":
            grad = torch.ops.normlab.entropy_split_bwd(fx, fo, traced[2], fg, traced[3], kind,
                                                       cap, "mean", -100)  # fmt: skip
            assert grad.shape == x.shape
    fwd_traced = list(launches)
    launches.clear()
    out = torch.ops.normlab.entropy_fwd(rows, other_rows, kind, form, cap, "mean", -100, True)
    if form == "split":
        torch.ops.normlab.entropy_split_bwd(rows, other_rows, out[2], torch.tensor(1.0),
                                            out[3], kind, cap, "mean", -100)  # fmt: skip
    assert fwd_traced == list(launches) and fwd_traced
    assert traced[1].shape == ((6, v) if form != "split" else (0,))  # the gradient as rows


# Inductor's mutation analysis of the loss kernels (helpers.mutation_analysis runs this body).
_LOSS_MUTATIONS = r"""
from normlab.losses import chunked, config, fused, op, split

for module in (fused, chunked, split):
    module.launch = record_launch
launch_fused = op.launch_fused
for kind, form, reduction, compute_grad, options, programs in CASES:
    op.launch_fused = lambda *a, **k: launch_fused(*a, **k, programs=programs)
    k = config.KINDS[kind]
    m, n = 6, 4133
    x = torch.randn(m, n, dtype=torch.bfloat16)
    other = torch.randint(0, n, (m,)) if kind == "cross_entropy" else torch.randn_like(x)
    mask = torch.ones(m, dtype=torch.bool) if options.get("has_mask") else None
    spec = config.Spec(k, form, 4096, reduction, -100, None, 0, n,
                       config.options(k, *config.Options(**options)))
    _, _, row_stats, n_valid = op._loss_forward(spec, x, other, mask, compute_grad)
    if form == "split" and compute_grad:
        op._split_grad(spec, x, other, mask, row_stats, torch.ones(()), n_valid)
    analyse([kind, form, reduction, compute_grad, options, programs], [x, other, mask])
"""


def test_inductor_finds_what_the_loss_kernels_write():
    """Inductor's mutation analysis of every launch of the three forms, with and without a
    gradient, a reduction, options and the fused form's row queue, succeeds and names no input
    as written; the fused label CE forward writes exactly its gradient, loss rows, reduced loss
    and ticket. It fails where a gradient's address derives from a helper's result whose
    arguments include the logits or labels (``online.check_label``)."""
    cases = [["cross_entropy", "fused", "mean", True, {}, None],
             ["cross_entropy", "fused", "none", False, {}, None],
             ["reverse_kl", "fused", "sum", True, {}, None],
             ["cross_entropy", "fused", "mean", True, {"softcap": 30.0, "z_loss": 1e-4,
                                                       "has_mask": True}, None],
             ["cross_entropy", "fused", "mean", True, {"label_smoothing": 0.1}, 2],
             ["cross_entropy", "chunked", "mean", True, {}, None],
             ["jsd", "chunked", "mean", True, {}, None],
             ["cross_entropy", "split", "mean", True, {"label_smoothing": 0.1, "has_mask": True},
              None],
             ["reverse_kl", "split", "none", True, {"temperature": 2.0}, None]]  # fmt: skip
    launches = mutation_analysis(_LOSS_MUTATIONS, cases)
    assert {json.dumps(rec["case"]) for rec in launches} == {json.dumps(c) for c in cases}
    assert [rec for rec in launches if rec["inputs_written"] or not rec["writes"]] == []
    first = [rec for rec in launches if rec["case"] == cases[0]]
    assert [(rec["kernel"], rec["writes"]) for rec in first] == [
        ("_entropy_fused_kernel", ["grad_ptr", "loss_ptr", "out_ptr", "ticket_ptr"])]
