#!/usr/bin/env python3
"""GPU check of the norm kernels (H200): correctness at real sizes, then device-time tables.

    python3 scripts/gpu_check_norm.py --out DIR [--mode final|tune] [--budget SECONDS]

(a) Correctness, bf16 at real sizes: every strategy's dx/dweight/dbias against an fp32
    reference (normlab.ref on fp32 copies of the inputs); ``two_stage`` and ``persistent``
    bitwise identical over 20 repeated backwards; the parameter-gradient error no worse than
    torch's own F.rms_norm / F.layer_norm on the same bf16 inputs; both functions inside
    torch.compile(fullgraph=True) with the default inductor backend equal the eager path.
(b) Timing of the 11 peer shapes of ``shared/notes/h200_peers.md`` (bf16, RMSNorm and
    LayerNorm): forward, and backward alone after a forward, timed by the package harness
    (``normlab.bench.time_call``: L2 flushed before each call, device time = the call's kernel
    sum from torch.profiler, wall time = CUDA events); GB/s on ``normlab.bench.traffic``'s
    minimal model. Same run: F.rms_norm / F.layer_norm, torch.compile(dynamic=False) and the
    copy bandwidth (``normlab.bench.measure_copy_bandwidth``). The dev/ JSON files it wrote
    before commit 3727dd5 used a script-local copy of the same method.
    ``--mode tune`` also sweeps launch configs (warps, rows per tile, programs per SM, reduce
    tile) to pick the values recorded in normlab/configs.py.

Prints compact tables and writes ``norm_gpu.json`` under --out. A time budget skips what is
left (and says so in the JSON) rather than overrunning.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from functools import partial

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# isort: off
import normlab  # selects the runtime (TRITON_INTERPRET) before triton is imported
import torch
import torch.nn.functional as F
import triton
from normlab import _runtime, configs, ref
from normlab.bench import measure_copy_bandwidth, time_call, traffic
from normlab.bench.sweep import PEERS
from normlab.kernels import norm as K

# isort: on

SHAPES = PEERS  # the 11 norm shapes of h200_peers.md
EPS = {"rms": 1e-6, "ln": 1e-5}
DEV = _runtime.DEVICE  # "cuda"; "cpu" only for --dry (interpreter, tiny shapes, fake timer)

# Fastest peer per (op, dir, shape), µs device time, from shared/notes/h200_peers.md
# (H200, 2026-11-29, torch 2.11.0+cu130, triton 3.6.0, liger 0.8.5, quack 0.6.5; same method).
# Correctness shapes: single-pass widths, the widest single-pass row, two-pass, ragged (for
# LayerNorm the ragged ones, 32768x1024, 4096x8192 and 2048x16384 take the block-row forward:
# configs.NORM_FWD_BLOCK_ROW; for RMSNorm every one runs the looped row: NORM_FWD_RMS_LOOPED).
CHECK_SHAPES = [(32768, 1024), (4096, 4096), (4096, 8192), (2048, 16384), (1000, 5000),
                (3000, 1000), (1500, 3000)]
REDUCE_SWEEP = {"n": (1024, 2048, 4096, 8192, 16384), "n_partials": (132, 264, 528, 1056)}

args_extra = False

PEER_BEST = {
    ("rms", "fwd"): [10.7, 10.5, 11.8, 19.1, 19.3, 35.3, 35.5, 10.4, 36.3, 36.0, 251.4],
    ("rms", "bwd"): [24.2, 27.2, 27.1, 36.5, 41.3, 60.3, 68.2, 30.0, 68.4, 89.8, 478.7],
    ("ln", "fwd"): [11.4, 15.2, 12.8, 20.1, 21.9, 35.8, 39.4, 13.3, 42.3, 44.6, 302.8],
    ("ln", "bwd"): [46.7, 36.3, 36.5, 48.2, 66.3, 83.0, 104.9, 34.6, 85.3, 128.5, 536.5],
}


# ---- cold-L2 device timing (normlab.bench.time_call) ------------------------------------------


class Timer:
    """``normlab.bench.time_call`` per call: device time = the call's kernel sum under
    torch.profiler with the L2 flushed before each call; wall time = CUDA events."""

    def run(self, calls, reps, wall=True):
        """calls: [(key, fn)] -> {key: {"us", "wall_us", "kernels": {name: us}}}."""
        out = {}
        for key, fn in calls:
            t = time_call(fn, reps=reps, warmup=1)
            out[key] = {
                "us": t.device_us,
                "kernels": {_short(k): v for k, v in t.kernels.items()},
                "wall_us": t.wall_us if wall else None,
            }
        return out


class _DryTimer(Timer):
    """--dry: runs every call once on CPU and reports a fake 1 µs."""

    def __init__(self):
        pass

    def run(self, calls, reps, wall=True):
        for _, fn in calls:
            fn()
        return {key: {"us": 1.0, "wall_us": 1.0, "kernels": {"fake": 1.0}} for key, _ in calls}


def _short(name: str) -> str:
    return name if len(name) <= 60 else name[:57] + "..."


# ---- problem setup ---------------------------------------------------------------------------


def make_inputs(m, n, op, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, n, device=DEV, dtype=dtype, generator=g)
    w = (1 + 0.1 * torch.randn(n, device=DEV, generator=g)).to(dtype)
    b = (0.1 * torch.randn(n, device=DEV, generator=g)).to(dtype) if op == "ln" else None
    dy = torch.randn(m, n, device=DEV, dtype=dtype, generator=g)
    return x, w, b, dy


def normlab_fn(op, strategy="auto"):
    if op == "rms":
        return lambda x, w, b: normlab.rms_norm(x, w, EPS[op], strategy=strategy)
    return lambda x, w, b: normlab.layer_norm(x, w, b, EPS[op], strategy=strategy)


def torch_fn(op, n):
    if op == "rms":
        return lambda x, w, b: F.rms_norm(x, (n,), w, EPS[op])
    return lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS[op])


def fwd_bwd_calls(fn, x, w, b, dy):
    """(forward call, backward call): backward = autograd.grad after one untimed forward."""
    params = [t.requires_grad_(True) for t in (x, w, b) if t is not None]
    y = fn(x, w, b)

    def fwd():
        with torch.no_grad():
            fn(x, w, b)

    def bwd():
        torch.autograd.grad(y, params, dy, retain_graph=True)

    return fwd, bwd


def gbps(direction, m, n, us):
    """GB/s on normlab.bench.traffic's minimal model (bf16; the same for RMSNorm and LayerNorm)."""
    if not us or us <= 0:
        return float("nan")
    return traffic.gbps(traffic.bytes_moved("rms_norm", direction, m, n, torch.bfloat16), us)


