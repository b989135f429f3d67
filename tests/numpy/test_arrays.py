"""tracegrad.numpy: NumPy's differentiable functions (HIPS autograd's list) with NumPy's
meanings: values against NumPy, gradients against float64 finite differences, a representative
set traced on both backends and to second order; NumPy's own calls on tensors dispatch here."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tests.conftest import check_grad, numeric_grad
from tracegrad.compiler import lowering

R = np.random.default_rng(7)
M = R.standard_normal((3, 4))
M2 = R.standard_normal((3, 4))
V = R.standard_normal(4)
SQ = R.standard_normal((3, 3)) + 3 * np.eye(3)
UNIT = R.uniform(-0.8, 0.8, (2, 3))
ABOVE1 = R.uniform(1.2, 3.0, (2, 3))
POS = R.uniform(0.3, 2.0, (2, 3))

# name: (function, inputs); the NumPy function of the same name is the oracle unless noted
UNARY = {
    "tan": [UNIT], "arcsin": [UNIT], "arccos": [UNIT], "arctan": [M], "sinh": [M], "cosh": [M],
    "arcsinh": [M], "arccosh": [ABOVE1], "arctanh": [UNIT], "log2": [POS], "log10": [POS],
    "exp2": [M], "square": [M], "reciprocal": [POS], "deg2rad": [M], "rad2deg": [M],
    "sinc": [M], "expm1": [M], "log1p": [POS],
}  # fmt: skip
BINARY = {
    "arctan2": [M, M2], "hypot": [M, M2], "logaddexp": [M, M2],
    "logaddexp2": [M, M2], "fmax": [M, M2], "fmin": [M, M2],
    "remainder": [M * 3, POS[:1, :1] + 1], "fmod": [M * 3, POS[:1, :1] + 1],
}  # fmt: skip
SHAPES = {
    "cumsum": (lambda x: tnp.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1), [M]),
    "cumsum flat": (tnp.cumsum, np.cumsum, [M]),
    "cumprod": (lambda x: tnp.cumprod(x, axis=0), lambda x: np.cumprod(x, axis=0), [M]),
    "cumprod flat": (tnp.cumprod, np.cumprod, [M]),
    "trapezoid": (tnp.trapezoid, np.trapezoid, [M]),
    "trapezoid x": (lambda y, x: tnp.trapezoid(y, x, axis=0),
                    lambda y, x: np.trapezoid(y, x, axis=0), [M, V[:3]]),
    "trapezoid dx": (lambda y: tnp.trapezoid(y, dx=0.3), lambda y: np.trapezoid(y, dx=0.3), [M]),
    "cov": (tnp.cov, np.cov, [M]),
    "cov 1-D": (tnp.cov, np.cov, [V]),
    "cov columns ddof": (lambda m: tnp.cov(m, rowvar=False, ddof=0),
                         lambda m: np.cov(m, rowvar=False, ddof=0), [M]),
    "cov of two": (lambda a, b: tnp.cov(a, b, bias=True), lambda a, b: np.cov(a, b, bias=True),
                   [V, V[::-1] * V]),
    "cov weights": (lambda m: tnp.cov(m, fweights=[1, 2, 1, 3], aweights=np.abs(V)),
                    lambda m: np.cov(m, fweights=[1, 2, 1, 3], aweights=np.abs(V)), [M]),
    "corrcoef": (tnp.corrcoef, np.corrcoef, [M]),
    "corrcoef of two": (tnp.corrcoef, np.corrcoef, [V, V * V]),
    "vander": (tnp.vander, np.vander, [V]),
    "i0": (tnp.i0, np.i0, [M * 3]),
    "meshgrid": (lambda a, b: tnp.stack(tnp.meshgrid(a, b)),
                 lambda a, b: np.stack(np.meshgrid(a, b)), [V, V[:3]]),
    "meshgrid ij": (lambda a, b: tnp.stack(tnp.meshgrid(a, b, indexing="ij")),
                    lambda a, b: np.stack(np.meshgrid(a, b, indexing="ij")), [V, V[:3]]),
    "meshgrid sparse": (lambda *xs: sum(g * (i + 1) for i, g in enumerate(tnp.meshgrid(
                            *xs, sparse=True))),
                        lambda *xs: sum(g * (i + 1) for i, g in enumerate(np.meshgrid(
                            *xs, sparse=True))), [V, V[:3], V[:2]]),
    "vander increasing": (lambda x: tnp.vander(x, 3, True), lambda x: np.vander(x, 3, True), [V]),
    "diff": (lambda x: tnp.diff(x, 2), lambda x: np.diff(x, 2), [M]),
    "sort": (lambda x: tnp.sort(x, 0), lambda x: np.sort(x, 0), [M]),
    "msort": (tnp.msort, lambda x: np.sort(x, 0), [M]),
    "partition": (lambda x: tnp.partition(x, 2), lambda x: np.partition(x, 2), [M]),
    "repeat": (lambda x: tnp.repeat(x, 2, 1), lambda x: np.repeat(x, 2, 1), [M]),
    "repeat flat": (lambda x: tnp.repeat(x, [1, 0, 2, 1]), lambda x: np.repeat(x, [1, 0, 2, 1]),
                    [V]),
    "tile": (lambda x: tnp.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), [M]),
    "roll": (lambda x: tnp.roll(x, 1, 1), lambda x: np.roll(x, 1, 1), [M]),
    "roll flat": (lambda x: tnp.roll(x, -5), lambda x: np.roll(x, -5), [M]),
    "rot90": (lambda x: tnp.rot90(x, 1), lambda x: np.rot90(x, 1), [M]),
    "rot90 k=3": (lambda x: tnp.rot90(x, 3), lambda x: np.rot90(x, 3), [M]),
    "rot90 k=2": (lambda x: tnp.rot90(x, 2), lambda x: np.rot90(x, 2), [M]),
    "flip": (tnp.flip, np.flip, [M]), "fliplr": (tnp.fliplr, np.fliplr, [M]),
    "flipud": (tnp.flipud, np.flipud, [M]),
    "pad": (lambda x: tnp.pad(x, ((1, 0), (2, 1)), constant_values=0.5),
            lambda x: np.pad(x, ((1, 0), (2, 1)), constant_values=0.5), [M]),
    "triu": (lambda x: tnp.triu(x, 1), lambda x: np.triu(x, 1), [M]),
    "tril": (lambda x: tnp.tril(x, -1), lambda x: np.tril(x, -1), [M]),
    "diag 1-D": (lambda x: tnp.diag(x, -1), lambda x: np.diag(x, -1), [V]),
    "diag 2-D": (lambda x: tnp.diag(x, 1), lambda x: np.diag(x, 1), [M]),
    "diagonal": (lambda x: tnp.diagonal(x, 0, 2, 0), lambda x: np.diagonal(x, 0, 2, 0),
                 [R.standard_normal((3, 2, 4))]),
    "trace": (lambda x: tnp.trace(x, 1), lambda x: np.trace(x, 1), [M]),
    "outer": (tnp.outer, np.outer, [V, M[0]]),
    "inner": (tnp.inner, np.inner, [M, M]),
    "dot": (tnp.dot, np.dot, [M, M.T]),
    "dot 3-D": (tnp.dot, np.dot, [M, R.standard_normal((2, 4, 3))]),
    "tensordot": (lambda a, b: tnp.tensordot(a, b, ([0, 1], [1, 0])),
                  lambda a, b: np.tensordot(a, b, ([0, 1], [1, 0])), [M, M.T]),
    "kron": (tnp.kron, np.kron, [M[:2, :2], M[1:, 1:]]),
    "cross": (tnp.cross, np.cross, [M[:, :3], M[:, 1:]]),
    "einsum": (lambda a, b: tnp.einsum("ij,kj->ik", a, b),
               lambda a, b: np.einsum("ij,kj->ik", a, b), [M, M]),
    "einsum implicit ...": (lambda a, b: tnp.einsum("...j,j", a, b),
                            lambda a, b: np.einsum("...j,j", a, b), [M, V]),
    "einsum summed alone": (lambda a: tnp.einsum("ij->j", a), lambda a: np.einsum("ij->j", a), [M]),
    "var": (lambda x: tnp.var(x, 1, ddof=1), lambda x: np.var(x, 1, ddof=1), [M]),
    "std": (lambda x: tnp.std(x, keepdims=True), lambda x: np.std(x, keepdims=True), [M]),
    "nan_to_num": (tnp.nan_to_num, np.nan_to_num, [M]),
    "real/imag/conj": (lambda x: tnp.real(x) + tnp.imag(x) + tnp.conj(x),
                       lambda x: np.real(x) + np.imag(x) + np.conj(x), [M]),
    "moveaxis": (lambda x: tnp.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1),
                 [R.standard_normal((2, 3, 4))]),
    "swapaxes": (lambda x: tnp.swapaxes(x, 0, 2), lambda x: np.swapaxes(x, 0, 2),
                 [R.standard_normal((2, 3, 4))]),
    "rollaxis": (lambda x: tnp.rollaxis(x, 2), lambda x: np.rollaxis(x, 2),
                 [R.standard_normal((2, 3, 4))]),
    "atleast_3d": (tnp.atleast_3d, np.atleast_3d, [M]),
    "atleast_2d": (tnp.atleast_2d, np.atleast_2d, [V]),
    "split": (lambda x: tnp.split(x, 2, 1)[1], lambda x: np.split(x, 2, 1)[1], [M]),
    "array_split": (lambda x: tnp.array_split(x, 3, 1)[0], lambda x: np.array_split(x, 3, 1)[0],
                    [M]),
    "hsplit": (lambda x: tnp.hsplit(x, [1, 3])[1], lambda x: np.hsplit(x, [1, 3])[1], [M]),
    "vsplit": (lambda x: tnp.vsplit(x, 3)[2], lambda x: np.vsplit(x, 3)[2], [M]),
    "dsplit": (lambda x: tnp.dsplit(x, 2)[0], lambda x: np.dsplit(x, 2)[0],
               [R.standard_normal((2, 1, 4))]),
    "broadcast_to": (lambda x: tnp.broadcast_to(x, (2, 4)), lambda x: np.broadcast_to(x, (2, 4)),
                     [V]),
    "full": (lambda x: tnp.full((2, 3), x), lambda x: np.full((2, 3), x), [np.array(0.7)]),
    "linspace": (lambda a, b: tnp.linspace(a, b, 5), lambda a, b: np.linspace(a, b, 5),
                 [np.array(0.5), np.array(2.0)]),
    "where": (lambda a, b: tnp.where(a > b, a, b), lambda a, b: np.where(a > b, a, b), [M, M2]),
    "select": (lambda x: tnp.select([x < -0.5, x > 0.5], [x * 2, x * x], default=x),
               lambda x: np.select([x < -0.5, x > 0.5], [x * 2, x * x], default=x), [M]),
    "clip": (lambda x: tnp.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), [M]),
    "trace numpy args": (lambda x: tnp.trace(x, 0, 0, 1), lambda x: np.trace(x, 0, 0, 1), [SQ]),
    "remainder %": (lambda x: x % 0.7, lambda x: x % 0.7, [M]),
    "mean of a list": (lambda a, b: tnp.mean([a, b], axis=0), lambda a, b: np.mean([a, b], axis=0),
                       [V, V[::-1]]),
    "append": (lambda a, b: tnp.append(a, b), np.append, [M, V]),
    "append axis": (lambda a, b: tnp.append(a, b, 0), lambda a, b: np.append(a, b, 0), [M, M2]),
    "where of floats": (lambda a: tnp.where(a - a.astype(np.int64), a, -a),
                        lambda a: np.where(a - a.astype(np.int64), a, -a), [M]),
    "ravel": (tnp.ravel, np.ravel, [M]), "hstack": (lambda a: tnp.hstack([a, a]),
                                                   lambda a: np.hstack([a, a]), [M]),
    "gradient": (lambda x: tnp.gradient(x, axis=1), lambda x: np.gradient(x, axis=1), [M]),
    "take_along_axis": (lambda x: tnp.take_along_axis(x, np.argsort(M, 1), 1),
                        lambda x: np.take_along_axis(x, np.argsort(M, 1), 1), [M]),
}  # fmt: skip
LINALG = {
    "inv": (tnp.linalg.inv, np.linalg.inv, [SQ]),
    "det": (tnp.linalg.det, np.linalg.det, [SQ]),
    "slogdet": (lambda a: tnp.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1], [-SQ]),
    "solve": (tnp.linalg.solve, np.linalg.solve, [SQ, M[:, :2]]),
    "solve vector": (tnp.linalg.solve, np.linalg.solve, [SQ, V[:3]]),
    "pinv": (tnp.linalg.pinv, np.linalg.pinv, [M]),
    "qr q": (lambda a: tnp.linalg.qr(a)[0], lambda a: np.linalg.qr(a)[0], [M.T]),
    "qr r wide": (lambda a: tnp.linalg.qr(a, "r"), lambda a: np.linalg.qr(a, "r"), [M]),
    "norm": (tnp.linalg.norm, np.linalg.norm, [M]),
    "norm ord=3 axis": (lambda a: tnp.linalg.norm(a, 3, 1), lambda a: np.linalg.norm(a, 3, 1), [M]),
    "norm ord=inf matrix": (lambda a: tnp.linalg.norm(a, np.inf),
                            lambda a: np.linalg.norm(a, np.inf), [M]),
    "cholesky": (lambda a: tnp.linalg.cholesky(a @ a.T), lambda a: np.linalg.cholesky(a @ a.T),
                 [SQ]),
    "eigh values": (lambda a: tnp.linalg.eigh(a + a.T)[0], lambda a: np.linalg.eigh(a + a.T)[0],
                    [SQ]),
    "svd s": (lambda a: tnp.linalg.svd(a, compute_uv=False), lambda a: np.linalg.svd(a)[1], [M]),
    # singular and eigenvectors have a sign per column: compare sign-free functions of them
    "svd u": (lambda a: tnp.linalg.svd(a, False).U ** 2,
              lambda a: np.linalg.svd(a, False)[0] ** 2, [M]),
    "svd vh": (lambda a: tnp.linalg.svd(a, False)[2] ** 2,
               lambda a: np.linalg.svd(a, False)[2] ** 2, [M.T]),
    "norm nuc": (lambda a: tnp.linalg.norm(a, "nuc"), lambda a: np.linalg.norm(a, "nuc"), [M]),
    "norm 2 keepdims": (lambda a: tnp.linalg.norm(a, 2, (0, 2), True),
                        lambda a: np.linalg.norm(a, 2, (0, 2), True), [M.reshape(3, 2, 2)]),
    "make_diagonal": (tnp.make_diagonal, lambda d: d[..., None] * np.eye(d.shape[-1]), [M]),
    "eigh upper": (lambda a: tnp.linalg.eigh(a, "U")[0], lambda a: np.linalg.eigh(a, "U")[0],
                   [SQ]),  # the lower triangle is not read: its gradient is 0
    "eigvalsh": (tnp.linalg.eigvalsh, np.linalg.eigvalsh, [SQ]),
    "eigh vectors": (lambda a: tnp.linalg.eigh(a + a.T)[1] ** 2,
                     lambda a: np.linalg.eigh(a + a.T)[1] ** 2, [SQ]),
}  # fmt: skip

CASES = {
    **{n: (getattr(tnp, n), getattr(np, n), xs) for n, xs in {**UNARY, **BINARY}.items()},
    **SHAPES,
    **LINALG,
}


@pytest.mark.parametrize("name", CASES)
def test_values_match_numpy_and_gradients_match_finite_differences(name):
    fn, oracle, xs = CASES[name]
    got = fn(*[tg.tensor(x) for x in xs])
    want = oracle(*xs)
    assert got.shape == np.shape(want), name
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    check_grad(fn, *xs, tol=1e-5)


def test_float32_stays_float32():
    x = tg.tensor(np.abs(UNIT).astype(np.float32))
    for op in ("tan", "arcsin", "log2", "exp2", "cumsum", "sort", "sinc", "square"):
        assert getattr(tnp, op)(x).dtype == np.float32, op
    assert tnp.arctan2(x, x).dtype == np.float32


def test_numpy_calls_dispatch_and_keep_the_gradient():
    x = tg.tensor(M, requires_grad=True)
    out = np.cumsum(np.sort(np.arctan2(x, 1.0), axis=1), axis=0) + np.square(np.flip(x))
    out = out + np.linalg.norm(x) + np.trace(x) + (x // 0.5) + np.linalg.pinv(x).T
    assert isinstance(out, tg.Tensor)
    out.sum().backward()
    assert x.grad is not None and np.all(x.grad.numpy() != 0)


def test_numpy_calls_on_tensors_have_numpy_meanings():
    """np.max(t, axis=0) is the values, np.split(t, 3) three sections, np.sum(t, axis=1) and
    np.var(t) NumPy's: through __array_function__ to tracegrad.numpy, never detached."""
    x = tg.tensor(M, requires_grad=True)
    got = [
        np.sum(x, axis=1),
        np.max(x, axis=0),
        np.var(x),
        np.split(x, 2, axis=1)[1],
        np.sort(x, axis=None),
        np.repeat(x, 2, axis=0),
        np.transpose(x),
        np.squeeze(x[:1]),
    ]
    want = [
        np.sum(M, axis=1),
        np.max(M, axis=0),
        np.var(M),
        np.split(M, 2, axis=1)[1],
        np.sort(M, axis=None),
        np.repeat(M, 2, axis=0),
        np.transpose(M),
        np.squeeze(M[:1]),
    ]
    for g, w in zip(got, want, strict=True):
        assert isinstance(g, tg.Tensor) and g.requires_grad
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)
    assert len(np.split(tg.tensor(np.arange(6.0)), 3)) == 3
    sum(g.sum() for g in got).backward()
    assert x.grad is not None


