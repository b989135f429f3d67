"""Recurrent layers' scans as one op each (their records at the end), as PyTorch's eager
`nn.LSTM` and `nn.GRU` are one native call: unrolled into ops, each time step was a dozen ops
forward and a score backward, each a tape node and a Python call on a (batch, hidden) array.

`lstm_scan(x_parts, w_hh_t, h0, c0)`, for x_parts (T, B, 4H) (every step's input part of the
gates i, f, g, o, biases included), w_hh_t (H, 4H) and the initial states (B, H): step by step,
gates = x_parts[t] + h W_hh^T, c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c);
the result (T + 1, B, H) holds each step's h in time order, then the final c. With `reverse`
the steps run from T - 1 down to 0 (a bidirectional layer's second direction). `gru_scan` (its
section below) is the GRU's.

`lstm_scan_grad(g, out, x_parts, w_hh_t, h0, c0)` packs the cotangents [dx_parts | dw_hh_t |
dh0 | dc0]. It keeps no gates from forward: it computes them again from the saved h's, in one
matrix product for all steps (a layer's memory is its h's, as a checkpointed LSTM's), then runs
the recurrence of the cell state and the one of the cotangents. Eagerly, from
`lowering.KERNEL_MIN` elements, the ops run as Numba kernels (`compiler.kernels.recurrent`).
A trace records the parts (`decompose`), which the fuser joins into a kernel per step, and a
second derivative differentiates them: a plan keeps the gates from forward, where the kernels
compute them again (one more product the size of all the steps' own; docs/kernels.md)"""

from __future__ import annotations

import numpy as np

from tracegrad.core.vocabulary import Primitive


def _scan_result(ins: tuple, batch: int, size: int) -> tuple[tuple[int, ...], np.dtype]:
    """A scan's (T + 1, B, H) result and dtype, its inputs (parts first) of one floating dtype."""
    if len({v.dtype for v in ins}) != 1 or ins[0].dtype.kind != "f":
        raise ValueError("input parts, weights and states of one floating dtype, not "
                         + ", ".join(str(v.dtype) for v in ins))  # fmt: skip
    return (ins[0].shape[0] + 1, batch, size), ins[0].dtype


def _lstm_scan_rule(x_parts, w_hh_t, h0, c0, reverse):
    ins = (x_parts, w_hh_t, h0, c0)
    batch, size = h0.shape if h0.ndim == 2 else (-1, -1)
    if x_parts.ndim != 3 or c0.shape != (batch, size) or w_hh_t.shape != (size, 4 * size) \
            or x_parts.shape[1:] != (batch, 4 * size):  # fmt: skip
        raise ValueError(
            f"input parts {x_parts.shape}, W_hh^T {w_hh_t.shape}, h0 {h0.shape}, "
            f"c0 {c0.shape}: expected (T, B, 4H), (H, 4H), (B, H), (B, H)"
        )
    return _scan_result(ins, batch, size)


def _grad_rule(rule):
    """The shape rule of a scan's gradient op, `rule` the scan's: the flat packed cotangents of
    the scan's inputs, for the cotangent g of its result `out`."""

    def grad_rule(g, out, *ins, reverse):
        shape, dtype = rule(*ins, reverse)
        if g.shape != shape or out.shape != shape:
            raise ValueError(f"result {out.shape} and its cotangent {g.shape}: expected {shape}")
        return (sum(v.size for v in ins),), dtype

    return grad_rule


def _vjp(grad: Primitive):
    """A scan's joint VJP: its gradient op `grad`, its packed result viewed per input."""

    def vjp(wanted, g, out, *ins, reverse, create_graph=False):
        grads = unpack(grad(g, out, *ins, reverse=reverse), *ins)
        return [d if w else None for w, d in zip(wanted, grads, strict=True)]

    return vjp


def _scan_flops(ins, outs) -> int:
    """Each step's product, 2 B H (G H) (x_parts' size times H); backward three times that."""
    return 2 * ins[0].size * ins[1].shape[0] * (1 if len(ins) == 4 else 3)


