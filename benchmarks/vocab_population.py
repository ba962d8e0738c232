"""The losses over the vocabulary population, beside their peers in the same process (GPU).

    python3 benchmarks/vocab_population.py --out out/vocab.jsonl [--reps 10] [--max-seconds 300]
    python3 benchmarks/vocab_population.py --summary out/vocab.jsonl        # the verdicts, no GPU
    python3 benchmarks/vocab_population.py --out out/smoke.jsonl --quick    # CPU: the interpreter

For each member of ``normlab.bench.shapes.vocab_population`` (82: V from 1000 to 262144, odd and
ragged ones among them, M from 1 to 16384): label cross-entropy, reverse KL, soft
cross-entropy, forward KL and JSD, forward and forward+backward (``normlab.bench.registry``'s
loss directions), normlab's default beside torch.compile (default mode) of the torch composite
(``normlab.ref``) and Liger-Kernel where it has the loss (cross-entropy, JSD) and is
importable. Records carry ``shape_set="vocab_population"``. Prints, per op and direction, the
geometric mean of best peer µs / normlab µs, the count below 0.90 and the ten worst members,
against the target (every member >= 0.90x; the geomean has no target here).

Wall time: ``--max-seconds`` / ``--deadline`` (``normlab.bench.budget``) stop starting members;
records are written every 10 members and at the end. Members run in a fixed shuffled order, so
a run cut short still spans the range. Before timing, ``--warm-workers`` processes compile
normlab's and Liger's Triton kernels into Triton's cache (``normlab.bench.prewarm``) while this
one compiles the torch.compile peer's graphs.

torch.compile's default mode compiles the first member's shape as it is, recompiles with dynamic
shapes at the second, and once more for one row (dynamo specializes sizes 0 and 1): the first two
members differ in both M and V, so three graphs per op are expected (more where inductor guards
a size; such a recompile falls in a member's untimed warm-up calls, and the run prints the
count). After the first member the peer is a dynamic-shape graph, as a user who varies shapes
gets it.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import sys
import time
from pathlib import Path

import torch

from normlab import _runtime
from normlab.bench import budget, population, prewarm, registry, shapes
from normlab.bench.device import CPU_LABEL, device_info, git_commit
from normlab.bench.records import parse_dtype, portable_command, read_records, replace_jsonl
from normlab.bench.sweep import measure, parse_shapes
from normlab.bench.traffic import LABEL_LOSS_OPS, SOFT_LOSS_OPS

SHAPE_SET = population.VOCAB_SET
OPS = ("cross_entropy", "reverse_kl", "soft_cross_entropy", "forward_kl", "jsd")
DIRECTIONS = registry.LOSS_DIRECTIONS  # fwd (the training forward), fwd+bwd
IMPLS = ("normlab", "compile", "liger")  # eager and torch on request (--impls)
QUICK_IMPLS = ("normlab", "eager")  # no torch.compile or Liger on a CPU
# CPU smoke shapes: one row, an odd vocabulary, and one past 4096 that takes the chunked form.
QUICK_CASES = (shapes.Case(2, 300, "bf16", "quick"), shapes.Case(1, 131, "bf16", "quick"),
               shapes.Case(1, 4099, "bf16", "quick"))  # fmt: skip
# The first two members: a training batch at Llama 3's vocabulary and one at a smaller one, so
# the compile peer's second graph has both M and V dynamic, with training-size hints.
ANCHORS = ((16384, 131072), (4096, 128256))
ORDER_SEED = 28
WRITE_EVERY = 10
WARM_SECONDS = 100  # the warm-up processes' limit (they take ~30 s); past it they are killed


def ordered(cases) -> list:
    """The anchors first (those present), then the other members in a fixed shuffled order."""
    cases = list(cases)
    first = [c for (m, n) in ANCHORS for c in cases if (c.M, c.N) == (m, n)][:2]
    rest = [c for c in cases if c not in first]
    random.Random(ORDER_SEED).shuffle(rest)
    return first + rest


def _compiled_peer(op: str):
    """torch.compile's default mode of the torch composite (``normlab.ref``): automatic dynamic
    shapes after the first recompile. The recompile limit is raised so that no member silently
    runs eager (the default is 8). Donated buffers stay on: every call runs its own forward."""
    from normlab import ref

    torch._dynamo.config.recompile_limit = 4096
    torch._dynamo.config.accumulated_recompile_limit = 4096
    return torch.compile(getattr(ref, f"{op}_ref"))


def impls_for(op: str, names, device: str, left_out: dict) -> dict:
    """name -> build(M, N, dtype, direction) for ``op``; an impl that cannot run here is left out
    and its reason kept in ``left_out``."""
    out = {}
    for name in names:
        if name == "compile":
            reason = registry.get(op, "compile").unavailable()
            if reason is None:
                out[name] = _compiled_build(op, device)
                continue
        elif name in registry.REGISTRY[op]:
            reason = registry.get(op, name).unavailable()
        else:
            continue  # e.g. "torch" for the label loss only, Liger for label CE and JSD only
        if reason is not None:
            left_out[name] = reason
            continue
        out[name] = _registry_build(registry.get(op, name), device)
    return out


def _compiled_build(op: str, device: str):
    compiled = _compiled_peer(op)
    return lambda M, N, dtype, direction: registry.loss_case(compiled, op, M, N, dtype,
                                                             direction, device)  # fmt: skip


def _registry_build(impl, device: str):
    return lambda M, N, dtype, direction: impl.build(M, N, dtype, direction, device)


def _warm_items(cases, ops, impl_names) -> list[tuple]:
    """(op, impl, rows, V): one call each compiles every Triton specialization the run meets."""
    items = []
    for case in cases:
        for op in ops:
            for name in impl_names:
                if name in ("normlab", "liger") and name in registry.REGISTRY[op]:
                    items.append((op, name, prewarm.warm_rows(case.M), case.N))
    return list(dict.fromkeys(items))


def warm(cases, ops, impl_names, shard: str, device: str) -> int:
    """Run this shard's warm items once each (forward+backward: the forward's kernels and the
    backward's rescale), untimed. Failures are printed; the timed run will meet them again."""
    items = prewarm.take_shard(_warm_items(cases, ops, impl_names), shard)
    left_out: dict = {}
    kept = [n for n in impl_names if n in ("normlab", "liger")]
    builds = {op: impls_for(op, kept, device, left_out) for op in ops}
    done = 0
    for op, name, rows, n_cols in items:
        if name not in builds[op]:
            continue
        try:
            builds[op][name](rows, n_cols, torch.bfloat16, "fwd+bwd")()
            done += 1
        except Exception as exc:
            print(f"warm {op} {name} {rows}x{n_cols}: {exc!r}"[:300], flush=True)
    if device == "cuda":
        torch.cuda.synchronize()
    print(prewarm.shard_line(shard, done, len(items)), flush=True)
    return 0


