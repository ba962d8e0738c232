"""RMSNorm and LayerNorm as PyTorch ops: validation, the plan, autograd and torch.compile.

The public functions are RMSNorm and LayerNorm (with an optional weight offset, Gemma's
``(1 + weight)``) and the same fused with the residual add before them (``add_rms_norm``,
``add_layer_norm``: one kernel writes y and h = x + residual). An eager call costs the CPU
little: the arguments are checked once, ``config.plan`` picks the kernels, and a
``torch.autograd.Function`` (or, when no gradient is needed, the launcher alone) runs them
through ``normlab._launch``; on a GPU a call of a signature seen before replays that call's
launches (``_launch.record``). Under ``torch.compile`` the same two functions run inside the
Triton ops ``normlab::norm_fwd`` and ``normlab::norm_bwd``: with static shapes Inductor launches
their kernels from its own code; with symbolic ones they are opaque calls.
"""

from __future__ import annotations

import functools

import torch

from normlab import _launch, _native, _runtime
from normlab._host import (
    FLOAT_DTYPES,
    check_kernel_tensor,
    function_apply,
    is_finite_real,
    is_valid_eps,
    plain_tensor,
    rows_view,
    unit_col_stride,
)
from normlab.norms import block_row, config, row, split_row

FP32_EPS = torch.finfo(torch.float32).eps  # eps=None: the fp32 compute's eps, as F.rms_norm

STRATEGIES = config.STRATEGIES
LAYOUTS = config.LAYOUTS


def _plan(x2d, is_rms, strategy, layout) -> config.NormPlan:
    n_rows, n_cols = x2d.shape
    # The fused residual add runs the plain norm's plan (not measured apart): its extra streams
    # (the residual read and h written; dh read) are the same bytes per row for every candidate.
    sm_count = _runtime.sm_count(x2d.device.index)
    size = x2d.element_size()
    aligned = config.row_align(x2d.stride(0), size) * size == config.VECTOR_BYTES
    return config.plan(is_rms, n_rows, n_cols, strategy, layout, sm_count, aligned, size)


def _tensor_key(t):
    """What a replay depends on in an optional input tensor: layout, dtype, 16-byte alignment."""
    return None if t is None else (t.stride(), t.dtype, not t.data_ptr() & 15)


_FWD_REPLAYS: dict = {}
_BWD_REPLAYS: dict = {}


def planned_forward(x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout,
                    need_stats=True):  # fmt: skip
    """(y, h | None, mean | None, rstd | None) of x2d (n_rows, n_cols) under the call's plan.
    With a residual, h = x2d + residual (an fp32 sum stored in x's dtype) is written and
    normalized. The statistics are None where the plan's backward recomputes them, and without
    ``need_stats`` (no backward will run: neither allocated nor stored).

    With ``_launch.REPLAY`` a call replays the first call of its signature
    (``normlab._launch.record``)."""
    args = (x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout, need_stats)
    if not _launch.REPLAY or not x2d.numel():
        return _forward(*args)
    key = (_launch.current_device(), x2d.shape, _tensor_key(x2d), _tensor_key(residual),
           _tensor_key(weight), _tensor_key(bias), eps, offset, is_rms, strategy, layout,
           need_stats)  # fmt: skip
    return _launch.replayed(_FWD_REPLAYS, key, lambda: _forward(*args),
                            (x2d, residual, weight, bias), x2d.device)  # fmt: skip


def _forward(x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout, need_stats=True):
    plan = _plan(x2d, is_rms, strategy, layout)
    h = None if residual is None else _launch.buffer(x2d.shape, x2d.dtype, x2d.device)
    fused = {"offset": offset, "residual": residual, "h_out": h}
    if plan.layout == "block_row" and x2d.numel():
        n_rows, n_cols = x2d.shape
        one_warp = block_row.one_warp_rows(x2d, residual)
        cfg = config.block_row_fwd_config(n_cols, is_rms, n_rows=n_rows,
                                          sm_count=_runtime.sm_count(x2d.device.index),
                                          one_warp=one_warp)  # fmt: skip
        y, mean, rstd = block_row.launch_forward(x2d, weight, bias, eps, is_rms, cfg,
                                                 store_stats=plan.store_stats and need_stats,
                                                 **fused)  # fmt: skip
    elif plan.fwd_split is not None and residual is None:
        # (the split-row kernels take no residual: add-norm calls run one row per program)
        y, mean, rstd = split_row.split_row_forward(x2d, weight, bias, eps, is_rms,
                                                    plan.fwd_split, offset)  # fmt: skip
    else:
        y, mean, rstd = row.norm_forward(x2d, weight, bias, eps, is_rms, tile=plan.fwd_tile,
                                         store_stats=need_stats, **fused)  # fmt: skip
    return y, h, mean, rstd


