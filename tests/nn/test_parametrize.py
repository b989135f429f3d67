"""Parametrizations: register_parametrization (chained, assigned through right_inverse,
removed), and weight_norm and spectral_norm on them. state_dict keys, values, gradients and the
power iteration's buffers against PyTorch in float64 (where installed), gradients against
finite differences, traced training steps against eager ones."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as tgt
from tests.conftest import check_grad
from tests.nn.test_layers_resampling import needs_torch, same_module, torch
from tests.nn.test_utils import Normed, kernels_in_the_plan_only, train_both
from tracegrad import nn
from tracegrad.nn import parametrize as P


class Symmetric(nn.Module):
    def forward(self, x):
        return tg.triu(x) + tg.transpose(tg.triu(x, 1), 0, 1)


class Scaled(nn.Module):
    def forward(self, x):
        return x * 2.0

    def right_inverse(self, x):
        return x / 2.0


def test_a_parametrized_tensor_is_computed_at_each_read(rng):
    m = nn.Linear(3, 3).double()
    original = m.weight
    P.register_parametrization(m, "weight", Symmetric())
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight")
    assert not P.is_parametrized(m, "bias") and not P.is_parametrized(nn.Linear(2, 2))
    assert m.parametrizations.weight.original is original  # optimizers keep their tensor
    assert type(m).__name__ == "ParametrizedLinear" and isinstance(m, nn.Linear)
    assert type(nn.Linear(2, 2)) is nn.Linear  # other instances untouched
    w = m.weight.numpy()
    np.testing.assert_array_equal(w, w.T)
    assert [k for k, _ in m.named_parameters()] == ["bias", "parametrizations.weight.original"]
    x = tg.tensor(rng.standard_normal((2, 3)))
    m(x).sum().backward()
    g = original.grad.numpy()  # the gradient reaches the original through the parametrization
    np.testing.assert_allclose(np.tril(g, -1), 0.0)
    with P.cached():
        np.testing.assert_array_equal(m.weight.numpy(), w)


def test_chained_parametrizations_assignment_and_removal(rng):
    m = nn.Linear(2, 2).double()
    P.register_parametrization(m, "weight", Scaled())
    P.register_parametrization(m, "weight", Scaled())
    original = m.parametrizations.weight.original
    target = rng.standard_normal((2, 2))
    m.weight = tg.tensor(target)  # through both right_inverses
    np.testing.assert_allclose(original.numpy(), target / 4.0)
    np.testing.assert_allclose(m.weight.numpy(), target)
    P.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and "parametrizations" not in dict(m.named_children())
    assert m.weight is original  # the same parameter, holding the parametrized value
    np.testing.assert_allclose(m.weight.numpy(), target)
    assert list(m.state_dict()) == ["bias", "weight"]
    P.register_parametrization(m, "weight", Scaled())
    P.remove_parametrizations(m, "weight", leave_parametrized=False)
    np.testing.assert_allclose(m.weight.numpy(), target / 2.0)
    with pytest.raises(ValueError, match="no parametrization"):
        P.remove_parametrizations(m, "weight")
    with pytest.raises(ValueError, match="no parameter or buffer"):
        P.register_parametrization(m, "nothing", Scaled())


@needs_torch
def test_a_custom_parametrization_matches_torch(rng):
    class TorchSymmetric(torch.nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).transpose(0, 1)

    ours, theirs = nn.Linear(3, 3), torch.nn.Linear(3, 3)
    P.register_parametrization(ours, "weight", Symmetric())
    torch.nn.utils.parametrize.register_parametrization(theirs, "weight", TorchSymmetric())
    same_module(ours, theirs, rng.standard_normal((4, 3)))


# --- weight_norm ------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_names_values_and_finite_differences(rng, dim):
    m = P.weight_norm(nn.Conv2d(2, 3, 3).double(), dim=dim)
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original0",
                                    "parametrizations.weight.original1"]  # fmt: skip
    g, v = m.parametrizations.weight.original0, m.parametrizations.weight.original1
    np.testing.assert_allclose(m.weight.numpy(), v.numpy())  # g starts as v's norm
    assert g.shape == {0: (3, 1, 1, 1), 1: (1, 2, 1, 1), None: ()}[dim]
    check_grad(lambda g, v: m.parametrizations.weight[0](g, v), g.numpy() * 1.5, v.numpy())


@needs_torch
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_matches_torch(rng, dim):
    ours = P.weight_norm(nn.Conv2d(2, 3, 3), dim=dim)
    theirs = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv2d(2, 3, 3), dim=dim)
    with torch.no_grad():
        theirs.parametrizations.weight.original0.mul_(1.5)
    same_module(ours, theirs, rng.standard_normal((2, 2, 5, 6)))
    P.remove_parametrizations(ours, "weight")
    torch.nn.utils.parametrize.remove_parametrizations(theirs, "weight")
    assert list(ours.state_dict()) == list(theirs.state_dict())
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-12)


# --- spectral_norm ----------------------------------------------------------------------------


def test_spectral_norm_names_convergence_and_finite_differences(rng):
    nn.manual_seed(0)
    m = P.spectral_norm(nn.Linear(5, 4).double())
    assert list(m.state_dict()) == ["bias", "parametrizations.weight.original",
                                    "parametrizations.weight.0._u",
                                    "parametrizations.weight.0._v"]  # fmt: skip
    w = m.parametrizations.weight.original.numpy()
    for _ in range(50):  # each read in training is one more power iteration
        m.weight  # noqa: B018
    np.testing.assert_allclose(np.linalg.svd(m.weight.numpy(), compute_uv=False)[0], 1.0,
                               rtol=1e-8)  # fmt: skip
    sn = m.parametrizations.weight[0]
    u = sn._u.numpy().copy()
    m.eval()
    m.weight  # noqa: B018 (a read computes it)
    np.testing.assert_array_equal(sn._u.numpy(), u)  # no power iteration in eval
    check_grad(lambda w: sn(w), w)
    P.remove_parametrizations(m, "weight")
    assert list(m.state_dict()) == ["bias", "weight"]


@needs_torch
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.nn.Linear(4, 3),
        lambda lib: lib.nn.Conv2d(2, 3, 3),
        lambda lib: lib.nn.ConvTranspose2d(2, 3, 3),  # dim 1
    ],
)
def test_spectral_norm_matches_torch_with_its_buffers(rng, make):
    ours = P.spectral_norm(make(tg), n_power_iterations=2)
    theirs = torch.nn.utils.parametrizations.spectral_norm(make(torch), n_power_iterations=2)
    x = rng.standard_normal((2, 4) if isinstance(theirs, torch.nn.Linear) else (2, 2, 5, 5))
    same_module(ours, theirs, x)  # training: two power iterations each
    sn, tsn = ours.parametrizations.weight[0], theirs.parametrizations.weight[0]
    for k in ("_u", "_v"):
        np.testing.assert_allclose(getattr(sn, k).numpy(), getattr(tsn, k).numpy(), atol=1e-12,
                                   err_msg=k)  # fmt: skip
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-12)


# --- orthogonal -------------------------------------------------------------------------------


def test_householder_product_of_geqrf_is_q_and_differentiates(rng):
    """LAPACK's QR in Householder form and back: the Q NumPy's QR gives; the product's gradient
    in the reflectors and their scales against finite differences."""
    a = rng.standard_normal((2, 5, 3))
    h, tau = tg.geqrf(a)
    np.testing.assert_allclose(tg.linalg.householder_product(h, tau).numpy(),
                               np.linalg.qr(a)[0], atol=1e-14)  # fmt: skip
    np.testing.assert_allclose(np.triu(h.numpy()[:, :3]), np.linalg.qr(a)[1], atol=1e-14)
    check_grad(tg.linalg.householder_product, rng.standard_normal((4, 3)), rng.random(2))


ORTHOGONAL = [((4, 4), None, True), ((6, 3), None, True), ((6, 3), None, False),
              ((3, 6), None, True), ((4, 4), "cayley", True), ((6, 3), "matrix_exp", True),
              ((5, 3), "householder", False)]  # fmt: skip
# PyTorch 2.13's losses for `_orthogonal_losses` (float64), one list per case above
PYTORCH_LOSSES = [[4.742670569636, 3.252476508037, 2.839753787534],
                  [8.45255371162, 2.812401731191, 1.88310573322],
                  [8.45255371162, 3.165507195912, 2.274420481974],
                  [3.301655196118, 0.608768701889, -0.415664030608],
                  [4.742670569636, 3.253482642822, 2.843196294083],
                  [8.45255371162, 3.463367454775, 2.286343372729],
                  [3.697986303034, 2.565994550297, 2.328006660358]]  # fmt: skip


def _orthogonal_losses(lib, shape, orthogonal_map, trivialization, compile=lambda f: f):
    """Three SGD steps of an orthogonal Linear from fixed weights: losses and the weight."""
    lin = lib.nn.Linear(shape[1], shape[0]).double()
    rng = np.random.default_rng(1)
    with lib.no_grad():
        lin.weight.copy_(lib.tensor(rng.standard_normal(shape)))
        lin.bias.copy_(lib.tensor(rng.standard_normal(shape[0])))
    lib.manual_seed(0)  # a wide or tall weight is completed with random columns
    lib.nn.utils.parametrizations.orthogonal(lin, orthogonal_map=orthogonal_map,
                                             use_trivialization=trivialization)  # fmt: skip
    opt = lib.optim.SGD(lin.parameters(), lr=0.1)
    x = lib.tensor(np.linspace(-1, 1, 2 * shape[1]).reshape(2, shape[1]))

    def step():
        opt.zero_grad()
        loss = (lin(x) ** 2).sum() + lin.weight[0, 0]
        loss.backward()
        opt.step()
        return loss

    step = compile(step)
    return [step().item() for _ in range(3)], lin.weight.detach().numpy()


@pytest.mark.parametrize("case", range(len(ORTHOGONAL)))
def test_orthogonal_keeps_the_weight_orthogonal_and_trains_as_pytorch(case):
    shape, orthogonal_map, trivialization = ORTHOGONAL[case]
    losses, w = _orthogonal_losses(tgt, shape, orthogonal_map, trivialization)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-14)
    np.testing.assert_allclose(losses, PYTORCH_LOSSES[case], rtol=1e-11)


def test_orthogonal_starts_from_the_q_of_the_weight_and_differentiates(rng):
    """The initial weight: an orthogonal one kept, another the Q of its QR with R's diagonal
    positive (NumPy's QR); the map's gradient in `original` against finite differences."""
    lin = nn.Linear(4, 4).double()
    w = rng.standard_normal((4, 4))
    lin.weight.data = tg.tensor(w)
    P.orthogonal(lin)
    q, r = np.linalg.qr(w)
    np.testing.assert_allclose(lin.weight.numpy(), q * np.sign(np.diag(r)), atol=1e-14)
    ortho = nn.Linear(4, 4).double()
    ortho.weight.data = tg.tensor(q)
    np.testing.assert_allclose(P.orthogonal(ortho).weight.numpy(), q, atol=1e-15)
    for orthogonal_map in ("matrix_exp", "cayley", "householder"):
        tall = P.orthogonal(nn.Linear(3, 5).double(), orthogonal_map=orthogonal_map)
        check_grad(tall.parametrizations.weight[0], 0.1 * rng.standard_normal((5, 3)))


@pytest.mark.parametrize("case", [1, 6])
def test_traced_step_with_orthogonal_matches_eager(case):
    eager = _orthogonal_losses(tgt, *ORTHOGONAL[case])
    traced = _orthogonal_losses(tgt, *ORTHOGONAL[case],
                                compile=lambda f: tgt.compile(f, backend="numpy"))  # fmt: skip
    np.testing.assert_allclose(traced[0], eager[0], rtol=1e-12)
    np.testing.assert_allclose(traced[1], eager[1], atol=1e-13)


# --- traced training steps --------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_step_with_weight_norm_matches_eager(rng, backend, monkeypatch):
    kernels_in_the_plan_only(monkeypatch)
    train_both(lambda: Normed(P.weight_norm), rng, backend)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_step_with_spectral_norm_updates_its_buffers_as_eager(rng, backend, monkeypatch):
    kernels_in_the_plan_only(monkeypatch)
    nn.manual_seed(0)
    before = Normed(P.spectral_norm).double().fc.parametrizations.weight[0]._u.numpy().copy()
    eager, traced = train_both(lambda: Normed(P.spectral_norm), rng, backend)
    assert not np.allclose(traced.fc.parametrizations.weight[0]._u.numpy(), before)


class FromRow(nn.Module):
    """A (3, 3) weight made of one row repeated: its right_inverse stores one row."""

    def forward(self, row):
        return tg.stack([row, row, row])

    def right_inverse(self, weight):
        return weight[0]


def test_a_right_inverse_that_changes_the_shape_needs_unsafe():
    m = nn.Linear(3, 3).double()
    with pytest.raises(ValueError, match="shape and dtype"):
        P.register_parametrization(m, "weight", FromRow())
    first = m.weight.numpy()[0].copy()
    P.register_parametrization(m, "weight", FromRow(), unsafe=True)
    assert m.parametrizations.weight.original.shape == (3,)
    np.testing.assert_array_equal(m.weight.numpy(), np.stack([first] * 3))
