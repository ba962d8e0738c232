"""Reverse KL, soft / label cross-entropy: both forms and several block caps against fp64 refs.

Tiny caps (16, 64) are public powers of two: they push a small V through the multi-tile paths
(unmasked full-tile loop, masked last tile, reverse-order gradient pass) cheaply under the
interpreter. Gradients are checked against the fp64 autograd of ``normlab.ref``.
"""

import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_close, latin, tolerance

import normlab
from normlab import nn, ref
from normlab.losses import chunked, config, online

FNS = {
    "reverse_kl": (normlab.reverse_kl, ref.reverse_kl_ref),
    "soft_cross_entropy": (normlab.soft_cross_entropy, ref.soft_cross_entropy_ref),
    "cross_entropy": (normlab.cross_entropy, ref.cross_entropy_ref),
}
LOSSES = tuple(FNS)
# (form, block_cap): the fused kernel at a multi-tile and a single-tile cap, chunked with
# multi-tile chunks (16) and one chunk (4096), split at both.
FORMS = [("fused", 16), ("fused", 4096), ("chunked", 16), ("chunked", 4096), ("split", 64),
         ("split", None)]  # fmt: skip
ALL_FORMS = ["fused", "chunked", "split"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _inputs(loss, shape, dtype, scale=3.0, device="cpu"):
    x = (torch.randn(shape, device=device) * scale).to(dtype)
    if loss == "cross_entropy":
        other = torch.randint(0, shape[-1], shape[:-1], device=device)
        if other.numel() > 2:
            other.view(-1)[1] = -100  # one ignored row
    else:
        other = (torch.randn(shape, device=device) * scale).to(dtype)
    return x, other


def _ref(loss, x, other, reduction="mean", weight=None):
    """fp64 reference loss and gradient of (loss * weight).sum() wrt x."""
    xr = x.detach().double().requires_grad_()
    o = other.double() if other.is_floating_point() else other
    out = FNS[loss][1](xr, o, reduction=reduction)
    (out * (1.0 if weight is None else weight.double())).sum().backward()
    return out.detach(), xr.grad


def _run(loss, x, other, weight=None, **kw):
    xk = x.detach().clone().requires_grad_()
    out = FNS[loss][0](xk, other, **kw)
    (out * (1.0 if weight is None else weight)).sum().backward()
    return out.detach(), xk.grad


def _grad_rel(dtype):
    """A gradient's error bound as a fraction of its row's scale: the rounding of a value to
    ``dtype`` (one ulp, 2**-7 of it in bf16, 2**-10 in fp16: the Triton interpreter's stores
    truncate, a GPU's round to nearest) plus fp32 arithmetic."""
    return 1e-5 if dtype == torch.float32 else tolerance(dtype)[0] / 2


def _assert_rows_close(actual, expected, row_scale, rel, msg="", floor=0.0):
    """|actual - expected| <= rel * row_scale (+ floor) everywhere: each row's error measured
    against that row's scale (its largest entry), so no entry hides under an absolute floor."""
    assert actual.shape == expected.shape, f"{msg} shapes {actual.shape} vs {expected.shape}"
    err = (actual.double() - expected.double()).abs()
    bound = rel * row_scale.double() + floor + 1e-30  # 1e-30: fp32 underflow (fp64 keeps 1e-181)
    excess = torch.where(err <= bound, 0.0, err / bound.clamp_min(1e-300))
    if bool((excess > 0).any()) or bool(excess.isnan().any()):
        worst = int(excess.nan_to_num(math.inf).flatten().argmax())
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), err.shape))
        raise AssertionError(
            f"{msg}: {int((excess > 0).sum())}/{err.numel()} entries over {rel:.3g} x their "
            f"row's scale; worst at {idx}: {actual[idx].item():.6g} vs {expected[idx].item():.6g}"
            f" (row scale {row_scale.expand_as(err)[idx].item():.3g})"
        )


def _row_scale(g):
    return g.double().abs().amax(-1, keepdim=True)


def _check(loss, out, grad, ref_out, ref_grad, dtype, n_cols, msg="", grad_atol=0.0):
    # Loss: fp32 math over n_cols terms. Gradient: rounded to the logits dtype, each row's error
    # against its largest entry (_grad_rel); grad_atol: a caller's absolute floor.
    assert out.dtype == torch.float32
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=n_cols, msg=f"{msg} loss")
    assert grad.dtype == dtype
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(dtype), f"{msg} grad",
                       floor=grad_atol)  # fmt: skip


def _check_accumulated(buf, before, ref_grad, msg=""):
    """buf = before + the gradient, added in fp32 and rounded once to buf's dtype: each row's
    error against the row's largest |before + gradient| (the callers draw ``before`` at the
    gradient's own scale, so the gradient is not lost under the rounding of a larger value)."""
    expect = before.double() + ref_grad
    _assert_rows_close(buf, expect, _row_scale(expect), _grad_rel(buf.dtype), msg)


def _before_at_grad_scale(ref_grad, dtype):
    """A buffer to accumulate into: random values at a quarter of each row's gradient scale."""
    noise = torch.randn(ref_grad.shape, dtype=torch.float64)
    return (noise * 0.25 * _row_scale(ref_grad)).to(dtype)


@pytest.mark.parametrize("loss,form,cap,dtype", latin(LOSSES, FORMS, DTYPES))
def test_matches_reference(loss, form, cap, dtype):
    # (1, 3, 500): leading dims flattened; 500 = 31 tiles of 16 + a ragged 4-wide tail.
    x, other = _inputs(loss, (1, 3, 500), dtype)
    out, grad = _run(loss, x, other, form=form, block_cap=cap)
    ref_out, ref_grad = _ref(loss, x, other)
    _check(loss, out, grad, ref_out, ref_grad, dtype, 500, f"{loss} {form} {cap}")


# The entropy kernels' leading pointer parameters, in order.
ENTROPY_KERNELS = {
    "_entropy_fused_kernel": ("x", "t", "labels", "grad", "loss", "n_valid", "out", "ticket"),
    "_entropy_chunked_kernel": ("x", "t", "labels", "grad", "loss", "n_valid", "out", "ticket",
                                "stats", "sync"),
    "_entropy_stats_kernel": ("x", "t", "labels", "partial", "row_stats"),
    "_entropy_backward_kernel": ("x", "t", "labels", "row_stats", "grad_out", "n_valid", "grad"),
}


@pytest.mark.parametrize("loss,form,reduction,with_grad",
                         latin(LOSSES, ALL_FORMS, ["mean", "sum", "none"], [True, False],
                               keep=2))  # fmt: skip
def test_loss_kernels_launch_only_the_tensors_they_read(monkeypatch, loss, form, reduction,
                                                         with_grad):  # fmt: skip
    """Unread tensors launch as None (constexprs), never as placeholder pointers: label CE's
    target logits, the other losses' labels, a gradient nobody asked for, a count no mean
    divides by, a reduction's output and ticket without a reduction. The tensors launched are
    distinct, and the loss and gradient are the fp64 reference's."""
    from normlab.losses import fused, split

    launched = []
    for module in (fused, chunked, split):
        def spy(fn, grid, *args, _real=module.launch, **kwargs):
            if fn.__name__ in ENTROPY_KERNELS:
                launched.append((fn.__name__, kwargs, args))
            return _real(fn, grid, *args, **kwargs)

        monkeypatch.setattr(module, "launch", spy)
    x, other = _inputs(loss, (5, 37), torch.float32)  # 37: a ragged tail after 2 tiles of 16
    if with_grad:
        out, grad = _run(loss, x, other, form=form, block_cap=16, reduction=reduction)
    else:
        out = FNS[loss][0](x, other, form=form, block_cap=16, reduction=reduction)
    ref_out, ref_grad = _ref(loss, x, other, reduction=reduction)
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=37, msg="loss")
    if with_grad:
        _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(torch.float32), "grad")
    assert launched
    is_ce = loss == "cross_entropy"
    for name, kwargs, args in launched:
        names = ENTROPY_KERNELS[name]
        roles = dict(zip(names, args[:len(names)], strict=True))
        assert (roles["t"] is None) == is_ce and (roles["labels"] is None) != is_ce, name
        if "grad" in roles and name != "_entropy_backward_kernel":
            assert (roles["grad"] is None) == (not kwargs["COMPUTE_GRAD"]), name
            assert kwargs["COMPUTE_GRAD"] == (with_grad and form != "split"), name
        if "n_valid" in roles:  # read by a mean over counted rows (label CE's), unless counted
            read = kwargs["MEAN_OVER_VALID"] and not kwargs.get("COUNT", False)
            assert (roles["n_valid"] is None) == (not read), name
            assert kwargs["MEAN_OVER_VALID"] == (is_ce and reduction == "mean"), name
        if "out" in roles:
            assert (roles["out"] is None) == (reduction == "none"), name
            if name == "_entropy_chunked_kernel":
                assert (roles["ticket"] is None) == (reduction == "none"), name
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        assert len({t.data_ptr() for t in tensors}) == len(tensors), f"{name}: an alias"


