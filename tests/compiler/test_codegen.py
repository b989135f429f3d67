"""The generated plan's statements: cheaper spellings of NumPy calls compute what the op's own
function computes, and a traceback names the plan's line."""

import numpy as np
import pytest

import tracegrad as tg


def views_and_reductions(x, c):
    y = (x.T * 2.0).reshape(-1, 4)  # transpose and reshape of arrays: their methods
    z = tg.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3)).T  # a constant's view
    return (
        y.sum(axis=1, keepdims=True),  # np.add.reduce
        y.max(),  # np.maximum.reduce
        y.min(),
        (y > 0).sum(axis=0),  # of bools: int64 counts, as np.sum's
        (c * 1.5).prod(axis=1),
        z.sum(axis=0) + x[0, :2].sum(),
        x[..., 1:3] * x[2, 1:3],  # basic indexes: subscripts
    )


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_cheaper_spellings_compute_what_numpy_functions_do(backend):
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    c = tg.tensor(rng.integers(-3, 4, (3, 5)).astype(np.int32))
    traced = tg.trace(views_and_reductions, backend=backend)
    for _ in range(2):
        got, want = traced(x, c), views_and_reductions(x, c)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    source = traced.latest.source
    assert ".transpose((1, 0))" in source and "np.add.reduce(" in source
    assert "np.maximum.reduce(" in source and "np.multiply.reduce(" in source
    assert "np.sum(" not in source and "np.transpose(" not in source
    assert "[(Ellipsis, slice(1, 3, None))]" in source and "getitem" not in source


def test_a_sum_around_a_kept_axis_keeps_sums_own_function():
    """Batch norm's (0, 2, 3) sum of a large array is a matrix-vector product in sum's own
    function, which the plan calls rather than np.add.reduce; a small one is spelt cheaply."""
    x = tg.tensor(np.random.default_rng(0).standard_normal((64, 8, 16, 16)).astype(np.float32))
    traced = tg.trace(lambda x: (x.sum((0, 2, 3)), x[:2].sum((0, 2, 3))), backend="numpy")
    got, want = traced(x), (x.sum((0, 2, 3)), x[:2].sum((0, 2, 3)))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert "= sum_impl0(a, " in traced.latest.source and "np.add.reduce(c, " in traced.latest.source
