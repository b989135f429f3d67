"""The tensor methods and functions PyTorch training code uses: in-place methods by PyTorch's
rules, `x[i] = v`, `.data`, `__format__`, devices, the constructors' PyTorch arguments,
`multinomial`, scatter and the mask operators. Values and gradients against PyTorch in float64
(skipped without it), and the rules that hold without it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tests.conftest import check_grad, eager_or_traced, traced_matches_eager
from tracegrad.compiler import lowering

R = np.random.default_rng(7)
X, Y, Z = R.standard_normal((3, 4)), R.standard_normal((3, 4)), R.standard_normal((3, 4))
POSITIVE = np.abs(Z) + 0.5
MASK = X > 0.2
INDEX = np.array([[0, 2, 1, 0], [2, 0, 0, 1]])


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")


def run(lib, fn, arrays):
    """fn(lib, *tensors): its value and the gradients of (value * c).sum() in the float
    inputs."""
    xs = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = fn(lib, *xs)
    value = out.detach().numpy().copy()
    grads = []
    if out.dtype == (np.float64 if lib is tg else lib.float64) and out.requires_grad:
        c = np.cos(np.arange(out.numel())).reshape(tuple(out.shape))
        (out * lib.tensor(c)).sum().backward()
        grads = [None if x.grad is None else x.grad.numpy() for x in xs]
    return value, grads


# fn(lib, *tensors), and the arrays it takes
CASES = {
    "add alpha": (lambda t, x, y: x.add(y, alpha=2.5) + t.add(x, 1.0, alpha=-2), (X, Y)),
    "sub alpha": (lambda t, x, y: x.sub(y, alpha=-0.5) * t.sub(y, x, alpha=3), (X, Y)),
    "div floor": (lambda t, x, y: x.div(y, rounding_mode="floor"), (X, POSITIVE)),
    "div trunc": (lambda t, x, y: t.div(x * 3, y, rounding_mode="trunc"), (X, POSITIVE)),
    "addcmul": (lambda t, x, y, z: x.addcmul(y, z, value=0.3), (X, Y, Z)),
    "addcdiv": (lambda t, x, y, z: t.addcdiv(x, y, z, value=-0.7), (X, Y, POSITIVE)),
    "lerp": (lambda t, x, y, z: x.lerp(y, 0.3) + t.lerp(x, y, z), (X, Y, Z)),
    "masked_fill": (lambda t, x, m: x.masked_fill(m, -1.5) + t.masked_fill(x, ~m, 2.0),
                    (X, MASK)),
    "views": (lambda t, x, y: x.view_as(y.t()) + y.t().reshape_as(x.t()), (X, Y)),
    "expand_as, type_as": (lambda t, x, y: x[:1].expand_as(y).type_as(y) * y, (X, Y)),
    "gather": (lambda t, x, i: x.gather(1, i[:, :3]).sum() + t.gather(x, 0, i), (X, INDEX)),
    "scatter": (lambda t, x, i, y: x.scatter(1, i[:, :2], y[:2, :2]), (X, INDEX[:, [0, 2]], Y)),
    "scatter value": (lambda t, x, i: t.scatter(x, 0, i, 0.5), (X, INDEX)),
    "scatter_add": (lambda t, x, i, y: x.scatter_add(0, i, y[:2]), (X, INDEX, Y)),
    "index_fill": (lambda t, x, i: x.index_fill(1, i, -2.0), (X, np.array([0, 3]))),
    "tril, triu": (lambda t, x: x.tril(1) - t.triu(x, -1) * 2, (X,)),
    "relu, clamp_min": (lambda t, x: x.relu() + t.relu(x) * x.clamp_min(0.1), (X,)),
    "topk": (lambda t, x: x.topk(2, dim=1).values.sum() + t.topk(x, 1, 0, False).values,
             (X,)),
    "argmax keepdim": (lambda t, x, y: y.gather(1, x.argmax(dim=1, keepdim=True)), (X, Y)),
    "masks": (lambda t, x, y: ((x > 0) & (y < 0) | ~(x > 1) ^ (y > 0)).float() * x, (X, Y)),
    "logical": (lambda t, x, y: t.logical_or(x > 0, t.logical_not(y > 0)).double(), (X, Y)),
    "all, any": (lambda t, x: t.stack([(x > -1).all(1), (x > 1).any(dim=1)]).long(), (X,)),
    "softmax, log_softmax": (lambda t, x: x.softmax(-1) + x.log_softmax(dim=0), (X,)),
    "*_like, new_*": (lambda t, x: x + t.ones_like(x) + t.full_like(x, 2.0) + x.new_ones(4)
                      + x.new_zeros((3, 4)) + x.new_full((3, 1), 0.5) + x.new_tensor([1.0]), (X,)),
    # in-place ops on tensors autograd tracks, which PyTorch accepts
    "in place chain": (lambda t, x, y: (x * 1.0).add_(y, alpha=2).mul_(y).clamp_(-1, 1), (X, Y)),
    "in place elementwise": (lambda t, x: (x * 1.0).neg_().mul_(3.0).add_(1.0).sigmoid_(),
                             (X,)),
    "in place addcmul_, lerp_": (lambda t, x, y, z: (x * 1.0).addcmul_(y, z).lerp_(z, 0.25)
                                 .addcdiv_(y, z.abs() + 1, value=0.5), (X, Y, Z)),
    "masked_fill_": (lambda t, x, m: (x * 2).masked_fill_(m, 0.0), (X, MASK)),
    "copy_ into a constant": (lambda t, x: t.zeros(3, 4, dtype=t.float64).copy_(x * 2), (X,)),
    "zero_ cuts the history": (lambda t, x: (x * 2).zero_() + x, (X,)),
    "+= and *=": (lambda t, x, y: _augmented(x * 1.0, y), (X, Y)),
    # x[index] = value
    "setitem slices": (lambda t, x, y: _set(t.zeros(3, 4, dtype=t.float64), (slice(None),
                                            slice(0, None, 2)), x[:, :2] * 2), (X, Y)),
    "setitem mask": (lambda t, x, m: _set(x * 1.0, m, 0.5), (X, MASK)),
    "setitem computed mask": (lambda t, x, y: _set(x * 1.0, x > y, y.sum()), (X, Y)),
    "setitem mask values": (lambda t, x, y, m: _set(x * 1.0, m, y[m] * 3), (X, Y, MASK)),
    "setitem rows": (lambda t, x, y: _set(x * 1.0, t.tensor([2, 0]), y[:2]), (X, Y)),
    "setitem broadcast": (lambda t, x, y: _set(x * 1.0, (slice(None), 1), y[0, :3]), (X, Y)),
    "setitem int": (lambda t, x, y: _set(x * 1.0, (1, 2), y[0, 0]), (X, Y)),
}  # fmt: skip


def _set(x, index, value):
    x[index] = value
    return x


def _augmented(h, y):
    h += y
    h *= y
    h -= 1.0
    h /= 2.0
    return h


@pytest.mark.parametrize("case", CASES)
def test_values_and_gradients_match_pytorch(case):
    torch = torch_or_skip()
    fn, arrays = CASES[case]
    (value, grads), (want, want_grads) = run(tg, fn, arrays), run(torch, fn, arrays)
    assert value.dtype == want.dtype, (value.dtype, want.dtype)
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-14)
    assert len(grads) == len(want_grads)
    for g, w in zip(grads, want_grads, strict=True):
        if g is None or w is None:  # no gradient (floor): PyTorch's zeros, or none
            assert not np.any(w) and not np.any(g)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


GRADIENT_CASES = ["add alpha", "addcmul", "scatter", "scatter_add", "in place chain",
                  "in place addcmul_, lerp_", "setitem slices", "setitem computed mask",
                  "setitem mask values", "setitem rows", "+= and *="]  # fmt: skip


@pytest.mark.parametrize("case", GRADIENT_CASES)
def test_gradients_match_finite_differences(case):
    from tests.conftest import numeric_grad

    fn, arrays = CASES[case]
    _, grads = run(tg, fn, arrays)
    for i, a in enumerate(arrays):
        if a.dtype.kind != "f" or grads[i] is None:
            continue

        def f(v, i=i):
            args = [tg.tensor(b) for b in arrays]
            args[i] = tg.tensor(v)
            out = fn(tg, *args)
            return float((out * np.cos(np.arange(out.numel())).reshape(out.shape)).sum())

        np.testing.assert_allclose(grads[i], numeric_grad(f, a), rtol=1e-5, atol=1e-7)


# --- the in-place rules ---------------------------------------------------------------------


def test_a_leaf_that_requires_grad_refuses_in_place_ops_outside_no_grad():
    w = tg.tensor(np.ones(3), requires_grad=True)
    for update in (lambda: w.add_(1.0), lambda: w.zero_(), lambda: w.__setitem__(0, 2.0)):
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad"):
            update()
    with tg.no_grad():
        w.add_(tg.tensor(np.arange(3.0)), alpha=2).mul_(2.0)
        w[0] = -1.0
    assert w.numpy().tolist() == [-1.0, 6.0, 10.0] and w.requires_grad and w.is_leaf


def test_an_in_place_write_of_a_saved_value_raises_at_backward():
    """Under no_grad the write goes into the array (an optimizer's update): a backward that
    needs the value it replaced raises, as PyTorch's does."""
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    with tg.no_grad():
        w.sub_(0.5)
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def test_in_place_arithmetic_writes_the_array_itself():
    """`buf *= m` on an untracked tensor (an optimizer's state) computes into its array: the
    array and its aliases hold the result, the version moves, other dtypes are cast."""
    buf = tg.tensor(np.array([1.0, 2.0, 3.0], np.float32))
    array, alias = buf.numpy(), buf.data
    buf *= tg.tensor(np.float32(2.0))
    buf += 1.0
    buf -= tg.tensor(np.array([0.5, 0.5, 0.5]))  # float64: the general path, cast to float32
    assert buf.numpy() is array and buf.dtype == np.float32
    np.testing.assert_array_equal(alias.numpy(), [2.5, 4.5, 6.5])
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    with tg.no_grad():
        w *= 0.5
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()


def test_an_in_place_op_on_a_tracked_tensor_keeps_what_backward_saved():
    """PyTorch raises here (exp saved its output, which add_ overwrites); tracegrad's in-place
    op gives the tensor a new value and history, so backward has what exp saved."""
    x = tg.tensor(np.array([0.0, 1.0]), requires_grad=True)
    h = x.exp()
    alias = h
    version = h._version[0]
    h.add_(1.0)
    assert alias is h and h._version[0] == version + 1 and h.grad_fn is not None
    np.testing.assert_allclose(h.numpy(), np.exp([0.0, 1.0]) + 1)
    (h * h).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (np.exp([0.0, 1.0]) + 1) * np.exp([0.0, 1.0]))


