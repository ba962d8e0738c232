"""Block-row (narrow) RMSNorm / LayerNorm launchers against an fp64 reference.

Runs under the Triton interpreter on CPU (about 1 ms per program), so row counts are small
but always ragged: never a multiple of the tile height, and large enough in one test for the
persistent backward to loop over several tiles per program.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
import triton
from helpers import assert_bf16_rounding_of, assert_close, cancelling_partials, latin

import normlab
from normlab import _runtime
from normlab.norms import block_row as narrow
from normlab.norms import config as configs

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# 1: degenerate row; 3, 17, 100, 255: non-powers of two (padded tile columns);
# 256: the widest block-row width (BLOCK_ROW_MAX_COLS), a full power-of-two tile.
WIDTHS = [1, 3, 17, 100, 255, 256]
N_ROWS = 131  # not a multiple of any tile height (64, 32, 16, 8); > 1 tile at every width
EPS = {True: 1e-6, False: 1e-5}


def _reference(x, weight, bias, eps, is_rms):
    """fp64 forward on the same (rounded) inputs: y, mean (None for RMS), rstd."""
    xd = x.double()
    wd = weight.double() if weight is not None else None
    bd = bias.double() if bias is not None else None
    if is_rms:
        mean = None
        rstd = torch.rsqrt(xd.pow(2).mean(1) + eps)
        y = xd * rstd[:, None]
        if wd is not None:
            y = y * wd
        return y, mean, rstd
    mean = xd.mean(1)
    rstd = torch.rsqrt((xd - mean[:, None]).pow(2).mean(1) + eps)
    return F.layer_norm(xd, (x.shape[1],), wd, bd, eps), mean, rstd


def _reference_grads(x, weight, bias, dy, eps, is_rms):
    """fp64 autograd of the reference: dx, dweight, dbias (None where absent)."""
    xd = x.double().requires_grad_()
    wd = weight.double().requires_grad_() if weight is not None else None
    bd = bias.double().requires_grad_() if bias is not None else None
    y, _, _ = _reference(xd, wd, bd, eps, is_rms)
    inputs = [t for t in (xd, wd, bd) if t is not None]
    grads = iter(torch.autograd.grad(y, inputs, dy.double()))
    return (
        next(grads),
        next(grads) if wd is not None else None,
        next(grads) if bd is not None else None,
    )


def _make(n_rows, n_cols, dtype, has_weight, has_bias):
    x = torch.randn(n_rows, n_cols).to(dtype)
    # weight around 1 with spread, so a wrong broadcast axis cannot hide
    weight = (1 + 0.5 * torch.randn(n_cols)).to(dtype) if has_weight else None
    bias = torch.randn(n_cols).to(dtype) if has_bias else None
    dy = torch.randn(n_rows, n_cols).to(dtype)
    return x, weight, bias, dy


def _check_all(x, weight, bias, dy, is_rms, dtype):
    """Forward and backward of the launchers vs the fp64 reference."""
    eps = EPS[is_rms]
    n_rows = x.shape[0]
    y, mean, rstd = narrow.block_row_forward(x, weight, bias, eps, is_rms)
    y_ref, mean_ref, rstd_ref = _reference(x, weight, bias, eps, is_rms)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, y_ref, dtype=dtype, msg="y")
    assert rstd.dtype == torch.float32 and rstd.shape == (n_rows,)
    assert_close(rstd, rstd_ref, dtype=torch.float32, msg="rstd")
    if is_rms:
        assert mean is None
    else:
        assert mean.dtype == torch.float32 and mean.shape == (n_rows,)
        assert_close(mean, mean_ref, dtype=torch.float32, msg="mean")

    dx, dw, db = narrow.block_row_backward(dy, x, weight, bias, mean, rstd, is_rms)
    dx_ref, dw_ref, db_ref = _reference_grads(x, weight, bias, dy, eps, is_rms)
    assert dx.dtype == x.dtype and dx.shape == x.shape
    # dx = rstd * (bracket): the bracket's rounding error is ulp-sized, rstd amplifies it, so
    # compare in units of each row's rstd (matters for width 1, where rstd can be large).
    assert_close(dx / rstd_ref[:, None], dx_ref / rstd_ref[:, None], dtype=dtype, msg="dx")
    if weight is None:
        assert dw is None
    else:
        assert dw.dtype == weight.dtype and dw.shape == weight.shape
        assert_close(dw, dw_ref, dtype=dtype, reduce_len=n_rows, msg="dweight")
    if bias is None:
        assert db is None
    else:
        assert db.dtype == bias.dtype and db.shape == bias.shape
        assert_close(db, db_ref, dtype=dtype, reduce_len=n_rows, msg="dbias")

    # the path the public API takes: a forward that stores no statistics, a backward that
    # recomputes them from x (the same fp32 arithmetic: y is bitwise the same)
    y2, mean2, rstd2 = narrow.block_row_forward(x, weight, bias, eps, is_rms, store_stats=False)
    assert mean2 is None and rstd2 is None
    assert torch.equal(y2, y)
    grads = narrow.block_row_backward(dy, x, weight, bias, None, None, is_rms, eps=eps)
    for got, stored, ref, name in zip(grads, (dx, dw, db), (dx_ref, dw_ref, db_ref),
                                      ("dx", "dweight", "dbias"), strict=True):  # fmt: skip
        if ref is None:
            assert got is None
            continue
        assert got.dtype == stored.dtype and got.shape == stored.shape
        scale = rstd_ref[:, None] if name == "dx" else 1.0
        reduce_len = None if name == "dx" else n_rows
        assert_close(got / scale, ref / scale, dtype=dtype, reduce_len=reduce_len,
                     msg=f"{name} (recomputed statistics)")  # fmt: skip


# Each norm and width with one dtype in rotation: every (norm, dtype) pair runs twice.
@pytest.mark.parametrize("is_rms,n_cols,dtype", latin([True, False], WIDTHS, DTYPES))
def test_affine_matches_fp64_reference(is_rms, n_cols, dtype):
    x, weight, bias, dy = _make(N_ROWS, n_cols, dtype, has_weight=True, has_bias=not is_rms)
    _check_all(x, weight, bias, dy, is_rms, dtype)


@pytest.mark.parametrize(("is_rms", "has_weight", "has_bias", "n_cols"), latin(
    [(True, False, False), (False, False, False), (False, True, False), (False, False, True)],
    [3, 100, 256]))  # rms-plain, ln-plain, ln-weight-only, ln-bias-only; each width runs
def test_without_weight_or_bias(is_rms, has_weight, has_bias, n_cols):
    x, weight, bias, dy = _make(N_ROWS, n_cols, torch.float32, has_weight, has_bias)
    _check_all(x, weight, bias, dy, is_rms, torch.float32)


@pytest.mark.parametrize("n_rows", [1, 63, 65])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_row_counts_around_one_tile(is_rms, n_rows):
    # n_cols 16 -> 64-row tiles in both directions: one row, one short of a tile, one over.
    x, weight, bias, dy = _make(n_rows, 16, torch.float32, True, not is_rms)
    _check_all(x, weight, bias, dy, is_rms, torch.float32)


@pytest.mark.parametrize(
    ("acc_tile", "prefetch"), [(False, True), (True, True), (False, False), (True, False)]
)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_persistent_backward_loops_over_many_tiles(is_rms, acc_tile, prefetch):
    # every accumulation / prefetch variant the configs may pick, with > 2 tiles per program
    n_cols = 16
    cfg = configs.block_row_bwd_config(n_cols, acc_tile=acc_tile, prefetch=prefetch)
    n_programs = cfg.programs_per_sm * normlab._runtime.sm_count()
    n_rows = cfg.block_rows * (2 * n_programs + 3) + 5  # ragged
    x, weight, bias, dy = _make(n_rows, n_cols, torch.bfloat16, True, not is_rms)
    eps = EPS[is_rms]
    _, mean, rstd = narrow.block_row_forward(x, weight, bias, eps, is_rms)
    dx, dw, db = narrow.launch_backward(dy, x, weight, bias, mean, rstd, is_rms, cfg)
    dx_ref, dw_ref, db_ref = _reference_grads(x, weight, bias, dy, eps, is_rms)
    assert dw.dtype == weight.dtype  # summed in fp32, written once in the parameter's dtype
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, dtype=torch.bfloat16, reduce_len=n_rows, msg="dweight")
    if db is not None:
        assert_close(db, db_ref, dtype=torch.bfloat16, reduce_len=n_rows, msg="dbias")


@pytest.mark.parametrize("acc_tile", [False, True])
def test_backward_partials_stay_fp32_under_a_bf16_weight(acc_tile):
    """Per-tile dγ partials that cancel (``cancelling_partials``, one sign a tile): only fp32
    partials leave the sum within a bf16 rounding of fp64's."""
    n_cols = 24
    cfg = configs.block_row_bwd_config(n_cols, programs_per_sm=2, acc_tile=acc_tile, max_rows=8)
    n_programs = cfg.programs_per_sm * normlab._runtime.sm_count()
    n_rows = cfg.block_rows * n_programs * 4  # every program: 4 tiles
    x, dy, w = cancelling_partials(n_rows, n_cols, cfg.block_rows)
    _, _, rstd = narrow.launch_forward(x, w, None, EPS[True], True,
                                       configs.block_row_fwd_config(n_cols, True))  # fmt: skip
    _, dw, _ = narrow.launch_backward(dy, x, w, None, None, rstd, True, cfg)
    _, dw_ref, _ = _reference_grads(x, w.float(), None, dy, EPS[True], True)
    assert_bf16_rounding_of(dw, dw_ref)


