"""Sweeps: run impls over shapes, dtypes and directions, return records, print them as a table.

Measuring (``sweep``), recording (``records``) and rendering (``format_table``; plots live in
``normlab.viz``) are separate layers.
"""

from __future__ import annotations

import datetime as _dt
import gc
import itertools
import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

import torch

from normlab import _runtime
from normlab.bench import progress as _progress
from normlab.bench import registry, traffic
from normlab.bench import shapes as _shapes
from normlab.bench.device import (
    CPU_LABEL,
    CopyBandwidth,
    DeviceInfo,
    device_info,
    git_commit,
    host_switches,
)
from normlab.bench.records import Record, check_sanity, dtype_name, parse_dtype
from normlab.bench.timing import time_call

# The 11 norm shapes the H200 peer runs measured, in their order.
PEERS = [
    (8192, 1024),
    (1024, 8192),
    (2048, 4096),
    (16384, 1024),
    (4096, 4096),
    (32768, 1024),
    (8192, 4096),
    (512, 16384),
    (16384, 2048),
    (2048, 16384),
    (32768, 8192),
]
NARROW_ROWS = 7_864_320
SHAPES: dict[str, list[tuple[int, int]]] = {
    "peers": PEERS,
    "narrow": [(NARROW_ROWS, n) for n in (16, 32, 64, 128, 256, 512)],
    "losses": [(4096, v) for v in (32768, 65536, 131072, 50257, 151936)],
    # CPU-sized: a power of two and a ragged non-power of two
    "quick": [(64, 128), (37, 1000)],
    # the shape populations' bf16 members (normlab.bench.shapes; records say shape_set=...)
    "population": list(dict.fromkeys(
        (c.M, c.N) for c in _shapes.norm_population() if c.dtype == "bf16")),
    "vocab_population": list(dict.fromkeys((c.M, c.N) for c in _shapes.vocab_population())),
}
DEFAULT_REPS = {"gpu": 30, "cpu": 5}
INTERPRETER_LABEL = (
    "normlab rows: its Triton kernels run in the interpreter on CPU (numpy), not compiled: "
    "a correctness run, their times say nothing about the kernels' speed"
)


def parse_shapes(spec: str | Iterable) -> list[tuple[int, int]]:
    """Shapes from preset names and/or ``MxN`` items, comma-separated ("peers,37x1000")."""
    if not isinstance(spec, str):
        return [(int(m), int(n)) for m, n in spec]
    shapes: list[tuple[int, int]] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if item in SHAPES:
            shapes.extend(SHAPES[item])
            continue
        match = re.fullmatch(r"(\d+)\s*[x×X*]\s*(\d+)", item.replace("_", ""))
        if not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise ValueError(f"bad shape {item!r}: expected MxN or a preset ({', '.join(SHAPES)})")
        shapes.append((int(match[1]), int(match[2])))
    if not shapes:
        raise ValueError(f"no shapes in {spec!r}")
    return shapes


def parse_op_shapes(spec: str, ops) -> list[tuple[str, int, int]]:
    """``op:MxN`` items, comma-separated, each op one of ``ops`` -> [(op, M, N)]."""
    cells = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        op, _, shape = item.partition(":")
        match = re.fullmatch(r"(\d+)x(\d+)", shape)
        if op not in ops or not match or int(match[1]) < 1 or int(match[2]) < 1:
            raise ValueError(f"bad cell {item!r}: expected op:MxN, op one of {', '.join(ops)}, "
                             "M and N >= 1")  # fmt: skip
        cells.append((op, int(match[1]), int(match[2])))
    if not cells:
        raise ValueError(f"no cells in {spec!r}")
    return cells


def _axes(op: str, shapes, dtypes, directions) -> tuple[list, list, list[str]]:
    shape_list = parse_shapes(shapes)
    dtype_list = [parse_dtype(d) for d in dtypes]
    dirs = list(directions) if directions is not None else list(registry.DEFAULT_DIRECTIONS[op])
    for d in dirs:
        if d not in traffic.DIRECTIONS:
            raise ValueError(
                f"unknown direction {d!r}: expected one of {', '.join(traffic.DIRECTIONS)}"
            )
    return shape_list, dtype_list, dirs


def _plan_cases(op, impls, shape_list, dtype_list, dirs, options):
    """The cases to run, shape-major, and (label, reason) for impls that cannot run here."""
    cases = []
    skipped = []
    for impl in registry.implementations(op, impls):
        reason = impl.unavailable()
        if reason:
            skipped.append((f"{op} {impl.name}", reason))
            continue
        for variant in _variants(impl, options) or [{}]:
            for (M, N), dtype, direction in itertools.product(shape_list, dtype_list, dirs):
                if direction in impl.directions:
                    cases.append((impl, variant, M, N, dtype, direction))
    # shape-major; the sort is stable, so impls and variants keep their order within a shape
    order = {key: i for i, key in enumerate(itertools.product(shape_list, dtype_list, dirs))}
    cases.sort(key=lambda c: order[((c[2], c[3]), c[4], c[5])])
    return cases, skipped


