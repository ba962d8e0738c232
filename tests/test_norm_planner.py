"""The norm planner's rules for the shapes nobody tuned for, and the kernels they pick, against
the fp64 reference: a few wide rows split over several programs (norms/split_row.py), and
rows narrower than a 16-byte vector in element-sized block-row tiles.

Each rule is tested at its switch (one below, at, one past) and its kernels on awkward shapes
(primes, one row, widths just past a power of two). The thresholds are shrunk by monkeypatching
where the interpreter could not afford the real ones; the rule is the same function.
"""

import itertools

import pytest
import torch
from helpers import assert_bf16_rounding_of, assert_close, cancelling_partials, small_split_rows

import normlab
from normlab import _runtime, ref
from normlab._host import next_pow2
from normlab.norms import block_row, config, row, split_row

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SMS = _runtime.sm_count()


def _run(x, w, b, eps, is_rms, gy):
    x = x.detach().requires_grad_()
    params = [p.detach().requires_grad_() if p is not None else None for p in (w, b)]
    if is_rms:
        y = normlab.rms_norm(x, params[0], eps)
    else:
        y = normlab.layer_norm(x, params[0], params[1], eps)
    leaves = [t for t in (x, *params) if t is not None]
    return y, torch.autograd.grad(y, leaves, gy)


def _ref(x, w, b, eps, is_rms, gy):
    xd = x.detach().double().requires_grad_()
    params = [p.detach().double().requires_grad_() if p is not None else None for p in (w, b)]
    y = (ref.rms_norm(xd, params[0], eps) if is_rms
         else ref.layer_norm(xd, params[0], params[1], eps))  # fmt: skip
    leaves = [t for t in (xd, *params) if t is not None]
    return y, torch.autograd.grad(y, leaves, gy.double())


def _check(m, n, dtype, is_rms, *, affine=True, shift=0.0, eps=1e-5, scale=1.0):
    x = ((torch.randn(m, n) * scale) + shift).to(dtype)
    w = (1 + 0.5 * torch.randn(n)).to(dtype) if affine else None
    b = (0.5 * torch.randn(n)).to(dtype) if affine and not is_rms else None
    gy = torch.randn(m, n).to(dtype)
    y, grads = _run(x, w, b, eps, is_rms, gy)
    y_ref, grads_ref = _ref(x, w, b, eps, is_rms, gy)
    assert_close(y, y_ref, msg="y")
    names = ["dx", "dweight", "dbias"][: len(grads)]
    for name, g, g_ref in zip(names, grads, grads_ref, strict=True):
        assert_close(g, g_ref, reduce_len=m if name != "dx" else n, dtype=dtype, msg=name)


# ---- split rows ------------------------------------------------------------------------------


@pytest.fixture
def small_split(monkeypatch):
    """Split from 48 columns, in 16-column forward chunks and 16-column backward chunks of two
    rows a step, so every kernel sees several chunks, a ragged last chunk and a ragged last row
    step at small widths."""
    small_split_rows(monkeypatch)
    monkeypatch.setattr(config, "NORM_BWD_TILE_ELEMS", 32)  # two rows a step: ragged steps


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_split_rule_at_its_switches(direction):
    """Split only with fewer rows than SMs, each wider than SPLIT_ROW_FWD_MIN_COLS (forward) /
    SPLIT_ROW_BWD_MIN_COLS (backward); only under layout "auto", and the backward only under
    strategy "auto". The forward splits a row that fits one block only at up to
    SPLIT_ROW_FWD_MAX_ROWS_PER_SM rows a SM."""
    n = config.SPLIT_ROW_FWD_MIN_COLS if direction == "fwd" else config.SPLIT_ROW_BWD_MIN_COLS
    sms = 132
    few = int(config.SPLIT_ROW_FWD_MAX_ROWS_PER_SM * sms) if direction == "fwd" else sms - 1

    def split(*args, **kwargs):
        plan = config.plan(*args, **kwargs)
        return (plan.fwd_split if direction == "fwd" else plan.bwd_split) is not None

    assert split(True, few, n + 1, sm_count=sms)
    assert not split(True, sms, n + 1, sm_count=sms)
    assert not split(True, few, n, sm_count=sms)
    assert not split(True, 0, n + 1, sm_count=sms)  # nothing to launch
    assert not split(True, 1, n + 1)  # no SM count, no split
    assert not split(False, 1, n + 1, layout="row", sm_count=sms)
    assert split(False, 1, n + 1, "two_stage", sm_count=sms) == (direction == "fwd")


def test_split_forward_rows_per_sm_switch():
    """A row that fits one block splits at up to SPLIT_ROW_FWD_MAX_ROWS_PER_SM rows a SM and runs
    one program a row past it; a row wider than one block splits at any row count under the SMs.
    The bound scales with the SMs."""
    wide, block = config.SPLIT_ROW_FWD_MIN_COLS + 1, config.NORM_FWD_MAX_BLOCK
    for sms in (132, 78, 4):
        few = int(config.SPLIT_ROW_FWD_MAX_ROWS_PER_SM * sms)
        for n in (wide, block):
            assert config.split_row_fwd(few, n, sms) == (few > 0)
            assert not config.split_row_fwd(few + 1, n, sms)
            assert config.plan(True, few + 1, n, sm_count=sms).fwd_split is None
        assert config.split_row_fwd(sms - 1, block + 1, sms)
        assert not config.split_row_fwd(sms, block + 1, sms)


def test_split_chunks_follow_their_rules():
    """Forward: fixed SPLIT_ROW_FWD_COLS chunks (narrower rows: one chunk). Backward: the widest
    dx chunk whose (chunks x row groups) grid gives every SM two programs; the sums' widest chunk
    that wastes at most NORM_FWD_MAX_PAD_WASTE and fills the SMs; 8 elements per thread."""
    fwd = config.SPLIT_ROW_FWD_COLS
    assert config.split_row_fwd_chunk(53991).cols == fwd
    assert config.split_row_fwd_chunk(100).cols == 128
    assert config.SPLIT_ROW_BWD_MIN_PROGRAMS_PER_SM == 2  # the cases below: 264 programs
    assert config.split_row_bwd_chunk(53991, 132).cols == 128  # one row: 422 chunks (256: 211)
    assert config.split_row_bwd_chunk(9383, 132).cols == config.SPLIT_ROW_BWD_CHUNKS[-1]
    assert config.split_row_bwd_chunk(10**6, 132).cols == config.SPLIT_ROW_BWD_CHUNKS[0]
    # 18159 columns: 9 chunks of 2048; 30 row groups of 32 (929+ rows) make 270 >= 264 programs
    assert config.split_row_bwd_chunk(18159, 132, n_rows=929).cols == 2048
    assert config.split_row_bwd_chunk(18159, 132, n_rows=928).cols == 1024  # 9 x 29 = 261
    assert config.split_row_bwd_chunk(18159, 132, n_rows=106).cols == 256  # 71 x 4 = 284
    assert config.split_row_sums_chunk(12288, 4096, 132).cols == 4096  # no masked tail
    assert config.split_row_sums_chunk(9693, 4096, 132).cols == 2048  # 4096: 27% masked
    assert config.split_row_sums_chunk(8363, 4096, 132).cols == 1024  # 2048: 22% masked
    assert config.split_row_sums_chunk(53991, 1, 132).cols == 256  # one row: 211 programs
    for cols in (256, 512, 4096):  # (128 columns: one warp, 4 each)
        chunk = config.split_row_fwd_chunk(cols)
        assert chunk.cols // (32 * chunk.num_warps) == config.SPLIT_ROW_ELEMS_PER_THREAD
    # the dx kernel's row steps: NORM_BWD_TILE_ELEMS elements, no more rows than there are
    elems = config.NORM_BWD_TILE_ELEMS
    assert config.split_row_bwd_tile(106, 128).rows == elems // 128
    assert config.split_row_bwd_tile(3, 128).rows == 4
    assert config.split_row_bwd_tile(1, 4096).rows == 1


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "dtype"), [
    (1, 49, torch.float32),  # one past the switch: 4 forward chunks, the last one column
    (1, 97, torch.bfloat16),  # prime width
    (SMS - 1, 65, torch.float16),  # the most rows that split; a 1-column last chunk
    (2, 129, torch.float32),  # one past a power of two
])  # fmt: skip
def test_split_rows_match_fp64(is_rms, m, n, dtype):
    assert config.plan(is_rms, m, n, sm_count=SMS).fwd_split is not None
    _check(m, n, dtype, is_rms)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_split_forward_rows_per_sm_bound_matches_fp64(monkeypatch, is_rms):
    """Either side of SPLIT_ROW_FWD_MAX_ROWS_PER_SM (at the interpreter's SMs and a half share):
    the split rows and the one-block rows past them both match fp64."""
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_MIN_COLS", 48)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_COLS", 16)
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_MAX_ROWS_PER_SM", 0.5)
    few = SMS // 2
    for m, split in ((few, True), (few + 1, False)):
        assert (config.plan(is_rms, m, 67, sm_count=SMS).fwd_split is not None) == split
        _check(m, 67, torch.float32, is_rms)


def test_split_backward_rule_at_its_switches():
    """Under one row per SM any row past SPLIT_ROW_BWD_MIN_COLS splits; with more rows,
    LayerNorm past that width, RMSNorm past the single pass's register tile."""
    sms, past, tile = 132, config.SPLIT_ROW_BWD_MIN_COLS, config.NORM_BWD_SINGLE_PASS_MAX_COLS

    def split(is_rms, m, n, strategy="auto"):
        return config.plan(is_rms, m, n, strategy, sm_count=sms).bwd_split is not None

    assert split(False, 4096, past + 1) and not split(False, 4096, past)
    assert split(True, sms - 1, past + 1) and not split(True, sms, past + 1)
    assert split(True, sms, tile + 1) and not split(True, sms, tile)
    assert not split(False, 4096, past + 1, "two_stage")  # a chosen strategy keeps its kernel


def test_split_row_groups_fill_the_card():
    """Each group walks at least SPLIT_ROW_BWD_MIN_GROUP_ROWS rows, a whole number of row
    steps; given enough rows, the grid reaches SPLIT_ROW_BWD_PROGRAMS_PER_SM per SM."""
    least, per_sm = config.SPLIT_ROW_BWD_MIN_GROUP_ROWS, config.SPLIT_ROW_BWD_PROGRAMS_PER_SM
    for n_rows, n_chunks, step in ((100000, 6, 2), (4096, 6, 2), (20, 9, 1), (36052, 9, 2)):
        rows = config.split_row_bwd_group_rows(n_rows, n_chunks, step, 132)
        assert rows >= least and rows % step == 0
        groups = -(-n_rows // rows)
        assert groups * n_chunks >= per_sm * 132 or rows <= least + step - 1
    # programs_per_sm overrides the bound (the variants benchmark): 4 per SM, 88 groups of 1137
    assert config.split_row_bwd_group_rows(100000, 6, 1, 132, 4) == 1137
    assert config.split_row_bwd_group_rows(100000, 6, 1, 132) == 569  # 8 per SM: 176 groups


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "dtype"), [
    (37, 61, torch.float32),  # prime rows: 7 groups of 6 rows (the last one row), 4 chunks
    (41, 49, torch.bfloat16),  # one past the switch: a one-column last chunk
    (3, 97, torch.float16),  # fewer rows than one group: no partials
])  # fmt: skip
def test_split_backward_row_groups_match_fp64(monkeypatch, is_rms, m, n, dtype):
    """Many rows in row groups: fp32 dγ/dβ partials per group, summed by reduce_partials."""
    monkeypatch.setattr(config, "SPLIT_ROW_BWD_MIN_GROUP_ROWS", 4)
    monkeypatch.setattr(config, "NORM_BWD_SINGLE_PASS_MAX_COLS", 48)  # RMSNorm splits too
    plan = config.plan(is_rms, m, n, sm_count=SMS)
    assert plan.bwd_split is not None
    assert (plan.bwd_split.rows_per_group < m) == (m > 4)
    _check(m, n, dtype, is_rms)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("sums_cols", [16, 64])
