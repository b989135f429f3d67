"""tracegrad.nn.functional: values against plain NumPy formulas, gradients against float64 finite
differences, and the error messages of the losses."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, eager_or_traced, numeric_grad, traced_matches_eager
from tracegrad import nn
from tracegrad.nn import functional as F

BACKENDS = [None, "numpy", "numba"]  # eager, and traced on each backend


def np_log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def np_gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


ACTIVATIONS = {
    "relu": (F.relu, lambda x: np.maximum(x, 0)),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"), np_gelu_tanh),
    "sigmoid": (F.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (F.tanh, np.tanh),
    "softmax": (F.softmax, lambda x: np.exp(np_log_softmax(x))),
    "log_softmax": (F.log_softmax, np_log_softmax),
}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_values_and_gradients(name, rng):
    fn, reference = ACTIVATIONS[name]
    x = rng.standard_normal((4, 5)) * 2
    x[np.abs(x) < 1e-3] = 0.5  # relu is not differentiable at 0: keep finite differences away
    np.testing.assert_allclose(fn(tg.tensor(x)).numpy(), reference(x), rtol=1e-12, atol=1e-12)
    check_grad(fn, x)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activations_keep_float32(name):
    x = tg.tensor(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
    assert ACTIVATIONS[name][0](x).dtype == np.float32


IN_PLACE = {  # inplace=True forms, and what they compute
    "relu": (lambda x: F.relu(x, inplace=True), lambda x: np.maximum(x, 0)),
    "leaky_relu_": (lambda x: F.leaky_relu_(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "hardtanh_": (F.hardtanh_, lambda x: np.clip(x, -1, 1)),
    "elu": (lambda x: F.elu(x, inplace=True), lambda x: np.where(x > 0, x, np.expm1(x))),
    "silu": (lambda x: F.silu(x, inplace=True), lambda x: x / (1 + np.exp(-x))),
    "threshold_": (lambda x: F.threshold_(x, 0.5, -2.0), lambda x: np.where(x > 0.5, x, -2.0)),
}


def _activated_in_place(act):
    """`act(h); return h`, on a tensor autograd tracks and on views of it (a row, columns of a
    transpose): the code that needs the input to hold the result."""

    def fn(x):
        h = x * 2.0
        act(h[1])
        act(h.t()[2:])
        act(h)
        return h

    return fn


@pytest.mark.parametrize("name", IN_PLACE)
def test_in_place_activations_write_a_tracked_input_and_its_base(name, rng):
    """The input holds the result, with its gradient, also through a view (a new tensor was
    returned and the input kept its value)."""
    act, reference = IN_PLACE[name]
    x = rng.standard_normal((3, 4))
    x[np.abs(x * 2 - 0.5) < 0.05] = 0.9  # away from the kinks, for finite differences
    h = x * 2
    h[1] = reference(h[1])
    h[:, 2:] = reference(h[:, 2:])
    fn = _activated_in_place(act)
    np.testing.assert_allclose(fn(tg.tensor(x)).numpy(), reference(h), rtol=1e-14)
    check_grad(fn, x)
    y = tg.tensor(x, requires_grad=True) * 1.0
    assert act(y) is y


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_in_place_activations_traced_match_eager(backend, rng):
    traced_matches_eager(_activated_in_place(IN_PLACE["elu"][0]), rng.standard_normal((3, 4)),
                         backend=backend)  # fmt: skip


def test_in_place_dropout_writes_its_input_and_a_leaf_refuses():
    tg.manual_seed(0)
    x = tg.tensor(np.ones((4, 50)), requires_grad=True)
    h = x * 1.0
    F.dropout(h, 0.5, training=True, inplace=True)
    assert set(np.unique(h.numpy())) == {0.0, 2.0}
    h.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), h.detach().numpy())
    with pytest.raises(RuntimeError, match="leaf"):
        F.relu(tg.tensor([1.0], requires_grad=True), inplace=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_multiplies_by_its_mask_as_pytorch(dtype):
    """Dropout is x times a mask of 0 and 1/(1-p) in x's dtype, as PyTorch's: kept elements are
    x * (1/(1-p)) rounded once, a NaN stays NaN where dropped, and the gradient is the mask; the
    mask is Philox's uniform draw from the state compared with p (NumPy's generator, made
    independently here), and the state advances by one stream."""
    p = 0.3
    x0 = np.linspace(-2.0, 2.0, 40, dtype=dtype).reshape(4, 10)
    x0[0, :3] = np.nan
    key = 1234
    tg.manual_seed(key)
    x = tg.tensor(x0, requires_grad=True)
    y = F.dropout(x, p, training=True)
    bits = np.random.Philox(key=key, counter=[0, 0, 0, 0])
    keep = np.random.Generator(bits).random((4, 10), dtype=dtype) >= p
    mask = keep.astype(dtype) * dtype(1.0 / (1.0 - p))
    np.testing.assert_array_equal(y.numpy(), x0 * mask)
    assert np.isnan(y.numpy()[0, :3]).all()
    (y * 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask)
    second = F.dropout(tg.tensor(np.ones((4, 10), dtype)), p).numpy() != 0
    following = np.random.Generator(np.random.Philox(key=key, counter=[0, 0, 0, 1]))
    np.testing.assert_array_equal(second, following.random((4, 10), dtype=dtype) >= p)


@pytest.mark.parametrize("name", ["log_softmax", "softmax"])
def test_softmaxes_differentiate_twice(rng, name):
    """log_softmax and softmax are one op eagerly; the VJP, in ops, reads the saved result, which
    keeps its history: d/dx |d(sum(f(x) * c))/dx|^2 against finite differences."""
    x0, c = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    f = getattr(F, name)

    def grad_norm(x: tg.Tensor, create_graph: bool = False) -> tg.Tensor:
        (g,) = tg.autograd.grad((f(x, dim=1) * c).sum(), [x], create_graph=create_graph)
        return (g * g).sum()

    x = tg.tensor(x0, requires_grad=True)
    grad_norm(x, create_graph=True).backward()
    expected = numeric_grad(lambda a: float(grad_norm(tg.tensor(a, requires_grad=True))), x0)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=1e-8)


def test_relu_gradient_at_zero_is_zero_as_in_pytorch():
    x = tg.tensor([-1.0, 0.0, 2.0], requires_grad=True)
    F.relu(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 1.0])


def test_softmax_is_stable_for_large_logits():
    x = tg.tensor(np.array([[1000.0, 0.0, -1000.0]]))
    np.testing.assert_allclose(F.softmax(x).numpy(), [[1.0, 0.0, 0.0]])
    np.testing.assert_allclose(F.log_softmax(x).numpy(), [[0.0, -1000.0, -2000.0]])


@pytest.mark.parametrize("backend", BACKENDS)
def test_log_softmax_and_cross_entropy_keep_their_precision_at_large_logits(backend, monkeypatch):
    """A fully masked row (-1e9 everywhere) has loss log C and gradient 1/C - onehot; logits
    near 1e4 keep their differences (x - logsumexp(x) lost log C and 5e-4). The reference is
    float64, from the same float32 logits."""
    z = np.full((4, 5), -1e9, np.float32)
    z[1:] = 1e4 + np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    labels = np.array([2, 0, 3, 4])

    def step(x, labels):
        loss = F.cross_entropy(x, labels, reduction="sum")
        loss.backward()
        return loss, F.log_softmax(x, dim=1)

    x = tg.tensor(z, requires_grad=True)
    loss, logp = eager_or_traced(step, backend, monkeypatch)(x, labels)
    want = np_log_softmax(z.astype(np.float64))
    np.testing.assert_allclose(want[0], -np.log(5.0))
    np.testing.assert_allclose(logp.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(loss.item(), -want[np.arange(4), labels].sum(), rtol=1e-6)
    grad = np.exp(want) - np.eye(5)[labels]
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_numpy_and_finite_differences(reduction, rng):
    logits = rng.standard_normal((6, 4)) * 3
    labels = np.array([0, 3, 1, 1, 2, 3])
    per_sample = -np_log_softmax(logits)[np.arange(6), labels]
    expected = {"mean": per_sample.mean(), "sum": per_sample.sum(), "none": per_sample}[reduction]
    got = F.cross_entropy(tg.tensor(logits), labels, reduction=reduction)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)
    check_grad(lambda z: F.cross_entropy(z, labels, reduction=reduction), logits)


def test_cross_entropy_gradient_is_softmax_minus_onehot(rng):
    logits = rng.standard_normal((5, 3))
    labels = np.array([2, 0, 0, 1, 2])
    z = tg.tensor(logits, requires_grad=True)
    F.cross_entropy(z, labels).backward()
    expected = (np.exp(np_log_softmax(logits)) - np.eye(3)[labels]) / 5
    np.testing.assert_allclose(z.grad.numpy(), expected, rtol=1e-12, atol=1e-15)


def test_cross_entropy_accepts_label_tensors_and_repeated_labels():
    logits = tg.tensor(np.zeros((3, 2), np.float32), requires_grad=True)
    loss = F.cross_entropy(logits, tg.tensor(np.array([1, 1, 1])))
    assert loss.dtype == np.float32
    np.testing.assert_allclose(loss.item(), np.log(2), rtol=1e-6)


def test_cross_entropy_errors():
    logits = tg.tensor(np.zeros((3, 4)))
    with pytest.raises(
        tg.ShapeError, match=r"logits torch.Size\(\[3, 4\]\) and labels torch.Size\(\[2\]\)"
    ):
        F.cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(TypeError, match="integer class indices"):
        F.cross_entropy(logits, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"\[0, 4\), found 4"):
        F.cross_entropy(logits, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match="found -1"):
        F.cross_entropy(logits, np.array([0, -1, 1]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(logits, np.array([0, 1, 2]), reduction="avg")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(reduction, rng):
    x, t = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    sq = (x - t) ** 2
    expected = {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[reduction]
    np.testing.assert_allclose(F.mse_loss(x, t, reduction=reduction).numpy(), expected, rtol=1e-12)
    check_grad(lambda a, b: F.mse_loss(a, b, reduction=reduction), x, t)


def test_mse_loss_refuses_shapes_that_do_not_broadcast():
    with pytest.raises(
        tg.ShapeError, match=r"input torch.Size\(\[4, 2\]\) and target torch.Size\(\[4\]\)"
    ):
        F.mse_loss(np.zeros((4, 2)), np.zeros(4))


def test_layer_norm_matches_numpy_and_finite_differences(rng):
    x, w, b = rng.standard_normal((3, 2, 4)), rng.standard_normal(4), rng.standard_normal(4)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    expected = (x - mu) / np.sqrt(var + 1e-5) * w + b
    np.testing.assert_allclose(F.layer_norm(x, (4,), w, b).numpy(), expected, rtol=1e-12)
    check_grad(lambda x, w, b: F.layer_norm(x, (4,), w, b), x, w, b)
    check_grad(lambda x: F.layer_norm(x, (2, 4)), x)


def test_layer_norm_shape_error():
    with pytest.raises(tg.ShapeError, match="normalized_shape"):
        F.layer_norm(np.zeros((2, 3)), (4,))
    with pytest.raises(
        tg.ShapeError, match=r"layer_norm: weight of shape torch.Size\(\[3\]\) for normalized"
    ):
        F.layer_norm(np.zeros((2, 4)), (4,), tg.tensor(np.ones(3)))
    with pytest.raises(tg.ShapeError, match=r"layer_norm: bias of shape torch.Size\(\[2, 2\]\)"):
        F.layer_norm(np.zeros((2, 4)), (4,), None, tg.tensor(np.ones((2, 2))))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss", "label_smoothing"])
def test_a_mean_over_ignored_targets_only_is_nan_with_gradient_zero(loss, backend, monkeypatch):
    """A batch of padding: PyTorch's mean is NaN (0 / 0) and its gradient 0; a NaN gradient
    would turn every parameter NaN."""
    z = np.random.default_rng(0).standard_normal((3, 4))
    labels = np.full(3, -100)
    smooth = lambda lib: lambda z, y: lib.cross_entropy(z, y, label_smoothing=0.1)
    fn = {"cross_entropy": F.cross_entropy, "nll_loss": F.nll_loss,
          "label_smoothing": smooth(F)}[loss]  # fmt: skip

    def step(x, labels):
        out = fn(x, labels)
        out.backward()
        return out

    x = tg.tensor(z, requires_grad=True)
    out = eager_or_traced(step, backend, monkeypatch)(x, labels)
    assert np.isnan(out.item())
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((3, 4)))
    torch = pytest.importorskip("torch")
    t = torch.tensor(z, requires_grad=True)
    want = getattr(torch.nn.functional, loss, smooth(torch.nn.functional))(t, torch.tensor(labels))
    want.backward()
    assert np.isnan(want.item())
    np.testing.assert_array_equal(t.grad.numpy(), x.grad.numpy())


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int32])
def test_unsigned_labels_are_class_indices(dtype):
    """uint8 labels could not be compared with ignore_index = -100 (OverflowError)."""
    z = np.random.default_rng(0).standard_normal((3, 4))
    labels = np.array([3, 0, 2])
    want = F.cross_entropy(z, labels, reduction="none").numpy()
    for backend in [None, "numpy"]:
        fn = lambda z, y: F.cross_entropy(z, y, reduction="none")
        fn = tg.trace(fn, backend=backend) if backend else fn
        np.testing.assert_array_equal(fn(z, labels.astype(dtype)).numpy(), want)
    np.testing.assert_array_equal(F.nll_loss(z, labels.astype(dtype)).numpy(),
                                  F.nll_loss(z, labels).numpy())  # fmt: skip
    with pytest.raises(ValueError, match="found 4"):
        F.cross_entropy(z, np.array([3, 4, 0], dtype))


OUT_OF_RANGE = {  # each accepted before, reading or training a wrong row (PyTorch raises)
    "embedding -1": (lambda: F.embedding(np.array([[0, -1]]), np.ones((3, 2))), "found -1"),
    "embedding n": (lambda: F.embedding(np.array([3]), np.ones((3, 2))), r"\[0, 3\), found 3"),
    "nll_loss -1": (lambda: F.nll_loss(np.zeros((2, 3)), np.array([0, -1])), "found -1"),
    "one_hot 7": (lambda: F.one_hot(tg.tensor(np.array([0, 7])), 5), r"\[0, 5\), found 7"),
    "one_hot -1": (lambda: F.one_hot(tg.tensor(np.array([0, -1]))), "found -1"),
}


@pytest.mark.parametrize("case", OUT_OF_RANGE)
def test_out_of_range_indices_raise(case):
    fn, message = OUT_OF_RANGE[case]
    what = case.split()[0]
    with pytest.raises(ValueError, match=rf"{what}: .*must lie in .*{message}.*test_functional"):
        fn()
    if what != "one_hot" or "7" in case:  # one_hot without num_classes needs concrete values
        with pytest.raises(ValueError, match=rf"{what}: .*must lie in .*{message}"):
            tg.trace(fn, backend="numpy")()


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.int64, np.bool_])
def test_avg_pool2d_refuses_integers(dtype):
    """uint8 windows summed in uint8: 200 + 200 gave 144. PyTorch refuses integer input (but
    int64, whose averages it truncates); so does tracegrad, naming the fix."""
    x = np.full((1, 1, 2, 2), 200).astype(dtype)
    with pytest.raises(TypeError, match=f"avg_pool2d: input must be floating, not torch.{x.dtype}"):
        F.avg_pool2d(x, 2)
    np.testing.assert_array_equal(F.avg_pool2d(x.astype(np.float32), 2).numpy(), np.mean(x))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_and_nll_loss_take_pytorchs_k_dimensional_form(reduction):
    """(N, C, d1, d2) scores and (N, d1, d2) classes: one row per position, as PyTorch's."""
    rng = np.random.default_rng(0)
    x, t = rng.standard_normal((2, 3, 4, 2)), rng.integers(0, 3, (2, 4, 2))
    w = rng.random(3) + 0.5
    rows, labels = x.transpose(0, 2, 3, 1).reshape(-1, 3), t.reshape(-1)
    options = dict(ignore_index=1, reduction=reduction)
    for loss, pre in ((F.cross_entropy, lambda a: a), (F.nll_loss, lambda a: F.log_softmax(a, 1))):
        got = loss(pre(tg.tensor(x)), tg.tensor(t), tg.tensor(w), **options).numpy()
        want = loss(pre(tg.tensor(rows)), tg.tensor(labels), tg.tensor(w), **options).numpy()
        np.testing.assert_allclose(got, want.reshape(got.shape), rtol=1e-12)
        check_grad(lambda a: loss(pre(a), tg.tensor(t), tg.tensor(w), **options).sum(), x)
    torch = pytest.importorskip("torch")
    a, b = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    mine = F.cross_entropy(a, tg.tensor(t), tg.tensor(w), label_smoothing=0.2, **options)
    theirs = torch.nn.functional.cross_entropy(b, torch.tensor(t), torch.tensor(w),
                                               label_smoothing=0.2, **options)  # fmt: skip
    mine.sum().backward()
    theirs.sum().backward()
    np.testing.assert_allclose(mine.numpy(), theirs.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_gumbel_softmax_samples_the_categorical_and_passes_the_soft_gradient():
    tg.manual_seed(0)
    probs = np.array([0.1, 0.6, 0.3])
    logits = tg.tensor(np.log(probs)[None].repeat(20000, 0), requires_grad=True)
    hard = F.gumbel_softmax(logits, tau=0.5, hard=True)
    assert set(np.unique(hard.numpy())) == {0.0, 1.0} and (hard.numpy().sum(1) == 1).all()
    # argmax of logits + Gumbel noise is a draw of the categorical: 4 standard errors
    np.testing.assert_allclose(hard.numpy().mean(0), probs, atol=4 * np.sqrt(0.25 / 20000))
    (hard * tg.tensor([1.0, 2.0, 3.0])).sum().backward()  # straight through: the soft one's
    tg.manual_seed(0)
    soft_logits = tg.tensor(np.log(probs)[None].repeat(20000, 0), requires_grad=True)
    soft = F.gumbel_softmax(soft_logits, tau=0.5)
    (soft * tg.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(logits.grad.numpy(), soft_logits.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(soft.numpy().sum(1), 1.0, rtol=1e-6)
    step = tg.trace(lambda z: F.gumbel_softmax(z, hard=True))
    first, second = step(tg.zeros((50, 4))).numpy(), step(tg.zeros((50, 4))).numpy()
    assert not np.array_equal(first, second)  # fresh noise at every call


def test_norms_of_a_float16_input_with_float32_parameters_answer_in_float16():
    """PyTorch's mixed-precision norms (CLIP's `convert_weights`): computed in float32, the
    result and the input's gradient float16, the running statistics float32; the values those of
    the float32 input rounded (and PyTorch's, where installed)."""
    rng = np.random.default_rng(0)
    x16 = rng.standard_normal((2, 4, 3, 3)).astype(np.float16)
    for make in (lambda: nn.BatchNorm2d(4), lambda: nn.GroupNorm(2, 4), lambda: nn.LayerNorm(3)):
        half, full = make(), make()
        x = tg.tensor(x16, requires_grad=True)
        y = half(x)
        y.astype(np.float32).sum().backward()
        assert y.dtype == np.float16 and x.grad.dtype == np.float16
        want = full(tg.tensor(x16.astype(np.float32))).numpy().astype(np.float16)
        np.testing.assert_array_equal(y.numpy(), want)
        if isinstance(half, nn.BatchNorm2d):
            assert half.running_mean.dtype == np.float32
            np.testing.assert_allclose(half.running_mean.numpy(), full.running_mean.numpy())


@pytest.mark.parametrize("name", ["log_softmax", "softmax"])
def test_softmaxes_are_one_op_eagerly_and_their_parts_traced(rng, name):
    """One tape node eagerly (its parts were five Python calls each way); a traced step records
    the parts, and gives the eager values and gradients."""
    x0, c = rng.standard_normal((5, 7)), rng.standard_normal((5, 7))
    f = getattr(F, name)
    x = tg.tensor(x0, requires_grad=True)
    out = f(x, dim=1)
    assert out.grad_fn.prim.name == name
    assert out.grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"
    (out * c).sum().backward()

    xt = tg.tensor(x0, requires_grad=True)

    @tg.trace
    def step(x):
        y = f(x, dim=1)
        (y * c).sum().backward()
        return y

    np.testing.assert_allclose(step(xt).numpy(), out.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(xt.grad.numpy(), x.grad.numpy(), rtol=1e-12, atol=1e-15)
    assert name not in {n.op for n in step.latest.graph.nodes}
