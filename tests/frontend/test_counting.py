"""Index- and count-valued functions: unique, unique_consecutive, bincount, histc, searchsorted,
bucketize, tril_indices, triu_indices. Values against PyTorch where installed, else against
NumPy and hand-worked cases; bincount's weights' gradient; the value-shaped ones refuse a
traced input, the others trace."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

INTS = np.array([3, 1, 2, 3, 1, 1, 7, 0])
ROWS = np.array([[1, 2], [1, 2], [0, 5], [1, 2], [0, 5], [0, 4]])
FLOATS = np.random.default_rng(4).standard_normal(40)
SORTED = np.array([1.0, 3.0, 5.0, 5.0, 7.0, 9.0])
SORTED_ROWS = np.array([[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]])
VALUES = np.array([[0.0, 3.0, 5.0, 10.0], [2.0, 4.5, 6.0, 1.0]])

CASES = {  # name: call given the library (torch or tracegrad.torch) and its tensor function
    "unique": lambda lib, t: lib.unique(t(INTS)),
    "unique all": lambda lib, t: lib.unique(t(INTS), return_inverse=True, return_counts=True),
    "unique counts": lambda lib, t: t(INTS).unique(return_counts=True),
    "unique dim": lambda lib, t: lib.unique(t(ROWS), dim=0, return_inverse=True,
                                            return_counts=True),
    "unique dim 1": lambda lib, t: lib.unique(t(ROWS.T), return_inverse=True, dim=1),
    "unique 2-D": lambda lib, t: lib.unique(t(ROWS), return_inverse=True),
    "unique floats": lambda lib, t: lib.unique(t(np.round(FLOATS))),
    "unique_consecutive": lambda lib, t: lib.unique_consecutive(
        t(np.array([1, 1, 2, 2, 3, 1, 1, 2])), return_inverse=True, return_counts=True),
    "unique_consecutive dim": lambda lib, t: lib.unique_consecutive(
        t(ROWS), return_counts=True, return_inverse=True, dim=0),
    "unique_consecutive 2-D": lambda lib, t: t(ROWS).unique_consecutive(return_inverse=True),
    "bincount": lambda lib, t: lib.bincount(t(INTS)),
    "bincount minlength": lambda lib, t: t(INTS).bincount(minlength=12),
    "bincount weights": lambda lib, t: lib.bincount(t(INTS), t(FLOATS[:8])),
    "bincount int weights": lambda lib, t: lib.bincount(t(INTS), t(INTS)),
    "bincount empty": lambda lib, t: lib.bincount(t(np.zeros(0, np.int64)), minlength=3),
    "histc": lambda lib, t: lib.histc(t(FLOATS), bins=7),
    "histc range": lambda lib, t: t(FLOATS).histc(5, -1, 1),
    "histc one value": lambda lib, t: lib.histc(t(np.ones(3)), bins=4),
    "histogram": lambda lib, t: lib.histogram(t(FLOATS), bins=6),
    "histogram range density": lambda lib, t: t(FLOATS).histogram(4, range=(-1.0, 2.0),
                                                                  density=True),
    "histogram one value": lambda lib, t: lib.histogram(t(np.ones(3)), bins=2),
    "searchsorted": lambda lib, t: lib.searchsorted(t(SORTED), t(VALUES)),
    "searchsorted right": lambda lib, t: lib.searchsorted(t(SORTED), t(VALUES), right=True),
    "searchsorted side": lambda lib, t: lib.searchsorted(t(SORTED), t(VALUES), side="right"),
    "searchsorted rows": lambda lib, t: lib.searchsorted(t(SORTED_ROWS), t(VALUES)),
    "searchsorted scalar": lambda lib, t: lib.searchsorted(t(SORTED), 5.0),
    "searchsorted sorter": lambda lib, t: lib.searchsorted(
        t(SORTED[::-1].copy()), t(VALUES), sorter=t(np.arange(6)[::-1].copy())),
    "searchsorted int32": lambda lib, t: lib.searchsorted(t(SORTED), t(VALUES), out_int32=True),
    "bucketize": lambda lib, t: lib.bucketize(t(VALUES), t(SORTED)),
    "bucketize right": lambda lib, t: lib.bucketize(t(VALUES), t(SORTED), right=True),
    "isin": lambda lib, t: lib.isin(t(ROWS), t(np.array([2, 9, 0, 0]))),
    "isin invert": lambda lib, t: lib.isin(t(INTS), t(np.array([1, 7])), invert=True),
    "isin number": lambda lib, t: lib.isin(t(INTS), 3),
    "isin floats": lambda lib, t: lib.isin(t(np.round(FLOATS)), t(np.array([0.0, -1.0]))),
    "tril_indices": lambda lib, t: lib.tril_indices(3, 4),
    "tril_indices offset": lambda lib, t: lib.tril_indices(4, 3, -1),
    "triu_indices": lambda lib, t: lib.triu_indices(3, 5, 1),
    "triu_indices int32": lambda lib, t: lib.triu_indices(4, 4, dtype=lib.int32),
}  # fmt: skip


def _leaves(out):
    return list(out) if isinstance(out, tuple) else [out]


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_match_torch(name):
    ours = _leaves(CASES[name](ttorch, ttorch.tensor))
    theirs = _leaves(CASES[name](torch, torch.tensor))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert a.shape == tuple(b.shape) and a.dtype.name == str(b.dtype)[6:], (a, b)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)


def test_values_without_torch():
    values, inverse, counts = tg.unique(tg.tensor(INTS), return_inverse=True, return_counts=True)
    assert values.tolist() == [0, 1, 2, 3, 7] and counts.tolist() == [1, 3, 1, 2, 1]
    assert values[inverse].tolist() == INTS.tolist()
    rows, inverse = tg.unique(tg.tensor(ROWS), dim=0, return_inverse=True)
    assert rows.tolist() == [[0, 4], [0, 5], [1, 2]] and inverse.tolist() == [2, 2, 1, 2, 1, 0]
    runs, counts = tg.unique_consecutive(tg.tensor([5, 5, 1, 1, 1, 5]), return_counts=True)
    assert runs.tolist() == [5, 1, 5] and counts.tolist() == [2, 3, 1]
    assert tg.bincount(tg.tensor(INTS)).tolist() == np.bincount(INTS).tolist()
    assert tg.bincount(tg.tensor([1, 1]), minlength=4).tolist() == [0, 2, 0, 0]
    np.testing.assert_allclose(tg.bincount(tg.tensor(INTS), tg.tensor(FLOATS[:8])).numpy(),
                               np.bincount(INTS, FLOATS[:8]))  # fmt: skip
    assert tg.histc(tg.tensor([0.0, 1.0, 2.0, 3.0, 5.0]), 3, 0, 3).tolist() == [1, 1, 2]
    hist, edges = tg.histogram(tg.tensor([0.0, 1.0, 2.0, 3.0, 5.0]), 3, range=(0.0, 3.0))
    assert hist.tolist() == [1, 1, 2] and edges.tolist() == [0, 1, 2, 3]
    want, _ = np.histogram(FLOATS, 5, density=True)
    np.testing.assert_allclose(tg.histogram(tg.tensor(FLOATS), 5, density=True).hist, want)
    assert tg.histc(tg.tensor([1.0, 1.0, 1.0]), bins=4).tolist() == [0, 0, 3, 0]
    assert tg.histc(tg.tensor(FLOATS), 10).sum().item() == 40
    seq = tg.tensor(SORTED)
    assert tg.searchsorted(seq, tg.tensor([5.0, 6.0])).tolist() == [2, 4]
    assert tg.searchsorted(seq, tg.tensor([5.0, 6.0]), right=True).tolist() == [4, 4]
    assert tg.bucketize(tg.tensor([5.0, 0.5, 11.0]), seq).tolist() == [2, 0, 6]
    assert tg.searchsorted(tg.tensor(SORTED_ROWS), tg.tensor([[3.0], [3.0]])).tolist() == [
        [1], [1]]  # fmt: skip
    assert tg.searchsorted(seq, 4.0).shape == () and tg.searchsorted(seq, 4.0).item() == 2
    assert tg.isin(tg.tensor(INTS), tg.tensor([1, 7])).tolist() == np.isin(INTS, [1, 7]).tolist()
    assert tg.isin(tg.tensor([1.0]), tg.tensor([])).tolist() == [False]
    assert tg.isin(3, tg.tensor(INTS)).item() is True
    assert tg.tril_indices(3, 3).tolist() == [list(a) for a in np.tril_indices(3)]
    assert tg.triu_indices(3, 4, 1).tolist() == [list(a) for a in np.triu_indices(3, 1, 4)]


def test_errors():
    with pytest.raises(ValueError, match="non-negative"):
        tg.bincount(tg.tensor([1, -1]))
    with pytest.raises(ValueError, match="1-D tensor of integers"):
        tg.bincount(tg.tensor([1.0, 2.0]))
    with pytest.raises(tg.ShapeError, match="leading dimensions"):
        tg.searchsorted(tg.tensor(SORTED_ROWS), tg.tensor(SORTED))
    with pytest.raises(tg.ShapeError, match="1-D"):
        tg.bucketize(tg.tensor(SORTED), tg.tensor(SORTED_ROWS))
    with pytest.raises(ValueError, match="contradicts"):
        tg.searchsorted(tg.tensor(SORTED), tg.tensor(SORTED), right=True, side="left")
    assert tg.unique(tg.tensor(ROWS), axis=0).tolist() == [[0, 4], [0, 5], [1, 2]]  # dim's alias
    with pytest.raises(TypeError, match="unexpected keyword argument 'return_index'"):
        tg.unique(tg.tensor(INTS), return_index=True)  # NumPy's: tracegrad.numpy has it


def test_bincount_weights_gradient():
    check_grad(lambda w: tg.bincount(tg.tensor(INTS), w, minlength=10), FLOATS[:8])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_value_shaped_results_refuse_a_traced_input(backend):
    for op, call in [("unique", lambda x: tg.unique(x)),
                     ("unique_consecutive", lambda x: x.unique_consecutive()),
                     ("bincount", lambda x: tg.bincount(x, minlength=9)),
                     ("arange", lambda x: tg.arange(x.amax().item()))]:  # fmt: skip
        with pytest.raises(tg.TraceError, match=f"{op}: .*data-dependent shape.*test_counting"):
            tg.trace(call, backend=backend)(tg.tensor(INTS))  # the user's line named


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_constants_and_shaped_ops_trace(backend, monkeypatch):
    """Computed from a constant, unique is a constant; bincount's weights differentiate through
    the traced step; searchsorted, bucketize and histc run in the plan."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    w = tg.tensor(FLOATS[:8], requires_grad=True)
    gm = tg.GradManager().attach([w])

    def step(values, data):
        with gm:
            labels = tg.tensor(INTS)  # a constant: its unique values are known
            sums = tg.bincount(labels, w * w, minlength=len(tg.unique(labels)) + 4)
            gm.backward(sums.sum())
        return (sums, tg.searchsorted(tg.tensor(SORTED), values, right=True),
                tg.bucketize(values, tg.tensor(SORTED)), tg.histc(data, 6, -2, 2),
                tg.isin(values, values[0]), tg.isin(values, tg.tensor(SORTED)))  # fmt: skip

    args = (tg.tensor(VALUES), tg.tensor(FLOATS))
    eager = [o.numpy().copy() for o in step(*args)]
    eager_grad, w.grad = w.grad.numpy().copy(), None
    traced = tg.trace(step, backend=backend)
    for _ in range(2):
        w.grad = None
        got = traced(*args)
    for a, b in zip(got, eager, strict=True):
        np.testing.assert_array_equal(a.numpy(), b)
    np.testing.assert_allclose(w.grad.numpy(), eager_grad)
    other = tg.tensor(VALUES + 1.0)  # new values, same plan: the results follow them
    np.testing.assert_array_equal(traced(other, args[1])[1].numpy(),
                                  np.searchsorted(SORTED, VALUES + 1.0, "right"))  # fmt: skip
