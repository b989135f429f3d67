"""Tensor behaviours vision code relies on (torchvision's tv_tensors and transforms): subclasses
made by `as_subclass` in their `__new__`, integer images with Python numbers out of their range,
empty tensors flattened, `tensor_split` at negative indices; each against PyTorch's rule as
NumPy computes it independently."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch


class Image(torch.Tensor):
    """A tv_tensors-style subclass: made by `as_subclass`, with keywords of its own."""

    def __new__(cls, data, *, canvas=None):
        t = torch.as_tensor(data).as_subclass(cls)
        t.canvas = canvas
        return t


def test_a_subclass_made_in_new_keeps_its_dtype_and_takes_its_own_keywords():
    img = Image(torch.arange(4, dtype=torch.uint8), canvas=(2, 2))
    assert type(img) is Image and img.dtype == np.uint8 and img.canvas == (2, 2)
    np.testing.assert_array_equal(img.numpy(), np.arange(4))
    with pytest.raises(TypeError, match="unexpected keyword"):
        torch.Tensor([1.0], canvas=3)


def test_as_subclass_is_a_new_view_that_keeps_the_history():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = x.as_subclass(Image)
    assert y is not x and type(x) is torch.Tensor and type(y) is Image
    (y * torch.tensor([3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    plain = torch.zeros(3)
    view = plain.as_subclass(Image)
    view[1] = 5.0  # a view: the write shows in the original
    np.testing.assert_array_equal(plain.numpy(), [0.0, 5.0, 0.0])
    with pytest.raises(TypeError, match="not a subclass"):
        plain.as_subclass(int)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
@pytest.mark.parametrize("number", [-32, -1, 300, 70000])
@pytest.mark.parametrize("op", ["and", "or", "add", "mul"])
def test_python_ints_out_of_an_integer_tensors_range_wrap_around(dtype, number, op):
    values = np.array([1, 100, 7], dtype)
    x = torch.tensor(values)
    got = {"and": lambda: x & number, "or": lambda: x | number, "add": lambda: x + number,
           "mul": lambda: x * number}[op]()  # fmt: skip
    wide = values.astype(np.int64)
    want = {"and": wide & number, "or": wide | number, "add": wide + number,
            "mul": wide * number}[op].astype(dtype)  # two's complement wrap-around  # fmt: skip
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want)


def test_integers_past_int64_are_refused():
    with pytest.raises(OverflowError):
        torch.tensor([1], dtype=torch.uint8) + 2**70


@pytest.mark.parametrize("shape, start, end, want", [
    ((0, 1, 4), 1, -1, (0, 4)),  # no elements: the merged extent is still 1 * 4
    ((2, 0, 3), 0, 1, (0, 3)),
    ((3, 0, 2, 5), 1, 2, (3, 0, 5)),
    ((2, 3, 4), 0, -1, (24,)),
])  # fmt: skip
def test_flatten_merges_extents_even_of_empty_tensors(shape, start, end, want):
    assert torch.zeros(shape).flatten(start, end).shape == want


def test_flatten_refuses_a_start_after_the_end():
    with pytest.raises(ValueError, match="start_dim"):
        torch.zeros(2, 3, 4).flatten(2, 1)


@pytest.mark.parametrize("indices", [(-1,), (1, -2), (-10, 2), (2, -1, 9), (4, 1)])
def test_tensor_split_counts_negative_indices_from_the_end(indices):
    a = np.arange(24).reshape(6, 4)
    want = [w.tolist() for w in np.array_split(a, list(indices), axis=0)]
    x = torch.tensor(a)
    for got in (torch.tensor_split(x, indices), torch.tensor_split(x, indices=indices),
                x.tensor_split(torch.tensor(list(indices)), dim=0)):  # fmt: skip
        assert [g.tolist() for g in got] == want


def test_tensor_split_by_sections_keyword():
    got = torch.tensor_split(torch.arange(7), sections=3)
    assert [g.tolist() for g in got] == [[0, 1, 2], [3, 4], [5, 6]]
    with pytest.raises(TypeError, match="one of"):
        torch.tensor_split(torch.arange(7), 2, sections=3)


def test_numpy_force_and_is_quantized():
    x = torch.ones(2, requires_grad=True)
    np.testing.assert_array_equal(x.detach().numpy(force=True), [1.0, 1.0])
    assert x.is_quantized is False and x.is_meta is False
