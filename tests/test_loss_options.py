"""The losses' options against fp64 references: temperature, loss_mask, forward KL, JSD's beta,
label smoothing, z-loss, softcap; mixed target dtypes; every form; bad inputs.

Small vocabularies (1, 7, 129, 1000) at a tiny block cap push the fused, chunked and split
forms through their multi-tile paths cheaply under the interpreter. Each case uses a
temperature, a beta and a mask that a wrong 1/T, a swapped beta or a wrong row count would
break (checked by test_checks_fail_a_wrong_scale_beta_or_count).
"""

import math

import pytest
import torch
import triton
import triton.language as tl
from helpers import assert_close, latin
from test_entropy import _assert_rows_close, _grad_rel, _row_scale

import normlab
from normlab import nn, ref
from normlab.losses import config, fused, online

DIST = {
    "reverse_kl": (normlab.reverse_kl, ref.reverse_kl_ref),
    "soft_cross_entropy": (normlab.soft_cross_entropy, ref.soft_cross_entropy_ref),
    "forward_kl": (normlab.forward_kl, ref.forward_kl_ref),
    "jsd": (normlab.jsd, ref.jsd_ref),
}
FORMS = ["fused", "chunked", "split"]
MASK = torch.tensor([True, False, True, True, False])  # 3 of 5 rows counted


def _ref_call(rfn, x, other, weight=None, **kw):
    """fp64 reference loss and gradient of (loss * weight).sum() wrt x."""
    xr = x.detach().double().requires_grad_()
    o = other.double() if other.is_floating_point() else other
    out = rfn(xr, o, **kw)
    (out * (1.0 if weight is None else weight.double())).sum().backward()
    return out.detach(), xr.grad


def _call(fn, x, other, weight=None, **kw):
    xk = x.detach().clone().requires_grad_()
    out = fn(xk, other, **kw)
    (out * (1.0 if weight is None else weight)).sum().backward()
    return out.detach(), xk.grad


def _check(out, grad, ref_out, ref_grad, dtype, n_cols, msg=""):
    assert out.dtype == torch.float32
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=n_cols, msg=f"{msg} loss")
    assert grad.dtype == dtype
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(dtype), f"{msg} grad")


def _dist_inputs(shape, dtype=torch.float32, target_dtype=None, scale=3.0):
    x = (torch.randn(shape) * scale).to(dtype)
    t = (torch.randn(shape) * scale).to(target_dtype or dtype)
    return x, t


def _ref_kw(loss, kw):
    """The public keywords a reference takes (beta only for JSD)."""
    return {k: v for k, v in kw.items() if k != "beta" or loss == "jsd"}


# ---- distribution losses: temperature, mask, beta ---------------------------------------------


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n_cols", [7, 129])
def test_temperature_and_mask(loss, form, n_cols):
    # T = 2.5, rows 1 and 4 masked (and full of NaN: never read, or read and zeroed), mean over
    # the 3 others; JSD at beta = 0.3 (asymmetric). Cap 16: 1 or 9 tiles.
    x, t = _dist_inputs((5, n_cols))
    x[1, 2] = x[4, 0] = float("nan")
    kw = {"temperature": 2.5, "loss_mask": MASK}
    if loss == "jsd":
        kw["beta"] = 0.3
    fn, rfn = DIST[loss]
    out, grad = _call(fn, x, t, form=form, block_cap=16, **kw)
    clean = x.clone()
    clean[~MASK] = 0.0  # the reference's masked rows are finite (their gradient is 0 anyway)
    ref_out, ref_grad = _ref_call(rfn, clean, t, **_ref_kw(loss, kw))
    _check(out, grad, ref_out, ref_grad, torch.float32, n_cols, f"{loss} {form}")
    assert (grad[~MASK] == 0).all()


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_zero_probability_columns(loss, form):
    # Row 0: p = 0 where q > 0 (logits -inf); row 1: q = 0 where p > 0 (target -inf); row 2:
    # both; row 3: neither. A term whose probability is 0 counts 0, so each loss is finite
    # except where it must be infinite (reverse KL's row 1, forward KL's and soft CE's row 0);
    # there the loss is inf and the gradient holds NaN and inf where the fp64 reference does.
    # A kernel that drops the zero-weight test (0 * inf) or that floors an infinite KL fails.
    x, t = _dist_inputs((4, 50))
    x[0, 10:20] = float("-inf")
    t[1, 30:40] = float("-inf")
    x[2, 5:8] = t[2, 5:8] = float("-inf")
    fn, rfn = DIST[loss]
    out, grad = _call(fn, x, t, form=form, block_cap=16, reduction="none")
    ref_out, ref_grad = _ref_call(rfn, x, t, reduction="none")
    infinite = torch.isinf(ref_out)
    assert infinite.sum() == {"reverse_kl": 1, "jsd": 0}.get(loss, 1)
    assert torch.equal(torch.isinf(out), infinite)
    assert torch.equal(torch.isnan(grad), torch.isnan(ref_grad))
    assert torch.equal(torch.isinf(grad), torch.isinf(ref_grad))
    keep = ~infinite
    _check(out[keep], grad[keep], ref_out[keep], ref_grad[keep], torch.float32, 50,
           f"{loss} {form}")


TORCH_COMPOSITES = {  # per row, torch's own ops: what NaN propagation is checked against
    "reverse_kl": lambda x, t: torch.nn.functional.kl_div(
        t.log_softmax(-1), x.log_softmax(-1), log_target=True, reduction="none").sum(-1),
    "forward_kl": lambda x, t: torch.nn.functional.kl_div(
        x.log_softmax(-1), t.log_softmax(-1), log_target=True, reduction="none").sum(-1),
    "soft_cross_entropy": lambda x, t: torch.nn.functional.cross_entropy(
        x, t.softmax(-1), reduction="none"),
}


@pytest.mark.parametrize("special", ["nan", "inf"])
@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_a_nan_target_row_is_nan_as_torch_s(loss, form, special):
    # A NaN or +inf target logit makes its row's q NaN: torch's ops give that row a NaN loss
    # and a NaN gradient in every column, the other rows untouched. So do the kernels and the
    # fp64 reference (a reference that skipped NaN terms as zero-probability ones would not).
    x, t = _dist_inputs((3, 40))
    t[0, 7] = float(special)
    fn, rfn = DIST[loss]
    out, grad = _call(fn, x, t, form=form, block_cap=16, reduction="none")
    ref_out, ref_grad = _ref_call(rfn, x, t, reduction="none")
    for o, g in ((out, grad), (ref_out, ref_grad)):
        assert torch.isnan(o[0]) and torch.isnan(g[0]).all(), loss
        assert torch.isfinite(o[1:]).all() and torch.isfinite(g[1:]).all(), loss
    if loss in TORCH_COMPOSITES:
        xt = x.clone().requires_grad_()
        torch_out = TORCH_COMPOSITES[loss](xt, t)
        (torch_grad,) = torch.autograd.grad(torch_out.sum(), xt)
        assert torch.isnan(torch_out[0]) and torch.isnan(torch_grad[0]).all()
    _check(out[1:], grad[1:], ref_out[1:], ref_grad[1:], torch.float32, 40, f"{loss} {form}")


