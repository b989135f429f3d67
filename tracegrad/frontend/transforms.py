"""Function transforms over the one tape, as `torch.func` and `torch.autograd.functional` spell
them: Jacobians row by row of vector-Jacobian products, Jacobian-vector products as the
derivative of a VJP in its (linear) cotangent, Hessians as Jacobians of gradients, `vmap` as a
loop over the mapped axis (the same values as a batched rule, at a Python call per element), and
`functional_call`, a module run with other tensors in its parameters' places."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend import pytree
from tracegrad.frontend.functions import moveaxis, stack
from tracegrad.frontend.grad_manager import grad, grad_and_value, vjp
from tracegrad.frontend.tensor import Tensor, as_tensor

__all__ = ["func_hessian", "func_jvp", "functional_call", "hessian", "hvp", "jacfwd", "jacobian",
           "jacrev", "jvp", "linearize_jvp", "vhp", "vmap"]  # fmt: skip


def _tensors(x: Any) -> tuple[list[Tensor], bool]:
    """A tensor or a tuple of them as a list, and whether it was a tuple."""
    many = isinstance(x, tuple | list)
    return [as_tensor(t) for t in (x if many else [x])], many


def _zeros_like(t: Tensor) -> Tensor:
    return Tensor._of(np.zeros(t.shape, t.dtype))


def _one_hot(t: Tensor, k: int) -> Tensor:
    e = np.zeros(t.shape, t.dtype)
    e.flat[k] = 1
    return Tensor._of(e)


def _rows(fn: Callable, xs: list[Tensor]) -> tuple[bool, list[list[Tensor]]]:
    """Whether `fn(*xs)` gives several outputs and, per output and input, its Jacobian of shape
    output.shape + input.shape: one VJP per output element."""
    out, vjp_fn = vjp(fn, *xs)
    outs, many = _tensors(out)
    jac = []
    for i, o in enumerate(outs):
        rows = []
        for k in range(o.size):
            cotangents = [_one_hot(o, k) if j == i else _zeros_like(p) for j, p in enumerate(outs)]
            rows.append(vjp_fn(tuple(cotangents) if len(outs) > 1 else cotangents[0]))
        jac.append([
            stack([r[n] for r in rows]).reshape(o.shape + x.shape)
            if rows else Tensor._of(np.zeros(o.shape + x.shape, x.dtype))
            for n, x in enumerate(xs)
        ])  # fmt: skip
    return many, jac


def _leaves(tree: Any) -> list[Tensor]:
    """The tensors of nested dicts, lists and tuples, in order (numbers made tensors)."""
    return [
        as_tensor(x)
        for x in pytree.flatten(tree, lambda v: not isinstance(v, tuple | list | dict))[0]
    ]


def _shaped(jac: list[list[Tensor]], many_out: bool, many_in: bool) -> Any:
    rows = [tuple(r) if many_in else r[0] for r in jac]
    return tuple(rows) if many_out else rows[0]


def jacobian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
             vectorize: bool = False, strategy: str = "reverse-mode") -> Any:  # fmt: skip
    """`torch.autograd.functional.jacobian`: for each output and input, d output / d input of
    shape output.shape + input.shape (nested in tuples as the outputs and inputs are).
    `vectorize` and `strategy` choose PyTorch's algorithm and give the same values here."""
    xs, many_in = _tensors(inputs)
    many_out, jac = _rows(func, xs)
    return _detached(_shaped(jac, many_out, many_in), create_graph)


def _detached(x: Any, keep: bool) -> Any:
    if keep:
        return x
    leaves, tree = pytree.flatten(x, lambda v: isinstance(v, Tensor))
    return pytree.unflatten(tree, [t.detach() for t in leaves])


def hessian(func: Callable, inputs: Any, create_graph: bool = False, strict: bool = False,
            vectorize: bool = False,
            outer_jacobian_strategy: str = "reverse-mode") -> Any:  # fmt: skip
    """`torch.autograd.functional.hessian` of a scalar function: the Jacobian of its gradient."""
    xs, many_in = _tensors(inputs)

    def gradient(*a: Tensor) -> Any:
        g = grad(func, argnums=tuple(range(len(a))))(*a)
        return g if many_in else g[0]

    return jacobian(gradient, tuple(xs) if many_in else xs[0], create_graph)


