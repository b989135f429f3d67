"""Views (reshape, transpose, broadcast), concatenation, indexing and its scatter, padding; and
`sum_to`, the helper every broadcasting op's VJP rule calls."""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, Primitive


def _reshape_rule(x, shape):
    if math.prod(shape) != math.prod(x.shape):
        raise ValueError(f"cannot reshape {x.shape} into {shape}")
    return shape, x.dtype


def _transpose_rule(x, axes):
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of the axes of {x.shape}")
    return tuple(x.shape[a] for a in axes), x.dtype


def _broadcast_to_rule(x, shape):
    if len(shape) < x.ndim or np.broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ValueError(f"cannot broadcast {x.shape} to {shape}")
    return shape, x.dtype


def _concat_rule(*xs, axis):
    first = xs[0]
    if not 0 <= axis < first.ndim:  # the front end resolves -1; the VJP's slices need axis >= 0
        raise ValueError(f"axis {axis} of {first.ndim}-d inputs: the op takes 0 <= axis < ndim")
    for x in xs[1:]:
        if x.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, first.shape, strict=True)) if i != axis
        ):
            raise ValueError("shapes " + ", ".join(str(x.shape) for x in xs) + f" on axis {axis}")
    shape = list(first.shape)
    shape[axis] = builtins.sum(x.shape[axis] for x in xs)
    return shape, np.result_type(*(x.dtype for x in xs))


def _getitem_rule(x, *idx, template):
    dummy = np.broadcast_to(np.empty((), x.dtype), x.shape)
    for i in idx:
        if i.dtype.kind not in "iu":
            raise ValueError(f"index arrays must be integers, not {i.dtype}")
    probe = [np.zeros(i.shape, i.dtype) for i in idx]
    return dummy[shapes.build_index(template, probe)].shape, x.dtype


def _scatter_rule(g, *idx, shape, template):
    return shape, g.dtype


def _getitem(x, *idx, template):
    """With index arrays the result is a copy, as the graph takes it to be: NumPy takes a 0-d
    integer array for an integer and would return a view (a write into it would reach `x`,
    a constant of the plan, say)."""
    index = shapes.build_index(template, idx)
    out = x[index]
    if idx and any(i.ndim == 0 for i in idx) and np.may_share_memory(out, x):
        return np.array(out)
    if not isinstance(out, np.ndarray):  # one element by integers: NumPy gives a scalar (a
        # copy), PyTorch a 0-d view (code finds storages' ends by `t.view(-1)[-1].data_ptr()`)
        index = index if isinstance(index, tuple) else (index,)
        out = x[(*index, Ellipsis)] if all(i is not Ellipsis for i in index) else np.asarray(out)
    return out


def _scatter_add(g, *idx, shape, template, out=None):
    if out is None:
        out = np.zeros(shape, g.dtype)
    else:
        out.fill(0)
    _add_at(out, g, *idx, template=template)
    return out


def _add_at(out, g, *idx, template) -> None:
    """out[index] += g, in place, repeated indices adding up (getitem's cotangent into `out`:
    the tape's accumulator for x, where a loop over x[t] adds into one buffer rather than
    into a zeroed copy of x per step)."""
    index = shapes.build_index(template, idx)
    if template == ("@",) and idx[0].dtype.kind in "iu":  # rows: an embedding's gradient
        rows = idx[0].reshape(-1)
        _add_rows(out, rows, g.reshape(rows.size, *out.shape[1:]))
    elif idx:
        np.add.at(out, index, g)
    else:
        out[index] += g


def _add_rows(out, rows, g) -> None:
    """out[rows[k]] += g[k], as np.add.at does, by a stable sort and one reduceat: np.add.at is
    unbuffered and slow on repeated indices (an embedding's tokens repeat), and one pass of
    reduceat over the sorted rows sums each target's rows at once."""
    n = out.shape[0]
    rows = np.where(rows < 0, rows + n, rows)
    if rows.size == 0:
        return
    if rows.min() < 0 or rows.max() >= n:
        raise IndexError(f"index {int(rows.max() if rows.max() >= n else rows.min())} is out "
                         f"of bounds for axis 0 with size {n}")  # fmt: skip
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    out[ordered[starts]] += np.add.reduceat(g[order], starts, axis=0)  # each target once