@pytest.mark.parametrize("loss,form", latin([*DIST, "cross_entropy"], FORMS))
def test_strided_loss_mask(loss, form):
    """A loss_mask that is a strided view (every other element of a longer mask) masks the rows
    it says: the kernels read it by row index, so it must reach them unit-stride."""
    long_mask = torch.tensor([True, False, False, True, True, True, True, False, False, True])
    mask = long_mask[::2]  # [T, F, T, T, F]: MASK's rows, stride 2
    assert torch.equal(mask, MASK) and mask.stride() == (2,)
    x, t = _dist_inputs((5, 33))
    if loss == "cross_entropy":
        labels = torch.randint(0, 33, (5,))
        out, grad = _call(normlab.cross_entropy, x, labels, form=form, loss_mask=mask)
        ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, loss_mask=MASK)
    else:
        fn, rfn = DIST[loss]
        out, grad = _call(fn, x, t, form=form, loss_mask=mask)
        ref_out, ref_grad = _ref_call(rfn, x, t, loss_mask=MASK)
    _check(out, grad, ref_out, ref_grad, torch.float32, 33, f"{loss} {form}")


@pytest.mark.parametrize("loss,form,reduction",  # make test-quick: one reduction per pair
                         latin(list(DIST), FORMS, ["sum", "none"], keep=2, quick=1))
def test_reductions_with_options(loss, form, reduction):
    # V = 1000 at cap 64 (16 tiles; the chunked form's several chunks), a temperature below 1,
    # a per-row weight (reduction "none") or a scalar one. T a power of two: x / T exact in fp32
    # (else its rounding, an ulp of |x / T|, moves a peaked row's gradient past 1e-5 of its
    # largest entry).
    x, t = _dist_inputs((5, 1000))
    weight = torch.tensor([0.5, 1.0, -2.0, 3.0, 0.25]) if reduction == "none" else torch.tensor(3.0)
    kw = {"temperature": 0.5, "loss_mask": MASK, "reduction": reduction}
    if loss == "jsd":
        kw["beta"] = 0.8
    fn, rfn = DIST[loss]
    out, grad = _call(fn, x, t, weight=weight, form=form, block_cap=64, **kw)
    ref_out, ref_grad = _ref_call(rfn, x, t, weight=weight, **_ref_kw(loss, kw))
    assert out.shape == ref_out.shape
    _check(out, grad, ref_out, ref_grad, torch.float32, 1000, f"{loss} {form} {reduction}")
    if reduction == "none":
        assert (out[~MASK] == 0).all()


@pytest.mark.parametrize("form,beta",  # make test-quick: each beta with one form
                         latin(FORMS, [0.1, 0.5, 0.9], keep=3, quick=1))
def test_jsd_beta(form, beta):
    # Against the reference, and JSD_beta(p, q) == JSD_(1-beta)(q, p) (the loss, whose gradient
    # then differs: only the first is checked).
    x, t = _dist_inputs((4, 129))
    out, grad = _call(normlab.jsd, x, t, beta=beta, form=form, block_cap=16, reduction="none")
    ref_out, ref_grad = _ref_call(ref.jsd_ref, x, t, beta=beta, reduction="none")
    _check(out, grad, ref_out, ref_grad, torch.float32, 129, f"beta {beta}")
    swapped = normlab.jsd(t, x, beta=1 - beta, form=form, block_cap=16, reduction="none")
    assert_close(swapped, ref_out, dtype=torch.float32, reduce_len=129)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("beta", [0.1, 0.9])
def test_jsd_nearly_disjoint_rows(form, beta):
    # Logits scaled by 10 over 4099 columns: p and q put their mass on different columns, the
    # loss sits near its bound H(beta) and the gradient (1 - b) p (R_p - softplus(z)) is ~1e-8 of
    # p. A softplus taken as a difference of logs near log p (|log p| 2^-24 of absolute error)
    # is off by up to the gradient's whole size here; softplus of z keeps it to fp32.
    torch.manual_seed(11)
    x, t = _dist_inputs((2, 4099), scale=10.0)
    out, grad = _call(normlab.jsd, x, t, beta=beta, form=form, reduction="none")
    ref_out, ref_grad = _ref_call(ref.jsd_ref, x, t, beta=beta, reduction="none")
    bound = -beta * math.log(beta) - (1 - beta) * math.log(1 - beta)  # H(beta)
    assert (bound - ref_out).abs().max() < 1e-3  # the regime: a saturated loss
    _check(out, grad, ref_out, ref_grad, torch.float32, 4099, f"beta {beta}")


