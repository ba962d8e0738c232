"""The losses as PyTorch ops: validation, autograd, torch.compile, the public functions.

An eager call costs the CPU little: the arguments are checked once, ``config`` picks the form
and tiles, and a ``torch.autograd.Function`` (or, when no gradient is needed, the launchers
alone) runs the kernels through ``normlab._launch``; on a GPU a later call of a signature seen
before replays its first call's launches (``_Signature``). The fused and chunked forms reduce
the loss in the kernel (and count a mean's rows there while cheap), so a default call is one
launch forward and one backward, no torch kernel beside them. Under ``torch.compile`` the same
forward and backward are the Triton ops ``normlab::entropy_fwd`` and
``normlab::entropy_split_bwd``: with static shapes and rows of whole 16-element vectors Inductor
launches their kernels from its own code; otherwise they call opaque custom ops (tens of µs of
dispatch a call; eager calls take neither). The vocab-sharded loss (``group=``) is the Function
in every mode (a process group is no op argument).

The fused and chunked forms write the gradient (for grad_output = 1) in the forward and save
it; the backward scales it by grad_output: in place in an eager backward that frees the graph
(``fused.launch_rescale``, a device-side no-op for grad_output == 1), out of place with
retain_graph=True or in a compiled backward, so any sequence of backwards gives torch's result.
That out-of-place pass reads and writes the gradient once more, so a compiled call that needs the
gradient takes the split form where form="auto" (``config.ENTROPY_COMPILED_GRAD_FORM``).
"""

from __future__ import annotations

import math
import numbers
import operator
import threading

import torch
import torch.distributed as dist

from normlab import _launch, _runtime
from normlab._host import (
    FLOAT_DTYPES,
    check_kernel_tensor,
    function_apply,
    next_pow2,
    plain_tensor,
    rows_view,
)
from normlab.losses import config, sharded
from normlab.losses.chunked import launch_chunked
from normlab.losses.config import CE, GRAD_IN_FORWARD, KINDS, REDUCTIONS
from normlab.losses.fused import launch_fused, launch_rescale
from normlab.losses.split import launch_backward, launch_stats

FORMS = config.FORMS
_F32 = torch.float32
_CPU = torch.device("cpu")


# ---- one call's forward and backward -------------------------------------------------------------


def _rows(spec, logits, other, mask):
    """(x, t, labels, mask): logits and target as (M, V) rows (t = x for label CE), the flat
    labels (x for the distribution losses: a pointer the kernels do not read) and the flat
    loss_mask (or None). 2-D logits are taken as they are (a reshape costs ~1 µs of host)."""
    if logits.dim() == 2:
        x = logits
        n_rows = x.shape[0]
    else:
        n_cols = logits.shape[-1]
        n_rows = logits.shape[:-1].numel()  # not -1: a zero-width vocab shard has V = 0
        x = logits.reshape(n_rows, n_cols)
    if mask is not None and (mask.dim() != 1 or mask.stride(0) != 1):
        mask = mask.reshape(n_rows).contiguous()  # the kernels read it by row index
    if spec.kind == CE:
        return x, x, (other if other.dim() == 1 else other.reshape(-1)), mask
    return x, (other if other.dim() == 2 else other.reshape(x.shape)), x, mask


def _n_valid(spec, labels, mask):
    """A mean over counted rows (label CE's non-ignored ones, a loss_mask's unmasked ones): their
    0-d fp32 count; else None."""
    if not config.counts_valid(spec.kind, spec.reduction, mask is not None):
        return None
    if spec.kind != CE:
        return mask.sum(dtype=_F32)
    valid = labels != spec.ignore_index
    return (valid if mask is None else valid & mask).sum(dtype=_F32)


_REDUCTION_BUFFERS: dict = {}


def _current_raw_stream(index):
    """The current CUDA stream's handle on device ``index``: 0 for the default stream."""
    return torch._C._cuda_getCurrentRawStream(index)


def _reduction_buffers(device, n_rows):
    """(ticket, rows) of a loss reduced in the kernel (online.finish_reduction): a (2,) int32
    ticket counter and the fused grid's row queue, 0 between launches (each launch's last user
    resets them), and an fp32 buffer of at least n_rows for the loss rows on their way to the
    sum. On a GPU one pair is kept for the default stream (its launches run in order; under the
    interpreter, one per thread). A call on any other stream gets a fresh pair: a CUDA graph
    being captured (zeroed inside the graph, never the pair a replay could race with), or the
    side stream that torch.compile's CUDA graph trees warm up on, whose allocations go to the
    graphs' pool and must not outlive the call (a kept pair failed their check of live
    allocations)."""
    if device.type == "cuda":
        if _current_raw_stream(device.index) != 0 or torch.cuda.is_current_stream_capturing():
            return (torch.zeros(2, dtype=torch.int32, device=device),
                    torch.empty(n_rows, dtype=_F32, device=device))  # fmt: skip
        key = device.index
    else:
        key = (device, threading.get_ident())
    buffers = _REDUCTION_BUFFERS.get(key)
    if buffers is None or buffers[1].shape[0] < n_rows:
        ticket = torch.zeros(2, dtype=torch.int32, device=device) if buffers is None \
            else buffers[0]  # fmt: skip
        rows = torch.empty(next_pow2(n_rows), dtype=_F32, device=device)
        buffers = _REDUCTION_BUFFERS[key] = (ticket, rows)
    return buffers


def _grad_in_forward(spec, x, t, labels, mask, grad, compute_grad, accumulate, buffers=None):
    """The fused or chunked form: the loss rows ("none"), else the reduced loss, summed in the
    kernel (config.reduce_in_kernel; else by torch); the gradient (compute_grad) into grad. One
    launch (two or three of the chunked form under the interpreter), plus a torch count for a
    mean over counted rows where config.count_in_kernel says the kernel should not count.
    ``buffers``: the (ticket, rows) pair it reduces through (default: _reduction_buffers'); a
    call that sums in torch reads only its ticket, for the fused grid's row queue."""
    n_rows, n_cols = x.shape
    n_valid = None
    in_kernel = config.reduce_in_kernel(n_rows, n_cols, x.element_size())
    if config.counts_valid(spec.kind, spec.reduction, mask is not None):
        row_bytes = (labels.element_size() if spec.kind == CE else 0) + (mask is not None)
        sm_count = _runtime.sm_count(x.device.index)
        if not (in_kernel and config.count_in_kernel(spec, n_rows, n_cols, x.element_size(),
                                                     row_bytes, compute_grad,
                                                     sm_count)):  # fmt: skip
            n_valid = _n_valid(spec, labels, mask)
    run = launch_fused if spec.form == "fused" else launch_chunked
    if spec.reduction == "none" or not in_kernel:
        loss_rows, out = _launch.buffer((n_rows,), _F32, x.device), None
        ticket = None  # a ticket only for the fused grid's row queue
        if config.takes_fused_grid(spec, compute_grad):
            ticket = (buffers or _reduction_buffers(x.device, 1))[0]
    else:
        out = _launch.buffer((), _F32, x.device)
        ticket, loss_rows = buffers or _reduction_buffers(x.device, n_rows)
    try:
        run(spec, x, t, labels, grad, loss_rows, n_valid, compute_grad, accumulate, mask, out,
            ticket)  # fmt: skip
    except BaseException:
        if ticket is not None:  # a launch stopped part way (the interpreter) may have taken some
            ticket.zero_()
        raise
    if out is None:
        return loss_rows if spec.reduction == "none" else _reduce(spec, loss_rows, n_valid, ())
    return out


