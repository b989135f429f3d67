"""lgamma, digamma, polygamma, erfc and erfinv: values against known constants and Python's math
(and PyTorch's, where installed, in float64), poles as PyTorch's, gradients against finite
differences, traced steps against eager ones on both backends."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering
from tracegrad.torch import special

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
EULER = 0.5772156649015329
ZETA3 = 1.2020569031595942


def values(f, xs) -> np.ndarray:
    return f(tg.tensor(np.asarray(xs, np.float64))).numpy()


def test_lgamma_is_math_lgamma_with_infinite_poles():
    xs = [0.5, 1.0, 2.0, 3.7, 1e-8, 171.5, 1e5, -0.5, -2.5, -7.3]
    np.testing.assert_allclose(values(tg.lgamma, xs), [math.lgamma(v) for v in xs], rtol=1e-15)
    assert values(tg.lgamma, [0.0, -1.0, -4.0]).tolist() == [math.inf] * 3


def test_digamma_at_known_values_and_poles():
    known = {1.0: -EULER, 0.5: -EULER - 2 * math.log(2), 2.0: 1 - EULER,
             -0.5: 2 - EULER - 2 * math.log(2), 1e-6: -1e6 - EULER + 1.6449340668e-6,
             1e5: math.log(1e5) - 0.5e-5 - 1 / 12e10}  # fmt: skip
    np.testing.assert_allclose(values(tg.digamma, list(known)), list(known.values()), rtol=1e-14,
                               atol=1e-15)  # fmt: skip
    # psi(x + 1) = psi(x) + 1/x, across the recurrence's and the reflection's seams
    xs = np.array([-3.7, -0.2, 0.3, 8.5, 9.5, 10.5, 33.0])
    np.testing.assert_allclose(values(tg.digamma, xs + 1), values(tg.digamma, xs) + 1 / xs,
                               rtol=1e-13)  # fmt: skip
    out = values(tg.digamma, [0.0, -1.0, -3.0])
    assert out[0] == -math.inf and np.isnan(out[1:]).all()


def test_polygamma_at_known_values():
    cases = [(1, 1.0, math.pi**2 / 6), (1, 0.5, math.pi**2 / 2), (1, -0.5, math.pi**2 / 2 + 4),
             (2, 1.0, -2 * ZETA3), (3, 1.0, math.pi**4 / 15), (2, 0.5, -14 * ZETA3),
             (1, 2.0, math.pi**2 / 6 - 1), (4, 1.0, -24 * 1.0369277551433699)]  # fmt: skip
    for n, x, want in cases:
        got = tg.polygamma(n, tg.tensor([x], dtype=tg.float64)).item()
        assert math.isclose(got, want, rel_tol=1e-14), (n, x, got, want)
    assert tg.polygamma(0, tg.tensor([1.0])).item() == pytest.approx(-EULER)
    assert tg.polygamma(1, tg.tensor([0.0])).item() == math.inf
    with pytest.raises(ValueError, match="non-negative"):
        tg.polygamma(-1, tg.tensor([1.0]))


def test_erfinv_inverts_math_erf_to_the_last_bits_and_its_tails():
    p = np.concatenate([np.linspace(-0.99, 0.99, 41), [1e-20, -3e-9, 0.5, -0.7]])
    y = values(tg.erfinv, p)
    np.testing.assert_allclose([math.erf(v) for v in y], p, rtol=2e-16, atol=1e-300)
    for rest in (1e-5, 1e-10, 1e-15, 2.0**-52):  # erf cancels there; erfc does not
        y = values(tg.erfinv, [1.0 - rest, rest - 1.0])
        exact = 1.0 - (1.0 - rest)  # what 1 - rest rounded to leaves
        assert math.isclose(math.erfc(y[0]), exact, rel_tol=1e-13) and y[1] == -y[0]
    assert values(tg.erfinv, [1.0, -1.0]).tolist() == [math.inf, -math.inf]
    assert np.isnan(values(tg.erfinv, [1.5, -2.0])).all()


def test_erfinv_of_a_matrix_is_elementwise():
    """Its Newton steps index the elements by flat position: a 2-d input too."""
    x = np.array([[0.5, -0.25, 0.75], [0.1, 0.2, -0.9]])
    y = tg.tensor(x).erfinv().numpy()
    assert y.shape == x.shape
    np.testing.assert_allclose([math.erf(v) for v in y.ravel()], x.ravel(), rtol=1e-15)


def test_erfc_keeps_the_tail():
    xs = [-3.0, 0.0, 0.5, 5.0, 20.0]
    np.testing.assert_allclose(values(tg.erfc, xs), [math.erfc(v) for v in xs], rtol=1e-15)


def test_bessel_i0_and_i1_at_known_values():
    xs = [0.0, 1.0, -2.5, 10.0]
    np.testing.assert_allclose(values(tg.i0, xs), np.i0(xs), rtol=1e-15)
    want = [0.0, 0.5651591039924851, -2.5167162452886984, 2670.988303701255]
    np.testing.assert_allclose(values(special.i1, xs), want, rtol=1e-14)
    # I0' = I1 and (x I1)' = x I0
    h = 1e-6
    for x in (0.3, 4.0, -7.0):
        d = (values(tg.i0, [x + h]) - values(tg.i0, [x - h])) / (2 * h)
        assert math.isclose(d[0], values(special.i1, [x])[0], rel_tol=1e-8)


def test_they_are_opaque_so_remat_does_not_recompute_them():
    """Each costs many passes (or a Python call per element): not `cheap`, so remat keeps its
    result rather than recompute it in backward; pure, so the memory budget may rebuild it."""
    from tracegrad.core import primitives as P

    for op in (P.lgamma, P.digamma, P.polygamma, P.erfc, P.erfinv, P.i0, P.i1):
        assert not op.cheap and op.may_rerun and not op.may_raise, op


def test_dtypes_and_methods():
    x = tg.tensor([0.5, 2.5])
    for name in ("lgamma", "digamma", "erfc"):
        assert getattr(x, name)().dtype == np.float32
    assert tg.erfinv(tg.tensor([0.25])).dtype == np.float32
    assert x.polygamma(1).dtype == np.float32
    assert tg.lgamma(tg.tensor([3, 4])).dtype == np.float32  # integers: the default float
    assert tg.lgamma(tg.tensor([3, 4])).tolist() == pytest.approx([math.log(2), math.log(6)])
    np.testing.assert_allclose(tg.tensor([0.3], dtype=tg.float64).erfinv().numpy(),
                               [0.27246271472675443], rtol=1e-15)  # fmt: skip


GRADIENTS = {
    "lgamma": (tg.lgamma, [0.3, 1.7, 4.2, -0.4, -2.6]),
    "digamma": (tg.digamma, [0.3, 1.7, 4.2, 12.5, -0.4, -2.6]),
    "trigamma": (lambda t: tg.polygamma(1, t), [0.3, 1.7, 4.2, 12.5, -0.4]),
    "polygamma 2": (lambda t: tg.polygamma(2, t), [0.3, 1.7, 4.2, 12.5]),
    "erfc": (tg.erfc, [-1.5, 0.0, 0.4, 2.0]),
    "i0": (tg.i0, [-3.0, 0.0, 0.5, 6.0]),
    "i1": (special.i1, [-3.0, 0.0, 0.5, 6.0]),
    "erfinv": (tg.erfinv, [-0.9, -0.3, 0.0, 0.2, 0.75, 0.99]),
}


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_match_finite_differences(name):
    f, xs = GRADIENTS[name]
    check_grad(f, np.array(xs), tol=1e-6)


def test_second_derivatives_are_the_next_functions():
    x = tg.tensor([0.7, 2.5], dtype=tg.float64, requires_grad=True)
    (g,) = tg.autograd.grad(tg.lgamma(x).sum(), [x], create_graph=True)
    (h,) = tg.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(g.numpy(), tg.digamma(x).numpy(), rtol=1e-15)
    np.testing.assert_allclose(h.numpy(), tg.polygamma(1, x).numpy(), rtol=1e-15)
    y = tg.tensor([0.4], dtype=tg.float64, requires_grad=True)
    (dy,) = tg.autograd.grad(tg.erfinv(y).sum(), [y], create_graph=True)
    (d2y,) = tg.autograd.grad(dy.sum(), [y])  # d/dx e^{y^2} sqrt(pi)/2 = 2 y (dy/dx)^2
    v = tg.erfinv(y).item()
    assert math.isclose(d2y.item(), 2 * v * dy.item() ** 2, rel_tol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(x, p):
        return (tg.lgamma(x) * 0.5 + tg.digamma(x) - tg.polygamma(2, x) + tg.erfc(x)
                + tg.erfinv(p) * x + tg.i0(p) * special.i1(x))  # fmt: skip

    x = np.array([0.4, 1.3, 2.2, 7.5, 15.0])
    p = np.array([-0.8, -0.1, 0.3, 0.6, 0.95])
    traced_matches_eager(f, x, p, backend=backend)


@needs_torch
@pytest.mark.parametrize("name", ["lgamma", "digamma", "erfc", "erfinv", "polygamma 1",
                                  "polygamma 2", "polygamma 3", "i0", "i1"])  # fmt: skip
def test_values_and_gradients_match_torch(name):
    rng = np.random.default_rng(3)
    if name == "erfinv":
        x = np.concatenate([rng.uniform(-1, 1, 200), [1 - 1e-12, -1 + 1e-9, 1e-30]])
    else:
        x = np.concatenate([rng.uniform(-9.7, 40, 300), rng.uniform(1e-6, 2, 50), [1e4, 1e-9]])
    if name.startswith("polygamma"):
        n = int(name.split()[1])
        ours, theirs = (lambda t: tg.polygamma(n, t)), (lambda t: torch.polygamma(n, t))
        x = x if n == 1 else np.abs(x) + 1e-3  # PyTorch's higher orders reject x < 0
    else:
        ours = getattr(special if name == "i1" else tg, name)
        theirs = getattr(torch.special, name) if name.startswith("i") else getattr(torch, name)
    a = tg.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    ours(a).sum().backward()
    theirs(t).sum().backward()
    rtol = 1e-8 if name in ("digamma", "polygamma 1") else 1e-11  # PyTorch's trigamma: ~1e-9
    np.testing.assert_allclose(ours(a).numpy(), theirs(t).detach().numpy(),
                               rtol=1e-8 if name == "polygamma 1" else 1e-12)  # fmt: skip
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol)