@pytest.mark.parametrize("form", FORMS)
def test_forward_kl_is_soft_ce_minus_target_entropy(form):
    # KL(q || p) = H(q, p) - H(q): the same gradient as soft CE, the loss lower by H(q).
    x, t = _dist_inputs((3, 129))
    fkl, g_fkl = _call(normlab.forward_kl, x, t, form=form, block_cap=16, reduction="none")
    sce, g_sce = _call(normlab.soft_cross_entropy, x, t, form=form, block_cap=16, reduction="none")
    entropy = -(t.double().softmax(-1) * t.double().log_softmax(-1)).sum(-1)
    assert_close(fkl, sce.double() - entropy, dtype=torch.float32, reduce_len=129)
    assert_close(g_fkl, g_sce, dtype=torch.float32)


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_one_column_and_masked_vocab(loss, form):
    # V = 1: every loss is 0 with a zero gradient; exactly at T = 1. Under a temperature a
    # logit's shifted value x / T - max / T is one FMA (online.shifted), which leaves the
    # rounding of max / T: within 2^-23 of the logits' scale, not 0. A -inf tail (a padded
    # vocab) in both logits and target: those terms count 0, their gradient is 0.
    x, t = _dist_inputs((3, 1))
    out, grad = _call(DIST[loss][0], x, t, form=form, reduction="none")
    assert (out == 0).all() and (grad == 0).all()
    out, grad = _call(DIST[loss][0], x, t, form=form, temperature=3.0, reduction="none")
    bound = 2.0**-23 * (x.abs().max() + t.abs().max()).item()
    assert out.abs().max() <= bound and grad.abs().max() <= bound
    x, t = _dist_inputs((3, 129))
    x[:, 100:] = t[:, 100:] = float("-inf")
    kw = {"temperature": 2.0} if loss != "jsd" else {"temperature": 2.0, "beta": 0.25}
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=16, reduction="none", **kw)
    ref_out, ref_grad = _ref_call(DIST[loss][1], x, t, reduction="none", **kw)
    assert torch.isfinite(out).all() and (grad[:, 100:] == 0).all()
    _check(out, grad, ref_out, ref_grad, torch.float32, 129, f"{loss} {form}")


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_temperature_at_wide_logits(loss, form):
    # Logits ~1e3 under T = 3 (1/T not a power of two): each logit meets its row's shift as one
    # FMA with the rounded 1/T (online.shifted). Loss and gradient against fp64's x / T. Rows
    # this peaked have gradients near 0 whose terms (log p - log q ~ |x| / T) carry fp32's
    # rounding: an absolute floor of 2^-22 of that scale (a wrong 1/T errs by O(p)).
    x, t = _dist_inputs((3, 129), scale=1e3)
    kw = {"temperature": 3.0} if loss != "jsd" else {"temperature": 3.0, "beta": 0.3}
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=16, reduction="none", **kw)
    ref_out, ref_grad = _ref_call(DIST[loss][1], x, t, reduction="none", **kw)
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=129, msg=f"{loss} {form} loss")
    floor = 2.0**-22 * (x.abs().max() + t.abs().max()).item() / 3.0
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(torch.float32),
                       f"{loss} {form} grad", floor=floor)


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n_cols", [13, 20])
def test_ragged_last_tile(loss, form, n_cols):
    # A last tile of 16 lanes with 13 or 4 columns in it: the masked lanes must load as -inf (as
    # 0 they would count e^0 in the row sums of p and q). fp32 rows of 13 are not 16-byte aligned
    # (whole vectors loaded, the lanes dropped in registers); rows of 20 are (an exact mask).
    x, t = _dist_inputs((3, n_cols))
    kw = {"beta": 0.3} if loss == "jsd" else {}
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=16, reduction="none", **kw)
    ref_out, ref_grad = _ref_call(DIST[loss][1], x, t, reduction="none", **kw)
    _check(out, grad, ref_out, ref_grad, torch.float32, n_cols, f"{loss} {form}")


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_temperature_at_its_floor(loss, form):
    # config.TEMPERATURE_MIN: logits up to fp16's largest (65504) under T = 1.5 * 2^-14 (1/T
    # not a power of two, so the shift rounds) put |x / T| just under 2^30, where that rounding
    # is 64 at most and e^64 still sums: finite, and fp64's values (as the test above).
    x, t = _dist_inputs((3, 129))
    x, t = (v / v.abs().max() * 65504.0 for v in (x, t))
    temperature = 1.5 * config.TEMPERATURE_MIN
    kw = {"temperature": temperature} if loss != "jsd" else {"temperature": temperature,
                                                             "beta": 0.3}  # fmt: skip
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=16, reduction="none", **kw)
    ref_out, ref_grad = _ref_call(DIST[loss][1], x, t, reduction="none", **kw)
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=129, msg=f"{loss} {form} loss")
    floor = 2.0**-22 * (x.abs().max() + t.abs().max()).item() / temperature
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(torch.float32),
                       f"{loss} {form} grad", floor=floor)


@pytest.mark.parametrize("form", FORMS)
def test_temperature_at_its_ceiling(form):
    # config.TEMPERATURE_MAX: 1/T = 2^-64, a normal fp32, so x / T is ~1e-19 and every row is
    # uniform to fp32: soft CE is log V, reverse KL 0, each with a gradient of 0 (to rounding).
    x, t = _dist_inputs((3, 129))
    kw = {"temperature": config.TEMPERATURE_MAX, "reduction": "none", "form": form}
    out, grad = _call(normlab.soft_cross_entropy, x, t, **kw)
    assert_close(out, torch.full((3,), math.log(129.0)), dtype=torch.float32, reduce_len=129)
    assert grad.abs().max() <= 2.0**-40
    out, grad = _call(normlab.reverse_kl, x, t, **kw)
    assert out.abs().max() <= 2.0**-20 and grad.abs().max() <= 2.0**-40


@pytest.mark.parametrize("loss", list(DIST))
@pytest.mark.parametrize("form", FORMS)
def test_nan_row_with_temperature(loss, form):
    # A NaN in a counted row: that row's loss and whole gradient NaN, the others exact.
    x, t = _dist_inputs((3, 40))
    t[1, 5] = float("nan")
    kw = {"temperature": 2.0} if loss != "jsd" else {"temperature": 2.0, "beta": 0.7}
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=16, reduction="none", **kw)
    assert torch.isnan(out[1]) and torch.isnan(grad[1]).all()
    ref_out, ref_grad = _ref_call(DIST[loss][1], x[[0, 2]], t[[0, 2]], reduction="none", **kw)
    _check(out[[0, 2]], grad[[0, 2]], ref_out, ref_grad, torch.float32, 40)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_rows_masked(form, reduction):
    # As F.cross_entropy with every label ignored: "mean" NaN, "sum" 0, "none" zeros; gradient 0.
    x, t = _dist_inputs((4, 50))
    mask = torch.zeros(4, dtype=torch.bool)
    for fn in (normlab.reverse_kl, normlab.jsd):
        out, grad = _call(fn, x, t, form=form, reduction=reduction, loss_mask=mask)
        if reduction == "mean":
            assert math.isnan(out.item())
        else:
            assert (out == 0).all()
        assert (grad == 0).all()
    labels = torch.tensor([1, 2, 3, -100])
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, reduction=reduction,
                      loss_mask=mask)  # fmt: skip
    assert math.isnan(out.item()) if reduction == "mean" else (out == 0).all()
    assert (grad == 0).all()


# ---- mixed dtypes -------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["reverse_kl", "jsd"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.float32),
                                    (torch.float32, torch.float16)])  # fmt: skip
def test_target_in_its_own_dtype(loss, form, dtypes):
    # An fp32 teacher for a bf16 student (and the other way round): read as it is, the gradient
    # in logits' dtype. V = 203: bf16 rows off 16-byte boundaries (no aligned frames: the two
    # tensors' rows differ).
    x, t = _dist_inputs((3, 203), dtypes[0], dtypes[1])
    kw = {"temperature": 1.3} if loss == "reverse_kl" else {"beta": 0.4}
    out, grad = _call(DIST[loss][0], x, t, form=form, block_cap=64, **kw)
    ref_out, ref_grad = _ref_call(DIST[loss][1], x, t, **kw)
    _check(out, grad, ref_out, ref_grad, dtypes[0], 203, f"{loss} {form}")


def _record_launches(monkeypatch):
    """The (args, kwargs) of every fused launch from now on (the launches still run)."""
    seen = []
    real = fused.launch

    def record(fn, grid, *args, **kwargs):
        seen.append((args, kwargs))
        return real(fn, grid, *args, **kwargs)

    monkeypatch.setattr(fused, "launch", record)
    return seen


def test_target_not_copied(monkeypatch):
    # The kernel gets the caller's target tensor itself (same storage, same dtype).
    seen = _record_launches(monkeypatch)
    x = torch.randn(3, 50, dtype=torch.bfloat16)
    t = torch.randn(3, 50, dtype=torch.float32)
    normlab.forward_kl(x, t, form="fused")
    ((args, _),) = seen
    assert args[1].data_ptr() == t.data_ptr() and args[1].dtype == torch.float32