def linearize_jvp(func: Callable, xs: Sequence[Any], tangents: Sequence[Any]) -> tuple:
    """(outputs, J @ tangents): the VJP `u -> J^T u` is linear in `u`, so the Jacobian-vector
    product is the gradient in `u` of `<J^T u, tangent>` (reverse mode applied twice). A primal
    may be a dict, list or tuple of tensors, its tangent of the same structure."""
    out, vjp_fn = vjp(func, *xs)
    outs, many = _tensors(out)
    flat_tangents = _leaves(tangents)

    def pairing(*us: Tensor) -> Tensor:
        pulled = _leaves(vjp_fn(tuple(us) if many else us[0]))
        return sum((p * t).sum() for p, t in zip(pulled, flat_tangents, strict=True))

    _, pair_vjp = vjp(pairing, *[_zeros_like(o) for o in outs])
    products = pair_vjp(Tensor._of(bfloat16.full((), 1, outs[0].dtype)))
    return out, (tuple(products) if many else products[0])


def jvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple:  # fmt: skip
    """`torch.autograd.functional.jvp`: (func(inputs), J @ v)."""
    xs, many_in = _tensors(inputs)
    vs = (
        _tensors(v)[0]
        if v is not None
        else [Tensor._of(bfloat16.full(x.shape, 1, x.dtype)) for x in xs]
    )
    out, product = linearize_jvp(func, xs, vs)
    return _detached(out, create_graph), _detached(product, create_graph)


def vhp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple:  # fmt: skip
    """`torch.autograd.functional.vhp`: (func(inputs), v^T H) of a scalar function, as the
    gradient of the directional derivative <grad func, v>."""
    xs, many_in = _tensors(inputs)
    vs = (
        _tensors(v)[0]
        if v is not None
        else [Tensor._of(bfloat16.full(x.shape, 1, x.dtype)) for x in xs]
    )
    nums = tuple(range(len(xs)))

    def directional(*a: Tensor) -> Tensor:
        return sum((g * t).sum() for g, t in zip(grad(func, nums)(*a), vs, strict=True))

    products, value = grad_and_value(directional, nums)(*xs)
    value = func(*xs)
    result = tuple(products) if many_in else products[0]
    return _detached(value, create_graph), _detached(result, create_graph)


def hvp(func: Callable, inputs: Any, v: Any = None, create_graph: bool = False,
        strict: bool = False) -> tuple:  # fmt: skip
    """`torch.autograd.functional.hvp`: (func(inputs), H v); H is symmetric, so v^T H."""
    return vhp(func, inputs, v, create_graph, strict)


def jacrev(func: Callable, argnums: int | tuple[int, ...] = 0, *, has_aux: bool = False,
           chunk_size: int | None = None) -> Callable:  # fmt: skip
    """`torch.func.jacrev`: a function giving the Jacobian in argument(s) `argnums`."""

    def jac_fn(*args: Any) -> Any:
        nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
        aux = []

        def partial(*xs: Tensor) -> Any:
            full = list(args)
            for n, x in zip(nums, xs, strict=True):
                full[n] = x
            result = func(*full)
            if has_aux:
                aux.append(result[1])
                return result[0]
            return result

        trees = [pytree.flatten(args[n], _is_leaf) for n in nums]
        flat = [as_tensor(x) for leaves, _ in trees for x in leaves]

        def flat_partial(*leaves: Tensor) -> Any:
            parts, start = [], 0
            for shown, tree in trees:
                parts.append(pytree.unflatten(tree, list(leaves[start : start + len(shown)])))
                start += len(shown)
            return partial(*parts)

        many_out, jac = _rows(flat_partial, flat)
        jac = [_regrouped(row, trees) for row in jac]  # an argument's Jacobian in its structure
        result = _shaped(jac, many_out, not isinstance(argnums, int))
        return (result, aux[0]) if has_aux else result

    return jac_fn


def _is_leaf(v: Any) -> bool:
    return not isinstance(v, tuple | list | dict)


def _regrouped(row: list[Tensor], trees: list[tuple[list, Any]]) -> list[Any]:
    """Per-leaf Jacobians back in each argument's structure (a dict of parameters' ones)."""
    out, start = [], 0
    for leaves, tree in trees:
        out.append(pytree.unflatten(tree, row[start : start + len(leaves)]))
        start += len(leaves)
    return out


jacfwd = jacrev  # the same Jacobian; forward mode would only change the order of the work


def func_jvp(func: Callable, primals: Sequence[Any], tangents: Sequence[Any], *,
             strict: bool = False, has_aux: bool = False) -> tuple:  # fmt: skip
    """`torch.func.jvp`: (func(*primals), J @ tangents)."""
    aux = []

    def plain(*xs: Tensor) -> Any:
        result = func(*xs)
        if has_aux:
            aux.append(result[1])
            return result[0]
        return result

    out, product = linearize_jvp(plain, tuple(primals), tuple(tangents))
    return (out, product, aux[0]) if has_aux else (out, product)


def func_hessian(func: Callable, argnums: int | tuple[int, ...] = 0) -> Callable:
    """`torch.func.hessian`: the Jacobian of the gradient in argument(s) `argnums`."""
    return jacrev(jacrev(func, argnums), argnums)


