"""Devices. tracegrad runs on the CPU: a script that asks for another device gets an error that
says so, never a silent run on the CPU it did not ask for. `device` is PyTorch's `torch.device`:
naming another device is allowed (PyTorch code builds "cuda" devices to test for them), moving a
tensor or a module there is the error."""

from __future__ import annotations

from typing import Any

import numpy as np

from tracegrad.frontend.tensor import DEVICE_BLOCKS, Tensor


class device:  # noqa: N801 (PyTorch's name)
    """PyTorch's `torch.device`: a type ("cpu", "cuda", ...) and an optional index, from
    device("cuda:1"), device("cuda", 1), device(1) (a CUDA index) or another device."""

    __slots__ = ("type", "index")

    def __init__(self, type: Any, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device):
            type, index = type.type, type.index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        elif not isinstance(type, str):
            raise TypeError(f"device(): expected a string or an index, got {type!r}")
        kind, _, number = type.partition(":")
        if number:
            if index is not None:
                raise ValueError(f"device(): index given twice in device({type!r}, {index})")
            index = int(number)
        self.type, self.index = kind, index

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{index})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self) -> tuple:
        return device, (self.type, self.index)

    def __enter__(self) -> device:
        """`with torch.device("cpu"):` (the default device of what is made inside: the CPU, as
        always). `"meta"` is accepted too: what it makes answers `device` meta but has real
        values here, which loading a state_dict (`assign=True`) or `to_empty` then replaces, as
        it would the meta tensors. Any other device raises."""
        if self.type != "meta":
            require_cpu(self, "with torch.device(...)")
        DEVICE_BLOCKS.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        DEVICE_BLOCKS.pop()


CPU, META = device("cpu"), device("meta")


def require_cpu(where_to: Any, where: str) -> None:
    """Accept "cpu", "cpu:0" or a device whose `type` is "cpu"; raise ValueError for anything
    else ("cuda", "cuda:0", "mps", an index, ...)."""
    if isinstance(where_to, int) and not isinstance(where_to, bool):
        where_to = device(where_to)
    kind = where_to if isinstance(where_to, str) else getattr(where_to, "type", None)
    if not isinstance(kind, str):
        raise TypeError(f"{where}: expected a device such as 'cpu', got {where_to!r}")
    if kind.partition(":")[0] != "cpu":
        raise ValueError(
            f"{where}: device {str(where_to)!r} is not available: tracegrad runs on the CPU "
            "(use 'cpu')"
        )


def split_meta(args: tuple, kwargs: dict[str, Any]) -> tuple[bool, tuple, dict[str, Any]]:
    """Whether a `to(...)` call names the meta device (shapes and dtypes only: an ensemble's
    template module under `functional_call`), and its arguments without it."""

    def meta(d: Any) -> bool:
        return (d if isinstance(d, str) else getattr(d, "type", None)) == "meta"

    if not (meta(kwargs.get("device")) or any(meta(a) for a in args)):
        return False, args, kwargs
    rest = {k: v for k, v in kwargs.items() if not (k == "device" and meta(v))}
    return True, tuple(a for a in args if not meta(a)), rest


def check_device(where_to: Any, where: str) -> None:
    """A `device=` argument: None or the CPU."""
    if where_to is not None:
        require_cpu(where_to, where)


def to_arguments(where: str, args: tuple, kwargs: dict[str, Any]) -> np.dtype | None:
    """The dtype that PyTorch's to(device=None, dtype=None, non_blocking=False, copy=False),
    to(dtype) or to(tensor) (its dtype) asks for, after checking that every device it names is
    the CPU; None when it names no dtype."""
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy", "memory_format"}
    if unknown:
        raise TypeError(f"{where}() got unexpected keyword arguments {sorted(unknown)}")
    dtype = kwargs.get("dtype")
    check_device(kwargs.get("device"), where)
    for a in args:
        if a is None or isinstance(a, bool):  # non_blocking, copy
            continue
        if isinstance(a, Tensor):  # its dtype
            dtype = a.dtype
        elif isinstance(a, str | int | device):
            require_cpu(a, where)
        else:
            dtype = a
    return None if dtype is None else np.dtype(dtype)