# ---- (a) correctness ---------------------------------------------------------------------------


def rel_rms(a, b):
    a, b = a.double(), b.double()
    return ((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def check_compile(results, backend="inductor"):
    """normlab.rms_norm / layer_norm inside torch.compile(fullgraph=True) with the default
    (inductor) backend: forward and gradients equal to the eager custom-op path."""
    ok = True
    for op in ("rms", "ln"):
        m, n = (8, 64) if DEV == "cpu" else (4096, 4096)
        x, w, b, dy = make_inputs(m, n, op, seed=2)
        fn = normlab_fn(op)
        compiled = torch.compile(fn, fullgraph=True, backend=backend)
        grads = []
        for f in (fn, compiled):
            xs, ws = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            y = f(xs, ws, b)
            grads.append((y, *torch.autograd.grad(y, (xs, ws), dy)))
        same = all(torch.equal(a, c) for a, c in zip(*grads))
        ok &= same
        results.append(
            {"op": op, "M": m, "N": n, "compile_backend": backend, "bitwise_equal": same}
        )
        print(f"  compile({backend}, fullgraph) {op} {m}x{n}: equal to eager {same}")
    return ok


def check_correctness(results):
    ok = True
    for op in ("rms", "ln"):
        for m, n in CHECK_SHAPES:
            x, w, b, dy = make_inputs(m, n, op, seed=1)
            is_rms = op == "rms"
            rdx, rdw, rdb = ref.norm_backward(
                dy.float(), x.float(), w.float(), None if b is None else b.float(), EPS[op], is_rms
            )
            ry = (
                ref.rms_norm(x.float(), w.float(), EPS[op])
                if is_rms
                else ref.layer_norm(x.float(), w.float(), b.float(), EPS[op])
            )
            # torch's own bf16 gradients, for the parameter-gradient bar
            tx, tw = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
            tb = b.clone().requires_grad_(True) if b is not None else None
            ty = torch_fn(op, n)(tx, tw, tb)
            tgrads = torch.autograd.grad(ty, [t for t in (tx, tw, tb) if t is not None], dy)
            torch_dw_err = rel_rms(tgrads[1], rdw)
            # the public default: the block-row forward or the looped row where configs say
            y, mean, rstd = K.norm_forward(x, w, b, EPS[op], is_rms, block_row=True)
            atol, rtol = ref.tolerance(torch.bfloat16)
            fwd_ok = bool(
                ((y.double() - ry.double()).abs() <= atol + rtol * ry.double().abs()).all()
            )
            for strategy in configs.NORM_BWD_STRATEGIES:
                dx, dw, db = K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy=strategy)
                dx_ok = bool(
                    ((dx.double() - rdx.double()).abs() <= atol + rtol * rdx.double().abs()).all()
                )
                dw_err = rel_rms(dw, rdw)
                rec = {
                    "op": op,
                    "M": m,
                    "N": n,
                    "strategy": strategy,
                    "fwd_ok": fwd_ok,
                    "fwd_block_row": configs.norm_fwd_block_row_config(m, n, is_rms),
                    "dx_ok": dx_ok,
                    "dx_rel_rms": rel_rms(dx, rdx),
                    "dw_rel_rms": dw_err,
                    "torch_dw_rel_rms": torch_dw_err,
                    "dw_no_worse_than_torch": dw_err <= torch_dw_err * 1.10,
                }
                if db is not None:
                    rec["db_rel_rms"] = rel_rms(db, rdb)
                    rec["torch_db_rel_rms"] = rel_rms(tgrads[2], rdb)
                if strategy != "atomic":
                    same = all(
                        all(
                            torch.equal(a, c)
                            for a, c in zip(
                                (dx, dw, db),
                                K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy=strategy),
                            )
                            if a is not None
                        )
                        for _ in range(20)
                    )
                    rec["bitwise_20x"] = same
                good = (
                    fwd_ok
                    and dx_ok
                    and rec["dw_no_worse_than_torch"]
                    and rec.get("bitwise_20x", True)
                )
                ok &= good
                results.append(rec)
                print(
                    f"  {op:3} {m:6}x{n:<6} {strategy:10} fwd {fwd_ok!s:5} dx {dx_ok!s:5} "
                    f"dw rel-rms {dw_err:.2e} (torch {torch_dw_err:.2e}) "
                    f"bitwise {rec.get('bitwise_20x', '-')!s:5} {'OK' if good else 'FAIL'}"
                )
            del x, dy, rdx, tgrads
    return ok


