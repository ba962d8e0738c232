"""Every op, strategy, layout and form against the fp64 reference on the GPU, plus what the CPU
tests cannot show: determinism, CUDA-graph capture and replay, torch.compile, the lean launch
path's kernel choice, NORMLAB_AUTOTUNE=1, row offsets past 2**31 elements (4.3 GB inputs),
and inputs on a GPU other than the current one (with two GPUs).

    python3 benchmarks/gpu_check.py --out out/gpu_check.json

Each check draws fresh random data, compares by ‖out − ref‖ / ‖ref‖ per tensor (NaN never
passes) against ``normlab.ref``'s tolerance for the dtype, and prints one line; the exit code is
the number of failures. The JSON holds every check with its error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

import normlab
from normlab import _launch, ref

# The last two lie in LayerNorm's forward windows (config.NORM_FWD_BLOCK_ROW).
NORM_SHAPES = [(1, 8192), (7, 1), (33, 200), (257, 2880), (1000, 24), (4096, 12288),
               (1000003, 200), (3, 65536), (131, 5120), (65536, 257), (2048, 16385),
               (557, 8209), (100003, 1), (5596, 214), (9673, 23), (5265, 1), (3001, 5),
               (300, 15), (2053, 1000), (263, 8190), (100003, 127), (16411, 63), (3001, 4323),
               (1517, 9693), (12, 973), (14, 1022), (24, 3001), (32, 4096),
               (1000, 14336), (1655, 400), (4099, 2048)]  # fmt: skip
LOSS_SHAPES = [(1, 32000), (37, 50257), (256, 131072), (64, 151936), (5, 1000)]
LOSS_FORMS = ("fused", "chunked", "split")
REL_TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 2e-3}
results: list[dict] = []


def _rel(out, want, scale: float = 0.0) -> float:
    """‖out − want‖ / max(‖want‖, scale); NaN must sit where the reference has NaN."""
    out, want = out.detach().double(), want.detach().double()
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(out), nan):
        return float("inf")
    out, want = out[~nan], want[~nan]
    if not torch.isfinite(out).all():
        return float("inf")
    if want.numel() == 0:
        return 0.0
    return float((out - want).norm() / max(float(want.norm()), scale, 1e-30))


def _tol(want, dtype) -> float:
    """The dtype's tolerance, or twice the error of rounding the exact result to the dtype
    (fp16 gradients of 1e-5 are subnormal: the format itself cannot do better)."""
    return max(REL_TOL[dtype], 2 * _rel(want.to(dtype), want))


def record(name: str, errors: dict[str, float], tol: float | dict[str, float]) -> None:
    tols = tol if isinstance(tol, dict) else dict.fromkeys(errors, tol)
    ok = all(e <= tols[k] for k, e in errors.items())
    results.append({"check": name, "ok": ok, "tol": tols, "errors": errors})
    worst = max((e / max(tols[k], 1e-30), k) for k, e in errors.items()) if errors else (0, "")
    print(f"{'ok  ' if ok else 'FAIL'} {name}: worst {worst[1]} at {worst[0]:.2f}x its tolerance",
          flush=True)


def _norm_call(op, x, w, b, **kw):
    return normlab.rms_norm(x, w, 1e-6, **kw) if op == "rms_norm" else normlab.layer_norm(
        x, w, b, 1e-5, **kw)  # fmt: skip


def check_norms(dtype) -> None:
    for op, (M, N) in itertools.product(("rms_norm", "layer_norm"), NORM_SHAPES):
        layouts = ["auto", "row"] + (["block_row"] if N <= 256 else [])
        for layout, strategy in itertools.product(layouts, normlab.norms.STRATEGIES):
            if layout == "block_row" and strategy not in ("auto", "persistent"):
                continue
            if M * N > 2**27 and (layout, strategy) != ("auto", "auto"):
                continue  # the largest shapes: the default only
            x = (torch.randn(M, N, device="cuda") * 3 + 1).to(dtype).requires_grad_()
            w = (1 + 0.2 * torch.randn(N, device="cuda")).to(dtype).requires_grad_()
            b = None if op == "rms_norm" else (0.1 * torch.randn(N, device="cuda")).to(dtype)
            if b is not None:
                b.requires_grad_()
            dy = torch.randn(M, N, device="cuda", dtype=dtype)
            params = [t for t in (x, w, b) if t is not None]
            y = _norm_call(op, x, w, b, strategy=strategy, layout=layout)
            grads = torch.autograd.grad(y, params, dy)
            xd = x.detach().double()
            if op == "rms_norm":
                want_y = ref.rms_norm(xd, w.detach().double(), 1e-6)
            else:
                want_y = ref.layer_norm(xd, w.detach().double(), b.detach().double(), 1e-5)
            want = ref.norm_backward(dy.double(), xd, w.detach().double(),
                                     None if b is None else b.detach().double(),
                                     1e-6 if op == "rms_norm" else 1e-5, op == "rms_norm")
            # dx = rstd * (w*dy - xhat*c1 - c2) cancels to ~eps/x^2 at N = 1: measure its error
            # against the size of the terms that cancel, which fp32 arithmetic resolves.
            centred = xd if op == "rms_norm" else xd - xd.mean(-1, keepdim=True)
            rstd = centred.square().mean(-1, keepdim=True).add(1e-5).rsqrt()
            dx_scale = float((dy.double() * w.detach().double() * rstd).norm())
            errors = {"y": _rel(y, want_y)}
            tols = {"y": _tol(want_y, dtype)}
            for name, g, wg in zip(("dx", "dw", "db"), grads, want, strict=False):
                errors[name] = _rel(g, wg, dx_scale if name == "dx" else 0.0)
                tols[name] = _tol(wg, dtype)
            record(f"{op} {M}x{N} {dtype} layout={layout} strategy={strategy}", errors, tols)
            if strategy in ("two_stage", "persistent") and M * N <= 2**24:
                again = torch.autograd.grad(_norm_call(op, x, w, b, strategy=strategy,
                                                       layout=layout), params, dy)  # fmt: skip
                same = all(torch.equal(g, a) for g, a in zip(grads, again, strict=True))
                record(f"{op} {M}x{N} {dtype} {layout}/{strategy} bitwise deterministic",
                       {"differs": 0.0 if same else 1.0}, 0.0)


# The options' shapes: one row, narrow block-row rows, a masked wide row, the chunked forward
# (RMSNorm's looped rows, LayerNorm past 16384), the two-pass and the split-row backward.
NORM_OPTION_SHAPES = [(1, 8192), (1000, 24), (65536, 257), (257, 2880), (4096, 12288),
                      (3, 65536), (2048, 16385), (557, 8209), (1031, 768),
                      (4096, 4096), (2003, 1457), (2000, 16384)]  # fmt: skip


def check_norm_options(dtype) -> None:
    """add_rms_norm / add_layer_norm with offset=1 (zero-centred weights): y, h, and the
    gradients of x, the residual and the parameters from both outputs, at every layout/strategy."""
    for op, (M, N) in itertools.product(("add_rms_norm", "add_layer_norm"), NORM_OPTION_SHAPES):
        is_rms = op == "add_rms_norm"
        eps = 1e-6 if is_rms else 1e-5
        layouts = ["auto", "row"] + (["block_row"] if N <= 256 else [])
        for layout, strategy in itertools.product(layouts, normlab.norms.STRATEGIES):
            if layout == "block_row" and strategy not in ("auto", "persistent"):
                continue
            if M * N > 2**26 and (layout, strategy) != ("auto", "auto"):
                continue
            x = torch.randn(M, N, device="cuda").to(dtype).requires_grad_()
            r = (2 * torch.randn(M, N, device="cuda")).to(dtype).requires_grad_()
            w = (0.3 * torch.randn(N, device="cuda")).to(dtype).requires_grad_()
            b = None if is_rms else (0.1 * torch.randn(N, device="cuda")).to(dtype).requires_grad_()
            gy, gh = (torch.randn(M, N, device="cuda", dtype=dtype) for _ in range(2))
            params = [t for t in (x, r, w, b) if t is not None]
            kw = {"offset": 1.0, "strategy": strategy, "layout": layout}
            y, h = (normlab.add_rms_norm(x, r, w, eps, **kw) if is_rms
                    else normlab.add_layer_norm(x, r, w, b, eps, **kw))  # fmt: skip
            grads = torch.autograd.grad((y, h), params, (gy, gh))
            want_h = ref.residual_sum(x.detach(), r.detach())
            hd = want_h.double().requires_grad_()
            wd = w.detach().double().requires_grad_()
            bd = None if is_rms else b.detach().double().requires_grad_()
            want_y = (ref.rms_norm(hd, wd, eps, 1.0) if is_rms
                      else ref.layer_norm(hd, wd, bd, eps, 1.0))  # fmt: skip
            loss = (want_y * gy.double()).sum() + (hd * gh.double()).sum()
            want = torch.autograd.grad(loss, [t for t in (hd, wd, bd) if t is not None])
            errors = {"y": _rel(y, want_y.detach()), "h": 0.0 if torch.equal(h, want_h) else 1.0}
            tols = {"y": _tol(want_y.detach(), dtype), "h": 0.0}
            for name, g, wg in zip(("dx", "dresidual", "dw", "db"), grads,
                                   (want[0], *want), strict=False):  # fmt: skip
                errors[name] = _rel(g, wg)
                tols[name] = _tol(wg, dtype)
            record(f"{op} {M}x{N} {dtype} offset=1 layout={layout} strategy={strategy}", errors,
                   tols)  # fmt: skip


def _loss_ref(op, logits, other, reduction="mean", scale=1.0):
    """(loss, gradient) of op's fp64 reference times ``scale``."""
    lg = logits.detach().double().requires_grad_()
    fn = {"reverse_kl": ref.reverse_kl_ref, "soft_cross_entropy": ref.soft_cross_entropy_ref,
          "cross_entropy": ref.cross_entropy_ref}[op]  # fmt: skip
    other = other.double() if other.is_floating_point() else other
    loss = fn(lg, other, reduction=reduction) * scale
    (g,) = torch.autograd.grad(loss, lg)
    return loss.detach(), g