def test_an_untracked_tensor_given_a_tracked_value_joins_the_graph():
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    pe = tg.zeros(2, 4, dtype=np.float64)
    pe[:, 0::2] = tg.sin(w)[:, None]
    assert not pe.is_leaf and pe.requires_grad
    pe.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * np.cos([1.0, 2.0]))


def test_in_place_ops_keep_shape_and_dtype():
    x = tg.zeros(2, 3)
    with pytest.raises(tg.ShapeError, match="keeps the shape"):
        x.add_(tg.ones(4, 2, 3))
    i = tg.zeros(3, dtype=np.int64)
    with pytest.raises(TypeError, match="can't be cast"):
        i.add_(0.5)
    assert x.add_(tg.ones(3)).dtype == np.float32 and x.numpy().tolist() == [[1.0] * 3] * 2
    assert (
        i.fill_(2).numpy().tolist() == [2, 2, 2] and i.copy_(tg.ones(3) * 1.7).tolist() == [1] * 3
    )
    mask = tg.zeros(2, dtype=np.bool_)
    assert mask.fill_(1).tolist() == [True, True]


def test_data_writes_its_tensor_and_can_be_replaced():
    p = tg.nn.Parameter(tg.tensor(np.array([1.0, 2.0])))
    p.grad = tg.tensor(np.array([0.5, 0.5]))
    p.data.add_(p.grad, alpha=-2.0)  # word_language_model's manual SGD
    assert p.numpy().tolist() == [0.0, 1.0] and p.requires_grad
    assert not p.data.requires_grad and np.shares_memory(p.data.numpy(), p.numpy())
    p.data = tg.tensor(np.array([3.0, 4.0]))
    assert p.numpy().tolist() == [3.0, 4.0]
    p.data = tg.zeros(5, dtype=np.float64)
    assert p.shape == (5,) and p.requires_grad


def test_add_with_alpha_in_place_writes_the_array_and_counts_the_write():
    """`p.data.mul_(d).add_(q, alpha=1 - d)` (an EMA, a target network's soft update) computes
    in the tensor's own array, as `x + alpha * y` rounds; the write is counted, so a value saved
    for backward and changed since is refused; an alias whose tensor took other memory since
    (`p.data = x` after `d = p.data`) writes its own, as in PyTorch, and p holds x's memory."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4))
    p, q = tg.nn.Parameter(tg.tensor(a)), tg.tensor(b.astype(np.float32))
    before = p.numpy()
    with tg.no_grad():
        p.data.mul_(0.99).add_(q, alpha=0.01)
    expected = (a * np.float32(0.99)) + (b.astype(np.float32) * np.float32(0.01))
    np.testing.assert_array_equal(p.numpy(), expected)
    assert np.shares_memory(p.numpy(), before)  # in place
    y = (p * p).sum()  # saves p
    p.data.sub_(q, alpha=0.5)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()
    stale, old = p.data, p.numpy().copy()
    zeros = tg.tensor(np.zeros((3, 4), np.float32))
    p.data = zeros
    stale.add_(q, alpha=2.0)
    np.testing.assert_array_equal(p.numpy(), np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(stale.numpy(), old + np.float32(2.0) * b.astype(np.float32))
    zeros.add_(1.0)  # p shares x's memory
    np.testing.assert_array_equal(p.numpy(), np.ones((3, 4), np.float32))


def test_fills_and_copies_write_the_array_itself_broadcast_and_cast():
    """`x.zero_()`, `fill_`, `copy_` of an untracked value copy into the tensor's array,
    broadcasting and casting as PyTorch's: aliases and views' bases see it, the write is
    counted, and what the array cannot take is refused as before."""
    x = tg.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    array, alias, row = x.numpy(), x.data, x[1]
    x.copy_(tg.tensor(np.array([0.1, 0.2, 0.3])))  # float64, broadcast over the rows
    np.testing.assert_array_equal(array, np.tile(np.array([0.1, 0.2, 0.3], np.float32), (2, 1)))
    row.fill_(7.0)
    alias[0].zero_()
    assert x.numpy() is array
    np.testing.assert_array_equal(array, [[0, 0, 0], [7, 7, 7]])
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    w.data.zero_()
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    with pytest.raises(RuntimeError, match="requires grad cannot be changed in place"):
        w.zero_()
    assert x.fill_(0.1) is x and (array == np.float32(0.1)).all()  # made in float32, once
    counts = tg.tensor(np.arange(3, dtype=np.uint8))
    np.testing.assert_array_equal(counts.fill_(2.7).numpy(), [2, 2, 2])  # cast as NumPy's
    with pytest.raises(tg.ShapeError, match="does not broadcast"):
        x.copy_(tg.tensor(np.zeros(4)))
    with pytest.raises(TypeError, match="can't be cast"):
        tg.tensor(np.zeros(2, np.int64)).add_(tg.tensor(np.ones(2)))


def test_assignment_by_a_basic_index_or_a_mask_matches_numpy():
    """`x[index] = value` of untracked values goes straight into the array: the same result as
    NumPy's assignment (Python numbers at the tensor's precision, values cast, leading ones
    dropped), the write counted and seen by views, bad indices and shapes refused by name."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5))
    cases = [
        ((slice(None), 0), 0.1),
        (2, rng.standard_normal(5)),
        ((Ellipsis, slice(1, 4, 2)), rng.standard_normal((4, 2)).astype(np.float32)),
        ((None, slice(None, None, 2)), rng.standard_normal((1, 1, 5))),
        ((), 3),
        ((1, 2), True),
    ]
    for dtype in (np.float64, np.float32, np.int64):
        for index, value in cases:
            x = tg.tensor(a.astype(dtype))
            expected = a.astype(dtype)
            expected[index] = value
            x[index] = tg.tensor(value) if isinstance(value, np.ndarray) else value
            assert x.dtype == dtype
            np.testing.assert_array_equal(x.numpy(), expected)
    x, mask = tg.tensor(a), tg.tensor(a > 0)
    base = x.numpy()
    x[mask] = 0.0
    x[tg.tensor(a[:, 0] < 0)] = tg.tensor(np.full(5, 2.0))
    expected = np.where(a > 0, 0.0, a)
    expected[a[:, 0] < 0] = 2.0
    np.testing.assert_array_equal(x.numpy(), expected)
    assert x.numpy() is base
    x.t()[0] = -1.0  # a view's write is its base's
    np.testing.assert_array_equal(x.numpy()[:, 0], -1.0)
    w = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)
    loss = (w * w).sum()
    with tg.no_grad():
        w[0] = 5.0
    with pytest.raises(RuntimeError, match="modified in place"):
        loss.backward()
    with pytest.raises(IndexError):
        x[4] = 1.0
    with pytest.raises(tg.ShapeError):
        x[0] = tg.tensor(np.zeros(3))


