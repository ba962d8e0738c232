"""The RMSNorm backward timed cold (L2 flushed) and warm (back to back), as notebook 03 shows it.

    python3 benchmarks/warm_vs_cold.py [--cells 2048x4096,256x4096,32768x4096] [--reps 50]

Per cell (bf16, the row launcher ``row.norm_backward`` planned): ``bench.time_call``'s device
time (the call's kernels from the profiler, the L2 flushed before each call) and wall time, and
``bench.time_warm``'s device time (the same kernels, no flush). Inputs that fit in L2 read
faster warm; inputs that do not fit time the same both ways.
"""

from __future__ import annotations

import argparse
import sys

import torch
from norm_bwd_variants import gpu_cells_args

from normlab import bench
from normlab.norms import row

CELLS = "2048x4096,256x4096,32768x4096"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default=CELLS, help="MxN[,MxN...]")
    parser.add_argument("--reps", type=int, default=50)
    args, cells = gpu_cells_args(parser, argv)
    dev = bench.device_info(measure_copy=False)
    print(f"{dev.card}, torch {torch.__version__}, L2 {dev.l2_bytes / 2**20:.0f} MiB")
    for m, n in cells:
        x = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        w = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        dy = torch.randn_like(x)
        _, mean, rstd = row.norm_forward(x, w, None, 1e-6, True)

        def run(x=x, w=w, dy=dy, mean=mean, rstd=rstd):
            return row.norm_backward(dy, x, w, None, mean, rstd, True)

        cold = bench.time_call(run, reps=args.reps)
        warm = bench.time_warm(run, reps=args.reps)
        inputs_mib = 3 * x.numel() * x.element_size() / 2**20  # x, dy read; dx written
        print(f"rms_norm bwd {m}x{n} bf16 ({inputs_mib:.0f} MiB of rows): cold device "
              f"{cold.device_us:.1f} µs (wall {cold.wall_us:.1f}), warm device {warm:.1f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