# Rough seconds of one call on a CPU, for the estimate before a sweep and the first ETA:
# (per row, per element) of an M x N input, by who runs it and op family, times a direction
# factor. Measured on a shared 2-core x86 container (torch 2.13 CPU, triton 3.9 interpreter):
# normlab's norm forward in the interpreter ~2 ms per row + ~1.5 µs per element (1024x8192:
# ~15 s a call); its losses ~25 ms per row + ~55 µs per element (37x1000: ~3 s a call);
# PyTorch a few ns per element. Another CPU can be a few times off either way.
CPU_SECONDS = {
    ("interpreter", "norm"): (2e-3, 1.5e-6),
    ("interpreter", "loss"): (25e-3, 55e-6),
    ("torch", "norm"): (0.0, 5e-9),
    ("torch", "loss"): (0.0, 10e-9),
}
CPU_DIRECTION_FACTOR = {
    "norm": {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5},
    "loss": {"fwd": 1.0, "fwd+bwd": 1.2},  # the fused form computes the gradient in the forward
}


def case_cpu_seconds(
    op: str, impl: str, M: int, N: int, direction: str, reps: int, warmup: int
) -> float:
    """Rough CPU seconds of one sweep case: ``warmup + reps`` calls (plus the untimed forward
    a norm's ``bwd`` case builds), from ``CPU_SECONDS``."""
    family = "norm" if op in traffic.NORM_OPS + traffic.ADD_NORM_OPS else "loss"
    runner = "interpreter" if impl == "normlab" and _runtime.INTERPRET else "torch"
    per_row, per_element = CPU_SECONDS[(runner, family)]
    one_fwd = M * (per_row + N * per_element)
    factors = CPU_DIRECTION_FACTOR[family]
    calls = (warmup + reps) * factors.get(direction, max(factors.values()))
    if direction == "bwd":
        calls += 1
    return one_fwd * calls


class CpuEstimate(NamedTuple):
    """What a sweep will cost on this CPU: cases to run, rough seconds, and of those the
    seconds and elements normlab's kernels spend in the Triton interpreter."""

    cases: int
    seconds: float
    interpreter_seconds: float
    interpreter_elements: int

    def __add__(self, other):  # estimates of several ops add up
        return CpuEstimate(*(a + b for a, b in zip(self, other, strict=True)))


def estimate_cpu(
    op: str,
    impls: list[str] | None = None,
    shapes: str | Iterable = "quick",
    dtypes: Iterable = ("bf16",),
    directions: Iterable[str] | None = None,
    *,
    options: dict[str, list] | None = None,
    reps: int | None = None,
    warmup: int = 3,
) -> CpuEstimate:
    """The rough cost on a CPU of ``sweep`` with the same arguments (nothing is run)."""
    if reps is None:
        reps = DEFAULT_REPS["cpu"]
    shape_list, dtype_list, dirs = _axes(op, shapes, dtypes, directions)
    cases, _ = _plan_cases(op, impls, shape_list, dtype_list, dirs, options)
    seconds = interp_seconds = 0.0
    interp_elements = 0
    for impl, _variant, M, N, _dtype, direction in cases:
        s = case_cpu_seconds(op, impl.name, M, N, direction, reps, warmup)
        seconds += s
        if impl.name == "normlab" and _runtime.INTERPRET:
            interp_seconds += s
            interp_elements += M * N * (warmup + reps)
    return CpuEstimate(len(cases), seconds, interp_seconds, interp_elements)


class Results(list):
    """The records of a sweep (a list), plus ``skipped``: (case label, reason) for every case
    that could not run, and the ``device`` the sweep ran on."""

    def __init__(self, records=(), skipped=(), device: DeviceInfo | None = None):
        super().__init__(records)
        self.skipped: list[tuple[str, str]] = list(skipped)
        self.device = device