def test_default_call_passes_no_options(monkeypatch):
    # Default options: no Options object, no option argument to the kernels (which then compile
    # as before); any option: the kernels get them.
    seen = _record_launches(monkeypatch)
    x, t = _dist_inputs((2, 30))
    labels = torch.tensor([1, 2])
    normlab.reverse_kl(x, t, form="fused")
    normlab.cross_entropy(x, labels, form="fused", label_smoothing=0.0, z_loss=0.0)
    assert not any("XFORM" in k or "mask_ptr" in k for _, k in seen)
    normlab.reverse_kl(x, t, form="fused", temperature=2.0)
    kwargs = seen[-1][1]
    assert kwargs["XFORM"] == config.XFORMS["temperature"] and kwargs["xparam"] == 0.5


@pytest.mark.parametrize("form", ["fused", "chunked", "split"])
def test_softcap_takes_the_approximate_tanh_on_16_bit_logits(monkeypatch, form):
    """On a GPU, a softcap over 16-bit logits compiles with tanh.approx.f32 (its error below
    theirs); fp32 logits, and any under the interpreter, keep the exact tanh. Every form hands
    the rule its logits' element size."""
    assert config.softcap_xform(2) == config.XFORMS["softcap"]  # the interpreter
    monkeypatch.setattr(config._runtime, "INTERPRET", False)
    assert config.softcap_xform(2) == config.XFORMS["softcap_approx"]
    assert config.softcap_xform(4) == config.XFORMS["softcap"]
    monkeypatch.setattr(config._runtime, "INTERPRET", True)
    sizes, real = [], config.kernel_args

    def spy(spec, mask, logit_bytes=4):
        sizes.append(logit_bytes)
        return real(spec, mask, logit_bytes)

    monkeypatch.setattr(config, "kernel_args", spy)
    labels = torch.tensor([1, 2])
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        normlab.cross_entropy(torch.randn(2, 30, dtype=dtype), labels, form=form, softcap=5.0)
        assert sizes and set(sizes) == {dtype.itemsize}, dtype
        sizes.clear()


# ---- label cross-entropy: label smoothing, z-loss, softcap -------------------------------------


CE_OPTIONS = [
    {"label_smoothing": 0.1},
    {"z_loss": 1e-2},
    {"softcap": 2.0},
    {"label_smoothing": 0.25, "z_loss": 3e-2, "softcap": 4.0},
]


def _ce_inputs(n_cols, n_rows=5):
    x = torch.randn(n_rows, n_cols) * 3
    labels = torch.randint(0, n_cols, (n_rows,))
    labels[1] = -100  # an ignored row
    return x, labels


@pytest.mark.parametrize("options", CE_OPTIONS, ids=lambda o: ",".join(o))
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n_cols", [7, 129])
def test_cross_entropy_options(options, form, n_cols):
    x, labels = _ce_inputs(n_cols)
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=16, **options)
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, **options)
    _check(out, grad, ref_out, ref_grad, torch.float32, n_cols, f"{options} {form}")
    assert (grad[1] == 0).all()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_options_with_mask(form, reduction):
    # A loss_mask on top of ignore_index: rows 1 (ignored), 3 (masked) count 0, "mean" over 3.
    x, labels = _ce_inputs(1000)
    mask = torch.tensor([True, True, True, False, True])
    weight = torch.tensor([0.5, 1.0, -2.0, 3.0, 0.25]) if reduction == "none" else torch.tensor(2.0)
    kw = {"label_smoothing": 0.2, "z_loss": 1e-3, "softcap": 5.0, "loss_mask": mask,
          "reduction": reduction}  # fmt: skip
    out, grad = _call(normlab.cross_entropy, x, labels, weight=weight, form=form, block_cap=64,
                      **kw)  # fmt: skip
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, weight=weight, **kw)
    _check(out, grad, ref_out, ref_grad, torch.float32, 1000, f"{form} {reduction}")
    assert (grad[[1, 3]] == 0).all()


def test_label_smoothing_is_torch_s():
    # The reference itself: F.cross_entropy(label_smoothing=) in fp64, by its definition.
    x, labels = _ce_inputs(11)
    eps, valid = 0.3, labels != -100
    logp = x.double().log_softmax(-1)
    picked = logp[valid].gather(1, labels[valid, None])[:, 0]
    rows = -(1 - eps) * picked - eps * logp[valid].mean(-1)
    torch.testing.assert_close(ref.cross_entropy_ref(x.double(), labels, label_smoothing=eps),
                               rows.mean())  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n_cols", [301, 304])
def test_label_smoothing_keeps_torch_s_inf_for_a_minus_inf_logit(form, dtype, n_cols):
    # Smoothing sums every logit, so one -inf logit makes torch's smoothed loss +inf (its
    # gradient stays finite: -eps / V there). A -inf logit in a whole tile, in the ragged last
    # tile, in the first tile (rows of 301 columns start off 16-byte boundaries: the aligned
    # frames' peeled edge tiles) and in column 200 (rows of 304 are aligned: the chunked form's
    # first chunk ends there in an edge tile), beside a row with none and an ignored row whose
    # -inf stays uncounted; the masked lanes past the row's end must not count as -inf.
    x, labels = _ce_inputs(n_cols, n_rows=6)
    x = x.to(dtype)
    x[0, 70] = x[1, 296] = x[2, 1] = x[5, 200] = float("-inf")
    labels[1], labels[4] = 3, -100  # row 4 is ignored
    x[4, 100] = float("-inf")
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=64,
                      label_smoothing=0.2, reduction="none")  # fmt: skip
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, label_smoothing=0.2,
                                  reduction="none")  # fmt: skip
    assert torch.isinf(ref_out[[0, 1, 2, 5]]).all() and ref_out[4] == 0
    assert torch.equal(torch.isinf(out), torch.isinf(ref_out)) and (out[[0, 1, 2, 5]] > 0).all()
    finite = torch.isfinite(ref_out)
    assert_close(out[finite], ref_out[finite], dtype=torch.float32, reduce_len=n_cols)
    assert torch.isfinite(grad.float()).all() and torch.isfinite(ref_grad).all()
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), _grad_rel(dtype), form)


@pytest.mark.parametrize("form", FORMS)
def test_softcap_bounds_the_logits(form):
    # Huge logits under a cap of 3: finite, as the capped reference; -inf logits become -3. The
    # cap's derivative 1 - tanh^2 is ~1e-9 at |logit| ~ 1e4, 0 in fp32: an absolute floor.
    x, labels = _ce_inputs(129)
    x = x * 1e4
    x[0, 5] = float("-inf")
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=16, softcap=3.0,
                      reduction="none")  # fmt: skip
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, softcap=3.0, reduction="none")
    assert torch.isfinite(out).all() and torch.isfinite(grad).all()
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=129)
    _assert_rows_close(grad, ref_grad, _row_scale(ref_grad), 1e-5, form, floor=1e-7)


