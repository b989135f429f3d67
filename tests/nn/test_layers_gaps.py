"""Bilinear, LocalResponseNorm, AlphaDropout and FeatureAlphaDropout, ChannelShuffle, Unfold and
Fold, EmbeddingBag: values and gradients against PyTorch in float64 from the same weights (where
installed), against NumPy or finite differences without it, and traced against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tests.nn.test_layers_resampling import both, needs_torch, same_module, torch
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.core.errors import ShapeError
from tracegrad.frontend import random
from tracegrad.nn import functional as F

if torch is not None:
    import torch.nn.functional as TF

# --- bilinear ---------------------------------------------------------------------------------


def test_bilinear_is_x1_w_x2_plus_b(rng):
    x1, x2 = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 4))
    w, b = rng.standard_normal((6, 3, 4)), rng.standard_normal(6)
    y = F.bilinear(tg.tensor(x1), tg.tensor(x2), tg.tensor(w), tg.tensor(b)).numpy()
    np.testing.assert_allclose(y, np.einsum("nli,oij,nlj->nlo", x1, w, x2) + b, atol=1e-12)
    check_grad(F.bilinear, x1, x2, w, b)


@needs_torch
def test_bilinear_matches_torch(rng):
    same_module(nn.Bilinear(3, 4, 2), torch.nn.Bilinear(3, 4, 2), rng.standard_normal((5, 3)),
                rng.standard_normal((5, 4)))  # fmt: skip
    assert nn.Bilinear(3, 4, 2, bias=False).bias is None


# --- channel shuffle and local response norm --------------------------------------------------


def test_channel_shuffle_regroups_channels(rng):
    x = np.arange(6.0).reshape(1, 6, 1)
    np.testing.assert_array_equal(F.channel_shuffle(tg.tensor(x), 2).numpy().ravel(),
                                  [0, 3, 1, 4, 2, 5])  # fmt: skip
    check_grad(lambda a: nn.ChannelShuffle(3)(a), rng.standard_normal((2, 6, 2, 2)))
    with pytest.raises(ShapeError):
        F.channel_shuffle(tg.tensor(x), 4)


@needs_torch
def test_channel_shuffle_matches_torch(rng):
    both(lambda a: nn.ChannelShuffle(2)(a), lambda t: torch.nn.ChannelShuffle(2)(t),
         rng.standard_normal((2, 4, 3, 3)))  # fmt: skip


def lrn_reference(x, size, alpha, beta, k):
    sq = np.pad(x * x, [(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    window = sum(sq[:, i : i + x.shape[1]] for i in range(size))
    return x / (k + alpha * window / size) ** beta


@pytest.mark.parametrize("shape, size", [((2, 5, 7), 3), ((2, 6, 3, 3), 4), ((1, 3, 2, 2, 2), 5)])
def test_local_response_norm_matches_numpy_and_finite_differences(rng, shape, size):
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(nn.LocalResponseNorm(size, 0.1, 0.75, 2.0)(tg.tensor(x)).numpy(),
                               lrn_reference(x, size, 0.1, 0.75, 2.0), rtol=1e-12)  # fmt: skip
    check_grad(lambda a: F.local_response_norm(a, size, alpha=0.5, k=1.5), x)


@needs_torch
@pytest.mark.parametrize("shape, size", [((2, 5, 7), 3), ((2, 6, 3, 3), 4), ((1, 3, 2, 2, 2), 2)])
def test_local_response_norm_matches_torch(rng, shape, size):
    x = rng.standard_normal(shape)
    both(lambda a: F.local_response_norm(a, size, 0.3, 0.6, 1.2),
         lambda t: TF.local_response_norm(t, size, 0.3, 0.6, 1.2), x)  # fmt: skip


# --- alpha dropout ----------------------------------------------------------------------------


@pytest.mark.parametrize("layer", [nn.AlphaDropout, nn.FeatureAlphaDropout])
def test_alpha_dropout_keeps_selu_statistics(layer):
    x = tg.tensor(np.random.default_rng(0).standard_normal((200, 50, 4)))  # SELU's fixed point
    drop = layer(0.2, seed=3)
    y = drop(x).numpy()
    assert abs(y.mean()) < 0.05 and abs(y.std() - 1.0) < 0.05
    assert not np.isclose(y, 0.0).any()  # dropped to SELU's saturation value, mapped: not 0
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())
    alpha = 1.7580993408473766
    low = alpha * (0.2 - 1) / np.sqrt((alpha**2 * 0.2 + 1) * 0.8)  # a dropped element's value
    dropped = np.isclose(y, low)
    assert dropped.mean() == pytest.approx(0.2, abs=0.01)
    if layer is nn.FeatureAlphaDropout:  # whole channels
        assert (dropped.all(axis=2) == dropped.any(axis=2)).all()


def test_alpha_dropout_values_and_gradient(rng):
    x = rng.standard_normal((4, 6))
    p, alpha = 0.3, 1.7580993408473766
    a = 1 / np.sqrt((alpha**2 * p + 1) * (1 - p))
    y = F.alpha_dropout(tg.tensor(x), p, True, state=random.new_state(7)).numpy()
    kept = np.isclose(y, a * x + alpha * a * p)
    assert kept.any() and not kept.all()
    np.testing.assert_allclose(y[~kept], alpha * a * (p - 1))
    check_grad(lambda t: F.alpha_dropout(t, p, True, state=random.new_state(7)), x)
    np.testing.assert_array_equal(F.alpha_dropout(tg.tensor(x), p).numpy(), x)  # training=False
    np.testing.assert_array_equal(F.alpha_dropout(tg.tensor(x), 1.0, True).numpy(), 0 * x)


@needs_torch
@pytest.mark.parametrize("feature", [False, True])
def test_alpha_dropout_maps_kept_and_dropped_elements_as_torch(rng, feature):
    """The masks differ (other generators), but torch's output is ours' affine map of the kept
    elements and ours' value of the dropped ones."""
    x, p = rng.standard_normal((64, 8, 3)), 0.3
    y = (F.feature_alpha_dropout if feature else F.alpha_dropout)(tg.tensor(x), p, True).numpy()
    ty = (TF.feature_alpha_dropout if feature else TF.alpha_dropout)(torch.tensor(x), p, True)
    ty = ty.numpy()
    values, counts = np.unique(np.round(y, 12), return_counts=True)
    dropped = values[counts.argmax()]
    kept = ~np.isclose(y, dropped)
    affine = np.polyfit(x[kept], y[kept], 1)
    np.testing.assert_allclose(np.polyval(affine, x[kept]), y[kept], atol=1e-12)
    torch_kept = np.isclose(ty, np.polyval(affine, x))
    assert torch_kept.mean() == pytest.approx(1 - p, abs=0.1)
    np.testing.assert_allclose(ty[~torch_kept], dropped, atol=1e-12)


