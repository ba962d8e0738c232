#!/usr/bin/env python3
"""Second tuning sweep on the GPU: launch configs for the shapes that missed their targets.

    python3 scripts/sweep_launch_configs.py --out DIR [--parts fwd,bwd,...] [--budget-s 420]

Device time per call from ``normlab.bench.time_call`` (torch.profiler kernel sum, L2 flushed
before each call), bf16. Parts (the JSON of each run is kept in
``benchmarks/data/dev/sweep_launch_configs_h200.json``, which ``normlab/configs.py`` cites):

* ``fwd``: the peer shapes that missed, both norms, warps per row program (and a chunked 8192
  block at N = 16384).
* ``bwd``: persistent backward, 32768x8192 (loop stages x programs/SM x warps x rows per tile);
  the N = 16384 shapes (two-pass tiles and grids, single-pass warps); N <= 2048 at 2 vs 4
  programs per SM with other tiles (the workspace bound).
* ``prefetch``, ``prefetch_workspace``: the single-pass persistent backward with and without the
  next-tile register prefetch; 2 vs 4 programs per SM with it.
* ``narrow``, ``narrow128``: block-row forward tiles at 16..256 columns, 7,864,320 rows; the
  one-row-per-tile backward (``layout="row"``) at 16 and 64 columns.
* ``losses``: this checkout's loss kernels, fused tiles x warps and split, per vocab.
* ``paired``: persistent backward at N <= 2048, one partial row per program vs two programs
  adding into one zeroed row (the 2 x SMs x N workspace bound), and 2 programs per SM.
* ``chunked``: the chunked loss form (tiles x tiles per chunk x warps) against the default, per
  loss and vocab, with its agreement with the default and with its own two-launch variant.
* ``persistent_losses`` (at commit ed5d1ff only, since removed with the kernel change it timed):
  fused losses on a persistent grid against one program per row; chunks of 8 and 16 tiles.
* ``fwd_persistent``: the forward on a persistent grid (the block-row kernel grid-striding row
  tiles with a next-tile prefetch) against the default, at the 11 peer shapes and 16..256 columns.
* ``fwd_persistent_rows``: its best configs per width against the default over row counts.
* ``fwd_1024``: 1024 columns at 8192-32768 rows, block-row tile heights x warps.
* ``fwd_unmasked`` (at commit 52d0e40 only, since reverted with the kernel option it timed): the
  block-row forward with and without predicates on exactly tiled shapes.
* ``fwd_looped``: the forward as torch.compile generates it (a looped two-pass reduction with
  eviction hints at 4096-16384 columns, one warp per row at 1024) against the default.
* ``fwd_looped_rows``: RMSNorm, the looped forward's best configs over row counts and widths.
* ``fwd_row_variants``: RMSNorm at 1024 columns, the register-resident row changed one way at a
  time toward torch.compile's kernel (needs ``ab/ab_fwd.py``, see the part).
* ``fwd_1024_peer``: 1024 columns, both norms, the default forward and the register-resident row
  at 1-4 warps against torch.compile in the same run, three interleaved rounds.
* ``fwd_1024_occupancy``: RMSNorm at 1024 columns, the block-row forward at fewer resident rows
  (tile rows x warps x programs per SM) against the default and torch.compile.
* ``narrow_fwd_tiles``: 7,864,320 rows x 16-256 columns, block-row forward tiles down to 2 warps
  against the default and torch.compile in the same run, two interleaved rounds.
* ``fwd_wide_tiles``: the block-row forward at 512 columns over row counts and short tiles at 256,
  against the default and torch.compile, two interleaved rounds.
* ``peer_rounds``: normlab's default against torch.compile where the records have the peer ahead,
  three interleaved rounds.
* ``fwd_looped_variants``: RMSNorm at 8192 columns, the looped row without masks / with int32
  offsets / without the weight's hint (needs ``ab/ab_looped.py``, see the part).
* ``bwd_column_split`` (at commits 3dbbb84 and 0149366 only, since reverted with the kernels it
  timed): a column-split backward (a row-sums kernel, then dx and per-row-block partials on a 2-D
  grid of tiles, then the reduce) against the default strategy.
* ``bwd_chunked`` (at commit 87bc001 only, since reverted with the kernel it timed): a chunked
  backward (one rows x columns tile per program, a row group's column chunks meeting at a
  counter, x and dy read once) at ten tiles against the persistent default and torch.compile.
* ``chunked_unaligned``: the chunked loss form at V = 50257 (aligned frames) against 50256 under
  register caps, with each compiled kernel's registers and spills.
* ``frame_bytes``: the frame boundary of unaligned rows (V = 50257) for every loss and form.
* ``fwd_ties``: the forwards within 2% of torch.compile in the records, six interleaved rounds with
  the order flipped every round.
* ``narrow_recompute``: 7,864,320 rows x 16-256 columns, both norms: the block-row forward with
  and without storing mean/rstd, the backward reading them or recomputing them from x (at the
  default tile and at 4 / 16 warps), against torch.compile, three interleaved rounds; with the
  two paths' agreement and the recomputing backward's error against fp32 autograd.
* ``compile_configs``: torch.compile's RMSNorm forward recompiled from scratch every round, with
  the launch configs its autotuner kept, against block-row tiles at 1024 columns.
* ``fwd_1024_rows``: 1024 columns, both norms, 1024-32768 rows: one- and two-row block-row tiles
  at 1-4 warps against the default and torch.compile, three interleaved rounds.
* ``fwd_1024_window``: RMSNorm at 1024 columns through the benchmark's build, the default against
  block-row tiles patched into configs.NORM_FWD_BLOCK_ROW, and torch.compile, four rounds.
* ``fwd_two_pass_whole``: RMSNorm at 8192 / 16384 columns, the two-pass forward with one chunk
  as wide as the row (as torch.compile runs it) against the default chunks and torch.compile.
* ``fwd_8192_rows``: RMSNorm at 8192 columns over 256-2048 rows, two-pass chunks at 4-16 warps.
* ``fwd_static_cols``: RMSNorm forward with n_cols a constexpr (``ab/ab_static.py``) against the
  same code with a runtime n_cols, the production kernel and torch.compile.
* ``narrow_recompute_check``: that agreement alone, at the recomputing backward's configured tile.
* ``narrow_recompute_tiles``: the recomputing block-row backward's tile (elements x warps x
  accumulator x prefetch) with registers and spills, against the default reading the statistics.
* ``reduce_tiles``: the partial-sum reduce kernel's tile inside the default backward, peer shapes.
* ``bwd_512``: the row path's backward at 7,864,320 x 512 (tile rows x warps x programs per SM
  x prefetch) against the default and torch.compile.
* ``chunked_occupancy``: the chunked loss form's residency (register cap, tile x warps x tiles).
* ``chunked_layouts``: the chunked loss form's chunk layout (uniform k-tile chunks, balanced chunks
  of unequal length) at exactly tiled, ragged, unaligned and wide vocabularies.
* ``loss_stages``: num_stages (loop software pipelining) of the fused and chunked loss kernels.
* ``entropy_fused``: as ``entropy``, the fused form only (reverse KL and soft CE, caps 2048 and
  4096), two interleaved rounds (run at 5062f0b with variants that kept only a row's last tiles
  evict_last in L2; see the run's note).
* ``fwd_1024_transcribed``: RMSNorm at 1024 columns, that transcription undone one way at a time,
  normlab's production kernel at the default and as one row per warp, on the same buffers.
* ``fwd_1024_warm``: RMSNorm at 1024 columns, the default against one row per 1 or 2 warps,
  Inductor's kernel and torch.compile, each timing after 20 ms of busy GPU.
* ``fwd_1024_clocks``: the same kernels after a busy GPU and after 200 ms idle, with the SM clock,
  power and throttle reasons read before and after each timing.
* ``fwd_1024_modes``: RMSNorm 16384 x 1024, Inductor's kernel, the default and the one-warp row on
  each round's same buffers, placed as the benchmark places them and then behind random pads.
* ``norm_bwd_ab``: A/B of copies of ``normlab/kernels/norm.py`` (``--norm-variants``): the
  default backward at LayerNorm's peer shapes, with agreement, registers and spills.
* ``fwd_placement``: RMSNorm at 1024 columns, buffers placed anew each round: normlab's default
  kernel, Inductor's own compiled kernel and a plain-Triton transcription of it, all on the same
  buffers, against torch.compile's call (its own outputs) and the default on its outputs.
* ``entropy``: A/B of copies of ``normlab/kernels/entropy.py`` (edited, saved under another
  name and passed with ``--entropy-variants a.py,b.py``), with their agreement on the same inputs:
  fused, chunked and split per loss, at the vocabularies of ``--entropy-vocabs``.

Writes ``sweep_launch_configs.json`` under --out after every part; a budget skips what is left
and lists it.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import itertools
import json
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# isort: off
import normlab  # picks the runtime before triton
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from normlab import _runtime, configs
from normlab.bench import device_info, time_call
from normlab.bench.sweep import PEERS
from normlab.kernels import narrow as NR
from normlab.kernels import norm as K

# isort: on

NARROW_ROWS = 7_864_320
EPS = 1e-6


class Sweep:
    def __init__(self, out: Path, budget_s: float, reps: int):
        self.out, self.deadline, self.reps = out, time.time() + budget_s, reps
        self.data = {"meta": {}, "results": [], "skipped": [], "errors": []}

    def left(self) -> float:
        return self.deadline - time.time()

    def time(self, part: str, case: dict, run, reps: int | None = None) -> float | None:
        if self.left() <= 0:
            self.data["skipped"].append({"part": part, **case})
            return None
        try:
            t = time_call(run, reps=reps or self.reps, warmup=2)
        except Exception as exc:  # a config the compiler rejects: note it, go on
            self.data["errors"].append({"part": part, **case, "error": f"{type(exc).__name__}: {exc}"})
            return None
        self.data["results"].append({"part": part, **case, "device_us": round(t.device_us, 2),
                                     "kernels": {k: round(v, 2) for k, v in t.kernels.items()}})
        return t.device_us

    def save(self) -> None:
        (self.out / "sweep_launch_configs.json").write_text(json.dumps(self.data, indent=1) + "\n")


def norm_inputs(m, n, is_rms, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
    w = torch.randn(n, device="cuda", dtype=dtype, generator=g)
    b = None if is_rms else torch.randn(n, device="cuda", dtype=dtype, generator=g)
    dy = torch.randn(m, n, device="cuda", dtype=dtype, generator=g)
    return x, w, b, dy


def part_fwd(s: Sweep) -> None:
    # The shapes that missed "as fast as the fastest peer" in the first record run.
    missed = {True: ((512, 16384), (1024, 8192), (8192, 1024), (16384, 1024), (2048, 16384),
                     (32768, 1024), (32768, 8192)),
              False: ((512, 16384), (8192, 1024), (16384, 1024))}
    for is_rms, (m, n) in [(r, s_) for r in (True, False) for s_ in missed[r]]:
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, n, is_rms)
        block = min(1 << (n - 1).bit_length(), configs.NORM_FWD_MAX_BLOCK)
        variants = [(block, wp) for wp in (2, 4, 8, 16, 32) if 128 * wp <= block <= 1024 * wp]
        if n >= 16384:
            variants += [(8192, 8), (8192, 16)]
        best = None
        for blk, wp in variants:
            us = s.time("fwd", {"op": op, "M": m, "N": n, "block": blk, "warps": wp},
                        lambda: K.norm_forward(x, w, b, EPS, is_rms, block_size=blk, num_warps=wp))
            if us and (best is None or us < best[0]):
                best = (us, blk, wp)
        print(f"fwd {op} {m}x{n}: default {configs.norm_fwd_config(n)} best {best}", flush=True)
        del x, w, b


def part_fwd_looped(s: Sweep) -> None:
    """torch.compile's forward kernels (generated code, H200): at 8192 columns a looped two-pass
    reduction (evict_last, then an evict_first re-read) at 16 warps and 32 registers; at 1024
    columns one warp per row. Ours looped (with the same eviction hints) and at one warp, against
    the default dispatch."""
    shapes = ((512, 16384), (2048, 16384), (1024, 8192), (32768, 8192), (4096, 4096),
              (8192, 4096), (16384, 1024), (8192, 1024), (32768, 1024))
    for is_rms, (m, n) in itertools.product((True, False), shapes):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, n, is_rms)
        s.time("fwd-looped", {"op": op, "M": m, "N": n, "block": None, "warps": None},
               lambda: K.norm_forward(x, w, b, EPS, is_rms, block_row=True))  # noqa: B023, F821
        if n >= 4096:
            variants = [(n, 8), (n, 16), (8192, 16), (4096, 16), (4096, 8), (2048, 8), (2048, 4),
                        (1024, 4)]
        else:
            variants = [(n, 1), (n, 2), (n, 4), (512, 1), (512, 2)]
        for blk, wp in dict.fromkeys(v for v in variants if v[0] <= n and v[0] <= 16384):
            s.time("fwd-looped", {"op": op, "M": m, "N": n, "block": blk, "warps": wp},
                   lambda: K.norm_forward(x, w, b, EPS, is_rms, block_size=blk,  # noqa: B023, F821
                                          num_warps=wp))  # noqa: B023
        del x, w, b
        s.save()


def part_fwd_looped_rows(s: Sweep) -> None:
    """RMSNorm: the looped forward's best configs of ``fwd_looped`` over row counts and widths,
    against the default dispatch (one row per program, or the block-row windows)."""
    cands = {1024: ((512, 2), (512, 1)), 2048: ((1024, 4), (1024, 2)),
             4096: ((2048, 8), (2048, 4)), 8192: ((4096, 16), (2048, 8)),
             16384: ((4096, 16), (4096, 8))}
    rows = {1024: (2048, 4096, 8192, 16384, 32768), 2048: (2048, 4096, 8192, 16384),
            4096: (1024, 2048, 4096, 8192), 8192: (256, 1024, 4096, 32768),
            16384: (256, 512, 1024, 2048)}
    for n, ms in rows.items():
        for m in ms:
            x, w, _, _ = norm_inputs(m, n, True)
            s.time("fwd-looped-rows", {"op": "rms", "M": m, "N": n, "block": None, "warps": None},
                   lambda: K.norm_forward(x, w, None, EPS, True, block_row=True))  # noqa: B023, F821
            for blk, wp in cands[n]:
                s.time("fwd-looped-rows", {"op": "rms", "M": m, "N": n, "block": blk, "warps": wp},
                       lambda: K.norm_forward(x, w, None, EPS, True, block_size=blk,  # noqa: B023, F821
                                              num_warps=wp))  # noqa: B023
            del x, w
        s.save()


def part_fwd_row_variants(s: Sweep) -> None:
    """RMSNorm at 1024 columns: the register-resident row as torch.compile specialises it (no
    predicates, int32 offsets, a static width, no rstd store) one change at a time, from
    ``ab/ab_fwd.py`` (untracked A/B variants; the run "e096514+ab" in
    benchmarks/data/dev/sweep_launch_configs_h200.json keeps its source in meta.ab_source), against
    the default."""
    ab = _load_module(Path(ROOT) / "ab" / "ab_fwd.py")
    variants = {"base": (1, 1, 1, 0), "nomask": (0, 1, 1, 0), "int32": (1, 0, 1, 0),
                "norstd": (1, 1, 0, 0), "static": (1, 1, 1, 1), "compile-like": (0, 0, 1, 1)}
    for m, n in ((8192, 1024), (16384, 1024), (32768, 1024)):
        x, w, _, _ = norm_inputs(m, n, True)
        y = torch.empty_like(x)
        rstd = torch.empty(m, device="cuda", dtype=torch.float32)
        s.time("fwd-row-variants", {"M": m, "N": n, "variant": "default", "warps": None},
               lambda: K.norm_forward(x, w, None, EPS, True, block_row=True))  # noqa: B023, F821
        for (name, (masked, int64, store, static)), wp in itertools.product(variants.items(), (1, 2, 4)):
            def run(masked=masked, int64=int64, store=store, static=static, wp=wp):
                ab.rms_fwd_variant[(m,)](x, y, w, rstd, n, EPS, N=n, BLOCK=n, MASKED=bool(masked),  # noqa: B023, F821
                                         INT64=bool(int64), STORE_RSTD=bool(store),
                                         STATIC_N=bool(static), num_warps=wp)
            s.time("fwd-row-variants", {"M": m, "N": n, "variant": name, "warps": wp}, run)
        del x, w, y, rstd
        s.save()


def _time_default_and_compile(s: Sweep, part: str, case: dict, direction: str = "fwd",
                              reps: int | None = None, order=("compile", "normlab")) -> None:
    """normlab's default and torch.compile on ``case`` (op, M, N), built as the benchmarks build
    them (the training forward, or the backward after one forward), one timing each."""
    from normlab.bench import registry

    for impl in order:
        run = registry.get(case["op"], impl).build(case["M"], case["N"], torch.bfloat16, direction,
                                                   "cuda")  # fmt: skip
        s.time(part, {**case, "kernel": impl}, run, reps=reps)
        del run


def _time_block_row_tiles(s: Sweep, part: str, case: dict, is_rms: bool, tiles) -> None:
    """The block-row forward at each (rows, warps) tile, one program per tile, on case's M x N."""
    x, w, b, _ = norm_inputs(case["M"], case["N"], is_rms)
    for rows, wp in tiles:
        cfg = configs.BlockRowFwdConfig(rows, wp)
        s.time(part, {**case, "kernel": "block_row", "block_rows": rows, "warps": wp},
               lambda: NR._fwd(x, w, b, EPS, is_rms, cfg), reps=8)  # noqa: B023, F821
    del x, w, b


