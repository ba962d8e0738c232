"""The @triton.jit helpers the loss kernels share: online statistics, frames, tiles, gradients.

Per row r of ``logits`` x and ``target_logits`` t (shape (..., V), flattened to (M, V)), with
p = softmax(x) and q = softmax(t), all math in fp32:

====================  ============================================  ============================
loss                  L_r                                           dL_r / dx
====================  ============================================  ============================
reverse_kl            KL(p || q) = sum_j p_j (log p_j - log q_j)    p * ((log p - log q) - L_r)
soft_cross_entropy    -sum_j q_j log p_j                            p - q
cross_entropy         logsumexp(x) - x[label_r]                     p - onehot(label_r)
forward_kl            KL(q || p) = sum_j q_j (log q_j - log p_j)    p - q
jsd                   b KL(q || m) + (1 - b) KL(p || m),            (1 - b) p * (log(p / m)
                      m = b q + (1 - b) p                                       - KL(p || m))
====================  ============================================  ============================

Terms with p_j = 0 (reverse KL, JSD's KL(p || m)) or q_j = 0 (soft CE, forward KL, KL(q || m))
count 0, so -inf logits (a masked vocab) are allowed; NaN or +inf anywhere in a row makes that
row's loss and every entry of its gradient NaN (as torch's autograd). Masked lanes load as -inf,
never 0, so they cannot move a max or a log-sum-exp.

Options, each a constexpr that compiles to nothing when off: XFORM transforms every logit.
The kernels hold h, and the loss sees h * xparam, applied where a logit meets its row's shift
(``shifted``, ``scaled``): for a temperature h = x and xparam = 1 / T, both operands (the host
multiplies the gradient by 1 / T); for label CE's softcap h = tanh(x / c) at the load
(``transform``, the GPU's tanh.approx.f32 for 16-bit logits: config.softcap_xform) and xparam =
c, the derivative 1 - h^2 in tile_grad; label CE's
SMOOTH (label smoothing, F.cross_entropy's definition: the label's weight 1 - eps, every
column's eps / V, so the statistics also sum the logits) and ZLOSS (z lse^2 per row, its
gradient 2 z lse p); HAS_MASK (the kernels: rows whose loss_mask is False are skipped, as
ignored labels are). JSD needs the normalized p and q, so its row sums are a second pass
(``jsd_sums``) once the statistics are known; with z = log(b q / ((1 - b) p)),
log(p / m) = -log(1 - b) - softplus(z) and log(q / m) = -log(b) - softplus(-z), so
KL(p || m) = -log(1 - b) - sum p softplus(z) and the gradient is (1 - b) p (R_p - softplus(z)),
R_p = sum p softplus(z): no constant cancels there (a peaked row's largest entry would lose
~1e-4 of itself otherwise). Its ``acc`` then holds R_p.

A row's statistics are built tile by tile (``row_statistics`` over ``online_tile``, lanes
folded by ``fold_stats``); ``grad_pass`` writes a row's (or chunk's) gradient from them. Rows
that do not start on a 16-byte boundary (V = 50257) are indexed from the frame boundary before
them (``row_frames``), so whole tiles stay vector loads; their edge tiles load whole vectors
(``load_edge_tile``) and store exactly their own columns (``store_edge_grad``).
"""

from __future__ import annotations

import os

import triton
import triton.language as tl

from normlab import _runtime

# -inf is written inline as float("-inf"), not a global constexpr: torch.compile re-emits a
# kernel's global constexprs by repr, and "-inf" names nothing there.

# Loss kinds, the kernels' KIND constexpr (config.KINDS on the host).
RKL: tl.constexpr = tl.constexpr(0)
SCE: tl.constexpr = tl.constexpr(1)
CE: tl.constexpr = tl.constexpr(2)
FKL: tl.constexpr = tl.constexpr(3)
JSD: tl.constexpr = tl.constexpr(4)
# Logit transforms, the kernels' XFORM constexpr (config.XFORMS on the host).
TEMPER: tl.constexpr = tl.constexpr(1)  # x * xparam, xparam = 1 / temperature (at the shift)
SOFTCAP: tl.constexpr = tl.constexpr(2)  # tanh(x / xparam), xparam = the cap (at the shift)
SOFTCAP_APPROX: tl.constexpr = tl.constexpr(3)  # the same with tanh.approx.f32 (GPU only)
# A tile's two maxima (x's and t's) in one two-operand tl.reduce: one cross-warp exchange on a
# GPU. The interpreter runs a custom combine element by element in Python (seconds per tile of
# a wide row), so it takes two plain tl.max there; a max is exact, so both give the same bits.
# tests/test_entropy.py runs the paired path too.
PAIRED_MAXIMA: tl.constexpr = tl.constexpr(not _runtime.INTERPRET)
# Label smoothing's sum of the logits over a one-lane tile (LANE == BLOCK, tiles above
# config.ENTROPY_LANE_MAX_BLOCK): each SMOOTH_PART logits a thread holds are summed in registers
# into BLOCK / SMOOTH_PART fp32 accumulators (an order-keeping reshape: Triton 3.10 drops
# can_reorder), reduced once a row, so a tile adds no cross-warp reduction (a third one beside
# the max and the sum-exp otherwise), and no tile-shaped accumulator
# (docs/planner.md#smoothings-partial-sums).
# NORMLAB_LOSS_SMOOTH_TILE_SUM=0: one tl.sum per tile, as lanes of a few columns always do.
SMOOTH_TILE_SUM: tl.constexpr = tl.constexpr(
    os.environ.get("NORMLAB_LOSS_SMOOTH_TILE_SUM", "1") != "0")
SMOOTH_PART: tl.constexpr = tl.constexpr(8)  # one 16-byte bf16 vector a thread
# Label CE's one-hot outside the gradient loops: the tiles store p (times scale) with no compare
# against the label's column, and the label's own gradient is written once after them (an
# overwrite, so not with ACCUMULATE; docs/planner.md#the-one-hot-after-the-loops).
# NORMLAB_LOSS_LABEL_AFTER=0 keeps the compare in the loop.
LABEL_AFTER: tl.constexpr = tl.constexpr(os.environ.get("NORMLAB_LOSS_LABEL_AFTER", "1") != "0")
# e^v as one MUFU.EX2 of v log2(e) with denormal results flushed to zero (ex2.approx.ftz.f32):
# plain exp's ex2.approx.f32 adds a range test and two multiplies for denormal results, 3 of the
# ~11 instructions a logit of label CE's statistics loop. A result below 2^-126 (an argument
# below -87.3) becomes 0 instead of a denormal: after the max shift, a term that adds nothing to
# an fp32 sum holding a 1 (docs/planner.md#one-instruction-exp). GPU only (the interpreter has
# no PTX); NORMLAB_LOSS_FAST_EXP=0 turns it off.
FAST_EXP: tl.constexpr = tl.constexpr(
    not _runtime.INTERPRET and os.environ.get("NORMLAB_LOSS_FAST_EXP", "1") != "0")
# Softcap's gradient pass takes e^v from poly_exp2 (the FMA pipe) instead of ex2.approx: its two
# tanh and two exp a logit put four MUFU ops a logit on a pipe of 16 a clock an SM, whose time at
# V = 131072 is level with its bytes' (docs/planner.md#softcaps-exp-on-the-fma-pipe). The
# statistics' pass keeps the MUFU exp, so the loss is unchanged. Off: 1.7-2.7% slower on an H100;
# NORMLAB_LOSS_POLY_EXP2=1 turns it on.
SOFTCAP_POLY_EXP2: tl.constexpr = tl.constexpr(
    os.environ.get("NORMLAB_LOSS_POLY_EXP2", "0") != "0")
