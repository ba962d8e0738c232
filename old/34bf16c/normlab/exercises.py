"""Predict, then measure: the notebooks' exercises, their shipped solutions and their checks.

Each exercise is a small function the reader writes in a notebook cell: the bytes an op must move,
the columns one chunk of the looped forward covers, the dγ partial rows a grid writes, the bytes
its reduce kernel reads, the layout the planner picks, the programs that fit on an SM, the bytes
of a distillation loss whose teacher comes in its own dtype. The cell
holds a stub that calls :func:`solution` (so the notebook runs end to end, and CI checks the
shipped answers); the reader replaces that line with their own code. :func:`check` then compares
the function with normlab's own reference (``normlab.bench.bytes_moved``, the planner in
``normlab.norms.config``, the contention model in ``normlab.viz.plots``, the SM limits in
``normlab.bench.occupancy``) on a fixed set of cases, and explains the first wrong answer.

    from normlab import exercises
    exercises.check("partial_rows", partial_rows)   # prints OK, or the first wrong case and a hint
    exercises.show_solution("partial_rows")         # the shipped answer's source
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from normlab.bench import occupancy
from normlab.bench.traffic import bytes_moved
from normlab.norms import config

_DTYPES = {2: "bf16", 4: "fp32"}
_solution_calls = 0  # how many times a shipped solution answered (the check says so)


# ---- the shipped solutions (what a reader might write) -------------------------------------------


def _rms_norm_bytes(direction: str, M: int, N: int, elem_bytes: int) -> int:
    # fwd: x, y; bwd: x, dy, dx; fwd+bwd: both (the forward's y is not read back)
    tensors = {"fwd": 2, "bwd": 3, "fwd+bwd": 5}[direction]
    return tensors * M * N * elem_bytes


def _chunk_columns(num_warps: int) -> int:
    values_per_thread = 16 // 2  # one 16-byte load of bf16 values
    return values_per_thread * 32 * num_warps


def _partial_rows(strategy: str, M: int, N: int, n_sm: int, n_params: int = 1) -> int:
    one_warp = config.one_warp_contiguous(N)  # contiguous bf16 rows
    cfg = config.norm_bwd_config(strategy, M, N, sm_count=n_sm, one_warp=one_warp)
    if strategy == "atomic":
        return 0  # every program adds into the one dγ vector
    tiles = -(-M // cfg.block_rows)
    if strategy == "two_stage":
        return -(-tiles // (cfg.rows_per_program // cfg.block_rows))
    # bf16 rows: x, dy read and dx written (6 B a column); n_params partial buffers (RMSNorm: 1)
    cap = config.norm_bwd_partials_cap(M, 6, n_params)
    programs = config.norm_bwd_persistent_programs(tiles, cfg.programs_per_sm, n_sm, cap)
    paired = cfg.paired_partials and config.pair_partials(programs, n_sm)
    return -(-programs // 2) if paired else programs


def _reduce_read_bytes(strategy: str, M: int, N: int, n_sm: int, is_rms: bool) -> int:
    buffers = 1 if is_rms else 2  # dγ, and dβ for LayerNorm
    return _partial_rows(strategy, M, N, n_sm, buffers) * N * 4 * buffers  # fp32 partials


def _uses_block_row(M: int, N: int) -> bool:
    return N <= 256 and M >= 16384


def _programs_per_sm(n_regs: int, num_warps: int) -> int:
    per_warp = -(-n_regs * 32 // 256) * 256  # registers are given to a warp 256 at a time
    return min(65536 // (per_warp * num_warps), 64 // num_warps, 32)


def _teacher_bytes(M: int, V: int, logit_bytes: int, teacher_bytes: int) -> int:
    # forward+backward: read the logits and the teacher once each, write d logits (logits' dtype)
    return M * V * (2 * logit_bytes + teacher_bytes)


_SOLUTIONS: dict[str, Callable] = {
    "rms_norm_bytes": _rms_norm_bytes,
    "chunk_columns": _chunk_columns,
    "partial_rows": _partial_rows,
    "reduce_read_bytes": _reduce_read_bytes,
    "uses_block_row": _uses_block_row,
    "programs_per_sm": _programs_per_sm,
    "teacher_bytes": _teacher_bytes,
}
EXERCISES = tuple(_SOLUTIONS)


def solution(name: str) -> Callable:
    """The shipped answer to exercise ``name`` (the stub cells call it until the reader replaces
    the marked line); a check of a function that called it says so."""
    if name not in _SOLUTIONS:
        raise ValueError(f"no exercise {name!r}; expected one of {', '.join(EXERCISES)}")
    fn = _SOLUTIONS[name]

    def shipped(*args, **kwargs):
        global _solution_calls
        _solution_calls += 1
        return fn(*args, **kwargs)

    shipped.__name__ = name
    return shipped


def show_solution(name: str) -> None:
    """Print the shipped answer's source."""
    if name not in _SOLUTIONS:
        raise ValueError(f"no exercise {name!r}; expected one of {', '.join(EXERCISES)}")
    print(inspect.getsource(_SOLUTIONS[name]))