def test_split_backward_two_row_groups_and_a_sums_chunk_of_its_own(monkeypatch, is_rms,
                                                                     sums_cols):  # fmt: skip
    """Exactly two row groups (fp32 partial rows, not one row written by both groups) and a
    sums kernel whose chunk is not dx's (its partial count is its own, not dx's chunk count)."""
    monkeypatch.setattr(config, "NORM_BWD_TILE_ELEMS", 64)  # 2 rows a step: groups of 6 rows
    m, n, eps = 12, 97, 1e-5
    x, gy = torch.randn(m, n), torch.randn(m, n)
    w = 1 + 0.5 * torch.randn(n)
    b = None if is_rms else 0.5 * torch.randn(n)
    _, mean, rstd = split_row.split_row_forward(x, w, b, eps, is_rms, config.split_chunk(16))
    got = split_row.split_row_backward(gy, x, w, b, mean, rstd, is_rms, config.split_chunk(32),
                                       rows_per_group=6, sums_chunk=config.split_chunk(sums_cols))
    _, want = _ref(x, w, b, eps, is_rms, gy)
    for name, g, g_ref in zip(["dx", "dweight", "dbias"], got, want, strict=False):
        assert_close(g, g_ref, reduce_len=m if name != "dx" else n, msg=name)


def test_split_backward_partials_stay_fp32_under_a_bf16_weight(monkeypatch):
    """Two row groups whose dγ partials cancel (``cancelling_partials``, one sign a group): only
    fp32 partials leave the sum within a bf16 rounding of fp64's."""
    monkeypatch.setattr(config, "NORM_BWD_TILE_ELEMS", 64)
    m, n, eps = 64, 97, 1e-5
    x, gy, w = cancelling_partials(m, n, m // 2)
    _, _, rstd = split_row.split_row_forward(x, w, None, eps, True, config.split_chunk(16))
    _, dw, _ = split_row.split_row_backward(gy, x, w, None, None, rstd, True,
                                            config.split_chunk(32), rows_per_group=m // 2)
    _, (_, dw_ref) = _ref(x, w.float(), None, eps, True, gy)
    assert_bf16_rounding_of(dw, dw_ref)


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_split_backward_of_the_fused_add(monkeypatch, is_rms):
    """add_*_norm through the split backward: dh (h's own gradient) is added into dx, the
    gradient of both x and the residual."""
    monkeypatch.setattr(config, "SPLIT_ROW_BWD_MIN_GROUP_ROWS", 4)
    monkeypatch.setattr(config, "NORM_BWD_SINGLE_PASS_MAX_COLS", 48)
    m, n = 23, 53
    assert config.plan(is_rms, m, n, sm_count=SMS).bwd_split is not None
    x, r = torch.randn(m, n), torch.randn(m, n)
    w = 1 + 0.5 * torch.randn(n)
    b = None if is_rms else 0.5 * torch.randn(n)
    gy, gh = torch.randn(m, n), torch.randn(m, n)

    def grads(fn, ref_fn, dtype):
        leaves = [t.detach().to(dtype).requires_grad_() for t in (x, r, w)]
        if b is not None:
            leaves.append(b.detach().to(dtype).requires_grad_())
        call = ref_fn if dtype == torch.float64 else fn
        y, h = call(*leaves[:3], *leaves[3:], eps=1e-5, offset=1.0)
        return torch.autograd.grad((y, h), leaves, (gy.to(dtype), gh.to(dtype)))

    fn, ref_fn = ((normlab.add_rms_norm, ref.add_rms_norm) if is_rms
                  else (normlab.add_layer_norm, ref.add_layer_norm))  # fmt: skip
    got, want = grads(fn, ref_fn, torch.float32), grads(fn, ref_fn, torch.float64)
    for name, g, g_ref in zip(["dx", "dresidual", "dweight", "dbias"], got, want, strict=False):
        assert_close(g, g_ref, reduce_len=m if name in ("dweight", "dbias") else n, msg=name)


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_split_rows_without_parameters(is_rms):
    _check(2, 61, torch.float32, is_rms, affine=False)


@pytest.mark.usefixtures("small_split")
def test_split_layer_norm_large_mean():
    """|mean| >> std: the chunks sum x - x[row, 0], so the variance does not cancel (summing x^2
    at a mean of 300 would lose ~1e-2 of it in fp32)."""
    x = torch.randn(3, 67) + 300.0
    y, mean, rstd = split_row.split_row_forward(x, None, None, 1e-5, False,
                                                config.split_row_fwd_chunk(67))
    xd = x.double()
    assert_close(mean, xd.mean(1), dtype=torch.float32)
    assert_close(rstd, torch.rsqrt(xd.var(1, unbiased=False) + 1e-5), dtype=torch.float32)
    # y = (x - mean) * rstd: the fp32 mean itself carries ~300 * 6e-8 of rounding
    assert_close(y, ref.layer_norm(xd, None, None, 1e-5), dtype=torch.float16)


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_split_eps_dominated_rows(is_rms):
    """Rows far below sqrt(eps): a wrong or missing eps changes y by orders of magnitude."""
    _check(2, 53, torch.float32, is_rms, eps=1e-2, scale=1e-4)


@pytest.mark.usefixtures("small_split")
def test_split_rows_real_widths_and_stats(monkeypatch):
    """The real chunk widths (4096-column forward chunks) at a prime width past 16384; the
    forward stores mean/rstd once per row (chunk 0) for the backward."""
    monkeypatch.setattr(config, "SPLIT_ROW_FWD_COLS", 4096)
    x = torch.randn(2, 16411)
    y, mean, rstd = split_row.split_row_forward(x, None, None, 1e-5, False,
                                                config.split_row_fwd_chunk(16411))
    xd = x.double()
    assert_close(mean, xd.mean(1).float())
    assert_close(rstd, torch.rsqrt(xd.var(1, unbiased=False) + 1e-5).float())
    assert_close(y, ref.layer_norm(xd, None, None, 1e-5))


@pytest.mark.usefixtures("small_split")
def test_split_nan_stays_in_its_row():
    x = torch.randn(3, 50)
    x[1, 7] = float("nan")
    y = normlab.rms_norm(x, torch.ones(50))
    assert torch.isnan(y[1]).all() and not torch.isnan(y[[0, 2]]).any()


# ---- rows narrower than a vector --------------------------------------------------------------


def test_tiny_rows_take_block_row_at_any_row_count():
    tiny = config.BLOCK_ROW_TINY_COLS
    assert config.use_block_row(1, tiny - 1)
    assert not config.use_block_row(1, tiny)
    assert config.use_block_row(config.BLOCK_ROW_MIN_ROWS, tiny)


def test_tiny_tile_rule():
    """BLOCK_ROW_TINY_TILE_ELEMS elements per tile (rows x padded width), halved until the grid
    fills one wave of SMs but kept at BLOCK_ROW_TINY_MIN_TILE_ELEMS; the backward's tiles hold
    as many rows."""
    elems = config.BLOCK_ROW_TINY_TILE_ELEMS
    for n in (1, 2, 3, 5, 15):
        pad = triton_next_pow2(n)
        assert config.block_row_fwd_config(n, True).block_rows == elems // pad
        assert config.block_row_bwd_config(n).block_rows == min(
            elems // pad, config.BLOCK_ROW_BWD_TILE_ELEMS // pad)
    assert config.block_row_fwd_config(1, True, n_rows=10**7, sm_count=132).block_rows == elems
    floor = config.BLOCK_ROW_TINY_MIN_TILE_ELEMS
    assert config.block_row_fwd_config(1, True, n_rows=5265, sm_count=132).block_rows == floor
    assert config.block_row_fwd_config(1, True, n_rows=7, sm_count=132).block_rows == floor

    def rows(m, n):
        return config.block_row_fwd_config(n, True, n_rows=m, sm_count=132).block_rows

    at_floor = floor // 8  # rows of 5-7 columns, padded to 8
    assert rows(132 * at_floor - 1, 5) == at_floor  # one wave would take half tiles
    assert rows(132 * at_floor, 5) == at_floor
    assert rows(132 * 2 * at_floor, 7) == 2 * at_floor
    assert rows(1184, 4) == floor // 4  # 10 programs, not 148 of 8 rows
    # 16 columns and up keep the measured tiles
    measured = config.BLOCK_ROW_FWD_TILES[True][16][0]
    assert config.block_row_fwd_config(16, True).block_rows == measured


def test_pointwise_forward_exactly_at_one_column():
    """Rows of one column get the pointwise forward's config (its block: every thread's 16-byte
    bf16 vectors, a power of two for tl.arange) at any row count, beside the [rows, 1] tile of
    test_tiny_tile_rule for rows that are not contiguous; two columns and up do not, nor does a
    tile given by keywords (tuning scripts)."""
    pointwise = config.PointwiseFwdConfig(config.POINTWISE_FWD_BLOCK, config.POINTWISE_FWD_WARPS)
    assert pointwise.block == (config.VECTOR_BYTES // 2 * config.POINTWISE_FWD_VECTORS
                               * 32 * pointwise.num_warps)  # fmt: skip
    assert pointwise.block & (pointwise.block - 1) == 0
    for n_cols in (1, 2, 3, 15, 16, 17, 256):
        for is_rms, n_rows in itertools.product((True, False), (1, 5265, 10**7)):
            assert config.plan(is_rms, n_rows, 1, sm_count=132).layout == "block_row"
            cfg = config.block_row_fwd_config(n_cols, is_rms, n_rows=n_rows, sm_count=132)
            want = config.pointwise_fwd_config(n_rows, 132) if n_cols == 1 else None
            assert cfg.pointwise == want, (n_cols, n_rows)
    assert config.block_row_fwd_config(1, True).pointwise == pointwise
    assert config.block_row_fwd_config(1, True, tile_elems=1024).pointwise is None
    assert config.block_row_fwd_config(1, True, max_rows=64).pointwise is None


def triton_next_pow2(n):
    return 1 << (n - 1).bit_length()


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "dtype"), [
    (1, 1, torch.float32),  # one element (LayerNorm: y = bias, dx = 0)
    (7, 3, torch.bfloat16),
    (5265, 1, torch.float32),  # a ragged last tile of 32-row tiles at 4 SMs
    (1031, 15, torch.float16),  # prime rows, the widest tiny row
])  # fmt: skip
def test_tiny_rows_match_fp64(is_rms, m, n, dtype):
    assert config.plan(is_rms, m, n).layout == "block_row"
    _check(m, n, dtype, is_rms)


# ---- narrow rows between the decode rows and the block-row layout ------------------------------


def test_narrow_forward_tile_rule():
    """Narrow rows too few for the block-row layout: the forward takes tiles of
    prev_pow2(M / (NARROW_FWD_PROGRAMS_PER_SM SMs)) rows, at most NARROW_FWD_TILE_ELEMS padded
    elements, from two rows a tile; the backward stays the row layout's. One row a program below
    that, past BLOCK_ROW_MAX_COLS, with layout="row" and without an SM count. At and around each
    switch."""
    sms, per_sm = 132, config.NARROW_FWD_PROGRAMS_PER_SM
    elems, top = config.NARROW_FWD_TILE_ELEMS, config.BLOCK_ROW_MIN_ROWS
    for is_rms in (True, False):

        def tile(m, n=26, is_rms=is_rms, **kw):
            plan = config.plan(is_rms, m, n, **({"sm_count": sms} | kw))
            assert plan.layout == "row" and plan.strategy == "persistent" and plan.store_stats
            return plan.fwd_tile

        two = 2 * per_sm * sms  # the first row count with two rows a tile
        assert tile(two - 1) is None
        assert tile(two).block_rows == 2
        assert tile(2 * two - 1).block_rows == 2
        assert tile(2 * two).block_rows == 4
        assert tile(top - 1).block_rows == 16  # 16383 // 528 = 31; under 1024 / 32 = 32
        assert tile(top - 1, 64).block_rows == 16  # the element cap binds: 1024 / 64
        assert tile(top - 1, 256).block_rows == elems // 256
        assert tile(5000, 255) == tile(5000, 256)  # padded to the same 256 columns
        assert config.plan(is_rms, top, 26, sm_count=sms).layout == "block_row"
        assert tile(top - 1, config.BLOCK_ROW_MAX_COLS + 1) is None
        assert tile(5000, layout="row") is None
        assert tile(5000, sm_count=None) is None
        # the measured block-row tile's warps, at most one thread an element
        assert tile(5000, 100).num_warps == config.BLOCK_ROW_FWD_TILES[is_rms][128][1]
        assert tile(two, 16).num_warps == 1  # 2 rows x 16 columns
        # tiles under a warp's 32 elements (tiny widths under a row-layout strategy: 5265 x 1
        # planned 0 warps, which Triton refuses on a GPU) keep one warp
        for n in range(1, config.BLOCK_ROW_TINY_COLS + 1):
            for m in (two, 2 * two, 5265, top - 1):
                fwd = config.plan(is_rms, m, n, "atomic", sm_count=sms).fwd_tile
                assert fwd.num_warps >= 1 and fwd.num_warps & (fwd.num_warps - 1) == 0, (m, n)
                assert fwd.num_warps <= max(1, fwd.block_rows * config.next_pow2(n) // 32)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "dtype"), [
    (33, 26, torch.bfloat16),  # 4 SMs under the interpreter: 2-row tiles, a last tile of one
    (1031, 37, torch.float32),  # prime rows: 16-row tiles (the element cap 1024 / 64), ragged
    (263, 255, torch.float16),  # just under the widest narrow row: 4-row tiles
    (97, 129, torch.bfloat16),  # just past a power of two: 4-row tiles
])  # fmt: skip
def test_narrow_forward_tiles_match_fp64(is_rms, m, n, dtype):
    plan = config.plan(is_rms, m, n, sm_count=4)
    assert plan.layout == "row" and plan.fwd_tile is not None
    _check(m, n, dtype, is_rms)


