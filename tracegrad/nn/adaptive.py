"""PyTorch's `AdaptiveLogSoftmaxWithLoss` (Grave et al., "Efficient softmax approximation for
GPUs"): a head over the frequent classes and one entry per cluster of rarer ones, each cluster a
two-layer projection of its own. Eagerly, as in PyTorch, a cluster's projection runs only on the
rows whose target lies in it; traced (where which rows those are is not known), it runs on every
row and the rows are picked with `where`: the same values and gradients, from shapes fixed in
advance."""

from __future__ import annotations

import itertools
from collections import namedtuple
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core.primitives import where
from tracegrad.frontend.functions import check_range, concatenate, reshape, take_along_dim
from tracegrad.frontend.reductions import argmax, mean
from tracegrad.frontend.tensor import Listeners, Tensor, as_tensor
from tracegrad.nn import functional as F
from tracegrad.nn.layers import ModuleList
from tracegrad.nn.modules import Linear, Module, Sequential

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


def _picked(logprob: Tensor, index: Tensor) -> Tensor:
    """logprob[i, index[i]] for each row i."""
    return reshape(take_along_dim(logprob, reshape(index, (-1, 1)), 1), (-1,))


class AdaptiveLogSoftmaxWithLoss(Module):
    """The classes [0, cutoffs[0]) in the head with one more entry per cluster; cluster i holds
    [cutoffs[i], cutoffs[i + 1]) (the last ending at n_classes), projected to
    in_features // div_value ** (i + 1) features, then to its classes. forward(input, target)
    gives (output, loss): each row's log-probability of its target, and their negated mean."""

    def __init__(self, in_features: int, n_classes: int, cutoffs: Sequence[int],
                 div_value: float = 4.0, head_bias: bool = False, device: Any = None,
                 dtype: Any = None) -> None:  # fmt: skip
        super().__init__()
        cutoffs = list(cutoffs)
        if len(cutoffs) == 0:
            raise ValueError("cutoffs should be a sequence of length larger than 0")
        unique = len(set(cutoffs)) == len(cutoffs) and all(int(c) == c for c in cutoffs)
        if (
            not unique
            or cutoffs != sorted(cutoffs)
            or not 0 < min(cutoffs) <= max(cutoffs) < n_classes
        ):
            raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in "
                             "an increasing order, where each value is between 1 and "
                             "n_classes-1")  # fmt: skip
        self.in_features, self.n_classes = in_features, n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value, self.head_bias = div_value, head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False),
                                        Linear(hidden, size, bias=False)))  # fmt: skip

    def reset_parameters(self) -> None:
        self.head.reset_parameters()
        for i2h, h2o in self.tail:
            i2h.reset_parameters()
            h2o.reset_parameters()

    def forward(self, input_: Any, target_: Any) -> _ASMoutput:
        input_, target_ = as_tensor(input_), as_tensor(target_)
        if target_.ndim == 1:
            if input_.shape[0] != target_.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")  # fmt: skip
            if input_.ndim != 2:
                raise RuntimeError("1D target tensor expects 2D input tensors, but found inputs "
                                   f"with size {input_.shape}")  # fmt: skip
        elif target_.ndim == 0:
            if input_.ndim != 1:
                raise RuntimeError("0D target tensor expects 1D input tensors, but found inputs "
                                   f"with size {input_.shape}")  # fmt: skip
        else:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        batched = target_.ndim > 0
        input = input_ if batched else reshape(input_, (1, -1))
        target = target_ if batched else reshape(target_, (1,))
        if Listeners.tracers:
            output, head_index = self._clusters_traced(input, target)
        else:
            output, head_index = self._clusters_eager(input, target)
        head_logprob = F.log_softmax(self.head(input), dim=1)
        output = output + _picked(head_logprob, head_index)
        loss = mean(-output)
        return _ASMoutput(output if batched else reshape(output, ()), loss)

    def _clusters_eager(self, input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """PyTorch's way: each cluster's projection on its own rows only. Returns each row's
        log-probability within its cluster (0 in the shortlist) and its entry in the head."""
        labels = target.numpy()
        if labels.size and (labels.min() < 0 or labels.max() >= self.n_classes):
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{labels.min()}, {labels.max()}] were "
                               "found. ")  # fmt: skip
        head_index = labels.copy()
        parts, order = [], []
        for i, (low, high) in enumerate(itertools.pairwise([0, *self.cutoffs])):
            rows = np.flatnonzero((labels >= low) & (labels < high))
            if rows.size == 0:
                continue
            order.append(rows)
            if i == 0:
                parts.append(Tensor._of(np.zeros(rows.size, input.dtype)))
                continue
            head_index[rows] = self.shortlist_size + i - 1
            logprob = F.log_softmax(self.tail[i - 1](input[Tensor._of(rows)]), dim=1)
            parts.append(_picked(logprob, Tensor._of(labels[rows] - low)))
        inverse = np.argsort(np.concatenate(order), kind="stable")
        return concatenate(parts, 0)[Tensor._of(inverse)], Tensor._of(head_index)

    def _clusters_traced(self, input: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """The same values with shapes known in advance: every cluster's projection on every
        row, each row keeping its own cluster's."""
        target = check_range(target, 0, self.n_classes, "AdaptiveLogSoftmaxWithLoss's target")
        output, head_index = None, target
        for i, (low, high) in enumerate(itertools.pairwise(self.cutoffs)):
            inside = (target >= low) & (target < high)
            logprob = F.log_softmax(self.tail[i](input), dim=1)
            local = _picked(logprob, where(inside, target - low, 0))
            head_index = where(inside, self.shortlist_size + i, head_index)
            part = where(inside, local, 0.0)
            output = part if output is None else output + part
        return output, head_index

    def _get_full_log_prob(self, input: Tensor, head_output: Tensor) -> Tensor:
        """The log-probability of every class, from the input and the head's output."""
        head_logprob = F.log_softmax(head_output, dim=1)
        parts = [head_logprob[:, : self.shortlist_size]]
        for i in range(self.n_clusters):
            cluster_logprob = F.log_softmax(self.tail[i](input), dim=1)
            entry = self.shortlist_size + i
            parts.append(cluster_logprob + head_logprob[:, entry : entry + 1])
        return concatenate(parts, 1)

    def log_prob(self, input: Any) -> Tensor:
        """The (N, n_classes) log-probabilities of every class."""
        input = as_tensor(input)
        return self._get_full_log_prob(input, self.head(input))

    def predict(self, input: Any) -> Tensor:
        """The most probable class of each row: the head's argmax where that is a shortlist
        class, else the full distribution's (computed, eagerly, only for those rows)."""
        input = as_tensor(input)
        head_output = self.head(input)
        output = argmax(head_output, dim=1)
        outside = output >= self.shortlist_size
        if Listeners.tracers:
            full = argmax(self._get_full_log_prob(input, head_output), dim=1)
            return where(outside, full, output)
        rows = np.flatnonzero(outside.numpy())
        if rows.size == 0:
            return output
        if rows.size == output.shape[0]:
            return argmax(self._get_full_log_prob(input, head_output), dim=1)
        picked = Tensor._of(rows)
        full = argmax(self._get_full_log_prob(input[picked], head_output[picked]), dim=1)
        values = output.numpy().copy()
        values[rows] = full.numpy()
        return Tensor._of(values)
