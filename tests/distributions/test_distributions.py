"""`tracegrad.distributions`: each family's log_prob, entropy, moments and cdf against PyTorch's
in float64 (where it is installed), their gradients (and those of reparameterized draws)
against finite differences, draws' shapes and dtypes, their statistics (a Kolmogorov-Smirnov
distance, frequencies, moments, each bound a few standard errors wide), the errors for bad
parameters and values, and a REINFORCE step and a VAE step traced on both backends against the
eager steps from the same seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.conftest import check_grad
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
    import torch.distributions as TD
except ImportError:  # the checks without PyTorch still run
    torch = TD = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

R = np.random.default_rng(0)
SIMPLEX = R.dirichlet(np.ones(4), 2)  # (2, 4)
A = np.eye(3) * 1.5 + R.standard_normal((3, 3)) * 0.3  # well-conditioned: A A^T is the covariance
TRIL = np.tril(R.standard_normal((2, 3, 3)) * 0.3) + np.eye(3)  # positive diagonal
LOWS = R.standard_normal(3)

# (id, the distribution made with a module's classes from the parameters, the parameters (they
# get gradients), a value for log_prob (broadcast against the batch))
CASES = [
    ("normal", lambda d, a, b: d.Normal(a, b), [R.standard_normal(3), R.uniform(0.5, 2, 3)],
     R.standard_normal((2, 3))),
    ("normal_scalar_scale", lambda d, a: d.Normal(a, 0.7), [R.standard_normal(3)],
     R.standard_normal((2, 3))),
    ("lognormal", lambda d, a, b: d.LogNormal(a, b), [R.standard_normal(3) * 0.3,
     R.uniform(0.5, 1, 3)], R.uniform(0.2, 3, (2, 3))),
    ("uniform", lambda d, a, w: d.Uniform(a, a + w), [LOWS, R.uniform(1, 2, 3)],
     LOWS + R.uniform(0.1, 0.9, (2, 3))),
    ("laplace", lambda d, a, b: d.Laplace(a, b), [R.standard_normal(3), R.uniform(0.5, 2, 3)],
     R.standard_normal((2, 3)) + 2.5),
    ("exponential", lambda d, r: d.Exponential(r), [R.uniform(0.5, 2, 3)],
     R.uniform(0.1, 3, (2, 3))),
    ("cauchy", lambda d, a, b: d.Cauchy(a, b), [R.standard_normal(3), R.uniform(0.5, 2, 3)],
     R.standard_normal((2, 3)) * 3),
    ("bernoulli_probs", lambda d, p: d.Bernoulli(probs=p), [R.uniform(0.1, 0.9, 3)],
     R.integers(0, 2, (2, 3)).astype(float)),
    ("bernoulli_logits", lambda d, x: d.Bernoulli(logits=x), [R.standard_normal(3) * 3],
     R.integers(0, 2, (2, 3)).astype(float)),
    ("categorical_probs", lambda d, p: d.Categorical(probs=p), [SIMPLEX * 3.0],
     R.integers(0, 4, (5, 2))),
    ("categorical_logits", lambda d, x: d.Categorical(logits=x), [R.standard_normal((2, 4))],
     R.integers(0, 4, (5, 2))),
    ("onehot", lambda d, p: d.OneHotCategorical(probs=p), [SIMPLEX],
     np.eye(4)[R.integers(0, 4, (5, 2))]),
    ("onehot_logits", lambda d, x: d.OneHotCategorical(logits=x), [R.standard_normal((2, 4))],
     np.eye(4)[R.integers(0, 4, (5, 2))]),
    ("mvn_covariance", lambda d, m, a: d.MultivariateNormal(m, covariance_matrix=a @ a.T),
     [R.standard_normal((2, 3)), A], R.standard_normal((4, 2, 3))),
    ("mvn_scale_tril", lambda d, m, t: d.MultivariateNormal(m, scale_tril=t.tril()),
     [R.standard_normal(3), TRIL], R.standard_normal((4, 2, 3))),
    ("mvn_precision", lambda d, m, a: d.MultivariateNormal(m, precision_matrix=a @ a.T),
     [R.standard_normal((2, 3)), A], R.standard_normal((4, 1, 3))),
    ("independent", lambda d, a, b: d.Independent(d.Normal(a, b), 1),
     [R.standard_normal((2, 3)), R.uniform(0.5, 2, (2, 3))], R.standard_normal((4, 2, 3))),
    ("relaxed_onehot", lambda d, t, x: d.RelaxedOneHotCategorical(t, logits=x),
     [np.array(0.7), R.standard_normal((2, 4))], R.dirichlet(np.ones(4), (5, 2))),
    ("relaxed_bernoulli", lambda d, t, x: d.RelaxedBernoulli(t, logits=x),
     [np.array(0.6), R.standard_normal(3)], R.uniform(0.05, 0.95, (2, 3))),
]  # fmt: skip
IDS = [c[0] for c in CASES]

# what each family has in closed form, beyond log_prob
NO_ENTROPY = {"relaxed_onehot", "relaxed_bernoulli"}
NO_MOMENTS = {"relaxed_onehot", "relaxed_bernoulli", "cauchy", "categorical_probs",
              "categorical_logits"}  # fmt: skip
CDF = {"normal", "normal_scalar_scale", "lognormal", "uniform", "laplace", "exponential",
       "cauchy"}  # fmt: skip


def _made(make, module, params, grad=False):
    if module is tg.distributions:
        xs = [tg.tensor(p, requires_grad=grad) for p in params]
    else:
        xs = [torch.tensor(p, requires_grad=grad) for p in params]
    return make(module, *xs), xs


def _value(module, value):
    return tg.tensor(value) if module is tg.distributions else torch.tensor(value)


def _close(got, want, **kw):
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-10, **kw)


@needs_torch
@pytest.mark.parametrize("name, make, params, value", CASES, ids=IDS)
def test_log_prob_entropy_moments_and_cdf_match_torch(name, make, params, value):
    ours, _ = _made(make, tg.distributions, params)
    theirs, _ = _made(make, TD, params)
    assert ours.batch_shape == tuple(theirs.batch_shape)
    assert ours.event_shape == tuple(theirs.event_shape)
    assert ours.has_rsample == theirs.has_rsample
    _close(ours.log_prob(_value(D, value)), theirs.log_prob(_value(TD, value)))
    if name not in NO_ENTROPY:
        _close(ours.entropy(), theirs.entropy())
    if name not in NO_MOMENTS:
        for moment in ("mean", "variance", "stddev", "mode"):
            got, want = getattr(ours, moment), getattr(theirs, moment)
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-9, err_msg=moment)
    if name in CDF:
        _close(ours.cdf(_value(D, value)), theirs.cdf(_value(TD, value)))
        u = np.linspace(0.05, 0.95, 6)[:, None]
        _close(ours.icdf(tg.tensor(u)), theirs.icdf(torch.tensor(u)))
    if hasattr(theirs, "probs") and name not in ("relaxed_onehot", "relaxed_bernoulli"):
        _close(ours.probs, theirs.probs)
        _close(ours.logits, theirs.logits)


@needs_torch
@pytest.mark.parametrize("name, make, params, value", CASES, ids=IDS)
def test_gradients_of_log_prob_and_entropy_match_torch(name, make, params, value):
    ours, xs = _made(make, tg.distributions, params, grad=True)
    theirs, ts = _made(make, TD, params, grad=True)
    c = np.random.default_rng(1).standard_normal(theirs.log_prob(_value(TD, value)).shape)
    total = (ours.log_prob(_value(D, value)) * tg.tensor(c)).sum()
    want = (theirs.log_prob(_value(TD, value)) * torch.tensor(c)).sum()
    if name not in NO_ENTROPY:
        total = total + ours.entropy().sum()
        want = want + theirs.entropy().sum()
    total.backward()
    want.backward()
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("name, make, params, value", CASES, ids=IDS)
def test_gradients_of_log_prob_match_finite_differences(name, make, params, value):
    check_grad(lambda *xs: make(D, *xs).log_prob(tg.tensor(value)), *params)


WITH_ENTROPY = [c for c in CASES if c[0] not in NO_ENTROPY]


@pytest.mark.parametrize("name, make, params, value", WITH_ENTROPY,
                         ids=[c[0] for c in WITH_ENTROPY])  # fmt: skip
def test_gradients_of_entropy_match_finite_differences(name, make, params, value):
    """With log_prob added (broadcast over the values): the entropy alone leaves out loc."""

    def f(*xs):
        d = make(D, *xs)
        return d.log_prob(tg.tensor(value)) + d.entropy()

    check_grad(f, *params)


NOT_REPARAMETERIZED = ("normal_scalar_scale", "bernoulli", "categorical", "onehot")
REPARAMETERIZED = [c for c in CASES if not c[0].startswith(NOT_REPARAMETERIZED)]


@pytest.mark.parametrize("name, make, params, value", REPARAMETERIZED,
                         ids=[c[0] for c in REPARAMETERIZED])  # fmt: skip
def test_gradients_of_reparameterized_draws_match_finite_differences(name, make, params, value):
    def draws(*xs):
        tg.manual_seed(7)  # the same standard draws at every evaluation
        return make(D, *xs).rsample((2,))

    check_grad(draws, *params)
    tg.manual_seed(7)
    d = make(D, *(tg.tensor(p) for p in params))
    with pytest.raises(NotImplementedError, match="Categorical has no reparameterized"):
        D.Categorical(logits=tg.zeros(3)).rsample()
    assert not d.sample().requires_grad


@pytest.mark.parametrize("name, make, params, value", CASES, ids=IDS)
def test_draws_have_the_extended_shape_and_the_parameters_dtype(name, make, params, value):
    d, _ = _made(make, tg.distributions, params)
    shape = d.batch_shape + d.event_shape
    discrete = name.startswith("categorical")
    for sample_shape in ((), (5,), (2, 3)):
        s = d.sample(sample_shape)
        assert s.shape == sample_shape + shape
        assert s.dtype == (np.int64 if discrete else np.float64)
    assert d.sample_n(4).shape == (4, *shape)
    tg.manual_seed(3)
    a = d.sample((6,)).numpy()
    tg.manual_seed(3)
    assert np.array_equal(a, d.sample((6,)).numpy())
    assert not np.array_equal(a, d.sample((6,)).numpy())  # the state moved on
    assert d.log_prob(d.sample((4,))).shape == (4, *d.batch_shape)
    e = d.expand((5, *d.batch_shape))
    assert e.batch_shape == (5, *d.batch_shape) and e.event_shape == d.event_shape
    assert e.log_prob(e.sample()).shape == e.batch_shape


def test_python_numbers_take_the_default_dtype_or_the_tensors():
    n = D.Normal(0.0, 1.0)
    assert n.batch_shape == () and n.loc.dtype == np.float32 and n.sample((3,)).dtype == np.float32
    n = D.Normal(tg.tensor(np.zeros(2)), 1)
    assert n.scale.dtype == np.float64 and n.scale.shape == (2,)
    assert D.Categorical(tg.tensor([0.25, 0.75])).sample().dtype == np.int64
    assert D.Bernoulli(0.3).sample((4,)).dtype == np.float32
    assert D.Normal(np.zeros(2), 1.0).scale.dtype == np.float64  # an ndarray keeps its dtype
    assert D.Normal(np.zeros(2, np.float32), 1.0).scale.dtype == np.float32
    x = tg.tensor(np.array([0.5, -1.0]), requires_grad=True)
    D.Normal(0.0, 2.0).log_prob(x).sum().backward()  # a flow's value gets a gradient too
    np.testing.assert_allclose(x.grad.numpy(), [-0.125, 0.25])
    assert float(D.Normal(0.0, 1.0).log_prob(0.0)) == pytest.approx(-0.5 * math.log(2 * math.pi))


N = 20000


@pytest.mark.parametrize("name", sorted(CDF - {"normal_scalar_scale"}))
def test_draws_follow_the_distribution(name):
    """The Kolmogorov-Smirnov distance of each column's draws within the 0.1% critical value
    (1.95 / sqrt(n)): a wrong location, scale or shape of the draws moves it by far more at
    n = 20000."""
    _, make, params, _ = next(c for c in CASES if c[0] == name)
    d = make(D, *(tg.tensor(p) for p in params))
    tg.manual_seed(0)
    s = np.sort(d.sample((N,)).numpy(), axis=0)
    f = d.cdf(tg.tensor(s)).numpy()  # each column at its own draws
    i = np.arange(1, N + 1)[:, None] / N
    ks = np.maximum(np.abs(i - f), np.abs(i - 1 / N - f)).max(0)
    assert np.all(ks < 1.95 / math.sqrt(N)), (name, ks)


# (id, the grid's ends per column: where the density is evaluated for the quadrature)
GRIDS = {
    "normal": lambda d: (d.loc - 12 * d.scale, d.loc + 12 * d.scale),
    "lognormal": lambda d: (d.loc - 14 * d.scale, d.loc + 14 * d.scale),  # of log x
    "uniform": lambda d: (d.low, d.high - 1e-12),
    "laplace": lambda d: (d.loc - 40 * d.scale, d.loc + 40 * d.scale),
    "exponential": lambda d: (d.rate * 0, 40 / d.rate),
}


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_densities_integrate_to_one_with_their_mean_variance_entropy_and_cdf(name):
    """Trapezoidal quadrature over 400001 points, with no reference implementation: a wrong
    normalizing constant, moment or entropy formula is off by far more than 1e-5."""
    _, make, params, _ = next(c for c in CASES if c[0] == name)
    d = make(D, *(tg.tensor(p) for p in params))
    lo, hi = (e.numpy() for e in GRIDS[name](d))
    x = np.linspace(lo, hi, 400001)  # (points, 3)
    x = np.exp(x) if name == "lognormal" else x
    log_p = d.log_prob(tg.tensor(x)).numpy()
    p = np.exp(log_p)

    def integral(f):
        return np.trapezoid(f, x, axis=0)

    np.testing.assert_allclose(integral(p), 1.0, rtol=1e-5)
    mean = integral(x * p)
    np.testing.assert_allclose(mean, d.mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(integral((x - mean) ** 2 * p), d.variance.numpy(), rtol=1e-4)
    np.testing.assert_allclose(integral(-p * log_p), d.entropy().numpy(), rtol=1e-5, atol=1e-6)
    cumulative = np.cumsum((p[1:] + p[:-1]) / 2 * np.diff(x, axis=0), axis=0)[::20000]
    cdf = d.cdf(tg.tensor(x[1:][::20000])).numpy()
    np.testing.assert_allclose(cdf, cumulative, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CDF - {"normal_scalar_scale"}))
def test_the_cdf_is_the_integral_of_the_density_and_icdf_its_inverse(name):
    _, make, params, value = next(c for c in CASES if c[0] == name)
    d = make(D, *(tg.tensor(p) for p in params))
    h = 1e-5
    slope = (d.cdf(tg.tensor(value + h)).numpy() - d.cdf(tg.tensor(value - h)).numpy()) / (2 * h)
    np.testing.assert_allclose(slope, np.exp(d.log_prob(tg.tensor(value)).numpy()), rtol=1e-6)
    np.testing.assert_allclose(d.icdf(d.cdf(tg.tensor(value))).numpy(), value, rtol=1e-9)


def test_discrete_and_multivariate_log_probs_are_the_formulas():
    """Without a reference implementation: log_prob over the whole support sums to one, is the
    normalized probabilities and gives the entropy; the multivariate normal's density and
    entropy are the textbook formulas."""
    probs = SIMPLEX
    for d in (
        D.Categorical(tg.tensor(probs * 5)),
        D.OneHotCategorical(logits=tg.tensor(np.log(probs))),
    ):
        lp = d.log_prob(d.enumerate_support()).numpy()  # (4, 2)
        np.testing.assert_allclose(np.exp(lp), probs.T, rtol=1e-12)
        np.testing.assert_allclose(d.entropy().numpy(), -(probs * np.log(probs)).sum(-1))
    p = np.array([0.1, 0.5, 0.8])
    for b in (D.Bernoulli(tg.tensor(p)), D.Bernoulli(logits=tg.tensor(np.log(p / (1 - p))))):
        lp = b.log_prob(b.enumerate_support()).numpy()
        np.testing.assert_allclose(np.exp(lp), [1 - p, p], rtol=1e-12)
        h = -(p * np.log(p) + (1 - p) * np.log(1 - p))
        np.testing.assert_allclose(b.entropy().numpy(), h, rtol=1e-12)
    loc, cov, x = R.standard_normal(3), A @ A.T, R.standard_normal((5, 3))
    d = D.MultivariateNormal(tg.tensor(loc), tg.tensor(cov))
    diff = x - loc
    want = -0.5 * (np.einsum("ni,ij,nj->n", diff, np.linalg.inv(cov), diff)
                   + np.linalg.slogdet(2 * np.pi * cov)[1])  # fmt: skip
    np.testing.assert_allclose(d.log_prob(tg.tensor(x)).numpy(), want, rtol=1e-12)
    entropy = 0.5 * np.linalg.slogdet(2 * np.pi * np.e * cov)[1]
    np.testing.assert_allclose(d.entropy().numpy(), entropy, rtol=1e-12)
    np.testing.assert_allclose(d.variance.numpy(), np.diag(cov), rtol=1e-12)


def test_discrete_frequencies_are_the_probabilities():
    """Within 4.5 binomial standard errors of each probability."""
    tg.manual_seed(0)
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.05, 0.05, 0.2]])
    se = 4.5 * np.sqrt(probs * (1 - probs) / N)
    s = D.Categorical(tg.tensor(probs)).sample((N,)).numpy()
    freq = np.stack([(s == k).mean(0) for k in range(4)], -1)
    assert np.all(np.abs(freq - probs) < se)
    s = D.OneHotCategorical(logits=tg.tensor(np.log(probs))).sample((N,)).numpy()
    assert np.all(s.sum(-1) == 1) and np.all(np.abs(s.mean(0) - probs) < se)
    # the Gumbel-max trick: the relaxed draw's largest entry is a categorical draw at any
    # temperature
    s = D.RelaxedOneHotCategorical(2.0, probs=tg.tensor(probs)).sample((N,)).numpy()
    assert np.allclose(s.sum(-1), 1)
    freq = np.stack([(s.argmax(-1) == k).mean(0) for k in range(4)], -1)
    assert np.all(np.abs(freq - probs) < se)
    p = np.array([0.05, 0.5, 0.9])
    se = 4.5 * np.sqrt(p * (1 - p) / N)
    s = D.Bernoulli(tg.tensor(p)).sample((N,)).numpy()
    assert set(np.unique(s)) == {0.0, 1.0} and np.all(np.abs(s.mean(0) - p) < se)
    s = D.RelaxedBernoulli(0.5, probs=tg.tensor(p)).sample((N,)).numpy()
    assert np.all((s > 0) & (s < 1)) and np.all(np.abs((s > 0.5).mean(0) - p) < se)


def test_multivariate_normal_draws_have_its_mean_and_covariance():
    """Mean within 4.5 standard errors; each covariance entry within 4.5 of its standard error
    sqrt((S_ii S_jj + S_ij^2) / n)."""
    loc = np.array([1.0, -2.0, 0.5])
    cov = A @ A.T
    se_cov = 4.5 * np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / N)
    for kind, matrix in (("covariance_matrix", cov), ("scale_tril", np.linalg.cholesky(cov)),
                         ("precision_matrix", np.linalg.inv(cov))):  # fmt: skip
        tg.manual_seed(0)
        d = D.MultivariateNormal(tg.tensor(loc), **{kind: tg.tensor(matrix)})
        np.testing.assert_allclose(d.covariance_matrix.numpy(), cov, atol=1e-12)
        np.testing.assert_allclose(d.precision_matrix.numpy(), np.linalg.inv(cov), atol=1e-10)
        np.testing.assert_allclose(d.scale_tril.numpy(), np.linalg.cholesky(cov), atol=1e-12)
        s = d.sample((N,)).numpy()
        assert np.all(np.abs(s.mean(0) - loc) < 4.5 * np.sqrt(np.diag(cov) / N)), kind
        assert np.all(np.abs(np.cov(s.T) - cov) < se_cov), kind


# --- errors ---------------------------------------------------------------------------------


def test_bad_parameters_raise_naming_the_distribution_and_the_shapes():
    with pytest.raises(
        tg.ShapeError,
        match=r"Normal: the shapes of loc torch.Size\(\[3\]\) and scale torch.Size\(\[2\]\)",
    ):
        D.Normal(tg.zeros(3), tg.ones(2))
    size2 = r"torch.Size\(\[2\]\)"
    with pytest.raises(ValueError, match=rf"parameter scale \(a tensor of shape {size2}\) of "
                       rf"distribution Normal\(loc: {size2}, scale: {size2}\) to satisfy the "
                       r"constraint GreaterThan\(lower_bound=0.0\)"):  # fmt: skip
        D.Normal(tg.zeros(2), tg.tensor([1.0, -1.0]))
    D.Normal(tg.zeros(2), tg.tensor([1.0, -1.0]), validate_args=False)  # not checked
    with pytest.raises(
        tg.ShapeError, match=r"Categorical: probs must be at least one-dim.*Size\(\[\]\)"
    ):
        D.Categorical(tg.tensor(0.5))
    with pytest.raises(ValueError, match="Categorical: either probs or logits"):
        D.Categorical(probs=tg.ones(2), logits=tg.ones(2))
    with pytest.raises(ValueError, match="Expected parameter probs.*Categorical.*Simplex"):
        D.Categorical(tg.tensor([0.5, -0.2, 0.7]))
    with pytest.raises(ValueError, match="Expected parameter probs.*Bernoulli.*Interval"):
        D.Bernoulli(tg.tensor([0.5, 1.2]))
    with pytest.raises(ValueError, match="Uniform.* to be below high"):
        D.Uniform(tg.tensor([0.0, 1.0]), tg.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="exactly one of covariance_matrix"):
        D.MultivariateNormal(tg.zeros(2), tg.eye(2), scale_tril=tg.eye(2))
    message = r"covariance_matrix must be a batch of 3x3 matrices \(loc has shape .*\[3\]\)\), got"
    with pytest.raises(tg.ShapeError, match=rf"MultivariateNormal: {message} shape .*\[2, 2\]\)"):
        D.MultivariateNormal(tg.zeros(3), tg.eye(2))
    with pytest.raises(ValueError, match="covariance_matrix.*PositiveDefinite"):
        D.MultivariateNormal(tg.zeros(2), tg.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(tg.ShapeError, match="MultivariateNormal: loc must be at least one"):
        D.MultivariateNormal(tg.tensor(0.0), tg.eye(1))
    with pytest.raises(
        tg.ShapeError, match=r"Independent: reinterpreted_batch_ndims 2 .*Size\(\[3\]\)"
    ):
        D.Independent(D.Normal(tg.zeros(3), 1.0), 2)


def test_bad_values_raise_when_validating():
    c = D.Categorical(logits=tg.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"Categorical.log_prob: expected value .* support "
                       r"\(IntegerInterval\(lower_bound=0, upper_bound=2\)\)"):  # fmt: skip
        c.log_prob(tg.tensor([0, 3]))
    with pytest.raises(tg.ShapeError, match=r"Categorical.log_prob: value torch.Size\(\[3\]\) "
                       r"does not broadcast with batch_shape \+ event_shape \(2,\)"):  # fmt: skip
        c.log_prob(tg.tensor([0, 1, 2]))
    m = D.MultivariateNormal(tg.zeros(3), tg.eye(3))
    with pytest.raises(tg.ShapeError, match=r"rightmost dimensions of value torch.Size\(\[2\]\) "
                       r"must be the event shape \(3,\)"):  # fmt: skip
        m.log_prob(tg.zeros(2))
    with pytest.raises(ValueError, match="Uniform.log_prob: expected value"):
        D.Uniform(0.0, 1.0).log_prob(2.0)
    assert float(D.Uniform(0.0, 1.0, validate_args=False).log_prob(2.0)) == -math.inf
    try:
        D.Distribution.set_default_validate_args(False)
        assert float(D.Uniform(0.0, 1.0).log_prob(2.0)) == -math.inf
        D.Normal(0.0, -1.0)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError, match="expected True or False"):
        D.Distribution.set_default_validate_args("no")


def test_the_parts_of_the_interface_real_code_reads():
    d = D.Categorical(logits=tg.tensor(np.log([[0.2, 0.8], [0.6, 0.4]])))
    assert d.mode.numpy().tolist() == [1, 0] and d.param_shape == (2, 2)
    assert d.enumerate_support().numpy().tolist() == [[0, 0], [1, 1]]
    np.testing.assert_allclose(d.perplexity().numpy(), np.exp(d.entropy().numpy()))
    assert np.isnan(d.mean.numpy()).all() and repr(d) == "Categorical(logits: torch.Size([2, 2]))"
    b = D.Bernoulli(tg.tensor([0.2, 0.5, 0.9]))
    assert np.array_equal(b.mode.numpy(), [0.0, np.nan, 1.0], equal_nan=True)
    assert b.enumerate_support(expand=False).shape == (2, 1)
    o = D.OneHotCategorical(tg.tensor([0.2, 0.8]))
    assert o.mode.numpy().tolist() == [0.0, 1.0] and o.enumerate_support().shape == (2, 2)
    i = D.Independent(D.Normal(tg.zeros((4, 3)), 1.0), 1)
    assert (i.batch_shape, i.event_shape) == ((4,), (3,)) and i.has_rsample
    shown = "Normal(loc: torch.Size([4, 3]), scale: torch.Size([4, 3]))"
    assert repr(i) == f"Independent({shown}, 1)"
    assert i.support.event_dim == 1
    assert D.constraints.positive.check(tg.tensor([1.0, -1])).numpy().tolist() == [True, False]


# --- training steps -------------------------------------------------------------------------


def _reinforce(traced, backend=None, steps=3, use_logits=False):
    """REINFORCE with an entropy bonus, as pytorch/examples' reinforce.py: the policy's action
    probabilities, a Categorical, a sampled action, -log_prob * reward."""
    tg.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = tg.optim.Adam(policy.parameters(), lr=0.05)
    obs = tg.tensor(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32))

    def step(obs):
        opt.zero_grad()
        out = policy(obs)
        m = D.Categorical(logits=out) if use_logits else D.Categorical(F.softmax(out, dim=-1))
        action = m.sample()
        reward = (action == 1).astype(np.float32) - 0.3
        loss = -(m.log_prob(action) * reward).mean() - 0.01 * m.entropy().mean()
        loss.backward()
        opt.step()
        return loss, action

    if traced:
        step = tg.trace(step, backend=backend)
    out = [step(obs) for _ in range(steps)]
    return ([float(loss) for loss, _ in out], [a.numpy() for _, a in out],
            [p.numpy() for p in policy.parameters()])  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_reinforce_step_matches_the_eager_one(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    for use_logits in (False, True):
        want, want_actions, want_params = _reinforce(False, use_logits=use_logits)
        got, actions, params = _reinforce(True, backend, use_logits=use_logits)
        for a, b in zip(actions, want_actions, strict=True):
            assert np.array_equal(a, b)  # the same draws, afresh at each call
        assert not np.array_equal(actions[0], actions[1])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        for a, b in zip(params, want_params, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _vae(traced, backend=None, steps=3):
    """A VAE's step: Normal posterior, rsample, reconstruction, KL to the standard normal
    prior (as Independent Normals over the latent dimensions)."""
    tg.manual_seed(0)
    encoder, decoder = nn.Linear(6, 4), nn.Linear(2, 6)
    params = [*encoder.parameters(), *decoder.parameters()]
    opt = tg.optim.SGD(params, lr=0.1)
    x = tg.tensor(np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32))

    def step(x):
        opt.zero_grad()
        mu, logvar = encoder(x).chunk(2, dim=-1)
        q = D.Independent(D.Normal(mu, (logvar * 0.5).exp()), 1)
        z = q.rsample()
        recon = D.Normal(decoder(z), 1.0).log_prob(x).sum(-1)
        prior = D.Independent(D.Normal(tg.zeros_like(mu), tg.ones_like(mu)), 1)
        kl = D.kl_divergence(q, prior)
        loss = (kl - recon).mean()
        loss.backward()
        opt.step()
        return loss, z

    if traced:
        step = tg.trace(step, backend=backend)
    out = [step(x) for _ in range(steps)]
    return (
        [float(loss) for loss, _ in out],
        [z.numpy() for _, z in out],
        [p.numpy() for p in params],
    )


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_vae_step_matches_the_eager_one(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    want, want_z, want_params = _vae(False)
    got, zs, params = _vae(True, backend)
    for a, b in zip(zs, want_z, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not np.allclose(zs[0], zs[1])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert want[-1] < want[0]


def test_shapes_are_torch_sizes():
    """gpytorch's marginal log likelihood calls `event_shape.numel()`."""
    d = D.MultivariateNormal(tg.zeros(2, 3), tg.eye(3))
    assert type(d.batch_shape) is type(tg.zeros(1).shape) and d.batch_shape.numel() == 2
    assert d.event_shape.numel() == 3 and d.event_shape == (3,)


