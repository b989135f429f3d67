"""PyTorch's dtype objects (`frontend.dtypes`, `torch.float32`): PyTorch's name and attributes,
NumPy's equality, hashing and attributes, taken by NumPy wherever a dtype goes, one object per
name through pickles and copies."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import tracegrad.torch as torch

KINDS = [(np.float32, "float32", True), (np.float64, "float64", True),
         (np.float16, "float16", True), (np.int64, "int64", False), (np.uint8, "uint8", False),
         (np.bool_, "bool", False), (np.complex64, "complex64", False)]  # fmt: skip


@pytest.mark.parametrize("numpy_type, name, floating", KINDS)
def test_pytorchs_name_and_attributes_numpys_too(numpy_type, name, floating):
    t, d = getattr(torch, name), np.dtype(numpy_type)
    assert str(t) == f"torch.{name}" and isinstance(t, torch.dtype)
    assert t.is_floating_point is floating and t.is_complex is (name == "complex64")
    assert t.itemsize == d.itemsize and t.kind == d.kind and t.char == d.char and t.type is d.type
    assert t == numpy_type and t == d and d == t and t != np.int8
    assert {d: 1}[t] == 1 and {t: 2}[d] == 2
    assert np.zeros(3, t).dtype == d and np.dtype(t) == d
    assert pickle.loads(pickle.dumps(t)) is t and copy.deepcopy(t) is t
    assert torch.tensor([1], dtype=t).dtype == d


def test_dtypes_numpy_lacks_are_named_and_refused_when_used():
    assert torch.finfo(torch.bfloat16).max > 3e38
    with pytest.raises(TypeError, match="float8"):
        np.dtype(torch.float8_e5m2)
    with pytest.raises(TypeError, match="float8"):
        torch.float8_e5m2.kind  # noqa: B018 (no NumPy dtype to ask)


def test_bfloat16_tensors_hold_their_bits_and_convert():
    """kornia asks `torch.empty(0, dtype=torch.bfloat16).element_size()` at import, and
    safetensors reads a bfloat16 checkpoint as bytes viewed as bfloat16, then converts.
    Rounding is to nearest, ties to even (the
    expected bits written out by hand, as PyTorch's `x.bfloat16()` gives them)."""
    assert torch.empty(0, dtype=torch.bfloat16).element_size() == 2
    b = torch.tensor([0.1, -2.25], dtype=torch.bfloat16)
    assert b.dtype is torch.bfloat16 and b.is_floating_point() and b.dtype.is_floating_point
    assert b.tolist() == [0.10009765625, -2.25] and b[1].item() == -2.25
    assert repr(b) == "tensor([ 0.1001, -2.2500], dtype=torch.bfloat16)"
    assert torch.ones(2, dtype=torch.bfloat16).float().tolist() == [1.0, 1.0]
    halfway = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, float("nan"), float("-inf")])
    bits = halfway.bfloat16().view(torch.int16).tolist()
    assert bits == [0x3F80, 0x3F82, 0x7F80, 0x7FC0, -128]  # 1, 1 + 2^-6, inf, nan, -inf
    raw = torch.frombuffer(
        bytearray(np.array([0x3FC0, 0xC040], "<u2").tobytes()), dtype=torch.uint8
    )
    assert raw.view(dtype=torch.bfloat16).float().tolist() == [1.5, -3.0]
    assert torch.tensor([1.5]).to(torch.bfloat16).double().dtype is torch.float64


def test_a_tensors_dtype_is_pytorchs_object_eagerly_and_traced():
    """Vision and language code asks `x.dtype.is_floating_point` and prints `x.dtype`; the
    dtype was NumPy's, which has neither PyTorch's attributes nor its name."""
    import tracegrad as tg
    import tracegrad.numpy as tnp

    x = tg.tensor([1.0, 2.0])
    assert x.dtype is tg.float32 is torch.float32 and str(x.dtype) == "torch.float32"
    assert (x * 2).dtype is tg.float32 and tg.arange(3).dtype is tg.long
    assert x.to(tg.float64).dtype.is_floating_point and not (x > 1).dtype.is_floating_point
    assert repr(x.double()) == "tensor([1., 2.], dtype=torch.float64)"
    assert x.numpy().dtype.__class__ is not torch.dtype and tnp.float32(1.5) == 1.5

    @tg.trace(backend="numpy")
    def scaled(a):
        return a * 2 if a.dtype.is_floating_point and a.dtype is tg.float32 else a

    assert scaled(x).tolist() == [2.0, 4.0] and scaled(x).dtype is tg.float32


