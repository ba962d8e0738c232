"""The shape populations follow their stated rules and are the same on every run."""

import math

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
