"""Forward-mode AD with dual tensors (`torch.autograd.forward_ad`): tangents against central
differences in float64 and against PyTorch's forward AD where it is installed; custom
Functions' `jvp`; the level's rules; gradcheck's forward-mode check, which must fail on a
wrong `jvp`."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as tt
from tracegrad.frontend import forward_ad as fwad

rng = np.random.default_rng(7)


def directional(f, xs, ts, eps=1e-6):
    """(f(x + eps t) - f(x - eps t)) / 2 eps, in float64."""
    up = f(*[tg.tensor(x + eps * t) for x, t in zip(xs, ts, strict=True)]).numpy()
    down = f(*[tg.tensor(x - eps * t) for x, t in zip(xs, ts, strict=True)]).numpy()
    return (up - down) / (2 * eps)


def tangent_of(f, xs, ts):
    with fwad.dual_level():
        duals = [fwad.make_dual(tg.tensor(x), tg.tensor(t)) for x, t in zip(xs, ts, strict=True)]
        return fwad.unpack_dual(f(*duals)).tangent.numpy()


FUNCTIONS = {
    "tanh of a product": (lambda a, b: tg.tanh(a @ b) * a.sum(), [(3, 4), (4, 2)]),
    "softmax and log": (lambda a: tt.nn.functional.log_softmax(a * a, -1), [(2, 5)]),
    "layer norm": (lambda a: tt.nn.functional.layer_norm(a, (4,)), [(3, 4)]),
    "conv2d": (lambda x, w: tt.nn.functional.conv2d(x, w, padding=1), [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "indexing and max": (lambda a: a[1:, ::2].amax(0) + a[0, 1] ** 3, [(4, 6)]),
    "division and exp": (lambda a, b: tg.exp(a / (b * b + 1.0)).mean(), [(5,), (5,)]),
}  # fmt: skip


@pytest.mark.parametrize("name", FUNCTIONS)
def test_tangents_match_central_differences(name):
    f, shapes = FUNCTIONS[name]
    xs = [rng.standard_normal(s) for s in shapes]
    ts = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(tangent_of(f, xs, ts), directional(f, xs, ts), rtol=1e-6,
                               atol=1e-8)  # fmt: skip


@pytest.mark.parametrize("name", FUNCTIONS)
def test_tangents_match_pytorchs_forward_ad(name):
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    f, shapes = FUNCTIONS[name]
    xs = [rng.standard_normal(s) for s in shapes]
    ts = [rng.standard_normal(s) for s in shapes]
    theirs_f = {"tanh of a product": lambda a, b: torch.tanh(a @ b) * a.sum(),
                "softmax and log": lambda a: torch.nn.functional.log_softmax(a * a, -1),
                "layer norm": lambda a: torch.nn.functional.layer_norm(a, (4,)),
                "conv2d": lambda x, w: torch.nn.functional.conv2d(x, w, padding=1),
                "indexing and max": lambda a: a[1:, ::2].amax(0) + a[0, 1] ** 3,
                "division and exp": lambda a, b: torch.exp(a / (b * b + 1.0)).mean(),
                }[name]  # fmt: skip
    import torch.autograd.forward_ad as theirs

    with theirs.dual_level():
        duals = [
            theirs.make_dual(torch.tensor(x), torch.tensor(t)) for x, t in zip(xs, ts, strict=True)
        ]
        want = theirs.unpack_dual(theirs_f(*duals)).tangent.numpy()
    np.testing.assert_allclose(tangent_of(f, xs, ts), want, rtol=1e-12, atol=1e-14)


def test_an_input_without_tangent_and_a_module_with_dual_parameters():
    lin = tt.nn.Linear(3, 2).double()
    x = tg.tensor(rng.standard_normal((4, 3)))
    tangents = {
        n: tg.tensor(rng.standard_normal(tuple(p.shape))) for n, p in lin.named_parameters()
    }
    with fwad.dual_level():
        duals = {n: fwad.make_dual(p, tangents[n]) for n, p in lin.named_parameters()}
        out = tt.func.functional_call(lin, duals, (x,))
        got = fwad.unpack_dual(out).tangent.numpy()
        assert fwad.unpack_dual(x).tangent is None  # not computed from a dual tensor
        assert fwad.unpack_dual(duals["weight"]).tangent is tangents["weight"]
    want = x.numpy() @ tangents["weight"].numpy().T + tangents["bias"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert fwad.unpack_dual(out).tangent is None  # the level is over


def test_reverse_mode_still_reaches_the_primal():
    p = tg.tensor(rng.standard_normal(3), requires_grad=True)
    with fwad.dual_level():
        y = (fwad.make_dual(p, tg.ones(3, dtype=np.float64)) ** 2).sum()
        np.testing.assert_allclose(
            fwad.unpack_dual(y).tangent.numpy(), 2 * p.detach().numpy().sum()
        )
        y.backward()
    np.testing.assert_allclose(p.grad.numpy(), 2 * p.detach().numpy())


class Exp(tg.autograd.Function):
    """exp with its own jvp (and no backward), reading what forward saved for it."""

    @staticmethod
    def forward(ctx, x):
        y = tg.exp(x)
        ctx.save_for_forward(y)
        return y

    @staticmethod
    def jvp(ctx, t):
        (y,) = ctx.saved_tensors
        return t * y


class WrongExp(Exp):
    @staticmethod
    def jvp(ctx, t):
        return t * 2.0


class Cube(tg.autograd.Function):
    """x^3 with a backward only: its tangent is pulled through backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