def _split_rows(spec, x, t, labels, mask):
    """The split form's (6, M) row statistics (all-reduced with spec.group), the loss rows
    last."""
    if spec.group is not None:
        return sharded.row_stats(spec, x, t, labels, mask)
    return launch_stats(spec, x, t, labels, True, mask)[1]


def _reduce(spec, loss_rows, n_valid, lead_shape):
    if spec.reduction == "none":
        return loss_rows if len(lead_shape) == 1 else loss_rows.reshape(lead_shape)
    if spec.reduction == "mean" and n_valid is None:
        return loss_rows.mean()  # one reduction kernel, no separate division
    total = loss_rows.sum()
    if spec.reduction == "sum":
        return total
    return total / n_valid  # the mean over counted rows (NaN when none is)


def _loss_forward(spec, logits, other, mask, compute_grad, grad=None, buffers=None):
    """(loss, grad | None, row_stats | None, n_valid | None): the reduced loss; the gradient for
    grad_output = 1 (fused and chunked forms; into ``grad`` where given); the split form's (6, M)
    row statistics and the count of a mean over counted rows. ``buffers`` as _grad_in_forward's."""
    x, t, labels, mask = _rows(spec, logits, other, mask)
    if spec.form in GRAD_IN_FORWARD:
        if compute_grad and grad is None:
            grad = torch.empty_like(x)
        loss = _grad_in_forward(spec, x, t, labels, mask, grad, compute_grad, False, buffers)
        if spec.reduction == "none" and logits.dim() != 2:
            loss = loss.reshape(logits.shape[:-1])
        return loss, grad, None, None
    n_valid = _n_valid(spec, labels, mask)
    row_stats = _split_rows(spec, x, t, labels, mask)
    return _reduce(spec, row_stats[5], n_valid, logits.shape[:-1]), None, row_stats, n_valid


def _split_grad(spec, logits, other, mask, row_stats, g_out, n_valid):
    """The split form's gradient from its row statistics, times grad_output ``g_out`` (``n_valid``
    None or empty where the kernels do not read it: ``launch_backward`` launches it only for a
    mean over counted rows)."""
    x, t, labels, mask = _rows(spec, logits, other, mask)
    grad = torch.empty_like(x)
    launch_backward(spec, x, t, labels, row_stats, g_out, n_valid, grad, False, mask)
    return grad.view(logits.shape)


def _grad_output(grad_loss):
    """grad_output as the kernels read it: fp32, a scalar or one value per row."""
    g_out = grad_loss.float()
    if g_out.dim() > 1:
        g_out = g_out.reshape(-1)
    return g_out.contiguous() if g_out.dim() else g_out


def _scaled(grad, g_out, in_place):
    """The saved gradient times grad_output: in place (nothing reads it again) or out of place
    (the saved gradient kept unscaled for another backward)."""
    if in_place:
        launch_rescale(grad, g_out)
        return grad
    scale = g_out[:, None] if g_out.dim() else g_out
    return (grad.float() * scale).to(grad.dtype)


DOUBLE_BACKWARD = (
    "normlab's losses cannot differentiate their gradient (create_graph=True): their backward "
    "is a Triton kernel, and its second derivative would be missing, not computed"
)

_KEEP_GRAPH = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)


def _graph_kept():
    """Whether the running backward keeps the graph (retain_graph / create_graph): torch's
    private query, as torch's own AOT autograd uses it; True (the safe answer) where absent."""
    return True if _KEEP_GRAPH is None else bool(_KEEP_GRAPH())


# ---- eager: an autograd Function -----------------------------------------------------------------


class LossFunction(torch.autograd.Function):
    """One loss call with its gradient (every form; the sharded one with ``spec.group``)."""

    @staticmethod
    def forward(ctx, logits, other, mask, spec):
        loss, grad, row_stats, n_valid = _loss_forward(spec, logits, other, mask, True)
        ctx.spec = spec
        # None: the (M, V) gradient is already shaped like logits (a view costs host time)
        ctx.shape = None if logits.dim() == 2 else logits.shape
        if grad is not None:
            ctx.save_for_backward(grad)
        else:
            if spec.reduction == "none":
                loss = loss.clone()  # a row of the saved statistics: not the caller's to modify
            ctx.save_for_backward(logits, other, mask, row_stats, n_valid)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        if torch.is_grad_enabled():  # create_graph=True: no kernel here is differentiable
            raise RuntimeError(DOUBLE_BACKWARD)
        g_out = _grad_output(grad_loss)
        if ctx.spec.form in GRAD_IN_FORWARD:
            (grad,) = ctx.saved_tensors
            grad = _scaled(grad, g_out, not _graph_kept())
            return (grad if ctx.shape is None else grad.view(ctx.shape)), None, None, None
        logits, other, mask, row_stats, n_valid = ctx.saved_tensors
        grad = _split_grad(ctx.spec, logits, other, mask, row_stats, g_out, n_valid)
        return grad, None, None, None


_APPLY = function_apply(LossFunction)  # LossFunction.apply less its Python wrapper


# ---- calls on a GPU: checked once per signature, then replayed -----------------------------------
#
# The first call of a signature (shapes, strides, dtypes, devices, alignment and every other
# argument) is checked and resolved in full and its launches recorded (``_launch.record``); a
# later one allocates the gradient and outputs and relaunches them with its own pointers. Calls
# that pass options to the kernels by keyword, count rows in torch or reduce in torch, the split
# form, ``group=`` and ``grad_accumulate=`` take the full path every time.

_SIGNATURES: dict = {}


def _input_key(t):
    """What a replay depends on in an input: layout, dtype, device, and its start's alignment to
    16 bytes and to the kernels' frames (config.frames)."""
    if t is None:
        return None
    ptr = t.data_ptr()
    return (t.shape, t.stride(), t.dtype, t.get_device(), not ptr & 15,
            not ptr % config.ENTROPY_FRAME_BYTES)  # fmt: skip


class _Signature:
    """A checked loss signature: its spec and recorded forwards, by the gradient's alignment to
    the kernels' frames (config.frames reads it; a CUDA allocation is 512-byte aligned, so on a
    GPU there is one). ``replayable`` turns False where a call could not be recorded."""

    __slots__ = ("compute_grad", "forwards", "n_rows", "queue", "reduce_in_kernel", "replayable",
                 "rescales", "spec")

    def __init__(self, spec, n_rows, n_cols, esize, compute_grad):
        self.spec, self.n_rows, self.compute_grad = spec, n_rows, compute_grad
        self.reduce_in_kernel = (spec.reduction != "none"
                                 and config.reduce_in_kernel(n_rows, n_cols, esize))  # fmt: skip
        self.queue = config.takes_fused_grid(spec, compute_grad)  # a ticket, for its row queue
        self.forwards: dict = {}
        self.rescales: dict = {}  # the backward's in-place rescale, by grad_output's dims
        self.replayable = True

    def run(self, logits, other, mask):
        """(loss, gradient as (M, V) rows or None) of one call."""
        n_rows, device = self.n_rows, logits.device
        grad = (logits.new_empty((n_rows, logits.shape[-1])) if self.compute_grad
                else None)  # fmt: skip
        ticket, rows = None, None
        if self.reduce_in_kernel:
            ticket, rows = _reduction_buffers(device, n_rows)
        elif self.queue:
            ticket = _reduction_buffers(device, 1)[0]
        frame = None if grad is None else not grad.data_ptr() % config.ENTROPY_FRAME_BYTES
        replay = self.forwards.get(frame)
        if replay is not None:
            (loss,) = replay((logits, other, mask, grad, ticket, rows), None)
        else:
            # (views of the caller's memory: the signature's first call checked that)
            roles = (rows_view(logits), rows_view(other, self.spec.kind == CE),
                     rows_view(mask, True), grad, ticket, rows)  # fmt: skip
            buffers = None if ticket is None else (ticket, rows)
            (loss,), replay = _launch.record(
                lambda: _loss_forward(self.spec, *roles[:3], self.compute_grad, grad,
                                      buffers)[:1], roles)  # fmt: skip
            self.forwards[frame] = replay
            self.replayable = replay is not None
        if self.spec.reduction == "none" and logits.dim() != 2:
            loss = loss.view(logits.shape[:-1])
        return loss, grad

    def rescale(self, grad, g_out):
        """grad *= g_out in place (fused.launch_rescale), replayed after its first call."""
        replay = self.rescales.get(g_out.dim(), _launch.UNSEEN)
        if replay is _launch.UNSEEN:
            _, self.rescales[g_out.dim()] = _launch.record(
                lambda: (launch_rescale(grad, g_out), grad)[1:], (grad, g_out))
        elif replay is None:
            launch_rescale(grad, g_out)
        else:
            replay((grad, g_out), None)
        return grad


