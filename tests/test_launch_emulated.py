"""The GPU host path (lean launch, replay) driven on CPU: every norm kernel is swapped for a
stand-in with the real kernel's parameters, whose "compiled kernel" checks what Triton's
launcher would be handed (the launcher takes exactly 9 + one per parameter arguments). The
kernels compute nothing here; ``tests/test_replay.py`` checks the replayed values against fp64 in
the interpreter, ``benchmarks/gpu_check.py --only lean,replay`` on a GPU."""

import pytest
import torch
import triton

import normlab
from normlab import _launch
from normlab.norms import block_row, config, op, reduce, row, split_row

MODULES = (row, block_row, split_row, reduce)


class _Compiled:
    """A compiled kernel's stand-in: its launcher checks the argument count and the pointers."""

    function = packed_metadata = None

    def __init__(self, jit):
        self.jit, self.runs = jit, []

    def run(self, *launch_args):
        grid_and_slots, values = launch_args[:9], launch_args[9:]
        assert len(values) == len(self.jit.params), (self.jit.__name__, len(values))
        assert grid_and_slots[6:9] == (None, None, None)  # no metadata, no hooks
        for p, v in zip(self.jit.params, values, strict=True):
            if p.name.endswith("_ptr"):
                assert isinstance(v, int) and v > 0, (self.jit.__name__, p.name, v)
        self.runs.append(values)


class _Jit:
    """A JITFunction's stand-in with the real kernel's parameters; ``fn[grid](...)`` compiles."""

    def __init__(self, kernel):
        self.real = triton.runtime.jit.JITFunction(kernel.fn)
        self.params, self.__name__ = self.real.params, self.real.__name__
        self.compiled: list[_Compiled] = []

    def __getitem__(self, grid):
        def compile_(*args, **kwargs):
            names = [p.name for p in self.params]
            missing = [n for n in names[len(args):] if n not in kwargs
                       and not self.params[names.index(n)].has_default]  # fmt: skip
            assert not missing, (self.__name__, missing)
            self.compiled.append(_Compiled(self))
            return self.compiled[-1]

        return compile_


@pytest.fixture
def gpu_path(monkeypatch):
    monkeypatch.setattr(_launch, "ENABLED", True)
    monkeypatch.setattr(_launch, "REPLAY", True)
    monkeypatch.setattr(_launch, "_get_device", lambda: 0)
    monkeypatch.setattr(_launch, "_get_stream", lambda device: 1)
    monkeypatch.setattr(_launch, "_SITES", {})
    monkeypatch.setattr(op, "_FWD_REPLAYS", {})
    monkeypatch.setattr(op, "_BWD_REPLAYS", {})
    jits = {}
    for module in MODULES:
        for name in dir(module):
            if name.endswith("_kernel") and hasattr(getattr(module, name), "fn"):
                jits[name] = jits.get(name) or _Jit(getattr(module, name))
                monkeypatch.setattr(module, name, jits[name])
    return jits


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
