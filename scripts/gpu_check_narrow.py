"""One-call H200 check of the block-row (narrow) norm kernels.

    python3 scripts/gpu_check_narrow.py --out DIR [--budget-s 165]

Phases, in priority order (each later one is skipped once the time budget runs out; the JSON
under DIR is rewritten after every record, so a timeout still leaves what was measured):
  A  correctness at 7,864,320 rows x {16, ..., 512}, bf16, both norms, vs an fp32 reference
  B  device time per call, forward and backward: block-row vs single-row (layout="row") vs
     torch F.layer_norm / F.rms_norm, plus device-to-device copy bandwidth
  C  launch-config variants of the block-row kernels (tuning data for configs.py)
  D  torch.compile(dynamic=False) forward and backward, as many widths as time allows
  E  block-row vs single-row at small row counts (the use_block_row row threshold)

Timing: ``normlab.bench.time_call`` (L2 flushed before each call, device time = the call's
kernel sum from torch.profiler), reps adapted to the call's length; GB/s on
``normlab.bench.traffic``'s minimal model (forward 2*M*N*2 B, backward 3*M*N*2 B, bf16).

benchmarks/data/dev/narrow_tuning_h200.json was recorded on 2026-11-29 by this script at commit
fca3320 (kernels and configs of that commit: a column-sum + prefetch backward by default, and an
earlier phase C variant list); configs.py cites it for the defaults chosen since. Until commit
3727dd5 the script timed with CUDA events around each call (after a >= 2 GiB L2 flush) instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import normlab  # noqa: E402  (picks the runtime before triton)
import triton  # noqa: E402

from normlab import _runtime, configs, ref  # noqa: E402
from normlab.bench import measure_copy_bandwidth, time_call, traffic  # noqa: E402
from normlab.kernels import narrow  # noqa: E402

M = 7_864_320
WIDTHS = [16, 32, 64, 128, 256, 512]
DEVICE = "cuda"  # --smoke: "cpu" under the Triton interpreter, tiny shapes, to check the script
EPS = {"rms": 1e-6, "ln": 1e-5}
T0 = time.time()


class Recorder:
    def __init__(self, out: Path, budget_s: float):
        self.out, self.budget_s = out, budget_s
        self.data = {
            "meta": {
                "script": "scripts/gpu_check_narrow.py",
                "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(
                    timespec="seconds"
                ),
                "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (smoke)",
                "sms": _runtime.sm_count(),
                "l2_bytes": _runtime.l2_bytes(),
                "torch": torch.__version__,
                "triton": triton.__version__,
                "python": sys.version.split()[0],
                "n_rows": M,
                "dtype": "bfloat16",
                "timing": "normlab.bench.time_call: profiler kernel sum, L2 flushed before each",
                "bytes_model": "normlab.bench.traffic minimal: fwd 2*M*N*2, bwd 3*M*N*2",
                "configs": {
                    k: getattr(configs, k) for k in dir(configs) if k.startswith("BLOCK_ROW_")
                },
            },
            "correctness": [],
            "timings": [],
            "variants": [],
            "small_m": [],
            "skipped": [],
        }

    def left(self) -> float:
        return self.budget_s - (time.time() - T0)

    def add(self, section: str, rec: dict) -> None:
        self.data[section].append(rec)
        self.out.write_text(json.dumps(self.data, indent=1, default=str))


def time_us(fn, max_reps: int = 15, target_s: float = 0.15) -> tuple[float, int]:
    """Device time of fn() in µs (normlab.bench.time_call), reps fitted to ~target_s."""
    t0 = time.perf_counter()
    fn()  # compile / warm up, and an estimate of one call
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    est = time.perf_counter() - t0
    reps = int(max(3, min(max_reps, target_s / max(est, 1e-6))))
    return time_call(fn, reps=reps, warmup=1).device_us, reps


def gbps(n_rows: int, n_cols: int, direction: str, us: float) -> float:
    n_bytes = traffic.bytes_moved("layer_norm", direction, n_rows, n_cols, torch.bfloat16)
    return traffic.gbps(n_bytes, us)


def make_inputs(n_rows, n_cols, norm, requires_grad=False):
    g = torch.Generator(device=DEVICE).manual_seed(n_cols)
    x = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.bfloat16, generator=g)
    w = (1 + 0.5 * torch.randn(n_cols, device=DEVICE, generator=g)).to(torch.bfloat16)
    b = torch.randn(n_cols, device=DEVICE, generator=g).to(torch.bfloat16) if norm == "ln" else None
    dy = torch.randn(n_rows, n_cols, device=DEVICE, dtype=torch.bfloat16, generator=g)
    return x, w, b, dy


# --- implementations: each returns (fwd_fn, bwd_fn) closures over the inputs -------------------


def impl_block(x, w, b, dy, norm, fwd_cfg=None, bwd_cfg=None):
    n_cols = x.shape[1]
    is_rms = norm == "rms"
    # the public forward's tile: the 512-column window's (configs.NORM_FWD_BLOCK_ROW), else the
    # block-row layout's
    fwd_cfg = (fwd_cfg or configs.norm_fwd_block_row_config(x.shape[0], n_cols, is_rms)
               or configs.block_row_fwd_config(n_cols, is_rms))  # fmt: skip
    bwd_cfg = bwd_cfg or configs.block_row_bwd_config(n_cols)
    _, mean, rstd = narrow._fwd(x, w, b, EPS[norm], is_rms, fwd_cfg)

    def fwd():
        return narrow._fwd(x, w, b, EPS[norm], is_rms, fwd_cfg)

    def bwd():  # the fp32 dγ/dβ sums are cast to the param dtype, as block_row_backward does
        dx, dw, db = narrow._bwd(dy, x, w, b is not None, mean, rstd, is_rms, bwd_cfg)
        return dx, dw.to(w.dtype), db.to(b.dtype) if db is not None else None

    return fwd, bwd


def _autograd_impl(f, x, w, b, dy):
    xg = x.detach().requires_grad_()
    wg = w.detach().requires_grad_()
    bg = b.detach().requires_grad_() if b is not None else None
    inputs = [t for t in (xg, wg, bg) if t is not None]

    def fwd():
        return f(xg, wg, bg)

    y = fwd()

    def bwd():
        return torch.autograd.grad(y, inputs, dy, retain_graph=True)

    return fwd, bwd


def torch_fn(norm, n_cols):
    if norm == "rms":
        return lambda x, w, b: F.rms_norm(x, (n_cols,), w, EPS["rms"])
    return lambda x, w, b: F.layer_norm(x, (n_cols,), w, b, EPS["ln"])


def row_fn(norm):
    if norm == "rms":
        return lambda x, w, b: normlab.rms_norm(x, w, EPS["rms"], layout="row")
    return lambda x, w, b: normlab.layer_norm(x, w, b, EPS["ln"], layout="row")


# --- phases --------------------------------------------------------------------------------------


def phase_ab(rec: Recorder) -> None:
    """Per width and norm: A (block-row bf16 vs an fp32 autograd reference, in row chunks to
    bound memory), then B (timings of block-row, row and torch) on the same inputs."""
    atol, rtol = ref.tolerance(torch.bfloat16)  # |a - e| <= atol + rtol * |e|
    chunk = 1 << 20
    for n_cols in WIDTHS:
        for norm in ("rms", "ln"):
            if rec.left() < 0:
                rec.data["skipped"].append(f"AB {norm} {n_cols}")
                continue
            t = time.time()
            x, w, b, dy = make_inputs(M, n_cols, norm)
            fwd, bwd = impl_block(x, w, b, dy, norm)
            y, mean, rstd = fwd()
            cfg = configs.block_row_bwd_config(n_cols)
            dx, dw, db = narrow._bwd(dy, x, w, b is not None, mean, rstd, norm == "rms", cfg)
            worst = {"y": 0.0, "dx": 0.0}
            n_bad = {"y": 0, "dx": 0}
            dw_ref = torch.zeros(n_cols, dtype=torch.float64, device=DEVICE)
            db_ref = torch.zeros(n_cols, dtype=torch.float64, device=DEVICE)
            for r0 in range(0, M, chunk):
                xs = x[r0 : r0 + chunk].float().requires_grad_()
                wf = w.float().requires_grad_()
                bf = b.float().requires_grad_() if b is not None else None
                ys = torch_fn(norm, n_cols)(xs, wf, bf)
                inputs = [t_ for t_ in (xs, wf, bf) if t_ is not None]
                grads = torch.autograd.grad(ys, inputs, dy[r0 : r0 + chunk].float())
                for name, got, want in (("y", y, ys), ("dx", dx, grads[0])):
                    err = (got[r0 : r0 + chunk].float() - want.detach()).abs()
                    excess = err - (atol + rtol * want.detach().abs())
                    worst[name] = max(worst[name], err.max().item())
                    n_bad[name] += int((excess > 0).sum().item())
                dw_ref += grads[1].double()
                if b is not None:
                    db_ref += grads[2].double()
            rel_dw = ((dw.double() - dw_ref).abs().max() / dw_ref.abs().max()).item()
            rel_db = (
                ((db.double() - db_ref).abs().max() / db_ref.abs().max()).item()
                if b is not None
                else 0.0
            )
            # fp32 sums of ~7.9M terms: well under 1e-4 relative unless something reduces in bf16
            ok = n_bad["y"] == 0 and n_bad["dx"] == 0 and rel_dw < 1e-4 and rel_db < 1e-4
            r = {"norm": norm, "n_cols": n_cols, "ok": ok, "max_err_y": worst["y"], "max_err_dx": worst["dx"],
                 "n_outside_tol_y": n_bad["y"], "n_outside_tol_dx": n_bad["dx"],
                 "rel_err_dweight_fp32": rel_dw, "rel_err_dbias_fp32": rel_db, "s": round(time.time() - t, 1)}  # fmt: skip
            rec.add("correctness", r)
            print(f"A {norm:3s} N={n_cols:3d} ok={ok} y {worst['y']:.3g} dx {worst['dx']:.3g} "
                  f"dw {rel_dw:.2e} db {rel_db:.2e} ({r['s']} s)", flush=True)  # fmt: skip
            del y, dx, fwd, bwd, xs, ys, grads
            _time_b(rec, norm, n_cols, (x, w, b, dy))
            del x, dy
            _empty_cache()


def measure(rec, section, impl, norm, n_cols, n_rows, make, *args, extra=None, **kwargs):
    """Time the (fwd, bwd) closures that make(*args, **kwargs) returns (either may be None).

    -> {direction: µs}"""
    out = {}
    try:
        fns = make(*args, **kwargs)
        for direction, fn in zip(("fwd", "bwd"), fns):
            if fn is None:
                continue
            us, reps = time_us(fn)
            r = {"impl": impl, "norm": norm, "n_rows": n_rows, "n_cols": n_cols, "dir": direction,
                 "us": round(us, 2), "gbps": round(gbps(n_rows, n_cols, direction, us), 1), "reps": reps}  # fmt: skip
            r.update(extra or {})
            rec.add(section, r)
            out[direction] = us
    except Exception as exc:  # noqa: BLE001  (record and go on: one broken impl must not cost the call)
        rec.add(section, {"impl": impl, "norm": norm, "n_cols": n_cols, "error": repr(exc)[:300]})
        print(f"{section} {impl} {norm} N={n_cols}: ERROR {exc!r}"[:300], flush=True)
    return out


def copy_bandwidth(rec) -> None:
    copy = measure_copy_bandwidth()
    rec.data["meta"]["copy_gbps"] = round(copy.gbps, 1)
    print(f"copy bandwidth {rec.data['meta']['copy_gbps']} GB/s", flush=True)
    _empty_cache()


def _empty_cache():
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


def _time_b(rec: Recorder, norm: str, n_cols: int, inputs) -> None:
    args = (rec, "timings")
    measure(*args, "block_row", norm, n_cols, M, impl_block, *inputs, norm)
    measure(*args, "row", norm, n_cols, M, _autograd_impl, row_fn(norm), *inputs)
    measure(*args, "torch", norm, n_cols, M, _autograd_impl, torch_fn(norm, n_cols), *inputs)
    line = [f"B {norm:3s} N={n_cols:3d}"]
    for r in rec.data["timings"]:
        if r.get("norm") == norm and r.get("n_cols") == n_cols and "us" in r:
            line.append(f"{r['impl']}.{r['dir']} {r['us']:.0f}us {r['gbps']:.0f}GB/s")
    print(" | ".join(line), flush=True)


def _fwd_only(x, w, b, dy, norm, cfg):
    return impl_block(x, w, b, dy, norm, fwd_cfg=cfg)[0], None


def _bwd_only(x, w, b, dy, norm, cfg):
    return None, impl_block(x, w, b, dy, norm, bwd_cfg=cfg)[1]


def phase_c(rec: Recorder) -> None:
    """Config variants: forward tile height / warps; backward accumulation, prefetch, grid, tile."""
    fwd_variants = [
        {},  # the default
        {"max_rows": 128},
        {"max_rows": 256},
        {"max_rows": 256, "num_warps": 8},
        {"num_warps": 4},
        {"tile_elems": 2048},
    ]
    bwd_variants = [
        {},  # the default
        {"acc_tile": False},  # per-tile column sums
        {"prefetch": True},
        {"tile_elems": 2048, "num_warps": 4, "programs_per_sm": 4},
        {"tile_elems": 4096, "num_warps": 8, "programs_per_sm": 2},
        {"programs_per_sm": 8},
        {"tile_elems": 4096, "max_rows": 256, "num_warps": 8},
    ]
    norm = "ln"
    for n_cols in (16, 64, 128, 256):
        inputs = make_inputs(M, n_cols, norm)
        jobs = [("fwd", v, _fwd_only, configs.block_row_fwd_config(n_cols, norm == "rms", **v))
                for v in fwd_variants]  # fmt: skip
        jobs += [
            ("bwd", v, _bwd_only, configs.block_row_bwd_config(n_cols, **v)) for v in bwd_variants
        ]
        seen = set()  # variants that resolve to the same config run once
        for direction, v, make, cfg in jobs:
            if (direction, cfg) in seen:
                continue
            seen.add((direction, cfg))
            if rec.left() < 0:
                rec.data["skipped"].append(f"C {direction} {n_cols} {v}")
                continue
            extra = {"variant": v, "cfg": cfg._asdict()}
            r = measure(
                rec, "variants", "block_row", norm, n_cols, M, make, *inputs, norm, cfg, extra=extra
            )
            print(
                f"C {direction} N={n_cols} {v} -> {cfg} {r.get(direction, math.nan):.0f} us",
                flush=True,
            )
        del inputs
        _empty_cache()


def phase_d(rec: Recorder, widths) -> None:
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = 64
    for n_cols in widths:
        for norm in ("ln", "rms"):
            if rec.left() < 25:  # one compile of forward + backward can take ~10-20 s
                rec.data["skipped"].append(f"D compile {norm} {n_cols}")
                continue
            inputs = make_inputs(M, n_cols, norm)
            f = torch.compile(torch_fn(norm, n_cols), dynamic=False)
            t = time.time()
            r = measure(rec, "timings", "compile", norm, n_cols, M, _autograd_impl, f, *inputs)
            print(
                f"D compile {norm} N={n_cols} {r} ({time.time() - t:.0f} s incl. compile)",
                flush=True,
            )
            del inputs, f
            _empty_cache()


def phase_e(rec: Recorder) -> None:
    for n_cols in (16, 256):
        for n_rows in (1024, 4096, 16384, 65536):
            if rec.left() < 0:
                rec.data["skipped"].append(f"E {n_cols} {n_rows}")
                continue
            inputs = make_inputs(n_rows, n_cols, "ln")
            args = (rec, "small_m")
            a = measure(*args, "block_row", "ln", n_cols, n_rows, impl_block, *inputs, "ln")
            r = measure(*args, "row", "ln", n_cols, n_rows, _autograd_impl, row_fn("ln"), *inputs)
            print(f"E ln N={n_cols} M={n_rows} block {a} row {r}", flush=True)


def summary(rec: Recorder) -> None:
    t = {}
    for r in rec.data["timings"]:
        if "us" in r:
            t[(r["impl"], r["norm"], r["n_cols"], r["dir"])] = r["us"]
    copy = rec.data["meta"].get("copy_gbps", math.nan)
    print(f"\nSUMMARY  {M} rows bf16, µs (GB/s; % of copy {copy} GB/s); x = block-row speed-up")
    for norm in ("ln", "rms"):
        for direction in ("fwd", "bwd"):
            print(
                f"{norm} {direction}: N | block_row | row | torch | compile | vs row | vs compile"
            )
            for n in WIDTHS:
                cells = []
                for impl in ("block_row", "row", "torch", "compile"):
                    us = t.get((impl, norm, n, direction))
                    cells.append(f"{us:.0f} ({gbps(M, n, direction, us):.0f}; "
                                 f"{100 * gbps(M, n, direction, us) / copy:.0f}%)" if us else "-")  # fmt: skip
                blk = t.get(("block_row", norm, n, direction))
                sp = [f"{t[(i, norm, n, direction)] / blk:.2f}x" if blk and (i, norm, n, direction) in t else "-"
                      for i in ("row", "compile")]  # fmt: skip
                print(f"  {n:4d} | " + " | ".join(cells + sp))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--budget-s", type=float, default=165.0)
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU (interpreter)")
    args = p.parse_args()
    if args.smoke:
        global M, WIDTHS, DEVICE
        M, WIDTHS, DEVICE = 300, [16, 17], "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = Recorder(out / "narrow_tuning_h200.json", args.budget_s)
    print(rec.data["meta"], flush=True)
    copy_bandwidth(rec)
    phase_ab(rec)
    phase_d(rec, (16, 256))
    phase_c(rec)
    phase_d(rec, tuple(n for n in WIDTHS if n not in (16, 256)))
    phase_e(rec)
    rec.add("skipped", f"done at {time.time() - T0:.0f} s")
    summary(rec)


if __name__ == "__main__":
    main()
