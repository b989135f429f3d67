"""The scans PyTorch code uses beside cumsum: cumprod (its gradient right at zeros),
logcumsumexp (no overflow or underflow), cummax/cummin (values and indices), count_nonzero:
values against PyTorch in float64 where installed, else against NumPy; gradients against
finite differences; traced steps against eager ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(11)
M = R.standard_normal((3, 5))
ZEROS = np.array([[1.5, 0.0, 2.0, -1.0, 3.0], [0.0, 2.0, 0.0, 4.0, 0.5],
                  [2.0, -3.0, 0.5, 1.5, 0.0]])  # fmt: skip
TIES = np.array([[1.0, 3.0, 3.0, 2.0, 5.0], [4.0, 4.0, -1.0, 4.0, 0.0]])

CASES = {  # name: (call given the library, the input)
    "cumprod": (lambda lib, x: lib.cumprod(x, 1), M),
    "cumprod zeros": (lambda lib, x: lib.cumprod(x, dim=1), ZEROS),
    "cumprod dim 0": (lambda lib, x: x.cumprod(0), ZEROS),
    "logcumsumexp": (lambda lib, x: lib.logcumsumexp(x * 30, 1), M),
    "logcumsumexp dim 0": (lambda lib, x: x.logcumsumexp(0), M),
    "cummax values": (lambda lib, x: lib.cummax(x, 1).values, TIES),
    "cummin values": (lambda lib, x: x.cummin(dim=0).values, TIES),
    "trapezoid": (lambda lib, x: lib.trapezoid(x, dim=0), M),
    "trapezoid x": (lambda lib, x: lib.trapezoid(x, x[0].exp().cumsum(0)), M),
    "trapezoid x 2-D": (lambda lib, x: lib.trapezoid(x, x.exp().cumsum(1), dim=1), M),
    "trapz dx": (lambda lib, x: lib.trapz(x, dx=0.25), M),
    "cumulative_trapezoid": (lambda lib, x: lib.cumulative_trapezoid(x, dx=0.5, dim=0), M),
    "cumulative_trapezoid x": (lambda lib, x: lib.cumulative_trapezoid(x, x[0].exp().cumsum(0)), M),
    "cov": (lambda lib, x: lib.cov(x), M),
    "cov 1-D": (lambda lib, x: lib.cov(x[1], correction=0), M),
    "cov weights": (
        lambda lib, x: lib.cov(
            x, correction=2, fweights=lib.tensor([1, 2, 1, 3, 2]), aweights=x[0].abs() + 0.1
        ),
        M,
    ),
    "corrcoef": (lambda lib, x: x.corrcoef(), M),
}


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, x = CASES[name]
    a, t = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ya, yt = call(tg, a), call(torch, t)
    np.testing.assert_allclose(ya.numpy(), yt.detach().numpy(), rtol=1e-13, atol=1e-13)
    c = R.standard_normal(ya.shape)
    (ya * c).sum().backward()
    (yt * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_finite_differences(name):
    call, x = CASES[name]
    x = M if x is TIES else x  # a tie has no derivative for finite differences to find
    check_grad(lambda t: call(tg, t), x)


def test_cumprods_second_derivative_at_zeros():
    """The VJP is composed of ops (cumprod among them): its own gradient matches finite
    differences of it, zeros included."""
    c = R.standard_normal((3, 4))

    def gradient(t):
        if not t.requires_grad:  # the finite differences' calls: only the values count
            t = tg.tensor(t.numpy(), requires_grad=True)
        (g,) = tg.autograd.grad((tg.cumprod(t, 1) * c).sum(), [t], create_graph=True)
        return g

    check_grad(gradient, ZEROS[:, :4] + np.array([0.0, 0.0, 0.0, 0.3]))


@needs_torch
def test_indices_match_torch_with_ties_and_nan():
    x = np.array([1.0, 3.0, 3.0, 2.0, math.nan, 5.0, math.nan, 1.0])
    for name in ("cummax", "cummin"):
        ours, theirs = getattr(tg, name)(tg.tensor(x), 0), getattr(torch, name)(torch.tensor(x), 0)
        assert ours.indices.tolist() == theirs.indices.tolist()
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())
    flags = [True, False, True]
    assert tg.cummax(tg.tensor(flags), 0).indices.tolist() == torch.cummax(
        torch.tensor(flags), 0).indices.tolist()  # fmt: skip


def test_values_without_torch():
    np.testing.assert_allclose(tg.cumprod(tg.tensor(ZEROS), 1).numpy(), np.cumprod(ZEROS, 1))
    assert tg.cumprod(tg.tensor([1, 2, 3]), 0).dtype == np.int64
    got = tg.logcumsumexp(tg.tensor([-1000.0, 0.0, 1000.0], dtype=tg.float64), 0).tolist()
    assert got == [-1000.0, 0.0, 1000.0]  # exp would underflow, then overflow
    np.testing.assert_allclose(tg.logcumsumexp(tg.tensor(M), 1).numpy(),
                               np.log(np.cumsum(np.exp(M), 1)), rtol=1e-14)  # fmt: skip
    top = tg.cummax(tg.tensor(TIES), 1)
    assert top.indices.tolist() == [[0, 1, 2, 2, 4], [0, 1, 1, 3, 3]]  # the last of a tie
    assert top.values.tolist() == np.maximum.accumulate(TIES, 1).tolist()
    low = tg.cummin(tg.tensor(TIES), dim=0)
    assert low.indices.tolist() == [[0, 0, 0, 0, 0], [0, 0, 1, 0, 1]]
    x = tg.tensor(np.array([[0.0, 1.0, 2.0], [0.0, 0.0, -3.0]]))
    assert tg.count_nonzero(x).item() == 3 and x.count_nonzero(dim=0).tolist() == [0, 1, 2]
    assert tg.count_nonzero(x, axis=1).tolist() == [2, 1]
    assert tg.count_nonzero(x).dtype == np.int64
    assert tg.cummax(tg.tensor(2.0), 0).indices.item() == 0
    with pytest.raises(TypeError):
        tg.cumprod(x)  # PyTorch's needs its dim; NumPy's flattens:
    assert tnp.cumprod(x + 1).tolist() == np.cumprod(x.numpy() + 1).tolist()


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(x):
        return (tg.cumprod(x, 1) + tg.logcumsumexp(x, 0) + tg.cummax(x, 1).values
                - tg.cummin(x, 0).values * tg.count_nonzero(x, 1).unsqueeze(1)
                + tg.corrcoef(x).sum() + tg.cov(x, aweights=x[0] * x[0] + 1.0).sum(0, True).mT
                + tg.trapezoid(x, x[0].exp().cumsum(0)).unsqueeze(1)
                + tg.cumulative_trapezoid(x, dim=0).sum(0))  # fmt: skip

    traced_matches_eager(f, ZEROS, backend=backend)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_takes_a_dtype_the_input_is_converted_to(name):
    """torch.softmax, torch.log_softmax and their methods take dtype= (as F.softmax does): the
    float32 input converted first, so the float64 result is the float64 input's."""
    x = R.standard_normal((2, 3)).astype(np.float32)
    want = getattr(tg, name)(tg.tensor(x.astype(np.float64)), 1).numpy()
    for got in (getattr(tg, name)(tg.tensor(x), 1, dtype=np.float64),
                getattr(tg.tensor(x), name)(dim=-1, dtype=np.float64)):  # fmt: skip
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got.numpy(), want)
    grads = []
    for a in (
        tg.tensor(x, requires_grad=True),
        tg.tensor(x.astype(np.float64), requires_grad=True),
    ):
        (getattr(tg, name)(a, 1, dtype=np.float64) * tg.tensor(M[:2, :3])).sum().backward()
        grads.append(a.grad)
    assert grads[0].dtype == np.float32  # the conversion's gradient goes back to float32
    np.testing.assert_allclose(grads[0].numpy(), grads[1].numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape, dim", [((0,), None), ((0, 3), 0), ((3, 0), 1), ((2, 0), None)])
def test_any_and_all_of_nothing_are_false_and_true(shape, dim):
    """PyTorch answers the identity (torchdiffeq's adaptive solvers ask `(counts > 1).any()` of
    an empty tensor); NumPy's max of nothing raised."""
    x = tg.zeros(shape)
    kept = (3,) if shape == (0, 3) else (3,) if shape == (3, 0) else ()
    assert x.any(dim).shape == kept and not x.any(dim).numpy().any()
    assert x.all(dim).shape == kept and x.all(dim).numpy().all()
    assert tg.zeros(shape, dtype=tg.uint8).all(dim).dtype is tg.uint8


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_over_a_dim_gives_the_same_pair_whether_or_not_autograd_tracks_it(name, keepdim):
    """Untracked, the values come from the reduction (one op, not a gather at the indices);
    they equal the gathered ones, ties and NaN rows included."""
    a = np.array([[1.0, 3.0, 3.0, -2.0], [np.nan, 0.0, 5.0, np.nan], [-1.0, -1.0, -1.0, -1.0]])
    tracked = tg.tensor(a, requires_grad=True)
    plain = getattr(tg, name)(tg.tensor(a), 1, keepdim=keepdim)
    both = getattr(tg, name)(tracked, 1, keepdim=keepdim)
    np.testing.assert_array_equal(plain.values.numpy(), both.values.detach().numpy())
    np.testing.assert_array_equal(plain.indices.numpy(), both.indices.numpy())
    assert plain.values.grad_fn is None and both.values.grad_fn is not None
    both.values.sum().backward()  # the gradient goes to the chosen element only
    assert tracked.grad.numpy().sum(axis=1).tolist() == [1.0, 1.0, 1.0]
