"""Library pieces training scripts use besides layers: `data` (datasets, samplers, DataLoader)."""

from tracegrad.utils import data

__all__ = ["data"]
