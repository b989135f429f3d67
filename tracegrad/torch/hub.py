"""`torch.hub`: its progress bar (`from torch.hub import tqdm`, as pytorch/examples'
vision_transformer does), its directory and the names libraries import from it (timm's
`HASH_REGEX`, `urlparse`); loading models or weights from the network is not provided
(PyTorch's checkpoints are pickles of its own tensors): those functions exist, so that the
import works, and raise when called."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlparse  # noqa: F401 (imported from here by timm)

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["HASH_REGEX", "download_url_to_file", "get_dir", "load", "load_state_dict_from_url",
           "set_dir", "tqdm"]  # fmt: skip

HASH_REGEX = re.compile(r"-([a-f0-9]*)\.")  # PyTorch's: the hash in a checkpoint's file name

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


def _get_torch_home() -> str:
    return os.path.dirname(get_dir())


def load_state_dict_from_url(url: str, *args: Any, **kwargs: Any) -> Any:
    raise _not_provided(__name__, "load_state_dict_from_url")


def download_url_to_file(url: str, dst: str, *args: Any, **kwargs: Any) -> None:
    raise _not_provided(__name__, "download_url_to_file")


def load(repo_or_dir: str, model: str, *args: Any, **kwargs: Any) -> Any:
    raise _not_provided(__name__, "load")


def __getattr__(name: str) -> Any:  # list, help, ...
    raise _not_provided(__name__, name)
