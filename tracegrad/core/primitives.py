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
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import ir
from tracegrad.core.errors import ShapeError
from tracegrad.core.ops import attention as attention_impl
from tracegrad.core.ops import conv as convolution
from tracegrad.core.ops import norm as normalization
from tracegrad.core.ops import pooling

PRIMITIVES: dict[str, Primitive] = {}

# What a pass may know about an op. elementwise: each result element from the same-index
# elements of the (broadcast) inputs; reduction: folds axes with `combine` from `identity`;
# view: the result aliases the first input; contraction: a matrix product (BLAS); index:
# gathers and scatters by index arrays; random, collective: effects (state, communication);
# check: returns its input unchanged, or raises eager's error (a value check run in the plan);
# opaque: anything else; composite: a body graph run as one op (a fused group).
KINDS = frozenset({"elementwise", "reduction", "view", "contraction", "index", "random",
                   "collective", "check", "opaque", "composite"})  # fmt: skip


class Primitive:
    """One op. `vjp` is a tuple with a rule per input (None: not differentiable in that input),
    or a callable `vjp(i, g, out, *ins, **params)` for ops with any number of inputs.
    A rule is called as `rule(g, out, *ins, **params)`; `saves` says which values the rules read,
    so the tape keeps nothing else: "out", and "in" (every input), "in0" (only the first) or
    "in1:" (all but the first), joined by "+"; an input not kept is seen as its shape and dtype.

    For the compiler: `kind` (see KINDS); `scalar`, a format template of the op on scalars
    ("({0} + {1})") and `helpers`, the functions of `tracegrad.compiler.kernels.scalar` it calls;
    `combine` and `identity` for reductions; `accepts_out` (default: the impl is a ufunc) if the
    impl takes `out=`; `numpy`, the NumPy function the op stands for (default: a ufunc impl),
    which NumPy interop dispatches to it; `view`, a predicate `view(inputs, attrs)` for an op
    whose result is a view only sometimes (a kind "view" always is one); `cheap`, an op about
    as costly as a pass over its result, which the remat pass may run again in backward
    (elementwise ops and views always may); `native`, an op the Numba backend runs with a
    kernel of its own (registered in `tracegrad.compiler.kernels.native`), from `impl` elsewhere;
    `scratch`, `scratch(inputs, attrs)`: the bytes of the temporaries `impl` allocates and frees
    within one call (the convolutions' columns), which the memory plan counts at the node;
    `flops(inputs, outputs)`, the operations of one call where `cost`'s rule of thumb is wrong;
    `joint`: `vjp(wanted, g, out, *ins, create_graph=..., **params)` gives every input's
    cotangent in one call (None where `wanted[i]` is false), for an op whose cotangents share
    their work; `create_graph` says whether the cotangents will be differentiated again."""

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
        cheap: bool = False,
        native: bool = False,
        scratch: Callable | None = None,
        flops: Callable | None = None,
        joint: bool = False,
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
        self.cheap = cheap or kind == "elementwise"
        self.native = native
        self._scratch = scratch
        self._flops, self.joint = flops, joint
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
        if self._view is not None:
            return self._view(inputs, attrs)
        return self.kind in ("view", "check")

    def overwrites_safely(self, attrs: dict) -> bool:
        """Each result element is computed from same-index input elements, through `out=`:
        writing the result into a dying input's buffer is safe."""
        return self.kind == "elementwise" and self.accepts_out

    def scratch(self, inputs: Sequence[Any], attrs: dict) -> int:
        """Bytes of temporaries one call allocates and frees besides its result."""
        return self._scratch(inputs, attrs) if self._scratch is not None else 0

    @property
    def starts_early(self) -> bool:
        """Runs as soon as its inputs exist: a collective's peers wait for this rank to join."""
        return self.kind == "collective"

    def cost(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[int, int]:
        """(floating-point operations, bytes moved) of one application, for the memory-budget
        solver's cost model: a contraction does 2 * (result size) * (contracted length), a view
        nothing, anything else about one operation per element it reads or writes."""
        if self.kind == "view":
            return 0, 0
        moved = builtins.sum(v.nbytes for v in (*inputs, *outputs) if v.const is None)
        if self._flops is not None:
            return self._flops(inputs, outputs), moved
        if self.kind == "contraction":
            return 2 * builtins.sum(v.size for v in outputs) * inputs[0].shape[-1], moved
        return builtins.max((v.size for v in (*inputs, *outputs)), default=0), moved

    def vjp_rule(self, i: int) -> Callable | None:
        if callable(self.vjp):
            return lambda *a, **p: self.vjp(i, *a, **p)
        return self.vjp[i] if self.vjp is not None and i < len(self.vjp) else None

    def input_grads(self, wanted: Sequence[bool], g: Any, out: Any, ins: Sequence[Any],
                    params: dict, create_graph: bool = False) -> Sequence[Any]:  # fmt: skip
        """The cotangent of each input i with `wanted[i]` (None for the others)."""
        if self.joint:
            return self.vjp(wanted, g, out, *ins, create_graph=create_graph, **params)
        rules = [self.vjp_rule(i) if w else None for i, w in enumerate(wanted)]
        return [None if r is None else r(g, out, *ins, **params) for r in rules]

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
        """A fused group's reductions are outputs nothing in it reads again, so its kernel is one
        pass that reads each element before it writes the results' element there."""
        return all(n.prim.kind in ("elementwise", "reduction") for n in attrs["body"].nodes)


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


def _same(x, *rest, **attrs):
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
    """1 / (1 + exp(-x)) without overflow, and small results keep their relative accuracy
    (0.5 * (tanh(x / 2) + 1) is 0 below -17 in float32, so log(sigmoid(-20)) was -inf): the
    same formula as the kernels' float32 sigmoid."""
    x = np.asarray(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(e.dtype, copy=False)


def _getitem(x, *idx, template):
    return x[_build_index(template, idx)]


def _scatter_add(g, *idx, shape, template):
    out = np.zeros(shape, g.dtype)
    index = _build_index(template, idx)
    if template == ("@",) and idx[0].dtype.kind in "iu":  # rows: an embedding's gradient
        rows = idx[0].reshape(-1)
        _add_rows(out, rows, g.reshape(rows.size, *shape[1:]))
    elif idx:
        np.add.at(out, index, g)
    else:
        out[index] = g
    return out


def _add_rows(out, rows, g) -> None:
    """out[rows[k]] += g[k], as np.add.at does, by a stable sort and one reduceat: np.add.at
    took 4.5 ms for the GPT's 2048 rows of 256 into 96 (a (16, 128) batch of tokens), this 1.0."""
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
    out[ordered[starts]] = np.add.reduceat(g[order], starts, axis=0)


_erf_object = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    """erf with Python's math.erf per element (NumPy has none): exact, not fast."""
    x = np.asarray(x)
    return np.asarray(_erf_object(x), x.dtype if x.dtype.kind == "f" else np.float64)


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
    take the same branch. Other exponents go straight to np.power: an AdamW step takes this
    path twice per parameter, and NumPy's dtype queries cost microseconds each."""
    steps = POWER_PRODUCTS.get(float(y)) if np.ndim(y) == 0 else None
    if steps is None:
        return np.power(x, y)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, np.result_type(x, y))
    if np.result_type(x, y) != x.dtype:
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


positive = unary("positive", np.positive, lambda g, out, x: g, shape=_same, scalar="(+{0})")
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
tan = unary("tan", np.tan, lambda g, out, x: g * (1.0 + out * out), "out", "math.tan({0})")
arcsin = unary("arcsin", np.arcsin, lambda g, out, x: g / sqrt(1.0 - x * x), "in",
               "math.asin({0})")  # fmt: skip
arccos = unary("arccos", np.arccos, lambda g, out, x: -g / sqrt(1.0 - x * x), "in",
               "math.acos({0})")  # fmt: skip
arctan = unary("arctan", np.arctan, lambda g, out, x: g / (1.0 + x * x), "in", "math.atan({0})")
sinh = unary("sinh", np.sinh, lambda g, out, x: g * cosh(x), "in", "math.sinh({0})")
cosh = unary("cosh", np.cosh, lambda g, out, x: g * sinh(x), "in", "math.cosh({0})")
arcsinh = unary("arcsinh", np.arcsinh, lambda g, out, x: g / sqrt(x * x + 1.0), "in",
                "math.asinh({0})")  # fmt: skip
arccosh = unary("arccosh", np.arccosh, lambda g, out, x: g / sqrt(x * x - 1.0), "in",
                "math.acosh({0})")  # fmt: skip
arctanh = unary("arctanh", np.arctanh, lambda g, out, x: g / (1.0 - x * x), "in",
                "math.atanh({0})")  # fmt: skip
log2 = unary("log2", np.log2, lambda g, out, x: g / (x * math.log(2.0)), "in",
             "math.log2({0})")  # fmt: skip
log10 = unary("log10", np.log10, lambda g, out, x: g / (x * math.log(10.0)), "in",
              "math.log10({0})")  # fmt: skip
exp2 = unary("exp2", np.exp2, lambda g, out, x: g * out * math.log(2.0), "out", "(2.0 ** {0})")
# Piecewise constant: no gradient (None), as in NumPy autograd.
floor = unary("floor", np.floor, shape=_same)
ceil = unary("ceil", np.ceil, shape=_same)
trunc = unary("trunc", np.trunc, shape=_same)
rint = unary("rint", np.rint, shape=_same)
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
arctan2 = binary("arctan2", np.arctan2,
                 (lambda g, out, y, x: sum_to(g * x / (x * x + y * y), y.shape),
                  lambda g, out, y, x: sum_to(-(g * y) / (x * x + y * y), x.shape)),
                 "in", "math.atan2({0}, {1})", shape=_true_divide)  # fmt: skip
hypot = binary("hypot", np.hypot,
               (lambda g, out, x, y: sum_to(g * x / out, x.shape),
                lambda g, out, x, y: sum_to(g * y / out, y.shape)),
               "in+out", "math.hypot({0}, {1})", shape=_true_divide)  # fmt: skip
logaddexp = binary("logaddexp", np.logaddexp,
                   (lambda g, out, x, y: sum_to(g * exp(x - out), x.shape),
                    lambda g, out, x, y: sum_to(g * exp(y - out), y.shape)),
                   "in+out", shape=_true_divide)  # fmt: skip
logaddexp2 = binary("logaddexp2", np.logaddexp2,
                    (lambda g, out, x, y: sum_to(g * exp2(x - out), x.shape),
                     lambda g, out, x, y: sum_to(g * exp2(y - out), y.shape)),
                    "in+out", shape=_true_divide)  # fmt: skip
remainder = binary("remainder", np.remainder,
                   (lambda g, out, x, y: sum_to(g, x.shape),
                    lambda g, out, x, y: sum_to(-(g * floor(x / y)), y.shape)),
                   "in", "({0} % {1})")  # fmt: skip
fmod = binary("fmod", np.fmod,
              (lambda g, out, x, y: sum_to(g, x.shape),
               lambda g, out, x, y: sum_to(-(g * trunc(x / y)), y.shape)),
              "in", "np.fmod({0}, {1})")  # fmt: skip
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


def _extreme_vjp(extreme):
    """The gradient goes to the elements equal to the extreme, shared among ties. The extreme
    is taken again from the x the rule sees, not from the saved result: in a compiled step x
    may be recomputed in backward (by a kernel whose float32 math differs from NumPy's in the
    last bits), and comparing it with the forward result could then find no element at all."""

    def vjp(g, out, x, axis, keepdims):
        kept = _reduced(x, axis, True)
        hit = (x == extreme(x, axis=axis, keepdims=True)).astype(g.dtype)
        return _reshaped(g, kept) * hit / sum(hit, axis=axis, keepdims=True)

    return vjp


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
max = reduction("max", np.max, _extreme_rule, _extreme_vjp(lambda *a, **k: max(*a, **k)), "in",
                "maximum({0}, {1})",
                -math.inf, ("maximum",))  # fmt: skip
min = reduction("min", np.min, _extreme_rule, _extreme_vjp(lambda *a, **k: min(*a, **k)), "in",
                "minimum({0}, {1})",
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


def _concatenate(*xs, axis, out=None):
    return np.concatenate(xs, axis, out=out)


# out=: the result goes into the arena, planned and reused like the others' (the GPT's 6 MiB
# gradient of its q, k, v projection was a fresh allocation each step)
concatenate = Primitive("concatenate", _concatenate, _concat_rule, _concat_vjp, accepts_out=True)
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
                        "in1:", kind="index", native=True)  # fmt: skip


def _matmul_grad_b(g, out, a, b):
    """A stack of rows times one matrix (every Linear on (N, T, D)): one GEMM over all rows, not
    one per stack member and a sum (OpenBLAS wakes its threads per call: on a busy 2-core
    machine 16 calls of (128 x 128) @ (128 x 384) took 350 ms against 9 ms for one)."""
    if b.ndim == 2 and a.ndim > 2:
        rows = reshape(a, shape=(math.prod(a.shape[:-1]), a.shape[-1]))
        return matmul(_mT(rows), reshape(g, shape=(rows.shape[0], g.shape[-1])))
    return sum_to(matmul(_mT(a), g), b.shape)


matmul = Primitive("matmul", np.matmul, _matmul_rule,
                   (lambda g, out, a, b: sum_to(matmul(g, _mT(b)), a.shape), _matmul_grad_b),
                   "in", kind="contraction", native=True)  # fmt: skip

# --- random numbers: counter-based, so the state is a tensor a plan reads and advances --------


def _uniform(state, *, shape, dtype):
    """Uniform [0, 1) numbers from Philox keyed by state[0], the stream number state[1] in the
    counter's top word (so streams never overlap: draws advance the low words)."""
    bits = np.random.Philox(key=int(state[0]), counter=[0, 0, 0, int(state[1])])
    return np.random.Generator(bits).random(shape, dtype=dtype)


def _uniform_rule(state, *, shape, dtype):
    if state.shape != (2,) or state.dtype != np.uint64:
        raise ValueError(f"the random state must be uint64[2] (key, stream), not {state}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise ValueError(f"uniform numbers are float32 or float64, not {dtype}")
    return shape, dtype


uniform = Primitive("uniform", _uniform, _uniform_rule, kind="random")


# --- value checks: what eager checks on values, run in the plan too ---------------------------


def _check_range(x, *, lo, hi, allow, what, where):
    outside = (x < lo) | (x >= hi)
    bad = x[outside & (x != allow) if allow is not None else outside]
    if bad.size:
        raise ValueError(f"{what} must lie in [{lo}, {hi}), found {bad.flat[0]} (at {where})")
    return x


check_range = Primitive("check_range", _check_range, _same, kind="check")

# --- scans, sorting, padding, einsum --------------------------------------------------------


def _cumsum_rule(x, axis):
    return x.shape, (x.dtype if x.dtype.kind in "fc" else np.dtype(np.int64))


def _pad_rule(x, pad_width, value):
    return tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pad_width, strict=True)), x.dtype