def test_numpy_meanings_where_pytorch_differs():
    """One meaning per name, NumPy's: split into sections, var with ddof=0, max the values,
    sort the values, repeat element-wise, trace the diagonal sum, Python floats float64."""
    a = np.arange(1.0, 7.0)
    assert [p.tolist() for p in tnp.split(a, 2)] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    assert np.isclose(tnp.std(a).item(), np.std(a)) and np.isclose(tnp.var(a, ddof=1).item(), 3.5)
    assert tnp.max(M, axis=1).shape == (3,) and tnp.sort(M).shape == M.shape
    assert tnp.repeat(a[:2], 2).tolist() == [1.0, 1.0, 2.0, 2.0]
    assert tnp.trace(SQ).item() == np.trace(SQ)
    assert tnp.array([0.5]).dtype == np.float64 and tnp.sin(0.5).dtype == np.float64
    assert tnp.zeros(2).dtype == np.float64 and tnp.linspace(0, 1, 3).dtype == np.float64
    assert tnp.where(a > 4)[0].tolist() == [4, 5] and tnp.squeeze(M[:1]).shape == (4,)
    assert tnp.pi == np.pi and tnp.newaxis is None and tnp.float64 is np.float64
    assert tnp.allclose(tnp.array(a), a) and tnp.random.randn(2).shape == (2,)
    np.testing.assert_allclose(tnp.median(M, axis=1).numpy(), np.median(M, axis=1))


