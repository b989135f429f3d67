"""NumPy's differentiable functions (HIPS autograd's list): values against NumPy, gradients
against float64 finite differences, a representative set traced on both backends and to second
order."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import check_grad, numeric_grad

import tracegrad as tg
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
    "cumsum": (lambda x: tg.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1), [M]),
    "cumsum flat": (tg.cumsum, np.cumsum, [M]),
    "diff": (lambda x: tg.diff(x, 2), lambda x: np.diff(x, 2), [M]),
    "sort": (lambda x: tg.sort(x, 0), lambda x: np.sort(x, 0), [M]),
    "msort": (tg.msort, lambda x: np.sort(x, 0), [M]),
    "partition": (lambda x: tg.partition(x, 2), lambda x: np.partition(x, 2), [M]),
    "repeat": (lambda x: tg.repeat(x, 2, 1), lambda x: np.repeat(x, 2, 1), [M]),
    "repeat flat": (lambda x: tg.repeat(x, [1, 0, 2, 1]), lambda x: np.repeat(x, [1, 0, 2, 1]),
                    [V]),
    "tile": (lambda x: tg.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), [M]),
    "roll": (lambda x: tg.roll(x, 1, 1), lambda x: np.roll(x, 1, 1), [M]),
    "roll flat": (lambda x: tg.roll(x, -5), lambda x: np.roll(x, -5), [M]),
    "rot90": (lambda x: tg.rot90(x, 1), lambda x: np.rot90(x, 1), [M]),
    "rot90 k=3": (lambda x: tg.rot90(x, 3), lambda x: np.rot90(x, 3), [M]),
    "rot90 k=2": (lambda x: tg.rot90(x, 2), lambda x: np.rot90(x, 2), [M]),
    "flip": (tg.flip, np.flip, [M]), "fliplr": (tg.fliplr, np.fliplr, [M]),
    "flipud": (tg.flipud, np.flipud, [M]),
    "pad": (lambda x: tg.pad(x, ((1, 0), (2, 1)), constant_values=0.5),
            lambda x: np.pad(x, ((1, 0), (2, 1)), constant_values=0.5), [M]),
    "triu": (lambda x: tg.triu(x, 1), lambda x: np.triu(x, 1), [M]),
    "tril": (lambda x: tg.tril(x, -1), lambda x: np.tril(x, -1), [M]),
    "diag 1-D": (lambda x: tg.diag(x, -1), lambda x: np.diag(x, -1), [V]),
    "diag 2-D": (lambda x: tg.diag(x, 1), lambda x: np.diag(x, 1), [M]),
    "diagonal": (lambda x: tg.diagonal(x, 0, 2, 0), lambda x: np.diagonal(x, 0, 2, 0),
                 [R.standard_normal((3, 2, 4))]),
    "trace": (lambda x: tg.trace(x, 1), lambda x: np.trace(x, 1), [M]),
    "outer": (tg.outer, np.outer, [V, M[0]]),
    "inner": (tg.inner, np.inner, [M, M]),
    "dot": (tg.dot, np.dot, [M, M.T]),
    "dot 3-D": (tg.dot, np.dot, [M, R.standard_normal((2, 4, 3))]),
    "tensordot": (lambda a, b: tg.tensordot(a, b, ([0, 1], [1, 0])),
                  lambda a, b: np.tensordot(a, b, ([0, 1], [1, 0])), [M, M.T]),
    "kron": (tg.kron, np.kron, [M[:2, :2], M[1:, 1:]]),
    "cross": (tg.cross, np.cross, [M[:, :3], M[:, 1:]]),
    "einsum": (lambda a, b: tg.einsum("ij,kj->ik", a, b),
               lambda a, b: np.einsum("ij,kj->ik", a, b), [M, M]),
    "einsum implicit ...": (lambda a, b: tg.einsum("...j,j", a, b),
                            lambda a, b: np.einsum("...j,j", a, b), [M, V]),
    "einsum summed alone": (lambda a: tg.einsum("ij->j", a), lambda a: np.einsum("ij->j", a), [M]),
    "var": (lambda x: tg.var(x, 1, ddof=1), lambda x: np.var(x, 1, ddof=1), [M]),
    "std": (lambda x: tg.std(x, keepdims=True), lambda x: np.std(x, keepdims=True), [M]),
    "nan_to_num": (tg.nan_to_num, np.nan_to_num, [M]),
    "real/imag/conj": (lambda x: tg.real(x) + tg.imag(x) + tg.conj(x),
                       lambda x: np.real(x) + np.imag(x) + np.conj(x), [M]),
    "moveaxis": (lambda x: tg.moveaxis(x, 0, -1), lambda x: np.moveaxis(x, 0, -1),
                 [R.standard_normal((2, 3, 4))]),
    "swapaxes": (lambda x: tg.swapaxes(x, 0, 2), lambda x: np.swapaxes(x, 0, 2),
                 [R.standard_normal((2, 3, 4))]),
    "rollaxis": (lambda x: tg.rollaxis(x, 2), lambda x: np.rollaxis(x, 2),
                 [R.standard_normal((2, 3, 4))]),
    "atleast_3d": (tg.atleast_3d, np.atleast_3d, [M]),
    "atleast_2d": (tg.atleast_2d, np.atleast_2d, [V]),
    "split": (lambda x: tg.split(x, 2, 1)[1], lambda x: np.split(x, 2, 1)[1], [M]),
    "array_split": (lambda x: tg.array_split(x, 3, 1)[0], lambda x: np.array_split(x, 3, 1)[0],
                    [M]),
    "hsplit": (lambda x: tg.hsplit(x, [1, 3])[1], lambda x: np.hsplit(x, [1, 3])[1], [M]),
    "vsplit": (lambda x: tg.vsplit(x, 3)[2], lambda x: np.vsplit(x, 3)[2], [M]),
    "dsplit": (lambda x: tg.dsplit(x, 2)[0], lambda x: np.dsplit(x, 2)[0],
               [R.standard_normal((2, 1, 4))]),
    "broadcast_to": (lambda x: tg.broadcast_to(x, (2, 4)), lambda x: np.broadcast_to(x, (2, 4)),
                     [V]),
    "full": (lambda x: tg.full((2, 3), x), lambda x: np.full((2, 3), x), [np.array(0.7)]),
    "linspace": (lambda a, b: tg.linspace(a, b, 5), lambda a, b: np.linspace(a, b, 5),
                 [np.array(0.5), np.array(2.0)]),
    "where": (lambda a, b: tg.where(a > b, a, b), lambda a, b: np.where(a > b, a, b), [M, M2]),
    "select": (lambda x: tg.select([x < -0.5, x > 0.5], [x * 2, x * x], default=x),
               lambda x: np.select([x < -0.5, x > 0.5], [x * 2, x * x], default=x), [M]),
    "clip": (lambda x: tg.clip(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), [M]),
    "trace numpy args": (lambda x: tg.trace(x, 0, 0, 1), lambda x: np.trace(x, 0, 0, 1), [SQ]),
    "remainder %": (lambda x: x % 0.7, lambda x: x % 0.7, [M]),
    "mean of a list": (lambda a, b: tg.mean([a, b], axis=0), lambda a, b: np.mean([a, b], axis=0),
                       [V, V[::-1]]),
    "ravel": (tg.ravel, np.ravel, [M]), "hstack": (lambda a: tg.hstack([a, a]),
                                                   lambda a: np.hstack([a, a]), [M]),
    "gradient": (lambda x: tg.gradient(x, axis=1), lambda x: np.gradient(x, axis=1), [M]),
    "take_along_axis": (lambda x: tg.take_along_axis(x, np.argsort(M, 1), 1),
                        lambda x: np.take_along_axis(x, np.argsort(M, 1), 1), [M]),
}  # fmt: skip
LINALG = {
    "inv": (tg.linalg.inv, np.linalg.inv, [SQ]),
    "det": (tg.linalg.det, np.linalg.det, [SQ]),
    "slogdet": (lambda a: tg.linalg.slogdet(a)[1], lambda a: np.linalg.slogdet(a)[1], [-SQ]),
    "solve": (tg.linalg.solve, np.linalg.solve, [SQ, M[:, :2]]),
    "solve vector": (tg.linalg.solve, np.linalg.solve, [SQ, V[:3]]),
    "pinv": (tg.linalg.pinv, np.linalg.pinv, [M]),
    "norm": (tg.linalg.norm, np.linalg.norm, [M]),
    "norm ord=3 axis": (lambda a: tg.linalg.norm(a, 3, 1), lambda a: np.linalg.norm(a, 3, 1), [M]),
    "norm ord=inf matrix": (lambda a: tg.linalg.norm(a, np.inf),
                            lambda a: np.linalg.norm(a, np.inf), [M]),
    "cholesky": (lambda a: tg.linalg.cholesky(a @ a.T), lambda a: np.linalg.cholesky(a @ a.T),
                 [SQ]),
    "eigh values": (lambda a: tg.linalg.eigh(a + a.T)[0], lambda a: np.linalg.eigh(a + a.T)[0],
                    [SQ]),
    "svd s": (lambda a: tg.linalg.svd(a, compute_uv=False), lambda a: np.linalg.svd(a)[1], [M]),
    # singular and eigenvectors have a sign per column: compare sign-free functions of them
    "svd u": (lambda a: tg.linalg.svd(a, False).U ** 2,
              lambda a: np.linalg.svd(a, False)[0] ** 2, [M]),
    "svd vh": (lambda a: tg.linalg.svd(a, False)[2] ** 2,
               lambda a: np.linalg.svd(a, False)[2] ** 2, [M.T]),
    "norm nuc": (lambda a: tg.linalg.norm(a, "nuc"), lambda a: np.linalg.norm(a, "nuc"), [M]),
    "norm 2 keepdims": (lambda a: tg.linalg.norm(a, 2, (0, 2), True),
                        lambda a: np.linalg.norm(a, 2, (0, 2), True), [M.reshape(3, 2, 2)]),
    "make_diagonal": (tg.make_diagonal, lambda d: d[..., None] * np.eye(d.shape[-1]), [M]),
    "eigh vectors": (lambda a: tg.linalg.eigh(a + a.T)[1] ** 2,
                     lambda a: np.linalg.eigh(a + a.T)[1] ** 2, [SQ]),
}  # fmt: skip

CASES = {
    **{n: (getattr(tg, n), getattr(np, n), xs) for n, xs in {**UNARY, **BINARY}.items()},
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
        assert getattr(tg, op)(x).dtype == np.float32, op
    assert tg.arctan2(x, x).dtype == np.float32


def test_numpy_calls_dispatch_and_keep_the_gradient():
    x = tg.tensor(M, requires_grad=True)
    out = np.cumsum(np.sort(np.arctan2(x, 1.0), axis=1), axis=0) + np.square(np.flip(x))
    out = out + np.linalg.norm(x) + np.trace(x) + (x // 0.5) + np.linalg.pinv(x).T
    assert isinstance(out, tg.Tensor)
    out.sum().backward()
    assert x.grad is not None and np.all(x.grad.numpy() != 0)


def test_as_tensor_of_a_list_of_tensors_stacks_instead_of_detaching():
    a, b = tg.tensor(1.0, requires_grad=True), tg.tensor(3.0, requires_grad=True)
    tg.mean([a, b * b]).backward()
    assert a.grad.item() == 0.5 and b.grad.item() == 3.0
    with pytest.raises(TypeError, match="stack"):
        tg.tensor([a, b])


def test_errors_name_the_op():
    with pytest.raises(tg.ShapeError, match="einsum 'ij,jk->ik'"):
        tg.einsum("ij,jk->ik", M, M)
    with pytest.raises(tg.ShapeError, match="square"):
        tg.linalg.inv(M)
    with pytest.raises(tg.ShapeError, match="split"):
        tg.split(M, 3, 1)
    with pytest.raises(NotImplementedError, match="only 'constant'"):
        tg.pad(M, 1, mode="reflect")


SMOOTH = {
    "tan": lambda x: tg.tan(x * 0.3), "arcsinh": tg.arcsinh,
    "logaddexp": lambda x: tg.logaddexp(x, x * x),
    "cumsum": lambda x: tg.cumsum(x * x), "einsum": lambda x: tg.einsum("i,i->", x, tg.sin(x)),
    "inv": lambda x: tg.linalg.inv(tg.reshape(x, (2, 2)) + 3 * np.eye(2)),
    "det": lambda x: tg.linalg.det(tg.reshape(x, (2, 2))),
    "eigh": lambda x: tg.linalg.eigh(tg.reshape(x, (2, 2)) + tg.reshape(x, (2, 2)).T)[0],
    "var": lambda x: tg.var(x * x),
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
