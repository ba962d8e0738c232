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


# Widest row the block-row kernels take. Seed 003 (H100) found block-row 1.98x faster than
# one row per program at 256 columns and no faster at 512. Initial guess for the H200, not yet measured.
BLOCK_ROW_MAX_COLS = 256
# layout="auto" takes block-row only from this many rows (seed 003's threshold: below it
# the row path already fills the GPU). Initial guess, not yet measured on the H200.
BLOCK_ROW_MIN_ROWS = 4096
# Forward tile: BLOCK_ROWS x next_pow2(n_cols) elements, at most this many elements and rows
# (seed 003's 4096-element, 64-row tiles). Initial guess, not yet measured on the H200.
BLOCK_ROW_TILE_ELEMS = 4096
BLOCK_ROW_MAX_ROWS = 64
# Forward warps: one per this many tile elements (8 fp32 values a thread), clamped to [1, 8].
# Initial guess, not yet measured.
BLOCK_ROW_FWD_ELEMS_PER_WARP = 256
BLOCK_ROW_MAX_WARPS = 8
# Backward: tile elements (smaller than the forward's: the fp32 dγ and dβ tile accumulators
# live in registers beside x and dy), warps, and persistent programs per SM (seed 003 uses 4).
# Initial guesses, not yet measured.
BLOCK_ROW_BWD_TILE_ELEMS = 2048
BLOCK_ROW_BWD_WARPS = 4
BLOCK_ROW_BWD_PROGRAMS_PER_SM = 4


def _block_cols(n_cols: int) -> int:
    """Tile columns: the next power of two >= n_cols (tl.arange needs a power of two)."""
    return 1 << max(0, n_cols - 1).bit_length()


def use_block_row(n_rows: int, n_cols: int) -> bool:
    """layout="auto": pack many narrow rows per program (True) or one row per program (False)?"""
    return n_cols <= BLOCK_ROW_MAX_COLS and n_rows >= BLOCK_ROW_MIN_ROWS


def block_row_fwd_config(n_cols: int) -> tuple[int, int]:
    """-> (BLOCK_ROWS, num_warps) for the block-row forward of rows n_cols wide."""
    block_cols = _block_cols(n_cols)
    block_rows = max(1, min(BLOCK_ROW_MAX_ROWS, BLOCK_ROW_TILE_ELEMS // block_cols))
    warps = (block_rows * block_cols) // BLOCK_ROW_FWD_ELEMS_PER_WARP
    return block_rows, max(1, min(BLOCK_ROW_MAX_WARPS, warps))


def block_row_bwd_config(n_cols: int) -> tuple[int, int, int]:
    """-> (BLOCK_ROWS, num_warps, programs per SM) for the persistent block-row backward."""
    block_cols = _block_cols(n_cols)
    block_rows = max(1, min(BLOCK_ROW_MAX_ROWS, BLOCK_ROW_BWD_TILE_ELEMS // block_cols))
    return block_rows, BLOCK_ROW_BWD_WARPS, BLOCK_ROW_BWD_PROGRAMS_PER_SM


# ============================================================================================
# Entropy losses (reverse KL, soft / label cross-entropy)        -- owned by the entropy kernels
# ============================================================================================
