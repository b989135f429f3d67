"""THE op table. Every primitive is defined once, here: its NumPy implementation, its shape/dtype
rule, one VJP rule per input (written with tracegrad's own ops, so the same rule runs eagerly,
under the tracer and to higher order), what the VJP reads (`saves`), and, for elementwise ops,
the scalar expression a fused kernel uses. Below the table: the functional wrappers and the
Tensor operators, attached from here so that tensor.py stays free of any particular op.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .tensor import ShapeError, Tensor, TraceError, as_tensor, bind

PRIMITIVES: dict[str, Primitive] = {}


class Primitive:
    """One op. `vjp` is a tuple with a rule per input (None: not differentiable in that input),
    or a callable `vjp(i, g, out, *ins, **params)` for ops with any number of inputs.
    A rule is called as `rule(g, out, *ins, **params)`; `saves` says which values the rules read,
    so the tape keeps nothing else: "out", and "in" (every input), "in0" (only the first) or
    "in1:" (all but the first), joined by "+"; an input not kept is seen as its shape and dtype."""

    def __init__(
        self,
        name: str,
        impl: Callable,
        rule: Callable,
        vjp: tuple | Callable | None = None,
        saves: str = "",
        scalar: str | None = None,
    ):
        self.name, self.impl, self.rule, self.vjp = name, impl, rule, vjp
        self.saves_inputs, self.saves_output = "in" in saves, "out" in saves
        self.saved_inputs = _saved_inputs(saves)
        self.scalar = scalar
        PRIMITIVES[name] = self

    def shape_rule(self, *ins: Any, **params: Any) -> tuple[tuple[int, ...], np.dtype]:
        try:
            shape, dtype = self.rule(*ins, **params)
        except ShapeError:
            raise
        except (ValueError, IndexError, TypeError) as e:
            raise ShapeError(f"{self.name}: {e}") from None
        return tuple(shape), np.dtype(dtype)

    def vjp_rule(self, i: int) -> Callable | None:
        if callable(self.vjp):
            return lambda *a, **p: self.vjp(i, *a, **p)
        return self.vjp[i] if self.vjp is not None and i < len(self.vjp) else None

    def __call__(self, *args: Any, **params: Any) -> Tensor:
        return bind(self, *args, **params)

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        """Bind like a function, so a primitive can serve directly as a Tensor method."""
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def _saved_inputs(saves: str) -> slice:
    """The inputs a `saves` declaration keeps, as a slice of the input list."""
    token = next((t for t in saves.split("+") if t.startswith("in")), None)
    if token is None:
        return slice(0)
    if token == "in":
        return slice(None)
    start = int(token[2:].rstrip(":"))
    return slice(start, None if token.endswith(":") else start + 1)


# --- shape rules ------------------------------------------------------------------------------


def _same(x):
    return x.shape, x.dtype


def _floating(x):
    return x.shape, (x.dtype if x.dtype.kind == "f" else np.dtype(np.float64))


def _broadcast(*xs) -> tuple[int, ...]:
    try:
        return np.broadcast_shapes(*(x.shape for x in xs))
    except ValueError:
        raise ValueError(
            "shapes " + " and ".join(str(x.shape) for x in xs) + " do not broadcast"
        ) from None


def _binary(x, y):
    return _broadcast(x, y), np.result_type(x.dtype, y.dtype)


def _compare(x, y):
    return _broadcast(x, y), np.bool_


def _reduced(x, axis, keepdims):
    if keepdims:
        return tuple(1 if i in axis else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axis)


def _sum_rule(x, axis, keepdims):
    dtype = x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64)
    return _reduced(x, axis, keepdims), dtype


def _extreme_rule(x, axis, keepdims):
    if any(x.shape[a] == 0 for a in axis):
        raise ValueError(f"zero-size axis in {x.shape} has no maximum or minimum")
    return _reduced(x, axis, keepdims), x.dtype


def _matmul_rule(a, b):
    mismatch = ValueError(f"{a.shape} @ {b.shape}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise mismatch
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise mismatch from None
    return (*batch, a.shape[-2], b.shape[-1]), np.result_type(a.dtype, b.dtype)


def _reshape_rule(x, shape):
    if math.prod(shape) != math.prod(x.shape):
        raise ValueError(f"cannot reshape {x.shape} into {shape}")
    return shape, x.dtype


def _transpose_rule(x, axes):
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"axes {axes} are not a permutation of the axes of {x.shape}")
    return tuple(x.shape[a] for a in axes), x.dtype


def _broadcast_to_rule(x, shape):
    np.broadcast_shapes(x.shape, shape)
    if len(shape) < x.ndim or np.broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ValueError(f"cannot broadcast {x.shape} to {shape}")
    return shape, x.dtype


def _concat_rule(*xs, axis):
    first = xs[0]
    for x in xs[1:]:
        if x.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, first.shape, strict=True)) if i != axis
        ):
            raise ValueError("shapes " + ", ".join(str(x.shape) for x in xs) + f" on axis {axis}")
    shape = list(first.shape)
    shape[axis] = builtins.sum(x.shape[axis] for x in xs)
    return shape, np.result_type(*(x.dtype for x in xs))


def _where_rule(c, a, b):
    if c.dtype != np.bool_:
        raise ValueError(f"condition must be bool, not {c.dtype}")
    return _broadcast(c, a, b), np.result_type(a.dtype, b.dtype)


def _build_index(template: tuple, arrays: Sequence[Any]) -> tuple:
    it = iter(arrays)
    return tuple(next(it) if item == "@" else item for item in template)


def _getitem_rule(x, *idx, template):
    dummy = np.broadcast_to(np.empty((), x.dtype), x.shape)
    for i in idx:
        if i.dtype.kind not in "iu":
            raise ValueError(f"index arrays must be integers, not {i.dtype}")
    probe = [np.zeros(i.shape, i.dtype) for i in idx]
    return dummy[_build_index(template, probe)].shape, x.dtype


def _scatter_rule(g, *idx, shape, template):
    return shape, g.dtype


# --- implementations that are more than one NumPy call ----------------------------------------


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1)


def _getitem(x, *idx, template):
    return x[_build_index(template, idx)]


def _scatter_add(g, *idx, shape, template):
    out = np.zeros(shape, g.dtype)
    index = _build_index(template, idx)
    if idx:
        np.add.at(out, index, g)
    else:
        out[index] = g
    return out


# --- the table ----------------------------------------------------------------------------------


def _neg_g(g, out, x):
    return -g


def unary(name, impl, vjp=None, saves="", scalar=None, rule=_floating):
    return Primitive(name, impl, rule, (vjp,) if vjp else None, saves, scalar)


neg = unary("neg", np.negative, _neg_g, rule=_same, scalar="(-{0})")
exp = unary("exp", np.exp, lambda g, out, x: g * out, "out", "exp({0})")
log = unary("log", np.log, lambda g, out, x: g / x, "in", "log({0})")
sqrt = unary("sqrt", np.sqrt, lambda g, out, x: g / (out * 2.0), "out", "sqrt({0})")
tanh = unary("tanh", np.tanh, lambda g, out, x: g * (1.0 - out * out), "out", "tanh({0})")
sigmoid = unary(
    "sigmoid", _sigmoid, lambda g, out, x: g * (out * (1.0 - out)), "out", "sigmoid({0})"
)
sin = unary("sin", np.sin, lambda g, out, x: g * cos(x), "in", "sin({0})")
cos = unary("cos", np.cos, lambda g, out, x: -(g * sin(x)), "in", "cos({0})")
sign = unary("sign", np.sign, rule=_same, scalar="sign({0})")
abs = unary("abs", np.abs, lambda g, out, x: g * sign(x), "in", "abs({0})", rule=_same)

add = Primitive(
    "add",
    np.add,
    _binary,
    (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(g, y.shape)),
    scalar="({0} + {1})",
)
sub = Primitive(
    "sub",
    np.subtract,
    _binary,
    (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(-g, y.shape)),
    scalar="({0} - {1})",
)
mul = Primitive(
    "mul",
    np.multiply,
    _binary,
    (lambda g, out, x, y: sum_to(g * y, x.shape), lambda g, out, x, y: sum_to(g * x, y.shape)),
    "in",
    "({0} * {1})",
)
div = Primitive(
    "div",
    np.true_divide,
    _binary,
    (
        lambda g, out, x, y: sum_to(g / y, x.shape),
        lambda g, out, x, y: sum_to(-(g * (x / y)) / y, y.shape),  # x / y again: keeps no out
    ),
    "in",
    "({0} / {1})",
)


def _power(x, y):
    """np.power, with small whole exponents as products: NumPy sends x ** 3.0 to powf per
    element, about 170 times slower than x * x * x (it special-cases only 2, 0.5, ...).
    Only where the result keeps the base's dtype: the exponent may be data (Adam's
    beta ** step). A Python-number base (as plans write constants) first becomes an array of
    the result's dtype, so eager and traced steps take the same branch and round alike."""
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, np.result_type(x, y))
    if np.ndim(y) == 0 and np.result_type(x, y) == x.dtype and float(y) in (3.0, 4.0):
        x2 = np.multiply(x, x)
        other = x if float(y) == 3.0 else x2
        if np.ndim(x2) == 0:  # a NumPy scalar: no buffer to write into
            return x2 * other
        return np.multiply(x2, other, out=x2)  # no second temporary
    return np.power(x, y)


