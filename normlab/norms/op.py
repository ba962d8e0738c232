"""RMSNorm and LayerNorm as PyTorch ops: validation, the plan, autograd and torch.compile.

An eager call costs the CPU little: the arguments are checked once, ``config.plan`` picks the
kernels, and a ``torch.autograd.Function`` (or, when no gradient is needed, the launcher alone)
runs them through ``normlab._launch``. Under ``torch.compile`` the same two functions run
inside the custom ops ``normlab::norm_fwd`` and ``normlab::norm_bwd``, which Inductor keeps as
opaque calls (their dispatch costs tens of µs, so eager calls do not take them).
"""

from __future__ import annotations

import torch

from normlab import _runtime
from normlab._host import FLOAT_DTYPES, is_valid_eps, unit_col_stride
from normlab.norms import block_row, config, row, split_row

STRATEGIES = config.STRATEGIES
LAYOUTS = config.LAYOUTS


def _plan(x2d, is_rms, strategy, layout) -> config.NormPlan:
    n_rows, n_cols = x2d.shape
    sm_count = _runtime.sm_count(x2d.device.index)
    return config.plan(is_rms, n_rows, n_cols, strategy, layout, sm_count)


def planned_forward(x2d, weight, bias, eps, is_rms, strategy, layout):
    """(y, mean | None, rstd | None) of x2d (n_rows, n_cols) under the call's plan; the
    statistics are None where the plan's backward recomputes them."""
    plan = _plan(x2d, is_rms, strategy, layout)
    if plan.layout == "block_row" and x2d.numel():
        n_rows, n_cols = x2d.shape
        cfg = config.block_row_fwd_config(n_cols, is_rms, n_rows=n_rows,
                                          sm_count=_runtime.sm_count(x2d.device.index))
        return block_row.launch_forward(x2d, weight, bias, eps, is_rms, cfg,
                                        store_stats=plan.store_stats)  # fmt: skip
    if plan.fwd_split is not None:
        return split_row.split_row_forward(x2d, weight, bias, eps, is_rms, plan.fwd_split)
    return row.norm_forward(x2d, weight, bias, eps, is_rms, tile=plan.fwd_tile)


def planned_backward(dy, x2d, weight, bias, mean, rstd, eps, is_rms, strategy, layout):
    """(dx, dweight | None, dbias | None) under the plan the forward ran with."""
    plan = _plan(x2d, is_rms, strategy, layout)
    dy = unit_col_stride(dy)
    if plan.layout == "block_row" and x2d.numel():
        n_cols = x2d.shape[1]
        if rstd is None:
            cfg = config.block_row_bwd_recompute_config(n_cols, is_rms)
        else:
            cfg = config.block_row_bwd_config(n_cols)
        return block_row.launch_backward(dy, x2d, weight, bias, mean, rstd, is_rms, cfg,
                                         eps=eps)  # fmt: skip
    if plan.bwd_split is not None:
        return split_row.split_row_backward(dy, x2d, weight, bias, mean, rstd, is_rms,
                                            plan.bwd_split)  # fmt: skip
    # layout="row": one row per program forward and one row per backward tile, however narrow.
    return row.norm_backward(dy, x2d, weight, bias, mean, rstd, is_rms, strategy=plan.strategy,
                             block_rows=1 if layout == "row" else None)  # fmt: skip


# ---- eager: an autograd Function -----------------------------------------------------------------


class NormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d, weight, bias, eps, is_rms, strategy, layout):
        y, mean, rstd = planned_forward(x2d, weight, bias, eps, is_rms, strategy, layout)
        ctx.save_for_backward(x2d, weight, bias, mean, rstd)
        ctx.args = (eps, is_rms, strategy, layout)
        return y

    @staticmethod
    def backward(ctx, dy):
        x2d, weight, bias, mean, rstd = ctx.saved_tensors
        dx, dw, db = planned_backward(dy, x2d, weight, bias, mean, rstd, *ctx.args)
        return dx, dw, db, None, None, None, None


# ---- torch.compile: custom ops -------------------------------------------------------------------


def _stats_or_empty(t, like):
    return t if t is not None else like.new_empty((0,), dtype=torch.float32)