class ReplayedLossFunction(torch.autograd.Function):
    """``LossFunction`` of the fused and chunked forms for a checked signature."""

    @staticmethod
    def forward(ctx, logits, other, mask, sig):
        loss, grad = sig.run(logits, other, mask)
        ctx.save_for_backward(grad)
        ctx.sig = sig
        ctx.shape = None if logits.dim() == 2 else logits.shape
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        if torch.is_grad_enabled():
            raise RuntimeError(DOUBLE_BACKWARD)
        (grad,) = ctx.saved_tensors
        g_out = _grad_output(grad_loss)
        # in place where nothing reads the saved gradient again (as LossFunction's backward)
        grad = _scaled(grad, g_out, False) if _graph_kept() else ctx.sig.rescale(grad, g_out)
        return (grad if ctx.shape is None else grad.view(ctx.shape)), None, None, None


_REPLAYED_APPLY = function_apply(ReplayedLossFunction)


def _signature_key(name, logits, other, mask, options):
    """A call's signature, or None where it is never replayed (replay off, a compiled graph, a
    tensor subclass, an unhashable argument)."""
    if not _launch.REPLAY or not plain_tensor(logits) or torch.compiler.is_compiling():
        return None
    try:
        key = (name, _input_key(logits), _input_key(other), _input_key(mask), options,
               logits.requires_grad and torch.is_grad_enabled(), _launch.current_device())
        hash(key)
    except (AttributeError, TypeError, RuntimeError):  # not tensors, unhashable options, a sparse
        return None  # tensor's missing strides: the full path's errors
    return key


def _replayed(key, logits, other, mask):
    """The loss of a call whose signature was checked before, or None (first seen, or not
    replayable: the full path runs)."""
    sig = _SIGNATURES.get(key)
    if sig is None or not sig.replayable:
        return None
    if sig.compute_grad:
        return _REPLAYED_APPLY(logits, other, mask, sig)
    return sig.run(logits, other, mask)[0]


def _first_call(key, name, inputs, rows, spec, grad_accumulate):
    """A checked call: the caller's (logits, other, mask) and the rows ``_run`` takes of them
    (copies where columns were strided). Recorded as its signature's first where a replay can
    hand the kernels the caller's own tensors; else run by ``_run``."""
    if len(_SIGNATURES) >= _launch.MAX_REPLAYS:
        _SIGNATURES.clear()
    logits, other, mask = inputs
    views = (rows_view(logits), rows_view(other, spec.kind == CE), rows_view(mask, True))
    replayable = (
        spec.form in GRAD_IN_FORWARD and spec.group is None and grad_accumulate is None
        and logits.numel() and rows[0] is logits and rows[1] is other
        and all((v is None) == (t is None) for v, t in zip(views, inputs, strict=True))
        and (mask is None or views[2].stride(0) == 1)
    )  # fmt: skip
    if not replayable:
        _SIGNATURES[key] = None
        return _run(name, *rows, spec, grad_accumulate)
    n_cols = logits.shape[-1]
    compute_grad = logits.requires_grad and torch.is_grad_enabled()
    sig = _SIGNATURES[key] = _Signature(spec, logits.numel() // n_cols, n_cols,
                                        logits.element_size(), compute_grad)  # fmt: skip
    if compute_grad:
        return _REPLAYED_APPLY(logits, other, mask, sig)
    return sig.run(logits, other, mask)[0]


# ---- torch.compile: Triton ops -------------------------------------------------------------------
#
# A compiled call runs ``normlab::entropy_fwd``, and the split form's backward
# ``normlab::entropy_split_bwd``: Triton ops, as the norms' (``norms.op``). Where the shapes are
# static torch.compile traces their bodies (the form's launchers, the reduction's torch ops), each
# launch a ``wrap_triton`` node that Inductor launches from its own code. Where they are
# symbolic, and under the interpreter, the body is one call of ``normlab::entropy_fwd_planned``
# (``entropy_split_bwd_planned``): an opaque custom op that runs the eager path per call (tens of
# µs of dispatch; a signature's later calls replay its first's launches).

TRACEABLE = not _runtime.INTERPRET


def _traced_launches(kind, logits, other, *tensors) -> bool:
    """Can the body trace its launches: kernels that can enter a graph, static shapes (no
    torch.SymInt among the sizes and strides), and rows of whole 16-element vectors? A traced
    tensor has no address, so rows of other widths (V = 50257) would lose the 16-byte frames
    that an eager call reads them in (config.frames): up to 1.75x the device time of the
    split form (reverse KL at 528 x 50257). They keep the opaque op."""
    rows = (logits,) if kind == CE else (logits, other)
    return (TRACEABLE
            and all(type(n) is int for t in (logits, other, *tensors) if t is not None
                    for n in (*t.shape, *t.stride()))
            and all(n % 16 == 0 for t in rows for n in (t.shape[-1], *t.stride()[:-1])))


def _local_spec(kind, form, block_cap, reduction, ignore_index, n_cols, loss_mask, temperature,
                beta, label_smoothing, z_loss, softcap):  # fmt: skip
    options = config.options(kind, temperature, beta, label_smoothing, z_loss, softcap,
                             loss_mask is not None)  # fmt: skip
    return config.Spec(kind, form, block_cap, reduction, ignore_index, None, 0, n_cols, options)


_FwdOutputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _fwd_outputs(logits, reduction, loss, grad, row_stats, n_valid) -> _FwdOutputs:
    """(loss, grad, row_stats, n_valid), absent ones empty (ops return no None); op outputs may
    not alias, so a split form's per-row losses (a row of row_stats) are copied."""
    if row_stats is not None and reduction == "none":
        loss = loss.clone()
    return (loss, grad if grad is not None else logits.new_empty((0,)),
            row_stats if row_stats is not None else logits.new_empty((0,), dtype=_F32),
            n_valid if n_valid is not None else logits.new_empty((0,), dtype=_F32))  # fmt: skip


def _entropy_fwd_eager(logits, other, kind, form, block_cap, reduction, ignore_index,
                       compute_grad, loss_mask, temperature, beta, label_smoothing, z_loss,
                       softcap):  # fmt: skip
    """The ops' forward on real tensors. A signature's later calls replay its first's."""
    args = (kind, form, block_cap, reduction, ignore_index, compute_grad, temperature, beta,
            label_smoothing, z_loss, softcap)  # fmt: skip
    key = _signature_key("entropy_fwd", logits, other, loss_mask, args)
    sig = _SIGNATURES.get(key) if key is not None else None
    if sig is None:
        spec = _local_spec(kind, form, block_cap, reduction, ignore_index, logits.shape[-1],
                           loss_mask, temperature, beta, label_smoothing, z_loss,
                           softcap)  # fmt: skip
        if key is not None and key not in _SIGNATURES:
            sig = _op_signature(key, spec, logits, other, loss_mask, compute_grad)
    if sig is not None and sig.replayable:
        loss, grad = sig.run(logits, other, loss_mask)
        return _fwd_outputs(logits, reduction, loss, grad, None, None)
    if sig is not None:
        spec = sig.spec
    out = _loss_forward(spec, logits, other, loss_mask, compute_grad)
    return _fwd_outputs(logits, reduction, *out)