# 1.5 * 2^23 + 127: v + EXP2_ROUND (round to nearest) holds round(v) + 127 in its low mantissa
# bits, 2^round(v)'s exponent field (poly_exp2).
EXP2_ROUND: tl.constexpr = tl.constexpr(12583039.0)
LOG2E: tl.constexpr = tl.constexpr(1.4426950408889634)
FLT_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)
LN2: tl.constexpr = tl.constexpr(0.6931471805599453)
# log1p's switch from its series to a log: at u = 1/16 the series to u^5 is within 2^-22 of the
# result, and the log's absolute error, about 2^-23 (1 + u's rounding and lg2.approx's), is
# 2^-19 of it.
LOG1P_SERIES_MAX: tl.constexpr = tl.constexpr(0.0625)
TWO_LOG2E: tl.constexpr = tl.constexpr(2.8853900817779268)  # 2 / ln 2: exp(2v) = exp2(v 2 log2 e)
# Elements per step of a launch's row count and final sum (counted_rows, finish_reduction).
REDUCE_BLOCK: tl.constexpr = tl.constexpr(1024)


@triton.jit
def fp32_options(xparam, beta, smoothing, uniform_weight, z_loss):
    """The float options as fp32: torch.compile hands a kernel its float arguments as fp64
    constants, and an fp64 one would reach the helpers' fp32 arithmetic (and their returns)."""
    return (tl.cast(xparam, tl.float32), tl.cast(beta, tl.float32),
            tl.cast(smoothing, tl.float32), tl.cast(uniform_weight, tl.float32),
            tl.cast(z_loss, tl.float32))  # fmt: skip


@triton.jit
def fast_exp(v):
    """e^v: tl.exp, or with FAST_EXP one ex2.approx.ftz.f32 (above)."""
    if FAST_EXP:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [v * LOG2E],
                                         dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip
    return tl.exp(v)


@triton.jit
def fast_exp_shifted(v, c):
    """e^(v - c) for a row's scalar c: with FAST_EXP one FFMA, v log2 e - c log2 e, into
    ex2.approx.ftz.f32 (fast_exp's FADD and FMUL, less one instruction a logit); tl.exp(v - c)
    otherwise. v is already max-shifted, so c's rounding stays as small as v - c's."""
    if FAST_EXP:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r",
                                         [tl.fma(v, LOG2E, -(c * LOG2E))], dtype=tl.float32,
                                         is_pure=True, pack=1)  # fmt: skip
    return tl.exp(v - c)


@triton.jit
def poly_exp2(v, DEGREE: tl.constexpr):
    """2^v with no MUFU op: 2^round(v) built in the exponent bits, times a minimax polynomial of
    2^r on r = v - round(v) in [-1/2, 1/2] (Cody and Waite's reduction; FlashAttention-4 takes
    exp2 to the FMA pipe likewise). Relative error in fp32, DEGREE 3: 7.5e-5 (2^-13.7, for a
    16-bit result); 5: 2.2e-7 (2^-22.1, about 2 ulp). Coefficients: ``scripts/exp2_poly.py``.
    Nine instructions at DEGREE 3 (a clamp, three FADD, three FFMA, a shift, a multiply).
    Arguments below -126 give about 2^-126, not 0; NaN gives NaN; for v <= 127."""
    v = tl.maximum(v, -126.0, propagate_nan=tl.PropagateNan.ALL)
    t = v + EXP2_ROUND
    r = v - (t - EXP2_ROUND)  # exact: t - EXP2_ROUND is round(v)
    if DEGREE == 3:
        q = tl.fma(tl.fma(tl.fma(0.0551716685295105, r, 0.2426111251115799), r,
                          0.6932609677314758), r, 0.9999280571937561)  # fmt: skip
    else:
        tl.static_assert(DEGREE == 5, "poly_exp2: DEGREE 3 or 5")
        q = tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(0.0013276472454890609, r, 0.009675540961325169),
                                        r, 0.05550713092088699), r, 0.24022120237350464), r,
                          0.6931469440460205), r, 1.0000001192092896)  # fmt: skip
    scale = (t.to(tl.int32, bitcast=True) << 23).to(tl.float32, bitcast=True)  # 2^round(v)
    return q * scale


@triton.jit
def safe_max(m):
    """A running max usable as a shift: 0 while the row has seen only -inf (avoids inf - inf)."""
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def finite_floor(v):
    """v with -inf and NaN raised to -FLT_MAX, one FMNMX (the GPU's max.f32 and the interpreter's
    np.fmax, Triton 3.9, return the other operand of a NaN). For a factor that is -inf or NaN
    only where the probability multiplying it is 0 (or in a NaN row, NaN by its sums): 0 * v
    stays 0, where a test of the probability and a select took two instructions a logit."""
    return tl.maximum(v, -FLT_MAX)


@triton.jit
def finite_ceil(v):
    """v with +inf and NaN lowered to FLT_MAX (finite_floor's mirror)."""
    return tl.minimum(v, FLT_MAX)


@triton.jit
def max_pair(a0, b0, a1, b1):
    return tl.maximum(a0, a1), tl.maximum(b0, b1)


@triton.jit
def tanh(v, APPROX: tl.constexpr):
    """tanh in fp32, 1 - 2 / (exp(2v) + 1): one exp2 and one division per element, exact at
    +-inf and NaN for NaN (the interpreter has no libdevice). Below |v| = 1/8, where that
    cancels, a Taylor series (relative error < 3e-7 either side). APPROX: the GPU's
    tanh.approx.f32 instead (one MUFU op, relative error up to 2^-10.99; not the interpreter)."""
    if APPROX:
        r = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [v], dtype=tl.float32,
                                      is_pure=True, pack=1)  # fmt: skip
    else:
        v2 = v * v
        series = v * (1.0 + v2 * (-1.0 / 3.0 + v2 * (2.0 / 15.0 + v2 * (-17.0 / 315.0))))
        r = tl.where(v2 < 1.0 / 64.0, series, 1.0 - 2.0 / (tl.exp2(v * TWO_LOG2E) + 1.0))
    return r


@triton.jit
def transform(v, xparam, XFORM: tl.constexpr):
    """A loaded fp32 logit as the kernels hold it (XFORM: see the module docstring): tanh(v / c)
    for a softcap, whose c ``shifted`` and ``scaled`` apply; as loaded otherwise."""
    if XFORM >= SOFTCAP:  # a scalar reciprocal: no division per element
        v = tanh(v * (1.0 / xparam), XFORM == SOFTCAP_APPROX)
    return v


@triton.jit
def shifted(v, shift, xparam, XFORM: tl.constexpr):
    """A held logit as the loss sees it, less its row's shift (in the loss's units): v xparam -
    shift as one FFMA, where a multiply at the load and a subtraction took two (a temperature,
    the fused form's kernel with T = 2: 96 -> 72 registers, T = 1's count; soft CE T = 2 at
    4096 x 131072: 1.14 -> 1.11x soft CE, loss_options_1f4f753). Exact at the max only where
    xparam is a power of two: elsewhere the FMA keeps the rounding of max xparam."""
    if XFORM != 0:
        return tl.fma(v, xparam, -shift)
    return v - shift


@triton.jit
def scaled(v, xparam, XFORM: tl.constexpr):
    """A held value (a tile's max, a logit, a sum of logits) in the loss's units: max(v xparam)
    = xparam max(v) for xparam > 0 (the host's check), one multiply per lane or row instead of
    one per logit."""
    if XFORM != 0:
        v = v * xparam
    return v