# ---- small backward: row tiles fill the SMs before rows share one -----------------------------


def test_backward_tile_rows_rule():
    """A tile shares rows only once every SM has one (prev_pow2(M / SMs), at most the element
    budget's rows); rows that fit one program's NORM_BWD_ONE_PROGRAM_TILES tiles keep the
    budget's tiles. At and around each switch."""
    rows = config.norm_bwd_block_rows
    budget = config.NORM_BWD_TILE_ELEMS // 512  # 4 rows of 512 columns
    one = config.NORM_BWD_ONE_PROGRAM_TILES * budget  # the rows one program takes
    assert rows(one, 512, 132) == budget
    assert rows(one + 1, 512, 132) == 1  # past it, with fewer rows than SMs: one-row tiles
    assert rows(2 * 132 - 1, 512, 132) == 1
    assert rows(2 * 132, 512, 132) == 2
    assert rows(4 * 132 - 1, 512, 132) == 2
    assert rows(4 * 132, 512, 132) == budget
    assert rows(10**6, 512, 132) == budget  # never past the element budget
    assert rows(13, 512, 0) == budget  # no SM count: the budget alone
    assert rows(1, 512, 132) == 1 and rows(1, 512, 0) == 1  # never more rows than the call's
    assert rows(3, 512, 132) == budget == 4 and rows(2, 512, 132) == 2
    assert rows(10**6, 32, 132) == config.NORM_BWD_MAX_BLOCK_ROWS
    assert config.norm_bwd_config("persistent", 13, 448, sm_count=132).block_rows == 1
    assert config.norm_bwd_one_program(config.NORM_BWD_ONE_PROGRAM_TILES)
    assert not config.norm_bwd_one_program(config.NORM_BWD_ONE_PROGRAM_TILES + 1)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "one_program"), [
    (1, 448, True),  # one row: a one-row tile
    (3, 448, True),  # a 4-row tile, one row masked
    (4, 448, True),  # one 4-row tile
    (8, 448, True),  # two: one program still writes dγ/dβ itself
    (9, 448, False),  # one row past: smaller tiles, a grid and the reduce
    (13, 448, False),  # fewer rows than SMs x the tile's 4: 2-row tiles
    (33, 100, False),  # prime rows, past two 16-row tiles of 128 columns (100: just past 64)
])  # fmt: skip
def test_small_backward_grid(monkeypatch, is_rms, m, n, one_program):
    """Rows that fit one program's tiles run one program with no workspace and no reduce
    launch; one row more, a grid of smaller tiles and the reduce. dx, dγ, dβ against fp64."""
    from normlab import _launch
    from normlab.norms import row

    grids, reduced = [], []

    def launch(fn, grid, *args, **kwargs):
        grids.append(grid)
        return _launch.launch(fn, grid, *args, **kwargs)

    def reduce_partials(*args, **kwargs):
        reduced.append(True)
        return real_reduce(*args, **kwargs)

    real_reduce = row.reduce_partials
    monkeypatch.setattr(row, "launch", launch)
    monkeypatch.setattr(row, "reduce_partials", reduce_partials)
    x, w = torch.randn(m, n), 1 + 0.5 * torch.randn(n)
    b = None if is_rms else torch.randn(n)
    mean = None if is_rms else x.double().mean(1).float()
    var = x.double().pow(2).mean(1) if is_rms else x.double().var(1, unbiased=False)
    rstd = torch.rsqrt(var + 1e-5).float()
    dy = torch.randn(m, n)
    dx, dw, db = row.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy="persistent")
    tile_rows = config.norm_bwd_block_rows(m, next_pow2(n), SMS)
    one = config.NORM_BWD_ONE_PROGRAM_TILES * tile_rows
    if one_program:
        assert one >= m and grids == [(1,)] and not reduced
    else:
        assert one < m and grids[0][0] > 1 and reduced
    _, grads_ref = _ref(x, w, b, 1e-5, is_rms, dy)
    assert_close(dx, grads_ref[0], msg="dx")
    assert_close(dw, grads_ref[1], reduce_len=m, msg="dweight")
    if not is_rms:
        assert_close(db, grads_ref[2], reduce_len=m, msg="dbias")


@pytest.fixture
def row_kernels(monkeypatch):
    """The names of the kernels row's launchers launch, in order (they still run)."""
    names = []
    real_launch = row.launch

    def launch(fn, grid, *args, **kwargs):
        names.append(getattr(fn, "fn", fn).__name__)
        return real_launch(fn, grid, *args, **kwargs)

    monkeypatch.setattr(row, "launch", launch)
    return names


def test_backward_by_role_rule(monkeypatch):
    """Roles (on by default) at one-row tiles, more than one program, at most
    NORM_BWD_ROLES_MAX_ROWS rows and NORM_BWD_ROLES_MAX_COLS columns, where a column program on
    NORM_BWD_ROLES_WARPS warps loads every row in one step; the column tile holds the row
    tile's elements or 16 a thread, whichever is more, and no more rows than the batch."""
    assert config.NORM_BWD_ROLES
    rows, cols = config.NORM_BWD_ROLES_MAX_ROWS, config.NORM_BWD_ROLES_MAX_COLS

    def roles(m, n, programs=None, block_rows=1):
        return config.bwd_roles(m, n, m if programs is None else programs, block_rows,
                                next_pow2(n))  # fmt: skip

    assert roles(rows, cols) and roles(3, 1)
    assert not roles(rows + 1, cols)  # one row past
    assert not roles(rows, cols + 1)  # one column past
    assert not roles(2, cols, programs=1)  # one program writes dγ/dβ itself
    assert not roles(16, cols, programs=8, block_rows=2)  # rows share tiles
    # One step: 16 rows of 16 a thread (4 warps) at a row tile of up to 2048 elements, the row
    # tile's elements past it; so 16 rows at any width, 32 from a 4096-element row tile on.
    warps_elems = config.NORM_BWD_ROLES_WARPS * 32 * 16
    step = warps_elems // config.NORM_BWD_ROLES_COL_BLOCK
    assert step == 16 and roles(step, 1024) and not roles(step + 1, 1024)
    assert roles(step, 973) and not roles(step + 1, 2048)
    assert roles(step + 1, 2049) and roles(rows, 2049) and roles(rows, 4096)  # 4096-wide tile
    monkeypatch.setattr(config, "NORM_BWD_ROLES_WARPS", 8)  # twice the threads: twice the rows
    assert roles(rows, 1024) and roles(rows, 2048)
    monkeypatch.setattr(config, "NORM_BWD_ROLES", False)
    assert not roles(rows, cols)
    block = config.NORM_BWD_ROLES_COL_BLOCK
    assert config.bwd_roles_col_tile(14, 1022, 1024, 1) == (block, 1024 // block)  # one warp
    assert config.bwd_roles_col_tile(14, 1022, 1024, 4) == (block, 16)  # 16 a thread of 4 warps
    assert config.bwd_roles_col_tile(3, 1022, 1024, 4) == (block, 4)  # no more than the batch
    assert config.bwd_roles_col_tile(64, 100, 128, 4) == (block, 16)  # 4 row steps, not 64
    assert config.bwd_roles_col_tile(64, 17, 32, 4) == (32, 64)  # a narrow row: its padded width
    assert config.bwd_roles_col_tile(5, 1, 1, 4) == (1, 8)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "layout", "dtype"), [
    (3, 448, "row", torch.float32),  # the fewest one-row tiles past one program
    (7, 973, "auto", torch.bfloat16),  # odd width: one-warp row tiles
    (14, 1022, "row", torch.bfloat16),  # the population's worst backward cell
    (16, 973, "row", torch.bfloat16),  # the most rows of a 1024-wide row tile
    (32, 3001, "row", torch.bfloat16),  # the most rows: one step of a 4096-wide row tile
    (5, 1, "row", torch.float32),  # one column
    (6, 2049, "auto", torch.float16),  # just past a power of two: ragged column programs
    (4, 4096, "auto", torch.bfloat16),  # the compile-time width's range
    (3, 8192, "auto", torch.bfloat16),  # the most columns
])  # fmt: skip
def test_backward_by_role_matches_fp64(monkeypatch, row_kernels, is_rms, m, n, layout, dtype):
    """A decode batch's backward is one launch of the roles kernel (no reduce): dx, dγ and dβ
    against fp64, with an offset, a weight without a bias and no parameters at all (which needs
    no column programs). The interpreter has 4 SMs, so "auto" reaches one-row tiles only at
    widths past 1024 or in one warp; "row" pins them."""
    monkeypatch.setattr(config, "NORM_BWD_ROLES", True)
    names, reduced = row_kernels, []
    monkeypatch.setattr(row, "reduce_partials", lambda *a, **k: reduced.append(True))
    for weight, bias, offset in ((True, True, 0.0), (True, False, 1.0), (False, False, 0.0)):
        if is_rms and bias:
            bias = False
        names.clear()
        x = torch.randn(m, n).to(dtype)
        w = (0.5 * torch.randn(n) + (0.0 if offset else 1.0)).to(dtype) if weight else None
        b = (0.5 * torch.randn(n)).to(dtype) if bias else None
        gy = torch.randn(m, n).to(dtype)
        leaves = [t.requires_grad_() for t in (x, w, b) if t is not None]
        if is_rms:
            y = normlab.rms_norm(x, w, 1e-5, offset=offset, layout=layout)
        else:
            y = normlab.layer_norm(x, w, b, 1e-5, offset=offset, layout=layout)
        grads = torch.autograd.grad(y, leaves, gy)
        xd, wd, bd = (t.detach().double().requires_grad_() if t is not None else None
                      for t in (x, w, b))  # fmt: skip
        y_ref = (ref.rms_norm(xd, wd, 1e-5, offset) if is_rms
                 else ref.layer_norm(xd, wd, bd, 1e-5, offset))  # fmt: skip
        dleaves = [t for t in (xd, wd, bd) if t is not None]
        grads_ref = torch.autograd.grad(y_ref, dleaves, gy.double())
        for name, g, g_ref in zip(("dx", "dweight", "dbias"), grads, grads_ref, strict=False):
            assert_close(g, g_ref, reduce_len=m if name != "dx" else n, dtype=dtype, msg=name)
        bwd = names[1:]  # the forward's launch first
        if weight or bias:
            assert bwd == ["_norm_bwd_roles_kernel"], names
        else:
            assert "_norm_bwd_roles_kernel" not in bwd, names
    assert not reduced