def warm_compile(cases, impls: dict) -> None:
    """One forward+backward of each compile peer at the first two members and the first
    one-row member: the graphs the timed run will use, compiled before it starts."""
    one_row = [c for c in cases if c.M == 1][:1]
    for case in cases[:2] + one_row:
        for op, by_name in impls.items():
            if "compile" in by_name:
                try:
                    by_name["compile"](case.M, case.N, parse_dtype(case.dtype), "fwd+bwd")()
                except Exception as exc:  # the timed run reports it per member
                    print(f"compile warm-up {op} {case.M}x{case.N}: {exc!r}"[:300], flush=True)
                gc.collect()
                if _runtime.DEVICE == "cuda":
                    torch.cuda.empty_cache()


def _no_triton_kernel(rec) -> bool:
    """A compile record that ran no Triton kernel: dynamo fell back to eager (limit, error)."""
    return rec.mode == "gpu" and bool(rec.kernels) and not any("triton" in k for k in rec.kernels)


def main(argv=None) -> int:
    argv = list(argv) if argv is not None else sys.argv[1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--summary", type=Path, nargs="+", help="recorded runs: print, no GPU")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--directions", default=",".join(DIRECTIONS))
    parser.add_argument("--impls", help=f"a comma list of normlab,compile,liger,eager,torch "
                        f"(default {','.join(IMPLS)}; --quick: {','.join(QUICK_IMPLS)})")
    parser.add_argument("--families", default="tokenizer,random")
    parser.add_argument("--cells", help="MxV[,MxV...]: only these members")
    parser.add_argument("--quick", action="store_true",
                        help="three tiny members, 1 rep, normlab and eager (CPU smoke)")
    prewarm.add_arguments(parser, WARM_SECONDS)
    budget.add_arguments(parser)
    args = parser.parse_args(argv)
    if args.summary:
        print(summary([r for path in args.summary for r in read_records(path)]))
        return 0
    if args.out is None and args.warm_shard is None:
        parser.error("--out is required (or --summary FILE.jsonl)")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    run_budget = budget.from_args(parser, args)
    ops = args.ops.split(",")
    directions = args.directions.split(",")
    names = args.impls.split(",") if args.impls else list(QUICK_IMPLS if args.quick else IMPLS)
    for given, allowed, what in ((ops, SOFT_LOSS_OPS + LABEL_LOSS_OPS, "--ops"),
                                 (directions, DIRECTIONS, "--directions"),
                                 (names, ("normlab", "compile", "liger", "eager", "torch"),
                                  "--impls")):  # fmt: skip
        if bad := [g for g in given if g not in allowed]:
            parser.error(f"{what}: unknown {', '.join(bad)} (expected {', '.join(allowed)})")
    if "normlab" not in names:
        parser.error("--impls must include normlab (the ratios are peer / normlab)")
    try:
        cells = set(parse_shapes(args.cells)) if args.cells else None
    except ValueError:
        parser.error("--cells takes MxV,MxV,... (integers)")
    if args.quick:
        cases = list(QUICK_CASES)
        reps, warmup = 1, 1
    else:
        if not torch.cuda.is_available():
            parser.error("needs a CUDA GPU (or --quick for a CPU smoke run in the interpreter)")
        families = set(args.families.split(","))
        cases = ordered(c for c in shapes.vocab_population() if c.family in families
                        and (cells is None or (c.M, c.N) in cells))  # fmt: skip
        reps, warmup = args.reps, 3
    device = _runtime.DEVICE
    if args.warm_shard is not None:
        return warm(cases, ops, names, args.warm_shard, device)

    workers = prewarm.workers(args, device)
    pool = None
    if workers > 0 and ({"normlab", "liger"} & set(names)):
        pool = prewarm.Pool(prewarm.shard_commands(__file__, argv, workers))
        print(f"{workers} warm-up processes compile normlab's and Liger's kernels", flush=True)
    left_out: dict = {}
    impls = {op: impls_for(op, names, device, left_out) for op in ops}
    for name, reason in left_out.items():
        print(f"left out: {name}: {reason}", flush=True)
    warm_compile(cases, impls)
    if pool is not None:
        prewarm.report(pool, args, run_budget)
    dev = device_info()
    if dev.mode != "gpu":
        print(CPU_LABEL)
    commit = git_commit()
    command = portable_command(["python3", "benchmarks/vocab_population.py", *argv])
    records, skips, last_case_s = [], 0, 0.0
    print(f"{len(cases)} members x {len(ops)} ops x {len(directions)} directions, impls "
          f"{', '.join(sorted({n for d in impls.values() for n in d}))}; {dev.card}", flush=True)
    for i, case in enumerate(cases):
        if not run_budget.allows(last_case_s):
            print(f"stopped at the time limit: {i} of {len(cases)} members measured", flush=True)
            break
        t_case = time.time()
        dtype = parse_dtype(case.dtype)
        for op in ops:
            for direction in directions:
                for name, build in impls[op].items():
                    run, failed = None, False
                    try:
                        run = build(case.M, case.N, dtype, direction)
                        rec = measure(run, op, name, case.M, case.N, dtype, direction,
                                      device=dev, reps=reps, warmup=warmup, command=command,
                                      commit=commit, shape_set=SHAPE_SET)  # fmt: skip
                    except Exception as exc:  # a peer that cannot run a member is a result too
                        failed = True
                        skips += 1
                        if skips <= 30:
                            print(f"skip {op} {direction} {name} {case.M}x{case.N}: {exc!r}"[:300],
                                  flush=True)  # fmt: skip
                    finally:
                        run = None
                        if device == "cuda":
                            torch.cuda.empty_cache()
                    if failed:
                        gc.collect()
                        continue
                    note = f"{rec.note}; family {case.family}"
                    if name == "compile" and i == 0:
                        note += "; the first member: a graph compiled for its shape alone"
                    rec = dataclasses.replace(rec, note=note)
                    if name == "compile" and _no_triton_kernel(rec):
                        rec.valid = False
                        rec.note += "; ran no Triton kernel (dynamo fell back to eager)"
                    records.append(rec)
        last_case_s = time.time() - t_case
        if (i + 1) % WRITE_EVERY == 0:
            replace_jsonl(records, args.out)
            print(f"{i + 1}/{len(cases)} members, {run_budget.elapsed():.0f} s", flush=True)
    if skips > 30:
        print(f"... {skips} skipped measurements in all", flush=True)
    replace_jsonl(records, args.out)
    print(f"wrote {len(records)} records to {args.out} at {run_budget.elapsed():.0f} s")
    if "compile" in {n for d in impls.values() for n in d}:
        from torch._dynamo.utils import counters

        print(f"torch.compile: {counters['stats']['unique_graphs']} graphs for {len(impls)} ops "
              "(3 each expected: the first member, dynamic shapes, one row)")
    print(summary(records))
    return 0


def summary(records) -> str:
    """Per op and direction: geomean of best-peer µs / normlab µs, the members below 0.90x and
    the ten worst (with their best peer), against the every-member target; the peers seen."""
    verdicts = population.vocab_verdicts(records, worst=10)
    if not verdicts:
        return f"no {SHAPE_SET} member has normlab and a peer measured"
    measured = [r for r in records if r.shape_set == SHAPE_SET and r.valid]
    peers = sorted({r.impl for r in measured if r.impl != "normlab"})
    members = len({(r.M, r.N) for r in measured})
    lines = [f"{SHAPE_SET}: {members} members measured, peers {', '.join(peers)}; ratio = best "
             f"peer µs / normlab µs (above 1: normlab faster)"]
    lines += [population.verdict_line(v, peers=True) for v in verdicts]
    met = all(v.met for v in verdicts)
    lines.append(f"target: every member >= {population.TARGET_EVERY_SHAPE}x the best peer, each "
                 f"op and direction: {'met' if met else 'missed'}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