pow = Primitive(
    "pow",
    _power,
    _binary,
    (
        lambda g, out, x, y: sum_to(g * y * x ** (y - 1.0), x.shape),
        lambda g, out, x, y: sum_to(g * out * log(x), y.shape),
    ),
    "in+out",
    "({0} ** {1})",
)
maximum = Primitive(
    "maximum",
    np.maximum,
    _binary,
    (
        lambda g, out, x, y: sum_to(where(x >= y, g, 0.0), x.shape),
        lambda g, out, x, y: sum_to(where(x >= y, 0.0, g), y.shape),
    ),
    "in",
    "max({0}, {1})",
)
minimum = Primitive(
    "minimum",
    np.minimum,
    _binary,
    (
        lambda g, out, x, y: sum_to(where(x <= y, g, 0.0), x.shape),
        lambda g, out, x, y: sum_to(where(x <= y, 0.0, g), y.shape),
    ),
    "in",
    "min({0}, {1})",
)
where = Primitive(
    "where",
    np.where,
    _where_rule,
    (
        None,
        lambda g, out, c, x, y: sum_to(where(c, g, 0.0), x.shape),
        lambda g, out, c, x, y: sum_to(where(c, 0.0, g), y.shape),
    ),
    "in0",
    "({1} if {0} else {2})",
)
less = Primitive("less", np.less, _compare, scalar="({0} < {1})")
less_equal = Primitive("less_equal", np.less_equal, _compare, scalar="({0} <= {1})")
greater = Primitive("greater", np.greater, _compare, scalar="({0} > {1})")
greater_equal = Primitive("greater_equal", np.greater_equal, _compare, scalar="({0} >= {1})")
equal = Primitive("equal", np.equal, _compare, scalar="({0} == {1})")
not_equal = Primitive("not_equal", np.not_equal, _compare, scalar="({0} != {1})")
_astype = Primitive(
    "astype",
    lambda x, dtype: x.astype(dtype),
    lambda x, dtype: (x.shape, dtype),
    (lambda g, out, x, dtype: g.astype(x.dtype) if x.dtype.kind == "f" else None,),
    scalar="{0}",
)


