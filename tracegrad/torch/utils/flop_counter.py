"""`torch.utils.flop_counter`: PyTorch counts each op's FLOPs through its dispatcher, which
tracegrad does not have. `FlopCounterMode` can be made and read (lightning's model summary
makes one and reads its counts: none), and counting with it (`with counter:`) raises; a traced
step's products are in `step.profile()`."""

from __future__ import annotations

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["FlopCounterMode"]


class FlopCounterMode:
    def __init__(self, mods: Any = None, depth: int = 2, display: bool = True,
                 custom_mapping: Any = None) -> None:  # fmt: skip
        self.depth, self.display = depth, display

    def __enter__(self) -> FlopCounterMode:
        raise NotImplementedError(
            "torch.utils.flop_counter.FlopCounterMode: counting FLOPs is not provided by "
            "tracegrad (a traced step's profile, step.profile(), times its products)"
        )

    def __exit__(self, *exc: Any) -> None:
        return None

    def get_flop_counts(self) -> dict[str, dict[Any, int]]:
        """Per module, per op: nothing ran under this counter (it cannot be entered)."""
        return {}

    def get_total_flops(self) -> int:
        return 0


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
