"""The simplex and matrix transforms (`distributions.matrix_transforms`) and the structural ones
(`transforms`: Power, Abs, Softplus, Independent, Reshape, Cat, Stack, CumulativeDistribution,
the identity): forward, inverse and log|det J| against PyTorch's in float64, the
log-determinants against the Jacobian by finite differences, gradients against finite
differences, domains, codomains, signs, shapes and the cache."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.distributions as D
from tests.conftest import check_grad, numeric_grad
from tests.distributions.reference import needs_torch

try:
    import torch
    import torch.distributions as TD
    import torch.distributions.transforms as TT
except ImportError:
    torch = TD = TT = None

R = np.random.default_rng(11)


def _transforms(m):
    return m if m is D else TT


def _normal(m, *shape):
    return (tg if m is D else torch).tensor(R.standard_normal(shape))


# (id, the transform made with a module's classes, an input x in its domain)
CASES = [
    ("power", lambda m: _transforms(m).PowerTransform(m_tensor(m, [0.5, 2.0, -1.5])),
     R.uniform(0.3, 3, (2, 3))),
    ("softplus", lambda m: _transforms(m).SoftplusTransform(), R.standard_normal((2, 3)) * 5),
    ("stick_breaking", lambda m: _transforms(m).StickBreakingTransform(),
     R.standard_normal((2, 3))),
    ("corr_cholesky", lambda m: _transforms(m).CorrCholeskyTransform(),
     R.standard_normal((2, 6))),
    ("independent", lambda m: _transforms(m).IndependentTransform(
        _transforms(m).SigmoidTransform(), 1), R.standard_normal((2, 3))),
    ("reshape", lambda m: _transforms(m).ReshapeTransform((2, 3), (3, 2)),
     R.standard_normal((4, 2, 3))),
    ("cat", lambda m: _transforms(m).CatTransform(
        [_transforms(m).ExpTransform(), _transforms(m).AffineTransform(1.0, 3.0)], -1, [2, 1]),
     R.standard_normal((2, 3))),
    ("stack", lambda m: _transforms(m).StackTransform(
        [_transforms(m).ExpTransform(), _transforms(m).TanhTransform()], 0),
     R.standard_normal((2, 3))),
    ("compose_event", lambda m: _transforms(m).ComposeTransform(
        [_transforms(m).AffineTransform(0.5, 2.0), _transforms(m).StickBreakingTransform()]),
     R.standard_normal((2, 3))),
    ("cdf", lambda m: _transforms(m).CumulativeDistributionTransform(
        (D if m is D else TD).Laplace(m_tensor(m, [0.0, 1.0, -1.0]), 2.0)),
     R.standard_normal((2, 3))),
    ("inverse_exp", lambda m: _transforms(m).ExpTransform().inv, R.uniform(0.2, 3, (2, 3))),
]  # fmt: skip
IDS = [c[0] for c in CASES]


def m_tensor(m, values):
    return (tg if m is D else torch).tensor(np.asarray(values, np.float64))


@needs_torch
@pytest.mark.parametrize("name, make, x", CASES, ids=IDS)
def test_forward_inverse_and_log_det_match_torch(name, make, x):
    ours, theirs = make(D), make(TD)
    y, ty = ours(tg.tensor(x)), theirs(torch.tensor(x))
    np.testing.assert_allclose(y.numpy(), ty.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ours.inv(tg.tensor(y.numpy())).numpy(),
                               theirs.inv(ty.clone()).numpy(), rtol=1e-8, atol=1e-10)  # fmt: skip
    got = ours.log_abs_det_jacobian(tg.tensor(x), y).numpy()
    want = theirs.log_abs_det_jacobian(torch.tensor(x), ty).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert ours.bijective == theirs.bijective
    for c in ("domain", "codomain"):
        assert getattr(ours, c).event_dim == getattr(theirs, c).event_dim, c
        assert type(getattr(ours, c)).__name__ == type(getattr(theirs, c)).__name__, c
    assert ours.forward_shape(x.shape) == tuple(theirs.forward_shape(torch.Size(x.shape)))
    assert ours.inverse_shape(y.shape) == tuple(theirs.inverse_shape(ty.shape))


@pytest.mark.parametrize("name, make, x", CASES, ids=IDS)
def test_gradients_match_finite_differences(name, make, x):
    t = make(D)
    check_grad(lambda a: t(a), x)
    if name != "reshape":  # its log-determinant is a constant 0
        check_grad(lambda a: t.log_abs_det_jacobian(a, t(a)), x)


@pytest.mark.parametrize("name", ["softplus", "power", "stick_breaking", "corr_cholesky", "cdf"])
def test_the_log_det_is_the_jacobians(name):
    """log|det dy/dx| of one event against the finite-difference Jacobian (for the maps onto
    the simplex and correlation factors: of the free coordinates, the first K-1 entries and
    the strict lower triangle)."""
    _, make, x = next(c for c in CASES if c[0] == name)
    t, x = make(D), x[0]

    def free(y):
        if name == "stick_breaking":
            return y[:-1]
        if name == "corr_cholesky":
            return y[np.tril_indices(y.shape[-1], -1)]
        return y

    J = np.stack([numeric_grad(lambda a, i=i: float(free(t(tg.tensor(a)).numpy())[i]), x)
                  for i in range(len(free(t(tg.tensor(x)).numpy())))])  # fmt: skip
    log_det = np.linalg.slogdet(J)[1] if J.shape[0] == J.shape[1] and t.domain.event_dim else None
    got = t.log_abs_det_jacobian(tg.tensor(x), t(tg.tensor(x))).numpy()
    if log_det is None:  # elementwise: the diagonal
        np.testing.assert_allclose(got, np.log(np.abs(np.diag(J))), rtol=1e-6)
    else:
        np.testing.assert_allclose(got, log_det, rtol=1e-6)


def test_lower_cholesky_and_positive_definite_transforms_match_torch():
    x = R.standard_normal((2, 3, 3))
    for name in ("LowerCholeskyTransform", "PositiveDefiniteTransform", "SoftmaxTransform"):
        ours, theirs = getattr(D, name)(), getattr(TT, name)() if TT else None
        y = ours(tg.tensor(x))
        if theirs is not None:
            np.testing.assert_allclose(y.numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-12)
        back = ours(ours.inv(y)).numpy()
        np.testing.assert_allclose(back, y.numpy(), rtol=1e-10)  # a pseudo-inverse at least
        assert not ours.bijective
    assert bool(D.constraints.positive_definite.check(D.PositiveDefiniteTransform()(
        tg.tensor(x))).numpy().all())  # fmt: skip


def test_signs_caches_equality_and_the_identity():
    assert D.ExpTransform().sign == 1 and D.AffineTransform(0.0, -2.0).sign == -1
    np.testing.assert_array_equal(D.PowerTransform(tg.tensor([2.0, -1.0])).sign.numpy(), [1, -1])
    assert D.ComposeTransform([D.ExpTransform(), D.AffineTransform(0.0, -1.0)]).sign == -1
    assert D.ExpTransform() == D.ExpTransform() and D.ExpTransform() != D.TanhTransform()
    assert D.ExpTransform().inv == D.ExpTransform().inv
    assert D.AffineTransform(1.0, 2.0) == D.AffineTransform(1.0, 2.0)
    t = D.ExpTransform()
    assert t.inv.inv is t and t.with_cache(1)._cache_size == 1 and t.with_cache(0) is t
    x = tg.tensor([0.5, 1.0])
    assert D.identity_transform(x) is x and D.identity_transform.inv(x) is x
    assert D.identity_transform.log_abs_det_jacobian(x, x).numpy().tolist() == [0.0, 0.0]
    s = D.SoftplusTransform(cache_size=1)
    y = s(x)
    assert s.inv(y) is x and s(x) is y
    c = D.ComposeTransform([D.ExpTransform(), D.SigmoidTransform()], cache_size=1)
    assert all(p._cache_size == 1 for p in c.parts) and c.inv.inv is c
    with pytest.raises(ValueError, match="ReshapeTransform: in_shape .* different numbers"):
        D.ReshapeTransform((2, 3), (4,))
    with pytest.raises(ValueError, match="CatTransform: size 4 along dim -1 should be 3"):
        D.CatTransform([D.ExpTransform(), D.ExpTransform()], -1, [2, 1])(tg.zeros((2, 4)))


@needs_torch
def test_a_transformed_distribution_through_the_new_transforms_matches_torch():
    """The base is made Independent where the transform's domain needs it, as PyTorch's."""
    loc, scale = R.standard_normal((2, 3)), R.uniform(0.5, 1.5, (2, 3))
    value = R.dirichlet(np.ones(4), (5, 2))
    ours = D.TransformedDistribution(D.Normal(tg.tensor(loc), tg.tensor(scale)),
                                     D.StickBreakingTransform())  # fmt: skip
    theirs = TD.TransformedDistribution(TD.Normal(torch.tensor(loc), torch.tensor(scale)),
                                        TT.StickBreakingTransform())  # fmt: skip
    assert (ours.batch_shape, ours.event_shape) == (theirs.batch_shape, theirs.event_shape)
    want = theirs.log_prob(torch.tensor(value)).numpy()
    np.testing.assert_allclose(ours.log_prob(tg.tensor(value)).numpy(), want, rtol=1e-10)
    assert type(ours.support).__name__ == "_Simplex"
    neg = D.TransformedDistribution(D.Normal(tg.tensor(loc), 1.0), D.AffineTransform(0.0, -2.0))
    tneg = TD.TransformedDistribution(TD.Normal(torch.tensor(loc), 1.0),
                                      TT.AffineTransform(0.0, -2.0))  # fmt: skip
    v = R.standard_normal((4, 2, 3))
    np.testing.assert_allclose(neg.cdf(tg.tensor(v)).numpy(), tneg.cdf(torch.tensor(v)).numpy(),
                               rtol=1e-12)  # fmt: skip
    u = np.full((1, 2, 3), 0.3)
    np.testing.assert_allclose(neg.icdf(tg.tensor(u)).numpy(), tneg.icdf(torch.tensor(u)).numpy(),
                               rtol=1e-10)  # fmt: skip