@pytest.mark.parametrize("max_rows", [1, 256])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_forward_tile_heights(is_rms, max_rows):
    # the tuning script tries taller and shorter forward tiles than the default 64 rows
    cfg = configs.block_row_fwd_config(16, is_rms, max_rows=max_rows)
    assert cfg.block_rows == max_rows
    x, weight, bias, _ = _make(300, 16, torch.float16, True, not is_rms)
    y, _, rstd = narrow.launch_forward(x, weight, bias, EPS[is_rms], is_rms, cfg)
    y_ref, _, rstd_ref = _reference(x, weight, bias, EPS[is_rms], is_rms)
    assert_close(y, y_ref)
    assert_close(rstd, rstd_ref)


@pytest.mark.parametrize("n_cols", [17, 1000])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_persistent_forward(is_rms, n_cols):
    # a fixed grid grid-strides the tiles with a prefetch; rows ragged against tiles x programs
    cfg = configs.BlockRowFwdConfig(block_rows=2, num_warps=4, programs_per_sm=1)
    n_programs = _runtime.sm_count()
    n_rows = cfg.block_rows * (3 * n_programs + 1) + 1
    x, weight, bias, _ = _make(n_rows, n_cols, torch.bfloat16, True, not is_rms)
    y, mean, rstd = narrow.launch_forward(x, weight, bias, EPS[is_rms], is_rms, cfg)
    y_ref, mean_ref, rstd_ref = _reference(x, weight, bias, EPS[is_rms], is_rms)
    assert_close(y, y_ref)
    assert_close(rstd, rstd_ref)
    if not is_rms:
        assert_close(mean, mean_ref)
    y_tile, _, rstd_tile = narrow.launch_forward(x, weight, bias, EPS[is_rms], is_rms, cfg._replace(
        programs_per_sm=0))  # fmt: skip
    assert torch.equal(y, y_tile) and torch.equal(rstd, rstd_tile)  # same arithmetic per tile