def part_fwd_1024_peer(s: Sweep) -> None:
    """1024 columns, both norms: the default forward, the register-resident row (one 1024 block)
    at 1, 2 and 4 warps, and torch.compile (the benchmark's training forward), interleaved over
    three rounds so that every candidate meets the peer in the same minutes of the run."""
    for round_, is_rms, m in itertools.product(range(3), (True, False), (4096, 8192, 16384, 32768)):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "M": m, "N": 1024, "round": round_}
        _time_default_and_compile(s, "fwd-1024-peer", case)
        x, w, b, _ = norm_inputs(m, 1024, is_rms)
        for wp in (1, 2, 4):
            s.time("fwd-1024-peer", {**case, "kernel": "row", "warps": wp},
                   lambda: K.norm_forward(x, w, b, EPS, is_rms, block_size=1024, num_warps=wp))  # noqa: B023, F821
        del x, w, b
    s.save()


def part_fwd_1024_occupancy(s: Sweep) -> None:
    """RMSNorm at 1024 columns (where torch.compile's one-warp row, at 38% achieved occupancy,
    leads): the block-row forward at fewer resident rows, tile rows x warps x programs per SM
    (0: one program per tile), against the default and torch.compile, two interleaved rounds."""
    tiles = [(rows, wp, pps) for rows, wp, pps in itertools.product((1, 2, 4), (1, 2, 4), (0, 4, 8, 16))
             if rows * 1024 // (32 * wp) >= 8]  # fmt: skip
    for round_, m in itertools.product(range(2), (8192, 16384, 32768)):
        case = {"op": "rms_norm", "M": m, "N": 1024, "round": round_}
        _time_default_and_compile(s, "fwd-1024-occupancy", case)
        x, w, b, _ = norm_inputs(m, 1024, True)
        for rows, wp, pps in tiles:
            cfg = configs.BlockRowFwdConfig(rows, wp, pps)
            s.time("fwd-1024-occupancy", {**case, "kernel": "block_row", "block_rows": rows,
                                          "warps": wp, "programs_per_sm": pps},
                   functools.partial(NR._fwd, x, w, b, EPS, True, cfg), reps=10)
        del x, w, b
        s.save()


def part_narrow_fwd_tiles(s: Sweep) -> None:
    """7,864,320 rows x 16-256 columns, both norms: block-row forward tiles (rows x warps, down to
    the 2-warp 32-row tiles torch.compile generates at 64 columns) against the default and
    torch.compile, two interleaved rounds."""
    for round_, is_rms, n in itertools.product(range(2), (True, False), (16, 64, 128, 256)):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "M": NARROW_ROWS, "N": n, "round": round_}
        _time_default_and_compile(s, "narrow-fwd-tiles", case, reps=8)
        tiles = [(rows, wp) for rows, wp in itertools.product((16, 32, 64, 128, 256), (1, 2, 4, 8))
                 if 1024 <= rows * n <= 16384 and 8 <= rows * n // (32 * wp) <= 64]  # fmt: skip
        _time_block_row_tiles(s, "narrow-fwd-tiles", case, is_rms, tiles)
        s.save()


def _narrow_recompute_agreement(s: Sweep, op: str, n: int, x, w, b, dy, is_rms: bool) -> None:
    """The recomputing path against the storing one (y bitwise, dx / dγ / dβ), and its dγ / dβ
    against fp32 autograd over all rows (its dx on the first 2^20)."""
    fcfg = configs.block_row_fwd_config(n, is_rms)
    y, mean, rstd = NR._fwd(x, w, b, EPS, is_rms, fcfg)
    y2, _, _ = NR._fwd(x, w, b, EPS, is_rms, fcfg, store_stats=False)
    stored = NR._bwd(dy, x, w, b is not None, mean, rstd, is_rms, configs.block_row_bwd_config(n))
    got = NR._bwd(dy, x, w, b is not None, None, None, is_rms,
                  configs.block_row_bwd_recompute_config(n, is_rms), eps=EPS)  # fmt: skip
    params = [t.float().requires_grad_() for t in (w, b) if t is not None]
    ref_sums = [torch.zeros(n, device=x.device, dtype=torch.float64) for _ in params]
    chunk = 1 << 20
    for r0 in range(0, x.shape[0], chunk):
        xs = x[r0:r0 + chunk].float().requires_grad_()
        ys = (F.rms_norm(xs, (n,), params[0], EPS) if is_rms
              else F.layer_norm(xs, (n,), params[0], params[1], EPS))  # fmt: skip
        grads = torch.autograd.grad(ys, [xs, *params], dy[r0:r0 + chunk].float())
        if r0 == 0:
            dx_err = (got[0][:chunk].float() - grads[0]).abs().max().item()
        for acc, g_ in zip(ref_sums, grads[1:]):
            acc += g_.double()

    def rel(a, e):
        return ((a.double() - e).abs().max() / e.abs().max()).item()

    res = {"part": "narrow-recompute-check", "op": op, "N": n,
           "y_bitwise_equal": torch.equal(y, y2),
           "dx_max_abs_diff_vs_stored": (got[0].float() - stored[0].float()).abs().max().item(),
           "dx_max_abs_err_vs_fp32_first_2^20_rows": dx_err}  # fmt: skip
    for name, g_, st, e in zip(("dweight", "dbias"), got[1:], stored[1:], ref_sums):
        res[f"{name}_rel_diff_vs_stored"] = rel(g_, st.double())
        res[f"{name}_rel_err_vs_fp32"] = rel(g_, e)
    s.data["results"].append(res)
    print(res, flush=True)
    del y, y2, mean, rstd, stored, got


def part_narrow_recompute(s: Sweep) -> None:
    """7,864,320 rows x 16-256 columns, both norms: the block-row forward storing mean/rstd or not,
    the backward reading them or recomputing them from x (default tile, and at 4 / 16 warps),
    against torch.compile, three interleaved rounds, the order flipped every round."""
    for round_, is_rms, n in itertools.product(range(3), (True, False), (16, 32, 64, 128, 256)):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "M": NARROW_ROWS, "N": n, "round": round_}
        x, w, b, dy = norm_inputs(NARROW_ROWS, n, is_rms)
        if round_ == 0:
            _narrow_recompute_agreement(s, op, n, x, w, b, dy, is_rms)
        fcfg = configs.block_row_fwd_config(n, is_rms)
        _, mean, rstd = NR._fwd(x, w, b, EPS, is_rms, fcfg)
        runs = [("fwd", {"stats": "stored"},
                 functools.partial(NR._fwd, x, w, b, EPS, is_rms, fcfg)),
                ("fwd", {"stats": "none"},
                 functools.partial(NR._fwd, x, w, b, EPS, is_rms, fcfg, store_stats=False))]
        for wp in (None, 4, 16):
            bcfg = configs.block_row_bwd_config(n, num_warps=wp)
            runs.append(("bwd", {"stats": "stored", "warps": bcfg.num_warps},
                         functools.partial(NR._bwd, dy, x, w, b is not None, mean, rstd, is_rms,
                                           bcfg)))  # fmt: skip
            runs.append(("bwd", {"stats": "recomputed", "warps": bcfg.num_warps},
                         functools.partial(NR._bwd, dy, x, w, b is not None, None, None, is_rms,
                                           bcfg, eps=EPS)))  # fmt: skip
        if round_ % 2:
            runs.reverse()
        order = ("normlab", "compile") if round_ % 2 else ("compile", "normlab")
        for direction in ("fwd", "bwd"):
            _time_default_and_compile(s, "narrow-recompute", {**case, "direction": direction},
                                      direction, reps=10, order=order)
        for direction, extra, run in runs:
            s.time("narrow-recompute", {**case, "direction": direction, "kernel": "block_row",
                                        **extra}, run, reps=10)  # fmt: skip
        del x, w, b, dy, mean, rstd, runs
        s.save()