def _variants(impl: registry.Impl, options: dict[str, list] | None) -> list[dict]:
    """Cartesian product of the options this impl takes (baselines take none)."""
    given = {k: v for k, v in (options or {}).items() if k in impl.options and v}
    keys = list(given)
    return [dict(zip(keys, combo, strict=True))
            for combo in itertools.product(*(given[k] for k in keys))]


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def measure(
    run: Callable[[], object],
    op: str,
    impl: str,
    M: int,
    N: int,
    dtype,
    direction: str,
    *,
    device: DeviceInfo,
    strategy: str | None = None,
    layout: str | None = None,
    block_cap: int | None = None,
    roofline_gbps: float | None = None,
    reps: int | None = None,
    warmup: int = 3,
    model: str = "minimal",
    command: str = "",
    date: str | None = None,
    commit: str | None = None,
    shape_set: str | None = None,
    target_dtype: torch.dtype | str | None = None,
) -> Record:
    """One record: time ``run()`` (one call of ``op`` on an M x N input) with ``time_call`` and
    divide the bytes model by its device time. ``sweep`` calls this for each case; call it
    directly for a callable the registry has no knob for (e.g. a launcher keyword).

    ``roofline_gbps`` defaults to ``device``'s measured copy bandwidth; ``strategy`` (or a
    loss's form), ``layout`` and ``block_cap`` only label the record; ``target_dtype`` is a soft
    loss's target dtype where it differs from ``dtype`` (the bytes model reads it at its size).
    """
    if reps is None:
        reps = DEFAULT_REPS["gpu" if _runtime.DEVICE == "cuda" else "cpu"]
    if roofline_gbps is None:
        roofline_gbps = device.roofline_gbps
    timing = time_call(run, reps=reps, warmup=warmup)
    n_bytes = traffic.bytes_moved(op, direction, M, N, dtype, model=model,
                                  target_dtype=target_dtype)  # fmt: skip
    achieved = traffic.gbps(n_bytes, timing.device_us)
    rec = Record(
        op=op,
        impl=impl,
        strategy=strategy,
        layout=layout,
        block_cap=block_cap,
        M=M,
        N=N,
        dtype=dtype_name(dtype),
        direction=direction,
        device_us=timing.device_us,
        wall_us=timing.wall_us,
        bytes=n_bytes,
        gbps=achieved,
        roofline_gbps=roofline_gbps,
        frac_roofline=traffic.fraction_of_roofline(achieved, roofline_gbps),
        datasheet_gbps=device.datasheet_gbps,
        peak_extra_bytes=timing.peak_extra_bytes,
        kernels=timing.kernels,
        card=device.card,
        sm_count=device.sm_count,
        torch=device.torch,
        triton=device.triton,
        mode=device.mode,
        date=date if date is not None else _utc_now(),
        commit=commit if commit is not None else git_commit(),
        shape_set=shape_set,
        command=command,
        note=f"{model} bytes model{' (no partial rows)' if model == 'full' else ''}; "
        f"{timing.reps} reps" + "".join(f"; {s}" for s in host_switches()),
    )
    return check_sanity(rec)


def sweep(
    op: str,
    impls: list[str] | None = None,
    shapes: str | Iterable = "quick",
    dtypes: Iterable = ("bf16",),
    directions: Iterable[str] | None = None,
    *,
    options: dict[str, list] | None = None,
    reps: int | None = None,
    warmup: int = 3,
    device: DeviceInfo | None = None,
    roofline: CopyBandwidth | float | None = None,
    model: str = "minimal",
    progress: bool | str | _progress.ProgressHook | None = None,
    on_record: Callable[[Record], None] | None = None,
    command: str = "",
) -> Results:
    """Measure ``op`` for each impl × shape × dtype × direction (× option variant); return the
    records (a ``Results`` list; unrunnable cases are in ``.skipped`` with their reason).

    Cases run shape by shape: every impl and variant of one (shape, dtype, direction) is timed
    before the next, so the ones a ratio compares are seconds apart. (Timed impl by impl, minutes
    apart, a 10-20 µs shape's ratio to torch.compile moved by up to 9% against three interleaved
    rounds of one process on the H200: normlab/data/README.md.)

    ``impls``: registry names (default: all of ``op``'s). ``options``: lists of values for the
    normlab impl's keywords, e.g. ``{"strategy": ["atomic", "two_stage"]}``. ``roofline``: the
    copy bandwidth to divide by (measured here when not given). ``progress``: see
    ``normlab.bench.progress``. ``on_record`` sees each record as soon as it is measured.
    """
    shape_list, dtype_list, dirs = _axes(op, shapes, dtypes, directions)
    cases, skipped = _plan_cases(op, impls, shape_list, dtype_list, dirs, options)
    shape_set = shapes if isinstance(shapes, str) and shapes in _shapes.POPULATIONS else None
    if device is None:
        device = device_info(measure_copy=roofline is None)
    if roofline is None:
        roofline = device.copy
    roofline_gbps = roofline.gbps if isinstance(roofline, CopyBandwidth) else roofline
    if reps is None:
        reps = DEFAULT_REPS["gpu" if _runtime.DEVICE == "cuda" else "cpu"]
    hook = _progress.resolve(progress)
    commit = git_commit()
    date = _utc_now()
    if hook is not None and hasattr(hook, "plan"):  # lets the hook weigh cases for its ETA
        hook.plan(
            [case_cpu_seconds(op, c[0].name, c[2], c[3], c[5], reps, warmup) for c in cases]
            if _runtime.DEVICE != "cuda"
            else None
        )

    results = Results(skipped=skipped, device=device)
    for i, (impl, variant, M, N, dtype, direction) in enumerate(cases):
        opts = ",".join(f"{v}" for v in variant.values())
        label = (
            f"{op} {impl.name}{f'[{opts}]' if opts else ''} {M}x{N} {dtype_name(dtype)} {direction}"
        )
        if hook:
            hook(i, len(cases), label)
        try:
            run = impl.build(M, N, dtype, direction, _runtime.DEVICE, **variant)
            rec = measure(
                run, op, impl.name, M, N, dtype, direction, device=device,
                strategy=variant.get("strategy", variant.get("form")),
                layout=variant.get("layout"), block_cap=variant.get("block_cap"),
                roofline_gbps=roofline_gbps, reps=reps, warmup=warmup, model=model,
                command=command, date=date, commit=commit, shape_set=shape_set,
            )  # fmt: skip
        except Exception as exc:  # a case that cannot run is reported, and the sweep goes on
            results.skipped.append((label, f"{type(exc).__name__}: {exc}".strip().splitlines()[0]))
            continue
        finally:
            run = None
            gc.collect()
            if _runtime.DEVICE == "cuda":
                torch.cuda.empty_cache()
        results.append(rec)
        if on_record:
            on_record(rec)
    if hook:
        hook(len(cases), len(cases), "done")
    return results


