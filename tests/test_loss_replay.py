"""Replayed loss calls (``normlab.losses.op._Signature``): a signature's later calls relaunch its
first call's kernels with their own pointers and fresh buffers, the backward's rescale too. Each
replayed call is checked on fresh data against the fp64 reference, and the calls that must not
replay are checked to take the full path and stay right."""

import pytest
import torch
from helpers import replays_on
from test_entropy import FNS, _check, _inputs, _ref, _run

import normlab
from normlab import ref
from normlab.losses import config, op


@pytest.fixture
def replays(monkeypatch):
    """Replay on, the signatures empty; the replayed calls, in order. Frames of 16 bytes: every
    CPU allocation starts on one, so a signature's calls share one key here
    (test_frame_alignment_is_part_of_the_signature keeps 128)."""
    monkeypatch.setattr(config, "ENTROPY_FRAME_BYTES", 16)
    monkeypatch.setattr(op, "_SIGNATURES", {})
    return replays_on(monkeypatch)


def _kw(loss):
    # labels unchecked: a check syncs with the host every call, so a checked call (the CPU's
    # default) is not replayed
    return {"check_labels": False} if loss == "cross_entropy" else {}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(("form", "cap"), [("fused", 64), ("fused", 4096), ("chunked", 64)])
@pytest.mark.parametrize("loss", list(FNS))
def test_replayed_calls_match_fp64(replays, loss, form, cap, reduction):
    """Calls 2 and 3 of a signature (3-D logits, a grad_output that is not 1) replay the forward
    and the backward's rescale, each on fresh data against fp64."""
    shape = (2, 3, 500)
    for i in range(3):
        x, other = _inputs(loss, shape, torch.float16)
        weight = torch.rand(shape[:-1]) + 0.5 if reduction == "none" else torch.tensor(2.5 + i)
        out, grad = _run(loss, x, other, weight=weight, form=form, block_cap=cap,
                         reduction=reduction, **_kw(loss))  # fmt: skip
        ref_out, ref_grad = _ref(loss, x, other, reduction=reduction, weight=weight)
        _check(loss, out, grad, ref_out, ref_grad, torch.float16, 500, f"call {i}")
    [sig] = op._SIGNATURES.values()
    assert sig.replayable and list(sig.rescales) == [1 if reduction == "none" else 0]
    assert len(replays) == 4  # the forward and the rescale, calls 2 and 3


@pytest.mark.parametrize("loss", list(FNS))
def test_replayed_calls_without_a_gradient(replays, loss):
    """Without a gradient a signature of its own replays the forward alone."""
    for i in range(3):
        x, other = _inputs(loss, (7, 300), torch.float32)
        with torch.no_grad():
            out = FNS[loss][0](x, other, form="fused", block_cap=64, **_kw(loss))
        want = FNS[loss][1](x.double(), other.double() if other.is_floating_point()
                            else other)  # fmt: skip
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6, msg=f"call {i}")
    [sig] = op._SIGNATURES.values()
    assert not sig.compute_grad and len(replays) == 2