def _op_signature(key, spec, logits, other, mask, compute_grad):
    """The eager op body's first call of ``key``: a signature to replay where the form writes
    the gradient in the forward and the kernels can take the op's own tensors as rows, else None
    (kept, so the check runs once)."""
    if len(_SIGNATURES) >= _launch.MAX_REPLAYS:
        _SIGNATURES.clear()
    views = (rows_view(logits), rows_view(other, spec.kind == CE), rows_view(mask, True))
    replayable = (spec.form in GRAD_IN_FORWARD and logits.numel() and views[0] is not None
                  and views[1] is not None and (mask is None) == (views[2] is None)
                  and (mask is None or views[2].stride(0) == 1))  # fmt: skip
    n_cols = logits.shape[-1]
    sig = _Signature(spec, logits.numel() // n_cols, n_cols, logits.element_size(),
                     compute_grad) if replayable else None  # fmt: skip
    _SIGNATURES[key] = sig
    return sig


@torch.library.custom_op("normlab::entropy_fwd_planned", mutates_args=())
def _entropy_fwd_planned_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    kind: int,
    form: str,
    block_cap: int,
    reduction: str,
    ignore_index: int,
    compute_grad: bool,
    loss_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    beta: float = 0.5,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float = 0.0,
) -> _FwdOutputs:
    """``entropy_fwd`` as an opaque op: the eager path per call."""
    return _entropy_fwd_eager(logits, other, kind, form, block_cap, reduction, ignore_index,
                              compute_grad, loss_mask, temperature, beta, label_smoothing, z_loss,
                              softcap)  # fmt: skip


@_entropy_fwd_planned_op.register_fake
def _(logits, other, kind, form, block_cap, reduction, ignore_index, compute_grad,
      loss_mask=None, *options):  # fmt: skip
    n_cols = logits.shape[-1]
    n_rows = logits.numel() // n_cols
    loss = logits.new_empty(logits.shape[:-1] if reduction == "none" else (), dtype=_F32)
    grad_shape = (n_rows, n_cols) if compute_grad and form in GRAD_IN_FORWARD else (0,)
    stats_shape = (6, n_rows) if form == "split" else (0,)
    counted = form == "split" and config.counts_valid(kind, reduction, loss_mask is not None)
    valid_shape = () if counted else (0,)
    return (loss, logits.new_empty(grad_shape), logits.new_empty(stats_shape, dtype=_F32),
            logits.new_empty(valid_shape, dtype=_F32))  # fmt: skip


@torch.library.triton_op("normlab::entropy_fwd", mutates_args=())
def _entropy_fwd_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    kind: int,
    form: str,
    block_cap: int | None,
    reduction: str,
    ignore_index: int,
    compute_grad: bool,
    loss_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    beta: float = 0.5,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | None = None,
) -> _FwdOutputs:
    """(loss, grad, row_stats, n_valid) of one unsharded call (see _loss_forward); absent ones
    are empty tensors. ``other``: target logits, or the labels. The arguments are the public
    function's (``form`` "auto", ``block_cap`` None), checked here as there: in a compiled call
    the body runs at trace time. Also the fake kernel."""
    spec, (x, t, mask) = _op_spec(logits, other, kind, form, block_cap, reduction, ignore_index,
                                  compute_grad, loss_mask, temperature, beta, label_smoothing,
                                  z_loss, softcap)  # fmt: skip
    o = spec.options or config.Options()
    args = (x, t, kind, spec.form, spec.block_cap, reduction, spec.ignore_index, compute_grad,
            mask, o.temperature, o.beta, o.label_smoothing, o.z_loss, o.softcap)  # fmt: skip
    if not _launch.is_traced(logits):  # called eagerly: as any eager call
        return _entropy_fwd_eager(*args)
    if not _traced_launches(kind, x, t, mask):
        return torch.ops.normlab.entropy_fwd_planned(*args)
    n_rows = x.numel() // x.shape[-1]
    # A graph keeps no buffer between calls: a fresh ticket and queue (0) and loss rows per call.
    buffers = (x.new_zeros((2,), dtype=torch.int32), x.new_empty((n_rows,), dtype=_F32))
    with _launch.traced():
        out = _loss_forward(spec, x, t, mask, compute_grad, buffers=buffers)
    return _fwd_outputs(x, reduction, *out)


_NAMES = {kind: name for name, kind in KINDS.items()}


def _op_spec(logits, other, kind, form, block_cap, reduction, ignore_index, compute_grad,
             loss_mask, temperature, beta, label_smoothing, z_loss, softcap):  # fmt: skip
    """The public checks of an op call (but a target's requires_grad: the op's tensors carry
    none); its Spec and rows. A traced call that needs the gradient plans as a compiled one."""
    name = _NAMES.get(kind)
    if name is None:
        raise ValueError(f"normlab::entropy_fwd: kind must be one of {sorted(_NAMES)}, got {kind}")
    compiled_grad = compute_grad and _launch.is_traced(logits)
    if kind == CE:
        return _label_spec(name, logits, other, ignore_index, reduction, label_smoothing, z_loss,
                           softcap, loss_mask, form, block_cap, None, False,
                           compiled_grad)  # fmt: skip
    return _distribution_spec(name, logits, other, form, block_cap, reduction, None, temperature,
                              loss_mask, beta if kind == config.JSD else None,
                              compiled_grad)  # fmt: skip


def _op_form(logits, other, kind, form, block_cap, compute_grad, temperature):
    """(form, block cap) that ``_op_spec`` resolves for these arguments, checked before."""
    compiled_grad = compute_grad and _launch.is_traced(logits)
    if kind == CE:  # (label CE has no temperature)
        other, temperature = None, 1.0
    return _resolve(_NAMES[kind], logits, int(logits.shape[-1]), form, block_cap, None, other,
                    temperature, compiled_grad)  # fmt: skip


def _split_bwd(logits, other, row_stats, g_out, n_valid, kind, block_cap, reduction,
               ignore_index, loss_mask, temperature, beta, label_smoothing, z_loss,
               softcap):  # fmt: skip
    spec = _local_spec(kind, "split", block_cap, reduction, ignore_index, logits.shape[-1],
                       loss_mask, temperature, beta, label_smoothing, z_loss,
                       softcap or 0.0)  # fmt: skip
    return _split_grad(spec, logits, other, loss_mask, row_stats, g_out, n_valid)


@torch.library.custom_op("normlab::entropy_split_bwd_planned", mutates_args=())
def _entropy_split_bwd_planned_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    row_stats: torch.Tensor,
    g_out: torch.Tensor,
    n_valid: torch.Tensor,
    kind: int,
    block_cap: int,
    reduction: str,
    ignore_index: int,
    loss_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    beta: float = 0.5,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """``entropy_split_bwd`` as an opaque op."""
    return _split_bwd(logits, other, row_stats, g_out, n_valid, kind, block_cap, reduction,
                      ignore_index, loss_mask, temperature, beta, label_smoothing, z_loss,
                      softcap)  # fmt: skip


@_entropy_split_bwd_planned_op.register_fake
def _(logits, *args):
    return logits.new_empty(logits.shape)