def _scan_ops(name: str, impl, grad_impl, rule, parts) -> tuple[Primitive, Primitive]:
    """A scan's record and its gradient op's: the two scans differ only in these functions."""
    grad = Primitive(f"{name}_grad", grad_impl, _grad_rule(rule), None, raises=False,
                     flops=_scan_flops)  # fmt: skip
    scan = Primitive(name, impl, rule, _vjp(grad), "in+out", joint=True, raises=False,
                     rerun=True, flops=_scan_flops, decompose=parts)  # fmt: skip
    return scan, grad


def _stacked(*values):
    """The values (each step's h, then the final state) stacked along a new first axis: the
    scans' result, in composed ops."""
    return concatenate(*[reshape(v, shape=(1, *v.shape)) for v in values], axis=0)


def _in_order(x: np.ndarray, reverse: bool) -> np.ndarray:
    """`x`'s steps in the order the scan takes them."""
    return x[::-1] if reverse else x


def _lstm_scan(x_parts, w_hh_t, h0, c0, reverse):
    steps, size = x_parts.shape[0], h0.shape[1]
    out = np.empty((steps + 1, *h0.shape), x_parts.dtype)
    hs = _in_order(out[:steps], reverse)
    gates, s = (
        np.empty(x_parts.shape[1:], x_parts.dtype),
        np.empty(x_parts.shape[1:], x_parts.dtype),
    )
    candidate = np.empty_like(h0)
    h, c = h0, c0
    for t, x_part in enumerate(_in_order(x_parts, reverse)):
        np.add(x_part, np.matmul(h, w_hh_t), out=gates)
        g = np.tanh(gates[:, 2 * size : 3 * size], out=candidate)
        sigmoid_into(gates, s)
        c = s[:, size : 2 * size] * c
        c += np.multiply(s[:, :size], g, out=candidate)
        h = np.multiply(s[:, 3 * size :], np.tanh(c, out=candidate), out=hs[t])
    out[steps] = c
    return out


def _lstm_scan_grad(g, out, x_parts, w_hh_t, h0, c0, reverse):
    steps, (batch, size) = x_parts.shape[0], h0.shape
    packed = np.empty(x_parts.size + w_hh_t.size + 2 * h0.size, x_parts.dtype)
    dx = packed[: x_parts.size].reshape(x_parts.shape)
    dw = packed[x_parts.size : x_parts.size + w_hh_t.size].reshape(w_hh_t.shape)
    dh0, dc0 = packed[x_parts.size + w_hh_t.size :].reshape(2, *h0.shape)
    if steps == 0:
        dx[...], dw[...], dh0[...], dc0[...] = 0, 0, 0, g[0]
        return packed
    hs, dhs = _in_order(out[:steps], reverse), _in_order(g[:steps], reverse)
    h_before = np.concatenate([h0[None], hs[:-1]])
    gates = np.matmul(h_before.reshape(-1, size), w_hh_t).reshape(x_parts.shape)
    gates += _in_order(x_parts, reverse)
    candidate = np.tanh(gates[..., 2 * size : 3 * size])
    s = sigmoid_into(gates, np.empty_like(gates)).reshape(steps, batch, 4, size)
    i, f, o = s[:, :, 0], s[:, :, 1], s[:, :, 3]
    cells = i * candidate
    c = c0
    for t in range(steps):  # the cell states again, as forward computed them
        c = np.add(f[t] * c, cells[t], out=cells[t])
    c_before = np.concatenate([c0[None], cells[:-1]])
    tanh_c = np.tanh(cells)
    # what each step's cotangents of h and c multiply: dc += dh k_c; d(i, f, g) = dc k_ifg;
    # do = dh k_o (before the activations: the gates' cotangents)
    k_c = o * (1 - tanh_c * tanh_c)
    k_o = tanh_c * o * (1 - o)
    k_ifg = np.stack([candidate * i * (1 - i), c_before * f * (1 - f),
                      i * (1 - candidate * candidate)], axis=2)  # fmt: skip
    dgates = _in_order(dx, reverse).reshape(steps, batch, 4, size)
    dh, dc = np.zeros_like(h0), g[steps].copy()
    for t in range(steps - 1, -1, -1):
        dh += dhs[t]
        dc += dh * k_c[t]
        np.multiply(dc[:, None], k_ifg[t], out=dgates[t, :, :3])
        np.multiply(dh, k_o[t], out=dgates[t, :, 3])
        dh = np.matmul(dgates[t].reshape(batch, 4 * size), w_hh_t.T)
        dc *= f[t]
    np.matmul(h_before.reshape(-1, size).T, dgates.reshape(-1, 4 * size), out=dw)
    dh0[...], dc0[...] = dh, dc
    return packed