@pytest.mark.parametrize("acc_tile", [False, True], ids=["acc_vector", "acc_tile"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_recomputed_statistics_at_eps_zero(is_rms, acc_tile):
    # eps = 0: the masked rows past n_rows (all zeros) would get rstd = rsqrt(0) = inf and
    # xhat = 0 * inf = NaN, which the dγ sum would pick up; the kernel gives them rstd 0.
    n_cols = 16
    cfg = configs.block_row_bwd_config(n_cols, acc_tile=acc_tile)
    n_rows = 3 * cfg.block_rows + 5  # ragged: the last tile is mostly padding
    x, weight, bias, dy = _make(n_rows, n_cols, torch.float32, True, not is_rms)
    dx, dw, db = narrow.launch_backward(dy, x, weight, bias, None, None, is_rms, cfg, eps=0.0)
    dx_ref, dw_ref, db_ref = _reference_grads(x, weight, bias, dy, 0.0, is_rms)
    assert dw.isfinite().all()
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, reduce_len=n_rows, msg="dweight")
    if db is not None:
        assert_close(db, db_ref, reduce_len=n_rows, msg="dbias")


# the widest width whose statistics are recomputed, and one column more where the layout has it
SWITCH_WIDTHS = [
    (is_rms, configs.BLOCK_ROW_RECOMPUTE_MAX_COLS[is_rms] + side)
    for is_rms, side in itertools.product((True, False), (0, 1))
    if configs.BLOCK_ROW_RECOMPUTE_MAX_COLS[is_rms] + side <= configs.BLOCK_ROW_MAX_COLS
]


@pytest.mark.parametrize(("is_rms", "n_cols"), SWITCH_WIDTHS)
def test_statistics_stored_or_recomputed_either_side_of_the_switch(is_rms, n_cols):
    recompute = n_cols <= configs.BLOCK_ROW_RECOMPUTE_MAX_COLS[is_rms]
    assert configs.block_row_recompute_stats(n_cols, is_rms) == recompute
    x, weight, bias, dy = _make(N_ROWS, n_cols, torch.float32, True, not is_rms)
    _y, _h, mean, rstd = torch.ops.normlab.norm_fwd(x, None, weight, bias, EPS[is_rms], 0.0,
                                                    is_rms, "auto", "block_row")  # fmt: skip
    n_stats = 0 if recompute else N_ROWS
    assert rstd.shape == (n_stats,)
    assert mean.shape == ((0,) if is_rms else (n_stats,))
    _y, _h, mean, rstd = torch.ops.normlab.norm_fwd(x, None, weight, bias, EPS[is_rms], 0.0,
                                                    is_rms, "auto", "row")  # fmt: skip
    assert rstd.shape == (N_ROWS,)  # the row path always stores them

    xg, wg = x.clone().requires_grad_(), weight.clone().requires_grad_()
    bg = bias.clone().requires_grad_() if bias is not None else None
    if is_rms:
        y = normlab.rms_norm(xg, wg, EPS[True], layout="block_row")
    else:
        y = normlab.layer_norm(xg, wg, bg, EPS[False], layout="block_row")
    inputs = [t for t in (xg, wg, bg) if t is not None]
    grads = torch.autograd.grad(y, inputs, dy)
    y_ref, _, rstd_ref = _reference(x, weight, bias, EPS[is_rms], is_rms)
    refs = _reference_grads(x, weight, bias, dy, EPS[is_rms], is_rms)
    f32 = torch.float32
    assert_close(y, y_ref, dtype=f32, msg="y")
    assert_close(grads[0] / rstd_ref[:, None], refs[0] / rstd_ref[:, None], dtype=f32, msg="dx")
    for got, ref_, name in zip(grads[1:], refs[1:], ("dweight", "dbias"), strict=False):
        assert_close(got, ref_, dtype=f32, reduce_len=N_ROWS, msg=name)


def test_recompute_configs_are_valid_at_every_width():
    for is_rms, n_cols in itertools.product((True, False),
                                            range(1, configs.BLOCK_ROW_MAX_COLS + 1)):
        cfg = configs.block_row_bwd_recompute_config(n_cols, is_rms)
        default = configs.block_row_bwd_config(n_cols, maxnreg=0)  # recomputing: no cap
        assert cfg.block_rows * triton.next_power_of_2(n_cols) <= configs.BLOCK_ROW_BWD_TILE_ELEMS
        assert cfg.programs_per_sm == default.programs_per_sm
        if max(16, triton.next_power_of_2(n_cols)) not in (16, 32):  # the overridden widths
            assert cfg == default
        else:
            assert cfg.prefetch == (n_cols > 1)


def test_backward_is_deterministic():
    x, weight, bias, dy = _make(N_ROWS * 3, 17, torch.float32, True, True)
    _y, mean, rstd = narrow.block_row_forward(x, weight, bias, 1e-5, False)
    first = narrow.block_row_backward(dy, x, weight, bias, mean, rstd, False)
    second = narrow.block_row_backward(dy, x, weight, bias, mean, rstd, False)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)  # no atomics: fixed partial rows summed in a fixed order