@pytest.mark.parametrize("loss", LOSSES)
def test_grad_checks_fail_a_gradient_a_few_percent_off(loss):
    # The bf16 gradient comparisons pass the reference rounded to bf16 and fail it scaled by
    # 1.03 (a term a few % off), in _check and in the accumulated-buffer check alike.
    bf16 = torch.bfloat16
    x, other = _inputs(loss, (1, 3, 500), bf16)
    ref_out, ref_grad = _ref(loss, x, other)
    out = ref_out.float()
    _check(loss, out, ref_grad.to(bf16), ref_out, ref_grad, bf16, 500)
    with pytest.raises(AssertionError, match="row's scale"):
        _check(loss, out, (ref_grad * 1.03).to(bf16), ref_out, ref_grad, bf16, 500)
    before = _before_at_grad_scale(ref_grad, bf16)
    _check_accumulated((before.double() + ref_grad).to(bf16), before, ref_grad)
    with pytest.raises(AssertionError, match="row's scale"):
        _check_accumulated((before.double() + ref_grad * 1.03).to(bf16), before, ref_grad)


@pytest.mark.slow  # real vocabularies; the small caps above take the same multi-tile paths
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize(
    "form,cap",
    [("fused", c) for c in (4096, 8192, 16384, 32768)] + [("chunked", 4096), ("split", None)],
)
def test_gpt2_vocab_every_cap(loss, form, cap):
    # V = 50257 is a multiple of no cap: 13/7/4/2 tiles with a ragged last one.
    x, other = _inputs(loss, (3, 50257), torch.bfloat16)
    out, grad = _run(loss, x, other, form=form, block_cap=cap)
    ref_out, ref_grad = _ref(loss, x, other)
    _check(loss, out, grad, ref_out, ref_grad, torch.bfloat16, 50257, f"{loss} {form} {cap}")


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["reverse_kl", "cross_entropy"])
@pytest.mark.parametrize("form", ALL_FORMS)
def test_qwen_vocab_one_row(loss, form):
    x, other = _inputs(loss, (1, 151936), torch.bfloat16)
    out, grad = _run(loss, x, other, form=form)
    ref_out, ref_grad = _ref(loss, x, other)
    _check(loss, out, grad, ref_out, ref_grad, torch.bfloat16, 151936, f"{loss} {form}")


@pytest.mark.parametrize("form,loss",  # make test-quick: each form once, the losses rotating
                         latin(ALL_FORMS, ["reverse_kl", "soft_cross_entropy"], keep=2, quick=1))
def test_paired_tile_maxima(form, loss, monkeypatch):
    # The GPU's tile maxima, one two-operand tl.reduce (online.PAIRED_MAXIMA), against fp64 and
    # bit for bit against the interpreter's two plain tl.max: ragged 64-wide tiles, a -inf tile
    # (row 1), NaN in the logits (row 2) and +inf in the target (row 3). Label CE takes one max.
    # The same tensors both times: the frames, hence the sums' order, follow the addresses.
    x, other = _inputs(loss, (4, 150), torch.float32)
    x[1, 64:128] = other[1, 64:128] = float("-inf")
    x[2, 70] = float("nan")
    other[3, 149] = float("inf")
    runs = {}
    for paired in (True, False):
        monkeypatch.setattr(online, "PAIRED_MAXIMA", tl.constexpr(paired))
        grad = torch.zeros_like(x)
        FNS[loss][0](x, other, form=form, block_cap=64, reduction="sum", grad_accumulate=grad)
        runs[paired] = FNS[loss][0](x, other, form=form, block_cap=64, reduction="none"), grad
    for got, plain in zip(runs[True], runs[False], strict=True):
        assert torch.equal(got.isnan(), plain.isnan())
        assert torch.equal(got.nan_to_num(), plain.nan_to_num())
    out, grad = runs[True]
    assert torch.isnan(out[2:]).all() and torch.isnan(grad[2:]).all()
    ref_out, ref_grad = _ref(loss, x[:2], other[:2], reduction="none")
    assert_close(out[:2], ref_out, dtype=torch.float32, reduce_len=150, msg=f"{loss} {form}")
    _assert_rows_close(grad[:2], ref_grad, _row_scale(ref_grad), _grad_rel(torch.float32),
                       f"{loss} {form} paired grad")  # fmt: skip


@pytest.mark.parametrize("loss,n_cols,form", latin(LOSSES, [1, 63, 64, 65, 128, 129], ALL_FORMS))
def test_tile_boundaries(loss, n_cols, form):
    # cap 64: V below, at, one past, and at two tiles (the last tile full), and one past that.
    x, other = _inputs(loss, (4, n_cols), torch.float32)
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, n_cols, f"V={n_cols}")


@pytest.mark.parametrize("loss,form,tiles,dtype,frame_bytes,cap", latin(
    LOSSES, [("fused", None), ("chunked", 2), ("chunked", 1), ("split", None)],
    [(torch.float32, 16, 16), (torch.bfloat16, 16, 16), (torch.bfloat16, 64, 32),
     (torch.float32, 64, 32)], keep=2, quick=1))  # fmt: skip
def test_rows_off_16_byte_boundaries(loss, form, tiles, dtype, frame_bytes, cap, monkeypatch):
    # V = 75: row r starts r * 75 columns in, so the kernels' frames start before the row, on
    # the previous row's data: up to 7 (bf16) or 3 (fp32) columns with 16-byte frames, up to 31
    # or 15 with 64-byte ones (config.ENTROPY_FRAME_BYTES); 75 = 203 - 128 leaves the rows the
    # offsets they have in a 203-wide batch. Cap 16 or 32: a peeled first tile, whole tiles, a
    # ragged last tile. One-tile chunks: chunk 0 is a first and last tile at once, and some
    # rows' last chunk is empty. Split: the backward's tiles cut the frame likewise, a row's
    # last one sometimes empty.
    from normlab import _runtime

    monkeypatch.setattr(_runtime, "sm_count", lambda *a: 132)
    monkeypatch.setattr(config, "ENTROPY_CHUNKED_TILES", tiles or 1)
    monkeypatch.setattr(config, "ENTROPY_FRAME_BYTES", frame_bytes)
    n_rows, n_cols = 11, 75
    x, other = _inputs(loss, (n_rows, n_cols), dtype)
    if loss == "cross_entropy":  # labels in a first tile, a last tile, an ignored row
        other = torch.tensor([0, 1, 74, 5, 72, -100, 2, 16, 17, 7, 3])
    assert x.data_ptr() % frame_bytes == 0  # CPU tensors start on 64 bytes
    esize = x.element_size()
    assert config.frames(x, x, x, cap) == {"ALIGN": 16 // esize,
                                                  "FRAME": frame_bytes // esize}  # fmt: skip
    out, grad = _run(loss, x, other, form=form, block_cap=cap, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    _check(loss, out, grad, ref_out, ref_grad, dtype, n_cols, f"{loss} {form}")
    # Added into a buffer: a column stored twice (or not at all) would show.
    before = _before_at_grad_scale(ref_grad, dtype)
    buf = before.clone()
    FNS[loss][0](x, other, form=form, block_cap=cap, reduction="sum", grad_accumulate=buf)
    _check_accumulated(buf, before, ref_grad, f"{loss} {form} accumulate")
    # NaN at both ends of row 4 stays there, though rows 3 and 5 load it in their edge vectors.
    x[4, 0] = x[4, -1] = float("nan")
    out, grad = _run(loss, x, other, form=form, block_cap=cap, reduction="none")
    keep = [r for r in range(n_rows) if r != 4]
    assert torch.isnan(out[4])
    assert torch.equal(torch.isfinite(out[keep]), torch.ones(n_rows - 1, dtype=torch.bool))
    _check(loss, out[keep], grad[keep], ref_out[keep], ref_grad[keep], dtype, n_cols, "nan row")


@pytest.mark.parametrize("loss,form,n_cols", latin(LOSSES, ALL_FORMS, [5, 9]))
def test_rows_inside_one_16_byte_vector(loss, form, n_cols):
    # bf16, V = 5 or 9 at tile 8 or 16: a row can sit inside one 16-byte vector, or straddle
    # two, with no whole vector to store; added into a buffer, so a lane stored twice shows.
    n_rows = 16
    x, other = _inputs(loss, (n_rows, n_cols), torch.bfloat16)
    if loss == "cross_entropy":
        other = torch.arange(n_rows) % n_cols
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    before = _before_at_grad_scale(ref_grad, torch.bfloat16)
    buf = before.clone()
    out = FNS[loss][0](x, other, form=form, reduction="none", grad_accumulate=buf)
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=n_cols)
    _check_accumulated(buf, before, ref_grad, f"{loss} {form}")


def test_frame_align_only_for_rows_aligned_alike(monkeypatch):

    def frames(x, t, block):
        out = config.frames(x, t, None, block)
        return out["ALIGN"], out["FRAME"]

    monkeypatch.setattr(config, "ENTROPY_FRAME_BYTES", 64)
    x = torch.randn(4, 203, dtype=torch.bfloat16)
    assert x.data_ptr() % 64 == 0
    assert frames(x, x, 4096) == (8, 32)
    assert frames(x.float(), x.float(), 4096) == (4, 16)
    assert frames(x, x, 16) == (8, 8)  # a tile narrower than the frame: 16-byte frames
    assert frames(x, x, 4) == (1, 1)  # a tile narrower than 16 bytes
    assert frames(x, x.float(), 4096) == (1, 1)  # target dtype differs
    wide = torch.randn(4, 210, dtype=torch.bfloat16)
    assert frames(x, wide[:, :203], 4096) == (1, 1)  # row strides differ
    shifted = torch.randn(4 * 203 + 1, dtype=torch.bfloat16)[1:].view(4, 203)
    assert frames(x, shifted, 4096) == (1, 1)  # not on a 16-byte boundary
    on16 = torch.randn(4 * 203 + 8, dtype=torch.bfloat16)[8:].view(4, 203)
    assert frames(x, on16, 4096) == (8, 8)  # on 16 bytes, not 64: 16-byte frames
    even = torch.randn(4, 256, dtype=torch.bfloat16)
    assert frames(even, even, 4096) == (1, 1)  # Triton sees the alignment itself


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
def test_huge_logits(loss, form):
    # |logits| ~ 1e4: any unshifted exp overflows; the loss itself is ~1e4.
    x, other = _inputs(loss, (3, 300), torch.float32, scale=1e4)
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    assert torch.isfinite(out).all()
    # Reverse KL: grad = p * (d - KL) with d and KL ~ 1e4, so fp32 leaves an absolute floor of
    # a few ulp(KL) ~ 1e-3 where p ~ 1 (the fp64 reference is exactly 0 there).
    floor = 4 * 1.2e-7 * float(ref_out.abs().max()) if loss == "reverse_kl" else 0.0
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300, grad_atol=floor)


