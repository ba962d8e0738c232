"""normlab.bench: bytes models, bandwidth and roofline arithmetic, timing attribution, sanity
flags, the registry and sweeps (CPU; the GPU path's kernel attribution is tested on synthetic
profiler events)."""

import io
import itertools
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import normlab
from normlab.bench import progress as progress_mod
from normlab.bench import registry, timing, traffic
from normlab.bench.device import datasheet_gbps, measure_copy_bandwidth
from normlab.bench.progress import Eta, NotebookProgress, TerminalProgress, format_duration, resolve
from normlab.bench.records import ROOFLINE_SLACK, Record, check_sanity
from normlab.bench.sweep import (
    CPU_LABEL,
    CPU_SECONDS,
    SHAPES,
    best_baseline_us,
    case_cpu_seconds,
    estimate_cpu,
    format_table,
    measure,
    parse_shapes,
    sweep,
)

# --------------------------------------------------------------------------------------------
# Bytes models
# --------------------------------------------------------------------------------------------

M, N = 1000, 769  # non-powers of two, so a swapped M/N or a missing factor shows


@pytest.mark.parametrize(
    "op, direction, factor",
    [
        ("rms_norm", "fwd", 2),
        ("rms_norm", "bwd", 3),
        ("rms_norm", "fwd+bwd", 5),
        ("layer_norm", "fwd", 2),
        ("layer_norm", "bwd", 3),
        ("reverse_kl", "fwd+bwd", 3),
        ("soft_cross_entropy", "fwd+bwd", 3),
        ("reverse_kl", "fwd", 2),
        ("cross_entropy", "fwd+bwd", 2),
        ("cross_entropy", "fwd", 1),
        ("copy", "fwd", 2),
    ],
)
@pytest.mark.parametrize("dtype, e", [("bf16", 2), (torch.float32, 4), ("fp16", 2)])
def test_minimal_bytes_model(op, direction, factor, dtype, e):
    assert traffic.bytes_moved(op, direction, M, N, dtype) == factor * M * N * e


@pytest.mark.parametrize(
    "op, direction, shape, us, peers_gbps",
    [  # rows of the H200 peer table (times there are rounded to 0.1 µs, hence 0.5%)
        ("rms_norm", "fwd", (32768, 8192), 251.4, 4270),  # compile
        ("rms_norm", "bwd", (32768, 8192), 478.7, 3364),  # quack
        ("cross_entropy", "fwd+bwd", (4096, 32768), 223.9, 2398),  # quack
        ("reverse_kl", "fwd+bwd", (4096, 32768), 1039.8, 774),  # compile
    ],
)
def test_minimal_model_matches_the_h200_peer_table(op, direction, shape, us, peers_gbps):
    b = traffic.bytes_moved(op, direction, *shape, "bf16")
    assert traffic.gbps(b, us) == pytest.approx(peers_gbps, rel=5e-3)


def test_full_model_counts_params_stats_and_partials():
    e = 2
    rms_fwd = traffic.bytes_moved("rms_norm", "fwd", M, N, "bf16", model="full")
    assert rms_fwd == 2 * M * N * e + N * e + 4 * M  # + weight read, + fp32 rstd written
    ln_fwd = traffic.bytes_moved("layer_norm", "fwd", M, N, "bf16", model="full")
    assert ln_fwd == 2 * M * N * e + 2 * N * e + 8 * M  # + weight, bias, mean and rstd
    rms_bwd = traffic.bytes_moved("rms_norm", "bwd", M, N, "bf16", model="full", n_partials=8)
    # + w read, rstd read, dw written, 8 fp32 partial rows written and read back
    assert rms_bwd == 3 * M * N * e + N * e + 4 * M + N * e + 2 * 8 * N * 4
    fp32_w = traffic.bytes_moved("rms_norm", "fwd", M, N, "bf16", model="full", weight_dtype="fp32")
    assert fp32_w == rms_fwd + 2 * N
    ce = traffic.bytes_moved("cross_entropy", "fwd+bwd", M, N, "bf16", model="full")
    assert ce == 2 * M * N * e + 2 * 4 * M + 8 * M  # + fp32 lse written and read, int64 labels
    assert traffic.bytes_moved("copy", "fwd", M, N, "bf16", model="full") == 2 * M * N * e


def test_full_model_layer_norm_backward_and_loss_forwards():
    """LayerNorm's backward reads w (not b) and both fp32 statistics, and writes dγ and dβ; a
    loss's forward alone writes one fp32 a row and reads none back."""
    e = 2
    ln_bwd = traffic.bytes_moved("layer_norm", "bwd", M, N, "bf16", model="full")
    assert ln_bwd == 3 * M * N * e + N * e + 2 * 4 * M + 2 * N * e
    add_bwd = traffic.bytes_moved("add_layer_norm", "bwd", M, N, "bf16", model="full", n_partials=4)
    assert add_bwd == 4 * M * N * e + N * e + 2 * 4 * M + 2 * N * e + 2 * 2 * 4 * N * 4
    ce = traffic.bytes_moved("cross_entropy", "fwd", M, N, "bf16", model="full")
    assert ce == M * N * e + 4 * M + 8 * M  # + the fp32 loss a row, the int64 labels
    rkl = traffic.bytes_moved("reverse_kl", "fwd", M, N, "bf16", model="full")
    assert rkl == 2 * M * N * e + 4 * M
    rkl_both = traffic.bytes_moved("reverse_kl", "fwd+bwd", M, N, "bf16", model="full")
    assert rkl_both == 3 * M * N * e + 2 * 4 * M


