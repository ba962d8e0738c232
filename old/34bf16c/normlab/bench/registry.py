"""Implementations per op, as named entries: normlab's kernels and the baselines, side by side.

Each entry builds its own inputs (random data, bf16 by default, weights random around 1) for an
(M, N, dtype, direction, device) and returns a zero-argument callable: one call of the op in that
direction, ready for ``timing.time_call``. Directions:

* ``fwd``: the training forward (inputs require grad, so saved statistics are written too).
* ``bwd`` (norms): one untimed forward at build time, then each call is
  ``torch.autograd.grad(y, (x, w[, b]), dy, retain_graph=True)``: every kernel the backward
  launches, the dγ reduction included (the training view of Fast-LLM's norm-backward rewrite,
  ServiceNow/Fast-LLM#546).
* ``fwd+bwd``: the training forward and its backward in one call: for a norm
  ``torch.autograd.grad(y, (x, w[, b]), dy)`` on a fresh forward (the "total" of
  Liger-Kernel#1620); for a loss the loss and ``torch.autograd.grad(loss, logits)``.

The fused add-norms (``add_rms_norm``, ``add_layer_norm``) return ``(y, h)``, h = x + residual;
their backward takes gradients from both outputs into (x, residual, w[, b]), as in a pre-norm
block where h is the next residual.

normlab and the peers are resolved lazily, at build time, so this module imports without them.
``compile`` is skipped under the interpreter: torch.compile on CPU spends seconds per shape in
a C++ compiler and says nothing about GPU kernels.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from normlab import _runtime
from normlab.bench.traffic import ADD_NORM_OPS, LABEL_LOSS_OPS, NORM_OPS, SOFT_LOSS_OPS

EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5, "add_rms_norm": 1e-6, "add_layer_norm": 1e-5}
NORM_DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
LOSS_DIRECTIONS = ("fwd", "fwd+bwd")
DEFAULT_DIRECTIONS = {
    **dict.fromkeys(NORM_OPS + ADD_NORM_OPS, ("fwd", "bwd")),
    **dict.fromkeys(SOFT_LOSS_OPS + LABEL_LOSS_OPS, ("fwd+bwd",)),
    "copy": ("fwd",),
}
# Options an impl takes, by op family; the values are the public API's keywords.
NORM_OPTIONS = ("strategy", "layout")
LOSS_OPTIONS = ("form", "block_cap")
# torch.compile(dynamic=False) compiles once per shape; the default recompile limit (8) would
# silently fall back to eager after the 8th shape of a sweep.
_COMPILE_RECOMPILE_LIMIT = 1024


@dataclass(frozen=True)
class Impl:
    """One implementation of one op. ``build(M, N, dtype, direction, device, **options)`` returns
    the zero-argument callable to time; ``unavailable()`` returns None or the reason it cannot
    run here."""

    op: str
    name: str
    build: Callable[..., Callable[[], Any]]
    directions: tuple[str, ...]
    description: str
    baseline: bool = True
    options: tuple[str, ...] = ()
    unavailable: Callable[[], str | None] = field(default=lambda: None)
    by_default: bool = True  # measured when no impl is named (False: only when named)


REGISTRY: dict[str, dict[str, Impl]] = {}


def register(impl: Impl) -> Impl:
    REGISTRY.setdefault(impl.op, {})[impl.name] = impl
    return impl


def get(op: str, name: str) -> Impl:
    if op not in REGISTRY:
        raise ValueError(f"unknown op {op!r}: expected one of {', '.join(REGISTRY)}")
    if name not in REGISTRY[op]:
        raise ValueError(
            f"op {op!r} has no impl {name!r}: expected one of {', '.join(REGISTRY[op])}"
        )
    return REGISTRY[op][name]


def implementations(op: str, names: list[str] | None = None) -> list[Impl]:
    """The named impls of ``op`` (by default the registered ones marked ``by_default``), in
    registry order."""
    if op not in REGISTRY:
        raise ValueError(f"unknown op {op!r}: expected one of {', '.join(REGISTRY)}")
    if names is None:
        return [impl for impl in REGISTRY[op].values() if impl.by_default]
    return [get(op, name) for name in names]


# --------------------------------------------------------------------------------------------
# Availability
# --------------------------------------------------------------------------------------------


def _needs_module(module: str) -> Callable[[], str | None]:
    """None where ``module`` imports on a GPU machine, else why not (absent, or broken: a
    peer built for another triton or torch)."""

    def check() -> str | None:
        if _runtime.DEVICE != "cuda":
            return f"{module} needs a CUDA GPU"
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a dotted name whose package is missing
            found = False
        if not found:
            return f"{module} is not importable"
        try:
            importlib.import_module(module)
        except Exception as exc:
            return f"{module} fails to import: {exc!r}"[:200]
        return None

    return check


def _compile_available() -> str | None:
    if _runtime.DEVICE != "cuda":
        return "skipped on CPU: torch.compile spends seconds per shape and says nothing about GPUs"
    return None


def _compiled(fn: Callable) -> Callable:
    cfg = torch._dynamo.config
    for name in (
        "recompile_limit",
        "cache_size_limit",
        "accumulated_recompile_limit",
        "accumulated_cache_size_limit",
    ):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), _COMPILE_RECOMPILE_LIMIT))
    return torch.compile(fn, dynamic=False)


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


def _check_direction(op: str, direction: str, allowed: tuple[str, ...]) -> None:
    if direction not in allowed:
        raise ValueError(
            f"{op} has no direction {direction!r}: expected one of {', '.join(allowed)}"
        )


def norm_case(fn: Callable, op: str, M: int, N: int, dtype, direction: str, device: str):
    """Inputs for a norm and the callable for ``direction``; fn(x, w, b, eps) -> y."""
    _check_direction(op, direction, NORM_DIRECTIONS)
    x = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=device)).to(dtype).requires_grad_()
    b = (
        (0.1 * torch.randn(N, device=device)).to(dtype).requires_grad_()
        if op == "layer_norm"
        else None
    )
    eps = EPS[op]
    if direction == "fwd":
        return lambda: fn(x, w, b, eps)
    dy = torch.randn(M, N, dtype=dtype, device=device)
    inputs = (x, w) if b is None else (x, w, b)
    if direction == "fwd+bwd":
        return lambda: torch.autograd.grad(fn(x, w, b, eps), inputs, dy)
    y = fn(x, w, b, eps)
    return lambda: torch.autograd.grad(y, inputs, dy, retain_graph=True)


def add_norm_case(fn: Callable, op: str, M: int, N: int, dtype, direction: str, device: str):
    """Inputs for a fused add-norm and the callable for ``direction``; fn(x, r, w, b, eps) ->
    (y, h). The backward takes both outputs' gradients (dy, dh)."""
    _check_direction(op, direction, NORM_DIRECTIONS)
    x = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    r = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    w = (1 + 0.1 * torch.randn(N, device=device)).to(dtype).requires_grad_()
    b = (
        (0.1 * torch.randn(N, device=device)).to(dtype).requires_grad_()
        if op == "add_layer_norm"
        else None
    )
    eps = EPS[op]
    if direction == "fwd":
        return lambda: fn(x, r, w, b, eps)
    grads = (torch.randn(M, N, dtype=dtype, device=device),
             torch.randn(M, N, dtype=dtype, device=device))  # fmt: skip
    inputs = (x, r, w) if b is None else (x, r, w, b)
    if direction == "fwd+bwd":
        return lambda: torch.autograd.grad(fn(x, r, w, b, eps), inputs, grads)
    outputs = fn(x, r, w, b, eps)
    return lambda: torch.autograd.grad(outputs, inputs, grads, retain_graph=True)


