"""The losses' launch planner: which form runs a call, its tiles, frames and chunks, in one place.

Every rule is a named quantity with a one-line reason. The measurements behind each rule are in
``docs/planner.md``, which links the dated notes (among them
``docs/notes/2026-11-30-loss-lanes-chunks-frames.md``, "the loss note" below, and
``docs/notes/2026-11-30-loss-memory-stats-in-grad.md``). The block cap and the fused / split
forms come from Fast-LLM's reverse-KL issue (https://github.com/ServiceNow/Fast-LLM/issues/497).
Tests and sweeps monkeypatch the constants: functions read them at call time. Nothing here
imports a kernel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from normlab import _runtime
from normlab._host import cdiv, next_pow2, plain_tensor

# ---- the calls -----------------------------------------------------------------------------------

KINDS = {"reverse_kl": 0, "soft_cross_entropy": 1, "cross_entropy": 2, "forward_kl": 3,
         "jsd": 4}  # the kernels' KIND
REDUCTIONS = ("mean", "sum", "none")
FORMS = ("auto", "fused", "chunked", "split")
GRAD_IN_FORWARD = ("fused", "chunked")  # forms whose forward writes the gradient
CE = KINDS["cross_entropy"]
JSD = KINDS["jsd"]
XFORMS = {"none": 0, "temperature": 1, "softcap": 2,  # the kernels' XFORM (online.transform)
          "softcap_approx": 3}  # fmt: skip
# Softcap on 16-bit logits takes tanh.approx.f32: its error is about the logits' own rounding at
# most, and it is cheaper. fp32 logits keep the exact one (docs/planner.md#the-approximate-softcap).
SOFTCAP_APPROX_MAX_BYTES = 2


def softcap_xform(logit_bytes: int) -> int:
    """The XFORM of a softcap over logits of ``logit_bytes`` bytes (the interpreter: exact)."""
    if logit_bytes <= SOFTCAP_APPROX_MAX_BYTES and not _runtime.INTERPRET:
        return XFORMS["softcap_approx"]
    return XFORMS["softcap"]


class Options(NamedTuple):
    """A call's loss options, when any differs from its default (JSD's always: beta). Checked
    by ``op``; the kernels see them through ``kernel_args``."""

    temperature: float = 1.0  # the distribution losses: softmax(logits / T)
    beta: float = 0.5  # JSD's mixture weight of the target
    label_smoothing: float = 0.0  # label CE
    z_loss: float = 0.0  # label CE: + z lse^2 per counted row
    softcap: float = 0.0  # label CE: logits -> c tanh(logits / c); 0: none
    has_mask: bool = False  # a loss_mask comes with the call


class Spec(NamedTuple):
    """Static arguments of one loss call (everything that is not a tensor); a tuple, cheap to
    build per call."""

    kind: int
    form: str
    block_cap: int
    reduction: str
    ignore_index: int
    group: object  # a torch.distributed process group over the vocabulary, or None
    vocab_start: int  # this rank's first column (0 unsharded)
    vocab_size: int  # the whole vocabulary
    options: Options | None = None  # None: every option at its default (the kernels as measured)


# A temperature's range. The kernels shift x / T by its row's max in one FMA (online.shifted),
# exact in x / T but not in the shift, rounded to fp32: half an ulp, 64 at |x / T| = 2^30, e^64
# still summable. At T >= 2^-14 logits up to fp16's largest (65504) stay within that; rows past
# it (larger logits at T != 1 and not a power of two) overflow to inf / NaN.
TEMPERATURE_MIN = 2.0**-14
TEMPERATURE_MAX = 2.0**64  # 1 / T stays a normal fp32 (a GPU flushes subnormals to 0)


def options(kind: int, temperature: float, beta: float, label_smoothing: float, z_loss: float,
            softcap: float, has_mask: bool) -> Options | None:
    """The Options of a call, or None where every one is at its default (not for JSD)."""
    if (kind != JSD and temperature == 1.0 and not label_smoothing and not z_loss and not softcap
            and not has_mask):  # fmt: skip
        return None
    return Options(temperature, beta, label_smoothing, z_loss, softcap, has_mask)


def counts_valid(kind: int, reduction: str, has_mask: bool = False) -> bool:
    """Whether the loss divides by the counted rows (label CE's or a loss_mask's mean)."""
    return reduction == "mean" and (kind == CE or has_mask)


# The kernels' REDUCE: the fused and chunked forms reduce the loss rows in the kernel (its last
# program: online.finish_reduction), so a call is one launch and not three or four;
# NORMLAB_LOSS_REDUCE=0 sums in torch instead. Up to ENTROPY_REDUCE_MAX_BYTES of logits: above,
# the sum slows the kernel more than torch's launches cost (docs/planner.md#the-sum-in-the-kernel).
REDUCE_CODES = {"none": 0, "sum": 1, "mean": 2}
REDUCE_IN_KERNEL = _runtime.INTERPRET or os.environ.get("NORMLAB_LOSS_REDUCE", "1") != "0"
ENTROPY_REDUCE_MAX_BYTES = 32 * 2**20


def reduce_in_kernel(n_rows: int, n_cols: int, logit_bytes: int) -> bool:
    """Whether a fused or chunked call of ``n_rows`` x ``n_cols`` logits of ``logit_bytes`` each
    sums its loss in the kernel (above)."""
    return REDUCE_IN_KERNEL and n_rows * n_cols * logit_bytes <= ENTROPY_REDUCE_MAX_BYTES


# A mean's gradient needs the row count first: programs count the labels (online.counted_rows),
# not torch (more launches), while that read is small (docs/planner.md#counting-the-rows-of-a-mean).
ENTROPY_COUNT_READ_RATIO = 8  # label bytes at most 1 / this of the logits a program reads
ENTROPY_COUNT_MIN_BYTES = 2048  # or at most this a program (16 L2 lines)
ENTROPY_COUNT_SM_BYTES = 32 * 1024  # or at most this over one SM's programs


def count_in_kernel(spec: Spec, n_rows: int, n_cols: int, logit_bytes: int, row_bytes: int,
                    compute_grad: bool = True, sm_count: int = 0) -> bool:  # fmt: skip
    """Whether a fused or chunked call counts its mean's rows in the kernel (see above):
    ``row_bytes`` per row of labels and loss_mask, ``logit_bytes`` per logit; without
    ``compute_grad`` only the last program counts. ``sm_count`` 0: the per-SM bound is not
    applied."""
    if not compute_grad:
        return True
    cols = n_cols
    if spec.form == "chunked":
        block = tile(n_cols, spec.block_cap)
        cols = min(n_cols, entropy_chunk_tiles(block) * block)
    label_bytes = n_rows * row_bytes
    if sm_count:
        programs = n_rows * cdiv(n_cols, cols) if cols else n_rows
        if cdiv(programs, sm_count) * label_bytes <= ENTROPY_COUNT_SM_BYTES:
            return True
    return (label_bytes <= ENTROPY_COUNT_MIN_BYTES
            or label_bytes * ENTROPY_COUNT_READ_RATIO <= cols * logit_bytes)  # fmt: skip


def grad_scale(spec: Spec, n_rows: int) -> tuple[float, bool]:
    """(host scale, divide by the device count of counted rows?): the reduction's, times a
    temperature's 1 / T and JSD's 1 - beta (the gradient's constant factors)."""
    opts = spec.options
    if spec.reduction != "mean":
        scale, over_valid = 1.0, False
    elif spec.kind == CE or (opts is not None and opts.has_mask):
        scale, over_valid = 1.0, True
    else:
        scale, over_valid = 1.0 / n_rows, False
    if opts is not None and spec.kind != CE:
        scale = scale / opts.temperature
        if spec.kind == JSD:
            scale = scale * (1.0 - opts.beta)
    return scale, over_valid


def launched_targets(spec: Spec, t, labels) -> tuple:
    """(t, labels) as the kernels take them: label CE reads no target logits and the other
    losses no labels, so that one goes as None (a constexpr: no pointer to launch)."""
    return (None, labels) if spec.kind == CE else (t, None)


_NO_KERNEL_ARGS: dict = {}


def kernel_args(spec: Spec, mask, logit_bytes: int = 4) -> dict:
    """The kernels' option arguments (online's module docstring): none when every option is at
    its default, so the kernels compile as measured; ``mask``: the flat loss_mask or None;
    ``logit_bytes``: the logits' element size (softcap_xform)."""
    opts = spec.options
    if opts is None:
        return _NO_KERNEL_ARGS
    if spec.kind == CE:
        xform = softcap_xform(logit_bytes) if opts.softcap else XFORMS["none"]
        xparam = opts.softcap or 1.0
    else:
        xform = XFORMS["temperature"] if opts.temperature != 1.0 else XFORMS["none"]
        xparam = 1.0 / opts.temperature
    is_ce = spec.kind == CE
    return {
        "mask_ptr": mask, "xparam": xparam, "beta": opts.beta, "smoothing": opts.label_smoothing,
        "uniform_weight": opts.label_smoothing / max(spec.vocab_size, 1), "z_loss": opts.z_loss,
        "XFORM": xform, "HAS_MASK": opts.has_mask, "SMOOTH": is_ce and opts.label_smoothing > 0,
        "ZLOSS": is_ce and opts.z_loss > 0,
    }  # fmt: skip


# ---- column tiles --------------------------------------------------------------------------------

ENTROPY_BLOCK_CAPS = (4096, 8192, 16384, 32768)  # the measured caps (issue #497's option A)
ENTROPY_MIN_BLOCK = 16  # smaller caps exist for the CPU tests' multi-tile paths
ENTROPY_MAX_BLOCK = 65536


def tile(n_cols: int, cap: int) -> int:
    """Column tile: the row's next power of two up to ``cap``, at least one lane wide."""
    return max(min(next_pow2(n_cols), cap), ENTROPY_MIN_BLOCK)


# Fused kernel warps per tile: 4 at 4096 (cheaper cross-warp reductions), 16 at 8192-16384, 32
# at 32768, the occupancy cliff (docs/planner.md#fused-warps-and-register-caps).
ENTROPY_FUSED_WARPS = {4096: 4, 8192: 16, 16384: 16, 32768: 32, 65536: 32}
ENTROPY_FUSED_WARPS_LABEL = {4096: 4, 8192: 16, 16384: 16, 32768: 32, 65536: 32}  # label CE, same
# Register caps per thread by tile: none, capped label CE's options ran slower; other caps:
# benchmarks/loss_options.py --fused-maxnreg (docs/planner.md#fused-warps-and-register-caps).
ENTROPY_FUSED_MAXNREG: dict[int, int] = {}
# Split form: stats 2048 / 4 warps and backward 4096 / 8; the backward tile barely matters
# (docs/planner.md#tiles-of-the-split-form).
ENTROPY_STATS_BLOCK = 2048
ENTROPY_STATS_WARPS = 4
ENTROPY_BACKWARD_BLOCK = 4096
ENTROPY_BACKWARD_WARPS = 8
# Backward rescale of a saved gradient: 2 programs per SM stride the rows, faster than one per
# row; a scalar grad_output of 1 exits after one load (docs/planner.md#the-gradient-rescale).
ENTROPY_RESCALE_BLOCK = 4096
ENTROPY_RESCALE_WARPS = 8
ENTROPY_RESCALE_PROGRAMS_PER_SM = 2


def entropy_num_warps(block: int, table: dict[int, int] | None = None) -> int:
    """Warps for a column tile of ``block`` elements (fused table by default)."""
    table = ENTROPY_FUSED_WARPS if table is None else table
    if block in table:
        return table[block]
    return max(1, min(32, block // 512))  # tiny test-only tiles: ~16 elements per thread


# Running statistics per 8-column lane up to tile 2048 (no cross-warp round trip per tile);
# wider tiles are one lane, lanes there ran slower (docs/planner.md#lane-statistics).
ENTROPY_LANE = 8
ENTROPY_LANE_MAX_BLOCK = 2048


def entropy_lane(block: int) -> int:
    """Columns per lane of the running statistics for a column tile of ``block`` elements."""
    return min(ENTROPY_LANE, block) if block <= ENTROPY_LANE_MAX_BLOCK else block


# Label CE's one-lane tiles keep a running max and sum-exp per thread (of the columns it loads)
# and fold them once a row: no cross-warp exchange a tile, 1/32 more exp a logit at tile 4096 and
# 4 warps. Not for softcap in the fused form: there it ran 1.3-3.2% slower on an H100, where the
# chunked form's ran 1.6% faster (docs/planner.md#statistics-per-thread).
# NORMLAB_LOSS_THREAD_STATS=0 turns it off.
ENTROPY_THREAD_STATS = os.environ.get("NORMLAB_LOSS_THREAD_STATS", "1") != "0"


def entropy_threads(kind: int, block: int, num_warps: int, logit_bytes: int,
                    fused_softcap: bool = False) -> int:  # fmt: skip
    """The kernels' THREADS: 32 num_warps where label CE keeps its one-lane tiles' statistics
    per thread (ENTROPY_THREAD_STATS; each thread a whole number of 16-byte vectors of the tile;
    not ``fused_softcap``: a softcap in the fused form), else 0."""
    threads = 32 * num_warps
    if (not ENTROPY_THREAD_STATS or kind != CE or fused_softcap or entropy_lane(block) != block
            or block % (threads * (16 // logit_bytes))):  # fmt: skip
        return 0
    return threads


# ---- the fused form's grid -----------------------------------------------------------------------

# A row's program reads the row twice (the statistics, then the gradient pass from the last tile
# back), and one program a row keeps as many rows in flight as the registers allow. A grid of
# ENTROPY_FUSED_PROGRAMS_PER_SM programs an SM that take the rows from a queue keeps P x SMs.
# Label CE ran 0.86-0.94x one program a row where that grid's rows filled ENTROPY_FUSED_L2_FILL
# of the L2 (32768 bf16 columns: 0.66 of an H100's, 0.55 of an H200's), and 1.00-1.09x beside
# it (16384 and 65536 columns on an H200). Left out (docs/planner.md#the-fused-forms-grid):
# - the two-input losses, 1.03-1.07x on an H200 (4096 rows), and JSD, 1.07x on an H100;
# - softcap, whose tanh wants the warps one program a row keeps resident: 1.11-1.14x on an H200;
# - a loss_mask, 1.04x (on an H100, striding);
# - unaligned rows (50257, read through frames), 1.15x;
# - 600 and 800 rows, whose last round leaves most of the grid idle, 1.04-1.17x.
# A queue, not a stride, so rows that skip (ignored labels) leave no program more work than the
# rest. NORMLAB_LOSS_FUSED_STRIDE=0: one program a row.
ENTROPY_FUSED_STRIDE = os.environ.get("NORMLAB_LOSS_FUSED_STRIDE", "1") != "0"
ENTROPY_FUSED_PROGRAMS_PER_SM = 4
ENTROPY_FUSED_L2_FILL = (0.5, 0.75)  # below, one a row's rows fit too; above, the grid's do not
ENTROPY_FUSED_TAIL_WASTE = 0.1  # the grid saves 6-13%: a last round idler than this loses it


def takes_fused_grid(spec: Spec, compute_grad: bool) -> bool:
    """Whether a call may take the fused grid (above; its shapes: entropy_fused_programs):
    label CE's fused form with a gradient, without softcap or a loss_mask. Such a call hands
    the launcher a ticket, whose second int is the row queue."""
    opts = spec.options
    return (ENTROPY_FUSED_STRIDE and spec.kind == CE and spec.form == "fused" and compute_grad
            and (opts is None or not (opts.softcap or opts.has_mask)))  # fmt: skip


def entropy_fused_programs(n_rows: int, n_cols: int, logit_bytes: int, aligned: bool,
                           sm_count: int, l2_bytes: int) -> int | None:  # fmt: skip
    """The fused grid of a call that takes_fused_grid: ENTROPY_FUSED_PROGRAMS_PER_SM programs
    an SM taking the rows in turn, where that grid's rows (n_cols x logit_bytes each) fill
    ENTROPY_FUSED_L2_FILL of the L2, Triton sees the rows aligned (``aligned``:
    rows_seen_aligned), there are at least two rows a program, and the row slots (rounds x
    programs) are at most 1 + ENTROPY_FUSED_TAIL_WASTE times the rows; else None: one program
    a row."""
    programs = ENTROPY_FUSED_PROGRAMS_PER_SM * sm_count
    rounds = -(-n_rows // programs)
    low, high = ENTROPY_FUSED_L2_FILL
    fill = programs * n_cols * logit_bytes
    if (not aligned or not low * l2_bytes <= fill <= high * l2_bytes or rounds < 2
            or rounds * programs > (1 + ENTROPY_FUSED_TAIL_WASTE) * n_rows):  # fmt: skip
        return None
    return programs


# ---- frames of unaligned rows --------------------------------------------------------------------

# Rows off 16-byte boundaries (V = 50257) are read from the 128-byte boundary before them: whole
# tiles become aligned vector loads on whole sectors (docs/planner.md#aligned-frames).
ENTROPY_FRAME_BYTES = 128


# No frame: rows Triton already sees aligned, or rows read element by element.
_NO_FRAMES = MappingProxyType({"ALIGN": 1, "FRAME": 1})


def rows_seen_aligned(x, t, grad) -> bool:
    """Does Triton already see every row of x, t and grad aligned (V and the row strides
    multiples of 16, its divisibility hint)?"""
    return (x.shape[1] % 16 == 0 and x.stride(0) % 16 == 0 and t.stride(0) % 16 == 0
            and (grad is None or grad.stride(0) % 16 == 0))  # fmt: skip


def frames(x, t, grad, block: int) -> Mapping[str, int]:
    """The kernels' ALIGN and FRAME (see online.row_frames). ALIGN: columns per 16 bytes; 1 when
    Triton already sees aligned rows, when the tensors' rows are not aligned alike, or when a tile
    is narrower than 16 bytes. FRAME: columns per ENTROPY_FRAME_BYTES where every tensor starts on
    such a boundary and a tile is that wide, else ALIGN."""
    if rows_seen_aligned(x, t, grad):
        return _NO_FRAMES
    tensors = (x, t) if grad is None else (x, t, grad)
    if not all(map(plain_tensor, tensors)):  # torch.compile's traced tensors have no address
        return _NO_FRAMES
    esize = x.element_size()
    align = 16 // esize
    alike = all(v.stride(0) == x.stride(0) and v.element_size() == esize
                and v.data_ptr() % 16 == 0 for v in tensors)  # fmt: skip
    if not alike or block < align:
        return _NO_FRAMES
    frame_bytes = max(16, ENTROPY_FRAME_BYTES)
    frame = frame_bytes // esize
    if block < frame or any(v.data_ptr() % frame_bytes for v in tensors):
        frame = align
    return {"ALIGN": align, "FRAME": frame}


# ---- the chunked form ----------------------------------------------------------------------------

# 4 tiles per chunk (other counts ran slower), 6 at tile 1024; 4 warps; registers capped at 64 at
# tiles 2048 and 4096: 8 programs of 4 warps per SM (docs/planner.md#chunks-of-the-chunked-form).
ENTROPY_CHUNKED_TILES = 4
ENTROPY_CHUNKED_TILES_BY_BLOCK = {1024: 6}
ENTROPY_CHUNKED_WARPS = 4
ENTROPY_CHUNKED_MAXNREG = {2048: 64, 4096: 64}


def entropy_chunk_tiles(block: int) -> int:
    """Tiles per chunk of the chunked form at a column tile of ``block`` elements."""
    return ENTROPY_CHUNKED_TILES_BY_BLOCK.get(block, ENTROPY_CHUNKED_TILES)


class ChunkLayout(NamedTuple):
    """How the chunked form cuts a row: n_chunks chunks of chunk_tiles tiles, the first n_long
    of them one tile longer (the last chunk may end early, where the row does)."""

    chunk_tiles: int
    n_long: int
    n_chunks: int

    def starts(self, block: int) -> list[int]:
        """First column of each chunk (tests and sweeps)."""
        return [(k * self.chunk_tiles + min(k, self.n_long)) * block for k in range(self.n_chunks)]


def chunk_layout(n_cols: int, block: int, tiles_per_chunk: int, sm_count: int,
                 n_rows: int = 0) -> ChunkLayout:  # fmt: skip
    """Chunks of whole tiles, ``tiles_per_chunk`` or one more (whichever leaves the last chunk
    fuller), evened out over the row, at most ``sm_count`` per row (a row's waiting programs fit
    on the GPU). n_long is 0: unequal chunks measured slower (the loss note); sweeps force them.
    With the call's ``n_rows`` (0: unknown), a grid of fewer programs than SMs takes shorter
    chunks instead, down to one tile: idle SMs cost more than a shorter chunk's extra statistics
    (a row's tiles then load side by side, not one after another)."""
    n_tiles = cdiv(n_cols, block)
    tiles = min((tiles_per_chunk, tiles_per_chunk + 1), key=lambda k: (-n_tiles % k, k))
    n_chunks = max(1, round(n_tiles / tiles))
    if 0 < n_rows and n_rows * n_chunks < sm_count:  # SMs idle
        n_chunks = cdiv(n_tiles, max(1, n_tiles * n_rows // sm_count))
    chunk_tiles = cdiv(n_tiles, min(n_chunks, sm_count))
    return ChunkLayout(chunk_tiles, 0, cdiv(n_tiles, chunk_tiles))


# ---- form="auto" ---------------------------------------------------------------------------------

# Per loss, (form, cap) for four classes of V: "even" (V <= 4096 or a multiple of 4096), "ragged"
# (V % 16 == 0), "unaligned" (V % 16 != 0: aligned frames) and "wide" (V >= 65536); the fastest
# measured in each (docs/planner.md#form-and-cap-by-vocabulary-class). Tensor parallel always
# takes the split form.
ENTROPY_AUTO_TILE = 4096
ENTROPY_AUTO_WIDE_COLS = 65536
ENTROPY_AUTO_CLASSES = ("even", "ragged", "unaligned", "wide")
ENTROPY_AUTO = {
    "reverse_kl": (("fused", 2048), ("chunked", 2048), ("chunked", 1024), ("chunked", 2048)),
    "soft_cross_entropy": (("fused", 2048), ("chunked", 2048), ("chunked", 1024),
                           ("chunked", 2048)),
    "cross_entropy": (("fused", 4096), ("fused", 4096), ("fused", 2048), ("chunked", 4096)),
}
# Not measured: forward KL reads and computes as soft CE does, so it takes soft CE's row; JSD
# (three passes over a row) reverse KL's.
ENTROPY_AUTO["forward_kl"] = ENTROPY_AUTO["soft_cross_entropy"]
ENTROPY_AUTO["jsd"] = ENTROPY_AUTO["reverse_kl"]


def entropy_vocab_class(n_cols: int) -> str:
    """The class of ENTROPY_AUTO_CLASSES that a vocabulary of ``n_cols`` columns falls in."""
    if n_cols >= ENTROPY_AUTO_WIDE_COLS:
        return "wide"
    if n_cols <= ENTROPY_AUTO_TILE or n_cols % ENTROPY_AUTO_TILE == 0:
        return "even"
    return "ragged" if n_cols % 16 == 0 else "unaligned"


# Fewer rows than SMs take the chunked form, whose chunks fill the SMs the fused form leaves idle,
# where a row outweighs the chunks' meeting (docs/planner.md#few-rows-take-the-chunked-form).
ENTROPY_FUSED_MIN_ROWS_PER_SM = 1
ENTROPY_FEW_ROWS_CHUNK_BYTES = 24 * 1024  # chunked above this a row (logits and target)


# Compiled with a gradient, the fused and chunked forms rescale out of place (one more pass over
# (M, V)); the split form runs from enough rows (docs/planner.md#compiled-calls-with-a-gradient).
ENTROPY_COMPILED_GRAD_FORM = "split"
ENTROPY_COMPILED_SPLIT_MIN_ROWS_PER_SM = 4  # rows an SM from which the split form runs
ENTROPY_COMPILED_SPLIT_MIN_ROWS_PER_SM_LABELS = 1  # label CE: the split form saves it a pass


def compiled_split_min_rows(loss: str, sm_count: int) -> int:
    """Rows from which a compiled call of ``loss`` with a gradient takes the split form."""
    per_sm = (ENTROPY_COMPILED_SPLIT_MIN_ROWS_PER_SM_LABELS if loss == "cross_entropy"
              else ENTROPY_COMPILED_SPLIT_MIN_ROWS_PER_SM)  # fmt: skip
    return per_sm * sm_count


# The chunked form holds a chunk's last tile in registers while it waits for the row's other
# chunks: a temperature or JSD spills at tile 2048, not at 1024 (docs/planner.md#the-held-tile).
ENTROPY_CHUNKED_HELD_STATE_CAP = 1024


def entropy_auto(loss: str, n_cols: int, distributed: bool, n_rows: int | None = None,
                 sm_count: int = 0, row_bytes: int | None = None,
                 compiled_grad: bool = False, temperature: bool = False) -> tuple[str, int]:
    """form="auto": (form, block_cap) for ``loss`` over ``n_cols`` local vocabulary columns (the
    split form under tensor parallel: the row statistics are all-reduced between its kernels);
    ``n_rows`` (None: many) of them on ``sm_count`` SMs; ``row_bytes``: what a row's program
    reads (logits and target; None: 2-byte logits alone); ``compiled_grad``: a call traced by
    torch.compile that needs the gradient (ENTROPY_COMPILED_GRAD_FORM); ``temperature``: T != 1
    (with JSD: ENTROPY_CHUNKED_HELD_STATE_CAP)."""
    form, cap = ENTROPY_AUTO[loss][ENTROPY_AUTO_CLASSES.index(entropy_vocab_class(n_cols))]
    if distributed:
        return "split", cap
    if compiled_grad and (n_rows is None or n_rows >= compiled_split_min_rows(loss, sm_count)):
        return ENTROPY_COMPILED_GRAD_FORM, cap
    few_rows = n_rows is not None and 0 < n_rows < ENTROPY_FUSED_MIN_ROWS_PER_SM * sm_count
    row_bytes = 2 * n_cols if row_bytes is None else row_bytes
    if form == "fused" and few_rows and n_cols > tile(n_cols, cap) \
            and row_bytes > ENTROPY_FEW_ROWS_CHUNK_BYTES:  # fmt: skip
        form = "chunked"
    if form == "chunked" and (temperature or loss == "jsd"):
        cap = min(cap, ENTROPY_CHUNKED_HELD_STATE_CAP)
    return form, cap

