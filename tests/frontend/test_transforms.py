"""Function transforms as `torch.func` and `torch.autograd.functional` spell them: Jacobians,
Hessians and their products against finite differences in float64 and against PyTorch where it
is installed; `vmap(grad(f))` per-sample gradients and `functional_call` fast weights, eagerly
and in a traced function."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as tt
from tests.conftest import numeric_grad

try:
    import torch
except ImportError:
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
AF = tt.autograd.functional


def two_in_two_out(lib):
    return lambda a, b: (lib.tanh(b @ a) * a.sum(), (a * a).sum() * b)


def scalar(lib):
    return lambda a: (lib.sin(a) ** 2).sum() * a.prod()


def _numeric_jacobian(f, x):
    """d f / d x by central differences, shaped f.shape + x.shape."""
    out = np.asarray(f(x))
    jac = np.zeros(out.shape + x.shape)
    for k in range(out.size):
        jac.reshape(out.size, *x.shape)[k] = numeric_grad(lambda a: np.asarray(f(a)).flat[k], x)
    return jac


@pytest.fixture
def xs(rng):
    return rng.standard_normal(3), rng.standard_normal((2, 3))


def test_jacobian_matches_finite_differences(xs):
    x, w = xs
    jac = AF.jacobian(two_in_two_out(tg), (tg.tensor(x), tg.tensor(w)))
    assert [[j.shape for j in row] for row in jac] == [
        [(2, 3), (2, 2, 3)],
        [(2, 3, 3), (2, 3, 2, 3)],
    ]
    f0 = two_in_two_out(tg)

    def out(i, n):
        def f(a):
            args = [tg.tensor(x), tg.tensor(w)]
            args[n] = tg.tensor(a)
            return f0(*args)[i].numpy()

        return f

    for i in range(2):
        for n, arg in enumerate((x, w)):
            np.testing.assert_allclose(jac[i][n].numpy(), _numeric_jacobian(out(i, n), arg),
                                       rtol=1e-6, atol=1e-8)  # fmt: skip


def test_hessian_and_its_products_agree(xs):
    x = xs[0]
    h = AF.hessian(scalar(tg), tg.tensor(x)).numpy()
    grad_np = lambda a: tg.grad(scalar(tg))(tg.tensor(a)).numpy()  # noqa: E731
    np.testing.assert_allclose(h, _numeric_jacobian(grad_np, x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(h, h.T, rtol=1e-12)
    v = np.array([1.0, 2.0, -1.0])
    for product in (AF.hvp, AF.vhp):
        value, hv = product(scalar(tg), tg.tensor(x), tg.tensor(v))
        np.testing.assert_allclose(hv.numpy(), h @ v, rtol=1e-10)
        np.testing.assert_allclose(value.numpy(), scalar(tg)(tg.tensor(x)).numpy())
    _, jv = AF.jvp(lambda a: tg.grad(scalar(tg))(a), tg.tensor(x), tg.tensor(v))
    np.testing.assert_allclose(jv.numpy(), h @ v, rtol=1e-10)  # forward over reverse


@needs_torch
@pytest.mark.parametrize("name", ["jacobian", "hessian", "jvp", "vjp", "hvp", "vhp"])
def test_autograd_functional_matches_pytorchs(xs, name):
    x, w = xs

    def run(lib):
        F = getattr(lib.autograd.functional, name)
        X, W = lib.tensor(x), lib.tensor(w)
        if name == "jacobian":
            return F(two_in_two_out(lib), (X, W))
        if name == "hessian":
            return F(scalar(lib), X)
        if name == "jvp":
            return F(lambda a, b: two_in_two_out(lib)(a, b)[0], (X, W), (X * 0 + 1, W * 2))
        if name == "vjp":
            return F(lambda a, b: two_in_two_out(lib)(a, b)[0], (X, W), lib.tensor([1.0, 2.0]))
        return F(scalar(lib), X, lib.tensor([1.0, 2.0, -1.0], dtype=lib.float64))

    def leaves(r):
        return [t for x in (r if isinstance(r, tuple) else (r,)) for t in leaves_of(x)]

    def leaves_of(x):
        return [t for y in x for t in leaves_of(y)] if isinstance(x, tuple) else [x]

    got, want = leaves(run(tt)), leaves(run(torch))
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-14)


def test_func_transforms(rng):
    x = tg.tensor(rng.standard_normal((4, 3)))
    per_sample = tt.func.vmap(tt.func.grad(lambda a: (a**3).sum()))(x)
    np.testing.assert_allclose(per_sample.numpy(), 3 * x.numpy() ** 2)
    jac = tt.func.jacrev(lambda a: tg.sin(a) * a)(x[0])
    np.testing.assert_allclose(jac.numpy(), np.diag(np.cos(x[0].numpy()) * x[0].numpy()
                                                    + np.sin(x[0].numpy())))  # fmt: skip
    hess = tt.func.hessian(lambda a: (a**3).sum())(x[0])
    np.testing.assert_allclose(hess.numpy(), np.diag(6 * x[0].numpy()))
    out, tangent = tt.func.jvp(lambda a: a**2, (x[0],), (tg.ones(3, dtype=np.float64),))
    np.testing.assert_allclose(tangent.numpy(), 2 * x[0].numpy())
    grads, (value, aux) = tt.func.grad_and_value(lambda a: ((a**2).sum(), "aux"), has_aux=True)(x)
    assert aux == "aux" and np.isclose(value.item(), (x.numpy() ** 2).sum())
    np.testing.assert_allclose(grads.numpy(), 2 * x.numpy())
    mapped = tt.func.vmap(lambda a, b: a * b, in_dims=(1, None), out_dims=1)(x, tg.tensor(2.0))
    np.testing.assert_allclose(mapped.numpy(), 2 * x.numpy())
    with pytest.raises(ValueError, match="sizes"):
        tt.func.vmap(lambda a, b: a + b)(x, tg.ones(5))


def _fast_weights_step(model, x, y):
    """One MAML-style inner step: gradients of the loss at the model's parameters, then the
    loss at parameters moved against them, through `functional_call`."""
    params = dict(model.named_parameters())
    loss = tg.nn.functional.mse_loss(tt.func.functional_call(model, params, (x,)), y)
    grads = tg.autograd.grad(loss, list(params.values()), create_graph=True)
    fast = {n: p - 0.1 * g for (n, p), g in zip(params.items(), grads, strict=True)}
    return tg.nn.functional.mse_loss(tt.func.functional_call(model, fast, (x,)), y)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_functional_call_fast_weights_traced_and_eager(rng, backend):
    tg.nn.manual_seed(0)
    model = tg.nn.Sequential(tg.nn.Linear(3, 8), tg.nn.Tanh(), tg.nn.Linear(8, 1))
    x = tg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    y = tg.tensor(rng.standard_normal((5, 1)).astype(np.float32))
    before = [p.numpy().copy() for p in model.parameters()]

    def meta_grads():
        for p in model.parameters():
            p.grad = None
        _fast_weights_step(model, x, y).backward()
        return [p.grad for p in model.parameters()]

    want = [g.numpy() for g in meta_grads()]
    got = [g.numpy() for g in tg.trace(meta_grads, backend=backend)()]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    for p, b in zip(model.parameters(), before, strict=True):  # the call left them in place
        np.testing.assert_array_equal(p.numpy(), b)
    first_order = tg.autograd.grad(tg.nn.functional.mse_loss(model(x), y), list(model.parameters()))
    assert not all(np.allclose(a, b.numpy()) for a, b in zip(want, first_order, strict=True))


def _ensemble(lib, n=3):
    """n small MLPs with fixed weights, in `lib` (tracegrad.torch or torch)."""
    rng = np.random.default_rng(5)
    models = [lib.nn.Sequential(lib.nn.Linear(4, 6), lib.nn.Tanh(), lib.nn.Linear(6, 2)).double()
              for _ in range(n)]  # fmt: skip
    for m in models:
        m.load_state_dict({k: lib.tensor(rng.standard_normal(tuple(v.shape)))
                           for k, v in m.state_dict().items()})  # fmt: skip
    return models


def _ensembled(lib):
    """PyTorch's model-ensembling recipe: stacked state, a meta template, vmap over
    functional_call; and per-model gradients of a loss by grad over the parameters' dict."""
    models = _ensemble(lib)
    x = lib.tensor(np.linspace(-1, 1, 20).reshape(5, 4))
    params, buffers = lib.func.stack_module_state(models)
    template = copy.deepcopy(models[0]).to("meta")

    def fmodel(p, b, x):
        return lib.func.functional_call(template, (p, b), (x,))

    def loss(p, b, x):
        return (fmodel(p, b, x) ** 2).sum()

    outs = lib.func.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, x)
    grads = lib.func.vmap(lib.func.grad(loss), in_dims=(0, 0, None))(params, buffers, x)
    return outs, grads, params, models, x