@pytest.mark.parametrize("form", ALL_FORMS)
def test_one_hot_target_is_label_ce(form):
    # q puts all its mass on one class (the rest -inf): soft CE == label CE, grad p - onehot.
    x = torch.randn(4, 200)
    labels = torch.randint(0, 200, (4,))
    t = torch.full((4, 200), float("-inf"))
    t[torch.arange(4), labels] = 0.0
    out, grad = _run("soft_cross_entropy", x, t, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref("cross_entropy", x, labels, reduction="none")
    _check("soft_cross_entropy", out, grad, ref_out, ref_grad, torch.float32, 200)
    # Reverse KL against a nearly one-hot target: large but finite.
    t2 = torch.where(torch.isinf(t), -30.0, 30.0)
    out, grad = _run("reverse_kl", x, t2, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref("reverse_kl", x, t2, reduction="none")
    _check("reverse_kl", out, grad, ref_out, ref_grad, torch.float32, 200)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
def test_masked_vocab_minus_inf(loss, form):
    # A padded vocab: the last 70 columns are -inf in logits and target, a whole 64-wide tile
    # among them; masked lanes and -inf data must not turn the max or the sums into NaN.
    x, other = _inputs(loss, (3, 250), torch.float32)
    x[:, 180:] = float("-inf")
    if other.is_floating_point():
        other[:, 180:] = float("-inf")
    else:
        other = torch.tensor([5, -100, 179])
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert (grad[:, 180:] == 0).all()
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 250)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
def test_logits_far_below_exp_range(loss, form):
    # Every logit near -1000: exp(0 - max) overflows fp32, so a rescale from the "nothing seen
    # yet" frame must be exactly 0, not inf * 0 = NaN. A leading -inf run (a whole 64-wide
    # tile, and for chunked a whole chunk) starts the row with nothing seen.
    x, other = _inputs(loss, (3, 300), torch.float32)
    x = x - 1000.0
    x[:, :70] = float("-inf")
    if other.is_floating_point():
        other = other - 1000.0
        other[:, :70] = float("-inf")
    else:
        other = torch.tensor([70, -100, 299])
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300)


@pytest.mark.parametrize("loss,form,reduction", latin(LOSSES, ALL_FORMS, ["mean", "sum", "none"]))
def test_reductions_and_grad_output(loss, form, reduction):
    x, other = _inputs(loss, (5, 300), torch.float32)
    # mean/sum: loss * 3; none: a different weight per row (one of them exactly 1).
    weight = torch.tensor(3.0) if reduction != "none" else torch.tensor([0.5, 1.0, -2.0, 3.0, 0.25])
    out, grad = _run(loss, x, other, weight=weight, form=form, block_cap=64, reduction=reduction)
    ref_out, ref_grad = _ref(loss, x, other, reduction=reduction, weight=weight)
    assert out.shape == ref_out.shape
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300, reduction)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_rescale_grid_strides_rows(reduction):
    # The backward's in-place rescale runs ENTROPY_RESCALE_PROGRAMS_PER_SM x 4 programs under the
    # interpreter: 19 rows make each stride over two or three, with per-row weights (some exactly
    # 1, which skip their row) or one scalar weight != 1.
    from normlab import _runtime

    programs = config.ENTROPY_RESCALE_PROGRAMS_PER_SM * _runtime.sm_count()
    n_rows = 2 * programs + 3
    x, other = _inputs("reverse_kl", (n_rows, 40), torch.float32)
    if reduction == "none":
        weight = torch.where(torch.arange(n_rows) % 3 == 0, 1.0, torch.randn(n_rows))
    else:
        weight = torch.tensor(3.0)
    out, grad = _run("reverse_kl", x, other, weight=weight, form="fused", block_cap=16,
                     reduction=reduction)  # fmt: skip
    ref_out, ref_grad = _ref("reverse_kl", x, other, reduction=reduction, weight=weight)
    _check("reverse_kl", out, grad, ref_out, ref_grad, torch.float32, 40, reduction)


@pytest.mark.parametrize("loss,reduction,programs",
                         latin(LOSSES, ["mean", "sum", "none"], [1, 3, 4], keep=3))
def test_fused_grid_fewer_programs_than_rows(loss, reduction, programs, monkeypatch):
    # The fused kernel's persistent grid: 1, 3 or 4 programs take 11 rows from the queue
    # (label CE's rows 1 and 6 ignored, so a mean counts 9): each row's loss and
    # gradient, and the launch's reduction by its last program, as the fp64 reference gives
    # them; the kept ticket and queue are back at 0 for the next launch.
    from functools import partial

    from normlab.losses import fused, op

    grids = []

    def launch_spy(*args, **kwargs):
        grids.append(kwargs["programs"])
        return fused.launch_fused(*args, **kwargs)

    monkeypatch.setattr(op, "launch_fused", partial(launch_spy, programs=programs))
    x, other = _inputs(loss, (11, 300), torch.float32)
    if loss == "cross_entropy":
        other[6] = -100
    weight = torch.tensor(3.0) if reduction != "none" else torch.randn(11)
    out, grad = _run(loss, x, other, weight=weight, form="fused", block_cap=64,
                     reduction=reduction)  # fmt: skip
    ref_out, ref_grad = _ref(loss, x, other, reduction=reduction, weight=weight)
    assert grids == [programs]
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300, reduction)
    ticket, _rows = op._reduction_buffers(x.device, 11)
    assert ticket.tolist() == [0, 0]