@pytest.mark.parametrize("form", FORMS)
def test_options_with_grad_accumulate(form):
    x, t = _dist_inputs((5, 129))
    buf = torch.zeros(5, 129)
    out = normlab.jsd(x, t, beta=0.35, temperature=4.0, loss_mask=MASK, form=form, block_cap=16,
                      grad_accumulate=buf)  # fmt: skip
    ref_out, ref_grad = _ref_call(ref.jsd_ref, x, t, beta=0.35, temperature=4.0, loss_mask=MASK)
    assert_close(out, ref_out, dtype=torch.float32, reduce_len=129)
    _assert_rows_close(buf, ref_grad, _row_scale(ref_grad), 1e-5, "jsd accumulate")
    x, labels = _ce_inputs(129)
    buf = torch.zeros(5, 129)
    normlab.cross_entropy(x, labels, label_smoothing=0.1, z_loss=1e-2, softcap=4.0, form=form,
                          block_cap=16, reduction="sum", grad_accumulate=buf)  # fmt: skip
    _, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, label_smoothing=0.1, z_loss=1e-2,
                            softcap=4.0, reduction="sum")  # fmt: skip
    _assert_rows_close(buf, ref_grad, _row_scale(ref_grad), 1e-5, "ce accumulate")


def test_checks_fail_a_wrong_scale_beta_or_count():
    # The cases above would notice a gradient missing its 1/T, a JSD at 1 - beta, or a mean over
    # all rows instead of the counted ones: each differs from the reference well past _check.
    x, t = _dist_inputs((5, 129))
    ref_out, ref_grad = _ref_call(ref.reverse_kl_ref, x, t, temperature=2.5, loss_mask=MASK)
    with pytest.raises(AssertionError):
        _check(ref_out.float(), (ref_grad * 2.5).float(), ref_out, ref_grad, torch.float32, 129)
    with pytest.raises(AssertionError):  # mean over 5 rows, not 3
        _check((ref_out * 3 / 5).float(), ref_grad.float(), ref_out, ref_grad, torch.float32, 129)
    j_out, _ = _ref_call(ref.jsd_ref, x, t, beta=0.3)
    j_swapped, _ = _ref_call(ref.jsd_ref, x, t, beta=0.7)
    with pytest.raises(AssertionError):
        assert_close(j_swapped.float(), j_out, dtype=torch.float32, reduce_len=129)


# ---- torch.compile, modules, patch -------------------------------------------------------------


@pytest.mark.slow  # seconds each (compile or opcheck): out of make test-quick
@pytest.mark.parametrize("form", FORMS)
def test_torch_compile_with_options(form):
    x, t = _dist_inputs((2, 3, 60))
    mask = torch.tensor([[True, False, True], [True, True, False]])
    labels = torch.randint(0, 60, (2, 3))

    def step(x, t, labels):
        a = normlab.jsd(x, t, beta=0.3, temperature=2.0, loss_mask=mask, form=form, block_cap=16)
        b = normlab.cross_entropy(x, labels, label_smoothing=0.1, z_loss=1e-2, softcap=5.0,
                                  loss_mask=mask, form=form, block_cap=16)  # fmt: skip
        return a + b

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    xc = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(compiled(xc, t, labels), xc)
    xr = x.double().requires_grad_()
    expect = (ref.jsd_ref(xr, t.double(), beta=0.3, temperature=2.0, loss_mask=mask)
              + ref.cross_entropy_ref(xr, labels, label_smoothing=0.1, z_loss=1e-2, softcap=5.0,
                                      loss_mask=mask))  # fmt: skip
    (ref_grad,) = torch.autograd.grad(expect, xr)
    assert_close(grad, ref_grad, dtype=torch.float32, reduce_len=60)


@pytest.mark.slow  # seconds each (compile or opcheck): out of make test-quick
def test_custom_op_opcheck_with_options():
    x, t = _dist_inputs((3, 50))
    x.requires_grad_()
    mask = torch.tensor([True, False, True])
    for form in ("fused", "split"):
        args = (x, t, config.KINDS["jsd"], form, 16, "mean", -100, True, mask, 2.0, 0.3, 0.0, 0.0,
                0.0)  # fmt: skip
        torch.library.opcheck(torch.ops.normlab.entropy_fwd.default, args)


def test_modules_with_options():
    x, t = _dist_inputs((3, 40))
    mask = torch.tensor([True, False, True])
    for module, fn, kw in [
        (nn.ForwardKLLoss(temperature=2.0), normlab.forward_kl, {"temperature": 2.0}),
        (nn.JSDLoss(beta=0.2, reduction="sum"), normlab.jsd, {"beta": 0.2, "reduction": "sum"}),
        (nn.ReverseKLLoss(temperature=0.5), normlab.reverse_kl, {"temperature": 0.5}),
        (nn.SoftCrossEntropyLoss(temperature=3.0), normlab.soft_cross_entropy,
         {"temperature": 3.0}),
    ]:  # fmt: skip
        assert torch.equal(module(x, t, mask), fn(x, t, loss_mask=mask, **kw))
        assert "temperature" in repr(module)
    assert "beta=0.2" in repr(nn.JSDLoss(beta=0.2))
    labels = torch.tensor([1, -100, 5])
    ce = nn.CrossEntropyLoss(label_smoothing=0.1, z_loss=1e-3, softcap=6.0)
    assert isinstance(ce, torch.nn.CrossEntropyLoss) and ce.label_smoothing == 0.1
    assert repr(ce) == ("CrossEntropyLoss(ignore_index=-100, reduction='mean', "
                        "label_smoothing=0.1, z_loss=0.001, softcap=6.0)")  # fmt: skip
    assert repr(nn.CrossEntropyLoss()) == "CrossEntropyLoss(ignore_index=-100, reduction='mean')"
    assert_close(ce(x, labels), ref.cross_entropy_ref(x.double(), labels, label_smoothing=0.1,
                                                      z_loss=1e-3, softcap=6.0),
                 dtype=torch.float32, reduce_len=40)  # fmt: skip
    with pytest.raises(ValueError, match="weight"):
        nn.CrossEntropyLoss(weight=torch.ones(40))


