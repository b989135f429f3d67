"""`torch.nn.attention.bias`: causal masks for queries and keys of different lengths, aligned
to the upper left (`is_causal=True`'s) or to the lower right (the last query sees every key: a
decoding step's queries after a cache of keys). PyTorch keeps the variant and dispatches to a
kernel; here the bias is the boolean mask itself, a Tensor as PyTorch's is, that
`scaled_dot_product_attention` and any other op take as they take a mask."""

from __future__ import annotations

import enum
import warnings

import tracegrad as _tg
from tracegrad.frontend.tensor import Tensor

__all__ = ["CausalBias", "CausalVariant", "causal_lower_right", "causal_upper_left"]


class CausalVariant(enum.IntEnum):
    UPPER_LEFT = 1
    LOWER_RIGHT = 2


class CausalBias(Tensor):
    """The seq_len_q x seq_len_kv causal mask of `variant` (True: attend)."""

    def __new__(cls, variant: CausalVariant, seq_len_q: int, seq_len_kv: int) -> CausalBias:
        if not isinstance(variant, CausalVariant):
            raise AssertionError(f"variant must be a CausalVariant, got {type(variant).__name__}")
        offset = seq_len_kv - seq_len_q if variant == CausalVariant.LOWER_RIGHT else 0
        mask = _tg.tril(_tg.ones(seq_len_q, seq_len_kv, dtype=_tg.bool), diagonal=offset)
        return mask.as_subclass(cls)

    def __init__(self, variant: CausalVariant, seq_len_q: int, seq_len_kv: int) -> None:
        # Tensor's constructor is not run again: __new__ made the tensor
        self.variant, self.seq_len_q, self.seq_len_kv = variant, seq_len_q, seq_len_kv
        if seq_len_q > seq_len_kv and variant == CausalVariant.LOWER_RIGHT:
            warnings.warn("Lower right causal bias will produce NaNs in the output when "
                          "seq_len_q > seq_len_kv!", stacklevel=2)  # fmt: skip

    def _materialize(self, device: object = None) -> Tensor:
        return self.as_subclass(Tensor)


def causal_upper_left(*size: int) -> CausalBias:
    """tril(ones(size)): query i sees keys 0..i."""
    if len(size) != 2:
        raise AssertionError("causal_upper_left only supports 2D tensors")
    return CausalBias(CausalVariant.UPPER_LEFT, *size)


def causal_lower_right(*size: int) -> CausalBias:
    """tril(ones(size), size[1] - size[0]): the last query sees every key."""
    if len(size) != 2:
        raise AssertionError("causal_lower_right only supports 2D tensors")
    return CausalBias(CausalVariant.LOWER_RIGHT, *size)
