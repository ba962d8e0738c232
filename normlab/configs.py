"""Launch heuristics and dispatch thresholds, each beside the measurement that justifies it.

Imports only the standard library (and torch/triton for types); kernels read from here,
never the reverse. Recorded measurements live in ``normlab/data/``.
"""

from __future__ import annotations

# ============================================================================================
# Row-per-program norms (forward, backward strategies)          -- owned by the norm kernels
# ============================================================================================


# ============================================================================================
# Block-row (narrow) norms                                        -- owned by the narrow kernels
# ============================================================================================


def use_block_row(n_rows: int, n_cols: int) -> bool:
    """layout="auto": pack many narrow rows per program? PLACEHOLDER until block-row kernels land."""
    return False


# ============================================================================================
# Entropy losses (reverse KL, soft / label cross-entropy)        -- owned by the entropy kernels
# ============================================================================================
