"""Replayed calls (``normlab._launch.record``): the second call of a signature relaunches the
first call's kernels with its own pointers and fresh buffers. Every plan kind is checked on fresh
data against the fp64 reference after its replay, and the calls that must not replay do not."""

import pytest
import torch

import normlab
from normlab import _launch, ref
from normlab.norms import op
from tests.helpers import assert_close, norm_outputs, replays_on, small_split_rows


@pytest.fixture
def replays(monkeypatch):
    """Replay on, the caches empty; the replayed calls, in order."""
    for cache in ("_FWD_REPLAYS", "_BWD_REPLAYS", "_INFERENCE", "_GRAD"):
        monkeypatch.setattr(op, cache, {})
    return replays_on(monkeypatch)


def _ref(kind, x, w, b, r, eps, offset):
    h = x if r is None else x + r
    scale = None if w is None else offset + w
    if kind in ("rms", "add_rms"):
        y = ref.rms_norm(h, scale, eps)
    else:
        y = ref.layer_norm(h, scale, b, eps)
    return (y,) if r is None else (y, h)


def _call_and_check(kind, m, n, dtype, eps=1e-5, offset=0.0, strategy=None):
    """One forward+backward on fresh data against fp64 (the residual sum is taken in the input
    dtype, as the kernel stores h)."""
    has_res = kind.startswith("add")
    x = torch.randn(m, n).to(dtype).requires_grad_()
    r = torch.randn(m, n).to(dtype).requires_grad_() if has_res else None
    w = (0.5 + torch.rand(n)).to(dtype).requires_grad_()
    b = (0.3 * torch.randn(n)).to(dtype).requires_grad_() if kind.endswith("ln") else None
    outs = norm_outputs(kind, x, w, b, r, eps=eps, offset=offset)
    leaves = [t for t in (x, r, w, b) if t is not None]
    grads_out = [torch.randn_like(o) for o in outs]
    grads = torch.autograd.grad(outs, leaves, grads_out)

    xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    rd = r.detach().double().requires_grad_() if has_res else None
    bd = b.detach().double().requires_grad_() if b is not None else None
    if has_res:  # h is stored in x's dtype: the reference normalizes that rounded sum
        h = (x.detach() + r.detach()).double()
        outs_ref = _ref(kind, h, wd, bd, None, eps, offset)
        outs_ref = (outs_ref[0], h)
    else:
        outs_ref = _ref(kind, xd, wd, bd, None, eps, offset)
    for o, o_ref in zip(outs, outs_ref, strict=True):
        assert_close(o, o_ref, msg=f"{kind} output")
    leaves_ref = [t for t in (xd, rd, wd, bd) if t is not None]
    if has_res:  # gradients flow through h = x + r: the same dh for both
        hd = (xd + rd)
        y_ref = _ref(kind, hd, wd, bd, None, eps, offset)[0]
        grads_ref = torch.autograd.grad((y_ref, hd), leaves_ref,
                                        [g.double() for g in grads_out])  # fmt: skip
    else:
        grads_ref = torch.autograd.grad(outs_ref, leaves_ref, [g.double() for g in grads_out])
    for g, g_ref, leaf in zip(grads, grads_ref, leaves, strict=True):
        reduce_len = m if leaf.dim() == 1 else n
        assert_close(g, g_ref, reduce_len=reduce_len, dtype=dtype, msg=f"{kind} grad")


def _grad_recordings():
    """The recorded forwards and backwards of the calls that needed a gradient."""
    return [r for sig in op._GRAD.values() for r in (sig.forward, *sig.backwards.values())]


# (kind, M, N, what it exercises)
PLANS = [
    ("rms", 37, 1000, "row"),
    ("ln", 37, 1000, "row"),
    ("rms", 300, 48, "block_row"),
    ("ln", 300, 48, "block_row"),
    ("ln", 9, 5, "tiny"),
    ("rms", 3, 50, "split"),
    ("ln", 3, 50, "split"),
    ("rms", 5, 100, "one_program"),
    ("add_rms", 7, 130, "row"),
    ("add_ln", 300, 48, "block_row"),
]