@torch.library.triton_op("normlab::entropy_split_bwd", mutates_args=())
def _entropy_split_bwd_op(
    logits: torch.Tensor,
    other: torch.Tensor,
    row_stats: torch.Tensor,
    g_out: torch.Tensor,
    n_valid: torch.Tensor,
    kind: int,
    block_cap: int,
    reduction: str,
    ignore_index: int,
    loss_mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    beta: float = 0.5,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    softcap: float | None = None,
) -> torch.Tensor:
    """The split form's d loss / d logits (see _split_grad) of the forward op's inputs (the
    caller's tensors: their rows made again as the forward made them), its block cap resolved.
    Also the fake kernel."""
    x = _contiguous_rows(logits)
    t = _label_rows(other, ignore_index) if kind == CE else _contiguous_rows(other)
    args = (x, t, row_stats, g_out, n_valid, kind, block_cap, reduction, ignore_index, loss_mask,
            temperature, beta, label_smoothing, z_loss, softcap)  # fmt: skip
    if not _launch.is_traced(logits):
        grad = _split_bwd(*args)
    elif not _traced_launches(kind, x, t, loss_mask, g_out):
        grad = torch.ops.normlab.entropy_split_bwd_planned(*args)
    else:
        with _launch.traced():
            grad = _split_bwd(*args)
    return grad.view(logits.shape)


_N_FWD_INPUTS = 14


def _setup_context(ctx, inputs, output):
    logits, other, kind, form, block_cap, reduction, ignore_index, compute_grad, *rest = inputs
    loss_mask, options = (rest[0], tuple(rest[1:])) if rest else (None, ())
    temperature = options[0] if options else 1.0
    form, block_cap = _op_form(logits, other, kind, form, block_cap, compute_grad, temperature)
    _, grad, row_stats, n_valid = output
    ctx.args = (kind, form, block_cap, reduction, ignore_index)
    ctx.options = options
    ctx.logits_shape = logits.shape
    if form in GRAD_IN_FORWARD:
        ctx.save_for_backward(grad)
    else:
        ctx.save_for_backward(logits, other, row_stats, n_valid, loss_mask)
    ctx.set_materialize_grads(False)


def _custom_op_backward(ctx, grad_loss, _dgrad, _dstats, _dn_valid):
    kind, form, block_cap, reduction, ignore_index = ctx.args
    if grad_loss is None:
        return (None,) * _N_FWD_INPUTS
    g_out = _grad_output(grad_loss)
    if form not in GRAD_IN_FORWARD:
        logits, other, row_stats, n_valid, loss_mask = ctx.saved_tensors
        grad = torch.ops.normlab.entropy_split_bwd(logits, other, row_stats, g_out, n_valid, kind,
                                                   block_cap, reduction, ignore_index, loss_mask,
                                                   *ctx.options)  # fmt: skip
        return (grad,) + (None,) * (_N_FWD_INPUTS - 1)
    (grad,) = ctx.saved_tensors
    traced = torch.compiler.is_compiling() or type(grad) is not torch.Tensor  # fake / functional
    # A traced backward may be replayed: out of place, as with retain_graph=True.
    in_place = not traced and not _graph_kept()
    return (_scaled(grad, g_out, in_place).view(ctx.logits_shape),) + (None,) * (_N_FWD_INPUTS - 1)


_entropy_fwd_op.register_autograd(_custom_op_backward, setup_context=_setup_context)


# ---- public functions ----------------------------------------------------------------------------


def _integer(v) -> int | None:
    """An int of an integer (Python's or numpy's, not a bool), else None."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        return None
    return int(v)


def _check_common(name, logits, form, block_cap, reduction, group):
    """Validate the arguments every loss takes; return block_cap as an int (or None)."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"{name}: logits must be a torch.Tensor, got {type(logits).__name__}")
    check_kernel_tensor(name, "logits", logits)
    if logits.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: logits dtype must be float32, float16 or bfloat16, got {logits.dtype}"
        )
    if logits.dim() < 1:
        raise ValueError(f"{name}: logits must have a vocabulary last dim, got a 0-dim tensor")
    if _runtime.INTERPRET and logits.device.type != "cpu":
        raise ValueError(f"{name}: the Triton interpreter runs on CPU tensors, got {logits.device}")
    if not _runtime.INTERPRET and logits.device.type != "cuda":
        raise ValueError(f"{name}: logits must be on a CUDA device, got {logits.device}")
    if form not in FORMS:
        raise ValueError(f"{name}: form must be one of {FORMS}, got {form!r}")
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if block_cap is not None:
        lo, hi = config.ENTROPY_MIN_BLOCK, config.ENTROPY_MAX_BLOCK
        cap = _integer(block_cap)
        if cap is None or cap < lo or cap > hi or cap & (cap - 1):
            raise ValueError(
                f"{name}: block_cap must be one of {config.ENTROPY_BLOCK_CAPS} "
                f"(or any power of two in [{lo}, {hi}]), got {block_cap!r}"
            )
        block_cap = cap
    if group is not None:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(f"{name}: group= given but torch.distributed is not initialized")
        if form in GRAD_IN_FORWARD:
            raise ValueError(f"{name}: form={form!r} cannot all-reduce mid-kernel; use 'split' "
                             "(or 'auto') with group=")  # fmt: skip
    return block_cap


@torch.compiler.assume_constant_result
def _sm_count(index) -> int:
    """_runtime.sm_count, which Dynamo runs once and keeps as a constant (it warns when it
    traces into a functools.cache wrapper)."""
    return _runtime.sm_count(index)


def _resolve(name, logits, n_cols, form, block_cap, group, target=None, temperature=1.0,
             compiled_grad=None):  # fmt: skip
    """(form, block cap) of a call: "auto" and None resolved. ``compiled_grad``: a compiled call
    that needs the gradient (None: a compiled call of logits that require it)."""
    n_rows = logits.numel() // n_cols if n_cols else 0
    row_bytes = n_cols * (logits.element_size() + (0 if target is None else target.element_size()))
    if compiled_grad is None:
        compiled_grad = (torch.compiler.is_compiling() and logits.requires_grad
                         and torch.is_grad_enabled())  # fmt: skip
    auto_form, auto_cap = config.entropy_auto(name, n_cols, group is not None, n_rows,
                                              _sm_count(logits.device.index), row_bytes,
                                              compiled_grad, temperature != 1.0)  # fmt: skip
    return (auto_form if form == "auto" else form), (auto_cap if block_cap is None else block_cap)


def _contiguous_rows(x):
    """Rows may be strided, columns must be unit-stride: copy otherwise (documented)."""
    if x.dim() == 2 and x.stride(1) == 1:  # (M, V) rows as they are: no view to try
        return x
    if x.stride(-1) != 1:
        x = x.contiguous()
    try:
        x.view(-1, x.shape[-1])
    except RuntimeError:
        x = x.contiguous()
    return x


def _check_grad_accumulate(name, grad_accumulate, logits):
    if not isinstance(grad_accumulate, torch.Tensor):
        raise TypeError(
            f"{name}: grad_accumulate must be a tensor, got {type(grad_accumulate).__name__}"
        )
    if grad_accumulate.shape != logits.shape:
        raise ValueError(
            f"{name}: grad_accumulate shape {tuple(grad_accumulate.shape)} "
            f"!= logits shape {tuple(logits.shape)}"
        )
    if grad_accumulate.dtype not in (torch.float32, logits.dtype):
        raise TypeError(
            f"{name}: grad_accumulate dtype must be float32 or {logits.dtype}, "
            f"got {grad_accumulate.dtype}"
        )
    if grad_accumulate.device != logits.device or not grad_accumulate.is_contiguous():
        raise ValueError(f"{name}: grad_accumulate must be contiguous and on {logits.device}")


