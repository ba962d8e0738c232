"""The norms' options against an fp64 reference, under the interpreter on CPU: the weight offset
(y = xhat * (offset + weight), Gemma's zero-centred weight) and the fused residual add
(``add_rms_norm`` / ``add_layer_norm`` -> (y, h), h = x + residual), at every layout and
backward strategy, awkward shapes and the three dtypes; their modules, patch, custom ops,
bytes models and benchmark entries.

The reference of an add-norm: h summed in fp32 and rounded to x's dtype (``ref.residual_sum``),
y = norm(h) in fp64 from that rounded h, and the gradient of x and of the residual that of
``(y * gy).sum() + (h * gh).sum()`` with respect to h (the rounding's derivative is 1).
"""

from __future__ import annotations

import pytest
import torch
from helpers import assert_close

import normlab
from normlab import ref
from normlab.norms import block_row as narrow
from normlab.norms import config as configs
from normlab.norms import row as K

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PATHS = [("row", "atomic"), ("row", "two_stage"), ("row", "persistent"),
         ("block_row", "persistent")]  # fmt: skip
EPS = {True: 1e-6, False: 1e-5}


def _inputs(m, n, dtype, is_rms, *, weight=True, bias=True):
    """x, residual, weight and bias (None where absent); the weight is zero-centred (Gemma's),
    so an offset lost anywhere changes every output."""
    x = torch.randn(m, n).to(dtype)
    r = (2 * torch.randn(m, n)).to(dtype)
    w = (0.5 * torch.randn(n)).to(dtype) if weight else None
    b = (0.5 * torch.randn(n)).to(dtype) if bias and not is_rms else None
    return x, r, w, b


def _call(x, r, w, b, is_rms, offset, **kw):
    eps = EPS[is_rms]
    if r is None:
        if is_rms:
            return normlab.rms_norm(x, w, eps, offset=offset, **kw), None
        return normlab.layer_norm(x, w, b, eps, offset=offset, **kw), None
    if is_rms:
        return normlab.add_rms_norm(x, r, w, eps, offset=offset, **kw)
    return normlab.add_layer_norm(x, r, w, b, eps, offset=offset, **kw)


def _reference(x, r, w, b, is_rms, offset, gy, gh):
    """(h, y, dh_total, dweight, dbias) in fp64 from h = x (no residual) or the rounded sum."""
    h = x if r is None else ref.residual_sum(x, r)
    h64 = h.double().requires_grad_(True)
    w64 = w.double().requires_grad_(True) if w is not None else None
    b64 = b.double().requires_grad_(True) if b is not None else None
    eps = EPS[is_rms]
    if is_rms:
        y64 = ref.rms_norm(h64, w64, eps, offset)
    else:
        y64 = ref.layer_norm(h64, w64, b64, eps, offset)
    loss = (y64 * gy.double()).sum()
    if gh is not None:
        loss = loss + (h64 * gh.double()).sum()
    leaves = [t for t in (h64, w64, b64) if t is not None]
    grads = iter(torch.autograd.grad(loss, leaves))
    dh = next(grads)
    dw = next(grads) if w64 is not None else None
    db = next(grads) if b64 is not None else None
    return h, y64.detach(), dh, dw, db


def _check(m, n, dtype, is_rms, *, fused, offset, weight=True, bias=True, shape=None, **kw):
    """Run the public op forward and backward (gradients from y and, fused, from h) and compare
    every output and gradient with the fp64 reference."""
    x, r, w, b = _inputs(m, n, dtype, is_rms, weight=weight, bias=bias)
    if not fused:
        r = None
    if shape is not None:
        x, r = x.reshape(shape), None if r is None else r.reshape(shape)
    gy = torch.randn(x.shape).to(dtype)
    gh = torch.randn(x.shape).to(dtype) if fused else None
    leaves = [t.requires_grad_(True) for t in (x, r, w, b) if t is not None]
    y, h = _call(x, r, w, b, is_rms, offset, **kw)
    outs, grads_in = ((y,), (gy,)) if h is None else ((y, h), (gy, gh))
    grads = iter(torch.autograd.grad(outs, leaves, grads_in))
    want_h, want_y, want_dh, want_dw, want_db = _reference(
        x.detach(), None if r is None else r.detach(), w, b, is_rms, offset, gy, gh
    )
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, want_y, msg="y")
    dx = next(grads)
    assert_close(dx, want_dh, msg="dx")
    if r is not None:
        assert h.dtype == dtype and h.shape == x.shape
        assert torch.equal(h, want_h), "h is not the fp32 sum rounded to x's dtype"
        assert_close(next(grads), want_dh, msg="dresidual")
    if w is not None:
        assert_close(next(grads), want_dw, reduce_len=m, msg="dweight")
    if b is not None:
        assert_close(next(grads), want_db, reduce_len=m, msg="dbias")


