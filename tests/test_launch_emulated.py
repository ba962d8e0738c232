"""The GPU host path (lean launch, replay) driven on CPU: every norm kernel is swapped for a
stand-in with the real kernel's parameters (``benchmarks/emulated_gpu.py``), whose "compiled
kernel" checks what Triton's launcher would be handed (9 + one argument per parameter). The
kernels compute nothing here; ``tests/test_replay.py`` checks the replayed values against fp64
in the interpreter, ``benchmarks/gpu_check.py --only lean,replay`` on a GPU."""

import pytest
import torch
from helpers import load_script, norm_outputs, small_split_rows

import normlab
from normlab import _launch
from normlab.norms import config, op

emulated_gpu = load_script("benchmarks/emulated_gpu.py")


@pytest.fixture
def gpu_path(monkeypatch):
    # The switches a test sets again go through monkeypatch first: its undo, which runs after
    # emulate's restore, then puts back the values from before both.
    for name in ("ENABLED", "REPLAY"):
        monkeypatch.setattr(_launch, name, getattr(_launch, name))
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
    small_split_rows(monkeypatch)
    xs = []
    for _ in range(3):
        x = torch.randn(m, n, requires_grad=True)
        r = torch.randn(m, n, requires_grad=True)
        w = torch.rand(n, requires_grad=True)
        b = torch.rand(n, requires_grad=True)
        outs = norm_outputs(kind, x, w, b, r)
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
    # replay on: every call of the signature took the checked signature's entry
    forwards = [sig.forward for sig in op._GRAD.values()]
    assert forwards == ([forwards[0]] if replay else [])
    assert not forwards or isinstance(forwards[0], _launch.Replay)
    assert not op._FWD_REPLAYS


@pytest.mark.parametrize(("kind", "m", "n"), PLANS, ids=[f"{k}-{m}x{n}" for k, m, n in PLANS])
def test_inference_calls_hand_the_launcher_what_it_takes(gpu_path, monkeypatch, kind, m, n):
    """Calls 2 and 3 of an inference signature (3-D input) replay from its own cache, and the
    third x's pointer reaches the launcher."""
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_MIN_COLS", 48)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_MAX_ROWS_PER_SM", 1.0)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_COLS", 16)
    monkeypatch.setattr(config, "SPLIT_ROW_SUMS_CHUNKS", (16,))
    w, b = torch.rand(n), torch.rand(n)
    xs = []
    for _ in range(3):
        x, r = torch.randn(1, m, n), torch.randn(1, m, n)
        outs = norm_outputs(kind, x, w, b, r)
        assert all(o.shape == x.shape for o in outs)
        xs.append(x.data_ptr())
    runs = [v for jit in gpu_path.values() for c in jit.compiled for v in c.runs]
    assert any(xs[2] in values for values in runs)
    assert [type(r) for r in op._INFERENCE.values()] == [_launch.Replay]


LOSSES = ("cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl", "jsd")


@pytest.mark.parametrize("reduce_in_kernel", [True, False], ids=["kernel-sum", "torch-sum"])
@pytest.mark.parametrize("form", ["fused", "chunked", "split"])
@pytest.mark.parametrize("loss", LOSSES)
def test_loss_launches_hand_the_launcher_what_it_takes(gpu_path, monkeypatch, loss, form,
                                                       reduce_in_kernel):  # fmt: skip
    from normlab.losses import config as loss_config

    monkeypatch.setattr(loss_config, "REDUCE_IN_KERNEL", reduce_in_kernel)
    # the same tensors twice: the kernels' FRAME follows the pointers' 128-byte alignment
    x = torch.randn(5, 300, requires_grad=True)
    other = torch.randint(0, 300, (5,)) if loss == "cross_entropy" else torch.randn(5, 300)
    for _ in range(2):
        out = getattr(normlab, loss)(x, other, form=form, block_cap=64)
        torch.autograd.grad(out, (x,))
    runs = [v for jit in gpu_path.values() for c in jit.compiled for v in c.runs]
    assert runs, "the second call did not reach the launcher"


