"""The atomic and two-stage dγ strategies at wide rows: their planned tile against two passes.

    python3 benchmarks/norm_strategy_tiles.py --out out/norm_strategy_tiles.jsonl [--reps 10]

Compiled for sm_90, the two-stage backward's single pass spills at 12288 columns: two fp32
tile-shaped accumulators beside the row at 16 warps exceed the 128 registers a thread that
leaves (``benchmarks/data/norm_launch_code_*_sm90.txt``). For each cell and norm (bf16) this
times, in one process (device time, L2 flushed), the backward of each strategy as the op plans
it ("<strategy>") and with its row tile walked in two passes ("<strategy> two_pass"), beside
the default plan's. Every variant's dx/dγ/dβ is checked against the default's first. Records
carry ``shape_set="norm_strategy_tiles"`` and the variant in ``impl``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from norm_bwd_variants import EPS, backward_inputs, gpu_cells_args, time_matching

from normlab.bench import device_info
from normlab.bench.records import portable_command, write_jsonl
from normlab.bench.sweep import measure
from normlab.norms import op as norm_op
from normlab.norms import row

CELLS = "4096x4096,4096x8192,4096x12288,4096x16384,16384x12288"
STRATEGIES = ("atomic", "two_stage")


def _variants(x, w, b, dy, mean, rstd, is_rms, eps):
    """name -> zero-argument callable of one backward: the default plan, then each strategy as
    planned and in two passes."""
    def planned(strategy):
        return lambda: norm_op._backward_launch(dy, None, x, w, b, mean, rstd, eps, 0.0, is_rms,
                                                strategy, "auto")  # fmt: skip

    def two_pass(strategy):
        return lambda: row.norm_backward(dy, x, w, b, mean, rstd, is_rms, strategy=strategy,
                                         two_pass=True)  # fmt: skip

    variants = {"default": planned("auto")}
    for strategy in STRATEGIES:
        variants[strategy], variants[f"{strategy} two_pass"] = planned(strategy), two_pass(strategy)
    return variants


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...]")
    args, cells = gpu_cells_args(parser, argv)
    dev = device_info()
    command = portable_command(["python3", "benchmarks/norm_strategy_tiles.py",
                                *(argv if argv is not None else sys.argv[1:])])  # fmt: skip
    records = []
    for (m, n), op in ((cell, op) for cell in cells for op in ("rms_norm", "layer_norm")):
        x, w, b, dy, mean, rstd = backward_inputs(m, n, op)
        variants = _variants(x, w, b, dy, mean, rstd, op == "rms_norm", EPS[op])
        line = [f"{op} {m}x{n}:"]

        def timed(run, name, op=op, m=m, n=n):
            return measure(run, op, f"normlab {name}", m, n, "bf16", "bwd", device=dev,
                           reps=args.reps, command=command,
                           shape_set="norm_strategy_tiles")  # fmt: skip

        time_matching(variants, timed, line, records)
        print(" | ".join(line), flush=True)
        write_jsonl(records, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
