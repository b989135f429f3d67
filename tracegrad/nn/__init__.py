"""Neural-network building blocks: `Module`, layers, and `functional` (activations, losses)."""

from . import functional
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