@pytest.mark.parametrize("backend", [None, "numpy"])
def test_data_written_in_place_with_a_tracked_value_writes_its_tensor(backend, monkeypatch):
    """vector-quantize-pytorch's EMA codebook: `buf.data.lerp_(new, 0.2)` with `new` computed
    from the batch outside no_grad; the buffer takes the values, and `.data` the history."""
    buf = tg.zeros(3, dtype=np.float64)
    w = tg.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)

    def step():
        alias = buf.data
        alias.lerp_(w * 2, 0.5)
        buf.data.copy_(buf * 3 + w)  # (3 * w) + w: as PyTorch's, where both share the storage
        assert alias.requires_grad and not buf.requires_grad
        return (w * 1).sum()

    eager_or_traced(step, backend, monkeypatch)()
    np.testing.assert_allclose(buf.numpy(), [4.0, 8.0, 12.0])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_steps_with_data_updates_and_masked_writes_match_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)

    def make():
        w = tg.tensor(X.copy(), requires_grad=True)

        def step(x):
            h = x @ w.T
            h[h < 0] = 0.0  # a traced mask: a where
            loss = (h * h).mean()
            w.grad = None
            loss.backward()
            w.data.add_(w.grad, alpha=-0.1)
            return loss

        return w, step

    (w1, eager), (w2, traced) = make(), make()
    traced = tg.trace(traced, backend=backend)
    for k in range(3):
        x = tg.tensor(Y + k)
        np.testing.assert_allclose(float(traced(x)), float(eager(x)), rtol=1e-12)
        np.testing.assert_allclose(w2.numpy(), w1.numpy(), rtol=1e-12)
    assert sum(len(p) for p in traced.plans.values()) == 2  # w.grad None at first, then set


def chained_writes(lib, w):
    """Writes through views: a CRF's `alphas[0][start] = 0.`, char-rnn's one-hot
    `t[i][0][k] = 1`, a row written from a tracked value and one updated in place."""
    alphas = lib.full((1, 5), -100.0, dtype=lib.float64)
    alphas[0][3] = 0.0
    onehot = lib.zeros(4, 1, 5, dtype=lib.float64)
    for i, k in enumerate([1, 4, 0, 2]):
        onehot[i][0][k] = 1.0
    grid = lib.zeros(2, 5, dtype=lib.float64)
    grid[1][2] = w[0] * 3.0
    row = grid[0]
    row += w
    return (alphas * w).sum() + (onehot * w).sum() + (grid * w).sum()


@pytest.mark.parametrize("backend", ["eager", "numpy"])
def test_a_write_into_a_view_writes_its_base(backend):
    """Basic indexing gives views (NumPy's and PyTorch's): a write into one, or into a view of
    one, writes the tensor indexed, also where autograd records the write (the view then holds
    a value of its own) and in a traced step (every write does). Values and gradients against
    the same function written with one index per write."""

    def direct(w):
        alphas = tg.full((1, 5), -100.0, dtype=tg.float64)
        alphas[0, 3] = 0.0
        onehot = tg.zeros(4, 1, 5, dtype=tg.float64)
        onehot[[0, 1, 2, 3], 0, [1, 4, 0, 2]] = 1.0
        grid = tg.zeros(2, 5, dtype=tg.float64)
        grid[1, 2] = w[0] * 3.0
        grid[0] = grid[0] + w
        return (alphas * w).sum() + (onehot * w).sum() + (grid * w).sum()

    def value_and_grad(f, calls=1):
        w = tg.tensor(np.arange(1.0, 6.0), requires_grad=True)
        for _ in range(calls):
            loss = f(w)
        return float(loss), w.grad.numpy()

    run = _eager(lambda w: chained_writes(tg, w))
    run = run if backend == "eager" else tg.trace(run, backend=backend)
    got, want = value_and_grad(run, calls=3), value_and_grad(_eager(direct))
    assert got[0] == pytest.approx(want[0], rel=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def _eager(f):
    def step(w):
        w.grad = None
        loss = f(w)
        loss.backward()
        return loss

    return step


def test_shape_changing_in_place_methods():
    """char-rnn's `target.unsqueeze_(-1)`; `t_`, `squeeze_`, `transpose_` as PyTorch's: the
    tensor itself takes the new shape, and its gradient flows; a leaf that requires grad
    refuses."""
    x = tg.tensor([1, 2, 3])
    assert x.unsqueeze_(-1) is x and x.shape == (3, 1)
    m = tg.ones(2, 3)
    assert m.t_().shape == (3, 2) and m.transpose_(0, 1).shape == (2, 3)
    assert tg.ones(1, 3, 1).squeeze_().shape == (3,)
    w = tg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = w * 2.0
    h.unsqueeze_(0)
    (h * tg.tensor([[1.0, 10.0, 100.0]])).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 20.0, 200.0])
    with pytest.raises(RuntimeError, match="unsqueeze_: a leaf tensor that requires grad"):
        w.unsqueeze_(0)

    @tg.trace(backend="numpy")
    def step(target):  # char-rnn's `target_line_tensor.unsqueeze_(-1)` of its argument
        target.unsqueeze_(-1)
        return target * 2

    with pytest.raises(tg.TraceError, match="cannot change the caller's tensor's shape"):
        step(tg.tensor([1, 2, 3]))


def test_a_missing_method_says_what_and_where():
    x = tg.ones(2)
    with pytest.raises(AttributeError) as e:
        x.to_sparse_csr()
    line = __import__("sys")._getframe().f_lineno - 1
    assert str(e.value).startswith(
        f"Tensor.to_sparse_csr is not provided by tracegrad (used at test_mutation.py:{line})"
    )
    assert not hasattr(x, "__array_interface__") and not hasattr(x, "_no_such")


