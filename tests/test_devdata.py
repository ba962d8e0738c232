"""The notebooks' demonstration helpers: readers of benchmarks/data, compiled-kernel metadata,
warm timing."""

import json
import types

import pytest

from normlab import _runtime, bench
from normlab.bench import devdata, occupancy


def test_host_overhead_reads_meta_and_costs(tmp_path):
    cost = {"op": "rms_norm", "impl": "normlab", "direction": "fwd", "M": 4, "N": 1024,
            "dtype": "bf16", "host_us": 43.46, "wall_us": 53.99, "mode": "gpu"}
    (tmp_path / "o.json").write_text(json.dumps({"meta": {"commit": "abc"}, "costs": [cost]}))
    meta, costs = devdata.host_overhead("o.json", data_dir=tmp_path)
    assert meta == {"commit": "abc"} and costs[0].host_us == 43.46 and costs[0].op == "rms_norm"
    assert devdata.host_overhead("missing.json", data_dir=tmp_path) is None


def test_register_ab_takes_medians_over_rounds_and_registers_from_the_round_that_has_them(
        tmp_path):
    results = [
        {"op": "ln", "M": 8, "N": 16, "round": r, "variant": v, "device_us": us,
         **({"n_regs": regs, "n_spills": spills} if r == 0 else {})}
        for v, regs, spills, times in (("base", 128, 60, (3.0, 1.0, 2.0)),
                                       ("pair", 64, 152, (9.0, 7.0, 8.0)))
        for r, us in enumerate(times)
    ]
    runs = {"runs": [{"meta": {"commit": "x+ab", "card": "C"}, "results": results}]}
    (tmp_path / devdata.SWEEPS).write_text(json.dumps(runs))
    meta, rows = devdata.register_ab("x+ab", data_dir=tmp_path)
    assert meta["card"] == "C" and meta["commit"] == "x+ab"
    by = {r["variant"]: r for r in rows}
    assert by["base"]["device_us"] == 2.0 and by["base"]["rounds"] == 3
    assert (by["pair"]["n_regs"], by["pair"]["n_spills"]) == (64, 152)
    meta, raw = devdata.sweep_run("x+ab", data_dir=tmp_path)
    assert raw == results and meta["commit"] == "x+ab"
    with pytest.raises(ValueError, match="no run at commit 'nope'"):
        devdata.register_ab("nope", data_dir=tmp_path)
    assert devdata.register_ab("x+ab", data_dir=tmp_path / "none") is None


def test_compiled_kernels_reads_registers_spills_and_occupancy():
    inited = []
    compiled = types.SimpleNamespace(
        name="_k", n_regs=72, n_spills=3, metadata=types.SimpleNamespace(num_warps=4, shared=0),
        _init_handles=lambda: inited.append(1))
    jit = types.SimpleNamespace(device_caches={0: ({"key": compiled}, None, "target", None)})
    wrapped = types.SimpleNamespace(fn=jit)  # as triton.heuristics wraps a JITFunction
    (info,) = occupancy.compiled_kernels(wrapped)
    assert info == {"name": "_k", "num_warps": 4, "n_regs": 72, "n_spills": 3, "shared_bytes": 0,
                    "programs_per_sm": 7}
    assert inited == [1]
    from normlab.norms import row

    if _runtime.INTERPRET:  # the interpreter compiles nothing: nothing to read
        assert occupancy.compiled_kernels(row._norm_bwd_persistent_kernel) == []


def test_time_warm_times_back_to_back_calls():
    calls = []
    us = bench.time_warm(lambda: calls.append(1), reps=4, warmup=2)
    assert us > 0 and len(calls) == 6
    with pytest.raises(ValueError, match="reps must be >= 1"):
        bench.time_warm(lambda: None, reps=0)