def _loss_case(fn: Callable, op: str, M: int, N: int, dtype, direction: str, device: str):
    """Inputs for a loss and the callable for ``direction``; fn(logits, target) -> scalar."""
    _check_direction(op, direction, LOSS_DIRECTIONS)
    logits = torch.randn(M, N, dtype=dtype, device=device, requires_grad=True)
    if op in LABEL_LOSS_OPS:
        target = torch.randint(0, N, (M,), device=device)
    else:
        target = torch.randn(M, N, dtype=dtype, device=device)
    if direction == "fwd":
        return lambda: fn(logits, target)
    return lambda: torch.autograd.grad(fn(logits, target), (logits,))


# Public, as norm_case: the benchmark scripts build callables of their own (a torch.compile peer
# in default mode) on the same inputs.
loss_case = _loss_case


def _copy_case(M: int, N: int, dtype, direction: str, device: str):
    _check_direction("copy", direction, ("fwd",))
    src = torch.randn(M, N, dtype=dtype, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


# --------------------------------------------------------------------------------------------
# Norm impls
# --------------------------------------------------------------------------------------------


def _eager_rms_fn() -> Callable:
    """RMSNorm as separate PyTorch ops in fp32 (normlab.ref; the peer runs' eager column)."""
    from normlab import ref

    return lambda x, w, b, eps: ref.rms_norm(x, w, eps).to(x.dtype)


def _norm_builder(make_fn: Callable[..., Callable], op: str):
    def build(M, N, dtype, direction, device, **options):
        return norm_case(make_fn(**options), op, M, N, dtype, direction, device)

    return build


def _normlab_norm(op: str):
    def make(strategy: str = "auto", layout: str = "auto"):
        import normlab

        public = getattr(normlab, op)
        if op == "rms_norm":
            return lambda x, w, b, eps: public(x, w, eps, strategy=strategy, layout=layout)
        return lambda x, w, b, eps: public(x, w, b, eps, strategy=strategy, layout=layout)

    return make


def _liger_norm(op: str):
    def make():
        if op == "rms_norm":
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            # offset 0, llama casting, in_place=False: the in-place backward would overwrite dy
            return lambda x, w, b, eps: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

        return lambda x, w, b, eps: LigerLayerNormFunction.apply(x, w, b, eps)

    return make


def _quack_rms_norm():
    from quack.rmsnorm import rmsnorm

    return lambda x, w, b, eps: rmsnorm(x, w, eps=eps)


def _torch_norm(op: str, compiled: bool):
    def make():
        if op == "rms_norm":
            f = _compiled(F.rms_norm) if compiled else F.rms_norm
            return lambda x, w, b, eps: f(x, (x.shape[-1],), w, eps)
        f = _compiled(F.layer_norm) if compiled else F.layer_norm
        return lambda x, w, b, eps: f(x, (x.shape[-1],), w, b, eps)

    return make


register(
    Impl(
        "rms_norm",
        "eager",
        _norm_builder(_eager_rms_fn, "rms_norm"),
        NORM_DIRECTIONS,
        "separate PyTorch ops in fp32 (normlab.ref.rms_norm)",
    )
)
for _op in NORM_OPS:
    register(
        Impl(_op, "torch", _norm_builder(_torch_norm(_op, False), _op), NORM_DIRECTIONS, f"F.{_op}")
    )
    register(
        Impl(
            _op,
            "compile",
            _norm_builder(_torch_norm(_op, True), _op),
            NORM_DIRECTIONS,
            f"torch.compile(F.{_op}, dynamic=False)",
            unavailable=_compile_available,
        )
    )
    register(
        Impl(
            _op,
            "normlab",
            _norm_builder(_normlab_norm(_op), _op),
            NORM_DIRECTIONS,
            f"normlab.{_op}(strategy=, layout=)",
            baseline=False,
            options=NORM_OPTIONS,
        )
    )
    register(
        Impl(
            _op,
            "liger",
            _norm_builder(_liger_norm(_op), _op),
            NORM_DIRECTIONS,
            "liger-kernel (when importable)",
            unavailable=_needs_module("liger_kernel"),
        )
    )
register(
    Impl(
        "rms_norm",
        "quack",
        _norm_builder(_quack_rms_norm, "rms_norm"),
        NORM_DIRECTIONS,
        "quack-kernels rmsnorm (when importable)",
        unavailable=_needs_module("quack"),
    )
)


# --------------------------------------------------------------------------------------------
# Fused add-norm impls
# --------------------------------------------------------------------------------------------


def _add_norm_builder(make_fn: Callable[..., Callable], op: str):
    def build(M, N, dtype, direction, device, **options):
        return add_norm_case(make_fn(**options), op, M, N, dtype, direction, device)

    return build


def torch_add_norm(op: str, compiled: bool):
    """h = x + r, then F.rms_norm / F.layer_norm of h: two kernels eager, one under compile."""

    def make():
        if op == "add_rms_norm":

            def fn(x, r, w, b, eps):
                h = x + r
                return F.rms_norm(h, (h.shape[-1],), w, eps), h
        else:

            def fn(x, r, w, b, eps):
                h = x + r
                return F.layer_norm(h, (h.shape[-1],), w, b, eps), h

        return _compiled(fn) if compiled else fn

    return make


def _normlab_add_norm(op: str):
    def make(strategy: str = "auto", layout: str = "auto"):
        import normlab

        public = getattr(normlab, op)
        if op == "add_rms_norm":
            return lambda x, r, w, b, eps: public(x, r, w, eps, strategy=strategy, layout=layout)
        return lambda x, r, w, b, eps: public(x, r, w, b, eps, strategy=strategy, layout=layout)

    return make


def _liger_add_rms_norm():
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    # offset 0, llama casting, in_place=False (as the rms_norm peer): returns (y, h)
    return lambda x, r, w, b, eps: LigerFusedAddRMSNormFunction.apply(x, r, w, eps, 0.0,
                                                                       "llama", False)


for _op in ADD_NORM_OPS:
    _unfused = "F.rms_norm" if _op == "add_rms_norm" else "F.layer_norm"
    register(
        Impl(
            _op,
            "torch",
            _add_norm_builder(torch_add_norm(_op, False), _op),
            NORM_DIRECTIONS,
            f"h = x + r; {_unfused}(h)",
        )
    )
    register(
        Impl(
            _op,
            "compile",
            _add_norm_builder(torch_add_norm(_op, True), _op),
            NORM_DIRECTIONS,
            f"torch.compile(h = x + r; {_unfused}(h), dynamic=False)",
            unavailable=_compile_available,
        )
    )
    register(
        Impl(
            _op,
            "normlab",
            _add_norm_builder(_normlab_add_norm(_op), _op),
            NORM_DIRECTIONS,
            f"normlab.{_op}(strategy=, layout=)",
            baseline=False,
            options=NORM_OPTIONS,
        )
    )
register(
    Impl(
        "add_rms_norm",
        "liger",
        _add_norm_builder(_liger_add_rms_norm, "add_rms_norm"),
        NORM_DIRECTIONS,
        "liger-kernel LigerFusedAddRMSNormFunction (when importable)",
        unavailable=_needs_module("liger_kernel.ops.fused_add_rms_norm"),
    )
)


# --------------------------------------------------------------------------------------------
# Loss impls
# --------------------------------------------------------------------------------------------


def _eager_loss(op: str):
    def make():
        from normlab import ref

        return getattr(ref, f"{op}_ref")

    return make


def _torch_cross_entropy():
    return lambda logits, labels: F.cross_entropy(logits.float(), labels)


def _compiled_loss(op: str):
    def make():
        return _compiled(_eager_loss(op)())

    return make


def _normlab_loss(op: str):
    def make(form: str = "auto", block_cap: int | None = None):
        import normlab

        public = getattr(normlab, op)
        return lambda logits, target: public(logits, target, form=form, block_cap=block_cap)

    return make


def _compiled_normlab_loss(op: str):
    """normlab's loss inside torch.compile: its form and tile as a compiled training step gets
    them (form="auto" there is config.ENTROPY_COMPILED_GRAD_FORM where a gradient is needed)."""

    def make(form: str = "auto", block_cap: int | None = None):
        return _compiled(_normlab_loss(op)(form, block_cap))

    return make


def _liger_ce():
    from liger_kernel.transformers.functional import liger_cross_entropy

    return lambda logits, labels: liger_cross_entropy(logits, labels)


def _liger_jsd():
    """Liger-Kernel's LigerJSD (beta 0.5, its default and normlab.jsd's): it takes the student's
    and the teacher's log-probabilities, so the log-softmaxes run first, in fp32."""
    from liger_kernel.transformers.jsd import LigerJSD

    jsd = LigerJSD(beta=0.5)
    return lambda logits, target: jsd(logits.float().log_softmax(-1),
                                      target.float().log_softmax(-1))  # fmt: skip


def _quack_ce():
    from quack.cross_entropy import cross_entropy

    def fn(logits, labels):
        loss = cross_entropy(logits, labels)
        return loss.mean() if loss.dim() else loss

    return fn


def _loss_builder(make_fn: Callable[..., Callable], op: str):
    def build(M, N, dtype, direction, device, **options):
        return _loss_case(make_fn(**options), op, M, N, dtype, direction, device)

    return build


for _op in SOFT_LOSS_OPS + LABEL_LOSS_OPS:
    register(
        Impl(
            _op,
            "eager",
            _loss_builder(_eager_loss(_op), _op),
            LOSS_DIRECTIONS,
            f"normlab.ref.{_op}_ref (fp32 PyTorch)",
        )
    )
    if _op in LABEL_LOSS_OPS:
        register(
            Impl(
                _op,
                "torch",
                _loss_builder(_torch_cross_entropy, _op),
                LOSS_DIRECTIONS,
                "F.cross_entropy(logits.float(), labels)",
            )
        )
    register(
        Impl(
            _op,
            "compile",
            _loss_builder(_compiled_loss(_op), _op),
            LOSS_DIRECTIONS,
            "torch.compile(eager, dynamic=False)",
            unavailable=_compile_available,
        )
    )
    register(
        Impl(
            _op,
            "normlab",
            _loss_builder(_normlab_loss(_op), _op),
            LOSS_DIRECTIONS,
            f"normlab.{_op}(form=, block_cap=)",
            baseline=False,
            options=LOSS_OPTIONS,
        )
    )
    register(
        Impl(
            _op,
            "normlab+compile",
            _loss_builder(_compiled_normlab_loss(_op), _op),
            LOSS_DIRECTIONS,
            f"torch.compile(normlab.{_op}(form=, block_cap=), dynamic=False)",
            baseline=False,
            options=LOSS_OPTIONS,
            unavailable=_compile_available,
            by_default=False,  # a compile per shape: measured when named
        )
    )
register(
    Impl(
        "cross_entropy",
        "liger",
        _loss_builder(_liger_ce, "cross_entropy"),
        LOSS_DIRECTIONS,
        "liger-kernel cross entropy (when importable)",
        unavailable=_needs_module("liger_kernel.transformers.functional"),
    )
)
register(
    Impl(
        "jsd",
        "liger",
        _loss_builder(_liger_jsd, "jsd"),
        LOSS_DIRECTIONS,
        "liger-kernel LigerJSD(beta=0.5) on log_softmax inputs (when importable)",
        unavailable=_needs_module("liger_kernel.transformers.jsd"),
    )
)
register(
    Impl(
        "cross_entropy",
        "quack",
        _loss_builder(_quack_ce, "cross_entropy"),
        LOSS_DIRECTIONS,
        "quack-kernels cross entropy (when importable)",
        unavailable=_needs_module("quack"),
    )
)

register(
    Impl(
        "copy",
        "torch",
        lambda M, N, dtype, direction, device: _copy_case(M, N, dtype, direction, device),
        ("fwd",),
        "dst.copy_(src): the roofline op",
    )
)