@pytest.mark.parametrize("form", ["fused", "chunked", "split"])
def test_loss_options_by_keyword_reach_the_launcher(gpu_path, form):
    """The losses pass their options (the mask pointer, temperature, beta) as keyword runtime
    arguments: each call's own values reach the launcher, the mask as its pointer."""
    x = torch.randn(5, 300, requires_grad=True)
    t = torch.randn(5, 300)
    base = torch.zeros(64, dtype=torch.bool)  # two masks of one alignment: one kernel
    masks = [base[:5], base[32:37]]
    masks[0].copy_(torch.tensor([True, False, True, True, False]))
    masks[1].copy_(torch.tensor([False] + [True] * 4))
    for mask in (masks[0], masks[0], masks[1]):
        out = normlab.jsd(x, t, beta=0.3, temperature=2.0, loss_mask=mask, form=form,
                          block_cap=64)  # fmt: skip
        torch.autograd.grad(out, (x,))
    first = next(jit for name, jit in gpu_path.items()
                 if name in ("_entropy_fused_kernel", "_entropy_chunked_kernel",
                             "_entropy_stats_kernel") and jit.launches)  # fmt: skip
    names = [p.name for p in first.params]
    seen = [r[names.index("mask_ptr")] for r in first.launches]  # chunked: several a call
    calls = [m.data_ptr() for m in (masks[0], masks[0], masks[1])]
    per_call = len(seen) // 3
    assert seen == [p for p in calls for _ in range(per_call)]
    assert all(r[names.index("beta")] == 0.3 and r[names.index("xparam")] == 0.5
               for r in first.launches)  # fmt: skip


@pytest.mark.parametrize(("kind", "m", "n"), PLANS, ids=[f"{k}-{m}x{n}" for k, m, n in PLANS])
def test_unrolled_replays_launch_as_the_generic_one(gpu_path, monkeypatch, kind, m, n):
    """Every recorded call (forward and backward) runs as its unrolled function, which hands the
    launcher what the generic replay hands it: the same constants and role pointers, buffers of
    the same shapes and dtypes in the same places, and the same outputs' layout."""
    small_split_rows(monkeypatch)
    x, r = torch.randn(m, n, requires_grad=True), torch.randn(m, n, requires_grad=True)
    w, b = torch.rand(n, requires_grad=True), torch.rand(n, requires_grad=True)
    outs = norm_outputs(kind, x, w, b, r)
    grads = [torch.ones_like(o) for o in outs]
    torch.autograd.grad(outs, [x, w], grads, allow_unused=True)
    [sig] = op._GRAD.values()
    [backward] = sig.backwards.values()
    has_res = kind.startswith("add")
    fwd_roles = (x, r if has_res else None, w, b if kind.endswith("ln") else None)
    _, _, mean, rstd = sig.run_forward(*fwd_roles)
    normed = x if not has_res else torch.randn(m, n)
    bwd_roles = (grads[0], grads[1] if has_res else None, normed, fwd_roles[2], fwd_roles[3],
                 mean, rstd)  # fmt: skip
    for replay, roles in ((sig.forward, fwd_roles), (backward, bwd_roles)):
        assert replay.unrolled is not None and "def replay(roles, device):" in replay.source
        kernels = list(dict.fromkeys(step[5][0] for step in replay.steps))  # Compiled stand-ins
        runs = []
        for call in (replay.unrolled, replay.generic):
            before = {id(c): len(c.runs) for c in kernels}
            out = call(roles, None)
            new = {id(c): iter(c.runs[before[id(c)]:]) for c in kernels}
            launched = [next(new[id(step[5][0])]) for step in replay.steps]
            assert all(next(it, None) is None for it in new.values())  # no other launch
            runs.append((out, launched))
        (unrolled_out, unrolled_runs), (gen_out, gen_runs) = runs
        assert [None if t is None else (t.shape, t.dtype, t.stride()) for t in unrolled_out] == [
            None if t is None else (t.shape, t.dtype, t.stride()) for t in gen_out]
        n_roles = len(roles)
        for step, a, g in zip(replay.steps, unrolled_runs, gen_runs, strict=True):
            assert len(a) == len(g)
            slots = dict(step[3])  # argument position -> role or buffer index
            for pos, (va, vg) in enumerate(zip(a, g, strict=True)):
                i = slots.get(pos)
                if i is None:  # a constant
                    assert va == vg, (pos, va, vg)
                elif i < n_roles:  # a role's own pointer
                    assert va == vg == roles[i].data_ptr(), (pos, i)
                else:  # a fresh buffer each call
                    assert isinstance(va, int) and isinstance(vg, int) and va > 0 and vg > 0
