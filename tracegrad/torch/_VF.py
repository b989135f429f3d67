"""`torch._VF`: the top level's functions by their ATen names, as PyTorch's own modules call them
and code written like them does (`_VF.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)`,
`_VF.einsum`, `_VF.norm`): each is `torch.<name>`."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    import tracegrad.torch as torch

    try:
        return getattr(torch, name)
    except AttributeError:
        raise AttributeError(f"torch._VF.{name}: tracegrad.torch has no {name!r}") from None