@pytest.mark.parametrize(("kind", "m", "n", "plan"), PLANS,
                         ids=[f"{k}-{m}x{n}-{p}" for k, m, n, p in PLANS])  # fmt: skip
def test_replays_match_fp64(replays, monkeypatch, kind, m, n, plan):
    if plan == "split":
        small_split_rows(monkeypatch)
    _call_and_check(kind, m, n, torch.float16, offset=0.5 if kind == "rms" else 0.0)
    recorded = _grad_recordings()
    assert len(recorded) == 2 and all(isinstance(r, _launch.Replay) for r in recorded)
    assert not replays
    for _ in range(2):  # fresh data each time: stale pointers or buffers would show
        _call_and_check(kind, m, n, torch.float16, offset=0.5 if kind == "rms" else 0.0)
    assert len(replays) == 4  # forward and backward, twice


def test_replayed_outputs_are_fresh_buffers(replays):
    x = torch.randn(6, 40)
    y1 = normlab.rms_norm(x, None)
    y2 = normlab.rms_norm(x * 2, None)
    assert replays and y1.data_ptr() != y2.data_ptr()
    assert_close(y1, ref.rms_norm(x.double(), None, 1e-6), msg="first output kept")


@pytest.mark.parametrize("change", ["eps", "offset", "dtype", "alignment", "stride", "rows"])
def test_a_changed_signature_records_anew(replays, change):
    """Whatever the launches depend on is in the key: a changed one is recorded, not replayed,
    and still matches fp64."""
    base = torch.randn(9, 33)
    w = torch.rand(33) + 0.5
    normlab.rms_norm(base[:8, :32], w[:32], 1e-5)
    x, ww, eps, offset = base[:8, :32], w[:32], 1e-5, 0.0
    if change == "eps":
        eps = 0.5
    elif change == "offset":
        offset = 1.0
    elif change == "dtype":
        x, ww = x.half(), ww.half()
    elif change == "alignment":
        x = base.flatten()[1:257].view(8, 32)
    elif change == "stride":
        x = base[:8, 1:]  # row stride 33, not 32
    else:
        x = base[:7, :32]
    y = normlab.rms_norm(x, ww, eps, offset=offset)
    assert not replays and len(op._INFERENCE) == 2  # inference calls: their own signatures
    assert_close(y, ref.rms_norm(x.double(), offset + ww.double(), eps), msg=change)


def test_atomic_and_empty_calls_are_not_replayed(replays):
    """The atomic backward zeroes and copies fp32 accumulators on the host: not replayable, so
    every call runs the launcher (and stays right)."""
    for _ in range(2):
        x = torch.randn(10, 64, requires_grad=True)
        w = torch.rand(64, requires_grad=True)
        y = normlab.rms_norm(x, w, strategy="atomic")
        dx, dw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
        y_ref = ref.rms_norm(xd, wd, 1e-6)
        dx_ref, dw_ref = torch.autograd.grad(y_ref, (xd, wd), torch.ones_like(y_ref))
        assert_close(dw, dw_ref, reduce_len=10, dtype=torch.float32, msg="dw")
        assert_close(dx, dx_ref, reduce_len=64, dtype=torch.float32, msg="dx")
    [sig] = op._GRAD.values()
    assert list(sig.backwards.values()) == [None]
    assert len(replays) == 1  # the forward replays; the backward runs its launcher
    empty = normlab.rms_norm(torch.randn(0, 8), torch.ones(8))
    assert empty.shape == (0, 8)