# ---- every layout and strategy ------------------------------------------------------------------


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("layout,strategy", PATHS, ids=str)
@pytest.mark.parametrize(
    "m,n",
    [
        (1, 1),  # one row, one column
        (1, 7),  # one row, odd width
        (13, 33),  # just past a power of two; block-row recomputes the statistics
        (5, 97),  # a prime; block-row LayerNorm stores them (> 64 columns)
    ],
    ids=str,
)
def test_offset_and_add_at_every_path(m, n, layout, strategy, is_rms, fused):
    """offset = 1 (Gemma) with zero-centred weights, with and without the fused add (bf16)."""
    _check(m, n, torch.bfloat16, is_rms, fused=fused, offset=1.0, layout=layout,
           strategy=strategy)  # fmt: skip


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("m,n", [(37, 26), (67, 129)], ids=str)
def test_offset_and_add_in_narrow_forward_tiles(m, n, is_rms, fused):
    """layout="auto" below the block-row layout: the forward's narrow row tiles (2 and 4 rows at
    the interpreter's 4 SMs, ragged last tiles) with the fused add and an offset; the row
    layout's backward."""
    assert configs.plan(is_rms, m, n, sm_count=4).fwd_tile.block_rows == (2 if n < 64 else 4)
    _check(m, n, torch.bfloat16, is_rms, fused=fused, offset=1.0)


