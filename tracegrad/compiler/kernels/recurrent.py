"""Recurrent layers' scans (LSTM's and GRU's), forward and backward, on Numba's threads
(`core.ops.recurrent` has the NumPy versions and the contract): eagerly, `nn.LSTM` and `nn.GRU`
are then one native call each way, as PyTorch's are.

Each step's product h W_hh^T runs through the plan's GEMM routine (`gemm.declarations`), its
columns in shares, one per thread; the gates' math then runs over the batch's rows in parallel,
writing the activated gates (and an LSTM's cell state, a GRU's hid_n) into the result's
workspace. The NumPy versions' products go to NumPy's BLAS, whose threads sleep between eager
calls and woke at every step. Backward reads the gates from the workspace and runs the
cotangents step by step (their math by rows, the product of the gates' cotangents and W_hh by
columns), then W_hh's gradient in one product. The weight is read as W_hh, (G H, H)
C-contiguous (what `weight_hh` is)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numba
import numpy as np

from tracegrad.compiler.kernels import fastmath, team
from tracegrad.compiler.kernels.blas import gemm_symbols
from tracegrad.compiler.kernels.cache import GeneratedKernel, in_c_order, named
from tracegrad.compiler.kernels.fused import GENERATOR_VERSION
from tracegrad.compiler.kernels.gemm import SERIAL_MAX, declarations
from tracegrad.core import primitives as P
from tracegrad.core.ir import Node
from tracegrad.core.ops.recurrent import GRU_WORKSPACE, LSTM_WORKSPACE, unpack, workspace

OPS = {P.lstm_scan: "lstm forward", P.lstm_scan_grad: "lstm backward",
       P.gru_scan: "gru forward", P.gru_scan_grad: "gru backward"}  # fmt: skip
DTYPES = ("float32", "float64")
# a kernel at any size (`lowering`): the NumPy versions are a loop of calls per step, whatever
# the scan's size (a decoder's one-step scans: hundreds a plan)
KERNEL_MIN = 0

_HEAD = '''"""A scan's {op} ({dtype}): compiler.kernels.recurrent generated it."""

# scalar math {version}

import numpy as np
from numba import njit, prange

from tracegrad.compiler.kernels.scalar import sigmoid, tanh
{declarations}
D = np.{dtype}
SIZE = np.dtype(D).itemsize
_inner = njit(fastmath={flags}, error_model="numpy", cache=True)
_parallel = njit(fastmath={flags}, error_model="numpy", parallel=True, cache=True)


@_inner
def product(a, ta, lda, b, tb, ldb, c, ldc, m, n, k, threads):
    """c (m x n) = a (m x k) @ b (k x n), each read as laid out (`ta`, `tb`: AS_IS or
    TRANSPOSED) at the given addresses, c's columns in `threads` shares (one: on this thread,
    not waking the others)."""
    if threads == 1:
        gemm(ROW_MAJOR, ta, tb, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc)
    else:
        shared_product(a, ta, lda, b, tb, ldb, c, ldc, m, n, k, threads)