# ---- the references (normlab's own functions) and the cases -----------------------------------


def _ref_rms_norm_bytes(direction, M, N, elem_bytes):
    return bytes_moved("rms_norm", direction, M, N, _DTYPES[elem_bytes])


def _ref_chunk_columns(num_warps):
    """The chunk the planner gives RMSNorm's looped forward at that warp count (bf16)."""
    return {w: c for c, w in config.NORM_FWD_RMS_LOOPED.values()}[num_warps]


def _ref_partial_rows(strategy, M, N, n_sm):
    from normlab.viz import plots

    plan = plots.contention_plan(M, N, n_sm=n_sm)
    return plots.contention_model(M, N, n_sm=n_sm, **plan)[strategy]["partial_rows"]


def _ref_reduce_read_bytes(strategy, M, N, n_sm, is_rms):
    from normlab.viz import plots

    plan = plots.contention_plan(M, N, is_rms=is_rms, n_sm=n_sm)
    ws = plots.contention_model(M, N, n_sm=n_sm, **plan)[strategy]["workspace_bytes"]
    return ws * (1 if is_rms else 2)


def _ref_uses_block_row(M, N):
    return config.plan(True, M, N).layout == "block_row"


def _ref_programs_per_sm(n_regs, num_warps):
    return occupancy.programs_per_sm(n_regs, num_warps)


def _ref_teacher_bytes(M, V, logit_bytes, teacher_bytes):
    return bytes_moved("reverse_kl", "fwd+bwd", M, V, _DTYPES[logit_bytes],
                       target_dtype=_DTYPES[teacher_bytes])  # fmt: skip


def _norm_bwd_cases():
    shapes = ((4096, 1024), (32768, 1024), (262144, 1024), (16384, 4096), (100, 1000),
              (2048, 32768), (8192, 16384))
    return [(s, M, N, 132) for s in ("atomic", "two_stage", "persistent") for M, N in shapes]


def _hint_bytes(args, got, want):
    direction, _, _, e = args
    ratio = got / want if want else float("inf")
    if abs(ratio * e - 1.0) < 1e-9 or abs(ratio - e) < 1e-9:
        return f"multiply by the element size: {e} bytes per element here"
    if direction == "fwd" and abs(ratio - 0.5) < 1e-9:
        return "the forward reads x and also writes y: two M×N tensors"
    if direction == "bwd" and abs(ratio - 2 / 3) < 1e-9:
        return "the backward reads x and dy and writes dx: three M×N tensors"
    if direction == "fwd+bwd" and abs(ratio - 1.0) > 1e-9:
        return ("one call that runs the forward then its backward moves x, y (forward) and x, dy, "
                "dx (backward): five M×N tensors; the minimal model counts nothing else")
    return "the minimal model counts only the M×N activations each direction must read or write"


def _hint_chunk(args, got, want):
    (warps,) = args
    if got == 16 * 32 * warps:
        return "16 bytes per thread is 8 bf16 values, not 16"
    if got == 8 * warps:
        return "a warp is 32 threads: each loads one 16-byte vector"
    return "one 16-byte vector per thread: 8 bf16 values × 32 threads × the warps"