def _pad_vjp(g, out, x, pad_width, value):
    return getitem(
        g, template=tuple(slice(lo, lo + d) for d, (lo, _) in zip(x.shape, pad_width, strict=True))
    )


def _einsum_parts(spec: str) -> tuple[list[str], str]:
    ins, out = spec.split("->")
    return ins.split(","), out


def _einsum_rule(*xs, spec):
    ins, out = _einsum_parts(spec)
    sizes: dict[str, int] = {}
    for subs, x in zip(ins, xs, strict=True):
        if len(subs) != x.ndim:
            raise ValueError(f"einsum '{spec}': operand of shape {x.shape} for '{subs}'")
        for c, d in zip(subs, x.shape, strict=True):
            if sizes.setdefault(c, d) != d:
                raise ValueError(f"einsum '{spec}': index '{c}' is {sizes[c]} and {d}")
    return tuple(sizes[c] for c in out), np.result_type(*(x.dtype for x in xs))


def _einsum_vjp(i, g, out, *xs, spec):
    """The gradient of operand i: the cotangent contracted with the other operands; an index
    only operand i has (summed away alone) comes back by broadcasting."""
    ins, result = _einsum_parts(spec)
    mine = ins[i]
    if len(set(mine)) != len(mine):
        raise NotImplementedError(f"einsum '{spec}': no gradient through a repeated index")
    others = ins[:i] + ins[i + 1 :]
    known = set(result) | set("".join(others))
    kept = "".join(c for c in mine if c in known)
    gi = einsum(g, *xs[:i], *xs[i + 1 :], spec=",".join([result, *others]) + "->" + kept)
    if kept == mine:
        return gi
    gi = _reshaped(
        gi, tuple(d if c in known else 1 for c, d in zip(mine, xs[i].shape, strict=True))
    )
    return broadcast_to(gi, shape=xs[i].shape)