@pytest.mark.parametrize("fused", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("layout,strategy", PATHS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_offset_and_add_per_dtype(dtype, layout, strategy, is_rms, fused):
    _check(11, 40, dtype, is_rms, fused=fused, offset=-0.75, layout=layout, strategy=strategy)


@pytest.mark.parametrize("strategy", ["atomic", "two_stage", "persistent"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_wide_row(is_rms, strategy):
    """1025 columns: the compile-time-width persistent backward and a masked 2048 block."""
    _check(3, 1025, torch.float32, is_rms, fused=True, offset=1.0, layout="row",
           strategy=strategy)  # fmt: skip


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize(
    "is_rms,weight,bias",
    [(True, False, False), (False, False, False), (False, True, False), (False, False, True)],
    ids=["rms", "ln", "ln-w", "ln-b"],
)
def test_add_norm_without_parameters(is_rms, weight, bias, layout):
    _check(9, 24, torch.float32, is_rms, fused=True, offset=0.0, weight=weight, bias=bias,
           layout=layout)  # fmt: skip


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_3d_input_and_auto_plan(is_rms):
    _check(6, 37, torch.float16, is_rms, fused=True, offset=0.5, shape=(2, 3, 37))


# ---- the launchers' other code paths ------------------------------------------------------------


def _fused_forward_reference(x, r, w, b, is_rms, offset):
    h = ref.residual_sum(x, r)
    hd = h.double()
    mean = torch.zeros(h.shape[0], dtype=torch.float64) if is_rms else hd.mean(1)
    var = hd.pow(2).mean(1) if is_rms else hd.var(1, unbiased=False)
    y = _reference(x, r, w, b, is_rms, offset, torch.zeros_like(x), None)[1]
    return h, y, mean, torch.rsqrt(var + EPS[is_rms])


@pytest.mark.parametrize("n", [37, 48], ids=["ragged-chunks", "even-chunks"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_row_forward_chunked_with_residual(is_rms, n):
    """The chunked forward (block 16): pass 1 writes h, pass 2 reads it back."""
    x, r, w, b = _inputs(5, n, torch.bfloat16, is_rms)
    h = torch.empty_like(x)
    y, mean, rstd = K.norm_forward(x, w, b, EPS[is_rms], is_rms, offset=1.0, residual=r, h_out=h,
                                   block_size=16, num_warps=1)  # fmt: skip
    want_h, want_y, want_mean, want_rstd = _fused_forward_reference(x, r, w, b, is_rms, 1.0)
    assert torch.equal(h, want_h)
    assert_close(y, want_y)
    assert_close(rstd, want_rstd, dtype=torch.float32)
    if not is_rms:
        assert_close(mean, want_mean, dtype=torch.float32)


# (fused add, weight, statistics stored, shifted row): the shifted row is the plain norm's only
ROW_FWD_ARGS = [(f, w, s, False) for f in (False, True) for w in (False, True)
                for s in (False, True)]  # fmt: skip
ROW_FWD_ARGS += [(False, True, True, True), (False, True, False, True)]


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("fused,affine,stats,shifted", ROW_FWD_ARGS)
def test_row_forward_launches_only_the_tensors_it_reads(monkeypatch, is_rms, fused, affine, stats,
                                                        shifted):  # fmt: skip
    """Absent tensors reach the row forward as None (constexprs, no launch argument), never as a
    placeholder pointer, and the present ones give the fp64 reference's y, h, mean and rstd."""
    launched, real = [], K.launch

    def spy(fn, grid, *args, **kwargs):
        if fn is K._norm_fwd_kernel:
            launched.append([a for a in args if isinstance(a, torch.Tensor)])
        return real(fn, grid, *args, **kwargs)

    monkeypatch.setattr(K, "launch", spy)
    x, r, w, b = _inputs(3, 203, torch.bfloat16, is_rms, weight=affine, bias=affine)
    h = torch.empty_like(x) if fused else None  # (an odd width: rows start off 16-byte bounds)
    y, mean, rstd = K.norm_forward(x, w, b, EPS[is_rms], is_rms, residual=r if fused else None,
                                   h_out=h, store_stats=stats, shift=shifted,
                                   shifted_params=shifted)  # fmt: skip
    n_params = 0 if not affine else 1 if is_rms else 2
    n_stats = 0 if not stats else 1 if is_rms else 2
    want = 2 + 2 * fused + n_params * (1 + shifted) + n_stats  # x and y, then what is present
    assert [len(tensors) for tensors in launched] == [want]
    assert (mean is None) == (is_rms or not stats) and (rstd is None) == (not stats)
    want_h, want_y, want_mean, want_rstd = _fused_forward_reference(
        x, r if fused else torch.zeros_like(x), w, b, is_rms, 0.0)  # fmt: skip
    assert_close(y, want_y)
    if fused:
        assert torch.equal(h, want_h)
    if stats:
        assert_close(rstd, want_rstd, dtype=torch.float32)
    if stats and not is_rms:
        assert_close(mean, want_mean, dtype=torch.float32)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_block_row_persistent_forward_with_residual(is_rms):
    """A persistent prefetching grid (4 programs, 19 tiles): the residual tile is prefetched."""
    x, r, w, b = _inputs(37, 20, torch.float16, is_rms)
    h = torch.empty_like(x)
    cfg = configs.BlockRowFwdConfig(block_rows=2, num_warps=2, programs_per_sm=1)
    y, mean, rstd = narrow.launch_forward(x, w, b, EPS[is_rms], is_rms, cfg, offset=1.0,
                                          residual=r, h_out=h)  # fmt: skip
    want_h, want_y, want_mean, want_rstd = _fused_forward_reference(x, r, w, b, is_rms, 1.0)
    assert torch.equal(h, want_h)
    assert_close(y, want_y)
    assert_close(rstd, want_rstd, dtype=torch.float32)
    if not is_rms:
        assert_close(mean, want_mean, dtype=torch.float32)


@pytest.mark.parametrize("launcher", ["row", "block_row"])
def test_fused_add_refuses_an_h_out_of_another_dtype(launcher):
    """h_out takes x's dtype: an fp32 buffer beside bf16 x would be filled with bf16 bytes."""
    x, r, w, _ = _inputs(4, 16, torch.bfloat16, True)
    h = torch.empty(4, 16, dtype=torch.float32)
    with pytest.raises(ValueError, match="h_out"):
        if launcher == "row":
            K.norm_forward(x, w, None, EPS[True], True, residual=r, h_out=h)
        else:
            narrow.launch_forward(x, w, None, EPS[True], True,
                                  configs.block_row_fwd_config(16, True), residual=r, h_out=h)


def _backward_case(m, n, dtype, is_rms):
    """(dy, h, w, b, dh, mean, rstd) for a direct backward launch and its fp64 expectations."""
    x, r, w, b = _inputs(m, n, dtype, is_rms)
    h = ref.residual_sum(x, r)
    _, mean, rstd = K.norm_forward(h, w, b, EPS[is_rms], is_rms, offset=1.0)
    dy, dh = torch.randn(m, n).to(dtype), torch.randn(m, n).to(dtype)
    want = _reference(x, r, w, b, is_rms, 1.0, dy, dh)
    return (dy, h, w, b, dh, mean, rstd), want


@pytest.mark.parametrize(
    "kw",
    [
        {"strategy": "atomic", "two_pass": True, "block_cols": 16},
        {"strategy": "two_stage", "two_pass": True, "block_cols": 16},
        {"strategy": "persistent", "two_pass": True, "block_cols": 16},
        {"strategy": "persistent", "prefetch": False},
        {"strategy": "persistent", "programs_per_sm": 3, "paired_partials": True},
    ],
    ids=["atomic-2pass", "two_stage-2pass", "persistent-2pass", "no-prefetch", "paired"],
)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_row_backward_paths_with_dh(is_rms, kw):
    (dy, h, w, b, dh, mean, rstd), (_, _, want_dx, want_dw, want_db) = _backward_case(
        37, 41, torch.bfloat16, is_rms
    )
    dx, dw, db = K.norm_backward(dy, h, w, b, mean, rstd, is_rms, offset=1.0, dh=dh, **kw)
    assert_close(dx, want_dx, msg="dx")
    assert_close(dw, want_dw, reduce_len=37, msg="dweight")
    if not is_rms:
        assert_close(db, want_db, reduce_len=37, msg="dbias")


@pytest.mark.parametrize("recompute", [False, True], ids=["stored-stats", "recomputed"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_block_row_backward_with_dh(is_rms, recompute):
    """Per-tile column sums with the next tile prefetched (the non-default knobs), dh added."""
    (dy, h, w, b, dh, mean, rstd), (_, _, want_dx, want_dw, want_db) = _backward_case(
        37, 20, torch.float32, is_rms
    )
    if recompute:
        mean = rstd = None
    cfg = configs.block_row_bwd_config(20, tile_elems=128, acc_tile=False, prefetch=True)
    dx, dw, db = narrow.launch_backward(dy, h, w, b, mean, rstd, is_rms, cfg, eps=EPS[is_rms],
                                        offset=1.0, dh=dh)  # fmt: skip
    assert_close(dx, want_dx, msg="dx")
    assert_close(dw, want_dw, reduce_len=37, msg="dweight")
    if not is_rms:
        assert_close(db, want_db, reduce_len=37, msg="dbias")


# Each norm kernel, reached at 19 rows of 41 columns (the pointwise path: one) under the
# interpreter (4 SMs, 16 programs where forced): the launcher, its keywords, and the kernel
# (with a flag it sets) that the path must launch.
KERNEL_PATHS = {
    "persistent": ("row", {}, "_norm_bwd_persistent", None),
    "two_pass": ("row", {"two_pass": True, "block_cols": 16}, "_norm_bwd_persistent_two_pass",
                 None),
    "atomic": ("row", {"strategy": "atomic"}, "_norm_bwd_atomic", None),
    "two_stage": ("row", {"strategy": "two_stage"}, "_norm_bwd_partials", None),
    "roles": ("row", {"roles": True, "shift": False, "block_rows": 1}, "_norm_bwd_roles", None),
    "shifted": ("row", {"shift": True, "programs_per_sm": 4}, "_norm_bwd_persistent",
                "SHIFT_VEC"),
    "liger_order": ("row", {"liger_order": True, "block_rows": 1, "programs_per_sm": 4},
                    "_norm_bwd_persistent", "LIGER_ORDER"),
    "block_row": ("block_row", {}, "_block_row_bwd", None),
    "block_row_recomputed": ("block_row", {"recompute": True}, "_block_row_bwd",
                             "RECOMPUTE_STATS"),
    "pointwise": ("block_row", {"n_cols": 1}, "_pointwise_fwd", None),
    "split_row": ("split_row", {}, "_split_row_bwd", None),
}
NORM_LAUNCHERS = ("row", "block_row", "split_row", "reduce")


def _run_kernel_path(path, x, r, w, b, dy, dh, is_rms, offset):
    """(y, dx, dweight, dbias) of ``path``'s launchers: the forward of x (+ r), then the
    backward with dh added."""
    from normlab.norms import split_row

    layout, kw, _, _ = KERNEL_PATHS[path]
    eps = EPS[is_rms]
    fused = {"residual": r, "h_out": None if r is None else torch.empty_like(x)}
    h = x if r is None else ref.residual_sum(x, r)
    if layout == "row":
        y, mean, rstd = K.norm_forward(x, w, b, eps, is_rms, offset=offset, **fused)
        grads = K.norm_backward(dy, h, w, b, mean, rstd, is_rms, offset=offset, dh=dh, **kw)
    elif layout == "block_row":
        recompute = kw.get("recompute", False)
        cfg = configs.block_row_fwd_config(x.shape[1], is_rms)
        y, mean, rstd = narrow.launch_forward(x, w, b, eps, is_rms, cfg, not recompute,
                                              offset=offset, **fused)  # fmt: skip
        bwd = (configs.block_row_bwd_recompute_config(x.shape[1], is_rms) if recompute
               else configs.block_row_bwd_config(x.shape[1]))  # fmt: skip
        grads = narrow.launch_backward(dy, h, w, b, mean, rstd, is_rms, bwd, eps=eps,
                                       offset=offset, dh=dh)  # fmt: skip
    else:  # the split-row forward takes no residual: it normalizes h
        chunk = configs.split_chunk(16)
        y, mean, rstd = split_row.split_row_forward(h, w, b, eps, is_rms, chunk, offset)
        grads = split_row.split_row_backward(dy, h, w, b, mean, rstd, is_rms, chunk, offset,
                                             dh=dh)  # fmt: skip
    return (y, *grads)


@pytest.mark.parametrize("path", list(KERNEL_PATHS))
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("affine,fused", [(True, True), (False, False)],
                         ids=["affine-fused", "bare"])  # fmt: skip
def test_norm_kernels_launch_only_the_tensors_they_read(monkeypatch, path, is_rms, affine,
                                                        fused):  # fmt: skip
    """Every norm launch, forward and backward, passes an absent tensor (weight, bias, mean,
    residual, h, dh, a dγ/dβ partial or output) as None, never as a placeholder pointer: the
    tensors one launch takes are distinct. Each path launches its kernel, and y, dx, dγ and dβ
    are the fp64 reference's."""
    import importlib

    launched = []
    for name in NORM_LAUNCHERS:
        module = importlib.import_module(f"normlab.norms.{name}")

        def spy(fn, grid, *args, _real=module.launch, **kwargs):
            launched.append((fn.__name__, kwargs, [a for a in args if isinstance(a, torch.Tensor)]))
            return _real(fn, grid, *args, **kwargs)

        monkeypatch.setattr(module, "launch", spy)
    _, kw, kernel, flag = KERNEL_PATHS[path]
    if path == "roles" and not affine:  # the roles split dx from dγ/dβ: with neither, one role
        kernel = "_norm_bwd_persistent"
    n = kw.get("n_cols", 41)  # 41: rows start off 16-byte bounds, a ragged last vector
    x, r, w, b = _inputs(19, n, torch.bfloat16, is_rms, weight=affine, bias=affine)
    r = r if fused else None
    dy = torch.randn(19, n).to(torch.bfloat16)
    dh = torch.randn(19, n).to(torch.bfloat16) if fused else None
    offset = 1.0 if affine else 0.0
    y, dx, dw, db = _run_kernel_path(path, x, r, w, b, dy, dh, is_rms, offset)
    _, want_y, want_dx, want_dw, want_db = _reference(x, r, w, b, is_rms, offset, dy, dh)
    assert_close(y, want_y, msg="y")
    assert_close(dx, want_dx, msg="dx")
    assert (dw is None) == (w is None) and (db is None) == (b is None)
    if w is not None:
        assert_close(dw, want_dw, reduce_len=19, msg="dweight")
    if b is not None:
        assert_close(db, want_db, reduce_len=19, msg="dbias")
    assert any(name.startswith(kernel) and (flag is None or kwargs[flag])
               for name, kwargs, _ in launched), (kernel, [name for name, _, _ in launched])
    for name, _, tensors in launched:
        assert len({t.data_ptr() for t in tensors}) == len(tensors), f"{name}: an alias"


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_strided_views(is_rms, layout):
    """x a row-strided view of a wider buffer, the residual one row broadcast (row stride 0),
    dy/dh row-strided views: read in place, against fp64."""
    m, n = 9, 24
    x = torch.randn(m, n + 8)[:, :n]
    r = torch.randn(1, n).expand(m, n)
    w = (0.5 * torch.randn(n)).requires_grad_(True)
    b = torch.randn(n).requires_grad_(True) if not is_rms else None
    xg, rg = x.clone().requires_grad_(True), r.clone().requires_grad_(True)
    gy, gh = torch.randn(m, n + 3)[:, :n], torch.randn(m, 2 * n)[:, ::2]
    y, h = _call(x, r, w, b, is_rms, 1.0, layout=layout)
    leaves = [t for t in (w, b) if t is not None]
    grads = torch.autograd.grad((y, h), leaves, (gy, gh))
    want_h, want_y, _, want_dw, want_db = _reference(x, r, w, b, is_rms, 1.0, gy, gh)
    assert torch.equal(h, want_h)
    assert_close(y, want_y, msg="y")
    assert_close(grads[0], want_dw, reduce_len=m, msg="dweight")
    if b is not None:
        assert_close(grads[1], want_db, reduce_len=m, msg="dbias")
    y2, h2 = _call(xg, rg, w.detach(), b, is_rms, 1.0, layout=layout)
    dx, dr = torch.autograd.grad((y2, h2), (xg, rg), (gy, gh))
    want_dh = _reference(x, r, w, b, is_rms, 1.0, gy, gh)[2]
    assert_close(dx, want_dh, msg="dx")
    assert_close(dr, want_dh, msg="dresidual")


# ---- autograd: which outputs are used, which inputs need a gradient ----------------------------


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_gradient_from_one_output(is_rms, layout):
    """Only h used: dx = dresidual = dh, no weight gradient. Only y used: the norm's backward
    without a dh term."""
    x, r, w, b = _inputs(7, 30, torch.float32, is_rms)
    leaves = [t.requires_grad_(True) for t in (x, r, w, b) if t is not None]
    gh = torch.randn(7, 30)
    _, h = _call(x, r, w, b, is_rms, 1.0, layout=layout)
    dx, dr, dw, *db = torch.autograd.grad(h, leaves, gh, allow_unused=True)
    assert torch.equal(dx, gh) and torch.equal(dr, gh)
    assert dw is None and all(g is None for g in db)

    gy = torch.randn(7, 30)
    y, _ = _call(x, r, w, b, is_rms, 1.0, layout=layout)
    grads = torch.autograd.grad(y, leaves, gy)
    _, _, want_dx, want_dw, _ = _reference(x.detach(), r.detach(), w, b, is_rms, 1.0, gy, None)
    assert_close(grads[0], want_dx, msg="dx")
    assert_close(grads[1], want_dx, msg="dresidual")
    assert_close(grads[2], want_dw, reduce_len=7, msg="dweight")


def test_add_norm_grads_of_x_and_residual_are_separate_tensors():
    """One dx is returned for both inputs; autograd must not leave x.grad aliasing
    residual.grad (an in-place update of one would change the other)."""
    x, r, w, _ = _inputs(5, 16, torch.float32, True)
    for t in (x, r, w):
        t.requires_grad_(True)
    y, h = normlab.add_rms_norm(x, r, w)
    (y.sum() + 2 * h.sum()).backward()
    assert torch.equal(x.grad, r.grad)
    assert x.grad.data_ptr() != r.grad.data_ptr()
    x.grad.zero_()
    assert r.grad.abs().sum() > 0


def test_add_norm_only_the_residual_needs_a_gradient():
    x, r, w, _ = _inputs(4, 24, torch.float32, True)
    r.requires_grad_(True)
    gy, gh = torch.randn(4, 24), torch.randn(4, 24)
    y, h = normlab.add_rms_norm(x, r, w, offset=1.0)
    (dr,) = torch.autograd.grad((y, h), (r,), (gy, gh))
    assert_close(dr, _reference(x, r.detach(), w, None, True, 1.0, gy, gh)[2])


def test_add_norm_of_a_tensor_with_itself():
    """add_rms_norm(x, x): h = 2x, and x's gradient is the sum over both inputs (2 * dh_total)."""
    x = torch.randn(3, 19, requires_grad=True)
    gy, gh = torch.randn(3, 19), torch.randn(3, 19)
    y, h = normlab.add_rms_norm(x, x)
    (dx,) = torch.autograd.grad((y, h), (x,), (gy, gh))
    want = _reference(x.detach(), x.detach(), None, None, True, 0.0, gy, gh)
    assert torch.equal(h, 2 * x.detach())
    assert_close(dx, 2 * want[2])


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_without_grad(is_rms):
    x, r, w, b = _inputs(6, 50, torch.bfloat16, is_rms)
    with torch.no_grad():
        y, h = _call(x, r, w, b, is_rms, 1.0)
    want_h, want_y, *_ = _reference(x, r, w, b, is_rms, 1.0, torch.zeros_like(x), None)
    assert torch.equal(h, want_h) and not y.requires_grad
    assert_close(y, want_y)


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 8), (4, 0)], ids=str)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_empty_input(is_rms, shape, layout):
    n = shape[-1]
    x = torch.randn(shape, requires_grad=True)
    r = torch.randn(shape, requires_grad=True)
    w = torch.randn(n, requires_grad=True)
    y, h = _call(x, r, w, None, is_rms, 1.0, layout=layout)
    assert y.shape == h.shape == shape
    dx, dr, dw = torch.autograd.grad((y, h), (x, r, w), (torch.ones(shape), torch.ones(shape)))
    assert dx.shape == dr.shape == shape and dw.shape == (n,) and not dw.any()


# ---- torch.compile and the custom ops ------------------------------------------------------------


@pytest.mark.slow  # seconds each (compile, opcheck or a model): out of make test-quick
@pytest.mark.parametrize(
    ("layout", "dynamic"), [("auto", False), ("auto", True), ("block_row", True)]
)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_add_norm_torch_compile_fullgraph(is_rms, layout, dynamic):
    x, r, w, b = _inputs(6, 20, torch.float32, is_rms)
    gy, gh = torch.randn(6, 20), torch.randn(6, 20)

    def loss(x, r, w, b):
        y, h = _call(x, r, w, b, is_rms, 1.0, layout=layout)
        return (y * gy).sum() + (h * gh).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    leaves = [t.clone().requires_grad_(True) for t in (x, r, w) if t is not None]
    grads = torch.autograd.grad(compiled(*leaves, b), leaves)
    _, _, want_dh, want_dw, _ = _reference(x, r, w, b, is_rms, 1.0, gy, gh)
    assert_close(grads[0], want_dh, msg="dx")
    assert_close(grads[1], want_dh, msg="dresidual")
    assert_close(grads[2], want_dw, reduce_len=6, msg="dweight")


@pytest.mark.slow  # seconds each (compile, opcheck or a model): out of make test-quick
@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add-norm"])
@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("ops", ["triton", "planned"])
def test_norm_custom_ops_opcheck(is_rms, layout, residual, ops):
    """Schema, fake shapes, autograd registration and AOT dispatch of the Triton ops
    normlab::norm_fwd (with the residual and offset arguments) and normlab::norm_bwd (with dh),
    and of the opaque ops they call for symbolic shapes (norm_fwd_planned, norm_bwd_planned)."""
    fwd_op, bwd_op = ((torch.ops.normlab.norm_fwd, torch.ops.normlab.norm_bwd) if ops == "triton"
                      else (torch.ops.normlab.norm_fwd_planned,
                            torch.ops.normlab.norm_bwd_planned))  # fmt: skip
    x, r, w, b = _inputs(5, 24, torch.float32, is_rms)
    r = r if residual else None
    w.requires_grad_(ops == "triton")  # (the planned ops have no autograd: they run below it)
    fwd = (x, r, w, b, EPS[is_rms], 1.0, is_rms, "auto", layout)
    torch.library.opcheck(fwd_op.default, fwd)
    with torch.no_grad():  # without statistics (no backward will run)
        torch.library.opcheck(fwd_op.default, (*fwd, False))
    with torch.no_grad():
        _, h, mean, rstd = fwd_op(*fwd)
    normed = h if residual else x
    dh = torch.randn(5, 24) if residual else None
    bwd = (torch.randn(5, 24), dh, normed, w.detach(), b, mean, rstd, EPS[is_rms], 1.0, is_rms,
           "auto", layout)  # fmt: skip
    torch.library.opcheck(bwd_op.default, bwd)


# ---- bad inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", ["add_rms_norm", "add_layer_norm"])
@pytest.mark.parametrize(
    "make_r,exc,match",
    [
        (lambda x: torch.randn(3, 7), ValueError, "residual has shape"),
        (lambda x: torch.randn(8), ValueError, "residual has shape"),
        (lambda x: x.to(torch.bfloat16), TypeError, "residual has dtype"),
        (lambda x: torch.randn(3, 8, device="meta"), ValueError, "residual is on device"),
        (lambda x: x.tolist(), TypeError, "residual must be a torch.Tensor"),
        (lambda x: None, TypeError, "residual must be a torch.Tensor"),
    ],
    ids=["shape", "broadcastable-shape", "dtype", "device", "list", "none"],
)
def test_add_norm_bad_residual(fn, make_r, exc, match):
    x = torch.randn(3, 8)
    with pytest.raises(exc, match=f"{fn}: {match}"):
        getattr(normlab, fn)(x, make_r(x), torch.randn(8))


@pytest.mark.parametrize("fn", ["rms_norm", "layer_norm", "add_rms_norm", "add_layer_norm"])
@pytest.mark.parametrize(
    "offset,weight,match",
    [
        (1.0, False, "needs a weight"),
        (float("nan"), True, "offset must be a finite float"),
        (float("inf"), True, "offset must be a finite float"),
        (True, True, "offset must be a finite float"),
        ("1", True, "offset must be a finite float"),
    ],
    ids=["no-weight", "nan", "inf", "bool", "str"],
)
def test_bad_offset(fn, offset, weight, match):
    x = torch.randn(3, 8)
    args = (x, torch.randn(3, 8)) if fn.startswith("add") else (x,)
    with pytest.raises(ValueError, match=match):
        getattr(normlab, fn)(*args, torch.randn(8) if weight else None, offset=offset)


def test_offset_zero_without_weight_is_the_plain_norm():
    x = torch.randn(4, 10)
    assert torch.equal(normlab.rms_norm(x, None, offset=0), normlab.rms_norm(x))


# ---- modules -------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("cls", [normlab.RMSNorm, normlab.LayerNorm])
def test_module_offset(cls, layout):
    """offset=1 starts at weight 0 (the scale offset + weight at 1, as torch's ones) and trains
    the offset form: output and gradients against fp64."""
    is_rms = cls is normlab.RMSNorm
    module = cls(24, eps=EPS[is_rms], offset=1.0, layout=layout)
    assert torch.equal(module.weight, torch.zeros(24))
    assert "offset=1.0" in repr(module)
    x = torch.randn(2, 5, 24)
    torch_module = torch.nn.RMSNorm(24, EPS[is_rms]) if is_rms else torch.nn.LayerNorm(24)
    assert_close(module(x), torch_module(x).double())  # the initial scale is 1
    with torch.no_grad():
        module.weight.copy_(0.5 * torch.randn(24))
    xg = x.clone().requires_grad_(True)
    gy = torch.randn(2, 5, 24)
    module(xg).backward(gy)
    b = module.bias if not is_rms else None
    want = _reference(x.reshape(10, 24), None, module.weight.detach(), b, is_rms, 1.0,
                      gy.reshape(10, 24), None)  # fmt: skip
    assert_close(xg.grad.reshape(10, 24), want[2], msg="dx")
    assert_close(module.weight.grad, want[3], reduce_len=10, msg="dweight")
    module.reset_parameters()
    assert torch.equal(module.weight, torch.zeros(24))


@pytest.mark.parametrize("cls", [normlab.RMSNorm, normlab.LayerNorm])
def test_module_offset_default_is_torch(cls):
    module = cls(8)
    assert module.offset == 0.0 and torch.equal(module.weight, torch.ones(8))
    assert "offset" not in repr(module)
    with pytest.raises(ValueError, match="needs elementwise_affine=True"):
        cls(8, elementwise_affine=False, offset=1.0)
    with pytest.raises(ValueError, match="offset must be a finite float"):
        cls(8, offset=float("nan"))


# ---- bytes models and benchmark entries ---------------------------------------------------------


def test_add_norm_bytes_models():
    from normlab.bench import traffic

    m, n, e = 1000, 769, 2
    for op in ("add_rms_norm", "add_layer_norm"):
        assert traffic.bytes_moved(op, "fwd", m, n, "bf16") == 4 * m * n * e
        assert traffic.bytes_moved(op, "bwd", m, n, "bf16") == 4 * m * n * e
        assert traffic.bytes_moved(op, "fwd+bwd", m, n, "bf16") == 8 * m * n * e
    full = traffic.bytes_moved("add_rms_norm", "bwd", m, n, "bf16", model="full", n_partials=8)
    # + w read, rstd read, dw written, 8 fp32 partial rows written and read back
    assert full == 4 * m * n * e + n * e + 4 * m + n * e + 2 * 8 * n * 4
    full = traffic.bytes_moved("add_layer_norm", "fwd", m, n, "fp32", model="full")
    assert full == 4 * m * n * 4 + 2 * n * 4 + 8 * m  # + weight, bias; mean and rstd written


@pytest.mark.parametrize("direction", ["fwd", "bwd", "fwd+bwd"])
@pytest.mark.parametrize("op", ["add_rms_norm", "add_layer_norm"])
def test_add_norm_registry_entries_agree(op, direction):
    """torch's unfused add + norm and normlab's fused op on the registry's inputs agree."""
    from normlab.bench import registry

    names = {impl.name for impl in registry.implementations(op)}
    assert {"torch", "compile", "normlab"} <= names
    assert ("liger" in names) == (op == "add_rms_norm")
    results = {}
    for name in ("torch", "normlab"):
        torch.manual_seed(3)
        fn = registry.get(op, name).build(13, 100, torch.float32, direction, "cpu")
        results[name] = fn()
    n_grads = 3 if op == "add_rms_norm" else 4  # x, residual, weight (, bias)
    assert len(results["normlab"]) == (2 if direction == "fwd" else n_grads)
    for a, b in zip(results["normlab"], results["torch"], strict=True):
        assert a.abs().max() > 0
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layout", ["row", "block_row"])
def test_layer_norm_is_of_the_stored_h(layout):
    """x = 256 in bf16 (ulp 2 above it) plus residuals in [0, 0.9]: the stored h is 256 in every
    column, so LayerNorm gives exactly the bias; normalizing the unrounded fp32 sum would not."""
    x = torch.full((3, 40), 256.0).bfloat16()
    r = (0.9 * torch.rand(3, 40)).bfloat16()
    w, b = torch.randn(40).bfloat16(), torch.randn(40).bfloat16()
    y, h = normlab.add_layer_norm(x, r, w, b, layout=layout)
    assert torch.equal(h, x)
    assert torch.equal(y, b.expand(3, 40))


# ---- patch: Hugging Face's zero-centred (Gemma-style) RMSNorms -----------------------------------

# Where transformers defines each class of patching.ZERO_CENTERED_RMS_NORM_CLASSES.
HF_MODULES = {
    "GemmaRMSNorm": "gemma", "Gemma2RMSNorm": "gemma2", "Gemma3RMSNorm": "gemma3",
    "RecurrentGemmaRMSNorm": "recurrent_gemma", "T5GemmaRMSNorm": "t5gemma",
    "T5Gemma2RMSNorm": "t5gemma2", "VaultGemmaRMSNorm": "vaultgemma",
    "Qwen3NextRMSNorm": "qwen3_next", "Qwen3_5RMSNorm": "qwen3_5",
    "Qwen3_5MoeRMSNorm": "qwen3_5_moe",
}  # fmt: skip


def _hf_class(name, module):
    import importlib

    return getattr(importlib.import_module(f"transformers.models.{module}.modeling_{module}"), name)


def test_zero_centered_class_list_is_where_transformers_has_it():
    from normlab.patching import ZERO_CENTERED_RMS_NORM_CLASSES

    assert set(HF_MODULES) == ZERO_CENTERED_RMS_NORM_CLASSES


@pytest.mark.parametrize("name", sorted(HF_MODULES))
def test_patch_maps_a_zero_centered_rms_norm_to_offset_one(name):
    """Each listed class computes (1 + weight) * x_hat from a zero weight: patched, the same
    Parameter under normlab.RMSNorm(offset=1) gives its output."""
    from normlab.patching import patch

    hf = _hf_class(name, HF_MODULES[name])(24, eps=1e-6)
    assert torch.equal(hf.weight, torch.zeros(24))
    with torch.no_grad():
        hf.weight.copy_(0.5 * torch.randn(24))
    x = torch.randn(5, 24).bfloat16()
    expected = hf(x)
    model = torch.nn.Sequential(hf)
    report = patch(model)
    assert report.replaced == ["0"] and not report.skipped
    ours = model[0]
    assert isinstance(ours, normlab.RMSNorm) and ours.offset == 1.0 and ours.weight is hf.weight
    assert_close(ours(x), expected.double())


@pytest.mark.parametrize(
    "name,module", [("Gemma3nRMSNorm", "gemma3n"), ("Gemma4RMSNorm", "gemma4")]
)
def test_weight_form_gemma_norms_are_not_taken_as_zero_centered(name, module):
    """Gemma3n's and Gemma4's RMSNorms scale by the weight itself (ones-initialized): not mapped
    to offset=1 (patch leaves them alone and reports them)."""
    from normlab.patching import patch

    hf = _hf_class(name, module)(24, eps=1e-6)
    assert torch.equal(hf.weight, torch.ones(24))
    report = patch(torch.nn.Sequential(hf))
    assert report.replaced == [] and report.skipped == [("0", name)]


@pytest.mark.slow  # seconds each (compile, opcheck or a model): out of make test-quick
def test_patch_gemma_for_causal_lm_matches_unpatched():
    import transformers  # a test dependency (pyproject [test])

    from normlab.patching import patch

    def tiny_gemma():
        torch.manual_seed(0)
        config = transformers.GemmaConfig(
            vocab_size=203, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12,
            max_position_embeddings=64, rms_norm_eps=1e-6,
        )  # fmt: skip
        model = transformers.GemmaForCausalLM(config).float()
        with torch.no_grad():  # zero-centred weights that are not zero, so a lost offset shows
            torch.manual_seed(1)
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.copy_(0.3 * torch.randn_like(p))
        return model

    ref_model, model = tiny_gemma(), tiny_gemma()
    report = patch(model)
    assert len(report.replaced) == 2 * 2 + 1 and not report.skipped
    assert all(model.get_submodule(n).offset == 1.0 for n in report.replaced)
    assert model.state_dict().keys() == ref_model.state_dict().keys()
    ids = torch.randint(0, 203, (2, 17))
    outputs = []
    for m in (ref_model, model):
        out = m(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        outputs.append((out.logits.detach(), out.loss.detach(), grads))
    (logits_ref, loss_ref, grads_ref), (logits, loss, grads) = outputs
    torch.testing.assert_close(logits, logits_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-5)
    assert grads.keys() == grads_ref.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ref[name], rtol=1e-4, atol=1e-5, msg=name)
