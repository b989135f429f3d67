"""PyTorch's special functions (`torch.special`, and the top-level polygamma, xlogy, logit,
mvlgamma): values against PyTorch in float64 where installed, else against math; their limits
(0 log 0 = 0, the normal CDF's far tail); gradients against finite differences; traced."""

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
}


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


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_finite_differences(name):
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
    with pytest.raises(AttributeError, match="torch.special.zeta is not provided"):
        special.zeta  # noqa: B018


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def f(x, p):
        return (special.ndtri(p) + special.log_ndtr(x * 10) + special.xlogy(x, p)
                + special.entr(p) + special.logit(p, 0.1) + tg.mvlgamma(p + 3, 2))  # fmt: skip

    traced_matches_eager(f, X, P01, backend=backend)


@pytest.mark.parametrize("name", ["digamma", "lgamma", "erfinv", "erfc", "i0", "i1", "logit",
                                  "entr", "ndtr", "ndtri", "log_ndtr", "polygamma"])  # fmt: skip
def test_complex_values_are_refused_as_in_pytorch(name):
    """They kept only the real part, silently (the imaginary part dropped by a cast)."""
    z = tg.tensor(np.array([0.3 + 0.1j]))
    f = getattr(special, name, None) or getattr(tg, name)
    with pytest.raises(RuntimeError, match="complex"):
        f(1, z) if name == "polygamma" else f(z)
