"""Runtime mode selection: interpreter on CPU, announced once, override by NORMLAB_MODE."""

import os
import subprocess
import sys

import pytest
import torch

import normlab


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("TRITON_INTERPRET", "NORMLAB_MODE")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full_env)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only default")
def test_cpu_default_is_interpreter_and_says_so_once():
    out = _run("import normlab, normlab.norms.row, os; "
               "print(normlab.MODE, os.environ['TRITON_INTERPRET'])")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["interpret", "1"]
    assert out.stderr.count("Triton interpreter") == 1


def test_bad_override_is_a_clear_error():
    out = _run("import normlab", NORMLAB_MODE="fast")
    assert out.returncode != 0
    assert "NORMLAB_MODE='fast'" in out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_gpu_override_without_cuda_is_a_clear_error():
    out = _run("import normlab", NORMLAB_MODE="gpu")
    assert out.returncode != 0
    assert "no CUDA device" in out.stderr


def test_kernels_are_interpreted_in_interpret_mode():
    import triton

    if not normlab.INTERPRET:
        pytest.skip("compiled mode on this machine")

    @triton.jit
    def _probe(x_ptr):
        pass

    assert type(_probe).__name__ == "InterpretedFunction"
    assert normlab.DEVICE == "cpu"


# --------------------------------------------------------------------------------------------
# Import order: normlab's kernels run interpreted whatever imported triton first
# --------------------------------------------------------------------------------------------

# A real forward + backward against the fp64 reference; prints "ok" when within tolerance.
_RMS_NORM_CHECK = """
import normlab, torch
from normlab import ref
assert normlab.MODE == "interpret", normlab.MODE
torch.manual_seed(0)
x = torch.randn(6, 40, requires_grad=True)
w = torch.randn(40, requires_grad=True)
y = normlab.rms_norm(x, w, eps=1e-6)
dy = torch.randn_like(y)
y.backward(dy)
x64, w64 = x.detach().double(), w.detach().double()
dx_ref, dw_ref, _ = ref.norm_backward(dy.double(), x64, w64, eps=1e-6, is_rms=True)
checks = (("y", y, ref.rms_norm(x64, w64, 1e-6), None), ("dx", x.grad, dx_ref, None),
          ("dw", w.grad, dw_ref, x.shape[0]))
for name, got, want, reduce_len in checks:
    atol, rtol = ref.tolerance(torch.float32, reduce_len)
    err = (got.double() - want).abs().max().item()
    assert torch.allclose(got.double(), want, atol=atol, rtol=rtol), (name, err)
print("ok")
"""

_IMPORTS_FIRST = {
    "import triton": "import triton",
    "import torch._dynamo": "import torch._dynamo",
    "import torch._inductor": "import torch._inductor",
    "torch.compile call": "import torch\ntorch.compile(lambda t: t * 2)(torch.ones(3))",
}


@pytest.mark.parametrize("first", [
    pytest.param(k, marks=pytest.mark.slow) if "inductor" in k or "compile" in k else k
    for k in _IMPORTS_FIRST])  # fmt: skip  (inductor's import and a compile: seconds each)
def test_kernels_run_interpreted_when_triton_was_imported_first(first):
    code = (_IMPORTS_FIRST[first] + "\nimport sys\n"
            "assert 'triton' in sys.modules, 'triton was not imported before normlab'\n"
            + _RMS_NORM_CHECK)
    out = _run(code, NORMLAB_MODE="interpret")
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-3000:]


def test_kernels_run_interpreted_when_normlab_is_imported_first():
    code = "import sys\nassert 'triton' not in sys.modules\n" + _RMS_NORM_CHECK
    out = _run(code, NORMLAB_MODE="interpret")
    assert out.returncode == 0 and out.stdout.split() == ["ok"], out.stderr[-3000:]


# --------------------------------------------------------------------------------------------
# bf16 outputs round to nearest even under the interpreter, as on the GPU
# --------------------------------------------------------------------------------------------


def _bf16_bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16)


