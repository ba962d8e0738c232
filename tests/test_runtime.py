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
