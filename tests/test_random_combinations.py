"""Seeded random combinations of the public ops' options against the fp64 reference.

The other tests pin each rule at its switch; these draw the options together (op, rows, an
awkward width, dtype, weight, bias, offset, strategy, layout, a strided or N-D input; for the
losses form, block cap, reduction, temperature, mask, label options and a teacher of its own
dtype), so that a combination no test names still meets the reference. Case ``i`` draws from
seed ``i``: a failure names the case, and ``-k`` reruns it.
"""

import random

import pytest
import torch
from helpers import assert_close

import normlab
from normlab import ref

# Widths around powers of two, primes and the narrow block-row range, all small enough for the
# interpreter.
WIDTHS = (1, 2, 3, 7, 17, 31, 33, 64, 65, 97, 127, 128, 129, 255, 256, 257, 300, 511, 513, 768,
          1000, 1023, 1025, 1031, 2047, 2049)  # fmt: skip
ROWS = (1, 2, 3, 5, 8, 13, 33, 64, 130)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
NORM_CASES = 40
LOSS_CASES = 30


def _norm_case(seed):
    rng = random.Random(seed)
    op = rng.choice(("rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm"))
    has_w = rng.random() < 0.8
    return {
        "op": op,
        "M": rng.choice(ROWS),
        "N": rng.choice(WIDTHS),
        "dtype": rng.choice(DTYPES),
        "has_w": has_w,
        "has_b": "layer" in op and has_w and rng.random() < 0.7,
        "offset": rng.choice((0.0, 1.0)) if has_w else 0.0,
        "strategy": rng.choice(("auto", "atomic", "two_stage", "persistent")),
        "layout": rng.choice(("auto", "row")),
        "input": rng.choice(("contiguous", "row_strided", "3d")),
    }


def _norm_input(c):
    m, n, dt = c["M"], c["N"], c["dtype"]
    if c["input"] == "row_strided":  # rows of a wider buffer
        return torch.randn(m, n + 5, dtype=dt)[:, :n]
    return torch.randn((1, m, n) if c["input"] == "3d" else (m, n), dtype=dt)


@pytest.mark.parametrize("seed", range(NORM_CASES))
def test_norm_combination_matches_fp64(seed):
    c = _norm_case(seed)
    torch.manual_seed(seed)
    op, dt, eps = c["op"], c["dtype"], 1e-6 if "rms" in c["op"] else 1e-5
    x = _norm_input(c).requires_grad_()
    r = torch.randn(x.shape, dtype=dt).requires_grad_() if op.startswith("add") else None
    scale = 0.1 if c["offset"] else 1.0  # Gemma's offset: weights near 0
    w = ((scale * (1 + 0.1 * torch.randn(c["N"]))).to(dt).requires_grad_()
         if c["has_w"] else None)  # fmt: skip
    b = (0.1 * torch.randn(c["N"])).to(dt).requires_grad_() if c["has_b"] else None
    kw = {"offset": c["offset"], "strategy": c["strategy"], "layout": c["layout"]}
    if op == "rms_norm":
        out = (normlab.rms_norm(x, w, eps, **kw),)
    elif op == "layer_norm":
        out = (normlab.layer_norm(x, w, b, eps, **kw),)
    elif op == "add_rms_norm":
        out = normlab.add_rms_norm(x, r, w, eps, **kw)
    else:
        out = normlab.add_layer_norm(x, r, w, b, eps, **kw)
    leaves = [t for t in (x, r, w, b) if t is not None]
    gys = [torch.randn(o.shape, dtype=dt) for o in out]
    grads = torch.autograd.grad(out, leaves, gys)

    xd, rd, wd, bd = (None if t is None else t.detach().double().requires_grad_()
                      for t in (x, r, w, b))  # fmt: skip
    ref_leaves = [t for t in (xd, rd, wd, bd) if t is not None]
    weight = None if wd is None else wd + c["offset"]
    if rd is None:
        hd = xd
    else:  # h is stored in x's dtype and y normalizes the stored h; gradients pass straight on
        hd = xd + rd
        hd = hd + (hd.to(dt).double() - hd).detach()
    yd = ref.rms_norm(hd, weight, eps) if "rms" in op else ref.layer_norm(hd, weight, bd, eps)
    want = (yd,) if rd is None else (yd, xd + rd)
    want_grads = torch.autograd.grad(want, ref_leaves, [g.double() for g in gys])
    for got, exp in zip(out, want, strict=True):
        assert_close(got, exp, dtype=dt, msg=f"{c} output")
    for got, exp in zip(grads, want_grads, strict=True):
        assert_close(got, exp, dtype=dt, reduce_len=max(c["M"], c["N"]), msg=f"{c} gradient")