def test_a_module_converts_to_bfloat16_and_back():
    """A checkpoint saved in bfloat16 (`model.to(torch.bfloat16)`, then loaded into a float32
    model) keeps each weight rounded once."""
    layer = torch.nn.Linear(3, 2)
    w = layer.weight.detach().clone()
    assert layer.to(torch.bfloat16).weight.dtype is torch.bfloat16
    layer.float()
    assert layer.weight.dtype is torch.float32 and layer.bias.dtype is torch.float32
    rounded = w.bfloat16().float()
    assert torch.equal(layer.weight.detach(), rounded)
    assert (layer.weight.detach() - w).abs().max().item() <= w.abs().max().item() * 2**-8
    with pytest.raises(TypeError, match="only accepts floating point dtypes"):
        layer.to(torch.int64)


def test_every_way_to_make_a_bfloat16_tensor_rounds_the_values():
    """NumPy casts numbers into the bits' stand-in as integers (1.5 became a tiny subnormal,
    0.1 in `full` became 0): each creation function asked for bfloat16 makes float32 and
    rounds it."""
    bf, want = torch.bfloat16, [1.5, 0.10009765625]
    assert torch.tensor(np.array([1.5, 0.1]), dtype=bf).tolist() == want
    assert torch.tensor(torch.tensor([1.5, 0.1]), dtype=bf).tolist() == want
    assert torch.tensor([1.5, 0.1], bf).tolist() == want  # dtype by position
    assert torch.as_tensor(np.array([1.5, 0.1]), dtype=bf).tolist() == want
    assert torch.full((2,), 0.1, dtype=bf).tolist() == [want[1]] * 2
    assert torch.full_like(torch.zeros(1), 1.5, dtype=bf).tolist() == [1.5]
    assert torch.ones_like(torch.zeros(1), dtype=bf).tolist() == [1.0]
    assert torch.eye(2, dtype=bf).tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert torch.arange(3, dtype=bf).tolist() == [0.0, 1.0, 2.0]
    assert torch.linspace(0, 1, 3, dtype=bf).tolist() == [0.0, 0.5, 1.0]
    torch.manual_seed(0)
    drawn = torch.randn(4, dtype=bf)
    torch.manual_seed(0)
    assert drawn.tolist() == torch.randn(4).bfloat16().tolist()
    x = torch.zeros(1)
    assert x.new_full((1,), 0.1, dtype=bf).tolist() == [want[1]]
    assert x.new_tensor([1.5], dtype=bf).tolist() == [1.5]


def test_every_way_to_write_into_a_bfloat16_tensor_rounds_the_values():
    """The same cast, into a bfloat16 tensor that exists: transformers' RecurrentGemma keeps a
    bfloat16 `normalizer` buffer, which its `_init_weights` sets by `init.constant_` to
    sqrt(hidden_size); it became the subnormal 5 * 2**-133, and every activation ~0."""
    bf, want = torch.bfloat16, [5.65625] * 2
    assert torch.nn.init.constant_(torch.zeros(2, dtype=bf), 32**0.5).tolist() == want
    assert torch.nn.init.ones_(torch.zeros(2, dtype=bf)).tolist() == [1.0, 1.0]
    assert torch.zeros(2, dtype=bf).fill_(32**0.5).tolist() == want
    x = torch.zeros(2, dtype=bf)
    x[:] = 32**0.5
    assert x.tolist() == want
    x[1] = torch.tensor(2.5)
    assert x.tolist() == [5.65625, 2.5]
    like = torch.zeros(2, dtype=bf)  # the dtype the input has, not one asked for
    assert torch.ones_like(like).tolist() == [1.0, 1.0]
    assert torch.full_like(like, 32**0.5).tolist() == want
    assert torch.zeros(2, dtype=bf).uniform_(2.0, 2.0).tolist() == [2.0, 2.0]
    assert torch.zeros(2, dtype=bf).copy_(torch.tensor([0.1, 1.5])).tolist() == [0.10009765625, 1.5]
