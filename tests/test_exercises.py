"""normlab.exercises: the shipped solutions pass, wrong answers fail with a hint, and the
references agree with what the kernels really do."""

import pytest
import torch

from normlab import _runtime, exercises
from normlab.bench import bytes_moved, occupancy
from normlab.norms import config

pytest.importorskip("plotly")  # the partial-row reference is the contention model in normlab.viz


def _wrong(name, fn):
    result = exercises.check(name, fn)
    assert not result and not result.passed
    text = repr(result)
    assert text.startswith(f"{name}: WRONG in ")
    return text


@pytest.mark.parametrize("name", exercises.EXERCISES)
def test_every_shipped_solution_passes_and_says_it_was_shipped(name):
    result = exercises.check(name, exercises.solution(name))
    assert result.passed, repr(result)
    assert repr(result).startswith(f"{name}: OK, ")
    assert "answered by the shipped solution" in repr(result)


def test_a_readers_own_correct_answer_passes_without_the_shipped_note():
    def rms_norm_bytes(direction, M, N, elem_bytes):
        return {"fwd": 2, "bwd": 3, "fwd+bwd": 5}[direction] * M * N * elem_bytes

    result = exercises.check("rms_norm_bytes", rms_norm_bytes)
    assert result.passed and "shipped" not in repr(result)
    assert repr(result) == ("rms_norm_bytes: OK, 12 of 12 cases agree with "
                            "normlab.bench.bytes_moved")


def test_bytes_model_wrong_answers_are_explained():
    text = _wrong("rms_norm_bytes", lambda d, M, N, e: 2 * M * N * e)  # the backward as 2 tensors
    assert "first: bwd 4096×4096 at 4 bytes per element: you said 134217728" in text
    assert "reads x and dy and writes dx" in text
    tensors = {"fwd": 2, "bwd": 3, "fwd+bwd": 5}
    text = _wrong("rms_norm_bytes", lambda d, M, N, e: tensors[d] * M * N)
    assert "element size" in text
    text = _wrong("rms_norm_bytes", lambda d, M, N, e: {**tensors, "fwd": 1}[d] * M * N * e)
    assert "writes y" in text


def test_chunk_columns_wrong_answers_are_explained():
    assert "8 bf16 values, not 16" in _wrong("chunk_columns", lambda w: 16 * 32 * w)
    assert "a warp is 32 threads" in _wrong("chunk_columns", lambda w: 8 * w)


def test_chunk_reference_is_one_vector_per_thread_in_every_looped_config():
    for chunk, warps in config.NORM_FWD_RMS_LOOPED.values():
        assert chunk // (32 * warps) * 2 == config.VECTOR_BYTES