def test_custom_functions_by_their_jvp_or_their_backward():
    x, t = rng.standard_normal(4), rng.standard_normal(4)
    np.testing.assert_allclose(tangent_of(lambda a: Exp.apply(a) * 2.0, [x], [t]),
                               2 * np.exp(x) * t, rtol=1e-12)  # fmt: skip
    np.testing.assert_allclose(tangent_of(lambda a: tg.sin(Cube.apply(a)), [x], [t]),
                               np.cos(x**3) * 3 * x**2 * t, rtol=1e-12)  # fmt: skip


def test_gradcheck_checks_forward_mode_and_fails_on_a_wrong_jvp():
    x = tg.tensor(rng.standard_normal(3), requires_grad=True)
    options = {"check_forward_ad": True, "check_backward_ad": False}
    assert tt.autograd.gradcheck(Exp.apply, (x,), **options)
    with pytest.raises(tt.autograd.GradcheckError, match="forward AD"):
        tt.autograd.gradcheck(WrongExp.apply, (x,), **options)
    assert tt.autograd.gradcheck(lambda a: tg.tanh(a) * a, (x,), check_forward_ad=True)


def test_the_levels_rules_as_pytorchs():
    with pytest.raises(RuntimeError, match="no level exists"):
        fwad.make_dual(tg.ones(2), tg.ones(2))
    with fwad.dual_level():
        with pytest.raises(RuntimeError, match="different size"):
            fwad.make_dual(tg.ones(2), tg.ones(3))
        with pytest.raises(RuntimeError, match="Nested forward mode AD"):
            fwad.enter_dual_level()
        dual = fwad.make_dual(tg.ones(2, dtype=np.float64), tg.ones(2, dtype=np.float32))
        assert fwad.unpack_dual(dual).tangent.dtype == np.float64
    assert tt.autograd.forward_ad.unpack_dual(dual).tangent is None


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_function_of_dual_tensors_computes_what_eager_does(backend):
    def jvp_of(x, t):
        with fwad.dual_level():
            d = fwad.make_dual(x, t)
            return fwad.unpack_dual(tg.tanh(d @ d.T).sum(1)).tangent

    x, t = tg.tensor(rng.standard_normal((3, 4))), tg.tensor(rng.standard_normal((3, 4)))
    traced = tg.trace(jvp_of, backend=backend)
    for _ in range(2):
        np.testing.assert_allclose(traced(x, t).numpy(), jvp_of(x, t).numpy(), rtol=1e-12)