def test_fp32_to_bf16_bits_matches_torch_round_to_nearest_even():
    import numpy as np

    from normlab._runtime import fp32_to_bf16_bits

    gen = torch.Generator().manual_seed(1)
    random_bits = torch.randint(-(2**31), 2**31, (200_000,), generator=gen, dtype=torch.int64)
    high = random_bits >> 16 << 16
    special = torch.tensor([
        0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7FFFFF,  # around the largest bf16 and past it
        0x7F800000, 0x7FC00000, 0x7F800001, 0x7F808000,  # inf, NaNs
        0x00008000, 0x00018000, 0x00000001,  # subnormals
        0x3F908000, 0x3F918000, 0x3F907FFF, 0x3F918001,  # ties to even (down, up) and non-ties
    ], dtype=torch.int64)
    values = torch.cat([
        random_bits,
        high | 0x8000,  # exact ties
        high | 0x7FFF, high | 0x8001,  # just below / above a tie
        special, special | (1 << 31),
    ]).to(torch.int32).view(torch.float32)
    got = torch.from_numpy(fp32_to_bf16_bits(values.numpy()).view(np.int16))
    want = values.to(torch.bfloat16)
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got.view(torch.bfloat16)), nan)
    assert torch.equal(got[~nan], _bf16_bits(want)[~nan])


def test_rms_norm_bf16_example_rounds_to_nearest():
    y = normlab.rms_norm(torch.tensor([[3.0, 4.0]], dtype=torch.bfloat16), None, eps=0)
    # 4 / sqrt(12.5) = 1.13137...: bf16 neighbours 1.125 and 1.1328125
    assert y[0, 1].item() == 1.1328125
    from normlab import ref

    assert torch.equal(y, ref.rms_norm(torch.tensor([[3.0, 4.0]]), None, 0.0).to(torch.bfloat16))


def _rows_with_unit_rms(n_rows: int, n_cols: int, gen: torch.Generator) -> torch.Tensor:
    """Rows of odd integers (and zeros) whose squares sum to n_cols: mean(x^2) = 1 exactly, so
    rstd = 1 and the fp32 result x * w is exact (a <= 4-bit times an 8-bit significand)."""
    rows = torch.zeros(n_rows, n_cols)
    odd = torch.tensor([1.0, 3.0, 5.0, 7.0, 9.0, 11.0, 13.0, 15.0])
    for r in range(n_rows):
        left, values = n_cols, []
        while left:
            fits = odd[odd * odd <= left]
            v = fits[torch.randint(len(fits), (1,), generator=gen)].item()
            if left >= 9 and torch.rand((), generator=gen) < 0.7:
                v = 3.0  # 3 * w: a tie in a quarter to half of the weights
            values.append(v)
            left -= int(v * v)
        signs = torch.randint(0, 2, (len(values),), generator=gen) * 2 - 1
        cols = torch.randperm(n_cols, generator=gen)[: len(values)]
        rows[r, cols] = torch.tensor(values) * signs
    return rows


