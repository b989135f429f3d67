"""`torch._utils`: the helpers PyTorch code imports from PyTorch's private module (`_accumulate`
in older `random_split` copies, the flattening of gradient buckets that apex-style all-reduce
code does)."""

import importlib
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend import functions
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._support import not_provided as _not_provided

_accumulate = itertools.accumulate


def _flatten_dense_tensors(tensors: Sequence[Tensor]) -> Tensor:
    """The tensors' elements in one 1-d tensor (a bucket to all-reduce once)."""
    return functions.cat([t.reshape(-1) for t in tensors])


def _unflatten_dense_tensors(flat: Tensor, tensors: Iterable[Tensor]) -> tuple[Tensor, ...]:
    """`flat` cut back into views shaped like `tensors`."""
    out, start = [], 0
    for t in tensors:
        out.append(flat[start : start + t.numel()].view(t.shape))
        start += t.numel()
    return tuple(out)


def _element_size(dtype: Any) -> int:
    return np.dtype(dtype).itemsize


def _import_dotted_name(name: str) -> Any:
    """The object a dotted path names (`package.module.attr`)."""
    head, *rest = name.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        obj = getattr(obj, part)
    return obj


def _get_device_index(device: Any, optional: bool = False, allow_cpu: bool = False) -> int:
    """A device's index: -1 for the CPU where allowed, as PyTorch's."""
    kind = getattr(device, "type", str(device).split(":")[0])
    if kind == "cpu":
        if allow_cpu:
            return -1
        raise ValueError(f"Expected a non cpu device, but got: {device}")
    raise RuntimeError(f"torch._utils._get_device_index: tracegrad has no {kind!r} devices")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
