"""Softmax cross-entropy and log-softmax kernels: forward and backward each one sweep over the
rows of logits (`core.ops.losses` has the NumPy versions and the contract), where the op's parts
are a score of small statements a step.

A row's maximum (where finite, else 0, as the parts' guard) and its sum of exps, then forward
the row's loss, (log(sum) - (x[label] - max)) * w, w the label's weight (0 where ignored), and
backward exp(x - max) * coef / sum less coef at the label, coef the row's share of the
cotangent (g w, over the total weight for the mean). Blocks of rows in parallel; the losses'
and weights' totals summed in row order after. Modules per dtype and reduction; the class
weights are an array of ones where the op has none.

Log-softmax over the last axis (eagerly one op; a trace records its parts): forward writes
(x - max) - log(sum), backward g - exp(out) * sum(g), rows in parallel; the composed ops made
about ten passes over a language model's (tokens x vocabulary) scores, forward and back. Every
row's sums run in SIMD lanes (`rows._reduce`): a language model's rows are its vocabulary, and a
sum of exps in IEEE order keeps a row of thousands of classes to one lane.

Softmax over the last axis likewise (attention written by hand, `F.softmax(scores, -1)`):
forward exp(x - max) / sum, each exp written as it is summed and divided while the row is in
the cache, backward y (g - sum(g y)), one sweep each where NumPy's versions make five passes and
three."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import rows
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.fused import threaded
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node
from tracegrad.core.ops import losses

OPS = {P.cross_entropy: "loss", P.cross_entropy_grad: "grad", P.log_softmax: "log-softmax",
       P.log_softmax_grad: "log-softmax grad", P.softmax: "softmax forward",
       P.softmax_grad: "softmax grad"}  # fmt: skip
BY_ROWS = (P.log_softmax, P.log_softmax_grad, P.softmax, P.softmax_grad)  # kernels see rows
DTYPES = ("float32", "float64")
KERNEL_MIN = 0  # the NumPy versions are a score of calls whatever the size (`lowering`)

_SHIFT = '''

@_inner
def shift(x):
    """The row's maximum where finite, else 0 (the parts' guard): a NaN still reaches every
    result through the exps that follow."""
    m = row_max(x, x.size)
    return m if abs(m) < np.inf else T(0)
'''

_EXP_SUM = '''

@_reduce
def exp_sum(x, m):
    """The row's sum of exp(x - m), in SIMD lanes."""
    total = T(0)
    for j in range(x.size):
        total += exp(x[j] - m)
    return total
'''


_EXP_INTO = '''

@_reduce
def exp_into(x, m, d):
    """d = exp(x - m), returning its sum, in SIMD lanes: the row's exps once, scaled after
    while the row is in the cache."""
    total = T(0)
    for j in range(x.size):
        e = exp(x[j] - m)
        d[j] = e
        total += e
    return total
'''

_HELPERS = (
    _SHIFT
    + _EXP_SUM
    + '''

@_inner
def shift_and_sum(x):
    """The row's shift and its sum of exp(x - shift)."""
    m = shift(x)
    return m, exp_sum(x, m)


@_inner
def weights(labels, weight, ignore, w):
    for i in range(labels.size):
        w[i] = T(0) if labels[i] == ignore else weight[labels[i]]