def test_ensembles_by_stacked_state_and_vmap_over_dicts():
    outs, grads, params, models, x = _ensembled(tt)
    for i, m in enumerate(models):
        np.testing.assert_allclose(outs[i].numpy(), m(x).detach().numpy(), rtol=1e-12)
        loss = (m(x) ** 2).sum()
        want = tg.autograd.grad(loss, list(m.parameters()))
        for (name, g), w in zip(grads.items(), want, strict=True):
            np.testing.assert_allclose(g[i].numpy(), w.numpy(), rtol=1e-12, err_msg=name)
    assert all(p.requires_grad and p.is_leaf for p in params.values())
    assert next(iter(params.values())).shape[0] == 3
    template = copy.deepcopy(models[0]).to("meta")
    assert all(p.is_meta for p in template.parameters()) and not models[0][0].weight.is_meta
    with pytest.raises(RuntimeError, match="at least one model"):
        tt.func.stack_module_state([])


@needs_torch
def test_ensembles_match_pytorch():
    ours, theirs = _ensembled(tt), _ensembled(torch)
    np.testing.assert_allclose(ours[0].numpy(), theirs[0].detach().numpy(), rtol=1e-12)
    for name in theirs[1]:
        np.testing.assert_allclose(
            ours[1][name].numpy(), theirs[1][name].detach().numpy(), rtol=1e-12
        )


