"""PyTorch's functions and Tensor methods that graph networks (index_add, scatter_reduce),
statistics (quantile, nansum, mode), masking (masked_select, masked_scatter) and signal code
(Tensor.unfold) use: values against NumPy references (and against PyTorch in float64 where it is
installed), gradients against finite differences, and the value-shaped ones refused in a trace."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.core.errors import TraceError

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

A = np.random.default_rng(7).standard_normal((4, 5))
NAN = A.copy()
NAN[1, 2] = NAN[3, 0] = np.nan
IDX = np.array([0, 2, 0, 3])
SCATTER_IDX = np.array([[0, 1, 0, 1, 2], [2, 2, 0, 0, 1]])


def _add_at(out, idx, values):
    np.add.at(out, idx, values)
    return out


def _copy_columns(out, cols, values):
    out[:, cols] = values
    return out


def _scatter_mean(idx, src, base, mean, include_self=False):
    total, count = np.zeros_like(base), np.zeros_like(base)
    for (i, j), v in np.ndenumerate(src):
        total[idx[i, j], j] += v
        count[idx[i, j], j] += 1
    if include_self:
        total, count = total + base, count + 1
    out = total / np.maximum(count, 1) if mean else total
    return np.where(count > 0, out, base)


def _scatter_extreme(idx, src, base, combine, include_self=False):
    out = base.copy()
    seen = np.zeros(base.shape, bool)
    for (i, j), v in np.ndenumerate(src):
        t = (idx[i, j], j)
        out[t] = combine(out[t], v) if seen[t] or include_self else v
        seen[t] = True
    return out


def _masked_scatter(a, mask, source):
    out = a.copy()
    out[mask] = source.reshape(-1)[: mask.sum()]
    return out


def _set(a, index, value):
    out = a.copy()
    out[index] = value
    return out


# name: (a call on a library `lib` and its tensor constructor `T`, NumPy's reference value)
CASES = {
    "quantile": (lambda lib, T: lib.quantile(T(A), 0.3, dim=1), np.quantile(A, 0.3, axis=1)),
    "quantile_q": (
        lambda lib, T: T(A).quantile(T(np.array([0.1, 0.9])), dim=0, keepdim=True),
        np.quantile(A, [0.1, 0.9], axis=0, keepdims=True),
    ),
    "quantile_all_nearest": (
        lambda lib, T: lib.quantile(T(A), 0.45, interpolation="nearest"),
        np.quantile(A, 0.45, method="nearest"),
    ),
    "nanquantile": (
        lambda lib, T: lib.nanquantile(T(NAN), 0.5, dim=1),
        np.nanquantile(NAN, 0.5, axis=1),
    ),
    "nansum": (lambda lib, T: lib.nansum(T(NAN), dim=0), np.nansum(NAN, axis=0)),
    "nanmean": (lambda lib, T: T(NAN).nanmean(), np.nanmean(NAN)),
    "index_add": (
        lambda lib, T: T(np.zeros((5, 5))).index_add(0, T(IDX), T(A), alpha=2.0),
        2 * _add_at(np.zeros((5, 5)), IDX, A),
    ),
    "index_copy": (
        lambda lib, T: T(np.zeros((4, 6))).index_copy(1, T(np.array([4, 1, 0, 2, 5])), T(A)),
        _copy_columns(np.zeros((4, 6)), [4, 1, 0, 2, 5], A),
    ),
    "scatter_reduce_sum": (
        lambda lib, T: T(np.ones((3, 5))).scatter_reduce(
            0, T(SCATTER_IDX[:, :5]), T(A[:2]), "sum", include_self=False
        ),
        _scatter_mean(SCATTER_IDX, A[:2], np.ones((3, 5)), mean=False),
    ),
    "scatter_reduce_mean": (
        lambda lib, T: T(np.ones((3, 5))).scatter_reduce(0, T(SCATTER_IDX), T(A[:2]), "mean"),
        _scatter_mean(SCATTER_IDX, A[:2], np.ones((3, 5)), mean=True, include_self=True),
    ),
    "scatter_reduce_amax": (
        lambda lib, T: T(np.zeros((3, 5))).scatter_reduce(
            0, T(SCATTER_IDX), T(A[:2]), "amax", include_self=False
        ),
        _scatter_extreme(SCATTER_IDX, A[:2], np.zeros((3, 5)), np.maximum),
    ),
    "scatter_reduce_amin_self": (
        lambda lib, T: T(A[:3]).scatter_reduce(0, T(SCATTER_IDX), T(A[2:4]), "amin"),
        _scatter_extreme(SCATTER_IDX, A[2:4], A[:3], np.minimum, include_self=True),
    ),
    "scatter_reduce_prod_self": (
        lambda lib, T: T(A[:3]).scatter_reduce(0, T(SCATTER_IDX), T(A[2:4]), "prod"),
        _scatter_extreme(SCATTER_IDX, A[2:4], A[:3], np.multiply, include_self=True),
    ),
    "masked_select": (lambda lib, T: lib.masked_select(T(A), T(A > 0.5)), A[A > 0.5]),
    "masked_scatter": (
        lambda lib, T: T(A).masked_scatter(T(A > 0), T(np.arange(20.0))),
        _masked_scatter(A, A > 0, np.arange(20.0)),
    ),
    "take": (
        lambda lib, T: lib.take(T(A), T(np.array([[0, 19], [7, 7]]))),
        A.reshape(-1)[[[0, 19], [7, 7]]],
    ),
    "slice_scatter": (
        lambda lib, T: lib.slice_scatter(T(A), T(np.ones((4, 2))), 1, 1, 5, 2),
        _set(A, (slice(None), slice(1, 5, 2)), 1.0),
    ),
    "select_scatter": (
        lambda lib, T: lib.select_scatter(T(A), T(np.zeros(5)), 0, 2),
        _set(A, 2, 0.0),
    ),
    "unfold": (
        lambda lib, T: T(A).unfold(1, 3, 2),
        np.lib.stride_tricks.sliding_window_view(A, 3, axis=1)[:, ::2],
    ),
    "frac": (lambda lib, T: lib.frac(T(A * 3)), np.modf(A * 3)[0]),
    "copysign": (
        lambda lib, T: lib.copysign(T(A), T(np.array([-0.0, 0.0, -1.0, 2.0, -3.0]))),
        np.copysign(A, [-0.0, 0.0, -1.0, 2.0, -3.0]),
    ),
    "heaviside": (
        lambda lib, T: lib.heaviside(T(np.array([-1.0, 0.0, 2.0])), T(np.array(0.5))),
        np.heaviside([-1.0, 0.0, 2.0], 0.5),
    ),
    "float_power": (lambda lib, T: lib.float_power(T(np.abs(A)), 1.5), np.abs(A) ** 1.5),
    "isclose": (
        lambda lib, T: lib.isclose(T(A), T(A + 1e-9 * (A > 0)) + 1e-3 * (A < -1)),
        np.isclose(A, A + 1e-9 * (A > 0) + 1e-3 * (A < -1)),
    ),
    "mv": (lambda lib, T: lib.mv(T(A), T(np.arange(5.0))), A @ np.arange(5.0)),
    "sum_to_size": (lambda lib, T: T(A).sum_to_size(1, 5), A.sum(0, keepdims=True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values_match_numpy(name):
    call, want = CASES[name]
    got = call(tg, tg.tensor)
    np.testing.assert_allclose(np.asarray(got.numpy(), np.float64), want, rtol=1e-12, atol=1e-14)


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_values_match_pytorch(name):
    call, _ = CASES[name]
    got, want = call(tg, tg.tensor), call(torch, torch.tensor)
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-14)


def test_mode_and_allclose():
    m = np.array([[1.0, 2.0, 2.0, 3.0, 3.0], [5.0, 5.0, 4.0, 4.0, 4.0]])
    values, indices = tg.tensor(m).mode(1)
    np.testing.assert_array_equal(values.numpy(), [2.0, 4.0])  # the smaller of a tie
    np.testing.assert_array_equal(indices.numpy(), [2, 4])  # its last position
    assert tg.allclose(tg.tensor(A), tg.tensor(A + 1e-9)) and not tg.tensor(A).allclose(A + 1)
    if torch is not None:
        want = torch.tensor(m).mode(1)
        np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())


GRADIENTS = {
    "quantile": lambda x: tg.quantile(x, tg.tensor(np.array([0.2, 0.7])), dim=1),
    "nanmean": lambda x: tg.nanmean(x, dim=0),
    "index_add": lambda x: tg.zeros((5, 5), dtype=np.float64).index_add(0, tg.tensor(IDX), x * x),
    "scatter_reduce": lambda x: x[:3].scatter_reduce(0, tg.tensor(SCATTER_IDX), x[:2] * 3, "mean"),
    "scatter_reduce_amax": lambda x: x[:3].scatter_reduce(
        0, tg.tensor(SCATTER_IDX), x[2:4], "amax"
    ),
    "masked_select": lambda x: tg.masked_select(x * x, tg.tensor(A > 0)),
    "unfold": lambda x: x.unfold(0, 2, 1) ** 2,
    "take": lambda x: tg.take(x, tg.tensor(np.array([3, 3, 11]))),
    "slice_scatter": lambda x: tg.slice_scatter(x, x[:, :2] * 2, 1, 0, 4, 2),
    "copysign": lambda x: tg.copysign(x, tg.tensor(A[::-1].copy())),
}


@pytest.mark.parametrize("name", list(GRADIENTS))
def test_gradients_match_finite_differences(name):
    check_grad(GRADIENTS[name], A + 0.01)


def test_value_shaped_ones_refuse_a_traced_mask_and_guard_a_captured_one():
    @tg.trace
    def select(x, mask):
        return tg.masked_select(x, mask).sum()

    with pytest.raises(TraceError, match="traced boolean mask"):
        select(tg.tensor(A), tg.tensor(A > 0))

    mask = tg.tensor(A > 0)  # from before the trace: baked as the positions it selects

    @tg.trace
    def selected(x):
        return tg.masked_select(x, mask).sum() + x.masked_scatter(mask, x * 2).sum()

    x = tg.tensor(A)
    want = lambda: A[mask.numpy()].sum() + _masked_scatter(A, mask.numpy(), 2 * A).sum()  # noqa: E731
    np.testing.assert_allclose(selected(x).numpy(), want(), rtol=1e-12)
    mask[0, 0] = not bool(mask[0, 0])  # a new value: the guard fails, the step traces again
    np.testing.assert_allclose(selected(x).numpy(), want(), rtol=1e-12)


def test_scatter_reduce_names_what_it_does_not_do():
    with pytest.raises(ValueError, match="'sum', 'prod', 'mean', 'amax' or 'amin', not 'max'"):
        tg.tensor(A).scatter_reduce(0, tg.tensor(SCATTER_IDX), tg.tensor(A[:2]), "max")


def test_scatter_max_splits_the_gradient_among_ties():
    src = tg.tensor([1.0, 3.0, 3.0, 2.0, 5.0], requires_grad=True)
    out = tg.zeros(2).scatter_reduce(0, tg.tensor([0, 0, 0, 1, 1]), src, "amax",
                                     include_self=False)  # fmt: skip
    np.testing.assert_array_equal(out.numpy(), [3.0, 5.0])
    (out * tg.tensor([2.0, 7.0])).sum().backward()
    np.testing.assert_array_equal(src.grad.numpy(), [0.0, 1.0, 1.0, 0.0, 7.0])  # 2 split in two


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_message_passing_matches_eager(backend):
    """A graph layer: messages along edges summed into nodes with index_add, averaged with
    scatter_reduce's mean and max, a quantile-clipped loss."""
    rng = np.random.default_rng(0)
    src, dst = rng.integers(0, 6, 20), rng.integers(0, 6, 20)
    feats = tg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    w = tg.tensor(rng.standard_normal((4, 4)).astype(np.float32), requires_grad=True)

    def step(feats):
        w.grad = None
        msg = (feats @ w)[tg.tensor(src)]
        summed = tg.zeros((6, 4)).index_add(0, tg.tensor(dst), msg)
        index = tg.tensor(np.repeat(dst[:, None], 4, 1))
        mean = tg.zeros((6, 4)).scatter_reduce(0, index, msg, "mean", include_self=False)
        top = tg.zeros((6, 4)).scatter_reduce(0, index, msg, "amax", include_self=False)
        h = tg.tanh(summed + mean + top)
        loss = tg.clamp(h, max=tg.quantile(h, 0.9)).sum()
        loss.backward()
        return loss, w.grad

    want = [t.numpy().copy() for t in step(feats)]
    got = [t.numpy() for t in tg.trace(step, backend=backend)(feats)]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
