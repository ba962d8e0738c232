"""The losses' host path: kernel launches per call, the in-kernel reduction and row count.

A small loss call is bound by the host (every launch costs µs of CPU), so the default call is one
Triton launch forward and one backward, and no torch kernel beyond allocations: the fused and
chunked forms sum the loss rows in the kernel (online.finish_reduction) and count a mean's rows
there too while that is cheap (config.count_in_kernel). Both counts and the reduction are checked
against fp64 references here, across more rows than one step of the kernels' count and sum.
"""

import threading

import pytest
import torch
import triton.language as tl
from test_entropy import _check, _inputs, _ref, _run
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import normlab
from normlab import ref
from normlab.losses import chunked, config, fused, online, op, split

LOSSES = ("cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl", "jsd")
ALLOCATIONS = {"aten.empty.memory_format", "aten.empty_like.default",
               "aten.empty_strided.default"}  # fmt: skip


class _TorchOps(TorchDispatchMode):
    """The aten ops run inside the mode, by name."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _record_launches(monkeypatch):
    """The names of the kernels launched from now on (the launches still run, outside any
    _TorchOps: the interpreter's own copies are no kernels on a GPU)."""
    names = []
    for module in (fused, chunked, split):
        def record(fn, grid, *args, _real=module.launch, **kwargs):
            names.append(fn.__name__)
            with _disable_current_modes():
                return _real(fn, grid, *args, **kwargs)

        monkeypatch.setattr(module, "launch", record)
    return names


def _call(loss, x, other, **kw):
    fn = getattr(normlab, loss)
    return fn(x, other, **kw)


def _loss_inputs(loss, shape):
    if loss == "cross_entropy":
        return _inputs(loss, shape, torch.float32)
    x, _ = _inputs("reverse_kl", shape, torch.float32)
    return x, torch.randn(shape)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("reduction,masked", [("mean", False), ("sum", False), ("mean", True),
                                              ("none", False)])  # fmt: skip
def test_default_call_is_one_launch_each_way(loss, reduction, masked, monkeypatch):
    # 3 rows x 64 columns: form="auto" takes the fused form; a mean over counted rows (label CE,
    # a loss_mask) counts them in the kernel. No torch kernel runs: no count, sum, division,
    # fill or zeros. The backward is the rescale launch alone.
    x, other = _loss_inputs(loss, (3, 64))
    kw = {"reduction": reduction}
    if loss == "cross_entropy":
        kw["check_labels"] = False  # the GPU's default (on CPU it checks the labels in torch)
    if masked:
        kw["loss_mask"] = torch.tensor([True, False, True])
    grad_out = torch.ones(()) if reduction != "none" else torch.ones(3)
    xg = x.clone().requires_grad_()
    _call(loss, x, other, **kw)  # first calls allocate the reduction's buffers
    torch.autograd.grad(_call(loss, xg, other, **kw), xg, grad_out)
    launches = _record_launches(monkeypatch)
    with _TorchOps() as fwd_ops:
        _call(loss, x, other, **kw)
    assert launches == ["_entropy_fused_kernel"]
    with _TorchOps() as ops:
        out = _call(loss, xg, other, **kw)
        torch.autograd.grad(out, xg, grad_out)  # no .grad to accumulate into
    assert launches[1:] == ["_entropy_fused_kernel", "_entropy_grad_rescale_kernel"]
    assert set(fwd_ops.ops) <= ALLOCATIONS and set(ops.ops) <= ALLOCATIONS, (fwd_ops.ops, ops.ops)


@pytest.mark.parametrize("loss", ["cross_entropy", "reverse_kl"])
def test_reduction_moves_to_torch_past_the_byte_bound(loss, monkeypatch):
    # 5 rows x 37 fp32 logits = 740 bytes: at a bound of 740 the kernel sums; at 739 torch does
    # (the kernel then writes the loss rows alone). Both give the fp64 reference's loss. The
    # kernel counts label CE's rows whenever it sums (a read bound of 0).
    monkeypatch.setattr(config, "ENTROPY_COUNT_READ_RATIO", 0)
    x, other = _loss_inputs(loss, (5, 37))
    kw = {"check_labels": False} if loss == "cross_entropy" else {}
    ref_out, ref_grad = _ref(loss, x, other)
    assert config.reduce_in_kernel(5, 37, 4)
    _record_launches(monkeypatch)  # the interpreter's copies around a launch are no torch ops
    for bound, torch_sums in ((740, False), (739, True)):
        monkeypatch.setattr(config, "ENTROPY_REDUCE_MAX_BYTES", bound)
        assert config.reduce_in_kernel(5, 37, 4) is not torch_sums
        _call(loss, x, other, **kw)  # allocate the reduction's buffers
        with _TorchOps() as ops:
            out = _call(loss, x, other, **kw)
        torch_ops = set(ops.ops) - ALLOCATIONS
        assert bool(torch_ops) is torch_sums, torch_ops
        out, grad = _run(loss, x, other, **kw)
        _check(loss, out, grad, ref_out, ref_grad, torch.float32, 37)
    monkeypatch.setattr(config, "REDUCE_IN_KERNEL", False)  # NORMLAB_LOSS_REDUCE=0
    assert not config.reduce_in_kernel(1, 1, 1)


@pytest.mark.parametrize("loss", ["cross_entropy", "reverse_kl"])
def test_fewer_rows_than_sms_take_the_chunked_form(loss, monkeypatch):
    # The interpreter stands in for 4 SMs. 300 fp32 columns at a cap of 64 are 5 tiles, and a
    # row's program reads 1200 bytes of logits (2400 with reverse KL's target). With the bound
    # just below that, 3 rows take the chunked form (2 chunks a row, not the measured 1: 6
    # programs for the 4 SMs) and 4 rows the fused one; at the bound, 3 rows stay fused. All
    # against the fp64 reference. One tile (a cap of 512) stays fused.
    monkeypatch.setattr(config, "ENTROPY_AUTO", {**config.ENTROPY_AUTO,
                                                 loss: (("fused", 64),) * 4})  # fmt: skip
    row_bytes = 300 * 4 * (1 if loss == "cross_entropy" else 2)
    assert config.entropy_auto(loss, 300, False, 3, 4, row_bytes) == ("fused", 64)  # 24 KiB
    monkeypatch.setattr(config, "ENTROPY_FEW_ROWS_CHUNK_BYTES", row_bytes - 1)
    assert config.entropy_auto(loss, 300, False, 3, 4, row_bytes) == ("chunked", 64)
    assert config.chunk_layout(300, 64, 4, 4) == (5, 0, 1)
    assert config.chunk_layout(300, 64, 4, 4, 3) == (3, 0, 2)
    kw = {"check_labels": False} if loss == "cross_entropy" else {}
    cases = ((row_bytes - 1, 3, "_entropy_chunked_kernel"),
             (row_bytes - 1, 4, "_entropy_fused_kernel"),
             (row_bytes, 3, "_entropy_fused_kernel"))  # fmt: skip
    for bound, n_rows, kernel in cases:
        monkeypatch.setattr(config, "ENTROPY_FEW_ROWS_CHUNK_BYTES", bound)
        x, other = _loss_inputs(loss, (n_rows, 300))
        launches = _record_launches(monkeypatch)
        out, grad = _run(loss, x, other, **kw)
        assert launches[0] == kernel, (bound, n_rows, launches)
        ref_out, ref_grad = _ref(loss, x, other)
        _check(loss, out, grad, ref_out, ref_grad, torch.float32, 300)
    monkeypatch.setattr(config, "ENTROPY_AUTO", {**config.ENTROPY_AUTO,
                                                 loss: (("fused", 512),) * 4})  # fmt: skip
    assert config.entropy_auto(loss, 300, False, 1, 4) == ("fused", 512)


def test_count_falls_back_to_torch_past_the_read_bound(monkeypatch):
    # 300 rows of 16 fp32 columns with a gradient: counting 300 int64 labels per program would
    # read more than an eighth of the row's bytes and more than 2 KiB, so torch counts (two
    # ops); the sum stays in the kernel.
    x, labels = _inputs("cross_entropy", (300, 16), torch.float32)
    x.requires_grad_()
    spec = config.Spec(config.CE, "fused", 16, "mean", -100, None, 0, 16, None)
    assert not config.count_in_kernel(spec, 300, 16, 4, 8)
    assert config.count_in_kernel(spec, 1, 16, 4, 8)  # 8 bytes x 8 <= 64
    normlab.cross_entropy(x, labels, check_labels=False)
    launches = _record_launches(monkeypatch)
    with _TorchOps() as ops:
        normlab.cross_entropy(x, labels, check_labels=False)
    assert launches == ["_entropy_fused_kernel"]
    assert sorted(set(ops.ops) - ALLOCATIONS) == ["aten.ne.Scalar", "aten.sum.default"]


def test_forward_without_gradient_counts_in_its_kernel(monkeypatch):
    # The same 300 x 16 call without a gradient: only the last program counts, so the kernel
    # does, past the read bound; one launch, no torch op, and the mean over counted rows right.
    x, labels = _inputs("cross_entropy", (300, 16), torch.float32)
    labels[::7] = -100
    spec = config.Spec(config.CE, "fused", 16, "mean", -100, None, 0, 16, None)
    assert config.count_in_kernel(spec, 300, 16, 4, 8, compute_grad=False)
    normlab.cross_entropy(x, labels, check_labels=False)
    launches = _record_launches(monkeypatch)
    with _TorchOps() as ops:
        loss = normlab.cross_entropy(x, labels, check_labels=False)
    assert launches == ["_entropy_fused_kernel"]
    assert not set(ops.ops) - ALLOCATIONS
    want = torch.nn.functional.cross_entropy(x.double(), labels)
    torch.testing.assert_close(loss.double(), want, rtol=1e-5, atol=1e-6)


def test_count_in_kernel_reads_a_bounded_share():
    spec = config.Spec(config.CE, "fused", 4096, "mean", -100, None, 0, 4096, None)
    # 4 int64 labels x 8 <= a bf16 row of 4096; 1024 labels are not.
    assert config.count_in_kernel(spec, 4, 4096, 2, 8)
    assert not config.count_in_kernel(spec, 1024, 4096, 2, 8)
    assert config.count_in_kernel(spec, 1024, 131072, 2, 8)
    # The chunked form: a program reads a chunk (4 tiles of 4096 here), not the row.
    chunk = spec._replace(form="chunked")
    assert not config.count_in_kernel(chunk, 1024, 131072, 2, 8)
    assert config.count_in_kernel(chunk, 512, 131072, 2, 8)
    # Up to 2 KiB of labels a program always counts them: 256 int64 labels beside a 16-column
    # fp32 row (64 bytes), not 257.
    narrow = config.Spec(config.CE, "fused", 16, "mean", -100, None, 0, 16, None)
    assert config.count_in_kernel(narrow, 256, 16, 4, 8)
    assert not config.count_in_kernel(narrow, 257, 16, 4, 8)


def test_count_in_kernel_bounds_the_reads_per_sm():
    # Past the share above, the kernel still counts while one SM's programs read at most
    # ENTROPY_COUNT_SM_BYTES of labels in all: ceil(rows / SMs) programs x rows x 8 bytes. At
    # 132 SMs and a 1446-column bf16 row that holds up to 682 rows (6 x 5456 bytes), not 683.
    assert config.ENTROPY_COUNT_SM_BYTES == 32 * 1024
    spec = config.Spec(config.CE, "fused", 2048, "mean", -100, None, 0, 1446, None)
    assert not config.count_in_kernel(spec, 383, 1446, 2, 8)  # SMs unknown: the share rule
    assert config.count_in_kernel(spec, 383, 1446, 2, 8, sm_count=132)
    assert config.count_in_kernel(spec, 682, 1446, 2, 8, sm_count=132)
    assert not config.count_in_kernel(spec, 683, 1446, 2, 8, sm_count=132)
    assert not config.count_in_kernel(spec, 682, 1446, 2, 9, sm_count=132)  # with a loss_mask
    # The chunked form's programs are rows x chunks (16384 columns a chunk here): 513 rows of
    # 16384 are 513 programs, 4 a SM (16416 bytes); one column more makes two chunks a row,
    # 1026 programs, 8 a SM (32832 bytes).
    chunk = spec._replace(form="chunked", block_cap=4096)
    assert config.entropy_chunk_tiles(4096) * 4096 == 16384
    assert config.count_in_kernel(chunk, 513, 16384, 2, 8, sm_count=132)
    assert not config.count_in_kernel(chunk, 513, 16385, 2, 8, sm_count=132)


@pytest.mark.parametrize("form", ["fused", "chunked"])
@pytest.mark.parametrize("count", ["kernel", "torch", "torch-reduce"])
@pytest.mark.parametrize("loss,reduction,masked", [
    ("cross_entropy", "mean", False), ("cross_entropy", "mean", True),
    ("reverse_kl", "mean", True), ("jsd", "sum", False), ("soft_cross_entropy", "mean", False),
])  # fmt: skip
def test_in_kernel_reduction_and_count(form, count, loss, reduction, masked, monkeypatch):
    # 37 rows with the count and sum stepping 16 rows at a time: three steps, the last partial.
    # Several ignored labels and masked rows; either the kernel counts or torch does; with
    # "torch-reduce" (config.REDUCE_IN_KERNEL off: NORMLAB_LOSS_REDUCE=0) torch also sums.
    monkeypatch.setattr(online, "REDUCE_BLOCK", tl.constexpr(16))
    monkeypatch.setattr(config, "ENTROPY_COUNT_READ_RATIO", 0 if count == "kernel" else 10**9)
    monkeypatch.setattr(config, "REDUCE_IN_KERNEL", count != "torch-reduce")
    n_rows, n_cols = 37, 40
    x, other = _loss_inputs(loss, (n_rows, n_cols))
    if loss == "cross_entropy":
        other[::5] = -100
    kw = {}
    if masked:
        mask = torch.rand(n_rows) < 0.7
        mask[0] = False
        kw["loss_mask"] = mask
    if loss == "jsd":
        kw["beta"] = 0.3
    fn = getattr(normlab, loss)
    xg = x.clone().requires_grad_()
    out = fn(xg, other, form=form, block_cap=16, reduction=reduction, **kw)
    out.backward()
    rfn = getattr(ref, f"{loss}_ref")
    xr = x.double().requires_grad_()
    ref_out = rfn(xr, other.double() if other.is_floating_point() else other,
                  reduction=reduction, **kw)  # fmt: skip
    ref_out.backward()
    _check(loss, out.detach(), xg.grad, ref_out.detach(), xr.grad, torch.float32, n_cols,
           f"{form} {count}")  # fmt: skip
    assert op._reduction_buffers(x.device, n_rows)[0].tolist() == [0, 0]  # both back at 0


def test_many_rows_no_grad_and_grad_accumulate():
    # 1100 rows: more than one step of the default REDUCE_BLOCK; no gradient, then a gradient
    # added into a buffer (the loss detached), both reduced in the kernel.
    x, labels = _inputs("cross_entropy", (1100, 16), torch.float32)
    labels[::7] = -100
    ref_out, ref_grad = _ref("cross_entropy", x, labels)
    with torch.no_grad():
        out = normlab.cross_entropy(x, labels, form="fused")
    torch.testing.assert_close(out, ref_out.float(), rtol=1e-5, atol=0)
    buf = torch.zeros_like(x)
    out = normlab.cross_entropy(x, labels, form="fused", grad_accumulate=buf)
    torch.testing.assert_close(out, ref_out.float(), rtol=1e-5, atol=0)
    torch.testing.assert_close(buf, ref_grad.float(), rtol=1e-5, atol=1e-7)


def test_interrupted_launch_resets_the_ticket(monkeypatch):
    # A launch that stops part way (an exception in the interpreter) leaves tickets taken; the
    # host puts the counter back to 0 so the next call's last program is found.
    x, t = _loss_inputs("reverse_kl", (3, 32))
    real = fused.launch

    def fail(fn, grid, *args, **kwargs):
        args[7].add_(2)  # the ticket: two programs finished, then the launch fails
        raise RuntimeError("stopped")

    monkeypatch.setattr(fused, "launch", fail)
    with pytest.raises(RuntimeError, match="stopped"):
        normlab.reverse_kl(x, t)
    monkeypatch.setattr(fused, "launch", real)
    assert op._reduction_buffers(x.device, 3)[0].tolist() == [0, 0]
    out, grad = _run("reverse_kl", x, t)
    ref_out, ref_grad = _ref("reverse_kl", x, t)
    _check("reverse_kl", out, grad, ref_out, ref_grad, torch.float32, 32)


def test_reduction_buffers_per_thread_and_grown():
    device = torch.device("cpu")
    ticket, rows = op._reduction_buffers(device, 5)
    assert rows.shape[0] >= 5 and ticket.dtype == torch.int32
    again = op._reduction_buffers(device, 3)
    assert again[0] is ticket and again[1] is rows
    grown = op._reduction_buffers(device, rows.shape[0] + 1)
    assert grown[0] is ticket and grown[1].shape[0] > rows.shape[0]
    other = []
    thread = threading.Thread(target=lambda: other.append(op._reduction_buffers(device, 3)))
    thread.start()
    thread.join()
    assert other[0][0] is not ticket


def test_reduction_buffers_kept_for_the_default_stream_only(monkeypatch):
    # On a GPU only the default stream (handle 0) keeps a pair between calls. Any other stream,
    # e.g. the one torch.compile's CUDA graph trees warm up on with allocations going to the
    # graphs' pool, gets a fresh zeroed ticket each call and leaves nothing behind. CPU tensors
    # stand in for the CUDA ones; the stream handle and capture state are faked.
    stream = {"handle": 0}
    monkeypatch.setattr(op, "_current_raw_stream", lambda index: stream["handle"])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    made = []

    def on_cpu(make):
        def make_on_cpu(*args, device=None, **kwargs):
            made.append(make(*args, **kwargs))
            return made[-1]
        return make_on_cpu

    monkeypatch.setattr(torch, "zeros", on_cpu(torch.zeros))
    monkeypatch.setattr(torch, "empty", on_cpu(torch.empty))
    monkeypatch.setattr(op, "_REDUCTION_BUFFERS", {})
    cuda = torch.device("cuda", 0)
    kept = op._reduction_buffers(cuda, 5)
    assert op._reduction_buffers(cuda, 3) == kept and list(op._REDUCTION_BUFFERS) == [0]
    stream["handle"] = 0x7F00
    fresh = [op._reduction_buffers(cuda, 5) for _ in range(2)]
    assert fresh[0][0] is not fresh[1][0] and all(f[0] is not kept[0] for f in fresh)
    assert all(f[0].tolist() == [0, 0] and f[1].shape[0] >= 5 for f in fresh)
    assert list(op._REDUCTION_BUFFERS) == [0]  # nothing kept for the side stream
    stream["handle"] = 0
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert op._reduction_buffers(cuda, 3)[0] is not kept[0]  # a capture: its own, zeroed


@pytest.mark.skipif(normlab.INTERPRET, reason="CUDA graphs need a GPU (benchmarks/h200_round.sh)")
def test_cuda_graph_has_its_own_ticket(monkeypatch):
    # A captured call gets its own ticket (zeroed inside the graph): replays and eager calls
    # between them give the eager loss bit for bit, and every ticket ends at 0.
    monkeypatch.setattr(config, "REDUCE_IN_KERNEL", True)  # as by default
    x = torch.randn(4, 4096, device="cuda", dtype=torch.bfloat16)
    labels = torch.randint(0, 4096, (4,), device="cuda")
    eager = normlab.cross_entropy(x, labels)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        normlab.cross_entropy(x, labels)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = normlab.cross_entropy(x, labels)
    for _ in range(3):
        graph.replay()
        again = normlab.cross_entropy(x, labels)
        torch.cuda.synchronize()
        assert torch.equal(captured, eager) and torch.equal(again, eager)
    assert all(ticket.tolist() == [0, 0] for ticket, _ in op._REDUCTION_BUFFERS.values())
