"""Complex tensors (frontend/elementwise.py's complex functions, the arithmetic ops' complex
rules): PyTorch's values and dtypes, and its convention for gradients, the cotangent of a real
loss being dL/dRe z + i dL/dIm z, checked against finite differences of both parts."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tracegrad.compiler import lowering

rng = np.random.default_rng(0)


def complex_normal(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


A, B = complex_normal(3, 4), complex_normal(3, 4)
R = rng.standard_normal((3, 4))

GRADIENTS = {
    "add": (lambda a, b: a + b * 2.0, A, B),
    "sub": (lambda a, b: a - b, A, B),
    "mul": (lambda a, b: a * b, A, B),
    "div": (lambda a, b: a / b, A, B),
    "exp": (tg.exp, A),
    "log": (tg.log, A),
    "sqrt": (tg.sqrt, A),
    "abs": (lambda a: a.abs(), A),
    "angle": (lambda a: a.angle(), A),
    "real": (lambda a: a.real, A),
    "imag": (lambda a: a.imag, A),
    "conj": (lambda a: a.conj(), A),
    "sgn": (tg.sgn, A),
    "complex": (tg.complex, R, R[0]),
    "polar": (tg.polar, np.abs(R), R),
    "view_as_real": (tg.view_as_real, A),
    "view_as_complex": (tg.view_as_complex, rng.standard_normal((3, 2, 2))),
    "real times complex": (lambda r, a: r * a, R, A),
    "complex number": (lambda a: (2 - 1j) * a + 1j, A),
    "matmul": (lambda a, b: a @ b, A, B.T),
    "batched matmul": (lambda a, b: a @ b, complex_normal(2, 3, 4), B.T),
    "einsum": (lambda a, b: tg.einsum("bixy,ioxy->boxy", a, b),
               complex_normal(2, 3, 2, 2), complex_normal(3, 4, 2, 2)),
    "einsum of real and complex": (lambda r, a: tg.einsum("ij,jk->ik", r, a), R, B.T),
    "sum and mean": (lambda a: a.sum(0) + a.mean(1, keepdim=True), A),
    "views and slices": (lambda a: a.T.reshape(2, 6)[:, 1:4].unsqueeze(0), A),
    "stack and where": (lambda a, b: tg.where(tg.tensor(R > 0), tg.stack([a, b]), 0.0), A, B),
    "setitem": (lambda a, b: _placed(a, b), A, B[:2, :2]),
    "cast": (lambda r: r.to(tg.complex128) * (1 + 2j), R),
    "norm": (lambda a: tg.linalg.vector_norm(a, dim=1), A),
    "tanh": (tg.tanh, A * 0.5),
    "sigmoid and silu": (lambda a: tg.sigmoid(a) + tg.nn.functional.silu(a * 2.0), A * 0.5),
    "sin cos tan": (lambda a: tg.sin(a) * tg.cos(a) + tg.tan(a * 0.3), A),
    "sinh cosh": (lambda a: tg.sinh(a) + tg.cosh(a * 2.0), A),
    "inverse trigonometric": (lambda a: tg.arcsin(a) + tg.arccos(a) + tg.arctan(a) + tg.arcsinh(a)
                              + tg.arctanh(a * 0.5), A * 0.5),  # fmt: skip
    "logs and exps": (lambda a: tg.log1p(a) + tg.log2(a) + tg.log10(a) + tg.expm1(a) + tg.exp2(a),
                      A + 3.0),  # fmt: skip
    "reciprocal": (tg.reciprocal, A),
    "pow, real exponent": (lambda a: a**2.5 + a**2 + a**3, A + 3.0),
    "pow, complex exponent": (lambda a: a ** (1.5 + 0.5j), A + 3.0),
    "pow of tensors": (lambda a, b: a**b, A + 3.0, B * 0.5),
    "var and std": (lambda a: tg.var(a, 1) + tg.std(a) + a.std(1, unbiased=False), A),
    "prod": (lambda a: a.prod(1) + a[:, :2].prod() + tg.cat([a[:, :1] * 0.0, a], 1).prod(1), A),
}  # fmt: skip


def _placed(a, b):
    out = tg.zeros(3, 4, dtype=tg.complex128)
    out[:2, :2] = b
    out[1:, 2:] = a[1:, 2:] * 2.0
    return out


@pytest.mark.parametrize("name", GRADIENTS)
def test_gradients_follow_pytorchs_convention(name):
    fn, *arrays = GRADIENTS[name]
    check_grad(fn, *arrays)


def test_the_gradient_of_a_squared_modulus_is_2z():
    """PyTorch's "Autograd for Complex Numbers": the conjugate Wirtinger derivative times 2."""
    z = tg.tensor(A, requires_grad=True)
    (z.abs() ** 2).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), 2 * A)
    z.grad = None
    (z * z.conj()).real.sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), 2 * A)