def test_fused_grid_rule(monkeypatch):
    # A grid of ENTROPY_FUSED_PROGRAMS_PER_SM programs an SM where the grid's rows fill
    # ENTROPY_FUSED_L2_FILL of the L2 (bytes, so fp32 rows count double), on 16-byte
    # boundaries, two rows a program or more, and a last round that idles at most
    # ENTROPY_FUSED_TAIL_WASTE of the row slots; only for label CE's fused form with a
    # gradient, without softcap or a loss_mask, and the switch on.
    sms, per_sm, l2 = 132, config.ENTROPY_FUSED_PROGRAMS_PER_SM, 60 * 2**20
    grid = per_sm * sms
    (low, high), waste = config.ENTROPY_FUSED_L2_FILL, config.ENTROPY_FUSED_TAIL_WASTE
    cols = 16 * math.ceil(low * l2 / (grid * 2) / 16)  # the fewest aligned bf16 columns in it

    def programs(rows=2 * grid, n_cols=cols, logit_bytes=2, aligned=True, l2_bytes=l2):
        return config.entropy_fused_programs(rows, n_cols, logit_bytes, aligned, sms, l2_bytes)

    assert programs() == grid
    # the L2's fill: from low (inclusive) to high (inclusive), in bytes
    assert programs(n_cols=cols - 16) is None
    top = 16 * math.floor(high * l2 / (grid * 2) / 16)
    assert programs(n_cols=top) == grid and programs(n_cols=top + 16) is None
    assert programs(n_cols=cols // 2 + 16, logit_bytes=4) == grid
    assert programs(n_cols=cols // 2 - 16, logit_bytes=4) is None
    assert programs(l2_bytes=0) is None  # no L2 known (the interpreter)
    # rounds of the grid: one is one program a row; two from 2 x grid / (1 + waste) rows
    two = math.ceil(2 * grid / (1 + waste))
    assert programs(rows=grid) is None and programs(rows=grid + 1) is None
    assert programs(rows=two - 1) is None and programs(rows=two) == grid
    assert programs(rows=2 * grid + 1) is None and programs(rows=3 * grid) == grid
    assert programs(rows=16 * grid + 1) == grid and programs(rows=10**7) == grid
    assert programs(aligned=False) is None

    def takes(kind="cross_entropy", form="fused", compute_grad=True, **options):
        opts = config.Options(**options)
        spec = config.Spec(config.KINDS[kind], form, 4096, "mean", -100, None, 0, cols,
                           config.options(config.KINDS[kind], *opts))  # fmt: skip
        return config.takes_fused_grid(spec, compute_grad)

    assert takes() and takes(label_smoothing=0.1) and takes(z_loss=1e-4)
    for kind in ("reverse_kl", "soft_cross_entropy", "forward_kl", "jsd"):
        assert not takes(kind)
    assert not takes(form="chunked") and not takes(form="split")
    assert not takes(compute_grad=False)
    assert not takes(softcap=30.0) and not takes(has_mask=True)
    monkeypatch.setattr(config, "ENTROPY_FUSED_STRIDE", False)
    assert not takes()


@pytest.mark.parametrize("loss", LOSSES)
def test_fused_launch_takes_the_grid_rule(loss, monkeypatch):
    # With an L2 of 4096 bytes, 31 rows of 48 fp32 columns (the grid's 16 rows fill 0.75 of
    # it; two rounds, one slot idle) take the interpreter's 4 SMs x 4 programs for label CE
    # with a gradient, whether its mean is summed in the kernel (twice: the second call
    # replays), in torch (logits above ENTROPY_REDUCE_MAX_BYTES) or not at all, and match
    # fp64, the kept queue back at 0. The other losses, a call without a gradient, softcap and
    # rows off 16-byte boundaries (44 columns) take one program a row.
    from normlab import _runtime
    from normlab.losses import fused, op

    grids = []
    launch = fused.launch

    def launch_spy(kernel, grid, *args, **kwargs):
        if kernel is fused._entropy_fused_kernel:
            grids.append(grid[0])
        return launch(kernel, grid, *args, **kwargs)

    monkeypatch.setattr(fused, "launch", launch_spy)
    monkeypatch.setattr(_runtime, "l2_bytes", lambda device=None: 4096)
    grid = config.ENTROPY_FUSED_PROGRAMS_PER_SM * 4
    x, other = _inputs(loss, (31, 48), torch.float32, scale=1.0)
    if loss == "cross_entropy":
        other[::3] = -100  # rows that skip
    ref_out, ref_grad = _ref(loss, x, other)
    for _ in range(2):
        out, grad = _run(loss, x, other, form="fused", block_cap=16)
        _check(loss, out, grad, ref_out, ref_grad, torch.float32, 48)
    ref_rows, ref_grad_rows = _ref(loss, x, other, reduction="none")
    out, grad = _run(loss, x, other, form="fused", block_cap=16, reduction="none")
    _check(loss, out, grad, ref_rows, ref_grad_rows, torch.float32, 48, "none")
    with monkeypatch.context() as m:
        m.setattr(config, "ENTROPY_REDUCE_MAX_BYTES", 0)
        out, grad = _run(loss, x, other, form="fused", block_cap=16)
        _check(loss, out, grad, ref_out, ref_grad, torch.float32, 48)
    with torch.no_grad():
        FNS[loss][0](x, other, form="fused", block_cap=16)
    if loss == "cross_entropy":
        _run(loss, x, other, form="fused", block_cap=16, softcap=30.0)
    x, other = _inputs(loss, (31, 44), torch.float32)
    _run(loss, x, other, form="fused", block_cap=16)
    taken = grid if loss == "cross_entropy" else 31
    assert grids == [taken] * 4 + [31] * (3 if loss == "cross_entropy" else 2)
    assert op._reduction_buffers(x.device, 1)[0].tolist() == [0, 0]


@pytest.mark.parametrize("form", ALL_FORMS)
def test_ignored_labels_and_all_ignored(form):
    x = torch.randn(6, 100)
    labels = torch.tensor([3, -100, 99, 0, -100, 42])
    out, grad = _run("cross_entropy", x, labels, form=form, block_cap=64)
    ref_out, ref_grad = _ref("cross_entropy", x, labels)
    _check("cross_entropy", out, grad, ref_out, ref_grad, torch.float32, 100)
    assert (grad[[1, 4]] == 0).all()
    # Custom ignore_index.
    labels7 = torch.where(labels == -100, 7, labels)
    xk = x.clone().requires_grad_()
    normlab.cross_entropy(xk, labels7, ignore_index=7, form=form, block_cap=64).backward()
    assert (xk.grad[[1, 4]] == 0).all() and torch.allclose(xk.grad, grad)
    # All ignored: torch gives a NaN mean and a zero gradient; so do we.
    all_ignored = torch.full((6,), -100)
    out, grad = _run("cross_entropy", x, all_ignored, form=form)
    ref_out, _ = _ref("cross_entropy", x, all_ignored)
    assert math.isnan(out.item()) and math.isnan(ref_out.item())
    assert (grad == 0).all()
    out_sum = normlab.cross_entropy(x, all_ignored, reduction="sum", form=form)
    assert out_sum.item() == 0.0


def test_ignored_row_with_nan_gets_zero_grad():
    # 80 columns: rows on 16-byte boundaries; 83: row 1 starts 12 bytes past one (aligned frames).
    for n_cols in (80, 83):
        x = torch.randn(3, n_cols)
        x[1, 0], x[1, 5], x[1, -1] = float("nan"), float("inf"), float("nan")
        labels = torch.tensor([1, -100, 2])
        for form in ALL_FORMS:
            out, grad = _run("cross_entropy", x, labels, form=form, reduction="none", block_cap=64)
            assert out[1] == 0 and (grad[1] == 0).all() and torch.isfinite(out).all()
            assert torch.isfinite(grad).all()


@pytest.mark.parametrize("loss,form,buf_dtype",
                         latin(LOSSES, ALL_FORMS, [torch.float32, torch.bfloat16]))
def test_grad_accumulate(loss, form, buf_dtype):
    x, other = _inputs(loss, (4, 200), torch.bfloat16)
    x.requires_grad_()
    ref_out, ref_grad = _ref(loss, x, other)
    before = _before_at_grad_scale(ref_grad, buf_dtype)
    buf = before.clone()
    out = FNS[loss][0](x, other, form=form, block_cap=64, grad_accumulate=buf)
    assert not out.requires_grad and x.grad is None
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=200)
    # Added in fp32, then rounded once to the buffer's dtype.
    _check_accumulated(buf, before, ref_grad, f"{loss} {form}")


RETAINED_WEIGHTS = {  # reduction -> grad_output sequences of three backwards
    "mean": [(0.0, 2.0, -0.5), (2.0, -0.5, 1.0)],
    "none": [([0.0, 2.0, -1.0], [1.0, 3.0, 0.5], [0.0, 0.0, 0.0]),
             ([2.0, 1.0, -1.0], [1.0, 3.0, 0.5], [-1.0, 1.0, 1.0])],
}  # fmt: skip


@pytest.mark.parametrize("loss,form,reduction,seq", latin(
    LOSSES, ALL_FORMS, [("mean", 0), ("none", 0), ("mean", 1), ("none", 1)], keep=2))
def test_retain_graph_backwards(loss, form, reduction, seq):
    # Three backwards through one graph (the first two with retain_graph=True), grad_output 0
    # (a scalar, or some rows) in the first or none: each adds torch's gradient for its own
    # grad_output. (The fused and chunked forms save the gradient and rescale it.)
    x, other = _inputs(loss, (3, 100), torch.float32)
    xk = x.clone().requires_grad_()
    out = FNS[loss][0](xk, other, form=form, block_cap=64, reduction=reduction)
    expect = torch.zeros_like(x, dtype=torch.float64)
    weights = RETAINED_WEIGHTS[reduction][seq]
    for i, w in enumerate(weights):
        w = torch.tensor(w)
        (out * w).sum().backward(retain_graph=i < len(weights) - 1)
        expect += _ref(loss, x, other, reduction=reduction, weight=w)[1]
        _assert_rows_close(xk.grad, expect, _row_scale(expect).clamp_min(1e-3), 1e-5,
                           f"backward {i + 1}")  # fmt: skip


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
def test_nan_and_inf_stay_in_their_row(loss, form):
    x, other = _inputs(loss, (4, 150), torch.float32)
    if loss == "cross_entropy":
        other = torch.tensor([0, 1, 149, 7])  # no ignored row here
    x[1, 77] = float("nan")
    x[2, 3] = float("inf")
    out = FNS[loss][0](x, other, form=form, block_cap=64, reduction="none")
    ref_out, _ = _ref(loss, x, other, reduction="none")
    assert torch.isnan(out[1]) and torch.isnan(out[2])
    assert_close(out[[0, 3]], ref_out[[0, 3]], dtype=torch.float32, reduce_len=150)
    assert torch.isnan(FNS[loss][0](x, other, form=form, block_cap=64))


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
def test_nan_or_inf_row_has_nan_gradient(loss, form):
    # Rows 1-2: NaN / +inf in the logits; rows 3-4 (distribution losses): in the target. Every
    # row has -inf logits too (p = 0: reverse KL's gradient skips those terms). torch's autograd
    # makes each bad row's whole gradient NaN; the other rows stay exact. V = 203 in fp32: rows
    # off 16-byte boundaries, so edge lanes are stored apart (tile 64).
    n_rows, n_cols = 6, 203
    x, other = _inputs(loss, (n_rows, n_cols), torch.float32)
    x[:, 100:110] = float("-inf")
    x[1, 7], x[2, 150] = float("nan"), float("inf")
    if loss == "cross_entropy":
        other, bad = torch.tensor([0, 1, 202, 5, 200, 3]), [1, 2]
    else:
        other[3, 50], other[4, 202], bad = float("nan"), float("inf"), [1, 2, 3, 4]
    good = [r for r in range(n_rows) if r not in bad]
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    # torch: autograd through softmax / log_softmax (F.cross_entropy for the cross-entropies).
    xt = x.clone().requires_grad_()
    if loss == "reverse_kl":
        torch_rows = (xt.softmax(-1) * (xt.log_softmax(-1) - other.log_softmax(-1))).sum(-1)
    elif loss == "soft_cross_entropy":
        torch_rows = torch.nn.functional.cross_entropy(xt, other.softmax(-1), reduction="none")
    else:
        torch_rows = torch.nn.functional.cross_entropy(xt, other, reduction="none")
    torch_rows.sum().backward()
    assert torch.isnan(xt.grad[bad]).all()
    assert torch.isnan(out[bad]).all() and torch.isnan(grad[bad]).all()
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    _check(loss, out[good], grad[good], ref_out[good], ref_grad[good], torch.float32, n_cols)
    # Scaled and added into a buffer alike.
    buf = torch.zeros(n_rows, n_cols)
    FNS[loss][0](x, other, form=form, block_cap=64, reduction="sum", grad_accumulate=buf)
    assert torch.isnan(buf[bad]).all()
    _check_accumulated(buf[good], torch.zeros(len(good), n_cols), ref_grad[good])


def test_no_grad_forward_and_fp16():
    x, t = _inputs("reverse_kl", (3, 500), torch.float16)
    ref_out = _ref("reverse_kl", x, t)[0]
    xg = x.clone().requires_grad_()
    with torch.no_grad():
        for form in ALL_FORMS:
            out = normlab.reverse_kl(xg, t, form=form)
            assert not out.requires_grad
            assert_close(out, ref_out, dtype=torch.float32, reduce_len=500)
    out, grad = _run("soft_cross_entropy", x, t)
    ref_out, ref_grad = _ref("soft_cross_entropy", x, t)
    _check("soft_cross_entropy", out, grad, ref_out, ref_grad, torch.float16, 500)


def test_non_contiguous_inputs():
    base = torch.randn(300, 4)
    x = base.t()  # (4, 300) with column stride 4: copied
    t = torch.randn(4, 600)[:, ::2]
    labels = torch.randint(0, 300, (8,))[::2]
    for loss, other in [("reverse_kl", t), ("soft_cross_entropy", t), ("cross_entropy", labels)]:
        out, grad = _run(loss, x, other, block_cap=64)
        ref_out, ref_grad = _ref(loss, x, other)
        _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300, loss)
    # Strided rows (a slice of a wider buffer) go to the kernels without a copy.
    wide = torch.randn(4, 400)
    x2 = wide[:, :300]
    out, grad = _run("reverse_kl", x2, t.contiguous(), form="split", block_cap=64)
    ref_out, ref_grad = _ref("reverse_kl", x2, t)
    _check("reverse_kl", out, grad, ref_out, ref_grad, torch.float32, 300)


