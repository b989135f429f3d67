"""Every op: forward values against NumPy, gradients against finite differences (float64)."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tests.conftest import check_grad
from tracegrad.compiler import lowering
from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError

RNG = np.random.default_rng(42)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape)


def away_from_zero(*shape: int) -> np.ndarray:
    return RNG.choice([-1.0, 1.0], shape) * positive(*shape)


def forward_matches(tg_fn, np_fn, *arrays, **kw) -> None:
    out = tg_fn(*(tg.tensor(a) for a in arrays))
    expected = np.asarray(np_fn(*arrays))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, **kw)


# --- elementwise ---------------------------------------------------------------------------

UNARY = {
    "neg": (lambda x: -x, np.negative, randn),
    "exp": (tg.exp, np.exp, randn),
    "log": (tg.log, np.log, positive),
    "sqrt": (tg.sqrt, np.sqrt, positive),
    "tanh": (tg.tanh, np.tanh, randn),
    "sigmoid": (tg.sigmoid, lambda a: 1 / (1 + np.exp(-a)), randn),
    "abs": (abs, np.abs, away_from_zero),
    "sin": (tg.sin, np.sin, randn),
    "cos": (tg.cos, np.cos, randn),
    "log1p": (tg.log1p, np.log1p, positive),
    "expm1": (tg.expm1, np.expm1, randn),
    "softplus": (tg.softplus, lambda a: np.log(1 + np.exp(a)), randn),
    "erf": (tg.erf, np.vectorize(math.erf), randn),
}


@pytest.mark.parametrize("name", UNARY)
def test_unary(name: str) -> None:
    tg_fn, np_fn, sample = UNARY[name]
    x = sample(3, 4)
    forward_matches(tg_fn, np_fn, x)
    check_grad(tg_fn, x)


def test_new_unary_ops_are_methods_ufunc_targets_and_stable() -> None:
    x = tg.tensor([-1000.0, -1.0, 0.0, 1e-8, 1000.0])
    np.testing.assert_allclose(x.softplus().numpy(), [0.0, 0.3132617, 0.6931472, 0.6931472, 1000.0])
    np.testing.assert_allclose(np.log1p(x[3:4]).numpy(), [1e-8], rtol=1e-6)  # not log(1 + x)
    np.testing.assert_allclose(np.expm1(x[3:4]).numpy(), [1e-8], rtol=1e-6)
    assert x.erf().dtype == np.float32 and x.erf().numpy()[-1] == 1.0


BINARY = {
    "add": (lambda x, y: x + y, np.add, randn, randn),
    "sub": (lambda x, y: x - y, np.subtract, randn, randn),
    "mul": (lambda x, y: x * y, np.multiply, randn, randn),
    "div": (lambda x, y: x / y, np.divide, randn, away_from_zero),
    "pow": (lambda x, y: x**y, np.power, positive, randn),
    "maximum": (tg.maximum, np.maximum, randn, randn),
    "minimum": (tg.minimum, np.minimum, randn, randn),
}
SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((1,), (5,))]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary_broadcasting(name: str, shapes: tuple) -> None:
    tg_fn, np_fn, sample_x, sample_y = BINARY[name]
    x, y = sample_x(*shapes[0]), sample_y(*shapes[1])
    forward_matches(tg_fn, np_fn, x, y)
    check_grad(tg_fn, x, y)
    check_grad(lambda b, a: tg_fn(a, b), y, x)  # operand order swapped


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + 2,
        lambda x: 2 - x,
        lambda x: 3.0 * x,
        lambda x: x / 4,
        lambda x: 2.0 / x,
        lambda x: x**3,
        lambda x: x**0.5,
        lambda x: 2.0**x,
        lambda x: +x,
    ],
    ids=["x+2", "2-x", "3*x", "x/4", "2/x", "x**3", "x**.5", "2**x", "+x"],
)
def test_python_scalar_operands(fn) -> None:
    x = positive(2, 3)
    np.testing.assert_allclose(fn(tg.tensor(x)).numpy(), fn(x))
    check_grad(fn, x)


# (base, exponent, d/d base, d/d exponent) at a zero base, as PyTorch's
ZERO_BASE_POWERS = [(0.0, 0.0, 0.0, 0.0), (0.0, 2.0, 0.0, 0.0), (0.0, 0.5, math.inf, 0.0),
                    (0.0, -1.0, -math.inf, -math.inf), (2.0, 0.0, 0.0, math.log(2.0))]  # fmt: skip


def test_power_at_a_zero_base_has_pytorchs_gradients_not_nan() -> None:
    """d(0**0)/dx is 0 (not 0 * 0**-1) and d(0**y)/dy is 0 for y >= 0 (not 0 * log 0), as in
    PyTorch and HIPS autograd; also to second order."""
    base, exponent, d_base, d_exponent = map(np.array, zip(*ZERO_BASE_POWERS, strict=True))
    x, y = tg.tensor(base, requires_grad=True), tg.tensor(exponent, requires_grad=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        (x**y).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), d_base)
    np.testing.assert_array_equal(y.grad.numpy(), d_exponent)
    second = tg.grad(lambda t: tg.grad(lambda u: (u**0.0).sum())(t).sum())(tg.tensor([0.0, 1.5]))
    assert second.tolist() == [0.0, 0.0]
    torch = pytest.importorskip("torch")
    tx, ty = (torch.tensor(a, requires_grad=True) for a in (base, exponent))
    (tx**ty).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    np.testing.assert_array_equal(y.grad.numpy(), ty.grad.numpy())


def test_where() -> None:
    cond = RNG.random((3, 1)) > 0.5
    x, y = randn(3, 4), randn(4)
    mask = tg.tensor(cond)
    forward_matches(lambda a, b: tg.where(mask, a, b), lambda a, b: np.where(cond, a, b), x, y)
    check_grad(lambda a, b: tg.where(cond, a, b), x, y)
    check_grad(lambda a: tg.where(cond, a, 0.0), x)


def test_clip() -> None:
    x = RNG.uniform(-2, 2, (4, 5))
    x[np.abs(np.abs(x) - 1) < 0.05] = 0.0  # keep finite differences away from the kinks
    forward_matches(lambda a: tg.clip(a, -1.0, 1.0), lambda a: np.clip(a, -1, 1), x)
    forward_matches(lambda a: a.clip(None, 0.5), lambda a: np.minimum(a, 0.5), x)
    check_grad(lambda a: tg.clip(a, -1.0, 1.0), x)
    lo, hi = RNG.uniform(-1.5, -0.5, (5,)), RNG.uniform(0.5, 1.5, (4, 1))
    check_grad(tg.clip, x, lo, hi)


# --- reductions ----------------------------------------------------------------------------

REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}
AXES = [None, 0, 1, -1, (0, 2), (-1, 0), ()]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions(name: str, axis, keepdims: bool) -> None:
    """NumPy's reductions (tracegrad.numpy: `max` is the values)."""
    x = positive(2, 3, 4) * RNG.choice([-1.0, 1.0], (2, 3, 4))  # distinct, nonzero: no ties
    fn = getattr(tnp, name)
    forward_matches(lambda a: fn(a, axis, keepdims=keepdims),
                    lambda a: REDUCTIONS[name](a, axis, keepdims=keepdims), x)  # fmt: skip
    check_grad(lambda a: fn(a, axis=axis, keepdims=keepdims), x)


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reduction_methods(name: str) -> None:
    """PyTorch's methods: x.max(dim) is (values, indices); axis= is PyTorch's alias of dim=."""
    x = positive(3, 4)
    for reduced in (getattr(tg.tensor(x), name)(dim=1), getattr(tg.tensor(x), name)(axis=1)):
        values = reduced.values if name in ("max", "min") else reduced
        np.testing.assert_allclose(values.numpy(), REDUCTIONS[name](x, axis=1))
    np.testing.assert_allclose(getattr(tg.tensor(x), name)().item(), REDUCTIONS[name](x))


