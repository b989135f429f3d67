"""`F.max_pool1d/2d_with_indices`: the pools with return_indices always on (PyTorch 2.13 gives
these sums for this input)."""

from __future__ import annotations

import numpy as np

import tracegrad as tg
from tracegrad.nn import functional as F


def test_with_indices_always_returns_the_indices():
    x = np.random.default_rng(0).standard_normal((1, 2, 6, 6))
    values, indices = F.max_pool2d_with_indices(tg.tensor(x), 2, None, 0, 1, False, False)
    assert round(float(values.numpy().sum()), 8) == 18.8264375 and indices.numpy().sum() == 329
    values, indices = F.max_pool1d_with_indices(tg.tensor(x[0]), 3, 2)
    assert round(float(values.numpy().sum()), 8) == 18.49664769 and indices.numpy().sum() == 48
    assert F.max_pool2d_with_indices.__name__ == "max_pool2d_with_indices"