def planned_backward(dy, dh, x2d, weight, bias, mean, rstd, eps, offset, is_rms, strategy, layout):
    """(dx, dweight | None, dbias | None) under the plan the forward ran with. x2d is what the
    forward normalized (h with a residual); ``dh``, h's own gradient (or None), joins dx.
    Replayed per signature as the forward is."""
    args = (dy, dh, x2d, weight, bias, mean, rstd, eps, offset, is_rms, strategy, layout)
    if not _launch.REPLAY or not x2d.numel():
        return _backward_launch(*args)
    key = (_launch.current_device(), x2d.shape, _tensor_key(dy), _tensor_key(dh),
           _tensor_key(x2d), _tensor_key(weight), _tensor_key(bias), _tensor_key(mean),
           _tensor_key(rstd), eps, offset, is_rms, strategy, layout)  # fmt: skip
    return _launch.replayed(_BWD_REPLAYS, key, lambda: _backward_launch(*args),
                            (dy, dh, x2d, weight, bias, mean, rstd), x2d.device)  # fmt: skip


def _backward_launch(dy, dh, x2d, weight, bias, mean, rstd, eps, offset, is_rms, strategy,
                     layout):  # fmt: skip
    plan = _plan(x2d, is_rms, strategy, layout)
    dy = unit_col_stride(dy)
    if plan.layout == "block_row" and x2d.numel():
        n_cols = x2d.shape[1]
        one_warp = block_row.one_warp_rows(x2d, dy, dh)
        if rstd is None:
            cfg = config.block_row_bwd_recompute_config(n_cols, is_rms, one_warp)
        else:
            cfg = config.block_row_bwd_config(n_cols, one_warp=one_warp)
        return block_row.launch_backward(dy, x2d, weight, bias, mean, rstd, is_rms, cfg,
                                         eps=eps, offset=offset, dh=dh)  # fmt: skip
    if plan.bwd_split is not None:
        split = plan.bwd_split
        return split_row.split_row_backward(dy, x2d, weight, bias, mean, rstd, is_rms,
                                            split.chunk, offset, dh=dh,
                                            rows_per_group=split.rows_per_group,
                                            sums_chunk=split.sums)  # fmt: skip
    # layout="row": one row per program forward and one row per backward tile, however narrow.
    return row.norm_backward(dy, x2d, weight, bias, mean, rstd, is_rms, strategy=plan.strategy,
                             block_rows=1 if layout == "row" else None, offset=offset,
                             dh=dh)  # fmt: skip


def _backward(dy, dh, normed, weight, bias, mean, rstd, args, run_backward):
    """(dx, dweight, dbias) from the output gradients, either of which autograd may leave None
    (unused output): without dy the norm adds nothing and dx is dh."""
    if dy is None:
        return dh, None, None
    return run_backward(dy, dh, normed, weight, bias, mean, rstd, *args)


# ---- eager: an autograd Function -----------------------------------------------------------------


def _no_double_backward():
    return RuntimeError(
        "normlab's norms cannot differentiate their gradient (create_graph=True): their "
        "backward is a Triton kernel, and its second derivative would be missing, not computed"
    )


class NormFunction(torch.autograd.Function):
    """y = norm(x2d); with a residual, (y, h) = (norm(h), h) for h = x2d + residual."""

    @staticmethod
    def forward(ctx, x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout):
        y, h, mean, rstd = planned_forward(x2d, residual, weight, bias, eps, offset, is_rms,
                                           strategy, layout)  # fmt: skip
        ctx.save_for_backward(x2d if h is None else h, weight, bias, mean, rstd)
        ctx.args = (eps, offset, is_rms, strategy, layout)
        if h is None:
            return y
        ctx.set_materialize_grads(False)  # y or h may go unused: no zero gradient is made for it
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():  # create_graph=True: the kernels are not differentiable
            raise _no_double_backward()
        dx, dw, db = _backward(dy, dh, *ctx.saved_tensors, ctx.args, planned_backward)
        # x and the residual get the same gradient, one tensor returned twice as Liger-Kernel's
        # fused add RMSNorm does (src/liger_kernel/ops/fused_add_rms_norm.py in
        # https://github.com/linkedin/Liger-Kernel); autograd copies it where both keep it.
        dres = dx if ctx.needs_input_grad[1] else None
        return dx, dres, dw, db, None, None, None, None, None


_APPLY = function_apply(NormFunction)  # NormFunction.apply less its Python wrapper