# ---- (b) timing ---------------------------------------------------------------------------------


def time_impls(timer, impls, reps, records, deadline, compile_=False):
    """impls: [(name, fn_factory(op, n))] -> one record per (impl, op, shape, dir)."""
    for op in ("rms", "ln"):
        for si, (m, n) in enumerate(SHAPES):
            if time.time() > deadline:
                records.append({"skipped": f"{op} {m}x{n} and later: time budget"})
                print(f"  ! time budget: skipping {op} {m}x{n} onward")
                return
            x, w, b, dy = make_inputs(m, n, op)
            calls = []
            for name, factory in impls:
                fwd, bwd = fwd_bwd_calls(factory(op, n), x, w, b, dy)
                calls += [((name, "fwd"), fwd), ((name, "bwd"), bwd)]
            res = timer.run(calls, reps)
            del calls
            for (name, direction), r in res.items():
                best = PEER_BEST[(op, direction)][si]
                records.append(
                    {
                        "op": op,
                        "impl": name,
                        "M": m,
                        "N": n,
                        "dir": direction,
                        "us": r["us"],
                        "wall_us": r["wall_us"],
                        "gbps": gbps(direction, m, n, r["us"]),
                        "peer_best_us": best,
                        "ratio_vs_peer": best / r["us"],
                        "kernels": r["kernels"],
                    }
                )


