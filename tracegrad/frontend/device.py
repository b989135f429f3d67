"""Devices. tracegrad runs on the CPU: a script that asks for another device gets an error that
says so, never a silent run on the CPU it did not ask for."""

from __future__ import annotations

from typing import Any


def require_cpu(device: Any, where: str) -> None:
    """Accept "cpu", "cpu:0" or a device object whose `type` is "cpu" (torch.device's shape);
    raise ValueError for anything else ("cuda", "cuda:0", "mps", ...)."""
    kind = device if isinstance(device, str) else getattr(device, "type", None)
    if not isinstance(kind, str):
        raise TypeError(f"{where}: expected a device such as 'cpu', got {device!r}")
    if kind.partition(":")[0] != "cpu":
        raise ValueError(
            f"{where}: device {str(device)!r} is not available: tracegrad runs on the CPU "
            "(use 'cpu')"
        )
