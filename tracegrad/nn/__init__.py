"""Neural-network building blocks: `Module`, layers, and `functional` (activations, losses)."""

from . import functional, utils
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .modules import (
    GELU,
    Dropout,
    IncompatibleKeys,
    LayerNorm,
    Linear,
    Module,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
    manual_seed,
)

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
    "utils",
    "GELU",
    "Dropout",
    "IncompatibleKeys",
    "LayerNorm",
    "Linear",
    "Module",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "functional",
    "manual_seed",
]
