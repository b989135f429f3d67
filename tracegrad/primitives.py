"""THE op table: the only place that lists ops. Every primitive is one record: its NumPy
implementation, its shape/dtype rule, one VJP rule per input (written with tracegrad's own ops,
so the same rule runs eagerly, under the tracer and to higher order), what the VJP reads
(`saves`), and what the compiler needs to know about it: its `kind`, and for elementwise ops the
scalar expression a fused kernel uses (with the kernel helpers it calls), for reductions how
partial results combine. Passes and kernels ask the primitive; they never match its name.

Part of the core: it imports only the IR and the errors. Calling a primitive binds it, through
`Primitive.__call__`, which the front end (tensor.py) attaches; the functional API with NumPy's
signatures, Tensor's operators and NumPy interop live in api.py.
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import ir
from .errors import ShapeError

PRIMITIVES: dict[str, Primitive] = {}

# What a pass may know about an op. elementwise: each result element from the same-index
# elements of the (broadcast) inputs; reduction: folds axes with `combine` from `identity`;
# view: the result aliases the first input; contraction: a matrix product (BLAS); index:
# gathers and scatters by index arrays; random, collective: effects (state, communication);
# opaque: anything else; composite: a body graph run as one op (a fused group).
KINDS = frozenset({"elementwise", "reduction", "view", "contraction", "index", "random",
                   "collective", "opaque", "composite"})  # fmt: skip


class Primitive:
    """One op. `vjp` is a tuple with a rule per input (None: not differentiable in that input),
    or a callable `vjp(i, g, out, *ins, **params)` for ops with any number of inputs.
    A rule is called as `rule(g, out, *ins, **params)`; `saves` says which values the rules read,
    so the tape keeps nothing else: "out", and "in" (every input), "in0" (only the first) or
    "in1:" (all but the first), joined by "+"; an input not kept is seen as its shape and dtype.

    For the compiler: `kind` (see KINDS); `scalar`, a format template of the op on scalars
    ("({0} + {1})") and `helpers`, the functions of `tracegrad.kernels.scalar` it calls;
    `combine` and `identity` for reductions; `accepts_out` (default: the impl is a ufunc) if the
    impl takes `out=`; `numpy`, the NumPy function the op stands for (default: a ufunc impl),
    which NumPy interop dispatches to it; `view`, a predicate `view(inputs, attrs)` for an op
    whose result is a view only sometimes (a kind "view" always is one)."""

    def __init__(
        self,
        name: str,
        impl: Callable,
        shape: Callable,
        vjp: tuple | Callable | None = None,
        saves: str = "",
        *,
        kind: str = "opaque",
        scalar: str | None = None,
        helpers: Sequence[str] = (),
        combine: str | None = None,
        identity: float | None = None,
        accepts_out: bool | None = None,
        numpy: Callable | None = None,
        view: Callable | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"primitive {name}: kind {kind!r} is not one of {sorted(KINDS)}")
        if scalar is not None and kind != "elementwise":
            raise ValueError(f"primitive {name}: only elementwise ops have a scalar template")
        self.name, self.impl, self.rule, self.vjp, self.kind = name, impl, shape, vjp, kind
        self.saves_inputs, self.saves_output = "in" in saves, "out" in saves
        self.saved_inputs = _saved_inputs(saves)
        self.scalar, self.helpers = scalar, tuple(helpers)
        self.combine, self.identity = combine, identity
        is_ufunc = isinstance(impl, np.ufunc)
        self.accepts_out = is_ufunc if accepts_out is None else accepts_out
        self.numpy = numpy if numpy is not None else (impl if is_ufunc else None)
        self._view = view
        PRIMITIVES[name] = self

    @property
    def fusible(self) -> bool:
        """Whether a fused kernel can compute it: elementwise with a scalar template, or a
        reduction with a combine template."""
        return self.scalar is not None or (self.kind == "reduction" and self.combine is not None)

    @property
    def arity(self) -> int | None:
        """The number of inputs, where the VJP table says it (None: any number)."""
        return len(self.vjp) if isinstance(self.vjp, tuple) else None

    def shape_rule(self, *ins: Any, **params: Any) -> tuple[tuple[int, ...], np.dtype]:
        try:
            shape, dtype = self.rule(*ins, **params)
        except ShapeError:
            raise
        except (ValueError, IndexError, TypeError) as e:
            raise ShapeError(f"{self.name}: {e}") from None
        return tuple(shape), np.dtype(dtype)

    def infer(self, inputs: Sequence[Any], attrs: dict) -> list[tuple[tuple[int, ...], np.dtype]]:
        """The (shape, dtype) of each result: what `Graph.verify` checks a node against."""
        return [self.shape_rule(*inputs, **attrs)]

    def is_view(self, inputs: Sequence[Any], attrs: dict) -> bool:
        """The result aliases (part of) the first input instead of owning a buffer."""
        return self._view(inputs, attrs) if self._view is not None else self.kind == "view"

    def overwrites_safely(self, attrs: dict) -> bool:
        """Each result element is computed from same-index input elements, through `out=`:
        writing the result into a dying input's buffer is safe."""
        return self.kind == "elementwise" and self.accepts_out

    def cost(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[int, int]:
        """(floating-point operations, bytes moved) of one application, for the memory-budget
        solver's cost model: a contraction does 2 * (result size) * (contracted length), a view
        nothing, anything else about one operation per element it reads or writes."""
        if self.kind == "view":
            return 0, 0
        moved = builtins.sum(v.nbytes for v in (*inputs, *outputs) if v.const is None)
        if self.kind == "contraction":
            return 2 * builtins.sum(v.size for v in outputs) * inputs[0].shape[-1], moved
        return builtins.max((v.size for v in (*inputs, *outputs)), default=0), moved

    def vjp_rule(self, i: int) -> Callable | None:
        if callable(self.vjp):
            return lambda *a, **p: self.vjp(i, *a, **p)
        return self.vjp[i] if self.vjp is not None and i < len(self.vjp) else None

    def __call__(self, *args: Any, **params: Any) -> Any:
        raise RuntimeError("tracegrad's front end is not loaded: import tracegrad")

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        """Bind like a function, so a primitive can serve directly as a Tensor method."""
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


class Composite(Primitive):
    """An op whose `body` attribute is a graph: a fused group. Its implementation evaluates the
    body; a backend may compile the body into one kernel instead."""

    def __init__(self, name: str):
        super().__init__(name, self.evaluate, _no_rule, kind="composite", accepts_out=True)

    @staticmethod
    def evaluate(*inputs: Any, body: ir.Graph) -> list[Any]:
        return ir.evaluate(body, list(inputs))

    def infer(self, inputs: Sequence[Any], attrs: dict) -> list[tuple[tuple[int, ...], np.dtype]]:
        body = attrs["body"]
        body.verify()
        for outer, inner in zip(inputs, body.inputs, strict=True):
            if (outer.shape, outer.dtype) != (inner.shape, inner.dtype):
                raise ShapeError(f"{self.name}: input {outer} for body input {inner}")
        return [(v.shape, v.dtype) for v in body.outputs]

    def overwrites_safely(self, attrs: dict) -> bool:
        return all(n.prim.kind == "elementwise" for n in attrs["body"].nodes)


def _no_rule(*ins: Any, **attrs: Any) -> Any:
    raise TypeError("a composite op's types come from its body")


def _saved_inputs(saves: str) -> slice:
    """The inputs a `saves` declaration keeps, as a slice of the input list."""
    token = next((t for t in saves.split("+") if t.startswith("in")), None)
    if token is None:
        return slice(0)
    if token == "in":
        return slice(None)
    start = int(token[2:].rstrip(":"))
    return slice(start, None if token.endswith(":") else start + 1)


def defprimitive(
    name: str,
    impl: Callable,
    *,
    vjp: Sequence[Callable | None] | Callable | None,
    saves: str = "",
    shape: Callable | None = None,
    kind: str = "opaque",
    scalar: str | None = None,
) -> Primitive:
    """A new op, as `torch.autograd.Function` or `jax.custom_vjp` make one.

    `impl` computes it with NumPy; `vjp` holds one rule per input, `rule(g, out, *inputs)`,
    written with tracegrad ops (None: not differentiable in that input); `saves` says what the
    rules read ("in", "out", "in+out", "in0", ...); `shape(*inputs)` gives the result's
    (shape, dtype), by default the first input's. With `kind="elementwise"` and a `scalar`
    template such as `"({0} / (1.0 + abs({0})))"` the op fuses into Numba kernels with its
    neighbours. The op works eagerly, to higher order and under `@trace`."""
    rules = vjp if vjp is None or callable(vjp) else tuple(vjp)
    return Primitive(name, impl, shape or _same, rules, saves, kind=kind, scalar=scalar)


# --- shape rules ------------------------------------------------------------------------------


def _same(x, *rest):
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


def _true_divide(x, y):
    """NumPy's own choice: integers divide into floats (1 / 4 is 0.25, never 0)."""
    return _broadcast(x, y), np.true_divide.resolve_dtypes((x.dtype, y.dtype, None))[-1]


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


_erf_object = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erf with Python's math.erf per element (NumPy has none): exact, not fast."""
    x = np.asarray(x)
    return _erf_object(x).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def _softplus(x):
    """log(1 + exp(x)), without overflow for large x."""
    return np.logaddexp(0, x)


# x ** c for these constant exponents is computed as products (steps multiply two earlier
# values; slot 0 is x): NumPy sends x ** 3.0 to powf per element, about 170 times slower, and in
# a kernel a runtime exponent keeps the loop scalar. The eager impl and simplify's rewrite of a
# traced `pow` read this one table, so both round alike.
POWER_PRODUCTS: dict[float, tuple[tuple[int, int], ...]] = {
    2.0: ((0, 0),),
    3.0: ((0, 0), (1, 0)),
    4.0: ((0, 0), (1, 1)),
}


def _power(x, y):
    """np.power, with the exponents of POWER_PRODUCTS as products, where the result keeps the
    base's dtype (the exponent may be data: Adam's beta ** step). A Python-number base (as plans
    write constants) first becomes an array of the result's dtype, so eager and traced steps
    take the same branch."""
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, np.result_type(x, y))
    steps = POWER_PRODUCTS.get(float(y)) if np.ndim(y) == 0 else None
    if steps is None or np.result_type(x, y) != x.dtype:
        return np.power(x, y)
    values = [x]
    for k, (a, b) in enumerate(steps):
        last = k == len(steps) - 1
        into = values[a] if last and a > 0 and np.ndim(values[a]) else None  # no 2nd temporary
        values.append(np.multiply(values[a], values[b], out=into))
    return values[-1]


