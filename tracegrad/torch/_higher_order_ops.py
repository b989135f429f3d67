"""`torch._higher_order_ops`: PyTorch's control flow as functions, by their module paths
(transformers' Mamba imports `associative_scan` from there): `associative_scan`, a log-depth
inclusive scan of an associative combine, `scan`, a loop carrying state, and `cond` and
`while_loop`. Each runs as tensor ops, so it differentiates and traces as any code does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tracegrad as _tg
from tracegrad.frontend import pytree
from tracegrad.frontend.tensor import Tensor
from tracegrad.torch._functions import cond, while_loop
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["associative_scan", "cond", "scan", "while_loop"]


def _is_tensor(v: Any) -> bool:
    return isinstance(v, Tensor)


def associative_scan(combine_fn: Callable[[Any, Any], Any], xs: Any, dim: int,
                     reverse: bool = False, combine_mode: str = "pointwise") -> Any:  # fmt: skip
    """The inclusive scan of `xs` (a tensor or a pytree of them, scanned alike) along `dim`
    by an associative `combine_fn(earlier, later)`: Hillis and Steele's, log2(n) calls of
    `combine_fn` on shifted slices. `reverse` scans from the end. `combine_mode` is accepted
    (PyTorch's "pointwise" needs a GPU; both compute the same)."""
    leaves, tree = pytree.flatten(xs, _is_tensor)
    d = dim % leaves[0].ndim
    n = leaves[0].shape[d]
    out = [_tg.flip(leaf, (d,)) for leaf in leaves] if reverse else leaves
    offset = 1
    while offset < n:
        earlier = pytree.unflatten(tree, [_tg.narrow(t, d, 0, n - offset) for t in out])
        later = pytree.unflatten(tree, [_tg.narrow(t, d, offset, n - offset) for t in out])
        combined = pytree.flatten(combine_fn(earlier, later), _is_tensor)[0]
        out = [_tg.cat([_tg.narrow(t, d, 0, offset), c], d)
               for t, c in zip(out, combined, strict=True)]  # fmt: skip
        offset *= 2
    out = [_tg.flip(t, (d,)) for t in out] if reverse else out
    return pytree.unflatten(tree, out)


def scan(combine_fn: Callable[[Any, Any], tuple[Any, Any]], init: Any, xs: Any, *,
         dim: int = 0, reverse: bool = False) -> tuple[Any, Any]:  # fmt: skip
    """(carry, ys): `carry, y = combine_fn(carry, x)` over the slices x of `xs` along `dim`
    (from the end with `reverse`), the ys stacked along `dim` in the slices' order."""
    leaves, tree = pytree.flatten(xs, _is_tensor)
    d = dim % leaves[0].ndim
    order = range(leaves[0].shape[d])
    carry, ys = init, []
    for i in reversed(order) if reverse else order:
        carry, y = combine_fn(carry, pytree.unflatten(tree, [_tg.select(t, d, i) for t in leaves]))
        ys.append(y)
    ys = ys[::-1] if reverse else ys
    columns, out_tree = pytree.flatten(ys[0], _is_tensor)
    parts = [pytree.flatten(y, _is_tensor)[0] for y in ys]
    stacked = [_tg.stack([p[k] for p in parts], d) for k in range(len(columns))]
    return carry, pytree.unflatten(out_tree, stacked)


for _name in ("associative_scan", "scan", "cond", "while_loop"):
    file_module(f"{__name__}.{_name}", f"`torch._higher_order_ops.{_name}`",
                {_name: globals()[_name]})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