cumsum = Primitive("cumsum", np.cumsum, _cumsum_rule,
                   (lambda g, out, x, axis: sum(g, axis=(axis,), keepdims=True)
                    - cumsum(g, axis=axis) + g,))  # fmt: skip
argsort = Primitive("argsort", lambda x, axis: np.argsort(x, axis=axis, kind="stable"),
                    lambda x, axis: (x.shape, np.int64))  # fmt: skip
argpartition = Primitive("argpartition", np.argpartition,
                         lambda x, kth, axis: (x.shape, np.int64))  # fmt: skip
pad = Primitive("pad", lambda x, pad_width, value: np.pad(x, pad_width, constant_values=value),
                _pad_rule, (_pad_vjp,))  # fmt: skip
einsum = Primitive("einsum", lambda *xs, spec: np.einsum(spec, *xs, optimize=len(xs) > 2),
                   _einsum_rule, _einsum_vjp, "in", kind="contraction")  # fmt: skip


# --- linear algebra (batched over leading axes, as numpy.linalg) -------------------------------


def _square_rule(x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"expected (..., n, n) square matrices, got {x.shape}")
    return x.shape, _floating(x)[1]


def _det_rule(x):
    return x.shape[:-2], _square_rule(x)[1]


def _solve_rule(a, b):
    _square_rule(a)
    if b.ndim < 2 or b.shape[-2] != a.shape[-1]:
        raise ValueError(f"solve: a {a.shape} and b {b.shape}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, *b.shape[-2:]), np.result_type(a.dtype, b.dtype)


def _matrices(g):
    """A batch of numbers as a batch of 1x1 matrices, to scale matrices."""
    return _reshaped(g, (*g.shape, 1, 1))


def _eigh_vectors_vjp(g, out, x):
    """v (F * v^T g) v^T, F_ij = 1 / (w_j - w_i) off the diagonal; symmetrized (x is read as a
    symmetric matrix)."""
    w = eigh_values(x)
    n = x.shape[-1]
    off = np.ones((n, n), x.dtype) - np.eye(n, dtype=x.dtype)
    wi = _reshaped(w, (*w.shape, 1))
    gap = _mT(wi) - wi + np.eye(n, dtype=x.dtype)
    inner = matmul(_mT(out), g) * off / gap
    return _symmetric(matmul(matmul(out, inner), _mT(out)))


def _symmetric(a):
    return (a + _mT(a)) * 0.5


def _cholesky_vjp(g, out, x):
    """Murray's rule: L^-T phi(L^T g) L^-1, symmetrized; phi keeps the lower triangle with the
    diagonal halved."""
    n = x.shape[-1]
    phi = np.tril(np.ones((n, n), out.dtype)) - 0.5 * np.eye(n, dtype=out.dtype)
    li = inv(out)
    return _symmetric(matmul(matmul(_mT(li), matmul(_mT(out), g) * phi), li))


def _pinv_vjp(g, out, x):
    """From Golub and Pereyra's differential of the pseudo-inverse P of A:
    dP = -P dA P + P P^T dA^T (I - A P) + (I - P A) dA^T P^T P."""
    m, n = x.shape[-2:]
    eye_m, eye_n = np.eye(m, dtype=out.dtype), np.eye(n, dtype=out.dtype)
    pt, gt = _mT(out), _mT(g)
    return (
        -matmul(matmul(pt, g), pt)
        + matmul(matmul(eye_m - matmul(x, out), gt), matmul(out, pt))
        + matmul(matmul(pt, out), matmul(gt, eye_n - matmul(out, x)))
    )


def _svd_rule(x, part):
    m, n = x.shape[-2:]
    k, batch, dtype = builtins.min(m, n), x.shape[:-2], _floating(x)[1]
    return {"u": (*batch, m, k), "s": (*batch, k), "vh": (*batch, k, n)}[part], dtype


def _svd(x, part):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    return {"u": u, "s": s, "vh": vh}[part]


def _svd_vjp(g, out, x, part):
    """Townsend's rules (2016) for the thin SVD x = U S V^T, one output's share at a time;
    F_ij = 1 / (s_j^2 - s_i^2) off the diagonal (distinct singular values assumed)."""
    u, s, vh = (svd(x, part=p) for p in ("u", "s", "vh"))
    v = _mT(vh)
    if part == "s":
        return matmul(u * _reshaped(g, (*g.shape[:-1], 1, g.shape[-1])), vh)
    k = s.shape[-1]
    s_row = _reshaped(s, (*s.shape[:-1], 1, k))
    s2 = s_row * s_row
    off = np.ones((k, k), x.dtype) - np.eye(k, dtype=x.dtype)
    f = off / (s2 - _mT(s2) + np.eye(k, dtype=x.dtype))
    if part == "u":
        j = f * (matmul(_mT(u), g) - matmul(_mT(g), u))
        rest = g - matmul(u, matmul(_mT(u), g))
        return matmul(matmul(u, j) * s_row + rest / s_row, vh)
    gv = _mT(g)
    j = f * (matmul(vh, gv) - matmul(_mT(gv), v))
    rest = _mT(gv) - matmul(matmul(_mT(gv), v), vh)
    return matmul(u, matmul(j, vh) * _mT(s_row) + rest / _mT(s_row))


inv = Primitive("inv", np.linalg.inv, _square_rule,
                (lambda g, out, x: -matmul(matmul(_mT(out), g), _mT(out)),), "out")  # fmt: skip
det = Primitive("det", np.linalg.det, _det_rule,
                (lambda g, out, x: _matrices(g * out) * _mT(inv(x)),), "in+out")  # fmt: skip
logabsdet = Primitive("logabsdet", lambda x: np.linalg.slogdet(x)[1], _det_rule,
                      (lambda g, out, x: _matrices(g) * _mT(inv(x)),), "in")  # fmt: skip
det_sign = Primitive("det_sign", lambda x: np.linalg.slogdet(x)[0], _det_rule)
solve = Primitive("solve", np.linalg.solve, _solve_rule,
                  (lambda g, out, a, b: sum_to(-matmul(solve(_mT(a), g), _mT(out)), a.shape),
                   lambda g, out, a, b: sum_to(solve(_mT(a), g), b.shape)),
                  "in+out")  # fmt: skip
cholesky = Primitive("cholesky", np.linalg.cholesky, _square_rule, (_cholesky_vjp,), "out")


def _eigh_values_vjp(g, out, x):
    """v diag(g) v^T, symmetrized."""
    v = eigh_vectors(x)
    return _symmetric(matmul(v * _reshaped(g, (*g.shape[:-1], 1, g.shape[-1])), _mT(v)))


eigh_values = Primitive("eigh_values", np.linalg.eigvalsh,
                        lambda x: (x.shape[:-1], _square_rule(x)[1]), (_eigh_values_vjp,),
                        "in")  # fmt: skip
eigh_vectors = Primitive("eigh_vectors", lambda x: np.linalg.eigh(x)[1], _square_rule,
                         (_eigh_vectors_vjp,), "in+out")  # fmt: skip
svd = Primitive("svd", _svd, _svd_rule, (_svd_vjp,), "in")
pinv = Primitive("pinv", np.linalg.pinv,
                 lambda x: ((*x.shape[:-2], x.shape[-1], x.shape[-2]), _floating(x)[1]),
                 (_pinv_vjp,), "in+out")  # fmt: skip

# --- convolution (`convolution`: im2col feeding BLAS; the Numba backend has kernels of its own)
# Attributes: stride (sh, sw), padding ((top, bottom), (left, right)), dilation (dh, dw), groups.
# The three ops are each other's VJPs (each is bilinear), so every order of derivative is exact.


def _conv2d_rule(x, w, stride, padding, dilation, groups):
    oh, ow = convolution.output_size(x.shape, w.shape, stride, padding, dilation, groups)
    return (x.shape[0], w.shape[0], oh, ow), np.result_type(x.dtype, w.dtype)


def _conv_scratch(op: str) -> Callable:
    """The bytes of `op`'s temporaries (`convolution.scratch`); a gradient op's `shape` attribute
    is the input's or the weight's."""

    def scratch(ins: Sequence[Any], a: dict) -> int:
        x = a["shape"] if op == "input_grad" else ins[0].shape
        w = a["shape"] if op == "weight_grad" else ins[1].shape
        return convolution.scratch(op, x, w, np.result_type(*(v.dtype for v in ins)), **a)

    return scratch


def _conv_grad_rule(a, b, shape, stride, padding, dilation, groups):
    return shape, np.result_type(a.dtype, b.dtype)


conv2d = Primitive(
    "conv2d",
    convolution.conv2d,
    _conv2d_rule,
    (lambda g, out, x, w, **a: conv2d_input_grad(g, w, shape=x.shape, **a),
     lambda g, out, x, w, **a: conv2d_weight_grad(x, g, shape=w.shape, **a)),
    "in",
    kind="contraction",
    accepts_out=True,
    native=True,
    scratch=_conv_scratch("conv2d"),
)  # fmt: skip
conv2d_input_grad = Primitive(
    "conv2d_input_grad",
    convolution.conv2d_input_grad,
    _conv_grad_rule,
    (lambda c, out, g, w, shape, **a: conv2d(c, w, **a),
     lambda c, out, g, w, shape, **a: conv2d_weight_grad(c, g, shape=w.shape, **a)),
    "in",
    kind="contraction",
    accepts_out=True,
    native=True,
    scratch=_conv_scratch("input_grad"),
)  # fmt: skip
conv2d_weight_grad = Primitive(
    "conv2d_weight_grad",
    convolution.conv2d_weight_grad,
    _conv_grad_rule,
    (lambda c, out, x, g, shape, **a: conv2d_input_grad(g, c, shape=x.shape, **a),
     lambda c, out, x, g, shape, **a: conv2d(x, c, **a)),
    "in",
    kind="contraction",
    accepts_out=True,
    native=True,
    scratch=_conv_scratch("weight_grad"),
)  # fmt: skip

# --- max-pooling (implemented in `pooling`; the Numba backend has kernels of its own) ----------
# max_pool2d(x, idx) is the windows' maxima, idx = max_pool2d_argmax(x) their positions: the
# VJP reads only the small indices. scatter and gather, linear in their first input, are each
# other's VJPs (every order of derivative). Attributes: kernel (kh, kw), stride (sh, sw),
# padding (ph, pw), dilation (dh, dw).


def _pool_windows(shape, kernel, stride, padding, dilation) -> tuple[int, ...]:
    return (*shape[:-2], *pooling.output_size(shape, kernel, stride, padding, dilation))


def _pool_indices(idx, windows, kernel) -> None:
    if idx.shape != windows or idx.dtype != pooling.index_dtype(kernel):
        expected = pooling.index_dtype(kernel)
        raise ValueError(f"indices {idx.shape} {idx.dtype} for windows {windows}: expected "
                         f"{expected}, as max_pool2d_argmax makes them")  # fmt: skip


def _pool_argmax_rule(x, kernel, stride, padding, dilation):
    return _pool_windows(x.shape, kernel, stride, padding, dilation), pooling.index_dtype(kernel)


def _pool_rule(x, idx, kernel, stride, padding, dilation):
    windows = _pool_windows(x.shape, kernel, stride, padding, dilation)
    _pool_indices(idx, windows, kernel)
    return windows, x.dtype


def _pool_scatter_rule(g, idx, shape, kernel, stride, padding, dilation):
    windows = _pool_windows(tuple(shape), kernel, stride, padding, dilation)
    if g.shape != windows:
        raise ValueError(f"values {g.shape} for the windows {windows} of {tuple(shape)}")
    _pool_indices(idx, windows, kernel)
    return shape, g.dtype


def _pool_vjp(g, out, x, idx, **geometry):
    return max_pool2d_scatter(g, idx, shape=x.shape, **geometry)


def _pool(name, impl, rule, vjp, **kw):
    return Primitive(name, impl, rule, vjp, "in1:" if vjp else "", accepts_out=True, native=True,
                     **kw)  # fmt: skip


max_pool2d_argmax = _pool("max_pool2d_argmax", pooling.argmax, _pool_argmax_rule, None)
# cheap: rebuilt in backward from the recomputed ReLU before it (the next layer's weight
# gradient reads it), not kept
max_pool2d = _pool("max_pool2d", pooling.maxima, _pool_rule, (_pool_vjp, None), kind="index",
                   cheap=True)  # fmt: skip
max_pool2d_gather = _pool("max_pool2d_gather", pooling.gather, _pool_rule, (_pool_vjp, None),
                          kind="index")  # fmt: skip
max_pool2d_scatter = _pool("max_pool2d_scatter", pooling.scatter, _pool_scatter_rule,
                           (lambda c, out, g, idx, shape, **a: max_pool2d_gather(c, idx, **a),
                            None), kind="index")  # fmt: skip

# --- attention (implemented in `attention`; the Numba backend has kernels of its own) ------------
# attention(q, k, v) is softmax(q k^T * scale [causal]) v with its heads next to its features
# (`attention_impl.heads_next`); attention_grad(q, k, v, out, g) takes out and g heads first, and
# packs the three cotangents into one flat array (its VJP: none; a second-order gradient takes
# the composed ops, `_attention_grads`). Attributes: scale, causal.


def _attention_rule(q, k, v, scale, causal):
    shape, dtype = _heads_first_rule(q, k, v)
    return tuple(shape[a] for a in attention_impl.heads_next_axes(len(shape))), dtype


def _heads_first_rule(q, k, v):
    if q.ndim < 2 or q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] \
            or q.shape[-1] != k.shape[-1] or k.shape[-2] == 0:  # fmt: skip
        raise ValueError(f"query {q.shape}, key {k.shape} and value {v.shape}: expected "
                         "(..., L, E), (..., S, E) and (..., S, Ev) with S > 0")  # fmt: skip
    if not q.dtype == k.dtype == v.dtype or q.dtype.kind != "f":
        raise ValueError(f"query, key and value of one floating dtype, not {q.dtype}, "
                         f"{k.dtype} and {v.dtype}")  # fmt: skip
    return (*q.shape[:-1], v.shape[-1]), q.dtype