def test_unchecked_out_of_range_label_is_nan_not_a_crash():
    x = torch.randn(3, 50)
    labels = torch.tensor([1, 50, 2])
    with pytest.raises(ValueError, match="outside"):
        normlab.cross_entropy(x, labels)
    for form in ALL_FORMS:
        xk = x.clone().requires_grad_()
        out = normlab.cross_entropy(xk, labels, form=form, reduction="none", check_labels=False)
        assert torch.isnan(out[1]) and torch.isfinite(out[[0, 2]]).all()
        out.nansum().backward()
        assert torch.isnan(xk.grad[1]).all() and torch.isfinite(xk.grad[[0, 2]]).all()


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("form", ALL_FORMS)
@pytest.mark.parametrize("shape", [(0, 50), (2, 0, 50), (3, 0)])
def test_empty_input_matches_torch(loss, form, shape):
    # No element: zero rows, or V = 0 (label CE: every label ignored; torch raises for any
    # other, see below). torch: "mean" of zero rows NaN, "sum" 0, "none" empty; V = 0 rows are
    # empty sums (0). The gradient is empty, shaped and typed like the logits.
    x = torch.randn(shape).to(torch.bfloat16)
    if loss == "cross_entropy":
        other = torch.full(shape[:-1], -100)
    else:
        other = torch.randn(shape).to(torch.bfloat16)
    for reduction in ("mean", "sum", "none"):
        out, grad = _run(loss, x, other, form=form, reduction=reduction)
        ref_out, _ = _ref(loss, x, other, reduction=reduction)
        assert out.dtype == torch.float32 and out.shape == ref_out.shape
        torch.testing.assert_close(out, ref_out.float(), equal_nan=True, rtol=0, atol=0)
        assert grad.shape == x.shape and grad.dtype == x.dtype
        buf = torch.zeros(shape, dtype=torch.bfloat16)
        acc_out = FNS[loss][0](x, other, form=form, reduction=reduction, grad_accumulate=buf)
        torch.testing.assert_close(acc_out, ref_out.float(), equal_nan=True, rtol=0, atol=0)
    if loss == "cross_entropy" and shape == (3, 0):
        labels = torch.tensor([-100, 0, -100])
        with pytest.raises(IndexError):  # torch
            torch.nn.functional.cross_entropy(x.float(), labels)
        with pytest.raises(ValueError, match="outside"):
            normlab.cross_entropy(x, labels, form=form)
        # Unchecked, as any out-of-range label: a NaN row.
        out = normlab.cross_entropy(x, labels, form=form, reduction="none", check_labels=False)
        assert torch.equal(out.isnan(), torch.tensor([False, True, False]))


def test_modules_match_functions():
    x, t = _inputs("reverse_kl", (3, 120), torch.float32)
    labels = torch.tensor([1, -100, 5])
    assert torch.equal(
        nn.ReverseKLLoss(reduction="sum")(x, t), normlab.reverse_kl(x, t, reduction="sum")
    )
    assert torch.equal(nn.SoftCrossEntropyLoss()(x, t), normlab.soft_cross_entropy(x, t))
    ce = nn.CrossEntropyLoss(ignore_index=-100, form="split")
    assert isinstance(ce, torch.nn.CrossEntropyLoss)
    assert_close(ce(x, labels), ref.cross_entropy_ref(x, labels), dtype=torch.float32)
    with pytest.raises(ValueError, match="weight"):  # label_smoothing: tests/test_loss_options.py
        nn.CrossEntropyLoss(weight=torch.ones(120))