def test_format_of_a_0d_tensor_is_its_number():
    loss = tg.tensor(1.23456)
    assert f"{loss:.4f}" == "1.2346" and "{:+.2f}".format(tg.tensor(-0.5)) == "-0.50"  # noqa: UP032
    assert "{}".format(tg.ones(2)) == repr(tg.ones(2))  # noqa: UP032
    with pytest.raises(TypeError, match="only a 0-d tensor"):
        f"{tg.ones(2):.2f}"


# --- devices, dtypes and constructors ---------------------------------------------------------


def test_tensors_are_on_the_cpu_and_other_devices_raise():
    x = tg.ones(2)
    assert str(x.device) == "cpu" and not x.is_cuda and not x.is_xpu and x.get_device() == -1
    assert x.to("cpu") is x and x.cpu() is x and x.pin_memory() is x
    assert x.to("cpu", np.float64, non_blocking=True).dtype == np.float64
    assert x.to(tg.zeros(1, dtype=np.int64)).dtype == np.int64
    moves = (lambda: x.cuda(), lambda: x.to("cuda"), lambda: x.to("cuda:1", np.float64),
             lambda: tg.zeros(2, device="cuda"), lambda: tg.randn(2, device="mps"))  # fmt: skip
    for move in moves:
        with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
            move()


def test_constructors_take_pytorch_arguments():
    assert tg.zeros(2, 3, device="cpu", requires_grad=True).requires_grad
    assert tg.empty((2,), dtype=np.int64).dtype == np.int64 and tg.empty(3).shape == (3,)
    assert tg.arange(0, 4, dtype=np.int64, device="cpu").tolist() == [0, 1, 2, 3]
    tg.manual_seed(0)
    a = tg.randint(5, (100,))
    b = tg.randint(3, 5, size=(100,))
    assert a.dtype == np.int64 and 0 <= a.min() and a.max() < 5 and set(b.tolist()) == {3, 4}
    x = tg.ones(2, 3, dtype=np.float64)
    for like in (tg.randn_like(x), tg.rand_like(x), tg.zeros_like(x), tg.empty_like(x)):
        assert like.shape == (2, 3) and like.dtype == np.float64
    assert tg.randint_like(x, 7).dtype == np.float64 and tg.randint_like(x, 7).max() < 7
    np.testing.assert_allclose(tg.logspace(0, 2, 3, base=2).numpy(), [1.0, 2.0, 4.0])
    into = tg.ones(2, dtype=np.float64)
    assert tg.zeros(2, out=into) is into and into.tolist() == [0.0, 0.0]  # PyTorch's out=


def test_the_default_dtype_governs_floats_and_new_parameters():
    assert tg.get_default_dtype() == np.float32
    tg.set_default_dtype(np.float64)
    try:
        for t in (tg.tensor([1.0]), tg.zeros(2), tg.randn(2), tg.full((2,), 1.5),
                  tg.arange(0.0, 1.0, 0.5), tg.nn.Linear(2, 3).weight):  # fmt: skip
            assert t.dtype == np.float64
        assert tg.tensor([1]).dtype == np.int64 and tg.ones(2, dtype=np.float32).dtype == np.float32
    finally:
        tg.set_default_dtype(np.float32)
    assert tg.zeros(2).dtype == np.float32
    with pytest.raises(TypeError, match="only floating-point types"):
        tg.set_default_dtype(np.int64)


def test_type_names_and_small_methods():
    x = tg.ones(2, 3)
    assert x.type() == "torch.FloatTensor" and x.long().type() == "torch.LongTensor"
    assert x.type("torch.DoubleTensor").dtype == np.float64 and x.type(np.int32).dtype == np.int32
    assert x.element_size() == 4 and x.nelement() == 6 and x.ndimension() == 2
    assert x.is_floating_point() and not x.long().is_floating_point() and x.is_contiguous()
    assert x.contiguous() is x and x.clone() is not x
    h = tg.tensor(np.ones(2), requires_grad=True) * 2
    assert h.detach_() is h and h.is_leaf and not h.requires_grad


# --- sampling ---------------------------------------------------------------------------------