@pytest.mark.parametrize("axis", [1, None])
def test_prod_gradient_with_zeros(axis) -> None:
    """One zero in a slice: its gradient is the product of the others; two: all zero."""
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 1.5], [1.0, -2.0, 4.0]])
    check_grad(lambda a: a.prod(axis=axis), x if axis else x[::2])


def test_max_ties_share_the_gradient() -> None:
    x = tg.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.5, 0.5])


def test_argmax() -> None:
    """Without a dim, the index into the flattened tensor (PyTorch's and NumPy's)."""
    x = randn(3, 5)
    np.testing.assert_array_equal(tg.argmax(tg.tensor(x)).numpy(), np.argmax(x))
    np.testing.assert_array_equal(tg.tensor(x).argmax(0).numpy(), np.argmax(x, 0))
    np.testing.assert_array_equal(tg.argmin(x, 1, keepdim=True).numpy(), np.argmin(x, 1)[:, None])
    np.testing.assert_array_equal(tnp.argmax(x, axis=1).numpy(), np.argmax(x, axis=1))


# --- shapes --------------------------------------------------------------------------------

SHAPE_OPS = {
    "reshape tuple": (lambda x: x.reshape((4, 6)), lambda a: a.reshape(4, 6)),
    "reshape args": (lambda x: x.reshape(4, 6), lambda a: a.reshape(4, 6)),
    "reshape -1": (lambda x: tg.reshape(x, (2, -1)), lambda a: a.reshape(2, -1)),
    "reshape args -1": (lambda x: x.reshape(-1, 3, 2), lambda a: a.reshape(-1, 3, 2)),
    "flatten": (lambda x: x.flatten(), lambda a: a.reshape(-1)),
    "numpy transpose": (tnp.transpose, np.transpose),
    "numpy transpose axes": (lambda x: tnp.transpose(x, (1, 2, 0)),
                             lambda a: a.transpose(1, 2, 0)),
    "permute": (lambda x: tg.permute(x, (1, 2, 0)), lambda a: a.transpose(1, 2, 0)),
    "permute neg": (lambda x: x.permute(0, -1, 1), lambda a: a.transpose(0, 2, 1)),
    "transpose two dims": (lambda x: x.transpose(0, -1), lambda a: a.swapaxes(0, -1)),
    ".T": (lambda x: x.T, lambda a: a.T),
    "broadcast_to": (lambda x: tg.broadcast_to(x[:, :1], (5, 2, 3, 4)),
                     lambda a: np.broadcast_to(a[:, :1], (5, 2, 3, 4))),
    "expand_dims": (lambda x: tnp.expand_dims(x, (1, 3)), lambda a: np.expand_dims(a, (1, 3))),
    "unsqueeze -1": (lambda x: x.unsqueeze(-1), lambda a: np.expand_dims(a, -1)),
    "squeeze not size 1": (lambda x: x.squeeze(1), lambda a: a),
    "squeeze": (lambda x: x[:, :1, None].squeeze(), lambda a: a[:, :1, None].squeeze()),
    "squeeze int": (lambda x: tg.squeeze(x[:, :1], 1), lambda a: a[:, :1].squeeze(1)),
    "squeeze tuple": (lambda x: x[:1, :1].squeeze((0, -2)), lambda a: a[:1, :1].squeeze((0, 1))),
}  # fmt: skip