# --- unfold and fold --------------------------------------------------------------------------

GEOMETRIES = [  # kernel, dilation, padding, stride
    (3, 1, 0, 1), ((2, 3), 1, 1, 2), (2, 2, (1, 0), (1, 2)), (3, 1, 1, 3), (4, 1, 0, 4),
]  # fmt: skip


def unfold_reference(x, k, d, p, s):
    pair = lambda v: (v, v) if isinstance(v, int) else v  # noqa: E731
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(pair, (k, d, p, s))
    xp = np.pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)])
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    cols = np.empty((x.shape[0], x.shape[1], kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            for r in range(oh):
                for c in range(ow):
                    cols[:, :, i, j, r, c] = xp[:, :, r * sh + i * dh, c * sw + j * dw]
    return cols.reshape(x.shape[0], -1, oh * ow)


@pytest.mark.parametrize("k, d, p, s", GEOMETRIES)
def test_unfold_and_fold_are_adjoint_im2col_col2im(rng, k, d, p, s):
    x = rng.standard_normal((2, 3, 7, 8))
    cols = F.unfold(tg.tensor(x), k, d, p, s).numpy()
    np.testing.assert_array_equal(cols, unfold_reference(x, k, d, p, s))
    c = rng.standard_normal(cols.shape)
    folded = F.fold(tg.tensor(c), (7, 8), k, d, p, s).numpy()
    assert folded.shape == x.shape
    np.testing.assert_allclose(np.sum(folded * x), np.sum(c * cols), rtol=1e-12)  # <fold c, x>
    check_grad(lambda a: nn.Unfold(k, d, p, s)(a), x[:1, :2])
    check_grad(lambda a: nn.Fold((7, 8), k, d, p, s)(a), c[:1])


def test_unfold_and_fold_take_unbatched_inputs_and_check_shapes(rng):
    x = rng.standard_normal((3, 5, 5))
    cols = F.unfold(tg.tensor(x), 2)
    assert cols.shape == (12, 16)
    np.testing.assert_allclose(F.fold(cols, 5, 2).numpy()[:, 1:-1, 1:-1], 4 * x[:, 1:-1, 1:-1])
    with pytest.raises(ShapeError, match="fold"):
        F.fold(tg.tensor(rng.standard_normal((1, 12, 15))), 5, 2)


@needs_torch
@pytest.mark.parametrize("k, d, p, s", GEOMETRIES)
def test_unfold_and_fold_match_torch(rng, k, d, p, s):
    x = rng.standard_normal((2, 3, 7, 8))
    both(lambda a: F.unfold(a, k, d, p, s), lambda t: TF.unfold(t, k, d, p, s), x)
    cols = TF.unfold(torch.tensor(x), k, d, p, s).numpy()
    c = rng.standard_normal(cols.shape)
    both(lambda a: nn.Fold((7, 8), k, d, p, s)(a), lambda t: torch.nn.Fold((7, 8), k, d, p, s)(t),
         c)  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_unfold_and_fold_match_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = rng.standard_normal((2, 3, 6, 6))

    def f(x):
        return F.fold(F.unfold(x, 3, 1, 1, 2) * 2.0, (6, 6), 3, 1, 1, 2)

    np.testing.assert_allclose(tg.trace(f, backend=backend)(x).numpy(), f(tg.tensor(x)).numpy())


# --- embedding bags ---------------------------------------------------------------------------


def bag_reference(w, bags, mode, weights=None, padding_idx=None):
    out = []
    for i, bag in enumerate(bags):
        rows = [w[j] * (1.0 if weights is None else weights[i][t])
                for t, j in enumerate(bag) if j != padding_idx]  # fmt: skip
        if not rows:
            out.append(np.zeros(w.shape[1]))
        else:
            out.append({"sum": np.sum, "mean": np.mean, "max": np.max}[mode](rows, axis=0))
    return np.array(out)


BAGS = [[1, 2, 4], [], [0, 5, 5, 3], [2]]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 5])
def test_embedding_bag_with_offsets(rng, mode, padding_idx):
    w = rng.standard_normal((6, 3))
    flat = np.array([j for bag in BAGS for j in bag])
    offsets = np.cumsum([0] + [len(b) for b in BAGS[:-1]])
    y = F.embedding_bag(tg.tensor(flat), tg.tensor(w), tg.tensor(offsets), mode=mode,
                        padding_idx=padding_idx)  # fmt: skip
    np.testing.assert_allclose(y.numpy(), bag_reference(w, BAGS, mode, None, padding_idx),
                               rtol=1e-12)  # fmt: skip
    last = np.append(offsets, len(flat))
    y2 = F.embedding_bag(tg.tensor(flat), tg.tensor(w), tg.tensor(last), mode=mode,
                         include_last_offset=True, padding_idx=padding_idx)  # fmt: skip
    np.testing.assert_array_equal(y2.numpy(), y.numpy())
    check_grad(lambda t: F.embedding_bag(tg.tensor(flat), t, tg.tensor(offsets), mode=mode,
                                         padding_idx=padding_idx), w)  # fmt: skip


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_of_a_2d_input_and_per_sample_weights(rng, mode):
    w, idx = rng.standard_normal((7, 4)), rng.integers(0, 7, (3, 5))
    bag = nn.EmbeddingBag(7, 4, mode=mode, _weight=tg.tensor(w))
    np.testing.assert_allclose(bag(tg.tensor(idx)).numpy(), bag_reference(w, idx, mode),
                               rtol=1e-12)  # fmt: skip
    check_grad(lambda t: F.embedding_bag(tg.tensor(idx), t, mode=mode), w)
    if mode == "sum":
        psw = rng.standard_normal(idx.shape)
        np.testing.assert_allclose(
            F.embedding_bag(tg.tensor(idx), tg.tensor(w), mode="sum",
                            per_sample_weights=tg.tensor(psw)).numpy(),
            bag_reference(w, idx, "sum", psw), rtol=1e-12)  # fmt: skip
        check_grad(lambda t, s: F.embedding_bag(tg.tensor(idx), t, mode="sum",
                                                per_sample_weights=s), w, psw)  # fmt: skip
    with pytest.raises(ValueError):
        F.embedding_bag(tg.tensor(idx), tg.tensor(w), tg.tensor(np.array([0])), mode=mode)


