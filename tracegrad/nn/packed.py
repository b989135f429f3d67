"""PyTorch's packed sequences (`torch.nn.utils.rnn`): a batch of sequences of different lengths
as one tensor of their valid steps, time-major, which the recurrent layers run without the
padding (each sequence's states stop at its own end, and a reverse direction starts there).

Packing and unpacking are each one gather (differentiable); the lengths must be known when
packing, as PyTorch requires them on the CPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend.functions import concatenate, permute, reshape
from tracegrad.frontend.tensor import Tensor, as_tensor
from tracegrad.nn.utils import pad_sequence

__all__ = [
    "PackedSequence",
    "pack_padded_sequence",
    "pack_sequence",
    "pad_packed_sequence",
    "unpack_sequence",
]


class PackedSequence(NamedTuple):
    """`data` (sum of lengths, *): step 0 of every sequence (longest first), then step 1 of
    those that have one, ...; `batch_sizes[t]` how many sequences have a step t;
    `sorted_indices` the batch order by decreasing length (None when it was sorted) and
    `unsorted_indices` its inverse."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def lengths(self) -> np.ndarray:
        """Each sequence's length, in the sorted order (longest first)."""
        sizes = self.batch_sizes.numpy()
        return (np.arange(int(sizes[0]) if len(sizes) else 0)[:, None] < sizes).sum(axis=1)

    @property
    def is_cuda(self) -> bool:
        return False

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._replace(data=self.data.to(*args, **kwargs))


def _lengths(lengths: Any) -> np.ndarray:
    if isinstance(lengths, Tensor):
        lengths = lengths.numpy()  # known when packing (a traced step cannot pack by data)
    out = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if out.size and out.min() <= 0:
        raise ValueError(f"pack_padded_sequence: every length must be positive, got {out}")
    return out


def _order(lengths: np.ndarray, enforce_sorted: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """The permutation sorting the batch by decreasing length (None: it is sorted)."""
    if enforce_sorted:
        if np.any(np.diff(lengths) > 0):
            raise RuntimeError(
                f"pack_padded_sequence: lengths {lengths.tolist()} must be sorted in decreasing "
                "order with enforce_sorted=True; sort them, or pass enforce_sorted=False"
            )
        return None, lengths
    order = np.argsort(-lengths, kind="stable")
    return order, lengths[order]


def pack_padded_sequence(input: Any, lengths: Any, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:  # fmt: skip
    """Pack a padded (T, B, *) batch (or (B, T, *) with batch_first) of sequences of the given
    lengths: their valid steps, time-major."""
    x = as_tensor(input)
    if batch_first:
        x = permute(x, (1, 0, *range(2, x.ndim)))
    lengths = _lengths(lengths)
    if x.ndim < 2 or lengths.shape[0] != x.shape[1] or lengths.max(initial=0) > x.shape[0]:
        raise ValueError(f"pack_padded_sequence: lengths {lengths.tolist()} do not fit the input "
                         f"{x.shape} (time-major: (T, B, *))")  # fmt: skip
    order, sorted_lengths = _order(lengths, enforce_sorted)
    steps = int(sorted_lengths[0]) if len(sorted_lengths) else 0
    batch_sizes = (sorted_lengths[None, :] > np.arange(steps)[:, None]).sum(axis=1)
    column = np.arange(x.shape[1]) if order is None else order
    rows = [t * x.shape[1] + column[: batch_sizes[t]] for t in range(steps)]
    flat = reshape(x, (x.shape[0] * x.shape[1], *x.shape[2:]))
    data = flat[Tensor._of(np.concatenate(rows) if rows else np.zeros(0, np.int64))]
    return PackedSequence(data, Tensor._of(batch_sizes.astype(np.int64)), *_indices(order))


def _indices(order: np.ndarray | None) -> tuple[Tensor | None, Tensor | None]:
    if order is None:
        return None, None
    return Tensor._of(order.astype(np.int64)), Tensor._of(np.argsort(order).astype(np.int64))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False,
                        padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Undo `pack_padded_sequence`: the padded batch (T, B, *) (or (B, T, *)), in the order it
    was packed from, and the lengths (int64)."""
    data, sizes = sequence.data, sequence.batch_sizes.numpy()
    steps, batch = len(sizes), int(sizes[0]) if len(sizes) else 0
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"pad_packed_sequence: total_length {total_length} is shorter than "
                             f"the longest sequence ({steps})")  # fmt: skip
        steps = total_length
    # position of step t of (sorted) sequence b in `data`, or the padding row appended after
    index = np.full((steps, batch), data.shape[0], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    for t, (start, size) in enumerate(zip(starts, sizes, strict=True)):
        index[t, :size] = start + np.arange(size)
    lengths = sequence.lengths()
    if sequence.unsorted_indices is not None:
        unsorted = sequence.unsorted_indices.numpy()
        index, lengths = index[:, unsorted], lengths[unsorted]
    pad = Tensor._of(bfloat16.full((1, *data.shape[1:]), padding_value, data.dtype))
    padded = concatenate([data, pad])[Tensor._of(index)]
    if batch_first:
        padded = permute(padded, (1, 0, *range(2, padded.ndim)))
    return padded, Tensor._of(lengths.astype(np.int64))


def pack_sequence(sequences: Sequence[Any], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) tensors."""
    lengths = [as_tensor(s).shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list[Tensor]:
    """The packed sequences as a list of (L_i, *) tensors, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return [padded[i, : int(n)] for i, n in enumerate(lengths.numpy())]
