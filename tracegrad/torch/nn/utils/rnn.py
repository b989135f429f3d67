"""`torch.nn.utils.rnn`: `pad_sequence`. PackedSequence and pack_padded_sequence are not
provided: tracegrad's LSTM and GRU take padded batches only."""

from typing import Any

from tracegrad.nn.utils import pad_sequence
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["pad_sequence"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