# ---- torch.compile: Triton ops -------------------------------------------------------------------
#
# A compiled call runs ``normlab::norm_fwd``, and its backward ``normlab::norm_bwd``: Triton ops.
# torch.compile traces their bodies (the plan and the launchers) where the shapes are static, each
# launch a ``wrap_triton`` node that Inductor launches from its own generated code. Where they are
# symbolic (``dynamic=True``, or a recompile after a shape change) the plan cannot be made at
# trace time, and the body is one call of ``normlab::norm_fwd_planned`` (``norm_bwd_planned``):
# an opaque custom op that plans on the real shape per call, at tens of µs of dispatch a call.
# Under the interpreter the bodies always take the opaque op: an interpreted kernel cannot enter
# a graph.

TRACEABLE = not _runtime.INTERPRET


def _traced_launches(tensors, eps, offset) -> bool:
    """Can the body trace its launches: kernels that can enter a graph, static shapes (no
    torch.SymInt among the sizes and strides) and constant eps and offset?"""
    return (TRACEABLE and type(eps) is float and type(offset) is float
            and all(type(n) is int for t in tensors if t is not None
                    for n in (*t.shape, *t.stride())))  # fmt: skip


def _or_empty(t, like):
    return t if t is not None else like.new_empty((0,), dtype=torch.float32)


_FwdOutputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]  # (y, h, mean, rstd)


def _fwd_outputs(y, h, mean, rstd, x, need_stats):
    """(y, h, mean, rstd); h (without a residual) and absent statistics are empty tensors
    (custom ops return no None), and so are the statistics without ``need_stats``."""
    if not need_stats:
        mean = rstd = None
    return y, _or_empty(h, x), _or_empty(mean, x), _or_empty(rstd, x)


def _bwd_args(dy, dh, x, weight, bias, mean, rstd, *args):
    """The backward's arguments with the ops' empty statistics as None."""
    return (dy, dh, x, weight, bias, mean if mean.numel() else None,
            rstd if rstd.numel() else None, *args)  # fmt: skip


def _bwd_outputs(dx, dw, db, x):
    """(dx, dweight, dbias): custom-op outputs may not alias each other, so one fresh empty
    tensor per absent gradient."""
    return dx, _or_empty(dw, x), _or_empty(db, x)


@torch.library.custom_op("normlab::norm_fwd_planned", mutates_args=())
def _norm_fwd_planned_op(x: torch.Tensor, residual: torch.Tensor | None,
                         weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                         offset: float, is_rms: bool, strategy: str, layout: str,
                         need_stats: bool = True) -> _FwdOutputs:  # fmt: skip
    args = (x, residual, weight, bias, eps, offset, is_rms, strategy, layout, need_stats)
    return _fwd_outputs(*planned_forward(*args), x, need_stats)


@_norm_fwd_planned_op.register_fake
def _(x, residual, weight, bias, eps, offset, is_rms, strategy, layout, need_stats=True):
    # (not config.plan: it is memoized on a GPU, and the sizes here may be symbolic)
    n_rows, n_cols = x.shape
    block_row = config.uses_block_row(n_rows, n_cols, strategy, layout)
    stored = need_stats and not (block_row and config.block_row_recompute_stats(n_cols, is_rms))
    n_stats = n_rows if stored else 0
    rstd = x.new_empty((n_stats,), dtype=torch.float32)
    mean = x.new_empty((0 if is_rms else n_stats,), dtype=torch.float32)
    h = x.new_empty(x.shape) if residual is not None else rstd.new_empty((0,))
    return x.new_empty(x.shape), h, mean, rstd


