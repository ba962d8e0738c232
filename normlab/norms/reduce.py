"""The second stage of the dγ/dβ reduction: sum fp32 partial rows into the parameter's grad.

Column-parallel, in a fixed order (bitwise deterministic), in fp32, written once in the
parameter's dtype, optionally added into an existing ``.grad`` (fused accumulation).
"""

import triton
import triton.language as tl

from normlab._host import cdiv
from normlab._launch import launch
from normlab.norms import config


@triton.jit
def _reduce_partials_kernel(
    dw_partial_ptr,  # (n_partials, n_cols) fp32 dweight partials
    db_partial_ptr,  # (n_partials, n_cols) fp32 dbias partials
    dw_ptr,  # (n_cols,) dweight out, param dtype (added into when ACCUMULATE_W)
    db_ptr,  # (n_cols,) dbias out, param dtype (added into when ACCUMULATE_B)
    n_partials,
    n_cols,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    ACCUMULATE_W: tl.constexpr,
    ACCUMULATE_B: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Column-parallel fp32 sum of the partial rows, in a fixed order (deterministic)."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    dw_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db_acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        mask = (rows < n_partials)[:, None] & col_mask[None, :]
        offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
        if HAS_WEIGHT:
            dw_acc += tl.load(dw_partial_ptr + offsets, mask=mask, other=0.0)
        if HAS_BIAS:
            db_acc += tl.load(db_partial_ptr + offsets, mask=mask, other=0.0)
    if HAS_WEIGHT:
        dw = tl.sum(dw_acc, axis=0)
        if ACCUMULATE_W:
            dw += tl.load(dw_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=col_mask)
    if HAS_BIAS:
        db = tl.sum(db_acc, axis=0)
        if ACCUMULATE_B:
            db += tl.load(db_ptr + cols, mask=col_mask, other=0.0).to(tl.float32)
        tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=col_mask)


def reduce_partials(
    dw_partial,
    db_partial,
    dw,
    db,
    *,
    accumulate_w=False,
    accumulate_b=False,
    block_m=None,
    block_n=None,
    num_warps=None,
):
    """Sum (n_partials, n_cols) fp32 partials over rows into dw/db (param dtype), in fp32."""
    ref = dw_partial if dw_partial is not None else db_partial
    n_partials, n_cols = ref.shape
    tile_m, tile_n, warps = config.norm_reduce_config(
        n_cols, int(dw_partial is not None) + int(db_partial is not None), n_partials
    )
    block_m, block_n = block_m or tile_m, block_n or tile_n
    launch(
        _reduce_partials_kernel, (cdiv(n_cols, block_n),),
        dw_partial, db_partial, dw, db,  # None where absent: a constexpr, no launch argument
        n_partials, n_cols,
        HAS_WEIGHT=dw_partial is not None, HAS_BIAS=db_partial is not None,
        ACCUMULATE_W=bool(accumulate_w), ACCUMULATE_B=bool(accumulate_b),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps or warps,
    )  # fmt: skip
    return dw, db