@triton.jit
def loss_logit(v, xparam, XFORM: tl.constexpr):
    """A loaded fp32 logit in the loss's units (label CE's x[label]): c tanh(v / c) under a
    softcap."""
    return scaled(transform(v, xparam, XFORM), xparam, XFORM)


@triton.jit
def exp_shifted(v, shift, xparam, XFORM: tl.constexpr, POLY: tl.constexpr = False):
    """e^shifted(v, shift). A softcap's held tanh is bounded (|v| <= 1, and the shift at most c
    + log V), so with FAST_EXP its c, log2 e and the shift fold into one FFMA: v (c log2 e) -
    shift log2 e into ex2.approx.ftz.f32, each rounding at most (c + log V) 2^-24 of the
    exponent; with POLY into poly_exp2, of degree 3 where the tanh is tanh.approx (16-bit
    logits, so a 16-bit gradient), 5 otherwise. Unbounded logits take fast_exp of shifted
    (exact near the max at any size)."""
    if (XFORM >= SOFTCAP) and (FAST_EXP or POLY):
        arg = tl.fma(v, xparam * LOG2E, -(shift * LOG2E))
        if POLY:
            if XFORM == SOFTCAP_APPROX:
                e = poly_exp2(arg, 3)
            else:
                e = poly_exp2(arg, 5)
        else:
            e = tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=r,r", [arg],
                                          dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip
        return e
    return fast_exp(shifted(v, shift, xparam, XFORM))


@triton.jit
def reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, d_x, d_t, KIND: tl.constexpr):
    """acc (see online_tile) moved to a new max frame: d_x = new - old x shift (d_t: target's),
    alpha_* = exp(old - new) the matching sum rescales. Soft CE and the KLs only."""
    if KIND == RKL:
        acc = alpha_x * (acc + (d_t - d_x) * s_x)
    elif KIND == FKL:
        acc = alpha_t * (acc + (d_x - d_t) * s_t)
    else:
        acc = alpha_t * (acc - d_x * s_t)
    return acc