@pytest.mark.parametrize("name", SHAPE_OPS)
def test_shape_ops(name: str) -> None:
    tg_fn, np_fn = SHAPE_OPS[name]
    x = randn(2, 3, 4)
    forward_matches(tg_fn, np_fn, x)
    check_grad(tg_fn, x)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis: int) -> None:
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    sizes = [1, 3, 2]
    arrays = []
    for shape, n in zip(shapes, sizes, strict=True):
        shape = list(shape)
        shape[axis] = n
        arrays.append(randn(*shape))
    fn = lambda *xs: tg.concatenate(xs, axis=axis)
    forward_matches(fn, lambda *a: np.concatenate(a, axis), *arrays)
    check_grad(fn, *arrays)


def test_the_concatenate_op_refuses_a_negative_axis():
    """The front end resolves -1; the op's gradient slices along the axis it is given, so a
    negative one (which the shapes alone did not always refuse) is an error, not a wrong slice."""
    a = tg.tensor(np.ones((2, 3)))
    with pytest.raises(ShapeError, match="concatenate: axis -1"):
        P.concatenate(a, a, axis=-1)
    assert P.concatenate(a, a, axis=1).shape == (2, 6)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack(axis: int) -> None:
    arrays = [randn(2, 3) for _ in range(3)]
    fn = lambda *xs: tg.stack(xs, axis)
    forward_matches(fn, lambda *a: np.stack(a, axis), *arrays)
    check_grad(fn, *arrays)


# --- indexing ------------------------------------------------------------------------------

INDICES = {
    "int": 1,
    "negative int": -1,
    "slice": slice(1, None),
    "step slice": (slice(None, None, -2), 1),
    "None": (None, 0),
    "Ellipsis": (Ellipsis, 2),
    "int array": np.array([2, 0]),
    "repeated": np.array([0, 0, 2, 0]),
    "negative repeated": np.array([-1, 2, -1, 0, 2]),  # rows -1 and 2 are one row
    "list": [1, 1],
    "two arrays": (np.array([0, 2, 2]), np.array([1, 0, 1])),
    "array and slice": (np.array([1, 1]), slice(None), np.array([0, 3])),
    "slice and array": (slice(None), np.array([[0, 1], [1, 1]])),
    "bool mask": RNG.random((3, 2, 4)) > 0.5,
    "bool rows": np.array([True, False, True]),
    "tensor index": tg.tensor(np.array([2, 2])),
}


@pytest.mark.parametrize("name", INDICES)
def test_getitem(name: str) -> None:
    index = INDICES[name]
    np_index = index.numpy() if isinstance(index, tg.Tensor) else index
    x = randn(3, 2, 4)
    forward_matches(lambda a: a[index], lambda a: a[np_index], x)
    check_grad(lambda a: a[index], x)


