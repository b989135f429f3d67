"""Tensors print as PyTorch's: the expected strings are PyTorch 2.13's for the same tensors, and
with PyTorch installed every case is compared with it directly."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.frontend import printing

EXPECTED = [
    (lambda t: t.tensor([0.70710677, 1.5]), "tensor([0.7071, 1.5000])"),
    (lambda t: t.tensor(3.25), "tensor(3.2500)"),
    (
        lambda t: t.tensor([[1.0, 2.0], [3.0, 400.0]]),
        "tensor([[  1.,   2.],\n        [  3., 400.]])",
    ),
    (lambda t: t.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
    (lambda t: t.tensor([1.0, 999.0]), "tensor([  1., 999.])"),
    (lambda t: t.tensor([1.0, 2000.0]), "tensor([1.0000e+00, 2.0000e+03])"),
    (lambda t: t.tensor([1.5, 2000.0]), "tensor([1.5000e+00, 2.0000e+03])"),
    (lambda t: t.tensor([float("nan"), 1.0, float("inf")]), "tensor([nan, 1., inf])"),
    (lambda t: t.tensor([-1, 2, 300]), "tensor([ -1,   2, 300])"),
    (lambda t: t.tensor([True, False]), "tensor([ True, False])"),
    (lambda t: t.tensor([1, 2], dtype=t.int32), "tensor([1, 2], dtype=torch.int32)"),
    (lambda t: t.tensor([0.5], dtype=t.float64), "tensor([0.5000], dtype=torch.float64)"),
    (lambda t: t.zeros(0, 3), "tensor([], size=(0, 3))"),
    (lambda t: t.zeros(0, dtype=t.int64), "tensor([], dtype=torch.int64)"),
    (lambda t: t.tensor([1 + 2j, -3.5 - 1j]), "tensor([ 1.0000+2.j, -3.5000-1.j])"),
    (lambda t: t.ones(2, requires_grad=True), "tensor([1., 1.], requires_grad=True)"),
    (lambda t: t.arange(2000), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])"),
    (
        lambda t: t.arange(2000.0).reshape(1000, 2) / 7,
        "tensor([[0.0000e+00, 1.4286e-01],\n        [2.8571e-01, 4.2857e-01],\n"
        "        [5.7143e-01, 7.1429e-01],\n        ...,\n        [2.8486e+02, 2.8500e+02],\n"
        "        [2.8514e+02, 2.8529e+02],\n        [2.8543e+02, 2.8557e+02]])",
    ),  # fmt: skip
    (
        lambda t: t.arange(26.0) / 7,
        "tensor([0.0000, 0.1429, 0.2857, 0.4286, 0.5714, 0.7143, 0.8571, 1.0000, 1.1429,\n"
        "        1.2857, 1.4286, 1.5714, 1.7143, 1.8571, 2.0000, 2.1429, 2.2857, 2.4286,\n"
        "        2.5714, 2.7143, 2.8571, 3.0000, 3.1429, 3.2857, 3.4286, 3.5714])",
    ),  # fmt: skip
    (
        lambda t: t.full((2, 18), 0.5, dtype=t.float64),
        "tensor([[0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000,\n"
        "         0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000],\n"
        "        [0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000,\n"
        "         0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000, 0.5000]],\n"
        "       dtype=torch.float64)",
    ),  # fmt: skip
]


@pytest.fixture(autouse=True)
def default_options():
    yield
    printing.set_options(profile="default")


@pytest.mark.parametrize("case", range(len(EXPECTED)))
def test_tensors_print_as_pytorchs(case):
    make, expected = EXPECTED[case]
    assert repr(make(torch)) == expected == str(make(torch))


@pytest.mark.parametrize("case", range(len(EXPECTED)))
def test_the_expected_prints_are_pytorchs(case):
    real = pytest.importorskip("torch")
    make, expected = EXPECTED[case]
    assert repr(make(real)) == expected


def test_print_options_are_pytorchs():
    torch.set_printoptions(precision=2)
    assert repr(torch.tensor([1.12345, 2.5])) == "tensor([1.12, 2.50])"
    torch.set_printoptions(sci_mode=False)  # precision stays; sci_mode is set as given
    assert repr(torch.tensor([1e-6, 1.0])) == "tensor([0.00, 1.00])"
    with torch.printoptions(sci_mode=True):
        assert repr(torch.tensor([1.5, 1.0])) == "tensor([1.50e+00, 1.00e+00])"
    assert torch.get_printoptions()["sci_mode"] is False
    torch.set_printoptions(profile="default", threshold=5)
    assert repr(torch.arange(10)) == "tensor([0, 1, 2,  ..., 7, 8, 9])"
    assert torch._tensor_str.PRINT_OPTS.precision == 4
    torch.set_printoptions(profile="short")
    assert repr(torch.tensor([np.pi])) == "tensor([3.14])"
