"""The norms at odd widths: planned kernels against variants and compiled peers.

    python3 benchmarks/norm_odd_widths.py --out FILE [--reps 4] [--cells op:MxN,...]
        [--dtype bf16|fp16|fp32] [--direction fwd|bwd|fwd,bwd]

An odd width leaves every row start unaligned (ROW_ALIGN 1), so the backward loads element by
element. In the population's block-row members that ran at about a third of copy (1000003 x 127:
0.31-0.32 against 0.89-0.93 at 128), and torch.compile compiled for the one shape
(``dynamic=False``) was 1.8-2.3x faster at 8000009 x 255 and 1492488 x 825
(``population_static_compile_9b7df9c``). At ROW_ALIGN 1 Triton lays a 128-column tile one
element a thread, 32 threads a warp, so 4 of 8 warps share each row and every row sum crosses
warps through shared memory with barriers (sm_90 SASS, triton 3.6); one warp a program keeps
a row in its warp. Per cell, both directions: the planned kernel, the same kernel at tiles of
512-8192 elements, 1-8 warps and (backward) persistent grids of 32 or 64 resident warps per
SM, the backward's prefetch flipped, and torch and torch.compile (``dynamic=False``, compiled
for the cell), one process, device time, L2 flushed. An aligned width beside each odd one is
the control. Each variant is checked against the planned one first.

The forward of a row cell also runs with the row loaded from its first 16-byte boundary
(``shifted``, ``row._shifted_row``) and without (``unshifted``), whatever the rule
(``config.shift_vec``) plans.

The block-row cells also time the planned tiles with int64 row offsets forced (``int64
offsets``), the arithmetic every tile took before ``config.row_offsets_int64``.

The block-row backward cells whose padded rows fit ONE_PROGRAM_MAX_ELEMS also time one program
holding every row in one tile at 4-32 warps (``one program RxW``), which writes dγ/dβ itself:
no partial rows, no reduce launch (timed on an H100 and not adopted:
docs/notes/2026-12-06-one-program-tiny-width-backward.md). ``--one-program`` drops the tile
grid and times only those, the planned tile and its prefetch flipped.

``--block-row-max-cols`` widens the block-row layout for the run, so wider rows' planned kernels
are the block-row ones and their tiles are the variants.

The forward of the row cells (wider than the block-row layout): the planned one-row kernel
against the same kernel with w/b in a layout of their own (``params apart``: x's element loads
coalesced, ``config.params_apart``; off by default until this measures it), and the peers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from normlab import _runtime
from normlab.bench import device_info
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure, parse_op_shapes
from normlab.norms import block_row, config, row
from normlab.norms import op as norm_op

CELLS = ("rms_norm:1000003x127,rms_norm:1000003x128,layer_norm:1000003x127,"
         "layer_norm:1000003x128,layer_norm:1492488x825,layer_norm:1492488x832,"
         "rms_norm:1492488x825,rms_norm:1492488x832")  # fmt: skip
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


WARPS = (1, 2, 4, 8)  # 1: a row never leaves its warp at ROW_ALIGN 1 (no cross-warp sums)
RESIDENT_WARPS = (32, 64)  # warps per SM a persistent grid keeps resident (of 64)
ONE_PROGRAM_MAX_ELEMS = 65536  # the largest one-program backward tile timed (64 a thread, 32 warps)


def programs_per_sm(warps: int) -> list[int]:
    """Persistent programs per SM that keep 32 or 64 warps resident (at most 32 programs)."""
    return [min(32, resident // warps) for resident in RESIDENT_WARPS]


def tile_grid(n: int, tiny_rows: bool = False):
    """(rows, warps, programs per SM) of the block-row variants: tiles of 512-8192 elements at
    8-64 elements a thread, at most BLOCK_ROW_MAX_ROWS rows (``tiny_rows``: any number of rows
    narrower than BLOCK_ROW_TINY_COLS, as the forward's planned tile there)."""
    max_rows = 8192 if tiny_rows and n < config.BLOCK_ROW_TINY_COLS else config.BLOCK_ROW_MAX_ROWS
    for tile_elems in (512, 1024, 2048, 4096, 8192):
        rows = max(1, min(max_rows, tile_elems // config.next_pow2(n)))
        for warps in WARPS:
            if 8 <= rows * config.next_pow2(n) // (32 * warps) <= 64:
                for pps in programs_per_sm(warps):
                    yield rows, warps, pps


def one_program_grid(m: int, n: int):
    """One program's tile of every row of the backward, at 4-32 warps of 4-64 elements a
    thread, up to ONE_PROGRAM_MAX_ELEMS padded elements."""
    rows = config.next_pow2(m)
    elems = rows * config.next_pow2(n)
    if elems > ONE_PROGRAM_MAX_ELEMS:
        return
    for warps in (4, 8, 16, 32):
        if 4 <= elems // (32 * warps) <= 64:
            yield config.BlockRowBwdConfig(block_rows=rows, num_warps=warps, programs_per_sm=1,
                                           acc_tile=False, prefetch=False)  # fmt: skip


def variants(op, x, w, b, dy, mean, rstd, one_program_only=False):
    is_rms, eps = op == "rms_norm", EPS[op]
    m, n = x.shape
    block = config.use_block_row(m, n)
    stats = ((None, None) if block and config.block_row_recompute_stats(n, is_rms)
             else (mean, rstd))  # fmt: skip
    out = {"default": lambda: norm_op._backward_launch(dy, None, x, w, b, *stats, eps, 0.0,
                                                       is_rms, "auto", "auto")[0]}  # fmt: skip
    if block:
        one_warp = block_row.one_warp_rows(x, dy)
        planned = (config.block_row_bwd_recompute_config(n, is_rms, one_warp) if stats[1] is None
                   else config.block_row_bwd_config(n, one_warp=one_warp))  # fmt: skip
        out["int64 offsets"] = lambda: block_row.launch_backward(
            dy, x, w, b, *stats, is_rms, planned, eps=eps, int64_rows=True)[0]  # fmt: skip
        grid = [planned._replace(prefetch=not planned.prefetch)]
        if not one_program_only:
            for rows, warps, pps in tile_grid(n):
                grid.append(planned._replace(block_rows=rows, num_warps=warps,
                                             programs_per_sm=pps))  # fmt: skip
        for cfg in dict.fromkeys(grid):
            out[f"block-row {cfg.block_rows}x{cfg.num_warps} pps{cfg.programs_per_sm}"
                f"{' prefetch' if cfg.prefetch else ''}"] = (
                lambda cfg=cfg: block_row.launch_backward(dy, x, w, b, *stats, is_rms, cfg,
                                                          eps=eps)[0])  # fmt: skip
        for cfg in one_program_grid(m, n):
            out[f"one program {cfg.block_rows}x{cfg.num_warps}"] = (
                lambda cfg=cfg: block_row.launch_backward(dy, x, w, b, *stats, is_rms, cfg,
                                                          eps=eps)[0])  # fmt: skip
    else:
        for rows in (1, 2, 4):
            for warps in WARPS:
                for pps in programs_per_sm(warps):
                    out[f"row tiles {rows}x{warps} pps{pps}"] = (
                        lambda rows=rows, warps=warps, pps=pps: row.norm_backward(
                            dy, x, w, b, mean, rstd, is_rms, block_rows=rows, num_warps=warps,
                            programs_per_sm=pps)[0])  # fmt: skip
    return out


def fwd_variants(op, x, w, b):
    is_rms, eps = op == "rms_norm", EPS[op]
    m, n = x.shape
    out = {"default": lambda: norm_op._forward(x, None, w, b, eps, 0.0, is_rms, "auto",
                                               "auto")[0]}  # fmt: skip
    if config.use_block_row(m, n):  # the block-row tile at other rows and warps, one a tile
        store = not config.block_row_recompute_stats(n, is_rms)
        planned = config.block_row_fwd_config(n, is_rms, n_rows=m,
                                              sm_count=_runtime.sm_count(x.device.index),
                                              one_warp=block_row.one_warp_rows(x))  # fmt: skip
        out["int64 offsets"] = lambda: block_row.launch_forward(
            x, w, b, eps, is_rms, planned, store, int64_rows=True)[0]  # fmt: skip
        for rows, warps, _ in tile_grid(n, tiny_rows=True):
            cfg = config.BlockRowFwdConfig(rows, warps)
            out[f"block-row {rows}x{warps}"] = (
                lambda cfg=cfg: block_row.launch_forward(x, w, b, eps, is_rms, cfg, store)[0])
    else:
        out["params apart"] = lambda: row.norm_forward(x, w, b, eps, is_rms,
                                                       params_apart=True)[0]  # fmt: skip
        out["shifted"] = lambda: row.norm_forward(x, w, b, eps, is_rms, shift=True)[0]
        out["unshifted"] = lambda: row.norm_forward(x, w, b, eps, is_rms, shift=False)[0]
    return out


def _torch_norm(op, n):
    """torch's op at the cell's width and eps, as f(x, w, b)."""
    eps = EPS[op]
    if op == "rms_norm":
        return lambda x, w, b: F.rms_norm(x, (n,), w, eps)
    return lambda x, w, b: F.layer_norm(x, (n,), w, b, eps)


def fwd_peers(op, x, w, b):
    fn = _torch_norm(op, x.shape[1])
    compiled = torch.compile(fn, dynamic=False)
    return {"torch": lambda: fn(x, w, b), "compile-static": lambda: compiled(x, w, b)}


def peers(op, x, w, b, dy):
    fn = _torch_norm(op, x.shape[1])
    out = {}
    for name, f in (("torch", fn), ("compile-static", torch.compile(fn, dynamic=False))):
        xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
        bg = None if b is None else b.detach().requires_grad_()
        y = f(xg, wg, bg)
        out[name] = (lambda y=y, xg=xg: torch.autograd.grad(y, xg, dy, retain_graph=True)[0])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--cells", default=CELLS, help="op:MxN,...")
    parser.add_argument("--dtype", choices=tuple(DTYPES), default="bf16")
    parser.add_argument("--direction", choices=("fwd", "bwd", "fwd,bwd"), default="fwd,bwd")
    parser.add_argument("--one-program", action="store_true",
                        help="block-row backward variants: the planned tile with its prefetch "
                             "flipped and the one-program tiles only (no tile grid)")
    parser.add_argument("--block-row-max-cols", type=int, default=config.BLOCK_ROW_MAX_COLS,
                        help="plan and time the block-row kernels on rows up to this wide "
                             "(config.BLOCK_ROW_MAX_COLS for this run)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    if not 1 <= args.block_row_max_cols <= 65536:
        parser.error("--block-row-max-cols must be in [1, 65536]")
    config.BLOCK_ROW_MAX_COLS = args.block_row_max_cols
    try:
        cells = parse_op_shapes(args.cells, EPS)
    except ValueError as exc:
        parser.error(f"--cells takes op:MxN,... ({exc})")
    on_gpu = torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_odd_widths.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    torch._dynamo.config.recompile_limit = 64
    records = []

    def timed(runs, direction, op, m, n) -> str:
        """Check each run against runs["default"], then time it (on a GPU): one printed line."""
        want = runs["default"]().float()
        line = []
        for name, run in runs.items():
            got = run().float()
            if not torch.allclose(got, want, atol=6e-2, rtol=3e-2):
                line.append(f"{name} MISMATCH {(got - want).abs().max().item():.3g}")
            elif not on_gpu:
                line.append(f"{name} ok")
            else:
                impl = name if name in ("torch", "compile-static") else f"normlab {name}"
                rec = measure(run, op, impl, m, n, args.dtype, direction, device=dev,
                              reps=args.reps, command=command,
                              shape_set="norm_odd_widths")  # fmt: skip
                records.append(rec)
                line.append(f"{name} {rec.device_us:.1f}")
        return " | ".join(line)

    for op, m, n in cells:
        is_rms = op == "rms_norm"
        dtype = DTYPES[args.dtype]
        x = torch.randn(m, n, dtype=dtype, device=device)
        dy = torch.randn(m, n, dtype=dtype, device=device)
        w = (1 + 0.1 * torch.randn(n, device=device)).to(dtype)
        b = None if is_rms else (0.1 * torch.randn(n, device=device)).to(dtype)
        if "bwd" in args.direction:
            _, mean, rstd = row.norm_forward(x, w, b, EPS[op], is_rms)
            runs = variants(op, x, w, b, dy, mean, rstd, args.one_program)
            if on_gpu:
                runs.update(peers(op, x, w, b, dy))
            print(f"{op} bwd {m}x{n} {args.dtype}: " + timed(runs, "bwd", op, m, n), flush=True)
        if "fwd" in args.direction:
            runs = fwd_variants(op, x, w, b)
            if on_gpu:
                runs.update(fwd_peers(op, x, w, b))
            print(f"{op} fwd {m}x{n} {args.dtype}: " + timed(runs, "fwd", op, m, n), flush=True)
        runs = x = dy = w = b = mean = rstd = None
        if on_gpu:
            torch.cuda.empty_cache()
            write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