@_parallel
def shared_product(a, ta, lda, b, tb, ldb, c, ldc, m, n, k, threads):
    share = -(-n // threads)
    for part in prange(threads):
        lo, hi = part * share, min(n, (part + 1) * share)
        if hi > lo:
            at = lo if tb == AS_IS else lo * ldb
            gemm(ROW_MAJOR, ta, tb, m, hi - lo, k, T(1), a, lda, b + at * SIZE, ldb, T(0),
                 c + lo * SIZE, ldc)


@_inner
def step_of(s, steps, reverse):
    return steps - 1 - s if reverse else s


@_inner
def befores(h0, out, steps, reverse):
    """Each step's h before it (h0, or the h of the step run before it), in time order."""
    before = np.empty((steps, *h0.shape), D)
    for s in range(steps):
        before[step_of(s, steps, reverse)] = h0 if s == 0 else out[step_of(s - 1, steps, reverse)]
    return before
'''

_LSTM_FORWARD = '''

@_inner
def cells_row(x, pre, c, h, acts, states, size):
    """One row's gates from x's and h W_hh^T's parts (activated, into acts), then c (into
    states too) and h. (A row at a time: LLVM vectorized the loop over all rows badly where
    it was inlined with its first row a constant 0, as on one thread.)"""
    for j in range(size):
        i = sigmoid(x[j] + pre[j])
        f = sigmoid(x[size + j] + pre[size + j])
        g = tanh(x[2 * size + j] + pre[2 * size + j])
        o = sigmoid(x[3 * size + j] + pre[3 * size + j])
        acts[j], acts[size + j], acts[2 * size + j], acts[3 * size + j] = i, f, g, o
        c[j] = f * c[j] + i * g
        states[j] = c[j]
        h[j] = o * tanh(c[j])


@_inner
def cells_rows(lo, hi, x, pre, c, h, acts, states, size):
    for b in range(lo, hi):
        cells_row(x[b], pre[b], c[b], h[b], acts[b], states[b], size)


@njit("void({dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[:, ::1], {dtype}[:, ::1], boolean, "
      "{dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], int64)", cache=True)
def kernel(x, w, h0, c0, reverse, out, acts, states, threads):
    """out[t] = h after step t (time order), out[T] = the final c, and the workspace: each
    step's activated gates and cell state; w is W_hh (4H, H)."""
    steps, batch, gates = x.shape
    size = gates // 4
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    pre, c = np.empty((batch, gates), D), c0.copy()
    h = h0
    for s in range(steps):
        t = step_of(s, steps, reverse)
        product(h.ctypes.data, AS_IS, size, w.ctypes.data, TRANSPOSED, size, pre.ctypes.data,
                gates, batch, gates, size, threads)
        cells(threads, x[t], pre, c, out[t], acts[t], states[t], size)
        h = out[t]
    out[steps] = c
    set_blas_threads(blas_threads)
'''

_LSTM_BACKWARD = '''

@_inner
def cotangents_row(dhs, acts, states, dacts, dstates, cp, dh, dc, dx, size):
    """One row of a step's cotangents of its gates (into dx), with those of its activated gates
    and cell state (dacts, dstates); dh, dc become those of the cell state before it (dh without
    the product by W_hh, which follows); cp is the cell state before the step."""
    for j in range(size):
        i, f = acts[j], acts[size + j]
        g, o = acts[2 * size + j], acts[3 * size + j]
        tc = tanh(states[j])
        dh_ = dh[j] + dhs[j]
        dc_ = dc[j] + dh_ * o * (1 - tc * tc) + dstates[j]
        dx[j] = (dc_ * g + dacts[j]) * i * (1 - i)
        dx[size + j] = (dc_ * cp[j] + dacts[size + j]) * f * (1 - f)
        dx[2 * size + j] = (dc_ * i + dacts[2 * size + j]) * (1 - g * g)
        dx[3 * size + j] = (dh_ * tc + dacts[3 * size + j]) * o * (1 - o)
        dc[j] = dc_ * f


@_inner
def cotangents_rows(lo, hi, t, prev, dhs, acts, states, dacts, dstates, c0, dh, dc, dx):
    """Step t's cotangents, rows lo..hi (`cotangents_row`; prev: the step before, or -1)."""
    for b in range(lo, hi):
        cp = c0[b] if prev < 0 else states[prev, b]
        cotangents_row(dhs[t, b], acts[t, b], states[t, b], dacts[t, b], dstates[t, b], cp,
                       dh[b], dc[b], dx[t, b], dh.shape[1])


@njit("void({dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], "
      "{dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[:, ::1], "
      "{dtype}[:, ::1], boolean, {dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[:, ::1], "
      "{dtype}[:, ::1], int64)", cache=True)
def kernel(g, out, acts, states, dacts, dstates, w, h0, c0, reverse, dx, dw, dh0, dc0, threads):
    """The cotangents of x_parts, W_hh^T (dw, (H, 4H)) and the initial states, for the
    cotangent g of the scan's result `out` (acts, states and their cotangents: the
    workspace's parts of both)."""
    steps, batch, gates = acts.shape
    size = gates // 4
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    before = befores(h0, out, steps, reverse)
    dh, dc = np.zeros((batch, size), D), g[steps].copy()
    for s in range(steps - 1, -1, -1):
        t = step_of(s, steps, reverse)
        cotangents(threads, t, step_of(s - 1, steps, reverse) if s > 0 else -1, g, acts,
                   states, dacts, dstates, c0, dh, dc, dx)
        product(dx[t].ctypes.data, AS_IS, gates, w.ctypes.data, AS_IS, size, dh.ctypes.data,
                size, batch, size, gates, threads)
    if steps == 0:
        dw[:] = 0
    else:  # (H, 4H) = before (T B, H)^T @ dx (T B, 4H)
        product(before.ctypes.data, TRANSPOSED, size, dx.ctypes.data, AS_IS, gates,
                dw.ctypes.data, gates, size, gates, steps * batch, threads)
    dh0[:], dc0[:] = dh, dc
    set_blas_threads(blas_threads)
'''


_GRU_FORWARD = '''

@_inner
def cells_row(x, hidden, bias, h, out, acts, hid_n, size):
    """One row's gates from x's parts and h W_hh^T's (+ b_hh; activated, into acts, and hid_n,
    what r multiplies), then h. (A row at a time: see the LSTM's `cells_row`.)"""
    for j in range(size):
        r = sigmoid(x[j] + (hidden[j] + bias[j]))
        z = sigmoid(x[size + j] + (hidden[size + j] + bias[size + j]))
        hid = hidden[2 * size + j] + bias[2 * size + j]
        n = tanh(x[2 * size + j] + r * hid)
        acts[j], acts[size + j], acts[2 * size + j], hid_n[j] = r, z, n, hid
        out[j] = n + z * (h[j] - n)


@_inner
def cells_rows(lo, hi, x, hidden, bias, h, out, acts, hid_n, size):
    for b in range(lo, hi):
        cells_row(x[b], hidden[b], bias, h[b], out[b], acts[b], hid_n[b], size)


@njit("void({dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[::1], {dtype}[:, ::1], boolean, "
      "{dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], int64)", cache=True)
def kernel(x, w, bias, h0, reverse, out, acts, hid_n, threads):
    """out[t] = h after step t (time order), out[T] = the final h, and the workspace: each
    step's activated gates and hid_n; w is W_hh (3H, H)."""
    steps, batch, gates = x.shape
    size = gates // 3
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    hidden = np.empty((batch, gates), D)
    h = h0
    for s in range(steps):
        t = step_of(s, steps, reverse)
        product(h.ctypes.data, AS_IS, size, w.ctypes.data, TRANSPOSED, size, hidden.ctypes.data,
                gates, batch, gates, size, threads)
        cells(threads, x[t], hidden, bias, h, out[t], acts[t], hid_n[t], size)
        h = out[t]
    out[steps] = h
    set_blas_threads(blas_threads)
'''

_GRU_BACKWARD = '''

@_inner
def cotangents_row(dhs, acts, hid_n, dacts, dhid_n, before, dh, dprod, dx, dhid, size):
    """One row of a step's cotangents of its gates' sums (into dx, and of h W_hh^T's parts
    into dhid), with those of its activated gates and hid_n (dacts, dhid_n); dh becomes that of
    h before it but for the product by W_hh (dprod's, next)."""
    for j in range(size):
        r, z, n = acts[j], acts[size + j], acts[2 * size + j]
        dh_ = dh[j] + dprod[j] + dhs[j]
        dn = (dh_ * (1 - z) + dacts[2 * size + j]) * (1 - n * n)
        dr = (dn * hid_n[j] + dacts[j]) * r * (1 - r)
        dz = (dh_ * (before[j] - n) + dacts[size + j]) * z * (1 - z)
        dx[j], dx[size + j], dx[2 * size + j] = dr, dz, dn
        dhid[j], dhid[size + j] = dr, dz
        dhid[2 * size + j] = dn * r + dhid_n[j]
        dh[j] = dh_ * z


@_inner
def cotangents_rows(lo, hi, t, dhs, acts, hid_n, dacts, dhid_n, before, dh, dprod, dx, dhid):
    """Step t's cotangents, rows lo..hi (`cotangents_row`)."""
    for b in range(lo, hi):
        cotangents_row(dhs[t, b], acts[t, b], hid_n[t, b], dacts[t, b], dhid_n[t, b],
                       before[t, b], dh[b], dprod[b], dx[t, b], dhid[t, b], dh.shape[1])


@_parallel
def column_sums(a, out, threads):
    """out = a's rows summed, columns in `threads` shares."""
    share = -(-a.shape[1] // threads)
    for part in prange(threads):
        lo, hi = part * share, min(a.shape[1], (part + 1) * share)
        out[lo:hi] = 0
        for i in range(a.shape[0]):
            for j in range(lo, hi):
                out[j] += a[i, j]


@njit("void({dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, :, ::1], "
      "{dtype}[:, :, ::1], {dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[:, ::1], boolean, "
      "{dtype}[:, :, ::1], {dtype}[:, ::1], {dtype}[::1], {dtype}[:, ::1], int64)", cache=True)
def kernel(g, out, acts, hid_n, dacts, dhid_n, w, h0, reverse, dx, dw, db, dh0, threads):
    """The cotangents of x_parts, W_hh^T (dw, (H, 3H)), b_hh and h0, for the cotangent g of
    the scan's result `out` (acts, hid_n and their cotangents: the workspace's parts of
    both)."""
    steps, batch, gates = acts.shape
    size = gates // 3
    blas_threads = get_blas_threads()
    set_blas_threads(1)
    before = befores(h0, out, steps, reverse)
    dhid = np.empty((steps, batch, gates), D)
    dh, dprod = g[steps].copy(), np.zeros((batch, size), D)
    for s in range(steps - 1, -1, -1):
        t = step_of(s, steps, reverse)
        cotangents(threads, t, g, acts, hid_n, dacts, dhid_n, before, dh, dprod, dx, dhid)
        product(dhid[t].ctypes.data, AS_IS, gates, w.ctypes.data, AS_IS, size,
                dprod.ctypes.data, size, batch, size, gates, threads)
    flat = dhid.reshape(steps * batch, gates)
    if steps == 0:
        dw[:] = 0
    else:  # (H, 3H) = before (T B, H)^T @ dhid (T B, 3H)
        product(before.ctypes.data, TRANSPOSED, size, dhid.ctypes.data, AS_IS, gates,
                dw.ctypes.data, gates, size, gates, steps * batch, threads)
    if threads == 1:  # the loop below would wake the other threads
        db[:] = flat.sum(axis=0)
    else:
        column_sums(flat, db, threads)
    dh0[:] = dh + dprod
    set_blas_threads(blas_threads)
'''


_SPLIT = """

@_parallel
def shared_{name}(threads, {params}):
    share = -(-{rows} // threads)
    for part in prange(threads):
        {name}_rows(part * share, min({rows}, (part + 1) * share), {params})


@_inner
def {name}(threads, {params}):
    \"\"\"`{name}_rows` over all rows, in `threads` shares (one: on this thread, not waking
    the others).\"\"\"
    if threads == 1:
        {name}_rows(0, {rows}, {params})
    else:
        shared_{name}(threads, {params})
"""


def split_rows(name: str, params: str, rows: str) -> str:
    """The module text of `name(threads, params)`: `name_rows(lo, hi, params)` over rows 0..rows
    in `threads` shares, or on the calling thread alone for one."""
    return _SPLIT.format(name=name, params=params, rows=rows)


def _with_split(template: str, name: str, params: str, rows: str) -> str:
    """`template` with `split_rows(name, ...)` before its kernel, which Numba compiles as the
    module loads (its signature is given), so what it calls must be defined first."""
    at = template.index('\n@njit("void(')
    return template[:at] + split_rows(name, params, rows) + template[at:]


_SOURCES = {
    "lstm forward": _with_split(
        _LSTM_FORWARD, "cells", "x, pre, c, h, acts, states, size", "x.shape[0]"
    ),
    "lstm backward": _with_split(
        _LSTM_BACKWARD,
        "cotangents",
        "t, prev, dhs, acts, states, dacts, dstates, c0, dh, dc, dx",
        "dh.shape[0]",
    ),
    "gru forward": _with_split(
        _GRU_FORWARD, "cells", "x, hidden, bias, h, out, acts, hid_n, size", "x.shape[0]"
    ),
    "gru backward": _with_split(
        _GRU_BACKWARD,
        "cotangents",
        "t, dhs, acts, hid_n, dacts, dhid_n, before, dh, dprod, dx, dhid",
        "dh.shape[0]",
    ),
}


def generate_source(op: str, dtype: str, ints: str) -> str:
    head = _HEAD.format(op=op, dtype=dtype, declarations=declarations(dtype, ints),
                        version=GENERATOR_VERSION,
                        flags=fastmath.flags_literal(fastmath.FLAGS))  # fmt: skip
    return head + _SOURCES[op].format(dtype=dtype)


def module(node: Node) -> tuple[str, str]:
    """The name and text of a scan node's kernel module; NotImplementedError for other dtypes,
    or without GEMM routines to call (`blas.gemm_symbols`)."""
    dtype, ints = node.outputs[0].dtype.name, gemm_symbols()
    if ints is None or dtype not in DTYPES:
        raise NotImplementedError(f"no {node.op} kernel for {dtype}")
    return named("scan", generate_source(OPS[node.prim], dtype, ints))


class ScanKernel(GeneratedKernel):
    """`kernel(*scan_inputs, out)` or `kernel(g, out, *scan_inputs, packed)`, the scan's inputs
    (x_parts, w_hh_t, then h0 and c0, or b_hh and h0) made C-contiguous, W_hh^T seen as W_hh;
    the result's workspace viewed (forward), or that of out and g, and the packed cotangents'
    parts (backward, which needs neither x_parts nor b_hh: the workspace holds the gates)."""

    def __init__(self, node: Node, compiled: Callable, path: Path):
        super().__init__(compiled, path)
        self.reverse = bool(node.attrs["reverse"])
        self.backward = node.prim in (P.lstm_scan_grad, P.gru_scan_grad)
        self.lstm = node.prim in (P.lstm_scan, P.lstm_scan_grad)
        self.widths = LSTM_WORKSPACE if self.lstm else GRU_WORKSPACE
        self.threads = numba.get_num_threads()
        self.scratch = scratch(node)

    def __call__(self, *arrays: np.ndarray) -> None:
        *ins, result = arrays
        if not result.flags.c_contiguous:
            raise ValueError(f"scan kernels write C-contiguous results, not {result.strides}")
        head, (x, w_hh_t, *states) = [in_c_order(a) for a in ins[:-4]], ins[-4:]
        w, states, steps = in_c_order(w_hh_t.T), [in_c_order(a) for a in states], x.shape[0]
        # the products' multiply-adds: a short scan's (a decoder's one step) run on this thread
        # unless the team still spins, as a small product's (`gemm.SERIAL_MAX`)
        work = x.size * w_hh_t.shape[0]
        threads = self.threads if work >= SERIAL_MAX or team.awake() else 1
        if self.backward:
            g, out = head
            parts = unpack(result, x, w_hh_t, *states)
            kept = (*workspace(out, steps, self.widths), *workspace(g, steps, self.widths))
            states = states if self.lstm else states[1:]  # not b_hh
            self.compiled(g, out, *kept, w, *states, self.reverse, *parts, threads)
        else:
            kept = workspace(result, steps, self.widths)
            self.compiled(in_c_order(x), w, *states, self.reverse, result, *kept, threads)
        if threads > 1:
            team.finished()


def scratch(node: Node) -> int:
    """Bytes a scan kernel allocates (the memory plan counts these, not the NumPy version's):
    forward a step's products; backward each step's h before it and a GRU's products'
    cotangents, besides two (B, H) rows."""
    x, item = node.inputs[-4], node.outputs[0].dtype.itemsize
    (steps, batch, gates), size = x.shape, node.inputs[-3].shape[0]
    if node.prim in (P.lstm_scan, P.gru_scan):
        return (batch * gates + batch * size) * item
    dhid = steps * batch * gates if node.prim is P.gru_scan_grad else 0
    return (steps * batch * size + dhid + 2 * batch * size) * item


def launcher(node: Node, compiled: Callable, path: Path) -> ScanKernel:
    return ScanKernel(node, compiled, path)