def check_losses(dtype) -> None:
    for op, (M, V), form in itertools.product(
            ("reverse_kl", "soft_cross_entropy", "cross_entropy"), LOSS_SHAPES, LOSS_FORMS):
        logits = (2 * torch.randn(M, V, device="cuda")).to(dtype).requires_grad_()
        if op == "cross_entropy":
            other = torch.randint(0, V, (M,), device="cuda")
            other[:: 7] = -100
        else:
            other = (2 * torch.randn(M, V, device="cuda")).to(dtype)
        loss = getattr(normlab, op)(logits, other, form=form)
        (g,) = torch.autograd.grad(loss, logits)
        want_loss, want_g = _loss_ref(op, logits, other)
        record(f"{op} {M}x{V} {dtype} form={form}",
               {"loss": _rel(loss.reshape(1), want_loss.reshape(1)), "grad": _rel(g, want_g)},
               {"loss": REL_TOL[dtype], "grad": _tol(want_g, dtype)})


def check_zero_probability(dtype) -> None:
    """Columns where p = 0 (logits -inf), q = 0 (target -inf) or both, a row of each and a
    clean row, in every form: the kernels floor a zero-weight term's factor with the GPU's
    max.f32, whose NaN semantics the interpreter does not show. Finite rows against fp64;
    infinite ones (reverse KL's q = 0 row, forward KL's and soft CE's p = 0 row) must be inf,
    with the reference's NaN and inf in their gradient."""
    refs = {"reverse_kl": ref.reverse_kl_ref, "forward_kl": ref.forward_kl_ref,
            "soft_cross_entropy": ref.soft_cross_entropy_ref, "jsd": ref.jsd_ref}
    for (op, ref_fn), V, form in itertools.product(refs.items(), (50257, 131072), LOSS_FORMS):
        x = 2 * torch.randn(4, V, device="cuda")
        t = 2 * torch.randn(4, V, device="cuda")
        x[0, 100:9000] = float("-inf")  # whole tiles and ragged ends
        t[1, 3:5000] = float("-inf")
        x[2, V - 4100:] = t[2, V - 4100:] = float("-inf")
        x, t = x.to(dtype).requires_grad_(), t.to(dtype)
        loss = getattr(normlab, op)(x, t, form=form, reduction="none")
        (g,) = torch.autograd.grad(loss.sum(), x)
        xr = x.detach().double().requires_grad_()
        want = ref_fn(xr, t.double(), reduction="none")
        (want_g,) = torch.autograd.grad(want.sum(), xr)
        loss, want = loss.detach(), want.detach()
        inf = torch.isinf(want)
        same = (torch.equal(torch.isinf(loss), inf) and torch.equal(g.isnan(), want_g.isnan())
                and torch.equal(g.isinf(), want_g.isinf()))  # fmt: skip
        record(f"{op} zero-probability columns 4x{V} {dtype} form={form}",
               {"pattern": 0.0 if same else float("inf"),
                "loss": _rel(loss[~inf], want[~inf]), "grad": _rel(g[~inf], want_g[~inf])},
               {"pattern": 0.0, "loss": REL_TOL[dtype], "grad": _tol(want_g[~inf], dtype)})