@pytest.mark.parametrize(("m", "n"), [(3, 8193), (17, 973), (33, 3001)])
def test_backward_past_the_roles_bounds(monkeypatch, row_kernels, m, n):
    """One column past the roles' bounds, one row past a column program's one step, one row
    past the most rows: the backward is the persistent kernel and the reduce of its partial
    rows; dx and dγ against fp64."""
    reduced, real_reduce = [], row.reduce_partials
    monkeypatch.setattr(row, "reduce_partials",
                        lambda *a, **k: reduced.append(True) or real_reduce(*a, **k))
    x = torch.randn(m, n, dtype=torch.bfloat16, requires_grad=True)
    w = (1 + 0.5 * torch.randn(n)).to(torch.bfloat16).requires_grad_()
    gy = torch.randn(m, n, dtype=torch.bfloat16)
    grads = torch.autograd.grad(normlab.rms_norm(x, w, 1e-5, layout="row"), (x, w), gy)
    bwd = row_kernels[1:]  # the forward's launch first
    persistent = ("_norm_bwd_persistent_kernel", "_norm_bwd_persistent_static_kernel")
    assert len(bwd) == 1 and bwd[0] in persistent and reduced, row_kernels
    xd, wd = (t.detach().double().requires_grad_() for t in (x, w))
    grads_ref = torch.autograd.grad(ref.rms_norm(xd, wd, 1e-5), (xd, wd), gy.double())
    assert_close(grads[0], grads_ref[0], reduce_len=n, dtype=torch.bfloat16, msg="dx")
    assert_close(grads[1], grads_ref[1], reduce_len=m, dtype=torch.bfloat16, msg="dweight")


@pytest.mark.parametrize(("m", "n", "roles"), [(40, 300, True), (8, 300, False)])
def test_backward_roles_keyword(row_kernels, m, n, roles):
    """``roles=`` overrides the rule both ways (benchmarks/norm_launch_variants.py times batches
    past its bounds with it): the roles kernel past 16 rows, the persistent kernel within; fp64
    agrees."""
    x, dy = torch.randn(m, n), torch.randn(m, n)
    w = 1 + 0.5 * torch.randn(n)
    _, mean, rstd = row.norm_forward(x, w, None, 1e-5, True)
    row_kernels.clear()
    dx, dw, _ = row.norm_backward(dy, x, w, None, mean, rstd, True, block_rows=1, roles=roles)
    kernel = "_norm_bwd_roles_kernel" if roles else "_norm_bwd_persistent_kernel"
    assert row_kernels == [kernel], row_kernels
    rdx, rdw, _ = ref.norm_backward(dy.double(), x.double(), w.double(), None, 1e-5, True)
    assert_close(dx, rdx, reduce_len=n, msg="dx")
    assert_close(dw, rdw, reduce_len=m, msg="dweight")


@pytest.mark.parametrize(("m", "n", "plan_warps"), [(12, 973, 1), (8, 8192, 16)])
def test_backward_by_role_warps(monkeypatch, m, n, plan_warps):
    """The roles launch runs NORM_BWD_ROLES_WARPS warps whatever the row plan's (one warp for
    an odd width, sixteen at 8192 columns), its column tile sized for them; an explicit
    num_warps= still decides. dx and dγ against fp64 either way."""
    monkeypatch.setattr(config, "NORM_BWD_ROLES", True)
    align = config.kernel_row_align(n, 2)
    plan = config.norm_bwd_config("persistent", m, n, is_rms=True, sm_count=SMS,
                                  aligned=align * 2 == config.VECTOR_BYTES,
                                  one_warp=config.one_warp_rows(n, align, 2))  # fmt: skip
    assert plan.num_warps == plan_warps != config.NORM_BWD_ROLES_WARPS
    launches, real_launch = [], row.launch
    monkeypatch.setattr(row, "launch", lambda fn, grid, *a, **k: launches.append(
        (getattr(fn, "fn", fn).__name__, k)) or real_launch(fn, grid, *a, **k))
    x = torch.randn(m, n).to(torch.bfloat16)
    dy = torch.randn(m, n).to(torch.bfloat16)
    w = (1 + 0.5 * torch.randn(n)).to(torch.bfloat16)
    _, mean, rstd = row.norm_forward(x, w, None, 1e-5, True)
    rdx, rdw, _ = ref.norm_backward(dy.double(), x.double(), w.double(), None, 1e-5, True)
    for num_warps, expected in ((None, config.NORM_BWD_ROLES_WARPS), (2, 2)):
        launches.clear()
        dx, dw, _ = row.norm_backward(dy, x, w, None, mean, rstd, True, block_rows=1,
                                      num_warps=num_warps)  # fmt: skip
        assert [name for name, _ in launches] == ["_norm_bwd_roles_kernel"], launches
        kw = launches[0][1]
        assert kw["num_warps"] == expected, kw
        assert (kw["COL_BLOCK"], kw["CHUNK_ROWS"]) == config.bwd_roles_col_tile(
            m, n, kw["BLOCK_COLS"], expected)  # fmt: skip
        assert_close(dx, rdx, reduce_len=n, dtype=torch.bfloat16, msg="dx")
        assert_close(dw, rdw, reduce_len=m, dtype=torch.bfloat16, msg="dweight")


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_by_role_of_the_fused_add(monkeypatch, row_kernels, is_rms):
    """The fused add's backward by role: dh reaches dx (so x's and the residual's gradients)
    from the row programs, dγ/dβ from the column programs; against fp64."""
    monkeypatch.setattr(config, "NORM_BWD_ROLES", True)
    m, n = 6, 300
    x, r = torch.randn(m, n), torch.randn(m, n)
    w, b = 1 + 0.5 * torch.randn(n), 0.5 * torch.randn(n)
    gy, gh = torch.randn(m, n), torch.randn(m, n)
    leaves = [x.requires_grad_(), r.requires_grad_(), w.requires_grad_()]
    if is_rms:
        y, h = normlab.add_rms_norm(x, r, w, 1e-5, layout="row")
    else:
        leaves.append(b.requires_grad_())
        y, h = normlab.add_layer_norm(x, r, w, b, 1e-5, layout="row")
    grads = torch.autograd.grad((y, h), leaves, (gy, gh))
    assert row_kernels[-1] == "_norm_bwd_roles_kernel", row_kernels
    dleaves = [t.detach().double().requires_grad_() for t in leaves]
    if is_rms:
        y_ref, h_ref = ref.add_rms_norm(*dleaves[:3], 1e-5)
    else:
        y_ref, h_ref = ref.add_layer_norm(*dleaves, 1e-5)
    grads_ref = torch.autograd.grad((y_ref, h_ref), dleaves, (gy.double(), gh.double()))
    for name, g, g_ref in zip(("dx", "dresidual", "dweight", "dbias"), grads, grads_ref,
                              strict=False):  # fmt: skip
        assert_close(g, g_ref, reduce_len=m if name in ("dweight", "dbias") else n, msg=name)


# ---- rows wider than one block; few rows --------------------------------------------------------


def test_wide_row_rule():
    """Up to NORM_FWD_MAX_BLOCK columns a row is one register block (read once); past it,
    NORM_FWD_WIDE_CHUNK-column chunks at NORM_FWD_WIDE_WARPS warps, whatever the norm."""
    top = config.NORM_FWD_MAX_BLOCK
    for is_rms in (True, False):
        assert config.norm_fwd_config(top, is_rms) == config.NormFwdConfig(top, 16)
        assert config.norm_fwd_config(16385, is_rms).block_size == top
        for n in (top + 1, 60028):
            cfg = config.norm_fwd_config(n, is_rms)
            assert (cfg.block_size, cfg.num_warps) == (config.NORM_FWD_WIDE_CHUNK,
                                                       config.NORM_FWD_WIDE_WARPS)  # fmt: skip


@pytest.mark.parametrize("n", [17767, 32769])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_wide_rows_match_fp64(is_rms, n):
    """A row in one 32768-column block (17767) and past it in the rule's chunks (32769: a last
    chunk of one column), with a mean far from zero for LayerNorm."""
    from normlab.norms import row

    x = torch.randn(2, n) + (0 if is_rms else 3.0)
    w = 1 + 0.5 * torch.randn(n)
    y, _, _ = row.norm_forward(x, w, None, 1e-5, is_rms)
    expected = (ref.rms_norm(x.double(), w.double(), 1e-5) if is_rms
                else ref.layer_norm(x.double(), w.double(), None, 1e-5))  # fmt: skip
    assert_close(y, expected)