@pytest.mark.parametrize("op", ["reverse_kl", "forward_kl", "jsd", "soft_cross_entropy"])
@pytest.mark.parametrize("model", ["minimal", "full"])
def test_a_teacher_in_its_own_dtype_is_read_at_its_size(op, model):
    """An fp32 teacher beside bf16 logits: the target read counts 4 bytes a logit, not 2 (8
    against 6 forward+backward, 6 against 4 forward); a teacher in the logits' dtype, nothing."""
    for direction, extra in (("fwd+bwd", 2), ("fwd", 2)):
        same = traffic.bytes_moved(op, direction, M, N, "bf16", model=model)
        assert traffic.bytes_moved(op, direction, M, N, "bf16", model=model,
                                   target_dtype="bf16") == same  # fmt: skip
        assert traffic.bytes_moved(op, direction, M, N, "bf16", model=model,
                                   target_dtype=torch.float32) == same + extra * M * N  # fmt: skip
    assert traffic.bytes_moved(op, "fwd+bwd", M, N, "bf16", target_dtype="fp32") == 8 * M * N
    with pytest.raises(ValueError, match="no target logits"):
        traffic.bytes_moved("cross_entropy", "fwd+bwd", M, N, "bf16", target_dtype="fp32")
    with pytest.raises(ValueError, match="no target logits"):
        traffic.bytes_moved("rms_norm", "fwd", M, N, "bf16", target_dtype="fp32")


@pytest.mark.parametrize(
    "args, match",
    [
        (("rms_norm", "fwd+bwd+x", 4, 4), "no direction"),
        (("reverse_kl", "bwd", 4, 4), "no direction"),
        (("softmax", "fwd", 4, 4), "unknown op"),
        (("rms_norm", "fwd", 0, 4), "positive"),
    ],
)
def test_bytes_model_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        traffic.bytes_moved(*args)
    with pytest.raises(ValueError, match="unknown bytes model"):
        traffic.bytes_moved("rms_norm", "fwd", 4, 4, model="max")


# --------------------------------------------------------------------------------------------
# GB/s, roofline, datasheet
# --------------------------------------------------------------------------------------------


def test_gbps_and_fraction_of_roofline():
    assert traffic.gbps(2e9, 1e6) == pytest.approx(2.0)  # 2 GB in 1 s
    assert traffic.gbps(4242e3, 1.0) == pytest.approx(4242.0)  # 4.242 MB in 1 µs
    assert traffic.gbps(10, None) is None
    assert traffic.fraction_of_roofline(3181.5, 4242.0) == pytest.approx(0.75)
    assert traffic.fraction_of_roofline(None, 4242.0) is None
    assert traffic.fraction_of_roofline(1.0, None) is None
    for bad in (0.0, -3.0):
        with pytest.raises(ValueError, match="positive"):
            traffic.gbps(10, bad)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("Tesla T4", 320),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA A100 80GB PCIe", 1935),
        ("NVIDIA H100 80GB HBM3", 3350),
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H100 SXM5 80GB", 3350),
        ("NVIDIA H200", 4800),
        ("NVIDIA B200", 8000),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GeForce RTX 4090", None),
        ("CPU x86_64", None),
    ],
)
def test_datasheet_table(name, expected):
    assert datasheet_gbps(name) == expected


def test_copy_bandwidth_on_this_device():
    copy = measure_copy_bandwidth(n_bytes=4 * 2**20, reps=3)
    assert copy.gbps > 0 and copy.device_us > 0
    assert copy.gbps == pytest.approx(2 * copy.n_bytes / copy.device_us / 1e3)
    with pytest.raises(ValueError, match="positive"):
        measure_copy_bandwidth(n_bytes=0)


# --------------------------------------------------------------------------------------------
# Sanity flags
# --------------------------------------------------------------------------------------------


def _record(**overrides) -> Record:
    fields = {
        "op": "rms_norm",
        "impl": "torch",
        "strategy": None,
        "layout": None,
        "M": 8192,
        "N": 1024,
        "dtype": "bf16",
        "direction": "fwd",
        "device_us": 10.7,
        "wall_us": 95.0,
        "bytes": 2 * 8192 * 1024 * 2,
        "gbps": 3136.0,
        "roofline_gbps": 4242.0,
        "frac_roofline": 3136 / 4242,
        "datasheet_gbps": 4800.0,
        "peak_extra_bytes": 16 * 2**20,
        "kernels": {"k": 10.7},
        "card": "NVIDIA H200",
        "sm_count": 132,
        "torch": "2.11.0",
        "triton": "3.6.0",
        "mode": "gpu",
        "date": "2026-11-29T10:00:00Z",
        "commit": "abc",
        "command": "python -m normlab bench",
    }
    fields.update(overrides)
    return Record(**fields)


