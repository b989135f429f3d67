"""tracegrad.nn.functional where PyTorch's conventions are easy to miss: saturated probabilities,
broadcast loss targets, unbatched inputs, in-place renormalization, grouped-query attention,
negative padding, area interpolation and the activations' gradients at their kinks. Values
against NumPy, gradients against finite differences (or explicit values where the function has
no derivative), traced steps against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, eager_or_traced, traced_matches_eager
from tracegrad.nn import functional as F

BACKENDS = [None, "numpy", "numba"]  # eager, and traced on each backend


# --- binary cross-entropy at saturated probabilities --------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bce_at_saturated_probabilities_has_pytorchs_gradient(backend, dtype, monkeypatch):
    """p exactly 0 or 1: each log clamped at -100, the gradient (p - t) / max(p (1 - p), 1e-12):
    0 where p is its target (the parts' 0 * inf was NaN), 1e12 in size where it is the other
    end. Through a saturated sigmoid (sigmoid(40) == 1.0 in float32 and float64) it is 0."""
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.25], dtype)
    t = np.array([0.0, 1.0, 1.0, 0.0, 1.0], dtype)

    def step(p, t, x):
        loss = F.binary_cross_entropy(p, t, reduction="sum")
        saturated = F.binary_cross_entropy(tg.sigmoid(x), tg.ones_like(x))
        (loss + saturated).backward()
        return loss, saturated

    ps, x = (
        tg.tensor(p, requires_grad=True),
        tg.tensor(np.array([40.0, 0.3], dtype), requires_grad=True),
    )
    run = eager_or_traced(step, backend, monkeypatch)
    for _ in range(2):  # the second call runs the compiled plan
        ps.grad = x.grad = None
        loss, saturated = run(ps, tg.tensor(t), x)
    np.testing.assert_allclose(loss.item(), 200.0 - np.log(0.25), rtol=1e-6)
    np.testing.assert_allclose(ps.grad.numpy(), [0.0, 0.0, -1e12, 1e12, -4.0], rtol=1e-6)
    assert x.grad.numpy()[0] == 0.0 and np.isfinite(x.grad.numpy()).all()
    np.testing.assert_allclose(x.grad.numpy()[1], -(1 - 1 / (1 + np.exp(-0.3))) / 2, rtol=1e-6)


def test_bce_matches_numpy_and_finite_differences(rng):
    p, t, w = rng.uniform(0.05, 0.95, (3, 4)), rng.uniform(0, 1, (3, 4)), rng.uniform(0, 2, 4)
    want = -(t * np.log(p) + (1 - t) * np.log1p(-p)) * w
    got = F.binary_cross_entropy(p, t, tg.tensor(w), reduction="none")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    check_grad(lambda p, t: F.binary_cross_entropy(p, t, tg.tensor(w), reduction="none"), p, t)
    check_grad(lambda p: F.binary_cross_entropy(p, tg.tensor(t)), p)


def test_bce_traced_matches_eager(rng):
    p, t = rng.uniform(0.05, 0.95, (3, 4)), rng.uniform(0, 1, (3, 4))
    for backend in ("numpy", "numba"):
        traced_matches_eager(lambda p, t: F.binary_cross_entropy(p, t, reduction="none"), p, t,
                             backend=backend)  # fmt: skip


def test_bce_second_derivative_is_the_formulas():
    """d2/dp2 of -(t log p + (1 - t) log(1 - p)) = t / p^2 + (1 - t) / (1 - p)^2."""
    p = tg.tensor(np.array([0.2, 0.7]), requires_grad=True)
    t = np.array([1.0, 0.4])
    (g,) = tg.autograd.grad(F.binary_cross_entropy(p, t, reduction="sum"), p, create_graph=True)
    g.sum().backward()
    want = t / p.numpy() ** 2 + (1 - t) / (1 - p.numpy()) ** 2
    np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-12)


# --- regression losses broadcast a target of another shape, with PyTorch's warning ---------------

REGRESSION = {
    "mse_loss": (F.mse_loss, lambda d: d * d),
    "l1_loss": (F.l1_loss, np.abs),
    "smooth_l1_loss": (F.smooth_l1_loss, lambda d: np.where(abs(d) < 1, 0.5 * d * d, abs(d) - 0.5)),
    "huber_loss": (lambda x, t, **kw: F.huber_loss(x, t, delta=0.5, **kw),
                   lambda d: np.where(abs(d) < 0.5, 0.5 * d * d, 0.5 * (abs(d) - 0.25))),
}  # fmt: skip


@pytest.mark.parametrize("loss", REGRESSION)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses_broadcast_the_target_with_a_warning(loss, reduction, rng):
    fn, per_element = REGRESSION[loss]
    x, t = rng.standard_normal((3, 1)) * 2, rng.standard_normal(3) * 2
    elements = per_element(x - t)  # (3, 3), NumPy's broadcast
    want = {"mean": elements.mean(), "sum": elements.sum(), "none": elements}[reduction]
    with pytest.warns(UserWarning, match=r"target size torch.Size\(\[3\]\) that is different to "
                      r"the input size torch.Size\(\[3, 1\]\)"):  # fmt: skip
        got = fn(tg.tensor(x), tg.tensor(t), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    with pytest.warns(UserWarning):
        check_grad(lambda a, b: fn(a, b, reduction=reduction), x, t)


# --- unbatched inputs and PyTorch's other shapes ------------------------------------------------


def np_conv1d(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """(C, L) with (O, C, k), stride 1: each output position a dot product of a window."""
    x = np.pad(x, ((0, 0), (pad, pad)))
    k = w.shape[2]
    return np.stack([np.einsum("ck,ock->o", x[:, i : i + k], w)
                     for i in range(x.shape[1] - k + 1)], axis=1)  # fmt: skip


def test_conv1d_and_conv2d_take_one_unbatched_sample(rng):
    x, w, b = rng.standard_normal((4, 7)), rng.standard_normal((3, 4, 3)), rng.standard_normal(3)
    got = F.conv1d(tg.tensor(x), tg.tensor(w), tg.tensor(b), padding=1)
    np.testing.assert_allclose(got.numpy(), np_conv1d(x, w, 1) + b[:, None], rtol=1e-12)
    check_grad(lambda x, w, b: F.conv1d(x, w, b, padding=1), x, w, b)
    # a 2-d convolution with a kernel one row high is the 1-d one of each row
    img, w2 = rng.standard_normal((4, 2, 7)), w[:, :, None, :]
    got = F.conv2d(tg.tensor(img), tg.tensor(w2), tg.tensor(b), padding=(0, 1))
    assert got.shape == (3, 2, 7)
    for r in range(2):
        want = np_conv1d(img[:, r], w, 1) + b[:, None]
        np.testing.assert_allclose(got.numpy()[:, r], want, rtol=1e-12)
    check_grad(lambda x, w: F.conv2d(x, w, stride=2, padding=1), rng.standard_normal((2, 5, 4)),
               rng.standard_normal((3, 2, 3, 3)))  # fmt: skip


@pytest.mark.parametrize("mode", ["zeros", "reflect"])
def test_conv_layers_take_one_unbatched_sample(mode, rng):
    layers = [(tg.nn.Conv1d(4, 3, 3, padding=1, padding_mode=mode), (4, 6)),
              (tg.nn.Conv2d(4, 3, 3, padding=1, padding_mode=mode), (4, 6, 5))]  # fmt: skip
    for layer, shape in layers:
        x = rng.standard_normal(shape).astype(np.float32)
        got = layer(tg.tensor(x))
        want = layer(tg.tensor(x[None]))[0]
        assert got.shape == want.shape == (3, *shape[1:])
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def np_soft_cross_entropy(z: np.ndarray, p: np.ndarray, axis: int) -> np.ndarray:
    logp = z - z.max(axis, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis, keepdims=True))
    return -(logp * p).sum(axis)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_one_unbatched_sample(reduction, rng):
    """(C,) logits against a class () or probabilities (C,); nll_loss likewise: the loss of a
    batch of one, 0-d without a reduction."""
    z, p = rng.standard_normal(5), rng.dirichlet(np.ones(5))
    label = tg.tensor(np.array(2))
    got = F.cross_entropy(tg.tensor(z), label, reduction=reduction)
    assert got.shape == ()
    np.testing.assert_allclose(got.item(), np_soft_cross_entropy(z, np.eye(5)[2], 0), rtol=1e-12)
    got = F.cross_entropy(tg.tensor(z), tg.tensor(p), reduction=reduction)
    np.testing.assert_allclose(got.item(), np_soft_cross_entropy(z, p, 0), rtol=1e-12)
    assert F.nll_loss(tg.tensor(z), label, reduction=reduction).item() == -z[2]
    check_grad(lambda z, p: F.cross_entropy(z, p, reduction=reduction), z, p)
    check_grad(lambda z: F.cross_entropy(z, label, reduction=reduction, label_smoothing=0.1), z)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_of_probabilities_with_spatial_axes(reduction, rng):
    """(N, C, d1, d2) logits against probabilities of that shape: each position's loss, the
    mean over the N d1 d2 positions."""
    z, w = rng.standard_normal((2, 3, 4, 2)), np.array([1.0, 2.0, 0.5])
    p = rng.dirichlet(np.ones(3), (2, 4, 2)).transpose(0, 3, 1, 2)
    per_position = np_soft_cross_entropy(z, p * w[:, None, None], 1)
    want = {"mean": per_position.mean(), "sum": per_position.sum(), "none": per_position}
    got = F.cross_entropy(tg.tensor(z), tg.tensor(p), tg.tensor(w), reduction=reduction)
    np.testing.assert_allclose(got.numpy(), want[reduction], rtol=1e-12)
    check_grad(lambda z, p: F.cross_entropy(z, p, tg.tensor(w), reduction=reduction), z, p)


def test_linear_with_a_1d_weight_has_no_out_axis(rng):
    x, w, b = rng.standard_normal((2, 3, 4)), rng.standard_normal(4), rng.standard_normal(())
    got = F.linear(tg.tensor(x), tg.tensor(w), tg.tensor(b))
    np.testing.assert_allclose(got.numpy(), x @ w + b, rtol=1e-12)
    check_grad(lambda x, w, b: F.linear(x, w, b), x, w, b)
    assert F.linear(tg.tensor(x), tg.tensor(w)).shape == (2, 3)


# --- embedding's max_norm: the picked rows renormalized in the table, in place -------------------


def np_renorm(table: np.ndarray, index: np.ndarray, max_norm: float, p: float) -> np.ndarray:
    """PyTorch's embedding_renorm_, row by row: the picked rows above max_norm scaled to it."""
    out = table.copy()
    for i in np.unique(index):
        norm = np.sum(np.abs(out[i]) ** p) ** (1 / p)
        if norm > max_norm:
            out[i] *= max_norm / (norm + 1e-7)
    return out


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalizes_the_picked_rows_in_place(norm_type, rng):
    table = rng.standard_normal((5, 3)) * 2
    index = np.array([[0, 3], [3, 4]])
    w = tg.tensor(table, requires_grad=True)
    out = F.embedding(tg.tensor(index), w, max_norm=1.5, norm_type=norm_type)
    want = np_renorm(table, index, 1.5, norm_type)
    np.testing.assert_allclose(w.detach().numpy(), want, rtol=1e-12)  # rows 1, 2 untouched
    np.testing.assert_array_equal(w.detach().numpy()[[1, 2]], table[[1, 2]])
    np.testing.assert_allclose(out.numpy(), want[index], rtol=1e-12)
    out.sum().backward()  # the lookup's gradient: how often each row was picked
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [1.0, 0.0, 0.0, 2.0, 1.0])