def test_partial_rows_wrong_answers_are_explained():
    def paired(strategy, M, N, n_sm):
        cfg = config.norm_bwd_config(strategy, M, N)
        if strategy == "atomic":
            return 0
        tiles = -(-M // cfg.block_rows)
        if strategy == "two_stage":
            return -(-M // cfg.rows_per_program)
        programs = min(tiles, cfg.programs_per_sm * n_sm)
        return -(-programs // 2)  # pairs programs the plan leaves apart

    text = _wrong("partial_rows", paired)
    assert "persistent at 4096×1024 on 132 SMs: you said 264, the reference says 528" in text
    assert "pairs share a row only when paired_partials is set" in text
    text = _wrong("partial_rows", lambda s, M, N, n: M if s != "atomic" else 0)
    assert "two_stage at 4096×1024" in text and "folds 32 rows" in text
    assert "no partial rows" in _wrong("partial_rows", lambda s, M, N, n: 1)


def test_reduce_bytes_wrong_answers_are_explained():
    rows = exercises.solution("partial_rows")
    text = _wrong("reduce_read_bytes", lambda s, M, N, n, rms: rows(s, M, N, n) * N * 4)
    assert "LayerNorm" in text and "dβ" in text
    text = _wrong("reduce_read_bytes",
                  lambda s, M, N, n, rms: rows(s, M, N, n) * N * 2 * (1 if rms else 2))
    assert "fp32 (4 bytes)" in text


def test_block_row_wrong_answers_are_explained():
    too_wide = _wrong("uses_block_row", lambda M, N: N <= 512 and M >= 16384)
    assert "BLOCK_ROW_MAX_COLS = 256" in too_wide
    assert "BLOCK_ROW_MIN_ROWS = 16384" in _wrong("uses_block_row", lambda M, N: N <= 256)


def test_occupancy_wrong_answers_are_explained():
    assert "256 at a time" in _wrong("programs_per_sm", lambda r, w: min(65536 // (r * 32 * w),
                                                                         64 // w, 32))
    assert "at most 32 programs" in _wrong("programs_per_sm",
                                           lambda r, w: min(65536 // (-(-r * 32 // 256) * 256 * w),
                                                            64 // w))
    by_regs = lambda r, w: 65536 // (-(-r * 32 // 256) * 256 * w)
    assert "at most 64 warps" in _wrong("programs_per_sm", lambda r, w: min(by_regs(r, w), 32))


def test_exceptions_and_wrong_types_are_wrong_answers():
    def broken(direction, M, N, elem_bytes):
        raise KeyError(direction)

    text = _wrong("rms_norm_bytes", broken)
    assert "you said KeyError: 'fwd'" in text
    text = _wrong("chunk_columns", lambda w: 8.0 * 32 * w)  # a float where a count belongs
    assert "expected int" in text
    with pytest.raises(ValueError, match="no exercise 'nope'"):
        exercises.check("nope", print)
    with pytest.raises(ValueError, match="no exercise"):
        exercises.solution("nope")
    with pytest.raises(TypeError, match="must be a function"):
        exercises.check("chunk_columns", 42)


def test_show_solution_prints_the_source(capsys):
    exercises.show_solution("programs_per_sm")
    assert "def _programs_per_sm(n_regs" in capsys.readouterr().out


# ---- the references against the kernels and the models -------------------------------------


@pytest.mark.parametrize("strategy", ["two_stage", "persistent"])
@pytest.mark.parametrize("M,N", [(61, 64), (200, 64), (37, 300), (9, 1000), (300, 1000)])
def test_partial_rows_reference_is_the_workspace_the_backward_allocates(monkeypatch, strategy,
                                                                        M, N):
    """The contention figure and the exercise count what row.py really allocates: the workspace
    handed to the reduce kernel (paired persistent rows included)."""
    from normlab.norms import row

    seen = []
    real = row.reduce_partials

    def spy(dw_partial, *args, **kwargs):
        seen.append(dw_partial.shape[0])
        return real(dw_partial, *args, **kwargs)

    monkeypatch.setattr(row, "reduce_partials", spy)
    torch.manual_seed(0)
    bf16 = {"device": _runtime.DEVICE, "dtype": torch.bfloat16}  # the exercise's rows
    x, w, dy = torch.randn(M, N, **bf16), torch.ones(N, **bf16), torch.randn(M, N, **bf16)
    _, mean, rstd = row.norm_forward(x, w, None, 1e-6, True)
    row.norm_backward(dy, x, w, None, mean, rstd, True, strategy=strategy)
    expected = exercises.solution("partial_rows")(strategy, M, N, _runtime.sm_count())
    reference = exercises._ref_partial_rows(strategy, M, N, _runtime.sm_count())
    assert expected == reference
    assert seen == ([expected] if expected > 1 or strategy == "two_stage" else [])


def test_reduce_bytes_reference_is_the_full_bytes_model_partials():
    """Half the full model's partial traffic (written, then read back) is the reduce's read."""
    for M, N, is_rms in ((32768, 1024, True), (4096, 8192, False)):
        rows = exercises._ref_partial_rows("persistent", M, N, 132)
        op = "rms_norm" if is_rms else "layer_norm"
        extra = (bytes_moved(op, "bwd", M, N, model="full", n_partials=rows)
                 - bytes_moved(op, "bwd", M, N, model="full"))
        assert exercises._ref_reduce_read_bytes("persistent", M, N, 132, is_rms) == extra // 2


def test_occupancy_limits():
    # the chunked loss kernel's register cap: 64 registers, 4 warps -> 8 programs; 72 -> 7
    assert occupancy.programs_per_sm(64, 4) == 8 and occupancy.programs_per_sm(72, 4) == 7
    assert occupancy.programs_per_sm(128, 16) == 1  # the 16384-column backward tile
    assert occupancy.programs_per_sm(32, 1) == 32  # the program limit
    assert occupancy.programs_per_sm(16, 8) == 8  # the warp limit
    assert occupancy.programs_per_sm(32, 4, shared_bytes=100 * 1024) == 2
    assert occupancy.occupancy(64, 4) == pytest.approx(0.5)
    assert occupancy.registers_per_warp(33) == 1280  # 1056 rounded up to the 256 unit
    with pytest.raises(ValueError, match="n_regs must be a positive int"):
        occupancy.programs_per_sm(0, 4)
    with pytest.raises(ValueError, match="exceeds 255"):
        occupancy.programs_per_sm(256, 4)


def test_teacher_bytes_wrong_answers_are_explained():
    """An fp32 teacher beside bf16 logits: 8 bytes a logit forward+backward; the usual slips
    (the teacher at the logits' size, no gradient write, a gradient for the teacher) get their
    hint."""
    assert exercises.check("teacher_bytes", lambda M, V, e, et: M * V * (2 * e + et)).passed
    assert "own size: 4 bytes" in _wrong("teacher_bytes", lambda M, V, e, et: 3 * M * V * e)
    assert "writes the gradient" in _wrong("teacher_bytes", lambda M, V, e, et: M * V * (e + et))
    assert "no gradient" in _wrong("teacher_bytes", lambda M, V, e, et: 2 * M * V * (e + et))