def test_block_row_windows_start_above_the_decode_rows():
    """Decode batches (config.NORM_FWD_DECODE_ROWS_PER_SM: 4 rows a SM up to 2048 columns, 1
    beyond) run one row per program, the whole row in registers with the parameters loaded
    beside x; one row more, the looped row or the block-row windows (config.NORM_FWD_BLOCK_ROW)
    take over. At each switch."""
    sms = 132
    for n, per_sm in ((1000, 4), (2048, 4), (2049, 1), (8192, 1)):
        top = per_sm * sms
        assert config.decode_rows(top, n, sms) and not config.decode_rows(top + 1, n, sms)
        cfg = config.norm_fwd_config(n, True, top, sms)
        assert cfg.block_size >= n and cfg.early_params
        assert not config.norm_fwd_config(n, True, top + 1, sms).early_params
    assert config.NORM_FWD_BLOCK_ROW[True][1024][0][0] <= 4 * sms  # the window from 1 row
    assert config.plan(True, 4 * sms, 1000, sm_count=sms).fwd_tile is None
    assert config.plan(True, 4 * sms + 1, 1000, sm_count=sms).fwd_tile is not None
    top = config.NORM_FWD_MAX_BLOCK  # 64 values a thread: no room for the weight's as well
    assert config.norm_fwd_config(top, True, 1, sms).num_warps * 32 * 32 < top
    assert not config.norm_fwd_config(top, True, 1, sms).early_params
    assert config.norm_fwd_config(top // 2, True, 1, sms).early_params


@pytest.mark.usefixtures("small_split")
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_split_rows_weight_offset(is_rms):
    """offset=1 with zero-centred weights (Gemma): the split kernels scale by 1 + w, forward and
    backward; dγ is unchanged (sum of dy * xhat)."""
    m, n = 2, 61
    x, gy = torch.randn(m, n), torch.randn(m, n)
    w = (0.3 * torch.randn(n)).requires_grad_()
    xg = x.clone().requires_grad_()
    y = (normlab.rms_norm(xg, w, 1e-5, offset=1.0) if is_rms
         else normlab.layer_norm(xg, w, None, 1e-5, offset=1.0))  # fmt: skip
    dx, dw = torch.autograd.grad(y, (xg, w), gy)
    xd = x.double().requires_grad_()
    wd = w.detach().double().requires_grad_()
    yd = (ref.rms_norm(xd, 1 + wd, 1e-5) if is_rms
          else ref.layer_norm(xd, 1 + wd, None, 1e-5))  # fmt: skip
    dxd, dwd = torch.autograd.grad(yd, (xd, wd), gy.double())
    assert config.plan(is_rms, m, n, sm_count=SMS).fwd_split is not None
    assert_close(y, yd, msg="y")
    assert_close(dx, dxd, msg="dx")
    assert_close(dw, dwd, reduce_len=m, msg="dweight")


# ---- paired partial rows -------------------------------------------------------------------


@pytest.fixture
def partial_rows(monkeypatch):
    """The partial rows of every reduce the row backward launches, in order."""
    from normlab.norms import row

    seen = []
    real = row.reduce_partials

    def spy(dw_partial, db_partial, *args, **kwargs):
        seen.append((dw_partial if dw_partial is not None else db_partial).shape[0])
        return real(dw_partial, db_partial, *args, **kwargs)

    monkeypatch.setattr(row, "reduce_partials", spy)
    return seen


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_partials_pair_only_when_asked_and_past_their_bound(monkeypatch, partial_rows, is_rms):
    """The plan pairs no programs: one program past NORM_BWD_PARTIALS_PER_SM rows per SM keeps its
    own row. With pairing asked for (NORM_BWD_PAIR_PARTIALS), programs share zeroed rows only
    past that bound: at it each keeps its own. All right against fp64."""
    bound = config.NORM_BWD_PARTIALS_PER_SM * SMS
    assert config.pair_partials(bound + 1, SMS) and not config.pair_partials(bound, SMS)
    assert not config.NORM_BWD_PAIR_PARTIALS
    monkeypatch.setattr(config, "NORM_BWD_TILE_ELEMS", 128)  # two 64-column rows a program tile
    monkeypatch.setattr(config, "NORM_BWD_PARTIALS_MAX_SHARE", 1e6)  # the few-row cap aside
    # 4 programs per SM at 64 columns: the grid is the tiles
    _check(2 * (bound + 1), 64, torch.float32, is_rms)
    monkeypatch.setattr(config, "NORM_BWD_PAIR_PARTIALS", True)
    for programs in (bound, bound + 1):
        _check(2 * programs, 64, torch.float32, is_rms)
    assert partial_rows == [bound + 1, bound, (bound + 2) // 2]


def test_partials_cap_follows_its_rule():
    """The cap keeps the fp32 partial rows' traffic (8 B a column per parameter, written and read
    back) within NORM_BWD_PARTIALS_MAX_SHARE of the rows' own bytes; the grid never drops under
    one program per SM for it, and an uncapped grid is the tiles or programs_per_sm per SM."""
    share = config.NORM_BWD_PARTIALS_MAX_SHARE
    assert config.norm_bwd_partials_cap(512, 6, 1) == int(share * 512 * 6 / 8)
    assert config.norm_bwd_partials_cap(512, 6, 2) == int(share * 512 * 6 / 16)
    assert config.norm_bwd_partials_cap(512, 8, 2) == int(share * 512 * 8 / 16)  # with dh
    assert config.norm_bwd_partials_cap(512, 6, 0) is None  # no parameters, no partial rows
    programs = config.norm_bwd_persistent_programs
    assert programs(512, 4, 132, 192) == 192
    assert programs(512, 4, 132, 96) == 132  # one program per SM at least
    assert programs(100, 4, 132, 50) == 100  # but no more programs than tiles
    assert programs(4096, 4, 132, 1536) == 528
    assert programs(4096, 4, 132, None) == 528
    assert programs(config.NORM_BWD_ONE_PROGRAM_TILES, 4, 132, None) == 1  # one program's tiles
    assert programs(config.NORM_BWD_ONE_PROGRAM_TILES + 1, 4, 132, None) > 1


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_grid_stops_at_the_partials_cap(monkeypatch, partial_rows, is_rms):
    """With few rows the persistent grid stops at the cap (partial rows counted at the reduce),
    one row below and above where it binds; dx/dγ/dβ right against fp64."""
    monkeypatch.setattr(config, "NORM_BWD_TILE_ELEMS", 64)  # one 64-column row a tile
    monkeypatch.setattr(config, "NORM_BWD_PARTIALS_PER_SM", 64)  # pairing aside
    monkeypatch.setattr(config, "NORM_BWD_ROLES", False)  # the decode batches' roles aside
    n_params = 1 if is_rms else 2
    full = 4 * SMS  # programs_per_sm at 64 columns
    rows = []
    for m in (SMS - 1, SMS + 1, 2 * SMS + 1, 3 * SMS, full + 5):
        _check(m, 64, torch.float32, is_rms)
        cap = config.norm_bwd_partials_cap(m, 3 * 4, n_params)
        rows.append(min(m, full, max(cap, SMS)))
    assert partial_rows == rows
    assert any(r < min(m, full) for r, m in zip(rows, (SMS - 1, SMS + 1, 2 * SMS + 1, 3 * SMS,
                                                      full + 5), strict=True))  # fmt: skip


def test_backward_warps_follow_row_alignment(monkeypatch):
    """A 16384-element backward tile takes 16 warps on 16-byte aligned rows and 32 on rows
    loaded element by element; the launcher tells the rule which rows it has."""
    tile = config.NORM_BWD_SINGLE_PASS_MAX_COLS
    assert config.norm_bwd_config("persistent", 4096, tile, aligned=True).num_warps == 16
    assert config.norm_bwd_config("persistent", 4096, tile, aligned=False).num_warps == 32
    assert config.norm_bwd_config("persistent", 4096, 2048, aligned=False).num_warps == 4
    seen = []
    real = config.norm_bwd_config

    def spy(*args, **kwargs):
        seen.append(kwargs["aligned"])
        return real(*args, **kwargs)

    monkeypatch.setattr(config, "norm_bwd_config", spy)
    for n in (16, 13):  # fp32 rows of 64 bytes (aligned), of 52 (4-byte aligned)
        x, dy = torch.randn(3, n), torch.randn(3, n)
        _, mean, rstd = row.norm_forward(x, None, None, 1e-5, False)
        row.norm_backward(dy, x, None, None, mean, rstd, False)
    assert seen == [True, False]


def test_one_warp_rule_at_its_switches():
    """One warp a program where rows not 16-byte aligned need more than a warp's 32 lanes, up
    to the widest row one warp holds."""
    bf16, fp32 = 2, 4
    assert not config.one_warp_rows(32, 1, bf16)  # 32 lanes of one element
    assert config.one_warp_rows(33, 1, bf16)  # padded to 64: 64 lanes
    assert not config.one_warp_rows(64, 2, bf16)  # 32 lanes of two elements
    assert config.one_warp_rows(66, 2, bf16)
    assert config.one_warp_rows(258, 4, bf16) and not config.one_warp_rows(128, 4, bf16)
    # a row of 16-byte vectors keeps the measured warps at any width; fp32's vector is 4
    assert not config.one_warp_rows(1000, 8, bf16) and not config.one_warp_rows(1000, 4, fp32)
    assert config.one_warp_rows(1000, 2, fp32)
    top = config.ONE_WARP_MAX_COLS
    assert config.one_warp_rows(top - 1, 1, bf16) and config.one_warp_rows(top, 2, bf16)
    assert not config.one_warp_rows(top + 1, 1, bf16)
    # contiguous rows take the width's alignment: 300 bf16 columns are 4-element aligned
    assert config.one_warp_contiguous(127) and config.one_warp_contiguous(300)
    assert not config.one_warp_contiguous(128) and not config.one_warp_contiguous(256, fp32)


def test_one_warp_tiles_follow_their_rule():
    """The one-warp tiles: the forward ONE_WARP_FWD_TILE_ELEMS, the backward
    ONE_WARP_BWD_TILE_ELEMS (a row at least) with ONE_WARP_PROGRAMS_PER_SM; overrides win."""
    for n in (33, 127, 255, 256, 700):
        cols = next_pow2(n)
        fwd = config.block_row_fwd_config(n, True, one_warp=True)
        fwd_rows = max(1, config.ONE_WARP_FWD_TILE_ELEMS // cols)
        assert (fwd.block_rows, fwd.num_warps) == (fwd_rows, 1)
        bwd = config.block_row_bwd_config(n, one_warp=True)
        rows = max(1, config.ONE_WARP_BWD_TILE_ELEMS // cols)
        assert (bwd.block_rows, bwd.num_warps, bwd.programs_per_sm) == (
            rows, 1, config.ONE_WARP_PROGRAMS_PER_SM)
        assert config.block_row_bwd_recompute_config(n, False, True) == bwd
        row_cfg = config.norm_bwd_config("persistent", 10**6, n, one_warp=True, sm_count=132)
        assert (row_cfg.block_rows, row_cfg.num_warps, row_cfg.programs_per_sm) == (
            rows, 1, config.ONE_WARP_PROGRAMS_PER_SM)
    assert config.block_row_fwd_config(127, True, one_warp=True, num_warps=4).num_warps == 4
    assert config.block_row_bwd_config(127, one_warp=True, num_warps=2).num_warps == 2
    for strategy in ("atomic", "two_stage"):  # the one-warp tile is the persistent grid's
        assert (config.norm_bwd_config(strategy, 10**6, 825, one_warp=True)
                == config.norm_bwd_config(strategy, 10**6, 825))  # fmt: skip


@pytest.mark.parametrize("is_rms", [True, False])
@pytest.mark.parametrize("m, n, layout, one_warp", [
    (37, 127, "block_row", True),  # ROW_ALIGN 1: 128 lanes
    (5, 33, "block_row", True),  # just past 32 lanes (LayerNorm recomputes its statistics)
    (37, 126, "block_row", True),  # ROW_ALIGN 2: 64 lanes
    (37, 128, "block_row", False),  # 16-byte rows
    (23, 825, "auto", True),  # the row backward
    (23, 832, "auto", False),
])  # fmt: skip
def test_unaligned_rows_run_one_warp(monkeypatch, is_rms, m, n, layout, one_warp):
    """bf16 rows of these widths launch one-warp block-row kernels (both directions) and row
    backward, aligned rows the measured warps; y, dx, dγ, dβ against fp64."""
    from normlab import _launch
    from normlab.norms import block_row

    warps = {}

    def launch(fn, grid, *args, **kwargs):
        warps[fn.__name__] = kwargs["num_warps"]
        return _launch.launch(fn, grid, *args, **kwargs)

    monkeypatch.setattr(row, "launch", launch)
    monkeypatch.setattr(block_row, "launch", launch)
    dtype = torch.bfloat16
    x = torch.randn(m, n).to(dtype)
    w = (1 + 0.5 * torch.randn(n)).to(dtype)
    b = None if is_rms else (0.5 * torch.randn(n)).to(dtype)
    gy = torch.randn(m, n).to(dtype)
    leaves = [t.detach().requires_grad_() for t in (x, w, b) if t is not None]
    y = (normlab.rms_norm(leaves[0], leaves[1], 1e-5, layout=layout) if is_rms
         else normlab.layer_norm(*leaves, 1e-5, layout=layout))  # fmt: skip
    grads = torch.autograd.grad(y, leaves, gy)
    kernels = (("_block_row_fwd_kernel", "_block_row_bwd_kernel") if layout == "block_row"
               else ("_norm_bwd_persistent_kernel",))  # fmt: skip
    assert all(name in warps for name in kernels), warps
    assert all((warps[name] == 1) == one_warp for name in kernels), warps
    y_ref, grads_ref = _ref(x, w, b, 1e-5, is_rms, gy)
    assert_close(y, y_ref, msg="y")
    for name, g, g_ref in zip(["dx", "dweight", "dbias"], grads, grads_ref, strict=False):
        assert_close(g, g_ref, reduce_len=m if name != "dx" else n, dtype=dtype, msg=name)


def test_unaligned_forward_tile_rule():
    """Unaligned rows past the block-row width take the forward's one-warp tile while it holds
    two rows, at BLOCK_ROW_MIN_ROWS rows or more; aligned rows keep their own plan."""
    many = config.BLOCK_ROW_MIN_ROWS
    top = config.ONE_WARP_FWD_TILE_ELEMS // 2  # the widest padded row two fit in

    def tile(m, n, aligned=False):
        return config.plan(True, m, n, "auto", "auto", 132, aligned, 2).fwd_tile

    assert tile(many, config.BLOCK_ROW_MAX_COLS + 1) == config.BlockRowFwdConfig(2, 1)
    assert tile(many, top - 1) == config.BlockRowFwdConfig(2, 1)
    assert tile(many, top + 1) is None  # one row to a tile: one row a program
    assert tile(many - 1, 300) is None
    assert tile(10**6, 300, aligned=True) != config.BlockRowFwdConfig(2, 1)
    assert config.unaligned_fwd_tile(many, config.BLOCK_ROW_MAX_COLS) is None


@pytest.mark.parametrize("is_rms", [True, False])
def test_unaligned_forward_tile_matches_fp64(monkeypatch, is_rms):
    """The one-warp forward tile at 257 and 301 columns (ragged last tile; fp32 rows of 4 bytes),
    past the decode rows with the row threshold shrunk; y, dx, dγ, dβ against fp64."""
    monkeypatch.setattr(config, "BLOCK_ROW_MIN_ROWS", 8)
    decode = max(rows for _, rows in config.NORM_FWD_DECODE_ROWS_PER_SM) * SMS
    for m, n in ((decode + 3, 257), (decode + 7, 301)):
        assert config.plan(is_rms, m, n, "auto", "auto", SMS, False, 4).fwd_tile is not None
        _check(m, n, torch.float32, is_rms)


def test_pointwise_block_shrinks_to_fill_the_card():
    """The full block while the grid gives every SM a program; below that the block halves
    (warps with it) to the first that does, down to one warp's vectors."""
    full, least = config.POINTWISE_FWD_BLOCK, config.POINTWISE_FWD_MIN_BLOCK
    assert config.pointwise_fwd_config(132 * full, 132).block == full
    assert config.pointwise_fwd_config(131 * full + 1, 132).block == full  # 132 programs
    assert config.pointwise_fwd_config(131 * full, 132).block == full // 2
    shrunk = config.pointwise_fwd_config(5265, 132)
    assert shrunk.block == 256 and -(-5265 // 256) < 132 and shrunk.num_warps == 1  # the floor
    assert config.pointwise_fwd_config(53711, 132) == (256, 1)  # 210 programs; 512: 105
    assert config.pointwise_fwd_config(1, 132).block == least
    assert config.pointwise_fwd_config(10**6).block == full  # no SM count: no shrink


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(("m", "n", "kind"), [
    (7, 1, "block_row"),  # one column: the pointwise forward
    (5, 13, "block_row"),  # tiny rows
    (3, 257, "row"),  # one row per program, just past a power of two
    (4 * SMS + 3, 96, "row_tile"),  # past decode (4 rows a SM): the wide forward's block-row
    # tile (forced below)
])  # fmt: skip
def test_inference_forward_stores_no_statistics(monkeypatch, is_rms, m, n, kind):
    """Without a gradient no backward reads mean/rstd: the forward neither allocates nor writes
    them, and y still matches fp64. With a gradient the same call stores them (the backward's
    result is checked against fp64 as well)."""
    from normlab import _launch
    from normlab.norms import op

    if kind == "row_tile":
        tile = config.BlockRowFwdConfig(2, 4, 0)
        monkeypatch.setattr(config, "norm_fwd_block_row_config", lambda *a, **k: tile)
    plan = config.plan(is_rms, m, n, "auto", "auto", SMS)
    assert (plan.layout == "block_row") == (kind == "block_row")
    assert (plan.fwd_tile is not None) == (kind == "row_tile")
    allocated = []
    real_buffer = _launch.buffer

    def counted(shape, dtype, device, **kw):
        allocated.append((shape if isinstance(shape, int) else shape[0] if len(shape) == 1
                          else tuple(shape), dtype))  # fmt: skip
        return real_buffer(shape, dtype, device, **kw)

    from normlab.norms import block_row

    for module in (_launch, row, block_row):
        monkeypatch.setattr(module, "buffer", counted)
    g = torch.Generator().manual_seed(m * 1000 + n)
    x = torch.randn(m, n, generator=g) * 3 + 1
    w = torch.randn(n, generator=g)
    b = None if is_rms else torch.randn(n, generator=g)
    eps = 1e-3  # large enough that a dropped eps shows
    want = _ref(x, w, b, eps, is_rms, torch.randn(m, n, generator=g))
    with torch.no_grad():
        y = normlab.rms_norm(x, w, eps) if is_rms else normlab.layer_norm(x, w, b, eps)
    assert_close(y, want[0], msg="y")
    stats = (m, torch.float32)  # a statistics buffer: one fp32 per row
    assert stats not in allocated and allocated
    allocated.clear()
    _, _, mean, rstd = op.planned_forward(x, None, w, b, eps, 0.0, is_rms, "auto", "auto")
    if plan.store_stats or plan.layout != "block_row":
        assert rstd is not None and (mean is None) == is_rms
        assert stats in allocated
    gy = torch.randn(m, n, generator=g)
    y, grads = _run(x, w, b, eps, is_rms, gy)
    want = _ref(x, w, b, eps, is_rms, gy)
    assert_close(y, want[0], msg="y")
    for name, got, ref_ in zip(["dx", "dweight", "dbias"], grads, want[1], strict=False):
        assert_close(got, ref_, reduce_len=m if name != "dx" else n, msg=name)


def test_block_row_windows_only_on_aligned_rows():
    """The wide forward's measured block-row tiles apply to 16-byte aligned rows; rows that are
    not (a width that is not a multiple of 8 bf16 elements) run one row per program, and the
    launcher's plan says which rows it has."""
    from normlab.norms import op

    rows = 1500  # inside LayerNorm's 4096-column window
    tile = config.BlockRowFwdConfig(*config.NORM_FWD_BLOCK_ROW[False][4096][0][2])
    assert config.norm_fwd_block_row_config(rows, 4096) == tile
    assert config.norm_fwd_block_row_config(rows, 4096, aligned=False) is None
    assert config.plan(False, rows, 2326, sm_count=132).fwd_tile == tile
    assert config.plan(False, rows, 2326, sm_count=132, aligned=False).fwd_tile is None
    x = torch.empty(rows, 2328, dtype=torch.bfloat16)
    assert op._plan(x, False, "auto", "auto").fwd_tile == tile
    assert op._plan(x[:, :2326], False, "auto", "auto").fwd_tile == tile  # stride 2328: aligned
    assert op._plan(x[:, :2326].contiguous(), False, "auto", "auto").fwd_tile is None
    assert op._plan(x.float()[:, :2326].contiguous(), False, "auto", "auto").fwd_tile is None
    fp32_tile = tile._replace(programs_per_sm=0)  # fp32 rows: the tile without its grid
    assert op._plan(x.float()[:, :2324].contiguous(), False, "auto", "auto").fwd_tile == fp32_tile


def test_persistent_windows_keep_to_two_byte_rows():
    """The wide forward's persistent windows were measured on 2-byte rows: a 4-byte row gets
    the same tile without the persistent grid (programs_per_sm 0), at every window, and the
    launcher reads the element size from x."""
    from normlab.norms import op

    for is_rms, table in config.NORM_FWD_BLOCK_ROW.items():
        for width, windows in table.items():
            for lo, _, (rows, warps, per_sm) in windows:
                for size in (1, 2, 4, 8):
                    got = config.norm_fwd_block_row_config(lo, width, is_rms, elem_size=size)
                    keep = size <= config.NORM_FWD_PERSISTENT_MAX_ELEM_BYTES
                    want = config.BlockRowFwdConfig(rows, warps, per_sm if keep else 0)
                    assert got == want, (is_rms, width, size)
    rows = 1500  # LayerNorm's 4096-column window: a persistent grid of 1-row tiles
    window_per_sm = config.NORM_FWD_BLOCK_ROW[False][4096][0][2][2]
    assert window_per_sm > 0
    for dtype, keep in ((torch.bfloat16, True), (torch.float16, True), (torch.float32, False)):
        plan = op._plan(torch.empty(rows, 4000, dtype=dtype), False, "auto", "auto")
        assert plan.fwd_tile.programs_per_sm == (window_per_sm if keep else 0), dtype


@pytest.mark.parametrize(("m", "n"), [(2053, 1000), (263, 8190)])  # prime rows, masked tails
def test_fp32_rows_in_a_window_match_fp64(m, n):
    """fp32 rows in a LayerNorm window run its tile without the persistent grid: against fp64,
    the rows of a last partial tile included."""
    lo, hi, _ = config.NORM_FWD_BLOCK_ROW[False][next_pow2(n)][0]
    assert lo <= m and (hi is None or m <= hi)
    assert config.plan(False, m, n, sm_count=SMS, elem_size=4).fwd_tile.programs_per_sm == 0
    _check(m, n, torch.float32, False)


# ---- the fused residual add: one block where the plain RMSNorm loops ----------------------------


def test_fused_add_holds_the_row_in_one_block():
    """RMSNorm's looped forward reads the row twice (sums, then normalize); with a residual its
    second pass would read back the h its first one wrote, so the fused add keeps one block."""
    for n in config.NORM_FWD_RMS_LOOPED:
        if n > config.NORM_FWD_MAX_BLOCK:
            continue
        assert config.norm_fwd_config(n, True, 10**6, 132).block_size < n
        assert config.norm_fwd_config(n, True, 10**6, 132, fused_add=True).block_size >= n
        assert config.norm_fwd_config(n, False, 10**6, 132, fused_add=True).block_size >= n


def test_fused_add_at_a_looped_width_matches_fp64(monkeypatch):
    """add_rms_norm at a width the plain RMSNorm loops over, enough rows not to be a decode
    batch: one block launched, y and h against fp64."""
    from normlab import _launch

    m, n = 4 * SMS + 3, 1024
    blocks = []

    def launch(fn, grid, *args, **kwargs):
        blocks.append(kwargs.get("BLOCK_SIZE"))
        return _launch.launch(fn, grid, *args, **kwargs)

    monkeypatch.setattr(row, "launch", launch)
    x, r = torch.randn(m, n), torch.randn(m, n)
    w = 1 + 0.5 * torch.randn(n)
    y, h = normlab.add_rms_norm(x, r, w, 1e-6, layout="row")
    assert blocks == [n]
    h_ref = x.double() + r.double()
    assert_close(h, h_ref, msg="h")
    assert_close(y, ref.rms_norm(h_ref, w.double(), 1e-6), msg="y")


def test_block_row_offsets_int64_at_the_switch():
    """The block-row forward's int64 switch (tests/test_norm.py has the one-row kernel's): the
    width among the strides (a broadcast row), and a persistent grid's prefetch (one tile a
    program past the last) counted in."""
    from normlab.norms import block_row

    limit = config.INT32_OFFSET_LIMIT
    assert not config.row_offsets_int64(limit // 5, 0, 5)
    assert config.row_offsets_int64(limit // 5 + 1, 0, 5)
    tiles = limit // (64 * 8)  # (n_tiles + n_programs) tiles of 64 rows of 8 columns
    assert not block_row.tile_offsets_int64(tiles - 1 - 132, 132, 64, 8)
    assert block_row.tile_offsets_int64(tiles - 132, 132, 64, 8)


@pytest.mark.parametrize("is_rms", [True, False])
@pytest.mark.parametrize("m, n", [(1031, 5), (67, 33), (257, 130)])
def test_int64_and_int32_row_offsets_match_fp64(monkeypatch, is_rms, m, n):
    """The block-row kernels with the rules' int32 offsets and with int64 ones forced (the
    limit shrunk under the shape): the forward's launch takes int32 where they fit, the
    backward's only at tiny widths, and y, dx, dγ, dβ match fp64 either way."""
    from normlab import _launch
    from normlab.norms import block_row

    flags = {}

    def launch(fn, grid, *args, **kwargs):
        flags[fn.__name__] = kwargs.get("INT64_ROWS")
        return _launch.launch(fn, grid, *args, **kwargs)

    monkeypatch.setattr(block_row, "launch", launch)
    monkeypatch.setattr(config, "BLOCK_ROW_MAX_COLS", max(n, config.BLOCK_ROW_MAX_COLS))
    dtype = torch.bfloat16
    x = torch.randn(m, n).to(dtype)
    w = (1 + 0.5 * torch.randn(n)).to(dtype)
    b = None if is_rms else (0.5 * torch.randn(n)).to(dtype)
    gy = torch.randn(m, n).to(dtype)
    y_ref, grads_ref = _ref(x, w, b, 1e-5, is_rms, gy)
    for limit, int64 in ((config.INT32_OFFSET_LIMIT, False), (m * n // 2, True)):
        monkeypatch.setattr(config, "INT32_OFFSET_LIMIT", limit)
        y, mean, rstd = block_row.block_row_forward(x, w, b, 1e-5, is_rms)
        dx, dw, db = block_row.block_row_backward(gy, x, w, b, mean, rstd, is_rms)
        tiny = n < config.BLOCK_ROW_TINY_COLS
        assert flags == {"_block_row_fwd_kernel": int64,
                         "_block_row_bwd_kernel": int64 or not tiny}  # fmt: skip
        assert_close(y, y_ref, msg="y")
        for name, g, g_ref in zip(["dx", "dweight", "dbias"], (dx, dw, db), grads_ref,
                                  strict=False):  # fmt: skip
            assert_close(g, g_ref, reduce_len=m if name != "dx" else n, dtype=dtype, msg=name)


def test_recomputing_backward_prefetches_rows_up_to_32_columns():
    """The recomputing block-row backward prefetches its next tile at every width from 2 to 32
    columns in both norms (LayerNorm's 17-32 at 4 warps), not at one column, not past 32."""
    for is_rms in (True, False):
        assert not config.block_row_bwd_recompute_config(1, is_rms).prefetch
    for n in (2, 5, 7, 15, 16, 17, 31, 32):
        assert config.block_row_bwd_recompute_config(n, True).prefetch
        assert config.block_row_bwd_recompute_config(n, False).prefetch
    assert config.block_row_bwd_recompute_config(17, False) == config.block_row_bwd_config(
        17, num_warps=4, prefetch=True, maxnreg=0)
    assert config.block_row_bwd_recompute_config(17, True) == config.block_row_bwd_config(
        17, prefetch=True, maxnreg=0)
    for is_rms in (True, False):
        assert not config.block_row_bwd_recompute_config(33, is_rms).prefetch


def test_register_budget_is_the_register_file_over_the_resident_threads():
    """64K registers over programs_per_sm x warps x 32 threads, in steps of 8, at most 255."""
    assert config.register_budget(4, 4) == config.register_budget(8, 2) == 128
    assert config.register_budget(16, 1) == 128 and config.register_budget(32, 1) == 64
    assert config.register_budget(4, 3) == 168  # 65536 / 384 = 170.7, down to a step of 8
    assert config.register_budget(1, 1) == config.register_budget(2, 4) == 255


@pytest.mark.parametrize("n_cols", [768, 2048, 4096, 8192])
def test_fused_add_backward_compiles_within_its_planned_occupancy(n_cols):
    """The fused add's single-pass persistent backward takes the register budget of its planned
    programs per SM (``maxnreg``); the plain backward, a two-pass one and an explicit 0 take
    none; an explicit budget is kept."""
    cfg = config.norm_bwd_config("persistent", 4096, n_cols, fused_add=True, sm_count=132)
    assert not cfg.two_pass and cfg.prefetch
    assert cfg.maxnreg == config.register_budget(cfg.num_warps, cfg.programs_per_sm)
    assert config.norm_bwd_config("persistent", 4096, n_cols, sm_count=132).maxnreg is None
    assert config.norm_bwd_config("persistent", 4096, n_cols, fused_add=True, maxnreg=0,
                                  sm_count=132).maxnreg is None  # fmt: skip
    assert config.norm_bwd_config("persistent", 4096, n_cols, fused_add=True, maxnreg=96,
                                  sm_count=132).maxnreg == 96  # fmt: skip
    for strategy in ("atomic", "two_stage"):
        assert config.norm_bwd_config(strategy, 4096, n_cols, fused_add=True).maxnreg is None
    wide = config.norm_bwd_config("persistent", 4096, 32768, is_rms=False, fused_add=True)
    assert wide.two_pass and wide.maxnreg is None
    # one-warp tiles (unaligned rows): 32 programs a SM is the warp limit, not a register plan
    odd = config.norm_bwd_config("persistent", 4096, n_cols + 1, fused_add=True, aligned=False,
                                 one_warp=config.one_warp_rows(n_cols + 1, 1, 2), sm_count=132)
    assert (odd.num_warps == 1) == config.one_warp_rows(n_cols + 1, 1, 2)
    assert odd.maxnreg == (None if odd.num_warps == 1 else config.register_budget(
        odd.num_warps, odd.programs_per_sm))
    # LayerNorm's fused-add backward loads each tile in turn; RMSNorm's fused one prefetches
    # (up to 8192 columns), and LayerNorm's plain one where its row loop is not staged
    ln = config.norm_bwd_config("persistent", 4096, n_cols, is_rms=False, fused_add=True)
    assert not ln.prefetch and ln.maxnreg == config.register_budget(ln.num_warps,
                                                                     ln.programs_per_sm)
    plain = config.norm_bwd_config("persistent", 4096, n_cols, is_rms=False)
    assert plain.prefetch is not config.bwd_ln_staged(plain.block_cols, plain.block_rows, False,
                                                      False)  # fmt: skip
    assert config.norm_bwd_config("persistent", 4096, n_cols, is_rms=False, fused_add=True,
                                  prefetch=True).prefetch  # fmt: skip


def _spy_launches(monkeypatch, module):
    """(kernel, launch keywords) of every launch through ``module.launch`` from now on."""
    launches = []
    real = module.launch

    def spy(fn, grid, *args, **kwargs):
        launches.append((fn, kwargs))
        return real(fn, grid, *args, **kwargs)

    monkeypatch.setattr(module, "launch", spy)
    return launches


@pytest.mark.parametrize("budget", [False, True], ids=["off", "on"])
def test_block_row_backward_register_budget_rule(monkeypatch, budget):
    """With BLOCK_ROW_BWD_REGISTER_BUDGET (on by default) the block-row backward that loads
    stored statistics takes the register budget of its planned programs per SM (8 warps, 4 a SM:
    64); the recomputing one, one-warp tiles and an explicit 0 take none, an explicit cap is
    kept. Off, none."""
    monkeypatch.setattr(config, "BLOCK_ROW_BWD_REGISTER_BUDGET", budget)
    for n_cols in (16, 128, 256):
        cfg = config.block_row_bwd_config(n_cols)
        assert (cfg.num_warps, cfg.programs_per_sm) == (config.BLOCK_ROW_BWD_WARPS,
                                                        config.BLOCK_ROW_BWD_PROGRAMS_PER_SM)
        want = config.register_budget(cfg.num_warps, cfg.programs_per_sm) if budget else None
        assert cfg.maxnreg == want and (not budget or want == 64)
        for is_rms in (True, False):
            assert config.block_row_bwd_recompute_config(n_cols, is_rms).maxnreg is None
        assert config.block_row_bwd_config(n_cols, maxnreg=0).maxnreg is None
        assert config.block_row_bwd_config(n_cols, maxnreg=96).maxnreg == 96
        assert config.block_row_bwd_config(n_cols, one_warp=True).maxnreg is None
        halved = config.block_row_bwd_config(n_cols, programs_per_sm=2)
        assert halved.maxnreg == (config.register_budget(cfg.num_warps, 2) if budget else None)


def test_block_row_register_budget_is_on_by_default():
    assert config.BLOCK_ROW_BWD_REGISTER_BUDGET is True


@pytest.mark.parametrize("budget", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("n", [config.BLOCK_ROW_RECOMPUTE_MAX_COLS[False],
                               config.BLOCK_ROW_RECOMPUTE_MAX_COLS[False] + 1, 256])
def test_block_row_backward_launch_takes_the_budget(monkeypatch, budget, n):
    """The block-row backward's launch passes maxnreg exactly when the rule gives one: stored
    statistics (LayerNorm past its recompute width) in tiles of 8 warps, not recomputed ones.
    LayerNorm's gradients against fp64 on both sides of that switch (the interpreter ignores
    the option)."""
    monkeypatch.setattr(config, "BLOCK_ROW_BWD_REGISTER_BUDGET", budget)
    launches = _spy_launches(monkeypatch, block_row)
    m = 67
    capped = (budget and not config.block_row_recompute_stats(n, is_rms=False)
              and not config.one_warp_contiguous(n, element_size=4))  # 65: one warp, no cap
    x, gy = torch.randn(m, n), torch.randn(m, n)
    w, b = 1 + 0.1 * torch.randn(n), 0.1 * torch.randn(n)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = normlab.layer_norm(*leaves, layout="block_row")
    grads = torch.autograd.grad(y, leaves, gy)
    bwd = [kw for fn, kw in launches if fn.__name__ == "_block_row_bwd_kernel"]
    assert len(bwd) == 1 and bwd[0].get("maxnreg") == (64 if capped else None)
    refs = [t.double().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(ref.layer_norm(*refs, 1e-5), refs, gy.double())
    for got, exp in zip(grads, want, strict=True):
        assert_close(got, exp, dtype=torch.float32, reduce_len=m)


@pytest.mark.parametrize("is_rms", [True, False])
def test_fused_add_backward_launch_takes_the_budget(monkeypatch, is_rms):
    """The launch of add_rms_norm / add_layer_norm's backward passes maxnreg; the plain norm's
    does not. Both against fp64 (the interpreter ignores the option: the values are the
    kernels')."""
    launches = _spy_launches(monkeypatch, row)
    m, n = 37, 768
    x, r = torch.randn(m, n), torch.randn(m, n)
    w, b = 1 + 0.1 * torch.randn(n), 0.1 * torch.randn(n)
    gy, gh = torch.randn(m, n), torch.randn(m, n)
    leaves = [t.clone().requires_grad_() for t in (x, r, w, b)]
    xl, rl, wl, bl = leaves
    y, h = (normlab.add_rms_norm(xl, rl, wl) if is_rms
            else normlab.add_layer_norm(xl, rl, wl, bl))  # fmt: skip
    params = [wl] if is_rms else [wl, bl]
    grads = torch.autograd.grad((y, h), [xl, rl, *params], (gy, gh))
    bwd = [kw for fn, kw in launches if "bwd_persistent" in fn.__name__]
    cfg = config.norm_bwd_config("persistent", m, n, is_rms=is_rms, fused_add=True,
                                 sm_count=SMS)  # fmt: skip
    assert len(bwd) == 1 and bwd[0].get("maxnreg") == cfg.maxnreg == 128
    refs = [t.double().requires_grad_() for t in (x, r, w, b)]
    hd = refs[0] + refs[1]
    yd = (ref.rms_norm(hd, refs[2], 1e-6) if is_rms
          else ref.layer_norm(hd, refs[2], refs[3], 1e-5))  # fmt: skip
    want = torch.autograd.grad((yd, hd), [refs[0], refs[1], *refs[2:2 + len(params)]],
                               (gy.double(), gh.double()))  # fmt: skip
    for got, exp in zip(grads, want, strict=True):
        assert_close(got, exp, dtype=torch.float32, reduce_len=n)
    launches.clear()
    xl = x.clone().requires_grad_()
    y = normlab.rms_norm(xl, wl) if is_rms else normlab.layer_norm(xl, wl, bl)
    torch.autograd.grad(y, [xl], gy)
    bwd = [kw for fn, kw in launches if "bwd_persistent" in fn.__name__]
    assert len(bwd) == 1 and "maxnreg" not in bwd[0]


def test_prefetch_registers_rule(monkeypatch):
    """The prefetched tile's registers: three tiles (h, dy, dh) of 16 elements a thread for the
    fused add, two for the plain backward, at the rows' element size. With the bound on, only
    the fp32 fused add (48 > 32) loads each tile in turn; LayerNorm's fused add never
    prefetches; an explicit prefetch is kept. Off, the width alone decides."""
    assert config.prefetch_registers(2048, 4, 4, True) == 48
    assert config.prefetch_registers(2048, 4, 4, False) == 32
    assert config.prefetch_registers(2048, 4, 2, True) == 24
    assert config.prefetch_registers(8192, 16, 4, True) == 48  # 16 elements a thread again

    def plan(n_cols, elem_bytes, fused_add, is_rms=True, **kw):
        return config.norm_bwd_config("persistent", 4096, n_cols, is_rms=is_rms,
                                      fused_add=fused_add, elem_bytes=elem_bytes, sm_count=SMS,
                                      **kw)  # fmt: skip

    for bound in (False, True):
        monkeypatch.setattr(config, "NORM_BWD_PREFETCH_REGS_BOUND", bound)
        for n in (768, 1024, 2048, 4096, 8192):
            assert plan(n, 4, True).prefetch is not bound
            assert plan(n, 2, True).prefetch and plan(n, 4, False).prefetch
            assert plan(n, 2, False).prefetch and plan(n, 4, True, prefetch=True).prefetch
            assert not plan(n, 4, True, is_rms=False).prefetch
        assert not config.norm_bwd_config("persistent", 4096, 12288, fused_add=True,
                                          elem_bytes=2).prefetch  # fmt: skip


def test_fused_layer_norm_backward_of_one_program_prefetches():
    """LayerNorm's fused-add backward prefetches only where its tiles run in one program
    (norm_bwd_one_program): one row, and the rows of NORM_BWD_ONE_PROGRAM_TILES tiles; a tile
    more, it loads each tile in turn. Only the persistent single pass prefetches."""

    def plan(n_rows, n_cols=768, strategy="persistent"):
        return config.norm_bwd_config(strategy, n_rows, n_cols, is_rms=False, fused_add=True,
                                      sm_count=132)  # fmt: skip

    for n_cols in (768, 4096):
        tile = plan(1, n_cols).block_rows
        assert tile == 1 and plan(1, n_cols).prefetch
        most = max(m for m in range(1, 64) if config.norm_bwd_one_program(
            -(-m // plan(m, n_cols).block_rows)))  # fmt: skip
        assert plan(most, n_cols).prefetch
        assert not plan(most + 1, n_cols).prefetch
    assert not plan(1, strategy="two_stage").prefetch
    assert not plan(1, 16384).prefetch  # past the prefetch's width


@pytest.mark.parametrize("bound", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_fused_add_backward_launch_prefetch_by_registers(monkeypatch, bound, dtype):
    """The planned launch of add_rms_norm's backward prefetches unless the bound is on and its
    rows are fp32; the gradients match fp64 either way."""
    monkeypatch.setattr(config, "NORM_BWD_PREFETCH_REGS_BOUND", bound)
    launches = _spy_launches(monkeypatch, row)
    m, n = 41, 1031
    x, r, w = torch.randn(m, n), torch.randn(m, n), 1 + 0.1 * torch.randn(n)
    gy, gh = torch.randn(m, n), torch.randn(m, n)
    leaves = [t.to(dtype).requires_grad_() for t in (x, r, w)]
    y, h = normlab.add_rms_norm(*leaves)
    grads = torch.autograd.grad((y, h), leaves, (gy.to(dtype), gh.to(dtype)))
    bwd = [kw for fn, kw in launches if "bwd_persistent" in fn.__name__]
    assert len(bwd) == 1 and bwd[0]["PREFETCH"] is not (bound and dtype == torch.float32)
    refs = [t.to(dtype).double().requires_grad_() for t in (x, r, w)]
    hd = (refs[0] + refs[1]).to(dtype).double()  # y is the norm of the stored h
    want = torch.autograd.grad((ref.rms_norm(hd, refs[2], 1e-6), refs[0] + refs[1]), refs,
                               (gy.to(dtype).double(), gh.to(dtype).double()))  # fmt: skip
    for got, exp in zip(grads, want, strict=True):
        assert_close(got, exp, dtype=dtype, reduce_len=n)


def test_one_row_forward_warps_and_early_parameters_rule(monkeypatch):
    """One row a program, at any row count: up to NORM_FWD_ONE_WARP_MAX_BLOCK padded columns on
    one warp; w/b loaded with x wherever a thread holds at most
    NORM_FWD_EARLY_ANY_ROWS_MAX_PER_THREAD row values (beyond that, only in decode batches).
    At each switch, on and off; the planner's row counts are past the decode batches."""
    sms, rows = 132, 132 * 100
    for on in (True, False):
        monkeypatch.setattr(config, "NORM_FWD_ONE_WARP", on)
        monkeypatch.setattr(config, "NORM_FWD_EARLY_ANY_ROWS", on)
        for is_rms in (True, False):
            for n in (1, 37, 256):
                cfg = config.norm_fwd_config(n, is_rms, rows, sms)
                assert cfg.num_warps == (1 if on else 2) and cfg.early_params is on
            cfg = config.norm_fwd_config(257, is_rms, rows, sms)  # 512 on 2 warps: 8 a thread
            assert cfg.num_warps == 2 and cfg.block_size // 64 == 8 and cfg.early_params is on
            cfg = config.norm_fwd_config(513, False, rows, sms)  # 16 a thread: decode batches
            assert cfg.block_size // (32 * cfg.num_warps) == 16 and not cfg.early_params
            assert config.norm_fwd_config(513, False, 4 * sms, sms).early_params
    # an fp32 RMSNorm row of 513-1024 columns keeps its one warp and loads w after its sum
    assert not config.norm_fwd_config(1000, True, rows, sms, element_size=4).early_params


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("n", [37, 256, 257, 400])
def test_one_row_forward_rule_launch_against_fp64(monkeypatch, on, n):
    """The planned one-row forward past the decode batches (17 rows on the interpreter's 4 SMs):
    its warps and EARLY_PARAMS follow the rule, and y (with bias, offset and a fused add's h)
    matches fp64 either way."""
    monkeypatch.setattr(config, "NORM_FWD_ONE_WARP", on)
    monkeypatch.setattr(config, "NORM_FWD_EARLY_ANY_ROWS", on)
    launches = _spy_launches(monkeypatch, row)
    m = 4 * SMS + 1
    x, r = torch.randn(m, n) + 2.0, torch.randn(m, n)
    w, b = 0.5 * torch.randn(n), 0.1 * torch.randn(n)
    for is_rms in (True, False):
        launches.clear()
        if is_rms:
            y, h = normlab.add_rms_norm(x, r, w, offset=1.0)
        else:
            y, h = normlab.add_layer_norm(x, r, w, b, offset=1.0)
        (kw,) = [kw for fn, kw in launches if fn.__name__ == "_norm_fwd_kernel"]
        assert kw["num_warps"] == (1 if on and n <= 256 else 2)
        assert kw["EARLY_PARAMS"] is on
        hd = x.double() + r.double()
        want = (ref.rms_norm(hd, 1.0 + w.double(), 1e-6) if is_rms
                else ref.layer_norm(hd, 1.0 + w.double(), b.double(), 1e-5))  # fmt: skip
        assert_close(h, hd)
        assert_close(y, want, reduce_len=n)
        y = normlab.rms_norm(x, w) if is_rms else normlab.layer_norm(x, w, b)
        want = (ref.rms_norm(x.double(), w.double(), 1e-6) if is_rms
                else ref.layer_norm(x.double(), w.double(), b.double(), 1e-5))  # fmt: skip
        assert_close(y, want, reduce_len=n)


@pytest.mark.parametrize("m", [1, 4 * SMS + 1], ids=["decode", "past-decode"])
@pytest.mark.parametrize("n", [37, 400])
def test_early_parameters_keep_the_sign_of_zero(m, n):
    """With w and b loaded with x (EARLY_PARAMS) and no bias, y = xhat * w adds no 0.0: a zero x
    times a negative weight stays -0.0, as in torch's F.rms_norm."""
    x = torch.randn(m, n)
    x[:, ::3] = 0.0
    w = -(1 + torch.rand(n))
    y = normlab.rms_norm(x, w)
    want = torch.nn.functional.rms_norm(x, (n,), w, 1e-6)
    assert torch.equal(torch.signbit(y), torch.signbit(want))
    assert torch.signbit(y[:, ::3]).all()
    assert_close(y, ref.rms_norm(x.double(), w.double(), 1e-6), reduce_len=n)


def test_layer_norm_staged_backward_rule(monkeypatch):
    """LayerNorm's single pass over one-row tiles of NORM_BWD_LN_STAGED_COLS padded columns
    pipelines its row loop in NORM_BWD_LN_STAGES stages with no prefetch; narrower tiles of
    several rows, wider rows, RMSNorm, the fused add and explicit knobs keep theirs; the switch
    off, never."""
    def plan(n, is_rms=False, **kw):
        return config.norm_bwd_config("persistent", 16384, n, is_rms=is_rms, sm_count=132, **kw)

    lo, hi = config.NORM_BWD_LN_STAGED_COLS
    assert (lo, hi) == (2048, 8192) and config.NORM_BWD_LN_STAGES == 3
    for on in (True, False):
        monkeypatch.setattr(config, "NORM_BWD_LN_STAGED", on)
        for n in (1025, 2048, 2049, 4096, 5000, 8192):  # padded 2048-8192: one row a tile
            cfg = plan(n)
            assert cfg.block_rows == 1 and lo <= cfg.block_cols <= hi
            assert (cfg.loop_stages, cfg.prefetch) == ((3, False) if on else (1, True))
            assert (plan(n, True).loop_stages, plan(n, True).prefetch) == (1, True)  # RMSNorm
            assert plan(n, fused_add=True).loop_stages == 1
            assert (plan(n, prefetch=True).loop_stages, plan(n, loop_stages=2).loop_stages) \
                == (1, 2)  # fmt: skip
        assert plan(1024).block_rows == 2 and plan(1024).loop_stages == 1
        assert plan(8193).loop_stages == 1


@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
@pytest.mark.parametrize("dtype,n", [(torch.bfloat16, 2048), (torch.float32, 2049),
                                     (torch.bfloat16, 8192)], ids=str)  # fmt: skip
def test_layer_norm_staged_backward_launch_against_fp64(monkeypatch, on, dtype, n):
    """The planned LayerNorm backward at a staged width: LOOP_STAGES and PREFETCH follow the
    rule, and dx, dγ, dβ match fp64 (rows far from zero mean, more rows than programs, the
    exact static width 2048 and 8192 with x̂ unmasked, 2049 padded)."""
    monkeypatch.setattr(config, "NORM_BWD_LN_STAGED", on)
    launches = _spy_launches(monkeypatch, row)
    m = 10 * SMS + 1  # past the decode batches' backward by role
    x = (torch.randn(m, n) + 3.0).to(dtype).requires_grad_()
    w = (1 + 0.1 * torch.randn(n)).to(dtype).requires_grad_()
    b = (0.1 * torch.randn(n)).to(dtype).requires_grad_()
    dy = torch.randn(m, n).to(dtype)
    grads = torch.autograd.grad(normlab.layer_norm(x, w, b), (x, w, b), dy)
    (kw,) = [kw for fn, kw in launches if "bwd_persistent" in fn.__name__]
    assert (kw["LOOP_STAGES"], kw["PREFETCH"]) == ((3, False) if on else (1, True))
    leaves = [t.detach().double().requires_grad_() for t in (x, w, b)]
    want = torch.autograd.grad(ref.layer_norm(*leaves, 1e-5), leaves, dy.double())
    for got, exp, reduce_len in zip(grads, want, (n, m, m), strict=True):
        assert_close(got, exp, dtype=dtype, reduce_len=reduce_len)