def print_table(records, copy_gbps):
    rows = [r for r in records if "impl" in r]
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    for op in ("rms", "ln"):
        for direction in ("fwd", "bwd"):
            print(f"\n{op} {direction} (µs device time; GB/s; x = peer_best/ours, >1 is faster)")
            print(f"{'M x N':>12} " + " ".join(f"{i[:16]:>24}" for i in impls) + f" {'peer':>7}")
            for si, (m, n) in enumerate(SHAPES):
                cells = []
                for impl in impls:
                    r = next(
                        (
                            r
                            for r in rows
                            if (r["op"], r["impl"], r["M"], r["N"], r["dir"])
                            == (op, impl, m, n, direction)
                        ),
                        None,
                    )
                    cells.append(
                        f"{r['us']:7.1f} {r['gbps']:5.0f} {r['ratio_vs_peer']:5.2f}x"
                        if r
                        else " " * 24
                    )
                print(
                    f"{m:>6}x{n:<5} "
                    + " ".join(f"{c:>24}" for c in cells)
                    + f" {PEER_BEST[(op, direction)][si]:7.1f}"
                )
    print(f"\ncopy bandwidth {copy_gbps:.0f} GB/s")


# ---- tuning sweep (--mode tune) -----------------------------------------------------------------

FWD_WARPS = {1024: (4, 8), 2048: (4, 8), 4096: (8, 16), 8192: (8, 16), 16384: (16, 32)}
# (block_rows, num_warps, loop_stages) per single-pass width
BWD_TILES = {
    1024: [(2, 4, 1), (4, 8, 1), (8, 8, 1), (4, 8, 2)],
    2048: [(1, 4, 1), (2, 8, 1), (4, 8, 1), (2, 8, 2)],
    4096: [(1, 8, 1), (1, 16, 1), (2, 16, 1), (1, 8, 2)],
    8192: [(1, 16, 1), (1, 32, 1), (1, 16, 2)],
}
TWO_PASS_TILES = [(1, 4096, 8), (2, 4096, 16), (4, 2048, 16), (1, 8192, 16)]  # rows, cols, warps
PPSM = (1, 2, 4, 8)
REDUCE_TILES = ((64, 8, 4), (64, 16, 4), (32, 32, 4), (64, 32, 4), (16, 64, 4), (128, 16, 8))

# --extra (with --mode final): a second, smaller sweep around the configs chosen from the first.
EXTRA = {
    "FWD_WARPS": {1024: (1, 2), 2048: (2,), 8192: (16,)},
    "BWD_TILES": {1024: [(1, 4, 1), (1, 2, 1), (2, 4, 1)], 8192: [(1, 8, 1)]},
    "TWO_PASS_TILES": [(1, 4096, 16), (4, 4096, 16)],
    "PPSM": (2, 4, 8),
    "REDUCE_TILES": ((128, 16, 8), (128, 8, 8), (256, 8, 8), (256, 16, 8)),
    "REDUCE_SWEEP": {"n": (1024, 8192), "n_partials": (264, 528)},
    "SHAPES": [
        (8192, 1024),
        (1024, 8192),
        (16384, 1024),
        (32768, 1024),
        (512, 16384),
        (16384, 2048),
        (2048, 16384),
        (32768, 8192),
    ],
}


