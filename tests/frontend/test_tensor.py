"""The Tensor object: array facts, autodiff attributes, detach, in-place updates."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.numpy as tnp
from tracegrad.frontend.promotion import category, number_dtype
from tracegrad.frontend.tensor import Listeners, phase


def test_array_facts() -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = tg.tensor(a)
    assert isinstance(t, tg.Tensor) and isinstance(tg.Tensor(a), tg.Tensor)
    assert (t.shape, t.dtype, t.ndim, t.size, len(t)) == ((2, 3), np.float32, 2, 6, 2)
    np.testing.assert_array_equal(t.T.numpy(), a.T)
    assert tg.tensor(2.5).item() == 2.5 and isinstance(tg.tensor(2.5).item(), float)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    with pytest.raises(TypeError):
        len(tg.tensor(1.0))


def test_numpy_returns_the_underlying_array_without_copy() -> None:
    a = np.zeros(3)
    for t in (tg.from_numpy(a), tg.as_tensor(a)):
        assert t.numpy() is t.numpy()
        assert np.shares_memory(t.numpy(), a)
        t.numpy()[0] = 7.0
        assert a[0] == 7.0
        a[0] = 0.0


def test_tensor_copies_its_data_as_torch_tensor_does() -> None:
    """tg.tensor(ndarray) is a copy: changing the tensor leaves the caller's array alone (as
    torch.tensor); as_tensor and from_numpy share it. tracegrad.numpy.array copies,
    tracegrad.numpy.asarray shares, as NumPy's do."""
    a = np.arange(3.0)
    t = tg.tensor(a)
    t += 1.0
    assert a.tolist() == [0.0, 1.0, 2.0] and t.tolist() == [1.0, 2.0, 3.0]
    assert not np.shares_memory(tg.tensor(tg.from_numpy(a)).numpy(), a)
    assert not np.shares_memory(tnp.array(a).numpy(), a)
    assert np.shares_memory(tnp.asarray(a).numpy(), a)
    shared = tg.as_tensor(a)
    shared += 1.0
    assert a.tolist() == [1.0, 2.0, 3.0]


def test_repr_is_readable() -> None:
    assert repr(tg.tensor([1.0, 2.0])) == "tensor([1., 2.])"  # PyTorch's: default dtypes unsaid
    assert repr(tg.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(tg.tensor([1.0], dtype=tg.float64)) == "tensor([1.], dtype=torch.float64)"
    assert repr(tg.tensor([], dtype=tg.int64)) == "tensor([], dtype=torch.int64)"  # empty: said
    assert repr(tg.zeros(0)) == "tensor([])"
    total = (tg.tensor([1.0], requires_grad=True) * 2).sum()
    assert repr(total) == "tensor(2., grad_fn=<SumBackward0>)"
    assert repr(tg.tensor([1.0], requires_grad=True)).endswith("requires_grad=True)")


def test_iteration_yields_rows() -> None:
    rows = list(tg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert [r.numpy().tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0]]


def test_user_tensors_are_leaves_and_results_have_grad_fn() -> None:
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = tg.exp(x) * 2.0
    assert x.is_leaf and x.grad_fn is None
    assert not y.is_leaf and y.grad_fn.name() == "MulBackward0"
    assert tg.exp(x).grad_fn.name() == "ExpBackward0"
    assert type(y.grad_fn).__name__ == "MulBackward0"  # what torchviz's drawings show
    assert repr(y.grad_fn).startswith("<MulBackward0 object at 0x")
    assert type(y.grad_fn.next_functions[0][0].next_functions[0][0]).__name__ == "AccumulateGrad"
    view = x[1:]
    assert view._is_view() and view._base is x and not x._is_view() and x._base is None
    plain = tg.tensor([1.0]) * 2.0
    assert plain.is_leaf and plain.grad_fn is None and not plain.requires_grad


def test_requires_grad_is_settable_on_leaves() -> None:
    x = tg.tensor([1.0])
    assert not x.requires_grad
    x.requires_grad = True
    assert x.requires_grad
    assert x.requires_grad_(False) is x and not x.requires_grad
    assert x.requires_grad_() is x and x.requires_grad


def test_requires_grad_on_a_non_leaf_says_to_detach() -> None:
    y = tg.tensor([1.0], requires_grad=True) * 2.0
    with pytest.raises(RuntimeError, match=r"leaf.*detach\(\)"):
        y.requires_grad = False
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad = True  # PyTorch's attribute refuses; its method lets True pass
    assert y.requires_grad_(True) is y and y.requires_grad


def test_grad_is_settable() -> None:
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    x.grad = tg.tensor([3.0, 4.0])
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    x.grad = np.array([5.0, 6.0], np.float32)
    assert isinstance(x.grad, tg.Tensor)
    x.grad = None
    assert x.grad is None
    with pytest.raises(ValueError, match="shape"):
        x.grad = tg.tensor([1.0])


def test_detach_makes_a_leaf_that_shares_data() -> None:
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    d = y.detach()
    assert d.is_leaf and not d.requires_grad and d.grad_fn is None
    assert np.shares_memory(d.numpy(), y.numpy())
    assert not (d * 2.0).requires_grad


# --- in-place operators ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, expected",
    [(operator.iadd, [3.0, 4.0]), (operator.isub, [-1.0, 0.0]), (operator.imul, [2.0, 4.0]),
     (operator.itruediv, [0.5, 1.0])],
    ids=["+=", "-=", "*=", "/="],
)  # fmt: skip
def test_inplace_under_no_grad_updates_the_same_buffer(op, expected: list) -> None:
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    buffer = w.numpy()
    with tg.no_grad():
        assert op(w, 2.0) is w
    assert w.numpy() is buffer and w.dtype == np.float32
    np.testing.assert_array_equal(w.numpy(), expected)
    assert w.is_leaf and w.requires_grad


