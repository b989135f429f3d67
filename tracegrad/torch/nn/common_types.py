"""`torch.nn.common_types`: the type aliases layers annotate their sizes with (`_size_2_t`: an
int or a pair of ints), which custom layers import to annotate theirs."""

from typing import TypeVar, Union

from tracegrad.frontend.tensor import Size, Tensor

T = TypeVar("T")
_scalar_or_tuple_any_t = Union[T, tuple[T, ...]]  # noqa: UP007 (a generic alias needs Union)
_scalar_or_tuple_1_t = Union[T, tuple[T]]  # noqa: UP007
_scalar_or_tuple_2_t = Union[T, tuple[T, T]]  # noqa: UP007
_scalar_or_tuple_3_t = Union[T, tuple[T, T, T]]  # noqa: UP007
_scalar_or_tuple_4_t = Union[T, tuple[T, T, T, T]]  # noqa: UP007
_scalar_or_tuple_5_t = Union[T, tuple[T, T, T, T, T]]  # noqa: UP007
_scalar_or_tuple_6_t = Union[T, tuple[T, T, T, T, T, T]]  # noqa: UP007

_size_any_t = _scalar_or_tuple_any_t[int]
_size_1_t = _scalar_or_tuple_1_t[int]
_size_2_t = _scalar_or_tuple_2_t[int]
_size_3_t = _scalar_or_tuple_3_t[int]
_size_4_t = _scalar_or_tuple_4_t[int]
_size_5_t = _scalar_or_tuple_5_t[int]
_size_6_t = _scalar_or_tuple_6_t[int]
_size_any_opt_t = _scalar_or_tuple_any_t[int | None]
_size_2_opt_t = _scalar_or_tuple_2_t[int | None]
_size_3_opt_t = _scalar_or_tuple_3_t[int | None]
_ratio_2_t = _scalar_or_tuple_2_t[float]
_ratio_3_t = _scalar_or_tuple_3_t[float]
_ratio_any_t = _scalar_or_tuple_any_t[float]
_tensor_list_t = _scalar_or_tuple_any_t[Tensor]
_maybe_indices_t = _scalar_or_tuple_2_t[Tensor]
_size = Union[Size, list[int], tuple[int, ...]]  # noqa: UP007
