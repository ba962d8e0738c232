"""normlab ÷ the best peer over a shape population: the numbers behind the targets.

A population run (``benchmarks/norm_population.py``) times normlab's default and its peers
(torch, torch.compile, Liger-Kernel) at every member, in one process. For each member, op and
direction the ratio is the fastest valid peer's device time over normlab's (above 1: normlab is
faster); members measured in several runs keep the latest run's records.

The loss population (``benchmarks/vocab_population.py``, records tagged
``shape_set="vocab_population"``) has the every-shape target only: its verdicts take
``geomean_target=None`` and a ``shape_set`` that keeps other runs' records out.
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
    geomean_target: float | None = TARGET_GEOMEAN  # None: the geomean is reported, not judged

    @property
    def met(self) -> bool:
        geo_met = self.geomean_target is None or self.geomean >= self.geomean_target
        return geo_met and self.below == 0


def ratios(records, shape_set: str | None = None) -> list[Ratio]:
    """One Ratio per (op, direction, M, N, dtype) with normlab and at least one peer; only the
    records tagged ``shape_set`` when it is given."""
    cells: dict[tuple, dict] = {}
    for r in records:
        if not r.valid or r.device_us is None or r.device_us <= 0:
            continue
        if shape_set is not None and r.shape_set != shape_set:
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


def verdicts(records, worst: int = 5, *, shape_set: str | None = None,
             geomean_target: float | None = TARGET_GEOMEAN) -> list[Verdict]:  # fmt: skip
    """Per op and direction: geomean, members below the every-shape target, the worst; only the
    records of ``shape_set`` when given; ``geomean_target`` None: no geomean target."""
    groups: dict[tuple, list[Ratio]] = {}
    for r in ratios(records, shape_set):
        groups.setdefault((r.op, r.direction), []).append(r)
    out = []
    for (op, direction), rs in sorted(groups.items()):
        geo = math.exp(sum(math.log(r.ratio) for r in rs) / len(rs))
        below = sum(r.ratio < TARGET_EVERY_SHAPE for r in rs)
        lowest = tuple(sorted(rs, key=lambda r: r.ratio)[:worst])
        out.append(Verdict(op, direction, len(rs), geo, below, lowest, geomean_target))
    return out


def verdict_line(v: Verdict, *, peers: bool = False) -> str:
    """One line: the numbers, the targets, and what is missed; ``peers``: each worst cell names
    its best peer."""
    target = v.geomean_target
    missed = ([f"geomean at {v.geomean / target:.2f}x its target"]
              if target is not None and v.geomean < target else [])  # fmt: skip
    if v.below:
        missed.append(f"{v.below} shapes below {TARGET_EVERY_SHAPE}x")
    worst = ", ".join(f"{r.M}x{r.N} {r.dtype} {r.ratio:.2f}{f' ({r.peer})' if peers else ''}"
                      for r in v.worst)  # fmt: skip
    geo_target = f"target >= {target}x" if target is not None else "no target"
    return (f"{v.op} {v.direction}: {v.n} shapes, geomean {v.geomean:.3f}x ({geo_target}), "
            f"{v.below} below {TARGET_EVERY_SHAPE}x (target 0): "
            f"{'missed: ' + ', '.join(missed) if missed else 'met'}; worst: {worst}")