def _sum_vjp(g, out, x, axis, keepdims):
    return broadcast_to(reshape(g, _reduced(x, axis, True)), x.shape)


def _extreme_vjp(g, out, x, axis, keepdims):
    kept = _reduced(x, axis, True)
    hit = (x == reshape(out, kept)).astype(g.dtype)
    return reshape(g, kept) * hit / _sum(hit, axis=axis, keepdims=True)


def _prod_vjp(g, out, x, axis, keepdims):
    """The product of the others, out / x, but not divided by zero: a zero that is alone in its
    slice gets the product of the rest, a zero with another zero gets 0."""
    kept = _reduced(x, axis, True)
    zero = x == 0.0
    nonzero = where(zero, 1.0, x)
    alone = _sum(zero.astype(x.dtype), axis=axis, keepdims=True) == 1.0
    at_zero = where(alone, _prod(nonzero, axis=axis, keepdims=True), 0.0)
    return reshape(g, kept) * where(zero, at_zero, reshape(out, kept) / nonzero)


# Implementations are NumPy's own functions where their keyword names match the attributes, so
# the generated plan reads as plain NumPy.
_sum = Primitive("sum", np.sum, _sum_rule, (_sum_vjp,))
_max = Primitive("max", np.max, _extreme_rule, (_extreme_vjp,), "in+out")
_min = Primitive("min", np.min, _extreme_rule, (_extreme_vjp,), "in+out")
_prod = Primitive("prod", np.prod, _sum_rule, (_prod_vjp,), "in+out")
_argmax = Primitive("argmax", np.argmax, lambda x, axis: (_reduced(x, (axis,), False), np.int64))
_reshape = Primitive("reshape", np.reshape, _reshape_rule,
                     (lambda g, out, x, shape: reshape(g, x.shape),))  # fmt: skip