def test_sanity_flags_bandwidth_above_the_copy_roofline():
    implausible = check_sanity(_record(gbps=4242.0 * ROOFLINE_SLACK * 1.01))
    assert not implausible.valid and "exceeds the measured copy roofline" in implausible.note
    # within measurement noise of the copy (the H200 peer run saw +0.7%): still a result
    close = check_sanity(_record(gbps=4270.0))
    assert close.valid and close.note == ""
    above_datasheet = check_sanity(_record(gbps=4900.0, roofline_gbps=None))
    assert not above_datasheet.valid and "datasheet" in above_datasheet.note
    # CPU: no flush, tiny inputs sit in cache; beating a DRAM copy there is no bug
    assert check_sanity(_record(mode="interpret", gbps=5e4, roofline_gbps=8.0)).valid


@pytest.mark.parametrize("field", ["device_us", "wall_us"])
@pytest.mark.parametrize("value", [0.0, -1.5])
def test_sanity_flags_non_positive_times(field, value):
    rec = check_sanity(_record(**{field: value}))
    assert not rec.valid and f"{field}={value} is not positive" in rec.note


def test_table_marks_invalid_records_and_ratio():
    recs = [
        _record(impl="torch", device_us=20.0),
        _record(impl="compile", device_us=10.0),
        _record(impl="normlab", strategy="two_stage", device_us=8.0),
        check_sanity(_record(impl="liger", device_us=1.0, gbps=1e5)),
    ]
    text = format_table(recs)
    lines = {line.split()[1]: line for line in text.splitlines() if line.startswith("rms_norm")}
    assert "2.00x" in lines["torch"] and "1.00x" in lines["compile"]
    assert "0.80x" in lines["normlab[two_stage]"]  # vs the fastest valid non-normlab impl
    assert "INVALID" in lines["liger"]
    assert "CPU/interpreter" not in text
    cpu = format_table([_record(mode="interpret")])
    assert cpu.splitlines()[0] == f"# {CPU_LABEL}"


# --------------------------------------------------------------------------------------------
# Timing: which kernels belong to a call
# --------------------------------------------------------------------------------------------


def _events(*names_durations):
    return [(float(i), d, n) for i, (n, d) in enumerate(names_durations)]


def test_split_calls_keeps_exactly_the_window_between_flush_and_marker():
    fill = "void at::native::vectorized_elementwise_kernel<FillFunctor<float>>"
    events = _events(
        ("fwd_setup_kernel", 50.0),  # untimed set-up before the first flush
        (timing.FLUSH_KERNEL, 120.0),
        ("_norm_bwd_kernel", 20.0),
        (fill, 1.0),
        ("_dw_reduce_kernel", 3.0),
        (timing.MARKER_KERNEL, 1.0),
        ("fwd_setup_kernel", 50.0),
        (timing.FLUSH_KERNEL, 120.0),
        ("_norm_bwd_kernel", 22.0),
        ("Memset (Device)", 0.5),
        (timing.MARKER_KERNEL, 1.0),
    )
    calls = timing.split_calls(events, reps=2)
    assert calls == [
        [("_norm_bwd_kernel", 20.0), (fill, 1.0), ("_dw_reduce_kernel", 3.0)],
        [("_norm_bwd_kernel", 22.0), ("Memset (Device)", 0.5)],
    ]


@pytest.mark.parametrize(
    "events, match",
    [
        (_events((timing.FLUSH_KERNEL, 1.0), ("k", 1.0)), "0 timed calls, expected 1"),
        (_events((timing.FLUSH_KERNEL, 1.0), (timing.FLUSH_KERNEL, 1.0)), "two L2 flushes"),
        (_events(("k", 1.0), (timing.MARKER_KERNEL, 1.0)), "without a flush"),
    ],
)
def test_split_calls_refuses_unattributable_traces(events, match):
    with pytest.raises(timing.BenchError, match=match):
        timing.split_calls(events, reps=1)


def test_split_calls_of_warm_calls_open_at_the_open_kernel():
    """time_warm's windows open at OPEN_KERNEL, not at a flush: a flush kernel inside a warm
    window is the call's own work (kept), and two openers without a marker are refused."""
    events = _events((timing.OPEN_KERNEL, 1.0), ("_norm_bwd_kernel", 20.0),
                     (timing.MARKER_KERNEL, 1.0), ("set_up", 9.0), (timing.OPEN_KERNEL, 1.0),
                     (timing.FLUSH_KERNEL, 5.0), (timing.MARKER_KERNEL, 1.0))  # fmt: skip
    assert timing.split_calls(events, reps=2, opener=timing.OPEN_KERNEL) == [
        [("_norm_bwd_kernel", 20.0)], [(timing.FLUSH_KERNEL, 5.0)]]
    with pytest.raises(timing.BenchError, match="two window openers"):
        timing.split_calls(_events((timing.OPEN_KERNEL, 1.0), (timing.OPEN_KERNEL, 1.0)),
                           reps=1, opener=timing.OPEN_KERNEL)  # fmt: skip
    with pytest.raises(timing.BenchError, match="without an opener"):  # a flush opens no window
        timing.split_calls(_events((timing.FLUSH_KERNEL, 1.0), ("k", 1.0),
                                   (timing.MARKER_KERNEL, 1.0)), reps=1,
                           opener=timing.OPEN_KERNEL)  # fmt: skip


