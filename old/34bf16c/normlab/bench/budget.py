"""A wall-clock budget for a benchmark run on a lent GPU: stop starting work past it.

A run is given ``--max-seconds S`` (from its own start) and/or ``--deadline T`` (a Unix time, so
several scripts in one shell line share one limit: ``D=$(( $(date +%s) + 380 ))``). The script
asks ``allows(next_s)`` before each unit of work (a population member, a variant) and stops when
the work, at the length of the last one, would end past the limit; what it measured is still
written and summarized. Work already started is never cut, so a run can overrun by one unit.
"""

from __future__ import annotations

import argparse
import math
import time


class Budget:
    """The end of a run's wall time as a Unix time (``math.inf``: no limit)."""

    def __init__(self, max_seconds: float | None = None, deadline: float | None = None,
                 start: float | None = None):  # fmt: skip
        if max_seconds is not None and max_seconds < 0:
            raise ValueError(f"max_seconds must be >= 0, got {max_seconds}")
        self.start = time.time() if start is None else start
        ends = [math.inf]
        if max_seconds is not None:
            ends.append(self.start + max_seconds)
        if deadline is not None:
            ends.append(deadline)
        self.end = min(ends)

    def left(self) -> float:
        """Seconds left (negative past the end)."""
        return self.end - time.time()

    def elapsed(self) -> float:
        return time.time() - self.start

    def allows(self, next_s: float = 0.0) -> bool:
        """Whether work expected to take ``next_s`` seconds ends within the budget."""
        return time.time() + next_s <= self.end


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-seconds`` and ``--deadline`` on a script's parser."""
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop starting new work past this many seconds from the start")
    parser.add_argument("--deadline", type=float, default=None,
                        help="stop starting new work past this Unix time (date +%%s)")  # fmt: skip


def from_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Budget:
    """The Budget of parsed ``--max-seconds`` / ``--deadline`` (a parser error if negative)."""
    if args.max_seconds is not None and args.max_seconds < 0:
        parser.error("--max-seconds must be >= 0")
    return Budget(args.max_seconds, args.deadline)