def test_strided_parameters_are_read_by_column():
    """A weight or bias that is a strided view (every other element) normalizes like its
    contiguous copy, and its gradient reaches the strided original."""
    x = torch.randn(5, 24, requires_grad=True)
    w_base = torch.randn(48, requires_grad=True)
    b_base = torch.randn(48, requires_grad=True)
    y = normlab.layer_norm(x, w_base[::2], b_base[1::2])
    y_ref = torch.nn.functional.layer_norm(x.double(), (24,), w_base[::2].double(),
                                           b_base[1::2].double())  # fmt: skip
    assert_close(y, y_ref, msg="y")
    (dw_base,) = torch.autograd.grad(y.sum(), (w_base,))
    (dw_ref,) = torch.autograd.grad(y_ref.sum(), (w_base,))
    assert_close(dw_base, dw_ref, reduce_len=5, dtype=torch.float32, msg="dweight")
    assert (dw_base[1::2] == 0).all()


# ---- inference calls: checked once per signature, then replayed --------------------------------


@pytest.mark.parametrize("kind", ["rms", "ln", "add_rms", "add_ln"])
@pytest.mark.parametrize(("shape", "affine"), [
    ((37, 1000), True), ((2, 3, 97), True), ((1, 257), False), ((300, 48), True), ((9, 5), True),
])  # fmt: skip
def test_inference_calls_replay_their_checked_signature(replays, kind, shape, affine):
    """Without a gradient the second and third calls of a signature replay the first (checked,
    planned and recorded), each on fresh data against fp64, in the input's own shape; the fused
    add's h = x + residual too, stored in x's dtype."""
    n = shape[-1]
    w = (0.5 + torch.rand(n)).half() if affine else None
    b = (0.3 * torch.randn(n)).half() if affine and kind.endswith("ln") else None
    for i in range(3):
        x = (torch.randn(shape) * (i + 1) + i).half()
        r = torch.randn(shape).half() if kind.startswith("add") else None
        outs = norm_outputs(kind, x, w, b, r, eps=1e-5)
        h = x if r is None else x + r  # the sum the kernel stores, in fp16
        want = _ref(kind.removeprefix("add_"), h.double(), None if w is None else w.double(),
                    None if b is None else b.double(), None, 1e-5, 0.0)[0]  # fmt: skip
        assert all(o.shape == x.shape for o in outs)
        assert_close(outs[0], want, msg=f"call {i}")
        if r is not None:
            assert torch.equal(outs[1], h), f"call {i}: h"
    assert len(replays) == 2 and len(op._INFERENCE) == 1
    assert not op._GRAD  # the autograd path's cache is untouched


@pytest.mark.parametrize("case", ["strided_weight", "column_strided_x", "grad", "no_grad_ctx"])
def test_inference_calls_that_take_the_full_path(replays, case):
    """A parameter copied to unit stride, rows copied from a column-strided x, or a call that
    needs a gradient do not replay from the inference cache; all stay right."""
    x = torch.randn(6, 40)
    w = torch.rand(80) + 0.5
    ww = w[:40]
    if case == "strided_weight":
        ww = w[::2]
    elif case == "column_strided_x":
        x = torch.randn(40, 6).t()
    elif case == "grad":
        x.requires_grad_()
    for _ in range(2):
        if case == "no_grad_ctx":  # a leaf that wants a gradient, under no_grad: inference
            with torch.no_grad():
                y = normlab.rms_norm(x.requires_grad_(), ww)
        else:
            y = normlab.rms_norm(x, ww)
        assert_close(y, ref.rms_norm(x.detach().double(), ww.double(), 1e-6), msg=case)
    replayable = case == "no_grad_ctx"
    if case != "grad":  # (the autograd path replays from its own cache)
        assert bool(replays) == replayable
    assert list(op._INFERENCE.values()) == ([] if case == "grad"
                                            else [replays[0]] if replayable else [None])


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
@pytest.mark.parametrize("bad", ["eps", "bool_eps", "list_eps", "weight_shape", "weight_dtype",
                                 "weight_list", "residual_list", "offset", "residual_shape",
                                 "residual_dtype"])  # fmt: skip
