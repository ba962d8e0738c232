"""The host-overhead measurement: its arithmetic and its table (under the interpreter)."""

import time
import types

from normlab.bench import overhead


def _fake_clock(monkeypatch):
    """overhead's perf_counter as a clock that moves only by advance(seconds): the calls' costs
    are exact, whatever the machine's load."""
    now = [0.0]
    fake = types.SimpleNamespace(perf_counter=lambda: now[0], strftime=time.strftime,
                                 gmtime=time.gmtime)  # fmt: skip
    monkeypatch.setattr(overhead, "time", fake)

    def advance(seconds):
        now[0] += seconds

    return advance


def test_host_cost_measures_the_call(monkeypatch):
    advance = _fake_clock(monkeypatch)
    calls = []

    def run():
        calls.append(1)
        advance(0.002)

    host, wall = overhead.host_cost(run, loop_calls=5, isolated_calls=3, warmup=2)
    assert len(calls) == 2 + 5 + 3
    assert abs(host - 2000) < 1e-6 and abs(wall - 2000) < 1e-6


def test_measure_overhead_rms_norm_interpreter():
    costs = overhead.measure_overhead(ops=("rms_norm",), impls=("normlab", "torch"),
                                      directions=("fwd",))  # fmt: skip
    assert {(c.impl, c.direction) for c in costs} == {("normlab", "fwd"), ("torch", "fwd")}
    assert all(c.mode == "interpret" and c.host_us > 0 and c.wall_us > 0 for c in costs)
    table = overhead.format_overhead(costs)
    assert table.startswith("Interpreter figures")
    assert "| rms_norm | fwd |" in table and "×" in table


def test_graph_replay_needs_a_gpu():
    """Under the interpreter there is no CUDA graph to capture: None, not an error (the notebook
    then says so); on a GPU, (eager µs, replay µs), both positive."""
    import normlab

    result = overhead.graph_replay("rms_norm", calls=5)
    if normlab.INTERPRET:
        assert result is None
    else:
        assert result is not None and all(us > 0 for us in result)


def test_rounds_take_the_implementations_in_turn(monkeypatch):
    """Each round measures every implementation once, each round in another order, and the
    recorded host µs is the median over the rounds."""
    advance = _fake_clock(monkeypatch)
    order, slow = [], {"normlab": [0.0, 0.009, 0.001], "torch": [0.002, 0.002, 0.002]}

    def fake_case(op, impl, direction, dtype, device):
        def run():
            round_index = order.count(impl) // 3  # 3 calls a round: warmup, loop, isolated
            order.append(impl)
            advance(slow[impl][round_index])

        return 4, 8, run

    monkeypatch.setattr(overhead, "host_case", fake_case)
    monkeypatch.setitem(overhead.ROUNDS, "cpu", 3)
    monkeypatch.setitem(overhead.LOOP_CALLS, "cpu", 1)
    monkeypatch.setitem(overhead.ISOLATED_CALLS, "cpu", 1)
    costs = overhead.measure_overhead(ops=("rms_norm",), impls=("normlab", "torch"),
                                      directions=("fwd",))  # fmt: skip
    # 3 calls a round per implementation (1 warmup, 1 loop, 1 isolated); the order rotates
    firsts = [order[i] for i in range(0, len(order), 3)]
    assert firsts == ["normlab", "torch", "torch", "normlab", "normlab", "torch"]
    by = {c.impl: c for c in costs}
    # normlab's rounds slept 0, 9 and 1 ms in its loop: the median is 1 ms, not the mean
    assert abs(by["normlab"].host_us - 1000) < 1e-6 and abs(by["torch"].host_us - 2000) < 1e-6
