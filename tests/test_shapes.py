"""The shape populations follow their stated rules and are the same on every run."""

import importlib
import math

import pytest

from normlab.bench import shapes


def test_norm_population_rules():
    cases = shapes.norm_population()
    assert cases == shapes.norm_population()  # a pure function of the seed
    assert cases != shapes.norm_population(seed=1)
    random_bf16 = [c for c in cases if c.family == "random" and c.dtype == "bf16"]
    assert len(random_bf16) == shapes.N_RANDOM
    for c in random_bf16:
        assert 1 <= c.N <= shapes.MAX_COLS and 1 <= c.M <= shapes.MAX_ROWS
        # M*N log-uniform in [2^12, 2^31], moved only by clamping M to [1, 10M]
        assert c.M in (1, shapes.MAX_ROWS) or 2**12 / 2 <= c.M * c.N <= 2**31 * 1.01
    # log-uniform N: about half the draws fall below the geometric midpoint (256)
    below = sum(c.N < math.sqrt(shapes.MAX_COLS) for c in random_bf16)
    assert 0.3 * len(random_bf16) < below < 0.7 * len(random_bf16)
    model = {(c.M, c.N) for c in cases if c.family == "model" and c.dtype == "bf16"}
    assert model == {(m, n) for n in shapes.MODEL_HIDDEN for m in shapes.MODEL_ROWS}
    narrow = [c for c in cases if c.family == "narrow"]
    assert {c.N for c in narrow} == set(shapes.NARROW_COLS)
    assert any(c.N % 2 for c in narrow) and {c.M for c in narrow} == set(shapes.NARROW_ROWS)
    assert {"fp32", "fp16"} <= {c.dtype for c in cases}


def test_vocab_population_rules():
    cases = shapes.vocab_population()
    assert cases == shapes.vocab_population()
    assert set(shapes.TOKENIZER_VOCABS) <= {c.N for c in cases}
    assert all(1000 <= c.N <= 262144 and 1 <= c.M <= 16384 for c in cases)
    assert all(c.M * c.N <= shapes.MAX_LOSS_ELEMS for c in cases)
    assert any(c.N % 16 for c in cases)  # ragged vocabularies are in


def test_populations_are_bench_shape_sets(monkeypatch):
    """`bench --shapes population` runs the population's bf16 members; its records say so."""
    sweep = importlib.import_module("normlab.bench.sweep")  # the module, not bench.sweep()
    bf16 = {(c.M, c.N) for c in shapes.norm_population() if c.dtype == "bf16"}
    assert set(sweep.parse_shapes("population")) == bf16
    assert set(sweep.parse_shapes("vocab_population")) == {
        (c.M, c.N) for c in shapes.vocab_population()}
    small = [(3, 8), (2, 5)]  # two members, small enough for the interpreter
    monkeypatch.setitem(sweep.SHAPES, "population", small)
    out = sweep.sweep("rms_norm", ["torch"], shapes="population", directions=["fwd"], reps=1,
                      warmup=0, roofline=100.0)  # fmt: skip
    assert {(r.M, r.N) for r in out} == set(small)
    assert {r.shape_set for r in out} == {"population"}
    out = sweep.sweep("rms_norm", ["torch"], shapes="3x8", directions=["fwd"], reps=1,
                      warmup=0, roofline=100.0)  # fmt: skip
    assert [r.shape_set for r in out] == [None]


def test_parse_op_shapes_takes_op_cells_and_refuses_the_rest():
    from normlab.bench.sweep import parse_op_shapes

    ops = ("rms_norm", "layer_norm")
    assert parse_op_shapes("rms_norm:4096x1024, layer_norm:1x7", ops) == [
        ("rms_norm", 4096, 1024), ("layer_norm", 1, 7)]
    for bad in ("softmax:4x8", "rms_norm:0x8", "rms_norm:4by8", "rms_norm", ""):
        with pytest.raises(ValueError):
            parse_op_shapes(bad, ops)