def test_layernorm_large_mean_offset():
    # mean 1000, std 1: a one-pass E[x^2] - E[x]^2 variance is off by ~0.3 here (y off by ~15%).
    # Two passes leave only the fp32 rounding of the mean (~1e5 * 2^-24 per term): about
    # torch's own fp32 F.layer_norm error, ~2e-4, which is why this test has its own bound.
    x, weight, bias, _ = _make(N_ROWS, 100, torch.float32, True, True)
    x = x + 1000.0
    y, _, _ = narrow.block_row_forward(x, weight, bias, 1e-5, False)
    y_ref, _, _ = _reference(x, weight, bias, 1e-5, False)
    err = (y.double() - y_ref).abs().max().item()
    torch_err = (F.layer_norm(x, (100,), weight, bias, 1e-5).double() - y_ref).abs().max().item()
    assert err < 1e-3 and err < 3 * torch_err, (err, torch_err)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_strided_inputs(is_rms):
    # row-strided views go to the kernel as they are; column-strided ones are copied first
    x_wide, weight, bias, dy_wide = _make(N_ROWS, 40, torch.float32, True, not is_rms)
    x, dy = x_wide[:, 3:20], dy_wide[:, 5:22]
    assert x.stride(0) == 40 and not x.is_contiguous()
    _check_all(x, weight[:17], bias[:17] if bias is not None else None, dy, is_rms, torch.float32)
    xt = torch.randn(17, N_ROWS).t()
    dyt = torch.randn(17, N_ROWS).t()
    assert xt.stride(1) != 1
    _check_all(xt, weight[:17], bias[:17] if bias is not None else None, dyt, is_rms, torch.float32)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_nan_and_inf_stay_in_their_row(is_rms):
    x, weight, bias, dy = _make(N_ROWS, 17, torch.float32, True, not is_rms)
    x[5, 3] = math.nan
    x[70, 0] = math.inf
    y, mean, rstd = narrow.block_row_forward(x, weight, bias, EPS[is_rms], is_rms)
    bad = torch.zeros(N_ROWS, dtype=torch.bool)
    bad[[5, 70]] = True
    assert not y[bad].isfinite().all(dim=1).any()
    assert y[~bad].isfinite().all()
    # same NaN pattern as the fp64 reference in the bad rows (RMSNorm with an Inf: rstd = 0,
    # so only the Inf element turns NaN, as in torch), same values elsewhere
    y_ref, _, _ = _reference(x, weight, bias, EPS[is_rms], is_rms)
    assert_close(y, y_ref)

    x[5, 3], x[70, 0] = 0.5, -0.5
    y, mean, rstd = narrow.block_row_forward(x, weight, bias, EPS[is_rms], is_rms)
    dy[9, 1] = math.nan
    dx, dw, _db = narrow.block_row_backward(dy, x, weight, bias, mean, rstd, is_rms)
    assert dx[9].isnan().all()
    assert dx[torch.arange(N_ROWS) != 9].isfinite().all()
    assert dw[1].isnan() and not dw[torch.arange(17) != 1].isnan().any()


def test_clear_errors():
    x = torch.randn(10, 16)
    w = torch.randn(16)
    _y, mean, rstd = narrow.block_row_forward(x, w, None, 1e-5, False)
    too_wide = configs.BLOCK_ROW_MAX_COLS + 1
    with pytest.raises(
        ValueError, match=f"at most {configs.BLOCK_ROW_MAX_COLS} columns, got {too_wide}"
    ):
        narrow.block_row_forward(torch.randn(4, too_wide), None, None, 1e-5, False)
    with pytest.raises(ValueError, match="at most"):
        narrow.block_row_backward(
            torch.randn(4, too_wide),
            torch.randn(4, too_wide),
            None,
            None,
            None,
            torch.ones(4),
            True,
        )
    with pytest.raises(TypeError, match="float64"):
        narrow.block_row_forward(x.double(), None, None, 1e-5, True)
    with pytest.raises(TypeError, match="int64"):
        narrow.block_row_forward(x.long(), None, None, 1e-5, True)
    with pytest.raises(ValueError, match="2-D"):
        narrow.block_row_forward(x[0], None, None, 1e-5, True)
    with pytest.raises(ValueError, match=r"weight has shape \(15,\)"):
        narrow.block_row_forward(x, w[:15], None, 1e-5, True)
    with pytest.raises(ValueError, match="RMSNorm has no bias"):
        narrow.block_row_forward(x, w, w, 1e-6, True)
    with pytest.raises(ValueError, match=r"dy has shape \(10, 15\)"):
        narrow.block_row_backward(x[:, :15], x, w, None, mean, rstd, False)
    with pytest.raises(ValueError, match="needs the fp32 mean"):
        narrow.block_row_backward(x, x, w, None, None, rstd, False)
    with pytest.raises(TypeError, match=r"rstd.dtype"):
        narrow.block_row_backward(x, x, w, None, mean, rstd.half(), False)
    with pytest.raises(ValueError, match="pass the forward's eps"):
        narrow.block_row_backward(x, x, w, None, None, None, False)
    with pytest.raises(ValueError, match="mean without rstd"):
        narrow.block_row_backward(x, x, w, None, mean, None, False, eps=1e-5)
    for bad_eps in (-1.0, math.inf, True, "1e-5"):
        with pytest.raises(ValueError, match="eps must be a finite float"):
            narrow.block_row_backward(x, x, w, None, None, None, False, eps=bad_eps)
    with pytest.raises(ValueError, match="needs the forward's eps"):
        narrow.launch_backward(x, x, w, None, None, None, False, configs.block_row_bwd_config(16))
    for strategy in ("atomic", "two_stage", "bogus"):
        with pytest.raises(
            ValueError, match=f"strategy='{strategy}' does not exist for layout='block_row'"
        ):
            narrow.block_row_backward(x, x, w, None, mean, rstd, False, strategy=strategy)
    # the accepted strategies are one kernel, so they agree exactly
    a = narrow.block_row_backward(x, x, w, None, mean, rstd, False, strategy="auto")
    b = narrow.block_row_backward(x, x, w, None, mean, rstd, False, strategy="persistent")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("shape", [(0, 16), (5, 0), (0, 0)], ids=str)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_empty_inputs_as_torch(monkeypatch, is_rms, shape):
    """No rows or no columns: as F.rms_norm / F.layer_norm, y and dx empty, dweight/dbias 0,
    statistics stored or recomputed; no kernel launch."""

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("kernel launched for an empty input")

    monkeypatch.setattr(narrow, "_block_row_fwd_kernel", NoLaunch())
    monkeypatch.setattr(narrow, "_block_row_bwd_kernel", NoLaunch())
    n_rows, n_cols = shape
    x, weight, bias, dy = _make(n_rows, n_cols, torch.float32, True, not is_rms)
    y, mean, rstd = narrow.block_row_forward(x, weight, bias, 1e-5, is_rms)
    assert y.shape == shape and rstd.shape == (n_rows,) and (mean is None) == is_rms
    stats = ((mean, rstd), (None, None))
    for (mean_, rstd_), eps in zip(stats, (None, 1e-5), strict=True):
        dx, dw, db = narrow.block_row_backward(dy, x, weight, bias, mean_, rstd_, is_rms, eps=eps)
        assert dx.shape == shape
        assert torch.equal(dw, torch.zeros(n_cols))
        assert (db is None) if is_rms else torch.equal(db, torch.zeros(n_cols))
    y2, mean2, rstd2 = narrow.block_row_forward(x, weight, bias, 1e-5, is_rms, store_stats=False)
    assert y2.shape == shape and mean2 is None and rstd2 is None