def _attention_grad_rule(q, k, v, out, g, scale, causal):
    shape, dtype = _heads_first_rule(q, k, v)
    if out.shape != shape or g.shape != shape:
        raise ValueError(f"output {out.shape} and its cotangent {g.shape}: expected {shape}")
    return (q.size + k.size + v.size,), dtype


def _attention_vjp(wanted, g, out, q, k, v, scale, causal, create_graph=False):
    g, out = attention_impl.heads_next(g), attention_impl.heads_next(out)  # heads first again
    if create_graph:  # the gradient is itself recorded: ops with VJPs of their own
        return _attention_grads(g, out, q, k, v, scale, causal)
    packed = attention_grad(q, k, v, out, g, scale=scale, causal=causal)
    grads = attention_impl.unpack(packed, q, k, v)
    return [x if w else None for w, x in zip(wanted, grads, strict=True)]


def _attention_grads(g, out, q, k, v, scale, causal):
    """attention's cotangents of q, k and v in composed, differentiable ops."""
    s = matmul(q, _mT(k)) * scale
    if causal:
        s = where(attention_impl.causal_mask(q.shape[-2], k.shape[-2]), s, -math.inf)
    last = (s.ndim - 1,)
    e = exp(s - max(s, axis=last, keepdims=True))
    p = e / sum(e, axis=last, keepdims=True)
    ds = p * (matmul(g, _mT(v)) - sum(g * out, axis=last, keepdims=True)) * scale
    return matmul(ds, k), matmul(_mT(ds), q), matmul(_mT(p), g)