def test_inplace_on_a_leaf_that_requires_grad_raises() -> None:
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w -= 1.0
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


def test_inplace_on_a_plain_tensor_outside_no_grad() -> None:
    a = tg.tensor([1.0, 2.0])
    buffer = a.numpy()
    a *= tg.tensor([3.0, 3.0])
    assert a.numpy() is buffer
    np.testing.assert_array_equal(buffer, [3.0, 6.0])


def test_inplace_keeps_dtype_and_shape() -> None:
    w = tg.tensor(np.ones(3, np.float32))
    w += np.ones(3)  # float64 operand: the buffer stays float32
    assert w.dtype == np.float32
    with pytest.raises(tg.ShapeError, match=r"torch.Size\(\[2, 3\]\).*torch.Size\(\[3\]\)"):
        w += np.ones((2, 3))


def test_inplace_on_a_non_leaf_keeps_the_graph_correct() -> None:
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2.0
    y += x  # y = 3x
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 18.0 * x.numpy())


def test_tensor_copies_and_as_tensor_shares_as_in_pytorch() -> None:
    torch = pytest.importorskip("torch")
    for make in ("tensor", "as_tensor", "from_numpy"):
        a, b = np.arange(3.0), np.arange(3.0)
        mine, theirs = getattr(tg, make)(a), getattr(torch, make)(b)
        mine += 1.0
        theirs += 1.0
        assert a.tolist() == b.tolist(), make  # changed by as_tensor/from_numpy, not by tensor


@pytest.mark.parametrize(
    "dtype, number",
    [(np.float32, 0.5), (np.float64, 0.5), (np.int32, 0.5), (np.int64, 2), (np.uint8, 2),
     (np.bool_, True), (np.int32, True), (np.float32, True), (np.uint8, 300.0)],
)  # fmt: skip
def test_a_python_number_takes_the_type_numpy_gives_it(dtype, number):
    """NEP 50 in tracegrad.numpy: a Python number is weak beside an array (float32 + 0.5 is
    float32; int32 + 0.5 is float64). The top level agrees where the number's category is not
    above the array's (int32 + 0.5 is PyTorch's float32: test_promotion.py). Twice: the second
    answer comes from what the first remembered."""
    x = tg.tensor(np.arange(3).astype(dtype))
    want = np.arange(3).astype(dtype) + number
    same_category = category(number_dtype(number)) <= category(np.dtype(dtype))
    for _ in range(2):
        results = [tnp.add(x, number), tnp.add(number, x)]
        results += [x + number, number + x] if same_category else []
        for got in results:
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want)


def test_a_one_element_tensor_of_any_shape_is_a_python_number() -> None:
    """PyTorch's float(t), int(t) and math's functions of shape (1,) and (1, 1) (a sampling
    loop's `int(torch.multinomial(p, 1))`); more elements raise, as PyTorch's ValueError; a
    traced tensor refuses, whatever its shape."""
    import math

    assert float(tg.ones(1)) == 1.0 and isinstance(float(tg.ones(1, 1)), float)
    assert int(tg.tensor([[3]])) == 3 and int(tg.tensor([2.7])) == 2
    assert math.log(tg.ones(1) * 2) == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="one element"):
        float(tg.ones(2))

    @tg.trace
    def step(x):
        return x * float(x)

    with pytest.raises(tg.TraceError, match="float"):
        step(tg.ones(1, 1))