def test_vjp_and_grad_take_dicts_of_tensors(rng):
    params = {"w": tg.tensor(rng.standard_normal((3, 2))), "b": tg.tensor(rng.standard_normal(2))}
    x = tg.tensor(rng.standard_normal((4, 3)))
    grads = tt.func.grad(lambda p, x: tg.tanh(x @ p["w"] + p["b"]).sum())(params, x)
    h = np.tanh(x.numpy() @ params["w"].numpy() + params["b"].numpy())
    np.testing.assert_allclose(grads["b"].numpy(), (1 - h**2).sum(0), rtol=1e-12)
    np.testing.assert_allclose(grads["w"].numpy(), x.numpy().T @ (1 - h**2), rtol=1e-12)
    out, vjp_fn = tt.func.vjp(lambda pair: pair[0] * pair[1], (params["b"], params["b"] + 1))
    (pair,) = vjp_fn(tg.ones(2, dtype=np.float64))
    np.testing.assert_allclose(pair[1].numpy(), params["b"].numpy(), rtol=1e-12)


DECOMPOSED = {  # ops whose cotangents with create_graph come from differentiating their parts
    "linear": lambda w, x: tt.nn.functional.linear(x, w, w[:, 0]),
    "log_softmax": lambda w, x: tt.nn.functional.log_softmax(x @ w.T, -1),
    "softmax": lambda w, x: tt.nn.functional.softmax(x @ w.T, -1),
    "cross_entropy": lambda w, x: tt.nn.functional.cross_entropy(x @ w.T, tg.tensor([0, 2, 1])),
    "nll_loss": lambda w, x: tt.nn.functional.nll_loss(x @ w.T, tg.tensor([1, 0, 2])),
    "batch_norm": lambda w, x: tt.nn.functional.batch_norm(x @ w.T, None, None, training=True),
}  # fmt: skip


@pytest.mark.parametrize("name", DECOMPOSED)
def test_jvp_through_ops_differentiated_by_their_parts(name, rng):
    """torch.func.jvp pulls back through a finished vjp, whose primals no one tracks any more:
    the ops whose create_graph cotangents come from their parts gave zeros there (nn.Linear's
    Jacobian-vector products were 0)."""
    f = DECOMPOSED[name]
    w, t, x = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    xt = tg.tensor(x)
    _, got = tt.func.jvp(lambda a: f(a, xt), (tg.tensor(w),), (tg.tensor(t),))
    eps = 1e-6
    want = (f(tg.tensor(w + eps * t), xt).numpy() - f(tg.tensor(w - eps * t), xt).numpy()) / (
        2 * eps
    )
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-8)
    assert np.abs(want).max() > 1e-3  # a tangent that shows


def test_ntk_by_jacobians_and_by_products_agree(rng):
    """The neural tangent kernel two ways, as PyTorch's recipe: Jacobians over a dict of
    parameters contracted, and vjp-then-jvp products of the identity's rows."""
    net = tt.nn.Sequential(tt.nn.Linear(4, 5), tt.nn.Tanh(), tt.nn.Linear(5, 3)).double()
    params = {k: v.detach() for k, v in net.named_parameters()}
    x1, x2 = tg.tensor(rng.standard_normal((2, 4))), tg.tensor(rng.standard_normal((2, 4)))

    def single(p, x):
        return tt.func.functional_call(net, p, (x.unsqueeze(0),)).squeeze(0)

    jac = [tt.func.vmap(tt.func.jacrev(single), (None, 0))(params, x) for x in (x1, x2)]
    by_jacobians = sum(tg.einsum("Naf,Mbf->NMab", a.flatten(2), b.flatten(2))
                       for a, b in zip(jac[0].values(), jac[1].values(), strict=True))  # fmt: skip

    def kernel(a, b):
        _, pull = tt.func.vjp(lambda p: single(p, a), params)
        rows = [tt.func.jvp(lambda p: single(p, b), (params,), pull(e))[1] for e in tg.eye(3)]
        return tg.stack(rows)

    by_products = tg.stack([tg.stack([kernel(a, b) for b in x2]) for a in x1])
    np.testing.assert_allclose(by_products.numpy(), by_jacobians.numpy(), rtol=1e-10)