def _attention_flops(ins, outs) -> int:
    """q k^T and p v forward (4 L S E), five such products backward; causal: about half."""
    q, k = ins[0], ins[1]
    return 2 * q.size * k.shape[-2] * (2 if len(ins) == 3 else 5)


attention = Primitive(
    "attention", attention_impl.forward, _attention_rule, _attention_vjp, "in+out",
    accepts_out=True, native=True, joint=True, flops=_attention_flops,
    scratch=lambda ins, a: attention_impl.scratch(*ins[:3], backward=False),
)  # fmt: skip
attention_grad = Primitive(
    "attention_grad", attention_impl.backward, _attention_grad_rule, None, accepts_out=True,
    native=True, flops=_attention_flops,
    scratch=lambda ins, a: attention_impl.scratch(*ins[:3], backward=True),
)  # fmt: skip

# --- layer norm (implemented in `normalization`; the Numba backend has kernels of its own) -------
# layer_norm(x, weight, bias) over the last axis; layer_norm_grad(x, weight, g) packs the three
# cotangents into one flat array (its VJP: none; a second-order gradient takes the composed ops,
# `_layer_norm_grads`). Attribute: eps.


def _layer_norm_rule(x, weight, bias, eps):
    d = x.shape[-1] if x.ndim else 0
    if x.ndim < 1 or weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"input {x.shape}, weight {weight.shape} and bias {bias.shape}: "
                         "expected (..., D), (D,) and (D,)")  # fmt: skip
    if not x.dtype == weight.dtype == bias.dtype or x.dtype.kind != "f":
        raise ValueError(f"input, weight and bias of one floating dtype, not {x.dtype}, "
                         f"{weight.dtype} and {bias.dtype}")  # fmt: skip
    return x.shape, x.dtype


