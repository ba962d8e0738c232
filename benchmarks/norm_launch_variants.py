"""The norms' launch-bound and wide-row cells: planned kernels against launch variants, peers.

    python3 benchmarks/norm_launch_variants.py --out out/norm_launch_variants.jsonl [--reps 6]

For each cell (op, direction, M x N, dtype): normlab's planned call ("default"), the same
launcher with one knob moved, and torch, torch.compile and Liger-Kernel, timed in one process
(device time, L2 flushed). Forward knobs: the pointwise forward's block and warps for rows of
one column (``pointwise BxW``), one row per program at 1-16 warps (``row wW``; with
``early``/``late``, the parameters loaded with x or after the row's sums; ``shifted``, a row not
vector aligned loaded from its first 16-byte boundary wherever it can be), the block-row tile
(``tile RxW``: rows by warps, for narrow rows of up to 256 columns and for wide ones), the
wide-row chunk (``chunk C wW``), one 32768-column block (``block 32768 wW``) and the split-row
forward (``split C``). Backward knobs: the persistent grid's programs per SM with and without
paired partial rows (``ppsP paired|unpaired``), one tile holding every row (``one tile``),
tiles of 1, 2 or 4 rows (``tiles of R rows``), a batch of up to 128 rows by role or as the
persistent kernel and a reduce (``roles on|off``; by role on 1-16 warps, ``roles on wW``) and,
for one-row tiles, the next row prefetched
or not at 8-32 warps, and without it the rows split at their first 16-byte boundary or not
(``prefetch on|off wW shifted|unshifted``; the runs before ``6b0ce9a`` also timed shifted rows
with the prefetch, since removed), or the row loop software-pipelined through shared memory in
2 or 3 stages on 8 or 16 warps (``stages S wW``); past 8192 columns, shifted rows at 4-16 warps
and 1 or 2 programs an SM (``shifted wW ppsP``).
``--only REGEX`` times the variants whose name matches (and the default). Every variant's
outputs are checked against the planned call's before it is timed. Records
carry ``shape_set="norm_launch_variants"`` and the variant in ``impl``.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import torch
from norm_bwd_variants import close
from norm_population import _compiled_peer

from normlab import _runtime
from normlab._host import next_pow2
from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import config, row, split_row
from normlab.norms import op as norm_op

# op:direction:MxN[:dtype]; the population's members below 0.90x and their neighbours.
CELLS = (
    "rms_norm:fwd:1x768,rms_norm:fwd:1x2048,rms_norm:fwd:1x8192,rms_norm:fwd:8x4096,"
    "rms_norm:fwd:14x1022,rms_norm:fwd:261x1110,rms_norm:fwd:512x768,rms_norm:fwd:512x1024,"
    "rms_norm:fwd:512x2880,rms_norm:fwd:593x37,rms_norm:fwd:783x120,rms_norm:fwd:4096x1024,"
    "rms_norm:fwd:4096x1536:fp16,rms_norm:fwd:4096x4096,rms_norm:fwd:3366x60028,"
    "layer_norm:fwd:4096x768:fp16,layer_norm:fwd:4096x1024,layer_norm:fwd:8192x1024,"
    "layer_norm:fwd:1990x2326,layer_norm:fwd:3366x60028,"
    "layer_norm:bwd:13x448,rms_norm:bwd:13x448,layer_norm:bwd:512x1536,layer_norm:bwd:512x2048,"
    "layer_norm:bwd:4096x2048,rms_norm:bwd:512x2048,layer_norm:bwd:7526x3956:fp16"
)
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}
TILE_ROWS_MAX_ELEMS = 8192  # the row-tile variants run up to 4x this many padded elements
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _fwd_variants(x, w, b, is_rms, sms):
    m, n = x.shape
    eps = EPS["rms_norm" if is_rms else "layer_norm"]
    out = {"default": lambda: norm_op._forward(x, None, w, b, eps, 0.0, is_rms, "auto",
                                               "auto")[:1]}  # fmt: skip
    if n <= config.NORM_FWD_MAX_BLOCK:
        block = next_pow2(n)
        for warps in (1, 2, 4, 8, 16):
            if block // (32 * warps) >= 1:
                out[f"row w{warps}"] = (lambda warps=warps, block=block: row.norm_forward(
                    x, w, b, eps, is_rms, block_size=block, num_warps=warps))  # fmt: skip
                for early in (False, True):  # w/b loaded with x, or after the row's sums
                    out[f"row w{warps} {'early' if early else 'late'}"] = (
                        lambda warps=warps, block=block, early=early: row.norm_forward(
                            x, w, b, eps, is_rms, block_size=block, num_warps=warps,
                            early_params=early))  # fmt: skip
                if n % (config.VECTOR_BYTES // x.element_size()):  # not vector aligned rows
                    out[f"row w{warps} shifted"] = (
                        lambda warps=warps, block=block: row.norm_forward(
                            x, w, b, eps, is_rms, block_size=block, num_warps=warps,
                            shift=True))  # fmt: skip
        if n == 1:  # rows of one column: the pointwise forward's block and warps
            for block in (64, 128, 256, 512, 1024, 2048):
                for warps in (1, 2, 4):
                    if block >= 32 * warps:
                        tile = config.BlockRowFwdConfig(
                            1, warps, 0, config.PointwiseFwdConfig(block, warps))
                        out[f"pointwise {block}x{warps}"] = (lambda tile=tile: row.norm_forward(
                            x, w, b, eps, is_rms, tile=tile))  # fmt: skip
        if n <= config.BLOCK_ROW_MAX_COLS and m >= 2 * sms:  # narrow rows' forward tiles
            for rows in (2, 4, 8, 16, 32, 64):
                for warps in (1, 2, 4, 8):
                    if rows * block <= config.BLOCK_ROW_TILE_ELEMS and rows * block >= 32 * warps:
                        tile = config.BlockRowFwdConfig(rows, warps, 0)
                        out[f"tile {rows}x{warps}"] = (lambda tile=tile: row.norm_forward(
                            x, w, b, eps, is_rms, tile=tile))  # fmt: skip
        if n >= 512 and m >= 2 * sms:
            for rows, warps in ((2, 4), (2, 8), (4, 4), (4, 8)):
                tile = config.BlockRowFwdConfig(rows, warps, 0)
                out[f"tile {rows}x{warps}"] = (lambda tile=tile: row.norm_forward(
                    x, w, b, eps, is_rms, tile=tile))  # fmt: skip
    else:
        for chunk in (2048, 4096, 8192, 16384):
            for warps in (4, 8, 16):
                if chunk // (32 * warps) >= 4:
                    out[f"chunk {chunk} w{warps}"] = (
                        lambda chunk=chunk, warps=warps: row.norm_forward(
                            x, w, b, eps, is_rms, block_size=chunk, num_warps=warps))  # fmt: skip
        if n <= 2 * config.NORM_FWD_MAX_BLOCK:  # the whole row in registers, read once
            for warps in (16, 32):
                out[f"block 32768 w{warps}"] = (lambda warps=warps: row.norm_forward(
                    x, w, b, eps, is_rms, block_size=32768, num_warps=warps))  # fmt: skip
    if n > config.SPLIT_ROW_FWD_MIN_COLS:  # each row over several programs, two launches
        for cols in (2048, 4096):
            out[f"split {cols}"] = (lambda cols=cols: split_row.split_row_forward(
                x, w, b, eps, is_rms, config.split_chunk(cols)))  # fmt: skip
    return out


def _bwd_variants(x, w, b, dy, mean, rstd, is_rms, sms):
    m, n = x.shape
    eps = EPS["rms_norm" if is_rms else "layer_norm"]
    out = {"default": lambda: norm_op._backward_launch(dy, None, x, w, b, mean, rstd, eps, 0.0,
                                                       is_rms, "auto", "auto")}  # fmt: skip
    for per_sm in (1, 2, 4, 8):
        for paired in (False, True):
            out[f"pps{per_sm} {'paired' if paired else 'unpaired'}"] = (
                lambda per_sm=per_sm, paired=paired: row.norm_backward(
                    dy, x, w, b, mean, rstd, is_rms, programs_per_sm=per_sm,
                    paired_partials=paired))  # fmt: skip
    block_cols = next_pow2(n)
    if block_cols >= 2048 and not config.norm_bwd_two_pass(n, is_rms, m):  # one-row tiles
        for prefetch in (False, True):
            for warps in (8, 16, 32):
                for shift in (False, True):
                    if prefetch and shift:  # shifted rows take no prefetch since 6b0ce9a
                        continue
                    name = (f"prefetch {'on' if prefetch else 'off'} w{warps} "
                            f"{'shifted' if shift else 'unshifted'}")  # fmt: skip
                    out[name] = (lambda prefetch=prefetch, warps=warps, shift=shift:
                                 row.norm_backward(dy, x, w, b, mean, rstd, is_rms,
                                                   prefetch=prefetch, num_warps=warps,
                                                   shift=shift))  # fmt: skip
        for stages in (2, 3):  # the loop software-pipelined through shared memory, no prefetch
            for warps in (8, 16):
                out[f"stages {stages} w{warps}"] = (
                    lambda stages=stages, warps=warps: row.norm_backward(
                        dy, x, w, b, mean, rstd, is_rms, prefetch=False, loop_stages=stages,
                        num_warps=warps, shift=False))  # fmt: skip
    if block_cols > 8192:  # the runtime-width single pass: shifted rows on fewer warps, 2 an SM
        for warps in (4, 8, 16):
            for per_sm in (1, 2):
                out[f"shifted w{warps} pps{per_sm}"] = (
                    lambda warps=warps, per_sm=per_sm: row.norm_backward(
                        dy, x, w, b, mean, rstd, is_rms, prefetch=False, num_warps=warps,
                        programs_per_sm=per_sm, shift=True))  # fmt: skip
    if m <= 4 * config.NORM_BWD_ROLES_MAX_ROWS:  # decode batches, and past the roles' bounds
        for roles in (False, True):
            out[f"roles {'on' if roles else 'off'}"] = (lambda roles=roles: row.norm_backward(
                dy, x, w, b, mean, rstd, is_rms, roles=roles))  # fmt: skip
        for warps in (1, 4, 8, 16):
            if warps * 32 * 64 >= block_cols:  # at most 64 elements a thread of a row
                out[f"roles on w{warps}"] = (lambda warps=warps: row.norm_backward(
                    dy, x, w, b, mean, rstd, is_rms, roles=True, num_warps=warps))  # fmt: skip
    if m * block_cols <= 4 * TILE_ROWS_MAX_ELEMS:
        rows = next_pow2(m)
        for warps in (4, 8, 16):
            out[f"one tile w{warps}"] = (lambda rows=rows, warps=warps: row.norm_backward(
                dy, x, w, b, mean, rstd, is_rms, block_rows=rows, num_warps=warps,
                programs_per_sm=1))  # fmt: skip
        for rows in (1, 2, 4):
            out[f"tiles of {rows} rows"] = (lambda rows=rows: row.norm_backward(
                dy, x, w, b, mean, rstd, is_rms, block_rows=rows, programs_per_sm=4,
                paired_partials=False))  # fmt: skip
    return out


def _parse(cells: str):
    out = []
    for cell in cells.split(","):
        parts = cell.split(":")
        if len(parts) not in (3, 4) or parts[0] not in EPS or parts[1] not in ("fwd", "bwd"):
            raise ValueError(cell)
        m, n = (int(v) for v in parts[2].split("x"))
        dtype = parts[3] if len(parts) == 4 else "bf16"
        if dtype not in DTYPES or m < 1 or n < 1:
            raise ValueError(cell)
        out.append((parts[0], parts[1], m, n, dtype))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--cells", default=CELLS, help="op:fwd|bwd:MxN[:dtype],...")
    parser.add_argument("--peers", default="torch,compile,liger")
    parser.add_argument("--only", default=None, metavar="REGEX",
                        help="time only the variants whose name matches (the default always)")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    try:
        only = re.compile(args.only) if args.only is not None else None
    except re.error as exc:
        parser.error(f"--only: not a regular expression ({exc})")
    try:
        cells = _parse(args.cells)
    except ValueError as exc:
        parser.error(f"--cells takes op:fwd|bwd:MxN[:bf16|fp16|fp32],... (bad: {exc})")
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    dev, sms = device_info(), _runtime.sm_count()
    command = portable_command(["python3", "benchmarks/norm_launch_variants.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    compiled = {op: _compiled_peer(op) for op in EPS}
    records = []
    for op, direction, m, n, dtype_name in cells:
        is_rms, dtype = op == "rms_norm", DTYPES[dtype_name]
        x = torch.randn(m, n, dtype=dtype, device="cuda")
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(dtype)
        b = None if is_rms else (0.1 * torch.randn(n, device="cuda")).to(dtype)
        if direction == "fwd":
            variants = _fwd_variants(x, w, b, is_rms, sms)
        else:
            dy = torch.randn(m, n, dtype=dtype, device="cuda")
            _, mean, rstd = row.norm_forward(x, w, b, EPS[op], is_rms)
            variants = _bwd_variants(x, w, b, dy, mean, rstd, is_rms, sms)
        want = variants["default"]()
        line = [f"{op} {direction} {m}x{n} {dtype_name}:"]

        def timed(run, impl, op=op, m=m, n=n, dtype_name=dtype_name, direction=direction):
            rec = measure(run, op, impl, m, n, dtype_name, direction, device=dev, reps=args.reps,
                          command=command, shape_set="norm_launch_variants")  # fmt: skip
            records.append(rec)
            return rec

        for name, run in variants.items():
            if only is not None and name != "default" and not only.search(name):
                continue
            try:
                got = run()
            except Exception as exc:  # a variant the kernel cannot take is a result too
                line.append(f"{name} failed {type(exc).__name__}")
                continue
            if direction == "fwd":  # y only: a plan may leave the statistics to the backward
                got = got[:1]
            if not all(close(g, r) for g, r in zip(got, want, strict=True)):
                line.append(f"{name} MISMATCH")
                continue
            line.append(f"{name} {timed(run, f'normlab {name}').device_us:.2f}")
        variants = want = got = None
        for peer in args.peers.split(","):
            impl = registry.get(op, peer)
            if impl.unavailable() is not None:
                continue
            try:
                if peer == "compile":
                    run = registry.norm_case(compiled[op], op, m, n, dtype, direction, "cuda")
                else:
                    run = impl.build(m, n, dtype, direction, "cuda")
                line.append(f"{peer} {timed(run, peer).device_us:.2f}")
            except Exception as exc:  # a peer that cannot run a cell is a result too
                line.append(f"{peer} failed {exc!r}"[:120])
            finally:
                run = None
        print(" | ".join(line), flush=True)
        x = w = b = dy = mean = rstd = None
        torch.cuda.empty_cache()
        write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