def _inductor_launch_configs() -> dict:
    """Kernel name -> the launch configs Inductor's autotuner kept (after a call), from the
    generated modules it has loaded."""
    from torch._inductor.codecache import PyCodeCache

    out = {}
    mods = list(getattr(PyCodeCache, "modules", [])) + list(
        getattr(PyCodeCache, "modules_no_attr", {}).values())  # fmt: skip
    for mod in mods:
        for name, obj in vars(mod).items():
            launchers = getattr(obj, "launchers", None)
            if name.startswith("triton_") and launchers:
                out[name] = [str(getattr(launcher, "config", launcher)) for launcher in launchers]
    return out


def part_compile_configs(s: Sweep) -> None:
    """torch.compile's forward where its time moves between processes (RMSNorm 16384 x 1024
    17.1-19.5 us): each round recompiles from scratch (no FX graph or autotune cache), so
    Inductor autotunes again, and the configs it kept are recorded beside its time; then
    normlab's default and block-row tiles of 2-32 rows x 1-16 warps at 1024 columns."""
    import torch._dynamo
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    if hasattr(inductor_config, "autotune_local_cache"):
        inductor_config.autotune_local_cache = False
    shapes = ((16384, 1024), (8192, 1024), (1024, 8192), (32768, 8192))
    tiles = ((1, 2), (2, 1), (2, 2), (4, 1), (4, 2), (4, 4), (8, 2), (8, 4), (8, 8), (16, 4),
             (16, 8), (16, 16), (32, 8), (32, 16))  # fmt: skip
    for round_, (m, n) in itertools.product(range(3), shapes):
        case = {"op": "rms_norm", "M": m, "N": n, "round": round_}
        torch._dynamo.reset()
        for impl in ("normlab", "compile") if round_ % 2 else ("compile", "normlab"):
            _time_default_and_compile(s, "compile-configs", case, order=(impl,))
            last = s.data["results"][-1] if s.data["results"] else {}
            if impl == "compile" and last.get("kernel") == "compile" and last.get("M") == m \
                    and last.get("round") == round_:  # fmt: skip
                last["inductor_configs"] = _inductor_launch_configs()
        if n == 1024:
            x, w, _, _ = norm_inputs(m, n, True)
            for rows, wp in tiles:
                s.time("compile-configs", {**case, "kernel": "block_row", "block_rows": rows,
                                           "warps": wp},
                       functools.partial(NR._fwd, x, w, None, EPS, True,
                                         configs.BlockRowFwdConfig(rows, wp)), reps=10)  # fmt: skip
            del x, w
        s.save()


def part_fwd_1024_rows(s: Sweep) -> None:
    """1024 columns, both norms, over row counts: the block-row forward at one or two rows per
    tile (the register-resident row, 1-4 warps, one program per tile) against the default and
    torch.compile, three interleaved rounds with the order flipped every round."""
    tiles = ((1, 1), (1, 2), (1, 4), (2, 2), (2, 4))
    rows = (1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768)
    for round_, is_rms, m in itertools.product(range(3), (True, False), rows):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "M": m, "N": 1024, "round": round_}
        order = ("normlab", "compile") if round_ % 2 else ("compile", "normlab")
        _time_default_and_compile(s, "fwd-1024-rows", case, reps=12, order=order)
        x, w, b, _ = norm_inputs(m, 1024, is_rms)
        for rows_, wp in tiles[::-1] if round_ % 2 else tiles:
            s.time("fwd-1024-rows", {**case, "kernel": "block_row", "block_rows": rows_,
                                     "warps": wp},
                   functools.partial(NR._fwd, x, w, b, EPS, is_rms,
                                     configs.BlockRowFwdConfig(rows_, wp)), reps=12)  # fmt: skip
        del x, w, b
    s.save()


def part_fwd_1024_window(s: Sweep) -> None:
    """RMSNorm at 1024 columns through the benchmark's own build (the public op on fresh inputs,
    as the records time it): the default (the looped row) against configs.NORM_FWD_BLOCK_ROW
    patched to send every row count to a block-row tile (2 rows x 4 warps, 1 row x 2 warps,
    one program per tile), and torch.compile, four interleaved rounds, the order rotated. With
    FWD_1024_WINDOW_ROUNDS set: that many rounds, 4096-32768 rows, the 2 x 4 tile only."""
    from normlab.bench import registry

    saved = configs.NORM_FWD_BLOCK_ROW[True].get(1024)
    variants = {"default": saved, "tile2x4": ((1, None, (2, 4, 0)),)}
    if os.environ.get("FWD_1024_WINDOW_ROUNDS"):  # the second run: more rounds, more rows
        rounds, rows = int(os.environ["FWD_1024_WINDOW_ROUNDS"]), (4096, 8192, 12288, 16384, 24576,
                                                                     32768)  # fmt: skip
    else:
        variants["tile1x2"] = ((1, None, (1, 2, 0)),)
        rounds, rows = 4, (1024, 2048, 4096, 8192, 12288, 16384)
    try:
        for round_, m in itertools.product(range(rounds), rows):
            names = list(variants) + ["compile"]
            names = names[round_ % len(names):] + names[:round_ % len(names)]
            for name in names:
                impl = "compile" if name == "compile" else "normlab"
                if impl == "normlab":
                    if variants[name] is None:
                        configs.NORM_FWD_BLOCK_ROW[True].pop(1024, None)
                    else:
                        configs.NORM_FWD_BLOCK_ROW[True][1024] = variants[name]
                run = registry.get("rms_norm", impl).build(m, 1024, torch.bfloat16, "fwd", "cuda")
                s.time("fwd-1024-window", {"op": "rms_norm", "M": m, "N": 1024, "round": round_,
                                           "kernel": name}, run, reps=12)  # fmt: skip
                del run
            s.save()
    finally:
        if saved is None:
            configs.NORM_FWD_BLOCK_ROW[True].pop(1024, None)
        else:
            configs.NORM_FWD_BLOCK_ROW[True][1024] = saved


def part_fwd_two_pass_whole(s: Sweep) -> None:
    """RMSNorm at 8192 and 16384 columns: the forward kernel's two-pass path (pass 1 sums the
    squares, pass 2 re-reads the row from L2) with one chunk as wide as the row, as torch.compile's
    generated kernel runs at 8192 columns (R0_BLOCK 8192, 16 warps; run "compile_configs"),
    against the default chunks, the register-resident row and torch.compile. The production
    kernel without its heuristics (``.fn``), on fresh inputs every round, six rounds rotated."""
    variants = {8192: ((4096, 16, False), (8192, 16, False), (8192, 32, False), (8192, 8, False),
                       (8192, 16, True), (2048, 8, False)),
                16384: ((4096, 16, False), (8192, 16, False), (16384, 32, False),
                        (16384, 16, False), (16384, 16, True))}  # fmt: skip
    shapes = ((32768, 8192), (1024, 8192), (4096, 8192), (512, 16384), (2048, 16384))
    _time_fwd_kernel_variants(s, "fwd-two-pass-whole", shapes, variants)


def part_fwd_8192_rows(s: Sweep) -> None:
    """RMSNorm at 8192 columns over 256-2048 rows (one wave of 16-warp programs holds 4 per SM,
    528 rows on 132 SMs): the two-pass chunks at 4-16 warps, against the default and
    torch.compile, six rounds rotated (as ``fwd_two_pass_whole``)."""
    variants = {8192: ((4096, 16, False), (2048, 8, False), (4096, 8, False), (1024, 4, False))}
    shapes = tuple((m, 8192) for m in (256, 512, 768, 1024, 1280, 1536, 2048))
    _time_fwd_kernel_variants(s, "fwd-8192-rows", shapes, variants)


def _production_fwd(m, n, x, y, w, rstd, blk, wp, single):
    """The forward kernel without its heuristics (``.fn``), RMSNorm, at (block, warps, single)."""
    return functools.partial(
        K._norm_fwd_kernel.fn[(m,)], x, y, w, w, rstd, rstd, x.stride(0), y.stride(0), n, EPS,
        IS_RMS=True, HAS_WEIGHT=True, HAS_BIAS=False, BLOCK_SIZE=blk, SINGLE_BLOCK=single,
        EVEN_COLS=True, INT64_ROWS=False, num_warps=wp)  # fmt: skip


def _time_fwd_kernel_variants(s: Sweep, part: str, shapes, variants) -> None:
    """RMSNorm forward at (block, warps, single block) per width (``variants``: width -> tuple),
    through _time_fwd_rounds."""
    def make_runs(m, n, x, y, w, rstd):
        return [({"kernel": "single" if single else "two_pass", "block": blk, "warps": wp},
                 _production_fwd(m, n, x, y, w, rstd, blk, wp, single))
                for blk, wp, single in variants[n]]  # fmt: skip

    _time_fwd_rounds(s, part, shapes, make_runs)


def _time_fwd_rounds(s: Sweep, part: str, shapes, make_runs) -> None:
    """RMSNorm forward: torch.compile and normlab (the benchmark's builds) and the kernels of
    ``make_runs(m, n, x, y, w, rstd)`` (a list of (case fields, run)), on fresh inputs every
    round, six rounds, the order rotated."""
    from normlab.bench import registry

    for round_, (m, n) in itertools.product(range(6), shapes):
        case = {"op": "rms_norm", "M": m, "N": n, "round": round_}
        runs = [({"kernel": impl}, registry.get("rms_norm", impl).build(
            m, n, torch.bfloat16, "fwd", "cuda")) for impl in ("compile", "normlab")]  # fmt: skip
        x, w, _, _ = norm_inputs(m, n, True)
        y = torch.empty_like(x)
        rstd = torch.empty(m, device=x.device, dtype=torch.float32)
        runs += make_runs(m, n, x, y, w, rstd)
        k = round_ % len(runs)
        for extra, run in runs[k:] + runs[:k]:
            s.time(part, {**case, **extra}, run, reps=12)
        del runs, x, w, y, rstd
        s.save()


def part_fwd_static_cols(s: Sweep) -> None:
    """RMSNorm forward with the row width a compile-time constant, as torch.compile specialises
    its kernel to the static shape: ``ab/ab_static.py`` (untracked; the run keeps its source in
    meta.ab_source), the forward kernel's RMSNorm path with n_cols constexpr against the same
    code with n_cols a runtime argument and the production kernel (``.fn``), at the default's
    (chunk, warps) per shape, against normlab and torch.compile, six rounds rotated."""
    path = Path(ROOT) / "ab" / "ab_static.py"
    ab = _load_module(path)
    s.data["meta"]["ab_source"] = path.read_text()
    configs_ = {(32768, 8192): (4096, 16), (1024, 8192): (4096, 8), (16384, 1024): (512, 2),
                (4096, 4096): (2048, 8), (512, 16384): (4096, 16), (32768, 1024): (512, 2)}

    def make_runs(m, n, x, y, w, rstd):
        blk, wp = configs_[(m, n)]
        single, common = blk >= n, {"block": blk, "warps": wp}
        launch = {"BLOCK_SIZE": blk, "SINGLE_BLOCK": single, "num_warps": wp}
        args = (x, y, w, rstd, x.stride(0), y.stride(0), EPS)
        return [({"kernel": "static", **common},
                 functools.partial(ab.rms_fwd_static[(m,)], *args, n_cols=n, **launch)),
                ({"kernel": "dynamic", **common},
                 functools.partial(ab.rms_fwd_dynamic[(m,)], *args, n, **launch)),
                ({"kernel": "production", **common},
                 _production_fwd(m, n, x, y, w, rstd, blk, wp, single))]  # fmt: skip

    _time_fwd_rounds(s, "fwd-static-cols", tuple(configs_), make_runs)


def part_narrow_recompute_check(s: Sweep) -> None:
    """The agreement of ``narrow_recompute`` alone, at the recomputing backward's configured tile,
    every width 16-256, both norms."""
    for is_rms, n in itertools.product((True, False), (16, 32, 64, 128, 256)):
        x, w, b, dy = norm_inputs(NARROW_ROWS, n, is_rms)
        _narrow_recompute_agreement(s, "rms_norm" if is_rms else "layer_norm", n, x, w, b, dy,
                                    is_rms)  # fmt: skip
        del x, w, b, dy
    s.save()