def test_signature_seen_before_still_checks_its_arguments(replays, bad, grad):
    """A good call caches its signature; the same shapes with a bad argument raise the checks'
    own error, as they would first time (the bad value is part of the key, or cannot be keyed,
    so it is checked, not replayed)."""
    x, w = torch.randn(4, 16).requires_grad_(grad), torch.rand(16)
    normlab.rms_norm(x, w, 1)
    normlab.rms_norm(x, w, 1)
    normlab.add_rms_norm(x, x.detach().clone(), w, 1)
    normlab.add_rms_norm(x, x.detach().clone(), w, 1)
    with pytest.raises((TypeError, ValueError), match="rms_norm: "):
        if bad == "eps":
            normlab.rms_norm(x, w, -1.0)
        elif bad == "list_eps":
            normlab.rms_norm(x, w, [1e-6])
        elif bad == "weight_list":
            normlab.rms_norm(x, [1.0] * 16)
        elif bad == "residual_list":
            normlab.add_rms_norm(x, [[1.0] * 16] * 4, w)
        elif bad == "bool_eps":
            normlab.rms_norm(x, w, True)  # == 1, but a bool
        elif bad == "weight_shape":
            normlab.rms_norm(x, torch.rand(17))
        elif bad == "weight_dtype":
            normlab.rms_norm(x, w.double())
        elif bad == "residual_shape":
            normlab.add_rms_norm(x, torch.randn(4, 17), w, 1)
        elif bad == "residual_dtype":
            normlab.add_rms_norm(x, x.half(), w, 1)
        else:
            normlab.rms_norm(x, None, 1, offset=1.0)


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
def test_replays_of_row_strided_rows_write_contiguous_outputs(replays, grad):
    """Rows that are a view of a wider buffer (row stride 40 for 33 columns): replayed outputs
    laid out like x are allocated contiguous, not with x's strides, and stay right."""
    w = torch.rand(33) + 0.5
    for i in range(3):
        base = torch.randn(6, 40) * (i + 1)
        x = base[:, 2:35].requires_grad_(grad)
        y = normlab.rms_norm(x, w, 1e-5)
        assert y.is_contiguous() and y.shape == (6, 33)
        assert_close(y, ref.rms_norm(x.detach().double(), w.double(), 1e-5), msg=f"call {i}")
        if grad:
            gy = torch.randn(6, 33)
            (dx,) = torch.autograd.grad(y, (x,), gy)
            xd = x.detach().double().requires_grad_()
            (dx_ref,) = torch.autograd.grad(ref.rms_norm(xd, w.double(), 1e-5), (xd,),
                                            gy.double())  # fmt: skip
            assert_close(dx, dx_ref, reduce_len=33, dtype=torch.float32, msg=f"dx {i}")
    assert len(replays) == (4 if grad else 2)


# ---- calls that need a gradient: the signature's entry carries the forward and backward ------


def _grad_call(kind, x, r, w, b, out_grads=None):
    """Outputs and gradients of one call; ``out_grads`` per output (None: that output unused)."""
    outs = norm_outputs(kind, x, w, b, r, eps=1e-5)
    leaves = [t for t in (x, r, w, b) if t is not None]
    if out_grads is None:
        out_grads = [torch.randn_like(o) for o in outs]
    used = [(o, g) for o, g in zip(outs, out_grads, strict=True) if g is not None]
    grads = torch.autograd.grad([o for o, _ in used], leaves, [g for _, g in used],
                                allow_unused=True)  # fmt: skip
    return outs, leaves, grads