def test_time_call_on_cpu():
    x = torch.randn(256, 256)
    t = timing.time_call(lambda: x @ x, reps=4, warmup=1)
    assert t.reps == 4 and len(t.wall_samples) == 4
    assert t.device_us > 0 and t.wall_us > 0
    assert t.mode == ("interpret" if normlab.INTERPRET else "gpu")
    with pytest.raises(ValueError, match="reps"):
        timing.time_call(lambda: None, reps=0)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------


def _build(op, name, M, N, direction, **options):
    torch.manual_seed(1)  # same inputs for every impl
    return registry.get(op, name).build(M, N, torch.float32, direction, normlab.DEVICE, **options)()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norm_baselines_compute_the_same_function(op):
    M_, N_ = 37, 1000
    torch.manual_seed(1)  # the registry's draws, in its order, then promoted to fp64
    x = torch.randn(M_, N_).double()
    w = (1 + 0.1 * torch.randn(N_)).double()
    b = (0.1 * torch.randn(N_)).double() if op == "layer_norm" else None
    if op == "rms_norm":
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        names = ["eager", "torch"]
    else:
        expected = F.layer_norm(x, (N_,), w, b, 1e-5)
        names = ["torch"]
    assert expected.abs().max() > 0.5  # random data, never zeros
    for name in names:
        y = _build(op, name, M_, N_, "fwd")
        torch.testing.assert_close(y.double(), expected, atol=1e-5, rtol=1e-5)
        grads = _build(op, name, M_, N_, "bwd")
        assert len(grads) == (3 if op == "layer_norm" else 2)
        assert grads[0].shape == (M_, N_) and grads[1].shape == (N_,)
        assert all(torch.isfinite(g).all() and g.abs().max() > 0 for g in grads)


