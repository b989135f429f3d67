"""nn.utils beyond clipping: parameters as one vector, pad_sequence, and the hook-based
weight_norm and spectral_norm. Values, gradients, state_dict keys and the power iteration's
buffers against PyTorch in float64 (where installed), gradients against finite differences, and
traced training steps against eager ones (the buffers u and v too)."""

from __future__ import annotations

import types

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import assert_traced_training_matches_eager, check_grad
from tests.nn.test_layers_resampling import both, needs_torch, same_module, torch
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.frontend import tensor
from tracegrad.nn import functional as F
from tracegrad.nn import parametrize, utils

# --- parameters as a vector -----------------------------------------------------------------


def test_parameters_to_vector_and_back(rng):
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1, bias=False)).double()
    vec = utils.parameters_to_vector(model.parameters())
    assert vec.shape == (6 + 2 + 2,)
    np.testing.assert_array_equal(
        vec.numpy(), np.concatenate([p.numpy().ravel() for p in model.parameters()])
    )
    new = rng.standard_normal(vec.shape)
    params = list(model.parameters())
    utils.vector_to_parameters(tg.tensor(new), model.parameters())
    assert [p for p in model.parameters()] == params  # the same tensors, new values
    np.testing.assert_array_equal(utils.parameters_to_vector(model.parameters()).numpy(), new)
    with pytest.raises(TypeError, match="1-d"):
        utils.vector_to_parameters(tg.tensor(new.reshape(2, 5)), model.parameters())


def test_parameters_to_vector_is_differentiable(rng):
    check_grad(lambda a, b: utils.parameters_to_vector([a, b]) ** 2,
               rng.standard_normal((2, 3)), rng.standard_normal(4))  # fmt: skip