def _grad_reference(kind, x, r, w, b, out_grads):
    """fp64 outputs and gradients (h = x + r rounded to x's dtype, as the kernel stores it)."""
    leaves = [t.detach().double().requires_grad_() for t in (x, r, w, b) if t is not None]
    xd, rest = leaves[0], leaves[1:]
    rd = rest.pop(0) if r is not None else None
    wd, bd = rest[0], rest[1] if b is not None else None
    if rd is None:
        y = _ref(kind, xd, wd, bd, None, 1e-5, 0.0)[0]
        outs_ref = (y,)
    else:  # y of the rounded sum; h's gradient path through the unrounded one
        rounded = (x.detach() + r.detach()).double()
        hd = xd + rd
        y = _ref(kind.removeprefix("add_"), hd + (rounded - hd).detach(), wd, bd, None, 1e-5,
                 0.0)[0]  # fmt: skip
        outs_ref = (y, hd)
    used = [(o, g) for o, g in zip(outs_ref, out_grads, strict=True) if g is not None]
    grads = torch.autograd.grad([o for o, _ in used], leaves, [g.double() for _, g in used],
                                allow_unused=True)  # fmt: skip
    return outs_ref, grads


def _check_grads(kind, x, r, w, b, outs, grads, out_grads, msg):
    outs_ref, grads_ref = _grad_reference(kind, x, r, w, b, out_grads)
    for o, o_ref, g in zip(outs, outs_ref, out_grads, strict=True):
        assert o.shape == x.shape, msg
        if g is not None or o is outs[0]:
            assert_close(o, o_ref, msg=f"{msg}: output")
    leaves = [t for t in (x, r, w, b) if t is not None]
    for g, g_ref, leaf in zip(grads, grads_ref, leaves, strict=True):
        reduce_len = x.numel() // x.shape[-1] if leaf.dim() == 1 else x.shape[-1]
        if g_ref is None:
            assert g is None or not g.any(), msg
        else:
            assert_close(g, g_ref, reduce_len=reduce_len, dtype=torch.float32,
                         msg=f"{msg}: grad")  # fmt: skip


@pytest.mark.parametrize("kind", ["rms", "ln", "add_rms", "add_ln"])
@pytest.mark.parametrize("shape", [(2, 3, 97), (5, 48), (1, 257), (3, 1, 5)])
def test_grad_calls_replay_forward_and_backward_in_the_inputs_shape(replays, kind, shape):
    """A signature's second and third calls that need a gradient (N-D inputs) replay its forward
    and its backward, on fresh data each time, against fp64; outputs and dx keep x's shape."""
    n = shape[-1]
    w = (0.5 + torch.rand(n)).requires_grad_()
    b = (0.3 * torch.randn(n)).requires_grad_() if kind.endswith("ln") else None
    for i in range(3):
        x = (torch.randn(shape) * (i + 1) + i).requires_grad_()
        r = torch.randn(shape).requires_grad_() if kind.startswith("add") else None
        out_grads = [torch.randn(shape) for _ in range(1 if r is None else 2)]
        outs, _, grads = _grad_call(kind, x, r, w, b, out_grads)
        assert grads[0].shape == x.shape
        _check_grads(kind, x, r, w, b, outs, grads, out_grads, f"call {i}")
    recorded = _grad_recordings()
    assert len(recorded) == 2 and all(isinstance(r, _launch.Replay) for r in recorded)
    assert len(replays) == 4  # forward and backward, calls 2 and 3
    assert not op._FWD_REPLAYS and not op._BWD_REPLAYS


@pytest.mark.parametrize("used", ["y", "h"])
def test_grad_calls_with_one_output_unused(replays, used):
    """The fused add's y or h alone carries a gradient: autograd hands None for the other, and
    the replayed signature still returns the right gradients (dx = dh when y is unused)."""
    n = 40
    w = (0.5 + torch.rand(n)).requires_grad_()
    for i in range(3):
        x, r = torch.randn(6, n).requires_grad_(), torch.randn(6, n).requires_grad_()
        out_grads = [torch.randn(6, n), None] if used == "y" else [None, torch.randn(6, n)]
        outs, _, grads = _grad_call("add_rms", x, r, w, None, out_grads)
        _check_grads("add_rms", x, r, w, None, outs, grads, out_grads, f"{used} call {i}")


