"""The norms' backward over wide rows: the planned kernel against launcher variants and peers.

    python3 benchmarks/norm_bwd_variants.py --out out/norm_bwd_variants.jsonl [--reps 6]

For each cell (op, M x N, bf16): normlab's planned backward ("default"), the split-row backward
at its planned chunks and row groups and with one knob moved ("split <knob> c<dx chunk>
g<programs per SM> s<sums chunk>"), and torch, torch.compile and Liger-Kernel's backward,
timed in one process (device time, L2 flushed).
Every variant's dx/dγ/dβ is checked against the planned backward's before it is timed. Records
carry ``shape_set="norm_bwd_variants"`` and the variant in ``impl``; prints per cell the
variants' µs and the best peer's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from norm_population import _compiled_peer

from normlab import _runtime
from normlab.bench import device_info, registry
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure, parse_shapes
from normlab.norms import config, row, split_row
from normlab.norms import op as norm_op

CELLS = ("3366x60028,296x17767,1329x32826,47318x20163,36052x8363,65536x16384,65536x12288,"
         "106x18159,482x27361,16384x16384,16384x12288,55536x8495,4096x16384,4096x12288,"
         "27492x9693,2048x16384,32768x8192,8192x8192,4096x8192")  # fmt: skip
EPS = {"rms_norm": 1e-6, "layer_norm": 1e-5}


def _variants(x, w, b, dy, mean, rstd, is_rms, sms):
    """name -> zero-argument callable of one backward: the planned one ("default"), then the
    split-row backward at the planned chunks and row groups with one knob moved."""
    m, n = x.shape
    eps = EPS["rms_norm" if is_rms else "layer_norm"]
    out = {"default": lambda: norm_op._backward_launch(dy, None, x, w, b, mean, rstd, eps, 0.0,
                                                       is_rms, "auto", "auto")}  # fmt: skip
    plan = config.split_row_bwd_plan(m, n, sms)
    base = (plan.chunk.cols, config.SPLIT_ROW_BWD_PROGRAMS_PER_SM, plan.sums.cols)
    knobs = {"planned": base, "g4": (base[0], 4, base[2]), "g16": (base[0], 16, base[2]),
             "c/2": (base[0] // 2, base[1], base[2]), "c*2": (base[0] * 2, base[1], base[2]),
             "s=c": (base[0], base[1], base[0])}  # fmt: skip
    for name, (cols, per_sm, sums) in knobs.items():
        tile = config.split_row_bwd_tile(m, cols)
        rows = config.split_row_bwd_group_rows(m, -(-n // cols), tile.rows, sms, per_sm)
        chunk, sums_chunk = config.split_chunk(cols), config.split_chunk(sums)
        out[f"split {name} c{cols} g{per_sm} s{sums}"] = (
            lambda chunk=chunk, rows=rows, sums_chunk=sums_chunk:
            split_row.split_row_backward(dy, x, w, b, mean, rstd, is_rms, chunk,
                                         rows_per_group=rows, sums_chunk=sums_chunk))  # fmt: skip
    if 8192 < n <= 16384:
        out["row w32"] = lambda: row.norm_backward(dy, x, w, b, mean, rstd, is_rms, num_warps=32,
                                                   two_pass=False)  # fmt: skip
    return out


def backward_inputs(m, n, op):
    """bf16 (x, w, b, dy, mean, rstd) of one backward on the GPU: b None for RMSNorm, the
    statistics from the row forward."""
    is_rms = op == "rms_norm"
    x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    b = None if is_rms else (0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
    dy = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
    _, mean, rstd = row.norm_forward(x, w, b, EPS[op], is_rms)
    return x, w, b, dy, mean, rstd


def parse_cells(parser, text):
    """``--cells``' shapes (``MxN,MxN,...``), or the parser's error: exit 2, naming the form."""
    try:
        return parse_shapes(text)
    except ValueError:
        parser.error("--cells takes MxN,MxN,... (integers)")


def gpu_cells_args(parser, argv):
    """(arguments, --cells' shapes) of a GPU benchmark with --reps and --cells, or the parser's
    error (exit 2): --reps below 1, a malformed --cells, no CUDA GPU."""
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    cells = parse_cells(parser, args.cells)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    return args, cells


def close(a, b) -> bool:
    """Does a launcher variant's output match the planned one's (within 2% of its largest
    entry; both None counts)?"""
    if a is None or b is None:
        return a is None and b is None
    scale = b.float().abs().max().item() + 1e-6
    return (a.float() - b.float()).abs().max().item() <= 2e-2 * scale


def time_matching(variants, timed, line: list, records: list) -> None:
    """Time each of ``variants`` (name: call) whose outputs match the first's (``close``) with
    ``timed(run, name)``; a mismatch is noted in ``line`` and not timed. The records go to
    ``records``, each variant's µs (or MISMATCH) to ``line``."""
    want = next(iter(variants.values()))()
    for name, run in variants.items():
        if not all(close(g, r) for g, r in zip(run(), want, strict=True)):
            line.append(f"{name} MISMATCH")
            continue
        rec = timed(run, name)
        records.append(rec)
        line.append(f"{name} {rec.device_us:.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...]")
    parser.add_argument("--ops", default="layer_norm,rms_norm")
    parser.add_argument("--peers", default="torch,compile,liger")
    args, cells = gpu_cells_args(parser, argv)
    dev, sms = device_info(), _runtime.sm_count()
    command = portable_command(
        [
            "python3",
            "benchmarks/norm_bwd_variants.py",
            *(argv if argv is not None else sys.argv[1:]),
        ]
    )
    compiled = {op: _compiled_peer(op) for op in ("rms_norm", "layer_norm")}
    records = []

    def timed(run, op, impl, m, n):
        return measure(run, op, impl, m, n, "bf16", "bwd", device=dev, reps=args.reps,
                       command=command, shape_set="norm_bwd_variants")  # fmt: skip

    for m, n in cells:
        for op in args.ops.split(","):
            is_rms = op == "rms_norm"
            x, w, b, dy, mean, rstd = backward_inputs(m, n, op)
            variants = _variants(x, w, b, dy, mean, rstd, is_rms, sms)
            line = [f"{op} {m}x{n}:"]
            time_matching(variants, lambda run, name, op=op, m=m, n=n:
                          timed(run, op, f"normlab {name}", m, n), line, records)  # fmt: skip
            del variants
            for peer in args.peers.split(","):
                impl = registry.get(op, peer)
                if impl.unavailable() is not None:
                    continue
                try:
                    if peer == "compile":  # dynamic shapes: one compile per op, not per cell
                        run = registry.norm_case(
                            compiled[op], op, m, n, torch.bfloat16, "bwd", "cuda"
                        )
                    else:
                        run = impl.build(m, n, torch.bfloat16, "bwd", "cuda")
                    rec = timed(run, op, peer, m, n)
                except Exception as exc:  # a peer that cannot run a cell is a result too
                    line.append(f"{peer} failed {exc!r}"[:120])
                    continue
                finally:
                    run = None
                records.append(rec)
                line.append(f"{peer} {rec.device_us:.1f}")
            print(" | ".join(line), flush=True)
            x = dy = w = b = mean = rstd = None
            torch.cuda.empty_cache()
        write_jsonl(records, args.out)
    write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
