"""normlab's norms and losses inside torch.compile(fullgraph=True) with the default (inductor)
backend on a GPU: forward and gradients equal the eager calls. Prints one line per case; exits
1 if any case fails. (At 5d1df6e the losses failed: Inductor re-emitted their Triton kernels and
wrote the -inf constant as an undefined name;
benchmarks/data/dev/gpu_checks/compile_check_5d1df6e.log. They are custom ops since.)"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import normlab


def check(name, fn, *inputs):
    try:
        return _check(name, fn, *inputs)
    except Exception as exc:  # report every case, then fail
        print(f"{name}: FAIL, {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}")
        return False


def _check(name, fn, *inputs):
    torch._dynamo.reset()  # every case compiles anew: no recompile limit across cases
    eager_out = fn(*inputs)
    eager_grads = torch.autograd.grad(eager_out.float().sum(),
                                      [t for t in inputs if t.requires_grad])
    compiled = torch.compile(fn, fullgraph=True, dynamic=False)
    out = compiled(*inputs)
    grads = torch.autograd.grad(out.float().sum(), [t for t in inputs if t.requires_grad])
    err = max([(out.float() - eager_out.float()).abs().max().item()]
              + [(g.float() - e.float()).abs().max().item()
                 for g, e in zip(grads, eager_grads, strict=True)])
    ok = err <= 1e-2
    print(f"{name}: torch.compile(fullgraph=True) vs eager max |diff| {err:.2e} "
          f"{'OK' if ok else 'FAIL'}")
    return ok


def main() -> int:
    torch.manual_seed(0)
    dev, bf = "cuda", torch.bfloat16
    x = torch.randn(4096, 2048, device=dev, dtype=bf, requires_grad=True)
    w = (1 + 0.1 * torch.randn(2048, device=dev)).to(bf).requires_grad_()
    b = (0.1 * torch.randn(2048, device=dev)).to(bf).requires_grad_()
    logits = torch.randn(256, 32768, device=dev, dtype=bf, requires_grad=True)
    target = torch.randn(256, 32768, device=dev, dtype=bf)
    ok = check("rms_norm", lambda x, w: normlab.rms_norm(x, w), x, w)
    ok &= check("layer_norm", lambda x, w, b: normlab.layer_norm(x, w, b), x, w, b)
    ok &= check("RMSNorm module", normlab.RMSNorm(2048, device=dev, dtype=bf), x)
    # block-row rows (layout="auto" from 16384 rows): no stored statistics, the backward
    # recomputes them (configs.block_row_recompute_stats)
    xn = torch.randn(65536, 64, device=dev, dtype=bf, requires_grad=True)
    wn = (1 + 0.1 * torch.randn(64, device=dev)).to(bf).requires_grad_()
    bn = (0.1 * torch.randn(64, device=dev)).to(bf).requires_grad_()
    ok &= check("rms_norm block-row", lambda x, w: normlab.rms_norm(x, w), xn, wn)
    ok &= check("layer_norm block-row", lambda x, w, b: normlab.layer_norm(x, w, b), xn, wn, bn)
    # The losses are custom ops (normlab::entropy_fwd, normlab::entropy_split_bwd): every form,
    # at an aligned and an unaligned vocabulary, mean and per-row reductions.
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
                            logits)  # fmt: skip
                ok &= check(f"{name} {form} V={n_cols} none",
                            lambda a, fn=fn, other=other, form=form, row_w=row_w: fn(
                                a, other, form=form, reduction="none") * row_w, logits)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
