"""The Tensor methods PyTorch code uses under its other names: in-place forms of the
out-of-place methods (one table), aliases (`greater`, `asin`, `fix`), and the smaller methods
and properties (`dist`, `renorm`, `aminmax`, `nanmedian`, `retains_grad`, `nbytes`, ...).
Values are checked against NumPy, gradients against finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad

RNG = np.random.default_rng(0)
X = RNG.uniform(0.1, 0.9, (3, 4))
M = np.array([[2.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.1, 0.4, 1.5]])

# name -> the method's arguments after self, for an input in (0.1, 0.9)
IN_PLACE_ARGS = {
    "asin": (), "acos": (), "atan": (), "asinh": (), "atanh": (), "arcsin": (), "log10": (),
    "log1p": (), "log2": (), "erf": (), "erfc": (), "erfinv": (), "expm1": (), "exp2": (),
    "rsqrt": (), "tan": (), "sinh": (), "cosh": (), "sinc": (), "lgamma": (), "digamma": (),
    "i0": (), "deg2rad": (), "rad2deg": (), "sgn": (), "logit": (), "fix": (), "negative": (),
    "xlogy": (X + 1,), "hypot": (X,), "heaviside": (0.5,), "ldexp": (np.array([1, 2, 3, 0]),),
    "subtract": (X,), "multiply": (2.0,), "divide": (3.0,), "true_divide": (3.0,),
    "floor_divide": (0.25,), "polygamma": (1,), "cumprod": (1,), "tril": (), "triu": (1,),
    "eq": (X[0],), "ne": (0.5,), "lt": (0.5,), "le": (0.5,), "gt": (0.5,), "ge": (0.5,),
    "greater": (0.5,), "less_equal": (0.5,), "not_equal": (0.5,),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(IN_PLACE_ARGS))
def test_in_place_method_writes_the_out_of_place_result(name):
    args = [tg.tensor(a) if isinstance(a, np.ndarray) else a for a in IN_PLACE_ARGS[name]]
    expected = getattr(tg.tensor(X), name)(*args).astype(np.float64).numpy()
    t = tg.tensor(X)
    version = t._version[0]
    assert getattr(t, name + "_")(*args) is t
    assert t.dtype == np.float64 and t._version[0] > version
    np.testing.assert_allclose(t.numpy(), expected)


def test_in_place_products_and_mvlgamma():
    m = tg.tensor(M)
    b = tg.stack([m, m])
    for name, args, expected in [
        ("addmm", (m, m), M + M @ M), ("addmv", (m, m[0]), None),
        ("addr", (m[0], m[1]), M + np.outer(M[0], M[1])), ("baddbmm", (b, b), None),
        ("addbmm", (b, b), M + 2 * (M @ M)),
    ]:  # fmt: skip
        target = b if name == "baddbmm" else m[0] if name == "addmv" else m
        want = getattr(target, name)(*args).numpy() if expected is None else expected
        t = tg.tensor(target.numpy())
        assert getattr(t, name + "_")(*args) is t
        np.testing.assert_allclose(t.numpy(), want)
    t = tg.tensor(X + 3)
    t.mvlgamma_(2)
    np.testing.assert_allclose(t.numpy(), tg.tensor(X + 3).mvlgamma(2).numpy())


def test_in_place_comparison_keeps_the_dtype_as_zeros_and_ones():
    t = tg.tensor([1, 5, 3])
    t.ge_(3)
    assert t.dtype == np.int64 and t.tolist() == [0, 1, 1]
    m = tg.tensor([True, False])
    m.bitwise_and_(tg.tensor([True, True]))
    assert m.tolist() == [True, False]
    assert tg.tensor([True, False]).bitwise_not_().tolist() == [False, True]


def test_float_power_in_place_needs_a_float64_tensor():
    t = tg.tensor(X)
    t.float_power_(2)
    np.testing.assert_allclose(t.numpy(), X**2)
    with pytest.raises(RuntimeError, match="float_power_"):
        tg.tensor(X, dtype=tg.float32).float_power_(2)


def test_autograd_goes_through_in_place_unary_math():
    def f(x):
        y = x * 1.0
        y.asin_()
        y.mul_(x).log1p_()
        return y

    check_grad(f, X)
    leaf = tg.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.asin_()


def test_aliases_are_the_same_methods():
    x = tg.tensor(X - 0.5)
    for alias, name in [("greater", "gt"), ("less_equal", "le"), ("not_equal", "ne"),
                        ("asin", "arcsin"), ("atanh", "arctanh"), ("fix", "trunc")]:  # fmt: skip
        args = (0.1,) if alias in ("greater", "less_equal", "not_equal") else ()
        np.testing.assert_array_equal(getattr(x, alias)(*args).numpy(),
                                      getattr(x, name)(*args).numpy())  # fmt: skip
    assert x.positive() is x
    assert x.short().dtype == np.int16
    a, b = tg.tensor([True, False]), tg.tensor([True, True])
    assert a.bitwise_or(b).tolist() == [True, True] and a.bitwise_xor(b).tolist() == [False, True]


def test_properties_and_predicates():
    x = tg.tensor(X, dtype=tg.float32)
    assert x.nbytes == 48 and x.itemsize == 4 and x.is_cpu and not x.is_inference()
    assert x.is_signed() and tg.tensor([1]).is_signed()
    assert not tg.tensor([1], dtype=np.uint8).is_signed() and not tg.tensor(True).is_signed()
    assert x.is_same_size(tg.zeros(3, 4)) and not x.is_same_size(tg.zeros(4, 3))
    assert tg.tensor([2]).is_nonzero() and not tg.tensor([0.0]).is_nonzero()
    with pytest.raises(RuntimeError, match="more than one value"):
        x.is_nonzero()
    with pytest.raises(RuntimeError, match="no values"):
        tg.tensor([]).is_nonzero()


def test_retains_grad_and_post_accumulate_grad_hooks():
    x = tg.tensor(X, requires_grad=True)
    y = x * 2.0
    assert not y.retains_grad
    y.retain_grad()
    assert y.retains_grad and not x.retains_grad
    seen = []
    handle = x.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.numpy().copy()))
    y.sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(seen[0], np.full(X.shape, 2.0))
    np.testing.assert_allclose(seen[1], np.full(X.shape, 5.0))  # after the accumulation
    handle.remove()
    x.sum().backward()
    assert len(seen) == 2
    with pytest.raises(RuntimeError, match="non-leaf"):
        y.register_post_accumulate_grad_hook(print)
    with pytest.raises(RuntimeError, match="require"):
        tg.tensor(X).register_post_accumulate_grad_hook(print)


def test_dist_renorm_aminmax_diagflat_vdot_split_with_sizes():
    x, y = tg.tensor(X), tg.tensor(X[0])
    np.testing.assert_allclose(x.dist(y, 3).item(), np.sum(np.abs(X - X[0]) ** 3) ** (1 / 3))
    assert x.dist(y, 0).item() == 8.0 and math.isclose(x.dist(y).item(), np.linalg.norm(X - X[0]))
    norms = np.abs(X).sum(1, keepdims=True)
    np.testing.assert_allclose(x.renorm(1, 0, 1.5).numpy(),
                               np.where(norms > 1.5, X * 1.5 / (norms + 1e-7), X))  # fmt: skip
    low, high = x.aminmax(dim=1, keepdim=True)
    np.testing.assert_array_equal(low.numpy(), X.min(1, keepdims=True))
    assert x.aminmax().max.item() == X.max()
    np.testing.assert_array_equal(tg.tensor(M).diagflat(1).numpy(), np.diagflat(M, 1))
    into = tg.zeros(2, 2, dtype=np.float64)  # diag keeps PyTorch's keywords (out=)
    tg.diag(tg.tensor([1.0, 2.0], dtype=np.float64), out=into)
    np.testing.assert_array_equal(into.numpy(), np.diag([1.0, 2.0]))
    assert math.isclose(y.vdot(y).item(), X[0] @ X[0])
    assert [p.shape for p in x.split_with_sizes([1, 3], 1)] == [(3, 1), (3, 3)]


def test_matrix_power_inverse_pinverse():
    m = tg.tensor(M)
    for n in range(-3, 6):
        np.testing.assert_allclose(m.matrix_power(n).numpy(), np.linalg.matrix_power(M, n),
                                   rtol=1e-12)  # fmt: skip
    b = tg.tensor(np.stack([M, M.T]))
    np.testing.assert_allclose(b.matrix_power(3).numpy(), np.stack([M, M.T]) @ np.stack([M, M.T])
                               @ np.stack([M, M.T]))  # fmt: skip
    np.testing.assert_allclose(m.inverse().numpy(), np.linalg.inv(M))
    np.testing.assert_allclose(tg.tensor(X).pinverse().numpy(), np.linalg.pinv(X))
    s = np.linalg.svd(M, compute_uv=False)  # singular values below rcond * the largest: zero
    cut = np.linalg.pinv(M, rcond=(s[-1] / s[0]) * 1.01)
    np.testing.assert_allclose(m.pinverse((s[-1] / s[0]) * 1.01).numpy(), cut, atol=1e-12)


def test_nanmedian_skips_nan_as_pytorch():
    nan = math.nan
    x = tg.tensor([[1.0, nan, 3.0, 2.0], [nan, nan, nan, nan], [4.0, 1.0, 2.0, 3.0]])
    values, indices = x.nanmedian(1)
    np.testing.assert_array_equal(values.numpy(), [2.0, nan, 2.0])
    assert indices.tolist()[0] == 3 and indices.tolist()[2] == 2
    assert x.nanmedian(0, keepdim=True).values.shape == (1, 4)
    assert x.nanmedian().item() == 2.0  # of 1, 3, 2, 4, 1, 2, 3
    assert tg.tensor(2.0).nanmedian(0).values.item() == 2.0


def test_ldexp_hardshrink_prelu():
    x = tg.tensor(X - 0.5)
    assert x.ldexp(tg.tensor([1, 2, 3, 0])).dtype == np.float64
    assert tg.tensor([1, 2]).ldexp(tg.tensor([1, 2])).tolist() == [2.0, 8.0]
    assert tg.tensor([1, 2]).ldexp(tg.tensor([1, 2])).dtype == np.float32
    np.testing.assert_array_equal(x.hardshrink(0.3).numpy(), np.where(np.abs(X - 0.5) > 0.3,
                                                                      X - 0.5, 0))  # fmt: skip
    w = tg.tensor([0.1, 0.2, 0.3, 0.4], dtype=tg.float64)
    np.testing.assert_allclose(
        x.prelu(w).numpy(), np.where(X > 0.5, X - 0.5, (X - 0.5) * [0.1, 0.2, 0.3, 0.4])
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.renorm(2, 0, 1.0),
        lambda x: x.renorm(1, 1, 0.8),
        lambda x: x.dist(x[0] * 0.5, 3),
        lambda x: x[:, :3].matrix_power(3),
        lambda x: x[:, :3].matrix_power(-2),
        lambda x: x.pinverse(),
        lambda x: x.nanmedian(1).values,
        lambda x: tg.stack(list(x.aminmax(dim=0))),
        lambda x: x.diagflat(),
        lambda x: x[0].vdot(x[1]),
        lambda x: x.ldexp(tg.tensor([1, 0, 2, 1])),
        lambda x: (x - 0.5).hardshrink(0.2),
        lambda x: (x - 0.5).prelu(x[0]),
    ],
)
def test_gradients_match_finite_differences(fn):
    check_grad(fn, X + np.eye(3, 4))