def test_causal_lm_loss_passes_options():
    from normlab.patching import causal_lm_loss

    logits = torch.randn(2, 6, 30)
    labels = torch.randint(0, 30, (2, 6))
    out = causal_lm_loss(logits, labels, 30, label_smoothing=0.1, z_loss=1e-2)
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    expect = ref.cross_entropy_ref(logits.double().reshape(-1, 30), shifted.reshape(-1),
                                   label_smoothing=0.1, z_loss=1e-2)  # fmt: skip
    assert_close(out, expect, dtype=torch.float32, reduce_len=30)
    with pytest.raises(ValueError, match="form must be one of"):  # form reaches cross_entropy
        causal_lm_loss(logits, labels, 30, form="rowwise")
    for form in ("fused", "chunked", "split"):
        leaf = logits.clone().requires_grad_()
        out = causal_lm_loss(leaf, labels, 30, form=form)
        (grad,) = torch.autograd.grad(out, leaf)
        ref_leaf = logits.double().requires_grad_()
        expect = ref.cross_entropy_ref(ref_leaf.reshape(-1, 30), shifted.reshape(-1))
        (ref_grad,) = torch.autograd.grad(expect, ref_leaf)
        assert_close(out, expect, dtype=torch.float32, reduce_len=30)
        assert_close(grad, ref_grad, dtype=torch.float32, reduce_len=30)


def test_registry_and_bytes_models():
    from normlab.bench import registry, traffic

    for op in ("forward_kl", "jsd"):
        assert {"eager", "compile", "normlab"} <= set(registry.REGISTRY[op])
        for direction in ("fwd", "fwd+bwd"):
            assert traffic.bytes_moved(op, direction, 8, 100) == traffic.bytes_moved(
                "reverse_kl", direction, 8, 100)
    assert registry.REGISTRY["jsd"]["liger"].unavailable() is not None  # no GPU / liger here
    call = registry.get("jsd", "normlab").build(3, 40, torch.float32, "fwd+bwd", "cpu")
    (grad,) = call()
    assert grad.shape == (3, 40) and torch.isfinite(grad).all()


# ---- bad inputs ---------------------------------------------------------------------------------


BAD = [
    ("temperature", lambda x, t, y: normlab.reverse_kl(x, t, temperature=0.0)),
    ("temperature", lambda x, t, y: normlab.soft_cross_entropy(x, t, temperature=-1.0)),
    ("temperature", lambda x, t, y: normlab.forward_kl(x, t, temperature=float("inf"))),
    ("temperature", lambda x, t, y: normlab.jsd(x, t, temperature=float("nan"))),
    ("temperature", lambda x, t, y: normlab.reverse_kl(x, t, temperature="2")),
    ("temperature", lambda x, t, y: normlab.reverse_kl(x, t, temperature=True)),
    ("temperature", lambda x, t, y: normlab.soft_cross_entropy(
        x, t, temperature=math.nextafter(config.TEMPERATURE_MIN, 0.0))),
    ("temperature", lambda x, t, y: normlab.jsd(
        x, t, temperature=math.nextafter(config.TEMPERATURE_MAX, math.inf))),
    ("beta", lambda x, t, y: normlab.jsd(x, t, beta=0.0)),
    ("beta", lambda x, t, y: normlab.jsd(x, t, beta=1.0)),
    ("beta", lambda x, t, y: normlab.jsd(x, t, beta=1.5)),
    ("beta", lambda x, t, y: normlab.jsd(x, t, beta=True)),
    ("loss_mask shape", lambda x, t, y: normlab.reverse_kl(x, t, loss_mask=MASK[:4].reshape(2, 2))),
    ("loss_mask shape", lambda x, t, y: normlab.cross_entropy(x, y, loss_mask=MASK[:3])),
    ("loss_mask dtype", lambda x, t, y: normlab.jsd(x, t, loss_mask=torch.ones(4))),
    ("loss_mask on", lambda x, t, y: normlab.forward_kl(x, t, loss_mask=MASK[:4].to("meta"))),
    ("loss_mask must be a", lambda x, t, y: normlab.jsd(x, t, loss_mask=[True] * 4)),
    ("softcap", lambda x, t, y: normlab.cross_entropy(x, y, softcap=0.0)),
    ("softcap", lambda x, t, y: normlab.cross_entropy(x, y, softcap=-2.0)),
    ("label_smoothing", lambda x, t, y: normlab.cross_entropy(x, y, label_smoothing=-0.1)),
    ("label_smoothing", lambda x, t, y: normlab.cross_entropy(x, y, label_smoothing=1.1)),
    ("z_loss", lambda x, t, y: normlab.cross_entropy(x, y, z_loss=-1e-4)),
    ("target_logits dtype", lambda x, t, y: normlab.forward_kl(x, t.to(torch.int32))),
]


@pytest.mark.parametrize("match,call", BAD, ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_options(match, call):
    x, t = torch.randn(4, 40), torch.randn(4, 40)
    y = torch.tensor([0, 39, -100, 3])
    exc = TypeError if "dtype" in match or "must be a" in match else ValueError
    with pytest.raises(exc, match=match):
        call(x, t, y)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("lanes", ["one, tile sum", "one, a sum a tile", "many"])
def test_label_smoothing_logit_sum_by_lane(form, lanes, monkeypatch):
    # Tiles of one lane (as 4096 and wider on a GPU): the smoothed logit sum is kept in partial
    # sums of online.SMOOTH_PART logits (SMOOTH_TILE_SUM) reduced once a row or chunk, or one
    # sum per tile; and tiles of many lanes.
    # V = 300 at tile 64: four whole tiles and a ragged one. Row 2 is shifted by 50 (a wrong or
    # double-counted tile would show); with a cap, row 0 holds -inf logits in a whole tile and in
    # the ragged one, each capped to -4 and summed as -4 (a whole tile sums the held tanh with no
    # -inf test, the ragged one drops its masked lanes).
    if lanes != "many":
        monkeypatch.setattr(config, "ENTROPY_LANE_MAX_BLOCK", 32)
    monkeypatch.setattr(config, "ENTROPY_CHUNKED_TILES", 2)
    monkeypatch.setattr(online, "SMOOTH_TILE_SUM", tl.constexpr(lanes == "one, tile sum"))
    assert (config.entropy_lane(64) == 64) == (lanes != "many")
    x, labels = _ce_inputs(300)
    capped = x.clone()
    capped[0, 70:90] = float("-inf")
    capped[0, 280:290] = float("-inf")
    x[2] += 50.0
    for logits, kw in ((x, {"label_smoothing": 0.3}),
                       (capped, {"label_smoothing": 0.2, "softcap": 4.0, "z_loss": 1e-2})):
        out, grad = _call(normlab.cross_entropy, logits, labels, form=form, block_cap=64,
                          reduction="none", **kw)  # fmt: skip
        ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, logits, labels, reduction="none",
                                      **kw)  # fmt: skip
        assert torch.isfinite(out).all()
        _check(out, grad, ref_out, ref_grad, torch.float32, 300, f"{form} {kw}")