BAD_CALLS = [
    ("torch.Tensor", TypeError, lambda x, t, y: normlab.reverse_kl(x.numpy(), t)),
    ("target_logits shape", ValueError, lambda x, t, y: normlab.reverse_kl(x, t[:, :-1])),
    ("dtype", TypeError, lambda x, t, y: normlab.reverse_kl(x, t.double())),
    ("dtype must be float32", TypeError,
     lambda x, t, y: normlab.soft_cross_entropy(x.double(), t.double())),
    ("vocabulary last dim", ValueError, lambda x, t, y: normlab.reverse_kl(x[0, 0], t[0, 0])),
    ("outside", ValueError, lambda x, t, y: normlab.cross_entropy(x[:, :0], y)),
    ("grad_accumulate shape", ValueError,
     lambda x, t, y: normlab.reverse_kl(x[:0], t[:0], grad_accumulate=torch.zeros(1, 40))),
    ("block_cap", ValueError, lambda x, t, y: normlab.reverse_kl(x, t, block_cap=1000)),
    ("block_cap", ValueError, lambda x, t, y: normlab.reverse_kl(x, t, block_cap=8)),
    ("form", ValueError, lambda x, t, y: normlab.reverse_kl(x, t, form="both")),
    ("reduction", ValueError, lambda x, t, y: normlab.cross_entropy(x, y, reduction="batchmean")),
    ("target_logits", ValueError, lambda x, t, y: normlab.reverse_kl(x, t.requires_grad_())),
    ("labels dtype", TypeError, lambda x, t, y: normlab.cross_entropy(x, y.float())),
    ("labels shape", ValueError, lambda x, t, y: normlab.cross_entropy(x, y[:-1])),
    ("outside", ValueError, lambda x, t, y: normlab.cross_entropy(x, y - 5)),
    ("CPU tensors", ValueError, lambda x, t, y: normlab.reverse_kl(x.to("meta"), t.to("meta"))),
    ("grad_accumulate shape", ValueError,
     lambda x, t, y: normlab.reverse_kl(x, t, grad_accumulate=torch.zeros(3, 3))),
    ("grad_accumulate dtype", TypeError,
     lambda x, t, y: normlab.reverse_kl(x, t,
                                        grad_accumulate=torch.zeros(4, 40, dtype=torch.float64))),
    ("not initialized", ValueError, lambda x, t, y: normlab.reverse_kl(x, t, group=object())),
    ("logits must be a dense", TypeError, lambda x, t, y: normlab.reverse_kl(x.to_sparse(), t)),
    ("target_logits must be a dense", TypeError,
     lambda x, t, y: normlab.jsd(x, t.to_sparse())),
    ("labels must be a dense", TypeError,
     lambda x, t, y: normlab.cross_entropy(x, y.to_sparse())),
    ("logits is inside a torch.func transform", RuntimeError,
     lambda x, t, y: torch.vmap(normlab.reverse_kl)(x[:, None], t[:, None])),
    ("logits is inside a torch.func transform", RuntimeError,
     lambda x, t, y: torch.func.grad(normlab.cross_entropy)(x, y)),
]  # fmt: skip


@pytest.mark.parametrize(
    "match,exc,call", BAD_CALLS, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD_CALLS)]
)
def test_bad_input_errors(match, exc, call):
    x, t = torch.randn(4, 40), torch.randn(4, 40)
    y = torch.tensor([0, 39, -100, 3])
    with pytest.raises(exc, match=match):
        call(x, t, y)


def test_auto_form_uses_config_table():
    assert config.entropy_auto("reverse_kl", 32768, distributed=True)[0] == "split"
    for loss in LOSSES:
        for n_cols in (1000, 16384, 32768, 50257, 131072, 151936):
            form, cap = config.entropy_auto(loss, n_cols, distributed=False)
            assert form in ("fused", "chunked", "split")
            assert cap & (cap - 1) == 0
            assert config.ENTROPY_MIN_BLOCK <= cap <= config.ENTROPY_MAX_BLOCK
    # The measured choices (see config): 32768 takes the fused form, wider vocabularies the
    # chunked one; unaligned ones below 65536 (rows off 16-byte boundaries): reverse KL and soft
    # CE the chunked form at tile 1024, label CE fused at 2048; ragged but aligned ones as
    # measured at 50256.
    wide = config.ENTROPY_AUTO_WIDE_COLS
    assert wide == 65536
    classes = {n: config.entropy_vocab_class(n) for n in (1000, 4097, 32000, 32768, 50256, 50257,
                                                           65535, 65536, 151936)}  # fmt: skip
    assert classes == {1000: "even", 4097: "unaligned", 32000: "ragged", 32768: "even",
                       50256: "ragged", 50257: "unaligned", 65535: "unaligned", 65536: "wide",
                       151936: "wide"}  # fmt: skip
    assert config.entropy_auto("reverse_kl", 50256, False) == ("chunked", 2048)
    assert config.entropy_auto("soft_cross_entropy", 50256, False) == ("chunked", 2048)
    assert config.entropy_auto("cross_entropy", 50256, False) == ("fused", 4096)
    assert config.entropy_auto("reverse_kl", 32768, False) == ("fused", 2048)
    assert config.entropy_auto("reverse_kl", wide - 4096, False) == ("fused", 2048)
    assert config.entropy_auto("reverse_kl", 50257, False) == ("chunked", 1024)
    assert config.entropy_auto("soft_cross_entropy", 50257, False) == ("chunked", 1024)
    assert config.entropy_auto("reverse_kl", wide, False) == ("chunked", 2048)
    assert config.entropy_auto("reverse_kl", 151936, False) == ("chunked", 2048)
    assert config.entropy_auto("soft_cross_entropy", 32768, False) == ("fused", 2048)
    assert config.entropy_auto("soft_cross_entropy", 151936, False) == ("chunked", 2048)
    assert config.entropy_auto("cross_entropy", 32768, False) == ("fused", 4096)
    assert config.entropy_auto("cross_entropy", 50257, False) == ("fused", 2048)
    assert config.entropy_auto("cross_entropy", wide, False) == ("chunked", 4096)
    assert config.entropy_auto("cross_entropy", 151936, False) == ("chunked", 4096)
    assert config.entropy_auto("cross_entropy", wide, True) == ("split", 4096)


def test_auto_form_spreads_few_rows_over_the_sms():
    # Fewer rows than SMs: a fused-class vocabulary wider than one tile takes the chunked form
    # (one program per row would leave SMs idle) once a row's program would read more than
    # ENTROPY_FEW_ROWS_CHUNK_BYTES; one tile, a shorter row, many rows or tensor parallel do not.
    sms = 132
    bound = config.ENTROPY_FEW_ROWS_CHUNK_BYTES
    assert bound == 24 * 1024
    assert config.entropy_auto("cross_entropy", 50257, False, 1, sms) == ("chunked", 2048)
    assert config.entropy_auto("cross_entropy", 50257, False, sms - 1, sms) == ("chunked", 2048)
    assert config.entropy_auto("cross_entropy", 50257, False, sms, sms) == ("fused", 2048)
    # the bound, bf16 label CE: 12288 columns read 24 KiB (fused), 12289 one more element
    assert config.entropy_auto("cross_entropy", 12289, False, 4, sms, 2 * 12289) == (
        "chunked", 2048)
    assert config.entropy_auto("cross_entropy", 12288, False, 4, sms, 2 * 12288) == (
        "fused", 4096)
    assert config.entropy_auto("cross_entropy", 12287, False, 4, sms, 2 * 12287) == (
        "fused", 2048)
    assert config.entropy_auto("cross_entropy", 4723, False, 95, sms, 2 * 4723) == ("fused", 2048)
    # fp32 logits read twice the bytes: 6145 columns pass the bound
    assert config.entropy_auto("cross_entropy", 6145, False, 4, sms, 4 * 6145)[0] == "chunked"
    # reverse KL reads the target too: 32768 bf16 columns are 128 KiB
    assert config.entropy_auto("reverse_kl", 32768, False, 8, sms, 4 * 32768) == ("chunked", 2048)
    assert config.entropy_auto("reverse_kl", 2048, False, 1, sms) == ("fused", 2048)  # one tile
    assert config.entropy_auto("reverse_kl", 2049, False, 1, sms, 4 * 2049) == ("fused", 2048)
    assert config.entropy_auto("reverse_kl", 32768, True, 1, sms) == ("split", 2048)
    assert config.entropy_auto("reverse_kl", 32768, False, 0, sms) == ("fused", 2048)  # empty
    assert config.entropy_auto("reverse_kl", 32768, False) == ("fused", 2048)  # rows unknown


