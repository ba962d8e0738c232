"""The GPU host path (lean launch, replay) driven on CPU: every norm kernel is swapped for a
stand-in with the real kernel's parameters (``benchmarks/emulated_gpu.py``), whose "compiled
kernel" checks what Triton's launcher would be handed (9 + one argument per parameter). The
kernels compute nothing here; ``tests/test_replay.py`` checks the replayed values against fp64
in the interpreter, ``benchmarks/gpu_check.py --only lean,replay`` on a GPU."""

import importlib.util
from pathlib import Path

import pytest
import torch

import normlab
from normlab import _launch
from normlab.norms import config, op

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "emulated_gpu.py"
_SPEC = importlib.util.spec_from_file_location("emulated_gpu", _PATH)
emulated_gpu = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(emulated_gpu)


@pytest.fixture
def gpu_path():
    with emulated_gpu.emulate() as jits:
        yield jits


PLANS = [("rms", 37, 1000), ("ln", 37, 1000), ("rms", 300, 48), ("ln", 9, 5), ("ln", 3, 50),
         ("add_rms", 7, 130), ("add_ln", 300, 48)]  # fmt: skip


@pytest.mark.parametrize("replay", [True, False], ids=["replay", "lean-launch"])
@pytest.mark.parametrize(("kind", "m", "n"), PLANS, ids=[f"{k}-{m}x{n}" for k, m, n in PLANS])
def test_launches_hand_the_launcher_what_it_takes(gpu_path, monkeypatch, kind, m, n, replay):
    """Calls 2 and 3 of a signature reach the compiled kernels' launchers: replayed, or through
    ``launch``'s known keys (replay off)."""
    monkeypatch.setattr(_launch, "REPLAY", replay)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_MIN_COLS", 48)
    monkeypatch.setattr(config, "SPLIT_ROW_BWD_MIN_COLS", 48)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_COLS", 16)
    monkeypatch.setattr(config, "SPLIT_ROW_BWD_CHUNK_MIN", 16)
    xs = []
    for _ in range(3):
        x = torch.randn(m, n, requires_grad=True)
        r = torch.randn(m, n, requires_grad=True)
        w = torch.rand(n, requires_grad=True)
        b = torch.rand(n, requires_grad=True)
        if kind == "rms":
            outs = (normlab.rms_norm(x, w),)
        elif kind == "ln":
            outs = (normlab.layer_norm(x, w, b),)
        elif kind == "add_rms":
            outs = normlab.add_rms_norm(x, r, w)
        else:
            outs = normlab.add_layer_norm(x, r, w, b)
        torch.autograd.grad(outs, [x, w], [torch.ones_like(o) for o in outs],
                            allow_unused=True)  # fmt: skip
        xs.append(x.data_ptr())
    compiled = [c for jit in gpu_path.values() for c in jit.compiled]
    assert compiled, "no kernel was launched through the lean path"
    runs = [v for c in compiled for v in c.runs]
    assert runs, "the second and third calls did not reach the launcher"
    first = [c for c in compiled if c.jit.params[0].name in ("x_ptr", "dy_ptr")]
    # the third call's forward read the third x: its pointer reached the launcher
    assert any(xs[2] in values for c in first for values in c.runs)
    assert all(isinstance(r, _launch.Replay) for r in op._FWD_REPLAYS.values())
    assert bool(op._FWD_REPLAYS) == replay
