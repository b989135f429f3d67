"""Algebraic clean-ups, each a small rule registered for the ops it rewrites (as PyTensor's
`node_rewriter([Op])` or tinygrad's pattern matcher): `rule(node, rewrite)` returns the value
that replaces the node's result, or None. Multiplying by one, adding zero, identity views, view
chains, a sum that only undoes a broadcast, the transpose of a matrix product, small whole
powers as products, a gather of few elements moved before the elementwise op it reads, a cast
to bfloat16 and back as one rounding that fuses; and, for every op, folding nodes whose inputs
are all constants."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.ops.elementwise import POWER_PRODUCTS
from tracegrad.core.primitives import Primitive
from tracegrad.core.vocabulary import Kind

from .base import PassStats, is_view, stats, substitute


@dataclass
class Rewrite:
    """What a rule sees: producers so far, the nodes that read each value in the input graph,
    and where to emit replacement nodes (`emit(prim, inputs, out, attrs)`)."""

    producers: dict[Value, Node]
    users: dict[Value, list[Node]]
    outputs: set[Value]
    node: Node | None = None
    emitted: list[Node] = field(default_factory=list)

    def reads(self, v: Value, unknown: int = 0) -> int:
        """How many nodes of the input graph read `v`; `unknown` for a value no node reads
        there (one a rule made)."""
        return len(self.users[v]) if v in self.users else unknown

    def emit(self, prim: Primitive, inputs: list[Value], out: Value, **attrs) -> Value:
        """A new node in place of the rewritten one (its source, phase and module)."""
        self.emitted.append(self.node.replace(prim=prim, inputs=inputs, outputs=[out], attrs=attrs))
        return out


Rule = Callable[[Node, Rewrite], Value | None]
RULES: dict[Primitive | None, list[Rule]] = {}  # None: rules for every op


def rule(*prims: Primitive) -> Callable[[Rule], Rule]:
    """Register a rule for `prims` (none: for every op), after those registered before it."""

    def register(f: Rule) -> Rule:
        for p in prims or (None,):
            RULES.setdefault(p, []).append(f)
        return f

    return register


def _const_equal(v: Value, x: float) -> bool:
    """`v` is a constant whose every element is `x` (a scalar one, a zeros seed, ...)."""
    return v.const is not None and bool(np.all(v.const == x))


def _identity(n: Node, keep: Value, other: Value) -> bool:
    out = n.outputs[0]
    return keep.shape == out.shape and keep.dtype == out.dtype and other.const is not None


@rule()
def fold_constants(n: Node, rw: Rewrite) -> Value | None:
    if not n.inputs or any(v.const is None for v in n.inputs) or len(n.outputs) != 1:
        return None
    if n.prim.has_effects:
        return None  # draws, communication and checks run every step
    out = n.outputs[0]
    with np.errstate(all="ignore"):  # log(0) folded is -inf, as at run time, without a warning
        result = n.prim.impl(*(v.const for v in n.inputs), **n.attrs)
    return Value(out.shape, out.dtype, const=np.asarray(result, out.dtype))


@rule()
def read_through_broadcasts(n: Node, rw: Rewrite) -> Value | None:
    """An elementwise op broadcasts its operands itself: reading `x` instead of
    `broadcast_to(x, s)` (where the result keeps its shape) lets a kernel read x's (N, 1)
    column rather than a stride-0 (N, C) view, which its signature would copy whole (a softmax
    gradient's row sums against the logits)."""
    if n.prim.kind is not Kind.ELEMENTWISE or len(n.outputs) != 1:
        return None
    inputs, shape = list(n.inputs), n.outputs[0].shape
    for k, v in enumerate(inputs):
        b = rw.producers.get(v)
        if b is not None and b.prim is P.broadcast_to:
            trial = [*inputs[:k], b.inputs[0], *inputs[k + 1 :]]
            if np.broadcast_shapes(*(x.shape for x in trial)) == shape:
                inputs = trial
    if inputs == n.inputs:
        return None
    return rw.emit(n.prim, inputs, n.outputs[0], **n.attrs)


@rule(P.mul)
def mul_by_one(n: Node, rw: Rewrite) -> Value | None:
    for a, b in (n.inputs, n.inputs[::-1]):
        if _const_equal(b, 1.0) and _identity(n, a, b):
            return a
    return None


@rule(P.add, P.sub)
def add_zero(n: Node, rw: Rewrite) -> Value | None:
    pairs = [n.inputs] + ([n.inputs[::-1]] if n.prim is P.add else [])
    for a, b in pairs:
        if _const_equal(b, 0.0) and _identity(n, a, b):
            return a
    return None


@rule(P.astype)
def bfloat16_round_trip(n: Node, rw: Rewrite) -> Value | None:
    """A float32 value cast to bfloat16 and back (between any two ops of bfloat16 operands,
    `tensor._in_float32`) as one float32 op that keeps bfloat16's precision: kernels do not take
    bfloat16, and this one fuses with the ops on either side."""
    x, rounded = n.inputs[0], rw.producers.get(n.inputs[0])
    if (x.dtype, n.outputs[0].dtype) != (BFLOAT16, np.float32) or rounded is None:
        return None
    if rounded.prim is not P.astype or rounded.inputs[0].dtype != np.float32:
        return None
    return rw.emit(P.bfloat16_rounded, [rounded.inputs[0]], n.outputs[0])


@rule(P.reshape, P.broadcast_to)
def same_shape_view(n: Node, rw: Rewrite) -> Value | None:
    x = n.inputs[0]
    return x if x.shape == n.outputs[0].shape else None


@rule(P.getitem)
def part_of_concatenation(n: Node, rw: Rewrite) -> Value | None:
    """A slice of a concatenation that is one of its parts: that part (a gradient op's packed
    cotangents, traced as the concatenation of their parts, then unpacked)."""
    joined = rw.producers.get(n.inputs[0])
    template, out = n.attrs["template"], n.outputs[0]
    if joined is None or joined.prim is not P.concatenate or len(n.inputs) != 1:
        return None
    axis = joined.attrs["axis"] % out.ndim if out.ndim else 0
    if len(template) != axis + 1 or any(t != slice(None) for t in template[:axis]):
        return None
    t, at = template[axis], 0
    if not isinstance(t, slice) or t.step not in (None, 1):
        return None
    start, stop, _ = t.indices(joined.outputs[0].shape[axis])
    for part in joined.inputs:
        if (start, stop) == (at, at + part.shape[axis]) and part.shape == out.shape:
            return part
        at += part.shape[axis]
    return None


# A gather moves before an elementwise op only where it picks at most this share of the op's
# result: its operands are then gathered each, so a gather of as many elements would repeat the
# op's work, not save writing it.
GATHERED_SHARE = 1 / 8


@rule(P.getitem)
def gather_before_elementwise(n: Node, rw: Rewrite) -> Value | None:
    """f(a, b, ...)[idx] -> f(a'[idx], b'[idx], ...), a', b' the operands broadcast to f's shape
    (views), where idx holds index arrays that pick few of f's elements: then f's whole result
    need not be written for them. `nll_loss(log_softmax(x))` picks one log-probability a row:
    moved down the log-softmax's parts to the scores, the (rows x classes) log-probabilities
    were written for nothing (a language model's vocabulary a token)."""
    x, out, e = n.inputs[0], n.outputs[0], rw.producers.get(n.inputs[0])
    if len(n.inputs) == 1 or e is None or e.prim.kind is not Kind.ELEMENTWISE:
        return None
    if not e.prim.fusible or len(e.outputs) != 1 or out.size > GATHERED_SHARE * x.size:
        return None
    inputs = []
    for a in e.inputs:
        if a.ndim == 0:  # a scalar broadcasts against the gathered values as it did
            inputs.append(a)
            continue
        if a.shape != x.shape:
            a = rw.emit(P.broadcast_to, [a], Value(x.shape, a.dtype), shape=x.shape)
        inputs.append(rw.emit(P.getitem, [a, *n.inputs[1:]], Value(out.shape, a.dtype),
                              **n.attrs))  # fmt: skip
    return rw.emit(e.prim, inputs, out, **e.attrs)


@rule(P.transpose)
def identity_transpose(n: Node, rw: Rewrite) -> Value | None:
    return n.inputs[0] if n.attrs["axes"] == tuple(range(n.inputs[0].ndim)) else None


@rule(P.reshape)
def reshape_chain(n: Node, rw: Rewrite) -> Value | None:
    """reshape(reshape(x)) -> reshape(x), or x itself."""
    inner = rw.producers.get(n.inputs[0])
    if inner is None or inner.prim is not P.reshape:
        return None
    x, out = inner.inputs[0], n.outputs[0]
    return x if x.shape == out.shape else rw.emit(P.reshape, [x], out, shape=out.shape)


@rule()
def elementwise_before_reshape(n: Node, rw: Rewrite) -> Value | None:
    """f(reshape(a), reshape(b), c) -> reshape(f(a, b, c)) when a and b had one shape and c is
    broadcast only along trailing axes the reshape keeps: `linear(x).view(-1, C)` adds the bias
    to the (N, C) product itself and its gradient's parts add up before the view's, so each
    fuses with the (N, C) kernels around it (a log-softmax, its gradient) instead of being
    written whole in between."""
    if n.prim.kind is not Kind.ELEMENTWISE or not n.prim.fusible or len(n.outputs) != 1:
        return None
    out = n.outputs[0]
    sources = {rw.producers[x].inputs[0].shape if x in rw.producers and
               rw.producers[x].prim is P.reshape else None
               for x in n.inputs if x.shape == out.shape}  # fmt: skip
    if len(sources) != 1 or None in sources:
        return None
    (shape,) = sources
    if _squeezed(shape, out.shape):  # a view of the same axes: a chain of the parameter's shape
        return None  # (a bias gradient's Adam update) stays in it, unbroken by the view
    kept = _common_trailing(out.shape, shape)
    inputs = []
    for x in n.inputs:
        lead = max(0, x.ndim - kept)
        if x.shape == out.shape:
            inputs.append(rw.producers[x].inputs[0])
        elif all(d == 1 for d in x.shape[:lead]):
            inputs.append(_reshaped(x, x.shape[lead:], rw))
        else:
            return None
    if np.broadcast_shapes(*(x.shape for x in inputs)) != shape:
        return None
    made = rw.emit(n.prim, inputs, Value(shape, out.dtype), **n.attrs)
    return rw.emit(P.reshape, [made], out, shape=out.shape)


@rule(P.reshape)
def reduction_keeping_axes(n: Node, rw: Rewrite) -> Value | None:
    """reshape(sum(x, axes), the shape with those axes kept as 1) -> sum(x, axes, keepdims):
    a gradient's row sums (N, 1) read back against the (N, C) values are then a row reduction,
    which the kernel computing them reads again (a log-softmax's gradient is one kernel)."""
    inner = rw.producers.get(n.inputs[0])
    if inner is None or inner.prim.kind is not Kind.REDUCTION or inner.attrs.get("keepdims", True):
        return None
    if rw.reads(n.inputs[0]) != 1 or n.inputs[0] in rw.outputs:
        return None
    x, out = inner.inputs[0], n.outputs[0]
    axes = {a % x.ndim for a in inner.attrs["axis"]}
    if out.shape != tuple(1 if a in axes else d for a, d in enumerate(x.shape)):
        return None
    return rw.emit(inner.prim, [x], out, **{**inner.attrs, "keepdims": True})


@rule(P.sum, P.max, P.min)
def reduce_through_reshape(n: Node, rw: Rewrite) -> Value | None:
    """A reduction over exactly the leading axes a reshape split or merged, of the reshaped
    array itself: the bias gradient `g.view(N, T, C).sum((0, 1))` as `g.sum(0)` of the (N * T,
    C) gradient, a column sum that fuses into the kernel writing g."""
    inner = rw.producers.get(n.inputs[0])
    if inner is None or inner.prim is not P.reshape:
        return None
    x, y = inner.inputs[0], inner.outputs[0]
    kept = _common_trailing(x.shape, y.shape)
    lead_x, lead_y = x.ndim - kept, y.ndim - kept
    if lead_x == 0 or tuple(sorted(a % y.ndim for a in n.attrs["axis"])) != tuple(range(lead_y)):
        return None
    out = n.outputs[0]
    axis = tuple(range(lead_x))
    if n.attrs["keepdims"]:
        flat = Value((1,) * lead_x + x.shape[lead_x:], out.dtype)
        reduced = rw.emit(n.prim, [x], flat, axis=axis, keepdims=True)
        return rw.emit(P.reshape, [reduced], out, shape=out.shape)
    return rw.emit(n.prim, [x], out, axis=axis, keepdims=False)


def _squeezed(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether shapes `a` and `b` differ only by axes of length 1."""
    return [d for d in a if d != 1] == [d for d in b if d != 1]


def _common_trailing(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """How many trailing axes two shapes share (size 1 axes included)."""
    k = 0
    while k < min(len(a), len(b)) and a[-1 - k] == b[-1 - k]:
        k += 1
    return k


def _reshaped(x: Value, shape: tuple[int, ...], rw: Rewrite) -> Value:
    """x as `shape`: x itself or a new reshape."""
    return x if x.shape == shape else rw.emit(P.reshape, [x], Value(shape, x.dtype), shape=shape)


@rule(P.transpose)
def transpose_chain(n: Node, rw: Rewrite) -> Value | None:
    """transpose(transpose(x)) -> one transpose, or x itself."""
    inner = rw.producers.get(n.inputs[0])
    if inner is None or inner.prim is not P.transpose:
        return None
    axes = tuple(inner.attrs["axes"][a] for a in n.attrs["axes"])
    x = inner.inputs[0]
    return x if axes == tuple(range(x.ndim)) else rw.emit(P.transpose, [x], n.outputs[0], axes=axes)


@rule(P.sum)
def sum_of_broadcast(n: Node, rw: Rewrite) -> Value | None:
    """sum(broadcast_to(y, s), the broadcast axes) == y * (number of copies)."""
    b = rw.producers.get(n.inputs[0])
    if b is None or b.prim is not P.broadcast_to:
        return None
    y, big = b.inputs[0], b.outputs[0].shape
    lead = len(big) - y.ndim
    grown = {i for i, d in enumerate(big) if i < lead or (y.shape[i - lead] == 1 and d != 1)}
    if set(n.attrs["axis"]) != grown:
        return None
    out = n.outputs[0]
    copies = math.prod(big[i] for i in grown)
    shaped = rw.emit(P.reshape, [y], Value(out.shape, y.dtype), shape=out.shape)
    scale = Value((), out.dtype, const=np.asarray(copies, out.dtype))
    return rw.emit(P.mul, [shaped, scale], out)


@rule(P.scatter_add)
def one_hot_scatter(n: Node, rw: Rewrite) -> Value | None:
    """The gradient of `x[arange(N), cols]` (a cross-entropy's pick of each row's label) as
    `where(arange(C) == cols[:, None], g[:, None], 0)`: elementwise, so it fuses into what reads
    it instead of filling an (N, C) array as large as the logits. Only where the forward pick of
    the same indices ran (and raised on any out of range)."""
    g, *idx = n.inputs
    out = n.outputs[0]
    if n.attrs["template"] != ("@", "@") or out.ndim != 2 or g.shape != out.shape[:1]:
        return None
    rows, cols = idx
    count, classes = out.shape
    if rows.const is None or not np.array_equal(rows.const, np.arange(count)):
        return None
    if not any(m.prim is P.getitem and m.attrs["template"] == ("@", "@") and m.inputs[2] is cols
               and _same_const(m.inputs[1], rows) for m in rw.producers.values()):  # fmt: skip
        return None
    column = rw.emit(P.reshape, [cols], Value((count, 1), cols.dtype), shape=(count, 1))
    wrapped = _wrapped(column, classes, rw)
    labels = Value((classes,), cols.dtype, const=np.arange(classes, dtype=cols.dtype))
    mask = rw.emit(P.equal, [labels, wrapped], Value(out.shape, np.dtype(bool)))
    values = rw.emit(P.reshape, [g], Value((count, 1), g.dtype), shape=(count, 1))
    zero = Value((), out.dtype, const=np.zeros((), out.dtype))
    return rw.emit(P.where, [mask, values, zero], out)


def _same_const(a: Value, b: Value) -> bool:
    return a is b or (a.const is not None and b.const is not None
                      and np.array_equal(a.const, b.const))  # fmt: skip


def _wrapped(index: Value, size: int, rw: Rewrite) -> Value:
    """Negative indices counted from the end, as NumPy's indexing counts them."""
    if index.dtype.kind == "u":
        return index
    zero = Value((), index.dtype, const=np.zeros((), index.dtype))
    negative = rw.emit(P.less, [index, zero], Value(index.shape, np.dtype(bool)))
    size_v = Value((), index.dtype, const=np.asarray(size, index.dtype))
    shifted = rw.emit(P.add, [index, size_v], Value(index.shape, index.dtype))
    return rw.emit(P.where, [negative, shifted, index], Value(index.shape, index.dtype))


@rule(P.transpose)
def transposed_matmul(n: Node, rw: Rewrite) -> Value | None:
    """transpose(a @ b) -> b.T @ a.T: BLAS reads transposed operands for free, and the result
    comes out contiguous instead of as a strided view (x @ W.T layers' weight gradients)."""
    inner = rw.producers.get(n.inputs[0])
    if inner is None or inner.prim is not P.matmul or n.attrs["axes"] != (1, 0):
        return None
    if rw.reads(inner.outputs[0]) > 1 or inner.outputs[0] in rw.outputs:
        return None  # the product is needed as it is too: two products would cost more
    a, b = inner.inputs
    bt = rw.emit(P.transpose, [b], Value(b.shape[::-1], b.dtype), axes=(1, 0))
    at = rw.emit(P.transpose, [a], Value(a.shape[::-1], a.dtype), axes=(1, 0))
    return rw.emit(P.matmul, [bt, at], n.outputs[0])


@rule(P.matmul)
def outer_product(n: Node, rw: Rewrite) -> Value | None:
    """a @ b over a contraction of length 1 -> a * b, broadcast (the same products, exactly):
    BLAS spends tens of microseconds setting up a product with nothing to sum, where the
    multiply fuses with what reads it (the weight gradient of a Linear(d, 1) layer, a
    one-key attention's weights times its values)."""
    a, b = n.inputs
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != 1:
        return None
    return rw.emit(P.mul, [a, b], n.outputs[0])


# Non-decreasing in their one array operand, the others constants or scalars (and, for sub,
# the array first), and defined everywhere: the maximum of f(x) is f of the maximum of x.
MONOTONE = {P.maximum, P.minimum, P.add, P.sub, P.tanh, P.sigmoid, P.exp, P.expm1, P.softplus,
            P.erf, P.arctan, P.sinh, P.arcsinh}  # fmt: skip


@rule(P.max_pool2d)
def pool_before_monotone(n: Node, rw: Rewrite) -> Value | None:
    """max_pool2d(f(x)) -> f(max_pool2d(x)) for a non-decreasing elementwise f (MONOTONE): a
    ReLU, a clamp, tanh or a sigmoid before the pooling then runs over a quarter of the values,
    and backward rebuilds the pooled values from x, which the ReLU's gradient keeps anyway,
    without computing f over the whole input again. The indices stay those of f(x)'s maxima."""
    y, idx = n.inputs
    f = rw.producers.get(y)
    if f is None or f.prim not in MONOTONE or len(f.outputs) != 1:
        return None
    arrays = [k for k, v in enumerate(f.inputs) if v.ndim > 0]
    if len(arrays) != 1 or (f.prim is P.sub and arrays != [0]):
        return None
    x = f.inputs[arrays[0]]
    if x.shape != y.shape or x.dtype != y.dtype or x.const is not None:
        return None
    pooled = rw.emit(P.max_pool2d, [x, idx], Value(n.outputs[0].shape, x.dtype), **n.attrs)
    return rw.emit(f.prim, [pooled if v is x else v for v in f.inputs], n.outputs[0], **f.attrs)


@rule(P.max_pool2d_argmax)
def argmax_before_relu(n: Node, rw: Rewrite) -> Value | None:
    """argmax(maximum(a, x)) -> argmax(x), for a ReLU (a constant) whose indices only the
    pooling reads (its value is each window's maximum, whichever index) and the pooling's
    gradient, masked by that ReLU's a >= x and read by nothing else. The two argmaxes differ
    only in windows whose maximum of x is at most a, where the mask zeroes the gradient either
    way. With `pool_before_monotone`, the ReLU's result need not be written at all."""
    relu, idx = _relu(n.inputs[0], rw), n.outputs[0]
    if relu is None or idx in rw.outputs:
        return None
    a, x = relu
    for m in rw.users.get(idx, []):
        if m.prim is not P.max_pool2d and not (
            m.prim is P.max_pool2d_scatter and _only_relu_masked(m.outputs[0], a, x, rw)
        ):
            return None
    return rw.emit(P.max_pool2d_argmax, [x], idx, **n.attrs)


def _only_relu_masked(s: Value, a: Value, x: Value, rw: Rewrite) -> bool:
    """Whether the input graph reads `s` only as where(a >= x, 0, s)."""
    readers = rw.users.get(s, [])
    if len(readers) != 1 or s in rw.outputs:
        return False
    w = readers[0]
    if w.prim is not P.where or w.inputs[2] is not s or not _const_equal(w.inputs[1], 0.0):
        return False
    return any(c.prim is P.greater_equal and c.outputs[0] is w.inputs[0] and c.inputs[1] is x
               and _same_const(c.inputs[0], a) for c in rw.users.get(x, []))  # fmt: skip


@rule(P.where)
def mask_before_scatter(n: Node, rw: Rewrite) -> Value | None:
    """where(a >= x, 0, scatter(g)) -> scatter(where(a >= max_pool2d(x), 0, g)) for the mask
    of a ReLU (maximum(a, x), a constant) that a max-pooling of x or of the ReLU's result
    follows: the pooling's gradient lands only on each window's maximum, so the mask need only
    be taken there, on the pooled pre-activations, which forward computes anyway. The pass over
    the whole pre-activation goes, and so does the reason to keep it until backward.

    Exact where the pooled value is x at the maximum the indices chose; where they chose among
    the ReLU's zeros, x's maximum is at most a, as x there is: both masked. Other masks (a
    clamp's, ties sent to x) would differ at such ties, and a product by a slope must still
    make NaN where the gradient is zero and the slope infinite: both left."""
    cond, zero, s = n.inputs
    out = n.outputs[0]
    scatter = _scattered(s, out, rw)
    c = rw.producers.get(cond)
    if scatter is None or c is None or c.prim is not P.greater_equal or not _const_equal(zero, 0):
        return None
    a, x = c.inputs
    g, idx = scatter.inputs
    if x.shape != out.shape or not _relu_indices(idx, a, x, rw):
        return None
    pool = {key: scatter.attrs[key] for key in ("kernel", "stride", "padding", "dilation")}
    pooled = rw.emit(P.max_pool2d, [x, idx], Value(g.shape, x.dtype), **pool)
    mask = rw.emit(P.greater_equal, [a, pooled], Value(g.shape, cond.dtype))
    masked = rw.emit(P.where, [mask, zero, g], Value(g.shape, out.dtype))
    return rw.emit(P.max_pool2d_scatter, [masked, idx], out, **scatter.attrs)


def _scattered(v: Value, out: Value, rw: Rewrite) -> Node | None:
    """The max-pooling gradient that makes `v`, if nothing else reads it and it is the result's
    shape and dtype."""
    s = rw.producers.get(v)
    if s is None or s.prim is not P.max_pool2d_scatter or rw.reads(v) != 1:
        return None
    return s if (v.shape, v.dtype) == (out.shape, out.dtype) else None


def _relu_indices(idx: Value, a: Value, x: Value, rw: Rewrite) -> bool:
    """Whether `idx` are the maxima of x or of maximum(a, x), for a scalar constant a."""
    argmax = rw.producers.get(idx)
    if argmax is None or argmax.prim is not P.max_pool2d_argmax or a.const is None or a.ndim:
        return False
    relu = _relu(argmax.inputs[0], rw)
    return argmax.inputs[0] is x or (relu is not None and relu[1] is x and _same_const(relu[0], a))


def _relu(v: Value, rw: Rewrite) -> tuple[Value, Value] | None:
    """(a, x) if `v` is maximum(a, x) for a scalar constant a and an x of v's shape: a ReLU
    whose ties give x no gradient."""
    n = rw.producers.get(v)
    if n is None or n.prim is not P.maximum:
        return None
    a, x = n.inputs
    return (a, x) if a.const is not None and not a.ndim and x.shape == v.shape else None


@rule(P.sum)
def sum_of_scatter(n: Node, rw: Rewrite) -> Value | None:
    """The sum of a max-pooling's gradient over each whole image is the sum of what it
    scatters (a bias gradient after `mask_before_scatter`): the windows' values, a quarter of
    the positions."""
    s = rw.producers.get(n.inputs[0])
    if s is None or s.prim is not P.max_pool2d_scatter:
        return None
    ndim = n.inputs[0].ndim
    if not {ndim - 2, ndim - 1} <= {a % ndim for a in n.attrs["axis"]}:
        return None
    return rw.emit(P.sum, [s.inputs[0]], n.outputs[0], **n.attrs)


@rule(P.pow)
def small_power(n: Node, rw: Rewrite) -> Value | None:
    """x ** c for a constant c in POWER_PRODUCTS as products (the eager impl computes the same
    products, so both round alike), x ** 1 as x and x ** 0.5 as sqrt(x). An even power of
    abs(x) is the same power of x (each product's magnitude is the same, and the last one's
    sign is +): a norm's abs(g) ** 2 costs no pass over g for abs."""
    x, c = n.inputs
    out = n.outputs[0]
    if c.const is None or c.const.size != 1 or (x.shape, x.dtype) != (out.shape, out.dtype):
        return None
    exponent = complex(c.const.item())  # a complex base's exponent is complex: 2+0j
    if exponent.imag != 0.0:
        return None
    exponent = exponent.real
    if exponent == 1.0:
        return x
    if exponent == 0.5 and out.dtype.kind == "f":
        return rw.emit(P.sqrt, [x], out)
    steps = POWER_PRODUCTS.get(exponent)
    if steps is None:
        return None
    inner = rw.producers.get(x)
    if inner is not None and inner.prim is P.abs and exponent % 2 == 0 and out.dtype.kind == "f":
        plain = inner.inputs[0]
        x = plain if (plain.shape, plain.dtype) == (out.shape, out.dtype) else x
    values = [x]
    for k, (a, b) in enumerate(steps):
        result = out if k == len(steps) - 1 else Value(out.shape, out.dtype)
        values.append(rw.emit(P.mul, [values[a], values[b]], result))
    return out


@rule(P.add)
def adjacent_slice_gradients(n: Node, rw: Rewrite) -> Value | None:
    """scatter(ga into [i:j] of axis k) + scatter(gb into [j:l]) -> one scatter of their
    concatenation into [i:l], or the concatenation itself when that is the whole axis: the
    gradient of q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2] is one concatenation instead
    of three zero-filled copies of qkv's shape, summed. Also (p + sa) + sb -> p + (sa + sb),
    exact since the two scatters never overlap: a gradient summed over several uses."""
    out = n.outputs[0]
    whole = _whole_axis(n, out, rw)
    if whole is not None:
        return whole
    a, b = (_slab(rw.producers.get(v), out, rw) for v in n.inputs)
    if a is not None and b is not None:
        return _join_slabs(a, b, out, rw)
    for inner, slab in ((n.inputs[0], b), (n.inputs[1], a)):
        add = rw.producers.get(inner)
        if slab is None or add is None or add.prim is not P.add or rw.reads(inner) != 1:
            continue
        for rest, v in (add.inputs, add.inputs[::-1]):
            found = _slab(rw.producers.get(v), out, rw)
            if found is not None and rest.shape == out.shape:
                joined = _join_slabs(found, slab, Value(out.shape, out.dtype), rw)
                if joined is not None:
                    return rw.emit(P.add, [rest, joined], out)
    return None


def _whole_axis(n: Node, out: Value, rw: Rewrite) -> Value | None:
    """A sum (through adds read only by it) of three or more scatters that tile one axis
    whole, in any order: the concatenation of their gradients (the gradient of x.chunk(4),
    summed as its parts arrive, where joining them two at a time finds no adjacent pair)."""
    leaves, stack = [], list(n.inputs)
    while stack:
        v = stack.pop()
        add = rw.producers.get(v)
        if (
            add is not None
            and add.prim is P.add
            and rw.reads(v, 1) == 1
            and all(u.shape == out.shape and u.dtype == out.dtype for u in add.inputs)
        ):
            stack += add.inputs
        else:
            leaves.append(v)
    slabs = sorted((_slab(rw.producers.get(v), out, rw) for v in leaves),
                   key=lambda p: (-1, -1) if p is None else p[:2])  # fmt: skip
    if len(slabs) < 3 or slabs[0] is None or {p[0] for p in slabs} != {slabs[0][0]}:
        return None
    axis, bounds = slabs[0][0], [0] + [p[2] for p in slabs]
    if [p[1] for p in slabs] != bounds[:-1] or bounds[-1] != out.shape[axis]:
        return None
    parts = _parts(slabs, axis, out, rw)
    tiled = _tiled(parts, axis, out, rw)
    return tiled if tiled is not None else rw.emit(P.concatenate, parts, out, axis=axis)


def _parts(slabs: list[tuple], axis: int, out: Value, rw: Rewrite) -> list[Value]:
    """The slabs' gradients as the parts of a concatenation along `axis` (an index's given
    the axis back); a gradient joined before is a concatenation: its parts, one copy, not two."""
    grads = [
        rw.emit(P.reshape, [g], Value(shape, g.dtype), shape=shape) if g.shape != shape else g
        for _, start, stop, g in slabs
        for shape in [out.shape[:axis] + (stop - start,) + out.shape[axis + 1 :]]
    ]
    parts = []
    for g in grads:
        inner = rw.producers.get(g)
        joined_before = inner is not None and inner.prim is P.concatenate
        if joined_before and inner.attrs["axis"] == axis and rw.reads(g, 1) == 1:
            parts += inner.inputs
        else:
            parts.append(g)
    return parts


def _join_slabs(a: tuple, b: tuple, out: Value, rw: Rewrite) -> Value | None:
    first, second = sorted((a, b), key=lambda p: p[1])
    axis = first[0]
    if second[0] != axis or first[2] != second[1]:
        return None
    start, stop = first[1], second[2]
    shape = out.shape[:axis] + (stop - start,) + out.shape[axis + 1 :]
    whole = (start, stop) == (0, out.shape[axis])
    parts = _parts([first, second], axis, out, rw)
    if whole:
        tiled = _tiled(parts, axis, out, rw)
        return tiled if tiled is not None else rw.emit(P.concatenate, parts, out, axis=axis)
    joined = rw.emit(P.concatenate, parts, Value(shape, out.dtype), axis=axis)
    template = (slice(None),) * axis + (slice(start, stop),)
    return rw.emit(P.scatter_add, [joined], out, shape=out.shape, template=template)


def _tiled(parts: list[Value], axis: int, out: Value, rw: Rewrite) -> Value | None:
    """The concatenation of `parts` along `axis` as a view of the one buffer they are views of,
    when they lie in it, in order, as that concatenation would (an op that writes q's, k's and
    v's gradients interleaved, `core.ops.attention.unpack`): then nothing need be copied. Found by
    replaying each part's views on a probe with the buffer's strides and no memory of its own
    (views never read their data; a reshape that would copy stops the replay)."""
    made = {v: e for e in rw.emitted for v in e.outputs}
    chains = [_view_chain(p, lambda v: made.get(v) or rw.producers.get(v)) for p in parts]
    base = chains[0][0]
    if any(b is not base for b, _ in chains) or (base.size, base.dtype) != (out.size, out.dtype):
        return None
    strides = np.cumprod((1, *base.shape[:0:-1]))[::-1] * base.dtype.itemsize
    probe = np.lib.stride_tricks.as_strided(np.empty(1, base.dtype), base.shape, strides)
    try:
        whole, start = np.reshape(probe, out.shape, copy=False), 0
        for (_, nodes), part in zip(chains, parts, strict=True):
            view = probe
            for n in nodes:
                view = (np.reshape(view, n.attrs["shape"], copy=False) if n.prim is P.reshape
                        else n.prim.impl(view, **n.attrs))  # fmt: skip
            index = (slice(None),) * axis + (slice(start, start + part.shape[axis]),)
            if not _same_place(view, whole[index]):
                return None
            start += part.shape[axis]
    except ValueError:  # a reshape that copies
        return None
    return base if base.shape == out.shape else rw.emit(P.reshape, [base], out, shape=out.shape)


def _view_chain(v: Value, producer: Callable) -> tuple[Value, list[Node]]:
    """The value `v` is a view of through single-input view nodes, and those nodes in order."""
    nodes = []
    while (n := producer(v)) is not None and len(n.inputs) == 1 and is_view(n):
        nodes.append(n)
        v = n.inputs[0]
    return v, nodes[::-1]


def _same_place(a: np.ndarray, b: np.ndarray) -> bool:
    """Two views of one buffer address the same elements in the same order."""
    if a.shape != b.shape:
        return False
    where = lambda x: x.__array_interface__["data"][0]  # noqa: E731
    steps = lambda x: [s for n, s in zip(x.shape, x.strides, strict=True) if n > 1]  # noqa: E731
    return a.size == 0 or (where(a) == where(b) and steps(a) == steps(b))


def _slab(n: Node | None, out: Value, rw: Rewrite) -> tuple[int, int, int, Value] | None:
    """(axis, start, stop, gradient) of a scatter of one gradient into out's zeros at one
    index or step-1 slice of one axis, read by nothing else; else None."""
    if n is None or n.prim is not P.scatter_add or len(n.inputs) != 1:
        return None
    g, template, made = n.inputs[0], n.attrs["template"], n.outputs[0]
    if (made.shape, made.dtype) != (out.shape, out.dtype) or rw.reads(made, 1) > 1:
        return None
    ellipses = [k for k, t in enumerate(template) if t is Ellipsis]
    if len(ellipses) == 1:  # x[..., i:j]: the slice is of the last axes
        at = ellipses[0]
        fill = (slice(None),) * (out.ndim - len(template) + 1)
        template = template[:at] + fill + template[at + 1 :]
    narrowed = [(k, t) for k, t in enumerate(template) if t != slice(None)]
    if len(narrowed) != 1 or len(template) > out.ndim:
        return None
    axis, t = narrowed[0]
    size = out.shape[axis]
    if isinstance(t, int | np.integer) and not isinstance(t, bool) and -size <= t < size:
        start = int(t) % size
        return axis, start, start + 1, g
    if isinstance(t, slice) and t.step in (None, 1):
        start, stop, _ = t.indices(size)
        return (axis, start, stop, g) if start < stop else None
    return None


def simplify(graph: Graph) -> tuple[Graph, PassStats]:
    """Apply the rules over the graph, in order (those for every op first); rewritten nodes
    feed later rules, and the nodes a rule emits go through the rules themselves (a power
    moved before a reshape becomes products)."""
    rw = Rewrite({}, graph.users(), set(graph.outputs))
    alias: dict[Value, Value] = {}
    nodes: list[Node] = []
    for n in graph.copy().nodes:
        n.inputs = [alias.get(v, v) for v in n.inputs]
        _rewrite(n, rw, alias, nodes, EMITTED_DEPTH)
    after = substitute(Graph(graph.inputs, nodes, graph.outputs), alias)
    return after, stats("simplify", graph, after)


EMITTED_DEPTH = 3  # how many times the nodes a rule emits are rewritten again


def _rewrite(n: Node, rw: Rewrite, alias: dict, nodes: list[Node], depth: int) -> None:
    """Append `n`, or what the first rule that fires on it emits (each rewritten in turn)."""
    rw.node, rw.emitted = n, []
    rules = RULES.get(None, []) + RULES.get(n.prim, [])
    new = next((v for v in (r(n, rw) for r in rules) if v is not None), None)
    if new is not None and new is not n.outputs[0]:
        alias[n.outputs[0]] = new
    for e in [n] if new is None else list(rw.emitted):
        if e is n or depth == 0:
            nodes.append(e)
            rw.producers.update((v, e) for v in e.outputs)
        else:
            e.inputs = [alias.get(v, v) for v in e.inputs]
            _rewrite(e, rw, alias, nodes, depth - 1)