def test_a_kept_graph_rescales_out_of_place(replays):
    """retain_graph=True: two backwards of one replayed call each give the full gradient (the
    saved one is scaled out of place)."""
    for _ in range(2):
        x, labels = _inputs("cross_entropy", (5, 200), torch.float32)
        xk = x.clone().requires_grad_()
        loss = normlab.cross_entropy(xk, labels, check_labels=False)
        (g1,) = torch.autograd.grad(loss * 2.0, (xk,), retain_graph=True)
        (g2,) = torch.autograd.grad(loss * 3.0, (xk,))
        ref_out, ref_grad = _ref("cross_entropy", x, labels)
        torch.testing.assert_close(loss.double(), ref_out, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g1.double(), 2.0 * ref_grad, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(g2.double(), 3.0 * ref_grad, rtol=1e-5, atol=1e-7)
    # call 2's forward and its second backward's rescale (recorded by call 1's); the backwards
    # that keep the graph scale out of place
    assert len(replays) == 2


@pytest.mark.parametrize("case", ["loss_mask", "split", "column_strided", "int32_wide_ignore",
                                  "check_labels"])  # fmt: skip
def test_calls_that_take_the_full_path(replays, case):
    """A loss mask (a tensor the kernels take by keyword), the split form, copied logits, labels
    widened on the host and checked labels are not replayed; they stay right."""
    for i in range(2):
        x, labels = _inputs("cross_entropy", (6, 96), torch.float32)
        kw = {"check_labels": False}
        if case == "loss_mask":
            kw["loss_mask"] = torch.tensor([True, False, True, True, False, True])
        elif case == "split":
            kw["form"] = "split"
        elif case == "column_strided":
            x = x.t().contiguous().t()
        elif case == "int32_wide_ignore":
            labels, kw["ignore_index"] = labels.clamp_min(0).int(), 2**40
        else:
            kw["check_labels"] = True
        xk = x.clone().requires_grad_()
        loss = normlab.cross_entropy(xk, labels, **kw)
        (grad,) = torch.autograd.grad(loss, (xk,))
        ref_kw = {k: v for k, v in kw.items() if k not in ("check_labels", "form")}
        xd = x.double().requires_grad_()
        want = ref.cross_entropy_ref(xd, labels, **ref_kw)
        (want_grad,) = torch.autograd.grad(want, (xd,))
        torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6, msg=f"{case} {i}")
        torch.testing.assert_close(grad.double(), want_grad, rtol=1e-5, atol=1e-7)
    assert not replays
    assert all(s is None or not s.replayable for s in op._SIGNATURES.values())


def test_replayed_call_refuses_a_second_derivative(replays):
    for _ in range(2):
        x, labels = _inputs("cross_entropy", (3, 64), torch.float32)
        xk = x.clone().requires_grad_()
        loss = normlab.cross_entropy(xk, labels, check_labels=False)
        with pytest.raises(RuntimeError, match="second derivative"):
            torch.autograd.grad(loss, (xk,), create_graph=True)


def test_a_bad_argument_after_a_good_signature_still_raises(replays):
    """The bad value is part of the key: checked, not replayed."""
    x, labels = _inputs("cross_entropy", (4, 64), torch.float32)
    for _ in range(2):
        normlab.cross_entropy(x, labels, check_labels=False)
    with pytest.raises(ValueError):
        normlab.cross_entropy(x, labels, check_labels=False, reduction="avg")
    with pytest.raises(TypeError):
        normlab.cross_entropy(x, labels.float(), check_labels=False)
    t = torch.randn(4, 64)
    for _ in range(2):
        normlab.reverse_kl(x, t)
    with pytest.raises(ValueError, match="reverse_kl: temperature"):
        normlab.reverse_kl(x, t, temperature=-1.0)
    with pytest.raises(ValueError, match="reverse_kl: temperature"):
        normlab.reverse_kl(x, t, temperature=[2.0])  # unhashable: not keyed, checked
    with pytest.raises(TypeError, match="reverse_kl: target_logits"):
        normlab.reverse_kl(x, t.tolist())
    with pytest.raises(ValueError):
        normlab.reverse_kl(x.requires_grad_(), t.requires_grad_())


def _at_offset(t, offset_bytes):
    """t's values in a fresh buffer, starting ``offset_bytes`` past a 128-byte boundary."""
    flat = torch.empty(t.numel() + 256, dtype=t.dtype)
    start = (-flat.data_ptr() % 128 + offset_bytes) // t.element_size()
    out = flat[start:start + t.numel()].view(t.shape)
    out.copy_(t)
    assert out.data_ptr() % 128 == offset_bytes
    return out