def tune(timer, reps, records, deadline, shapes=None):
    shapes = shapes or SHAPES
    # forward: warps per width
    for op in ("rms", "ln"):
        for m, n in shapes:
            if n not in FWD_WARPS:
                continue
            if time.time() > deadline:
                records.append({"skipped": f"tune fwd {op} {m}x{n}+"})
                return
            x, w, b, _ = make_inputs(m, n, op)
            calls = [
                (
                    (op, "fwd", m, n, wp),
                    partial(K.norm_forward, x, w, b, EPS[op], op == "rms", num_warps=wp),
                )
                for wp in FWD_WARPS.get(n, (4,))
            ]
            for key, r in timer.run(calls, reps, wall=False).items():
                records.append(
                    {
                        "kind": "fwd",
                        "op": op,
                        "M": m,
                        "N": n,
                        "num_warps": key[4],
                        "us": r["us"],
                        "gbps": gbps("fwd", m, n, r["us"]),
                    }
                )
                print(f"  fwd {op} {m}x{n} warps={key[4]:2} {r['us']:7.1f} µs")
    # backward persistent: tile x programs per SM
    for op in ("rms", "ln"):
        for m, n in shapes:
            si = SHAPES.index((m, n))
            if time.time() > deadline:
                records.append({"skipped": f"tune bwd {op} {m}x{n}+"})
                return
            x, w, b, dy = make_inputs(m, n, op)
            _, mean, rstd = K.norm_forward(x, w, b, EPS[op], op == "rms")
            calls = []
            if n in BWD_TILES:
                for rows, warps, stages in BWD_TILES[n]:
                    for ppsm in PPSM:
                        kw = {
                            "block_rows": rows,
                            "num_warps": warps,
                            "loop_stages": stages,
                            "programs_per_sm": ppsm,
                            "two_pass": False,
                        }
                        calls.append(((rows, n, warps, stages, ppsm, False), kw))
            for rows, cols, warps in TWO_PASS_TILES:
                if cols < n or n >= 8192:
                    for ppsm in PPSM[:3]:
                        kw = {
                            "block_rows": rows,
                            "block_cols": min(cols, n),
                            "num_warps": warps,
                            "programs_per_sm": ppsm,
                            "two_pass": True,
                        }
                        calls.append(((rows, min(cols, n), warps, 1, ppsm, True), kw))
            if n == 16384 and not args_extra:  # single pass over the whole row, 32 warps
                for ppsm in (1, 2):
                    calls.append(
                        (
                            (1, n, 32, 1, ppsm, False),
                            {
                                "block_rows": 1,
                                "num_warps": 32,
                                "programs_per_sm": ppsm,
                                "two_pass": False,
                            },
                        )
                    )
            if not calls:
                continue
            run_calls = [
                (
                    key,
                    partial(
                        K.norm_backward,
                        dy,
                        x,
                        w,
                        b,
                        mean,
                        rstd,
                        op == "rms",
                        strategy="persistent",
                        **kw,
                    ),
                )
                for key, kw in calls
            ]
            res = timer.run(run_calls, reps, wall=False)
            best = min(res.items(), key=lambda kv: kv[1]["us"])
            for key, r in res.items():
                rows, cols, warps, stages, ppsm, two_pass = key
                records.append(
                    {
                        "kind": "bwd_persistent",
                        "op": op,
                        "M": m,
                        "N": n,
                        "block_rows": rows,
                        "block_cols": cols,
                        "num_warps": warps,
                        "loop_stages": stages,
                        "programs_per_sm": ppsm,
                        "two_pass": two_pass,
                        "us": r["us"],
                        "kernels": r["kernels"],
                    }
                )
            print(
                f"  bwd {op} {m}x{n}: best {best[0]} {best[1]['us']:.1f} µs "
                f"(peer {PEER_BEST[(op, 'bwd')][si]}) {best[1]['kernels']}"
            )
    # reduce kernel tile on (programs x N) fp32 partials
    for n in REDUCE_SWEEP["n"]:
        for n_partials in REDUCE_SWEEP["n_partials"]:
            part = torch.randn(n_partials, n, device=DEV)
            out = torch.empty(n, device=DEV, dtype=torch.bfloat16)
            calls = [
                (
                    (bm, bn, nw),
                    partial(
                        K.reduce_partials,
                        part,
                        None,
                        out,
                        None,
                        block_m=bm,
                        block_n=bn,
                        num_warps=nw,
                    ),
                )
                for bm, bn, nw in REDUCE_TILES
            ]
            res = timer.run(calls, reps, wall=False)
            for key, r in res.items():
                records.append(
                    {
                        "kind": "reduce",
                        "N": n,
                        "n_partials": n_partials,
                        "block_m": key[0],
                        "block_n": key[1],
                        "num_warps": key[2],
                        "us": r["us"],
                    }
                )
            best = min(res.items(), key=lambda kv: kv[1]["us"])
            print(f"  reduce {n_partials}x{n}: best {best[0]} {best[1]['us']:.2f} µs")