_transpose = Primitive("transpose", np.transpose, _transpose_rule,
                       (lambda g, out, x, axes: transpose(g, _inverse(axes)),))  # fmt: skip
_broadcast_to = Primitive("broadcast_to", np.broadcast_to, _broadcast_to_rule,
                          (lambda g, out, x, shape: sum_to(g, x.shape),))  # fmt: skip


def _inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(a) for a in np.argsort(axes))


def _concat_vjp(i, g, out, *xs, axis):
    start = builtins.sum(x.shape[axis] for x in xs[:i])
    index = (slice(None),) * axis + (slice(start, start + xs[i].shape[axis]),)
    return g[index]


_concatenate = Primitive("concatenate", lambda *xs, axis: np.concatenate(xs, axis),
                         _concat_rule, _concat_vjp)  # fmt: skip
_getitem_p = Primitive("getitem", _getitem, _getitem_rule,
                       (lambda g, out, x, *idx, template:
                        _scatter_add_p(g, *idx, shape=x.shape, template=template),),
                       "in1:")  # fmt: skip
_scatter_add_p = Primitive("scatter_add", _scatter_add, _scatter_rule,
                           (lambda g, out, x, *idx, shape, template:
                            _getitem_p(g, *idx, template=template),),
                           "in1:")  # fmt: skip


