"""PyTorch's special functions (`torch.special`, and the top-level polygamma, xlogy, logit,
mvlgamma, igamma, igammac): values against PyTorch in float64 where installed, else against
math; their limits (0 log 0 = 0, the normal CDF's far tail); gradients against finite
differences; those PyTorch has no derivative of (results that do not require grad); traced."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad, traced_matches_eager
from tracegrad.compiler import lowering

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
special = ttorch.special

R = np.random.default_rng(7)
X = R.uniform(-3, 3, 12)
P01 = R.uniform(0.01, 0.99, 12)
POS = R.uniform(0.1, 4, 12)

# name: (call given the special module, arrays)
CASES = {
    "erf": (lambda s, x: s.erf(x), [X]),
    "erfc": (lambda s, x: s.erfc(x), [X]),
    "erfinv": (lambda s, p: s.erfinv(2 * p - 1), [P01]),
    "expit": (lambda s, x: s.expit(x), [X]),
    "logit": (lambda s, p: s.logit(p), [P01]),
    "logit eps": (lambda s, p: s.logit(p, eps=0.2), [P01]),
    "log1p": (lambda s, x: s.log1p(x), [POS]),
    "expm1": (lambda s, x: s.expm1(x), [X]),
    "exp2": (lambda s, x: s.exp2(x), [X]),
    "gammaln": (lambda s, x: s.gammaln(x), [POS]),
    "digamma": (lambda s, x: s.digamma(x), [POS]),
    "psi": (lambda s, x: s.psi(x), [POS]),
    "polygamma": (lambda s, x: s.polygamma(2, x), [POS]),
    "multigammaln": (lambda s, x: s.multigammaln(x + 2, 3), [POS]),
    "xlogy": (lambda s, x, y: s.xlogy(x, y), [X, POS]),
    "xlog1py": (lambda s, x, y: s.xlog1py(x, y), [X, POS]),
    "logsumexp": (lambda s, x: s.logsumexp(x.reshape(3, 4), 1), [X]),
    "softmax": (lambda s, x: s.softmax(x.reshape(3, 4), 0), [X]),
    "log_softmax": (lambda s, x: s.log_softmax(x.reshape(3, 4), dim=1), [X]),
    "sinc": (lambda s, x: s.sinc(x), [X]),
    "ndtr": (lambda s, x: s.ndtr(x), [X]),
    "ndtri": (lambda s, p: s.ndtri(p), [P01]),
    "log_ndtr": (lambda s, x: s.log_ndtr(x * 10), [X]),
    "entr": (lambda s, x: s.entr(x), [POS]),
    "i0": (lambda s, x: s.i0(x), [X]),
    "i1": (lambda s, x: s.i1(x), [X]),
    "i0e": (lambda s, x: s.i0e(x), [X]),
    "i1e": (lambda s, x: s.i1e(x), [X]),
    "erfcx": (lambda s, x: s.erfcx(x), [X]),
    # differentiable in the second argument only: the first is made of it, detached
    "zeta": (lambda s, q: s.zeta(q.detach() + 2.5, q), [POS]),
    "gammainc": (lambda s, x: s.gammainc(x.detach() * 2 + 0.5, x), [POS]),
    "gammaincc": (lambda s, x: s.gammaincc(x.detach() * 2 + 0.5, x), [POS]),
}
PARTIAL = {"zeta", "gammainc", "gammaincc"}  # finite differences would move both arguments


@needs_torch
@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients_match_torch(name):
    call, arrays = CASES[name]
    ours = [tg.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    a, b = call(special, *ours), call(torch.special, *theirs)
    np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14)
    c = R.standard_normal(a.shape)
    (a * c).sum().backward()
    (b * torch.tensor(c)).sum().backward()
    for x, t in zip(ours, theirs, strict=True):
        rtol = 1e-8 if name in ("digamma", "psi") else 1e-10  # PyTorch's trigamma: ~1e-9
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in CASES if n not in PARTIAL])
def test_gradients_match_finite_differences(name):
    """(The partial derivatives of zeta and gammainc(c) are against finite differences in
    tests/core/ops/test_special_gamma.py.)"""
    call, arrays = CASES[name]
    check_grad(lambda *xs: call(special, *xs), *arrays, tol=1e-6)


def test_limits_without_torch():
    zero = tg.tensor([0.0, 0.0, 2.0], dtype=tg.float64)
    assert special.xlogy(zero, tg.tensor([0.0, 3.0, 0.0])).tolist() == [0.0, 0.0, -math.inf]
    assert np.isnan(special.xlogy(zero[:1], tg.tensor([math.nan])).item())
    got = special.xlog1py(zero, tg.tensor([-1.0, 3.0, 1.0], dtype=tg.float64)).tolist()
    assert got == [0.0, 0.0, 2 * math.log(2)]


@pytest.mark.parametrize("f", ["xlogy", "xlog1py"])
def test_at_x_zero_the_gradient_in_x_is_the_log(f):
    """d/dx x log y = log y at x = 0 too (PyTorch's; it was 0), and 0 where the log is not
    finite; y's is x / y, 0."""
    ys = np.array([2.0, 0.5, 0.0, -1.0, math.inf])
    x, y = tg.tensor(np.zeros(5), requires_grad=True), tg.tensor(ys, requires_grad=True)
    out = getattr(special, f)(x, y)
    assert out.tolist() == [0.0] * 5
    out.sum().backward()
    with np.errstate(divide="ignore", invalid="ignore"):
        log = np.log(ys) if f == "xlogy" else np.log1p(ys)
    np.testing.assert_array_equal(x.grad.numpy(), np.where(np.isfinite(log), log, 0.0))
    np.testing.assert_array_equal(y.grad.numpy(), np.zeros(5))
    assert special.entr(tg.tensor([0.0, -1.0, 0.5], dtype=tg.float64)).tolist() == [
        0.0,
        -math.inf,
        0.5 * math.log(2),
    ]
    x = tg.tensor([-40.0, -25.0, -5.0, 0.0, 3.0], dtype=tg.float64)
    want = [math.log(0.5 * math.erfc(-v / math.sqrt(2))) for v in (-25.0, -5.0, 0.0, 3.0)]
    got = special.log_ndtr(x).numpy()
    np.testing.assert_allclose(got[1:], want, rtol=1e-13)
    assert math.isclose(got[0], -804.6084420137538, rel_tol=1e-13)  # Phi(-40) underflows
    assert math.isclose(special.ndtr(tg.tensor([-30.0], dtype=tg.float64)).item(),
                        4.906713927148187e-198, rel_tol=1e-13)  # fmt: skip
    assert math.isclose(special.ndtri(tg.tensor([0.975], dtype=tg.float64)).item(),
                        1.959963984540054, rel_tol=1e-14)  # fmt: skip
    assert special.logit(tg.tensor([0.0]), eps=0.25).item() == pytest.approx(math.log(1 / 3))
    assert tg.mvlgamma(tg.tensor([2.5], dtype=tg.float64), 2).item() == pytest.approx(
        0.5 * math.log(math.pi) + math.lgamma(2.5) + math.lgamma(2.0), rel=1e-14
    )


def test_names_and_methods():
    assert special.gammaln is tg.lgamma and special.psi is tg.digamma
    assert special.expit is tg.sigmoid and ttorch.special.erfinv is tg.erfinv
    x = tg.tensor([0.25, 0.5], dtype=tg.float64)
    assert x.logit().tolist() == pytest.approx([math.log(1 / 3), 0.0])
    assert x.xlogy(2.0).tolist() == pytest.approx([0.25 * math.log(2), 0.5 * math.log(2)])
    assert x.polygamma(0).tolist() == tg.digamma(x).tolist()
    assert (x + 2).mvlgamma(1).tolist() == tg.lgamma(x + 2).tolist()
    assert ttorch.polygamma is tg.polygamma and ttorch.xlogy is tg.xlogy
    with pytest.raises(AttributeError, match="torch.special.bessel_j2 is not provided"):
        special.bessel_j2  # noqa: B018
    assert special.gammainc is ttorch.igamma is tg.igamma and special.gammaincc is ttorch.igammac
    a, x = tg.tensor([0.5, 2.0]), tg.tensor([1.0, 3.0], dtype=tg.float64)
    assert a.igamma(x).tolist() == tg.igamma(a, x).tolist() and a.igamma(x).dtype == np.float64
    assert (a.igammac(x) + a.igamma(x)).tolist() == pytest.approx([1.0, 1.0], rel=1e-15)
    b = a.clone()
    assert b.igamma_(x) is b and b.dtype == np.float32  # in place: the tensor's dtype
    np.testing.assert_allclose(b.numpy(), [math.erf(1.0), 1 - 4 * math.exp(-3.0)], rtol=1e-6)
    np.testing.assert_allclose(a.clone().igammac_(x).numpy(), 1 - b.numpy(), rtol=1e-6)
    with pytest.raises(TypeError, match="can't be cast"):
        tg.tensor([1, 2]).igamma_(a)
    out = tg.empty(2, dtype=tg.float64)
    assert special.bessel_j0(x, out=out) is out and out.tolist() == special.bessel_j0(x).tolist()
    got = special.chebyshev_polynomial_t(input=x, n=3).tolist()
    assert got == pytest.approx([1.0, 99.0])  # 4x^3 - 3x
    assert special.modified_bessel_i0(x).tolist() == special.i0(x).tolist()
    assert special.modified_bessel_i1.__name__ == "modified_bessel_i1"


WITHOUT_DERIVATIVE = {
    "bessel_j0": (), "bessel_j1": (), "bessel_y0": (), "bessel_y1": (), "modified_bessel_i0": (),
    "modified_bessel_i1": (), "modified_bessel_k0": (), "modified_bessel_k1": (),
    "scaled_modified_bessel_k0": (), "scaled_modified_bessel_k1": (), "airy_ai": (),
    "spherical_bessel_j0": (), **{f"{s}chebyshev_polynomial_{k}": (3,) for s in ("", "shifted_")
                                  for k in "tuvw"},
    "hermite_polynomial_h": (3,), "hermite_polynomial_he": (3,), "laguerre_polynomial_l": (3,),
    "legendre_polynomial_p": (3,),
}  # fmt: skip


@pytest.mark.parametrize("name", WITHOUT_DERIVATIVE)
def test_functions_without_derivatives_give_results_without_grad(name):
    """As PyTorch's: a backward through one alone raises, other paths ignore it."""
    x = tg.tensor([0.3, 1.7], dtype=tg.float64, requires_grad=True)
    y = getattr(special, name)(x, *WITHOUT_DERIVATIVE[name])
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()
    (y * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), y.numpy())
    if torch is not None:
        t = torch.tensor([0.3, 1.7], dtype=torch.float64, requires_grad=True)
        assert not getattr(torch.special, name)(t, *WITHOUT_DERIVATIVE[name]).requires_grad


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(x, p):
        return (special.ndtri(p) + special.log_ndtr(x * 10) + special.xlogy(x, p)
                + special.entr(p) + special.logit(p, 0.1) + tg.mvlgamma(p + 3, 2))  # fmt: skip

    traced_matches_eager(f, X, P01, backend=backend)


@pytest.mark.parametrize("name", ["digamma", "lgamma", "erfinv", "erfc", "i0", "i1", "logit",
                                  "entr", "ndtr", "ndtri", "log_ndtr", "polygamma", "i0e",
                                  "erfcx", "bessel_j0", "airy_ai"])  # fmt: skip
def test_complex_values_are_refused_as_in_pytorch(name):
    """They kept only the real part, silently (the imaginary part dropped by a cast)."""
    z = tg.tensor(np.array([0.3 + 0.1j]))
    f = getattr(special, name, None) or getattr(tg, name)
    with pytest.raises(RuntimeError, match="complex"):
        f(1, z) if name == "polygamma" else f(z)