@pytest.mark.parametrize("label_after", [True, False])
@pytest.mark.parametrize("form", ["fused", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_label_after_the_loops(form, dtype, label_after, monkeypatch):
    # online.LABEL_AFTER (the default; NORMLAB_LOSS_LABEL_AFTER=0 turns it off): the tiles leave
    # the label's one-hot out and label_fixup writes the label's column after them. Both ways:
    # labels in the first, an inner, the last whole and the ragged tile, at both ends of the row
    # and at a tile's edge; an ignored row; V = 301 (bf16 rows off 16-byte boundaries: the
    # aligned frames' edge tiles); every option; against fp64. grad_accumulate keeps the one-hot
    # in the loops.
    monkeypatch.setattr(online, "LABEL_AFTER", tl.constexpr(label_after))
    n_cols = 301
    x = (torch.randn(7, n_cols) * 3).to(dtype)
    labels = torch.tensor([0, 63, 64, 150, 300, -100, 299])
    for kw in ({}, {"label_smoothing": 0.2},
               {"label_smoothing": 0.1, "z_loss": 1e-2, "softcap": 4.0}):  # fmt: skip
        out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=64,
                          reduction="none", **kw)  # fmt: skip
        ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, reduction="none", **kw)
        _check(out, grad, ref_out, ref_grad, dtype, n_cols, f"{form} {kw}")
    buf = torch.ones(7, n_cols, dtype=dtype)
    normlab.cross_entropy(x, labels, form=form, block_cap=64, reduction="sum",
                          grad_accumulate=buf)  # fmt: skip
    _, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, reduction="sum")
    _assert_rows_close(buf.float() - 1.0, ref_grad, _row_scale(ref_grad), _grad_rel(dtype),
                       "grad_accumulate")  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_softcap_far_above_the_logits(form):
    # A cap of 1e3 over logits ~3: tanh's argument sits near 0, where 1 - 2 / (exp(2v) + 1)
    # cancels (an absolute error ~1e-7 c = 1e-4 on a logit); the Taylor branch keeps the capped
    # logits, hence loss and gradient, to fp32 accuracy.
    x, labels = _ce_inputs(129)
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=16, softcap=1e3,
                      reduction="none")  # fmt: skip
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, softcap=1e3, reduction="none")
    _check(out, grad, ref_out, ref_grad, torch.float32, 129, form)


@triton.jit
def _poly_exp2_kernel(v_ptr, out3_ptr, out5_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    v = tl.load(v_ptr + offs, mask=keep)
    tl.store(out3_ptr + offs, online.poly_exp2(v, 3), mask=keep)
    tl.store(out5_ptr + offs, online.poly_exp2(v, 5), mask=keep)


def test_poly_exp2_against_fp64():
    # The FMA pipe's 2^v (softcap's gradient with SOFTCAP_POLY_EXP2), each degree within its
    # stated relative error over every exponent it builds, the reduction's rounding ties
    # (v = k + 1/2) included; below -126 about 2^-126, NaN stays NaN. A coefficient, the
    # exponent's bias or the reduction off by one fails this.
    v = torch.cat([torch.linspace(-126.0, 3.0, 100003), torch.arange(-126, 4) + 0.5,
                   torch.rand(4096) * -126.0])  # fmt: skip
    v = torch.cat([v, torch.tensor([float("-inf"), -1e4, -126.5, float("nan")])])
    out3, out5 = torch.empty_like(v), torch.empty_like(v)
    _poly_exp2_kernel[(triton.cdiv(v.numel(), 1024),)](v, out3, out5, v.numel(), BLOCK=1024)
    want = torch.exp2(v.double().clamp(min=-126.0))  # below -126: 2^-126
    for out, bound in ((out3, 7.6e-5), (out5, 2.5e-7)):
        rel = (out[:-1].double() / want[:-1] - 1.0).abs()
        assert rel.max() < bound, (rel.max().item(), bound)
        assert torch.isnan(out[-1])
    # degree 3 is not degree 5: the coarse one is no better than 1e-5
    assert (out3[:-1].double() / want[:-1] - 1.0).abs().max() > 1e-5


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softcap_gradient_exp_on_the_fma_pipe(form, dtype, monkeypatch):
    # SOFTCAP_POLY_EXP2 (NORMLAB_LOSS_POLY_EXP2=1): the gradient pass's e^v from poly_exp2
    # (degree 5 here, where the interpreter's tanh is exact; 3 on a GPU's tanh.approx), the
    # statistics' from the usual exp. Against fp64: V = 301 (ragged and edge tiles), an ignored
    # row, a -inf logit, softcap alone and with the other options, a NaN row.
    n_cols = 301
    x = (torch.randn(6, n_cols) * 8).to(dtype)
    x[2, 40] = float("-inf")
    labels = torch.tensor([0, -100, 40 + 1, 150, 300, 64])
    _, mufu_grad = _call(normlab.cross_entropy, x.float(), labels, form=form, softcap=4.0)
    monkeypatch.setattr(online, "SOFTCAP_POLY_EXP2", tl.constexpr(True))
    _, poly_grad = _call(normlab.cross_entropy, x.float(), labels, form=form, softcap=4.0)
    assert not torch.equal(poly_grad, mufu_grad)  # the switch reaches the kernels
    for kw in ({"softcap": 4.0}, {"softcap": 30.0},
               {"label_smoothing": 0.1, "z_loss": 1e-2, "softcap": 4.0}):  # fmt: skip
        out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=64,
                          reduction="none", **kw)  # fmt: skip
        ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, reduction="none", **kw)
        _check(out, grad, ref_out, ref_grad, dtype, n_cols, f"{form} {kw}")
        assert (grad[1] == 0).all()
    x[4, 7] = float("nan")
    _, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=64, softcap=4.0)
    assert torch.isnan(grad[4]).all() and torch.isfinite(grad[[0, 2, 3, 5]]).all()


def test_thread_statistics_rule(monkeypatch):
    # config.entropy_threads: 32 num_warps for label CE's one-lane tiles (not a softcap in the
    # fused form), where a thread holds whole 16-byte vectors of the tile; 0 otherwise or with
    # the switch off.
    ce, rkl, lane_max = config.CE, config.KINDS["reverse_kl"], config.ENTROPY_LANE_MAX_BLOCK
    assert config.ENTROPY_THREAD_STATS  # on by default
    assert config.entropy_threads(ce, 4096, 4, 2) == 128  # 4 vectors of 8 a thread
    assert config.entropy_threads(ce, 4096, 4, 2, fused_softcap=True) == 0
    assert config.entropy_threads(ce, 4096, 4, 4) == 128
    assert config.entropy_threads(ce, 2 * lane_max, 4, 2) == 128  # the narrowest one-lane tile
    assert config.entropy_threads(ce, lane_max, 4, 2) == 0  # lanes of a few columns
    assert config.entropy_threads(rkl, 4096, 4, 2) == 0  # label CE only
    assert config.entropy_threads(ce, 4096, 32, 2) == 0  # 1024 threads x 8 > the tile
    assert config.entropy_threads(ce, 8192, 16, 2) == 512
    assert config.entropy_threads(ce, 8192, 16, 4) == 512
    monkeypatch.setattr(config, "ENTROPY_THREAD_STATS", False)
    assert config.entropy_threads(ce, 4096, 4, 2) == 0
    spec = config.Spec(ce, "fused", 4096, "mean", -100, None, 0, 10)
    # the fused launcher passes kernel_args' XFORM at or past softcap's (either tanh) as
    # fused_softcap
    softcap = config.XFORMS["softcap"]
    assert config.kernel_args(spec, None).get("XFORM", 0) < softcap  # no options: {}
    capped = spec._replace(options=config.Options(softcap=30.0))
    assert config.kernel_args(capped, None, 2)["XFORM"] >= softcap
    assert config.kernel_args(capped, None, 4)["XFORM"] >= softcap
    hot = spec._replace(kind=config.KINDS["reverse_kl"], options=config.Options(temperature=2))
    assert config.kernel_args(hot, None)["XFORM"] < softcap  # a temperature is not a softcap