def test_numpy_namespace_takes_numpy_keywords_only():
    import inspect

    functions = [getattr(tnp, n) for n in tnp.__all__ if inspect.isfunction(getattr(tnp, n))]
    functions += [getattr(tnp.linalg, n) for n in tnp.linalg.__all__]
    assert len(functions) > 150
    with_dim = [f.__name__ for f in functions
                if {"dim", "keepdim"} & set(inspect.signature(f).parameters)]  # fmt: skip
    assert not with_dim, with_dim
    with pytest.raises(TypeError, match="dim"):
        tnp.sum(M, dim=0)


def test_einsum_sublist_form():
    """einsum(A, [0, 1], B, [1, 2]) as NumPy's (and PyTorch's); it was an error."""
    a, b = M, M.T * 2
    np.testing.assert_allclose(tnp.einsum(a, [0, 1], b, [1, 2]).numpy(),
                               np.einsum(a, [0, 1], b, [1, 2]))  # fmt: skip
    np.testing.assert_allclose(tnp.einsum(a, [0, 1], b, [1, 2], [2, 0]).numpy(),
                               np.einsum(a, [0, 1], b, [1, 2], [2, 0]))  # fmt: skip
    np.testing.assert_allclose(tnp.einsum(a, [Ellipsis, 1], [Ellipsis]).numpy(),
                               np.einsum(a, [Ellipsis, 1], [Ellipsis]))  # fmt: skip
    check_grad(lambda x, y: tnp.einsum(x, [0, 1], y, [1, 2]), a, b)


