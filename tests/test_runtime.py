"""Runtime mode selection: interpreter on CPU, announced once, override by NORMLAB_MODE."""

import os
import subprocess
import sys

import normlab
import pytest
import torch


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "NORMLAB_MODE")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only default")
def test_cpu_default_is_interpreter_and_says_so_once():
    out = _run("import normlab, normlab.kernels.norm, os; print(normlab.MODE, os.environ['TRITON_INTERPRET'])")
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
for name, got, want, n in (("y", y, ref.rms_norm(x64, w64, 1e-6), None), ("dx", x.grad, dx_ref, None),
                           ("dw", w.grad, dw_ref, x.shape[0])):
    atol, rtol = ref.tolerance(torch.float32, n)
    assert torch.allclose(got.double(), want, atol=atol, rtol=rtol), (name, (got.double() - want).abs().max())
print("ok")
"""

_IMPORTS_FIRST = {
    "import triton": "import triton",
    "import torch._dynamo": "import torch._dynamo",
    "import torch._inductor": "import torch._inductor",
    "torch.compile call": "import torch\ntorch.compile(lambda t: t * 2)(torch.ones(3))",
}


@pytest.mark.parametrize("first", list(_IMPORTS_FIRST))
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