def check_smoothing_minus_inf(dtype) -> None:
    """Label smoothing sums every logit, so a -inf logit makes torch's smoothed loss +inf, with
    a finite gradient: in whole tiles, in the last tile, at a ragged row end off its 16-byte
    frame (V = 50257), beside a clean row and an ignored row holding -inf, in every form."""
    for V, form in itertools.product((50257, 131072), LOSS_FORMS):
        x = 2 * torch.randn(4, V, device="cuda")
        x[0, 100:9000] = float("-inf")
        x[1, V - 3] = x[3, 7] = float("-inf")
        labels = torch.tensor([1, 2, 3, -100], device="cuda")
        x = x.to(dtype).requires_grad_()
        loss = normlab.cross_entropy(x, labels, form=form, reduction="none", label_smoothing=0.1)
        (g,) = torch.autograd.grad(loss.sum(), x)
        xr = x.detach().double().requires_grad_()
        want = ref.cross_entropy_ref(xr, labels, reduction="none", label_smoothing=0.1)
        (want_g,) = torch.autograd.grad(want.sum(), xr)
        loss, want = loss.detach(), want.detach()
        inf = torch.isinf(want)
        same = torch.equal(torch.isinf(loss), inf) and bool(torch.isfinite(g).all())
        record(f"cross_entropy smoothing -inf logits 4x{V} {dtype} form={form}",
               {"pattern": 0.0 if same else float("inf"), "loss": _rel(loss[~inf], want[~inf]),
                "grad": _rel(g, want_g)},
               {"pattern": 0.0, "loss": REL_TOL[dtype], "grad": _tol(want_g, dtype)})


LOSS_OPTION_CASES = {  # name -> (normlab function, fp64 reference, keyword options, labels?)
    "forward_kl": ("forward_kl", ref.forward_kl_ref, {}, False),
    "jsd beta=0.3": ("jsd", ref.jsd_ref, {"beta": 0.3}, False),
    "reverse_kl T=2 mask": ("reverse_kl", ref.reverse_kl_ref, {"temperature": 2.0}, False),
    "soft_cross_entropy T=0.5": ("soft_cross_entropy", ref.soft_cross_entropy_ref,
                                 {"temperature": 0.5}, False),
    "cross_entropy smoothing z softcap mask": ("cross_entropy", ref.cross_entropy_ref,
                                               {"label_smoothing": 0.1, "z_loss": 1e-4,
                                                "softcap": 30.0}, True),
    "cross_entropy smoothing mask": ("cross_entropy", ref.cross_entropy_ref,
                                     {"label_smoothing": 0.1}, True),
    "cross_entropy softcap mask": ("cross_entropy", ref.cross_entropy_ref, {"softcap": 30.0},
                                   True),
}  # fmt: skip


