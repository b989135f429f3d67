"""`torch.hub`: its progress bar (`from torch.hub import tqdm`, as pytorch/examples'
vision_transformer does) and its directory; loading models or weights from the network is not
provided (PyTorch's checkpoints are pickles of its own tensors)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["get_dir", "set_dir", "tqdm"]

try:
    from tqdm import tqdm
except ImportError:  # PyTorch's hub has the same fallback: a bar that draws nothing

    class tqdm:  # type: ignore[no-redef] # noqa: N801 (tqdm's name)
        """Iterates over `iterable`; counts `update(n)` calls, draws nothing."""

        def __init__(self, iterable: Iterable | None = None, *args: Any, **kwargs: Any):
            self.iterable, self.n = iterable, 0

        def __iter__(self) -> Iterator:
            yield from self.iterable or ()

        def update(self, n: int = 1) -> None:
            self.n += n

        def set_description(self, *args: Any, **kwargs: Any) -> None:
            pass

        set_postfix = set_description

        def close(self) -> None:
            pass

        def __enter__(self) -> tqdm:
            return self

        def __exit__(self, *exc: Any) -> None:
            pass


_dir = [os.path.join(os.path.expanduser(os.getenv("TORCH_HOME", "~/.cache/torch")), "hub")]


def get_dir() -> str:
    """Where PyTorch keeps downloaded models: `$TORCH_HOME/hub`, or as set by `set_dir`."""
    return _dir[0]


def set_dir(d: str) -> None:
    _dir[0] = os.path.expanduser(d)


def __getattr__(name: str) -> Any:  # load, load_state_dict_from_url, download_url_to_file, ...
    raise _not_provided(__name__, name)
