"""RMSNorm and LayerNorm: one family, read top to bottom.

``config`` (the planner) -> ``tiles`` (shared @triton.jit helpers) -> ``row`` (one row per
program, the backward strategies) and ``block_row`` (many narrow rows per program) ->
``reduce`` (partial rows into the parameter's grad) -> ``op`` (validation, autograd,
torch.compile, the public functions).
"""

from normlab.norms.op import (
    LAYOUTS,
    STRATEGIES,
    add_layer_norm,
    add_rms_norm,
    layer_norm,
    rms_norm,
)

__all__ = ["LAYOUTS", "STRATEGIES", "add_layer_norm", "add_rms_norm", "layer_norm", "rms_norm"]