def _check_per_row(name, what, t, logits, dtypes):
    """``t`` (labels, loss_mask) holds one value per row of ``logits``: a tensor of one of
    ``dtypes``, shaped ``logits.shape[:-1]``, on logits' device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {what} must be a torch.Tensor, got {type(t).__name__}")
    check_kernel_tensor(name, what, t)
    if t.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name}: {what} dtype must be {names}, got {t.dtype}")
    if t.shape != logits.shape[:-1]:
        raise ValueError(
            f"{name}: {what} shape {tuple(t.shape)} "
            f"!= logits.shape[:-1] {tuple(logits.shape[:-1])}"
        )
    if t.device != logits.device:
        raise ValueError(f"{name}: {what} on {t.device}, logits on {logits.device}")


def _check_mask(name, loss_mask, logits):
    _check_per_row(name, "loss_mask", loss_mask, logits, (torch.bool,))


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _ignore_index(name, value):
    """ignore_index as an int in int64's range (torch's: an int, not a bool or a float)."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: ignore_index must be an int, got {value!r}") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{name}: ignore_index={value} is outside int64's range")
    return value


def _real(name, arg, value):
    """A finite real number (Python's or numpy's, not a bool) as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}: {arg} must be a finite real number, got {value!r}")
    return float(value)


def _distribution_options(name, temperature, beta, loss_mask, logits):
    """The distribution losses' Options (None when every one is at its default)."""
    if temperature != 1.0 or temperature is True:
        temperature = _real(name, "temperature", temperature)
        lo, hi = config.TEMPERATURE_MIN, config.TEMPERATURE_MAX
        if not lo <= temperature <= hi:
            raise ValueError(f"{name}: temperature must be in [2**-14, 2**64] (the kernels' "
                             f"fp32 shift of x / T), got {temperature!r}")  # fmt: skip
    if beta is not None:  # JSD
        beta = _real(name, "beta", beta)
        if not 0.0 < beta < 1.0:
            raise ValueError(f"{name}: beta must be in (0, 1), got {beta!r}")
    if loss_mask is not None:
        _check_mask(name, loss_mask, logits)
    return config.options(KINDS[name], temperature, 0.5 if beta is None else beta, 0.0, 0.0, 0.0,
                          loss_mask is not None)  # fmt: skip


def _label_options(name, label_smoothing, z_loss, softcap, loss_mask, logits):
    """cross_entropy's Options (None when every one is at its default)."""
    if label_smoothing != 0.0:
        label_smoothing = _real(name, "label_smoothing", label_smoothing)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(
                f"{name}: label_smoothing must be in [0, 1], got {label_smoothing!r}"
            )
    if z_loss != 0.0:
        z_loss = _real(name, "z_loss", z_loss)
        if z_loss < 0:
            raise ValueError(f"{name}: z_loss must be >= 0, got {z_loss!r}")
    if softcap is not None:
        softcap = _real(name, "softcap", softcap)
        if softcap <= 0:
            raise ValueError(f"{name}: softcap must be > 0 (or None), got {softcap!r}")
    if loss_mask is not None:
        _check_mask(name, loss_mask, logits)
    return config.options(CE, 1.0, 0.5, label_smoothing, z_loss, softcap or 0.0,
                          loss_mask is not None)  # fmt: skip


def _run(name, logits, other, mask, spec, grad_accumulate):
    if grad_accumulate is not None:
        _check_grad_accumulate(name, grad_accumulate, logits)
    # No element: torch's values without a kernel. (A zero-width vocab shard of non-empty rows
    # still joins its group's all-reduces, below.)
    if logits.numel() == 0 and (spec.group is None or logits.shape[:-1].numel() == 0):
        return _empty_loss(spec, logits, other, mask, grad_accumulate is None)
    if grad_accumulate is not None:
        return _accumulate(spec, logits, other, mask, grad_accumulate)
    compute_grad = logits.requires_grad and torch.is_grad_enabled()
    if torch.compiler.is_compiling():  # group= (other calls: _compiled_loss)
        return LossFunction.apply(logits, other, mask, spec)  # Dynamo traces the Function
    if compute_grad:
        return _APPLY(logits, other, mask, spec)
    return _loss_forward(spec, logits, other, mask, False)[0]


def _accumulate(spec, logits, other, mask, grad_accumulate):
    """Loss and gradient now, the gradient (grad_output = 1) added into the caller's buffer; the
    loss detached."""
    with torch.no_grad():
        x, t, labels, mask = _rows(spec, logits, other, mask)
        grad = grad_accumulate.view(x.shape)
        if spec.form in GRAD_IN_FORWARD:
            loss = _grad_in_forward(spec, x, t, labels, mask, grad, True, True)
            return loss if spec.reduction != "none" else _reduce(spec, loss, None,
                                                                 logits.shape[:-1])  # fmt: skip
        n_valid = _n_valid(spec, labels, mask)
        row_stats = _split_rows(spec, x, t, labels, mask)
        ones = torch.ones((), dtype=_F32, device=x.device)
        launch_backward(spec, x, t, labels, row_stats, ones, n_valid, grad, True, mask)
        return _reduce(spec, row_stats[5], n_valid, logits.shape[:-1])


def _empty_loss(spec, logits, other, mask, with_graph):
    """The loss of logits with no element (zero rows, or V = 0), as torch's: each row an empty
    sum, 0 (label CE: 0 where ignored, NaN for any other label, which has no column: the
    kernels' unchecked out-of-range value; masked rows 0); "mean" of zero (counted) rows NaN,
    "sum" 0. The gradient (with_graph) is empty, shaped like logits."""
    rows = logits.float().sum(-1) * 0.0  # zeros shaped logits.shape[:-1], an autograd path
    if not with_graph:
        rows = rows.detach()
    counted = mask
    if spec.kind == CE:
        valid = other != spec.ignore_index
        counted = valid if mask is None else valid & mask
        rows = torch.where(~counted, rows, float("nan"))
    if spec.reduction == "none":
        return rows
    if spec.reduction == "sum":
        return rows.sum()
    if counted is not None:  # over the counted rows
        return rows.sum() / counted.sum(dtype=torch.float32)
    return rows.mean()


def _compiled_loss(kind, logits, other, loss_mask, form, block_cap, reduction, ignore_index,
                   temperature, beta, label_smoothing, z_loss, softcap):  # fmt: skip
    """The loss inside torch.compile, or None where the full path runs: no element, or a target
    that requires grad (its error). Dynamo guards every global its trace reads and checks those
    guards on each call, so this reads the op alone: the checks and the plan run in the op's
    body, once, at trace time."""
    if not logits.numel() or (other.requires_grad and torch.is_grad_enabled()):
        return None
    compute_grad = logits.requires_grad and torch.is_grad_enabled()
    return torch.ops.normlab.entropy_fwd(logits, other, kind, form, block_cap, reduction,
                                         ignore_index, compute_grad, loss_mask, temperature, beta,
                                         label_smoothing, z_loss, softcap)[0]  # fmt: skip