def _loss_case(seed):
    rng = random.Random(seed)
    op = rng.choice(("cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl", "jsd"))
    dtype = rng.choice(DTYPES)
    return {
        "op": op,
        "lead": rng.choice(((1,), (3,), (7,), (2, 5), (16,), (33,))),
        "V": rng.choice((1, 2, 3, 17, 100, 127, 128, 129, 1000, 1023, 1025, 2049, 4097, 5003)),
        "dtype": dtype,
        "form": rng.choice(("auto", "fused", "chunked", "split")),
        "reduction": rng.choice(("mean", "sum", "none")),
        "block_cap": rng.choice((None, None, 64, 256, 1024)),
        "temperature": rng.choice((1.0, 1.0, 0.5, 2.0)),
        "mask": rng.random() < 0.3,
        "strided": rng.random() < 0.3,
        "target_dtype": rng.choice((dtype, torch.float32)),
        "beta": rng.choice((0.5, 0.1, 0.9)),
        "label_smoothing": rng.choice((0.0, 0.0, 0.1)),
        "z_loss": rng.choice((0.0, 0.0, 1e-3)),
        "softcap": rng.choice((None, None, 5.0)),
    }


@pytest.mark.parametrize("seed", range(LOSS_CASES))
def test_loss_combination_matches_fp64(seed):
    c = _loss_case(seed)
    torch.manual_seed(seed)
    lead, v, dt = c["lead"], c["V"], c["dtype"]
    logits = torch.randn(*lead, v + 3)[..., :v] if c["strided"] else torch.randn(*lead, v)
    logits = (3 * logits).to(dt).requires_grad_()
    mask = torch.rand(lead) < 0.7 if c["mask"] else None
    kw = {"form": c["form"], "block_cap": c["block_cap"], "reduction": c["reduction"],
          "loss_mask": mask}  # fmt: skip
    ld = logits.detach().double().requires_grad_()
    if c["op"] == "cross_entropy":
        labels = torch.randint(0, v, lead)
        labels[torch.rand(lead) < 0.2] = -100
        options = {k: c[k] for k in ("label_smoothing", "z_loss", "softcap")}
        loss = normlab.cross_entropy(logits, labels, **options, **kw)
        want = ref.cross_entropy_ref(ld, labels, reduction=c["reduction"], loss_mask=mask,
                                     **options)  # fmt: skip
    else:
        target = (3 * torch.randn(*lead, v)).to(c["target_dtype"])
        options = {"temperature": c["temperature"]}
        if c["op"] == "jsd":
            options["beta"] = c["beta"]
        loss = getattr(normlab, c["op"])(logits, target, **options, **kw)
        want = getattr(ref, c["op"] + "_ref")(ld, target.double(), reduction=c["reduction"],
                                              loss_mask=mask, **options)  # fmt: skip
    gl = torch.randn(loss.shape) if c["reduction"] == "none" else torch.tensor(1.0)
    (got,) = torch.autograd.grad(loss, logits, gl.to(loss.dtype))
    (exp,) = torch.autograd.grad(want, ld, gl.double())
    assert_close(loss.float(), want, dtype=torch.float32, reduce_len=ld.numel(),
                 msg=f"{c} loss")  # fmt: skip
    assert_close(got, exp, dtype=dt, reduce_len=v, msg=f"{c} gradient")