@triton.jit
def tile_cols(BLOCK: tl.constexpr, LANE: tl.constexpr):
    """Column offsets of a tile as a (BLOCK // LANE, LANE) grid: each grid row is one lane of
    the running statistics (see online_tile; config.entropy_lane)."""
    return tl.arange(0, BLOCK // LANE)[:, None] * LANE + tl.arange(0, LANE)[None, :]


@triton.jit
def thread_grid(x, THREADS: tl.constexpr, VEC: tl.constexpr):
    """A one-lane tile (1, BLOCK) as (BLOCK / (THREADS VEC), THREADS, VEC): column a THREADS VEC
    + b VEC + c at [a, b, c], so axis 1 is the thread that loaded it (VEC columns a 16-byte
    vector, THREADS = 32 num_warps): reducing axes 2 and 0 stays in each thread's registers."""
    return tl.reshape(x, (x.shape[1] // (THREADS * VEC), THREADS, VEC))


@triton.jit
def online_tile(x, t, m_x, s_x, m_t, s_t, acc, xparam, KIND: tl.constexpr, SMOOTH: tl.constexpr,
                XFORM: tl.constexpr, WHOLE: tl.constexpr = False, THREADS: tl.constexpr = 0,
                VEC: tl.constexpr = 8):  # fmt: skip
    """Fold one held fp32 tile (a tile_cols grid, -inf on masked lanes; see transform) into
    running statistics, in the loss's units (a temperature's 1 / T or a softcap's c applied
    here: ``shifted``, ``scaled``), kept per lane (per grid row: vectors of BLOCK // LANE).
    Lanes of a few columns reduce within a thread, so a tile costs no cross-warp round trip;
    fold_stats folds the lanes once a row.

    s_x = sum exp(x - safe(m_x)); s_t likewise. acc, in the same shifted frame:
      reverse KL  sum e_x ((x - m_x) - (t - m_t))   ->  L = acc / s_x - log s_x + log s_t
      soft CE     sum e_t (x - m_x)                 ->  L = log s_x - acc / s_t
      forward KL  sum e_t ((t - m_t) - (x - m_x))   ->  L = acc / s_t - log s_t + log s_x
    JSD keeps no acc here (see jsd_sums). Label CE with SMOOTH keeps s_t = sum x, unshifted, in
    smoothing_sums' shape: a WHOLE tile (no masked lane) sums x, so a -inf logit makes the sum
    -inf and the smoothed loss +inf, as torch's; an edge tile's t is load_edge_tile's sums of its
    kept columns. With THREADS > 0 (label CE's one-lane tiles; config.entropy_threads), m_x and
    s_x are one value per thread instead (thread_grid): a tile reduces in registers, with no
    cross-warp exchange.
    Both tile maxima come from one two-operand reduction (PAIRED_MAXIMA; two tl.max under the
    interpreter). The three sums stay separate tl.sum calls: the Triton interpreter folds a
    multi-operand reduction sequentially in fp32, which the CPU tests can tell apart.
    """
    # The rescale factors use the raw old max: exp(-inf - new) = 0 while nothing was summed yet
    # (the safe 0 would give exp(0 - new) = inf for a row whose logits all sit below -88).
    raw_x = m_x
    old_x = safe_max(m_x)
    if KIND == CE:
        if THREADS > 0:
            xg = thread_grid(x, THREADS, VEC)
            m_x = tl.maximum(m_x, scaled(tl.max(tl.max(xg, axis=2), axis=0), xparam, XFORM))
            new_x = safe_max(m_x)
            e_x = exp_shifted(xg, new_x[None, :, None], xparam, XFORM)
            s_x = s_x * tl.exp(raw_x - new_x) + tl.sum(tl.sum(e_x, axis=2), axis=0)
        else:
            m_x = tl.maximum(m_x, scaled(tl.max(x, axis=1), xparam, XFORM))
            new_x = safe_max(m_x)
            e_x = exp_shifted(x, new_x[:, None], xparam, XFORM)
            s_x = s_x * tl.exp(raw_x - new_x) + tl.sum(e_x, axis=1)
        if SMOOTH:  # an edge tile's t already holds the sums of its kept columns
            if WHOLE:
                s_t = s_t + smoothing_sums(x)
            else:
                s_t = s_t + t
    else:
        raw_t = m_t
        old_t = safe_max(m_t)
        if PAIRED_MAXIMA:
            tile_max_x, tile_max_t = tl.reduce((x, t), 1, max_pair)
        else:
            tile_max_x = tl.max(x, axis=1)
            tile_max_t = tl.max(t, axis=1)
        m_x = tl.maximum(m_x, scaled(tile_max_x, xparam, XFORM))
        m_t = tl.maximum(m_t, scaled(tile_max_t, xparam, XFORM))
        new_x = safe_max(m_x)
        new_t = safe_max(m_t)
        alpha_x = tl.exp(raw_x - new_x)
        alpha_t = tl.exp(raw_t - new_t)
        xs = shifted(x, new_x[:, None], xparam, XFORM)
        ts = shifted(t, new_t[:, None], xparam, XFORM)
        e_x = fast_exp(xs)
        e_t = fast_exp(ts)
        # Zero-weight terms count 0 (x = -inf would give 0 * inf): the KLs' differences are -inf
        # or NaN only where their weight is 0 (finite_floor). Soft CE's term e_t xs is never
        # above 0 (xs <= 0 up to the rounding of a temperature's shift) and -inf where q > 0 (a
        # loss of +inf), so one FMNMX with 0 turns only its 0 * -inf = NaN into 0.
        if KIND == RKL:
            term = e_x * finite_floor(xs - ts)
        elif KIND == FKL:
            term = e_t * finite_floor(ts - xs)
        elif KIND == SCE:
            term = tl.minimum(e_t * xs, 0.0)
        tile_s_x = tl.sum(e_x, axis=1)
        tile_s_t = tl.sum(e_t, axis=1)
        if KIND != JSD:
            tile_acc = tl.sum(term, axis=1)
            acc = reframe_acc(acc, s_x, s_t, alpha_x, alpha_t, new_x - old_x, new_t - old_t,
                               KIND) + tile_acc  # fmt: skip
        s_x = s_x * alpha_x + tile_s_x
        s_t = s_t * alpha_t + tile_s_t
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def row_frames(row, x_row_stride, t_row_stride, grad_row_stride, ALIGN: tl.constexpr,
                FRAME: tl.constexpr):  # fmt: skip
    """(x, t, grad offsets, lead) of a row's frame: the columns the kernels index.

    ALIGN == 1: the row itself (lead 0). ALIGN > 1 (ALIGN columns per 16 bytes, for rows that do
    not start on a 16-byte boundary, e.g. V = 50257; the host checked that the three strides are
    equal): the frame starts at the FRAME-column boundary at or before the row (FRAME a multiple
    of ALIGN; the host checked that the tensors start on one), lead columns early, so every whole
    tile is one aligned vector load per thread. Triton cannot prove row * stride aligned there
    and falls back to 2-byte loads. See config.ENTROPY_FRAME_BYTES for FRAME > ALIGN.
    """
    x_off = row * x_row_stride
    t_off = row * t_row_stride
    grad_off = row * grad_row_stride
    lead = 0
    if ALIGN > 1:
        lead = x_off % FRAME
        x_off = tl.multiple_of(x_off - lead, ALIGN)
        t_off = x_off
        grad_off = x_off
    return x_off, t_off, grad_off, lead


@triton.jit
def tile_span(lo, hi, BLOCK: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr):
    """(n_full, first) of the columns [lo, hi) of a frame: n_full tiles come before the last
    (maybe partial) one; first = 1 when the first of them holds lanes before lo (ALIGN > 1).

    An empty chunk (-ALIGN < hi <= 0, see _entropy_chunked_kernel) gets n_full 0 on a GPU
    (division truncates) and -1 in the interpreter (floors), or 0 with CLAMP_HI: either way its
    only tile is masked out. CLAMP_HI changes no value the kernels pass, only triton 3.6's code:
    with it the fused label CE ran 196.7 against 202.4 us at V = 32768, without it the chunked
    4096 tile 756.2 against 812.5 at 131072 (dev/sweep_launch_configs_h200.json, "8cebc9b+ab").
    """
    if CLAMP_HI:
        hi = tl.maximum(hi, 1)
    n_full = (hi - 1) // BLOCK
    first = 0
    if ALIGN > 1:
        first = ((lo > 0) & (n_full > 0)).to(tl.int32)
    return n_full, first


@triton.jit
def row_statistics(x_row, t_row, lo, hi, xparam, KIND: tl.constexpr, BLOCK: tl.constexpr,
                    LANE: tl.constexpr, ALIGN: tl.constexpr, CLAMP_HI: tl.constexpr,
                    XFORM: tl.constexpr, SMOOTH: tl.constexpr,
                    THREADS: tl.constexpr = 0):  # fmt: skip
    """Online statistics of the columns [lo, hi) of a frame (lo < FRAME, 0 when ALIGN == 1):
    whole tiles unmasked in a loop, then the last tile (masked unless whole: see grad_pass);
    with lo > 0 the first tile is masked too.

    Returns the raw statistics (lanes folded) and the last tile (fp32) so a gradient pass can
    reuse it. A gradient pass takes its tiles from tile_span: a span returned from here would
    derive from the row pointers, and Inductor's mutation analysis would take them as written
    (see check_label). Loads are marked evict_last so the row stays in L2 for the fused kernel's
    gradient pass, whose own loads and stores are evict_first (H200, reverse KL 4096 x 32768:
    321 us against 343 us without the hints; benchmarks/data/dev/sweep_launch_configs_h200.json,
    "entropy"). Label smoothing's logit sum over one-lane tiles is kept in partial sums
    (SMOOTH_TILE_SUM), reduced here. THREADS > 0 (label CE, LANE == BLOCK): statistics a
    thread, folded here; label smoothing's sum keeps its own shape (smoothing_sums).
    """
    cols = tile_cols(BLOCK, LANE)
    VEC: tl.constexpr = 128 // x_row.dtype.element_ty.primitive_bitwidth  # one 16-byte vector
    if THREADS > 0:
        tl.static_assert((KIND == CE) and (LANE == BLOCK) and (BLOCK % (THREADS * VEC) == 0))
        m_x = tl.full([THREADS], float("-inf"), tl.float32)
        s_x = tl.zeros([THREADS], tl.float32)
    else:
        m_x = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
        s_x = tl.zeros([BLOCK // LANE], tl.float32)
    m_t = tl.full([BLOCK // LANE], float("-inf"), tl.float32)
    if SMOOTH and (SMOOTH_TILE_SUM and (LANE == BLOCK)):  # see online_tile
        s_t = tl.zeros([1, BLOCK // SMOOTH_PART], tl.float32)
    else:
        s_t = tl.zeros([BLOCK // LANE], tl.float32)
    acc = tl.zeros([BLOCK // LANE], tl.float32)
    n_full, first = tile_span(lo, hi, BLOCK, ALIGN, CLAMP_HI)
    if ALIGN > 1:  # a constexpr branch: compiled only for the aligned frames
        if first > 0:
            x, t = load_edge_tile(x_row, t_row, cols, lo, hi, xparam, KIND, "evict_last", ALIGN,
                                  XFORM, SMOOTH)  # fmt: skip
            m_x, s_x, m_t, s_t, acc = online_tile(x, t, m_x, s_x, m_t, s_t, acc, xparam, KIND,
                                                  SMOOTH, XFORM, False, THREADS, VEC)  # fmt: skip
    for i in range(first, n_full):
        x = tl.load(x_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
        x = transform(x, xparam, XFORM)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + i * BLOCK + cols, eviction_policy="evict_last").to(tl.float32)
            t = transform(t, xparam, XFORM)
        m_x, s_x, m_t, s_t, acc = online_tile(x, t, m_x, s_x, m_t, s_t, acc, xparam, KIND,
                                              SMOOTH, XFORM, True, THREADS, VEC)  # fmt: skip
    if ALIGN > 1:
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):  # whole (an inner chunk's)
            x_last = tl.load(x_row + n_full * BLOCK + cols,
                             eviction_policy="evict_last").to(tl.float32)  # fmt: skip
            x_last = transform(x_last, xparam, XFORM)
            if KIND == CE:
                t_last = smoothing_sums(x_last) if SMOOTH else x_last  # all kept
            else:
                t_last = tl.load(t_row + n_full * BLOCK + cols,
                                 eviction_policy="evict_last").to(tl.float32)  # fmt: skip
                t_last = transform(t_last, xparam, XFORM)
        else:
            x_last, t_last = load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, xparam,
                                             KIND, "evict_last", ALIGN, XFORM,
                                             SMOOTH)  # fmt: skip
    else:
        x_last, t_last = load_edge_tile(x_row, t_row, n_full * BLOCK + cols, lo, hi, xparam,
                                         KIND, "evict_last", ALIGN, XFORM, SMOOTH)  # fmt: skip
    m_x, s_x, m_t, s_t, acc = online_tile(x_last, t_last, m_x, s_x, m_t, s_t, acc, xparam, KIND,
                                          SMOOTH, XFORM, False, THREADS, VEC)  # fmt: skip
    if KIND == CE:  # the gradient pass holds x alone (t_last was smoothing's sums)
        t_last = x_last
    if SMOOTH and (SMOOTH_TILE_SUM and (LANE == BLOCK)):
        s_t = tl.sum(s_t, axis=1)  # the one lane's logit sum, once a row
    m_x, s_x, m_t, s_t, acc = fold_stats(m_x, s_x, m_t, s_t, acc,
                                          tl.full([BLOCK // LANE], 1, tl.int1), KIND,
                                          SMOOTH)  # fmt: skip
    if SMOOTH:
        s_t = scaled(s_t, xparam, XFORM)  # the held logits' sum in the loss's units
    return m_x, s_x, m_t, s_t, acc, x_last, t_last


@triton.jit
def smoothing_sums(x):
    """Label smoothing's sums of a tile's logits (a tile_cols grid), as online_tile keeps them:
    on a one-lane tile with SMOOTH_TILE_SUM, (1, BLOCK / SMOOTH_PART) partial sums, each within
    a thread (row_statistics reduces them once a row); else one sum a grid row."""
    if SMOOTH_TILE_SUM and (x.shape[0] == 1):
        return tl.sum(tl.reshape(x, (1, x.shape[1] // SMOOTH_PART, SMOOTH_PART)), axis=2)
    else:
        return tl.sum(x, axis=1)


@triton.jit
def load_edge_tile(x_row, t_row, offs, lo, hi, xparam, KIND: tl.constexpr,
                    EVICTION: tl.constexpr, ALIGN: tl.constexpr, XFORM: tl.constexpr,
                    CE_SMOOTH: tl.constexpr = False):  # fmt: skip
    """Columns offs of a frame as fp32 (transformed: see transform), -inf outside [lo, hi) (the
    first or last tile). Label CE's t is x; with CE_SMOOTH it is smoothing_sums of the columns
    in [lo, hi) instead (a -inf logit there makes its sum -inf, as torch's), reduced within each
    thread, so that no second tile is held and no warp waits for another.

    ALIGN > 1: loaded in whole 16-byte vectors, the outside lanes dropped in registers; an exact
    mask would split every vector into 2-byte loads. A vector loaded here holds one of the row's
    own columns, so it lies in the same 16-byte granule as an element of the tensor: inside the
    allocation (the host checked the data pointer is 16-byte aligned; CUDA allocations are whole
    512-byte blocks).
    """
    if ALIGN > 1:
        keep = (offs >= lo) & (offs < hi)
        hi_vec = tl.multiple_of(tl.cdiv(tl.maximum(hi, 0), ALIGN) * ALIGN, ALIGN)
        in_vec = (offs >= 0) & (offs < hi_vec)
        x = tl.load(x_row + offs, mask=in_vec, other=float("-inf"), eviction_policy=EVICTION)
        x = tl.where(keep, transform(x.to(tl.float32), xparam, XFORM), float("-inf"))
        if KIND == CE:
            t = smoothing_sums(tl.where(keep, x, 0.0)) if CE_SMOOTH else x
        else:
            t = tl.load(t_row + offs, mask=in_vec, other=float("-inf"), eviction_policy=EVICTION)
            t = tl.where(keep, transform(t.to(tl.float32), xparam, XFORM), float("-inf"))
    else:
        keep = offs < hi
        x = tl.load(x_row + offs, mask=keep, other=float("-inf"), eviction_policy=EVICTION)
        x = transform(x.to(tl.float32), xparam, XFORM)
        if XFORM >= SOFTCAP:  # the cap maps -inf to -xparam: outside lanes stay -inf
            x = tl.where(keep, x, float("-inf"))
        if KIND == CE:
            t = smoothing_sums(tl.where(keep, x, 0.0)) if CE_SMOOTH else x
        else:
            t = tl.load(t_row + offs, mask=keep, other=float("-inf"), eviction_policy=EVICTION)
            t = transform(t.to(tl.float32), xparam, XFORM)
    return x, t


@triton.jit
def finish_loss(m_x, s_x, s_t, acc, x_label, smoothing, uniform_weight, z_loss,
                KIND: tl.constexpr, SMOOTH: tl.constexpr, ZLOSS: tl.constexpr):  # fmt: skip
    """Row loss from the statistics (see online_tile for acc; x_label only for label CE; JSD's
    is jsd_loss). Label CE: lse - x[label], smoothed (1 - eps) (lse - x[label]) +
    (eps lse - eps / V sum_j x_j), plus z lse^2."""
    if KIND == RKL:
        loss = acc / s_x - tl.log(s_x) + tl.log(s_t)
    elif KIND == SCE:
        loss = tl.log(s_x) - acc / s_t
    elif KIND == FKL:
        loss = acc / s_t - tl.log(s_t) + tl.log(s_x)
    else:
        loss = (safe_max(m_x) - x_label) + tl.log(s_x)
        if SMOOTH:
            lse = safe_max(m_x) + tl.log(s_x)
            loss = (1.0 - smoothing) * loss + (smoothing * lse - uniform_weight * s_t)
        if ZLOSS:
            lse = safe_max(m_x) + tl.log(s_x)
            loss += z_loss * lse * lse
    return loss


@triton.jit
def kl_shift_of(acc, s_x, KIND: tl.constexpr):
    """The row constant of tile_grad: acc / s_x (reverse KL's KL(p || q)); JSD's acc, already
    R_p (see the module docstring)."""
    if KIND == JSD:
        kl_shift = acc
    else:
        kl_shift = acc / s_x
    return kl_shift


@triton.jit
def fast_log(w):
    """log w for w in [1, 2]: tl.log, or with FAST_EXP one lg2.approx.ftz.f32 (absolute error
    below 2^-22 there; tl.log is a polynomial of ~20 instructions in Triton 3.6)."""
    if FAST_EXP:
        return LN2 * tl.inline_asm_elementwise("lg2.approx.ftz.f32 $0, $1;", "=r,r", [w],
                                               dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip
    return tl.log(w)


@triton.jit
def log1p(u):
    """log(1 + u) for 0 <= u <= 1 (NaN for NaN): below LOG1P_SERIES_MAX its series to u^5
    (relative error below u^5 / 6), above it fast_log of the rounded 1 + u (absolute error
    about 2^-23)."""
    series = u * (1.0 - u * (0.5 - u * (1.0 / 3.0 - u * (0.25 - u * 0.2))))
    return tl.where(u < LOG1P_SERIES_MAX, series, fast_log(1.0 + u))


@triton.jit
def softplus_pair(z):
    """(softplus(z), softplus(-z)) = (log(1 + e^z), log(1 + e^-z)): max(+-z, 0) plus one shared
    log1p(e^-|z|), accurate for |z| far above 0 too; inf at z = +-inf."""
    shared = log1p(fast_exp(-tl.abs(z)))
    return tl.maximum(z, 0.0) + shared, tl.maximum(-z, 0.0) + shared


@triton.jit
def softplus(z):
    """log(1 + exp(z)), accurate for z far below 0; inf at z = inf."""
    return tl.maximum(z, 0.0) + log1p(fast_exp(-tl.abs(z)))


@triton.jit
def jsd_z_shift(log_s_x, log_s_t, beta):
    """The row's constant of z = log(beta q / ((1 - beta) p)) = (ts - xs) + this, ts and xs
    the max-shifted target and logit (see the module docstring): log p = xs - log s_x, log q =
    ts - log s_t."""
    return (log_s_x - log_s_t) + tl.log(beta / (1.0 - beta))


@triton.jit
def jsd_sums(x_row, t_row, lo, hi, shift_x, shift_t, log_s_x, log_s_t, xparam, beta,
             BLOCK: tl.constexpr, LANE: tl.constexpr, ALIGN: tl.constexpr,
             XFORM: tl.constexpr):  # fmt: skip
    """JSD's second pass: (sum p softplus(z), sum q softplus(-z)) over the columns [lo, hi) of a
    frame, from the row's final statistics (every tile loaded as an edge tile: -inf outside);
    terms with p = 0 (q = 0) count 0."""
    cols = tile_cols(BLOCK, LANE)
    z_shift = jsd_z_shift(log_s_x, log_s_t, beta)
    r_p = tl.zeros([BLOCK // LANE], tl.float32)
    r_q = tl.zeros([BLOCK // LANE], tl.float32)
    for i in range(tl.cdiv(tl.maximum(hi, 0), BLOCK)):
        x, t = load_edge_tile(x_row, t_row, i * BLOCK + cols, lo, hi, xparam, JSD, "evict_last",
                              ALIGN, XFORM)  # fmt: skip
        xs = shifted(x, shift_x, xparam, XFORM)
        ts = shifted(t, shift_t, xparam, XFORM)
        z = (ts - xs) + z_shift
        p = fast_exp_shifted(xs, log_s_x)
        q = fast_exp_shifted(ts, log_s_t)
        sp_z, sp_neg_z = softplus_pair(z)
        r_p += tl.sum(p * finite_ceil(sp_z), axis=1)  # +inf or NaN only where p = 0
        r_q += tl.sum(q * finite_ceil(sp_neg_z), axis=1)
    return tl.sum(r_p, axis=0), tl.sum(r_q, axis=0)


@triton.jit
def jsd_loss(r_p, r_q, log_s_x, log_s_t, beta):
    """beta KL(q || m) + (1 - beta) KL(p || m) = H(beta) - beta r_q - (1 - beta) r_p from
    jsd_sums's (r_p, r_q), H(beta) = -beta log beta - (1 - beta) log(1 - beta); NaN when either
    distribution is (NaN or +inf in the row, or no finite logit: the sums' floored factors
    would drop those terms)."""
    entropy = -beta * tl.log(beta) - (1.0 - beta) * tl.log(1.0 - beta)
    return (entropy - beta * r_q - (1.0 - beta) * r_p) + (log_s_x + log_s_t) * 0.0


@triton.jit
def tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, xparam,
              beta, smoothing, uniform_weight, z_loss, KIND: tl.constexpr, XFORM: tl.constexpr,
              SMOOTH: tl.constexpr, ZLOSS: tl.constexpr,
              ONE_HOT: tl.constexpr = True):  # fmt: skip
    """Gradient of one held tile (see transform), times scale, in the max-shifted frame of the row
    statistics. kl_shift: reverse KL's KL(p || q), JSD's R_p (module docstring). Label CE
    without ONE_HOT leaves the label's column out (label_fixup writes it).

    log p - log q - KL = (x - shift_x) - (t - shift_t) - acc / s_x: no O(|logit|) terms cancel,
    so the result stays exact to fp32 even at |logits| ~ 1e4 (lse + KL would lose ~1e-3). JSD's
    (1 - beta) and a temperature's 1 / T are in scale (the host's).
    """
    if (KIND == CE) and (XFORM >= SOFTCAP):  # one FFMA a logit (exp_shifted)
        p = exp_shifted(x, shift_x + log_s_x, xparam, XFORM, SOFTCAP_POLY_EXP2)
    else:
        xs = shifted(x, shift_x, xparam, XFORM)
        p = fast_exp_shifted(xs, log_s_x)
    if KIND == RKL:
        # d - KL with d floored (finite_floor): an infinite KL (q = 0 where p > 0) still gives
        # torch's NaN and -inf in its row
        g = p * (finite_floor(xs - shifted(t, shift_t, xparam, XFORM)) - kl_shift)
    elif (KIND == SCE) or (KIND == FKL):
        g = p - fast_exp_shifted(shifted(t, shift_t, xparam, XFORM), log_s_t)
    elif KIND == JSD:
        z = ((shifted(t, shift_t, xparam, XFORM) - xs)
             + jsd_z_shift(log_s_x, log_s_t, beta))  # fmt: skip
        g = p * finite_floor(kl_shift - softplus(z))
    else:
        # (p f - w - onehot) scale, f = 1 + 2 z lse (d(z lse^2) = 2 z lse p), w = eps / V: the
        # row's scalars folded first, so a logit takes one FFMA (one FMUL without smoothing)
        p_scale = scale
        if ZLOSS:
            p_scale = scale * (1.0 + 2.0 * z_loss * (shift_x + log_s_x))
        if SMOOTH:
            g = tl.fma(p, p_scale, -(uniform_weight * scale))
        else:
            g = p * p_scale
        if ONE_HOT:
            hot = (1.0 - smoothing) * scale if SMOOTH else scale
            g = g - tl.where(cols == label, hot, 0.0)
        if XFORM >= SOFTCAP:
            # x here is the held tanh(v / c): d(c tanh(v / c)) / dv = 1 - x^2, as g - (g x) x
            g = g - (g * x) * x
    if KIND != CE:
        g = g * scale
    return g


@triton.jit
def nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift, KIND: tl.constexpr):
    """Reverse KL and JSD: a NaN gradient scale for a row whose loss is NaN (NaN or +inf in
    logits or target, or no finite logit). tile_grad's floored factors would zero such a
    row's entries; torch's autograd gives NaN for all of them. Once per row, from the final
    statistics."""
    if KIND == JSD:
        loss = (log_s_x + log_s_t) * 0.0  # as jsd_loss's NaN term
    else:
        loss = kl_shift - log_s_x + log_s_t  # as finish_loss and sharded.combine_partials
    return tl.where(loss != loss, float("nan"), scale)  # a NaN test


@triton.jit
def store_grad(grad_ptrs, g, mask, ACCUMULATE: tl.constexpr, EVICTION: tl.constexpr):
    if ACCUMULATE:  # masked lanes (mask may be None: a whole tile) are not stored
        g += tl.load(grad_ptrs, mask=mask).to(tl.float32)
    tl.store(grad_ptrs, g.to(grad_ptrs.dtype.element_ty), mask=mask, eviction_policy=EVICTION)


@triton.jit
def store_edge_grad(x_row, t_row, grad_row, offs, g, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                     kl_shift, label, scale, xparam, beta, smoothing, uniform_weight, z_loss,
                     KIND: tl.constexpr, ACCUMULATE: tl.constexpr, ALIGN: tl.constexpr,
                     XFORM: tl.constexpr, SMOOTH: tl.constexpr, ZLOSS: tl.constexpr,
                     ONE_HOT: tl.constexpr = True):  # fmt: skip
    """Store the gradient g of an edge tile (columns offs of a frame) to exactly its columns in
    [lo, hi): whole 16-byte vectors from g with one vector store each, the partial vector at
    either end recomputed on ALIGN lanes. (An exact mask over the tile would split every store
    into 2-byte stores: measured 735.7 against 534.0 us for reverse KL fused4096 at V = 50257 vs
    50256.)"""
    lo_vec = tl.multiple_of(tl.cdiv(lo, ALIGN) * ALIGN, ALIGN)  # first whole vector
    hi_vec = tl.multiple_of(tl.maximum(hi, 0) // ALIGN * ALIGN, ALIGN)  # end of the last one
    store_grad(grad_row + offs, g, (offs >= lo_vec) & (offs < hi_vec), ACCUMULATE, "evict_first")
    store_lanes(x_row, t_row, grad_row, lo_vec - ALIGN, lo, tl.minimum(hi, lo_vec), shift_x,
                shift_t, log_s_x, log_s_t, kl_shift, label, scale, xparam, beta, smoothing,
                uniform_weight, z_loss, KIND, ACCUMULATE, ALIGN, XFORM, SMOOTH, ZLOSS,
                ONE_HOT)  # fmt: skip
    store_lanes(x_row, t_row, grad_row, hi_vec, tl.maximum(lo_vec, hi_vec), hi, shift_x, shift_t,
                 log_s_x, log_s_t, kl_shift, label, scale, xparam, beta, smoothing,
                 uniform_weight, z_loss, KIND, ACCUMULATE, ALIGN, XFORM, SMOOTH, ZLOSS,
                 ONE_HOT)  # fmt: skip


@triton.jit
def store_lanes(x_row, t_row, grad_row, start, lo, hi, shift_x, shift_t, log_s_x, log_s_t,
                 kl_shift, label, scale, xparam, beta, smoothing, uniform_weight, z_loss,
                 KIND: tl.constexpr, ACCUMULATE: tl.constexpr, ALIGN: tl.constexpr,
                 XFORM: tl.constexpr, SMOOTH: tl.constexpr, ZLOSS: tl.constexpr,
                 ONE_HOT: tl.constexpr = True):  # fmt: skip
    """Gradient of the columns [lo, hi) of the ALIGN columns from start (one partial vector)."""
    cols = start + tl.arange(0, ALIGN)
    mask = (cols >= lo) & (cols < hi)
    x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
    x = transform(x, xparam, XFORM)
    t = x
    if KIND != CE:
        t = tl.load(t_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
        t = transform(t, xparam, XFORM)
    g = tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale, xparam,
                  beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH, ZLOSS,
                  ONE_HOT)  # fmt: skip
    store_grad(grad_row + cols, g, mask, ACCUMULATE, "evict_first")


@triton.jit
def fill_zero(ptr, lo, hi, BLOCK: tl.constexpr):
    """Store zeros of ptr's dtype to columns [lo, hi) (the gradient of an ignored label CE row)."""
    zeros = tl.zeros([BLOCK], tl.float32).to(ptr.dtype.element_ty)
    for i in range(tl.cdiv(tl.maximum(hi, 0), BLOCK)):
        offs = i * BLOCK + tl.arange(0, BLOCK)
        tl.store(ptr + offs, zeros, mask=(offs >= lo) & (offs < hi))


@triton.jit
def counted_rows(n_valid_ptr, labels_ptr, mask_ptr, ignore_index, n_rows, KIND: tl.constexpr,
                 HAS_MASK: tl.constexpr, COUNT: tl.constexpr):  # fmt: skip
    """The rows a mean counts (label CE's not ignored, a loss_mask's True ones), fp32: loaded
    from n_valid_ptr, or with COUNT counted here from the labels and the mask (exact, an int32
    sum, as torch's count)."""
    if COUNT:
        n = tl.zeros([REDUCE_BLOCK], tl.int32)
        for start in range(0, n_rows, REDUCE_BLOCK):
            offs = start + tl.arange(0, REDUCE_BLOCK)
            keep = offs < n_rows
            if KIND == CE:
                label = tl.load(labels_ptr + offs, mask=keep, other=ignore_index)
                keep = keep & (label != ignore_index)
            if HAS_MASK:
                keep = keep & (tl.load(mask_ptr + offs, mask=keep, other=0) != 0)
            n += keep.to(tl.int32)
        n_valid = tl.sum(n, axis=0).to(tl.float32)
    else:
        n_valid = tl.load(n_valid_ptr)
    return n_valid


@triton.jit
def finish_reduction(loss_ptr, out_ptr, ticket_ptr, n_callers, n_rows, n_valid_ptr, labels_ptr,
                     mask_ptr, ignore_index, KIND: tl.constexpr, REDUCE: tl.constexpr,
                     MEAN_OVER_VALID: tl.constexpr, COUNT: tl.constexpr,
                     HAS_MASK: tl.constexpr):  # fmt: skip
    """The reduced loss of n_rows rows into out_ptr, by the last of the launch's n_callers
    programs that store loss rows (each calls this once, after its stores): REDUCE 1 sums the
    rows, 2 takes their mean (over counted_rows with MEAN_OVER_VALID, else over n_rows), in fp32
    and in row order whichever program is last. ticket_ptr is an int32 that is 0 before the
    launch; the last program sets it back to 0 (the host keeps one per stream). As CUDA's
    threadFenceReduction sample: each program publishes its stores with a release, the last one
    reads after an acquire (bypassing L1)."""
    tl.debug_barrier()  # every thread's store happens before the release
    done = tl.atomic_add(ticket_ptr, 1, sem="acq_rel")
    if done == n_callers - 1:
        acc = tl.zeros([REDUCE_BLOCK], tl.float32)
        for start in range(0, n_rows, REDUCE_BLOCK):
            offs = start + tl.arange(0, REDUCE_BLOCK)
            acc += tl.load(loss_ptr + offs, mask=offs < n_rows, other=0.0, cache_modifier=".cg")
        total = tl.sum(acc, axis=0)
        if REDUCE == 2:
            if MEAN_OVER_VALID:
                total = total / counted_rows(n_valid_ptr, labels_ptr, mask_ptr, ignore_index,
                                             n_rows, KIND, HAS_MASK, COUNT)  # fmt: skip
            else:
                total = total / n_rows
        tl.store(out_ptr, total)
        tl.store(ticket_ptr, 0)


@triton.jit
def check_label(label, ignore_index, vocab_start, vocab_size):
    """(local label, ignored, bad) of a loaded label CE label: bad = not ignored and outside [0,
    vocab_size). The callers load it themselves: Inductor's mutation analysis takes whatever a
    store's address derives from as written, through a helper's arguments too, and a label
    that came out of a helper given labels_ptr would mark the labels written."""
    label = label.to(tl.int64)
    ignored = label == ignore_index
    bad = (label != ignore_index) & ((label < 0) | (label >= vocab_size))
    return label - vocab_start, ignored, bad


@triton.jit
def masked_out(mask_ptr, row):
    """Whether loss_mask drops the row (False there: loss 0, gradient 0, not counted)."""
    return tl.load(mask_ptr + row) == 0


@triton.jit
def store_raw_stats(ptr, slot, n_slots, m_x, s_x, m_t, s_t, acc):
    """Raw statistics (see online_tile) into column ``slot`` of a (5, n_slots) fp32 buffer."""
    tl.store(ptr + slot, m_x)
    tl.store(ptr + n_slots + slot, s_x)
    tl.store(ptr + 2 * n_slots + slot, m_t)
    tl.store(ptr + 3 * n_slots + slot, s_t)
    tl.store(ptr + 4 * n_slots + slot, acc)


@triton.jit
def fold_stats(m_xk, s_xk, m_tk, s_tk, acc_k, keep, KIND: tl.constexpr, SMOOTH: tl.constexpr):
    """Fold raw statistics k (vectors: a tile's lanes or a row's chunks; see online_tile for the
    frames) into one set; k that saw only -inf weighs exactly 0, k outside ``keep`` nothing.
    Label CE reads only m_xk and s_xk (and returns m_t = m_x, s_t = s_x, acc = 0; with SMOOTH,
    s_t = the plain sum of s_tk, the logits' sum)."""
    m_x = tl.max(m_xk, axis=0)
    new_x = safe_max(m_x)
    alpha_x = tl.exp(m_xk - new_x)
    s_x = tl.sum(s_xk * alpha_x, axis=0)
    if KIND == CE:
        m_t = m_x
        s_t = s_x
        if SMOOTH:
            s_t = tl.sum(tl.where(keep, s_tk, 0.0), axis=0)
        acc = tl.zeros([], tl.float32)
    else:
        m_t = tl.max(m_tk, axis=0)
        new_t = safe_max(m_t)
        alpha_t = tl.exp(m_tk - new_t)
        s_t = tl.sum(s_tk * alpha_t, axis=0)
        acc_k = reframe_acc(acc_k, s_xk, s_tk, alpha_x, alpha_t, new_x - safe_max(m_xk),
                             new_t - safe_max(m_tk), KIND)  # fmt: skip
        acc = tl.sum(tl.where(keep, acc_k, 0.0), axis=0)
    return m_x, s_x, m_t, s_t, acc


@triton.jit
def grad_pass(
    x_row,  # frame of the row or chunk (see row_frames)
    t_row,
    grad_row,
    lo,  # the columns [lo, hi) of the frame are the row's
    hi,
    x_last,  # fp32 last tile, still in registers
    t_last,
    n_full,  # tiles before the last one
    first,  # 1 when the first of them starts before lo (peeled by row_statistics)
    m_x,  # raw row statistics (see online_tile)
    s_x,
    m_t,
    s_t,
    acc,
    label,  # label CE: column of the label in the frame
    bad,  # label CE: the label is out of range (the gradient becomes NaN)
    scale,  # fp32: the reduction's (1/n for a mean; counted_rows' for one over counted rows),
    # times 1/T and JSD's 1 - beta
    xparam,  # the options (see tile_grad)
    beta,
    smoothing,
    uniform_weight,
    z_loss,
    KIND: tl.constexpr,
    ACCUMULATE: tl.constexpr,
    BLOCK: tl.constexpr,
    LANE: tl.constexpr,
    ALIGN: tl.constexpr,
    XFORM: tl.constexpr,
    SMOOTH: tl.constexpr,
    ZLOSS: tl.constexpr,
):
    """Write the gradient of the columns [lo, hi) from the row statistics, in reverse tile order:
    the last tile is still in registers, its neighbour likely in L2. Whole tiles store unmasked
    (vectorized); edge tiles store exactly their own columns. JSD: acc is R_p."""
    shift_x = safe_max(m_x)
    shift_t = safe_max(m_t)
    log_s_x = tl.log(s_x)
    log_s_t = tl.log(s_t)
    kl_shift = kl_shift_of(acc, s_x, KIND)
    if KIND == CE:
        scale = tl.where(bad, float("nan"), scale)
    if (KIND == RKL) or (KIND == JSD):
        scale = nan_if_nan_loss(scale, log_s_x, log_s_t, kl_shift, KIND)
    # label CE with LABEL_AFTER: the tiles leave the label out, label_fixup writes it last
    ONE_HOT: tl.constexpr = (KIND != CE) or ACCUMULATE or (not LABEL_AFTER)
    cols = tile_cols(BLOCK, LANE)
    last_cols = n_full * BLOCK + cols
    g = tile_grad(x_last, t_last, last_cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift,
                   label, scale, xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM,
                   SMOOTH, ZLOSS, ONE_HOT)  # fmt: skip
    if ALIGN > 1:
        # An inner chunk's last tile is whole (a row's almost never): stored unmasked. The
        # statistics pass loaded it unmasked too. (Measured with the code as it stands: moving
        # these loads into a helper changed the compiled kernels by -4% to +5%; config.)
        if (hi == (n_full + 1) * BLOCK) & (lo <= n_full * BLOCK):
            store_grad(grad_row + last_cols, g, None, ACCUMULATE, "evict_first")
        else:
            store_edge_grad(x_row, t_row, grad_row, last_cols, g, tl.maximum(lo, n_full * BLOCK),
                             hi, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                             xparam, beta, smoothing, uniform_weight, z_loss, KIND, ACCUMULATE,
                             ALIGN, XFORM, SMOOTH, ZLOSS, ONE_HOT)  # fmt: skip
    else:
        store_grad(grad_row + last_cols, g, last_cols < hi, ACCUMULATE, "evict_first")
    for j in range(n_full - first):
        offs = (n_full - 1 - j) * BLOCK + cols
        x = tl.load(x_row + offs, eviction_policy="evict_first").to(tl.float32)
        x = transform(x, xparam, XFORM)
        if KIND == CE:
            t = x
        else:
            t = tl.load(t_row + offs, eviction_policy="evict_first").to(tl.float32)
            t = transform(t, xparam, XFORM)
        g = tile_grad(x, t, offs, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                       xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH,
                       ZLOSS, ONE_HOT)  # fmt: skip
        store_grad(grad_row + offs, g, None, ACCUMULATE, "evict_first")  # unmasked: vectorized
    if ALIGN > 1:  # a constexpr branch, as the kernels were measured
        if first > 0:  # the peeled first tile: lanes before lo are the previous row's
            x, t = load_edge_tile(x_row, t_row, cols, lo, hi, xparam, KIND, "evict_first", ALIGN,
                                  XFORM)  # fmt: skip
            g = tile_grad(x, t, cols, shift_x, shift_t, log_s_x, log_s_t, kl_shift, label, scale,
                           xparam, beta, smoothing, uniform_weight, z_loss, KIND, XFORM, SMOOTH,
                           ZLOSS, ONE_HOT)  # fmt: skip
            store_edge_grad(x_row, t_row, grad_row, cols, g, lo, BLOCK, shift_x, shift_t,
                             log_s_x, log_s_t, kl_shift, label, scale, xparam, beta, smoothing,
                             uniform_weight, z_loss, KIND, ACCUMULATE, ALIGN, XFORM, SMOOTH,
                             ZLOSS, ONE_HOT)  # fmt: skip
    if not ONE_HOT:
        label_fixup(x_row, grad_row, lo, hi, label, shift_x, log_s_x, scale, xparam, smoothing,
                    uniform_weight, z_loss, XFORM, SMOOTH, ZLOSS)


@triton.jit
def label_fixup(x_row, grad_row, lo, hi, label, shift_x, log_s_x, scale, xparam, smoothing,
                uniform_weight, z_loss, XFORM: tl.constexpr, SMOOTH: tl.constexpr,
                ZLOSS: tl.constexpr):  # fmt: skip
    """Label CE with LABEL_AFTER: the label's column, when it lies in [lo, hi), gets its whole
    gradient, stored over the tile's p after every thread's tile stores (a barrier). An
    out-of-range label lies outside the frame; its row's scale is NaN already."""
    tl.debug_barrier()
    if (label >= lo) & (label < hi):
        x = transform(tl.load(x_row + label).to(tl.float32), xparam, XFORM)
        g = tile_grad(x, x, label, shift_x, 0.0, log_s_x, 0.0, 0.0, label, scale, xparam, 0.5,
                      smoothing, uniform_weight, z_loss, CE, XFORM, SMOOTH, ZLOSS)  # fmt: skip
        tl.store(grad_row + label, g.to(grad_row.dtype.element_ty))