def _distribution_loss(name, logits, target_logits, form, block_cap, reduction, group,
                       grad_accumulate, temperature=1.0, loss_mask=None, beta=None):  # fmt: skip
    if torch.compiler.is_compiling() and group is None and grad_accumulate is None:
        loss = _compiled_loss(KINDS[name], logits, target_logits, loss_mask, form, block_cap,
                              reduction, 0, temperature, 0.5 if beta is None else beta, 0.0,
                              0.0, None)  # (no defaults read: each would be a guard)
        if loss is not None:
            return loss
    if _launch.SEVERAL_GPUS and _launch.off_device(logits):
        with _launch.on_device(logits):
            return _distribution_loss(name, logits, target_logits, form, block_cap, reduction,
                                      group, grad_accumulate, temperature, loss_mask, beta)
    key = None
    if group is None and grad_accumulate is None:
        key = _signature_key(name, logits, target_logits, loss_mask,
                             (form, block_cap, type(block_cap), reduction, temperature,
                              type(temperature), beta, type(beta),
                              getattr(target_logits, "requires_grad", None)))  # fmt: skip
        loss = None if key is None else _replayed(key, logits, target_logits, loss_mask)
        if loss is not None:
            return loss
    inputs = (logits, target_logits, loss_mask)
    if isinstance(target_logits, torch.Tensor) and target_logits.requires_grad and (
            torch.is_grad_enabled()):  # fmt: skip
        raise ValueError(
            f"{name}: no gradient with respect to target_logits is computed; "
            "pass target_logits.detach()"
        )
    spec, rows = _distribution_spec(name, logits, target_logits, form, block_cap, reduction,
                                    group, temperature, loss_mask, beta)  # fmt: skip
    if key is not None and key not in _SIGNATURES:
        return _first_call(key, name, inputs, rows, spec, grad_accumulate)
    return _run(name, *rows, spec, grad_accumulate)


def _distribution_spec(name, logits, target_logits, form, block_cap, reduction, group,
                       temperature, loss_mask, beta, compiled_grad=None):  # fmt: skip
    """Check a distribution loss's arguments (but the target's requires_grad); return its Spec
    and (logits, target_logits, loss_mask) as the kernels take them (columns unit-stride)."""
    block_cap = _check_common(name, logits, form, block_cap, reduction, group)
    if not isinstance(target_logits, torch.Tensor):
        raise TypeError(
            f"{name}: target_logits must be a torch.Tensor, got {type(target_logits).__name__}"
        )
    check_kernel_tensor(name, "target_logits", target_logits)
    if target_logits.shape != logits.shape:
        raise ValueError(
            f"{name}: target_logits shape {tuple(target_logits.shape)} "
            f"!= logits shape {tuple(logits.shape)}"
        )
    if target_logits.dtype != logits.dtype and target_logits.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name}: target_logits dtype must be float32, float16 or bfloat16, "
            f"got {target_logits.dtype}"
        )
    if target_logits.device != logits.device:
        raise ValueError(
            f"{name}: target_logits on {target_logits.device}, logits on {logits.device}"
        )
    options = None
    if temperature != 1.0 or temperature is True or loss_mask is not None or beta is not None:
        options = _distribution_options(name, temperature, beta, loss_mask, logits)
    n_cols = int(logits.shape[-1])  # a symbolic vocab under torch.compile: specialised
    form, cap = _resolve(name, logits, n_cols, form, block_cap, group, target_logits,
                         temperature, compiled_grad)  # fmt: skip
    spec = config.Spec(KINDS[name], form, cap, reduction, 0, group, 0, n_cols, options)
    return spec, (_contiguous_rows(logits), _contiguous_rows(target_logits), loss_mask)


_DISTRIBUTION_ARGS = """
    Args:
        temperature: p = softmax(logits / T), q = softmax(target_logits / T), T in [2^-14,
            2^64]; the loss is that of p and q (no T^2 factor), its gradient that loss's exact
            one (so it carries a 1/T). Where T is not a power of two, a row whose |x / T|
            reaches 2^30 overflows to inf / NaN (the kernels' fp32 shift: config.TEMPERATURE_MIN).
        loss_mask: a bool tensor shaped logits.shape[:-1] (on logits' device): rows where it is
            False get loss 0 and gradient 0, and "mean" divides by the number of True rows
            (NaN, with a zero gradient, when there is none).
        form: "fused" (one kernel writes loss and gradient; backward only rescales), "chunked"
            (as fused, with each row shared by several programs that meet at a per-row
            counter), "split" (a stats kernel, then a backward kernel from the stored row
            statistics) or "auto" (``config.ENTROPY_AUTO``, from measurements; inside
            torch.compile with a gradient, split from 4 rows an SM, label CE from 1:
            ``config.compiled_split_min_rows``).
        block_cap: column tile cap, one of 4096, 8192, 16384, 32768 (any power of two in
            [16, 65536] is accepted for experiments); None takes the auto table's.
        reduction: "mean" over all M rows (torch's "batchmean" on 2-D input; on (B, S, V) it
            divides by B S, not B), "sum", or "none" (shape (...)).
        group: a ``torch.distributed`` process group over which the vocabulary is sharded (each
            rank holds a contiguous slice of logits and target, uneven sizes allowed). The row
            statistics are all-reduced; each rank gets the full loss and its gradient slice.
        grad_accumulate: a contiguous tensor shaped like logits (float32 or logits' dtype). The
            gradient of the (reduced) loss for grad_output = 1 is computed now and *added* into
            it in place, and the returned loss is detached (no autograd graph).

    logits and target_logits are (..., V) float32, float16 or bfloat16, flattened to (M, V);
    target_logits may be another of those dtypes (an fp32 teacher for a bf16 student: read as it
    is, no copy). Math in fp32; the loss is fp32, the gradient in logits' dtype. target_logits
    must not require grad (ValueError). A row holding NaN or +inf (in logits or target) gives a
    NaN loss and an all-NaN gradient row, as torch's autograd does. No element (zero rows, or
    V = 0: each row an empty sum, 0) gives torch's values: "mean" of zero rows NaN, "sum" 0,
    "none" empty; an empty gradient. Non-unit-stride columns are copied first.
"""


def reverse_kl(logits, target_logits, *, temperature=1.0, loss_mask=None, form="auto",
               block_cap=None, reduction="mean", group=None, grad_accumulate=None):  # fmt: skip
    """Reverse KL divergence ``KL(p || q) = sum_j p_j (log p_j - log q_j)`` per row.

    p = softmax(logits) (the student), q = softmax(target_logits). Gradient with respect to
    logits: ``p * ((log p - log q) - KL_row)`` times grad_output (and 1/M for "mean", 1/T).
    """
    return _distribution_loss("reverse_kl", logits, target_logits, form, block_cap, reduction,
                              group, grad_accumulate, temperature, loss_mask)  # fmt: skip


def forward_kl(logits, target_logits, *, temperature=1.0, loss_mask=None, form="auto",
               block_cap=None, reduction="mean", group=None, grad_accumulate=None):  # fmt: skip
    """Forward KL divergence ``KL(q || p) = sum_j q_j (log q_j - log p_j)`` per row.

    p = softmax(logits) (the student), q = softmax(target_logits) (the teacher). Gradient with
    respect to logits: ``p - q`` (times grad_output, 1/M for "mean", 1/T).
    """
    return _distribution_loss("forward_kl", logits, target_logits, form, block_cap, reduction,
                              group, grad_accumulate, temperature, loss_mask)  # fmt: skip


def jsd(logits, target_logits, *, beta=0.5, temperature=1.0, loss_mask=None, form="auto",
        block_cap=None, reduction="mean", group=None, grad_accumulate=None):  # fmt: skip
    """Generalized Jensen-Shannon divergence per row, with m = beta q + (1 - beta) p:
    ``beta KL(q || m) + (1 - beta) KL(p || m)``, 0 < beta < 1 (Liger-Kernel's LigerJSD names
    beta alike).

    p = softmax(logits) (the student), q = softmax(target_logits) (the teacher). Gradient with
    respect to logits: ``(1 - beta) p ((log p - log m) - KL(p || m))`` (times grad_output, 1/M
    for "mean", 1/T). The row sums need p and q normalized, so each form reads a row once more
    than reverse KL (a second all-reduce with ``group``).
    """
    return _distribution_loss("jsd", logits, target_logits, form, block_cap, reduction, group,
                              grad_accumulate, temperature, loss_mask, beta)  # fmt: skip


