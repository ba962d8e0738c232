"""normlab's norms and losses inside torch.compile(fullgraph=True) with the default (inductor)
backend on a GPU: forward and gradients equal the eager calls. Prints one line per case; exits
1 if any case fails. ``--norms`` / ``--losses``: those cases only; ``--cases A,B``: the cases
whose names contain A or B. A loss with form="auto" takes the split form inside the compiled
graph where it needs a gradient (the losses' config), and is compared with the eager call's
form.

The norms and the losses are Triton ops: with static shapes Inductor launches their kernels
from its own code (the line says "kernels traced"), with symbolic shapes (a recompile after a
shape change) the graph calls the opaque planned ops ("opaque"). Each case checks which it got.
(At 5d1df6e the losses failed when Inductor re-emitted their Triton kernels: it wrote a global
-inf constant as an undefined name; benchmarks/data/dev/gpu_checks/compile_check_5d1df6e.log.
The kernels now write -inf inline.)"""

import argparse
import sys
from pathlib import Path
from unittest import mock

import torch
from torch._inductor.graph import GraphLowering

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import normlab

CASES: list[str] = []  # --cases: only the cases whose names contain one of these


def check(name, fn, *inputs, traced=None, again=None):
    """Compiled fn against eager on inputs (then on ``again``, a second set of inputs of other
    shapes: a recompile). ``traced``: whether normlab's kernels must be traced (True), opaque
    (False) or either (None), in the last compile."""
    if CASES and not any(c in name for c in CASES):
        return True
    try:
        return _check(name, fn, inputs, traced, again)
    except Exception as exc:  # report every case, then fail
        lines = str(exc).strip().splitlines() or [""]
        why = [ln for ln in lines if "Error" in ln or "error" in ln][:4] or lines[-1:]
        print(f"{name}: FAIL, {type(exc).__name__}: " + " | ".join(ln[:300] for ln in why))
        return False


def _outputs(out):
    return out if isinstance(out, tuple) else (out,)


def _run(fn, inputs):
    outs = _outputs(fn(*inputs))
    leaves = [t for t in inputs if t.requires_grad]
    if not leaves:  # an inference call
        return outs, ()
    total = sum(o.float().square().mean() for o in outs)
    return outs, torch.autograd.grad(total, leaves)


def _run_and_get_code(fn):
    """fn()'s result and the Inductor code compiled while it ran (as torch._inductor.utils'
    run_and_get_code, less its dynamo reset: a recompile must see the earlier compile)."""
    code = []
    with mock.patch.object(GraphLowering, "save_output_code", code.append):
        return fn(), code


def _err(got, want):
    return max(((g.float() - w.float()).abs().max().item()
                for g, w in zip(got, want, strict=True)), default=0.0)  # fmt: skip


def _check(name, fn, inputs, traced, again):
    torch._dynamo.reset()  # every case compiles anew: no recompile limit across cases
    compiled = torch.compile(fn, fullgraph=True)
    err, code = 0.0, []
    for args in (inputs,) if again is None else (inputs, again):
        eager_out, eager_grads = _run(fn, args)
        for _ in range(2):  # the second call replays the first's launches (the losses' op)
            (out, grads), new_code = _run_and_get_code(lambda args=args: _run(compiled, args))
            code = new_code or code
            err = max(err, _err(out, eager_out), _err(grads, eager_grads))
    opaque = any("normlab.norm_" in c or "normlab.entropy_" in c for c in code)
    kind = "" if traced is None else ", opaque" if opaque else ", kernels traced"
    ok = err <= 1e-2 and (traced is None or traced != opaque)
    print(f"{name}: torch.compile(fullgraph=True) vs eager max |diff| {err:.2e}{kind} "
          f"{'OK' if ok else 'FAIL'}")
    return ok


def _norm_inputs(n_rows, n_cols, dtype):
    dev = "cuda"
    x = torch.randn(n_rows, n_cols, device=dev, dtype=dtype, requires_grad=True)
    w = (1 + 0.1 * torch.randn(n_cols, device=dev)).to(dtype).requires_grad_()
    b = (0.1 * torch.randn(n_cols, device=dev)).to(dtype).requires_grad_()
    return x, w, b