def test_multinomial_draws_by_the_weights():
    tg.manual_seed(1)
    p = tg.tensor(np.array([[0.2, 0.5, 0.3, 0.0], [1.0, 1.0, 0.0, 2.0]]))
    draws = tg.multinomial(p, 20000, replacement=True).numpy()
    assert draws.shape == (2, 20000) and draws.dtype == np.int64
    for row, weights in zip(draws, p.numpy(), strict=True):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, weights / weights.sum(), atol=0.015)
    distinct = p.multinomial(3).numpy()
    assert all(len(set(r)) == 3 and 3 not in r[:3] for r in distinct[:1])
    assert 2 not in distinct[1]
    first = [tg.multinomial(tg.tensor([0.1, 0.0, 0.9]), 1).item() for _ in range(200)]
    assert set(first) == {0, 2} and first.count(2) > 150
    with pytest.raises(ValueError, match="without replacement"):
        tg.multinomial(tg.tensor([0.5, 0.5]), 3)
    with pytest.raises(ValueError, match="sums to 0"):
        tg.multinomial(tg.zeros(1, 3), 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_multinomial_with_replacement_inverts_the_running_sums(dtype):
    """Draws with replacement (a Categorical's `sample`) are Philox's uniform numbers from the
    state, scaled by each row's total and placed among the running sums, a NumPy reference
    here; zero weights are never drawn, and the state moves on by one stream."""
    rng = np.random.default_rng(0)
    p = rng.random((3, 6)).astype(dtype)
    p[:, 2] = 0.0
    tg.manual_seed(42)
    got = tg.multinomial(tg.tensor(p), 50, replacement=True).numpy()
    u = np.random.Generator(np.random.Philox(key=42, counter=[0, 0, 0, 0])).random(
        (3, 50), dtype=dtype
    )
    cdf = np.cumsum(p.astype(np.float64), -1).astype(dtype)
    expected = np.minimum((cdf[:, None, :] <= (u * cdf[:, -1:])[:, :, None]).sum(-1), 5)
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.int64 and not (got == 2).any()
    second = tg.multinomial(tg.tensor(p), 50, replacement=True).numpy()
    assert not np.array_equal(second, got)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_multinomial_traced_draws_afresh_and_as_eager(backend):
    probs = tg.tensor(np.array([[0.3, 0.3, 0.4], [0.9, 0.05, 0.05]]))

    def draw(p):
        return tg.multinomial(p, 2), tg.multinomial(p, 4, replacement=True)

    got = drawn_as_eager(draw, probs, backend, calls=3, seed=5)
    assert any(not np.array_equal(got[0][1], g[1]) for g in got[1:])  # fresh draws


def drawn_as_eager(draw, arg, backend, calls, seed):
    """The draws of `calls` traced calls of `draw(arg)`, checked against as many eager ones
    from the same seed."""
    traced = tg.trace(draw, backend=backend)
    tg.manual_seed(seed)
    eager = [[t.numpy() for t in draw(arg)] for _ in range(calls)]
    tg.manual_seed(seed)
    got = [[t.numpy() for t in traced(arg)] for _ in range(calls)]
    for a, b in zip(got, eager, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6)
    return got


def test_random_fills_and_bernoulli():
    tg.manual_seed(2)
    x = tg.zeros(4000, dtype=np.float64)
    assert x.uniform_(-2.0, 2.0) is x and -2 <= x.min() and x.max() < 2
    assert abs(float(x.mean())) < 0.1
    x.normal_(1.0, 0.5)
    assert abs(float(x.mean()) - 1.0) < 0.05 and abs(float(x.std()) - 0.5) < 0.05
    b = tg.bernoulli(tg.full((4000,), 0.25))
    assert set(b.tolist()) == {0.0, 1.0} and abs(float(b.mean()) - 0.25) < 0.03
    assert x.bernoulli_(0.5).dtype == np.float64 and set(x.tolist()) == {0.0, 1.0}


def test_the_other_random_fills_draw_their_distributions():
    """Each fill against its distribution's known quantiles or moments (20,000 draws)."""
    tg.manual_seed(3)
    x = tg.empty(20000, dtype=np.float64)
    e = x.exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(np.median(e) - np.log(2) / 2) < 0.02
    g = x.geometric_(0.25).numpy()
    assert g.min() == 1 and np.all(g == np.round(g)) and abs(g.mean() - 4.0) < 0.15
    assert abs(np.mean(g == 1) - 0.25) < 0.02
    c = x.cauchy_(1.0, 3.0).numpy()  # quartiles at median -+ sigma
    np.testing.assert_allclose(np.percentile(c, [25, 50, 75]), [-2.0, 1.0, 4.0], atol=0.2)
    ln = np.log(x.log_normal_(0.5, 0.25).numpy())
    assert abs(ln.mean() - 0.5) < 0.01 and abs(ln.std() - 0.25) < 0.01


def test_random_fills_integers_in_the_dtype():
    tg.manual_seed(4)
    x = tg.empty(5000)
    assert set(x.random_(10).tolist()) == set(range(10))
    assert set(x.random_(3, 7).tolist()) == {3.0, 4.0, 5.0, 6.0}
    assert set(x.random_(**{"from": -2, "to": 0}).tolist()) == {-2.0, -1.0}
    top = x.random_().numpy()
    assert top.min() >= 0 and top.max() <= 2**24 and top.max() > 2**23
    i = tg.empty(5000, dtype=tg.int32).random_(0, 5)
    assert i.dtype == np.int32 and set(i.tolist()) == set(range(5))
    assert set(tg.empty(100, dtype=tg.bool).random_().tolist()) == {False, True}
    with pytest.raises(ValueError, match="random_: expects from < to"):
        x.random_(5, 5)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_random_fills_traced_draw_afresh_and_as_eager(backend):
    def draw(x):
        y = x * 1.0
        return y.exponential_(), y.random_(0, 100) + y.cauchy_() * 0

    got = drawn_as_eager(draw, tg.ones(50), backend, calls=2, seed=6)
    assert not np.array_equal(got[0][0], got[1][0])


def test_resize_keeps_the_elements_in_order():
    """resize_ as PyTorch's: the same elements in order, cut, or padded where PyTorch leaves the
    new memory unset (here zeros); resize_as_ takes another tensor's shape."""
    x = tg.arange(6.0)
    assert x.resize_(2, 2) is x
    np.testing.assert_array_equal(x.numpy(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(x.resize_((3, 2)).numpy(), [[0, 1], [2, 3], [0, 0]])
    assert tg.arange(4).resize_as_(tg.zeros(2, 2)).shape == (2, 2)
    w = tg.ones(3, requires_grad=True)
    h = w * tg.tensor([1.0, 2.0, 3.0])
    h.resize_(2)
    h.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 2.0, 0.0])
    with pytest.raises(RuntimeError, match="resize_: a leaf tensor that requires grad"):
        w.resize_(2)


def test_a_value_with_leading_ones_fills_a_smaller_region():
    """makemore's `logits[i] = model(x[[i]])`: a (1, 27) row into a (27,) region, as NumPy and
    PyTorch take it (leading 1s dropped), its gradient shaped as the value."""
    a = tg.zeros(3, 4)
    a[0] = tg.ones(1, 4)
    a[1:3] = tg.full((1, 1, 2, 4), 2.0)
    np.testing.assert_array_equal(a.numpy(), [[1] * 4, [2] * 4, [2] * 4])
    w = tg.ones(1, 4, requires_grad=True)
    b = tg.zeros(3, 4)
    b[2] = w * 3
    b.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((1, 4), 3.0))
    with pytest.raises(tg.ShapeError, match=r"cannot broadcast \(2, 4\) to \(4,\)"):
        a[0] = tg.ones(2, 4)


def test_a_range_indexes_as_an_array():
    x = tg.zeros((3, 4))
    x[range(3), tg.tensor([1, 0, 3])] = 5.0  # one element per row, as x[np.arange(3), y]
    want = np.zeros((3, 4))
    want[np.arange(3), [1, 0, 3]] = 5.0
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(x[range(0, 3, 2)].numpy(), want[0:3:2])


def test_out_writes_the_result_into_the_given_tensor():
    """PyTorch's out=: on primitives, on functions with options and on ones with tuple results;
    the tensor is returned, resized (with PyTorch's warning) where its shape differs."""
    a, b = tg.tensor([1.0, 2.0]), tg.tensor([3.0, 4.0])
    c = tg.empty(2)
    assert tg.mul(a, b, out=c) is c and c.tolist() == [3.0, 8.0]
    assert tg.add(a, b, alpha=2, out=c) is c and c.tolist() == [7.0, 10.0]
    m = tg.empty(0)
    assert tg.matmul(tg.ones(2, 3), tg.ones(3, 2), out=m).tolist() == [[3.0, 3.0]] * 2
    values, indices = tg.empty(3), tg.empty(3, dtype=tg.int64)
    got = tg.max(tg.tensor([[1.0, 5.0], [7.0, 2.0], [0.0, 0.5]]), 1, out=(values, indices))
    assert got.values is values and values.tolist() == [5.0, 7.0, 0.5]
    assert indices.tolist() == [1, 0, 1]
    joined = tg.empty(5)
    with pytest.warns(UserWarning, match="resized"):
        tg.cat([a, b], out=joined)
    assert joined.shape == (4,) and joined.tolist() == [1.0, 2.0, 3.0, 4.0]
    counts = tg.empty(2, dtype=tg.int64)
    with pytest.raises(TypeError, match="can't be cast"):
        tg.mul(a, b, out=counts)


def test_out_refuses_a_result_autograd_would_track():
    w = tg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        tg.mul(w, 2.0, out=tg.empty(2))
    with tg.no_grad():
        assert tg.mul(w, 2.0, out=tg.empty(2)).tolist() == [2.0, 2.0]


def test_out_in_a_traced_step_writes_state_as_eager_does():
    state = tg.zeros(3)

    def step(x):
        tg.add(state, x * 2.0, out=state)
        return state.sum()

    traced = tg.trace(step)
    x = tg.tensor([1.0, 2.0, 3.0])
    for want in (12.0, 24.0, 36.0):
        assert traced(x).item() == want
    assert state.tolist() == [6.0, 12.0, 18.0]


def test_the_deprecated_scale_first_overloads_work_with_a_warning():
    """`p.data.add_(-lr, p.grad.data)` (the old PyTorch tutorials), `x.sub(2, t)`,
    `addcmul_(value, t1, t2)`: PyTorch still takes them, and warns."""
    with pytest.warns(UserWarning, match="deprecated"):
        x = tg.zeros(3)
        x.add_(-0.5, tg.tensor([1.0, 2.0, 3.0]))
    assert x.tolist() == [-0.5, -1.0, -1.5]
    with pytest.warns(UserWarning, match="deprecated"):
        assert tg.ones(2).sub(2, tg.ones(2)).tolist() == [-1.0, -1.0]
    with pytest.warns(UserWarning, match="deprecated"):
        z = tg.ones(2)
        z.addcmul_(2, tg.ones(2), tg.tensor([3.0, 4.0]))
    assert z.tolist() == [7.0, 9.0]
    with pytest.warns(UserWarning, match="deprecated"):
        assert tg.addcdiv(tg.ones(1), 0.5, tg.ones(1), tg.tensor([4.0])).tolist() == [1.125]
    with pytest.raises(TypeError, match="positional"):
        tg.add(tg.ones(1), 2, tg.ones(1), tg.ones(1))