def test_frame_alignment_is_part_of_the_signature(replays, monkeypatch):
    """With 128-byte frames (config.frames reads each tensor's alignment to them), logits that
    start on a frame and 16 bytes past one are two signatures; each replays and matches fp64."""
    monkeypatch.setattr(config, "ENTROPY_FRAME_BYTES", 128)
    for i in range(4):
        x, t = _inputs("reverse_kl", (4, 512), torch.float32)
        xk = _at_offset(x, 16 * (i % 2)).requires_grad_()
        tk = _at_offset(t, 0)
        loss = normlab.reverse_kl(xk, tk, form="fused", block_cap=128)
        (grad,) = torch.autograd.grad(loss, (xk,))
        ref_out, ref_grad = _ref("reverse_kl", x, t)
        _check("reverse_kl", loss, grad, ref_out, ref_grad, torch.float32, 512, f"call {i}")
    assert len(op._SIGNATURES) == 2
    assert all(s.replayable for s in op._SIGNATURES.values())


def test_functorch_transforms_take_the_full_path(replays):
    """Under torch.func.grad a loss call is not keyed or replayed: it raises the full path's
    message naming the transform, not a pointer error."""
    x, t = torch.randn(4, 64).requires_grad_(), torch.randn(4, 64)
    for _ in range(2):
        normlab.reverse_kl(x, t)
    with pytest.raises(RuntimeError, match=r"reverse_kl: logits is inside a torch\.func transform"):
        torch.func.grad(lambda v: normlab.reverse_kl(v, t))(x.detach())


@pytest.mark.parametrize("loss", ["cross_entropy", "reverse_kl"])
def test_zero_width_rows_take_the_full_path(replays, loss):
    """N-D logits with V = 0 (a zero-width vocab shard's shape): no replay, torch's values."""
    for _ in range(2):
        x = torch.zeros(2, 3, 0, requires_grad=True)
        if loss == "cross_entropy":
            out = normlab.cross_entropy(x, torch.full((2, 3), -100), check_labels=False)
        else:
            out = normlab.reverse_kl(x, torch.zeros(2, 3, 0))
        want = torch.tensor(float("nan") if loss == "cross_entropy" else 0.0)
        torch.testing.assert_close(out.detach(), want, equal_nan=True)
    assert not replays


@pytest.mark.parametrize(("loss", "form", "reduction"), [
    ("cross_entropy", "chunked", "mean"), ("reverse_kl", "fused", "none"),
    ("soft_cross_entropy", "chunked", "sum"), ("cross_entropy", "split", "mean")])  # fmt: skip
def test_compiled_calls_replay_inside_the_op(replays, loss, form, reduction):
    """Under torch.compile on the interpreter the loss is the opaque op
    ``normlab::entropy_fwd_planned`` (as on a GPU for symbolic shapes and ragged vocabularies),
    whose body runs per call: a signature's calls 2 and 3 replay the first's launches (the split
    form, whose backward is an op of its own, takes the full path each time), each on fresh data
    against fp64."""
    torch._dynamo.reset()
    shape = (2, 3, 300)
    weight = torch.rand(shape[:-1]) + 0.5 if reduction == "none" else torch.tensor(1.5)

    def step(x, other):
        out = FNS[loss][0](x, other, form=form, block_cap=64, reduction=reduction, **_kw(loss))
        return (out * weight).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for i in range(3):
        x, other = _inputs(loss, shape, torch.float32)
        xc = x.clone().requires_grad_()
        value = compiled(xc, other)
        (grad,) = torch.autograd.grad(value, xc)
        ref_out, ref_grad = _ref(loss, x, other, reduction=reduction, weight=weight)
        torch.testing.assert_close(value.double(), (ref_out * weight.double()).sum(),
                                   rtol=1e-5, atol=1e-6, msg=f"call {i}")  # fmt: skip
        torch.testing.assert_close(grad.double(), ref_grad, rtol=1e-5, atol=1e-6, msg=f"call {i}")
    keys = [k for k in op._SIGNATURES if k[0] == "entropy_fwd"]
    assert len(keys) == 1
    if form == "split":
        assert op._SIGNATURES[keys[0]] is None and not replays
    else:
        assert op._SIGNATURES[keys[0]].replayable and len(replays) == 2