def check_loss_options(dtype, prefixes=("",)) -> None:
    """The loss options (temperature, loss_mask, forward KL, JSD, label smoothing, z-loss,
    softcap) and an fp32 teacher beside a low-precision student, in every form; only the cases
    whose name starts with one of ``prefixes``."""
    cases = {k: v for k, v in LOSS_OPTION_CASES.items() if k.startswith(tuple(prefixes))}
    for (name, (op, ref_fn, kw, labels)), (M, V), form in itertools.product(
            cases.items(), [(37, 50257), (8, 131072)], LOSS_FORMS):
        logits = (2 * torch.randn(M, V, device="cuda")).to(dtype).requires_grad_()
        mask = torch.rand(M, device="cuda") > 0.3
        mask[0] = True
        teachers = [torch.float32] if labels else [dtype, torch.float32]
        for teacher in teachers:
            if labels:
                other = torch.randint(0, V, (M,), device="cuda")
                other[::5] = -100
            else:
                other = (2 * torch.randn(M, V, device="cuda")).to(teacher)
            loss = getattr(normlab, op)(logits, other, form=form, loss_mask=mask, **kw)
            (g,) = torch.autograd.grad(loss, logits)
            lg = logits.detach().double().requires_grad_()
            want = ref_fn(lg, other.double() if other.is_floating_point() else other,
                          loss_mask=mask, **kw)  # fmt: skip
            (want_g,) = torch.autograd.grad(want, lg)
            what = "" if labels or teacher == dtype else " fp32 teacher"
            record(f"{name}{what} {M}x{V} {dtype} form={form}",
                   {"loss": _rel(loss.reshape(1), want.detach().reshape(1)),
                    "grad": _rel(g, want_g)},
                   {"loss": REL_TOL[dtype], "grad": _tol(want_g, dtype)})  # fmt: skip