def test_shape_errors_are_runtime_errors_as_in_pytorch():
    with pytest.raises(RuntimeError, match="concatenate|cat"):
        tg.cat([tg.zeros(2, 5), tg.zeros(2, 3)])
    with pytest.raises(ValueError):
        tg.cat([tg.zeros(2, 5), tg.zeros(2, 3)])


def test_comparing_with_none_is_false_as_in_pytorch():
    """`if idx_next == eos_id:` with eos_id None (LLMs-from-scratch's generate) is False."""
    t = tg.tensor([[3]])
    assert (t == None) is False and (t != None) is True  # noqa: E711 (the case itself)
    assert (t == "a") is False and None not in [t]
    assert (t == 3).tolist() == [[True]]


def test_triangles_keep_the_dtype():
    """A causal mask from `triu(ones(n, n, dtype=bool), 1)` stays a bool mask."""
    mask = tg.triu(tg.ones(3, 3, dtype=tg.bool), 1)
    assert mask.dtype == np.bool_ and mask.tolist()[0] == [False, True, True]
    assert tg.tril(tg.ones(2, 2, dtype=tg.int64)).tolist() == [[1, 0], [1, 1]]
    assert tg.zeros(2, 2).masked_fill(mask[:2, :2], -1.0).tolist() == [[0.0, -1.0], [0.0, 0.0]]


def test_pytorchs_exception_types():
    with pytest.raises(IndexError):
        tg.nn.Embedding(3, 2)(tg.tensor([5]))
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(tg.ones(2))
    with pytest.raises(IndexError, match="broadcast"):  # index arrays of 5 and 10 (makemore)
        tg.zeros(5, 27)[tg.arange(5), tg.arange(10)]


def test_a_row_picked_by_a_0d_index_made_in_a_compiled_step_is_its_own():
    """`dC[ix] += demb[k, j]` with `ix = Xb[k, j]` (nn-zero-to-hero's manual backprop): NumPy
    would return a view for a 0-d index array, and the compiled step's update wrote through it
    into its constant zeros, so that the next call started from the first call's row."""

    def step(x):
        d = tg.zeros(3, 2)
        d[x[0]] += 1.0
        return d

    traced = tg.trace(step, backend="numpy")
    for x in ([0], [2], [1]):
        assert traced(tg.tensor(x)).tolist() == step(tg.tensor(x)).tolist()


def test_a_one_element_integer_tensor_of_any_shape_is_an_index():
    """`[char_arr[i] for i in predict]` over an (n, 1, 1) prediction (nlp-tutorial's Seq2Seq)."""
    assert ["S", "E", "P", "a"][tg.tensor([[3]])] == "a"
    with pytest.raises(TypeError, match="single element"):
        ["a", "b"][tg.tensor([0, 1])]
    with pytest.raises(TypeError, match="single element"):
        ["a", "b"][tg.tensor([1.0])]


def test_a_bool_scalar_index_is_a_new_axis_of_size_one_or_zero():
    """x[True] and x[False], as NumPy's and PyTorch's (x[True] read 1 as an int)."""
    a = np.arange(24.0).reshape(2, 3, 4)
    x = tg.tensor(a)
    for index in [True, False, (slice(None), False), (Ellipsis, False, 1), (0, True, 1),
                  (np.True_, slice(1, 2)), (slice(None), np.False_)]:  # fmt: skip
        np.testing.assert_array_equal(x[index].numpy(), a[index], err_msg=str(index))
    np.testing.assert_array_equal(x[tg.tensor(False)].numpy(), a[np.array(False)])
    y = tg.zeros(3)
    y[False] = 5.0
    assert y.tolist() == [0.0] * 3
    y[True] = 7.0
    assert y.tolist() == [7.0] * 3
    check_grad(lambda t: t[True][..., 1:] * t[False].sum(), a)
    traced_matches_eager(lambda t: t[:, True] * 2.0 + t[..., False, 1].sum(), a, backend="numpy")


def test_a_uint8_index_tensor_is_a_mask_as_in_pytorch():
    """PyTorch's (deprecated, with its warning) reading of `x[mask.byte()]` and
    `x[mask.byte()] = v`; tracegrad.numpy.take reads the same tensor as integers, as NumPy."""
    mask = tg.tensor(np.array([1, 0, 1], np.uint8))
    x = tg.tensor([1.0, 2.0, 3.0])
    with pytest.warns(UserWarning, match="uint8 is now deprecated"):
        assert x[mask].tolist() == [1.0, 3.0]
    with pytest.warns(UserWarning, match="uint8"):
        x[mask] = 0.0
    assert x.tolist() == [0.0, 2.0, 0.0]
    assert tnp.take(tg.tensor([1.0, 2.0, 3.0]), mask).tolist() == [2.0, 1.0, 2.0]


def test_a_list_of_sequences_indexes_as_a_tuple_as_in_pytorch():
    """PyTorch still reads `x[[[0, 1], [1, 2]]]` as `x[[0, 1], [1, 2]]` (NumPy's former rule,
    with its deprecation warning); an ndarray is one index; an empty list selects nothing."""
    x = tg.tensor(np.arange(24.0).reshape(4, 6))
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        assert x[[[0, 1], [1, 2]]].tolist() == [1.0, 8.0]
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        assert x[[tg.tensor(1), slice(0, 2)]].tolist() == [6.0, 7.0]
    assert x[np.array([[0, 1], [1, 2]])].shape == (2, 2, 6) and x[[0, 2]].shape == (2, 6)
    assert x[[]].shape == (0, 6)
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        x[[[0, 1], [1, 2]]] = -1.0
    assert x[0, 1].item() == x[1, 2].item() == -1.0 and x[0, 2].item() == 2.0


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_bool_masks_clone_and_combine_in_place(backend, monkeypatch):
    def step(mask, x):
        keep = mask.clone()  # np.positive has no bool loop: clone raised
        keep &= x > 0
        done = keep.clone()
        done.logical_or_(x < -1)
        return keep, done

    fn = eager_or_traced(step, backend, monkeypatch)
    mask = tg.tensor(np.array([True, False, True, True]))
    for _ in range(2):
        keep, done = fn(mask, tg.tensor(np.array([1.0, 2.0, -0.5, -2.0])))
        assert keep.dtype == np.bool_ and keep.numpy().tolist() == [True, False, False, False]
        assert done.numpy().tolist() == [True, False, False, True]
    assert mask.numpy().tolist() == [True, False, True, True]


@pytest.mark.parametrize("backend", [None, "numpy"])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
def test_scatter_reduce_extremes_split_ties_with_the_input_evenly(reduce, backend, monkeypatch):
    """PyTorch's rule: the gradient of a maximum is split evenly among every value that ties
    for it, the input's own one included (the input took all of it)."""
    sign = 1.0 if reduce == "amax" else -1.0
    s = tg.tensor(sign * np.array([1.0, 0.0, 2.0]), requires_grad=True)
    src = tg.tensor(sign * np.array([1.0, 1.0, -1.0, 2.0, 0.5]), requires_grad=True)
    index = tg.tensor(np.array([0, 0, 1, 2, 2]))
    gm = tg.GradManager().attach([s, src])

    def step():
        with gm:
            out = s.scatter_reduce(0, index, src, reduce)
            gm.backward((out * tg.tensor(np.array([1.0, 2.0, 3.0]))).sum())
        return out

    fn = eager_or_traced(step, backend, monkeypatch)
    for _ in range(2):
        s.grad = src.grad = None
        assert (fn().numpy() * sign).tolist() == [1.0, 0.0, 2.0]
        np.testing.assert_allclose(src.grad.numpy(), [1 / 3, 1 / 3, 0.0, 1.5, 0.0], atol=1e-15)
        np.testing.assert_allclose(s.grad.numpy(), [1 / 3, 2.0, 1.5], atol=1e-15)


