"""RMSNorm / LayerNorm kernels vs the fp64 reference (normlab.ref), under the interpreter on CPU.

Shapes are small (the interpreter runs one program at a time, ~1 ms each) but awkward: 1 row,
non-powers of two, ragged row tiles, and each exact switch point between code paths.
"""

import math

import pytest
import torch
import torch.nn.functional as F
import triton
from helpers import assert_close, latin

import normlab
from normlab import _runtime, ref
from normlab.norms import config as configs
from normlab.norms import row as K

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
STRATEGIES = ["atomic", "two_stage", "persistent"]
FWD_MAX = configs.NORM_FWD_MAX_BLOCK
BWD_MAX = {  # at 2 rows, the row count of the switch tests below
    True: configs.norm_bwd_single_pass_max_cols(True, 2),
    False: configs.norm_bwd_single_pass_max_cols(False, 2),
}


def _inputs(m, n, dtype, is_rms, *, affine=True, offset=0.0):
    x = (torch.randn(m, n) + offset).to(dtype)
    w = (1 + 0.5 * torch.randn(n)).to(dtype) if affine else None
    b = (0.5 * torch.randn(n)).to(dtype) if affine and not is_rms else None
    return x, w, b


def _d(t):
    return None if t is None else t.double()


def _ref_fwd(x, w, b, eps, is_rms):
    return ref.rms_norm(_d(x), _d(w), eps) if is_rms else ref.layer_norm(_d(x), _d(w), _d(b), eps)


def _fwd(x, w, b, eps, is_rms, **kw):
    return normlab.rms_norm(x, w, eps, **kw) if is_rms else normlab.layer_norm(x, w, b, eps, **kw)


# ---- forward ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(
    "shape",
    [
        (1, 1),  # one row, one column (LayerNorm: y = bias exactly)
        (1, 7),  # one row, odd width
        (3, 1000),  # non-power-of-two width, masked tail of the 1024 block
        (2, 4097),  # one past a power of two
        (2, FWD_MAX),  # widest single-block row
        (2, FWD_MAX + 1),  # first chunked (two-pass) row
        (2, 3, 37),  # 3-D input
    ],
    ids=str,
)
def test_forward_matches_fp64(dtype, is_rms, shape):
    n = shape[-1]
    x, w, b = _inputs(math.prod(shape[:-1]), n, dtype, is_rms)
    x = x.reshape(shape)
    y = _fwd(x, w, b, 1e-5, is_rms)
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, _ref_fwd(x, w, b, 1e-5, is_rms))


def test_params_apart_rule():
    """w/b take a layout of their own exactly where the rows are not one vector aligned and
    the row leaves a thread room for them (NORM_FWD_EARLY_MAX_PER_THREAD values)."""
    most = configs.NORM_FWD_EARLY_MAX_PER_THREAD
    assert configs.params_apart(1, 2, 8) and configs.params_apart(4, 2, most)
    assert not configs.params_apart(8, 2, 8)
    assert configs.params_apart(2, 4, 8) and not configs.params_apart(4, 4, 8)
    assert not configs.params_apart(1, 2, most + 1)
    rows = configs.NORM_FWD_PARAMS_APART_MAX_ROWS
    assert configs.params_apart(1, 2, 8, rows) and not configs.params_apart(1, 2, 8, rows + 1)


def test_shift_rule():
    """The shifted row (config.shift_vec) is taken where rows load element by element, are at
    least NORM_FWD_SHIFT_MIN_VECTORS vectors wide and more than a decode batch; not for rows of
    4- or 8-byte vectors, nor where y's rows start elsewhere in a vector than x's. Forced, it
    runs wherever a row holds one vector."""
    sms, many = 132, 100 * 132
    assert configs.shift_vec(1, 2, many, 825, sms, 825, 825) == 8
    assert configs.shift_vec(1, 4, many, 1031, sms, 1031, 1031) == 4  # fp32: 4 a vector
    assert configs.shift_vec(2, 2, many, 14486, sms, 14486, 14486) == 0  # 4-byte vectors
    assert configs.shift_vec(4, 2, many, 5924, sms, 5924, 5924) == 0  # 8-byte vectors
    assert configs.shift_vec(8, 2, many, 1024, sms, 1024, 1024) == 0  # aligned
    for n in (973, 8363):  # the decode batch's bound, either side
        rows = max(m for m in range(1, many) if configs.decode_rows(m, n, sms))
        assert configs.shift_vec(1, 2, rows, n, sms, n, n) == 0
        assert configs.shift_vec(1, 2, rows + 1, n, sms, n, n) == 8
    # a decode batch's row of NORM_FWD_DECODE_SHIFT_MIN_ELEMS is shifted, a vector less is not,
    # in elements whatever their size (fp32's row of 9383 is twice bf16's bytes, not shifted)
    big = configs.NORM_FWD_DECODE_SHIFT_MIN_ELEMS
    assert configs.shift_vec(1, 4, 33, 9383, sms, 9383, 9383) == 0
    for size, vec in ((2, 8), (4, 4)):
        n = big + 1
        assert configs.decode_rows(sms, n, sms)
        assert configs.shift_vec(1, size, sms, n, sms, n, n) == vec
        assert configs.shift_vec(1, size, 1, n, sms, n, n) == vec
        assert configs.shift_vec(1, size, sms, n - vec, sms, n - vec, n - vec) == 0
    least = configs.NORM_FWD_SHIFT_MIN_VECTORS * 8
    assert configs.shift_vec(1, 2, many, least, sms, least + 1, least + 1) == 8
    assert configs.shift_vec(1, 2, many, least - 1, sms, least - 1, least - 1) == 0
    assert configs.shift_vec(1, 2, many, 825, sms, 833, 825) == 8  # 8 apart: same place
    assert configs.shift_vec(1, 2, many, 825, sms, 828, 825) == 0
    assert configs.shift_vec(8, 2, 1, 8, sms, 8, 8, force=True) == 8
    assert configs.shift_vec(1, 2, 1, 7, sms, 7, 7, force=True) == 0  # under a vector


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_decode_batch_of_wide_rows_shifted_matches_fp64(monkeypatch, is_rms):
    """A decode batch (rows up to one a SM here) of odd rows of NORM_FWD_DECODE_SHIFT_MIN_ELEMS
    launches the shifted row, and a vector narrower the unshifted one; both match fp64."""
    monkeypatch.setattr(configs, "NORM_FWD_DECODE_SHIFT_MIN_ELEMS", 1024)
    launched = _record_forward_launches(monkeypatch, "SHIFT_VEC")
    sms = _runtime.sm_count()
    for n, want in ((1025, 8), (1017, 0)):
        launched.clear()
        x, w, b = _inputs(sms, n, torch.bfloat16, is_rms)
        assert configs.decode_rows(sms, n, sms)
        y = _fwd(x, w, b, 1e-5, is_rms, layout="row")
        assert launched == [want]
        assert_close(y, _ref_fwd(x, w, b, 1e-5, is_rms))


def test_shifted_params_rule(monkeypatch):
    """Shifted rows read w/b from shifted copies where x holds at least
    NORM_FWD_SHIFTED_PARAMS_MIN_BYTES (the copy's launch then is a small part of the call)."""
    least = configs.NORM_FWD_SHIFTED_PARAMS_MIN_BYTES
    assert configs.shifted_params(least) and not configs.shifted_params(least - 1)
    monkeypatch.setattr(configs, "NORM_FWD_SHIFTED_PARAMS", False)
    assert not configs.shifted_params(least)


@pytest.mark.parametrize("rows,copies", [(64, False), (65, True)], ids=str)
def test_shifted_params_launched_by_rule(monkeypatch, rows, copies):
    """The planned forward of odd rows launches the copy kernel exactly past the byte bound
    (lowered here to 65 rows of 825 bf16), and the shifted row reads the copies; fp64 agrees."""
    monkeypatch.setattr(configs, "NORM_FWD_SHIFTED_PARAMS_MIN_BYTES", 65 * 825 * 2)
    launched = _record_forward_launches(monkeypatch, "SHIFT_VEC", "SHIFTED_PARAMS")
    x, w, b = _inputs(rows, 825, torch.bfloat16, False)
    y = _fwd(x, w, b, 1e-5, False, layout="row")
    assert launched == [(8, copies)]
    assert_close(y, _ref_fwd(x, w, b, 1e-5, False))


def test_shift_switch_off(monkeypatch):
    """NORMLAB_NORM_SHIFT=0 (NORM_FWD_SHIFT): the rule never shifts; a forced shift still runs."""
    monkeypatch.setattr(configs, "NORM_FWD_SHIFT", False)
    assert configs.shift_vec(1, 2, 10**5, 825, 132, 825, 825) == 0
    assert configs.shift_vec(1, 2, 10**5, 825, 132, 825, 825, force=True) == 8


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("dtype,n", [(torch.float32, 4), (torch.float32, 5), (torch.float32, 1031),
                                     *((torch.bfloat16, n) for n in (8, 9, 63, 65, 127, 1031,
                                                                     2053))], ids=str)  # fmt: skip
@pytest.mark.parametrize("copies", [False, True], ids=["params-loaded", "params-copied"])
def test_shifted_row_matches_fp64(dtype, is_rms, n, copies):
    """row._shifted_row forced on 9 rows of an odd (or one-vector) width, so that the heads take
    every length: a row of one vector or less than two, primes, one past powers of two; w and b
    loaded at the shifted columns or read from their shifted copies (_shift_params_kernel). y,
    the statistics, an offset and a bias against fp64; a NaN propagates to its row only."""
    x, w, b = _inputs(9, n, dtype, is_rms, offset=3.0)
    x[4, n - 1] = float("nan")
    y, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms, offset=0.5, shift=True,
                                   shifted_params=copies)  # fmt: skip
    want = (ref.rms_norm(_d(x), _d(w) + 0.5, 1e-5) if is_rms
            else ref.layer_norm(_d(x), _d(w) + 0.5, _d(b), 1e-5))  # fmt: skip
    assert torch.isnan(y[4]).all() and not torch.isnan(y[torch.arange(9) != 4]).any()
    keep = torch.arange(9) != 4
    assert_close(y[keep], want[keep])
    xd = _d(x)[keep]
    centred = xd if is_rms else xd - xd.mean(-1, keepdim=True)
    assert_close(rstd[keep], (centred.pow(2).mean(-1) + 1e-5).rsqrt().float())
    if not is_rms:
        assert_close(mean[keep], xd.mean(-1).float())