def unpack(packed, *like) -> tuple:
    """Views of a gradient op's flat result shaped as each of `like`, in order (`lstm_scan_grad`:
    x_parts, w_hh_t, h0, c0; `gru_scan_grad`: x_parts, w_hh_t, b_hh, h0)."""
    ends = np.cumsum([0, *(x.size for x in like)])
    return tuple(packed[int(a) : int(b)].reshape(x.shape)
                 for a, b, x in zip(ends[:-1], ends[1:], like, strict=True))  # fmt: skip


def _lstm_scan_parts(x_parts, w_hh_t, h0, c0, reverse):
    """The scan in ops, a step at a time: what a trace records, and what a second derivative
    differentiates."""
    steps, size = x_parts.shape[0], h0.shape[1]
    h, c, hs = h0, c0, [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        gates = x_parts[t] + matmul(h, w_hh_t)
        i, f, g, o = (gates[:, k * size : (k + 1) * size] for k in range(4))
        c = sigmoid(f) * c + sigmoid(i) * tanh(g)
        h = sigmoid(o) * tanh(c)
        hs[t] = h
    return _stacked(*hs, c)


lstm_scan, lstm_scan_grad = _scan_ops(
    "lstm_scan", _lstm_scan, _lstm_scan_grad, _lstm_scan_rule, _lstm_scan_parts
)


# --- GRU --------------------------------------------------------------------------------------
# gru_scan(x_parts, w_hh_t, b_hh, h0), x_parts (T, B, 3H) (gates r, z, n; b_ih included),
# w_hh_t (H, 3H), b_hh (3H,) (zeros for a layer without biases), h0 (B, H): step by step,
# hid = h W_hh^T + b_hh, r = sigmoid(x_r + hid_r), z = sigmoid(x_z + hid_z),
# n = tanh(x_n + r hid_n), h = n + z (h - n); the result (T + 1, B, H) holds each step's h in time
# order, then the final h again. gru_scan_grad packs [dx_parts | dw_hh_t | db_hh | dh0].


def _gru_scan_rule(x_parts, w_hh_t, b_hh, h0, reverse):
    ins = (x_parts, w_hh_t, b_hh, h0)
    batch, size = h0.shape if h0.ndim == 2 else (-1, -1)
    if x_parts.ndim != 3 or w_hh_t.shape != (size, 3 * size) or b_hh.shape != (3 * size,) \
            or x_parts.shape[1:] != (batch, 3 * size):  # fmt: skip
        raise ValueError(
            f"input parts {x_parts.shape}, W_hh^T {w_hh_t.shape}, b_hh {b_hh.shape}, "
            f"h0 {h0.shape}: expected (T, B, 3H), (H, 3H), (3H,), (B, H)"
        )
    return _scan_result(ins, batch, size)


def _gru_scan(x_parts, w_hh_t, b_hh, h0, reverse):
    steps, size = x_parts.shape[0], h0.shape[1]
    out = np.empty((steps + 1, *h0.shape), x_parts.dtype)
    hs = _in_order(out[:steps], reverse)
    hidden = np.empty(x_parts.shape[1:], x_parts.dtype)
    rz, total = np.empty((2, h0.shape[0], 2 * size), x_parts.dtype)
    h = h0
    for t, x_part in enumerate(_in_order(x_parts, reverse)):
        np.add(np.matmul(h, w_hh_t), b_hh, out=hidden)
        sigmoid_into(np.add(x_part[:, : 2 * size], hidden[:, : 2 * size], out=total), rz)
        n = np.tanh(x_part[:, 2 * size :] + rz[:, :size] * hidden[:, 2 * size :])
        h = np.add(n, rz[:, size:] * (h - n), out=hs[t])
    out[steps] = h
    return out


def _gru_scan_grad(g, out, x_parts, w_hh_t, b_hh, h0, reverse):
    steps, (batch, size) = x_parts.shape[0], h0.shape
    packed = np.empty(x_parts.size + w_hh_t.size + b_hh.size + h0.size, x_parts.dtype)
    dx, dw, db, dh0 = unpack(packed, x_parts, w_hh_t, b_hh, h0)
    if steps == 0:
        dx[...], dw[...], db[...], dh0[...] = 0, 0, 0, g[0]
        return packed
    hs, dhs = _in_order(out[:steps], reverse), _in_order(g[:steps], reverse)
    h_before = np.concatenate([h0[None], hs[:-1]])
    hidden = np.matmul(h_before.reshape(-1, size), w_hh_t).reshape(x_parts.shape) + b_hh
    xs = _in_order(x_parts, reverse)
    rz = np.empty((steps, batch, 2 * size), x_parts.dtype)
    sigmoid_into(xs[..., : 2 * size] + hidden[..., : 2 * size], rz)
    r, z, hid_n = rz[..., :size], rz[..., size:], hidden[..., 2 * size :]
    n = np.tanh(xs[..., 2 * size :] + r * hid_n)
    # each step's cotangents of its gates' sums are dh times these: dn_pre = dh k_n,
    # d(x_z) = dh k_z, d(x_r) = dn_pre hid_n r (1 - r); hid_n's own is dn_pre r
    k_n = (1 - z) * (1 - n * n)
    k = np.stack([k_n * hid_n * r * (1 - r), (h_before - n) * z * (1 - z), k_n], axis=2)
    dgates = _in_order(dx, reverse).reshape(steps, batch, 3, size)
    dhidden = np.empty((steps, batch, 3, size), x_parts.dtype)
    dh = g[steps].copy()
    for t in range(steps - 1, -1, -1):
        dh += dhs[t]
        np.multiply(dh[:, None], k[t], out=dgates[t])
        dhidden[t, :, :2] = dgates[t, :, :2]
        np.multiply(dgates[t, :, 2], r[t], out=dhidden[t, :, 2])
        dh = dh * z[t] + np.matmul(dhidden[t].reshape(batch, 3 * size), w_hh_t.T)
    flat = dhidden.reshape(-1, 3 * size)
    np.matmul(h_before.reshape(-1, size).T, flat, out=dw)
    np.sum(flat, axis=0, out=db)
    dh0[...] = dh
    return packed


def _gru_scan_parts(x_parts, w_hh_t, b_hh, h0, reverse):
    """The scan in ops, a step at a time (`nn.GRU`'s before it was one op)."""
    steps, size = x_parts.shape[0], h0.shape[1]
    h, hs = h0, [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        x, hidden = x_parts[t], matmul(h, w_hh_t) + b_hh
        r, z, n = (slice(k * size, (k + 1) * size) for k in range(3))
        r, z = sigmoid(x[:, r] + hidden[:, r]), sigmoid(x[:, z] + hidden[:, z])
        n = tanh(x[:, n] + r * hidden[:, n])
        h = hs[t] = n + z * (h - n)
    return _stacked(*hs, h)


gru_scan, gru_scan_grad = _scan_ops(
    "gru_scan", _gru_scan, _gru_scan_grad, _gru_scan_rule, _gru_scan_parts
)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import sigmoid, sigmoid_into, tanh  # noqa: E402
from tracegrad.core.ops.linalg import matmul  # noqa: E402
from tracegrad.core.ops.views import concatenate, reshape  # noqa: E402