def _mT(x: Tensor) -> Tensor:
    return transpose(x, (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


_matmul = Primitive(
    "matmul",
    np.matmul,
    _matmul_rule,
    (
        lambda g, out, a, b: sum_to(_matmul(g, _mT(b)), a.shape),
        lambda g, out, a, b: sum_to(_matmul(_mT(a), g), b.shape),
    ),
    "in",
)


# --- functional wrappers ------------------------------------------------------------------------


def _axes(op: str, axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    axes = range(ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(f"{op}: axis {a} is out of bounds for an array of dimension {ndim}")
        out.append(a % ndim)
    return tuple(sorted(set(out)))


def _reduction(prim: Primitive) -> Callable:
    def reduce(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        x = as_tensor(x)
        return prim(x, axis=_axes(prim.name, axis, x.ndim), keepdims=bool(keepdims))

    reduce.__name__ = reduce.__qualname__ = prim.name
    reduce.__doc__ = f"{prim.name} over `axis` (int, tuple or None), as NumPy's."
    return reduce


sum = _reduction(_sum)
max = _reduction(_max)
min = _reduction(_min)
prod = _reduction(_prod)


def mean(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    x = as_tensor(x)
    axes = _axes("mean", axis, x.ndim)
    return sum(x, axes, keepdims) / float(math.prod(x.shape[a] for a in axes))


def argmax(x: Any, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    return _argmax(x, axis=_axes("argmax", axis, x.ndim)[0])


def sum_to(g: Tensor, shape: Sequence[int]) -> Tensor:
    """Sum `g` down to `shape`: undoes broadcasting (the VJP of every broadcasting op)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    return reshape(_sum(g, axis=axes, keepdims=False), shape)


def _shape_arg(shape: tuple) -> tuple:
    return tuple(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape


def reshape(x: Any, *shape: Any) -> Tensor:
    """reshape(x, (4, 3)) or reshape(x, 4, 3); one -1 is inferred."""
    x, shape = as_tensor(x), list(_shape_arg(shape))
    if shape.count(-1) == 1:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known == 0:  # else the shape rule names the shape as given
            shape[shape.index(-1)] = x.size // known if known else 0
    shape = tuple(int(d) for d in shape)
    return x if shape == x.shape else _reshape(x, shape=shape)


def transpose(x: Any, axes: Sequence[int] | None = None) -> Tensor:
    x = as_tensor(x)
    axes = tuple(reversed(range(x.ndim))) if axes is None else tuple(a % x.ndim for a in axes)
    return x if axes == tuple(range(x.ndim)) else _transpose(x, axes=axes)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    x = as_tensor(x)
    return x if tuple(shape) == x.shape else _broadcast_to(x, shape=tuple(shape))


def expand_dims(x: Any, axis: int) -> Tensor:
    x = as_tensor(x)
    axis = axis % (x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(x: Any, axis: int | Sequence[int] | None = None) -> Tensor:
    x = as_tensor(x)
    axes = (
        tuple(i for i, d in enumerate(x.shape) if d == 1)
        if axis is None
        else _axes("squeeze", axis, x.ndim)
    )
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"squeeze: cannot squeeze axes {axes} of shape {x.shape}")
    return reshape(x, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def concatenate(xs: Sequence[Any], axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if not xs:
        raise ShapeError("concatenate: needs at least one tensor")
    return _concatenate(*xs, axis=_axes("concatenate", axis, xs[0].ndim)[0])


def stack(xs: Sequence[Any], axis: int = 0) -> Tensor:
    xs = [as_tensor(x) for x in xs]
    if len({x.shape for x in xs}) > 1:
        raise ShapeError("stack: shapes " + ", ".join(str(x.shape) for x in xs) + " differ")
    return concatenate([expand_dims(x, axis) for x in xs], axis % (xs[0].ndim + 1))


def matmul(a: Any, b: Any) -> Tensor:
    """NumPy's matmul: 2-D, batched (broadcast) and 1-D operands."""
    a, b = as_tensor(a), as_tensor(b)
    if a.ndim == 0 or b.ndim == 0 or a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise ShapeError(f"matmul: {a.shape} @ {b.shape}")
    a2 = reshape(a, (1, a.shape[0])) if a.ndim == 1 else a
    b2 = reshape(b, (b.shape[0], 1)) if b.ndim == 1 else b
    out = _matmul(a2, b2)
    if a.ndim == 1:  # drop a's row axis first: b's column axis is still last
        out = reshape(out, out.shape[:-2] + out.shape[-1:])
    if b.ndim == 1:
        out = reshape(out, out.shape[:-1])
    return out


def astype(x: Any, dtype: Any) -> Tensor:
    x = as_tensor(x)
    return x if np.dtype(dtype) == x.dtype else _astype(x, dtype=np.dtype(dtype))


def clip(x: Any, lo: Any = None, hi: Any = None) -> Tensor:
    x = as_tensor(x)
    x = x if lo is None else maximum(x, lo)
    return x if hi is None else minimum(x, hi)


def getitem(x: Any, index: Any) -> Tensor:
    """Indexing with ints, slices, None, ..., integer arrays (several) and boolean masks."""
    x = as_tensor(x)
    template, arrays = [], []
    for item in index if isinstance(index, tuple) else (index,):
        if isinstance(item, Tensor | np.ndarray | list):
            item = as_tensor(item)
            if item.dtype == np.bool_:
                if item.is_symbolic:
                    raise TraceError(
                        "indexing with a traced boolean mask gives a data-dependent shape; use "
                        "tracegrad.where(mask, x, 0) instead"
                    )
                parts = [Tensor(a) for a in np.nonzero(item.numpy())]
            else:
                parts = [item]
            template += ["@"] * len(parts)
            arrays += parts
        elif isinstance(item, int | np.integer):
            template.append(int(item))
        elif item is None or item is Ellipsis or isinstance(item, slice):
            template.append(item)
        else:
            raise TypeError(f"getitem: unsupported index {item!r}")
    return _getitem_p(x, *arrays, template=tuple(template))


def logsumexp(x: Any, axis: int | Sequence[int] | None = -1, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))), stable for large |x|: the max is subtracted (and not differentiated)."""
    x = as_tensor(x)
    m = max(x, axis, keepdims=True).detach()
    out = log(sum(exp(x - m), axis, keepdims=True)) + m
    return out if keepdims else squeeze(out, _axes("logsumexp", axis, x.ndim))


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    return x - logsumexp(x, axis, keepdims=True)


def softmax(x: Any, axis: int = -1) -> Tensor:
    x = as_tensor(x)
    e = exp(x - max(x, axis, keepdims=True).detach())
    return e / sum(e, axis, keepdims=True)


def zeros(shape: Sequence[int], dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return Tensor(np.zeros(shape, dtype), requires_grad=requires_grad)


def ones(shape: Sequence[int], dtype: Any = np.float32, requires_grad: bool = False) -> Tensor:
    return Tensor(np.ones(shape, dtype), requires_grad=requires_grad)


def zeros_like(x: Any) -> Tensor:
    return zeros(x.shape, x.dtype)


def ones_like(x: Any) -> Tensor:
    return ones(x.shape, x.dtype)


# --- Tensor's operators and methods, attached from above (see DESIGN.md: no circles) ----------


def _swap(f: Callable) -> Callable:
    return lambda self, other: f(other, self)


def _inplace(f: Callable) -> Callable:
    def op(self: Tensor, other: Any) -> Tensor:
        from .tensor import Listeners

        if Listeners.grad_enabled and self.is_leaf and self.requires_grad:
            raise RuntimeError(
                f"in-place {f.name} on a leaf tensor that requires grad: wrap the update in "
                "`with tracegrad.no_grad():` (as optimizers do) or use an out-of-place op"
            )
        result = f(self, other)
        if Listeners.grad_enabled and not result.is_leaf:
            return result  # recorded ops stay functional: the name is rebound to the result
        self._assign(result)
        return self

    return op


_OPERATORS = {
    "add": add, "radd": _swap(add), "sub": sub, "rsub": _swap(sub), "mul": mul,
    "rmul": _swap(mul), "truediv": div, "rtruediv": _swap(div), "pow": pow, "rpow": _swap(pow),
    "matmul": matmul, "rmatmul": _swap(matmul), "lt": less, "le": less_equal, "gt": greater,
    "ge": greater_equal, "eq": equal, "ne": not_equal, "getitem": getitem,
}  # fmt: skip
for _name, _f in _OPERATORS.items():
    setattr(Tensor, f"__{_name}__", _f)
for _name, _f in {"iadd": add, "isub": sub, "imul": mul, "itruediv": div}.items():
    setattr(Tensor, f"__{_name}__", _inplace(_f))
Tensor.__neg__ = neg
Tensor.__abs__ = abs
Tensor.__pos__ = lambda self: self

for _f in (sum, mean, max, min, prod, argmax, transpose, astype, clip, exp, log, sqrt, tanh,
           sigmoid, abs, squeeze, expand_dims, softmax, log_softmax, logsumexp):  # fmt: skip
    setattr(Tensor, _f.name if isinstance(_f, Primitive) else _f.__name__, _f)
Tensor.reshape = reshape
Tensor.T = property(lambda self: transpose(self))
Tensor.flatten = lambda self: reshape(self, (-1,))


# --- NumPy interop: ufuncs on tensors dispatch to tracegrad, never return a detached ndarray ----

_UFUNCS = {
    np.add: add, np.subtract: sub, np.multiply: mul, np.true_divide: div, np.power: pow,
    np.negative: neg, np.exp: exp, np.log: log, np.sqrt: sqrt, np.tanh: tanh, np.sin: sin,
    np.cos: cos, np.absolute: abs, np.sign: sign, np.maximum: maximum, np.minimum: minimum,
    np.less: less, np.less_equal: less_equal, np.greater: greater,
    np.greater_equal: greater_equal, np.equal: equal, np.not_equal: not_equal,
    np.matmul: matmul,
}  # fmt: skip


def _array_ufunc(self: Tensor, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
    op = _UFUNCS.get(ufunc)
    if op is None or method != "__call__" or kwargs:
        raise TypeError(
            f"np.{ufunc.__name__}{'' if method == '__call__' else '.' + method} is not supported "
            "on tracegrad tensors (it would drop the gradient); use the tracegrad function"
        )
    return op(*inputs)


_FUNCTIONS = {
    np.concatenate: concatenate, np.stack: stack, np.where: where, np.clip: clip,
    np.reshape: reshape, np.transpose: transpose, np.broadcast_to: broadcast_to,
    np.expand_dims: expand_dims, np.squeeze: squeeze, np.sum: sum, np.mean: mean, np.max: max,
    np.min: min, np.prod: prod, np.shape: lambda x: x.shape, np.ndim: lambda x: x.ndim,
}  # fmt: skip


def _array_function(self: Tensor, func: Callable, types: Any, args: Any, kwargs: Any) -> Any:
    """Other NumPy functions (np.concatenate, np.dot, ...) would read tensors through __array__:
    those tracegrad has dispatch to it; the rest run on the arrays only if no floats come out
    (np.argmax, np.allclose), since floats would be a detached copy of a differentiable result."""
    op = _FUNCTIONS.get(func)
    if op is not None:
        return op(*args, **kwargs)
    result = func(*_arrays(args), **_arrays(kwargs))
    if _has_floats(result):
        raise TypeError(
            f"np.{func.__name__} is not supported on tracegrad tensors (it would drop the "
            "gradient); use the tracegrad function, or np.asarray(t) to leave autodiff on purpose"
        )
    return result


def _arrays(x: Any) -> Any:
    """`x` with every tensor (also inside lists, tuples and dicts) replaced by its ndarray."""
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, list | tuple):
        return type(x)(_arrays(v) for v in x)
    return {k: _arrays(v) for k, v in x.items()} if isinstance(x, dict) else x


def _has_floats(result: Any) -> bool:
    if isinstance(result, tuple | list):
        return any(_has_floats(r) for r in result)
    if isinstance(result, np.ndarray | np.generic | float):
        return np.asarray(result).dtype.kind in "fc"
    return False


Tensor.__array_ufunc__ = _array_ufunc
Tensor.__array_function__ = _array_function