def sum_to(g: Any, shape: Sequence[int]) -> Any:
    """Sum `g` down to `shape`: undoes broadcasting (the VJP of every broadcasting op)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    return reshaped(sum(g, axis=axes, keepdims=False), shape)


def reshaped(x: Any, shape: Sequence[int]) -> Any:
    shape = tuple(shape)
    return x if x.shape == shape else reshape(x, shape=shape)


def mT(x: Any) -> Any:
    return transpose(x, axes=(*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


def _transpose_vjp(g, out, x, axes):
    return transpose(g, axes=shapes.inverse_permutation(axes))


def _reshape(x, shape):
    """np.reshape by the array's own method: NumPy's function passes through Python wrappers
    first, most of what an eager view costs (a plan calls the method too: `codegen`)."""
    return x.reshape(shape) if isinstance(x, np.ndarray) else np.reshape(x, shape)


def _transpose(x, axes):
    """np.transpose by the array's own method (as `_reshape`)."""
    return x.transpose(axes) if isinstance(x, np.ndarray) else np.transpose(x, axes)


# Each rule here is linear with real coefficients: it holds for complex values as it is.
_C = {"complex_grad": True}
reshape = Primitive("reshape", _reshape, _reshape_rule,
                    (lambda g, out, x, shape: reshaped(g, x.shape),), kind=Kind.VIEW,
                    **_C)  # fmt: skip
transpose = Primitive("transpose", _transpose, _transpose_rule, (_transpose_vjp,),
                      kind=Kind.VIEW, **_C)  # fmt: skip
broadcast_to = Primitive("broadcast_to", np.broadcast_to, _broadcast_to_rule,
                         (lambda g, out, x, shape: sum_to(g, x.shape),),
                         kind=Kind.VIEW, **_C)  # fmt: skip


def _concat_vjp(i, g, out, *xs, axis):
    start = builtins.sum(x.shape[axis] for x in xs[:i])
    index = (slice(None),) * axis + (slice(start, start + xs[i].shape[axis]),)
    return getitem(g, template=index)


def _concatenate(*xs, axis, out=None):
    return np.concatenate(xs, axis, out=out)


# out=: the result goes into the arena, planned and reused like the others' (else a large one,
# such as the gradient of a q, k, v projection, is a fresh allocation with fresh pages each step)
concatenate = Primitive("concatenate", _concatenate, _concat_rule, _concat_vjp, accepts_out=True,
                        raises=False, promotion="operands", **_C)  # fmt: skip
getitem = Primitive(
    "getitem",
    _getitem,
    _getitem_rule,
    (lambda g, out, x, *idx, template: scatter_add(g, *idx, shape=x.shape, template=template),),
    "in1:",
    kind=Kind.INDEX,
    view=lambda inputs, attrs: len(inputs) == 1,
    vjp_into=lambda acc, g, x, *idx, template: _add_at(acc, g, *idx, template=template),
    **_C,
)  # basic indexing: a view
# out=: in the arena, as concatenate's (an embedding's gradient, a gather's one-hot cotangent
# are as large as the table or the logits)
scatter_add = Primitive("scatter_add", _scatter_add, _scatter_rule,
                        (lambda g, out, x, *idx, shape, template:
                         getitem(g, *idx, template=template),),
                        "in1:", kind=Kind.INDEX, accepts_out=True, **_C)  # fmt: skip


def _scatter_max(g, *idx, shape, template):
    """out[index] = the largest of the values sent there (-inf, or the least integer, where
    none is)."""
    low = -np.inf if g.dtype.kind == "f" else np.iinfo(g.dtype).min
    out = np.full(shape, low, g.dtype)
    np.maximum.at(out, shapes.build_index(template, idx), g)
    return out


def _scatter_max_vjp(g, out, x, *idx, shape, template):
    """Each value's share of its target's cotangent: the target's, split evenly among the
    values that tied for its maximum (PyTorch's rule), nothing for the others."""
    hit = astype(equal(x, getitem(out, *idx, template=template)), dtype=x.dtype)
    ties = getitem(scatter_add(hit, *idx, shape=shape, template=template), *idx, template=template)
    return div(mul(getitem(g, *idx, template=template), hit), ties)


# scatter_reduce's "amax" (and, negated, "amin"): graph networks' max aggregation
scatter_max = Primitive("scatter_max", _scatter_max, _scatter_rule, (_scatter_max_vjp,), "in+out",
                        kind=Kind.INDEX)  # fmt: skip


