"""normlab ÷ the best peer over a shape population: the numbers behind the targets.

A population run (``benchmarks/norm_population.py``) times normlab's default and its peers
(torch, torch.compile, Liger-Kernel) at every member, in one process. For each member, op and
direction the ratio is the fastest valid peer's device time over normlab's (above 1: normlab is
faster); members measured in several runs keep the latest run's records.

A norm population run may also time the 11 peer shapes (records tagged
``shape_set="peers"``): ``without_peers`` keeps them out of the population's verdicts and
``peer_lines`` judges them against their own targets.

The loss population (``benchmarks/vocab_population.py``, records tagged
``shape_set="vocab_population"``) has the every-shape target only: its verdicts take
``geomean_target=None`` and a ``shape_set`` that keeps other runs' records out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

TARGET_EVERY_SHAPE = 0.90  # normlab / best peer at every member, each op and direction
TARGET_GEOMEAN = 1.15  # the geometric mean over the population, each op and direction
# The 11 shapes of the peers' published table, recorded beside the population with
# shape_set="peers": they are judged on their own (peer_lines), never in the population's verdicts.
PEERS_SET = "peers"
VOCAB_SET = "vocab_population"  # the losses' population (benchmarks/vocab_population.py)
PEERS_TARGET = 0.98  # normlab / best peer at each of the 11 peer shapes
LN_BWD_TARGET_US = 430.0  # LayerNorm backward at 32768 x 8192, bf16
OPTION_COST_TARGET = 1.05  # a loss option's forward+backward over its base op's


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
    records tagged ``shape_set`` when it is given. A member measured in several runs keeps the
    latest (by date; records of one date in the order given)."""
    cells: dict[tuple, dict] = {}
    for r in sorted(records, key=lambda r: r.date or ""):
        if not r.valid or r.device_us is None or r.device_us <= 0:
            continue
        if shape_set is not None and r.shape_set != shape_set:
            continue
        key = (r.op, r.direction, r.M, r.N, r.dtype)
        cells.setdefault(key, {})[r.impl] = r  # later runs win
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


def vocab_verdicts(records, worst: int = 5) -> list[Verdict]:
    """The loss population's verdicts: its records only (``VOCAB_SET``), no geomean target."""
    return verdicts(records, worst, shape_set=VOCAB_SET, geomean_target=None)


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


def without_peers(records) -> list:
    """The records of a norm population run without its peer shapes (``PEERS_SET``)."""
    return [r for r in records if r.shape_set != PEERS_SET]


def peer_lines(records) -> list[str]:
    """The peer shapes (records tagged ``PEERS_SET``; others are ignored): per op and direction
    the lowest best peer / normlab against ``PEERS_TARGET``, then normlab's LayerNorm backward at
    32768 x 8192 against ``LN_BWD_TARGET_US``."""
    peers = [r for r in records if r.shape_set == PEERS_SET]
    groups: dict[tuple, list[Ratio]] = {}
    for r in ratios(peers):
        groups.setdefault((r.op, r.direction), []).append(r)
    lines = []
    for (op, direction), rs in sorted(groups.items()):
        low = min(rs, key=lambda r: r.ratio)
        below = [f"{r.M}x{r.N} {r.ratio:.2f}" for r in rs if r.ratio < PEERS_TARGET]
        lines.append(f"peers {op} {direction}: {len(rs)} shapes, lowest {low.M}x{low.N} "
                     f"{low.ratio:.2f}x (target >= {PEERS_TARGET}x): "
                     f"{'missed at ' + ', '.join(below) if below else 'met'}")  # fmt: skip
    ln = [r for r in peers if (r.op, r.direction, r.M, r.N, r.impl) ==
          ("layer_norm", "bwd", 32768, 8192, "normlab") and r.valid]  # fmt: skip
    if ln:
        us = ln[-1].device_us
        lines.append(f"peers layer_norm bwd 32768x8192: {us:.0f} µs (target <= "
                     f"{LN_BWD_TARGET_US:.0f}): {'met' if us <= LN_BWD_TARGET_US else 'missed'}")
    return lines