def test_as_tensor_of_a_list_of_tensors_stacks_instead_of_detaching():
    a, b = tg.tensor(1.0, requires_grad=True), tg.tensor(3.0, requires_grad=True)
    tnp.mean([a, b * b]).backward()
    assert a.grad.item() == 0.5 and b.grad.item() == 3.0
    with pytest.raises(TypeError, match="stack"):
        tg.tensor([a, b])


def test_errors_name_the_op():
    with pytest.raises(tg.ShapeError, match="einsum 'ij,jk->ik'"):
        tnp.einsum("ij,jk->ik", M, M)
    with pytest.raises(tg.ShapeError, match="square"):
        tnp.linalg.inv(M)
    with pytest.raises(tg.ShapeError, match="split"):
        tnp.split(M, 3, 1)
    with pytest.raises(NotImplementedError, match="only 'constant'"):
        tnp.pad(M, 1, mode="reflect")


SMOOTH = {
    "tan": lambda x: tnp.tan(x * 0.3), "arcsinh": tnp.arcsinh,
    "logaddexp": lambda x: tnp.logaddexp(x, x * x),
    "cumsum": lambda x: tnp.cumsum(x * x), "einsum": lambda x: tnp.einsum("i,i->", x, tnp.sin(x)),
    "inv": lambda x: tnp.linalg.inv(tnp.reshape(x, (2, 2)) + 3 * np.eye(2)),
    "det": lambda x: tnp.linalg.det(tnp.reshape(x, (2, 2))),
    "eigh": lambda x: tnp.linalg.eigh(tnp.reshape(x, (2, 2)) + tnp.reshape(x, (2, 2)).T)[0],
    "var": lambda x: tnp.var(x * x),
}  # fmt: skip