def test_a_real_operand_of_a_complex_product_gets_the_real_part_quietly():
    """einsum takes a real and a complex operand as they are: the real one's cotangent comes
    back complex, and the tape keeps its real part (no ComplexWarning of a cast)."""
    r = tg.tensor(R, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tg.einsum("ij,jk->ik", r, tg.tensor(B.T)).real.sum().backward()
    assert r.grad.dtype == np.float64
    np.testing.assert_allclose(r.grad.numpy(), np.broadcast_to(B.T.real.sum(1), R.shape))


def test_values_and_dtypes():
    z32 = tg.tensor(A.astype(np.complex64))
    assert z32.real.dtype == z32.imag.dtype == z32.abs().dtype == z32.angle().dtype == np.float32
    np.testing.assert_array_equal(z32.real.numpy(), A.real.astype(np.float32))
    np.testing.assert_array_equal(z32.angle().numpy(), np.angle(A.astype(np.complex64)))
    assert tg.view_as_real(z32).shape == (3, 4, 2) and tg.view_as_real(z32).dtype == np.float32
    np.testing.assert_array_equal(tg.view_as_complex(tg.view_as_real(z32)).numpy(), z32.numpy())
    assert tg.complex(tg.tensor(R), tg.tensor(R)).dtype == np.complex128
    parts = tg.tensor(R.astype(np.float32))
    assert tg.complex(parts, parts).dtype == np.complex64
    np.testing.assert_allclose(tg.polar(tg.tensor(2.0), tg.tensor(np.pi / 2)).item(), 2j,
                               atol=1e-7)  # fmt: skip
    assert z32.is_complex() and tg.is_complex(z32) and not tg.tensor(R).is_complex()
    assert not z32.is_floating_point()
    x = tg.tensor(R)
    assert x.real is x and tg.conj(x) is x  # a real tensor's real part and conjugate: itself
    with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex"):
        _ = x.imag
    assert tg.isreal(tg.tensor(np.array([1 + 0j, 1j]))).tolist() == [True, False]
    inf = tg.complex(tg.tensor([np.inf]), tg.tensor([0.0]))  # not inf + 0 * 1j = nan
    assert inf.numpy()[0] == complex(np.inf, 0)


def test_complex_dtypes_make_tensors():
    assert tg.zeros(2, 3, dtype=tg.cfloat).dtype == np.complex64
    assert tg.tensor([1 + 2j, 3]).dtype == np.complex64  # Python's: the default complex dtype
    assert (tg.ones(2) * 1j).dtype == np.complex64 and (tg.ones(2) * 1j).numpy()[0] == 1j
    u = tg.rand(2000, dtype=tg.cdouble)
    assert u.dtype == np.complex128 and 0 <= u.real.numpy().min() and u.imag.numpy().max() < 1
    n = tg.randn(20000, dtype=tg.cfloat).numpy()
    assert n.dtype == np.complex64
    np.testing.assert_allclose([n.real.var(), n.imag.var()], [0.5, 0.5], atol=0.03)
    p = tg.nn.Parameter(tg.rand(2, 2, dtype=tg.cfloat))
    assert p.requires_grad and p.dtype == np.complex64


def test_values_pytorch_computes_for_complex_numbers():
    """sigmoid and silu of complex values are complex (the imaginary part was dropped), x ** 2
    ran (the exponent, made complex, broke its fast path), var and std are real (they were the
    complex mean of (x - m)^2); erf and GELU, which PyTorch refuses for complex, refuse."""
    z = tg.tensor(A)
    sigmoid = 1 / (1 + np.exp(-A))
    np.testing.assert_allclose(tg.sigmoid(z).numpy(), sigmoid, rtol=1e-14)
    np.testing.assert_allclose(tg.nn.functional.silu(z).numpy(), A * sigmoid, rtol=1e-14)
    np.testing.assert_allclose((z**2).numpy(), A * A, rtol=1e-15)
    np.testing.assert_allclose((z**2.5).numpy(), A**2.5, rtol=1e-14)
    v = tg.var(z, 1)
    assert v.dtype == np.float64
    np.testing.assert_allclose(v.numpy(), np.var(A, 1, ddof=1), rtol=1e-14)
    np.testing.assert_allclose(tg.std(z).numpy(), np.std(A, ddof=1), rtol=1e-14)
    for f in (tg.erf, tg.nn.functional.gelu):
        with pytest.raises(RuntimeError, match="expects a real tensor, got complex128"):
            f(z)


def test_bad_inputs_are_refused():
    with pytest.raises(RuntimeError, match="view_as_real is only supported for complex tensors"):
        tg.view_as_real(tg.tensor(R))
    with pytest.raises(
        RuntimeError, match=r"last dimension of size 2, not shape torch.Size\(\[3, 4\]\)"
    ):
        tg.view_as_complex(tg.tensor(R))
    with pytest.raises(RuntimeError, match="only supported for float and double tensors"):
        tg.view_as_complex(tg.tensor(np.zeros((2, 2), np.int64)))
    with pytest.raises(tg.ShapeError, match="complex: the parts must be floats, not complex128"):
        tg.complex(tg.tensor(A), tg.tensor(A))
    with pytest.raises(
        RuntimeError, match="complex: expected parts of one dtype, got torch.float32 and"
    ):
        tg.complex(tg.tensor(R.astype(np.float32)), tg.tensor(R))


def test_an_op_without_a_complex_rule_refuses_to_record():
    """Its real rule would give a wrong gradient silently (cumprod's lacks the conjugates):
    autodiff refuses, naming the op, the inputs and the line."""
    z = tg.tensor(A, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"cumprod does not support automatic differentiation "
                       r"for outputs with complex dtype .*inputs complex128\[3, 4\]"):  # fmt: skip
        tg.cumprod(z, 1)
    with tg.no_grad():
        np.testing.assert_allclose(tg.cumprod(z, 1).numpy(), np.cumprod(A, 1))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for real scalar"):
        (z * 2.0).sum().backward()


def test_real_imag_and_view_as_real_are_views_that_write_their_tensor():
    """PyTorch's optimizers update a complex parameter through `view_as_real(p)` in place, and
    code writes `z.real` / `z.imag`: the writes reach the complex tensor, eagerly, under
    autograd and in a traced step (they were copies: the update was lost silently)."""
    z = tg.tensor([1 + 2j, 3 - 1j])
    with tg.no_grad():
        tg.view_as_real(z).mul_(2)
    z.real.add_(1)
    assert z.tolist() == [3 + 4j, 7 - 2j]
    z.imag.zero_()
    assert z.tolist() == [3 + 0j, 7 + 0j]
    pairs = tg.tensor([[1.0, 2.0], [3.0, 4.0]])
    tg.view_as_complex(pairs).mul_(1j)
    assert pairs.tolist() == [[-2.0, 1.0], [-4.0, 3.0]]

    w = tg.tensor([1 + 1j, 2 + 0j], requires_grad=True)
    y = w * 1
    tg.view_as_real(y).mul_(3)  # y = 3w: sum |y|^2 = 9 |w|^2, whose gradient is 18 w
    (y.abs() ** 2).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [18 + 18j, 36])

    def update(p, g):
        with tg.no_grad():
            tg.view_as_real(p).add_(tg.view_as_real(g), alpha=-0.1)

    traced = tg.trace(update, backend="numpy")
    for run in (update, traced):
        p, g = tg.tensor([1 + 1j, 2 - 1j]), tg.tensor([0.5 + 0j, 1j])
        run(p, g)
        run(p, g)
        np.testing.assert_allclose(p.numpy(), [0.9 + 1j, 2 - 1.2j])


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_complex_gradients_traced_match_eager(backend, monkeypatch):
    """The new rules traced, and x ** 2.5 of a complex x, whose constant exponent (2.5+0j) the
    simplifier read as a float and crashed on."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = tg.tensor(A, requires_grad=True)
    gm = tg.GradManager().attach([x])
    c = np.conj(B)

    def step():
        with gm:
            out = tg.sigmoid(x) * tg.tanh(x * 0.5) + tg.sin(x) * tg.cosh(x) + x**2.5 + x**2
            gm.backward(tg.real(out * tg.tensor(c)).sum())
        return out

    eager, eager_grad = step().numpy().copy(), x.grad.numpy().copy()
    traced = tg.trace(step, backend=backend)
    for _ in range(2):
        x.grad = None
        got = traced()
    np.testing.assert_allclose(got.numpy(), eager, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), eager_grad, rtol=1e-12)