def test_use_block_row_thresholds():
    max_cols, min_rows = configs.BLOCK_ROW_MAX_COLS, configs.BLOCK_ROW_MIN_ROWS
    assert configs.use_block_row(min_rows, max_cols)
    assert configs.use_block_row(min_rows, 1)
    assert configs.use_block_row(10 * min_rows, 16)
    assert not configs.use_block_row(min_rows - 1, max_cols)
    assert not configs.use_block_row(min_rows, max_cols + 1)
    assert not configs.use_block_row(10 * min_rows, 4096)


@pytest.mark.parametrize("n_cols", [*range(1, 18), 31, 33, 100, 127, 129, 255, 256])
def test_tile_configs_stay_within_limits(n_cols):
    block_cols = 1 << (n_cols - 1).bit_length()
    bwd = configs.block_row_bwd_config(n_cols)
    tiles = [(configs.block_row_fwd_config(n_cols, is_rms)[:2], configs.BLOCK_ROW_TILE_ELEMS)
             for is_rms in (True, False)]  # fmt: skip
    tiny = n_cols < configs.BLOCK_ROW_TINY_COLS  # rows of scalars: the element rule alone
    if tiny:
        tiles = [(t, configs.BLOCK_ROW_TINY_TILE_ELEMS) for t, _ in tiles]
    max_rows = configs.BLOCK_ROW_TINY_TILE_ELEMS if tiny else configs.BLOCK_ROW_MAX_ROWS
    for (block_rows, num_warps), tile_elems in [*tiles,
                                               (bwd[:2], configs.BLOCK_ROW_BWD_TILE_ELEMS)]:
        assert 1 <= block_rows <= max_rows  # from 16 columns, Liger-Kernel#1620's 64-row cap
        assert block_rows & (block_rows - 1) == 0  # tl.arange needs a power of two
        assert block_rows * block_cols <= tile_elems
        assert num_warps in (1, 2, 4, 8, 16)
    # the backward's tiles are full height unless the row cap binds
    assert (bwd.block_rows * block_cols == configs.BLOCK_ROW_BWD_TILE_ELEMS
            or bwd.block_rows == max_rows)  # fmt: skip
    assert bwd.programs_per_sm >= 1


@pytest.mark.parametrize("n_cols", [16, 17, 32, 33, 64, 65, 100, 128, 129, 255, 256])
def test_forward_config_is_the_measured_tile_per_norm(n_cols):
    # configs.BLOCK_ROW_FWD_TILES per norm and next_pow2 width (tiny rows, below 16 columns,
    # take the element rule: tests/test_norm_planner.py);
    # keywords, and widths beyond the table, fall back to the element rule (tuning scripts)
    key = 1 << (n_cols - 1).bit_length()
    for is_rms in (True, False):
        cfg = configs.block_row_fwd_config(n_cols, is_rms)
        assert (cfg.block_rows, cfg.num_warps) == configs.BLOCK_ROW_FWD_TILES[is_rms][key]
        assert cfg.programs_per_sm == 0
        assert configs.block_row_fwd_config(n_cols, is_rms, num_warps=1).num_warps == 1
    # the two norms were measured apart and differ where their sweeps did
    assert configs.block_row_fwd_config(128, True) != configs.block_row_fwd_config(128, False)
    tile = configs.BlockRowFwdConfig
    assert configs.block_row_fwd_config(64, True, tile_elems=4096) == tile(64, 8)
    assert configs.block_row_fwd_config(512, False) == tile(16, 8)  # no entry: the rule
    assert configs.block_row_fwd_config(1024, True) == tile(8, 8)


