"""The host-overhead measurement: its arithmetic and its table (under the interpreter)."""

import time

from normlab.bench import overhead


def test_host_cost_measures_the_call():
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.002)

    host, wall = overhead.host_cost(run, loop_calls=5, isolated_calls=3, warmup=2)
    assert len(calls) == 2 + 5 + 3
    assert 2000 <= host < 20000 and 2000 <= wall < 20000


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
    order, slow = [], {"normlab": [0.0, 0.009, 0.001], "torch": [0.002, 0.002, 0.002]}

    def fake_case(op, impl, direction, dtype, device):
        def run():
            round_index = order.count(impl) // 3  # 3 calls a round: warmup, loop, isolated
            order.append(impl)
            time.sleep(slow[impl][round_index])

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
    assert 1000 <= by["normlab"].host_us < 2500 and 2000 <= by["torch"].host_us < 3500