@needs_torch
def test_parameters_to_vector_matches_torch(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(4)
    both(lambda x, y: utils.parameters_to_vector([x, y]),
         lambda x, y: torch.nn.utils.parameters_to_vector([x, y]), a, b)  # fmt: skip


# --- pad_sequence ---------------------------------------------------------------------------

PADDINGS = [(False, 0.0, "right"), (True, -1.5, "right"), (True, 2.0, "left"),
            (False, 0.0, "left")]  # fmt: skip


@pytest.mark.parametrize("batch_first, value, side", PADDINGS)
def test_pad_sequence_pads_and_stacks(rng, batch_first, value, side):
    seqs = [rng.standard_normal((n, 2)) for n in (3, 1, 4)]
    out = utils.pad_sequence([tg.tensor(s) for s in seqs], batch_first, value, side).numpy()
    assert out.shape == ((3, 4, 2) if batch_first else (4, 3, 2))
    out = out if batch_first else out.transpose(1, 0, 2)
    for row, s in zip(out, seqs, strict=True):
        pad = np.full((4 - len(s), 2), value)
        np.testing.assert_array_equal(row, np.concatenate([s, pad] if side == "right" else
                                                          [pad, s]))  # fmt: skip
    check_grad(lambda *xs: utils.pad_sequence(xs, batch_first, value, side), *seqs)


@needs_torch
@pytest.mark.parametrize("batch_first, value, side", PADDINGS)
def test_pad_sequence_matches_torch(rng, batch_first, value, side):
    seqs = [rng.standard_normal(n) for n in (2, 5, 3)]
    theirs = torch.nn.utils.rnn.pad_sequence
    both(lambda *xs: utils.pad_sequence(xs, batch_first, value, side),
         lambda *ts: theirs(ts, batch_first, value, side), *seqs)  # fmt: skip


@pytest.mark.parametrize("batch_first", [True, False])
def test_unpad_sequence_undoes_pad_sequence(rng, batch_first):
    """PyTorch's unpad_sequence (it was missing), lengths a tensor or a list."""
    seqs = [rng.standard_normal((n, 2)) for n in (3, 1, 4)]
    padded = utils.pad_sequence([tg.tensor(s) for s in seqs], batch_first)
    for lengths in (tg.tensor([3, 1, 4]), [3, 1, 4]):
        out = utils.unpad_sequence(padded, lengths, batch_first)
        for got, s in zip(out, seqs, strict=True):
            np.testing.assert_array_equal(got.numpy(), s)
    check_grad(lambda x: tg.cat(utils.unpad_sequence(x, [3, 1, 4], True)), padded.numpy())


def test_clip_grad_norm_takes_the_order_as_a_string():
    """norm_type="inf" (PyTorch converts it with float()); it raised a TypeError."""
    p = nn.Parameter(tg.tensor([3.0, -4.0]))
    p.grad = tg.tensor([3.0, -4.0])
    assert utils.clip_grad_norm_([p], 1.0, norm_type="inf").item() == 4.0
    np.testing.assert_allclose(p.grad.numpy(), [0.75, -1.0], rtol=1e-6)


def test_pad_sequence_refuses_an_unknown_side():
    with pytest.raises(ValueError, match="padding_side"):
        utils.pad_sequence([tg.tensor(np.ones(2))], padding_side="middle")


# --- weight_norm --------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_gradients_match_finite_differences(rng, dim):
    fn = utils.WeightNorm("weight", -1 if dim is None else dim)
    g_shape = {0: (3, 1, 1), 1: (1, 2, 1), None: ()}[dim]

    def weight(g, v):
        return fn.compute_weight(types.SimpleNamespace(weight_g=g, weight_v=v))

    check_grad(weight, rng.uniform(0.5, 2, g_shape), rng.standard_normal((3, 2, 4)))


def test_weight_norm_names_and_removal(rng):
    m = utils.weight_norm(nn.Conv2d(2, 3, 3).double())
    assert list(m.state_dict()) == ["bias", "weight_g", "weight_v"]
    assert m.weight_g.shape == (3, 1, 1, 1)
    x = tg.tensor(rng.standard_normal((1, 2, 5, 5)))
    with tg.no_grad():
        m.weight_g.mul_(2.0)
    y = m(x).numpy()
    utils.remove_weight_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"] and m._forward_pre_hooks == {}
    np.testing.assert_allclose(m(x).numpy(), y)
    with pytest.raises(ValueError, match="weight_norm"):
        utils.remove_weight_norm(m)


@needs_torch
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_matches_torch(rng, dim):
    ours = utils.weight_norm(nn.Conv2d(2, 3, 3), dim=dim)
    theirs = torch.nn.utils.weight_norm(torch.nn.Conv2d(2, 3, 3), dim=dim)
    same_module(ours, theirs, rng.standard_normal((2, 2, 5, 6)))


# --- spectral_norm ------------------------------------------------------------------------------


def test_spectral_norm_gradient_matches_finite_differences(rng):
    fn = utils.SpectralNorm("weight", 1, 0, 1e-12)
    u, v = (tg.tensor(a / np.linalg.norm(a)) for a in rng.standard_normal((2, 3)))

    def weight(w):
        module = types.SimpleNamespace(weight_orig=w, weight_u=u, weight_v=v)
        return fn.compute_weight(module, do_power_iteration=False)

    check_grad(weight, rng.standard_normal((3, 3)))


def test_spectral_norm_converges_to_the_largest_singular_value(rng):
    nn.manual_seed(0)
    m = utils.spectral_norm(nn.Linear(5, 4).double(), n_power_iterations=3)
    x = tg.tensor(rng.standard_normal((2, 5)))
    for _ in range(20):
        m(x)
    sigma = np.linalg.svd(m.weight_orig.numpy(), compute_uv=False)[0]
    np.testing.assert_allclose(m.weight.numpy(), m.weight_orig.numpy() / sigma, rtol=1e-8)
    assert list(m.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    u = m.weight_u.numpy().copy()
    m.eval()
    m(x)
    np.testing.assert_array_equal(m.weight_u.numpy(), u)  # no power iteration in eval
    utils.remove_spectral_norm(m)
    assert list(m.state_dict()) == ["bias", "weight"]
    np.testing.assert_allclose(np.linalg.svd(m.weight.numpy(), compute_uv=False)[0], 1.0)


@pytest.mark.parametrize("norm", [utils.spectral_norm, parametrize.spectral_norm])
def test_a_spectral_normed_module_called_twice_before_one_backward(rng, norm):
    """SNGAN's D(real), D(fake), one backward: the second call's power iteration writes the
    buffers the first call's backward reads; PyTorch copies them, and so does tracegrad."""
    nn.manual_seed(0)
    m = norm(nn.Linear(6, 1).double())
    a, b = tg.tensor(rng.standard_normal((2, 6))), tg.tensor(rng.standard_normal((2, 6)))
    (m(a).mean() - m(b).mean()).backward()
    weight = next(p for p in m.parameters() if p.ndim == 2)
    assert weight.grad is not None and np.isfinite(weight.grad.numpy()).all()


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
    ours = utils.spectral_norm(make(tg), n_power_iterations=2)
    theirs = torch.nn.utils.spectral_norm(make(torch), n_power_iterations=2)
    x = rng.standard_normal((2, 4) if isinstance(theirs, torch.nn.Linear) else (2, 2, 5, 5))
    same_module(ours, theirs, x)  # training: one power iteration each
    for k in ("weight_u", "weight_v"):
        np.testing.assert_allclose(getattr(ours, k).numpy(), getattr(theirs, k).numpy(),
                                   atol=1e-12, err_msg=k)  # fmt: skip
    ours.eval(), theirs.eval()
    np.testing.assert_allclose(ours(tg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               atol=1e-12)  # fmt: skip
    utils.remove_spectral_norm(ours)
    torch.nn.utils.remove_spectral_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    np.testing.assert_allclose(ours.weight.numpy(), theirs.weight.detach().numpy(), atol=1e-12)


# --- traced training steps ----------------------------------------------------------------------


class Normed(nn.Module):
    def __init__(self, normalize):
        super().__init__()
        self.conv = normalize(nn.Conv2d(1, 4, 3))
        self.fc = normalize(nn.Linear(4 * 3 * 3, 3))

    def forward(self, x):
        return self.fc(tg.reshape(F.relu(self.conv(x)), (x.shape[0], -1)))


def kernels_in_the_plan_only(monkeypatch) -> None:
    """Kernels at every size in a Numba plan (KERNEL_MIN 0), none in eager ops: those take a
    kernel from whenever its background loading ends, and a power iteration (spectral norm's)
    magnifies the roundings of the steps that did past float64's tolerance in some runs."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    monkeypatch.setattr(tensor, "EAGER_KERNELS", {})
    monkeypatch.setattr(optim, "EAGER_GROUPS", [])


def train_both(make, rng, backend, steps=3):
    """The eager and the traced training step of two copies of one model; the models after."""
    batches = [(rng.standard_normal((4, 1, 5, 5)), rng.integers(0, 3, 4)) for _ in range(steps)]
    _, eager, traced = assert_traced_training_matches_eager(lambda: make().double(), batches,
                                                            backend)  # fmt: skip
    return eager, traced


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_step_with_weight_norm_matches_eager(rng, backend, monkeypatch):
    kernels_in_the_plan_only(monkeypatch)
    train_both(lambda: Normed(utils.weight_norm), rng, backend)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_step_with_spectral_norm_updates_its_buffers_as_eager(rng, backend, monkeypatch):
    kernels_in_the_plan_only(monkeypatch)
    nn.manual_seed(0)
    before = Normed(utils.spectral_norm).double().fc.weight_u.numpy().copy()
    eager, traced = train_both(lambda: Normed(utils.spectral_norm), rng, backend)
    assert not np.allclose(traced.fc.weight_u.numpy(), before)  # written at every call


def test_get_total_norm_and_clip_grads_with_norm_are_clip_grad_norm_in_two():
    """PyTorch 2.6's halves of clip_grad_norm_: the joint norm (of any tensors), then the
    gradients scaled by max_norm / norm where that is below 1."""
    grads = [np.arange(6.0).reshape(2, 3), np.full(4, -2.0)]
    params = [tg.tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = tg.tensor(g)
    joint = np.concatenate([g.ravel() for g in grads])
    total = utils.get_total_norm([p.grad for p in params])
    assert total.item() == pytest.approx(np.linalg.norm(joint), rel=1e-15)
    assert utils.get_total_norm([p.grad for p in params], "inf").item() == 5.0
    utils.clip_grads_with_norm_(params, 1.0, total)
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g / (np.linalg.norm(joint) + 1e-6), rtol=1e-14)


def test_clipping_scales_the_gradients_in_place():
    """A reference to `p.grad` held across clipping sees the clipped values (PyTorch scales in
    place; a new tensor left timm's held gradients stale)."""
    layer = nn.Linear(3, 2)
    (layer(tg.tensor(np.ones((4, 3), np.float32))).sum() * 100).backward()
    held = layer.weight.grad
    total = utils.clip_grad_norm_(layer.parameters(), 0.1)
    assert held is layer.weight.grad and total.item() > 0.1
    norm = np.sqrt(sum((p.grad.numpy() ** 2).sum() for p in layer.parameters()))
    assert norm == pytest.approx(0.1, rel=1e-4)
    utils.clip_grad_value_(layer.parameters(), 0.01)
    assert held is layer.weight.grad and np.abs(held.numpy()).max() <= 0.01