def test_embedding_layer_max_norm_eager_and_traced_renormalize_at_every_call(rng):
    """A step that renormalizes, looks up and takes an SGD step (the picked rows grow again):
    eager and traced (the table written at every call) follow NumPy's simulation."""
    batches = [rng.integers(0, 6, (4,)) for _ in range(4)]
    for traced in (False, True):
        tg.nn.manual_seed(0)
        layer = tg.nn.Embedding(6, 3, max_norm=1.0)
        table = layer.weight.detach().numpy().astype(np.float64)
        opt = tg.optim.SGD(layer.parameters(), lr=0.5)

        def step(x, layer=layer, opt=opt):
            opt.zero_grad()
            loss = -layer(x).sum()
            loss.backward()
            opt.step()
            return loss

        run = tg.trace(step, backend="numpy") if traced else step
        for b in batches:
            table = np_renorm(table, b, 1.0, 2.0)
            want = -table[b].sum()
            table += 0.5 * np.bincount(b, minlength=6)[:, None]  # SGD on -sum: + lr * count
            np.testing.assert_allclose(run(tg.tensor(b)).item(), want, rtol=1e-5)
        np.testing.assert_allclose(layer.weight.detach().numpy(), table, rtol=1e-5)


def test_embedding_bag_max_norm_renormalizes_the_picked_rows_first(rng):
    table, index = rng.standard_normal((5, 3)) * 2, np.array([[0, 3], [3, 4]])
    w = tg.tensor(table)
    got = F.embedding_bag(tg.tensor(index), w, max_norm=1.5, mode="sum")
    want = np_renorm(table, index, 1.5, 2.0)
    np.testing.assert_allclose(w.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(got.numpy(), want[index].sum(1), rtol=1e-12)


# --- grouped-query attention --------------------------------------------------------------------


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_enable_gqa_repeats_each_key_and_value_head_for_its_group(causal, rng):
    """Query heads 0, 1, 2 read key/value head 0 and heads 3, 4, 5 head 1 (repeat_interleave)."""
    q, k, v = (rng.standard_normal(s) for s in ((2, 6, 4, 3), (2, 2, 5, 3), (2, 2, 5, 2)))
    if causal:
        k, v = k[:, :, :4], v[:, :, :4]
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal,  # noqa: E731
                                                        enable_gqa=True)  # fmt: skip
    got = fn(tg.tensor(q), tg.tensor(k), tg.tensor(v))
    want = np_attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1), causal)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    check_grad(fn, q, k, v)
    traced_matches_eager(fn, q, k, v, backend="numba")
    with pytest.raises(tg.ShapeError, match="enable_gqa"):
        F.scaled_dot_product_attention(tg.tensor(q[:, :5]), tg.tensor(k), tg.tensor(v),
                                       enable_gqa=True)  # fmt: skip