GP_PARAMS = (np.array([0.3, -1.0, 0.5]), np.array([1.5, 0.7, 1.0]), np.array([0.2, -0.4, 0.0]))


def _pareto_tail():
    return D.GeneralizedPareto(*(tg.tensor(p) for p in GP_PARAMS))


def test_generalized_pareto_integrates_to_one_with_its_moments_entropy_and_cdf():
    """Quadrature over each column's support (up to where the survival is below 1e-13 for the
    heavy tail), xi > 0, < 0 and = 0, no reference implementation."""
    d = _pareto_tail()
    loc, scale, xi = GP_PARAMS
    upper = np.where(xi < 0, loc - scale / np.where(xi < 0, xi, -1), loc + 4000 * scale)
    x = np.linspace(loc, upper - 1e-9, 2_000_001)
    log_p = d.log_prob(tg.tensor(x)).numpy()
    p = np.exp(log_p)
    np.testing.assert_allclose(np.trapezoid(p, x, axis=0), 1.0, rtol=1e-5)
    mean = np.trapezoid(x * p, x, axis=0)
    np.testing.assert_allclose(mean, d.mean.numpy(), rtol=2e-4)
    np.testing.assert_allclose(np.trapezoid(-p * log_p, x, axis=0), d.entropy().numpy(),
                               rtol=1e-4)  # fmt: skip
    value = loc + np.array([0.5, 0.3, 1.2])
    h = 1e-6
    slope = (d.cdf(tg.tensor(value + h)).numpy() - d.cdf(tg.tensor(value - h)).numpy()) / (2 * h)
    np.testing.assert_allclose(slope, np.exp(d.log_prob(tg.tensor(value)).numpy()), rtol=1e-6)
    np.testing.assert_allclose(d.icdf(d.cdf(tg.tensor(value))).numpy(), value, rtol=1e-9)