# ---- main ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--mode", choices=("final", "tune"), default="final")
    ap.add_argument("--budget", type=float, default=200.0, help="seconds before skipping the rest")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--extra", action="store_true", help="with --mode final: the small EXTRA sweep")
    ap.add_argument(
        "--dry", action="store_true", help="CPU smoke test of this script: tiny shapes, fake timer"
    )
    args = ap.parse_args()
    global SHAPES, Timer, CHECK_SHAPES, REDUCE_SWEEP
    global FWD_WARPS, BWD_TILES, TWO_PASS_TILES, PPSM, REDUCE_TILES, args_extra
    if args.dry:
        SHAPES = [(3, 16), (5, 32)] * 5 + [(2, 8)]
        CHECK_SHAPES, REDUCE_SWEEP = [(9, 40)], {"n": (64,), "n_partials": (5,)}
        BWD_TILES[32] = [(2, 4, 1)]
        Timer, args.no_compile = _DryTimer, True
        for k in PEER_BEST:
            PEER_BEST[k] = [1.0] * len(SHAPES)
    t0 = time.time()
    deadline = t0 + args.budget
    assert args.dry or not _runtime.INTERPRET, "needs a CUDA GPU (or --dry)"
    for knob in ("cache_size_limit", "recompile_limit"):  # one compiled graph per shape
        try:
            setattr(torch._dynamo.config, knob, 256)
        except (AttributeError, KeyError):
            pass
    props = torch.cuda.get_device_properties(0) if not args.dry else None
    meta = {
        "device": getattr(props, "name", "dry"),
        "sms": _runtime.sm_count(),
        "l2_bytes": _runtime.l2_bytes(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "mode": args.mode,
        "date": datetime.date.today().isoformat(),
        "autotune": K.AUTOTUNE,
    }
    print(meta)
    out = {"meta": meta, "correctness": [], "timings": [], "tune": []}
    path = os.path.join(args.out, "norm_gpu.json")

    def save():
        out["elapsed_s"] = time.time() - t0
        with open(path, "w") as f:
            json.dump(out, f, indent=1, default=float)

    timer = Timer()
    out["copy_gbps"] = copy_gbps = measure_copy_bandwidth().gbps if not args.dry else 1.0
    print(f"copy bandwidth {copy_gbps:.0f} GB/s")
    print("\n(a) correctness (bf16 vs fp32 reference)")
    out["correct"] = check_correctness(out["correctness"])
    out["compile_ok"] = check_compile(out["correctness"], "aot_eager" if args.dry else "inductor")
    save()
    print(f"  [{time.time() - t0:.0f}s]")
    reps = args.reps
    if args.mode == "tune":
        print("\ntuning sweep")
        tune(timer, max(reps // 2, 5), out["tune"], t0 + args.budget * 0.6)
        save()
        print(f"  [{time.time() - t0:.0f}s]")
    elif args.extra:
        FWD_WARPS, BWD_TILES, TWO_PASS_TILES = (
            EXTRA["FWD_WARPS"],
            EXTRA["BWD_TILES"],
            EXTRA["TWO_PASS_TILES"],
        )
        PPSM, REDUCE_TILES, REDUCE_SWEEP, args_extra = (
            EXTRA["PPSM"],
            EXTRA["REDUCE_TILES"],
            EXTRA["REDUCE_SWEEP"],
            True,
        )
        print("\nextra sweep")
        shapes = EXTRA["SHAPES"] if not args.dry else SHAPES[:2]
        tune(timer, max(reps // 2, 5), out["tune"], t0 + args.budget * 0.45, shapes=shapes)
        save()
        print(f"  [{time.time() - t0:.0f}s]")
    print("\n(b) timing")
    impls = [("normlab", lambda op, n: normlab_fn(op))]
    impls += [
        (f"normlab-{s}", lambda op, n, s=s: normlab_fn(op, s)) for s in ("atomic", "two_stage")
    ]
    impls += [("torch", torch_fn)]
    time_impls(timer, impls, reps, out["timings"], deadline)
    save()
    if not args.no_compile:
        print(f"  [{time.time() - t0:.0f}s] torch.compile(dynamic=False) pass")
        compiled = [("compile", lambda op, n: torch.compile(torch_fn(op, n), dynamic=False))]
        time_impls(timer, compiled, reps, out["timings"], deadline)
        save()
    print_table(out["timings"], copy_gbps)
    print(f"\ndone in {time.time() - t0:.0f}s; correct={out['correct']}; wrote {path}")


if __name__ == "__main__":
    main()
