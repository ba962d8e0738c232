"""RMSNorm's backward at a few widths, each launched twice, for Nsight Compute to profile (GPU).

    ncu --clock-control none --kernel-name regex:'norm_bwd_persistent|fused_add_rms_norm_backward' \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        --section LaunchStats --section Occupancy --log-file out/ncu.txt \
        python3 benchmarks/norm_bwd_profile.py --cells 65536x12288,65536x14336

Per cell (bf16): the fused add's planned backward (``row.norm_backward`` with dh), the plain one,
and Liger-Kernel's fused-add backward where it imports. It launches each twice (the first
compiles) and times nothing: the profiler's report is the result.
"""

from __future__ import annotations

import argparse
import sys

import torch
from norm_bwd_variants import parse_cells
from norm_fused_add import liger_backward

from normlab.norms import row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="65536x12288,65536x14336", help="MxN[,MxN...]")
    args = parser.parse_args(argv)
    cells = parse_cells(parser, args.cells)
    if not torch.cuda.is_available():
        parser.error("needs a CUDA GPU")
    for m, n in cells:
        bf16 = {"dtype": torch.bfloat16, "device": "cuda"}
        h, dy, dh = (torch.randn(m, n, **bf16) for _ in range(3))
        w = (1 + 0.1 * torch.randn(n, device="cuda")).to(torch.bfloat16)
        _, _, rstd = row.norm_forward(h, w, None, 1e-6, True)
        liger = liger_backward(h, w, dy, dh, rstd)  # None without Liger-Kernel
        for _ in range(2):
            row.norm_backward(dy, h, w, None, None, rstd, True, dh=dh)
            row.norm_backward(dy, h, w, None, None, rstd, True)
            if liger is not None:
                liger()
        torch.cuda.synchronize()
        print(f"{m}x{n}: launched", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