def test_norm_baselines_agree_on_the_backward():
    g_eager = _build("rms_norm", "eager", 37, 1000, "bwd")
    g_torch = _build("rms_norm", "torch", 37, 1000, "bwd")
    for a, b in zip(g_eager, g_torch, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("impl", ["torch", "normlab"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_norm_fwd_bwd_is_one_training_step(op, impl):
    """``fwd+bwd`` (the "total" of Liger-Kernel#1620): a fresh forward and its backward per call,
    the same gradients as the fp64 reference on the registry's inputs and output gradient."""
    from normlab import ref

    M_, N_ = 13, 100
    grads = _build(op, impl, M_, N_, "fwd+bwd")
    torch.manual_seed(1)  # the registry's draws, in its order
    x = torch.randn(M_, N_).double()
    w = (1 + 0.1 * torch.randn(N_)).double()
    b = (0.1 * torch.randn(N_)).double() if op == "layer_norm" else None
    dy = torch.randn(M_, N_).double()
    expect = ref.norm_backward(dy, x, w, b, registry.EPS[op], op == "rms_norm")
    assert len(grads) == (3 if op == "layer_norm" else 2)
    for got, want in zip(grads, expect, strict=False):
        torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("op", ["reverse_kl", "soft_cross_entropy", "cross_entropy"])
def test_loss_eager_baseline(op):
    M_, V = 5, 333
    torch.manual_seed(1)  # the registry's draws, in its order, then promoted to fp64
    logits = torch.randn(M_, V).double()
    if op == "cross_entropy":
        target = torch.randint(0, V, (M_,))
        expected = F.cross_entropy(logits, target)
    else:
        target = torch.randn(M_, V).double()
        p, logp, logt = logits.softmax(-1), logits.log_softmax(-1), target.log_softmax(-1)
        if op == "reverse_kl":
            expected = (p * (logp - logt)).sum(-1).mean()
        else:
            expected = -(target.softmax(-1) * logp).sum(-1).mean()
    loss = _build(op, "eager", M_, V, "fwd")
    assert loss.dim() == 0
    torch.testing.assert_close(loss.double(), expected, atol=1e-5, rtol=1e-5)
    (grad,) = _build(op, "eager", M_, V, "fwd+bwd")
    assert grad.shape == (M_, V) and torch.isfinite(grad).all() and grad.abs().max() > 0


def test_registry_lists_and_rejects():
    names = {i.name for i in registry.implementations("rms_norm")}
    assert {"eager", "torch", "compile", "normlab", "liger", "quack"} <= names
    assert {i.name for i in registry.implementations("cross_entropy")} >= {
        "eager",
        "torch",
        "compile",
    }
    assert registry.get("rms_norm", "normlab").baseline is False
    with pytest.raises(ValueError, match="unknown op"):
        registry.implementations("softmax")
    with pytest.raises(ValueError, match="has no impl"):
        registry.get("layer_norm", "eager")
    with pytest.raises(ValueError, match="no direction"):
        registry.get("reverse_kl", "eager").build(4, 4, torch.float32, "bwd", "cpu")
    if normlab.INTERPRET:
        assert "torch.compile" in registry.get("rms_norm", "compile").unavailable()


def test_compiled_normlab_loss_is_measured_only_when_named():
    # normlab inside torch.compile (a compile per shape) is no default impl and no peer.
    for op in ("cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl", "jsd"):
        impl = registry.get(op, "normlab+compile")
        assert impl.baseline is False and impl.by_default is False
        assert impl.options == registry.LOSS_OPTIONS
        assert "normlab+compile" not in {i.name for i in registry.implementations(op)}
        assert [i.name for i in registry.implementations(op, ["normlab+compile"])] == [
            "normlab+compile"]
    with pytest.raises(ValueError, match="has no impl"):
        registry.get("rms_norm", "normlab+compile")
    rec = {"op": "cross_entropy", "M": 4, "N": 8, "dtype": "bf16", "direction": "fwd+bwd",
           "valid": True}
    records = [SimpleNamespace(impl="normlab+compile", device_us=1.0, **rec),
               SimpleNamespace(impl="normlab", device_us=2.0, **rec),
               SimpleNamespace(impl="compile", device_us=3.0, **rec)]  # fmt: skip
    assert best_baseline_us(records) == {("cross_entropy", 4, 8, "bf16", "fwd+bwd"): 3.0}


# --------------------------------------------------------------------------------------------
# Shapes, progress, sweeps
# --------------------------------------------------------------------------------------------


def test_shape_presets_and_parsing():
    assert len(SHAPES["peers"]) == 11 and (32768, 8192) in SHAPES["peers"]
    assert SHAPES["narrow"] == [(7_864_320, n) for n in (16, 32, 64, 128, 256, 512)]
    assert [v for _, v in SHAPES["losses"]] == [32768, 65536, 131072, 50257, 151936]
    assert parse_shapes("quick,8192x1024, 37×1000") == SHAPES["quick"] + [(8192, 1024), (37, 1000)]
    assert parse_shapes([(2, 3)]) == [(2, 3)]
    for bad in ("12", "0x5", "peer", ""):
        with pytest.raises(ValueError):
            parse_shapes(bad)


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize(
    "seconds, text",
    [
        (0, "0 s"),
        (8.4, "8 s"),
        (59.6, "1 min 00 s"),
        (185, "3 min 05 s"),
        (3599, "59 min 59 s"),
        (3600, "1 h 00 min"),
        (2 * 3600 + 7 * 60 + 20, "2 h 07 min"),
        (3 * 86400 + 4 * 3600 + 59, "3 d 04 h"),
        (-5, "0 s"),
    ],
)
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_eta_weighs_cases_by_their_estimate():
    clock = FakeClock()
    eta = Eta(clock)
    eta.plan([1.0, 1.0, 8.0])  # the last case is estimated 8x the first
    assert eta.update(0, 3) == (0.0, 10.0)  # before any case: the estimate itself
    clock.now += 4.0  # the first case took 4x its estimate
    assert eta.update(1, 3) == (4.0, 9.0 * 4.0)  # so the 9 s left become 36 s
    clock.now += 4.0
    assert eta.update(2, 3) == (8.0, 8.0 * 4.0)
    clock.now += 30.0
    assert eta.update(3, 3) == (38.0, 0.0)


def test_eta_without_a_plan_counts_cases():
    clock = FakeClock()
    eta = Eta(clock)
    assert eta.update(0, 4) == (0.0, None)  # nothing to go by yet
    clock.now += 6.0
    assert eta.update(2, 4) == (6.0, 6.0)
    eta.plan([1.0])  # a plan of the wrong length is not used
    assert eta.update(2, 4) == (6.0, 6.0)


def test_terminal_progress_lines_with_eta_and_resolve():
    clock = FakeClock()
    stream = io.StringIO()
    bar = TerminalProgress(stream, clock=clock)
    bar.plan([30.0] * 12)
    bar(0, 12, "rms_norm torch 64x128 bf16 fwd")
    clock.now += 150.0
    bar(5, 12, "rms_norm torch 37x1000 bf16 fwd")
    clock.now += 210.0
    bar(12, 12, "done")
    assert stream.getvalue().splitlines() == [
        "[ 0/12] rms_norm torch 64x128 bf16 fwd  (0 s elapsed, ETA ~6 min 00 s)",
        "[ 5/12] rms_norm torch 37x1000 bf16 fwd  (2 min 30 s elapsed, ETA 3 min 30 s)",
        "[12/12] done  (6 min 00 s in all)",
    ]


def test_terminal_progress_rewrites_one_line_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    clock = FakeClock()
    stream = Tty()
    bar = TerminalProgress(stream, clock=clock)
    bar(0, 2, "a long label")
    clock.now += 5.0
    bar(1, 2, "b")
    bar(2, 2, "done")
    out = stream.getvalue()
    assert out.count("\n") == 1 and out.endswith("\n")  # one line, ended at the end
    parts = out.split("\r")[1:]
    assert parts[0] == "[0/2] a long label  (0 s elapsed)"
    assert parts[1].rstrip() == "[1/2] b  (5 s elapsed, ETA 5 s)"
    assert len(parts[1]) >= len(parts[0])  # padded over the longer line before it


def test_resolve_progress(monkeypatch):
    assert resolve(None) is None and resolve(False) is None
    assert isinstance(resolve("terminal"), TerminalProgress)
    monkeypatch.setattr(progress_mod, "in_notebook", lambda: False)
    assert isinstance(resolve(True), TerminalProgress)
    monkeypatch.setattr(progress_mod, "in_notebook", lambda: True)
    assert isinstance(resolve(True), NotebookProgress)
    hook = lambda d, t, label: None
    assert resolve(hook) is hook
    with pytest.raises(TypeError):
        resolve("widget")


def test_notebook_progress_moves_a_bar_with_the_eta():
    clock = FakeClock()
    bar = NotebookProgress(clock=clock)
    bar.plan([2.0, 2.0])
    bar(0, 2, "rms_norm normlab 64x128 bf16 fwd")
    clock.now += 3.0
    bar(1, 2, "rms_norm normlab 37x1000 bf16 fwd")
    assert (bar.bar.value, bar.bar.max) == (1, 2)
    assert bar.line.value == "[1/2] rms_norm normlab 37x1000 bf16 fwd  (3 s elapsed, ETA 3 s)"


def test_notebook_progress_without_ipywidgets_updates_a_line(monkeypatch):
    import builtins

    import IPython.display

    shown = []

    class Handle:
        def update(self, obj):
            shown.append(obj)

    real_import = builtins.__import__

    def no_ipywidgets(name, *args, **kwargs):
        if name == "ipywidgets":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ipywidgets)
    monkeypatch.setattr(IPython.display, "display", lambda obj, display_id=None: Handle())
    bar = NotebookProgress(clock=FakeClock())
    bar(0, 3, "x")
    bar(3, 3, "done")
    assert shown == ["[0/3] x  (0 s elapsed)", "[3/3] done  (0 s in all)"]


def test_cpu_estimate_of_a_sweep():
    per_row, per_element = CPU_SECONDS[("interpreter", "norm")]
    if normlab.INTERPRET:
        # normlab's forward in the interpreter: warmup + reps calls of M rows of N elements
        assert case_cpu_seconds("rms_norm", "normlab", 64, 128, "fwd", 5, 3) == pytest.approx(
            8 * 64 * (per_row + 128 * per_element)
        )
    # the bwd case builds one more (untimed) forward, and costs more per call
    fwd = case_cpu_seconds("rms_norm", "torch", 1024, 1024, "fwd", 5, 3)
    assert case_cpu_seconds("rms_norm", "torch", 1024, 1024, "bwd", 5, 3) > 2 * fwd
    quick = estimate_cpu("rms_norm", None, "quick", directions=["fwd", "bwd"], reps=5, warmup=1)
    peers = estimate_cpu("rms_norm", None, "peers", directions=["fwd", "bwd"])
    # every runnable impl: eager, torch, normlab (compile, liger, quack skip on CPU)
    if normlab.INTERPRET:
        assert quick.cases == 3 * 2 * 2 and peers.cases == 3 * 11 * 2
        assert quick.seconds < 60  # the smoke run stays small
        assert peers.seconds > 3 * 3600  # hours: the reason the CLI asks first
        elements = sum(M * N for M, N in SHAPES["peers"]) * 2 * (5 + 3)
        assert peers.interpreter_elements == elements
        assert 0 < peers.interpreter_seconds < peers.seconds
    total = quick + peers
    assert total.cases == quick.cases + peers.cases
    assert total.seconds == pytest.approx(quick.seconds + peers.seconds)


def test_sweep_records_and_progress_on_cpu():
    seen = []
    streamed = []
    res = sweep(
        "rms_norm",
        ["eager", "torch", "compile"],
        "quick",
        ["bf16"],
        reps=2,
        warmup=1,
        roofline=50.0,
        progress=lambda d, t, label: seen.append((d, t, label)),
        on_record=streamed.append,
        command="test",
    )
    if normlab.INTERPRET:
        assert [label for label, _ in res.skipped] == ["rms_norm compile"]
        assert len(res) == 2 * 2 * 2  # impls x shapes x directions
    assert streamed == list(res)
    assert seen[0][:2] == (0, len(res)) and seen[-1] == (len(res), len(res), "done")
    # shape by shape: every impl of one (shape, direction) before the next
    cases = [(r.M, r.N, r.direction) for r in res]
    runs = [key for key, _ in itertools.groupby(cases)]
    assert len(runs) == len(set(cases))  # each case's impls form one contiguous run
    if normlab.INTERPRET:
        assert [r.impl for r in res] == ["eager", "torch"] * len(runs)
    for rec in res:
        expected_bytes = traffic.bytes_moved("rms_norm", rec.direction, rec.M, rec.N, "bf16")
        assert rec.bytes == expected_bytes and rec.dtype == "bf16"
        assert rec.gbps == pytest.approx(rec.bytes / rec.device_us / 1e3)
        assert rec.frac_roofline == pytest.approx(rec.gbps / 50.0)
        assert rec.roofline_gbps == 50.0 and rec.command == "test" and rec.valid
        assert rec.mode == normlab.MODE and rec.sm_count == normlab._runtime.sm_count()
        assert rec.date[:4].isdigit() and math.isfinite(rec.wall_us)


def test_measure_one_callable_into_a_record():
    """bench.measure: any callable (here a launcher keyword the registry has no knob for) into
    one record with the bytes model, the device's roofline and the given labels."""
    from normlab.bench.device import DeviceInfo
    from normlab.norms.row import norm_backward, norm_forward

    device = DeviceInfo(card="test card", mode=normlab.MODE, torch="t", triton="tr", python="p",
                        sm_count=4, l2_bytes=0, datasheet_gbps=None)  # no copy measured
    x, dy, w = torch.randn(16, 32), torch.randn(16, 32), torch.ones(32)
    _, mean, rstd = norm_forward(x, w, None, 1e-6, True)
    rec = measure(lambda: norm_backward(dy, x, w, None, mean, rstd, True, programs_per_sm=2),
                  "rms_norm", "normlab", 16, 32, torch.float32, "bwd", device=device,
                  strategy="persistent 2/SM", roofline_gbps=80.0, reps=2, warmup=1)
    assert (rec.op, rec.impl, rec.strategy, rec.M, rec.N) == ("rms_norm", "normlab",
                                                             "persistent 2/SM", 16, 32)
    assert rec.dtype == "fp32" and rec.direction == "bwd" and rec.card == "test card"
    assert rec.bytes == traffic.bytes_moved("rms_norm", "bwd", 16, 32, torch.float32)
    assert rec.gbps == pytest.approx(rec.bytes / rec.device_us / 1e3)
    assert rec.frac_roofline == pytest.approx(rec.gbps / 80.0) and rec.valid
    assert rec.date[:4].isdigit() and rec.note.endswith("2 reps")
    # Without a roofline given or measured there is no fraction, and nothing is made up.
    rec = measure(lambda: x * 2, "copy", "torch", 16, 32, torch.float32, "fwd", device=device,
                  reps=1, warmup=0)
    assert rec.roofline_gbps is None and rec.frac_roofline is None


def test_records_name_the_host_switches_that_are_on(monkeypatch):
    """A record made with a host path off its mode's default (the replay, which the interpreter
    leaves off; on a GPU the losses' in-kernel sum or the lean launch off) says so in its note:
    those change which launches a call makes."""
    from normlab import _launch
    from normlab.bench import device as device_mod
    from normlab.bench.device import DeviceInfo

    device = DeviceInfo(card="test card", mode=normlab.MODE, torch="t", triton="tr", python="p",
                        sm_count=4, l2_bytes=0, datasheet_gbps=None)  # fmt: skip
    x = torch.randn(8, 16)
    rec = measure(lambda: x * 2, "copy", "torch", 8, 16, torch.float32, "fwd", device=device,
                  reps=1, warmup=0)  # fmt: skip
    assert device_mod.host_switches() == [] and "NORMLAB_" not in rec.note
    monkeypatch.setattr(_launch, "REPLAY", True)
    rec = measure(lambda: x * 2, "copy", "torch", 8, 16, torch.float32, "fwd", device=device,
                  reps=1, warmup=0)  # fmt: skip
    assert rec.note.endswith("; NORMLAB_REPLAY=1")
    assert "host path       NORMLAB_REPLAY=1" in "\n".join(device.lines())
    monkeypatch.setattr(_launch, "REPLAY", False)
    from normlab.losses import online

    monkeypatch.setattr(online, "SMOOTH_TILE_SUM", False)
    assert device_mod.host_switches() == ["NORMLAB_LOSS_SMOOTH_TILE_SUM=0"]
    monkeypatch.setattr(online, "SMOOTH_TILE_SUM", True)
    monkeypatch.setattr(online, "LABEL_AFTER", False)
    assert device_mod.host_switches() == ["NORMLAB_LOSS_LABEL_AFTER=0"]
    # On a GPU the one-instruction exp is on by default: a record says when it was off.
    monkeypatch.setattr(device_mod._runtime, "INTERPRET", False)
    monkeypatch.setattr(_launch, "REPLAY", True)
    monkeypatch.setattr(_launch, "ENABLED", True)
    monkeypatch.setattr(device_mod.loss_config, "REDUCE_IN_KERNEL", True)
    monkeypatch.setattr(online, "FAST_EXP", True)
    assert device_mod.host_switches() == ["NORMLAB_LOSS_LABEL_AFTER=0"]
    monkeypatch.setattr(online, "FAST_EXP", False)
    assert device_mod.host_switches() == ["NORMLAB_LOSS_LABEL_AFTER=0", "NORMLAB_LOSS_FAST_EXP=0"]
    rec = measure(lambda: x * 2, "copy", "torch", 8, 16, torch.float32, "fwd", device=device,
                  reps=1, warmup=0)  # fmt: skip
    assert rec.note.endswith("; NORMLAB_LOSS_LABEL_AFTER=0; NORMLAB_LOSS_FAST_EXP=0"), rec.note
    monkeypatch.setattr(online, "SOFTCAP_POLY_EXP2", True)
    assert device_mod.host_switches()[-1] == "NORMLAB_LOSS_POLY_EXP2=1"
    monkeypatch.setattr(device_mod.loss_config, "ENTROPY_THREAD_STATS", False)
    assert device_mod.host_switches()[-2:] == ["NORMLAB_LOSS_POLY_EXP2=1",
                                               "NORMLAB_LOSS_THREAD_STATS=0"]  # fmt: skip


def test_sweep_reports_cases_that_cannot_run(monkeypatch):
    def broken(M, N, dtype, direction, device, **options):
        raise NotImplementedError("placeholder kernel")

    fake = registry.Impl(
        "rms_norm",
        "fake",
        broken,
        ("fwd",),
        "raises",
        baseline=False,
        options=registry.NORM_OPTIONS,
    )
    monkeypatch.setitem(registry.REGISTRY["rms_norm"], "fake", fake)
    res = sweep(
        "rms_norm",
        ["fake"],
        "37x1000",
        ["bf16"],
        ["fwd", "bwd"],
        reps=1,
        options={"strategy": ["atomic", "two_stage"]},
        roofline=50.0,
    )
    assert list(res) == []
    assert [label for label, _ in res.skipped] == [
        "rms_norm fake[atomic] 37x1000 bf16 fwd",
        "rms_norm fake[two_stage] 37x1000 bf16 fwd",
    ]
    assert all(reason == "NotImplementedError: placeholder kernel" for _, reason in res.skipped)
    with pytest.raises(ValueError, match="unknown direction"):
        sweep("rms_norm", ["torch"], "quick", directions=["up"], roofline=50.0)


# --------------------------------------------------------------------------------------------
# normlab's own entries (tiny shapes: the interpreter runs ~1 ms per program)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, baseline, direction, options",
    [
        ("rms_norm", "torch", "fwd", {"strategy": "auto"}),
        ("rms_norm", "torch", "bwd", {"strategy": "two_stage", "layout": "row"}),
        ("layer_norm", "torch", "bwd", {}),
        ("reverse_kl", "eager", "fwd+bwd", {"form": "fused"}),
        ("reverse_kl", "eager", "fwd+bwd", {"form": "split"}),
        ("cross_entropy", "torch", "fwd+bwd", {}),
    ],
)
def test_normlab_entries_match_the_baselines(op, baseline, direction, options):
    M_, N_ = 5, 67  # 5 rows, a ragged tail
    ours = _build(op, "normlab", M_, N_, direction, **options)
    theirs = _build(op, baseline, M_, N_, direction)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.float(), b.float(), atol=1e-4, rtol=1e-4)