# --- rule helpers: the few wrappers VJP rules need, written on the primitives -----------------


def sum_to(g: Any, shape: Sequence[int]) -> Any:
    """Sum `g` down to `shape`: undoes broadcasting (the VJP of every broadcasting op)."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and g.shape[lead + i] != 1
    )
    return _reshaped(sum(g, axis=axes, keepdims=False), shape)


def _reshaped(x: Any, shape: Sequence[int]) -> Any:
    shape = tuple(shape)
    return x if x.shape == shape else reshape(x, shape=shape)


def _mT(x: Any) -> Any:
    return transpose(x, axes=(*range(x.ndim - 2), x.ndim - 1, x.ndim - 2))


def _inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(a) for a in np.argsort(axes))


# --- the table: elementwise --------------------------------------------------------------------


def unary(name, impl, vjp=None, saves="", scalar=None, helpers=(), shape=_floating, **kw):
    return Primitive(name, impl, shape, (vjp,) if vjp else None, saves, kind="elementwise",
                     scalar=scalar, helpers=helpers, **kw)  # fmt: skip


def binary(name, impl, vjp=None, saves="", scalar=None, helpers=(), shape=_binary, **kw):
    return Primitive(name, impl, shape, vjp, saves, kind="elementwise", scalar=scalar,
                     helpers=helpers, **kw)  # fmt: skip


neg = unary("neg", np.negative, lambda g, out, x: -g, shape=_same, scalar="(-{0})")
exp = unary("exp", np.exp, lambda g, out, x: g * out, "out", "exp({0})", ("exp",))
log = unary("log", np.log, lambda g, out, x: g / x, "in", "log({0})", ("log",))
log1p = unary("log1p", np.log1p, lambda g, out, x: g / (x + 1.0), "in", "math.log1p({0})")
expm1 = unary("expm1", np.expm1, lambda g, out, x: g * (out + 1.0), "out", "math.expm1({0})")
sqrt = unary("sqrt", np.sqrt, lambda g, out, x: g / (out * 2.0), "out", "sqrt({0})", ("sqrt",))
tanh = unary("tanh", np.tanh, lambda g, out, x: g * (1.0 - out * out), "out", "tanh({0})",
             ("tanh",))  # fmt: skip
sigmoid = unary("sigmoid", _sigmoid, lambda g, out, x: g * (out * (1.0 - out)), "out",
                "sigmoid({0})", ("sigmoid",))  # fmt: skip
softplus = unary("softplus", _softplus, lambda g, out, x: g * sigmoid(x), "in",
                 "(math.log1p(math.exp(-abs({0}))) + maximum({0}, 0.0))", ("maximum",))  # fmt: skip
erf = unary("erf", _erf, lambda g, out, x: g * (1.1283791670955126 * exp(-(x * x))), "in",
            "math.erf({0})")  # fmt: skip
sin = unary("sin", np.sin, lambda g, out, x: g * cos(x), "in", "sin({0})", ("sin",))
cos = unary("cos", np.cos, lambda g, out, x: -(g * sin(x)), "in", "cos({0})", ("cos",))
sign = unary("sign", np.sign, shape=_same, scalar="sign({0})", helpers=("sign",))
abs = unary("abs", np.abs, lambda g, out, x: g * sign(x), "in", "abs({0})", shape=_same)

add = binary("add", np.add,
             (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(g, y.shape)),
             scalar="({0} + {1})")  # fmt: skip
sub = binary("sub", np.subtract,
             (lambda g, out, x, y: sum_to(g, x.shape), lambda g, out, x, y: sum_to(-g, y.shape)),
             scalar="({0} - {1})")  # fmt: skip
mul = binary("mul", np.multiply,
             (lambda g, out, x, y: sum_to(g * y, x.shape),
              lambda g, out, x, y: sum_to(g * x, y.shape)),
             "in", "({0} * {1})")  # fmt: skip
div = binary("div", np.true_divide,
             (lambda g, out, x, y: sum_to(g / y, x.shape),
              lambda g, out, x, y: sum_to(-(g * (x / y)) / y, y.shape)),  # x / y: keeps no out
             "in", "({0} / {1})", shape=_true_divide)  # fmt: skip
pow = binary("pow", _power,
             (lambda g, out, x, y: sum_to(g * y * x ** (y - 1.0), x.shape),
              lambda g, out, x, y: sum_to(g * out * log(x), y.shape)),
             "in+out", "({0} ** {1})", numpy=np.power)  # fmt: skip
maximum = binary("maximum", np.maximum,
                 (lambda g, out, x, y: sum_to(where(x >= y, g, 0.0), x.shape),
                  lambda g, out, x, y: sum_to(where(x >= y, 0.0, g), y.shape)),
                 "in", "maximum({0}, {1})", ("maximum",))  # fmt: skip
minimum = binary("minimum", np.minimum,
                 (lambda g, out, x, y: sum_to(where(x <= y, g, 0.0), x.shape),
                  lambda g, out, x, y: sum_to(where(x <= y, 0.0, g), y.shape)),
                 "in", "minimum({0}, {1})", ("minimum",))  # fmt: skip
where = Primitive("where", np.where, _where_rule,
                  (None,
                   lambda g, out, c, x, y: sum_to(where(c, g, 0.0), x.shape),
                   lambda g, out, c, x, y: sum_to(where(c, 0.0, g), y.shape)),
                  "in0", kind="elementwise", scalar="({1} if {0} else {2})",
                  numpy=np.where)  # fmt: skip
less = binary("less", np.less, shape=_compare, scalar="({0} < {1})")
less_equal = binary("less_equal", np.less_equal, shape=_compare, scalar="({0} <= {1})")
greater = binary("greater", np.greater, shape=_compare, scalar="({0} > {1})")
greater_equal = binary("greater_equal", np.greater_equal, shape=_compare, scalar="({0} >= {1})")
equal = binary("equal", np.equal, shape=_compare, scalar="({0} == {1})")
not_equal = binary("not_equal", np.not_equal, shape=_compare, scalar="({0} != {1})")
astype = unary("astype", lambda x, dtype: x.astype(dtype),
               lambda g, out, x, dtype: g.astype(x.dtype) if x.dtype.kind == "f" else None,
               shape=lambda x, dtype: (x.shape, dtype), scalar="{0}")  # fmt: skip


# --- reductions ---------------------------------------------------------------------------------


def _sum_vjp(g, out, x, axis, keepdims):
    return broadcast_to(_reshaped(g, _reduced(x, axis, True)), shape=x.shape)


def _extreme_vjp(g, out, x, axis, keepdims):
    kept = _reduced(x, axis, True)
    hit = (x == _reshaped(out, kept)).astype(g.dtype)
    return _reshaped(g, kept) * hit / sum(hit, axis=axis, keepdims=True)


def _prod_vjp(g, out, x, axis, keepdims):
    """The product of the others, out / x, but not divided by zero: a zero that is alone in its
    slice gets the product of the rest, a zero with another zero gets 0."""
    kept = _reduced(x, axis, True)
    zero = x == 0.0
    nonzero = where(zero, 1.0, x)
    alone = sum(zero.astype(x.dtype), axis=axis, keepdims=True) == 1.0
    at_zero = where(alone, prod(nonzero, axis=axis, keepdims=True), 0.0)
    return _reshaped(g, kept) * where(zero, at_zero, _reshaped(out, kept) / nonzero)


def reduction(name, impl, shape, vjp, saves="", combine=None, identity=None, helpers=()):
    return Primitive(name, impl, shape, (vjp,), saves, kind="reduction", combine=combine,
                     identity=identity, helpers=helpers)  # fmt: skip


# Implementations are NumPy's own functions where their keyword names match the attributes, so
# the generated plan reads as plain NumPy.
sum = reduction("sum", np.sum, _sum_rule, _sum_vjp, combine="({0} + {1})", identity=0.0)
max = reduction("max", np.max, _extreme_rule, _extreme_vjp, "in+out", "maximum({0}, {1})",
                -math.inf, ("maximum",))  # fmt: skip
min = reduction("min", np.min, _extreme_rule, _extreme_vjp, "in+out", "minimum({0}, {1})",
                math.inf, ("minimum",))  # fmt: skip
prod = reduction("prod", np.prod, _sum_rule, _prod_vjp, "in+out", "({0} * {1})", 1.0)
argmax = Primitive("argmax", np.argmax, lambda x, axis: (_reduced(x, (axis,), False), np.int64))


# --- views, indexing, contraction ----------------------------------------------------------------

reshape = Primitive("reshape", np.reshape, _reshape_rule,
                    (lambda g, out, x, shape: _reshaped(g, x.shape),), kind="view")  # fmt: skip
transpose = Primitive("transpose", np.transpose, _transpose_rule,
                      (lambda g, out, x, axes: transpose(g, axes=_inverse(axes)),),
                      kind="view")  # fmt: skip
broadcast_to = Primitive("broadcast_to", np.broadcast_to, _broadcast_to_rule,
                         (lambda g, out, x, shape: sum_to(g, x.shape),), kind="view")  # fmt: skip


def _concat_vjp(i, g, out, *xs, axis):
    start = builtins.sum(x.shape[axis] for x in xs[:i])
    index = (slice(None),) * axis + (slice(start, start + xs[i].shape[axis]),)
    return getitem(g, template=index)


concatenate = Primitive("concatenate", lambda *xs, axis: np.concatenate(xs, axis), _concat_rule,
                        _concat_vjp)  # fmt: skip
getitem = Primitive(
    "getitem",
    _getitem,
    _getitem_rule,
    (lambda g, out, x, *idx, template: scatter_add(g, *idx, shape=x.shape, template=template),),
    "in1:",
    kind="index",
    view=lambda inputs, attrs: len(inputs) == 1,
)  # basic indexing: a view
scatter_add = Primitive("scatter_add", _scatter_add, _scatter_rule,
                        (lambda g, out, x, *idx, shape, template:
                         getitem(g, *idx, template=template),),
                        "in1:", kind="index")  # fmt: skip
matmul = Primitive("matmul", np.matmul, _matmul_rule,
                   (lambda g, out, a, b: sum_to(matmul(g, _mT(b)), a.shape),
                    lambda g, out, a, b: sum_to(matmul(_mT(a), g), b.shape)),
                   "in", kind="contraction")  # fmt: skip

fused = Composite("fused")


__all__ = ["PRIMITIVES", "Composite", "Primitive", "defprimitive", "sum_to"] + [
    name for name, p in list(globals().items()) if isinstance(p, Primitive) and name[0] != "_"
]
