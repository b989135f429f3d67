"""`torch.autograd.gradcheck` and `gradgradcheck`: they pass right gradients (a custom
Function's, built-in ops'), and catch a wrong first derivative and a wrong second one."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch
from tests.frontend.test_function import Square
from tracegrad.frontend.gradcheck import GradcheckError, _numeric


class WrongSquare(Square):
    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x  # half the gradient


class FlatSquare(Square):
    @staticmethod
    def backward(ctx, g):  # right once, but 2x is a constant to autograd: no second derivative
        (x,) = ctx.saved_tensors
        return 2 * g * x.detach()


def _x(*shape):
    return torch.tensor(np.random.default_rng(0).random(shape), requires_grad=True)


def test_right_gradients_pass_both_checks():
    x, y = _x(3, 2), _x(2, 4)
    assert torch.autograd.gradcheck(Square.apply, x)
    assert torch.autograd.gradgradcheck(Square.apply, (x,))
    assert torch.autograd.gradcheck(lambda a, b: (a @ b).tanh(), (x, y))
    assert torch.autograd.gradgradcheck(lambda a, b: (a @ b).tanh(), (x, y))


def test_a_wrong_first_or_second_derivative_is_caught():
    x = _x(4)
    assert not torch.autograd.gradcheck(WrongSquare.apply, x, raise_exception=False)
    with pytest.raises(GradcheckError, match="output 0 with respect to input 0"):
        torch.autograd.gradcheck(WrongSquare.apply, (x,))
    assert torch.autograd.gradcheck(FlatSquare.apply, x)
    assert not torch.autograd.gradgradcheck(FlatSquare.apply, x, raise_exception=False)


def test_the_numeric_jacobian_is_the_known_one():
    """Of x * y in x: diag(y) (central differences are exact for a product)."""
    x, y = _x(3), torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)
    ((jac,),) = _numeric(lambda a, b: a * b, (x, y), [0], [3], 1e-6)
    np.testing.assert_allclose(jac, np.diag(y.numpy()), atol=1e-9)
