"""How long a loss kernel's loops take at least, on each pipe that can bind, from SASS counts.

A memory-bound kernel runs no faster than its bytes at copy speed. Its loops also cannot run
faster than an SM issues their instructions, or than its special-function unit (MUFU: ``ex2``,
``lg2``, ``tanh``, ``rcp``) returns their results. The counts, instructions and MUFU operations
a logit over a loss kernel's tile loops, come from its SASS compiled for sm_90
(``benchmarks/kernel_loops.py``; shipped as ``normlab/data/sm90-loss-loops.json``). The rates
are compute capability 9.0's, from the CUDA C++ Programming Guide's throughput table
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/#arithmetic-instructions). These are
bounds computed from counts, not measurements: a kernel's time is at least the largest of them,
and latency can keep it above all three.
"""

from __future__ import annotations

ISSUE_PER_CLOCK_SM = 4 * 32  # 4 schedulers an SM, one warp instruction (32 threads) each a clock
MUFU_PER_CLOCK_SM = 16  # MUFU results a clock an SM (exp2, log2, reciprocal; tanh taken alike)


def bound_us(per_logit: float, per_clock_sm: int, n_logits: int, sm_count: int,
             clock_ghz: float) -> float:  # fmt: skip
    """The least µs for ``n_logits`` logits that each take ``per_logit`` operations on a pipe
    that completes ``per_clock_sm`` a clock on each of ``sm_count`` SMs at ``clock_ghz``."""
    if per_clock_sm <= 0 or sm_count <= 0 or not clock_ghz > 0:
        raise ValueError("pipe rate, SM count and clock must be positive")
    return per_logit * n_logits / (per_clock_sm * sm_count * clock_ghz * 1e3)


def issue_us(instructions: float, n_logits: int, sm_count: int, clock_ghz: float) -> float:
    """The least µs to issue ``instructions`` a logit (thread instructions)."""
    return bound_us(instructions, ISSUE_PER_CLOCK_SM, n_logits, sm_count, clock_ghz)


def mufu_us(mufu: float, n_logits: int, sm_count: int, clock_ghz: float) -> float:
    """The least µs to run ``mufu`` MUFU operations a logit."""
    return bound_us(mufu, MUFU_PER_CLOCK_SM, n_logits, sm_count, clock_ghz)
