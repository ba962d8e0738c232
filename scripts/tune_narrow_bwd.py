"""Sweep the block-row backward launch config on the GPU (tuning data for configs.py).

    python3 scripts/tune_narrow_bwd.py --out DIR [--budget-s 60]

7,864,320 rows, bf16, both norms, widths 32..256: tile elements x warps x persistent programs per
SM. Timing and inputs come from scripts/gpu_check_narrow.py (CUDA events per call, L2 flushed).
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_check_narrow as g  # noqa: E402

VARIANTS = [
    {"tile_elems": t, "num_warps": w, "programs_per_sm": p}
    for t, w, p in itertools.product((2048, 4096), (4, 8), (2, 4, 8, 16))
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--budget-s", type=float, default=60.0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rec = g.Recorder(args.out / "narrow_bwd_sweep.json", args.budget_s)
    rec.data["meta"]["script"] = "scripts/tune_narrow_bwd.py"
    start = time.time()
    for norm in ("ln", "rms"):
        for n_cols in (32, 64, 128, 256):
            inputs = g.make_inputs(g.M, n_cols, norm)
            best = (math.inf, None)
            for v in VARIANTS:
                if time.time() - start > args.budget_s:
                    rec.data["skipped"].append(f"{norm} {n_cols} {v}")
                    continue
                cfg = g.configs.block_row_bwd_config(n_cols, **v)
                r = g.measure(rec, "variants", "block_row", norm, n_cols, g.M, g._bwd_only, *inputs,
                              norm, cfg, extra={"variant": v, "cfg": cfg._asdict()})
                if r.get("bwd", math.inf) < best[0]:
                    best = (r["bwd"], v)
            default = g.measure(rec, "timings", "block_row", norm, n_cols, g.M, g._bwd_only, *inputs,
                                norm, g.configs.block_row_bwd_config(n_cols))
            print(f"{norm} N={n_cols}: default {default.get('bwd', math.nan):.0f} us, "
                  f"best {best[0]:.0f} us {best[1]}", flush=True)
            del inputs
            g._empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