def test_auto_form_inside_torch_compile_with_a_gradient_is_split():
    # A compiled backward rescales a saved gradient out of place, so a compiled call that needs
    # the gradient takes the split form from one row an SM (label CE: three passes of the
    # logits' size against four) or four (the distribution losses: five either way; the split
    # form's statistics kernel runs one program per row); below, or without a gradient, the
    # eager choice. An explicit form is kept (the public call, below).
    sms = 132
    assert config.ENTROPY_COMPILED_GRAD_FORM == "split"
    for loss, per_sm in (("cross_entropy", 1), ("reverse_kl", 4), ("soft_cross_entropy", 4),
                         ("forward_kl", 4), ("jsd", 4)):  # fmt: skip
        assert config.compiled_split_min_rows(loss, sms) == per_sm * sms
    for loss, n_cols in (("cross_entropy", 131072), ("reverse_kl", 32768),
                         ("soft_cross_entropy", 50257), ("cross_entropy", 1000)):  # fmt: skip
        per_sm = 1 if loss == "cross_entropy" else 4
        for rows in (per_sm * sms, per_sm * sms + 1, 8192, None):
            eager_form, cap = config.entropy_auto(loss, n_cols, False, rows, sms, 2 * n_cols)
            assert eager_form in ("fused", "chunked")
            assert config.entropy_auto(loss, n_cols, False, rows, sms, 2 * n_cols, True) == (
                "split", cap)
        for rows in (per_sm * sms - 1, sms // 2, 1):
            eager = config.entropy_auto(loss, n_cols, False, rows, sms, 2 * n_cols)
            assert config.entropy_auto(loss, n_cols, False, rows, sms, 2 * n_cols, True) == eager
            assert eager[0] != "split"


@pytest.mark.parametrize("loss", LOSSES)
def test_torch_compile_auto_form_with_a_gradient_runs_split(loss, monkeypatch):
    # The interpreter's 4 SMs: from 16 rows (label CE: 4) the compiled call's backward is the
    # split form's kernel (counted), its loss and gradient the fp64 reference's; a row fewer, the
    # form is the eager one, which writes its gradient in the forward; an explicit form is kept.
    from normlab.losses import op as loss_op

    calls = []
    split_grad = loss_op._split_grad
    monkeypatch.setattr(loss_op, "_split_grad", lambda *a: calls.append(1) or split_grad(*a))
    from normlab import _runtime

    rows_split = config.compiled_split_min_rows(loss, _runtime.sm_count())
    # the interpreter's 4 SMs: the small shapes below stay cheap
    assert rows_split == (4 if loss == "cross_entropy" else 16)
    for rows, form, split in ((rows_split, "auto", True), (rows_split - 1, "auto", False),
                              (rows_split, "fused", False)):  # fmt: skip
        calls.clear()
        x, other = _inputs(loss, (rows, 40), torch.float32)
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b, form=form: FNS[loss][0](a, b, form=form,
                                                                      block_cap=16),
                                 fullgraph=True, backend="aot_eager")  # fmt: skip
        xc = x.clone().requires_grad_()
        value = compiled(xc, other)
        (grad,) = torch.autograd.grad(value * 1.5, xc)
        ref_out, ref_grad = _ref(loss, x, other, weight=torch.tensor(1.5))
        assert len(calls) == (1 if split else 0), (rows, form, calls)
        assert_close(value, ref_out, dtype=torch.float32, reduce_len=40)
        assert_close(grad, ref_grad, dtype=torch.float32, reduce_len=40)