def _layer_norm_grad_rule(x, weight, g, eps):
    shape, dtype = _layer_norm_rule(x, weight, weight, eps)
    if g.shape != shape:
        raise ValueError(f"cotangent {g.shape} for a result of {shape}")
    return (x.size + 2 * x.shape[-1],), dtype


def _layer_norm_vjp(wanted, g, out, x, weight, bias, eps, create_graph=False):
    if create_graph:
        grads = _layer_norm_grads(g, x, weight, eps)
    else:
        grads = normalization.unpack(layer_norm_grad(x, weight, g, eps=eps), x)
    return [d if w else None for w, d in zip(wanted, grads, strict=True)]


def _layer_norm_grads(g, x, weight, eps):
    """layer_norm's cotangents of x, weight and bias in composed, differentiable ops."""
    last, d = (x.ndim - 1,), float(x.shape[-1])
    centered = x - sum(x, axis=last, keepdims=True) / d
    rstd = 1.0 / sqrt(sum(centered * centered, axis=last, keepdims=True) / d + eps)
    xhat = centered * rstd
    dxhat = g * weight
    mean_dxhat = sum(dxhat, axis=last, keepdims=True) / d
    mean_dxhat_xhat = sum(dxhat * xhat, axis=last, keepdims=True) / d
    dx = (dxhat - mean_dxhat - xhat * mean_dxhat_xhat) * rstd
    return dx, sum_to(g * xhat, weight.shape), sum_to(g, weight.shape)