def test_a_list_holding_numpy_float64_values_makes_a_float64_tensor() -> None:
    """As PyTorch infers: a NumPy float64 scalar or array anywhere in the list (it was the
    default float32); Python floats, and NumPy float32 beside them, stay the default dtype."""
    assert tg.tensor([np.float64(1.5), 2.0]).dtype == np.float64
    assert tg.tensor([[1.0], [np.float64(2.0)]]).dtype == np.float64
    assert tg.tensor([np.array([1.5]), np.array([2.0])]).dtype == np.float64
    assert tg.tensor([np.float32(1.5), 2.0]).dtype == np.float32
    assert tg.tensor([1.5, 2.0]).dtype == np.float32
    assert tg.tensor([np.float64(1.5)]).tolist() == [1.5]


def test_deepcopy_makes_a_leaf_of_its_own_also_inside_a_traced_step() -> None:
    """As PyTorch's: a copy with its own value, class and requires_grad (and grad); a computed
    tensor refuses. In a traced step (torch-optimizer's `state["buf"] = deepcopy(p.data)`) the
    copy is the trace's: kept in Python state, it holds a value after the call."""
    import copy

    from tracegrad import nn

    p = nn.Parameter(tg.tensor([1.0, 2.0]))
    (p * 3).sum().backward()
    q = copy.deepcopy(p)
    assert type(q) is nn.Parameter and q.requires_grad and q.grad.tolist() == [3.0, 3.0]
    q.data.add_(1)
    assert p.tolist() == [1.0, 2.0] and q.tolist() == [2.0, 3.0]
    with pytest.raises(RuntimeError, match="only tensors made by the user"):
        copy.deepcopy(p * 2)
    held = {}

    @tg.trace(backend="numpy")
    def step(x):
        held["copy"] = copy.deepcopy(p.data)
        held["copy"].mul_(x)
        return x * 1

    step(tg.tensor(2.0))
    assert isinstance(held["copy"]._value, np.ndarray) and held["copy"].tolist() == [2.0, 4.0]


def test_an_update_phase_entered_from_outside_one_is_a_new_step_call():
    assert Listeners.update is None
    with phase(tg.Phase.UPDATE):
        call = Listeners.update
        with phase(tg.Phase.BACKWARD), phase(tg.Phase.UPDATE):  # nested: the same call
            assert Listeners.update == call
    assert Listeners.update is None
    with phase(tg.Phase.UPDATE):
        assert Listeners.update not in (None, call)


def test_python_numbers_become_the_dtype_asked_for_not_the_default_first() -> None:
    """as_tensor(0.1, dtype=float64) was made in float32 then cast: 0.10000000149 (kornia's
    factors, torchdiffeq's tolerances), 1e-50 became 0 and 1e300 inf."""
    for value in (0.1, 1e-50, 1e300):
        assert tg.as_tensor(value, dtype=tg.float64).item() == value
        assert tg.as_tensor([value], dtype=tg.float64).tolist() == [value]
    x0 = tg.tensor(2.0, dtype=tg.float64)
    assert tg.tensor([0.1, x0], dtype=tg.float64).tolist() == [0.1, 2.0]
    assert tg.as_tensor([0.1, x0], dtype=tg.float64).tolist() == [0.1, 2.0]
    assert tg.as_tensor(0.1).dtype is tg.float32 and tg.as_tensor([1, 2]).dtype is tg.int64


def test_h_is_the_conjugate_transpose_of_a_matrix_only() -> None:
    z = tg.tensor([[1 + 2j, 3j]])
    assert z.H.tolist() == [[1 - 2j], [-3j]] and tg.ones((2, 3)).H.shape == (3, 2)
    with pytest.raises(RuntimeError, match="only supported on matrices"):
        tg.ones(3).H  # noqa: B018


def test_in_asks_whether_any_entry_equals():
    """transformers asks `pad_token_id in input_ids` of a 2-d batch (GPT-2's forward): Python's
    fallback compared rows and raised."""
    ids = tg.tensor([[0, 5, 3], [2, 2, 9]])
    assert 9 in ids and 7 not in ids and tg.tensor(5) in ids and 2.0 in ids
    assert 3 in ids[0] and 9 not in ids[0]
    with pytest.raises(RuntimeError, match="only supports Tensor or scalar"):
        _ = "a" in ids


def test_sizes_stay_sizes_when_joined_or_repeated():
    """botorch: `batch_shape + event_shape`, then `.numel()`; PyTorch's Size on either side."""
    s = tg.zeros(2, 3).shape
    for joined in (s + s, s + (4,), (4,) + s, s * 2, 2 * s, s[1:]):
        assert type(joined) is type(s)
    assert (s + (4,)).numel() == 24 and (1,) + s == (1, 2, 3)
    with pytest.raises(TypeError):
        s + [4]