def test_scatter_reduce_mean_of_integers_rounds_down():
    out = tg.tensor(np.array([0, 0, 7])).scatter_reduce(
        0, tg.tensor(np.array([0, 0, 1, 1])), tg.tensor(np.array([1, -2, 4, 1])), "mean",
        include_self=False,
    )  # fmt: skip
    assert out.numpy().tolist() == [-1, 2, 7]  # -1 // 2 and 5 // 2, PyTorch's (-0.5 became 0)


def _views_written_in_place(x, w):
    y = x * 1.0
    y.t().mul_(w[:3])  # row i of y times w[i]
    y.view(12)[::5].add_(1.0)
    y[:, :3].diagonal().fill_(0.0)
    y.unsqueeze(0)[:, 1].mul_(w[3])
    y.permute(1, 0).unflatten(0, (2, 2))[1].add_(w[0] ** 2)  # columns 2 and 3
    y.mT.squeeze()[0].sub_(w[1])
    return y


def _views_written_in_place_by_hand(x, w):
    y = x * w[:3, None]
    y.reshape(-1)[::5] += 1.0
    y[[0, 1, 2], [0, 1, 2]] = 0.0
    y[1] *= w[3]
    y[:, 2:] += w[0] ** 2
    y[:, 0] -= w[1]
    return y


def test_in_place_ops_on_views_write_their_base():
    """`y.t().mul_(2)`, `y.view(-1).add_(1)`, `y.diagonal().fill_(0)`, `y.unsqueeze(0)...`: a
    write into a view writes its base, as PyTorch's; where autograd tracked the base (or the
    diagonal, a copy here) the base kept its old value."""
    expected = _views_written_in_place_by_hand(X, np.arange(1.0, 5.0))
    for requires_grad in (False, True):
        x = tg.tensor(X, requires_grad=requires_grad)
        out = _views_written_in_place(x, tg.tensor(np.arange(1.0, 5.0)))
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-15)
    check_grad(_views_written_in_place, X, np.arange(1.0, 5.0))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_in_place_ops_on_views_traced_match_eager(backend):
    traced_matches_eager(_views_written_in_place, X, np.arange(1.0, 5.0), backend=backend)


@pytest.mark.parametrize("backend", [None, "numpy"])
def test_scatter_reduce_prod_gradient_is_the_product_of_the_others(backend, monkeypatch):
    """A lone zero's share is the product of the rest; two zeros give every value 0 (PyTorch's
    rule; dividing the product by the value gave nan). "prod" was refused."""
    s = tg.tensor(np.array([2.0, 1.0, 0.0]), requires_grad=True)
    src = tg.tensor(np.array([0.0, 4.0, 0.0, 0.0, 5.0, 7.0]), requires_grad=True)
    index = tg.tensor(np.array([0, 0, 1, 1, 2, 2]))
    gm = tg.GradManager().attach([s, src])

    def step():
        with gm:
            out = s.scatter_reduce(0, index, src, "prod")
            gm.backward((out * tg.tensor(np.array([1.0, 2.0, 3.0]))).sum())
        return out

    fn = eager_or_traced(step, backend, monkeypatch)
    for _ in range(2):
        s.grad = src.grad = None
        assert fn().numpy().tolist() == [0.0, 0.0, 0.0]
        assert s.grad.numpy().tolist() == [0.0, 0.0, 3 * 35.0]  # 2 * 0 * 4, 1 * 0 * 0, 0 * 5 * 7
        assert src.grad.numpy().tolist() == [8.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    check_grad(lambda a, b: a.scatter_reduce(0, index, b, "prod", include_self=False),
               np.array([2.0, -1.0, 3.0]), np.array([1.5, 4.0, -2.0, 0.5, 3.0, -1.0]))  # fmt: skip
    out = tg.full((2, 3), 2.0).scatter_(1, tg.tensor(np.array([[0, 0], [2, 1]])), 3.0,
                                        reduce="multiply")  # fmt: skip
    assert out.numpy().tolist() == [[18.0, 2.0, 2.0], [2.0, 6.0, 6.0]]


def test_a_ufunc_in_place_on_a_view_held_as_a_copy_writes_its_base():
    """`y.diagonal().mul_(2)` under no_grad: the fast path computing into the view's own array
    skipped the write-back a diagonal (a copy) needs, and y kept its value."""
    y = tg.ones((3, 3))
    with tg.no_grad():
        y.diagonal().mul_(2)
    np.testing.assert_array_equal(y.numpy(), np.ones((3, 3)) + np.eye(3))


def test_put_writes_flat_positions_counting_negative_ones_from_the_end():
    """PyTorch's `put`/`put_`, `take`'s inverse (they were missing): input read as 1-d, with
    gradients to both (the overwritten elements get none)."""
    x = tg.tensor(np.arange(6.0).reshape(2, 3))
    x.put_(tg.tensor([-1, 0]), tg.tensor([10.0, 20.0]))
    assert x.tolist() == [[20.0, 1.0, 2.0], [3.0, 4.0, 10.0]]
    out = tg.put(x, tg.tensor([[1], [-1]]), tg.tensor([1.0, 2.0]), accumulate=True)
    assert out.tolist() == [[20.0, 2.0, 2.0], [3.0, 4.0, 12.0]]
    index = tg.tensor([4, -6, 0])  # distinct: a repeated one has PyTorch's gradient, not the mean's
    check_grad(lambda a, v: a.put(index, v), X[:2], np.arange(3.0))
    check_grad(lambda a, v: tg.put(a, index, v, accumulate=True), X[:2], np.arange(3.0))
    with pytest.raises(tg.ShapeError, match="put: index .* and source"):
        x.put_(tg.tensor([0, 1]), tg.tensor([1.0]))


@pytest.mark.parametrize("backend", [None, "numpy"])
def test_a_repeated_index_gives_each_value_the_whole_gradient_there(backend):
    """`y[[0, 0, 2]] = v`: equal values written twice are exact, and each of them gets the
    gradient at its position whole (PyTorch's index_put: grad[index]); the overwritten x[0]
    gets none. Written by hand: PyTorch gives [1, 1, 3] for v and [0, 2, 0] for x."""

    def f(x, v):
        y = x.clone()
        y[tg.tensor([0, 0, 2])] = v
        return (y * tg.tensor([1.0, 2.0, 3.0], dtype=tg.float64)).sum()

    x = tg.tensor([0.0, 1.0, 2.0], dtype=tg.float64, requires_grad=True)
    v = tg.tensor([5.0, 5.0, 7.0], dtype=tg.float64, requires_grad=True)
    loss = (tg.trace(f, backend=backend) if backend else f)(x, v)
    loss.backward()
    assert loss.item() == 5.0 + 2.0 + 21.0
    assert x.grad.tolist() == [0.0, 2.0, 0.0] and v.grad.tolist() == [1.0, 1.0, 3.0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_python_number_written_in_keeps_the_tensors_precision(dtype):
    """0.1 written by indexing, scatter, index_fill or fill_diagonal_ into a float64 tensor is
    float64's 0.1 (it was float32's, 0.10000000149011612), eager and traced."""

    def writes(x):
        a, b, c, d, e = (x.clone() for _ in range(5))
        a[:, 0] = 0.1
        b[tg.tensor([0, 1])] = 0.1
        c.scatter_(1, tg.tensor([[0], [2]]), 0.1)
        d.index_fill_(1, tg.tensor([1]), 0.1)
        e.fill_diagonal_(0.1)
        return a + b + c + d + e

    x = tg.zeros((2, 3), dtype=dtype)
    want = np.zeros((2, 3), dtype)
    want[:, 0] += dtype(0.1)
    want[[0, 1]] += dtype(0.1)
    want[0, 0] += dtype(0.1)
    want[1, 2] += dtype(0.1)
    want[:, 1] += dtype(0.1)
    want[[0, 1], [0, 1]] += dtype(0.1)
    np.testing.assert_array_equal(writes(x).numpy(), want)
    np.testing.assert_array_equal(tg.trace(writes, backend="numpy")(x).numpy(), want)


NO_OP_VIEWS = {
    "squeeze()": lambda t: t.squeeze(), "reshape": lambda t: t.reshape(2, 3),
    "view": lambda t: t.view(2, 3), "view_as": lambda t: t.view_as(t),
    "expand": lambda t: t.expand(2, 3), "broadcast_to": lambda t: t.broadcast_to((2, 3)),
    "permute": lambda t: t.permute(0, 1), "transpose(0, 0)": lambda t: t.transpose(0, 0),
    "movedim": lambda t: t.movedim(0, 0), "narrow": lambda t: t.narrow(1, 0, 3),
    "torch.reshape": lambda t: tg.reshape(t, (2, 3)), "torch.squeeze": lambda t: tg.squeeze(t),
    "unflatten": lambda t: t.unflatten(1, (3,)),
    "torch.unflatten": lambda t: tg.unflatten(t, 0, (2,)),
}  # fmt: skip


@pytest.mark.parametrize("make", [lambda v: v.t(), lambda v: v.T, lambda v: tg.t(v)])
def test_a_vectors_transpose_is_a_new_tensor_viewing_it(make):
    v = tg.ones(3, requires_grad=True)
    out = make(v)
    assert out is not v and not out.is_leaf and out._base is v


@pytest.mark.parametrize("make", NO_OP_VIEWS.values(), ids=NO_OP_VIEWS.keys())
def test_a_view_that_changes_nothing_is_a_new_tensor_viewing_the_input(make):
    """They gave the input itself: an attribute set on the result landed on the input (pyro's
    packed dimensions: TraceEnum_ELBO then refused to pack it again)."""
    x = tg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    y = make(x)
    assert y is not x and y.shape == x.shape
    y.tag = "packed"
    assert not hasattr(x, "tag")
    base = x.detach().clone()
    view = make(base)
    view.mul_(2.0)  # a view: writing it writes the input, as in PyTorch
    np.testing.assert_array_equal(base.numpy(), 2 * np.arange(6.0).reshape(2, 3))
    (make(x) * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, 3), 3.0))