def vmap(func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error", *,
         chunk_size: int | None = None) -> Callable:  # fmt: skip
    """`torch.func.vmap`: `func` mapped over axis `in_dims` of its arguments (per argument, None
    for an argument passed whole; an argument may be a dict, list or tuple of tensors, each
    mapped: an ensemble's stacked parameters), results stacked on `out_dims`. A loop over the
    mapped axis: the same values as PyTorch's batching rules, a Python call per element;
    differentiable, so `vmap(grad(f))` gives per-sample gradients."""

    def mapped(*args: Any) -> Any:
        dims = in_dims if isinstance(in_dims, tuple | list) else (in_dims,) * len(args)
        if len(dims) != len(args):
            raise ValueError(f"vmap: in_dims {in_dims} for {len(args)} arguments")
        trees = [pytree.flatten(a, lambda v: isinstance(v, Tensor)) for a in args]
        sizes = {t.shape[d] for (ts, _), d in zip(trees, dims, strict=True) if d is not None
                 for t in ts}  # fmt: skip
        if len(sizes) != 1:
            raise ValueError(f"vmap: the mapped axes of the arguments have sizes {sorted(sizes)}; "
                             "exactly one size is needed")  # fmt: skip
        n = sizes.pop()

        def element(i: int) -> list:
            return [a if d is None else pytree.unflatten(tree, [_select(t, d, i) for t in ts])
                    for a, (ts, tree), d in zip(args, trees, dims, strict=True)]  # fmt: skip

        results = [func(*element(i)) for i in range(n)]
        leaves = [pytree.flatten(r, lambda v: isinstance(v, Tensor))[0] for r in results]
        tree = pytree.flatten(results[0], lambda v: isinstance(v, Tensor))[1]
        odims = out_dims if isinstance(out_dims, tuple | list) else (out_dims,) * len(leaves[0])
        stacked = [moveaxis(stack(list(column)), 0, d)
                   for column, d in zip(zip(*leaves, strict=True), odims, strict=True)]  # fmt: skip
        return pytree.unflatten(tree, stacked)

    return mapped


def _select(a: Tensor, dim: int, i: int) -> Tensor:
    return a[(slice(None),) * (dim % a.ndim) + (i,)]


@contextlib.contextmanager
def _swapped(module: Any, tensors: dict[str, Any]) -> Iterator[None]:
    """The module's attributes named by dotted paths set to `tensors` inside, restored after."""
    saved = []
    try:
        for path, value in tensors.items():
            *parents, name = path.split(".")
            owner = module
            for p in parents:
                owner = getattr(owner, p)
            saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
            object.__setattr__(owner, name, value)
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is _MISSING:
                object.__delattr__(owner, name)
            else:
                object.__setattr__(owner, name, old)


_MISSING = object()


def stack_module_state(models: Sequence[Any]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """`torch.func.stack_module_state`: the models' parameters and buffers stacked by name
    along a new first axis (an ensemble for `vmap` over `functional_call`); the stacked
    parameters are new leaves that require grad where the models' do."""
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if any(m.training != models[0].training for m in models):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/"
                           "eval mode.")  # fmt: skip

    def stacked(named: Callable) -> dict[str, Tensor]:
        columns = zip(*(list(named(m)) for m in models), strict=True)
        out = {}
        for column in columns:
            name, first = column[0]
            t = stack([v.detach() for _, v in column])
            out[name] = t.requires_grad_() if first.requires_grad else t
        return out

    return stacked(lambda m: m.named_parameters()), stacked(lambda m: m.named_buffers())


def functional_call(module: Any, parameter_and_buffer_dicts: Any, args: Any = None,
                    kwargs: dict | None = None, *, tie_weights: bool = True,
                    strict: bool = False) -> Any:  # fmt: skip
    """`torch.func.functional_call`: `module(*args, **kwargs)` with the tensors of the dict(s),
    by their `state_dict` names, in place of its parameters and buffers for this call only
    (gradients flow to those tensors: meta-learning's fast weights, ensembles)."""
    dicts = parameter_and_buffer_dicts
    merged = dict(itertools.chain.from_iterable(
        d.items() for d in (dicts if isinstance(dicts, tuple | list) else [dicts])
    ))  # fmt: skip
    if strict:
        expected = {n for n, _ in (*module.named_parameters(), *module.named_buffers())}
        if set(merged) != expected:
            raise RuntimeError(
                f"functional_call: missing {sorted(expected - set(merged))}, unexpected "
                f"{sorted(set(merged) - expected)}"
            )
    args = args if isinstance(args, tuple) else (() if args is None else (args,))
    with _swapped(module, merged):
        return module(*args, **(kwargs or {}))