def test_scatter_of_rows_matches_add_at_and_checks_bounds() -> None:
    """The rows' scatter-add (an embedding's gradient) sorts and reduces instead of add.at."""
    g, rows = randn(6, 3), np.array([1, -4, 3, 1, 0, -1])
    expected = np.zeros((4, 3))
    np.add.at(expected, rows, g)
    got = P.scatter_add(tg.tensor(g), rows, shape=(4, 3), template=("@",))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-15)
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 4"):
        P.scatter_add(tg.tensor(g), rows * 2, shape=(4, 3), template=("@",))
    batch = P.scatter_add(  # a batch of sequences of tokens: (2, 3) rows
        tg.tensor(g.reshape(2, 3, 3)), rows.reshape(2, 3), shape=(4, 3), template=("@",)
    )
    np.testing.assert_allclose(batch.numpy(), expected, rtol=1e-15)
    mask = np.array([True, False, True, True])  # a mask is not rows
    expected = np.zeros((4, 3))
    expected[mask] += g[:3]
    got = P.scatter_add(tg.tensor(g[:3]), mask, shape=(4, 3), template=("@",))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-15)


def test_pick_labels_accumulates_repeated_rows() -> None:
    """z[np.arange(B), labels] as in cross-entropy; each picked element gets its cotangent."""
    z = randn(4, 5)
    rows, labels = np.array([0, 1, 2, 3, 0]), np.array([3, 0, 4, 4, 3])
    forward_matches(lambda a: a[rows, labels], lambda a: a[rows, labels], z)
    check_grad(lambda a: a[rows, labels], z)
    t = tg.tensor(z, requires_grad=True)
    t[rows, labels].sum().backward()
    expected = np.zeros_like(z)
    np.add.at(expected, (rows, labels), 1.0)
    np.testing.assert_array_equal(t.grad.numpy(), expected)  # (0, 3) counted twice


# --- matmul --------------------------------------------------------------------------------

MATMUL_SHAPES = [
    ((3, 4), (4, 2)),
    ((5, 3, 4), (5, 4, 2)),
    ((5, 3, 4), (4, 2)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (4, 2)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4,)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes: tuple) -> None:
    a, b = randn(*shapes[0]), randn(*shapes[1])
    forward_matches(lambda x, y: x @ y, np.matmul, a, b, rtol=1e-12)
    forward_matches(tg.matmul, np.matmul, a, b, rtol=1e-12)
    check_grad(lambda x, y: x @ y, a, b)


# --- softmax family --------------------------------------------------------------------------


def np_logsumexp(a, axis, keepdims=False):
    m = np.max(a, axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis)


def np_softmax(a, axis):
    e = np.exp(a - np.max(a, axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


SOFTMAX_FAMILY = {
    "softmax": (tg.softmax, np_softmax),
    "log_softmax": (tg.log_softmax, lambda a, axis: np.log(np_softmax(a, axis))),
    "logsumexp": (lambda a, axis=-1: tg.logsumexp(a, axis), np_logsumexp),
}


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", SOFTMAX_FAMILY)
def test_softmax_family(name: str, axis: int) -> None:
    tg_fn, np_fn = SOFTMAX_FAMILY[name]
    x = randn(3, 4)
    forward_matches(lambda a: tg_fn(a, axis), lambda a: np_fn(a, axis), x)
    check_grad(lambda a: tg_fn(a, axis=axis), x)


@pytest.mark.parametrize("axis", [None, (0, 1)], ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp_axis_forms(axis, keepdims: bool) -> None:
    x = randn(2, 3)
    ax = (0, 1) if axis is None else axis
    forward_matches(lambda a: tg.logsumexp(a, axis, keepdims),
                    lambda a: np_logsumexp(a, ax, keepdims), x)  # fmt: skip
    check_grad(lambda a: tg.logsumexp(a, axis, keepdims), x)


@pytest.mark.parametrize("name", SOFTMAX_FAMILY)
def test_softmax_family_stable_at_magnitude_1000(name: str) -> None:
    """Shifting by +-1000 changes nothing but the shift; gradients stay finite and exact."""
    tg_fn, _ = SOFTMAX_FAMILY[name]
    x = randn(3, 4)
    for shift in (1000.0, -1000.0):
        big = tg.tensor(x + shift, requires_grad=True)
        small = tg.tensor(x, requires_grad=True)
        out_big, out_small = tg_fn(big), tg_fn(small)
        assert np.all(np.isfinite(out_big.numpy()))
        expected = out_small.numpy() + (shift if name == "logsumexp" else 0.0)
        np.testing.assert_allclose(out_big.numpy(), expected, rtol=1e-12, atol=1e-9)
        c = randn(*out_big.shape)
        (out_big * c).sum().backward()
        (out_small * c).sum().backward()
        np.testing.assert_allclose(big.grad.numpy(), small.grad.numpy(), atol=1e-9)


def test_softmax_float32_at_magnitude_1000() -> None:
    x = tg.tensor([[1000.0, 999.0, -1000.0]], requires_grad=True)
    p = tg.softmax(x)
    assert p.dtype == np.float32 and np.all(np.isfinite(p.numpy()))
    tg.log_softmax(x)[0, 1].backward()
    assert np.all(np.isfinite(x.grad.numpy()))
    np.testing.assert_allclose(x.grad.numpy(), [[-p.numpy()[0, 0], 1 - p.numpy()[0, 1], 0.0]],
                               rtol=1e-5, atol=1e-7)  # fmt: skip


# --- casts, comparisons and dtypes ---------------------------------------------------------------


def test_astype_gradient_returns_to_the_input_dtype() -> None:
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    y = x.astype(np.float64)
    assert y.dtype == np.float64
    (y * y).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0])


COMPARISONS = {
    "<": (operator.lt, np.less),
    "<=": (operator.le, np.less_equal),
    ">": (operator.gt, np.greater),
    ">=": (operator.ge, np.greater_equal),
    "==": (operator.eq, np.equal),
    "!=": (operator.ne, np.not_equal),
}


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_are_bool_and_not_differentiable(op: str) -> None:
    compare, np_compare = COMPARISONS[op]
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 2.0, 2.0])
    x = tg.tensor(a, requires_grad=True)
    for other in (b, tg.tensor(b, requires_grad=True), 2.0):
        out = compare(x, other)
        assert out.dtype == np.bool_ and out.is_leaf and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), np_compare(a, np.asarray(other)))
    np.testing.assert_array_equal(compare(b, x).numpy(), np_compare(b, a))  # ndarray on the left