def check_norms() -> bool:
    bf = torch.bfloat16
    x, w, b = _norm_inputs(4096, 2048, bf)
    ok = check("rms_norm", lambda x, w: normlab.rms_norm(x, w), x, w, traced=True)
    ok &= check("layer_norm", lambda x, w, b: normlab.layer_norm(x, w, b), x, w, b, traced=True)
    ok &= check("RMSNorm module", normlab.RMSNorm(2048, device="cuda", dtype=bf), x, traced=True)
    r = torch.randn_like(x, requires_grad=True)
    ok &= check("add_rms_norm", lambda x, r, w: normlab.add_rms_norm(x, r, w), x, r, w,
                traced=True)  # fmt: skip
    ok &= check("add_layer_norm", lambda x, r, w, b: normlab.add_layer_norm(x, r, w, b), x, r, w,
                b, traced=True)  # fmt: skip
    ok &= check("rms_norm offset=1", lambda x, w: normlab.rms_norm(x, w, offset=1.0), x, w,
                traced=True)  # fmt: skip
    xi, wi, bi = (t.detach() for t in (x, w, b))  # no gradient: no statistics stored
    ok &= check("rms_norm inference", lambda x, w: normlab.rms_norm(x, w), xi, wi, traced=True)
    ok &= check("layer_norm inference", lambda x, w, b: normlab.layer_norm(x, w, b), xi, wi, bi,
                traced=True)  # fmt: skip
    # block-row rows (layout="auto" from 16384 rows): no stored statistics, the backward
    # recomputes them (configs.block_row_recompute_stats)
    xn, wn, bn = _norm_inputs(65536, 64, bf)
    ok &= check("rms_norm block-row", lambda x, w: normlab.rms_norm(x, w), xn, wn, traced=True)
    ok &= check("layer_norm block-row", lambda x, w, b: normlab.layer_norm(x, w, b), xn, wn, bn,
                traced=True)  # fmt: skip
    # each backward strategy, at a width just past a power of two
    xs, ws, bs = _norm_inputs(1000, 4099, bf)
    for strategy in ("atomic", "two_stage", "persistent"):
        ok &= check(f"layer_norm {strategy} 1000x4099",
                    lambda x, w, b, s=strategy: normlab.layer_norm(x, w, b, strategy=s), xs, ws,
                    bs, traced=True)  # fmt: skip
    # few wide rows (the split-row kernels), one row, other dtypes
    for (n_rows, n_cols), dtype in (((2, 60028), bf), ((1, 16411), bf), ((1, 4096), bf),
                                    ((37, 1000), torch.float16), ((3, 4099), torch.float32)):
        xc, wc, bc = _norm_inputs(n_rows, n_cols, dtype)
        shape = f"{n_rows}x{n_cols} {str(dtype).removeprefix('torch.')}"
        ok &= check(f"rms_norm {shape}", lambda x, w: normlab.rms_norm(x, w), xc, wc, traced=True)
        ok &= check(f"layer_norm {shape}", lambda x, w, b: normlab.layer_norm(x, w, b), xc, wc,
                    bc, traced=True)  # fmt: skip
    # inputs as a caller shapes them: 3-D, columns strided (the op's body makes the rows)
    x3 = torch.randn(2, 1000, 9, device="cuda", dtype=bf).transpose(1, 2).requires_grad_()
    w3, b3 = (t[:1000].detach().requires_grad_() for t in (w, b))
    ok &= check("rms_norm 2x9x1000 strided", lambda x, w: normlab.rms_norm(x, w), x3, w3,
                traced=True)  # fmt: skip
    ok &= check("add_layer_norm 2x9x1000 strided",
                lambda x, w, b: normlab.add_layer_norm(x, x.detach() * 0.5, w, b), x3, w3, b3,
                traced=True)  # fmt: skip
    # a second shape recompiles with symbolic rows: the opaque planned ops
    x1, w1, _ = _norm_inputs(512, 2048, bf)
    x2 = torch.randn(640, 2048, device="cuda", dtype=bf, requires_grad=True)
    ok &= check("rms_norm 512 then 640 rows", lambda x, w: normlab.rms_norm(x, w), x1, w1,
                again=(x2, w1), traced=False)  # fmt: skip
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--norms", action="store_true", help="the norms' cases only")
    which.add_argument("--losses", action="store_true", help="the losses' cases only")
    parser.add_argument("--cases", default="",
                        help="comma-separated: only the cases whose names contain one")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    CASES[:] = [c for c in args.cases.split(",") if c]
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    ok = True if args.losses else check_norms()
    if not args.norms:
        ok &= check_losses(dev, bf)
    return 0 if ok else 1