@pytest.mark.parametrize("n_cols", [65, 100, 128])  # 65: 128 lanes of one element; 100: 32 of 4
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_public_forward_launches_the_measured_tile(monkeypatch, is_rms, n_cols):
    """The public API's block-row forward launches its norm's tile (LayerNorm 16 rows x 2 warps,
    RMSNorm 16 x 4 at 65-128 columns) where a row's loads fit a warp's lanes, else the one-warp
    tile (8 rows of 128 columns); 333 rows leaving a ragged last tile; fp64 agreement."""
    launched = []
    real = narrow._block_row_fwd_kernel

    class Recording:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append((kwargs["BLOCK_ROWS"], kwargs["num_warps"]))
                return real[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(narrow, "_block_row_fwd_kernel", Recording())
    x, weight, bias, _ = _make(333, n_cols, torch.bfloat16, True, not is_rms)
    if is_rms:
        y = normlab.rms_norm(x, weight, EPS[True], layout="block_row")
    else:
        y = normlab.layer_norm(x, weight, bias, EPS[False], layout="block_row")
    assert launched == [(8, 1) if n_cols == 65 else (16, 4 if is_rms else 2)]
    assert_close(y, _reference(x, weight, bias, EPS[is_rms], is_rms)[0])


def test_backward_config_is_the_measured_default_at_every_width():
    for n_cols in (1, 16, 127, 128, 256):
        cfg = configs.block_row_bwd_config(n_cols)
        assert cfg.num_warps == configs.BLOCK_ROW_BWD_WARPS
        assert cfg.programs_per_sm == configs.BLOCK_ROW_BWD_PROGRAMS_PER_SM
        assert cfg.block_rows * (1 << (n_cols - 1).bit_length()) <= configs.BLOCK_ROW_BWD_TILE_ELEMS
    # explicit keywords win over the defaults (the tuning scripts rely on it)
    assert configs.block_row_bwd_config(128, num_warps=2, programs_per_sm=3)[1:3] == (2, 3)


def _count_reduces(monkeypatch) -> list:
    """Record each reduce launch of the block-row backward."""
    calls = []
    real = narrow.reduce_partials
    monkeypatch.setattr(narrow, "reduce_partials",
                        lambda *a, **k: calls.append(a) or real(*a, **k))  # fmt: skip
    return calls


# Widths 1, 5 (padded to 8) and 15 (to 16); rows one under the planned tile's (one program) and
# one over (two tiles: a grid of programs, unless the interpreter's SM count is 1 and the
# program walks both).
@pytest.mark.parametrize("n_cols,over", latin([1, 5, 15], [False, True]))
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_of_one_program_writes_the_grads_itself(monkeypatch, is_rms, n_cols, over):
    cfg = configs.block_row_bwd_config(n_cols)
    n_rows = cfg.block_rows + 1 if over else cfg.block_rows - 1
    reduces = _count_reduces(monkeypatch)
    x, weight, bias, dy = _make(n_rows, n_cols, torch.bfloat16, True, not is_rms)
    _check_all(x, weight, bias, dy, is_rms, torch.bfloat16)  # stored, then recomputed stats
    # one program writes dγ/dβ in the parameter's dtype itself; a grid's partials are reduced
    n_programs = min(cfg.programs_per_sm * _runtime.sm_count(), -(-n_rows // cfg.block_rows))
    assert len(reduces) == (0 if n_programs == 1 else 2)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_of_one_program_adds_into_existing_grads(monkeypatch, is_rms):
    """With grads to add into, one program's fp32 partial row goes through the reduce, which adds
    it (the direct write would overwrite them)."""
    n_rows, n_cols = 200, 3
    cfg = configs.block_row_bwd_config(n_cols)
    assert n_rows <= cfg.block_rows  # one tile: one program
    x, weight, bias, dy = _make(n_rows, n_cols, torch.float32, True, not is_rms)
    eps = EPS[is_rms]
    _, mean, rstd = narrow.block_row_forward(x, weight, bias, eps, is_rms)
    old_w = torch.randn(n_cols)
    old_b = None if bias is None else torch.randn(n_cols)
    grad_w = old_w.clone()
    grad_b = None if old_b is None else old_b.clone()
    reduces = _count_reduces(monkeypatch)
    _, dw, db = narrow.launch_backward(dy, x, weight, bias, mean, rstd, is_rms, cfg,
                                       grad_weight=grad_w, grad_bias=grad_b)  # fmt: skip
    _, dw_ref, db_ref = _reference_grads(x, weight, bias, dy, eps, is_rms)
    assert len(reduces) == 1 and dw is grad_w
    assert_close(dw, old_w.double() + dw_ref, reduce_len=n_rows, msg="dweight")
    if bias is not None:
        assert db is grad_b
        assert_close(db, old_b.double() + db_ref, reduce_len=n_rows, msg="dbias")


@pytest.mark.parametrize("n_cols", [127, 128])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_around_128_columns(is_rms, n_cols):
    x, weight, bias, dy = _make(N_ROWS, n_cols, torch.bfloat16, True, not is_rms)
    _check_all(x, weight, bias, dy, is_rms, torch.bfloat16)


@pytest.mark.parametrize("strategy", ["atomic", "two_stage"])
def test_auto_layout_with_a_row_only_strategy_takes_the_row_kernels(monkeypatch, strategy):
    """On a shape where "auto" would pick block-row, a strategy the block-row backward does not
    have keeps the whole call on the row kernels (forward and backward agree; no error in the
    backward); layout="block_row" with it is refused at the call."""
    from normlab import ref

    monkeypatch.setattr(configs, "use_block_row", lambda n_rows, n_cols: True)
    x, weight, bias, dy = _make(37, 16, torch.float32, True, True)
    xg, wg, bg = (t.clone().requires_grad_() for t in (x, weight, bias))
    y = normlab.layer_norm(xg, wg, bg, EPS[False], strategy=strategy)
    grads = torch.autograd.grad(y, (xg, wg, bg), dy)
    xr, wr, br = (t.double().requires_grad_() for t in (x, weight, bias))
    yr = ref.layer_norm(xr, wr, br, EPS[False])
    rgrads = torch.autograd.grad(yr, (xr, wr, br), dy.double())
    assert_close(y, yr, dtype=torch.float32, msg="y")
    for name, got, want in zip(("dx", "dweight", "dbias"), grads, rgrads, strict=True):
        assert_close(got, want, reduce_len=None if name == "dx" else 37, dtype=torch.float32,
                     msg=name)
    match = f"strategy='{strategy}' does not exist for layout='block_row'"
    with pytest.raises(ValueError, match=match):
        normlab.layer_norm(x, weight, bias, EPS[False], strategy=strategy, layout="block_row")


@pytest.mark.parametrize("is_rms,n_cols,dtype",
                         latin([True, False], [17, 256], [torch.float32, torch.bfloat16]))
def test_public_api_block_row_and_row_path_match_fp64(is_rms, n_cols, dtype):
    x, weight, bias, dy = _make(N_ROWS, n_cols, dtype, True, not is_rms)
    y_ref, _, rstd_ref = _reference(x, weight, bias, EPS[is_rms], is_rms)
    grads_ref = _reference_grads(x, weight, bias, dy, EPS[is_rms], is_rms)
    expect = (y_ref, *(g for g in grads_ref if g is not None))
    for layout in ("row", "block_row"):
        xg = x.clone().requires_grad_()
        wg = weight.clone().requires_grad_()
        bg = bias.clone().requires_grad_() if bias is not None else None
        if is_rms:
            y = normlab.rms_norm(xg, wg, EPS[True], layout=layout)
            grads = torch.autograd.grad(y, (xg, wg), dy)
        else:
            y = normlab.layer_norm(xg, wg, bg, EPS[False], layout=layout)
            grads = torch.autograd.grad(y, (xg, wg, bg), dy)
        for name, got, want in zip(("y", "dx", "dweight", "dbias"), (y, *grads), expect,
                                   strict=False):
            reduce_len = N_ROWS if name in ("dweight", "dbias") else None
            if name == "dx":  # in units of each row's rstd, as in _check_all
                got, want = got / rstd_ref[:, None], want / rstd_ref[:, None]
            assert_close(got, want, reduce_len=reduce_len, dtype=dtype, msg=f"{layout} {name}")


def test_public_api_too_wide_for_block_row():
    n_cols = configs.BLOCK_ROW_MAX_COLS + 1
    x, weight, _, _ = _make(4, n_cols, torch.float32, True, False)
    with pytest.raises(ValueError, match="at most"):
        normlab.rms_norm(x, weight, layout="block_row")
    y = normlab.rms_norm(x, weight, layout="auto")  # falls back to the row path
    y_ref, _, _ = _reference(x, weight, None, 1e-6, True)
    assert_close(y, y_ref)


# ---- rows of one column: the pointwise forward ----------------------------------------------

PW_BLOCK = configs.POINTWISE_FWD_BLOCK
PW_ROWS = [1, 1031, PW_BLOCK, PW_BLOCK + 1]  # one row, a prime, one full block, one row past it
# "offset": offset=1 with the weight; "fused": the residual add, with offset=1
PW_VARIANTS = ["plain", "affine", "offset", "fused"]
FWD_KERNELS = ("_pointwise_fwd_kernel", "_block_row_fwd_kernel")


def _record_forward_kernels(monkeypatch) -> list[str]:
    """The names of the block-row forward kernels launched from here on, in order."""
    launched = []
    for name in FWD_KERNELS:
        real = getattr(narrow, name)

        class Recording:
            def __getitem__(self, grid, real=real, name=name):
                launched.append(name)
                return real[grid]

        monkeypatch.setattr(narrow, name, Recording())
    return launched


@pytest.mark.parametrize("is_rms,variant,n_rows,dtype",
                         latin([True, False], PW_VARIANTS, PW_ROWS, DTYPES))  # fmt: skip
def test_one_column_pointwise_forward_and_backward(monkeypatch, is_rms, variant, n_rows, dtype):
    """N = 1 through the public API (the plan's path: pointwise forward, block-row backward that
    recomputes the statistics) against fp64 autograd; with the fused add, h is checked too."""
    from normlab import ref

    launched = _record_forward_kernels(monkeypatch)
    eps, offset = EPS[is_rms], 1.0 if variant in ("offset", "fused") else 0.0
    x, weight, bias, dy = _make(n_rows, 1, dtype, variant != "plain",
                                variant in ("affine", "fused") and not is_rms)  # fmt: skip
    residual = torch.randn(n_rows, 1).to(dtype) if variant == "fused" else None
    dh = torch.randn(n_rows, 1).to(dtype) if variant == "fused" else None
    leaves = {name: t.clone().requires_grad_() for name, t in
              (("dx", x), ("dres", residual), ("dweight", weight), ("dbias", bias))
              if t is not None}  # fmt: skip
    xg, rg, wg, bg = (leaves.get(name) for name in ("dx", "dres", "dweight", "dbias"))
    if residual is None:
        y = (normlab.rms_norm(xg, wg, eps, offset=offset) if is_rms
             else normlab.layer_norm(xg, wg, bg, eps, offset=offset))  # fmt: skip
        outputs, grad_outputs = (y,), (dy,)
    else:
        y, h = (normlab.add_rms_norm(xg, rg, wg, eps, offset=offset) if is_rms
                else normlab.add_layer_norm(xg, rg, wg, bg, eps, offset=offset))  # fmt: skip
        outputs, grad_outputs = (y, h), (dy, dh)
    assert launched == ["_pointwise_fwd_kernel"]
    grads = dict(zip(leaves, torch.autograd.grad(outputs, list(leaves.values()), grad_outputs),
                     strict=True))  # fmt: skip

    normed = x if residual is None else ref.residual_sum(x, residual)  # the stored h
    if residual is not None:
        assert torch.equal(h, normed)
        assert torch.equal(grads["dres"], grads["dx"])
    refs = {name: t.double().requires_grad_() for name, t in
            (("dx", normed), ("dweight", weight), ("dbias", bias)) if t is not None}  # fmt: skip
    hd, wd, bd = (refs.get(name) for name in ("dx", "dweight", "dbias"))
    y_ref = (ref.rms_norm(hd, wd, eps, offset) if is_rms
             else ref.layer_norm(hd, wd, bd, eps, offset))  # fmt: skip
    assert_close(y, y_ref, dtype=dtype, msg="y")
    refs = dict(zip(refs, torch.autograd.grad(y_ref, list(refs.values()), dy.double()),
                    strict=True))  # fmt: skip
    if dh is not None:
        refs["dx"] += dh.double()
    # dx in units of each row's rstd, as in _check_all (RMSNorm's rstd is large for small x)
    rstd_ref = torch.rsqrt((hd.detach() if is_rms else torch.zeros_like(hd)) ** 2 + eps)
    assert_close(grads.pop("dx") / rstd_ref, refs.pop("dx") / rstd_ref, dtype=dtype, msg="dx")
    grads.pop("dres", None)
    assert grads.keys() == refs.keys()
    for name, want in refs.items():
        assert_close(grads[name], want, dtype=dtype, reduce_len=n_rows, msg=name)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_one_column_launchers_store_or_recompute_statistics(monkeypatch, is_rms):
    """block_row_forward's pointwise kernel at N = 1 with and without stored mean/rstd, each with
    the backward that reads or recomputes them; x around 1e-3, where x^2 is eps's size, so a
    wrong or lost eps fails (RMSNorm's y and rstd, LayerNorm's rstd = 1/sqrt(eps))."""
    launched = _record_forward_kernels(monkeypatch)
    x, weight, bias, dy = _make(PW_BLOCK + 1, 1, torch.float32, True, not is_rms)
    _check_all(x * 1e-3, weight, bias, dy, is_rms, torch.float32)
    assert launched == ["_pointwise_fwd_kernel"] * 2


def test_one_column_eps_matters():
    """RMSNorm of small x: y = x / sqrt(x^2 + eps) is far from sign(x), so this check can fail."""
    from normlab import ref

    x = 1e-3 * torch.randn(1031, 1)
    y = normlab.rms_norm(x, None, 1e-6)
    assert_close(y, ref.rms_norm(x.double(), None, 1e-6), msg="y")
    for wrong_eps in (0.0, 2e-6):
        assert (y.double() - ref.rms_norm(x.double(), None, wrong_eps)).abs().max() > 0.05


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_one_column_nan_and_inf_propagate_as_torch(is_rms):
    x, weight, bias, _ = _make(1031, 1, torch.float32, True, not is_rms)
    bad = [3, 500, 1030]
    x[bad, 0] = torch.tensor([math.nan, math.inf, -math.inf])
    if is_rms:
        y, want = normlab.rms_norm(x, weight, 1e-6), F.rms_norm(x, (1,), weight, 1e-6)
    else:
        y, want = normlab.layer_norm(x, weight, bias, 1e-5), F.layer_norm(x, (1,), weight, bias)
    assert y[bad].isnan().all() and want[bad].isnan().all()
    assert_close(y, want)  # same NaN positions, same values elsewhere


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_one_column_strided_rows_take_the_tile_kernel(monkeypatch, is_rms):
    """Rows of one column with a row stride of 3 (x, then only the residual) go to the
    [rows, 1] tile kernel, with the same results as fp64."""
    from normlab import ref

    launched = _record_forward_kernels(monkeypatch)
    x_wide, weight, bias, dy_wide = _make(1031, 3, torch.float32, True, not is_rms)
    x, dy = x_wide[:, 1:2], dy_wide[:, 2:3]
    assert x.stride(0) == 3
    _check_all(x, weight[:1], bias[:1] if bias is not None else None, dy, is_rms, torch.float32)
    assert set(launched) == {"_block_row_fwd_kernel"}

    launched.clear()
    x = torch.randn(1031, 1)
    if is_rms:
        y, h = normlab.add_rms_norm(x, x_wide[:, :1], weight[:1], 1e-6)
        y_ref, h_ref = ref.add_rms_norm(x.double(), x_wide[:, :1].double(), weight[:1], 1e-6)
    else:
        y, h = normlab.add_layer_norm(x, x_wide[:, :1], weight[:1], bias[:1], 1e-5)
        y_ref, h_ref = ref.add_layer_norm(x.double(), x_wide[:, :1].double(), weight[:1],
                                          bias[:1], 1e-5)  # fmt: skip
    assert launched == ["_block_row_fwd_kernel"]
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")


def test_pointwise_forward_runs_at_one_column_only(monkeypatch):
    """The public API's forward of contiguous rows: the pointwise kernel at N = 1, a (2, 3, 1)
    input included; the tile kernel at N = 2."""
    from normlab import ref

    launched = _record_forward_kernels(monkeypatch)
    for shape, kernel in (((37, 1), FWD_KERNELS[0]), ((2, 3, 1), FWD_KERNELS[0]),
                          ((37, 2), FWD_KERNELS[1])):  # fmt: skip
        x = torch.randn(shape)
        launched.clear()
        y = normlab.rms_norm(x, None, 1e-6)
        assert launched == [kernel], shape
        assert_close(y, ref.rms_norm(x.double(), None, 1e-6), msg=str(shape))