@pytest.mark.parametrize(
    "make, dtype",
    [
        (lambda: tg.tensor(1.5), np.float32),
        (lambda: tg.tensor([1.0, 2.0]), np.float32),
        (lambda: tg.tensor([[1, 2.5]]), np.float32),
        (lambda: tg.tensor(np.ones(2)), np.float64),
        (lambda: tg.tensor(np.ones(2, np.float16)), np.float16),
        (lambda: tg.tensor([1, 2]), np.int64),
        (lambda: tg.tensor([True]), np.bool_),
        (lambda: tg.tensor([1.0], dtype=np.float64), np.float64),
        (lambda: tg.tensor(np.ones(2, np.float32)) * 2.0, np.float32),
        (lambda: 2.0 * tg.tensor(np.ones(2, np.float32)), np.float32),
        (lambda: tg.tensor(np.ones(2, np.float32)) ** 2, np.float32),
        (lambda: tg.tensor(np.ones(2, np.float32)) / 3, np.float32),
        (lambda: tg.tensor(np.ones(2, np.float32)).mean(), np.float32),
        (lambda: tg.exp(tg.tensor(np.ones(2, np.float32))), np.float32),
        (lambda: tg.tensor([1, 2]) * 2, np.int64),
        (lambda: tg.tensor([1, 2]) * 0.5, np.float32),  # the default float, as PyTorch's
        (lambda: tg.tensor(np.ones(2, np.float32)) + np.ones(2), np.float64),
    ],
)
def test_dtype_rules(make, dtype) -> None:
    assert make().dtype == dtype


@pytest.mark.parametrize("data", [[1, 2], [True, False]], ids=["int", "bool"])
def test_integer_and_bool_tensors_are_not_differentiable(data) -> None:
    with pytest.raises(RuntimeError, match="floating"):
        tg.tensor(data, requires_grad=True)
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * tg.tensor(data)
    assert y.requires_grad
    assert not (tg.tensor(data) + tg.tensor(data)).requires_grad


def test_gradient_has_the_leaf_dtype_when_mixed_with_float64() -> None:
    x = tg.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    (np.array([3.0, 4.0]) * x).sum().backward()
    assert x.grad.dtype == np.float32
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])


# --- shape errors name the op and the shapes -----------------------------------------------------


def ones(*shape: int) -> tg.Tensor:
    return tg.tensor(np.ones(shape))


SHAPE_ERRORS = {
    "matmul": (lambda: ones(2, 3) @ ones(4, 5), r"matmul: .*\[2, 3\]\) @ .*\[4, 5\]\)"),
    "batched matmul": (lambda: ones(2, 2, 3) @ ones(3, 3, 4), r"matmul: \(2, 2, 3\) @ \(3, 3, 4\)"),
    "add": (lambda: ones(2, 3) + ones(4), r"add: .*\(2, 3\).*\(4,\)"),
    "reshape": (lambda: ones(6).reshape(4, 2), r"reshape: .*\(6,\).*\(4, 2\)"),
    "reshape -1": (lambda: ones(6).reshape(4, -1), r"reshape: .*\(6,\).*\(4, -1\)"),
    "getitem": (lambda: ones(2, 3)[:, 5], r"getitem: .*5.*size 3"),
    "concatenate": (lambda: tg.concatenate([ones(2, 3), ones(3, 2)]), r"concatenate: .*\(3, 2\)"),
    "broadcast_to": (lambda: tg.broadcast_to(ones(3), (2, 2)), r"broadcast_to: .*\(3,\).*\(2, 2\)"),
    "sum": (lambda: ones(2, 3).sum(axis=2), r"sum: dim 2"),
    "numpy squeeze": (lambda: tnp.squeeze(ones(2, 3), 0), r"squeeze: .*torch.Size\(\[2, 3\]\)"),
    "stack": (lambda: tg.stack([ones(2), ones(3)]), r"stack: .*Size\(\[2\]\).*Size\(\[3\]\)"),
    "where": (lambda: tg.where(ones(2) > 0, ones(3), 0.0), r"where: .*\(2,\).*\(3,\)"),
}  # fmt: skip


