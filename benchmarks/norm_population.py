"""The norms over the shape population, beside their peers in the same process (GPU).

    python3 benchmarks/norm_population.py --out out/norm_population.jsonl [--reps 10]

For each population member (``normlab.bench.shapes.norm_population``): RMSNorm and LayerNorm
(``--ops`` adds the fused residual adds, ``add_rms_norm`` and ``add_layer_norm``, whose torch
peer is ``h = x + r`` then torch's norm of h), forward and backward, normlab's default against
torch, torch.compile (default mode: one compiled function over every member, dynamic after its
first recompile), torch.compile with ``dynamic=False`` compiled per member (``compile-static``,
as a model of fixed shapes gets it; runs before 2026-12-03 did not time it) and Liger-Kernel
where importable, shape by shape. Records carry ``shape_set="population"``. Prints, per op and
direction, the geometric mean of best peer µs / normlab µs, the count below 0.9 and the ten
worst cells, against the targets (every shape >= 0.90x, geomean >= 1.15x; the fused adds have
no geomean target); ``--summary FILE.jsonl`` prints that for recorded runs.

``--replace BASE NEW --out FILE`` merges recorded runs (no GPU): BASE's records with every member
(op and shape) that NEW re-measured taken from NEW, peers and all.

``--timed-us T`` raises a member's reps until its timed calls add up to about T µs of device
time (at most ``MAX_REPS``), estimated from its bytes at the copy roofline plus
``LAUNCH_FLOOR_US``: a 1.5 µs call at 4 reps has a run-to-run spread of about ±0.3 µs, a fifth of
its time. Every implementation of a member gets the same reps. ``--peers-timed-us`` does the same
for the 11 peer shapes (default 1000): their target, 0.98x, is nearer 1 than a few timed calls'
spread.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from normlab.bench import device_info, population, registry, shapes, traffic
from normlab.bench.records import parse_dtype, portable_command, read_jsonl, write_jsonl
from normlab.bench.sweep import PEERS, measure, parse_shapes

MAX_REPS = 64
LAUNCH_FLOOR_US = 1.5  # the shortest kernel the profiler times on an H200 (a one-program store)
OPS = ("rms_norm", "layer_norm")
ADD_OPS = ("add_rms_norm", "add_layer_norm")  # measured when named in --ops
DIRECTIONS = ("fwd", "bwd")


def _compiled_peer(op, dynamic=None):
    """torch.compile of torch's op. ``dynamic=None`` (the default mode): one compiled function
    over every member, dynamic after its first recompile. ``dynamic=False``: one static graph
    per member, as a model of fixed shapes gets it. Its backward is timed by repeated backwards
    over one graph, which donated buffers forbid."""
    torch._functorch.config.donated_buffer = False
    # Each new dtype or width-1 shape recompiles; past the limit dynamo would run eager silently.
    torch._dynamo.config.recompile_limit = 4096
    torch._dynamo.config.accumulated_recompile_limit = 4096
    if op == "rms_norm":
        return torch.compile(lambda x, w, b, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
                             dynamic=dynamic)  # fmt: skip
    if op == "layer_norm":
        return torch.compile(lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps),
                             dynamic=dynamic)  # fmt: skip
    # the fused adds: torch's add, then its norm of h, returning (y, h) as normlab's do
    return torch.compile(registry.torch_add_norm(op, compiled=False)(), dynamic=dynamic)


def _impls(op, static_compile: bool = False):
    case = registry.add_norm_case if op in ADD_OPS else registry.norm_case
    out = {
        "normlab": lambda M, N, dt, d: registry.get(op, "normlab").build(M, N, dt, d, "cuda"),
        "torch": lambda M, N, dt, d: registry.get(op, "torch").build(M, N, dt, d, "cuda"),
    }
    compiled = _compiled_peer(op)
    out["compile"] = lambda M, N, dt, d: case(compiled, op, M, N, dt, d, "cuda")
    liger = registry.REGISTRY[op].get("liger")  # none for add_layer_norm
    if liger is not None and liger.unavailable() is None:
        out["liger"] = lambda M, N, dt, d: liger.build(M, N, dt, d, "cuda")
    if static_compile:  # a compile per member
        static = _compiled_peer(op, dynamic=False)
        out["compile-static"] = lambda M, N, dt, d: case(static, op, M, N, dt, d, "cuda")
    return out


def member_reps(reps: int, timed_us: float, n_bytes: int, roofline_gbps: float | None) -> int:
    """Reps for a call moving ``n_bytes``: at least ``reps``, more while the estimated time of
    the timed calls is under ``timed_us`` (at most MAX_REPS; no roofline: ``reps``)."""
    if not timed_us or not roofline_gbps:
        return reps
    estimate_us = n_bytes / (roofline_gbps * 1e3) + LAUNCH_FLOOR_US
    return max(reps, min(MAX_REPS, math.ceil(timed_us / estimate_us)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, nargs="+", help="recorded runs: print, no GPU")
    parser.add_argument("--replace", type=Path, nargs=2, metavar=("BASE", "NEW"),
                        help="recorded runs, no GPU: BASE with every member NEW measured taken "
                             "from NEW, written to --out (gzipped if it ends in .gz)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--families", default="random,model,narrow",
                        help="random,model,narrow (the population) and/or peers (the 11 shapes "
                             "of the peers' published table, records shape_set='peers')")
    parser.add_argument("--dtypes", default="bf16,fp16,fp32")
    parser.add_argument("--ops", default=",".join(OPS),
                        help=f"a comma list of {', '.join(OPS + ADD_OPS)}")
    parser.add_argument("--shard", default="1/1", help="i/n: every n-th member from the i-th")
    parser.add_argument("--cells", help="MxN[,MxN...]: only these members (of any dtype)")
    parser.add_argument("--after", type=Path,
                        help="a run cut short (FILE.jsonl[.gz]): skip the members it holds, so "
                             "this run measures the rest of the same selection")
    parser.add_argument("--impls", help="a comma list of normlab,torch,compile,liger,"
                        "compile-static (torch.compile, dynamic=False: a compile per member); "
                        "all by default")
    parser.add_argument("--timed-us", type=float, default=0.0,
                        help="more reps for short calls, up to this much timed device time a "
                             "member (0: --reps for every member)")
    parser.add_argument("--peers-timed-us", type=float, default=1000.0,
                        help="--timed-us for the peer shapes (family peers), judged at 0.98x")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary([r for path in args.summary for r in read_jsonl(path)]))
        return 0
    if args.out is None:
        parser.error("--out is required (or --summary FILE.jsonl)")
    if args.replace:
        records = replace_members(*(read_jsonl(p) for p in args.replace))
        write_jsonl(records, args.out)
        print(f"{len(records)} records to {args.out}")
        print(summary(records))
        return 0
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    if not 0 <= args.timed_us <= 1e6:
        parser.error("--timed-us must be in [0, 1e6]")
    if not 0 <= args.peers_timed_us <= 1e6:
        parser.error("--peers-timed-us must be in [0, 1e6]")
    try:
        shard, n_shards = (int(v) for v in args.shard.split("/"))
        cells = set(parse_shapes(args.cells)) if args.cells else None
    except ValueError:
        parser.error("--shard takes i/n and --cells MxN,MxN,... (integers)")
    if not 1 <= shard <= n_shards:
        parser.error("--shard i/n needs 1 <= i <= n")
    known = ("normlab", "torch", "compile", "liger", "compile-static")
    if args.impls and not set(args.impls.split(",")) <= set(known):
        parser.error(f"--impls takes a comma list of {', '.join(known)}")
    ops = args.ops.split(",")
    if bad := [op for op in ops if op not in OPS + ADD_OPS]:
        parser.error(f"--ops: unknown {', '.join(bad)} (expected {', '.join(OPS + ADD_OPS)})")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU (the population's largest members hold 4 GiB tensors)")
    families, dtypes = set(args.families.split(",")), set(args.dtypes.split(","))
    members = shapes.norm_population() + [shapes.Case(m, n, "bf16", "peers") for m, n in PEERS]
    cases = [c for c in members if c.family in families and c.dtype in dtypes
             and (cells is None or (c.M, c.N) in cells)][shard - 1::n_shards]  # fmt: skip
    if args.after is not None:
        done = measured_cases(read_jsonl(args.after), ops)
        cases = [c for c in cases if _case_key(c) not in done]
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_population.py",
                                *(argv if argv is not None else sys.argv[1:])])
    static = not args.impls or "compile-static" in args.impls.split(",")
    impls = {op: _impls(op, static) for op in ops}
    if args.impls:
        keep = args.impls.split(",")
        impls = {op: {k: v for k, v in d.items() if k in keep} for op, d in impls.items()}
    records, t0 = [], time.time()
    for i, case in enumerate(cases):
        for op in ops:
            for direction in DIRECTIONS:
                timed_us = args.peers_timed_us if case.family == "peers" else args.timed_us
                reps = member_reps(args.reps, timed_us, traffic.bytes_moved(
                    op, direction, case.M, case.N, case.dtype), dev.roofline_gbps)
                for name, build in impls[op].items():
                    try:
                        run = build(case.M, case.N, parse_dtype(case.dtype), direction)
                        rec = measure(run, op, name, case.M, case.N, case.dtype, direction,
                                      device=dev, reps=reps, command=command)
                    except Exception as exc:  # a peer that cannot run a shape is a result too
                        print(f"skip {op} {direction} {name} {case}: {exc!r}"[:300], flush=True)
                        continue
                    finally:
                        run = None
                        torch.cuda.empty_cache()
                    records.append(dataclasses.replace(rec, shape_set=_shape_set(case), note=(
                        f"{rec.note}; family {case.family}")))
        if i % 10 == 0:
            print(f"{i + 1}/{len(cases)} cases, {time.time() - t0:.0f} s", flush=True)
            write_jsonl(records, args.out)
    write_jsonl(records, args.out)
    print(summary(records))
    return 0


def replace_members(base, new) -> list:
    """``base``'s records with every member that ``new`` measured (same op, M, N, dtype and
    shape set) taken from ``new`` instead, all its implementations together: a member's peers
    stay from the same run as its normlab, and another op's records of the shape stay."""
    remeasured = {_member(r) for r in new}
    return [r for r in base if _member(r) not in remeasured] + list(new)


