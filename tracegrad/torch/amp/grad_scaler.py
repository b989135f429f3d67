"""`torch.amp.grad_scaler`: `GradScaler`, disabled (as PyTorch's is without CUDA), and the
states PyTorch's keeps per optimizer (`OptState`, which fastai's mixed-precision callback
imports)."""

from __future__ import annotations

import enum
from typing import Any

from tracegrad.torch.amp.autocast_mode import warn_once

__all__ = ["GradScaler", "OptState"]


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class GradScaler:
    """PyTorch's loss scaler, disabled: there is no float16 CUDA training to protect from
    underflow (PyTorch disables its own, with a warning, when CUDA is not available)."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:  # fmt: skip
        if enabled:
            warn_once("GradScaler is enabled, but tracegrad has no CUDA: disabling it")

    def scale(self, outputs: Any) -> Any:
        return outputs

    def unscale_(self, optimizer: Any) -> None:
        pass

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        pass

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass
