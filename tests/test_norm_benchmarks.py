"""The norm benchmarks' own variants (benchmarks/norm_launch_variants.py, norm_fwd_ablation.py)
compute what the planned calls compute: checked here in the interpreter against fp64, so a GPU
run times variants that are right."""

import pytest
import torch
from helpers import assert_close, load_script

from normlab import ref
from normlab.norms import row


@pytest.fixture(scope="module")
def variants():
    return load_script("benchmarks/norm_launch_variants.py")


@pytest.mark.parametrize("traits", ["base", "runtime width", "int64 rows", "rstd first",
                                    "w early", "no hints", "all"])  # fmt: skip
@pytest.mark.parametrize(("m", "n"), [(1, 8), (5, 40), (3, 264)])
def test_ablation_variants_match_fp64(traits, m, n):
    ablation = load_script("benchmarks/norm_fwd_ablation.py")
    x, w = torch.randn(m, n) * 2 + 1, 1 + 0.5 * torch.randn(n)
    y, rstd = ablation.ablation_forward(x, w, 1e-3, ablation.VARIANTS[traits])
    assert_close(y, ref.rms_norm(x.double(), w.double(), 1e-3), msg="y")
    want = torch.rsqrt((x.double() ** 2).mean(-1) + 1e-3)
    assert_close(rstd, want, msg="rstd")


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n"), [(5, 40), (300, 96), (2, 16500)])
def test_forward_variants_agree_with_the_planned_call(variants, is_rms, m, n):
    x = torch.randn(m, n) + (0 if is_rms else 2.0)
    w, b = torch.randn(n), None if is_rms else torch.randn(n)
    want = ref.rms_norm(x.double(), w.double(), 1e-6) if is_rms else ref.layer_norm(
        x.double(), w.double(), b.double(), 1e-5)  # fmt: skip
    for name, run in variants._fwd_variants(x, w, b, is_rms, 4).items():
        assert_close(run()[0], want, msg=name)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_variants_agree_with_the_planned_call(variants, is_rms):
    m, n = 13, 44
    x, w, dy = torch.randn(m, n), torch.randn(n), torch.randn(m, n)
    b = None if is_rms else torch.randn(n)
    eps = 1e-6 if is_rms else 1e-5
    _, mean, rstd = row.norm_forward(x, w, b, eps, is_rms)
    leaves = [t.double().requires_grad_() for t in (x, w) + (() if is_rms else (b,))]
    y = (ref.rms_norm(leaves[0], leaves[1], eps) if is_rms
         else ref.layer_norm(leaves[0], leaves[1], leaves[2], eps))  # fmt: skip
    want = torch.autograd.grad(y, leaves, dy.double())
    found = variants._bwd_variants(x, w, b, dy, mean, rstd, is_rms, 4)
    assert any(name.startswith("tiles of") for name in found)
    assert {"roles on", "roles off", "roles on w1", "roles on w16"} <= found.keys()
    for name, run in found.items():
        got = [g for g in run() if g is not None]
        for g, g_ref, what in zip(got, want, ("dx", "dw", "db")[: len(want)], strict=True):
            assert_close(g, g_ref, reduce_len=m if what != "dx" else n, msg=f"{name} {what}")