layer_norm = Primitive(
    "layer_norm", normalization.layer_norm, _layer_norm_rule, _layer_norm_vjp, "in",
    accepts_out=True, native=True, joint=True,
    scratch=lambda ins, a: normalization.scratch(ins[0]),
)  # fmt: skip
layer_norm_grad = Primitive(
    "layer_norm_grad", normalization.layer_norm_grad, _layer_norm_grad_rule, None,
    accepts_out=True, native=True, scratch=lambda ins, a: normalization.scratch(ins[0]),
)  # fmt: skip

fused = Composite("fused")


# --- collectives ---------------------------------------------------------------------------------


def wait_request(request: Any, timeout: float | None, what: str) -> None:
    """Wait for a non-blocking MPI request; past `timeout` seconds, raise TimeoutError (the
    process's excepthook then aborts every rank instead of letting them hang).

    MPI moves a message only inside MPI calls of both ranks, so it first polls without pause for
    SPIN_S (a message in flight is done within it); then it sleeps between polls (10 us,
    doubling up to 250 us) instead of spinning on in MPI_Wait, which would take a core from the
    peer ranks and other processes of a shared host while it waits for them."""
    start = time.monotonic()
    deadline = math.inf if timeout is None else start + timeout
    pause = 1e-5
    while not request.Test():
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"{what}: no answer from the other ranks within {timeout} s")
        if now - start > SPIN_S:
            time.sleep(pause)
            pause = builtins.min(2 * pause, 2.5e-4)