def part_narrow_recompute_tiles(s: Sweep) -> None:
    """The block-row backward recomputing mean/rstd, over tile elements x warps x accumulator x
    prefetch at 7,864,320 rows (LayerNorm at 16-256 columns, RMSNorm at 128 and 256), with the
    registers and spills of each compiled kernel, against the default tile reading the stored
    statistics, two interleaved rounds."""
    saved = NR._block_row_bwd_kernel
    grid = [(e, wp, acc, pf) for e, wp, acc, pf in
            itertools.product((1024, 2048, 4096), (2, 4, 8), (True, False), (False, True))
            if e == 2048 or not pf]  # fmt: skip
    cases = [(False, n) for n in (16, 32, 64, 128, 256)] + [(True, 128), (True, 256)]
    try:
        NR._block_row_bwd_kernel = cap_k = _Capture(saved)
        for round_, (is_rms, n) in itertools.product(range(2), cases):
            op = "rms_norm" if is_rms else "layer_norm"
            case = {"op": op, "M": NARROW_ROWS, "N": n, "round": round_, "direction": "bwd"}
            x, w, b, dy = norm_inputs(NARROW_ROWS, n, is_rms)
            _, mean, rstd = NR._fwd(x, w, b, EPS, is_rms, configs.block_row_fwd_config(n, is_rms))
            default = configs.block_row_bwd_config(n)
            s.time("narrow-recompute-tiles", {**case, "stats": "stored", "default": True},
                   functools.partial(NR._bwd, dy, x, w, b is not None, mean, rstd, is_rms,
                                     default), reps=8)  # fmt: skip
            for elems, wp, acc, pf in grid:
                cfg = configs.block_row_bwd_config(n, tile_elems=elems, num_warps=wp,
                                                   acc_tile=acc, prefetch=pf)  # fmt: skip
                run = functools.partial(NR._bwd, dy, x, w, b is not None, None, None, is_rms, cfg,
                                        eps=EPS)  # fmt: skip
                run()
                extra = {"stats": "recomputed", "tile_elems": elems, "block_rows": cfg.block_rows,
                         "warps": wp, "acc_tile": acc, "prefetch": pf,
                         "n_regs": getattr(cap_k.compiled, "n_regs", None),
                         "n_spills": getattr(cap_k.compiled, "n_spills", None)}  # fmt: skip
                s.time("narrow-recompute-tiles", {**case, **extra}, run, reps=8)
            del x, w, b, dy, mean, rstd
            s.save()
    finally:
        NR._block_row_bwd_kernel = saved


def part_fwd_wide_tiles(s: Sweep) -> None:
    """The block-row forward at 512 columns (where layout="auto" runs one row per program) over
    row counts, and short tiles at 256 columns, against the default and torch.compile, two
    interleaved rounds."""
    cases = [(512, m) for m in (16384, 65536, 262144, 1048576, NARROW_ROWS)] + [(256, NARROW_ROWS)]
    tiles = {512: ((4, 4), (8, 4), (8, 8), (16, 4), (16, 8), (32, 8)),
             256: ((4, 2), (4, 4), (8, 2), (8, 4), (8, 8))}
    for round_, is_rms, (n, m) in itertools.product(range(2), (True, False), cases):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "M": m, "N": n, "round": round_}
        _time_default_and_compile(s, "fwd-wide-tiles", case, reps=8)
        _time_block_row_tiles(s, "fwd-wide-tiles", case, is_rms, tiles[n])
        s.save()


def part_peer_rounds(s: Sweep) -> None:
    """The peer shapes where torch.compile led in the records, normlab's default against it in
    three interleaved rounds of one process (run-to-run spread against a real gap)."""
    cases = (("rms_norm", "fwd", 1024, 8192), ("rms_norm", "fwd", 32768, 8192),
             ("rms_norm", "bwd", 512, 16384), ("layer_norm", "bwd", 512, 16384),
             ("layer_norm", "bwd", 2048, 16384))
    for round_, (op, direction, m, n) in itertools.product(range(3), cases):
        case = {"op": op, "direction": direction, "M": m, "N": n, "round": round_}
        _time_default_and_compile(s, "peer-rounds", case, direction)
    s.save()


def part_fwd_ties(s: Sweep) -> None:
    """The forwards whose records put normlab's default within 2% of torch.compile either way,
    six interleaved rounds of one process, the order of the two flipped every round."""
    cases = (("rms_norm", 32768, 8192), ("rms_norm", 1024, 8192), ("rms_norm", 16384, 1024),
             ("layer_norm", 16384, 1024), ("layer_norm", 8192, 1024),
             ("layer_norm", NARROW_ROWS, 16), ("layer_norm", NARROW_ROWS, 64),
             ("rms_norm", NARROW_ROWS, 16), ("rms_norm", NARROW_ROWS, 64))
    for round_, (op, m, n) in itertools.product(range(6), cases):
        order = ("compile", "normlab")[:: 1 if round_ % 2 == 0 else -1]
        _time_default_and_compile(s, "fwd-ties", {"op": op, "M": m, "N": n, "round": round_},
                                  order=order)
    s.save()


def part_reduce_tiles(s: Sweep) -> None:
    """The partial-sum reduce kernel's tile (BLOCK_M partial rows x BLOCK_N columns, warps) inside
    the default backward at the 11 peer shapes, both norms: the whole backward timed, the reduce
    kernel read from the breakdown. (Run at 489fb1c, when the default was one 128 x 16 / 8-warp
    tile, 128 x 8 up to 1024 columns.)"""
    tiles = [(bm, bn, wp) for bn, bm in itertools.product((8, 16, 32, 64, 128), (16, 32, 64, 128))
             if 512 <= bm * bn <= 4096 for wp in (4, 8)]  # fmt: skip
    saved = configs.NORM_REDUCE_TILES
    try:
        for (m, n), is_rms in itertools.product(PEERS, (True, False)):
            op = "rms_norm" if is_rms else "layer_norm"
            x, w, b, dy = norm_inputs(m, n, is_rms)
            _, mean, rstd = K.norm_forward(x, w, b, EPS, is_rms)
            for tile in [None] + tiles:
                configs.NORM_REDUCE_TILES = saved if tile is None else {
                    k: ((1 << 62, tile),) for k in saved
                }  # fmt: skip
                name = "default" if tile is None else "{}x{}w{}".format(*tile)
                s.time("reduce-tiles", {"op": op, "M": m, "N": n, "tile": name},
                       lambda: K.norm_backward(dy, x, w, b, mean, rstd, is_rms), reps=10)  # noqa: B023, F821
            del x, w, b, dy, mean, rstd
            s.save()
    finally:
        configs.NORM_REDUCE_TILES = saved


def part_bwd_512(s: Sweep) -> None:
    """7,864,320 rows x 512 columns (the row path's backward, 0.97x of torch.compile in the
    records): the persistent single-pass backward's tile rows x warps x programs per SM x
    prefetch, against the default and torch.compile, two interleaved rounds."""
    for round_, is_rms in itertools.product(range(2), (True, False)):
        op = "rms_norm" if is_rms else "layer_norm"
        case = {"op": op, "direction": "bwd", "M": NARROW_ROWS, "N": 512, "round": round_}
        _time_default_and_compile(s, "bwd-512", case, "bwd", reps=8)
        x, w, b, dy = norm_inputs(NARROW_ROWS, 512, is_rms)
        _, mean, rstd = K.norm_forward(x, w, b, EPS, is_rms)
        for br, wp, pps, pf in itertools.product((2, 4, 8, 16), (4, 8), (2, 4, 8), (True, False)):
            kw = {"block_rows": br, "num_warps": wp, "programs_per_sm": pps, "prefetch": pf}
            s.time("bwd-512", {**case, "kernel": "persistent", **kw},
                   lambda: K.norm_backward(dy, x, w, b, mean, rstd, is_rms, **kw), reps=8)  # noqa: B023, F821
        del x, w, b, dy, mean, rstd
        s.save()


def part_fwd_looped_variants(s: Sweep) -> None:
    """RMSNorm at 8192 columns, where torch.compile's looped row stays ahead of ours: the looped
    row from ``ab/ab_looped.py`` (untracked A/B kernel; the run keeps its source in
    meta.ab_source) without chunk masks, with int32 offsets, without the weight's eviction hint,
    at chunk x warps 4096 x 16 and 8192 x 32, against the default and torch.compile, three
    interleaved rounds."""
    path = Path(ROOT) / "ab" / "ab_looped.py"
    ab = _load_module(path)
    s.data["meta"]["ab_source"] = path.read_text()
    variants = {"masked": (1, 1, 1), "nomask": (0, 1, 1), "nomask-int32": (0, 0, 1),
                "nomask-int32-nowhint": (0, 0, 0), "masked-nowhint": (1, 1, 0)}
    for round_, m in itertools.product(range(3), (1024, 32768)):
        n = 8192
        case = {"op": "rms_norm", "M": m, "N": n, "round": round_}
        _time_default_and_compile(s, "fwd-looped-variants", case)
        x, w, _, _ = norm_inputs(m, n, True)
        y = torch.empty_like(x)
        rstd = torch.empty(m, device="cuda", dtype=torch.float32)
        for (name, (masked, int64, whint)), (blk, wp) in itertools.product(
            variants.items(), ((4096, 16), (8192, 32))
        ):
            def run(masked=masked, int64=int64, whint=whint, blk=blk, wp=wp):
                ab.rms_looped_variant[(m,)](x, y, w, rstd, n, EPS, BLOCK=blk,  # noqa: B023, F821
                                            MASKED=bool(masked), INT64=bool(int64),
                                            W_HINT=bool(whint), num_warps=wp)
            s.time("fwd-looped-variants", {**case, "kernel": name, "block": blk, "warps": wp}, run)
        del x, w, y, rstd
        s.save()


def _bwd_case(s, part, op, m, n, is_rms, inputs, **kw):
    x, w, b, dy = inputs
    y, mean, rstd = K.norm_forward(x, w, b, EPS, is_rms)
    return s.time(part, {"op": op, "M": m, "N": n, **kw},
                  lambda: K.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy="persistent", **kw))


def part_bwd(s: Sweep) -> None:
    # 32768 x 8192: the 80%-of-copy target.
    for is_rms in (True, False):
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(32768, 8192, is_rms)
        for st, pps, wp, br in itertools.product((1, 2), (1, 2), (16, 32), (1, 2)):
            _bwd_case(s, "bwd-8192", op, 32768, 8192, is_rms, inputs, loop_stages=st,
                      programs_per_sm=pps, num_warps=wp, block_rows=br)
        del inputs
    s.save()
    # N = 16384 (and RMS 1024 x 8192, its closest call).
    for is_rms, m, n in ((False, 512, 16384), (False, 2048, 16384), (True, 512, 16384),
                         (True, 1024, 8192)):
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(m, n, is_rms)
        if n == 16384 and not is_rms:
            for br, bc, wp, pps in itertools.product((2, 4, 8), (4096, 8192), (16, 32), (1, 2)):
                if br * bc > 32768:
                    continue
                _bwd_case(s, "bwd-two-pass", op, m, n, is_rms, inputs, two_pass=True,
                          block_rows=br, block_cols=bc, num_warps=wp, programs_per_sm=pps)
        for wp, pps, st in itertools.product((16, 32), (1, 2), (1, 2)):
            _bwd_case(s, "bwd-single-pass", op, m, n, is_rms, inputs, two_pass=False,
                      num_warps=wp, programs_per_sm=pps, loop_stages=st)
        del inputs
    s.save()
    # N <= 2048: can 2 programs per SM (workspace 2 x SMs x N) match 4 with another tile?
    for is_rms, (m, n) in itertools.product((True, False), ((8192, 1024), (32768, 1024), (16384, 2048))):
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(m, n, is_rms)
        for pps, br, wp in [(4, None, None)] + list(itertools.product((2,), (1, 2, 4), (4, 8))):
            _bwd_case(s, "bwd-workspace", op, m, n, is_rms, inputs, programs_per_sm=pps,
                      block_rows=br, num_warps=wp)
        del inputs


def part_narrow(s: Sweep) -> None:
    for is_rms, n in itertools.product((False, True), (16, 32, 64, 256)):
        op = "rms" if is_rms else "ln"
        x, w, b, dy = norm_inputs(NARROW_ROWS, n, is_rms)
        for tile, rows, wp in itertools.product((4096, 8192), (64, 256), (4, 8)):
            cfg = configs.block_row_fwd_config(n, is_rms, tile_elems=tile, max_rows=rows,
                                               num_warps=wp)
            if tile // (1 << (n - 1).bit_length()) > rows * 2:  # same tile as a smaller cap
                continue
            s.time("narrow-fwd", {"op": op, "M": NARROW_ROWS, "N": n, "tile": tile,
                                  "max_rows": rows, "warps": wp, "block_rows": cfg.block_rows},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg), reps=10)
        if n in (16, 64):
            y, mean, rstd = K.norm_forward(x, w, b, EPS, is_rms)
            for br in (1, None):
                s.time("narrow-row-bwd", {"op": op, "M": NARROW_ROWS, "N": n, "block_rows": br},
                       lambda: K.norm_backward(dy, x, w, b, mean, rstd, is_rms,
                                               strategy="persistent", block_rows=br), reps=3)
        del x, w, b, dy
        s.save()