@pytest.mark.parametrize("name", SMOOTH)
def test_second_order(name):
    fn = SMOOTH[name]
    a = np.array([0.7, 1.3, 0.4, 1.9])
    c = np.random.default_rng(3).standard_normal(fn(tg.tensor(a)).shape)

    def first(x):
        return tg.grad(lambda t: (fn(t) * c).sum())(x)

    second = tg.grad(lambda x: first(x).sum())(tg.tensor(a))
    expected = numeric_grad(lambda v: float(first(tg.tensor(v)).numpy().sum()), a)
    np.testing.assert_allclose(second.numpy(), expected, rtol=1e-6, atol=1e-7)


TRACED = ["tan", "arctan2", "hypot", "remainder", "logaddexp", "sinc", "cumsum", "sort", "pad",
          "einsum", "tile", "diag 1-D", "inv", "solve", "cholesky", "eigh values",
          "kron", "svd u", "pinv"]  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_gradients_match_eager(backend, monkeypatch):
    """One traced step computes every case's loss and gradients; they match eager ones."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    names = TRACED
    params = {n: [tg.tensor(x, requires_grad=True) for x in CASES[n][2]] for n in names}
    flat = [p for ps in params.values() for p in ps]
    gm = tg.GradManager().attach(flat)

    def step():
        with gm:
            losses = [(CASES[n][0](*params[n]) ** 2).sum() for n in names]
            gm.backward(tg.stack(losses).sum())
        return tg.stack(losses)

    eager = step().numpy()
    eager_grads = [p.grad.numpy().copy() for p in flat]
    for p in flat:
        p.grad = None
    traced = tg.trace(step, backend=backend)
    for _ in range(2):  # the second call runs the compiled plan
        for p in flat:
            p.grad = None
        got = traced().numpy()
    np.testing.assert_allclose(got, eager, rtol=1e-10)
    for p, g in zip(flat, eager_grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g, rtol=1e-9, atol=1e-12)
