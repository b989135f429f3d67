"""`torch.types`: the type aliases PyTorch's annotations use (packages import them for theirs)."""

from collections.abc import Sequence
from typing import Union

from tracegrad.frontend.device import device as _device_class
from tracegrad.frontend.tensor import Size, Tensor
from tracegrad.torch._support import dtype as _dtype_class

_device = _device_class
_dtype = _dtype_class
_size = Union[Size, list[int], tuple[int, ...]]  # noqa: UP007 (PyTorch's spelling)
_int = int
_float = float
_bool = bool
_complex = complex
Number = Union[int, float, bool]  # noqa: UP007
Device = Union[_device_class, str, int, None]  # noqa: UP007
_TensorOrTensors = Union[Tensor, Sequence[Tensor]]  # noqa: UP007