@needs_torch
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding_bag_matches_torch(rng, mode, padding_idx):
    flat = np.array([j for bag in BAGS for j in bag])
    offsets = np.cumsum([0] + [len(b) for b in BAGS[:-1]])
    ours = nn.EmbeddingBag(6, 3, mode=mode, padding_idx=padding_idx)
    theirs = torch.nn.EmbeddingBag(6, 3, mode=mode, padding_idx=padding_idx)
    theirs = theirs.double()
    ours.double().load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    y = ours(tg.tensor(flat), tg.tensor(offsets))
    ty = theirs(torch.tensor(flat), torch.tensor(offsets))
    c = rng.standard_normal(ty.shape)
    (y * c).sum().backward()
    (ty * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=1e-12)
    np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(), atol=1e-12)
    idx, psw = rng.integers(0, 6, (3, 4)), rng.standard_normal((3, 4))
    if mode == "sum":
        both(lambda t, s: F.embedding_bag(tg.tensor(idx), t, mode="sum", per_sample_weights=s,
                                          padding_idx=padding_idx),
             lambda t, s: TF.embedding_bag(torch.tensor(idx), t, mode="sum",
                                           per_sample_weights=s, padding_idx=padding_idx),
             rng.standard_normal((6, 3)), psw)  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_embedding_bag_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    w = tg.tensor(rng.standard_normal((6, 3)), requires_grad=True)
    flat = np.array([j for bag in BAGS for j in bag])
    offsets = np.cumsum([0] + [len(b) for b in BAGS[:-1]])

    def f(idx, off):
        y = F.embedding_bag(idx, w, off, mode="mean") + F.embedding_bag(idx, w, off, mode="sum")
        y.sum().backward()
        g = w.grad
        w.grad = None
        return y, g

    eager = f(tg.tensor(flat), tg.tensor(offsets))
    traced = tg.trace(f, backend=backend)(flat, offsets)
    for a, b in zip(traced, eager, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