# Polling with sleeps stalls the transfer itself: each of a message's pipelined chunks waits for
# both ranks' next poll. On the gelu step the all-reduces took 30 ms per step instead of 3 ms.
SPIN_S = 2e-3


def _allreduce(x: np.ndarray, *, op: str, timeout: float | None, out: Any = None) -> np.ndarray:
    """MPI all-reduce over COMM_WORLD (mpi4py is imported only when a step runs one)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    out = np.empty(x.shape, x.dtype) if out is None else out
    wait_request(comm.Iallreduce(np.ascontiguousarray(x), out, op=MPI.SUM), timeout, "allreduce")
    if op == "mean":
        np.multiply(out, x.dtype.type(1.0 / comm.size), out=out)
    return out


def _allreduce_rule(x, *, op, timeout):
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', not {op!r}")
    return _floating(x)


# Every rank's sum (or mean) of x. Summed over ranks, each rank's loss reads every rank's x
# through the result, so the gradient is the same all-reduce of the cotangents.
allreduce = Primitive("allreduce", _allreduce, _allreduce_rule,
                      (lambda g, out, x, op, timeout: allreduce(g, op=op, timeout=timeout),),
                      kind="collective", accepts_out=True)  # fmt: skip


__all__ = ["PRIMITIVES", "Composite", "Primitive", "defprimitive", "sum_to"] + [
    name for name, p in list(globals().items()) if isinstance(p, Primitive) and name[0] != "_"
]
