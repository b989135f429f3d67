"""Library pieces training scripts use besides layers: `data` (datasets, samplers, DataLoader),
`checkpoint` (activation checkpointing's interface)."""

from tracegrad.utils import checkpoint, data

__all__ = ["checkpoint", "data"]
