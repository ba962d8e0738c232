"""normlab: fused Triton kernels for the memory-bound ops of LLM training, and a lab to measure
them.

Importing normlab selects the runtime first (compiled kernels on a CUDA GPU, the Triton
interpreter on CPU tensors otherwise); see ``normlab._runtime``.
"""

from normlab._runtime import DEVICE, INTERPRET, MODE  # noqa: I001  (must run before any kernel import)
from normlab.norms import add_layer_norm, add_rms_norm, layer_norm, rms_norm
from normlab.losses import cross_entropy, forward_kl, jsd, reverse_kl, soft_cross_entropy
from normlab.nn import (
    CrossEntropyLoss,
    ForwardKLLoss,
    JSDLoss,
    LayerNorm,
    ReverseKLLoss,
    RMSNorm,
    SoftCrossEntropyLoss,
)
from normlab.patching import patch

from normlab._version import __version__ as __version__

__all__ = [
    "DEVICE",
    "INTERPRET",
    "MODE",
    "CrossEntropyLoss",
    "ForwardKLLoss",
    "JSDLoss",
    "LayerNorm",
    "RMSNorm",
    "ReverseKLLoss",
    "SoftCrossEntropyLoss",
    "add_layer_norm",
    "add_rms_norm",
    "cross_entropy",
    "forward_kl",
    "jsd",
    "layer_norm",
    "patch",
    "reverse_kl",
    "rms_norm",
    "soft_cross_entropy",
]
