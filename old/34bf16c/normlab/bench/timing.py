"""Time one call: device time from the profiler with a cold L2, wall time beside it.

GPU (the method of Fast-LLM's norm-backward rewrite, ServiceNow/Fast-LLM#546):

* **device time** = the sum of the durations of every CUDA kernel, memset and memcpy the call
  launched, read from ``torch.profiler`` (CUDA activity). Before each call ``_l2_flush_kernel``
  writes a buffer of ``max(2 * L2, 512 MiB)``, so inputs come from HBM as in training; after each
  call ``_bench_marker_kernel`` (one program) closes the window. The call's kernels are exactly
  those between a flush and the next marker on the GPU timeline; both have names no baseline
  launches, so excluding them is unambiguous (baselines launch fill kernels of their own).
* **wall time** = CUDA events around the call after a flush and a synchronize, so CPU launch
  overhead is included (profiled separately: the profiler slows launches).
* **Δpeak** = ``max_memory_allocated`` during one call minus ``memory_allocated`` before it.

CPU / interpreter: wall time by ``time.perf_counter``; device time is the same wall time (the
CPU is the device), no kernel breakdown, no Δpeak. Such numbers say nothing about GPU bandwidth.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import triton
import triton.language as tl

from normlab import _runtime

FLUSH_MIN_BYTES = 512 * 2**20  # a 512 MB write; at least 2x L2 in any case
_FLUSH_BLOCK = 4096
FLUSH_KERNEL = "_l2_flush_kernel"
MARKER_KERNEL = "_bench_marker_kernel"
OPEN_KERNEL = "_bench_open_kernel"  # opens a warm call's window: no flush


class BenchError(RuntimeError):
    """A measurement that cannot be trusted (kernels not attributable, times not positive)."""


@triton.jit
def _l2_flush_kernel(
    buf_ptr,  # (n,) int32 scratch, larger than 2x L2
    n,
    BLOCK: tl.constexpr,
):
    """Overwrite the scratch buffer so no input of the next call stays in L2."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf_ptr + offs, offs, mask=offs < n)


@triton.jit
def _bench_marker_kernel(
    flag_ptr,  # (1,) int32 scratch
):
    """Closes a timed call's window on the GPU timeline; does nothing useful."""
    tl.store(flag_ptr, 1)


@triton.jit
def _bench_open_kernel(
    flag_ptr,  # (1,) int32 scratch
):
    """Opens a warm call's window on the GPU timeline (time_warm) without touching L2."""
    tl.store(flag_ptr, 0)


@dataclass
class Timing:
    """Per-call times in µs over ``reps`` calls. ``kernels`` maps kernel name -> mean µs per call
    (it sums to ``device_us``)."""

    device_us: float | None
    device_us_median: float | None
    wall_us: float
    kernels: dict[str, float] = field(default_factory=dict)
    peak_extra_bytes: int | None = None
    reps: int = 0
    mode: str = "cpu"
    device_samples: list[float] = field(default_factory=list, repr=False)
    wall_samples: list[float] = field(default_factory=list, repr=False)


class _GpuTools:
    """Flush buffer and marker flag, allocated once per process."""

    def __init__(self) -> None:
        n_bytes = max(2 * _runtime.l2_bytes(), FLUSH_MIN_BYTES)
        self.n = n_bytes // 4
        self.buf = torch.empty(self.n, dtype=torch.int32, device="cuda")
        self.flag = torch.zeros(1, dtype=torch.int32, device="cuda")
        self.grid = (triton.cdiv(self.n, _FLUSH_BLOCK),)

    def flush(self) -> None:
        _l2_flush_kernel[self.grid](self.buf, self.n, BLOCK=_FLUSH_BLOCK)

    def marker(self) -> None:
        _bench_marker_kernel[(1,)](self.flag)

    def open(self) -> None:
        _bench_open_kernel[(1,)](self.flag)


_TOOLS: _GpuTools | None = None


def _tools() -> _GpuTools:
    global _TOOLS
    if _TOOLS is None:
        _TOOLS = _GpuTools()
    return _TOOLS


def _gpu_events(prof) -> list[tuple[float, float, str]]:
    """(start µs, duration µs, name) of every GPU-side activity in a finished profile."""
    out = []
    try:
        for evt in prof.profiler.kineto_results.events():
            if evt.device_type() != torch.autograd.DeviceType.CPU:
                out.append((evt.start_ns() / 1e3, evt.duration_ns() / 1e3, evt.name()))
    except AttributeError:  # older/newer private layout: the public event list
        for evt in prof.events():
            if evt.device_type != torch.autograd.DeviceType.CPU:
                start, end = evt.time_range.start, evt.time_range.end
                out.append((float(start), float(end - start), evt.name))
    out.sort(key=lambda e: e[0])
    return out