def check_graphs() -> None:
    """Capture each op's forward+backward in a CUDA graph; replays on new data equal eager."""
    M, N, V = 512, 4096, 32768
    cases = {
        "rms_norm": lambda x, t: normlab.rms_norm(x, w_n),
        "layer_norm": lambda x, t: normlab.layer_norm(x, w_n, b_n),
        "reverse_kl fused": lambda x, t: normlab.reverse_kl(x, t, form="fused"),
        "reverse_kl chunked": lambda x, t: normlab.reverse_kl(x, t, form="chunked"),
        "reverse_kl split": lambda x, t: normlab.reverse_kl(x, t, form="split"),
        "cross_entropy": lambda x, t: normlab.cross_entropy(x, t.argmax(-1)),
        "jsd chunked": lambda x, t: normlab.jsd(x, t, form="chunked"),
        "forward_kl split": lambda x, t: normlab.forward_kl(x, t, form="split"),
        "add_rms_norm": lambda x, t: normlab.add_rms_norm(x, t, w_n)[0],
        "rms_norm 3x20000 (split rows)": lambda x, t: normlab.rms_norm(x, w_w),
    }
    w_n = torch.randn(N, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b_n = torch.randn(N, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w_w = torch.randn(20000, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    for name, fn in cases.items():
        rows, cols = (3, 20000) if "split rows" in name else (M, N if "norm" in name else V)
        x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        t = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)

        def step(fn=fn, x=x, t=t):  # this iteration's case
            out = fn(x, t)
            (gx,) = torch.autograd.grad(out.float().sum() if out.dim() else out, (x,))
            return out, gx

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            g_out, g_gx = step()
        errors = {}
        for k in range(3):
            with torch.no_grad():
                x.copy_(torch.randn_like(x))
                t.copy_(torch.randn_like(t))
            graph.replay()
            e_out, e_gx = step()
            errors[f"out{k}"] = _rel(g_out, e_out)
            errors[f"grad{k}"] = _rel(g_gx, e_gx)
        record(f"CUDA graph replay == eager: {name}", errors, 1e-6)


def check_compile() -> None:
    """torch.compile(fullgraph=True) and mode="reduce-overhead" against eager. The 64-row label
    CE keeps its eager form inside the graph; the 640-row reverse KL takes the split form there
    (losses.config.ENTROPY_COMPILED_GRAD_FORM) against its eager fused call."""
    x = torch.randn(300, 2880, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(2880, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    logits = torch.randn(64, 50257, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, 50257, (64,), device="cuda")
    student = torch.randn(640, 32768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    teacher = torch.randn(640, 32768, device="cuda", dtype=torch.bfloat16)

    def f(x, w, logits, labels, student, teacher):
        return (normlab.rms_norm(x, w).float().square().mean()
                + normlab.cross_entropy(logits, labels) + normlab.reverse_kl(student, teacher))

    args = (x, w, logits, labels, student, teacher)
    eager = f(*args)
    want = torch.autograd.grad(eager, (x, w, logits, student))
    for mode in ("default", "reduce-overhead"):
        cf = torch.compile(f, fullgraph=True, mode=mode)
        errors = {}
        for k in range(3):
            out = cf(*args)
            grads = torch.autograd.grad(out, (x, w, logits, student))
            errors[f"loss{k}"] = _rel(out.reshape(1), eager.reshape(1))
            errors.update({f"{n}{k}": _rel(g, wg)
                           for n, g, wg in zip("xwls", grads, want, strict=True)})
        record(f"torch.compile(fullgraph=True, mode={mode!r}) == eager", errors, 1e-3)


def check_lean_launch() -> None:
    """The lean launch path gives bitwise what Triton's own dispatch gives, over interleaved
    calls whose widths, dtypes and strides change the specialization."""
    cases = [(64, n, dt) for n in (24, 40, 200, 1000, 1024, 4096, 5000)
             for dt in (torch.bfloat16, torch.float32)]  # fmt: skip

    def run_all():
        outs = []
        for M, N, dt in cases:
            g = torch.Generator(device="cuda").manual_seed(N)
            x = torch.randn(M, N, device="cuda", generator=g).to(dt).requires_grad_()
            w = torch.randn(N, device="cuda", generator=g).to(dt).requires_grad_()
            for fn in (lambda x=x, w=w: normlab.rms_norm(x, w),
                       lambda x=x, w=w: normlab.layer_norm(x, w, w)):
                y = fn()
                outs += [y, *torch.autograd.grad(y, (x, w), torch.ones_like(y))]
            logits = torch.randn(M, 4 * N, device="cuda", generator=g).to(dt).requires_grad_()
            loss = normlab.cross_entropy(logits, torch.randint(0, 4 * N, (M,), device="cuda",
                                                                generator=g))  # fmt: skip
            outs += [loss, *torch.autograd.grad(loss, (logits,))]
        return outs

    lean = run_all()
    _launch.ENABLED = False
    plain = run_all()
    _launch.ENABLED = True
    differ = sum(not torch.equal(a, b) for a, b in zip(lean, plain, strict=True))
    record(f"lean launch == Triton's dispatch, bitwise ({len(lean)} tensors)",
           {"differing": float(differ)}, 0.0)


def check_replay() -> None:
    """Replayed calls (the third of a signature) give bitwise what the launchers give
    (NORMLAB_REPLAY off), for every plan kind: rows, block rows, tiny rows, split rows, wide-row
    chunks, decode rows, the one-program backward, the fused residual add; inference calls
    (no gradient) from their own cache."""
    from normlab.norms import op

    cases = [("rms", 64, 4096), ("ln", 64, 4096), ("rms", 20000, 48), ("ln", 20000, 48),
             ("rms", 5000, 7), ("ln", 3, 65536), ("rms", 3, 65536), ("rms", 300, 20000),
             ("ln", 1, 8192), ("rms", 8, 2048), ("rms", 4, 1024), ("add_rms", 512, 2880),
             ("add_ln", 4096, 200), ("ln", 1000003, 200)]  # fmt: skip

    def run(kind, M, N, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(M, N, device="cuda", generator=g).bfloat16().requires_grad_()
        r = torch.randn(M, N, device="cuda", generator=g).bfloat16().requires_grad_()
        w = torch.randn(N, device="cuda", generator=g).bfloat16().requires_grad_()
        b = torch.randn(N, device="cuda", generator=g).bfloat16().requires_grad_()
        if kind == "rms":
            outs, leaves = (normlab.rms_norm(x, w),), (x, w)
        elif kind == "ln":
            outs, leaves = (normlab.layer_norm(x, w, b),), (x, w, b)
        elif kind == "add_rms":
            outs, leaves = normlab.add_rms_norm(x, r, w), (x, r, w)
        else:
            outs, leaves = normlab.add_layer_norm(x, r, w, b), (x, r, w, b)
        grads = torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs])
        with torch.no_grad():  # an inference call (3-D): its own replay cache
            x3, r3 = x.detach().view(1, M, N), r.detach().view(1, M, N)
            if kind == "rms":
                inference = [normlab.rms_norm(x3, w.detach())]
            elif kind == "ln":
                inference = [normlab.layer_norm(x3, w.detach(), b.detach())]
            elif kind == "add_rms":
                inference = list(normlab.add_rms_norm(x3, r3, w.detach()))
            else:
                inference = list(normlab.add_layer_norm(x3, r3, w.detach(), b.detach()))
        return [*outs, *grads, *inference]

    was = _launch.REPLAY
    for kind, M, N in cases:
        _launch.REPLAY = True
        op._FWD_REPLAYS.clear()
        op._BWD_REPLAYS.clear()
        op._INFERENCE.clear()
        op._GRAD.clear()
        replayed = [run(kind, M, N, seed) for seed in range(3)][-1]
        grad = [r for sig in op._GRAD.values() if sig
                for r in (sig.forward, *sig.backwards.values())]  # fmt: skip
        n_replays = sum(bool(r) for r in (*op._FWD_REPLAYS.values(), *op._BWD_REPLAYS.values(),
                                          *op._INFERENCE.values(), *grad))  # fmt: skip
        # the C++ node (normlab._native) ran the third call's forward and backward
        native = sum(sig.native.n_backwards for sig in op._GRAD.values()
                     if sig and sig.native is not None)  # fmt: skip
        # and replayed the inference call from C++ (its Program, kept on the replay)
        native_inference = sum(bool(r and r.native) for r in op._INFERENCE.values())
        _launch.REPLAY = False
        plain = run(kind, M, N, 2)
        differ = sum(not torch.equal(a, b) for a, b in zip(replayed, plain, strict=True))
        record(f"replay == launchers, bitwise: {kind} {M}x{N} ({n_replays} replays, "
               f"{native} native backwards, {native_inference} native inference)",
               {"differing": float(differ), "not_replayed": float(n_replays < 2)}, 0.0)
    _launch.REPLAY = was


def check_loss_replay() -> None:
    """Replayed loss calls (the third of a signature: its forward, and the backward's rescale
    where grad_output is not 1) give bitwise what the launchers give (NORMLAB_REPLAY off), and
    match fp64: every loss, the fused and chunked forms, each reduction, 3-D logits. A launch-
    bound shape: larger calls sum their loss in torch (config.reduce_in_kernel), which is not
    replayed; nor is JSD, whose beta the kernels take by keyword."""
    from normlab.losses import op as loss_op

    fns = {"cross_entropy": (normlab.cross_entropy, ref.cross_entropy_ref),
           "reverse_kl": (normlab.reverse_kl, ref.reverse_kl_ref),
           "soft_cross_entropy": (normlab.soft_cross_entropy, ref.soft_cross_entropy_ref),
           "forward_kl": (normlab.forward_kl, ref.forward_kl_ref),
           "jsd": (normlab.jsd, ref.jsd_ref)}  # fmt: skip

    def run(loss, form, reduction, seed, shape=(2, 8, 32000)):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (3 * torch.randn(shape, device="cuda", generator=g)).bfloat16().requires_grad_()
        if loss == "cross_entropy":
            other = torch.randint(0, shape[-1], shape[:-1], device="cuda", generator=g)
        else:
            other = (3 * torch.randn(shape, device="cuda", generator=g)).bfloat16()
        out = fns[loss][0](x, other, form=form, reduction=reduction)
        weight = torch.rand(out.shape, device="cuda", generator=g) + 0.5
        (grad,) = torch.autograd.grad(out, (x,), weight)
        return x, other, weight, out, grad

    was = _launch.REPLAY
    for loss in fns:
        for form in ("fused", "chunked"):
            for reduction in ("mean", "none"):
                _launch.REPLAY = True
                loss_op._SIGNATURES.clear()
                x, other, weight, out, grad = [run(loss, form, reduction, seed)
                                               for seed in range(3)][-1]  # fmt: skip
                sig = next(iter(loss_op._SIGNATURES.values()), None)
                replayed = bool(sig and sig.replayable and sig.forwards and sig.rescales)
                wrong_replay = float(replayed != (loss != "jsd"))
                _launch.REPLAY = False
                _, _, _, plain_out, plain_grad = run(loss, form, reduction, 2)
                xd = x.detach().double().requires_grad_()
                o = other.double() if other.is_floating_point() else other
                want = fns[loss][1](xd, o, reduction=reduction)
                (want_grad,) = torch.autograd.grad(want, (xd,), weight.double())
                differ = float(not torch.equal(out, plain_out)) + float(
                    not torch.equal(grad, plain_grad))  # fmt: skip
                record(f"loss replay: {loss} {form} {reduction}",
                       {"differing": differ, "replayed_as_not_expected": wrong_replay,
                        "loss": _rel(out.detach(), want.detach()),
                        "grad": _rel(grad, want_grad)},
                       {"differing": 0.0, "replayed_as_not_expected": 0.0, "loss": 1e-4,
                        "grad": 1e-2})  # fmt: skip
    _launch.REPLAY = was


def check_fused_grid() -> None:
    """Label CE's fused grid through the public call (config.takes_fused_grid): a shape the rule
    takes on this card (its rows filling 0.6 of the L2, four rounds; the loss summed by torch),
    half the labels ignored, each reduction called three times (the third replays where the
    call records), against fp64 and bitwise against one program a row; the kept ticket and
    queue back at 0."""
    from normlab import _runtime
    from normlab.losses import config as loss_config
    from normlab.losses import fused
    from normlab.losses import op as loss_op

    programs = loss_config.ENTROPY_FUSED_PROGRAMS_PER_SM * _runtime.sm_count()
    fill = sum(loss_config.ENTROPY_FUSED_L2_FILL) / 2 * _runtime.l2_bytes()
    M, V = 4 * programs, 16 * round(fill / (programs * 2) / 16)
    grids = []
    launch = fused.launch

    def launch_spy(kernel, grid, *args, **kwargs):
        if kernel is fused._entropy_fused_kernel:
            grids.append(grid[0])
        return launch(kernel, grid, *args, **kwargs)

    def run(reduction, seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = (3 * torch.randn(M, V, device="cuda", generator=g)).bfloat16().requires_grad_()
        labels = torch.randint(0, V, (M,), device="cuda", generator=g)
        labels[torch.rand(M, device="cuda", generator=g) < 0.5] = -100
        out = normlab.cross_entropy(x, labels, form="fused", reduction=reduction)
        weight = torch.rand(out.shape, device="cuda", generator=g) + 0.5
        (grad,) = torch.autograd.grad(out, (x,), weight)
        return x, labels, weight, out, grad

    switch = loss_config.ENTROPY_FUSED_STRIDE
    fused.launch = launch_spy
    try:
        for reduction in ("mean", "none"):
            loss_op._SIGNATURES.clear()
            grids.clear()
            x, labels, weight, out, grad = [run(reduction, seed) for seed in range(3)][-1]
            taken = bool(grids) and set(grids) == {programs}  # (a replay launches unseen)
            loss_config.ENTROPY_FUSED_STRIDE = False
            loss_op._SIGNATURES.clear()
            _, _, _, row_out, row_grad = run(reduction, 2)
            loss_config.ENTROPY_FUSED_STRIDE = switch
            xd = x.detach().double().requires_grad_()
            want = ref.cross_entropy_ref(xd, labels, reduction=reduction)
            (want_grad,) = torch.autograd.grad(want, (xd,), weight.double())
            ticket = loss_op._reduction_buffers(x.device, 1)[0]
            record(f"fused grid: cross_entropy {M}x{V} bf16 {reduction}, half ignored, "
                   f"{programs} programs",
                   {"not_taken": float(not taken),
                    "differing": float(not torch.equal(out, row_out))
                    + float(not torch.equal(grad, row_grad)),
                    "queue_left": float(ticket.abs().sum()),
                    "loss": _rel(out.detach(), want.detach()), "grad": _rel(grad, want_grad)},
                   {"not_taken": 0.0, "differing": 0.0, "queue_left": 0.0, "loss": 1e-4,
                    "grad": 1e-2})  # fmt: skip
    finally:
        fused.launch = launch
        loss_config.ENTROPY_FUSED_STRIDE = switch


def check_autotune() -> None:
    code = ("import torch, normlab; from normlab import ref; x = torch.randn(64, 3000, "
            "device='cuda'); w = torch.randn(3000, device='cuda'); "
            "e = (normlab.rms_norm(x, w).double() - ref.rms_norm(x.double(), w.double(), 1e-6))"
            ".abs().max().item(); print(e); assert e < 1e-5")
    env = dict(os.environ, NORMLAB_AUTOTUNE="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    err = float(proc.stdout.split()[-1]) if proc.returncode == 0 else float("inf")
    if proc.returncode:
        print(proc.stderr[-2000:])
    record("NORMLAB_AUTOTUNE=1 forward vs fp64", {"max_abs": err}, 1e-5)


# Rows whose offsets pass 2**31 elements: the last row of each starts at exactly 2**31.
BIG_NORM_SHAPE = (2**31 // 8192 + 1, 8192)
BIG_LOSS_SHAPE = (2**31 // 32768 + 1, 32768)
BIG_CHUNK = 4096  # rows a reference chunk (fp64: 256 MiB at 8192 columns)


def _edge_rows(M: int) -> torch.Tensor:
    """The first and last 64 rows: the last ones lie past 2**31 elements."""
    return torch.cat([torch.arange(64), torch.arange(M - 64, M)]).cuda()


def check_past_int32() -> None:
    """Both norms and every loss form on bf16 inputs of more than 2**31 elements (4.3 GB),
    against fp64 on the rows before and past the boundary; dγ, dβ and the mean loss over every
    row. An int32 row offset anywhere reads or writes another row there."""
    M, N = BIG_NORM_SHAPE
    rows = _edge_rows(M)
    for op in ("rms_norm", "layer_norm"):
        x = torch.randn(M, N, device="cuda", dtype=torch.bfloat16).requires_grad_()
        w = (1 + 0.2 * torch.randn(N, device="cuda")).bfloat16().requires_grad_()
        b = None if op == "rms_norm" else (0.1 * torch.randn(N, device="cuda")).bfloat16()
        params = [x, w] if b is None else [x, w, b.requires_grad_()]
        dy = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
        y = _norm_call(op, x, w, b)
        grads = torch.autograd.grad(y, params, dy)
        y_rows = y.detach()[rows]
        del y
        is_rms, eps = op == "rms_norm", 1e-6 if op == "rms_norm" else 1e-5
        wd, bd = w.detach().double(), None if b is None else b.detach().double()
        want_dw = torch.zeros(N, device="cuda", dtype=torch.float64)
        want_db = torch.zeros_like(want_dw)
        for start in range(0, M, BIG_CHUNK):
            part = slice(start, start + BIG_CHUNK)
            _, dw, db = ref.norm_backward(dy[part].double(), x[part].detach().double(), wd, bd,
                                          eps, is_rms)  # fmt: skip
            want_dw += dw
            if db is not None:
                want_db += db
        xe, dye = x.detach()[rows].double(), dy[rows].double()
        want_y = ref.rms_norm(xe, wd, eps) if is_rms else ref.layer_norm(xe, wd, bd, eps)
        want_dx = ref.norm_backward(dye, xe, wd, bd, eps, is_rms)[0]
        errors = {"y": _rel(y_rows, want_y), "dx": _rel(grads[0][rows], want_dx),
                  "dw": _rel(grads[1], want_dw)}
        if b is not None:
            errors["db"] = _rel(grads[2], want_db)
        wants = {"y": want_y, "dx": want_dx, "dw": want_dw, "db": want_db}
        tols = {k: _tol(wants[k], torch.bfloat16) for k in errors}
        record(f"{op} {M}x{N} bf16 past 2**31 elements", errors, tols)
        del x, dy, grads, y_rows
        torch.cuda.empty_cache()
    M, V = BIG_LOSS_SHAPE
    rows = _edge_rows(M)
    logits = (2 * torch.randn(M, V, device="cuda")).bfloat16().requires_grad_()
    labels = torch.randint(0, V, (M,), device="cuda")
    labels[::7] = -100
    labels[-1] = V - 1  # the last row's label is its last column
    target = (2 * torch.randn(M, V, device="cuda")).bfloat16()
    for op, other in (("cross_entropy", labels), ("reverse_kl", target)):
        count = int((labels != -100).sum()) if op == "cross_entropy" else M
        want_loss = sum(float(_loss_ref(op, logits[s:s + BIG_CHUNK], other[s:s + BIG_CHUNK],
                                        "sum")[0]) for s in range(0, M, BIG_CHUNK)) / count
        _, want_g = _loss_ref(op, logits[rows], other[rows], "sum", 1 / count)
        for form in LOSS_FORMS:
            loss = getattr(normlab, op)(logits, other, form=form)
            (g,) = torch.autograd.grad(loss, logits)
            record(f"{op} {M}x{V} bf16 form={form} past 2**31 elements",
                   {"loss": _rel(loss.reshape(1).double(), torch.tensor([want_loss], device="cuda",
                                                                        dtype=torch.float64)),
                    "grad": _rel(g[rows], want_g)},
                   {"loss": REL_TOL[torch.bfloat16], "grad": _tol(want_g, torch.bfloat16)})
            del g


def check_devices() -> None:
    """Inputs on cuda:1 while cuda:0 is current (Hugging Face's device_map="auto"): every op,
    forward and backward, three calls each (the third replays; the norms' through the C++
    node), against fp64. Needs two GPUs; with one it says so and checks nothing."""
    if torch.cuda.device_count() < 2:
        print("devices: one GPU, nothing to check", flush=True)
        return
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 1)
    M, N, V = 64, 4096, 32000
    for name in ("rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm"):
        for _ in range(3):
            x = torch.randn(M, N, device=dev).bfloat16().requires_grad_()
            r = torch.randn(M, N, device=dev).bfloat16()
            w = torch.randn(N, device=dev).bfloat16().requires_grad_()
            b = torch.randn(N, device=dev).bfloat16()
            if name.startswith("add_"):
                y = getattr(normlab, name)(x, r, w, *([b] if "layer" in name else []))[0]
                want = getattr(ref, name)(x.double(), r.double(), w.double(),
                                          *([b.double()] if "layer" in name else []))[0]
            else:
                y = getattr(normlab, name)(x, w, *([b] if "layer" in name else []))
                want = getattr(ref, name)(x.double(), w.double(),
                                          *([b.double()] if "layer" in name else []))
            dy = torch.randn_like(y)
            dx, dw = torch.autograd.grad(y, (x, w), dy)
            xd, wd = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
            if name.startswith("add_"):
                wy = getattr(ref, name)(xd, r.double(), wd,
                                        *([b.double()] if "layer" in name else []))[0]
            else:
                wy = getattr(ref, name)(xd, wd, *([b.double()] if "layer" in name else []))
            want_dx, want_dw = torch.autograd.grad(wy, (xd, wd), dy.double())
        record(f"{name} {M}x{N} bf16 on cuda:1, cuda:0 current (third call)",
               {"y": _rel(y, want), "dx": _rel(dx, want_dx), "dw": _rel(dw, want_dw)},
               {"y": _tol(want, torch.bfloat16), "dx": _tol(want_dx, torch.bfloat16),
                "dw": _tol(want_dw, torch.bfloat16)})  # fmt: skip
    losses = {"cross_entropy": ref.cross_entropy_ref, "reverse_kl": ref.reverse_kl_ref,
              "forward_kl": ref.forward_kl_ref, "jsd": ref.jsd_ref,
              "soft_cross_entropy": ref.soft_cross_entropy_ref}  # fmt: skip
    for name, want_fn in losses.items():
        for form in LOSS_FORMS:
            for _ in range(3):
                x = torch.randn(M, V, device=dev).bfloat16().requires_grad_()
                t = (torch.randint(0, V, (M,), device=dev) if name == "cross_entropy"
                     else torch.randn(M, V, device=dev).bfloat16())  # fmt: skip
                loss = getattr(normlab, name)(x, t, form=form)
                (g,) = torch.autograd.grad(loss, x)
                xd = x.detach().double().requires_grad_()
                want = want_fn(xd, t if name == "cross_entropy" else t.double())
                (want_g,) = torch.autograd.grad(want, xd)
            record(f"{name} {M}x{V} bf16 form={form} on cuda:1, cuda:0 current (third call)",
                   {"loss": _rel(loss.reshape(1), want.reshape(1)), "grad": _rel(g, want_g)},
                   {"loss": REL_TOL[torch.bfloat16], "grad": _tol(want_g, torch.bfloat16)})
    if torch.cuda.current_device() != 0:
        record("the current device left as it was", {"moved": 1.0}, 0.0)


PARTS = ("norms", "norm_options", "losses", "loss_options", "graphs", "compile", "lean",
         "replay", "loss_replay", "fused_grid", "autotune", "int64", "devices")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="bf16 only, no fp32/fp16 pass")
    parser.add_argument("--dtypes", help="a comma list of bf16 and fp32: the passes to run "
                                         "(default both; bf16 with --quick)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma list of parts to run (default all: {','.join(PARTS)})")
    parser.add_argument("--loss-options", default="",
                        help="loss_options: only the cases whose name starts with one of these "
                             "(a comma list; default all)")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--only: expected a comma list of {', '.join(PARTS)}, got {args.only!r}")
    prefixes = args.loss_options.split(",")
    unknown = [p for p in prefixes if not any(k.startswith(p) for k in LOSS_OPTION_CASES)]
    if unknown:
        parser.error(f"--loss-options: no case starts with {', '.join(map(repr, unknown))} "
                     f"(cases: {', '.join(LOSS_OPTION_CASES)})")
    names = {"bf16": torch.bfloat16, "fp32": torch.float32}
    if args.dtypes is not None:
        if args.quick or not args.dtypes or any(d not in names for d in args.dtypes.split(",")):
            parser.error("--dtypes: a comma list of bf16 and fp32 (not with --quick)")
        dtypes = tuple(names[d] for d in args.dtypes.split(","))
    else:
        dtypes = (torch.bfloat16,) if args.quick else (torch.bfloat16, torch.float32)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    torch.manual_seed(0)
    for part in parts:
        if part == "norms":
            for dtype in dtypes:
                check_norms(dtype)
        elif part == "norm_options":
            for dtype in dtypes:
                check_norm_options(dtype)
        elif part == "losses":
            for dtype in (*dtypes, torch.float16):
                check_losses(dtype)
            check_zero_probability(dtypes[0])
            check_smoothing_minus_inf(dtypes[0])
        elif part == "loss_options":
            for dtype in dtypes:
                check_loss_options(dtype, prefixes)
        else:
            {"graphs": check_graphs, "compile": check_compile, "lean": check_lean_launch,
             "replay": check_replay, "loss_replay": check_loss_replay,
             "fused_grid": check_fused_grid, "autotune": check_autotune,
             "int64": check_past_int32, "devices": check_devices}[part]()  # fmt: skip
    failed = [r for r in results if not r["ok"]]
    meta = {"card": torch.cuda.get_device_name(), "torch": torch.__version__,
            "triton": __import__("triton").__version__, "checks": len(results),
            "failed": len(failed)}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    print(f"{len(results) - len(failed)} of {len(results)} checks passed")
    return len(failed)


if __name__ == "__main__":
    raise SystemExit(main())