@pytest.mark.parametrize("form", ["fused", "chunked"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_label_ce_statistics_per_thread(form, dtype, monkeypatch):
    # ENTROPY_THREAD_STATS: label CE's one-lane tiles keep a max and sum-exp per thread
    # (online.thread_grid), a softcap's calls in the fused form the old path. One-lane tiles of
    # 256 at one warp (the lane limit and the chunked warps moved down for the interpreter):
    # V = 1031 (a prime: rows off 16 bytes in bf16, so framed, with a peeled first tile and an
    # edge tile), -inf logits in a whole and in an edge tile, an ignored row, each option, a NaN
    # row; against fp64.
    monkeypatch.setattr(config, "ENTROPY_THREAD_STATS", True)
    monkeypatch.setattr(config, "ENTROPY_LANE_MAX_BLOCK", 128)
    monkeypatch.setattr(config, "ENTROPY_CHUNKED_WARPS", 1)
    from normlab.losses import chunked

    module = fused if form == "fused" else chunked
    threads = []

    def record(fn, grid, *args, _real=module.launch, **kwargs):
        if "THREADS" in kwargs:  # the loss kernel, not the rescale
            threads.append(kwargs["THREADS"])
        return _real(fn, grid, *args, **kwargs)

    monkeypatch.setattr(module, "launch", record)
    n_cols = 1031
    x = (torch.randn(6, n_cols) * 3).to(dtype)
    x[2, 40] = float("-inf")
    x[3, n_cols - 2] = float("-inf")
    labels = torch.tensor([0, -100, 41, 150, n_cols - 1, 64])
    for kw in ({}, {"label_smoothing": 0.1}, {"z_loss": 1e-2}, {"softcap": 4.0},
               {"label_smoothing": 0.1, "z_loss": 1e-2, "softcap": 4.0}):  # fmt: skip
        threads.clear()
        out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=256,
                          reduction="none", **kw)  # fmt: skip
        # the per-thread path ran (not for a softcap in the fused form)
        old_path = "softcap" in kw and form == "fused"
        assert threads and set(threads) == ({0} if old_path else {32}), threads
        ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, reduction="none", **kw)
        if "label_smoothing" in kw and "softcap" not in kw:  # -inf logits: +inf, as torch's
            assert torch.isinf(out[[2, 3]]).all() and torch.isinf(ref_out[[2, 3]]).all()
            keep = [0, 1, 4, 5]
            _check(out[keep], grad[keep], ref_out[keep], ref_grad[keep], dtype, n_cols, str(kw))
        else:
            _check(out, grad, ref_out, ref_grad, dtype, n_cols, f"{form} {kw}")
        assert (grad[1] == 0).all() and out[1] == 0
    # label smoothing's one sum a tile (NORMLAB_LOSS_SMOOTH_TILE_SUM=0) beside statistics per
    # thread
    monkeypatch.setattr(online, "SMOOTH_TILE_SUM", tl.constexpr(False))
    threads.clear()
    kw = {"label_smoothing": 0.1}
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=256,
                      reduction="none", **kw)  # fmt: skip
    assert set(threads) == {32}, threads
    ref_out, ref_grad = _ref_call(ref.cross_entropy_ref, x, labels, reduction="none", **kw)
    assert torch.isinf(out[[2, 3]]).all()
    keep = [0, 1, 4, 5]
    _check(out[keep], grad[keep], ref_out[keep], ref_grad[keep], dtype, n_cols, "one sum a tile")
    x[4, 7] = float("nan")
    out, grad = _call(normlab.cross_entropy, x, labels, form=form, block_cap=256,
                      reduction="none")  # fmt: skip
    assert torch.isnan(out[4]) and torch.isnan(grad[4]).all()
    assert torch.isfinite(grad[[0, 2, 3, 5]]).all()


def test_temperature_and_jsd_take_the_held_state_cap(monkeypatch):
    # The chunked form holds its last tile across its wait: with a temperature or JSD it takes
    # at most ENTROPY_CHUNKED_HELD_STATE_CAP (config). The rule at the measured vocabularies:
    wide, cap = 131072, config.ENTROPY_CHUNKED_HELD_STATE_CAP
    for loss in ("reverse_kl", "soft_cross_entropy", "forward_kl"):
        assert config.entropy_auto(loss, wide, False) == ("chunked", 2048)
        assert config.entropy_auto(loss, wide, False, temperature=True) == ("chunked", cap)
        assert config.entropy_auto(loss, 32768, False, temperature=True) == ("fused", 2048)
        assert config.entropy_auto(loss, wide, True, temperature=True) == ("split", 2048)
    assert config.entropy_auto("jsd", wide, False) == ("chunked", cap)
    assert config.entropy_auto("jsd", 32768, False) == ("fused", 2048)
    # fewer rows than SMs move a fused call to the chunked form, which takes the cap too
    assert config.entropy_auto("reverse_kl", 32768, False, 3, 132, temperature=True) == (
        "chunked", cap)
    # The launch: a chunked reverse KL at cap 64, the held-state cap moved to 16; T = 1 keeps 64.
    monkeypatch.setattr(config, "ENTROPY_AUTO", {**config.ENTROPY_AUTO,
                                                 "reverse_kl": (("chunked", 64),) * 4})
    monkeypatch.setattr(config, "ENTROPY_CHUNKED_HELD_STATE_CAP", 16)
    from normlab.losses import chunked

    blocks = []

    def record(fn, grid, *args, _real=chunked.launch, **kwargs):
        blocks.append(kwargs["BLOCK"])
        return _real(fn, grid, *args, **kwargs)

    monkeypatch.setattr(chunked, "launch", record)
    x, t = _dist_inputs((3, 301))
    for temperature, block in ((1.0, 64), (2.0, 16)):
        blocks.clear()
        out, grad = _call(normlab.reverse_kl, x, t, temperature=temperature, reduction="none")
        assert set(blocks) == {block}, (temperature, blocks)
        ref_out, ref_grad = _ref_call(ref.reverse_kl_ref, x, t, temperature=temperature,
                                      reduction="none")
        _check(out, grad, ref_out, ref_grad, torch.float32, 301, f"T {temperature}")