def check_losses(dev, bf) -> bool:
    """Every loss and form at an aligned and an unaligned vocabulary, mean and per-row
    reductions; each option; a call without a gradient. Traced (static shapes) where the rows
    are whole 16-element vectors; opaque at V = 50257 and after a recompile."""
    ok = True
    for n_cols in (32768, 50257):
        logits = torch.randn(256, n_cols, device=dev, dtype=bf, requires_grad=True)
        target = torch.randn(256, n_cols, device=dev, dtype=bf)
        labels = torch.randint(0, n_cols, (256,), device=dev)
        labels[::7] = -100
        row_w = torch.randn(256, device=dev)
        for form in ("auto", "fused", "chunked", "split"):
            for name, other in (("reverse_kl", target), ("soft_cross_entropy", target),
                                ("cross_entropy", labels)):  # fmt: skip
                fn = getattr(normlab, name)
                ok &= check(f"{name} {form} V={n_cols} mean",
                            lambda a, fn=fn, other=other, form=form: fn(a, other, form=form),
                            logits, traced=n_cols % 16 == 0)  # fmt: skip
                ok &= check(f"{name} {form} V={n_cols} none",
                            lambda a, fn=fn, other=other, form=form, row_w=row_w: fn(
                                a, other, form=form, reduction="none") * row_w, logits,
                            traced=n_cols % 16 == 0)  # fmt: skip
    n_cols = 32768
    logits = torch.randn(256, n_cols, device=dev, dtype=bf, requires_grad=True)
    target = torch.randn(256, n_cols, device=dev, dtype=torch.float32)  # an fp32 teacher
    labels = torch.randint(0, n_cols, (256,), device=dev)
    mask = torch.rand(256, device=dev) > 0.3
    options = {
        "cross_entropy smoothing+z_loss+softcap": (normlab.cross_entropy, labels, {
            "label_smoothing": 0.1, "z_loss": 1e-4, "softcap": 30.0}),
        "cross_entropy loss_mask": (normlab.cross_entropy, labels, {"loss_mask": mask}),
        "reverse_kl temperature=2": (normlab.reverse_kl, target, {"temperature": 2.0}),
        "soft_cross_entropy loss_mask": (normlab.soft_cross_entropy, target, {"loss_mask": mask}),
        "forward_kl": (normlab.forward_kl, target, {}),
        "jsd beta=0.3": (normlab.jsd, target, {"beta": 0.3}),
    }  # fmt: skip
    for name, (fn, other, kw) in options.items():
        for form in ("fused", "chunked", "split"):
            ok &= check(f"{name} {form} V={n_cols}",
                        lambda a, fn=fn, other=other, form=form, kw=kw: fn(a, other, form=form,
                                                                         **kw),
                        logits, traced=True)  # fmt: skip
    # a second row count recompiles with symbolic rows: the opaque planned ops
    logits2 = torch.randn(320, n_cols, device=dev, dtype=bf, requires_grad=True)
    target2 = torch.randn(320, n_cols, device=dev, dtype=torch.float32)
    ok &= check("reverse_kl 256 then 320 rows", lambda a, t: normlab.reverse_kl(a, t), logits,
                target, again=(logits2, target2), traced=False)  # fmt: skip
    inference = logits.detach()
    for form in ("auto", "chunked"):
        ok &= check(f"cross_entropy inference {form} V={n_cols}",
                    lambda a, form=form: normlab.cross_entropy(a, labels, form=form), inference,
                    traced=True)  # fmt: skip
    return ok


if __name__ == "__main__":
    sys.exit(main())