def test_generalized_pareto_draws_follow_it_and_are_reparameterized():
    d = _pareto_tail()
    tg.manual_seed(0)
    s = np.sort(d.sample((N,)).numpy(), axis=0)
    f = d.cdf(tg.tensor(s)).numpy()
    i = np.arange(1, N + 1)[:, None] / N
    assert np.all(np.maximum(np.abs(i - f), np.abs(i - 1 / N - f)).max(0) < 1.95 / math.sqrt(N))

    def draws(*ps):
        tg.manual_seed(3)
        return D.GeneralizedPareto(*ps).rsample((2,))

    # xi away from 0, where the xi = 0 branch (constant in xi, as PyTorch's) takes over
    check_grad(draws, *GP_PARAMS[:2], np.array([0.2, -0.4, 0.1]))


@needs_torch
def test_generalized_pareto_matches_torch():
    """In float32: PyTorch 2.13's refuses float64 parameters (its isclose against a float32
    zero)."""
    value = GP_PARAMS[0] + np.array([0.5, 0.3, 1.2])

    def outputs(lib, dist):
        ps = [lib.tensor(p, dtype=lib.float32, requires_grad=True) for p in GP_PARAMS]
        d = dist(*ps)
        v = lib.tensor(value, dtype=lib.float32)
        u = lib.tensor([0.1, 0.5, 0.95], dtype=lib.float32)
        outs = [d.log_prob(v), d.cdf(v), d.icdf(u), d.entropy(), d.mean, d.variance]
        sum(o.sum() for o in outs).backward()
        return [o.detach().numpy() for o in outs] + [p.grad.numpy() for p in ps]

    for got, want in zip(outputs(tg, D.GeneralizedPareto),
                         outputs(torch, TD.GeneralizedPareto), strict=True):  # fmt: skip
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
