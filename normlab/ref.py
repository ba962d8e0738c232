"""Reference implementations, one per op, in plain PyTorch at fp32 (or fp64 if given fp64).

These are the oracle for the tests, the ``eager`` baseline of the benchmarks and the check
cell of every notebook. They import only torch.
"""

from __future__ import annotations

import torch  # noqa: F401

# ============================================================================================
# Norms                                                           -- owned by the norm kernels
# ============================================================================================


# ============================================================================================
# Entropy losses                                                  -- owned by the entropy kernels
# ============================================================================================
