"""benchmarks/loss_options.py, vocab_population.py and fused_grid.py: their CPU smoke runs, their
verdicts from records, the wall-clock budget and the parallel Triton warm-up they share."""

import dataclasses
import json
import math
import sys
import time

import pytest
import torch
from helpers import load_script

from normlab.bench import budget, population, prewarm, registry, shapes
from normlab.bench.records import Record, read_jsonl, write_jsonl


def _script(name):
    return load_script(f"benchmarks/{name}.py")


@pytest.fixture(scope="module")
def vocab():
    return _script("vocab_population")


@pytest.fixture(scope="module")
def options():
    return _script("loss_options")


def _rec(impl, us, *, op="cross_entropy", M=8, N=32000, direction="fwd+bwd",
         shape_set="vocab_population", note="", valid=True, roofline=4000.0,
         kernels=None):  # fmt: skip
    return Record(
        op=op, impl=impl, strategy=None, layout=None, M=M, N=N, dtype="bf16",
        direction=direction, device_us=us, wall_us=us, bytes=1, gbps=1.0,
        roofline_gbps=roofline, frac_roofline=0.1, datasheet_gbps=4800.0, peak_extra_bytes=0,
        kernels=kernels if kernels is not None else {"k": us}, card="Synthetic", sm_count=1,
        torch="2", triton="3", mode="gpu", date="2031-01-01T00:00:00Z", commit="c", command="",
        note=note, valid=valid, shape_set=shape_set,
    )  # fmt: skip


# ---- the vocabulary population ------------------------------------------------------------------