@torch.library.custom_op("normlab::norm_fwd", mutates_args=())
def _norm_fwd_op(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 eps: float, is_rms: bool, strategy: str,
                 layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(y, mean, rstd); absent statistics are empty tensors (custom ops return no None)."""
    y, mean, rstd = planned_forward(x, weight, bias, eps, is_rms, strategy, layout)
    return y, _stats_or_empty(mean, x), _stats_or_empty(rstd, x)


@_norm_fwd_op.register_fake
def _(x, weight, bias, eps, is_rms, strategy, layout):
    plan = _plan(x, is_rms, strategy, layout)
    n_stats = x.shape[0] if plan.store_stats or plan.layout != "block_row" else 0
    rstd = x.new_empty((n_stats,), dtype=torch.float32)
    mean = x.new_empty((0 if is_rms else n_stats,), dtype=torch.float32)
    return x.new_empty(x.shape), mean, rstd


@torch.library.custom_op("normlab::norm_bwd", mutates_args=())
def _norm_bwd_op(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
                 bias: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor, eps: float,
                 is_rms: bool, strategy: str,
                 layout: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(dx, dweight, dbias); absent parameter gradients are empty tensors."""
    dx, dw, db = planned_backward(dy, x, weight, bias, mean if mean.numel() else None,
                               rstd if rstd.numel() else None, eps, is_rms, strategy, layout)
    # Custom-op outputs may not alias each other: one fresh empty tensor per absent gradient.
    return dx, _stats_or_empty(dw, x), _stats_or_empty(db, x)


@_norm_bwd_op.register_fake
def _(dy, x, weight, bias, mean, rstd, eps, is_rms, strategy, layout):
    dw = weight.new_empty(weight.shape) if weight is not None else rstd.new_empty((0,))
    db = bias.new_empty(bias.shape) if bias is not None else rstd.new_empty((0,))
    return x.new_empty(x.shape), dw, db


def _setup_context(ctx, inputs, output):
    x, weight, bias, eps, is_rms, strategy, layout = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, bias, mean, rstd)
    ctx.args = (eps, is_rms, strategy, layout)
    # mean/rstd get no gradient: unmaterialized, autograd launches no zero-fill per backward.
    ctx.set_materialize_grads(False)


def _custom_op_backward(ctx, dy, _dmean, _drstd):
    x, weight, bias, mean, rstd = ctx.saved_tensors
    dx, dw, db = torch.ops.normlab.norm_bwd(dy, x, weight, bias, mean, rstd, *ctx.args)
    return (dx, dw if weight is not None else None, db if bias is not None else None,
            None, None, None, None)  # fmt: skip


_norm_fwd_op.register_autograd(_custom_op_backward, setup_context=_setup_context)


# ---- public functions ----------------------------------------------------------------------------


def _prepare(name, x, weight, bias, eps, strategy, layout):
    """Validate the public arguments; return x as a (n_rows, n_cols) view (or copy)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: x must be a torch.Tensor, got {type(x).__name__}")
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
    # Not reshape(-1, n_cols): -1 is ambiguous when n_cols is 0.
    x2d = x.reshape(1, n_cols) if x.dim() == 1 else x.flatten(0, -2)
    return unit_col_stride(x2d)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _norm(x2d, weight, bias, eps, is_rms, strategy, layout):
    if torch.compiler.is_compiling():
        return torch.ops.normlab.norm_fwd(x2d, weight, bias, eps, is_rms, strategy, layout)[0]
    if _needs_grad(x2d, weight, bias):
        return NormFunction.apply(x2d, weight, bias, eps, is_rms, strategy, layout)
    return planned_forward(x2d, weight, bias, eps, is_rms, strategy, layout)[0]


def rms_norm(x, weight=None, eps=1e-6, *, strategy="auto", layout="auto"):
    """RMSNorm over the last dim: ``x / sqrt(mean(x^2) + eps) * weight``; fp32 statistics.

    ``strategy`` in ("auto", "atomic", "two_stage", "persistent") picks the backward's dγ
    reduction; ``layout`` in ("auto", "row", "block_row") the kernels: "block_row" packs many
    narrow rows (at most 256 columns) per program, "row" runs one row per program forward and
    one row per backward tile, "auto" lets ``norms.config.plan`` decide. Output dtype = x's.
    """
    x2d = _prepare("rms_norm", x, weight, None, eps, strategy, layout)
    return _norm(x2d, weight, None, float(eps), True, strategy, layout).view(x.shape)


def layer_norm(x, weight=None, bias=None, eps=1e-5, *, strategy="auto", layout="auto"):
    """LayerNorm over the last dim: ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased
    variance, fp32 statistics). ``strategy``/``layout`` as for :func:`rms_norm`."""
    x2d = _prepare("layer_norm", x, weight, bias, eps, strategy, layout)
    return _norm(x2d, weight, bias, float(eps), False, strategy, layout).view(x.shape)