def soft_cross_entropy(logits, target_logits, *, temperature=1.0, loss_mask=None, form="auto",
                       block_cap=None, reduction="mean", group=None,
                       grad_accumulate=None):  # fmt: skip
    """Soft-target cross-entropy ``-sum_j q_j log p_j`` per row (Fast-LLM's cross_entropy_logits).

    q = softmax(target_logits), p = softmax(logits). Gradient with respect to logits: ``p - q``
    (times grad_output, 1/M for "mean", 1/T).
    """
    return _distribution_loss("soft_cross_entropy", logits, target_logits, form, block_cap,
                              reduction, group, grad_accumulate, temperature,
                              loss_mask)  # fmt: skip


for _fn in (reverse_kl, forward_kl, jsd, soft_cross_entropy):
    _fn.__doc__ += _DISTRIBUTION_ARGS


def cross_entropy(logits, labels, *, ignore_index=-100, reduction="mean", label_smoothing=0.0,
                  z_loss=0.0, softcap=None, loss_mask=None, form="auto", block_cap=None,
                  group=None, grad_accumulate=None, check_labels=None):  # fmt: skip
    """Cross-entropy with integer labels, torch semantics: ``logsumexp(x_r) - x_r[label_r]``.

    logits (..., V) float32/float16/bfloat16; labels (...) int64 or int32, each in [0, V) or
    equal to ``ignore_index``. Ignored rows have loss 0 and gradient 0; "mean" divides by the
    number of non-ignored rows (NaN when all are ignored, as torch; the gradient is then 0). An
    ignored row is not read, so its gradient stays 0 even where its logits hold NaN or +inf
    (torch's log-softmax makes that row NaN; Liger-Kernel's, like normlab's, skips it).
    Gradient ``softmax(x) - onehot(label)`` times grad_output. The loss is fp32. With V = 0
    every label must be ignored (any other is out of range, as torch's IndexError).

    Options, in this order: ``softcap`` c > 0 replaces the logits by c tanh(logits / c) (Gemma
    2's final-logit softcapping); ``label_smoothing`` eps in [0, 1] is F.cross_entropy's:
    (1 - eps) (lse - x[label]) + eps (lse - mean_j x_j), "mean" over non-ignored rows (a -inf
    logit makes that row's loss +inf, as torch's); ``z_loss`` z >= 0 adds
    z lse(x)^2 per non-ignored row (PaLM's auxiliary loss); ``loss_mask`` (bool, shaped like
    labels) drops rows as ignore_index does.

    Out-of-range labels: ``check_labels`` (default: True on CPU, False on GPU, where it would
    cost a host sync, and inside torch.compile) raises ValueError on the host; unchecked, the
    kernels never read out of bounds: such a row gets a NaN loss and a NaN gradient row.

    With ``group``, the vocab is sharded over the ranks (labels are global ids, the same on
    every rank); each rank finds its ``vocab_start`` by all-gathering the shard sizes
    (``all_gather_object``, a host-side collective, once per call). Other arguments as
    :func:`reverse_kl`.
    """
    name = "cross_entropy"
    if torch.compiler.is_compiling() and group is None and grad_accumulate is None and (
            check_labels is None or check_labels is False):  # fmt: skip
        loss = _compiled_loss(CE, logits, labels, loss_mask, form, block_cap, reduction,
                              ignore_index, 1.0, 0.5, label_smoothing, z_loss, softcap)
        if loss is not None:
            return loss
    if _launch.SEVERAL_GPUS and _launch.off_device(logits):
        with _launch.on_device(logits):
            return cross_entropy(logits, labels, ignore_index=ignore_index, reduction=reduction,
                                 label_smoothing=label_smoothing, z_loss=z_loss, softcap=softcap,
                                 loss_mask=loss_mask, form=form, block_cap=block_cap, group=group,
                                 grad_accumulate=grad_accumulate,
                                 check_labels=check_labels)  # fmt: skip
    key = None
    # (a label check syncs with the host every call: such calls are not replayed)
    if group is None and grad_accumulate is None and (check_labels is False or (
            check_labels is None and getattr(logits, "device", None) != _CPU)):
        key = _signature_key(name, logits, labels, loss_mask,
                             (ignore_index, type(ignore_index), reduction, label_smoothing,
                              type(label_smoothing), z_loss, type(z_loss), softcap,
                              type(softcap), form, block_cap, type(block_cap),
                              check_labels))  # fmt: skip
        loss = None if key is None else _replayed(key, logits, labels, loss_mask)
        if loss is not None:
            return loss
    inputs = (logits, labels, loss_mask)
    compiling = torch.compiler.is_compiling()
    if check_labels is None:
        check_labels = getattr(logits, "device", None) == _CPU and not compiling
    elif not isinstance(check_labels, bool):
        raise TypeError(f"{name}: check_labels must be True, False or None, got {check_labels!r}")
    if check_labels and compiling:
        raise ValueError(f"{name}: check_labels=True syncs with the host; not inside torch.compile")
    spec, rows = _label_spec(name, logits, labels, ignore_index, reduction, label_smoothing,
                             z_loss, softcap, loss_mask, form, block_cap, group,
                             check_labels)  # fmt: skip
    if key is not None and key not in _SIGNATURES:
        return _first_call(key, name, inputs, rows, spec, grad_accumulate)
    return _run(name, *rows, spec, grad_accumulate)


def _label_spec(name, logits, labels, ignore_index, reduction, label_smoothing, z_loss, softcap,
                loss_mask, form, block_cap, group, check_labels, compiled_grad=None):  # fmt: skip
    """Check cross_entropy's arguments (out-of-range labels too, with ``check_labels``); return
    its Spec and (logits, labels, loss_mask) as the kernels take them."""
    block_cap = _check_common(name, logits, form, block_cap, reduction, group)
    _check_per_row(name, "labels", labels, logits, (torch.int64, torch.int32))
    ignore_index = _ignore_index(name, ignore_index)
    labels = _label_rows(labels, ignore_index)
    options = None
    if label_smoothing != 0.0 or z_loss != 0.0 or softcap is not None or loss_mask is not None:
        options = _label_options(name, label_smoothing, z_loss, softcap, loss_mask, logits)
    n_cols = int(logits.shape[-1])  # a symbolic vocab under torch.compile: specialised
    vocab_start, vocab_size = (sharded.vocab_layout(group, n_cols) if group is not None
                               else (0, n_cols))  # fmt: skip
    if check_labels:
        bad = (labels != ignore_index) & ((labels < 0) | (labels >= vocab_size))
        if bool(bad.any()):
            first = labels[bad].flatten()[0].item()
            raise ValueError(
                f"{name}: label {first} outside [0, {vocab_size}) "
                f"and != ignore_index={ignore_index}"
            )
    form, cap = _resolve(name, logits, n_cols, form, block_cap, group,
                         compiled_grad=compiled_grad)  # fmt: skip
    spec = config.Spec(KINDS[name], form, cap, reduction, ignore_index, group, vocab_start,
                       vocab_size, options)  # fmt: skip
    return spec, (_contiguous_rows(logits), labels, loss_mask)


def _label_rows(labels, ignore_index):
    """The labels as the kernels read them: contiguous; int64 where ``ignore_index`` is outside
    int32's range (torch compares int32 labels with such an int wrapped to int32, 2**40 as 0:
    int64 labels make the host's counts and checks agree with the kernels)."""
    if labels.dtype == torch.int32 and not _INT32_MIN <= ignore_index <= _INT32_MAX:
        labels = labels.long()
    return labels.contiguous()