def _hint_partial_rows(args, got, want):
    strategy, M, N, n_sm = args
    one_warp = config.one_warp_contiguous(N)
    cfg = config.norm_bwd_config(strategy, M, N, sm_count=n_sm, one_warp=one_warp)
    if strategy == "atomic":
        return "atomic writes no partial rows: every program adds into the one dγ vector"
    if strategy == "two_stage":
        if got == M:
            return (f"a two_stage program folds {cfg.rows_per_program} rows into its one partial "
                    "row (config.norm_bwd_config(...).rows_per_program)")
        return "ceil(M / rows_per_program) programs, one partial row each"
    full = min(-(-M // cfg.block_rows), cfg.programs_per_sm * n_sm)
    programs = config.norm_bwd_persistent_programs(full, cfg.programs_per_sm, n_sm,
                                                   config.norm_bwd_partials_cap(M, 6, 1))
    if programs < full and got == full:
        return (f"{M} rows are few: {full} programs would move more partial-row bytes than "
                f"config.NORM_BWD_PARTIALS_MAX_SHARE of the rows' own, so the grid stops at "
                f"{programs} (config.norm_bwd_partials_cap, never under one program per SM)")
    bound = config.NORM_BWD_PARTIALS_PER_SM * n_sm
    if cfg.paired_partials and got == programs and programs > bound:
        return (f"{programs} programs exceed the partial rows' bound (config."
                f"NORM_BWD_PARTIALS_PER_SM = {config.NORM_BWD_PARTIALS_PER_SM} per SM, {bound} "
                "here): programs 2k and 2k + 1 add into one zeroed partial row, half as many rows")
    if cfg.paired_partials and got == -(-programs // 2) and programs <= bound:
        return (f"{programs} programs are within the partial rows' bound ({bound}): no pairing, "
                "one row each (config.pair_partials)")
    if got == cfg.programs_per_sm * n_sm and programs < got:
        return (f"only {programs} row tiles of {cfg.block_rows} rows exist: no more programs than "
                "tiles")
    return (f"the persistent grid is min(row tiles, programs_per_sm × SMs) with programs_per_sm = "
            f"{cfg.programs_per_sm} here (config.norm_bwd_config); pairs share a row only when "
            "paired_partials is set")


def _hint_reduce_bytes(args, got, want):
    strategy, M, N, n_sm, is_rms = args
    if not is_rms and got * 2 == want:
        return "LayerNorm has two parameter gradients: dγ and dβ each have their partial rows"
    if got * 2 == want:
        return "partials are fp32 (4 bytes), whatever the input dtype"
    rows = _ref_partial_rows(strategy, M, N, n_sm)
    return f"partial rows ({rows} here: the previous exercise) × N × 4 bytes × (1 or 2 buffers)"


def _hint_block_row(args, got, want):
    M, N = args
    if N > config.BLOCK_ROW_MAX_COLS:
        return (f"N = {N} is wider than config.BLOCK_ROW_MAX_COLS = {config.BLOCK_ROW_MAX_COLS}: "
                "rows that wide keep one row per program")
    if M < config.BLOCK_ROW_MIN_ROWS:
        return (f"M = {M} rows is fewer than config.BLOCK_ROW_MIN_ROWS = "
                f"{config.BLOCK_ROW_MIN_ROWS}: too few tiles to fill the card")
    return (f"N ≤ {config.BLOCK_ROW_MAX_COLS} and M ≥ {config.BLOCK_ROW_MIN_ROWS}: "
            "block-row tiles (config.use_block_row)")


def _hint_occupancy(args, got, want):
    n_regs, warps = args
    lim = occupancy.SM90
    if got > lim.max_programs:
        return f"an SM holds at most {lim.max_programs} programs (thread blocks)"
    if got > lim.max_warps // warps:
        return (f"an SM holds at most {lim.max_warps} warps: {lim.max_warps // warps} programs "
                f"of {warps} warp(s)")
    per_warp = occupancy.registers_per_warp(n_regs)
    if per_warp != n_regs * 32 and got == lim.registers // (n_regs * 32 * warps):
        return (f"registers go to a warp {lim.register_unit} at a time: {n_regs} per thread is "
                f"{per_warp} per warp, not {n_regs * 32}")
    return (f"{lim.registers} registers per SM ÷ (registers per warp × warps), then the "
            f"{lim.max_warps}-warp and {lim.max_programs}-program limits")


def _hint_teacher(args, got, want):
    M, V, e, et = args
    if got == 3 * M * V * e:
        return f"the teacher is read at its own size: {et} bytes a logit here, not {e}"
    if got == M * V * (e + et):
        return "forward+backward also writes the gradient of the logits, in the logits' dtype"
    if got == M * V * 2 * (e + et):
        return "the teacher gets no gradient: it is read once and nothing of its size is written"
    return "read the logits and the teacher once each, write d logits: M·V·(2·e + e_teacher)"


@dataclass(frozen=True)
class _Exercise:
    reference: Callable
    cases: list
    describe: Callable  # args -> the case in words
    hint: Callable  # (args, got, want) -> why the answer may be wrong
    source: str  # where the reference comes from


_EXERCISES: dict[str, _Exercise] = {
    "rms_norm_bytes": _Exercise(
        _ref_rms_norm_bytes,
        [(d, M, N, e) for e in (4, 2) for d in ("fwd", "bwd", "fwd+bwd")
         for M, N in ((4096, 4096), (37, 1000))],
        lambda a: f"{a[0]} {a[1]}×{a[2]} at {a[3]} bytes per element",
        _hint_bytes, "normlab.bench.bytes_moved"),
    "chunk_columns": _Exercise(
        _ref_chunk_columns, [(w,) for w in (2, 4, 8, 16)],
        lambda a: f"{a[0]} warps", _hint_chunk,
        "the planner's looped-row chunks (config.NORM_FWD_RMS_LOOPED)"),
    "partial_rows": _Exercise(
        _ref_partial_rows, _norm_bwd_cases(),
        lambda a: f"{a[0]} at {a[1]}×{a[2]} on {a[3]} SMs", _hint_partial_rows,
        "the planner's configuration in the contention model (viz.contention_plan)"),
    "reduce_read_bytes": _Exercise(
        _ref_reduce_read_bytes,
        [(*c, is_rms) for c in _norm_bwd_cases() for is_rms in (True, False)],
        lambda a: f"{'RMSNorm' if a[4] else 'LayerNorm'} {a[0]} at {a[1]}×{a[2]} on {a[3]} SMs",
        _hint_reduce_bytes, "the contention model's fp32 workspace (viz.contention_model)"),
    "uses_block_row": _Exercise(
        _ref_uses_block_row,
        [(M, N) for M in (100, 16383, 16384, 7_864_320) for N in (16, 48, 256, 257, 512)],
        lambda a: f"{a[0]}×{a[1]}", _hint_block_row, "the planner (config.plan(...).layout)"),
    "programs_per_sm": _Exercise(
        _ref_programs_per_sm,
        [(64, 4), (72, 4), (40, 4), (24, 4), (32, 1), (128, 16), (255, 8), (56, 2), (34, 8)],
        lambda a: f"{a[0]} registers per thread, {a[1]} warp(s)", _hint_occupancy,
        "the SM limits of compute capability 9.0 (bench.occupancy)"),
    "teacher_bytes": _Exercise(
        _ref_teacher_bytes,
        [(M, V, e, et) for M, V in ((4096, 131072), (37, 50257)) for e, et in
         ((2, 2), (2, 4), (4, 4), (4, 2))],
        lambda a: f"{a[0]}×{a[1]}, logits of {a[2]} bytes, a teacher of {a[3]}", _hint_teacher,
        "normlab.bench.bytes_moved(..., target_dtype=)"),
}


class CheckResult:
    """A check's verdict: ``passed`` and the text a notebook shows (deterministic: no timings)."""

    def __init__(self, name: str, passed: bool, lines: list[str]):
        self.name, self.passed, self.lines = name, passed, lines

    def __bool__(self) -> bool:
        return self.passed

    def __repr__(self) -> str:
        return "\n".join(self.lines)

    __str__ = __repr__


def check(name: str, fn: Callable) -> CheckResult:
    """Run ``fn`` on every case of exercise ``name`` and compare with normlab's reference.

    OK when every case agrees; otherwise the count of wrong cases, the first one (arguments, the
    answer, the reference) and a hint about the likely mistake. An exception inside ``fn`` is a
    wrong answer too (its message is shown)."""
    global _solution_calls
    if name not in _EXERCISES:
        raise ValueError(f"no exercise {name!r}; expected one of {', '.join(EXERCISES)}")
    if not callable(fn):
        raise TypeError(f"check({name!r}, fn): fn must be a function, got {type(fn).__name__}")
    ex = _EXERCISES[name]
    _solution_calls = 0
    wrong = []
    for args in ex.cases:
        want = ex.reference(*args)
        try:
            got = fn(*args)
        except Exception as exc:  # the reader's code: report it as a wrong answer
            wrong.append((args, f"{type(exc).__name__}: {exc}", want, None))
            continue
        if type(got) is not type(want) and not (isinstance(want, int) and _is_int(got)):
            wrong.append((args, repr(got), want, f"expected {type(want).__name__}"))
        elif got != want:
            wrong.append((args, repr(got), want, ex.hint(args, got, want)))
    n = len(ex.cases)
    shipped = (" (answered by the shipped solution: replace the marked line with your own code "
               "to try it yourself)") if _solution_calls else ""
    if not wrong:
        return CheckResult(name, True, [f"{name}: OK, {n} of {n} cases agree with "
                                        f"{ex.source}{shipped}"])
    args, got, want, hint = wrong[0]
    lines = [f"{name}: WRONG in {len(wrong)} of {n} cases (reference: {ex.source})",
             f"  first: {ex.describe(args)}: you said {got}, the reference says {want!r}"]
    if hint:
        lines.append(f"  hint: {hint}")
    return CheckResult(name, False, lines)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


__all__ = ["EXERCISES", "CheckResult", "check", "show_solution", "solution"]