@torch.library.custom_op("normlab::norm_bwd_planned", mutates_args=())
def _norm_bwd_planned_op(dy: torch.Tensor, dh: torch.Tensor | None, x: torch.Tensor,
                         weight: torch.Tensor | None, bias: torch.Tensor | None,
                         mean: torch.Tensor, rstd: torch.Tensor, eps: float, offset: float,
                         is_rms: bool, strategy: str, layout: str
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    args = (dy, dh, x, weight, bias, mean, rstd, eps, offset, is_rms, strategy, layout)
    return _bwd_outputs(*planned_backward(*_bwd_args(*args)), x)


@_norm_bwd_planned_op.register_fake
def _(dy, dh, x, weight, bias, mean, rstd, eps, offset, is_rms, strategy, layout):
    dw = weight.new_empty(weight.shape) if weight is not None else rstd.new_empty((0,))
    db = bias.new_empty(bias.shape) if bias is not None else rstd.new_empty((0,))
    return x.new_empty(x.shape), dw, db


@torch.library.triton_op("normlab::norm_fwd", mutates_args=())
def _norm_fwd_op(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor | None,
                 bias: torch.Tensor | None, eps: float, offset: float, is_rms: bool,
                 strategy: str, layout: str, need_stats: bool = True) -> _FwdOutputs:  # fmt: skip
    """(y, h, mean, rstd) of x's rows, y and h in x's shape, absent ones empty (the statistics
    without ``need_stats``: no backward will run). Also the fake kernel. The body checks the
    arguments as the public function does: in a compiled call it runs at trace time."""
    name = ("add_" if residual is not None else "") + ("rms_norm" if is_rms else "layer_norm")
    x2d, weight, bias = _prepare(name, x, weight, bias, eps, offset, strategy, layout)
    r2d = None if residual is None else _prepare_residual(name, x, residual)
    args = (x2d, r2d, weight, bias, eps, offset, is_rms, strategy, layout, need_stats)
    if not _launch.is_traced(x):  # called eagerly: as any eager call
        y, h, mean, rstd = _fwd_outputs(*planned_forward(*args), x2d, need_stats)
    elif not _traced_launches((x2d, r2d), eps, offset):
        y, h, mean, rstd = torch.ops.normlab.norm_fwd_planned(*args)
    else:
        with _launch.traced():
            y, h, mean, rstd = _fwd_outputs(*_forward(*args), x2d, need_stats)
    return _like(y, x), (h if residual is None else _like(h, x)), mean, rstd


@torch.library.triton_op("normlab::norm_bwd", mutates_args=())
def _norm_bwd_op(dy: torch.Tensor, dh: torch.Tensor | None, x: torch.Tensor,
                 weight: torch.Tensor | None, bias: torch.Tensor | None, mean: torch.Tensor,
                 rstd: torch.Tensor, eps: float, offset: float, is_rms: bool, strategy: str,
                 layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(dx in x's shape, dweight, dbias) as ``planned_backward``'s, absent ones empty; x, dy
    and dh in the forward's input shape."""
    rows = (_as_rows(dy), None if dh is None else _as_rows(dh), _as_rows(x))
    args = (*rows, weight, bias, mean, rstd, eps, offset, is_rms, strategy, layout)
    if not _launch.is_traced(x):
        dx, dw, db = _bwd_outputs(*planned_backward(*_bwd_args(*args)), rows[2])
    elif not _traced_launches(rows, eps, offset):
        dx, dw, db = torch.ops.normlab.norm_bwd_planned(*args)
    else:
        with _launch.traced():
            dx, dw, db = _bwd_outputs(*_backward_launch(*_bwd_args(*args)), rows[2])
    return _like(dx, x), dw, db


def _setup_context(ctx, inputs, output):
    x, residual, weight, bias, eps, offset, is_rms, strategy, layout, _need_stats = inputs
    _, h, mean, rstd = output
    ctx.save_for_backward(x if residual is None else h, weight, bias, mean, rstd)
    ctx.args = (eps, offset, is_rms, strategy, layout)
    ctx.has_residual = residual is not None
    # h (without a residual) and mean/rstd get no gradient: unmaterialized, autograd launches
    # no zero-fill per backward.
    ctx.set_materialize_grads(False)


def _run_bwd_op(dy, dh, normed, weight, bias, mean, rstd, *args):
    dx, dw, db = torch.ops.normlab.norm_bwd(dy, dh, normed, weight, bias, mean, rstd, *args)
    return dx, dw if weight is not None else None, db if bias is not None else None


def _custom_op_backward(ctx, dy, dh, _dmean, _drstd):
    if not ctx.has_residual:  # the empty placeholder h's gradient (AOT may materialize it)
        dh = None
    dx, dw, db = _backward(dy, dh, *ctx.saved_tensors, ctx.args, _run_bwd_op)
    # x and the residual get the same gradient.
    return dx, dx if ctx.has_residual else None, dw, db, None, None, None, None, None, None


_norm_fwd_op.register_autograd(_custom_op_backward, setup_context=_setup_context)


# ---- public functions ----------------------------------------------------------------------------


def _prepare(name, x, weight, bias, eps, offset, strategy, layout):
    """Validate the public arguments; return (x as a (n_rows, n_cols) view or copy, weight,
    bias), the parameters unit-stride (the kernels index them by column)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
    check_kernel_tensor(name, "x", x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name}: x has dtype {x.dtype}; the kernels take float32/float16/"
                        f"bfloat16 (for float64 use normlab.ref.{name})")  # fmt: skip
    if x.dim() == 0:
        raise ValueError(f"{name}: x must have a last dimension to normalize, got a 0-d tensor")
    if x.device.type != _runtime.DEVICE:
        raise ValueError(f"{name}: x is on {x.device} but normlab runs on {_runtime.DEVICE!r} "
                         f"(mode {_runtime.MODE!r})")  # fmt: skip
    n_cols = x.shape[-1]
    for pname, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{name}: {pname} must be a torch.Tensor or None")
        check_kernel_tensor(name, pname, p)
        if p.dtype not in FLOAT_DTYPES:
            raise TypeError(f"{name}: {pname} has dtype {p.dtype}; expected float32/float16/"
                            "bfloat16")  # fmt: skip
        if p.shape != (n_cols,):
            raise ValueError(f"{name}: {pname} must have shape ({n_cols},), got {tuple(p.shape)}")
        if p.device != x.device:
            raise ValueError(f"{name}: {pname} is on device {p.device} but x is on device "
                             f"{x.device}")  # fmt: skip
    if not is_valid_eps(eps):
        raise ValueError(f"{name}: eps must be a finite float >= 0, got {eps!r}")
    if not is_finite_real(offset):
        raise ValueError(f"{name}: offset must be a finite float, got {offset!r}")
    if offset != 0 and weight is None:
        # torch has no such norm; treating the missing weight as 0 would hide a forgotten one.
        raise ValueError(f"{name}: offset={offset!r} scales by (offset + weight) and needs a "
                         "weight; pass weight, or offset=0")  # fmt: skip
    if strategy not in STRATEGIES:
        raise ValueError(f"{name}: strategy={strategy!r}; expected one of {STRATEGIES}")
    if layout not in LAYOUTS:
        raise ValueError(f"{name}: layout={layout!r}; expected one of {LAYOUTS}")
    if layout == "block_row":
        if strategy not in config.BLOCK_ROW_STRATEGIES:
            raise ValueError(
                f"{name}: strategy={strategy!r} does not exist for layout='block_row' (its "
                "backward is always persistent); use strategy='auto' or 'persistent', or "
                "layout='row'/'auto'"
            )
        if n_cols > config.BLOCK_ROW_MAX_COLS:
            raise ValueError(
                f"{name}: block_row handles rows of at most {config.BLOCK_ROW_MAX_COLS} columns, "
                f'got {n_cols}; use layout="row" (or "auto") for wider rows'
            )
    if weight is not None and weight.stride(0) != 1:
        weight = weight.contiguous()  # a differentiable copy: the strided weight gets dweight
    if bias is not None and bias.stride(0) != 1:
        bias = bias.contiguous()
    return _as_rows(x), weight, bias


def _prepare_residual(name, x, residual):
    """Validate the add-norms' residual against (validated) x; return it as rows like x's."""
    if not isinstance(residual, torch.Tensor):
        raise TypeError(f"{name}: residual must be a torch.Tensor, got {type(residual).__name__}")
    check_kernel_tensor(name, "residual", residual)
    if residual.shape != x.shape:
        raise ValueError(f"{name}: residual has shape {tuple(residual.shape)} but x has "
                         f"{tuple(x.shape)}; they must match")  # fmt: skip
    if residual.dtype != x.dtype:
        raise TypeError(f"{name}: residual has dtype {residual.dtype} but x has {x.dtype}; "
                        "h = x + residual is stored in x's dtype, so they must match")
    if residual.device != x.device:
        raise ValueError(f"{name}: residual is on device {residual.device} but x is on device "
                         f"{x.device}")  # fmt: skip
    return _as_rows(residual)


def _as_rows(t):
    # Not reshape(-1, n_cols): -1 is ambiguous when n_cols is 0.
    n_cols = t.shape[-1]
    return unit_col_stride(t.reshape(1, n_cols) if t.dim() == 1 else t.flatten(0, -2))


def _like(out, x):
    """A (n_rows, n_cols) output in x's shape (a 2-D x already has it: no view, ~2 µs)."""
    return out if x.dim() == 2 else out.view(x.shape)


def _needs_grad(x, residual, weight, bias) -> bool:
    # (spelled out: a generator over the four costs about a µs a call)
    return torch.is_grad_enabled() and (
        x.requires_grad or (residual is not None and residual.requires_grad)
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad))  # fmt: skip


def _norm(x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout):
    """y, or (y, h) with a residual: the autograd or the inference path."""
    args = (x2d, residual, weight, bias, eps, offset, is_rms, strategy, layout)
    if _needs_grad(x2d, residual, weight, bias):
        return _APPLY(*args)
    y, h, _, _ = planned_forward(*args, need_stats=False)  # no backward: no statistics stored
    return y if residual is None else (y, h)


def _compiled_call(x, residual, weight, bias, eps, offset, is_rms, strategy, layout):
    """y, or (y, h) with a residual, inside torch.compile. Dynamo guards every global its trace
    reads and checks those guards on each call, so this reads none but the op: the checks and
    the plan run in the op's body, once, at trace time."""
    need_stats = _needs_grad(x, residual, weight, bias)
    y, h, _, _ = torch.ops.normlab.norm_fwd(x, residual, weight, bias, eps, offset, is_rms,
                                            strategy, layout, need_stats)  # fmt: skip
    return y if residual is None else (y, h)


# ---- calls on a GPU: checked once per signature, then replayed -----------------------------------
#
# The first call of a signature (shapes, strides, dtypes, devices, 16-byte alignment and every
# other argument) is checked and planned in full; a later one skips both. A call without a
# gradient replays its recorded launches (``_INFERENCE``). A call that needs one runs
# ``ReplayedNormFunction`` with the signature's entry (``_GRAD``): its forward replays the
# recorded forward, and its backward the recorded backward of the output gradients' layout, so
# neither side builds a key per tensor.

_INFERENCE: dict = {}
_GRAD: dict = {}


def _param_key(p):
    return None if p is None else (p.shape, p.stride(), p.dtype, p.get_device(),
                                   not p.data_ptr() & 15)  # fmt: skip


class _Signature:
    """A checked signature of a call that needs a gradient: its recorded forward (None before
    the first call, False where it could not be recorded), its recorded backwards by the
    output gradients' layout, and the C++ node's programs of both (``native``, where built)."""

    __slots__ = ("args", "backwards", "forward", "native")

    def __init__(self, args):
        self.args = args  # (eps, offset, is_rms, strategy, layout)
        self.forward = None
        self.backwards: dict = {}
        self.native = None

    def run_forward(self, x, residual, weight, bias):
        """(y, h | None, mean, rstd), y and h in x's shape."""
        if self.forward:
            return self.forward((x, residual, weight, bias), None)
        x2d, r2d = rows_view(x), rows_view(residual)
        args = (x2d, r2d, weight, bias, *self.args)
        (y, h, mean, rstd), self.forward = _launch.record(lambda: _forward(*args),
                                                          (x2d, r2d, weight, bias))  # fmt: skip
        self.forward = self.forward or False
        native = _native.module() if self.forward and _native.ENABLED else None
        program = None if native is None else _native.program(self.forward)
        if program is not None:  # the C++ node, which calls back here for unseen backwards
            self.native = native.NormSig(program, functools.partial(
                _native_backward, self.args, self.backwards))  # fmt: skip
        return _like(y, x), None if h is None else _like(h, x), mean, rstd

    def run_backward(self, dy, dh, normed, weight, bias, mean, rstd):
        """(dx in x's shape, dweight, dbias) for an output gradient dy (not None)."""
        return _run_backward(self.args, self.backwards, dy, dh, normed, weight, bias, mean,
                             rstd)[:3]  # fmt: skip


def _run_backward(args, backwards, dy, dh, normed, weight, bias, mean, rstd):
    """(dx in x's shape, dweight, dbias, the Replay that ran or was recorded, else None):
    replayed from ``backwards`` (by the gradients' layout), recorded there on a layout's first
    call."""
    key = (_tensor_key(dy), _tensor_key(dh))  # (their shape is the output's)
    replay = backwards.get(key, _launch.UNSEEN)
    if replay is not None and replay is not _launch.UNSEEN:
        dx, dw, db = replay((dy, dh, normed, weight, bias, mean, rstd), None)
    else:
        rows = (rows_view(dy), rows_view(dh), rows_view(normed))
        if replay is _launch.UNSEEN and rows[0] is not None and (rows[1] is not None
                                                               or dh is None):  # fmt: skip
            roles = (*rows, weight, bias, mean, rstd)
            (dx, dw, db), replay = _launch.record(lambda: _backward_launch(*roles, *args), roles)
            if len(backwards) >= _launch.MAX_REPLAYS:
                backwards.clear()
            backwards[key] = replay
        else:  # copied rows (a column-strided gradient): the full backward every call
            replay = None
            dx, dw, db = _backward_launch(_as_rows(dy), None if dh is None else _as_rows(dh),
                                          _as_rows(normed), weight, bias, mean, rstd,
                                          *args)  # fmt: skip
    return (dx if dx.dim() == dy.dim() else dx.view(dy.shape)), dw, db, replay


def _native_backward(args, backwards, dy, dh, normed, weight, bias, mean, rstd):
    """The C++ node's backward for a layout it has no program of, in Python: (dx, dweight,
    dbias, the layout's program for the node to keep, or None)."""
    dx, dw, db, replay = _run_backward(args, backwards, dy, dh, normed, weight, bias, mean,
                                       rstd)  # fmt: skip
    return dx, dw, db, None if replay is None else _native.program(replay)


class ReplayedNormFunction(torch.autograd.Function):
    """``NormFunction`` for a checked signature: x, the residual and h in the caller's shape,
    the launches replayed from the signature's entry after its first call."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, sig):
        y, h, mean, rstd = sig.run_forward(x, residual, weight, bias)
        ctx.save_for_backward(x if h is None else h, weight, bias, mean, rstd)
        ctx.sig = sig
        if h is None:
            return y
        ctx.set_materialize_grads(False)
        return y, h

    @staticmethod
    def backward(ctx, dy, dh=None):
        if torch.is_grad_enabled():
            raise _no_double_backward()
        if dy is None:
            dx, dw, db = dh, None, None
        else:
            dx, dw, db = ctx.sig.run_backward(dy, dh, *ctx.saved_tensors)
        return dx, dx if ctx.needs_input_grad[1] else None, dw, db, None


_REPLAYED_APPLY = function_apply(ReplayedNormFunction)


def _replayed_call(name, x, residual, weight, bias, eps, offset, is_rms, strategy, layout):
    """y (with a residual, (y, h)) of a call whose signature was checked before (the first call
    of one is checked here), or None where the full path must run (a tensor subclass, no GPU,
    rows or parameters that would be copied)."""
    if not _launch.REPLAY or not plain_tensor(x):
        return None
    try:
        grad = _needs_grad(x, residual, weight, bias)
        key = (x.shape, x.stride(), x.dtype, x.get_device(), not x.data_ptr() & 15,
               _param_key(residual), _param_key(weight), _param_key(bias), eps, type(eps),
               offset, type(offset), is_rms, strategy, layout,
               _launch.current_device())  # fmt: skip
        cache = _GRAD if grad else _INFERENCE
        entry = cache.get(key, _launch.UNSEEN)
    except (AttributeError, TypeError, RuntimeError):  # not tensors, an unhashable eps, a sparse
        return None  # tensor's missing strides: the full path's errors
    if entry is _launch.UNSEEN:
        x2d, w, b = _prepare(name, x, weight, bias, eps, offset, strategy, layout)
        r2d = None if residual is None else _prepare_residual(name, x, residual)
        # Replayed only where the rows are the inputs' own memory and the parameters the
        # caller's (nothing was copied to unit stride).
        same = (x2d.data_ptr() == x.data_ptr() and w is weight and b is bias and x2d.numel()
                and (residual is None or r2d.data_ptr() == residual.data_ptr()))  # fmt: skip
        if len(cache) >= _launch.MAX_REPLAYS:
            cache.clear()
        args = (float(eps), float(offset), is_rms, strategy, layout)
        if grad:
            entry = cache[key] = _Signature(args) if same else None
        else:
            out, replay = _launch.record(lambda: _forward(x2d, r2d, w, b, *args, False)[:2],
                                         (x2d, r2d, w, b))  # fmt: skip
            cache[key] = replay if same else None
            if replay is not None and same and _native.ENABLED and _native.module() is not None:
                _native.program(replay)  # (kept on the replay)
            return _shaped(out, x, residual)
    if entry is None:
        return None
    if not grad:
        program = entry.native
        if program and _launch.lean():  # the recorded launches from C++ (no hooks)
            device = _launch._get_device()
            out = program((x, residual, weight, bias), _launch._get_stream(device))
        else:
            out = entry((x, residual, weight, bias), None)
        return _shaped(out, x, residual)
    if entry.forward is False:  # its forward could not be recorded: the full path from now on
        cache[key] = None
        return None
    native = entry.native
    if native is not None and _launch.lean():  # the C++ node (no hooks)
        device = _launch._get_device()
        return _native.norm_apply(native, x, residual, weight, bias, _launch._get_stream(device))
    return _REPLAYED_APPLY(x, residual, weight, bias, entry)


def _shaped(out, x, residual):
    """y, or (y, h) with a residual, in x's shape (a replay lays its outputs out as x already)."""
    y, h = out
    if y.dim() != x.dim():
        y, h = y.view(x.shape), None if h is None else h.view(x.shape)
    return y if residual is None else (y, h)


def rms_norm(x, weight=None, eps=1e-6, *, offset=0.0, strategy="auto", layout="auto"):
    """RMSNorm over the last dim: ``x / sqrt(mean(x^2) + eps) * (offset + weight)``; fp32
    statistics and arithmetic, output in x's dtype.

    ``offset`` (default 0) shifts the weight: Gemma's zero-centred weights take ``offset=1``
    (TransformerEngine's "zero-centered gamma"); dweight is unchanged. An offset needs a weight.
    ``strategy`` in ("auto", "atomic", "two_stage", "persistent") picks the backward's dγ
    reduction; ``layout`` in ("auto", "row", "block_row") the kernels: "block_row" packs many
    narrow rows (at most 256 columns) per program, "row" runs one row per program forward and
    one row per backward tile, "auto" lets ``norms.config.plan`` decide. ``eps=None`` takes
    ``torch.finfo(torch.float32).eps``, as ``F.rms_norm`` does for every input dtype.
    """
    if eps is None:
        eps = FP32_EPS
    if torch.compiler.is_compiling():
        return _compiled_call(x, None, weight, None, eps, offset, True, strategy, layout)
    if _launch.SEVERAL_GPUS and _launch.off_device(x):
        with _launch.on_device(x):
            return rms_norm(x, weight, eps, offset=offset, strategy=strategy, layout=layout)
    y = _replayed_call("rms_norm", x, None, weight, None, eps, offset, True, strategy, layout)
    if y is not None:
        return y
    x2d, weight, _ = _prepare("rms_norm", x, weight, None, eps, offset, strategy, layout)
    y = _norm(x2d, None, weight, None, float(eps), float(offset), True, strategy, layout)
    return _like(y, x)


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, offset=0.0, strategy="auto",
               layout="auto"):  # fmt: skip
    """LayerNorm over the last dim: ``(x - mean) / sqrt(var + eps) * (offset + weight) + bias``
    (biased variance, fp32 statistics). ``offset``/``strategy``/``layout`` as for
    :func:`rms_norm`."""
    if torch.compiler.is_compiling():
        return _compiled_call(x, None, weight, bias, eps, offset, False, strategy, layout)
    if _launch.SEVERAL_GPUS and _launch.off_device(x):
        with _launch.on_device(x):
            return layer_norm(x, weight, bias, eps, offset=offset, strategy=strategy,
                              layout=layout)  # fmt: skip
    y = _replayed_call("layer_norm", x, None, weight, bias, eps, offset, False, strategy,
                       layout)  # fmt: skip
    if y is not None:
        return y
    x2d, weight, bias = _prepare("layer_norm", x, weight, bias, eps, offset, strategy, layout)
    y = _norm(x2d, None, weight, bias, float(eps), float(offset), False, strategy, layout)
    return _like(y, x)


def add_rms_norm(x, residual, weight=None, eps=1e-6, *, offset=0.0, strategy="auto",
                 layout="auto"):  # fmt: skip
    """The pre-norm block's residual add fused with its RMSNorm: returns ``(y, h)`` with
    ``h = x + residual`` (summed in fp32, stored in x's dtype) and ``y = rms_norm(h)`` of the
    stored h. One kernel reads x and the residual once and writes y and h; gradients from y and
    h flow into both x and the residual. ``residual`` must match x's shape, dtype and device;
    the other arguments as for :func:`rms_norm`."""
    if eps is None:
        eps = FP32_EPS
    if torch.compiler.is_compiling():
        return _compiled_call(x, residual, weight, None, eps, offset, True, strategy, layout)
    if _launch.SEVERAL_GPUS and _launch.off_device(x):
        with _launch.on_device(x):
            return add_rms_norm(x, residual, weight, eps, offset=offset, strategy=strategy,
                                layout=layout)  # fmt: skip
    out = _replayed_call("add_rms_norm", x, residual, weight, None, eps, offset, True,
                         strategy, layout)  # fmt: skip
    if out is not None:
        return out
    x2d, weight, _ = _prepare("add_rms_norm", x, weight, None, eps, offset, strategy, layout)
    r2d = _prepare_residual("add_rms_norm", x, residual)
    y, h = _norm(x2d, r2d, weight, None, float(eps), float(offset), True, strategy, layout)
    return _like(y, x), _like(h, x)


def add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, *, offset=0.0,
                   strategy="auto", layout="auto"):  # fmt: skip
    """:func:`add_rms_norm` with LayerNorm: ``(layer_norm(h), h)`` for ``h = x + residual``."""
    if torch.compiler.is_compiling():
        return _compiled_call(x, residual, weight, bias, eps, offset, False, strategy, layout)
    if _launch.SEVERAL_GPUS and _launch.off_device(x):
        with _launch.on_device(x):
            return add_layer_norm(x, residual, weight, bias, eps, offset=offset,
                                  strategy=strategy, layout=layout)  # fmt: skip
    out = _replayed_call("add_layer_norm", x, residual, weight, bias, eps, offset, False,
                         strategy, layout)  # fmt: skip
    if out is not None:
        return out
    x2d, weight, bias = _prepare("add_layer_norm", x, weight, bias, eps, offset, strategy,
                                 layout)  # fmt: skip
    r2d = _prepare_residual("add_layer_norm", x, residual)
    y, h = _norm(x2d, r2d, weight, bias, float(eps), float(offset), False, strategy, layout)
    return _like(y, x), _like(h, x)