VIEW_WRITES = {  # writes through views and in-place ops, each against PyTorch's result
    "view write": lambda t, x: x.view(-1).__setitem__(0, 5.0),
    "t add_": lambda t, x: x.t().add_(1),
    "col mul_": lambda t, x: x[:, 0].mul_(2),
    "diagonal fill_": lambda t, x: x.diagonal().fill_(0),
    "unsqueeze squeeze add_": lambda t, x: x.unsqueeze(0).squeeze(0).add_(1),
    "transpose row zero_": lambda t, x: x.transpose(0, 1)[0].zero_(),
    "narrow copy_": lambda t, x: x.narrow(0, 1, 2).copy_(t.ones(2, 4)),
    "reshape contiguous add_": lambda t, x: x.reshape(12).add_(1),
    "split fill_": lambda t, x: x.split(2)[1].fill_(7),
    "chunk fill_": lambda t, x: x.chunk(3, 1)[0].fill_(-1),
    "unbind add_": lambda t, x: x.unbind(0)[1].add_(3),
    "select setitem": lambda t, x: x.select(1, 2).__setitem__(slice(None), 9.0),
    "view_as sub_": lambda t, x: x.view_as(x).sub_(1),
    "flatten add_": lambda t, x: x.flatten().add_(1),
    "permute mul_": lambda t, x: x.permute(1, 0).mul_(3),
    "step slice add_": lambda t, x: x[::2, 1::2].add_(10),
    "ellipsis setitem": lambda t, x: x[..., -1].fill_(4),
    "masked_fill_ bcast": lambda t, x: x.masked_fill_(t.tensor([True, False, True, False]), 0.5),
    "index_fill_": lambda t, x: x.index_fill_(1, t.tensor([0, 2]), -2.0),
    "scatter_ reduce add": lambda t, x: x.scatter_(1, t.tensor([[0, 1], [2, 3], [1, 1]]),
                                                   t.ones(3, 2), reduce="add"),
    "scatter_ value": lambda t, x: x.scatter_(0, t.tensor([[2, 0, 1, 0]]), 8.0),
    "copy_ broadcast": lambda t, x: x.copy_(t.arange(4.0)),
    "fill_ 0d tensor": lambda t, x: x.fill_(t.tensor(2.5)),
    "add_ alpha": lambda t, x: x.add_(t.ones(3, 4), alpha=2),
    "clamp_ tensor": lambda t, x: x.clamp_(min=t.zeros(4), max=t.full((3, 4), 5.0)),
    "detach shares": lambda t, x: x.detach().add_(1),
    "data shares": lambda t, x: x.data.mul_(2),
    "view chain": lambda t, x: x.view(3, 2, 2)[1].view(4).add_(100),
    "mT add_": lambda t, x: x.mT.add_(1),
    "real of real": lambda t, x: x.real.add_(1),
    "index_put_ accumulate": lambda t, x: x.index_put_(
        (t.tensor([0, 0, 2]), t.tensor([1, 1, 3])), t.tensor([1.0, 2.0, 3.0]), accumulate=True),
    "put_": lambda t, x: x.put_(t.tensor([0, 5]), t.tensor([9.0, 8.0])),
    "masked_scatter_": lambda t, x: x.masked_scatter_(x > 5, t.arange(12.0)),
    "index_add_ alpha": lambda t, x: x.index_add_(0, t.tensor([0, 2]), t.ones(2, 4), alpha=3),
    "setitem tensor bool": lambda t, x: x.__setitem__(x > 6, 0.0),
    "setitem list": lambda t, x: x.__setitem__(([0, 2], [1, 3]), t.tensor([5.0, 6.0])),
    "swap rows": lambda t, x: x.__setitem__([0, 1], x[[1, 0]]),
    "lerp_": lambda t, x: x.lerp_(t.zeros(3, 4), 0.25),
    "addcmul_": lambda t, x: x.addcmul_(x, x, value=0.5),
    "div_ rounding": lambda t, x: x.div_(3, rounding_mode="floor"),
    "pow_": lambda t, x: x.pow_(2),
    "unsqueeze_": lambda t, x: x.unsqueeze_(0),
    "t_": lambda t, x: x.t_(),
    "resize_": lambda t, x: x.resize_(2, 6),
    "squeeze_ noop": lambda t, x: x.squeeze_(),
    "as_strided view": lambda t, x: x.as_strided((2, 2), (4, 1)).add_(50),
}  # fmt: skip


@pytest.mark.parametrize("name", VIEW_WRITES)
def test_writes_through_views_match_pytorch(name):
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    import tracegrad.torch as tt

    results = []
    for lib in (torch, tt):
        x = lib.arange(12.0).reshape(3, 4)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            VIEW_WRITES[name](lib, x)
        results.append((x.detach().numpy().tolist(), tuple(x.shape)))
    assert results[0] == results[1]


def test_as_strided_is_a_view_that_writes_back():
    x = tg.arange(12.0).reshape(3, 4)
    window = x.as_strided((2, 2), (4, 1), 1)
    window.add_(50)
    assert x.tolist() == [[0, 51, 52, 3], [4, 55, 56, 7], [8, 9, 10, 11]]
    w = tg.ones(6, requires_grad=True)
    (w.as_strided((2, 3), (1, 2)) * tg.arange(6.0).reshape(2, 3)).sum().backward()
    assert w.grad.tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]  # element i*1 + j*2 of the window
