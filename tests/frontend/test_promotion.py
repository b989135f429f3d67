"""Type promotion: the top level and Tensor methods follow PyTorch, `tracegrad.numpy` NumPy.

The expected dtypes are PyTorch's documented results (torch.result_type's rules), checked
against PyTorch itself where it is installed, and NumPy's own results for `tracegrad.numpy`."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
import tracegrad.torch as tt


def _operand(spec, lib):
    """("t", dtype) a dimensioned tensor, ("0", dtype) a 0-d one, a Python number as it is."""
    if not isinstance(spec, tuple):
        return spec
    kind, dtype = spec
    values = np.array(2, dtype) if kind == "0" else np.array([3, 1, 2], dtype)
    if lib is np:
        return values
    if lib is tg:
        return tg.tensor(values)
    return lib.from_numpy(values)


# (function, operands, PyTorch's result dtype)
CASES = [
    (operator.mul, [("t", "int64"), 2.5], "float32"),
    (operator.add, [("t", "int64"), ("t", "float32")], "float32"),
    (operator.add, [("t", "float32"), ("t", "int64")], "float32"),
    (operator.sub, [("t", "int16"), ("t", "float16")], "float16"),
    (operator.add, [("t", "uint8"), ("t", "int8")], "int16"),
    (operator.add, [("t", "int32"), ("0", "int64")], "int32"),
    (operator.mul, [("t", "float32"), ("0", "float64")], "float32"),
    (operator.mul, [("t", "int64"), ("0", "float64")], "float64"),
    (operator.mul, [("0", "int64"), ("0", "float64")], "float64"),
    (operator.add, [("t", "bool"), 1], "int64"),
    (operator.add, [("t", "bool"), 1.5], "float32"),
    (operator.add, [("t", "int32"), 7], "int32"),
    (operator.add, [("t", "float16"), 2.5], "float16"),
    (operator.add, [2.5, ("t", "int32")], "float32"),
    (operator.truediv, [("t", "int64"), ("t", "int64")], "float32"),
    (operator.truediv, [("t", "int64"), 2], "float32"),
    (operator.pow, [("t", "int64"), 2], "int64"),
    (operator.pow, [("t", "int64"), 0.5], "float32"),
    (operator.pow, [("t", "float32"), ("t", "int64")], "float32"),
    (operator.lt, [("t", "int64"), 2.5], "bool"),
    ("sqrt", [("t", "int64")], "float32"),
    ("exp", [("t", "bool")], "float32"),
    ("sigmoid", [("t", "int32")], "float32"),
    ("arctan2", [("t", "int64"), ("t", "int64")], "float32"),
    ("maximum", [("t", "int64"), ("t", "float32")], "float32"),
    ("remainder", [("t", "int64"), 1.5], "float32"),
]


def _apply(f, lib, operands):
    args = [_operand(spec, lib) for spec in operands]
    if f == "sigmoid" and lib is np:
        return 1 / (1 + np.exp(-args[0]))
    return getattr(lib, f)(*args) if isinstance(f, str) else f(*args)


def _name(case) -> str:
    f, operands, _ = case
    name = f if isinstance(f, str) else f.__name__
    return f"{name}-" + "-".join(s if isinstance(s, str) else "".join(s) if isinstance(s, tuple)
                                 else repr(s) for s in operands)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=map(_name, CASES))
def test_arithmetic_promotes_as_pytorch_does(case):
    f, operands, want = case
    got = _apply(f, tg, operands)
    assert got.dtype == np.dtype(want)
    # the values: computed in the result's dtype from the operands' values
    exact = _apply(f, np, operands)
    np.testing.assert_allclose(got.numpy().astype(np.float64), np.asarray(exact, np.float64),
                               rtol=1e-3)  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=map(_name, CASES))
def test_the_dtypes_are_pytorchs_own(case):
    torch = pytest.importorskip("torch")
    f, operands, want = case
    got = _apply(f, torch, operands)
    assert str(got.dtype) == f"torch.{want}"


@pytest.mark.parametrize("case", CASES, ids=map(_name, CASES))
def test_tracegrad_numpy_promotes_as_numpy_does(case):
    f, operands, _ = case
    name = {"sigmoid": "exp"}.get(f, f)  # NumPy has no sigmoid
    mine = [_operand(s, tg) for s in operands]
    theirs = [_operand(s, np) for s in operands]
    if isinstance(name, str):
        got, want = getattr(tnp, name)(*mine), getattr(np, name)(*theirs)
    else:
        ufunc = {operator.mul: "multiply", operator.add: "add", operator.sub: "subtract",
                 operator.truediv: "true_divide", operator.pow: "power",
                 operator.lt: "less"}[f]  # fmt: skip
        got, want = getattr(tnp, ufunc)(*mine), getattr(np, ufunc)(*theirs)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_a_python_float_beside_integers_takes_the_default_dtype():
    x = tg.tensor([1, 2, 3])
    tg.set_default_dtype(tg.float64)
    try:
        assert (x * 0.5).dtype == np.float64 and tg.sqrt(x).dtype == np.float64
    finally:
        tg.set_default_dtype(tg.float32)
    assert (x * 0.5).dtype == np.float32 and tg.sqrt(x).dtype == np.float32


def test_where_and_cat_promote_their_values_not_the_condition():
    x = tg.tensor([1, 2, 3])
    got = tg.where(x > 1, x, 0.5)
    assert got.dtype == np.float32 and got.tolist() == [0.5, 2.0, 3.0]
    assert tg.cat([x, tg.tensor([0.5])]).dtype == np.float32
    assert tnp.concatenate([x, tg.tensor([0.5])]).dtype == np.float64
    assert tnp.where(x > 1, x, 0.5).dtype == np.float64


def test_a_mixed_float_product_differentiates_in_each_operands_dtype():
    """float32 weights times a float64 0-d tensor stay float32; each gradient has its operand's
    dtype and the value d(sum(w * s))/dw = s, d/ds = sum(w)."""
    w = tg.tensor([1.0, 2.0, 4.0], requires_grad=True)
    s = tg.tensor(0.5, dtype=tg.float64, requires_grad=True)
    y = (w * s).sum()
    assert y.dtype == np.float32
    y.backward()
    assert w.grad.dtype == np.float32 and w.grad.tolist() == [0.5, 0.5, 0.5]
    assert s.grad.dtype == np.float64 and s.grad.item() == 7.0


def test_traced_promotion_is_eagers():
    """The same casts in a plan, a Python number argument (traced as a stand-in) included."""

    def f(x, scale):
        return x * scale + tg.sqrt(x), x / 2

    x = tg.tensor(np.arange(1, 7).reshape(2, 3))
    eager = f(x, 0.25)
    traced = tg.trace(f)
    for scale in (0.25, 0.25, 1.5):
        got = traced(x, scale)
        want = f(x, scale)
        for g, e in zip(got, want, strict=True):
            assert g.dtype == e.dtype == np.float32
            np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-6)
    assert eager[0].dtype == np.float32


def test_torch_result_type_and_promote_types():
    assert tt.result_type(tt.tensor([1, 2]), 2.5) == tt.float32
    assert tt.result_type(tt.tensor([1.0], dtype=tt.float32), tt.tensor(1.0, dtype=tt.float64)) \
        == tt.float32  # fmt: skip
    assert tt.promote_types(tt.int64, tt.float16) == tt.float16
    assert tt.promote_types(tt.uint8, tt.int8) == tt.int16


def test_integer_floor_division_stays_exact():
    """`//` and div(rounding_mode=...) of integers are integers, exact beyond float32's 2**24
    (true division's float32 result would not be), against NumPy's integer division."""
    big = np.array([2**40 + 3, -(2**35) - 1, 7, -7, 0], np.int64)
    x = tg.tensor(big)
    assert (x // 3).dtype == np.int64
    np.testing.assert_array_equal((x // 3).numpy(), big // 3)
    np.testing.assert_array_equal(tg.div(x, -5, rounding_mode="floor").numpy(), big // -5)
    trunc = tg.div(x, 3, rounding_mode="trunc").numpy()
    np.testing.assert_array_equal(trunc, np.sign(big) * (np.abs(big) // 3))
    assert (tg.tensor([7.0, -7.0]) // 2).tolist() == [3.0, -4.0]
