"""PyTorch's Transformer: encoder and decoder layers, their stacks, and the whole model, with
PyTorch's arguments, submodule names (`self_attn`, `linear1`, `norm1`, ...) and masks, so state
dicts load both ways. Built on MultiheadAttention; a boolean mask marks positions NOT attended
(True), a float mask is added to the scores (PyTorch's `generate_square_subsequent_mask` gives
-inf above the diagonal)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.core.errors import ShapeError
from tracegrad.frontend.tensor import Tensor, get_default_dtype
from tracegrad.nn import functional as F
from tracegrad.nn import init
from tracegrad.nn.layers import ModuleList, MultiheadAttention
from tracegrad.nn.modules import Dropout, LayerNorm, Linear, Module

__all__ = ["Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder",
           "TransformerEncoderLayer"]  # fmt: skip


def _activation(activation: str | Callable) -> Callable:
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if isinstance(activation, str) or not callable(activation):
        raise ValueError(f"activation must be 'relu', 'gelu' or a callable, not {activation!r}")
    return activation


class _Layer(Module):
    """What both layers share: the feed-forward block and its dropouts, the norms."""

    def _feed_forward(
        self,
        d_model: int,
        dim_feedforward: int,
        dropout: float,
        activation: str | Callable,
        eps: float,
        bias: bool,
        norms: int,
    ) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        for i in range(1, norms + 1):
            setattr(self, f"norm{i}", LayerNorm(d_model, eps=eps, bias=bias))
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _ff_block(self, x: Tensor, out: Dropout) -> Tensor:
        return out(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _attend(self, attn: MultiheadAttention, x: Tensor, memory: Tensor, mask: Any,
                padding: Any, is_causal: bool, out: Dropout) -> Tensor:  # fmt: skip
        return out(attn(x, memory, memory, attn_mask=mask, key_padding_mask=padding,
                        need_weights=False, is_causal=bool(is_causal))[0])  # fmt: skip


class TransformerEncoderLayer(_Layer):
    """Self-attention then a feed-forward block, each added to its input and normalized
    (after, or before with `norm_first`)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)  # fmt: skip
        self._feed_forward(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, 2)
        self.norm_first = norm_first
        self.to(device, dtype)

    def forward(self, src: Tensor, src_mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool = False) -> Tensor:  # fmt: skip
        def attend(x: Tensor) -> Tensor:
            return self._attend(self.self_attn, x, x, src_mask, src_key_padding_mask, is_causal,
                                self.dropout1)  # fmt: skip

        x = src
        if self.norm_first:
            x = x + attend(self.norm1(x))
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + attend(x))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_Layer):
    """Self-attention, attention to the encoder's output (`memory`), then a feed-forward block,
    each added to its input and normalized (after, or before with `norm_first`)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation: str | Callable = "relu",
                 layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                            batch_first=batch_first)  # fmt: skip
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first)  # fmt: skip
        self._feed_forward(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias, 3)
        self.norm_first = norm_first
        self.to(device, dtype)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: Any = None, memory_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:  # fmt: skip
        def self_attend(x: Tensor) -> Tensor:
            return self._attend(self.self_attn, x, x, tgt_mask, tgt_key_padding_mask,
                                tgt_is_causal, self.dropout1)  # fmt: skip

        def cross_attend(x: Tensor) -> Tensor:
            return self._attend(self.multihead_attn, x, memory, memory_mask,
                                memory_key_padding_mask, memory_is_causal,
                                self.dropout2)  # fmt: skip

        x = tgt
        if self.norm_first:
            x = x + self_attend(self.norm1(x))
            x = x + cross_attend(self.norm2(x))
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self_attend(x))
        x = self.norm2(x + cross_attend(x))
        return self.norm3(x + self._ff_block(x, self.dropout3))


def _clones(layer: Module, n: int) -> ModuleList:
    """n deep copies: every layer starts with the same weights, as in PyTorch."""
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """`num_layers` copies of `encoder_layer`, then `norm` if given."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int,
                 norm: Module | None = None, enable_nested_tensor: bool = True,
                 mask_check: bool = True):  # fmt: skip
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask: Any = None, src_key_padding_mask: Any = None,
                is_causal: bool | None = None) -> Tensor:  # fmt: skip
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))  # fmt: skip
        return x if self.norm is None else self.norm(x)


class TransformerDecoder(Module):
    """`num_layers` copies of `decoder_layer`, then `norm` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int,
                 norm: Module | None = None):  # fmt: skip
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Any = None,
        memory_mask: Any = None,
        tgt_key_padding_mask: Any = None,
        memory_key_padding_mask: Any = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal),
                memory_is_causal=memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)


class Transformer(Module):
    """An encoder and a decoder stack, each closed by a LayerNorm; every matrix parameter drawn
    again from xavier_uniform_, as PyTorch does."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6,
                 num_decoder_layers: int = 6, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", custom_encoder: Module | None = None,
                 custom_decoder: Module | None = None, layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device: Any = None, dtype: Any = None):  # fmt: skip
        super().__init__()
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps,
                      batch_first, norm_first, bias)  # fmt: skip
        self.encoder = custom_encoder or TransformerEncoder(
            TransformerEncoderLayer(*layer_args),
            num_encoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self.decoder = custom_decoder or TransformerDecoder(
            TransformerDecoderLayer(*layer_args),
            num_decoder_layers,
            LayerNorm(d_model, eps=layer_norm_eps, bias=bias),
        )
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        self.to(device, dtype)

    def _reset_parameters(self) -> None:
        """PyTorch's (private, as there): every matrix parameter from xavier_uniform_."""
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Any = None, tgt_mask: Any = None,
                memory_mask: Any = None, src_key_padding_mask: Any = None,
                tgt_key_padding_mask: Any = None, memory_key_padding_mask: Any = None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:  # fmt: skip
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise ShapeError(f"Transformer: src {src.shape} and tgt {tgt.shape} have different "
                             "batch sizes")  # fmt: skip
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ShapeError(f"Transformer: src {src.shape} and tgt {tgt.shape} must end in "
                             f"d_model = {self.d_model}")  # fmt: skip
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)  # fmt: skip
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """A float (sz, sz) mask: -inf above the diagonal (a position attends to no later one),
        0 elsewhere."""
        mask = np.triu(np.full((sz, sz), -np.inf, np.dtype(dtype or get_default_dtype())), 1)
        return Tensor._of(mask)