def test_sweep_records_normlab_options():
    res = sweep(
        "rms_norm",
        ["normlab"],
        "5x67",
        ["fp32"],
        ["fwd"],
        reps=1,
        warmup=0,
        options={"strategy": ["atomic", "persistent"], "form": ["split"]},
        roofline=50.0,
    )
    assert res.skipped == []
    assert [(r.impl, r.strategy, r.layout, r.label) for r in res] == [
        ("normlab", "atomic", None, "normlab[atomic]"),
        ("normlab", "persistent", None, "normlab[persistent]"),
    ]  # "form" is a loss option: ignored for a norm


@pytest.mark.slow  # a dozen interpreter calls: out of make test-quick
def test_loss_options_benchmark_runs_on_cpu(tmp_path):
    """benchmarks/loss_options.py --quick: every variant measured once, records written, each
    with its variant named; the interpreter labels its numbers."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "loss_options.py"
    spec = importlib.util.spec_from_file_location("loss_options", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "lo.jsonl"
    assert module.main(["--out", str(out), "--quick"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    variants = {r["note"].split("variant ")[-1] for r in rows}
    assert {"jsd", "cross_entropy all three", "add_rms_norm"} <= variants
    assert all(r["device_us"] > 0 for r in rows)


def test_separate_add_bytes_count_the_add_and_autograd_s_sum():
    """Unfused, the residual add moves 3 units of M·N·e in its own kernel and autograd's sum of
    h's two gradients 3 more: forward 2 + 3, backward 3 + 3, both 11, against the fused op's 8."""
    e = 2
    for op in ("add_rms_norm", "add_layer_norm"):
        units = {d: traffic.separate_add_bytes(op, d, M, N, "bf16") / (M * N * e)
                 for d in ("fwd", "bwd", "fwd+bwd")}  # fmt: skip
        assert units == {"fwd": 5, "bwd": 6, "fwd+bwd": 11}
        assert traffic.bytes_moved(op, "fwd+bwd", M, N, "bf16") == 8 * M * N * e
    with pytest.raises(ValueError, match="no separate add"):
        traffic.separate_add_bytes("rms_norm", "fwd", M, N)
