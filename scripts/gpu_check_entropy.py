"""Entropy losses on a CUDA GPU: correctness at real sizes, then device time of forward+backward.

Run from the repo root on the GPU machine: ``python3 scripts/gpu_check_entropy.py``. Writes
``$OUT/entropy_tuning_h200.json`` (every measurement, with per-kernel breakdowns) and prints a
compact table. Sections run in priority order under a wall-clock budget
(``ENTROPY_CHECK_BUDGET_S``, default 180 s); the JSON is rewritten after every section, so a
timeout still returns what was measured.

Method (as ``../shared/notes/h200_peers.md``): ``normlab.bench.time_call``, the package
harness: device time = sum of the call's kernel durations from ``torch.profiler``, averaged over
``REPS`` calls, each preceded by an L2 flush; wall time from CUDA events; Δpeak = peak memory
during a call minus the memory before it (the gradient included). A call is
``loss = f(x, target); torch.autograd.grad(loss, x)``. GB/s uses ``normlab.bench.traffic``'s
minimal model: 3·M·V·2 for reverse KL / soft CE, 2·M·V·2 for label CE. (The dev/ JSON files
written before commit 3727dd5 came from a script-local copy of the same method.)
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import sys
import time
import traceback

T0 = time.time()
BUDGET_S = float(os.environ.get("ENTROPY_CHECK_BUDGET_S", "180"))
sys.path.insert(0, os.getcwd())

import torch
import torch.nn.functional as F
import triton

import normlab
from normlab import configs, ref
from normlab.bench import time_call, traffic

OUT = os.environ.get("OUT", "/tmp/entropy_check")
os.makedirs(OUT, exist_ok=True)
M = 4096
VOCABS = (32768, 65536, 131072, 50257, 151936)
CAPS = configs.ENTROPY_BLOCK_CAPS
REPS = 10
DTYPE = torch.bfloat16
RESULTS: dict = {
    "meta": {},
    "correctness": [],
    "timing": [],
    "sweep": [],
    "errors": [],
    "skipped": [],
}


def left() -> float:
    return BUDGET_S - (time.time() - T0)


def dump() -> None:
    RESULTS["meta"]["elapsed_s"] = round(time.time() - T0, 1)
    with open(os.path.join(OUT, "entropy_tuning_h200.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)


def fwd_bwd(loss_fn, x):
    def call():
        (g,) = torch.autograd.grad(loss_fn(), x)
        return g

    return call


# ---- variants ----------------------------------------------------------------------------------
_COMPILED: dict = {}


def variants(loss: str, x, other, with_compile=False, caps=CAPS):
    """name -> zero-arg loss callable."""
    fn = {"reverse_kl": normlab.reverse_kl, "soft_cross_entropy": normlab.soft_cross_entropy,
          "cross_entropy": normlab.cross_entropy}[loss]  # fmt: skip
    out = {"auto": lambda: fn(x, other)}
    for cap in (1024, 2048, *caps):
        out[f"fused_c{cap}"] = lambda cap=cap: fn(x, other, form="fused", block_cap=cap)
    out["chunked"] = lambda: fn(x, other, form="chunked")
    for cap in (1024, 2048, 4096):
        out[f"chunked_c{cap}"] = lambda cap=cap: fn(x, other, form="chunked", block_cap=cap)
    out["split"] = lambda: fn(x, other, form="split")
    if loss == "cross_entropy":
        eager = lambda: F.cross_entropy(x.float(), other)
    else:
        eager = {"reverse_kl": lambda: ref.reverse_kl_ref(x, other),
                 "soft_cross_entropy": lambda: ref.soft_cross_entropy_ref(x, other)}[loss]  # fmt: skip
    out["eager"] = eager
    if with_compile:
        if loss not in _COMPILED:
            base = {"reverse_kl": ref.reverse_kl_ref, "soft_cross_entropy": ref.soft_cross_entropy_ref,
                    "cross_entropy": lambda a, b: F.cross_entropy(a.float(), b)}[loss]  # fmt: skip
            _COMPILED[loss] = torch.compile(base, dynamic=False)
        out["compile"] = lambda: _COMPILED[loss](x, other)
    return out


def inputs(loss, n_rows, n_cols, dtype=DTYPE):
    x = (torch.randn(n_rows, n_cols, device="cuda") * 2).to(dtype).requires_grad_()
    if loss == "cross_entropy":
        other = torch.randint(0, n_cols, (n_rows,), device="cuda")
        other[::17] = -100
    else:
        other = (torch.randn(n_rows, n_cols, device="cuda") * 2).to(dtype)
    return x, other


# ---- sections ----------------------------------------------------------------------------------
def check_correctness():
    for n_cols in (32768, 50257, 151936):
        for loss in ("reverse_kl", "soft_cross_entropy", "cross_entropy"):
            x, other = inputs(loss, 64, n_cols)
            xr = x.detach().float().requires_grad_()
            rfn = {"reverse_kl": ref.reverse_kl_ref, "soft_cross_entropy": ref.soft_cross_entropy_ref,
                   "cross_entropy": ref.cross_entropy_ref}[loss]  # fmt: skip
            r = rfn(xr, other)
            (r * 3).backward()
            for name, call in variants(loss, x, other).items():
                if name == "eager":
                    continue
                try:
                    x.grad = None
                    val = call()
                    (val * 3).backward()
                    loss_err = abs(val.item() - r.item()) / max(abs(r.item()), 1e-6)
                    gmax = xr.grad.abs().max().item()
                    grad_err = (x.grad.float() - xr.grad).abs().max().item() / gmax
                    ok = loss_err < 1e-4 and grad_err < 1e-2
                    RESULTS["correctness"].append({"loss": loss, "V": n_cols, "variant": name, "loss_rel_err": loss_err,
                                                       "grad_err_rel_max": grad_err, "ok": ok})  # fmt: skip
                    print(f"check {loss:18s} V={n_cols:6d} {name:12s} loss_rel {loss_err:.2e} grad {grad_err:.2e} "
                          f"{'ok' if ok else 'FAIL'}", flush=True)  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    RESULTS["errors"].append(
                        {"where": f"check {loss} {n_cols} {name}", "error": repr(e)[:400]}
                    )
                    print("ERROR", loss, n_cols, name, repr(e)[:400], flush=True)
            x.grad = None
    dump()


def check_reduction():
    """Reductions at the benchmark's size (4096 rows): "mean" / "sum" against the fp64 sum of the
    per-row losses of the same form, and the same bits over 10 calls, fused and chunked (at the
    auto tile: 2048 or 4096 at V = 32768, 1024 or 2048 at 50257)."""
    for loss, n_cols in itertools.product(("reverse_kl", "soft_cross_entropy", "cross_entropy"),
                                          (32768, 50257)):
        fn = getattr(normlab, loss)
        x, other = inputs(loss, M, n_cols)
        x = x.detach()
        for form in ("fused", "chunked"):
            try:
                rows = fn(x, other, form=form, reduction="none").double()
                n = (other != -100).sum().item() if loss == "cross_entropy" else M
                for reduction, divisor in (("mean", n), ("sum", 1)):
                    outs = [fn(x, other, form=form, reduction=reduction) for _ in range(10)]
                    expect = rows.sum().item() / divisor
                    rel = abs(outs[0].item() - expect) / max(abs(expect), 1e-30)
                    same = all(torch.equal(o, outs[0]) for o in outs)
                    ok = rel < 1e-5 and same
                    RESULTS["correctness"].append({"loss": loss, "V": n_cols, "M": M, "variant": form,
                                                   "reduction": reduction,
                                                   "loss_rel_err": rel, "same_bits_10_calls": same,
                                                   "ok": ok})  # fmt: skip
                    print(f"reduce {loss:18s} V={n_cols:6d} {form:8s} {reduction:4s} rel {rel:.2e} "
                          f"same bits {same} {'ok' if ok else 'FAIL'}", flush=True)  # fmt: skip
            except Exception as e:  # noqa: BLE001
                RESULTS["errors"].append({"where": f"reduce {loss} {form}", "error": repr(e)[:400]})
                print("ERROR", loss, form, repr(e)[:400], flush=True)
        del x, other
    dump()


def measure(loss, n_cols, name, call, x, table="timing", extra=None):
    try:
        t = time_call(fwd_bwd(call, x), reps=REPS, warmup=2)
        us = t.device_us
        n_bytes = traffic.bytes_moved(loss, "fwd+bwd", M, n_cols, DTYPE)
        kernels = {k[:80]: round(v, 2) for k, v in sorted(t.kernels.items(), key=lambda kv: -kv[1])}
        rec = {"loss": loss, "M": M, "V": n_cols, "variant": name, "device_us": round(us, 1),
               "gbps": round(traffic.gbps(n_bytes, us), 1), "wall_us": round(t.wall_us, 1),
               "dpeak_mib": round((t.peak_extra_bytes or 0) / 2**20, 1), "kernels": kernels}
        rec.update(extra or {})
        RESULTS[table].append(rec)
        print(f"{table} {loss:18s} V={n_cols:6d} {name:16s} {us:8.1f} us {rec['gbps']:7.1f} GB/s "
              f"dpeak {rec['dpeak_mib']:8.1f} MiB  wall {rec['wall_us']:8.1f} us", flush=True)  # fmt: skip
    except Exception as e:  # noqa: BLE001
        RESULTS["errors"].append(
            {"where": f"{table} {loss} {n_cols} {name}", "error": repr(e)[:400]}
        )
        print("ERROR", loss, n_cols, name, repr(e)[:400], flush=True)
        traceback.print_exc()


def time_loss(loss, min_left=20.0):
    for n_cols in VOCABS:
        if left() < min_left:
            RESULTS["skipped"].append(f"timing {loss} V={n_cols}")
            continue
        x, other = inputs(loss, M, n_cols)
        for name, call in variants(loss, x, other).items():
            if name == "eager" and n_cols not in (32768, 131072):
                continue  # eager is far behind; two points show it
            measure(loss, n_cols, name, call, x)
        del x, other
        torch.cuda.empty_cache()
        dump()


def sweep_warps(min_left=30.0):
    """Fused reverse KL: cap x num_warps at 32K and 128K; split stats/backward tiles."""
    saved = dict(configs.ENTROPY_FUSED_WARPS)
    for n_cols in (32768, 131072):
        x, t = inputs("reverse_kl", M, n_cols)
        for cap in (4096, 8192, 16384):
            for warps in (4, 8, 16, 32):
                if left() < min_left:
                    RESULTS["skipped"].append(f"sweep V={n_cols} cap={cap} warps={warps}")
                    continue
                if warps == saved.get(cap):
                    continue  # already in the main table
                configs.ENTROPY_FUSED_WARPS[cap] = warps
                measure("reverse_kl", n_cols, f"fused_c{cap}_w{warps}",
                        lambda cap=cap: normlab.reverse_kl(x, t, form="fused", block_cap=cap), x,  # noqa: B023
                        table="sweep", extra={"cap": cap, "warps": warps})  # fmt: skip
            configs.ENTROPY_FUSED_WARPS.update(saved)
        s_saved = (configs.ENTROPY_STATS_BLOCK, configs.ENTROPY_STATS_WARPS, configs.ENTROPY_BACKWARD_BLOCK,
                   configs.ENTROPY_BACKWARD_WARPS)  # fmt: skip
        for sb, sw, bb, bw in (
            (8192, 16, 4096, 8),
            (4096, 8, 2048, 4),
            (4096, 8, 8192, 16),
            (2048, 4, 4096, 8),
        ):
            if left() < min_left:
                RESULTS["skipped"].append(f"sweep split V={n_cols} {sb}/{sw} {bb}/{bw}")
                continue
            (configs.ENTROPY_STATS_BLOCK, configs.ENTROPY_STATS_WARPS, configs.ENTROPY_BACKWARD_BLOCK,
             configs.ENTROPY_BACKWARD_WARPS) = (sb, sw, bb, bw)  # fmt: skip
            measure("reverse_kl", n_cols, f"split_s{sb}w{sw}_b{bb}w{bw}",
                    lambda: normlab.reverse_kl(x, t, form="split", block_cap=32768), x, table="sweep",  # noqa: B023
                    extra={"stats": [sb, sw], "backward": [bb, bw]})  # fmt: skip
        (configs.ENTROPY_STATS_BLOCK, configs.ENTROPY_STATS_WARPS, configs.ENTROPY_BACKWARD_BLOCK,
         configs.ENTROPY_BACKWARD_WARPS) = s_saved  # fmt: skip
        x = t = None
        torch.cuda.empty_cache()
        dump()


def time_compile(min_left=35.0):
    for loss, n_cols in (("reverse_kl", 32768), ("cross_entropy", 32768), ("reverse_kl", 131072),
                         ("cross_entropy", 131072), ("soft_cross_entropy", 32768), ("reverse_kl", 65536),
                         ("cross_entropy", 65536)):  # fmt: skip
        if left() < min_left:
            RESULTS["skipped"].append(f"compile {loss} V={n_cols}")
            continue
        x, other = inputs(loss, M, n_cols)
        call = variants(loss, x, other, with_compile=True, caps=())["compile"]
        measure(loss, n_cols, "compile", call, x)
        del x, other
        torch.cuda.empty_cache()
        dump()


def main():
    props = torch.cuda.get_device_properties(0)
    RESULTS["meta"] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "device": props.name,
        "sms": props.multi_processor_count, "torch": torch.__version__, "triton": triton.__version__,
        "python": sys.version.split()[0], "M": M, "dtype": str(DTYPE), "reps": REPS,
        "method": "normlab.bench.time_call: torch.profiler kernel sum per call, L2 flushed before each call",
        "bytes_model": "3*M*V*2 (reverse_kl, soft_cross_entropy), 2*M*V*2 (cross_entropy)",
        "configs": {"fused_warps": configs.ENTROPY_FUSED_WARPS, "stats": [configs.ENTROPY_STATS_BLOCK,
                     configs.ENTROPY_STATS_WARPS], "backward": [configs.ENTROPY_BACKWARD_BLOCK,
                     configs.ENTROPY_BACKWARD_WARPS]},
    }  # fmt: skip
    print(RESULTS["meta"], flush=True)
    sections = [("correctness", check_correctness), ("reduction", check_reduction),
                ("reverse_kl", lambda: time_loss("reverse_kl")),
                ("cross_entropy", lambda: time_loss("cross_entropy")), ("sweep", sweep_warps),
                ("soft_cross_entropy", lambda: time_loss("soft_cross_entropy", 40.0)),
                ("compile", time_compile)]  # fmt: skip
    for name, section in sections:
        t = time.time()
        try:
            section()
        except Exception as e:  # noqa: BLE001
            RESULTS["errors"].append({"where": name, "error": repr(e)[:400]})
            traceback.print_exc()
        print(f"== section {name}: {time.time() - t:.1f} s, {left():.0f} s left", flush=True)
        dump()
    summary()


def summary():
    print("\nloss                V       variant          device_us    GB/s  dpeak_MiB")
    for r in RESULTS["timing"]:
        print(
            f"{r['loss']:18s} {r['V']:7d} {r['variant']:16s} {r['device_us']:9.1f} {r['gbps']:7.1f} {r['dpeak_mib']:9.1f}"
        )
    fails = [c for c in RESULTS["correctness"] if not c["ok"]]
    print(
        f"correctness: {len(RESULTS['correctness']) - len(fails)} ok, {len(fails)} failed; errors: {len(RESULTS['errors'])}"
    )


if __name__ == "__main__":
    main()