@pytest.mark.parametrize("name", SHAPE_ERRORS)
def test_shape_errors_name_the_op_and_the_shapes(name: str) -> None:
    fn, message = SHAPE_ERRORS[name]
    with pytest.raises(tg.ShapeError, match=message) as info:
        fn()
    assert isinstance(info.value, ValueError)
    assert "test_ops.py" in str(info.value)  # and where the user called it


@pytest.mark.parametrize(
    "base, exponent",
    [
        (np.float32(0.9), np.float32(3.0)),  # a data exponent that happens to be 3 (Adam's step)
        (np.arange(-3.0, 3.0, dtype=np.float32), 3.0),
        (np.arange(-3.0, 3.0, dtype=np.float32), np.float64(4.0)),  # promotes, like np.power
        (np.arange(-3.0, 3.0, dtype=np.float32), np.float32(2.5)),
        (0.9, np.array(3.0, np.float32)),
    ],
)
def test_pow_keeps_numpys_values_and_dtypes(base, exponent):
    from tracegrad.core.primitives import PRIMITIVES

    expected = np.power(base, exponent)
    got = np.asarray(PRIMITIVES["pow"].impl(base, exponent))
    assert got.dtype == np.asarray(expected).dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_traced_adam_like_power_of_a_step_counter_stays_float32():
    step = tg.tensor(np.float32(0.0))
    w = tg.tensor(np.ones(3, np.float32))

    @tg.trace(backend="numpy")
    def update():
        with tg.no_grad():
            step.__iadd__(1.0)
            w.__isub__(0.1 / (1.0 - 0.9**step))

    for _ in range(4):  # the step counter passes 3 and 4
        update()
        assert w.dtype == np.float32 and step.dtype == np.float32


