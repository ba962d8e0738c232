"""Markdown tables of a recorded results file, for the README (every number comes from the file).

    python scripts/results_md.py normlab/data/nvidia-h200-2026-11-29.jsonl > /tmp/tables.md

Per op and direction: one row per shape, normlab's default (strategy/layout/form "auto"), its
best variant, the fastest peer measured in the same run, and their ratio (peer µs / normlab µs:
above 1 means normlab is faster).
"""

from __future__ import annotations

import sys
from collections import defaultdict

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from normlab.bench.records import read_records  # noqa: E402

OP_ORDER = ("rms_norm", "layer_norm", "reverse_kl", "soft_cross_entropy", "cross_entropy")


def is_default(rec) -> bool:
    return rec.impl == "normlab" and rec.strategy in (None, "", "auto") and rec.layout in (None, "", "auto") \
        and rec.block_cap is None


def main(path: str) -> None:
    records = [r for r in read_records(path) if r.valid and r.device_us]
    if not records:
        print(f"(no valid records in {path})")
        return
    first = records[0]
    print(f"Card: {first.card} ({first.sm_count} SMs), torch {first.torch}, triton {first.triton}, "
          f"date {first.date}, commit {first.commit}. Measured copy roofline "
          f"{first.roofline_gbps:.0f} GB/s (datasheet {first.datasheet_gbps:.0f}). Device time per call, "
          f"cold L2; GB/s on the minimal bytes model.\n")
    groups = defaultdict(list)
    for r in records:
        groups[(r.op, r.direction, r.dtype)].append(r)
    for key in sorted(groups, key=lambda k: (OP_ORDER.index(k[0]) if k[0] in OP_ORDER else 99, k[1])):
        op, direction, dtype = key
        rows = groups[key]
        print(f"#### {op} {direction} ({dtype})\n")
        print("| M×N | normlab default µs | GB/s | % copy | best normlab variant µs | fastest peer µs | "
              "peer/normlab |")
        print("|---|---|---|---|---|---|---|")
        shapes = sorted({(r.M, r.N) for r in rows}, key=lambda s: (s[0] * s[1], s))
        for M, N in shapes:
            here = [r for r in rows if (r.M, r.N) == (M, N)]
            ours = [r for r in here if r.impl == "normlab"]
            default = next((r for r in ours if is_default(r)), None)
            best_ours = min(ours, key=lambda r: r.device_us, default=None)
            peers = [r for r in here if r.impl not in ("normlab", "copy")]
            peer = min(peers, key=lambda r: r.device_us, default=None)
            if default is None or peer is None:
                continue
            print(f"| {M}×{N} | {default.device_us:.1f} | {default.gbps:.0f} | "
                  f"{100 * default.frac_roofline:.0f}% | {best_ours.label} {best_ours.device_us:.1f} | "
                  f"{peer.label} {peer.device_us:.1f} | {peer.device_us / default.device_us:.2f}× |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