@pytest.mark.parametrize("layout", ["expanded", "column_strided", "row_strided"])
def test_grad_calls_take_each_output_gradient_layout(replays, layout):
    """Output gradients in another layout than y's: a broadcast one (``y.sum()``), a transposed
    one (its rows copied every call, not replayed) and rows of a wider buffer (recorded as their
    own layout). A contiguous gradient after them still replays its own recording."""
    n = 24
    w = (0.5 + torch.rand(n)).requires_grad_()
    for i in range(3):
        x = torch.randn(5, n).requires_grad_()
        if layout == "expanded":
            gy = torch.full((1, 1), 0.5 + i).expand(5, n)
        elif layout == "column_strided":
            gy = torch.randn(n, 5).t()
        else:
            gy = torch.randn(5, n + 8)[:, 3:n + 3]
        outs, _, grads = _grad_call("rms", x, None, w, None, [gy])
        _check_grads("rms", x, None, w, None, outs, grads, [gy], f"{layout} call {i}")
        gy = torch.randn(5, n)
        outs, _, grads = _grad_call("rms", x, None, w, None, [gy])
        _check_grads("rms", x, None, w, None, outs, grads, [gy], f"contiguous call {i}")
    [sig] = op._GRAD.values()
    kinds = sorted(type(r).__name__ for r in sig.backwards.values())
    assert kinds == (["NoneType", "Replay"] if layout != "row_strided" else ["Replay", "Replay"])


@pytest.mark.parametrize("case", ["strided_weight", "column_strided_x"])
def test_grad_calls_that_take_the_full_path(replays, case):
    """A weight copied to unit stride or rows copied from a column-strided x: the signature is
    not replayed (None), and the full path's gradients reach the caller's tensors."""
    w_base = (0.5 + torch.rand(80)).requires_grad_()
    w = w_base[::2] if case == "strided_weight" else w_base[:40]
    for i in range(2):
        x = (torch.randn(40, 6).t() if case == "column_strided_x"
             else torch.randn(6, 40)).requires_grad_()  # fmt: skip
        gy = torch.randn(6, 40)
        y = normlab.rms_norm(x, w, 1e-5)
        dx, dw_base = torch.autograd.grad(y, (x, w_base), gy)
        xd, wd = x.detach().double().requires_grad_(), w_base.detach().double().requires_grad_()
        wv = wd[::2] if case == "strided_weight" else wd[:40]
        dx_ref, dw_ref = torch.autograd.grad(ref.rms_norm(xd, wv, 1e-5), (xd, wd), gy.double())
        assert_close(dx, dx_ref, reduce_len=40, dtype=torch.float32, msg=f"{case} dx {i}")
        assert_close(dw_base, dw_ref, reduce_len=6, dtype=torch.float32, msg=f"{case} dw {i}")
    assert list(op._GRAD.values()) == [None]


def test_grad_signature_refuses_a_second_derivative(replays):
    """create_graph=True through a replayed signature raises, as the full path does."""
    w = torch.rand(16).requires_grad_()
    for _ in range(2):
        x = torch.randn(3, 16).requires_grad_()
        y = normlab.rms_norm(x, w)
        with pytest.raises(RuntimeError, match="second derivative"):
            torch.autograd.grad(y.sum(), (x,), create_graph=True)
    assert len(op._GRAD) == 1


@pytest.mark.parametrize("grad", [False, True], ids=["inference", "autograd"])
def test_functorch_transforms_take_the_full_path(replays, grad):
    """Under a functorch transform (torch.func.grad) a call is not keyed or replayed (its
    tensors are the transform's wrappers, with no pointer of their own): it raises what the full
    path raises, the public message naming the transform, not a pointer error."""
    x, w = torch.randn(4, 16).requires_grad_(grad), torch.rand(16)
    normlab.rms_norm(x, w)
    normlab.rms_norm(x, w)  # a replayed signature of the same layout
    with pytest.raises(RuntimeError, match=r"rms_norm: x is inside a torch\.func transform"):
        torch.func.grad(lambda t: normlab.rms_norm(t, w).sum())(x.detach())
