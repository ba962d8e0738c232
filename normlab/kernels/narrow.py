# PLACEHOLDER: replaced by the block-row (narrow) work. Interface used by kernels/norm.py:
def block_row_forward(x, weight, bias, eps, is_rms):
    """x: (n_rows, n_cols) contiguous -> (y, mean or None, rstd) with mean/rstd fp32 (n_rows,)."""
    raise NotImplementedError


def block_row_backward(dy, x, weight, bias, mean, rstd, is_rms, strategy="auto"):
    """-> (dx, dweight or None, dbias or None); dweight/dbias fp32-reduced, cast to param dtype."""
    raise NotImplementedError
