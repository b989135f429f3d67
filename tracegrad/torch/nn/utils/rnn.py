"""`torch.nn.utils.rnn`: `pad_sequence`, `unpad_sequence` (`tracegrad.nn.utils`) and packed
sequences (`tracegrad.nn.packed`), which tracegrad's RNN, LSTM and GRU accept."""

from typing import Any

from tracegrad.nn.packed import (
    PackedSequence,
    pack_padded_sequence,
    pack_sequence,
    pad_packed_sequence,
    unpack_sequence,
)
from tracegrad.nn.utils import pad_sequence, unpad_sequence
from tracegrad.torch._support import not_provided as _not_provided

__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "pad_sequence",
    "unpack_sequence",
    "unpad_sequence",
]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