def best_baseline_us(records: Iterable[Record]) -> dict[tuple, float]:
    """Fastest valid peer (not normlab, compiled or not) device time per (op, M, N, dtype,
    direction)."""
    best: dict[tuple, float] = {}
    for r in records:
        if not r.impl.startswith("normlab") and r.valid and r.device_us:
            key = (r.op, r.M, r.N, r.dtype, r.direction)
            best[key] = min(best.get(key, float("inf")), r.device_us)
    return best


def format_table(records: list[Record], skipped: Iterable[tuple[str, str]] = ()) -> str:
    """A fixed-width table: impl, shape, dir, device µs, wall µs, GB/s, % of copy, Δpeak MiB and
    the ratio to the fastest non-normlab impl of the same case (< 1 is faster)."""
    best = best_baseline_us(records)
    head = (
        "op",
        "impl",
        "shape",
        "dtype",
        "dir",
        "device µs",
        "wall µs",
        "GB/s",
        "% copy",
        "Δpeak MiB",
        "vs best",
        "",
    )
    rows = []
    for r in records:
        ref = best.get((r.op, r.M, r.N, r.dtype, r.direction))
        rows.append(
            (
                r.op,
                r.label,
                r.shape,
                r.dtype,
                r.direction,
                f"{r.device_us:.1f}" if r.device_us is not None else "-",
                f"{r.wall_us:.1f}",
                f"{r.gbps:.0f}" if r.gbps is not None else "-",
                f"{100 * r.frac_roofline:.0f}%" if r.frac_roofline is not None else "-",
                f"{r.peak_extra_bytes / 2**20:.1f}" if r.peak_extra_bytes is not None else "-",
                f"{r.device_us / ref:.2f}x" if ref and r.device_us else "-",
                "" if r.valid else "INVALID: " + r.note,
            )
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    lines = []
    modes = {r.mode for r in records}
    if modes and modes != {"gpu"}:
        lines.append(f"# {CPU_LABEL}")
    if any(r.mode == "interpret" and r.impl == "normlab" for r in records):
        lines.append(f"# {INTERPRETER_LABEL}")
    if records:
        r0 = records[0]
        roof = f"{r0.roofline_gbps:.0f} GB/s" if r0.roofline_gbps else "not measured"
        lines.append(
            f"# {r0.card} ({r0.mode}); copy roofline {roof}; torch {r0.torch}, triton {r0.triton}"
        )
    fmt = "  ".join(
        f"{{:<{w}}}" if i < 5 or i == 11 else f"{{:>{w}}}" for i, w in enumerate(widths)
    )
    lines.append(fmt.format(*head).rstrip())
    lines.extend(fmt.format(*row).rstrip() for row in rows)
    for label, reason in skipped:
        lines.append(f"skipped: {label}: {reason}")
    return "\n".join(lines)