# --- negative pads crop in every mode ------------------------------------------------------------

# PyTorch's results for arange(5): reflect and replicate pad the input, then crop (the mirror
# reads what the crop takes away); circular crops, then wraps what is left
NEGATIVE_PADS = {
    ("reflect", (-1, 2)): [1, 2, 3, 4, 3, 2],
    ("reflect", (-3, 2)): [3, 4, 3, 2],
    ("reflect", (2, -3)): [2, 1, 0, 1],
    ("reflect", (1, -4)): [1, 0],
    ("replicate", (-1, 2)): [1, 2, 3, 4, 4, 4],
    ("replicate", (2, -3)): [0, 0, 0, 1],
    ("replicate", (-2, -2)): [2],
    ("circular", (-3, 2)): [3, 4, 3, 4],
    ("circular", (2, -3)): [0, 1, 0, 1],
    ("circular", (1, -4)): [0, 0],
}


@pytest.mark.parametrize("mode, widths", NEGATIVE_PADS)
def test_pad_with_negative_widths_crops_in_every_mode(mode, widths, rng):
    x = tg.tensor(np.arange(5.0).reshape(1, 1, 5))
    got = F.pad(x, widths, mode=mode)
    np.testing.assert_array_equal(got.numpy()[0, 0], NEGATIVE_PADS[mode, widths])
    check_grad(lambda x: F.pad(x, widths + (1, -1), mode=mode), rng.standard_normal((1, 3, 5)))
    with pytest.raises(ValueError, match="leave an element"):
        F.pad(x, (-3, -2), mode=mode)