def _bf16_weights(n: int, gen: torch.Generator) -> torch.Tensor:
    """bf16 values over the whole exponent range (subnormals to the largest finite), a quarter
    of them in [2^124, 2^128) where products by 3..15 round to the largest bf16 or overflow."""
    sign = torch.randint(0, 2, (n,), generator=gen) << 15
    exponent = torch.randint(0, 255, (n,), generator=gen)
    exponent[: n // 4] = torch.randint(251, 255, (n // 4,), generator=gen)
    mantissa = torch.randint(0, 128, (n,), generator=gen)
    return (sign | exponent << 7 | mantissa).to(torch.int16).view(torch.bfloat16)


@pytest.mark.filterwarnings("ignore:overflow encountered")
@pytest.mark.parametrize("layout", ["auto", "row"])
def test_rms_norm_bf16_equals_round_to_nearest_of_exact_fp32(layout):
    from normlab import ref

    gen = torch.Generator().manual_seed(2)
    x = _rows_with_unit_rms(128, 256, gen).to(torch.bfloat16)
    w = _bf16_weights(256, gen)
    # Row 0 at the top of the range: 13 * w0 = 2041 * 2^117 rounds to the largest bf16
    # (2040 * 2^117); 7 * w1 = 255.5 * 2^120 is a tie, to inf (truncation: the largest);
    # 3 * w2 = 253.5 * 2^120 is a tie, up to 254 * 2^120 (truncation: 253 * 2^120).
    x[0] = 0
    x[0, :3] = torch.tensor([13.0, 7.0, 3.0])
    x[0, 3:32] = 1.0  # 169 + 49 + 9 + 29 = 256
    w[:3] = torch.tensor([157 * 2.0**117, 146 * 2.0**118, 169 * 2.0**119])
    y = normlab.rms_norm(x, w, eps=0, layout=layout)
    y32 = ref.rms_norm(x, w, 0.0)
    assert torch.equal(y32, x.float() * w.float())  # the construction is exact
    ties = (y32[torch.isfinite(y32)].view(torch.int32) & 0xFFFF) == 0x8000
    assert ties.sum() > 300, int(ties.sum())
    want = y32.to(torch.bfloat16)
    assert want[0, :3].tolist() == [torch.finfo(torch.bfloat16).max, float("inf"), 254 * 2.0**120]
    assert torch.isinf(want).sum() > 100, int(torch.isinf(want).sum())
    assert torch.equal(_bf16_bits(y), _bf16_bits(want))


def test_layer_norm_bf16_equals_round_to_nearest_of_exact_fp32():
    from normlab import ref

    gen = torch.Generator().manual_seed(3)
    n_rows, n_cols = 32, 512
    # +-2^k, half of each sign: mean 0, rstd 2^-k, xhat = +-1 exactly; y = +-w + b in fp32
    signs = torch.stack([torch.randperm(n_cols, generator=gen) % 2 * 2 - 1 for _ in range(n_rows)])
    scale = 2.0 ** torch.randint(-20, 20, (n_rows, 1), generator=gen)
    x = (signs * scale).to(torch.bfloat16)
    w, b = _bf16_weights(n_cols, gen), _bf16_weights(n_cols, gen)
    b[: n_cols // 2] = (w[: n_cols // 2].float() * 2.0 ** -8 * torch.randint(
        -2, 3, (n_cols // 2,), generator=gen)).to(torch.bfloat16)  # w + b on a half-ulp: ties
    y = normlab.layer_norm(x, w, b, eps=0)
    want = ref.layer_norm(x, w, b, 0.0).to(torch.bfloat16)
    assert torch.equal(_bf16_bits(y), _bf16_bits(want))


@pytest.mark.parametrize("form", ["fused", "split"])
def test_cross_entropy_bf16_grad_equals_round_to_nearest_of_fp32(form):
    from normlab import ref

    gen = torch.Generator().manual_seed(4)
    n_rows, n_cols = 16, 1024
    x = (torch.randn(n_rows, n_cols, generator=gen) * 4).to(torch.bfloat16)
    labels = torch.randint(0, n_cols, (n_rows,), generator=gen)
    grads = {}
    for dtype in (torch.bfloat16, torch.float32):
        logits = x.to(dtype).detach().requires_grad_(True)
        normlab.cross_entropy(logits, labels, reduction="sum", form=form).backward()
        grads[dtype] = logits.grad
    # bitwise: the bf16 gradient is the nearest bf16 to the same kernel's fp32 gradient
    rounded = grads[torch.float32].to(torch.bfloat16)
    assert torch.equal(_bf16_bits(grads[torch.bfloat16]), _bf16_bits(rounded))
    # and within half a bf16 ulp (plus fp32 noise) of the fp64 reference
    x64 = x.double().requires_grad_(True)
    ref.cross_entropy_ref(x64, labels, reduction="sum").backward()
    got = grads[torch.bfloat16].double()
    half_ulp = torch.where(got == 0, 0.0, got.abs().log2().floor().exp2() * 2.0**-8)
    assert ((got - x64.grad).abs() <= half_ulp * 1.01 + 1e-9).all()