def part_prefetch(s: Sweep) -> None:
    """Persistent single-pass backward with and without the next-tile register prefetch."""
    for is_rms, (m, n) in itertools.product((True, False), PEERS):
        if n > 8192 and not is_rms:
            continue
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(m, n, is_rms)
        for pf in (False, True):
            _bwd_case(s, "bwd-prefetch", op, m, n, is_rms, inputs, prefetch=pf)
        if n >= 4096:
            for pf, wp, pps in itertools.product((True,), (8, 16, 32), (1, 2)):
                _bwd_case(s, "bwd-prefetch", op, m, n, is_rms, inputs, prefetch=pf,
                          num_warps=wp, programs_per_sm=pps)
        del inputs
    s.save()


def part_prefetch_workspace(s: Sweep) -> None:
    """With the prefetch, can 2 programs per SM (workspace 2 x SMs x N) match 4 at N <= 2048?"""
    for is_rms, (m, n) in itertools.product((True, False), ((8192, 1024), (16384, 1024),
                                                          (32768, 1024), (16384, 2048))):
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(m, n, is_rms)
        for pps, br, wp in itertools.product((2, 4), (None, 4, 8), (None, 8)):
            _bwd_case(s, "bwd-prefetch-workspace", op, m, n, is_rms, inputs, prefetch=True,
                      programs_per_sm=pps, block_rows=br, num_warps=wp)
        del inputs
    s.save()


def part_fwd_multirow(s: Sweep) -> None:
    """Row-per-program forward vs the block-row (multi-row tile) forward at 1024-4096 columns."""
    for is_rms, (m, n) in itertools.product((True, False), ((8192, 1024), (16384, 1024),
                                                          (32768, 1024), (16384, 2048),
                                                          (2048, 4096), (8192, 4096))):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, n, is_rms)
        s.time("fwd-multirow", {"op": op, "M": m, "N": n, "kernel": "row"},
               lambda: K.norm_forward(x, w, b, EPS, is_rms))
        for rows, wp in itertools.product((2, 4, 8), (4, 8, 16)):
            if rows * n > 16384:
                continue
            cfg = configs.BlockRowFwdConfig(rows, wp)
            s.time("fwd-multirow", {"op": op, "M": m, "N": n, "kernel": "block_row",
                                    "block_rows": rows, "warps": wp},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg))
        del x, w, b
    s.save()


def part_narrow128(s: Sweep) -> None:
    """The default forward tile at 128 columns (8192 elements) against the 4096 one."""
    for is_rms in (False, True):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(NARROW_ROWS, 128, is_rms)
        for tile, wp in ((8192, None), (4096, None), (8192, 4), (4096, 4)):
            cfg = configs.block_row_fwd_config(128, is_rms, tile_elems=tile, num_warps=wp)
            s.time("narrow-fwd", {"op": op, "M": NARROW_ROWS, "N": 128, "tile": tile,
                                  "max_rows": cfg.block_rows, "warps": cfg.num_warps,
                                  "block_rows": cfg.block_rows},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg), reps=10)
        del x, w, b