def test_chunk_layout_fills_the_sms_with_few_rows():
    sms = 132
    # Many rows: the measured chunks (4 tiles); the row count changes nothing.
    assert config.chunk_layout(131072, 4096, 4, sms, 4096) == config.chunk_layout(131072, 4096,
                                                                                   4, sms)
    assert config.chunk_layout(131072, 4096, 4, sms, 4096).n_chunks == 8
    assert config.chunk_layout(50257, 4096, 4, sms, 1) == (1, 0, 13)  # one row: a tile each
    assert config.chunk_layout(3 * 2048, 2048, 4, sms, 95) == (2, 0, 2)  # 95 x 2 >= 132
    assert config.chunk_layout(16 * 2048, 2048, 4, sms, 33).n_chunks == 4  # 33 x 4 = 132
    assert config.chunk_layout(16 * 2048, 2048, 4, sms, 32) == (3, 0, 6)  # 32 x 4 < 132
    for n_rows in (1, 2, 7, 31, 95, 131, 132, 1000):
        for n_tiles in (1, 2, 3, 13, 64, 400):
            layout = config.chunk_layout(n_tiles * 2048, 2048, 4, sms, n_rows)
            assert layout.n_chunks <= sms and layout.n_chunks * layout.chunk_tiles >= n_tiles
            if n_rows * config.chunk_layout(n_tiles * 2048, 2048, 4, sms).n_chunks >= sms:
                continue  # enough programs without the rule
            # The grid fills the SMs, or each chunk is one tile, or one tile shorter would put
            # more than sm_count chunks in a row.
            assert (n_rows * layout.n_chunks >= sms or layout.chunk_tiles == 1
                    or -(-n_tiles // (layout.chunk_tiles - 1)) > sms)  # fmt: skip


def test_chunk_tiles_and_lanes_by_tile():
    assert [config.entropy_chunk_tiles(b) for b in (16, 1024, 2048, 4096)] == [4, 6, 4, 4]
    assert [config.entropy_lane(b) for b in (16, 1024, 2048, 4096, 8192)] == [8, 8, 8, 4096,
                                                                               8192]  # fmt: skip


@pytest.mark.parametrize("loss,form,lane", latin(LOSSES, ALL_FORMS, [8, 32, 64]))
def test_lane_statistics(loss, form, lane, monkeypatch):
    # Tile 64 in lanes of 8 or 32 columns (each with its own max / sum-exp, folded once a row or
    # chunk) or as one lane (the wide tiles' path). Row 0: one whole tile is -inf, so every lane
    # sees only -inf there; row 1: columns 8-15 of every tile are -inf, so one 8-column lane
    # never sees a finite logit; row 2: the lanes' maxima differ by ~60 (exp underflows across).
    monkeypatch.setattr(config, "ENTROPY_LANE", lane)
    monkeypatch.setattr(config, "ENTROPY_CHUNKED_TILES", 2)
    x, other = _inputs(loss, (3, 300), torch.float32)
    x[0, 128:192] = float("-inf")
    lane_1 = torch.arange(300) % 64 // 8 == 1
    x[1, lane_1] = float("-inf")
    x[2, ::7] += 60.0
    if other.is_floating_point():
        other[0, 128:192] = float("-inf")
        other[1, lane_1] = float("-inf")
    else:
        other = torch.tensor([5, -100, 290])
    out, grad = _run(loss, x, other, form=form, block_cap=64, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300, f"lane {lane}")


@pytest.mark.parametrize("n_cols,block,tiles,sms,expect", [
    (131072, 4096, 1, 132, (1, 0, 32)),  # one tile per chunk
    (151936, 4096, 1, 132, (1, 0, 38)),  # ragged: the last chunk is 3712 wide
    (1 << 20, 4096, 1, 132, (2, 0, 128)),  # 256 tiles > 132 SMs: two tiles per chunk
    (500, 16, 1, 4, (8, 0, 4)),  # the interpreter's 4 "SMs"
    (10, 16, 1, 4, (1, 0, 1)),
    (50257 + 7, 2048, 4, 132, (5, 0, 5)),  # 25 tiles: 5 chunks of 5, not 6 of 4 and 1 of 1
    (151936, 2048, 4, 132, (5, 0, 15)),  # 75 tiles: 15 chunks of 5, not 18 of 4 and 1 of 3
    (131072, 2048, 4, 132, (4, 0, 16)),  # 64 tiles: 16 chunks of 4
    (3 * 2048, 2048, 4, 132, (3, 0, 1)),  # fewer tiles than a chunk
])  # fmt: skip
def test_chunk_layout(n_cols, block, tiles, sms, expect):

    layout = config.chunk_layout(n_cols, block, tiles, sms)
    assert tuple(layout) == expect
    # Whole tiles, no empty chunk, every column covered, at most one chunk per SM.
    starts = layout.starts(block)
    assert starts[0] == 0 and all(s % block == 0 for s in starts)
    assert starts[-1] < n_cols <= starts[-1] + (layout.chunk_tiles + (layout.n_long > 0)) * block
    assert layout.n_chunks <= sms


@pytest.mark.parametrize("loss", LOSSES)
def test_chunked_one_tile_per_chunk(loss, monkeypatch):
    # With many "SMs" every 16-wide tile is its own chunk: 300 bf16 columns, framed from the
    # 16-byte boundary before the row (every other row starts 4 columns past one) = 20 chunks,
    # merged from a 32-lane vector of chunk statistics (12 lanes masked); rows that start on a
    # boundary leave their last chunk empty.
    from normlab import _runtime

    monkeypatch.setattr(_runtime, "sm_count", lambda *a: 132)
    x, other = _inputs(loss, (5, 300), torch.bfloat16)
    out, grad = _run(loss, x, other, form="chunked", block_cap=16, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    _check(loss, out, grad, ref_out, ref_grad, torch.bfloat16, 300, f"{loss} chunked")
    # The fused form agrees to fp32 rounding of the differently ordered sums.
    out_f, _ = _run(loss, x, other, form="fused", block_cap=16, reduction="none")
    assert_close(out, out_f, dtype=torch.float32, reduce_len=300)


@pytest.mark.parametrize("loss", LOSSES)
def test_chunked_long_and_short_chunks(loss, monkeypatch):
    # A layout with chunks of unequal length: 300 bf16 columns (19-20 tiles of 16 in the
    # row's frame) as 2 chunks of 4 tiles, 3 of 3 and a last one cut short by the row.

    layout = config.ChunkLayout(chunk_tiles=3, n_long=2, n_chunks=6)
    assert layout.starts(16) == [0, 64, 128, 176, 224, 272]
    monkeypatch.setattr(config, "chunk_layout", lambda *a: layout)
    x, other = _inputs(loss, (7, 300), torch.bfloat16)
    out, grad = _run(loss, x, other, form="chunked", block_cap=16, reduction="none")
    ref_out, ref_grad = _ref(loss, x, other, reduction="none")
    _check(loss, out, grad, ref_out, ref_grad, torch.bfloat16, 300, f"{loss} long/short chunks")


def test_chunked_one_launch_refused_by_interpreter(monkeypatch):
    # The in-kernel wait needs concurrent programs: under the interpreter the launcher refuses
    # the one-launch kernel before launching anything (INTERPRET forced, so on any host).
    from normlab import _runtime

    monkeypatch.setattr(_runtime, "INTERPRET", True)
    x = torch.randn(2, 64)
    spec = config.Spec(0, "chunked", 16, "mean", 0, None, 0, 64)
    with pytest.raises(ValueError, match="interpreter"):
        chunked.launch_chunked(spec, x, x, x, None, torch.empty(2), torch.ones(1), False, False,
                               phases=1)  # fmt: skip


def test_chunked_refuses_int32_overflow():
    # 2**28 rows x 2 chunks of 16 columns: 5 x rows x chunks passes 2**31 (an expanded view, so
    # nothing that size is allocated; the check runs before any buffer is made).
    x = torch.zeros(1, 32).expand(2**28, 32)
    spec = config.Spec(0, "chunked", 16, "mean", 0, None, 0, 32)
    with pytest.raises(ValueError, match="too many"):
        chunked.launch_chunked(spec, x, x, x, None, None, None, False, False,
                               tiles_per_chunk=1)  # fmt: skip



# ---- torch.compile (the losses are custom ops: Dynamo never traces their kernels) -----------


@pytest.mark.parametrize("loss,form,reduction", [  # make test-quick compiles the first only
    p if i == 0 else pytest.param(*p.values, marks=[*p.marks, pytest.mark.slow], id=p.id)
    for i, p in enumerate(latin(LOSSES, ALL_FORMS, ["mean", "none"]))])
def test_torch_compile_fullgraph(loss, form, reduction):
    x, other = _inputs(loss, (2, 3, 100), torch.float32)
    weight = torch.randn(2, 3) if reduction == "none" else torch.tensor(1.5)

    def step(x, other):
        out = FNS[loss][0](x, other, form=form, block_cap=16, reduction=reduction)
        return (out * weight).sum()

    torch._dynamo.reset()  # each case compiles the public function anew (recompile limit)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    xc = x.clone().requires_grad_()
    value = compiled(xc, other)
    (grad,) = torch.autograd.grad(value, xc)
    ref_out, ref_grad = _ref(loss, x, other, reduction=reduction, weight=weight)
    assert_close(value, (ref_out * weight.double()).sum(), dtype=torch.float32, reduce_len=600)
    assert_close(grad, ref_grad, dtype=torch.float32, reduce_len=100)


@pytest.mark.parametrize("form", ALL_FORMS)
def test_torch_compile_dynamic_rows(form):
    # Symbolic row counts (the vocabulary is specialised): two batch sizes, one graph.
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: normlab.reverse_kl(a, b, form=form, block_cap=16),
                             fullgraph=True, backend="aot_eager", dynamic=True)  # fmt: skip
    for rows in (3, 5):
        x, t = _inputs("reverse_kl", (rows, 70), torch.float32)
        xc = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad(compiled(xc, t), xc)
        _, ref_grad = _ref("reverse_kl", x, t)
        assert_close(grad, ref_grad, dtype=torch.float32, reduce_len=70)


@pytest.mark.parametrize("loss,form,reduction,compute_grad", [
    ("reverse_kl", "fused", "none", True), ("soft_cross_entropy", "chunked", "sum", True),
    ("reverse_kl", "split", "mean", True), ("cross_entropy", "split", "mean", True),
    ("cross_entropy", "fused", "mean", False)])  # fmt: skip
def test_custom_op_opcheck(loss, form, reduction, compute_grad):
    # Schema, fake (meta) shapes, autograd registration and AOT dispatch of the loss op.
    x, other = _inputs(loss, (3, 50), torch.float32)
    x.requires_grad_(compute_grad)

    args = (x, other, config.KINDS[loss], form, 16, reduction, -100, compute_grad)
    torch.library.opcheck(torch.ops.normlab.entropy_fwd.default, args)


@pytest.mark.parametrize("loss,reduction,per_row", [
    ("reverse_kl", "none", True), ("soft_cross_entropy", "sum", False),
    ("cross_entropy", "mean", False), ("cross_entropy", "none", True)])  # fmt: skip
def test_split_backward_op_opcheck(loss, reduction, per_row):
    # The split form's backward op: schema, fake shapes and dispatch, from real row statistics.

    x, other = _inputs(loss, (3, 50), torch.float32)
    kind = config.KINDS[loss]
    _, _, row_stats, n_valid = torch.ops.normlab.entropy_fwd(x, other, kind, "split", 16,
                                                             reduction, -100, True)  # fmt: skip
    g_out = torch.randn(3) if per_row else torch.tensor(1.5)
    args = (x, other, row_stats, g_out, n_valid, kind, 16, reduction, -100)
    torch.library.opcheck(torch.ops.normlab.entropy_split_bwd.default, args)
    # And its value: the reference gradient for that grad_output.
    grad = torch.ops.normlab.entropy_split_bwd(*args)
    _, ref_grad = _ref(loss, x, other, reduction=reduction, weight=g_out)
    _check(loss, torch.zeros(()), grad, torch.zeros(()), ref_grad, torch.float32, 50)


def test_torch_compile_traces_no_cached_helper(monkeypatch):
    # The plan reads the SM count through a functools.cache; Dynamo warns when it traces into one
    # (silent incorrectness "a potential risk"). The losses hand it over as a constant instead.
    import warnings

    from torch._dynamo import utils as dynamo_utils

    monkeypatch.setattr(dynamo_utils, "warn_once_cache", set())  # warn as if for the first time
    x, labels = _inputs("cross_entropy", (4, 30), torch.float32)
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: normlab.cross_entropy(a, b), fullgraph=True,
                             backend="aot_eager")  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = compiled(x, labels)
    assert not [w for w in caught if "lru_cache" in str(w.message)], caught
    assert_close(loss, _ref("cross_entropy", x, labels)[0], dtype=torch.float32, reduce_len=30)


def test_check_labels_refused_inside_torch_compile():
    x, labels = _inputs("cross_entropy", (4, 30), torch.float32)
    compiled = torch.compile(lambda a, b: normlab.cross_entropy(a, b, check_labels=True),
                             fullgraph=True, backend="aot_eager")  # fmt: skip
    with pytest.raises(Exception, match="check_labels=True syncs with the host"):
        compiled(x, labels)


@triton.jit
def _log1p_softplus_kernel(u_ptr, z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    keep = offs < n
    u = tl.load(u_ptr + offs, mask=keep)
    z = tl.load(z_ptr + offs, mask=keep)
    sp, sp_neg = online.softplus_pair(z)
    tl.store(out_ptr + offs, online.log1p(u), mask=keep)
    tl.store(out_ptr + n + offs, sp, mask=keep)
    tl.store(out_ptr + 2 * n + offs, sp_neg, mask=keep)
    tl.store(out_ptr + 3 * n + offs, online.softplus(z), mask=keep)


def test_log1p_and_softplus_pair_against_fp64():
    """JSD's log1p (a series below LOG1P_SERIES_MAX, a log above) and its shared softplus pair,
    element by element against fp64: relative error within 2^-22 on the series' side of the
    switch, 2^-19 on the log's (its docstring's bounds), for u in [0, 1] around the switch and
    z from -100 to 100, +-inf and NaN included. Past e^-87 (fp32's normal range; flushed to 0
    on a GPU) a softplus is exact to 1e-37."""
    switch = online.LOG1P_SERIES_MAX.value
    u = torch.cat([torch.rand(299), torch.logspace(-30, 0, 100),
                   torch.tensor([0.0, 1.0, switch, math.nextafter(switch, 0.0), switch * 1.001])])
    z = torch.cat([torch.linspace(-100, 100, 300), torch.randn(99) * 4,
                   torch.tensor([0.0, math.log(1 / switch), float("inf"), float("-inf"),
                                 float("nan")])])  # fmt: skip
    u, z = u.float(), z.float()
    n = u.numel()
    assert z.numel() == n
    out = torch.empty(4 * n)
    _log1p_softplus_kernel[(1,)](u, z, out, n, BLOCK=triton.next_power_of_2(n))
    got_log1p, sp, sp_neg, sp_one = out.view(4, n)
    want = torch.log1p(u.double())
    rel = ((got_log1p.double() - want).abs() / want.clamp_min(1e-300))[u > 0]
    series = (u > 0)[u > 0] & (u < switch)[u > 0]
    assert rel[series].max() <= 2**-22 and rel[~series].max() <= 2**-19
    assert (got_log1p[u == 0] == 0).all()
    z64 = z.double()
    for got, arg in ((sp, z64), (sp_neg, -z64), (sp_one, z64)):
        expect = torch.nn.functional.softplus(arg, threshold=1000)
        normal = expect.isfinite() & (expect > 1e-37)
        err = (got.double() - expect).abs()
        assert (err / expect)[normal].max() <= 2**-19, arg[normal][(err / expect)[normal].argmax()]
        assert err[expect <= 1e-37].max() <= 1e-37
        assert torch.equal(got.isinf(), expect.isinf()) and torch.equal(got.isnan(), expect.isnan())