def test_vocab_population_quick_run_writes_tagged_records_and_a_verdict(vocab, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    assert vocab.main(["--out", str(out), "--quick"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    cases = {(c.M, c.N) for c in vocab.QUICK_CASES}
    # every op x direction x member x impl once, each tagged and timed
    assert len(rows) == len(vocab.OPS) * 2 * len(cases) * len(vocab.QUICK_IMPLS)
    assert {(r["M"], r["N"]) for r in rows} == cases
    assert {(r["op"], r["direction"], r["impl"]) for r in rows} == {
        (op, d, impl) for op in vocab.OPS for d in ("fwd", "fwd+bwd") for impl in vocab.QUICK_IMPLS}
    assert all(r["shape_set"] == "vocab_population" and r["device_us"] > 0 for r in rows)
    assert all("family quick" in r["note"] for r in rows)
    text = capsys.readouterr().out
    assert "CPU/interpreter timings" in text
    for op in vocab.OPS:
        for d in ("fwd", "fwd+bwd"):
            assert f"{op} {d}: 3 shapes" in text
    assert "target: every member >= 0.9x the best peer" in text
    # --summary prints the same verdicts from the file, no device needed
    assert vocab.main(["--summary", str(out)]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.count("\n") == 2 * len(vocab.OPS) + 1 and text.rstrip().endswith(printed)


def test_vocab_population_summary_matches_the_cells(vocab):
    """best peer / normlab per cell, the geomean, the count below 0.90 and the worst, per op and
    direction; other shape sets and invalid records are left out."""
    recs = [
        _rec("normlab", 100.0, M=8), _rec("compile", 95.0, M=8), _rec("liger", 120.0, M=8),
        _rec("normlab", 100.0, M=1), _rec("compile", 80.0, M=1),  # 0.80: below target
        _rec("liger", 10.0, M=1, valid=False),  # invalid: not the best peer
        _rec("normlab", 100.0, M=2, shape_set=None), _rec("compile", 1.0, M=2, shape_set=None),
        _rec("normlab", 50.0, op="reverse_kl", direction="fwd"),
        _rec("compile", 100.0, op="reverse_kl", direction="fwd"),
    ]  # fmt: skip
    text = vocab.summary(recs)
    lines = text.splitlines()
    ce = next(x for x in lines if x.startswith("cross_entropy fwd+bwd"))
    assert f"geomean {math.sqrt(0.95 * 0.80):.3f}x (no target)" in ce
    assert "2 shapes" in ce and "1 below 0.9x" in ce
    assert "worst: 1x32000 bf16 0.80 (compile), 8x32000 bf16 0.95 (compile)" in ce
    rkl = next(x for x in lines if x.startswith("reverse_kl fwd"))
    assert "geomean 2.000x" in rkl and ": met;" in rkl
    assert lines[-1].endswith("missed")
    assert "2 members measured, peers compile, liger" in lines[0]
    assert vocab.summary([_rec("normlab", 1.0)]).startswith("no vocab_population member")


def test_vocab_population_stops_at_its_time_limit_and_still_writes(vocab, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    assert vocab.main(["--out", str(out), "--quick", "--max-seconds", "0"]) == 0
    assert out.exists() and out.read_text() == ""
    text = capsys.readouterr().out
    assert "stopped at the time limit: 0 of 3 members measured" in text
    past = str(time.time() - 1)
    assert vocab.main(["--out", str(out), "--quick", "--deadline", past]) == 0
    assert "stopped at the time limit" in capsys.readouterr().out


def test_vocab_population_warm_shards_cover_every_item_once(vocab, capsys):
    cases = vocab.QUICK_CASES
    items = vocab._warm_items(cases, vocab.OPS, vocab.QUICK_IMPLS)
    # normlab only (eager compiles nothing), at rows of the same Triton class
    assert {(op, impl) for op, impl, _, _ in items} == {(op, "normlab") for op in vocab.OPS}
    assert {(m, n) for _, _, m, n in items} == {(17, 300), (1, 131), (1, 4099)}
    with_liger = vocab._warm_items(cases, vocab.OPS, ["normlab", "liger"])
    assert {op for op, impl, _, _ in with_liger if impl == "liger"} == {"cross_entropy", "jsd"}
    for shard in ("1/2", "2/2"):
        assert vocab.main(["--quick", "--warm-shard", shard]) == 0
    text = capsys.readouterr().out
    n1, n2 = (len(prewarm.take_shard(items, s)) for s in ("1/2", "2/2"))
    assert n1 + n2 == len(items)
    assert f"warm shard 1/2: {n1} of {n1} calls" in text
    assert f"warm shard 2/2: {n2} of {n2} calls" in text


def test_vocab_population_order_and_peers(vocab):
    cases = shapes.vocab_population()
    order = vocab.ordered(cases)
    assert sorted(order) == sorted(cases) and order == vocab.ordered(cases)
    first, second = order[:2]
    assert [(first.M, first.N), (second.M, second.N)] == list(vocab.ANCHORS)
    # the compile peer's second graph gets both sizes dynamic
    assert first.M != second.M and first.N != second.N and min(first.M, second.M) > 1
    assert order[2:] != [c for c in cases if c not in order[:2]]  # shuffled
    left_out = {}
    impls = vocab.impls_for("reverse_kl", ["normlab", "compile", "liger", "torch"], "cpu",
                            left_out)  # fmt: skip
    assert list(impls) == ["normlab"]  # Liger and torch have no reverse KL; compile: on a GPU
    assert "compile" in left_out and "liger" not in left_out
    impls = vocab.impls_for("cross_entropy", ["normlab", "liger", "torch"], "cpu", left_out)
    assert list(impls) == ["normlab", "torch"] and "liger" in left_out
    # Liger has JSD (its own module) and no forward KL; neither loss has a torch op
    assert set(vocab.OPS) == {"cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl",
                              "jsd"}  # fmt: skip
    for op, liger in (("jsd", True), ("forward_kl", False)):
        left_out = {}
        assert list(vocab.impls_for(op, ["normlab", "liger", "torch"], "cpu", left_out)) == [
            "normlab"]
        assert ("liger" in left_out) is liger  # not importable here: left out with its reason
    # each Liger peer checks the module it imports
    assert left_out == {}
    assert "liger_kernel.transformers.jsd" in registry.get("jsd", "liger").unavailable()


def test_a_compile_record_without_triton_kernels_is_flagged(vocab):
    assert vocab._no_triton_kernel(_rec("compile", 5.0, kernels={"cunn_SoftMaxForward": 5.0}))
    assert not vocab._no_triton_kernel(
        _rec("compile", 5.0, kernels={"triton_red_fused_0": 3.0, "memset": 2.0}))


def test_vocab_population_rejects_bad_arguments(vocab, capsys):
    for argv in (["--quick"], ["--out", "x", "--quick", "--ops", "nope"],
                 ["--out", "x", "--quick", "--impls", "compile"],
                 ["--out", "x", "--quick", "--max-seconds", "-1"],
                 ["--out", "x", "--quick", "--cells", "3y4"]):  # fmt: skip
        with pytest.raises(SystemExit):
            vocab.main(argv)
    err = capsys.readouterr().err
    assert "--out is required" in err and "--ops: unknown nope" in err
    assert "must include normlab" in err and "--max-seconds must be >= 0" in err


@pytest.mark.slow  # two more interpreter processes start: ~10 s on 2 cores
def test_vocab_population_runs_its_warm_up_processes(vocab, tmp_path, capsys):
    out = tmp_path / "v.jsonl"
    argv = ["--out", str(out), "--quick", "--warm-workers", "2"]
    assert vocab.main(argv) == 0
    text = capsys.readouterr().out
    assert "2 warm-up processes" in text
    items = vocab._warm_items(vocab.QUICK_CASES, vocab.OPS, vocab.QUICK_IMPLS)
    assert "calls in the processes that finished" in text
    assert f": {len(items)} of {len(items)} calls" in text  # every shard ran all of its calls
    assert "warm-up: " not in text  # no shard failed
    # each op x direction x member x impl
    assert len(out.read_text().splitlines()) == len(vocab.OPS) * 2 * 3 * len(vocab.QUICK_IMPLS)


# ---- loss options ------------------------------------------------------------------------------


def _opt(impl, name, us, **kw):
    op = "add_rms_norm" if "add" in name else name.split()[0]
    return _rec(impl, us, op=op, shape_set=None, note=f"minimal bytes model; variant {name}", **kw)


def test_loss_options_summary_judges_each_target(options):
    recs = [_opt("normlab", "cross_entropy", 100.0), _opt("normlab", "cross_entropy z_loss", 104.0),
            _opt("normlab", "cross_entropy softcap", 106.0), _opt("liger", "cross_entropy", 150.0),
            _opt("liger", "cross_entropy softcap", 100.0)]  # fmt: skip
    text = options.summary(recs)
    assert ("2 measured, worst 1.060x, 1 above 1.05x (target 0): missed: cross_entropy softcap"
            in text)
    assert "cross_entropy 0.667, cross_entropy softcap 1.060: missed: cross_entropy softcap" in text
    # the fused add: 3 x M x N x 2 bytes not moved; at M = N = 1000 and 200 GB/s, 30 µs
    add = [_opt("normlab", options.SEPARATE_ADD, 130.0, M=1000, N=1000, roofline=200.0),
           _opt("liger", options.LIGER_ADD, 99.0, M=1000, N=1000, roofline=200.0)]  # fmt: skip
    met = options.summary([*add, _opt("normlab", "add_rms_norm", 100.0, M=1000, N=1000,
                                      roofline=200.0)])  # fmt: skip
    assert "saves 30.0 µs of 130.0" in met and "take 30.0 µs" in met
    assert "at least that): met" in met
    assert "Liger's fused add: 1.010 (target below 1): missed" in met
    missed = options.summary([*add, _opt("normlab", "add_rms_norm", 100.5, M=1000, N=1000,
                                         roofline=200.0)])  # fmt: skip
    assert "saves 29.5 µs" in missed and "at least that): missed" in missed


def test_loss_options_quick_run_budget_and_warm_shard(options, tmp_path, capsys):
    out = tmp_path / "lo.jsonl"
    assert options.main(["--out", str(out), "--quick", "--max-seconds", "0"]) == 0
    assert "stopped at the time limit: 0 of" in capsys.readouterr().out
    assert out.read_text() == ""
    assert options.main(["--quick", "--warm-shard", "2/8"]) == 0
    assert "warm shard 2/8: 2 of 2 calls" in capsys.readouterr().out  # 15 calls without Liger
    with pytest.raises(SystemExit):
        options.main(["--quick"])
    assert "--out is required" in capsys.readouterr().err


@pytest.mark.slow  # a dozen interpreter calls
def test_loss_options_quick_run_prints_the_verdicts(options, tmp_path, capsys):
    out = tmp_path / "lo.jsonl"
    assert options.main(["--out", str(out), "--quick"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(options.VARIANTS) + 2  # and the fused / separate add
    assert [r["strategy"] for r in rows if "separate add" in r["note"]] == ["separate add"]
    text = capsys.readouterr().out
    assert "options over their base op: 10 measured" in text
    assert "normlab / Liger-Kernel: no Liger measurement" in text
    assert "fused residual add saves" in text
    assert options.main(["--summary", str(out)]) == 0
    assert "options over their base op: 10 measured" in capsys.readouterr().out
    # bytes: an fp32 teacher is read at 4 bytes a logit (2 + 4 + 2), the others at 2 (2 + 2 + 2)
    unit = {r["note"].rsplit("variant ", 1)[-1]: r["bytes"] / (r["M"] * r["N"]) for r in rows}
    assert (unit["reverse_kl fp32 teacher"], unit["reverse_kl"], unit["jsd"]) == (8, 6, 6)


# ---- the shared pieces ---------------------------------------------------------------------------


def test_warm_rows_keep_tritons_specialization_class():
    for n in (1, 2, 3, 15, 16, 17, 31, 32, 4096, 8044, 16384):
        w = prewarm.warm_rows(n)
        assert (w == 1) == (n == 1) and (w % 16 == 0) == (n % 16 == 0) and w <= 17
    with pytest.raises(ValueError, match="n_rows"):
        prewarm.warm_rows(0)


def test_take_shard_partitions_and_checks_its_spec():
    items = list(range(11))
    shards = [prewarm.take_shard(items, f"{i}/3") for i in (1, 2, 3)]
    assert sorted(i for shard in shards for i in shard) == items and shards[0] == [0, 3, 6, 9]
    for bad in ("0/3", "4/3", "a/b", "3"):
        with pytest.raises(ValueError, match="i/n"):
            prewarm.take_shard(items, bad)
    cmds = prewarm.shard_commands("s.py", ["--quick"], 2)
    assert cmds[1][1:] == ["s.py", "--quick", "--warm-shard", "2/2"]
    assert prewarm.default_workers("cpu") == 0 and 1 <= prewarm.default_workers("cuda") <= 12


def test_pool_reports_failures_and_kills_what_outlives_its_limit():
    py = sys.executable
    cmds = [[py, "-c", "print('warm shard 1/3: 4 of 5 calls')", "--warm-shard", "1/3"],
            [py, "-c", "import sys; print('boom'); sys.exit(3)", "--warm-shard", "2/3"],
            [py, "-c", "import time; time.sleep(60)", "--warm-shard", "3/3"]]  # fmt: skip
    t0 = time.monotonic()
    pool = prewarm.Pool(cmds)
    problems = pool.wait(timeout_s=3.0)
    assert time.monotonic() - t0 < 30
    assert problems == ["warm shard 2/3: exit 3: boom", "warm shard 3/3: killed after 3 s"]
    assert pool.last_lines == ["warm shard 1/3: 4 of 5 calls"]
    assert prewarm.tally([*pool.last_lines, "warm shard 2/3: 7 of 7 calls", "noise"]) == (11, 12)


def test_budget_from_its_arguments():
    assert budget.Budget().allows(1e9) and budget.Budget().left() == math.inf
    b = budget.Budget(max_seconds=10, start=time.time())
    assert b.allows(5) and not b.allows(11) and 9 < b.left() <= 10
    assert not budget.Budget(max_seconds=100, deadline=time.time() - 1).allows()
    with pytest.raises(ValueError, match="max_seconds"):
        budget.Budget(max_seconds=-1)


def test_population_verdicts_keep_their_norm_output():
    """The norm population's line and met are unchanged; a shape_set and no geomean target are
    the loss population's."""
    recs = [_rec("normlab", 100.0, op="rms_norm", direction="bwd", shape_set="population"),
            _rec("torch", 110.0, op="rms_norm", direction="bwd", shape_set="population")]
    (v,) = population.verdicts(recs)
    assert not v.met  # 1.10 < 1.15
    assert population.verdict_line(v) == (
        "rms_norm bwd: 1 shapes, geomean 1.100x (target >= 1.15x), 0 below 0.9x (target 0): "
        "missed: geomean at 0.96x its target; worst: 8x32000 bf16 1.10")
    (v,) = population.verdicts(recs, geomean_target=None)
    assert v.met and "(no target)" in population.verdict_line(v)
    assert population.verdicts(recs, shape_set="vocab_population") == []


def test_peer_shapes_are_judged_apart_from_the_population():
    """A norm population run's peer-shape records (shape_set "peers") never enter the
    population's verdicts; peer_lines judges them against 0.98x and the 430 µs LayerNorm
    backward at 32768 x 8192."""
    pop = [_rec("normlab", 100.0, op="rms_norm", direction="fwd", shape_set="population"),
           _rec("torch", 120.0, op="rms_norm", direction="fwd", shape_set="population")]
    peers = [  # at one peer shape normlab is slower: 0.97x, under the 0.98x target
        _rec("normlab", 100.0, op="rms_norm", direction="fwd", M=4096, N=4096, shape_set="peers"),
        _rec("compile", 97.0, op="rms_norm", direction="fwd", M=4096, N=4096, shape_set="peers"),
        _rec("normlab", 431.0, op="layer_norm", direction="bwd", M=32768, N=8192,
             shape_set="peers"),
        _rec("torch", 500.0, op="layer_norm", direction="bwd", M=32768, N=8192,
             shape_set="peers"),
    ]  # fmt: skip
    (v,) = population.verdicts(population.without_peers(pop + peers))
    assert (v.op, v.n, v.below) == ("rms_norm", 1, 0) and v.geomean == pytest.approx(1.2)
    assert population.peer_lines(pop + peers) == [
        "peers layer_norm bwd: 1 shapes, lowest 32768x8192 1.16x (target >= 0.98x): met",
        "peers rms_norm fwd: 1 shapes, lowest 4096x4096 0.97x (target >= 0.98x): missed at "
        "4096x4096 0.97",
        "peers layer_norm bwd 32768x8192: 431 µs (target <= 430): missed",
    ]
    assert population.peer_lines(pop) == []


def test_replace_members_takes_a_member_whole_from_the_new_run(tmp_path):
    """A re-measured member comes from the new run with all its implementations (a peer the new
    run lacks is dropped, not kept from the old run); other members, another op's records of
    the same shape and the peer shapes stay."""
    kw = {"op": "rms_norm", "direction": "fwd", "shape_set": "population"}
    base = [_rec("normlab", 100.0, **kw), _rec("torch", 90.0, **kw), _rec("liger", 80.0, **kw),
            _rec("normlab", 10.0, M=3, **kw), _rec("torch", 20.0, M=3, **kw),
            _rec("normlab", 50.0, **{**kw, "shape_set": "peers"}),
            _rec("normlab", 60.0, **{**kw, "op": "layer_norm"})]
    new = [_rec("normlab", 70.0, **kw), _rec("torch", 91.0, **kw)]
    script = _script("norm_population")
    merged = script.replace_members(base, new)
    assert sorted((r.op, r.M, r.impl, r.device_us, r.shape_set) for r in merged) == [
        ("layer_norm", 8, "normlab", 60.0, "population"),
        ("rms_norm", 3, "normlab", 10.0, "population"),
        ("rms_norm", 3, "torch", 20.0, "population"), ("rms_norm", 8, "normlab", 50.0, "peers"),
        ("rms_norm", 8, "normlab", 70.0, "population"),
        ("rms_norm", 8, "torch", 91.0, "population")]
    paths = [write_jsonl(rs, tmp_path / f"{name}.jsonl") for name, rs in (("b", base), ("n", new))]
    out = tmp_path / "merged.jsonl.gz"
    script.main(["--replace", *map(str, paths), "--out", str(out)])
    assert read_jsonl(out) == merged and out.read_bytes()[:2] == b"\x1f\x8b"


def test_vocab_verdicts_are_the_loss_populations_alone():
    recs = [_rec("normlab", 100.0), _rec("compile", 80.0),  # 0.80x: below 0.90x
            _rec("normlab", 100.0, shape_set="population"),
            _rec("torch", 10.0, shape_set="population")]  # fmt: skip
    (v,) = population.vocab_verdicts(recs)
    assert (v.n, v.below, v.geomean_target) == (1, 1, None) and not v.met
    assert v.worst[0].ratio == pytest.approx(0.8) and v.worst[0].peer == "compile"


def test_a_member_measured_twice_keeps_the_later_run_in_any_file_order():
    import dataclasses

    old = [_rec("normlab", 100.0), _rec("compile", 50.0)]  # 0.50x
    new = [dataclasses.replace(r, date="2031-01-02T00:00:00Z", device_us=us)
           for r, us in zip(old, (40.0, 60.0), strict=True)]  # 1.50x, a day later
    for records in (old + new, new + old):
        (v,) = population.vocab_verdicts(records)
        assert v.n == 1 and v.worst[0].ratio == pytest.approx(1.5)


def test_replace_jsonl_leaves_a_complete_file(tmp_path):
    from normlab.bench.records import read_jsonl, replace_jsonl

    path = tmp_path / "sub" / "r.jsonl"
    replace_jsonl([_rec("normlab", 1.0), _rec("compile", 2.0)], path)
    replace_jsonl([_rec("liger", 3.0)], path)  # replaces, does not append
    assert [(r.impl, r.device_us) for r in read_jsonl(path)] == [("liger", 3.0)]
    assert [p.name for p in path.parent.iterdir()] == ["r.jsonl"]  # no temporary file left


def test_loss_options_register_caps_parse_and_reject(options, tmp_path, capsys):
    assert options.register_caps("2048:64,4096:64") == {2048: 64, 4096: 64}
    assert options.register_caps("none") == {}
    for bad in ("2048", "2048:x", "2048:8", "a:64"):
        with pytest.raises(ValueError):
            options.register_caps(bad)
    with pytest.raises(SystemExit):
        options.main(["--out", str(tmp_path / "lo.jsonl"), "--quick", "--chunked-maxnreg", "64"])
    assert "--chunked-maxnreg: '64' is not TILE:REGS" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        options.main(["--out", str(tmp_path / "lo.jsonl"), "--quick", "--fused-maxnreg", "4096:8"])
    assert "--fused-maxnreg: '4096:8': registers must be in" in capsys.readouterr().err


@pytest.mark.parametrize("op", ["add_rms_norm", "add_layer_norm"])
def test_norm_population_add_norm_peers_compute_the_add_then_the_norm(op):
    """The fused adds' peers: torch's norm of h = x + r, returning (y, h) as normlab does; the
    compiled peer's function checked uncompiled against the fp64 reference (a wrong eps, a norm
    of x instead of h or a dropped bias fails); Liger has a fused add for RMSNorm only."""
    from normlab import ref

    pop = _script("norm_population")
    impls = pop._impls(op)
    assert set(impls) <= {"normlab", "torch", "compile", "liger"}
    if op == "add_layer_norm":
        assert "liger" not in impls
    fn = pop._compiled_peer(op)._torchdynamo_orig_callable
    g = torch.Generator().manual_seed(3)
    x, r = (torch.randn(5, 37, generator=g, dtype=torch.float64) for _ in range(2))
    w = 1 + 0.1 * torch.randn(37, generator=g, dtype=torch.float64)
    b = 0.1 * torch.randn(37, generator=g, dtype=torch.float64)
    eps = 0.3  # large, so a wrong eps shows
    y, h = fn(x, r, w, b, eps)
    want = (ref.add_rms_norm(x, r, w, eps) if op == "add_rms_norm"
            else ref.add_layer_norm(x, r, w, b, eps))  # fmt: skip
    torch.testing.assert_close(h, x + r)
    torch.testing.assert_close(y, want[0])


def test_norm_population_summary_holds_the_fused_adds_to_no_geomean():
    pop = _script("norm_population")
    recs = []
    for op in ("rms_norm", "add_rms_norm"):  # 1.05x each: under the norms' 1.15x geomean
        kw = {"op": op, "direction": "fwd", "shape_set": "population"}
        recs += [_rec("normlab", 100.0, **kw), _rec("liger", 105.0, **kw)]
    lines = pop.summary(recs).splitlines()
    (norm,) = [line for line in lines if line.startswith("rms_norm fwd")]
    (add,) = [line for line in lines if line.startswith("add_rms_norm fwd")]
    assert "target >= 1.15x" in norm and "missed" in norm
    assert "no target" in add and add.endswith("met; worst: 8x32000 bf16 1.05")


def test_norm_population_after_skips_the_cases_a_cut_run_finished():
    """--after FILE: a case counts as done when normlab's records cover every op asked for in
    both directions; a case with a direction or an op missing, or only peers, is measured
    again, and the peer shapes are told apart from a population member of the same size."""
    pop = _script("norm_population")
    recs = []
    for op in ("rms_norm", "layer_norm"):
        for direction in ("fwd", "bwd"):
            kw = {"op": op, "direction": direction, "shape_set": "population"}
            recs += [_rec("normlab", 10.0, **kw), _rec("torch", 9.0, **kw),
                     _rec("normlab", 10.0, M=3, **kw)]  # fmt: skip
    recs += [_rec("normlab", 10.0, M=5, op="rms_norm", direction=d, shape_set="population")
             for d in ("fwd", "bwd")]  # fmt: skip
    recs += [_rec("torch", 10.0, M=7, op=op, direction=d, shape_set="population")
             for op in ("rms_norm", "layer_norm") for d in ("fwd", "bwd")]  # fmt: skip
    recs += [_rec("normlab", 10.0, M=3, op="rms_norm", direction="fwd", shape_set="peers")]
    both = pop.measured_cases(recs, ("rms_norm", "layer_norm"))
    assert both == {(8, 32000, "bf16", "population"), (3, 32000, "bf16", "population")}
    assert (5, 32000, "bf16", "population") in pop.measured_cases(recs, ("rms_norm",))
    case = pop.shapes.Case(3, 32000, "bf16", "peers")
    assert pop._case_key(case) == (3, 32000, "bf16", "peers") and pop._case_key(case) not in both


def test_norm_population_reps_grow_for_short_calls():
    pop = _script("norm_population")
    roofline = 4000.0  # GB/s: 4 MB a µs
    assert pop.member_reps(4, 0.0, 10**6, roofline) == 4  # off
    assert pop.member_reps(4, 100.0, 10**6, None) == 4  # no roofline measured
    # 4 MB: 1 µs of bytes + the 1.5 µs floor = 2.5 µs a call, 40 calls for 100 µs
    assert pop.member_reps(4, 100.0, 4 * 10**6, roofline) == 40
    assert pop.member_reps(4, 1000.0, 4 * 10**6, roofline) == pop.MAX_REPS  # capped
    assert pop.member_reps(10, 100.0, 4 * 10**9, roofline) == 10  # a long call keeps --reps


def test_loss_options_ship_writes_what_notebook_07_reads(options, tmp_path, monkeypatch, capsys):
    """--ship copies one recorded run into normlab/data/<card>-loss-options.json: each row's
    variant, base variant and target dtype, read back by devdata.loss_options; a mix of runs or
    a missing file is refused with a clear error."""
    from normlab.bench import devdata

    monkeypatch.setattr(devdata, "DATA", tmp_path)
    recs = [_opt("normlab", "reverse_kl", 100.0), _opt("normlab", "reverse_kl fp32 teacher", 140.0),
            _opt("liger", "jsd", 900.0), _opt("normlab", options.FUSED_ADD, 75.0),
            _opt("normlab", "cross_entropy", 50.0, valid=False)]  # fmt: skip
    src = tmp_path / "run.jsonl"
    write_jsonl(recs, src)
    assert options.main(["--ship", str(src)]) == 0
    assert "wrote 4 rows" in capsys.readouterr().out  # the invalid record is left out
    meta, rows = devdata.loss_options("synthetic", data_dir=tmp_path)
    assert (meta["card"], meta["commit"], meta["source"]) == ("Synthetic", "c", ["run.jsonl"])
    by = {(r["impl"], r["variant"]): r for r in rows}
    teacher = by[("normlab", "reverse_kl fp32 teacher")]
    assert (teacher["base"], teacher["target_dtype"], teacher["device_us"]) == (
        "reverse_kl", "fp32", 140.0)
    assert by[("normlab", "reverse_kl")]["base"] is None
    assert by[("liger", "jsd")]["base"] == "reverse_kl"
    assert by[("normlab", options.FUSED_ADD)]["base"] is None
    assert devdata.loss_options("no-such-card", data_dir=tmp_path) is None
    other = tmp_path / "other.jsonl"
    write_jsonl([*recs[:1], dataclasses.replace(recs[1], commit="d")], other)
    for argv, message in (([str(other)], "several runs"), ([str(tmp_path / "nope.jsonl")],
                                                          "no such file")):
        with pytest.raises(SystemExit) as exc:
            options.main(["--ship", *argv])
        assert exc.value.code == 2 and message in capsys.readouterr().err


# ---- the fused form's grid ---------------------------------------------------------------------


def test_fused_grid_quick_run_checks_each_grid_and_records_it(tmp_path, capsys):
    grid = _script("fused_grid")
    out = tmp_path / "grid.jsonl"
    assert grid.main(["--out", str(out), "--quick", "--per-sm", "1,2", "--ops",
                      "cross_entropy"]) == 0  # fmt: skip
    rows = read_jsonl(out)
    assert [r.note.split("; grid ")[-1] for r in rows] == \
        ["one a row", "1 an SM from a queue", "2 an SM from a queue"]  # fmt: skip
    assert all(r.strategy == "fused" and r.M == 16 for r in rows)
    assert "0 grids differ from one a row" in capsys.readouterr().out
    # label CE with half its rows ignored: skipped rows come from the queue too
    assert grid.main(["--out", str(out), "--quick", "--per-sm", "1", "--ops", "cross_entropy",
                      "--ignored", "0.5"]) == 0  # fmt: skip
    rows = read_jsonl(out)
    assert rows[1].note.endswith("; grid 1 an SM from a queue; 0.5 of the labels ignored")
    assert all(r.note.endswith("; 0.5 of the labels ignored") for r in rows)
    assert "0 grids differ from one a row" in capsys.readouterr().out


def test_fused_grid_rejects_bad_arguments(capsys):
    grid = _script("fused_grid")
    for argv in (["--quick"], ["--out", "x", "--ops", "jsd"], ["--out", "x", "--V", "3y"],
                 ["--out", "x", "--per-sm", "0"], ["--out", "x", "--ignored", "1"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            grid.main(argv)
        assert exc.value.code == 2
    capsys.readouterr()