'''
)

_FORWARD = """

@_inner
def losses(x, labels, ignore, w, out, lo, hi):
    for i in range(lo, hi):
        m, total = shift_and_sum(x[i])
        y = 0 if labels[i] == ignore else labels[i]
        out[i] = -(((x[i, y] - m) - np.log(total)) * w[i])


@_outer
def kernel(x, labels, weight, ignore, out):
    n = x.shape[0]
    w, each = np.empty(n, T), np.empty(n, T)
    weights(labels, weight, ignore, w)
    blocks = min(n, {blocks})
    for k in prange(blocks):
        losses(x, labels, ignore, w, each, k * n // blocks, (k + 1) * n // blocks)
    if {reduction} == 0:  # none
        out[:] = each
        return
    total = T(0)
    for i in range(n):
        total += each[i]
    if {reduction} == 1:  # sum
        out[0] = total
        return
    counted = T(0)
    for i in range(n):
        counted += w[i]
    out[0] = np.nan if counted == 0 else total / counted
"""

_BACKWARD = """


@_inner
def gradients(x, labels, ignore, coef, dx, lo, hi):
    for i in range(lo, hi):
        xi, di = x[i], dx[i]
        share = coef[i] / exp_into(xi, shift(xi), di)
        for j in range(xi.size):
            di[j] *= share
        if labels[i] != ignore:
            di[labels[i]] -= coef[i]


@_outer
def kernel(g, x, labels, weight, ignore, dx):
    n = x.shape[0]
    coef = np.empty(n, T)
    weights(labels, weight, ignore, coef)
    scale = T(1)
    if {reduction} == 2:  # mean
        counted = T(0)
        for i in range(n):
            counted += coef[i]
        scale = T(0) if counted == 0 else T(1) / counted
    for i in range(n):
        coef[i] *= g[i if {reduction} == 0 else 0] * scale
    blocks = min(n, {blocks})
    for k in prange(blocks):
        gradients(x, labels, ignore, coef, dx, k * n // blocks, (k + 1) * n // blocks)
"""


# A row kernel's `rows` over blocks of rows on the threads: of x into out (forward), or of the
# cotangent and the forward's result into dx (backward)
_FORWARD_ROWS = """


@_outer
def kernel(x, out):
    n = x.shape[0]
    blocks = min(n, {blocks})
    for k in prange(blocks):
        rows(x, out, k * n // blocks, (k + 1) * n // blocks)
"""

_BACKWARD_ROWS = """


@_outer
def kernel(g, y, dx):
    n = g.shape[0]
    blocks = min(n, {blocks})
    for k in prange(blocks):
        rows(g, y, dx, k * n // blocks, (k + 1) * n // blocks)
"""

_LOG_SOFTMAX = """

@_inner
def rows(x, out, lo, hi):
    for i in range(lo, hi):
        xi, o = x[i], out[i]
        m = shift(xi)
        lse = np.log(exp_sum(xi, m))
        for j in range(xi.size):
            o[j] = (xi[j] - m) - lse"""

_LOG_SOFTMAX_GRAD = """

@_inner
def rows(g, y, dx, lo, hi):
    for i in range(lo, hi):
        gi, yi, di = g[i], y[i], dx[i]
        total = row_sum(gi, gi.size)
        for j in range(gi.size):
            di[j] = gi[j] - exp(yi[j]) * total"""


_SOFTMAX = """

@_inner
def rows(x, out, lo, hi):
    for i in range(lo, hi):
        xi, o = x[i], out[i]
        total = exp_into(xi, shift(xi), o)
        for j in range(xi.size):
            o[j] /= total"""

_SOFTMAX_GRAD = """

@_inner
def rows(g, y, dx, lo, hi):
    for i in range(lo, hi):
        gi, yi, di = g[i], y[i], dx[i]
        total = row_dot(gi, yi)
        for j in range(gi.size):
            di[j] = yi[j] * (gi[j] - total)"""


def generate_source(op: str, dtype: str, reduction: str = "", parallel: bool = True) -> str:
    """The text of a kernel's module (`reduction`: a cross-entropy's); its blocks of rows on
    several threads if `parallel`."""
    matrix, vector = f"{dtype}[:, ::1]", f"{dtype}[::1]"
    if op == "loss":  # x, labels, weight, ignore_index, out (1 or n losses)
        title = f"Softmax cross-entropy loss, reduction {reduction}"
        arrays, body = [matrix, "int64[::1]", vector, "int64", vector], _HELPERS + _FORWARD
    elif op == "grad":  # g (1 or n), x, labels, weight, ignore_index, dx
        title = f"Softmax cross-entropy grad, reduction {reduction}"
        arrays = [vector, matrix, "int64[::1]", vector, "int64", matrix]
        body = _HELPERS + _EXP_INTO + _BACKWARD
    elif op == "log-softmax":  # x, out
        title, arrays = "Log-softmax forward", [matrix] * 2
        body = _SHIFT + _EXP_SUM + _LOG_SOFTMAX + _FORWARD_ROWS
    elif op == "softmax forward":
        title, arrays = "Softmax forward", [matrix] * 2
        body = _SHIFT + _EXP_INTO + _SOFTMAX + _FORWARD_ROWS
    elif op == "softmax grad":
        title, arrays, body = "Softmax backward", [matrix] * 3, _SOFTMAX_GRAD + _BACKWARD_ROWS
    else:  # g, the forward's result, dx
        title, arrays = "Log-softmax backward", [matrix] * 3
        body = _LOG_SOFTMAX_GRAD + _BACKWARD_ROWS
    body = body.replace("{blocks}", str(4 * numba.config.NUMBA_NUM_THREADS))
    if reduction:
        body = body.replace("{reduction}", str(losses.REDUCTIONS.index(reduction)))
    head = rows.head(title, "tracegrad.compiler.kernels.cross_entropy", dtype,
                     f"void({', '.join(arrays)})", parallel)  # fmt: skip
    return head + body


def module(node: Node) -> tuple[str, str]:
    """The name and text of a cross-entropy or (log-)softmax node's kernel module;
    NotImplementedError for other dtypes and labels, and a (log-)softmax but over the last axis."""
    x = node.inputs[1 if node.prim is P.cross_entropy_grad else 0]  # the scores, or their like
    dtype, parallel = x.dtype.name, threaded(x.size)
    if node.prim in BY_ROWS:
        dtype = node.outputs[0].dtype.name
        same = all(v.dtype.name == dtype for v in node.inputs)
        last = node.attrs["axis"] in ((x.ndim - 1,), (-1,)) and x.ndim
        if dtype not in DTYPES or not same or not last:
            raise NotImplementedError(f"{OPS[node.prim]} kernels for {dtype} over "
                                      f"{node.attrs['axis']}")  # fmt: skip
        return named("xent", generate_source(OPS[node.prim], dtype, parallel=parallel))
    labels = node.inputs[2 if node.prim is P.cross_entropy_grad else 1]
    same = all(v.dtype.name == dtype for v in node.inputs if v is not labels)
    if dtype not in DTYPES or labels.dtype != np.int64 or not same:
        raise NotImplementedError(f"cross-entropy kernels for {dtype} and {labels.dtype} labels")
    source = generate_source(OPS[node.prim], dtype, node.attrs["reduction"], parallel)
    return named("xent", source)


def scratch(node: Node) -> int:
    """The bytes of the per-row weights and losses a call holds (none for a (log-)softmax)."""
    if node.prim in BY_ROWS:
        return 0
    x = node.inputs[1 if node.prim is P.cross_entropy_grad else 0]
    return 2 * x.shape[0] * x.dtype.itemsize


class CrossEntropyKernel(GeneratedKernel):
    """`kernel(x, labels, [weight], out)` or `kernel(g, x, labels, [weight], dx)`."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.ignore = int(node.attrs["ignore_index"])
        self.backward = node.prim is P.cross_entropy_grad

    def __call__(self, *arrays: np.ndarray) -> None:
        *ins, out = arrays
        if not out.flags.c_contiguous:
            raise ValueError(f"cross-entropy kernels write C-contiguous results, not {out.strides}")
        g, (x, labels, *weight) = (ins[0], ins[1:]) if self.backward else (None, ins)
        x, labels = in_c_order(x), in_c_order(labels)
        weight = in_c_order(weight[0]) if weight else np.ones(x.shape[1], x.dtype)
        if self.backward:
            self.compiled(in_c_order(np.reshape(g, -1)), x, labels, weight, self.ignore, out)
        else:
            self.compiled(x, labels, weight, self.ignore, out.reshape(-1))


class LogSoftmaxKernel(GeneratedKernel):
    """`kernel(x, out)` or `kernel(g, out_of_forward, dx)` of a log-softmax or a softmax, arrays
    seen as rows."""

    def __call__(self, *arrays: np.ndarray) -> None:
        *ins, out = arrays
        if not out.flags.c_contiguous:
            raise ValueError(f"log-softmax kernels write C-contiguous results, not {out.strides}")
        width = out.shape[-1]
        self.compiled(*(in_c_order(a).reshape(-1, width) for a in ins), out.reshape(-1, width))


def launcher(node: Node, compiled: Callable, path: Path) -> GeneratedKernel:
    if node.prim in BY_ROWS:
        return LogSoftmaxKernel(compiled, path)
    return CrossEntropyKernel(node, compiled, path)