def split_calls(events: list[tuple[float, float, str]], reps: int,
                opener: str = FLUSH_KERNEL) -> list[list[tuple[str, float]]]:  # fmt: skip
    """Group GPU activities into calls: each call is what lies between an ``opener`` kernel (the
    L2 flush; OPEN_KERNEL for warm calls) and the next marker kernel. Anything outside these
    windows (untimed set-up) is dropped."""
    one, two = (("a flush", "two L2 flushes") if opener == FLUSH_KERNEL
                else ("an opener", "two window openers"))  # fmt: skip
    calls: list[list[tuple[str, float]]] = []
    current: list[tuple[str, float]] | None = None
    for _, dur, name in events:
        if opener in name:
            if current is not None:
                raise BenchError(f"{two} without a marker between them")
            current = []
        elif MARKER_KERNEL in name:
            if current is None:
                raise BenchError(f"a marker kernel without {one} before it")
            calls.append(current)
            current = None
        elif current is not None:
            current.append((name, dur))
    if len(calls) != reps:
        names = sorted({n for _, _, n in events})[:8]
        raise BenchError(f"profiler shows {len(calls)} timed calls, expected {reps}; names {names}")
    return calls


def _profiled_calls(run: Callable[[], Any], reps: int, open_window: Callable[[], None],
                    opener: str) -> list[list[tuple[str, float]]]:  # fmt: skip
    """(kernel, µs) of each of ``reps`` calls of ``run()`` from the profiler, each call between
    ``open_window()`` (the flush, or the warm opener) and the marker kernel (split_calls)."""
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        # torch 2.11 warns once that events are cleared per cycle; we use one cycle
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                open_window()
                out = run()
                _tools().marker()
                del out
            torch.cuda.synchronize()
    return split_calls(_gpu_events(prof), reps, opener)


def _time_gpu(run: Callable[[], Any], reps: int, warmup: int) -> Timing:
    tools = _tools()
    for _ in range(warmup):
        run()
    torch.cuda.synchronize()

    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out

    walls = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        tools.flush()
        torch.cuda.synchronize()  # the GPU idles at `start`, so launch overhead is in the window
        start.record()
        out = run()
        end.record()
        end.synchronize()
        walls.append(start.elapsed_time(end) * 1e3)
        del out

    calls = _profiled_calls(run, reps, tools.flush, FLUSH_KERNEL)
    device = [sum(d for _, d in call) for call in calls]
    kernels: dict[str, float] = {}
    for call in calls:
        for name, dur in call:
            kernels[name] = kernels.get(name, 0.0) + dur / reps
    return Timing(
        device_us=statistics.fmean(device),
        device_us_median=statistics.median(device),
        wall_us=statistics.median(walls),
        kernels=kernels,
        peak_extra_bytes=int(peak),
        reps=reps,
        mode="gpu",
        device_samples=device,
        wall_samples=walls,
    )


def _time_cpu(run: Callable[[], Any], reps: int, warmup: int) -> Timing:
    for _ in range(warmup):
        run()
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = run()
        walls.append((time.perf_counter() - t0) * 1e6)
        del out
    return Timing(
        device_us=statistics.fmean(walls),
        device_us_median=statistics.median(walls),
        wall_us=statistics.median(walls),
        reps=reps,
        mode="interpret" if _runtime.INTERPRET else "cpu",
        device_samples=walls,
        wall_samples=walls,
    )


def time_call(run: Callable[[], Any], *, reps: int = 30, warmup: int = 3) -> Timing:
    """Time ``run()`` (a zero-argument callable: one call of the op) ``reps`` times after
    ``warmup`` untimed calls (which also trigger compilation). Raises BenchError when the result
    cannot be a measurement (kernels not attributable, a time that is not positive)."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    timing = (
        _time_gpu(run, reps, warmup) if _runtime.DEVICE == "cuda" else _time_cpu(run, reps, warmup)
    )
    if timing.device_us is not None and not timing.device_us > 0:
        raise BenchError(f"device time {timing.device_us} us is not positive (no kernel ran?)")
    if not timing.wall_us > 0:
        raise BenchError(f"wall time {timing.wall_us} us is not positive")
    return timing


def time_warm(run: Callable[[], Any], *, reps: int = 30, warmup: int = 3) -> float:
    """Device µs per call of ``run()`` called back to back with no L2 flush, so inputs that fit
    in L2 stay there: the warm timing that flatters a kernel. GPU: the same measure as
    ``time_call``'s ``device_us`` (the call's kernels summed from the profiler), each call opened
    by a one-program kernel instead of the flush; host time between calls is not in it, as it
    is not in ``device_us``. CPU: ``time.perf_counter`` per call, the mean."""
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    for _ in range(warmup):
        run()
    if _runtime.DEVICE != "cuda":
        t0 = time.perf_counter()
        for _ in range(reps):
            run()
        return (time.perf_counter() - t0) * 1e6 / reps
    torch.cuda.synchronize()
    calls = _profiled_calls(run, reps, _tools().open, OPEN_KERNEL)
    return statistics.fmean(sum(d for _, d in call) for call in calls)