def test_pow_rounds_alike_for_a_python_number_base_and_an_array_base():
    """Plans write constants as Python numbers, eager steps hold 0-d arrays: Adam's
    beta1 ** step must round the same either way (it once differed by an ulp at step 3)."""
    from tracegrad.core.primitives import PRIMITIVES

    power = PRIMITIVES["pow"].impl
    for step in (2.0, 3.0, 4.0, 5.0):
        exponent = np.array(step, np.float32)
        as_number, as_array = power(0.9, exponent), power(np.array(0.9, np.float32), exponent)
        assert as_number.dtype == as_array.dtype == np.float32
        assert as_number == as_array


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_new_unary_ops_traced_match_eager(backend: str, monkeypatch) -> None:
    """log1p, expm1, softplus and erf in one fused group: traced (a kernel on numba) as eager."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    w = tg.tensor(RNG.standard_normal((64, 32)).astype(np.float32))
    gm = tg.GradManager().attach(w)

    def step(x):
        with gm:
            y = tg.softplus(x * w) + tg.erf(w) * tg.expm1(0.1 * w) + tg.log1p(w * w)
            loss = y.sum()
            gm.backward(loss)
        return loss, w.grad

    x = RNG.standard_normal((64, 32)).astype(np.float32)
    loss, grad = step(x)
    want = (loss.numpy().copy(), grad.numpy().copy())
    w.grad = None
    traced = tg.trace(step, backend=backend)
    loss, grad = traced(x)
    np.testing.assert_allclose(loss.numpy(), want[0], rtol=1e-5)
    np.testing.assert_allclose(grad.numpy(), want[1], rtol=1e-5, atol=1e-6)
    assert ("kernel" in traced.source) == (backend == "numba")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("rows", [3, 300])  # below and above the size where bits are selected
def test_where_selects_numpys_bits(dtype, rows):
    """`where`'s implementation against np.where, bit for bit: NaN, infinities and -0.0 in the
    operand not taken, Python numbers weak, broadcasting either way, strided operands."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((rows, 40)) * 5).astype(dtype)
    y = (rng.standard_normal((rows, 40)) * 5).astype(dtype)
    if x.dtype.kind == "f":
        x[0, :4], y[-1, :4] = [np.nan, np.inf, -0.0, 1e-40], [-np.inf, np.nan, -0.0, 0.0]
    c = rng.random((rows, 40)) < 0.5
    cases = [(c, x, y), (c, x, 0.0), (c, x, -0.0), (c[:1], x, 0), (c, 0.0, y), (c, -0.0, y),
             (c[:1], 0, y), (c, 2, y), (c, x, y[:1]),
             (c[:, :1], x, y), (c[::2], x[::2, ::-1], y[::2]), (c, 1.0, 2.0),
             (c, x[0, 0], y)]  # fmt: skip
    for cond, a, b in cases:
        want, got = np.where(cond, a, b), P.where.impl(cond, a, b)
        assert (got.dtype, got.shape) == (want.dtype, want.shape)
        np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def _gelu_reference(x: np.ndarray, approximate: str) -> tuple[np.ndarray, np.ndarray]:
    """GELU and its slope per element in float64 from Python's math, written from the
    definitions (not from the ops' formulas)."""
    if approximate == "tanh":
        c, a = math.sqrt(2 / math.pi), 0.044715

        def f(v):
            return 0.5 * v * (1 + math.tanh(c * (v + a * v**3)))

        def df(v):
            t = math.tanh(c * (v + a * v**3))
            return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * a * v * v)
    else:

        def f(v):
            return v * 0.5 * math.erfc(-v / math.sqrt(2))

        def df(v):
            return 0.5 * math.erfc(-v / math.sqrt(2)) + v * math.exp(-v * v / 2) / math.sqrt(
                2 * math.pi
            )

    flat = [float(v) for v in np.ravel(x)]
    return (np.reshape([f(v) for v in flat], np.shape(x)),
            np.reshape([df(v) for v in flat], np.shape(x)))  # fmt: skip


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_its_slope_against_math(approximate):
    """Over more than one block (with a tail), strided, float64 to 1e-14 and float32 to a few
    ulps of erf or tanh near 1 times |x| (the exact form's 1 + erf(x) cancels where x << 0, as
    PyTorch's); an int input computes in float64, as PyTorch's."""
    forward = P.gelu_tanh if approximate == "tanh" else P.gelu
    slope = P.gelu_tanh_slope if approximate == "tanh" else P.gelu_slope
    x = np.concatenate([np.linspace(-12, 12, 70_001), [-40.0, 40.0, 0.0, -0.0, 1e-30]])
    want_y, want_dy = _gelu_reference(x, approximate)
    np.testing.assert_allclose(forward.impl(x), want_y, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(slope.impl(x), want_dy, rtol=1e-13, atol=1e-13)  # math's cancels
    x32 = x.astype(np.float32)
    scale = np.maximum(1, np.abs(x))  # |x| times erf's or tanh's few ulps near 1
    for impl, want in ((forward.impl, want_y), (slope.impl, want_dy)):
        got = impl(x32)
        assert got.dtype == np.float32
        assert np.all(np.abs(got - want) <= 4e-6 * np.abs(want) + 3e-7 * scale), impl.__name__
    strided = x.reshape(-1, 2)[:, ::-1]
    np.testing.assert_array_equal(forward.impl(strided), forward.impl(strided.copy()))
    ints = np.arange(-3, 4)
    assert forward.impl(ints).dtype == np.float64
    np.testing.assert_allclose(forward.impl(ints), _gelu_reference(ints, approximate)[0])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients_to_second_order(approximate):
    x = RNG.uniform(-4, 4, (3, 5))
    check_grad(lambda t: tg.nn.functional.gelu(t, approximate=approximate), x)

    def slope(t):
        t = t if t.requires_grad else t.detach().requires_grad_()  # finite differences' calls
        (g,) = tg.autograd.grad(tg.nn.functional.gelu(t, approximate).sum(), t, create_graph=True)
        return g

    check_grad(slope, x)


def test_silu_and_its_slope_against_math():
    """Over more than one block, float64 to 1e-15 and float32 to a few ulps; no overflow far
    out (exp(-x) is never taken of a large x), where x s(x) -> 0 and x, its slope -> 0 and 1."""
    x = np.concatenate([np.linspace(-40, 40, 70_001), [-1000.0, 1000.0, 0.0, -0.0, 1e-30]])

    def sigmoid(v):
        return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))

    def reference(x):
        return (np.array([v * sigmoid(v) for v in x]),
                np.array([sigmoid(v) + v * sigmoid(v) * (1 - sigmoid(v)) for v in x]))  # fmt: skip

    want_y, want_dy = reference(x)
    x32 = x.astype(np.float32)
    want32 = reference(x32.astype(np.float64))  # of the float32 inputs: their rounding aside
    # the slope s (1 + x (1 - s)) cancels near x = -1.28: its error is relative to s (1 + |x|)
    terms = (np.abs(want32[0]), np.array([sigmoid(v) * (1 + abs(v)) for v in x32.astype(float)]))
    with np.errstate(over="raise", invalid="raise"):
        np.testing.assert_allclose(P.silu.impl(x), want_y, rtol=1e-15, atol=1e-300)
        np.testing.assert_allclose(P.silu_slope.impl(x), want_dy, rtol=1e-13, atol=1e-15)
        for impl, want, scale in zip((P.silu.impl, P.silu_slope.impl), want32, terms, strict=True):
            got = impl(x32)
            assert got.dtype == np.float32
            assert np.all(np.abs(got - want) <= 4e-7 * scale + 1e-37), impl.__name__


