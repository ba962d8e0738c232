"""Compile Triton kernels ahead, in parallel processes, so that a timed run finds them cached.

A population run meets dozens of kernel specializations (each tile, frame and chunk count, each
argument that is 1 or a multiple of 16); compiled one after another in the timing process, each
costs a second or more of a short GPU session. Triton keeps what it compiles in its on-disk
cache (``TRITON_CACHE_DIR``, by default ``~/.triton/cache``), shared by every process of the
machine; the timing process then loads a cached kernel in milliseconds. ``Pool`` starts such
warm-up processes (a benchmark script with ``--warm-shard i/n``) and waits for them, for a
bounded time; ``warm_rows`` picks a small row count that Triton specializes as it would the
real one. Nothing here imports a kernel.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

WORKERS_MAX = 12  # beyond this the machine's CPU, not the count, bounds the compiles
WORKERS_SPARE_CPUS = 2  # left to the timing process and torch.compile's own workers


def warm_rows(n_rows: int) -> int:
    """A small row count that Triton specializes as it does ``n_rows``: an int argument equal
    to 1 becomes a constant and one divisible by 16 is marked so (``normlab._launch``); 17
    is neither."""
    if n_rows < 1:
        raise ValueError(f"n_rows must be >= 1, got {n_rows}")
    if n_rows == 1:
        return 1
    return 16 if n_rows % 16 == 0 else 17


def default_workers(device: str) -> int:
    """Warm-up processes for a run on ``device``: none off a GPU (the interpreter compiles
    nothing), else the CPUs less a spare pair, at most WORKERS_MAX."""
    if device != "cuda":
        return 0
    return max(1, min(WORKERS_MAX, (os.cpu_count() or 1) - WORKERS_SPARE_CPUS))


def shard_commands(script: str, argv: Sequence[str], n: int) -> list[list[str]]:
    """The ``n`` warm-up command lines: this interpreter running ``script`` with ``argv`` and
    ``--warm-shard i/n``."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return [[sys.executable, script, *argv, "--warm-shard", f"{i}/{n}"] for i in range(1, n + 1)]


def take_shard(items: Sequence, spec: str) -> list:
    """Every n-th item from the i-th (``spec`` "i/n", 1 <= i <= n)."""
    try:
        i, n = (int(v) for v in spec.split("/"))
    except ValueError:
        raise ValueError(f"a shard is i/n (integers), got {spec!r}") from None
    if not 1 <= i <= n:
        raise ValueError(f"a shard i/n needs 1 <= i <= n, got {spec!r}")
    return list(items)[i - 1::n]


class Pool:
    """Warm-up processes running in the background: ``start`` them, do other work, then
    ``wait``. Their output goes to temporary files; only the tail of a failure is reported.

    On a GPU this process takes its CUDA context first: a GPU in exclusive-process compute mode
    then refuses the warm-up processes (they report it), never the process that times."""

    def __init__(self, commands: Sequence[Sequence[str]], env: dict | None = None):
        import torch

        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
        self.started = time.monotonic()
        self.last_lines: list[str] = []  # the last output line of each process that succeeded
        self._procs = []
        for cmd in commands:
            log = tempfile.TemporaryFile(mode="w+b")
            proc = subprocess.Popen(list(cmd), stdout=log, stderr=subprocess.STDOUT, env=env)
            self._procs.append((cmd, proc, log))

    def wait(self, timeout_s: float) -> list[str]:
        """Wait until every process has ended or ``timeout_s`` seconds since ``start`` have
        passed; kill (by its own handle) each one still running. Returns one line per process
        that failed or was killed."""
        problems = []
        for cmd, proc, log in self._procs:
            left = max(0.0, timeout_s - (time.monotonic() - self.started))
            try:
                rc = proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                problems.append(f"{_shard_of(cmd)}: killed after {timeout_s:.0f} s")
                log.close()
                continue
            log.seek(0)
            tail = (log.read().decode(errors="replace").strip().splitlines() or [""])[-1]
            if rc != 0:
                problems.append(f"{_shard_of(cmd)}: exit {rc}: {tail[:200]}")
            else:
                self.last_lines.append(tail)
            log.close()
        self._procs = []
        return problems


_SHARD_LINE = re.compile(r"^warm shard \d+/\d+: (\d+) of (\d+) calls")


def shard_line(shard: str, done: int, total: int) -> str:
    """What a warm-up process prints last (``tally`` reads it back)."""
    return f"warm shard {shard}: {done} of {total} calls"


def tally(lines: Sequence[str]) -> tuple[int, int]:
    """(calls done, calls planned) over the warm-up processes' last lines."""
    done = total = 0
    for line in lines:
        match = _SHARD_LINE.match(line)
        if match:
            done, total = done + int(match[1]), total + int(match[2])
    return done, total


def _shard_of(cmd: Sequence[str]) -> str:
    cmd = list(cmd)
    if "--warm-shard" in cmd[:-1]:
        return f"warm shard {cmd[cmd.index('--warm-shard') + 1]}"
    return " ".join(cmd)[:80]


def add_arguments(parser, warm_seconds: float) -> None:
    """``--warm-workers``, ``--warm-seconds`` and the warm-up processes' own ``--warm-shard``."""
    parser.add_argument("--warm-workers", type=int, default=None,
                        help="processes that compile Triton kernels ahead (default: on a GPU, "
                        "the CPUs less two, at most 12; 0: none)")  # fmt: skip
    parser.add_argument("--warm-seconds", type=float, default=warm_seconds)
    parser.add_argument("--warm-shard", help=argparse.SUPPRESS)  # i/n: a warm-up process


def workers(args, device: str) -> int:
    """The warm-up processes a run asked for (``--warm-workers``), else the default."""
    return default_workers(device) if args.warm_workers is None else args.warm_workers


def report(pool: Pool, args, run_budget) -> None:
    """Wait for the warm-up processes (``--warm-seconds``, within the run's budget) and print
    what failed and how many calls the others compiled."""
    for problem in pool.wait(min(args.warm_seconds, max(0.0, run_budget.left()))):
        print(f"warm-up: {problem}", flush=True)
    done, total = tally(pool.last_lines)
    print(f"warm-up done at {run_budget.elapsed():.0f} s: {done} of {total} calls in the "
          f"processes that finished", flush=True)
