"""normlab ÷ the best peer over a shape population: the numbers behind the targets.

A population run (``benchmarks/norm_population.py``) times normlab's default and its peers
(torch, torch.compile, Liger-Kernel) at every member, in one process. For each member, op and
direction the ratio is the fastest valid peer's device time over normlab's (above 1: normlab is
faster); members measured in several runs keep the latest run's records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TARGET_EVERY_SHAPE = 0.90  # normlab / best peer at every member, each op and direction
TARGET_GEOMEAN = 1.15  # the geometric mean over the population, each op and direction


@dataclass(frozen=True)
class Ratio:
    op: str
    direction: str
    M: int
    N: int
    dtype: str
    ratio: float  # best peer µs / normlab µs
    peer: str  # the best peer's impl
    commit: str


@dataclass(frozen=True)
class Verdict:
    op: str
    direction: str
    n: int
    geomean: float
    below: int  # members under TARGET_EVERY_SHAPE
    worst: tuple[Ratio, ...]  # the lowest ratios, lowest first

    @property
    def met(self) -> bool:
        return self.geomean >= TARGET_GEOMEAN and self.below == 0


def ratios(records) -> list[Ratio]:
    """One Ratio per (op, direction, M, N, dtype) with normlab and at least one peer."""
    cells: dict[tuple, dict] = {}
    for r in records:
        if not r.valid or r.device_us is None or r.device_us <= 0:
            continue
        key = (r.op, r.direction, r.M, r.N, r.dtype)
        cells.setdefault(key, {})[r.impl] = r  # later records (runs) win
    out = []
    for (op, direction, m, n, dtype), by_impl in cells.items():
        ours = by_impl.get("normlab")
        peers = {k: v for k, v in by_impl.items() if k != "normlab"}
        if ours is None or not peers:
            continue
        peer = min(peers, key=lambda k: peers[k].device_us)
        out.append(Ratio(op, direction, m, n, dtype, peers[peer].device_us / ours.device_us,
                         peer, ours.commit))  # fmt: skip
    return out


def verdicts(records, worst: int = 5) -> list[Verdict]:
    """Per op and direction: geomean, members below the every-shape target, the worst."""
    groups: dict[tuple, list[Ratio]] = {}
    for r in ratios(records):
        groups.setdefault((r.op, r.direction), []).append(r)
    out = []
    for (op, direction), rs in sorted(groups.items()):
        geo = math.exp(sum(math.log(r.ratio) for r in rs) / len(rs))
        below = sum(r.ratio < TARGET_EVERY_SHAPE for r in rs)
        lowest = tuple(sorted(rs, key=lambda r: r.ratio)[:worst])
        out.append(Verdict(op, direction, len(rs), geo, below, lowest))
    return out


def verdict_line(v: Verdict) -> str:
    """One line: the numbers, the targets, and what is missed."""
    missed = ([f"geomean at {v.geomean / TARGET_GEOMEAN:.2f}x its target"]
              if v.geomean < TARGET_GEOMEAN else [])  # fmt: skip
    if v.below:
        missed.append(f"{v.below} shapes below {TARGET_EVERY_SHAPE}x")
    worst = ", ".join(f"{r.M}x{r.N} {r.dtype} {r.ratio:.2f}" for r in v.worst)
    return (f"{v.op} {v.direction}: {v.n} shapes, geomean {v.geomean:.3f}x (target >= "
            f"{TARGET_GEOMEAN}x), {v.below} below {TARGET_EVERY_SHAPE}x (target 0): "
            f"{'missed: ' + ', '.join(missed) if missed else 'met'}; worst: {worst}")