def _scatter_prod(g, *idx, shape, template):
    """out[index] = the product of the values sent there (1 where none is)."""
    out = np.ones(shape, g.dtype)
    np.multiply.at(out, shapes.build_index(template, idx), g)
    return out


def _scatter_prod_vjp(g, out, x, *idx, shape, template):
    """Each value's share of its target's cotangent: the product of the other values sent
    there. Zeros are counted apart, so that a lone zero's share is the product of the rest
    (not 0 / 0) and every other share is 0 (PyTorch's rule)."""
    zero = equal(x, 0.0)
    nonzero = where(zero, 1.0, x)
    product = getitem(scatter_prod(nonzero, *idx, shape=shape, template=template), *idx,
                      template=template)  # fmt: skip
    zeros = getitem(scatter_add(astype(zero, dtype=x.dtype), *idx, shape=shape, template=template),
                    *idx, template=template)  # fmt: skip
    others = where(equal(zeros, 0.0), div(product, nonzero), where(zero, product, 0.0))
    return mul(getitem(g, *idx, template=template), where(greater(zeros, 1.0), 0.0, others))


# scatter_reduce's "prod" and scatter's reduce="multiply"
scatter_prod = Primitive("scatter_prod", _scatter_prod, _scatter_rule, (_scatter_prod_vjp,),
                         "in", kind=Kind.INDEX)  # fmt: skip


def _pad_rule(x, pad_width, value):
    return tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pad_width, strict=True)), x.dtype


def _pad_vjp(g, out, x, pad_width, value):
    return getitem(
        g, template=tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, pad_width, strict=True))
    )


pad = Primitive("pad", lambda x, pad_width, value: np.pad(x, pad_width, constant_values=value),
                _pad_rule, (_pad_vjp,), raises=False, **_C)  # fmt: skip


# --- padding that repeats the input: NumPy's modes "reflect" (mirrored, the edge not repeated),
# "edge" (the edge repeated) and "wrap" (circular), each width at most the extent ("reflect":
# less). One pass for the result (two concatenations per axis copied the whole tensor twice per
# axis); the gradient folds each border back onto the inputs it repeats. The two are adjoint.


def _pad_repeating_rule(x, pad_width, mode):
    return _pad_rule(x, pad_width, 0.0)


def _span(a, axis, start, stop):
    return a[(slice(None),) * axis + (slice(start, stop),)]


def _pad_fold(g, pad_width, mode, shape):
    """The gradient of `pad_repeating`: each border's values added where they were read."""
    for axis, (lo, hi) in enumerate(pad_width):
        if not lo and not hi:
            continue
        n = shape[axis]
        inner = _span(g, axis, lo, lo + n).copy()
        before, after = _span(g, axis, 0, lo), _span(g, axis, lo + n, lo + n + hi)
        if mode == "reflect":
            _span(inner, axis, 1, lo + 1)[...] += np.flip(before, axis)
            _span(inner, axis, n - 1 - hi, n - 1)[...] += np.flip(after, axis)
        elif mode == "edge":
            _span(inner, axis, 0, 1)[...] += before.sum(axis, keepdims=True)
            _span(inner, axis, n - 1, n)[...] += after.sum(axis, keepdims=True)
        else:  # wrap
            _span(inner, axis, n - lo, n)[...] += before
            _span(inner, axis, 0, hi)[...] += after
        g = inner
    return np.ascontiguousarray(g)


pad_repeating = Primitive(
    "pad_repeating",
    lambda x, pad_width, mode: np.pad(x, pad_width, mode=mode),
    _pad_repeating_rule,
    (lambda g, out, x, pad_width, mode: pad_fold(g, pad_width=pad_width, mode=mode,
                                                 shape=x.shape),),
    raises=False,
    **_C,
)  # fmt: skip
pad_fold = Primitive(
    "pad_fold",
    _pad_fold,
    lambda g, pad_width, mode, shape: (tuple(shape), g.dtype),
    (lambda c, out, g, pad_width, mode, shape: pad_repeating(c, pad_width=pad_width, mode=mode),),
    raises=False,
    **_C,
)  # fmt: skip


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"] + [
    "sum_to"
]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import astype, div, equal, greater, mul, where  # noqa: E402
from tracegrad.core.ops.reductions import sum  # noqa: E402