@pytest.mark.parametrize("pad,shifted", [(8, True), (3, False)], ids=["stride+8", "stride+3"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_shift_launched_on_row_strided_input(monkeypatch, pad, shifted, is_rms):
    """A row-strided x (rows ``pad`` elements apart beyond the width) shifts only where its rows
    start as far into a vector as y's contiguous rows (config.shift_vec), and matches fp64 either
    way. 17 rows: past the interpreter's decode batch (4 SMs, 4 rows a SM)."""
    launched = _record_forward_launches(monkeypatch, "SHIFT_VEC")
    n = 301
    x, w, b = _inputs(17, n + pad, torch.bfloat16, is_rms)
    x = x[:, :n]
    y = _fwd(x, w[:n], None if b is None else b[:n], 1e-5, is_rms, layout="row")
    assert launched == [8 if shifted else 0]
    assert_close(y, _ref_fwd(x, w[:n], None if b is None else b[:n], 1e-5, is_rms))


@pytest.mark.parametrize("n,rows,want", [(825, 17, 8), (825, 16, 0), (832, 17, 0),
                                         (826, 17, 0), (63, 17, 0)], ids=str)  # fmt: skip
def test_shift_launched_by_rule(monkeypatch, n, rows, want):
    """The planned one-row forward launches the shifted row exactly where the rule says: odd
    widths past the decode batch (16 rows here), not aligned or 4-byte rows, nor narrow ones."""
    launched = _record_forward_launches(monkeypatch, "SHIFT_VEC")
    x, w, _ = _inputs(rows, n, torch.bfloat16, True)
    y = normlab.rms_norm(x, w, 1e-6, layout="row")
    assert launched == [want]
    assert_close(y, ref.rms_norm(_d(x), _d(w), 1e-6))


def test_bwd_shift_rule(monkeypatch):
    """The backward's one-row tiles take the shifted kernel (config.bwd_shift_vec) past
    NORM_BWD_SHIFT_MIN_COLS, aligned or not; forced, wherever a row holds a vector and the row
    strides agree modulo it; never where they do not; NORMLAB_NORM_BWD_SHIFT=0 leaves the forced
    path only."""
    least = configs.NORM_BWD_SHIFT_MIN_COLS + 1
    for n in (least, 9693, 12288, 16384):
        assert configs.bwd_shift_vec(2, n, (n,) * 4) == 8
        assert configs.bwd_shift_vec(4, n, (n,) * 4) == 4  # fp32: 4 a vector
    assert configs.bwd_shift_vec(2, least - 1, (least - 1,) * 4) == 0
    assert configs.bwd_shift_vec(2, 37, (37,) * 4) == 0
    assert configs.bwd_shift_vec(2, 37, (37,) * 4, force=True) == 8
    assert configs.bwd_shift_vec(2, 7, (7,) * 4, force=True) == 0  # under a vector
    assert configs.bwd_shift_vec(2, least, (least + 8, least, least, least)) == 8  # 8 apart
    assert configs.bwd_shift_vec(2, least, (least + 3, least, least, least), force=True) == 0
    assert configs.bwd_shift_vec(4, least, (least + 4, least, least, least)) == 4
    monkeypatch.setattr(configs, "NORM_BWD_SHIFT", False)
    assert configs.bwd_shift_vec(2, least, (least,) * 4) == 0
    assert configs.bwd_shift_vec(2, least, (least,) * 4, force=True) == 8


def test_bwd_liger_order_rule(monkeypatch):
    """RMSNorm's vector-aligned one-row tiles run in Liger-Kernel's order where the shifted tile
    would hold more than NORM_BWD_SHIFT_MAX_PER_THREAD elements a thread on
    NORM_BWD_SHIFT_WARPS warps: past 12288 columns (bf16 and fp32 alike), not at it; never for
    LayerNorm or rows not vector aligned; the switch off, never."""
    assert configs.NORM_BWD_SHIFT_MAX_PER_THREAD == 12288 // (32 * configs.NORM_BWD_SHIFT_WARPS)
    for n in (12296, 14336, 16376, 16384):
        assert configs.bwd_liger_order(n, True, 8, 2)
        assert not configs.bwd_liger_order(n, False, 8, 2)  # LayerNorm
        assert not configs.bwd_liger_order(n, True, 1, 2)  # rows not vector aligned
    for n in (8192, 9693, 12288):
        assert not configs.bwd_liger_order(n, True, 8, 2)
    assert not configs.bwd_liger_order(12288, True, 4, 4)  # fp32: 8192 + 4096 as well
    assert configs.bwd_liger_order(12292, True, 4, 4)
    assert not configs.bwd_liger_order(12292, True, 2, 4)
    monkeypatch.setattr(configs, "NORM_BWD_SHIFT_MAX_PER_THREAD", 64)  # the quantity decides
    assert not configs.bwd_liger_order(16384, True, 8, 2)
    monkeypatch.setattr(configs, "NORM_BWD_SHIFT_MAX_PER_THREAD", 48)
    monkeypatch.setattr(configs, "NORM_BWD_LIGER_ORDER", False)
    assert not configs.bwd_liger_order(16384, True, 8, 2)


# 19 rows over 16 programs, some two rows: one vector + 1, primes, one past a power of two.
@pytest.mark.parametrize("dtype,is_rms,n,fused,has_w", [
    (torch.bfloat16, True, 9, False, True), (torch.bfloat16, True, 37, True, True),
    (torch.bfloat16, False, 37, True, True), (torch.float32, True, 97, True, False),
    (torch.float32, False, 70, False, True), (torch.bfloat16, True, 1031, True, True)],
    ids=str)  # fmt: skip
def test_liger_order_backward_matches_fp64(monkeypatch, dtype, is_rms, n, fused, has_w):
    """The single pass in Liger-Kernel's order forced (16 programs, w loaded every row): dx, dw
    and db against fp64 with an offset, LayerNorm's bias, no weight, the fused add's dh; the
    launch unshifted, without a prefetch."""
    launched = _record_backward_launches(monkeypatch, "LIGER_ORDER", "SHIFT_VEC", "PREFETCH")
    x, w, b = _inputs(19, n, dtype, is_rms, offset=2.0)
    dy = torch.randn(19, n).to(dtype)
    dh = torch.randn(19, n).to(dtype) if fused else None
    if has_w:
        _check_shifted_backward(x, dy, w, b, is_rms, dh, liger_order=True, block_rows=1,
                                programs_per_sm=4)
    else:
        _, mean, rstd = K.norm_forward(x, None, None, 1e-5, is_rms, shift=False)
        dx, dw, _ = K.norm_backward(dy, x, None, None, mean, rstd, is_rms, dh=dh,
                                    liger_order=True, block_rows=1, programs_per_sm=4)  # fmt: skip
        rdx, _, _ = ref.norm_backward(_d(dy), _d(x), None, None, 1e-5, is_rms)
        assert dw is None
        assert_close(dx, rdx + _d(dh) if fused else rdx, msg="dx")
    assert launched == [(16, True, 0, False)]


def test_liger_order_refuses_what_it_cannot_run():
    """liger_order=True with a shift, a prefetch or a two-pass plan is a clear error."""
    x, w, _ = _inputs(8, 64, torch.float32, True)
    dy = torch.randn(8, 64)
    _, mean, rstd = K.norm_forward(x, w, None, 1e-5, True)
    for kw in ({"shift": True}, {"prefetch": True}, {"two_pass": True},
               {"strategy": "two_stage"}):  # fmt: skip
        with pytest.raises(ValueError, match="liger_order"):
            K.norm_backward(dy, x, w, None, mean, rstd, True, liger_order=True, **kw)


def test_bwd_shift_programs_rule():
    """The shifted grid rounds down to a multiple of the vector, and is taken only where that
    adds at most NORM_BWD_SHIFT_MAX_ROW_GROWTH to the rows a program walks (forced: any grid of
    a vector or more)."""
    assert configs.bwd_shift_programs(132, 27492, 8) == 128
    assert configs.bwd_shift_programs(132, 27492, 4) == 132
    assert configs.bwd_shift_programs(100, 100, 8) == 0  # 2 rows a program instead of 1
    assert configs.bwd_shift_programs(100, 100, 8, force=True) == 96
    assert configs.bwd_shift_programs(7, 1000, 8, force=True) == 0
    growth = configs.NORM_BWD_SHIFT_MAX_ROW_GROWTH
    rows = 132 * 16  # 16 rows a program planned; 128 programs walk 17 = 16 * (1 + 1/16)
    assert growth == 1 / 16 and configs.bwd_shift_programs(132, rows, 8) == 128
    assert configs.bwd_shift_programs(132, 132 * 15, 8) == 0  # 15 -> 16: more than 1/16


def test_bwd_body_blocks_rule(monkeypatch):
    """The shifted body in two blocks where they pad the row less than next_pow2; the first alone
    where the rest is under a vector; one block at powers of two and where two pad as much."""
    assert configs.bwd_body_blocks(12288, 8) == (8192, 4096)
    assert configs.bwd_body_blocks(9693, 8) == (8192, 2048)
    assert configs.bwd_body_blocks(8363, 8) == (8192, 256)
    assert configs.bwd_body_blocks(8200, 8) == (8192, 8)
    assert configs.bwd_body_blocks(8199, 8) == (8192, 0)  # the rest in the tail
    assert configs.bwd_body_blocks(14487, 8) == (16384, 0)  # 8192 + 8192 pads as much
    assert configs.bwd_body_blocks(16384, 8) == (16384, 0)
    assert configs.bwd_body_blocks(44, 8) == (32, 16)
    assert configs.bwd_body_blocks(70, 4) == (64, 8)
    monkeypatch.setattr(configs, "NORM_BWD_TWO_BODY_BLOCKS", False)
    assert configs.bwd_body_blocks(12288, 8) == (16384, 0)


def _record_backward_launches(monkeypatch, *keys):
    """Launches of the persistent single-pass backward kernels from now on: (grid size, then
    the launch keywords ``keys``) each (_record_launches)."""
    return _record_launches(monkeypatch, ("_norm_bwd_persistent_kernel",
                                          "_norm_bwd_persistent_static_kernel"), keys, grid=True)


def _check_shifted_backward(x, dy, w, b, is_rms, dh=None, **kw):
    """norm_backward (offset 0.5, with dh the fused add's) against fp64: dx, dw, db."""
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms, offset=0.5, shift=False)
    dx, dw, db = K.norm_backward(dy, x, w, b, mean, rstd, is_rms, offset=0.5, dh=dh, **kw)
    rdx, rdw, rdb = ref.norm_backward(_d(dy), _d(x), _d(w) + 0.5, _d(b), 1e-5, is_rms)
    if dh is not None:
        rdx = rdx + _d(dh)
    m = x.shape[0]
    assert_close(dx, rdx, msg="dx")
    assert_close(dw, rdw, reduce_len=m, msg="dweight")
    if b is not None:
        assert_close(db, rdb, reduce_len=m, msg="dbias")


# 19 rows over 16 programs: every head length (rows r and r + 16 share one), some programs two
# rows. One vector + 1, primes, one past a power of two; 44 (bf16) and 70 (fp32) in two blocks.
@pytest.mark.parametrize("dtype,is_rms,n,fused,body_b", [
    (torch.bfloat16, True, 9, False, 0), (torch.bfloat16, False, 37, True, 0),
    (torch.bfloat16, True, 44, True, 16), (torch.bfloat16, False, 44, False, 16),
    (torch.float32, True, 70, False, 8), (torch.float32, False, 97, True, 0),
    (torch.bfloat16, False, 1031, False, 0)], ids=str)  # fmt: skip
def test_shifted_backward_matches_fp64(monkeypatch, dtype, is_rms, n, fused, body_b):
    """row._shifted_bwd_rows forced (16 programs, paired partial rows): dx, dw and db against
    fp64 with an offset, LayerNorm's bias and the fused add's dh; the launch shifted with the
    planned body blocks."""
    launched = _record_backward_launches(monkeypatch, "SHIFT_VEC", "BODY_B")
    x, w, b = _inputs(19, n, dtype, is_rms, offset=2.0)
    dy = torch.randn(19, n).to(dtype)
    dh = torch.randn(19, n).to(dtype) if fused else None
    _check_shifted_backward(x, dy, w, b, is_rms, dh, shift=True, programs_per_sm=4)
    assert launched == [(16, 16 // x.element_size(), body_b)]


@pytest.mark.parametrize("pad,vec", [(8, 8), (3, 0)], ids=["stride+8", "stride+3"])
def test_shifted_backward_needs_strides_alike(monkeypatch, pad, vec):
    """A row-strided x shifts only where its rows start as far into a vector as dy's and dx's
    (forced here); gradients match fp64 either way."""
    launched = _record_backward_launches(monkeypatch, "SHIFT_VEC")
    n = 53
    x, w, _ = _inputs(19, n + pad, torch.bfloat16, True)
    x = x[:, :n]
    dy = torch.randn(19, n).to(torch.bfloat16)
    _check_shifted_backward(x, dy, w[:n], None, True, shift=True, programs_per_sm=4)
    assert [shift for _, shift in launched] == [vec]


@pytest.mark.parametrize("n,want", [(8192, (0, 0, 8192, False)), (8193, (8, 0, 8192, False)),
                                    (8200, (8, 8, 8192, False)), (12288, (8, 4096, 8192, False)),
                                    (12296, (0, 0, 16384, True))], ids=str)  # fmt: skip
def test_shifted_backward_launched_by_rule(monkeypatch, n, want):
    """Planned on 16 SMs (16 rows: one a program), the RMSNorm backward's one-row tiles take the
    shifted kernel on 8 warps just past NORM_BWD_SHIFT_MIN_COLS, in the body blocks of
    config.bwd_body_blocks, and the static kernel at it; one vector past 12288 columns, the
    unshifted kernel in Liger-Kernel's order on NORM_BWD_LIGER_ORDER_WARPS warps; fp64 agrees.
    (The decode batches' roles aside: at this scale 16 rows are one.)"""
    monkeypatch.setattr(_runtime, "sm_count", lambda *args: 16)
    monkeypatch.setattr(configs, "NORM_BWD_ROLES", False)
    launched = _record_backward_launches(monkeypatch, "SHIFT_VEC", "BODY_B", "BLOCK_COLS",
                                         "LIGER_ORDER", "num_warps")  # fmt: skip
    x, w, _ = _inputs(16, n, torch.bfloat16, True)
    x.requires_grad_()
    w.requires_grad_()
    dy = torch.randn(16, n).to(torch.bfloat16)
    normlab.rms_norm(x, w, 1e-6, layout="row").backward(dy)
    warps = (configs.NORM_BWD_SHIFT_WARPS if want[0] else
             configs.NORM_BWD_LIGER_ORDER_WARPS if want[3] else 16)  # fmt: skip
    assert launched == [(16, *want, warps)]
    rdx, rdw, _ = ref.norm_backward(_d(dy), _d(x.detach()), _d(w.detach()), None, 1e-6, True)
    assert_close(x.grad, rdx, msg="dx")
    assert_close(w.grad, rdw, reduce_len=16, msg="dweight")


def test_rms_fp32_one_warp_rule():
    """fp32 RMSNorm rows padding to NORM_FWD_RMS_FP32_ONE_WARP_COLS run one row a program on one
    warp, beyond a decode batch and without a fused add; no row tile is planned for them. Not
    LayerNorm, 2-byte rows, nor the padded widths either side."""
    top, sms, many = configs.NORM_FWD_RMS_FP32_ONE_WARP_COLS, 132, 10**5
    for n in (top // 2 + 1, 768, top):
        assert configs.norm_fwd_config(n, True, many, sms, element_size=4) == (
            configs.NormFwdConfig(top, 1))
        assert configs.plan(True, 4096, n, "auto", "auto", sms, True, 4).fwd_tile is None
        assert configs.norm_fwd_config(n, False, many, sms, element_size=4).num_warps > 1
        assert configs.norm_fwd_config(n, True, many, sms, element_size=2).num_warps > 1
        assert configs.norm_fwd_config(n, True, many, sms, True, 4).num_warps > 1  # fused add
        decode = max(m for m in range(1, many) if configs.decode_rows(m, n, sms))
        assert configs.norm_fwd_config(n, True, decode, sms, element_size=4).early_params
        assert configs.norm_fwd_config(n, True, decode + 1, sms, element_size=4).num_warps == 1
    for n in (top // 2, top + 1):
        assert configs.norm_fwd_config(n, True, many, sms, element_size=4).num_warps > 1


@pytest.mark.parametrize("n", [513, 768, 1000, 1024], ids=str)
def test_rms_fp32_one_warp_launched(monkeypatch, n):
    """Planned on the interpreter's 4 SMs (17 rows: past the decode batch), the fp32 RMSNorm
    forward launches one warp a row, one block, and matches fp64."""
    launched = _record_forward_launches(monkeypatch, "num_warps", "BLOCK_SIZE")
    x, w, _ = _inputs(17, n, torch.float32, True)
    y = normlab.rms_norm(x, w, 1e-6)
    assert launched == [(1, 1024)]
    assert_close(y, ref.rms_norm(_d(x), _d(w), 1e-6))


@pytest.mark.parametrize("n", [825, 8363, 1024])
@pytest.mark.parametrize("is_rms,bias", [(True, False), (False, False), (False, True)],
                         ids=["rms", "ln-weight", "ln-weight-bias"])  # fmt: skip
def test_params_apart_launched_per_parameter_rows(monkeypatch, n, is_rms, bias):
    """The planned forward loads its parameter row apart exactly where the rows are not vector
    aligned and there is one parameter row: LayerNorm's w and b stay in x's layout (two rows
    apart measured slower). The output matches fp64 either way."""
    launched = _record_forward_launches(monkeypatch, "PARAMS_APART")
    x, w, b = _inputs(3, n, torch.bfloat16, is_rms)
    b = b if bias else None
    y = _fwd(x, w, b, 1e-5, is_rms, layout="row")
    cfg = configs.norm_fwd_config(n, is_rms)
    one_row = cfg.block_size // (32 * cfg.num_warps) <= configs.NORM_FWD_EARLY_MAX_PER_THREAD
    assert launched == [n % 8 != 0 and one_row and not bias]
    want = (ref.rms_norm(_d(x), _d(w), 1e-5) if is_rms
            else ref.layer_norm(_d(x), _d(w), None if b is None else _d(b), 1e-5))  # fmt: skip
    assert_close(y, want)


@pytest.mark.parametrize("apart", [False, True], ids=["params-together", "params-apart"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("n,block,early", [(825, None, False), (825, None, True),
                                           (1000, None, False), (1283, 512, False)], ids=str)
def test_forward_params_layout_matches_fp64(apart, is_rms, n, block, early):
    """The one-row forward with w/b in x's layout or in one of their own (config.params_apart):
    one block with w/b loaded after the sums or early, or looped chunks (block 512); odd and
    aligned widths, offset and bias in play."""
    x, w, b = _inputs(5, n, torch.bfloat16, is_rms)
    y, _, rstd = K.norm_forward(x, w, b, 1e-5, is_rms, offset=0.5, block_size=block,
                                early_params=early, params_apart=apart)  # fmt: skip
    want = (ref.rms_norm(_d(x), _d(w) + 0.5, 1e-5) if is_rms
            else ref.layer_norm(_d(x), _d(w) + 0.5, _d(b), 1e-5))  # fmt: skip
    assert_close(y, want)
    centred = _d(x) if is_rms else _d(x) - _d(x).mean(-1, keepdim=True)
    assert_close(rstd, (centred.pow(2).mean(-1) + 1e-5).rsqrt().float())


@pytest.mark.parametrize("n", [37, 48], ids=["ragged-chunks", "even-chunks"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_forward_chunked_statistics(is_rms, n):
    """Force the chunk loop on a narrow row (block 16: a ragged last chunk at 37 columns, three
    whole chunks and no predicates at 48); a large mean offset checks that the shifted sums keep
    LayerNorm's variance accurate."""
    x, w, b = _inputs(5, n, torch.float32, is_rms, offset=300.0)
    y, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms, block_size=16, num_warps=1)
    xd = x.double()
    mu = torch.zeros(5, dtype=torch.float64) if is_rms else xd.mean(-1)
    var = xd.pow(2).mean(-1) if is_rms else xd.var(-1, unbiased=False)
    assert_close(rstd, torch.rsqrt(var + 1e-5), dtype=torch.float32)
    if not is_rms:
        assert_close(mean, mu)
    else:
        assert mean is None
    assert_close(
        y, _ref_fwd(x, w, b, 1e-5, is_rms), dtype=torch.float16
    )  # fp32 var cancels ~3 digits


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_forward_without_parameters(is_rms):
    x, _, _ = _inputs(4, 100, torch.float32, is_rms, affine=False)
    assert_close(_fwd(x, None, None, 1e-6, is_rms), _ref_fwd(x, None, None, 1e-6, is_rms))


def test_forward_mixed_param_dtype():
    """bf16 activations with fp32 weights (QuACK's setup): output in x's dtype."""
    x = torch.randn(3, 50).bfloat16()
    w = torch.randn(50)
    y = normlab.rms_norm(x, w)
    assert y.dtype == torch.bfloat16
    assert_close(y, ref.rms_norm(x.double(), w.double(), 1e-6))


def _small_variance_rows(n, dtype):
    """Rows whose variance (LayerNorm) or mean square (RMSNorm) is below or near eps = 1e-5, so
    that eps sets rstd: all zeros, constants, a constant plus 1e-4 noise, 3e-3 noise (mean
    square ~ eps), 1e-3 noise, and one ordinary row."""
    noise = torch.randn(7, n)
    rows = torch.stack([
        torch.zeros(n), torch.full((n,), 0.75), torch.full((n,), -3.0),
        0.01 + 1e-4 * noise[3], 3e-3 * noise[4], 1e-3 * noise[5], noise[6],
    ])  # fmt: skip
    return rows.to(dtype)


LAYOUT_STRATEGIES = [("row", s) for s in STRATEGIES] + [("block_row", "persistent")]


@pytest.mark.parametrize("n", [48, 100], ids=["48-cols", "100-cols"])
@pytest.mark.parametrize("layout,strategy", LAYOUT_STRATEGIES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_eps_dominated_rows(is_rms, dtype, layout, strategy, n):
    """Rows where eps sets the scale: y, dx, dweight, dbias against fp64 at every strategy and
    layout (block-row at 48 columns recomputes the statistics in the backward; LayerNorm at
    100 columns stores them). An eps off by any factor shows in y (small-noise rows) and in dx
    (constant rows: dx = rstd * (w * dy - mean(w * dy)), rstd = 1 / sqrt(eps))."""
    x = _small_variance_rows(n, dtype)
    m = x.shape[0]
    _, w, b = _inputs(m, n, dtype, is_rms)
    dy = torch.randn(m, n).to(dtype)
    params = [t.requires_grad_(True) for t in (x, w, b) if t is not None]
    y = _fwd(x, w, b, 1e-5, is_rms, strategy=strategy, layout=layout)
    grads = torch.autograd.grad(y, params, dy)
    assert_close(y, _ref_fwd(x, w, b, 1e-5, is_rms), msg="y")
    expect = ref.norm_backward(dy.double(), x.double(), _d(w), _d(b), 1e-5, is_rms)
    for got, want, name in zip(grads, expect, ("dx", "dweight", "dbias"), strict=False):
        assert_close(got, want, reduce_len=None if name == "dx" else m, msg=name)


@pytest.mark.parametrize("n", [37, 48])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_looped_forward_eps_dominated_rows(is_rms, n):
    """The looped row (chunks of 16 here, a ragged tail at 37) where eps sets rstd: a wrong or
    missing eps in its statistics shows in rstd and y (the one-block rows above do not reach
    it)."""
    x = _small_variance_rows(n, torch.float32)
    _, w, b = _inputs(x.shape[0], n, torch.float32, is_rms)
    y, _, rstd = K.norm_forward(x, w, b, 1e-5, is_rms, block_size=16, num_warps=1)
    xd = x.double()
    var = xd.pow(2).mean(-1) if is_rms else xd.var(-1, unbiased=False)
    assert_close(rstd, torch.rsqrt(var + 1e-5), dtype=torch.float32, msg="rstd")
    assert_close(y, _ref_fwd(x, w, b, 1e-5, is_rms), msg="y")


def test_forward_launches_int64_rows_past_the_limit(monkeypatch):
    """The launcher hands the kernel config.row_offsets_int64's answer: int64 row offsets from
    the rows whose last offset reaches INT32_OFFSET_LIMIT (lowered here to 8 rows of 64)."""
    seen = []
    real = K.launch

    def spy(fn, grid, *args, **kw):
        seen.append(kw.get("INT64_ROWS"))
        return real(fn, grid, *args, **kw)

    monkeypatch.setattr(K, "launch", spy)
    monkeypatch.setattr(configs, "INT32_OFFSET_LIMIT", 8 * 64)
    for m in (8, 7):
        x = torch.randn(m, 64)
        y, _, _ = K.norm_forward(x, torch.ones(64), None, 1e-5, True)
        assert_close(y, _ref_fwd(x, torch.ones(64), None, 1e-5, True))
    assert seen == [True, False]


# ---- backward: every strategy ------------------------------------------------------------------


def _check_backward(m, n, dtype, is_rms, strategy, *, affine=True, **kw):
    x, w, b = _inputs(m, n, dtype, is_rms, affine=affine)
    dy = torch.randn(m, n).to(dtype)
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms)
    dx, dw, db = K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy=strategy, **kw)
    rdx, rdw, rdb = ref.norm_backward(dy.double(), x.double(), _d(w), _d(b), 1e-5, is_rms)
    assert dx.dtype == dtype
    assert_close(dx, rdx, msg="dx")
    if affine:
        assert dw.dtype == w.dtype
        assert_close(dw, rdw, reduce_len=m, msg="dweight")
    else:
        assert dw is None
    if b is not None:
        assert_close(db, rdb, reduce_len=m, msg="dbias")
    else:
        assert db is None
    return dx, dw, db


# (1, 7): one row; (37, 100): ragged, 37 rows = 9 tiles of 4 + 1 row, 4 persistent programs
# grid-stride; (3, 1000): a non-power-of-two width. Each strategy, norm and shape with one dtype
# in rotation: every (strategy, dtype) and (norm, dtype) pair runs.
@pytest.mark.parametrize("strategy,is_rms,m,n,dtype", latin(
    STRATEGIES, [True, False], [(1, 7), (37, 100), (3, 1000)], DTYPES))
def test_backward_matches_fp64(strategy, dtype, is_rms, m, n):
    _check_backward(m, n, dtype, is_rms, strategy)


@pytest.mark.slow  # rows of 8193-16385 columns; test_backward_two_pass_small_tile is the quick one
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("past", [0, 1], ids=["widest-single-pass", "first-two-pass"])
def test_backward_single_two_pass_switch(strategy, is_rms, past):
    """The default config switches to the two-pass kernels exactly past the per-norm threshold
    (bf16 only: the dtype paths are covered above; these widths are slow in the interpreter)."""
    n = BWD_MAX[is_rms] + past
    assert configs.norm_bwd_config(strategy, 2, n, is_rms=is_rms).two_pass == bool(past)
    _check_backward(2, n, torch.bfloat16, is_rms, strategy)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("m,n,block_rows", [(1, 7, 1), (37, 100, 4), (130, 33, 1)], ids=str)
def test_backward_prefetch(is_rms, m, n, block_rows):
    """The persistent loop with the next tile prefetched: right against fp64, and bitwise the
    same as without the prefetch (ragged row tiles; 1 row: the prefetch reads nothing)."""
    _dx, _dw, _db = _check_backward(m, n, torch.bfloat16, is_rms, "persistent", prefetch=True,
                                    block_rows=block_rows)
    x, w, b = _inputs(m, n, torch.bfloat16, is_rms)
    dy = torch.randn(m, n).to(torch.bfloat16)
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms)
    outs = [K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy="persistent",
                            prefetch=p, block_rows=block_rows) for p in (True, False)]
    for a, c in zip(*outs, strict=True):
        assert (a is None and c is None) or torch.equal(a, c)


@pytest.mark.parametrize("paired", [False, True], ids=["plain-sums", "paired-sums"])
def test_backward_layer_norm_paired_row_sums(monkeypatch, paired):
    """LayerNorm's constant-width backward with its two row sums in one paired reduction (the
    GPU's path) and as two plain sums (the interpreter's default), both against fp64."""
    monkeypatch.setattr(configs, "NORM_BWD_STATIC_COLS", (33, 40))
    monkeypatch.setattr(K, "PAIRED_ROW_SUMS", paired)
    _check_backward(9, 37, torch.float32, False, "persistent")


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("n", [32, 33, 40, 41], ids=["below", "lowest", "highest", "above"])
def test_backward_constant_width_switch(monkeypatch, is_rms, n):
    """The single-pass persistent backward runs its constant-width kernel (LayerNorm's row sums
    paired) inside NORM_BWD_STATIC_COLS and the runtime-width one outside: right against fp64 at
    both edges (a 33-40 stand-in range keeps the interpreter fast)."""
    lo, hi = configs.NORM_BWD_STATIC_COLS
    assert [configs.norm_bwd_static_width(c) for c in (lo - 1, lo, hi, hi + 1)] == [
        False, True, True, False]  # fmt: skip
    monkeypatch.setattr(configs, "NORM_BWD_STATIC_COLS", (33, 40))
    launched = []

    def recording(name):
        real = getattr(K, name)

        class Recording:
            def __getitem__(self, grid):
                launched.append(name)
                return real[grid]

        return Recording()

    for name in ("_norm_bwd_persistent_kernel", "_norm_bwd_persistent_static_kernel"):
        monkeypatch.setattr(K, name, recording(name))
    _check_backward(37, n, torch.bfloat16, is_rms, "persistent", prefetch=True, block_rows=4)
    _check_backward(5, n, torch.float32, is_rms, "persistent", prefetch=False)
    static = 33 <= n <= 40
    kernel = "_norm_bwd_persistent_static_kernel" if static else "_norm_bwd_persistent_kernel"
    assert launched == [kernel] * 2


@pytest.mark.parametrize("rows_past", [-1, 0], ids=["fewer-rows", "enough-rows"])
def test_backward_layer_norm_row_count_switch(rows_past):
    """LayerNorm rows between the few-rows limit and the single-pass limit are two-pass below
    NORM_BWD_LN_SINGLE_PASS_MIN_ROWS rows and single-pass from it; RMSNorm does not switch."""
    m = configs.NORM_BWD_LN_SINGLE_PASS_MIN_ROWS + rows_past
    n = configs.NORM_BWD_LN_FEW_ROWS_MAX_COLS + 1
    assert n <= configs.NORM_BWD_SINGLE_PASS_MAX_COLS
    assert configs.norm_bwd_config("persistent", m, n, is_rms=False).two_pass == (rows_past < 0)
    assert not configs.norm_bwd_config("persistent", m, n, is_rms=True).two_pass
    # Each side's kernel on rows of this width (3 rows keep the interpreter run short).
    _check_backward(3, n, torch.bfloat16, False, "persistent", two_pass=rows_past < 0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_two_pass_small_tile(strategy, is_rms, dtype):
    """The wide-row path on a small shape: 11 rows in 2-row tiles (6 tiles over 4 persistent
    programs, so programs fold 1 or 2 tiles), 100 columns in 32-column chunks (ragged)."""
    _check_backward(11, 100, dtype, is_rms, strategy, two_pass=True, block_cols=32, block_rows=2)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_without_parameters(strategy, is_rms):
    _check_backward(9, 50, torch.float32, is_rms, strategy, affine=False)


@pytest.mark.parametrize("programs_per_sm", [1, 3])
def test_backward_persistent_program_count(programs_per_sm):
    """Partial rows = min(tiles, programs_per_sm * SMs): 1 program per SM folds several tiles."""
    _check_backward(41, 64, torch.float32, False, "persistent", programs_per_sm=programs_per_sm,
                    block_rows=2)  # fmt: skip


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_block_row_forward_windows(is_rms):
    # The block-row forward's row windows per norm and width, at their exact edges.
    for width, windows in configs.NORM_FWD_BLOCK_ROW[is_rms].items():
        for n_cols in (width // 2 + 1, width):  # widths that share next_pow2
            for lo, hi, tile in windows:
                cfg = configs.BlockRowFwdConfig(*tile)
                assert configs.norm_fwd_block_row_config(lo, n_cols, is_rms) == cfg
                if hi is not None:
                    assert configs.norm_fwd_block_row_config(hi, n_cols, is_rms) == cfg
            lo, hi = windows[0][0], windows[-1][1]
            assert configs.norm_fwd_block_row_config(lo - 1, n_cols, is_rms) is None
            if hi is not None:
                assert configs.norm_fwd_block_row_config(hi + 1, n_cols, is_rms) is None
    # 512 columns: short tiles from 16384 rows (RMSNorm) / 65536 (LayerNorm); the block-row
    # layout's widths (<= 256) and the widest rows have no window
    big = 10**6
    assert configs.norm_fwd_block_row_config(16384, 257, is_rms) == (
        configs.BlockRowFwdConfig(4, 4, 0) if is_rms else None)  # fmt: skip
    assert configs.norm_fwd_block_row_config(big, 512, is_rms).block_rows == (4 if is_rms else 8)
    assert configs.norm_fwd_block_row_config(big, 256, is_rms) is None
    assert configs.norm_fwd_block_row_config(512, 20000, is_rms) is None  # wider than one tile
    if is_rms:  # 1024 columns: two-row tiles up to 6144 rows; 2048-16384: the looped row
        assert (configs.norm_fwd_block_row_config(1, 1000, True)
                == configs.BlockRowFwdConfig(2, 4, 0))
        assert configs.norm_fwd_block_row_config(6144, 1024, True).block_rows == 2
        assert configs.norm_fwd_block_row_config(6145, 1024, True) is None
        assert all(configs.norm_fwd_block_row_config(m, n, True) is None
                   for m in (256, 4096, big) for n in (2048, 4096, 16384))  # fmt: skip
    else:  # 1024 columns: persistent up to 4096 rows, two-row tiles (one program each) from 4097
        assert configs.norm_fwd_block_row_config(4096, 1000).programs_per_sm == 4
        assert configs.norm_fwd_block_row_config(4097, 1000) == configs.BlockRowFwdConfig(2, 4, 0)
        assert configs.norm_fwd_block_row_config(big, 1024) == configs.BlockRowFwdConfig(2, 4, 0)


def _record_launches(monkeypatch, names, keys, grid=False):
    """Launches of the row kernels ``names`` from now on: one entry per launch, the launch
    keywords ``keys`` (one value, or a tuple of them; with ``grid``, the grid's size first)."""
    launched = []

    class Recording:
        def __init__(self, real):
            self.real = real

        def __getitem__(self, grid_):
            def launch(*args, **kwargs):
                values = (grid_[0],) * grid + tuple(kwargs[k] for k in keys)
                launched.append(values if len(values) > 1 else values[0])
                return self.real[grid_](*args, **kwargs)

            return launch

    for name in names:
        monkeypatch.setattr(K, name, Recording(getattr(K, name)))
    return launched


def _record_forward_launches(monkeypatch, *keys):
    """Launches of the row forward kernel from now on (_record_launches)."""
    return _record_launches(monkeypatch, ("_norm_fwd_kernel",), keys)


@pytest.mark.parametrize("n", [512, 513, 1000, 1024, 1025, 2048, 4097, 5000, 8192, 16384, 16385,
                               32769])  # fmt: skip
def test_rms_forward_looped_row(monkeypatch, n):
    """RMSNorm at 513-16384 columns runs one row per program looped over chunks narrower than the
    row (configs.NORM_FWD_RMS_LOOPED) where the chunks tile the row exactly, with layout="row",
    and with "auto" outside the block-row window (513-1024 columns, aligned rows: up to 6144
    rows). A ragged width (513, 1000, 1025, 4097, 5000) keeps one register-resident block, read
    once; 512 and 16385 keep the block, and 32769 takes the wide-row chunks."""
    launched = _record_forward_launches(monkeypatch, "BLOCK_SIZE")
    chunk = configs.NORM_FWD_RMS_LOOPED.get(triton.next_power_of_2(n), (None,))[0]
    looped = chunk is not None and n % chunk == 0
    block = configs.norm_fwd_config(n, is_rms=True).block_size
    assert looped == (n in (1024, 2048, 8192, 16384))
    assert (block < n) == (looped or n > FWD_MAX)
    if n > FWD_MAX:  # past one block: the wide rows' chunk (tests/test_norm_planner.py)
        assert block == configs.NORM_FWD_WIDE_CHUNK
    if looped:  # past the window's last row (the windows of looped widths all end)
        windows = configs.NORM_FWD_BLOCK_ROW[True].get(triton.next_power_of_2(n), ())
        past_windows = max((hi for _, hi, _ in windows), default=0) + 1
        assert configs.norm_fwd_block_row_config(past_windows, n, is_rms=True) is None
    rows = 4 * _runtime.sm_count() + 1  # past decode at any width (4 rows a SM at most)
    assert not configs.decode_rows(rows, n, _runtime.sm_count())
    x, w, _ = _inputs(rows, n, torch.bfloat16, True)
    for layout in ("auto", "row"):
        launched.clear()
        y = _fwd(x, w, None, 1e-5, True, layout=layout)
        aligned = n % 8 == 0  # bf16 rows on 16-byte boundaries: the windows' tiles apply
        windowed = layout == "auto" and configs.norm_fwd_block_row_config(
            rows, n, True, aligned) is not None  # fmt: skip
        assert windowed == (layout == "auto" and 512 < n <= 1024 and aligned)  # sm_count + 1 rows
        assert launched == ([] if windowed else [block])
        assert_close(y, _ref_fwd(x, w, None, 1e-5, True))


def test_rms_forward_decode_rule(monkeypatch):
    """Up to one row per SM (a decode batch at this width) a wide row is one register block,
    read once, with w loaded beside x (EARLY_PARAMS); from one more row on, RMSNorm loops over
    chunks."""
    sms = _runtime.sm_count()
    decode = sms
    assert configs.decode_rows(decode, 8192, sms) and not configs.decode_rows(decode + 1, 8192, sms)
    assert configs.norm_fwd_config(8192, True, decode, sms) == configs.NormFwdConfig(
        8192, configs.norm_fwd_config(8192, False).num_warps, early_params=True)
    past = configs.norm_fwd_config(8192, True, decode + 1, sms)
    assert past.block_size < 8192 and not past.early_params
    chunk = past.block_size
    launched = _record_forward_launches(monkeypatch, "BLOCK_SIZE")
    for rows, block in ((1, 8192), (decode, 8192), (decode + 1, chunk)):
        launched.clear()
        x, w, _ = _inputs(rows, 8192, torch.bfloat16, True)
        y = _fwd(x, w, None, 1e-5, True, layout="row")
        assert launched == [block]
        assert_close(y, _ref_fwd(x, w, None, 1e-5, True))


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "layer"])
def test_decode_rows_spread_over_warps(monkeypatch, is_rms):
    """Up to one row a SM, rows of up to NORM_FWD_DECODE_SPREAD_MAX_BLOCK padded columns run on
    enough warps that a thread holds at most NORM_FWD_DECODE_MAX_PER_THREAD values; one more row,
    a wider block or the switch off keep NORM_FWD_WARPS' warps. The planned launch at 973, 1025
    and 2049 columns (odd, just past powers of two) against fp64."""
    sms = _runtime.sm_count()
    most = configs.NORM_FWD_DECODE_MAX_PER_THREAD

    def warps(n, rows):
        return configs.norm_fwd_config(n, is_rms, rows, sms).num_warps

    def ladder(n):
        return configs._ladder(configs.NORM_FWD_WARPS, triton.next_power_of_2(n))

    for n in (973, 1024, 1025, 2048):
        block = triton.next_power_of_2(n)
        assert block // (32 * warps(n, sms)) == most < block // (32 * ladder(n))
        assert warps(n, 1) == warps(n, sms)
        assert configs.decode_rows(sms + 1, n, sms) and warps(n, sms + 1) == ladder(n)
    assert warps(2049, 1) == ladder(2049)  # a 4096 block: no spread
    assert warps(448, 1) == ladder(448)  # 512 values on 2 warps: 8 a thread already
    monkeypatch.setattr(configs, "NORM_FWD_DECODE_WARPS", False)
    assert warps(973, 1) == ladder(973)
    monkeypatch.setattr(configs, "NORM_FWD_DECODE_WARPS", True)
    launched = _record_forward_launches(monkeypatch, "num_warps")
    for rows, n in ((sms, 973), (sms + 1, 973), (3, 1025), (1, 2049)):
        launched.clear()
        x, w, b = _inputs(rows, n, torch.bfloat16, is_rms)
        y = _fwd(x, w, b, 1e-5, is_rms, layout="row")
        assert launched == [warps(n, rows)]
        assert_close(y, _ref_fwd(x, w, b, 1e-5, is_rms))


def test_rms_forward_one_wave_rule(monkeypatch):
    """RMSNorm at 8192 columns: 8-warp programs where the rows need two waves of 16-warp programs
    but fit in one of 8-warp programs (configs.NORM_FWD_RMS_ONE_WAVE), at the rule's exact edges,
    and the launch uses it (on the interpreter's 4 "SMs")."""
    lo, hi, wave = configs.NORM_FWD_RMS_ONE_WAVE[8192]
    wave = configs.NormFwdConfig(*wave)
    sms = normlab._runtime.sm_count()
    default = configs.norm_fwd_config(8192, True)
    # a ragged width is one block, whatever the rows
    assert configs.norm_fwd_config(4097, True, lo * sms + 1, sms).block_size == 8192
    for n_cols in (8192,):
        assert configs.norm_fwd_config(n_cols, True, lo * sms, sms) == default
        assert configs.norm_fwd_config(n_cols, True, lo * sms + 1, sms) == wave
        assert configs.norm_fwd_config(n_cols, True, hi * sms, sms) == wave
        assert configs.norm_fwd_config(n_cols, True, hi * sms + 1, sms) == default
    # LayerNorm, and widths without a rule, ignore the row count
    assert configs.norm_fwd_config(8192, False, lo * sms + 1, sms) == configs.norm_fwd_config(8192)
    assert (configs.norm_fwd_config(4096, True, lo * sms + 1, sms)
            == configs.norm_fwd_config(4096, True))

    launched = _record_forward_launches(monkeypatch, "BLOCK_SIZE", "num_warps")
    x, w, _ = _inputs(lo * sms + 1, 8192, torch.float32, True)
    y = _fwd(x, w, None, 1e-6, True, layout="row")
    assert launched == [(wave.block_size, wave.num_warps)]
    assert_close(y, _ref_fwd(x, w, None, 1e-6, True))


def test_rms_forward_looped_rows_fit_l2_rule(monkeypatch):
    """The looped row only while the rows its resident programs hold between their two reads
    (programs an SM x SMs, at most the rows, x row bytes) fit half the L2
    (configs.looped_rows_fit_l2): at 132 SMs and 50 MiB, fp32 rows of 16384 columns loop up to
    400 rows (4 programs of 16 warps an SM) and take one 16384-column block from 401; bf16 rows
    and fp32 rows of 12288 and 8192 columns fit at any row count; the one-wave 8-warp grid at
    8192 columns holds twice the programs, so fp32 loops up to 800 rows there; no L2 given, or
    the switch off: the loop at any row count."""
    sms, l2 = 132, 50 * 2**20
    looped, one_block = configs.NormFwdConfig(4096, 16), configs.NormFwdConfig(16384, 16)
    assert configs.norm_fwd_config(16384, True, 400, sms, element_size=4, l2_bytes=l2) == looped
    assert configs.norm_fwd_config(16384, True, 401, sms, element_size=4, l2_bytes=l2) == one_block
    for n, size in ((16384, 2), (12288, 4), (8192, 4)):
        assert configs.norm_fwd_config(n, True, 10**6, sms, element_size=size,
                                       l2_bytes=l2).block_size < n  # fmt: skip
    wave = configs.NormFwdConfig(*configs.NORM_FWD_RMS_ONE_WAVE[8192][2])
    assert configs.norm_fwd_config(8192, True, 800, sms, element_size=4, l2_bytes=l2) == wave
    assert configs.norm_fwd_config(8192, True, 801, sms, element_size=4,
                                   l2_bytes=l2).block_size == 8192  # fmt: skip
    assert configs.norm_fwd_config(8192, True, 801, sms, element_size=2, l2_bytes=l2) == wave
    for l2_given in (None, 0):
        assert configs.norm_fwd_config(16384, True, 10**6, sms, element_size=4,
                                       l2_bytes=l2_given) == looped  # fmt: skip
    # LayerNorm never loops
    assert configs.norm_fwd_config(16384, False, 401, sms, element_size=4,
                                   l2_bytes=l2) == one_block  # fmt: skip
    monkeypatch.setattr(configs, "NORM_FWD_LOOP_L2", False)
    assert configs.norm_fwd_config(16384, True, 10**6, sms, element_size=4, l2_bytes=l2) == looped


def test_rms_forward_past_the_l2_launches_one_block(monkeypatch):
    """The launch asks the device's L2 (here a stand-in of 1 MiB on the interpreter's 4 "SMs"):
    fp32 rows of 8192 columns past the one-wave window, 4 programs of 16 warps an SM, hold 16
    rows x 32 KiB = 512 KiB, half the L2, and loop; one KiB less L2 and the row is one block; both
    match fp64."""
    sms = _runtime.sm_count()
    launched = _record_forward_launches(monkeypatch, "BLOCK_SIZE")
    x, w, _ = _inputs(configs.NORM_FWD_RMS_ONE_WAVE[8192][1] * sms + 1, 8192, torch.float32, True)
    want = _ref_fwd(x, w, None, 1e-6, True)
    for l2, block in ((2**20, 4096), (2**20 - 1024, 8192)):
        monkeypatch.setattr(_runtime, "l2_bytes", lambda device=None, l2=l2: l2)
        launched.clear()
        y = _fwd(x, w, None, 1e-6, True, layout="row")
        assert launched == [block]
        assert_close(y, want)


def test_forward_int64_rows_only_where_needed():
    """int32 row offsets while rows x row stride stays below 2**31 for x and y."""
    rows = 2**31 // 8192  # rows x stride == 2**31: the last offset needs int64
    assert configs.row_offsets_int64(rows, 8192, 8192)
    assert not configs.row_offsets_int64(rows - 1, 8192, 8192)
    assert configs.row_offsets_int64(rows - 1, 8192, 8200)  # a strided y


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("n", [5000, 600], ids=["persistent", "two-row-tiles"])
def test_block_row_forward_dispatch(monkeypatch, is_rms, n):
    """layout="auto" takes the block-row forward inside its windows, each moved down so the
    interpreter stays fast: the 8192-wide persistent window (LayerNorm only: RMSNorm runs the
    looped row there, NORM_FWD_RMS_LOOPED) at its lower edge, set to twice the grid's programs
    + 3 rows (programs fold 2 or 3 one-row tiles); the 1024-wide two-row tiles (both norms)
    from 40 rows, at 41. layout="row" one row per program; both match fp64, forward and
    backward."""
    from normlab.norms import block_row as narrow

    # fp32 RMSNorm rows of 1024 padded columns run one warp a row (config.rms_fp32_one_warp)
    dtype = torch.bfloat16 if is_rms and n == 600 else torch.float32
    assert configs.rms_fp32_one_warp(n, is_rms, 4) == (dtype == torch.bfloat16)
    if n == 600:
        m = 41
        for norm in (True, False):
            monkeypatch.setitem(configs.NORM_FWD_BLOCK_ROW[norm], 1024,
                                ((40, None, configs.BlockRowFwdConfig(2, 4, 0)),))  # fmt: skip
    else:
        ((lo, hi, tile),) = configs.NORM_FWD_BLOCK_ROW[False][8192]
        assert tile[0] == 1 and tile[2] > 0  # one-row tiles on a persistent grid
        m = 2 * tile[2] * _runtime.sm_count() + 3
        assert m < lo
        monkeypatch.setitem(configs.NORM_FWD_BLOCK_ROW[False], 8192, ((m, hi, tile),))
    assert configs.norm_fwd_block_row_config(m, n) is not None
    tiled = configs.norm_fwd_block_row_config(m, n, is_rms) is not None
    assert tiled == (not is_rms or n <= 1024)
    launched = []

    class Named:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            launched.append(self.name)
            return self.kernel[grid]

    monkeypatch.setattr(narrow, "_block_row_fwd_kernel",
                        Named("block_row", narrow._block_row_fwd_kernel))  # fmt: skip
    monkeypatch.setattr(K, "_norm_fwd_kernel", Named("row", K._norm_fwd_kernel))
    x, w, b = _inputs(m, n, dtype, is_rms, offset=3.0)
    y_ref = ref.rms_norm(x.double(), w.double(), 1e-5) if is_rms else ref.layer_norm(
        x.double(), w.double(), b.double(), 1e-5)  # fmt: skip
    dy = torch.randn(m, n).to(dtype)
    ys, dxs = {}, {}
    for layout in ("auto", "row"):
        launched.clear()
        xg = x.clone().requires_grad_(True)
        ys[layout] = _fwd(xg, w, b, 1e-5, is_rms, layout=layout)
        assert launched == ["block_row" if layout == "auto" and tiled else "row"]
        assert_close(ys[layout], y_ref)
        (dxs[layout],) = torch.autograd.grad(ys[layout], xg, dy)
    dx_ref, _, _ = ref.norm_backward(dy.double(), x.double(), w.double(), _d(b), 1e-5, is_rms)
    for layout in ("auto", "row"):  # the backward reads the forward's mean/rstd
        assert_close(dxs[layout], dx_ref, msg=f"{layout} dx")


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_512_column_window_dispatch(monkeypatch, is_rms):
    """257-512 columns: layout="auto" runs the 512 window's short block-row tiles (the window's
    row edge lowered so the interpreter can run it; 37 rows leave a ragged last tile) and the
    row-path backward; one row fewer than the edge runs one row per program. fp64 agreement."""
    from normlab.norms import block_row as narrow

    ((_, hi, tile),) = configs.NORM_FWD_BLOCK_ROW[is_rms][512]
    monkeypatch.setitem(configs.NORM_FWD_BLOCK_ROW[is_rms], 512, ((30, hi, tile),))
    launched = []
    real_tile, real_row = narrow._block_row_fwd_kernel, K._norm_fwd_kernel

    class Recording:
        def __init__(self, kernel, row):
            self.kernel, self.row = kernel, row

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append("row" if self.row else (kwargs["BLOCK_ROWS"], kwargs["num_warps"]))
                return self.kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(narrow, "_block_row_fwd_kernel", Recording(real_tile, False))
    monkeypatch.setattr(K, "_norm_fwd_kernel", Recording(real_row, True))
    for m, expected in ((29, "row"), (30, tile[:2]), (37, tile[:2])):
        x, w, b = _inputs(m, 300, torch.float32, is_rms, offset=3.0)
        dy = torch.randn(m, 300)
        launched.clear()
        xg = x.clone().requires_grad_(True)
        y = _fwd(xg, w, b, 1e-5, is_rms, layout="auto")
        assert launched == [expected]
        (dx,) = torch.autograd.grad(y, xg, dy)
        xd = x.double().requires_grad_(True)
        y_ref = ref.rms_norm(xd, w.double(), 1e-5) if is_rms else ref.layer_norm(
            xd, w.double(), b.double(), 1e-5)  # fmt: skip
        (dx_ref,) = torch.autograd.grad(y_ref, xd, dy.double())
        assert_close(y, y_ref.detach())
        assert_close(dx, dx_ref)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize("m", [25, 41], ids=["13-programs", "16-programs"])
def test_backward_paired_partials(monkeypatch, is_rms, m):
    """With pairing asked for (NORM_BWD_PAIR_PARTIALS), above NORM_BWD_PARTIALS_PER_SM programs
    per SM two programs add into one zeroed partial row: 4 per SM on the interpreter's 4 "SMs"
    leaves ceil(programs / 2) <= 2 x SMs rows (an odd count leaves one row with a single addend).
    Right against fp64, close to unpaired."""
    from normlab import _runtime

    assert not configs.norm_bwd_config("persistent", m, 64, programs_per_sm=4).paired_partials
    monkeypatch.setattr(configs, "NORM_BWD_PAIR_PARTIALS", True)

    seen = []  # partial rows each backward hands to the reduce kernel
    real = K.reduce_partials

    def counting_reduce(dw_partial, db_partial, *args, **kwargs):
        seen.append((dw_partial if dw_partial is not None else db_partial).shape[0])
        return real(dw_partial, db_partial, *args, **kwargs)

    monkeypatch.setattr(K, "reduce_partials", counting_reduce)
    n_programs = min(triton.cdiv(m, 2), 4 * _runtime.sm_count())
    assert configs.norm_bwd_config("persistent", m, 64, programs_per_sm=4).paired_partials
    _check_backward(m, 64, torch.float32, is_rms, "persistent", programs_per_sm=4, block_rows=2)
    assert seen == [triton.cdiv(n_programs, 2)]
    assert seen[0] <= configs.NORM_BWD_PARTIALS_PER_SM * _runtime.sm_count()
    # Same inputs, paired and not: dx is identical, the parameter gradients equal to rounding.
    x, w, b = _inputs(m, 64, torch.float32, is_rms)
    dy = torch.randn(m, 64)
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, is_rms)
    paired, unpaired = (K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy="persistent",
                                        programs_per_sm=4, block_rows=2, paired_partials=p)
                        for p in (True, False))  # fmt: skip
    assert seen[1:] == [triton.cdiv(n_programs, 2), n_programs]
    assert torch.equal(paired[0], unpaired[0])
    for a, c in zip(paired[1:], unpaired[1:], strict=True):
        assert (a is None and c is None) or torch.allclose(a, c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("strategy", ["two_stage", "persistent"])
def test_backward_deterministic(strategy):
    x, w, b = _inputs(29, 70, torch.bfloat16, False)
    dy = torch.randn(29, 70).bfloat16()
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, False)
    first = K.norm_backward(dy, x, w, b, mean, rstd, False, strategy=strategy)
    for _ in range(2):
        again = K.norm_backward(dy, x, w, b, mean, rstd, False, strategy=strategy)
        for a, c in zip(first, again, strict=True):
            assert torch.equal(a, c)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("buf_dtype", [torch.float32, torch.bfloat16])
def test_backward_accumulates_into_grad(strategy, buf_dtype):
    """grad_weight/grad_bias: the reduction adds into an existing buffer and returns it; the
    sum matches fp64 to the buffer's own dtype (an fp32 .grad keeps the fp32 reduction)."""
    x, w, b = _inputs(13, 40, torch.bfloat16, False)
    dy = torch.randn(13, 40).bfloat16()
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, False)
    _, rdw, rdb = ref.norm_backward(dy.double(), x.double(), w.double(), b.double(), 1e-5, False)
    gw, gb = torch.randn(40).to(buf_dtype), torch.randn(40).to(buf_dtype)
    expect_w, expect_b = gw.double() + rdw, gb.double() + rdb
    out = K.norm_backward(
        dy, x, w, b, mean, rstd, False, strategy=strategy, grad_weight=gw, grad_bias=gb
    )
    assert out[1] is gw and out[2] is gb
    assert gw.dtype == gb.dtype == buf_dtype
    assert_close(gw, expect_w, reduce_len=13, msg="grad_weight")
    assert_close(gb, expect_b, reduce_len=13, msg="grad_bias")


@pytest.mark.parametrize("strategy", ["two_stage", "persistent"])
@pytest.mark.parametrize("given", ["weight", "bias"])
def test_backward_accumulates_into_the_one_buffer_given(strategy, given):
    """grad_weight without grad_bias (or the reverse): the given buffer is added into and the
    other gradient is written fresh, not added into a buffer nobody passed."""
    x, w, b = _inputs(13, 40, torch.float32, False)
    dy = torch.randn(13, 40)
    _, mean, rstd = K.norm_forward(x, w, b, 1e-5, False)
    _, rdw, rdb = ref.norm_backward(dy.double(), x.double(), w.double(), b.double(), 1e-5, False)
    buf = torch.full((40,), 10.0)
    kw = {"grad_weight": buf} if given == "weight" else {"grad_bias": buf}
    _, dw, db = K.norm_backward(dy, x, w, b, mean, rstd, False, strategy=strategy, **kw)
    assert_close(dw, rdw + (10.0 if given == "weight" else 0.0), reduce_len=13, msg="dw")
    assert_close(db, rdb + (10.0 if given == "bias" else 0.0), reduce_len=13, msg="db")


@pytest.mark.parametrize("n_cols", [1024, 1025, 4097], ids=str)
@pytest.mark.parametrize("with_bias", [False, True], ids=["dw", "dw+db"])
def test_reduce_partials_at_each_tile(n_cols, with_bias):
    """The reduce kernel's tile changes with the column count and the number of buffers
    (configs.NORM_REDUCE_TILES); each tile sums 37 partial rows (a ragged BLOCK_M step) in fp32."""
    n_buffers = 2 if with_bias else 1
    tile = configs.norm_reduce_config(n_cols, n_buffers)
    expect = {1024: (128, 8, 8), 1025: (128, 16, 8) if n_buffers == 1 else (128, 32, 4),
              4097: (16, 32, 8) if n_buffers == 1 else (128, 32, 4)}[n_cols]  # fmt: skip
    assert tile == expect
    parts = [torch.randn(37, n_cols) for _ in range(n_buffers)]
    outs = [torch.empty(n_cols, dtype=torch.bfloat16) for _ in range(n_buffers)]
    K.reduce_partials(parts[0], parts[1] if with_bias else None, outs[0],
                      outs[1] if with_bias else None)  # fmt: skip
    for out, part in zip(outs, parts, strict=True):
        assert_close(out, part.double().sum(0), reduce_len=37)


@pytest.mark.parametrize("n_buffers", [1, 2])
@pytest.mark.parametrize("n_cols", [1024, 1025, 4097, 18159], ids=str)
def test_reduce_tile_holds_at_most_the_partial_rows(n_cols, n_buffers, monkeypatch):
    """The reduce's tile rows are cut to next_pow2(n_partials), never below the partials, with no
    more warps than give each thread an element; past the table's rows the table's tile stands,
    and NORM_REDUCE_TILE_FITS_PARTIALS off gives the table's tile at any count."""
    table_m, table_n, table_warps = configs.norm_reduce_config(n_cols, n_buffers)
    for n_partials in (1, 2, 3, 4, 5, 16, 17, 127, 128, 129, 1000):
        block_m, block_n, warps = configs.norm_reduce_config(n_cols, n_buffers, n_partials)
        assert block_n == table_n
        assert block_m == min(table_m, 1 << (n_partials - 1).bit_length())
        assert block_m >= min(n_partials, table_m)
        assert 1 <= warps <= table_warps and 32 * warps <= max(32, block_m * block_n)
        if n_partials >= table_m:
            assert (block_m, warps) == (table_m, table_warps)
    monkeypatch.setattr(configs, "NORM_REDUCE_TILE_FITS_PARTIALS", False)
    assert configs.norm_reduce_config(n_cols, n_buffers, 3) == (table_m, table_n, table_warps)


@pytest.mark.parametrize("n_partials", [1, 2, 3, 5], ids=str)
@pytest.mark.parametrize("n_cols", [1024, 4097, 18159], ids=str)
def test_reduce_partials_of_few_rows(n_cols, n_partials):
    """A few partial rows (the split rows' groups, a small grid) summed in the cut tile: dγ and
    dβ in bf16 against the fp64 sum, and added into an existing gradient."""
    parts = [torch.randn(n_partials, n_cols) for _ in range(2)]
    outs = [torch.empty(n_cols, dtype=torch.bfloat16) for _ in range(2)]
    K.reduce_partials(parts[0], parts[1], outs[0], outs[1])
    for out, part in zip(outs, parts, strict=True):
        assert_close(out, part.double().sum(0), reduce_len=n_partials)
    grad = torch.randn(n_cols)
    expect = grad.double() + parts[0].double().sum(0)
    K.reduce_partials(parts[0], None, grad, None, accumulate_w=True)
    assert_close(grad, expect, reduce_len=n_partials + 1)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_auto_strategy_and_config_table(is_rms):
    """Each width's backward config: one power-of-two block holding the whole row up to the
    single-pass limit, NORM_BWD_TWO_PASS_BLOCK_COLS-wide chunks past it; and strategy="auto"
    (persistent) against fp64 through the launcher."""
    one_pass_max = configs.norm_bwd_single_pass_max_cols(is_rms, 64)
    for n in (1, 100, BWD_MAX[False], BWD_MAX[False] + 1, BWD_MAX[True], BWD_MAX[True] + 1):
        pow2 = triton.next_power_of_2(n)
        for s in STRATEGIES:
            cfg = configs.norm_bwd_config(s, 64, n, is_rms=is_rms)
            assert cfg.strategy == s
            assert cfg.two_pass == (n > one_pass_max), (s, n)
            expect_cols = min(configs.NORM_BWD_TWO_PASS_BLOCK_COLS, pow2) if cfg.two_pass else pow2
            assert cfg.block_cols == expect_cols, (s, n)
            assert cfg.block_rows >= 1 and triton.next_power_of_2(cfg.block_rows) == cfg.block_rows
            if s == "atomic":
                assert cfg.block_rows == configs.NORM_BWD_ATOMIC_BLOCK_ROWS
    with pytest.raises(ValueError, match="block_cols"):
        configs.norm_bwd_config("persistent", 4, 100, two_pass=False, block_cols=64)
    _check_backward(37, 100, torch.float32, is_rms, "auto")


# ---- autograd through the public API -----------------------------------------------------------


@pytest.mark.parametrize("strategy", ["auto", *STRATEGIES])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_autograd_3d(strategy, is_rms):
    x, w, b = _inputs(2 * 5, 33, torch.float32, is_rms)
    x = x.reshape(2, 5, 33).requires_grad_(True)
    w.requires_grad_(True)
    if b is not None:
        b.requires_grad_(True)
    dy = torch.randn(2, 5, 33)
    y = _fwd(x, w, b, 1e-5, is_rms, strategy=strategy)
    y.backward(dy)
    rdx, rdw, rdb = ref.norm_backward(dy.double(), x.double(), _d(w), _d(b), 1e-5, is_rms)
    assert_close(x.grad, rdx)
    assert_close(w.grad, rdw, reduce_len=10)
    if b is not None:
        assert_close(b.grad, rdb, reduce_len=10)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_backward_fills_no_zero_gradient_for_statistics(is_rms):
    """mean/rstd are outputs of the forward op but get no gradient: autograd must not zero-fill
    one per backward (a fill kernel per statistic on a GPU). 13 rows: no workspace has 13 rows."""
    from torch.profiler import ProfilerActivity, profile

    x, w, b = _inputs(13, 40, torch.float32, is_rms)
    params = tuple(t.requires_grad_() for t in (x, w, b) if t is not None)
    dy = torch.randn(13, 40)
    y = _fwd(x, w, b, 1e-5, is_rms)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        grads = torch.autograd.grad(y, params, dy)
    filled = [e.input_shapes for e in prof.events() if e.name in ("aten::zero_", "aten::fill_")]
    assert not [s for s in filled if s and s[0] == [13]], filled
    expect = ref.norm_backward(dy.double(), x.double(), _d(w), _d(b), 1e-5, is_rms)
    for got, want in zip(grads, expect, strict=False):
        assert_close(got, want, reduce_len=13)


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_non_contiguous_inputs(is_rms):
    """A transposed input is copied; a row-strided slice is read in place. Both are correct."""
    base = torch.randn(24, 16)
    w = torch.randn(24)
    for x in (base.t(), torch.randn(10, 40)[:, 3:27]):
        assert not x.is_contiguous()
        x = x.clone().requires_grad_(True) if x is base.t() else x.requires_grad_(True)
        y = _fwd(x, w, torch.zeros(24) if not is_rms else None, 1e-5, is_rms)
        dy = torch.randn_like(y).t().contiguous().t()  # non-contiguous upstream gradient too
        y.backward(dy)
        rb = None if is_rms else torch.zeros(24)
        assert_close(y, _ref_fwd(x.detach(), w, rb, 1e-5, is_rms))
        rdx, _, _ = ref.norm_backward(
            dy.double(), x.detach().double(), w.double(), _d(rb), 1e-5, is_rms
        )
        assert_close(x.grad, rdx)


def test_row_strided_view_is_not_copied(monkeypatch):
    x = torch.randn(6, 40)[:, :32]
    seen = {}
    real = K.norm_forward

    def spy(x2d, *a, **k):
        seen["stride"] = x2d.stride()
        return real(x2d, *a, **k)

    monkeypatch.setattr(K, "norm_forward", spy)
    normlab.rms_norm(x)
    assert seen["stride"] == (40, 1)


@pytest.mark.parametrize(  # make test-quick compiles the first only
    ("layout", "dynamic"),
    [("auto", False), pytest.param("auto", True, marks=pytest.mark.slow),
     pytest.param("block_row", True, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_torch_compile_fullgraph(is_rms, layout, dynamic):
    """Compiled forward and backward against fp64 (block_row: the forward returns empty
    statistics and the backward recomputes them)."""
    x, w, b = _inputs(6, 20, torch.float32, is_rms)
    scale = torch.arange(20.0)

    def loss(x, w, b):
        return (_fwd(x, w, b, 1e-5, is_rms, layout=layout) * scale).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager", dynamic=dynamic)
    xc, wc = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    lc = compiled(xc, wc, b)
    grads = torch.autograd.grad(lc, (xc, wc))
    xd, wd = x.double().requires_grad_(True), w.double().requires_grad_(True)
    y_ref = ref.rms_norm(xd, wd, 1e-5) if is_rms else ref.layer_norm(xd, wd, _d(b), 1e-5)
    l_ref = (y_ref * scale.double()).sum()
    expect = torch.autograd.grad(l_ref, (xd, wd))
    assert_close(lc, l_ref.detach(), reduce_len=y_ref.numel(), msg="loss")
    assert_close(grads[0], expect[0], msg="dx")
    assert_close(grads[1], expect[1], reduce_len=6, msg="dweight")


# ---- edge cases and bad inputs -----------------------------------------------------------------


ALL_KERNELS = ("_norm_fwd_kernel", "_norm_bwd_atomic_kernel", "_norm_bwd_partials_kernel",
               "_norm_bwd_persistent_kernel", "_norm_bwd_persistent_static_kernel",
               "_norm_bwd_persistent_two_pass_kernel")  # fmt: skip


@pytest.mark.parametrize(
    "layout,strategy",
    [("auto", s) for s in ["auto", *STRATEGIES]]
    + [("row", s) for s in ["auto", *STRATEGIES]]
    + [("block_row", "auto"), ("block_row", "persistent")],
)
@pytest.mark.parametrize("shape", [(0, 16), (0, 3, 200), (4, 0), (2, 0, 0), (0,)], ids=str)
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_empty_input_matches_torch(monkeypatch, is_rms, shape, layout, strategy):
    """No rows or no columns: as F.rms_norm / F.layer_norm, an empty y and dx and zero
    dweight/dbias (accumulated into existing .grad), at every layout and strategy; no launch."""
    from normlab.norms import block_row as narrow

    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("kernel launched for an empty input")

    for name in ALL_KERNELS:
        monkeypatch.setattr(K, name, NoLaunch())
    for name in ("_block_row_fwd_kernel", "_block_row_bwd_kernel"):
        monkeypatch.setattr(narrow, name, NoLaunch())
    from normlab.norms import reduce

    monkeypatch.setattr(reduce, "_reduce_partials_kernel", NoLaunch())
    n = shape[-1]
    x = torch.randn(shape, requires_grad=True)
    w = torch.randn(n, requires_grad=True)
    b = None if is_rms else torch.randn(n, requires_grad=True)
    params = (x, w) if is_rms else (x, w, b)
    y = _fwd(x, w, b, 1e-5, is_rms, strategy=strategy, layout=layout)
    xt, wt = x.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    bt = None if is_rms else b.detach().clone().requires_grad_(True)
    yt = (torch.nn.functional.rms_norm(xt, (n,), wt, 1e-5) if is_rms
          else torch.nn.functional.layer_norm(xt, (n,), wt, bt, 1e-5))  # fmt: skip
    assert y.shape == yt.shape == shape and y.dtype == yt.dtype
    dy = torch.randn(shape)
    for p in params[1:]:
        p.grad = torch.ones_like(p)  # an existing .grad: the empty backward adds 0 to it
    y.backward(dy)
    yt.backward(dy)
    assert x.grad.shape == xt.grad.shape == shape
    for p, pt in zip(params[1:], (wt, bt), strict=False):
        assert torch.equal(p.grad - 1, pt.grad) and not pt.grad.any()


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_nan_stays_in_its_row(is_rms):
    x = torch.randn(4, 30)
    x[2, 5] = float("nan")
    x.requires_grad_(True)
    y = _fwd(x, None, None, 1e-5, is_rms)
    assert torch.isnan(y[2]).all()
    assert torch.isfinite(y[[0, 1, 3]]).all()
    assert_close(y[[0, 1, 3]], _ref_fwd(x.detach()[[0, 1, 3]], None, None, 1e-5, is_rms))
    y.backward(torch.randn(4, 30))
    assert torch.isnan(x.grad[2]).all() and torch.isfinite(x.grad[[0, 1, 3]]).all()


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
@pytest.mark.parametrize(
    "make,exc,match",
    [
        (lambda: (torch.randn(3, 8), torch.randn(7), {}), ValueError, "shape"),
        (lambda: (torch.randn(3, 8), torch.randn(2, 4), {}), ValueError, "shape"),
        (lambda: (torch.randint(0, 5, (3, 8)), None, {}), TypeError, "dtype"),
        (lambda: (torch.randn(3, 8).double(), None, {}), TypeError, "float64"),
        (lambda: (torch.randn(3, 8), torch.ones(8, dtype=torch.int32), {}), TypeError, "dtype"),
        (lambda: (torch.randn(3, 8), torch.randn(8, device="meta"), {}), ValueError, "device"),
        (lambda: (torch.tensor(1.0), None, {}), ValueError, "last dimension"),
        (lambda: (torch.randn(3, 8), None, {"eps": -1e-5}), ValueError, "eps"),
        (lambda: (torch.randn(3, 8), None, {"eps": float("nan")}), ValueError, "eps"),
        (lambda: (torch.randn(3, 8), None, {"strategy": "atomics"}), ValueError, "strategy"),
        (lambda: (torch.randn(3, 8), None, {"layout": "rows"}), ValueError, "layout"),
        (lambda: ([[1.0, 2.0]], None, {}), TypeError, "Tensor"),
        (lambda: (torch.randn(3, 8).to_sparse(), None, {}), TypeError, "x must be a dense"),
        (lambda: (torch.randn(3, 8), torch.randn(8).to_sparse(), {}), TypeError,
         "weight must be a dense"),
    ],
    ids=[
        "w-len",
        "w-2d",
        "int-x",
        "fp64-x",
        "int-w",
        "device",
        "0-d",
        "neg-eps",
        "nan-eps",
        "strategy",
        "layout",
        "list",
        "sparse-x",
        "sparse-w",
    ],
)
def test_bad_inputs(is_rms, make, exc, match):
    x, w, kw = make()
    with pytest.raises(exc, match=match):
        if is_rms:
            normlab.rms_norm(x, w, **kw)
        else:
            normlab.layer_norm(x, w, None, **kw)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_inside_a_torch_func_transform(name):
    # vmap's batched x, grad's tracking x: no memory of their values for a kernel to read, so a
    # clear error (torch's own norms run there; normlab's do not).
    w = torch.randn(8)
    fn = getattr(normlab, name)
    call = (lambda r: fn(r, r, w)[0]) if name.startswith("add") else (lambda r: fn(r, w))
    with pytest.raises(RuntimeError, match=f"{name}: x is inside a torch.func transform"):
        torch.vmap(call)(torch.randn(3, 8))
    with pytest.raises(RuntimeError, match=f"{name}: x is inside a torch.func transform"):
        torch.func.grad(lambda r: call(r).sum())(torch.randn(3, 8))


def test_bad_bias():
    with pytest.raises(ValueError, match="bias must have shape"):
        normlab.layer_norm(torch.randn(2, 8), torch.randn(8), torch.randn(9))


# ---- layout dispatch ---------------------------------------------------------------------------


def test_row_layout_backward_takes_one_row_per_tile(monkeypatch):
    """layout="row" is the single-row path of Liger-Kernel#1620 in the backward too; "auto" keeps
    the heuristic multi-row tile of the row kernels (37 rows: too few for block-row)."""
    seen = []
    real = K.norm_backward

    def spy(*args, **kwargs):
        seen.append(kwargs.get("block_rows"))
        return real(*args, **kwargs)

    monkeypatch.setattr(K, "norm_backward", spy)
    x = torch.randn(37, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    for layout in ("row", "auto"):
        _fwd(x, w, None, 1e-5, True, layout=layout).sum().backward()
    assert seen == [1, None]
    assert configs.norm_bwd_config("persistent", 37, 16).block_rows > 1


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_layout_dispatch(monkeypatch, is_rms):
    """layout="block_row" goes to normlab.norms.block_row (stubbed here with the row kernels);
    "row" never does, and "auto" follows configs.use_block_row where the strategy exists there."""
    from normlab.norms import block_row as narrow

    calls = []

    def fwd(x, weight, bias, eps, is_rms_, cfg, store_stats=True, **fused):
        calls.append(("fwd", x.shape, is_rms_, store_stats))
        y, mean, rstd = K.norm_forward(x, weight, bias, eps, is_rms_, **fused)
        return (y, mean, rstd) if store_stats else (y, None, None)

    def bwd(dy, x, weight, bias, mean, rstd, is_rms_, cfg, eps=None, **fused):
        calls.append(("bwd", x.shape, "persistent", rstd is None))
        if rstd is None:  # the statistics the forward did not store
            _, mean, rstd = K.norm_forward(x, weight, bias, eps, is_rms_)
        return K.norm_backward(dy, x, weight, bias, mean, rstd, is_rms_, strategy="persistent",
                               **fused)  # fmt: skip

    monkeypatch.setattr(narrow, "launch_forward", fwd)
    monkeypatch.setattr(narrow, "launch_backward", bwd)
    x = torch.randn(5, 16, requires_grad=True)
    w = torch.randn(16, requires_grad=True)
    for layout, use in (("row", True), ("auto", False)):
        monkeypatch.setattr(configs, "use_block_row", lambda m, n, use=use: use)
        _fwd(x, w, None, 1e-5, is_rms, layout=layout).sum().backward()
    assert calls == []
    monkeypatch.setattr(configs, "use_block_row", lambda m, n: True)
    # a strategy the block-row backward lacks keeps "auto" on the row kernels, both directions
    _fwd(x, w, None, 1e-5, is_rms, layout="auto", strategy="two_stage").sum().backward()
    assert calls == []
    y = _fwd(x, w, None, 1e-5, is_rms, layout="auto", strategy="persistent")
    y.backward(torch.randn(5, 16))
    recompute = configs.block_row_recompute_stats(16, is_rms)
    assert calls == [("fwd", (5, 16), is_rms, not recompute),
                     ("bwd", (5, 16), "persistent", recompute)]  # fmt: skip
    assert_close(y, _ref_fwd(x.detach(), w.detach(), None, 1e-5, is_rms))


@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_plan_at_its_switches(is_rms):
    """The planner at and around each switch: block-row from BLOCK_ROW_MIN_ROWS rows and up to
    BLOCK_ROW_MAX_COLS columns under "auto" (only where its backward's strategy exists), forced
    layouts, and the forward storing statistics exactly where the backward does not recompute."""
    cols, rows = configs.BLOCK_ROW_MAX_COLS, configs.BLOCK_ROW_MIN_ROWS
    assert configs.plan(is_rms, rows, cols).layout == "block_row"
    assert configs.plan(is_rms, rows - 1, cols).layout == "row"
    assert configs.plan(is_rms, rows, cols + 1).layout == "row"
    assert configs.plan(is_rms, rows, cols, "two_stage").layout == "row"
    assert configs.plan(is_rms, rows, cols, "two_stage").strategy == "two_stage"
    assert configs.plan(is_rms, 1, 1, layout="block_row").layout == "block_row"
    assert configs.plan(is_rms, rows, 1, layout="row").layout == "row"
    recompute_max = configs.BLOCK_ROW_RECOMPUTE_MAX_COLS[is_rms]
    assert not configs.plan(is_rms, rows, recompute_max).store_stats
    if recompute_max < cols:
        assert configs.plan(is_rms, rows, recompute_max + 1).store_stats
    tiny = configs.BLOCK_ROW_TINY_COLS
    assert configs.plan(is_rms, rows - 1, tiny).store_stats  # the row path always stores them
    assert configs.plan(is_rms, 1, tiny - 1).layout == "block_row"  # tiny rows: any row count
    assert configs.plan(is_rms, 4097, 1000, layout="row").fwd_tile is None
    assert configs.plan(False, 4097, 1000).fwd_tile == configs.norm_fwd_block_row_config(4097, 1000)


@pytest.mark.parametrize("layout", ["row", "block_row"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "ln"])
def test_one_row_of_strided_columns(layout, is_rms):
    """One row whose columns are not unit-stride (x[:, ::2]) is read by its strides."""
    x = torch.randn(1, 40)[:, ::2]
    w, b = 1 + 0.5 * torch.randn(20), None if is_rms else torch.randn(20)
    assert_close(_fwd(x, w, b, 1e-5, is_rms, layout=layout), _ref_fwd(x, w, b, 1e-5, is_rms))


@pytest.mark.parametrize("layout", ["row", "block_row"])
def test_eps_zero_as_torch(layout):
    """eps = 0 is an eps torch takes: rows away from 0 match F.layer_norm / F.rms_norm at eps 0."""
    x, w, b = torch.randn(5, 24), 1 + 0.5 * torch.randn(24), torch.randn(24)
    xd, wd = x.double(), w.double()
    assert_close(normlab.layer_norm(x, w, b, 0.0, layout=layout),
                 F.layer_norm(xd, (24,), wd, b.double(), eps=0.0), msg="layer_norm")
    assert_close(normlab.rms_norm(x, w, 0.0, layout=layout), F.rms_norm(xd, (24,), wd, eps=0.0),
                 msg="rms_norm")
    assert_close(normlab.LayerNorm(24, eps=0.0)(x), F.layer_norm(xd, (24,), eps=0.0),
                 msg="LayerNorm(eps=0.0)")