# --- area interpolation: the mean of each of PyTorch's adaptive windows -------------------------


def np_area(x: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
    """Each output position the mean of input positions floor(i n / o) to ceil((i + 1) n / o)
    along every spatial axis."""
    out = x
    for axis, o in enumerate(size, start=2):
        n = out.shape[axis]
        parts = [np.take(out, range(i * n // o, -(-(i + 1) * n // o)), axis).mean(axis)
                 for i in range(o)]  # fmt: skip
        out = np.stack(parts, axis)
    return out


@pytest.mark.parametrize("shape, options, size", [
    ((2, 3, 7), {"size": 3}, (3,)),
    ((2, 3, 7, 5), {"size": (3, 2)}, (3, 2)),
    ((1, 2, 6, 4), {"scale_factor": 0.5}, (3, 2)),
    ((1, 2, 5, 4), {"size": (7, 6)}, (7, 6)),  # upsampling: windows of one or two
    ((1, 2, 5, 4, 3), {"size": (2, 3, 2)}, (2, 3, 2)),
])  # fmt: skip
def test_interpolate_area_is_the_mean_of_adaptive_windows(shape, options, size, rng):
    x = rng.standard_normal(shape)
    got = F.interpolate(tg.tensor(x), mode="area", **options)
    np.testing.assert_allclose(got.numpy(), np_area(x, size), rtol=1e-12)
    check_grad(lambda x: F.interpolate(x, mode="area", **options), x)
