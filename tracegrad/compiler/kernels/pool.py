"""Max-pooling kernels: the windows' argmax (`positions`) and `maxima`, the `scatter` of the
gradient to the maxima and its VJP, the `gather`. `core.ops.pooling` has the NumPy versions
and the contract (ties, NaN, padding).

Each kernel is generated for one geometry (kernel, stride, padding, dilation) and dtype, its
loops over the window's taps with constant bounds and offsets: LLVM unrolls them and, in a
parallel kernel (`PARALLEL_MIN`), vectorizes the loop over a row of windows. With the geometry
as arguments the bounds are unknown to LLVM, which then neither unrolls nor vectorizes; taps
written out one by one run as fast as the loops, but their compile time grows with the window
(docs/kernels.md has both). The arrays are seen as (planes, H, W); windows that reach into the
padding run a second body that checks each tap. The scatter writes each element once where
windows do not overlap (the maximum's tap gets the value, the others zero; the plane is zeroed
first only if the windows leave gaps), else it zeroes the plane and adds.

Kernels are cached like the fused ones (`KernelCache`: a generated module per key, Numba's
cache beside it); the key is a hash of the source, which holds geometry, dtypes and threading.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels.cache import GeneratedKernel, named
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node
from tracegrad.core.ops import pooling

OPS = {  # the op of each primitive, and its kernel's arrays (inputs, then outputs)
    P.max_pool2d_argmax: ("positions", ("x", "idx")),
    P.max_pool2d: ("maxima", ("x", "idx", "out")),
    P.max_pool2d_gather: ("gather", ("x", "idx", "out")),
    P.max_pool2d_scatter: ("scatter", ("g", "idx", "gx")),
}
DTYPES = ("float32", "float64")
# a kernel at any size (`lowering`): the NumPy versions are a pass per tap, whose fixed cost
# alone is many times a small kernel's call
KERNEL_MIN = 0
GEOMETRY = ("kernel", "stride", "padding", "dilation")
# No fastmath flags: they would not speed up comparisons and selects, and "nnan" would drop
# NaN propagation.
_DECORATOR = '@njit("{signature}", parallel={parallel}, error_model="numpy", cache=True)'

# Kernels over at least PARALLEL_MIN elements run a `prange` over the planes (None: never). Not
# for the threads alone: Numba marks a parallel loop's arrays as not aliasing one another, and
# only then does LLVM vectorize the row of windows (their strided loads beside the stores of
# `idx` and `out`); serial, every kernel here stayed scalar (docs/kernels.md).
PARALLEL_MIN: int | None = 1 << 17


class PoolKernel(GeneratedKernel):
    """`kernel(*input_arrays, *output_arrays)` for one node: the arrays seen as (planes, H, W),
    inputs made C-contiguous, outputs written in place (they must be C-contiguous)."""

    def __init__(self, compiled: Callable, path: Path, n_inputs: int):
        super().__init__(compiled, path)
        self.n_inputs = n_inputs

    def __call__(self, *arrays: np.ndarray) -> None:
        views = []
        for k, a in enumerate(arrays):
            if k < self.n_inputs:
                a = np.ascontiguousarray(a)
            elif not a.flags.c_contiguous:
                raise ValueError("pooling kernels write C-contiguous outputs")
            views.append(a.reshape(-1, *a.shape[-2:]))
        self.compiled(*views)


def module(node: Node) -> tuple[str, str]:
    """The name and text of the module of a max-pooling node's kernel; NotImplementedError for
    dtypes other than float32 and float64, and for constant operands. An argmax node with a
    second result (`lowering`'s pairing) writes the maxima there too."""
    op, _ = OPS[node.prim]
    values, idx = node.inputs[0], node.outputs[0] if op == "positions" else node.inputs[1]
    if values.dtype.name not in DTYPES or any(v.const is not None for v in node.inputs):
        raise NotImplementedError(f"max-pooling kernels for {values.dtype} or constants")
    elements = max(v.size for v in (*node.inputs, *node.outputs))
    parallel = PARALLEL_MIN is not None and elements >= PARALLEL_MIN
    parallel = parallel and numba.config.NUMBA_NUM_THREADS > 1
    geometry = tuple(tuple(int(a) for a in node.attrs[k]) for k in GEOMETRY)
    maxima = len(node.outputs) == 2
    source = generate_source(node.prim, values.dtype.name, idx.dtype.name, geometry, parallel,
                             maxima)  # fmt: skip
    return named("pool", source)


def launcher(node: Node, compiled: Callable, path: Path) -> PoolKernel:
    return PoolKernel(compiled, path, len(node.inputs))


# --- code generation ---------------------------------------------------------------------------


def generate_source(
    prim: P.Primitive,
    dtype: str,
    index: str,
    geometry: tuple,
    parallel: bool,
    maxima: bool = False,
) -> str:
    """The text of a kernel's module; its docstring says what it computes. `maxima`: the argmax
    kernel writes the maxima too, into a third array."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    op, arrays = OPS[prim]
    arrays = (*arrays, "out") if maxima else arrays
    types = [index if a == "idx" else dtype for a in arrays]
    signature = f"void({', '.join(f'{t}[:, :, ::1]' for t in types)})"
    planes, windows = ("gx", "g") if op == "scatter" else ("x", "idx")
    lines = [
        f"def kernel({', '.join(arrays)}):",
        f"    n, h, w = {planes}.shape",
        f"    oh, ow = {windows}.shape[1], {windows}.shape[2]",
    ]
    if ph or pw:  # the windows of a row whose column taps are all inside: ox in [lo, hi)
        last = (kw - 1) * dw
        lines += [
            f"    lo = min({-(-pw // sw)}, ow)",
            f"    hi = max(lo, min(ow, (w - 1 + {pw} - {last}) // {sw} + 1))",
        ]
    lines.append(f"    for b in {'prange' if parallel else 'range'}(n):")
    positions = functools.partial(_positions, maxima=maxima)
    body = {"positions": positions, "maxima": _maxima, "gather": _gather, "scatter": _scatter}
    lines += [f"        {line}" for line in body[op](geometry, dtype)]
    threads = "parallel" if parallel else "one thread"
    what = f"{op} and maxima" if maxima else op
    doc = (
        f"max-pooling {what} ({dtype}, indices {index}): kernel {(kh, kw)}, stride {(sh, sw)}, "
        f"padding {(ph, pw)}, dilation {(dh, dw)}; {threads}"
    )
    head = f'"""{doc}."""\n\nimport numpy as np\nfrom numba import njit, prange\n\n\n'
    decorator = _DECORATOR.format(signature=signature, parallel=parallel)
    return head + decorator + "\n" + "\n".join(lines) + "\n"


def _rows(geometry, fast: list[str], checked: list[str]) -> list[str]:
    """The loops over windows: the fast body where a window lies inside the input, the checked
    one where it reaches into the padding."""
    (kh, _), (sh, _), (ph, pw), (dh, _) = geometry
    lines = ["for oy in range(oh):", f"    y0 = oy * {sh} - {ph}"]
    if not (ph or pw) or fast == checked:
        return lines + _columns("0", "ow", fast, geometry, 1)
    lines.append(f"    if y0 >= 0 and y0 + {(kh - 1) * dh} < h:")
    lines += _columns("0", "lo", checked, geometry, 2)
    lines += _columns("lo", "hi", fast, geometry, 2)
    lines += _columns("hi", "ow", checked, geometry, 2)
    lines.append("    else:")
    return lines + _columns("0", "ow", checked, geometry, 2)


def _columns(lo: str, hi: str, body: list[str], geometry, depth: int) -> list[str]:
    (_, sw), (_, pw) = geometry[1], geometry[2]
    pad = "    " * depth
    lines = [f"{pad}for ox in range({lo}, {hi}):", f"{pad}    x0 = ox * {sw} - {pw}"]
    return lines + [f"{pad}    {line}" for line in body]


def _taps(geometry, body: list[str], checked: bool = False, backwards: bool = False) -> list[str]:
    """`body` for each tap of the window, its position (y, x) and number t: loops with
    constant bounds, which LLVM unrolls (as fast here as taps written out one by one, and far
    quicker to compile for large windows). `checked`: only the taps inside the input;
    `backwards`: the last tap first."""
    (kh, kw), _, _, (dh, dw) = geometry
    rows, columns = (f"{kh - 1}, -1, -1", f"{kw - 1}, -1, -1") if backwards else (kh, kw)
    lines = [f"for i in range({rows}):", f"    y = y0 + i * {dh}"]
    inner = [f"for j in range({columns}):", f"    xx = x0 + j * {dw}", f"    t = i * {kw} + j"]
    if checked:
        lines.append("    if y >= 0 and y < h:")
        inner.append("    if xx >= 0 and xx < w:")
    depth = "        " if checked else "    "
    body = [f"    {'    ' if checked else ''}{line}" for line in body]
    return lines + [f"{depth}{line}" for line in inner + body]


# A window's running maximum as a select (`|`, not `or`: no branch), NaN winning.
_MAXIMUM = ["v = x[b, y, xx]", "m = v if (v > m) | (v != v) else m"]


def _positions(geometry, dtype, maxima: bool = False) -> list[str]:
    """The first maximum in row-major order; a NaN wins, the last NaN of the window (PyTorch);
    a window reaching into the padding starts from its first tap inside the input. A window
    inside the input takes three sweeps of selects, no branches: its maximum as `_maxima`'s,
    the first tap equal to it, the last NaN; one sweep carrying the tap beside the maximum, or
    branches that follow the data, kept the loop scalar (docs/kernels.md). With `maxima`, the
    maximum found is stored too: `_maxima`'s value, without its pass over x."""
    first = ["k = t if x[b, y, xx] == m else k"]
    last_nan = ["v = x[b, y, xx]", "k = t if v != v else k"]
    store = ["idx[b, oy, ox] = k", *(["out[b, oy, ox] = m"] if maxima else [])]
    fast = ["m = x[b, y0, x0]", *_taps(geometry, _MAXIMUM), "k = 0",
            *_taps(geometry, first, backwards=True), *_taps(geometry, last_nan),
            *store]  # fmt: skip
    update = ["v = x[b, y, xx]", "if k < 0 or v > m or v != v:", "    m = v", "    k = t"]
    checked = ["m = x[b, 0, 0]", "k = -1", *_taps(geometry, update, True), *store]
    return _rows(geometry, fast, checked)


def _maxima(geometry, dtype) -> list[str]:
    """The window's maximum (NaN propagates); `idx` is not read."""
    fast = ["m = x[b, y0, x0]", *_taps(geometry, _MAXIMUM), "out[b, oy, ox] = m"]
    update = ["v = x[b, y, xx]", "if first or v > m or v != v:", "    m = v", "    first = False"]
    checked = ["m = x[b, 0, 0]", "first = True", *_taps(geometry, update, True)]
    return _rows(geometry, fast, [*checked, "out[b, oy, ox] = m"])


def _tap_offsets(geometry) -> list[str]:
    """The position (y, x) of the window's tap `idx[b, oy, ox]`."""
    (_, kw), _, _, (dh, dw) = geometry
    return ["t = np.int64(idx[b, oy, ox])", f"i = t // {kw}", f"y = y0 + i * {dh}",
            f"xx = x0 + (t - i * {kw}) * {dw}"]  # fmt: skip


def _gather(geometry, dtype) -> list[str]:
    body = [*_tap_offsets(geometry), "out[b, oy, ox] = x[b, y, xx]"]
    return _rows(geometry, body, body)


def _scatter(geometry, dtype) -> list[str]:
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = geometry
    overlapping = pooling.overlapping((kh, kw), (sh, sw), (dh, dw))
    zero = ["for y in range(h):", "    for xx in range(w):", "        gx[b, y, xx] = 0"]
    if overlapping or ph or pw or (dh, dw) != (1, 1) or (sh, sw) != (kh, kw):
        lines = zero
    else:  # the windows tile the plane, but for a last row or column left over
        lines = [f"if oh * {sh} != h or ow * {sw} != w:", *(f"    {z}" for z in zero)]
    add = [*_tap_offsets(geometry), "gx[b, y, xx] += g[b, oy, ox]"]
    if overlapping:
        return lines + _rows(geometry, add, add)
    write = ["k = idx[b, oy, ox]", "v = g[b, oy, ox]", f"z = np.{dtype}(0)"]  # not v * 0: inf
    if not (ph or pw):  # each row of gx in turn, its windows' taps of that row in order
        return lines + _rows_of_taps(geometry, write, "gx[b, y, xx] = v if k == t else z")
    write += _taps(geometry, ["gx[b, y, xx] = v if k == t else z"])
    return lines + _rows(geometry, write, add)


def _rows_of_taps(geometry, window: list[str], tap: str) -> list[str]:
    """Windows inside the input, a window row of taps at a time: `window` per window, `tap` per
    tap. A scatter that wrote each window's taps in turn alternated between rows of its output,
    which kept LLVM from vectorizing it (docs/kernels.md)."""
    (kh, kw), (sh, sw), _, (dh, dw) = geometry
    return ["for oy in range(oh):", f"    y0 = oy * {sh}", f"    for i in range({kh}):",
            f"        y = y0 + i * {dh}", "        for ox in range(ow):",
            f"            x0 = ox * {sw}", *(f"            {line}" for line in window),
            f"            for j in range({kw}):", f"                xx = x0 + j * {dw}",
            f"                t = i * {kw} + j", f"                {tap}"]  # fmt: skip