def _member(rec) -> tuple:
    return rec.op, rec.M, rec.N, rec.dtype, rec.shape_set


def _shape_set(case) -> str:
    """The records' shape set: the peer shapes apart from the population."""
    return population.PEERS_SET if case.family == "peers" else "population"


def _case_key(case) -> tuple:
    return case.M, case.N, case.dtype, _shape_set(case)


def measured_cases(records, ops) -> set:
    """The cases (M, N, dtype, shape set) whose normlab records cover every op in ``ops`` and
    every direction: a run writes whole cases, so these are the ones a cut-short run finished."""
    seen: dict = {}
    for r in records:
        if r.impl == "normlab" and r.op in ops:
            seen.setdefault((r.M, r.N, r.dtype, r.shape_set), set()).add((r.op, r.direction))
    want = {(op, d) for op in ops for d in DIRECTIONS}
    return {key for key, got in seen.items() if got >= want}


def summary(records) -> str:
    """Per op and direction: geomean of best-peer µs / normlab µs, the members below 0.9x and the
    ten worst, against the targets; then the 11 peer shapes against theirs
    (``normlab.bench.population``)."""
    pop = population.without_peers(records)
    norms = [r for r in pop if r.op not in ADD_OPS]
    # The fused adds' target is the best peer's fused-add norm member by member, no geomean.
    adds = [r for r in pop if r.op in ADD_OPS]
    verdicts = (population.verdicts(norms, worst=10)
                + population.verdicts(adds, worst=10, geomean_target=None))  # fmt: skip
    lines = [population.verdict_line(v) for v in verdicts]
    return "\n".join(lines + population.peer_lines(records))


if __name__ == "__main__":
    raise SystemExit(main())