def test_silu_gradients_to_second_order():
    x = RNG.uniform(-6, 6, (3, 5))
    check_grad(tg.nn.functional.silu, x)

    def slope(t):
        t = t if t.requires_grad else t.detach().requires_grad_()  # finite differences' calls
        (g,) = tg.autograd.grad(tg.nn.functional.silu(t).sum(), t, create_graph=True)
        return g

    check_grad(slope, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_around_a_kept_axis_matches_numpy(dtype):
    """Summing over the first and the last axes (batch norm's statistics) takes a product with
    ones: NumPy's shapes and dtypes, its values to its own rounding, NaN and inf propagated;
    strided arrays and other axes take NumPy's sum."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8, 16, 16)).astype(dtype)
    x[3, 2, 0, 0], x[5, 4, 1, 1] = np.nan, np.inf
    tol = 1e-5 if dtype == np.float32 else 1e-13
    for axis in [(0, 2, 3), (0, 3), (-1, -2, -4), (0, 1, 3), (0, 1), (1, 2, 3), (0,)]:
        for keepdims in (False, True):
            for a in (x, x[:, :, ::-1]):
                got = P.sum.impl(a, axis=axis, keepdims=keepdims)
                want = np.sum(a.astype(np.float64), axis=axis, keepdims=keepdims)
                assert got.dtype == dtype and got.shape == want.shape, (axis, keepdims)
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol * 64 * 16 * 16)
    sums = P.sum.impl(x, axis=(0, 2, 3))
    assert np.isnan(sums[2]) and np.isinf(sums[4])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sum_of_a_few_trailing_elements_is_numpys_to_the_bit(dtype):
    """A sum over trailing axes of 2 to SHORT_MAX elements a result (a nearest upsampling's
    gradient) adds columns: NumPy's values bit for bit, NaN and inf where NumPy has them, its
    shapes, whatever the layout; more elements a result take NumPy's sum. A traced sum of
    that shape calls the same function and gives the same bits."""
    from tracegrad.core.ops import reductions

    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 16, 64, 2)).astype(dtype)
    x[3, 2, 0, 1], x[5, 4, 1, 0] = np.nan, -np.inf
    for axis, short in [((3,), 1), ((-1,), 1), ((2, 3), None), ((1, 3), None)]:
        assert reductions.short_rows(x.shape, x.dtype, axis) == short
        for keepdims in (False, True):
            for a in (x, x[:, ::-1], x[:, 4:12]):  # a channel slice, as of a gradient
                got = P.sum.impl(a, axis=axis, keepdims=keepdims)
                want = np.add.reduce(a, axis=axis, keepdims=keepdims)
                assert got.dtype == dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)
    y = x.reshape(32, 16, 32, 2, 2)
    assert reductions.short_rows(y.shape, y.dtype, (3, 4)) == 2
    for a in (y, y[:, 2:9]):
        np.testing.assert_array_equal(P.sum.impl(a, axis=(3, 4)), np.add.reduce(a, axis=(3, 4)))
    traced = tg.trace(lambda t: t.sum(dim=(3, 4)))
    np.testing.assert_array_equal(traced(tg.tensor(y)).numpy(), np.add.reduce(y, axis=(3, 4)))
    assert "np.add.reduce" not in traced.source  # the plan calls sum's own function


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_tanh_and_sigmoid_gradients_are_one_op_and_differentiate_again(rng, name):
    """Their VJPs are one op each (`tanh_grad`, `sigmoid_grad`) that rounds as the composition
    g (1 - y^2), g y (1 - y) does; the VJP's own VJPs give second derivatives, checked against
    finite differences of the first (float64), and both ops' gradients in g and y likewise."""
    f = getattr(tg, name)
    x0, c = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    for dtype in (np.float32, np.float64):
        x = tg.tensor(x0.astype(dtype), requires_grad=True)
        y = f(x)
        (y * tg.tensor(c.astype(dtype))).sum().backward()
        o, cd = y.detach().numpy(), c.astype(dtype)
        slope = 1 - o * o if name == "tanh" else o * (1 - o)
        np.testing.assert_array_equal(x.grad.numpy(), cd * slope)

    def first(x: tg.Tensor) -> tg.Tensor:  # f'(x) c, differentiable where x requires grad
        x = x if x.requires_grad else x.detach().requires_grad_()  # finite differences' calls
        (g,) = tg.autograd.grad((f(x) * tg.tensor(c)).sum(), [x], create_graph=True)
        return g

    check_grad(first, x0)
    op = P.tanh_grad if name == "tanh" else P.sigmoid_grad
    y0 = np.tanh(x0) if name == "tanh" else 1 / (1 + np.exp(-x0))
    check_grad(op, c, y0)
