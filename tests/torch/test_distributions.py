"""`torch.distributions`: tracegrad's distributions under PyTorch's module paths (the package,
its submodules by attribute and by import, and under `import torch` as `python -m tracegrad run`
makes it), the error for a distribution tracegrad does not provide, and pytorch/examples'
REINFORCE written against `torch` compiled with torch.compile against its eager run."""

from __future__ import annotations

import importlib
import types

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.torch._support import imported_as_torch

SUBMODULES = {
    "bernoulli": "Bernoulli", "categorical": "Categorical", "cauchy": "Cauchy",
    "distribution": "Distribution", "exponential": "Exponential", "independent": "Independent",
    "kl": "kl_divergence", "laplace": "Laplace", "log_normal": "LogNormal",
    "multivariate_normal": "MultivariateNormal", "normal": "Normal",
    "one_hot_categorical": "OneHotCategorical", "relaxed_bernoulli": "RelaxedBernoulli",
    "relaxed_categorical": "RelaxedOneHotCategorical", "uniform": "Uniform",
    "constraints": "positive", "transforms": "TanhTransform",
    "transformed_distribution": "TransformedDistribution",
}  # fmt: skip


@pytest.mark.parametrize("name, member", sorted(SUBMODULES.items()))
def test_the_submodules_are_reached_by_attribute_and_by_import(name, member):
    module = importlib.import_module(f"tracegrad.torch.distributions.{name}")
    assert isinstance(module, types.ModuleType)
    assert (
        torch.distributions.__dict__[name] is module
        and getattr(torch.distributions, name) is module
    )
    assert getattr(module, member) is getattr(
        tg.distributions if name != "constraints" else tg.distributions.constraints, member
    )


def test_the_package_is_tracegrads_distributions():
    assert torch.distributions.Normal is tg.distributions.Normal
    assert torch.distributions.kl_divergence is tg.distributions.kl_divergence
    assert torch.distributions.kl.register_kl is tg.distributions.register_kl
    assert torch.distributions.constraints.simplex is tg.distributions.constraints.simplex
    utils = torch.distributions.utils
    a, b = utils.broadcast_all(tg.zeros(3), 1.0)
    assert b.shape == (3,) and b.dtype == np.float32
    p = tg.tensor([0.25, 0.75])
    np.testing.assert_allclose(
        utils.logits_to_probs(utils.probs_to_logits(p)).numpy(), [0.25, 0.75]
    )
    assert float(utils.clamp_probs(tg.tensor(0.0))) > 0
    assert all(hasattr(torch.distributions, n) for n in tg.distributions.__all__)
    assert (
        torch.distributions.generalized_pareto.GeneralizedPareto
        is tg.distributions.GeneralizedPareto
    )
    with pytest.raises(AttributeError, match="torch.distributions.normal.Foo is not provided"):
        torch.distributions.normal.Foo  # noqa: B018


def test_import_torch_gives_them(tmp_path):
    with imported_as_torch():
        import torch as t
        from torch.distributions import Categorical, Normal
        from torch.distributions.categorical import Categorical as C2
        from torch.distributions.kl import kl_divergence

        assert t.distributions is torch.distributions and C2 is Categorical
        assert Normal is tg.distributions.Normal and kl_divergence is tg.distributions.kl_divergence


def _reinforce(compiled, steps=3):
    """pytorch/examples' reinforce.py's update, batched: probabilities from the policy, a
    Categorical, the sampled actions' log-probabilities times the returns."""
    import tracegrad.torch.nn.functional as F
    from tracegrad.torch.distributions import Categorical

    torch.manual_seed(543)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    state = torch.tensor(np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32))

    def update(state):
        probs = F.softmax(policy(state), dim=1)
        m = Categorical(probs)
        action = m.sample()
        returns = (action.float() - 0.5) * state[:, 0]
        returns = (returns - returns.mean()) / (returns.std() + 1e-6)
        loss = (-m.log_prob(action) * returns).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss, action

    if compiled:
        update = torch.compile(update)
    out = [update(state) for _ in range(steps)]
    return [float(loss) for loss, _ in out], [a.numpy() for _, a in out]


def test_torch_compile_of_a_reinforce_update_matches_eager():
    want, want_actions = _reinforce(False)
    got, actions = _reinforce(True)
    assert all(np.array_equal(a, b) for a, b in zip(actions, want_actions, strict=True))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_files_hold_what_pytorchs_import_at_their_top():
    """`from torch.distributions.multivariate_normal import Distribution, _batch_mahalanobis`
    (botorch, pyro): the names PyTorch's files import, and its private helpers code reuses."""
    from tracegrad.torch.distributions.multivariate_normal import (
        Distribution,
        _batch_mahalanobis,
        _batch_mv,
        _precision_to_scale_tril,
    )
    from tracegrad.torch.distributions.normal import broadcast_all, constraints

    assert Distribution is torch.distributions.Distribution
    assert constraints is torch.distributions.constraints and callable(broadcast_all)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3))
    precision = a @ a.T + 3 * np.eye(3)
    L = np.linalg.cholesky(np.linalg.inv(precision))
    got = _precision_to_scale_tril(torch.tensor(precision)).numpy()
    np.testing.assert_allclose(got, L, rtol=1e-10, atol=1e-12)
    x = rng.standard_normal((2, 3))
    want = np.einsum("bi,ij,bj->b", x, precision, x)  # (L L^T)^-1 is the precision
    got = _batch_mahalanobis(torch.tensor(L), torch.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(_batch_mv(torch.tensor(a), torch.tensor(x)).numpy(), x @ a.T)
    with pytest.raises(AttributeError, match="normal._nothing is not provided"):
        _ = torch.distributions.normal._nothing