def _load_module(path: Path):
    spec = importlib.util.spec_from_file_location(f"ab_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


ENTROPY_AB_FORMS = (("fused", 4096), ("fused", 2048), ("chunked", 2048), ("chunked", 4096),
                    ("split", None))


def _loss_step(fn, x, other, form, cap):
    """One timed loss call: forward and the gradient wrt x."""
    return torch.autograd.grad(fn(x, other, form=form, block_cap=cap), x)


def _agreement(first: dict, key, fn, x, other, form, cap) -> dict:
    """Run one loss call; its loss and max |grad| difference from the first call under ``key``
    (the same inputs), which ``first`` keeps."""
    out = fn(x, other, form=form, block_cap=cap)
    (grad,) = torch.autograd.grad(out, x)
    ref_out, ref_grad = first.setdefault(key, (out.detach().float(), grad.float()))
    return {"loss_diff": float((out.detach().float() - ref_out).abs()),
            "grad_max_diff": float((grad.float() - ref_grad).abs().max())}


def part_entropy(s: Sweep, variants: list[Path], vocabs: list[int], *,
                 losses=("reverse_kl", "soft_cross_entropy", "cross_entropy"),
                 forms=ENTROPY_AB_FORMS, rounds: int = 1, part: str = "entropy") -> None:
    """A/B of module variants: every loss x (form, cap) x variant per vocabulary, ``rounds``
    interleaved rounds, with each variant's agreement with the first on the same inputs (the
    loss and the max |grad| difference)."""
    mods = {p.stem: _load_module(p) for p in variants}
    g = torch.Generator(device="cuda").manual_seed(0)
    first: dict = {}
    for v in vocabs:
        x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
        labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
        for round_, loss, (form, cap), (name, mod) in itertools.product(
            range(rounds), losses, forms, mods.items()
        ):
            fn = getattr(mod, loss)
            other = labels if loss == "cross_entropy" else t
            case = {"op": loss, "M": 4096, "N": v, "variant": name, "form": form, "cap": cap,
                    **_agreement(first, (loss, form, cap, v), fn, x, other, form, cap)}
            if rounds > 1:
                case["round"] = round_
            s.time(part, case, functools.partial(_loss_step, fn, x, other, form, cap))
        del x, t, labels
        first.clear()  # the reference gradients of this vocabulary
        s.save()


def part_entropy_fused(s: Sweep, variants: list[Path], vocabs: list[int]) -> None:
    """``entropy`` on the fused form only: reverse KL and soft CE at caps 2048 and 4096, two
    interleaved rounds."""
    part_entropy(s, variants, vocabs, losses=("reverse_kl", "soft_cross_entropy"),
                 forms=(("fused", 2048), ("fused", 4096)), rounds=2, part="entropy-fused")


def part_losses(s: Sweep) -> None:
    """normlab's own losses (this checkout): fused tiles x warps, and split, per vocab."""
    g = torch.Generator(device="cuda").manual_seed(0)
    tables = {"reverse_kl": configs.ENTROPY_FUSED_WARPS,
              "soft_cross_entropy": configs.ENTROPY_FUSED_WARPS,
              "cross_entropy": configs.ENTROPY_FUSED_WARPS_LABEL}
    saved = {k: dict(v) for k, v in tables.items()}
    variants = {"reverse_kl": [(2048, 4), (4096, 2), (4096, 4), (4096, 8), (8192, 8), (16384, 16)],
                "cross_entropy": [(2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16),
                                  (16384, 16), (32768, 32)]}
    variants["soft_cross_entropy"] = variants["reverse_kl"]
    for v in (32768, 131072, 50257, 151936):
        x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
        labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
        for loss in ("reverse_kl", "soft_cross_entropy", "cross_entropy"):
            fn = getattr(normlab, loss)
            other = labels if loss == "cross_entropy" else t
            for cap, warps in variants[loss] + [(None, None)]:
                form = "split" if cap is None else "fused"
                if cap is not None:
                    tables[loss][cap] = warps

                def call():
                    return torch.autograd.grad(fn(x, other, form=form, block_cap=cap), x)

                s.time("losses", {"op": loss, "M": 4096, "N": v, "form": form, "cap": cap,
                                  "warps": warps}, call)
                tables[loss].clear()
                tables[loss].update(saved[loss])
        del x, t
        s.save()


def part_paired(s: Sweep) -> None:
    """Persistent backward at N <= 2048 (4 programs per SM): one partial row per program vs two
    programs adding into one zeroed row (workspace 2 x SMs x N); and 2 programs per SM."""
    for is_rms, (m, n) in itertools.product((True, False), ((8192, 1024), (16384, 1024),
                                                          (32768, 1024), (16384, 2048))):
        op = "rms" if is_rms else "ln"
        inputs = norm_inputs(m, n, is_rms)
        for pps, paired in ((4, False), (4, True), (2, False)):
            _bwd_case(s, "bwd-paired", op, m, n, is_rms, inputs, programs_per_sm=pps,
                      paired_partials=paired)
        del inputs
    s.save()


def _chunked_agreement(fn, x, other, cap, out_ref, grad_ref, case: dict):
    """Run the chunked form once (reduction "none"); note its max loss and gradient difference
    from the reference in ``case``; return (loss rows, gradient)."""
    out = fn(x, other, form="chunked", block_cap=cap, reduction="none")
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.cuda.synchronize()
    case["loss_max_diff"] = float((out - out_ref).abs().max())
    case["grad_max_diff"] = float((grad.float() - grad_ref.float()).abs().max())
    return out, grad


def part_chunked(s: Sweep) -> None:
    """The chunked loss form (one program per row chunk, meeting at a per-row counter) against
    the default: tiles x tiles per chunk x warps, per loss and vocab. Each case also records its
    agreement with the default form and whether the two-launch variant is bitwise equal."""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    saved = (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS)
    by_block, configs.ENTROPY_CHUNKED_TILES_BY_BLOCK = configs.ENTROPY_CHUNKED_TILES_BY_BLOCK, {}
    one_launch = E._launch_chunked
    for v in (32768, 65536, 131072, 50257, 151936):
        x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
        labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
        labels[::7] = -100
        for loss in ("reverse_kl", "soft_cross_entropy", "cross_entropy"):
            fn = getattr(normlab, loss)
            other = labels if loss == "cross_entropy" else t
            out_ref = fn(x, other, reduction="none")
            (grad_ref,) = torch.autograd.grad(out_ref.sum(), x)
            s.time("chunked", {"op": loss, "M": 4096, "N": v, "form": "auto", "cap": None},
                   lambda: torch.autograd.grad(fn(x, other), x))  # noqa: B023
            for cap, tiles, warps in itertools.product((2048, 4096, 8192), (1, 2, 4), (4, 8)):
                configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS = tiles, warps
                case = {"op": loss, "M": 4096, "N": v, "form": "chunked", "cap": cap,
                        "tiles": tiles, "warps": warps}
                try:
                    out, grad = _chunked_agreement(fn, x, other, cap, out_ref, grad_ref, case)
                    if tiles == 1 and warps == 4:
                        E._launch_chunked = functools.partial(one_launch, phases=2)
                        out2 = fn(x, other, form="chunked", block_cap=cap, reduction="none")
                        (grad2,) = torch.autograd.grad(out2.sum(), x)
                        E._launch_chunked = one_launch
                        case["two_launch_bitwise"] = bool(torch.equal(out, out2)
                                                          and torch.equal(grad, grad2))
                finally:
                    E._launch_chunked = one_launch
                s.time("chunked", case, lambda: torch.autograd.grad(  # noqa: B023
                    fn(x, other, form="chunked", block_cap=cap), x))  # noqa: B023
            configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS = saved
            s.save()
            print(f"chunked {loss} {v}: done, {s.left():.0f} s left", flush=True)
        del x, t
    configs.ENTROPY_CHUNKED_TILES_BY_BLOCK = by_block


def _forced_layouts(n_tiles: int) -> dict[str, tuple[int, int, int]]:
    """Chunk layouts (chunk_tiles, n_long, n_chunks) of ``n_tiles`` tiles: k-tile chunks with a
    short last one ("uniform k"), and n chunks of whole tiles differing by at most one
    ("balanced n", n = the row's tiles over 3, 4 and 5)."""
    out = {f"uniform{k}": (k, 0, -(-n_tiles // k)) for k in (3, 4, 5, 6, 8) if k < n_tiles}
    for per in (3, 4, 5):
        n = max(1, round(n_tiles / per))
        out[f"balanced{n}"] = (n_tiles // n, n_tiles % n, n)
    return out


def part_chunked_layouts(s: Sweep) -> None:
    """Reverse KL and soft CE, chunked form at tile 2048: chunk layouts forced (uniform k-tile
    chunks, balanced chunks of unequal length) at vocabularies exactly tiled (49152, 65536),
    ragged (50256), unaligned (50257) and wide (151936), against the default layout and the
    fused form, two interleaved rounds; each case with its gradient's max difference from the
    fused form's."""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    default_layout = E.chunk_layout
    try:
        for v in (50257, 50256, 49152, 65536, 151936):
            x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
            frame = E._frame_align(x, t, None, 2048)["FRAME"]  # the columns a frame may lead by
            n_tiles = -(-(v + frame - 1) // 2048)
            layouts = {"default": None, **_forced_layouts(n_tiles)}
            for round_, loss in itertools.product(range(2), ("reverse_kl", "soft_cross_entropy")):
                fn = getattr(normlab, loss)
                ref = fn(x, t, form="fused", block_cap=2048, reduction="none")
                (grad_ref,) = torch.autograd.grad(ref.sum(), x)
                s.time("chunked-layouts", {"op": loss, "M": 4096, "N": v, "form": "fused",
                                           "cap": 2048, "round": round_},
                       functools.partial(_loss_step, fn, x, t, "fused", 2048))
                for name, lay in layouts.items():
                    E.chunk_layout = default_layout if lay is None else (
                        lambda *a, _lay=lay: E.ChunkLayout(*_lay))
                    case = {"op": loss, "M": 4096, "N": v, "form": "chunked", "cap": 2048,
                            "layout": name, "chunk_tiles_long_n": lay, "round": round_}
                    try:
                        _chunked_agreement(fn, x, t, 2048, ref, grad_ref, case)
                    except Exception as exc:
                        s.data["errors"].append({"part": "chunked-layouts", **case,
                                                 "error": f"{type(exc).__name__}: {exc}"})
                        continue
                    s.time("chunked-layouts", case,
                           functools.partial(_loss_step, fn, x, t, "chunked", 2048))
                E.chunk_layout = default_layout
                s.save()
            print(f"chunked_layouts {v}: done, {s.left():.0f} s left", flush=True)
            del x, t
    finally:
        E.chunk_layout = default_layout


class _Capture:
    """Stands in for a @triton.jit kernel: launches it and keeps the compiled kernel it returns
    (registers and spills per thread)."""

    def __init__(self, kernel):
        self.kernel, self.compiled = kernel, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.compiled = self.kernel[grid](*args, **kwargs)
            return self.compiled

        return launch


def part_chunked_occupancy(s: Sweep) -> None:
    """The chunked loss form is latency-bound (each program's chain: ticket, loads, publish, wait,
    merge): programs resident per SM. Tile x warps x tiles per chunk and a register cap per
    thread (maxnreg), reverse KL and label CE, with registers/spills of each compiled kernel and
    agreement with form="fused". (At commit 16b07d0 it also crossed waiting on volatile loads
    with waiting on acquire atomics: "poll_loads" in the recorded run.)"""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    saved = (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
             configs.ENTROPY_CHUNKED_MAXNREG, configs.ENTROPY_CHUNKED_TILES_BY_BLOCK)
    configs.ENTROPY_CHUNKED_TILES_BY_BLOCK = {}  # the cases' tiles per chunk at every tile
    kernel = E._entropy_chunked_kernel
    layouts = ((2048, 4, 4), (2048, 4, 2), (2048, 4, 8), (2048, 2, 4), (1024, 2, 8), (4096, 4, 2))
    try:
        E._entropy_chunked_kernel = cap_k = _Capture(kernel)
        for loss, v in itertools.product(("reverse_kl", "cross_entropy"), (131072, 65536, 32768)):
            x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            fn = getattr(normlab, loss)
            if loss == "cross_entropy":
                other = torch.randint(0, v, (4096,), device="cuda", generator=g)
            else:
                other = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
            out_ref = fn(x, other, form="fused", reduction="none")
            (grad_ref,) = torch.autograd.grad(out_ref.sum(), x)
            s.time("chunked-occupancy", {"op": loss, "M": 4096, "N": v, "form": "auto"},
                   lambda: torch.autograd.grad(fn(x, other), x))  # noqa: B023
            for (cap, warps, tiles), maxnreg in itertools.product(layouts, (None, 64, 48, 40)):
                (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
                 configs.ENTROPY_CHUNKED_MAXNREG) = (tiles, warps, {cap: maxnreg} if maxnreg else {})
                case = {"op": loss, "M": 4096, "N": v, "form": "chunked", "cap": cap,
                        "warps": warps, "tiles": tiles, "maxnreg": maxnreg}
                try:
                    _chunked_agreement(fn, x, other, cap, out_ref, grad_ref, case)
                    case["n_regs"] = getattr(cap_k.compiled, "n_regs", None)
                    case["n_spills"] = getattr(cap_k.compiled, "n_spills", None)
                except Exception as exc:
                    s.data["errors"].append({"part": "chunked-occupancy", **case,
                                             "error": f"{type(exc).__name__}: {exc}"})
                    continue
                s.time("chunked-occupancy", case, lambda: torch.autograd.grad(  # noqa: B023
                    fn(x, other, form="chunked", block_cap=cap), x))  # noqa: B023
            s.save()
            print(f"chunked_occupancy {loss} {v}: done, {s.left():.0f} s left", flush=True)
            del x, other
    finally:
        E._entropy_chunked_kernel = kernel
        (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
         configs.ENTROPY_CHUNKED_MAXNREG, configs.ENTROPY_CHUNKED_TILES_BY_BLOCK) = saved


def _chunked_cases(s: Sweep, part: str, vocabs, losses, cases, rounds: int = 1) -> None:
    """The chunked form under (tile, tiles per chunk, warps, register cap) ``cases``, per
    vocabulary and loss, ``rounds`` interleaved rounds, with registers/spills of each compiled
    kernel, its chunk layout and its agreement with form="fused" at tile 2048; the fused form
    at tiles 2048 and 1024 beside."""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    saved = (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
             configs.ENTROPY_CHUNKED_MAXNREG, configs.ENTROPY_CHUNKED_TILES_BY_BLOCK)
    configs.ENTROPY_CHUNKED_TILES_BY_BLOCK = {}  # the cases' tiles per chunk at every tile
    kernel = E._entropy_chunked_kernel
    try:
        E._entropy_chunked_kernel = cap_k = _Capture(kernel)
        for v in vocabs:
            x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
            labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
            frame = E._frame_align(x, t, None, 2048)["FRAME"]
            for round_, loss in itertools.product(range(rounds), losses):
                fn = getattr(normlab, loss)
                other = labels if loss == "cross_entropy" else t
                out_ref = fn(x, other, form="fused", block_cap=2048, reduction="none")
                (grad_ref,) = torch.autograd.grad(out_ref.sum(), x)
                for cap in (2048, 1024):
                    s.time(part, {"op": loss, "M": 4096, "N": v, "form": "fused", "cap": cap,
                                  "round": round_},
                           functools.partial(_loss_step, fn, x, other, "fused", cap))
                for cap, tiles, warps, maxnreg in cases:
                    (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
                     configs.ENTROPY_CHUNKED_MAXNREG) = (tiles, warps,
                                                         {cap: maxnreg} if maxnreg else {})
                    case = {"op": loss, "M": 4096, "N": v, "form": "chunked", "cap": cap,
                            "tiles": tiles, "warps": warps, "maxnreg": maxnreg, "round": round_,
                            "layout": list(E.chunk_layout(v + frame - 1, cap, tiles,
                                                          _runtime.sm_count()))}
                    try:
                        _chunked_agreement(fn, x, other, cap, out_ref, grad_ref, case)
                        case["n_regs"] = getattr(cap_k.compiled, "n_regs", None)
                        case["n_spills"] = getattr(cap_k.compiled, "n_spills", None)
                    except Exception as exc:
                        s.data["errors"].append({"part": part, **case,
                                                 "error": f"{type(exc).__name__}: {exc}"})
                        continue
                    s.time(part, case, functools.partial(_loss_step, fn, x, other, "chunked", cap))
                s.save()
            print(f"{part} {v}: done, {s.left():.0f} s left", flush=True)
            del x, t, labels
    finally:
        E._entropy_chunked_kernel = kernel
        (configs.ENTROPY_CHUNKED_TILES, configs.ENTROPY_CHUNKED_WARPS,
         configs.ENTROPY_CHUNKED_MAXNREG, configs.ENTROPY_CHUNKED_TILES_BY_BLOCK) = saved


def part_chunked_lanes(s: Sweep) -> None:
    """The chunked form with lane statistics (kernels/entropy.py, _online_tile): tile x tiles per
    chunk x warps x register cap at V = 50257 (aligned frames), 50256, 65536 and 32768, reverse
    KL and soft CE."""
    cases = ((2048, 4, 4, 64), (2048, 4, 4, None), (2048, 4, 4, 80), (2048, 3, 4, 64),
             (2048, 6, 4, 64), (2048, 8, 4, 64), (1024, 4, 4, None), (1024, 4, 4, 64),
             (1024, 8, 4, None), (1024, 10, 4, None), (1024, 4, 2, None), (1024, 8, 2, None))
    _chunked_cases(s, "chunked-lanes", (50257, 50256, 65536, 32768),
                   ("reverse_kl", "soft_cross_entropy"), cases)


def part_chunked_lanes_unaligned(s: Sweep) -> None:
    """``chunked_lanes`` for unaligned vocabularies (50257, 32001): tile 1024 at 6-12 tiles per
    chunk against tile 2048 under 64-80 register caps, every loss, two interleaved rounds."""
    cases = ((1024, 6, 4, None), (1024, 8, 4, None), (1024, 10, 4, None), (1024, 12, 4, None),
             (2048, 4, 4, 64), (2048, 4, 4, 72), (2048, 4, 4, 80))
    _chunked_cases(s, "chunked-lanes-unaligned", (50257, 32001),
                   ("reverse_kl", "soft_cross_entropy", "cross_entropy"), cases, rounds=2)


def part_chunked_unaligned(s: Sweep) -> None:
    """The chunked form at V = 50257 (rows off 16-byte boundaries: the aligned frames, ALIGN 8)
    against 50256 (ALIGN 1), reverse KL and soft CE at tile 2048: registers and spills of each
    compiled kernel under register caps (maxnreg), two interleaved rounds."""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    saved = configs.ENTROPY_CHUNKED_MAXNREG
    kernel = E._entropy_chunked_kernel
    try:
        E._entropy_chunked_kernel = cap_k = _Capture(kernel)
        for v in (50257, 50256):
            x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
            for round_, loss, maxnreg in itertools.product(range(2), ("reverse_kl", "soft_cross_entropy"),
                                                           (64, None, 72, 80, 96)):
                fn = getattr(normlab, loss)
                configs.ENTROPY_CHUNKED_MAXNREG = {2048: maxnreg} if maxnreg else {}
                _loss_step(fn, x, t, "chunked", 2048)
                case = {"op": loss, "M": 4096, "N": v, "form": "chunked", "cap": 2048,
                        "maxnreg": maxnreg, "round": round_,
                        "n_regs": getattr(cap_k.compiled, "n_regs", None),
                        "n_spills": getattr(cap_k.compiled, "n_spills", None)}
                s.time("chunked-unaligned", case,
                       functools.partial(_loss_step, fn, x, t, "chunked", 2048))
            s.save()
            del x, t
    finally:
        E._entropy_chunked_kernel = kernel
        configs.ENTROPY_CHUNKED_MAXNREG = saved


def part_frame_bytes(s: Sweep) -> None:
    """Unaligned rows (V = 50257, bf16): the frame boundary the kernels read them from
    (configs.ENTROPY_FRAME_BYTES 16 / 32 / 64 / 128) for every loss and form at tiles 2048 and
    4096, two interleaved rounds, each case with its gradient's max difference from the first
    frame's; V = 50256 (no frames) beside them."""
    g = torch.Generator(device="cuda").manual_seed(0)
    saved = configs.ENTROPY_FRAME_BYTES
    forms = (("fused", 2048), ("fused", 4096), ("chunked", 2048), ("chunked", 4096),
             ("split", None))
    first: dict = {}
    try:
        for v in (50257, 50256):
            x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
            t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
            labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
            frames = (16, 32, 64, 128) if v % 8 else (16,)
            for round_, loss, (form, cap), fb in itertools.product(
                    range(2), ("reverse_kl", "soft_cross_entropy", "cross_entropy"), forms, frames):
                configs.ENTROPY_FRAME_BYTES = fb
                fn = getattr(normlab, loss)
                other = labels if loss == "cross_entropy" else t
                case = {"op": loss, "M": 4096, "N": v, "form": form, "cap": cap,
                        "frame_bytes": fb, "round": round_,
                        **_agreement(first, (loss, form, cap, v), fn, x, other, form, cap)}
                s.time("frame-bytes", case, functools.partial(_loss_step, fn, x, other, form, cap))
            s.save()
            del x, t, labels
    finally:
        configs.ENTROPY_FRAME_BYTES = saved


def part_fwd_persistent(s: Sweep) -> None:
    """Forward on a persistent grid (the block-row kernel grid-striding row tiles with a next-tile
    prefetch) against the default forward, at the 11 peer shapes and the narrow widths."""
    peer_shapes = ((512, 16384), (1024, 8192), (2048, 4096), (8192, 1024), (4096, 4096),
                   (16384, 1024), (2048, 16384), (8192, 4096), (16384, 2048), (32768, 1024),
                   (32768, 8192))
    for is_rms, (m, n) in itertools.product((True, False), peer_shapes):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, n, is_rms)
        s.time("fwd-persistent", {"op": op, "M": m, "N": n, "kernel": "default"},
               lambda: K.norm_forward(x, w, b, EPS, is_rms))  # noqa: B023
        for rows, pps in itertools.product((1, 2, 4), (1, 2, 4)):
            elems = rows * (1 << (n - 1).bit_length())
            if elems > 16384:
                continue
            for wp in sorted({max(2, min(32, elems // 1024)), max(4, min(32, elems // 512))}):
                cfg = configs.BlockRowFwdConfig(rows, wp, pps)
                s.time("fwd-persistent", {"op": op, "M": m, "N": n, "kernel": "persistent",
                                          "block_rows": rows, "warps": wp, "programs_per_sm": pps},
                       lambda: NR._fwd(x, w, b, EPS, is_rms, cfg))  # noqa: B023
        del x, w, b
        s.save()
    for is_rms, n in itertools.product((True, False), (16, 32, 64, 128, 256)):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(NARROW_ROWS, n, is_rms)
        base = configs.block_row_fwd_config(n, is_rms)
        for pps in (0, 2, 4, 8):
            cfg = base._replace(programs_per_sm=pps)
            s.time("fwd-persistent", {"op": op, "M": NARROW_ROWS, "N": n, "kernel": "block_row",
                                      "block_rows": cfg.block_rows, "warps": cfg.num_warps,
                                      "programs_per_sm": pps},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg), reps=10)  # noqa: B023
        del x, w, b
        s.save()


def part_fwd_persistent_rows(s: Sweep) -> None:
    """The persistent forward's best configs per width (fwd_persistent) against the default over
    row counts, to place the switch between the two."""
    candidates = {1024: ((4, 4, 4), (4, 8, 4), (2, 4, 4)),
                  2048: ((2, 8, 4), (2, 16, 2), (1, 8, 4), (4, 16, 2)),
                  4096: ((2, 16, 2), (1, 8, 4), (2, 16, 4)),
                  8192: ((1, 16, 2), (2, 32, 1), (1, 8, 2)),
                  16384: ((1, 32, 1), (1, 16, 1))}
    for is_rms, (n, cands), m in itertools.product(
        (True, False), candidates.items(), (256, 1024, 2048, 4096, 8192, 16384, 32768)
    ):
        if m * n > 2**27:
            continue
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, n, is_rms)
        s.time("fwd-persistent-rows", {"op": op, "M": m, "N": n, "kernel": "default"},
               lambda: K.norm_forward(x, w, b, EPS, is_rms))  # noqa: B023
        for rows, wp, pps in cands:
            cfg = configs.BlockRowFwdConfig(rows, wp, pps)
            s.time("fwd-persistent-rows", {"op": op, "M": m, "N": n, "kernel": "persistent",
                                           "block_rows": rows, "warps": wp,
                                           "programs_per_sm": pps},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg))  # noqa: B023
        del x, w, b
    s.save()


def part_fwd_1024(s: Sweep) -> None:
    """1024 columns, many rows (where torch.compile's forward leads): the block-row kernel's tile
    heights x warps, one program per tile, against the default one-row-per-program forward."""
    for is_rms, m in itertools.product((True, False), (8192, 16384, 32768)):
        op = "rms" if is_rms else "ln"
        x, w, b, _ = norm_inputs(m, 1024, is_rms)
        s.time("fwd-1024", {"op": op, "M": m, "N": 1024, "kernel": "default"},
               lambda: K.norm_forward(x, w, b, EPS, is_rms))  # noqa: B023
        for rows, wp in itertools.product((1, 2, 4, 8, 16), (1, 2, 4, 8, 16)):
            if not 4 <= rows * 1024 // (32 * wp) <= 64:  # elements per thread
                continue
            cfg = configs.BlockRowFwdConfig(rows, wp)
            s.time("fwd-1024", {"op": op, "M": m, "N": 1024, "kernel": "block_row",
                                "block_rows": rows, "warps": wp},
                   lambda: NR._fwd(x, w, b, EPS, is_rms, cfg))  # noqa: B023
        del x, w, b
    s.save()


class _WithStages:
    """Stands in for a @triton.jit kernel: launches it with a fixed num_stages."""

    def __init__(self, kernel, stages):
        self.kernel, self.stages = kernel, stages

    def __getitem__(self, grid):
        return functools.partial(self.kernel[grid], num_stages=self.stages)


def part_loss_stages(s: Sweep) -> None:
    """Software-pipelining depth (num_stages) of the fused and chunked loss kernels' loops."""
    from normlab.kernels import entropy as E

    g = torch.Generator(device="cuda").manual_seed(0)
    fused, chunked = dict(E._FUSED_KERNELS), E._entropy_chunked_kernel
    cases = {"reverse_kl": (("fused", 4096), ("fused", 2048), ("chunked", 2048)),
             "cross_entropy": (("fused", 4096), ("chunked", 4096))}
    for v in (32768, 65536, 131072):
        x = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        t = torch.randn(4096, v, device="cuda", dtype=torch.bfloat16, generator=g)
        labels = torch.randint(0, v, (4096,), device="cuda", generator=g)
        for loss, forms in cases.items():
            fn = getattr(normlab, loss)
            other = labels if loss == "cross_entropy" else t
            for (form, cap), stages in itertools.product(forms, (None, 1, 2, 3, 4)):
                try:
                    if stages is not None:
                        E._FUSED_KERNELS.update({k: _WithStages(f, stages) for k, f in fused.items()})
                        E._entropy_chunked_kernel = _WithStages(chunked, stages)
                    s.time("loss-stages", {"op": loss, "M": 4096, "N": v, "form": form, "cap": cap,
                                           "num_stages": stages},
                           lambda: torch.autograd.grad(  # noqa: B023
                               fn(x, other, form=form, block_cap=cap), x))  # noqa: B023
                finally:
                    E._FUSED_KERNELS.update(fused)
                    E._entropy_chunked_kernel = chunked
        del x, t
        s.save()


@triton.jit
def _inductor_like_rms_fwd(rstd_ptr, x_ptr, w_ptr, y_ptr, eps, N: tl.constexpr,
                           EPS: tl.constexpr = 1e-6, RSTD_FIRST: tl.constexpr = True,
                           BARRIER: tl.constexpr = True, EPS_CONST: tl.constexpr = True):  # fmt: skip
    """torch.compile's RMSNorm forward at static (rows, N) as Inductor emits it (see
    benchmarks/data/dev/inductor_rms_fwd_kernels_h200.txt), transcribed: one row per program, the
    whole row in registers, no predicates, int32 offsets, rstd stored before y behind a barrier,
    eps a constant. The flags undo one of the last three at a time (part fwd_1024_transcribed)."""
    row = tl.program_id(0)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + cols + N * row).to(tl.float32)
    w = tl.load(w_ptr + cols, eviction_policy="evict_last").to(tl.float32)
    if EPS_CONST:
        rstd = tl.rsqrt(tl.sum(x * x, 0) / N + EPS)
    else:
        rstd = tl.rsqrt(tl.sum(x * x, 0) / N + eps)
    y = x * rstd * w
    if BARRIER:
        tl.debug_barrier()
    if RSTD_FIRST:
        tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + cols + N * row, y.to(y_ptr.dtype.element_ty))
    if not RSTD_FIRST:
        tl.store(rstd_ptr + row, rstd)


def _inductor_kernel(name_part: str, m: int, n: int):
    """The Inductor kernel (a CachingAutotuner) whose name holds ``name_part`` and whose module
    was generated for the static shape (m, n) (its source sets xnumel and r0_numel), or None."""
    from torch._inductor.codecache import PyCodeCache

    mods = list(getattr(PyCodeCache, "modules", [])) + list(
        getattr(PyCodeCache, "modules_no_attr", {}).values())  # fmt: skip
    for mod in mods:
        src = Path(getattr(mod, "__file__", "") or "/nonexistent")
        text = src.read_text() if src.is_file() else ""
        if f"xnumel = {m}\n" not in text or f"r0_numel = {n}\n" not in text:
            continue
        for name, obj in vars(mod).items():
            if name.startswith("triton_") and name_part in name and hasattr(obj, "run"):
                return obj
    return None


def part_fwd_placement(s: Sweep) -> None:
    """Does torch.compile's lead at 16384 x 1024 follow its kernel or its buffers? Each round
    allocates a pad of random size (kept), then x, y and rstd, so the buffers land elsewhere; on
    those same buffers it times normlab's default kernel (``.fn``, the recorded config),
    Inductor's own compiled kernel (launched through its CachingAutotuner) and a transcription of
    it; then torch.compile's call, which writes outputs it allocates itself, and normlab's kernel
    writing into one of those outputs (kept alive). Rotated order; addresses recorded (mod 2 MiB
    and the MiB index) with each case."""
    gen = torch.Generator().manual_seed(0)
    compiled = torch.compile(F.rms_norm, dynamic=False)
    pads = []
    for round_, (m, n) in itertools.product(range(8), ((16384, 1024), (8192, 1024))):
        pads.append(torch.empty(int(torch.randint(1, 64, (1,), generator=gen)) << 20,
                                dtype=torch.uint8, device="cuda"))  # fmt: skip
        x, w, _, _ = norm_inputs(m, n, True)
        x.requires_grad_()
        y = torch.empty_like(x)
        rstd = torch.empty(m, device="cuda", dtype=torch.float32)
        xd = x.detach()
        y_c = compiled(x, (n,), w, EPS)
        ind = _inductor_kernel("rms_norm", m, n)
        cfg = configs.norm_fwd_config(n, True, m, _runtime.sm_count(0))
        single = cfg.block_size >= n
        stream = torch.cuda.current_stream().cuda_stream
        runs = [
            ({"kernel": "normlab", "y_at": y.data_ptr()},
             _production_fwd(m, n, xd, y, w, rstd, cfg.block_size, cfg.num_warps, single)),
            ({"kernel": "inductor_like", "y_at": y.data_ptr()},
             functools.partial(_inductor_like_rms_fwd[(m,)], rstd, xd, w, y, EPS, n, num_warps=1)),
            ({"kernel": "compile", "y_at": None}, functools.partial(compiled, x, (n,), w, EPS)),
            ({"kernel": "normlab_on_compile_out", "y_at": y_c.data_ptr()},
             _production_fwd(m, n, xd, y_c, w, rstd, cfg.block_size, cfg.num_warps, single)),
        ]  # fmt: skip
        if ind is not None:
            runs.append(({"kernel": "inductor_kernel", "y_at": y.data_ptr()},
                         functools.partial(ind.run, rstd, xd, w, y, m, n, stream=stream)))
        k = round_ % len(runs)
        for extra, run in runs[k:] + runs[:k]:
            at = extra.pop("y_at")
            case = {"op": "rms_norm", "M": m, "N": n, "round": round_, **extra,
                    "x_mib": xd.data_ptr() >> 20, "x_mod_2mib": xd.data_ptr() % (2 << 20),
                    "y_mib": None if at is None else at >> 20,
                    "y_mod_2mib": None if at is None else at % (2 << 20)}
            s.time("fwd-placement", case, run, reps=12)
        ref = F.rms_norm(xd.float(), (n,), w.float(), EPS)
        s.data["results"].append({"part": "fwd-placement-check", "M": m, "N": n, "round": round_,
                                  "y_max_err": float((y.float() - ref).abs().max()),
                                  "y_c_max_err": float((y_c.detach().float() - ref).abs().max()),
                                  "inductor_found": ind is not None})  # fmt: skip
        del x, w, y, rstd, xd, y_c, runs
        s.save()


def _rms_1024_inputs(compiled, m: int):
    """Fresh RMSNorm m x 1024 inputs: x (requiring grad), its detached view xd, w, the output
    buffers y and rstd; one call of ``compiled`` (torch.compile's F.rms_norm) on them, and
    Inductor's kernel generated for the shape (None if not found)."""
    n = 1024
    x, w, _, _ = norm_inputs(m, n, True)
    x.requires_grad_()
    xd = x.detach()
    y = torch.empty_like(xd)
    rstd = torch.empty(m, device="cuda", dtype=torch.float32)
    compiled(x, (n,), w, EPS)
    return x, xd, w, y, rstd, _inductor_kernel("rms_norm", m, n)


def part_fwd_1024_transcribed(s: Sweep) -> None:
    """RMSNorm at 1024 columns, 4096-32768 rows, all on the same buffers: the transcription of
    Inductor's kernel (_inductor_like_rms_fwd) and it without the barrier, with rstd stored
    after y, with eps a runtime argument; normlab's production kernel at the default config and
    as one register-resident row per warp; Inductor's own kernel; torch.compile's call. Six
    rounds, fresh buffers each, the order rotated."""
    compiled = torch.compile(F.rms_norm, dynamic=False)
    variants = {"transcribed": {}, "no_barrier": {"BARRIER": False},
                "rstd_after": {"RSTD_FIRST": False}, "eps_runtime": {"EPS_CONST": False}}
    for round_, m in itertools.product(range(6), (16384, 8192, 32768, 4096)):
        n = 1024
        x, xd, w, y, rstd, ind = _rms_1024_inputs(compiled, m)
        cfg = configs.norm_fwd_config(n, True, m, _runtime.sm_count(0))
        stream = torch.cuda.current_stream().cuda_stream
        runs = [({"kernel": name}, functools.partial(_inductor_like_rms_fwd[(m,)], rstd, xd, w, y,
                                                     EPS, n, num_warps=1, **flags))
                for name, flags in variants.items()]  # fmt: skip
        runs += [({"kernel": "normlab", "block": cfg.block_size, "warps": cfg.num_warps},
                  _production_fwd(m, n, xd, y, w, rstd, cfg.block_size, cfg.num_warps,
                                  cfg.block_size >= n)),
                 ({"kernel": "normlab_row_1warp", "block": n, "warps": 1},
                  _production_fwd(m, n, xd, y, w, rstd, n, 1, True)),
                 ({"kernel": "compile"}, functools.partial(compiled, x, (n,), w, EPS))]  # fmt: skip
        if ind is not None:
            runs.append(({"kernel": "inductor_kernel"},
                         functools.partial(ind.run, rstd, xd, w, y, m, n, stream=stream)))
        k = round_ % len(runs)
        for extra, run in runs[k:] + runs[:k]:
            s.time("fwd-1024-transcribed", {"op": "rms_norm", "M": m, "N": n, "round": round_,
                                            **extra}, run, reps=12)  # fmt: skip
        ref = F.rms_norm(xd.float(), (n,), w.float(), EPS)
        s.data["results"].append({"part": "fwd-1024-transcribed-check", "M": m, "round": round_,
                                  "y_max_err": float((y.float() - ref).abs().max()),
                                  "inductor_found": ind is not None})  # fmt: skip
        del x, xd, w, y, rstd, runs
        s.save()


def _busy_gpu(ms: float = 20.0) -> None:
    """Keep the GPU busy for about ``ms`` (clocks up after host-side work), then wait for it."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(20):
            a @ a
        end.record()
        end.synchronize()
        if start.elapsed_time(end) >= ms:
            break


def _rms_1024_runs(compiled, m: int, row_warps) -> list:
    """The timed calls of fwd_1024_warm / fwd_1024_clocks on fresh RMSNorm m x 1024 inputs
    (the calls hold them): the default, the one-row-per-program kernel at one register-resident
    row per each of ``row_warps`` warps, torch.compile's call (``compiled``), and Inductor's own
    kernel on the same input."""
    n = 1024
    x, xd, w, y, rstd, ind = _rms_1024_inputs(compiled, m)
    stream = torch.cuda.current_stream().cuda_stream
    runs = [({"kernel": "default"}, functools.partial(K.norm_forward, xd, w, None, EPS, True,
                                                      block_row=True))]  # fmt: skip
    runs += [({"kernel": f"row_{wp}warp"}, functools.partial(K.norm_forward, xd, w, None, EPS,
                                                             True, block_size=n, num_warps=wp))
             for wp in row_warps]  # fmt: skip
    runs.append(({"kernel": "compile"}, functools.partial(compiled, x, (n,), w, EPS)))
    if ind is not None:
        runs.append(({"kernel": "inductor_kernel"},
                     functools.partial(ind.run, rstd, xd, w, y, m, n, stream=stream)))
    return runs


def part_fwd_1024_warm(s: Sweep) -> None:
    """RMSNorm at 1024 columns, 4096-32768 rows, eight rounds: the default (the benchmark's call),
    the one-row-per-program kernel at one register-resident row per 1 and 2 warps, Inductor's own
    kernel on the same input, and torch.compile's call, after 20 ms of matrix products that keep
    the GPU busy (the first-timed one-warp kernels of a round ran slow in fwd_1024_transcribed),
    the order rotated."""
    compiled = torch.compile(F.rms_norm, dynamic=False)
    for round_, m in itertools.product(range(8), (4096, 8192, 12288, 16384, 24576, 32768)):
        n = 1024
        runs = _rms_1024_runs(compiled, m, (1, 2))
        k = round_ % len(runs)
        for extra, run in runs[k:] + runs[:k]:
            _busy_gpu()
            s.time("fwd-1024-warm", {"op": "rms_norm", "M": m, "N": n, "round": round_, **extra},
                   run, reps=12)  # fmt: skip
        del runs
        s.save()


def _gpu_clocks() -> dict:
    """SM and memory clocks (MHz), power (W) and temperature (C) now, from nvidia-smi."""
    import subprocess

    q = "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits",
                              "-i", "0"], capture_output=True, text=True, timeout=10, check=False).stdout  # fmt: skip
        sm, mem, power, temp, reasons = [v.strip() for v in out.strip().split(",")]
        return {"sm_mhz": int(sm), "mem_mhz": int(mem), "power_w": float(power),
                "temp_c": int(temp), "throttle": reasons}  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a reading that failed says so in the record
        return {"clock_error": f"{type(exc).__name__}: {exc}"}


def part_fwd_1024_clocks(s: Sweep) -> None:
    """The state behind torch.compile's two speeds at 1024 columns: every kernel of
    fwd_1024_warm timed twice per round, once after 20 ms of matrix products (busy) and once
    after the GPU sat idle for 200 ms, with the SM clock, power and throttle reasons read just
    before and after each timing (nvidia-smi). Six rounds, rotated."""
    compiled = torch.compile(F.rms_norm, dynamic=False)
    for round_, m in itertools.product(range(6), (8192, 16384, 32768)):
        n = 1024
        runs = _rms_1024_runs(compiled, m, (1,))
        k = round_ % len(runs)
        for (extra, run), state in itertools.product(runs[k:] + runs[:k], ("busy", "idle")):
            if state == "busy":
                _busy_gpu()
            else:
                torch.cuda.synchronize()
                time.sleep(0.2)
            case = {"op": "rms_norm", "M": m, "N": n, "round": round_, "state": state, **extra}
            before = _gpu_clocks()
            s.time("fwd-1024-clocks", case, run, reps=12)
            after = _gpu_clocks()
            if s.data["results"] and all(s.data["results"][-1].get(k) == v for k, v in case.items()):
                s.data["results"][-1].update({"before": before, "after": after})
        del runs
        s.save()


def part_fwd_1024_modes(s: Sweep) -> None:
    """Which buffers give the one-warp kernels their fast mode at 16384 x 1024 (17.4-17.9 us in
    fwd_placement against 18.9-19.4 in fwd_1024_warm/clocks, at the same SM clock)? Six rounds
    on buffers allocated as the benchmark allocates them (the previous round's freed), then
    twelve with a pad of random size kept before each (fwd_placement's way), on every round's
    same x, y, rstd: Inductor's kernel twice, normlab's default and its one-warp row."""
    gen = torch.Generator().manual_seed(1)
    compiled = torch.compile(F.rms_norm, dynamic=False)
    m, n = 16384, 1024
    pads = []
    for round_ in range(18):
        padded = round_ >= 6
        if padded:
            pads.append(torch.empty(int(torch.randint(1, 64, (1,), generator=gen)) << 20,
                                    dtype=torch.uint8, device="cuda"))  # fmt: skip
        x, xd, w, y, rstd, ind = _rms_1024_inputs(compiled, m)
        stream = torch.cuda.current_stream().cuda_stream
        runs = [({"kernel": "inductor_kernel", "take": 1},
                 functools.partial(ind.run, rstd, xd, w, y, m, n, stream=stream)),
                ({"kernel": "default"}, functools.partial(K.norm_forward, xd, w, None, EPS, True,
                                                          block_row=True)),
                ({"kernel": "row_1warp"}, functools.partial(K.norm_forward, xd, w, None, EPS, True,
                                                            block_size=n, num_warps=1)),
                ({"kernel": "inductor_kernel", "take": 2},
                 functools.partial(ind.run, rstd, xd, w, y, m, n, stream=stream))]  # fmt: skip
        for extra, run in runs:
            s.time("fwd-1024-modes", {"op": "rms_norm", "M": m, "N": n, "round": round_,
                                      "padded": padded, "x_mib": xd.data_ptr() >> 20,
                                      "y_mib": y.data_ptr() >> 20, **extra}, run, reps=12)  # fmt: skip
        del x, xd, w, y, rstd, runs
        s.save()


NORM_AB_SHAPES = (("ln", 32768, 8192), ("ln", 8192, 4096), ("ln", 16384, 2048), ("ln", 4096, 4096),
                  ("ln", 32768, 1024), ("ln", 1024, 8192), ("rms", 32768, 8192))


def part_norm_bwd_ab(s: Sweep, variants: list[Path], shapes=NORM_AB_SHAPES) -> None:
    """A/B of copies of normlab/kernels/norm.py (cut before its custom ops, edited, passed with
    ``--norm-variants a.py,b.py``): the default backward (norm_backward, strategy "auto") of
    each on the same inputs, LayerNorm at six peer shapes and RMSNorm at 32768 x 8192, three
    rounds rotated, with dx / dweight / dbias agreement against the first variant and the
    registers and spills of each variant's compiled persistent kernel."""
    mods = {p.stem: _load_module(p) for p in variants}
    s.data["meta"]["ab_sources"] = {p.stem: p.read_text() for p in variants}
    for round_, (op, m, n) in itertools.product(range(3), shapes):
        is_rms = op == "rms"
        x, w, b, dy = norm_inputs(m, n, is_rms)
        _, mean, rstd = K.norm_forward(x, w, b, EPS, is_rms)
        first = None
        names = list(mods)
        k = round_ % len(names)
        for name in names[k:] + names[:k]:
            mod = mods[name]
            run = functools.partial(mod.norm_backward, dy, x, w, b, mean, rstd, is_rms)
            case = {"op": op, "M": m, "N": n, "round": round_, "variant": name}
            if round_ == 0:
                saved = mod._norm_bwd_persistent_kernel
                mod._norm_bwd_persistent_kernel = cap_k = _Capture(saved)
                try:
                    out = run()
                finally:
                    mod._norm_bwd_persistent_kernel = saved
                case["n_regs"] = getattr(cap_k.compiled, "n_regs", None)
                case["n_spills"] = getattr(cap_k.compiled, "n_spills", None)
                if first is None:
                    first = out
                else:
                    case["max_diff"] = [float((a.float() - r.float()).abs().max())
                                        for a, r in zip(out, first) if a is not None]  # fmt: skip
            s.time("norm-bwd-ab", case, run, reps=12)
        del x, w, b, dy, mean, rstd, first
        s.save()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    ap.add_argument("--parts", default="entropy,bwd,fwd,narrow")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--entropy-variants", default="", help="comma-separated module files")
    ap.add_argument("--norm-variants", default="", help="comma-separated module files")
    ap.add_argument("--norm-shapes", default="", help="norm_bwd_ab shapes, e.g. ln:2048x16384")
    ap.add_argument("--entropy-vocabs", default="32768,131072", help="vocabularies of 'entropy'")
    ap.add_argument("--entropy-forms", default="",
                    help="forms of 'entropy' as form:cap, e.g. fused:2048,chunked:1024,split")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    s = Sweep(args.out, args.budget_s, args.reps)
    info = device_info()
    s.data["meta"] = {"card": info.card, "torch": info.torch, "triton": info.triton,
                      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                      "commit": os.environ.get("NORMLAB_COMMIT", ""), "copy_gbps": info.roofline_gbps,
                      "script": "scripts/sweep_launch_configs.py", "parts": args.parts}
    variants = [Path(p) for p in args.entropy_variants.split(",") if p]
    for part in args.parts.split(","):
        t0 = time.time()
        try:
            vocabs = [int(v) for v in args.entropy_vocabs.split(",")]
            if part == "entropy" and args.entropy_forms:  # A/B of module files
                forms = [(f, int(c[0]) if c else None) for f, *c in
                         (spec.split(":") for spec in args.entropy_forms.split(","))]
                part_entropy(s, variants, vocabs, forms=forms)
            elif part == "norm_bwd_ab":
                shapes = [(op, *map(int, mn.split("x"))) for op, mn in
                          (c.split(":") for c in args.norm_shapes.split(","))] \
                    if args.norm_shapes else NORM_AB_SHAPES  # fmt: skip
                part_norm_bwd_ab(s, [Path(p) for p in args.norm_variants.split(",") if p], shapes)
            elif part in ("entropy", "entropy_fused"):
                globals()[f"part_{part}"](s, variants, vocabs)
            else:
                globals()[f"part_{part}"](s)
        except Exception:
            s.data["errors"].append({"part": part, "error": traceback.format_exc()})
            traceback.print_exc()
        print(f"part {part}: {time.time() - t0:.0f} s, {s.left():.0f} s left", flush=True)
        s.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
