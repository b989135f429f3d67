"""Recurrent layers' scans as one op each (their records at the end), as PyTorch's eager
`nn.LSTM` and `nn.GRU` are one native call: unrolled into ops, each time step was a dozen ops
forward and a score backward, each a tape node and a Python call on a (batch, hidden) array.

`lstm_scan(x_parts, w_hh_t, h0, c0)`, for x_parts (T, B, 4H) (every step's input part of the
gates i, f, g, o, biases included), w_hh_t (H, 4H) and the initial states (B, H): step by step,
gates = x_parts[t] + h W_hh^T, c = sigmoid(f) c + sigmoid(i) tanh(g), h = sigmoid(o) tanh(c);
the result (6T + 1, B, H) holds each step's h in time order, then the final c, then what
backward reads (`workspace`): every step's activated gates (T, B, 4H) and cell state (T, B, H).
With `reverse` the steps run from T - 1 down to 0 (a bidirectional layer's second direction).
`gru_scan` (its section below) is the GRU's.

`lstm_scan_grad(g, out, x_parts, w_hh_t, h0, c0)` packs the cotangents [dx_parts | dw_hh_t |
dh0 | dc0]. It takes the gates from the workspace, as oneDNN's and cuDNN's LSTMs keep theirs:
computing them again from the h's was one more product the size of all the steps' own. The
workspace is a result like the h's, its cotangent honoured (zero wherever a layer reads only
the h's), so the op's VJP is exact and finite differences check all of it. Eagerly, from
`lowering.KERNEL_MIN` elements, and in plans the ops run as Numba kernels
(`compiler.kernels.recurrent`): one call a layer each way, where the parts were a dozen
statements a step. A second derivative differentiates the parts (`decompose`)."""

from __future__ import annotations

import numpy as np

from tracegrad.core.vocabulary import Primitive

LSTM_WORKSPACE = (4, 1)  # the activated gates i, f, g, o and the cell state, in units of H
GRU_WORKSPACE = (3, 1)  # the activated gates r, z, n and hid_n = (h W_hh^T)_n + b_hn


def _scan_result(ins: tuple, batch: int, size: int, workspace: tuple[int, ...]
                 ) -> tuple[tuple[int, ...], np.dtype]:  # fmt: skip
    """A scan's ((1 + sum(workspace)) T + 1, B, H) result and dtype, its inputs (parts first)
    of one floating dtype."""
    if len({v.dtype for v in ins}) != 1 or ins[0].dtype.kind != "f":
        raise ValueError("input parts, weights and states of one floating dtype, not "
                         + ", ".join(str(v.dtype) for v in ins))  # fmt: skip
    return ((1 + sum(workspace)) * ins[0].shape[0] + 1, batch, size), ins[0].dtype


def workspace(out: np.ndarray, steps: int, widths: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Views of a scan's result (or of its cotangent) past the h's and the final state, each
    (T, B, w H) in time order, w in `widths` (`LSTM_WORKSPACE`, `GRU_WORKSPACE`)."""
    batch, size = out.shape[1:]
    at, views = steps + 1, []
    for w in widths:
        views.append(out[at : at + w * steps].reshape(steps, batch, w * size))
        at += w * steps
    return tuple(views)


def _lstm_scan_rule(x_parts, w_hh_t, h0, c0, reverse):
    ins = (x_parts, w_hh_t, h0, c0)
    batch, size = h0.shape if h0.ndim == 2 else (-1, -1)
    if x_parts.ndim != 3 or c0.shape != (batch, size) or w_hh_t.shape != (size, 4 * size) \
            or x_parts.shape[1:] != (batch, 4 * size):  # fmt: skip
        raise ValueError(
            f"input parts {x_parts.shape}, W_hh^T {w_hh_t.shape}, h0 {h0.shape}, "
            f"c0 {c0.shape}: expected (T, B, 4H), (H, 4H), (B, H), (B, H)"
        )
    return _scan_result(ins, batch, size, LSTM_WORKSPACE)


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
    """Each step's product, 2 B H (G H) (x_parts' size times H); backward twice that (the
    products by W_hh and W_hh's gradient)."""
    return 2 * ins[0].size * ins[1].shape[0] * (1 if len(ins) == 4 else 2)


def _scan_ops(name: str, impl, grad_impl, rule, parts) -> tuple[Primitive, Primitive]:
    """A scan's record and its gradient op's: the two scans differ only in these functions."""
    grad = Primitive(f"{name}_grad", grad_impl, _grad_rule(rule), None, raises=False,
                     flops=_scan_flops)  # fmt: skip
    scan = Primitive(name, impl, rule, _vjp(grad), "in+out", joint=True, raises=False,
                     rerun=True, flops=_scan_flops, decompose=parts,
                     trace_parts=False)  # fmt: skip
    return scan, grad


def _stacked(states, workspace):
    """The scans' result in composed ops: the (B, H) states (each step's h, then the final
    state) stacked along a new first axis, then the workspace, lists of each step's (B, w H)."""
    (batch, size), rows = states[0].shape, [reshape(v, shape=(1, *v.shape)) for v in states]
    for steps in workspace:
        rows += [reshape(v, shape=(v.shape[1] // size, batch, size)) for v in steps]
    return concatenate(*rows, axis=0)


def _in_order(x: np.ndarray, reverse: bool) -> np.ndarray:
    """`x`'s steps in the order the scan takes them."""
    return x[::-1] if reverse else x


def _lstm_scan(x_parts, w_hh_t, h0, c0, reverse):
    steps, size = x_parts.shape[0], h0.shape[1]
    out = np.empty(_lstm_scan_rule(x_parts, w_hh_t, h0, c0, reverse)[0], x_parts.dtype)
    acts, cells = workspace(out, steps, LSTM_WORKSPACE)
    gates = np.empty(x_parts.shape[1:], x_parts.dtype)
    candidate = np.empty_like(h0)
    h, c = h0, c0
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        s = acts[t]
        np.add(x_parts[t], np.matmul(h, w_hh_t), out=gates)
        sigmoid_into(gates, s)
        np.tanh(gates[:, 2 * size : 3 * size], out=s[:, 2 * size : 3 * size])
        c = np.multiply(s[:, size : 2 * size], c, out=cells[t])
        c += np.multiply(s[:, :size], s[:, 2 * size : 3 * size], out=candidate)
        h = np.multiply(s[:, 3 * size :], np.tanh(c, out=candidate), out=out[t])
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
    # in the order the steps ran: their h's, gates and cell states, and those cotangents
    hs, dhs = _in_order(out[:steps], reverse), _in_order(g[:steps], reverse)
    acts, cells = workspace(out, steps, LSTM_WORKSPACE)
    dacts, dcells = workspace(g, steps, LSTM_WORKSPACE)
    s, ds = (_in_order(a, reverse).reshape(steps, batch, 4, size) for a in (acts, dacts))
    cells, dcells = _in_order(cells, reverse), _in_order(dcells, reverse)
    i, f, candidate, o = (s[:, :, k] for k in range(4))
    h_before = np.concatenate([h0[None], hs[:-1]])
    c_before = np.concatenate([c0[None], cells[:-1]])
    tanh_c = np.tanh(cells)
    # the gates' cotangents: dc += dh k_c; d(i, f, g) = dc (g, c_before, i) + their own, then
    # times their activation's derivative (k_act); do = dh tanh(c) + its own, times o (1 - o)
    k_c = o * (1 - tanh_c * tanh_c)
    by_dc = np.stack([candidate, c_before, i], axis=2)
    k_act = np.stack([i * (1 - i), f * (1 - f), 1 - candidate * candidate, o * (1 - o)], axis=2)
    dgates = _in_order(dx, reverse).reshape(steps, batch, 4, size)
    dh, dc = np.zeros_like(h0), g[steps].copy()
    for t in range(steps - 1, -1, -1):
        dh += dhs[t]
        dc += dh * k_c[t] + dcells[t]
        np.multiply(dc[:, None], by_dc[t], out=dgates[t, :, :3])
        np.multiply(dh, tanh_c[t], out=dgates[t, :, 3])
        dgates[t] += ds[t]
        dgates[t] *= k_act[t]
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
    h, c, hs, acts, cells = h0, c0, [None] * steps, [None] * steps, [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        gates = x_parts[t] + matmul(h, w_hh_t)
        i, f, g, o = (gates[:, k * size : (k + 1) * size] for k in range(4))
        i, f, g, o = sigmoid(i), sigmoid(f), tanh(g), sigmoid(o)
        c = cells[t] = f * c + i * g
        h = hs[t] = o * tanh(c)
        acts[t] = concatenate(i, f, g, o, axis=1)
    return _stacked([*hs, c], [acts, cells])


lstm_scan, lstm_scan_grad = _scan_ops(
    "lstm_scan", _lstm_scan, _lstm_scan_grad, _lstm_scan_rule, _lstm_scan_parts
)


# --- GRU --------------------------------------------------------------------------------------
# gru_scan(x_parts, w_hh_t, b_hh, h0), x_parts (T, B, 3H) (gates r, z, n; b_ih included),
# w_hh_t (H, 3H), b_hh (3H,) (zeros for a layer without biases), h0 (B, H): step by step,
# hid = h W_hh^T + b_hh, r = sigmoid(x_r + hid_r), z = sigmoid(x_z + hid_z),
# n = tanh(x_n + r hid_n), h = n + z (h - n); the result (5T + 1, B, H) holds each step's h in
# time order, then the final h again, then the workspace: every step's r, z, n (T, B, 3H) and
# hid_n (T, B, H). gru_scan_grad packs [dx_parts | dw_hh_t | db_hh | dh0].


def _gru_scan_rule(x_parts, w_hh_t, b_hh, h0, reverse):
    ins = (x_parts, w_hh_t, b_hh, h0)
    batch, size = h0.shape if h0.ndim == 2 else (-1, -1)
    if x_parts.ndim != 3 or w_hh_t.shape != (size, 3 * size) or b_hh.shape != (3 * size,) \
            or x_parts.shape[1:] != (batch, 3 * size):  # fmt: skip
        raise ValueError(
            f"input parts {x_parts.shape}, W_hh^T {w_hh_t.shape}, b_hh {b_hh.shape}, "
            f"h0 {h0.shape}: expected (T, B, 3H), (H, 3H), (3H,), (B, H)"
        )
    return _scan_result(ins, batch, size, GRU_WORKSPACE)


def _gru_scan(x_parts, w_hh_t, b_hh, h0, reverse):
    steps, size = x_parts.shape[0], h0.shape[1]
    out = np.empty(_gru_scan_rule(x_parts, w_hh_t, b_hh, h0, reverse)[0], x_parts.dtype)
    acts, hid_n = workspace(out, steps, GRU_WORKSPACE)
    hidden = np.empty(x_parts.shape[1:], x_parts.dtype)
    total = np.empty((h0.shape[0], 2 * size), x_parts.dtype)
    h = h0
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        x_part, rz, n = x_parts[t], acts[t, :, : 2 * size], acts[t, :, 2 * size :]
        np.add(np.matmul(h, w_hh_t), b_hh, out=hidden)
        sigmoid_into(np.add(x_part[:, : 2 * size], hidden[:, : 2 * size], out=total), rz)
        hid_n[t] = hidden[:, 2 * size :]
        np.tanh(x_part[:, 2 * size :] + rz[:, :size] * hid_n[t], out=n)
        h = np.add(n, rz[:, size:] * (h - n), out=out[t])
    out[steps] = h
    return out


def _gru_scan_grad(g, out, x_parts, w_hh_t, b_hh, h0, reverse):
    steps, (batch, size) = x_parts.shape[0], h0.shape
    packed = np.empty(x_parts.size + w_hh_t.size + b_hh.size + h0.size, x_parts.dtype)
    dx, dw, db, dh0 = unpack(packed, x_parts, w_hh_t, b_hh, h0)
    if steps == 0:
        dx[...], dw[...], db[...], dh0[...] = 0, 0, 0, g[0]
        return packed
    # in the order the steps ran: their h's, gates and hid_n, and those cotangents
    hs, dhs = _in_order(out[:steps], reverse), _in_order(g[:steps], reverse)
    acts, hid_n = workspace(out, steps, GRU_WORKSPACE)
    dacts, dhid_n = workspace(g, steps, GRU_WORKSPACE)
    acts, hid_n, dhid_n = (_in_order(a, reverse) for a in (acts, hid_n, dhid_n))
    dacts = _in_order(dacts, reverse).reshape(steps, batch, 3, size)
    r, z, n = acts[..., :size], acts[..., size : 2 * size], acts[..., 2 * size :]
    h_before = np.concatenate([h0[None], hs[:-1]])
    # each step's cotangents of its gates' sums: dn_pre = (dh (1 - z) + dn) (1 - n^2),
    # d(x_z) = (dh (h_before - n) + dz) z (1 - z), d(x_r) = (dn_pre hid_n + dr) r (1 - r);
    # hid_n's is dn_pre r + its own
    by_dh = np.stack([h_before - n, 1 - z], axis=2)  # z's and n's
    k_act = np.stack([r * (1 - r), z * (1 - z), 1 - n * n], axis=2)
    dgates = _in_order(dx, reverse).reshape(steps, batch, 3, size)
    dhidden = np.empty((steps, batch, 3, size), x_parts.dtype)
    dh = g[steps].copy()
    for t in range(steps - 1, -1, -1):
        dh += dhs[t]
        np.multiply(dh[:, None], by_dh[t], out=dgates[t, :, 1:])
        dgates[t, :, 1:] += dacts[t, :, 1:]
        dgates[t, :, 1:] *= k_act[t, :, 1:]
        dgates[t, :, 0] = (dgates[t, :, 2] * hid_n[t] + dacts[t, :, 0]) * k_act[t, :, 0]
        dhidden[t, :, :2] = dgates[t, :, :2]
        dhidden[t, :, 2] = dgates[t, :, 2] * r[t] + dhid_n[t]
        dh = dh * z[t] + np.matmul(dhidden[t].reshape(batch, 3 * size), w_hh_t.T)
    flat = dhidden.reshape(-1, 3 * size)
    np.matmul(h_before.reshape(-1, size).T, flat, out=dw)
    np.sum(flat, axis=0, out=db)
    dh0[...] = dh
    return packed


def _gru_scan_parts(x_parts, w_hh_t, b_hh, h0, reverse):
    """The scan in ops, a step at a time (`nn.GRU`'s before it was one op)."""
    steps, size = x_parts.shape[0], h0.shape[1]
    h, hs, acts, hid_ns = h0, [None] * steps, [None] * steps, [None] * steps
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        x, hidden = x_parts[t], matmul(h, w_hh_t) + b_hh
        r, z, n = (slice(k * size, (k + 1) * size) for k in range(3))
        hid_ns[t] = hidden[:, n]
        r, z = sigmoid(x[:, r] + hidden[:, r]), sigmoid(x[:, z] + hidden[:, z])
        n = tanh(x[:, n] + r * hid_ns[t])
        h = hs[t] = n + z * (h - n)
        acts[t] = concatenate(r, z, n, axis=1)
    return _stacked([*hs, h], [acts, hid_ns])


gru_scan, gru_scan_grad = _scan_ops(
    "gru_scan", _gru_scan, _gru_scan_grad, _gru_scan_rule, _gru_scan_parts
)


__all__ = [n for n, v in list(globals().items()) if isinstance(v, Primitive) and n[0] != "_"]


# The rules above call ops of other families, which import this one: imported last, the
# cycle is harmless (no rule runs while the table loads).
from tracegrad.core.ops.elementwise import sigmoid, sigmoid_into, tanh  # noqa: E402
from tracegrad.core.ops.linalg import matmul  # noqa: E402
from tracegrad.core.ops.views import concatenate, reshape  # noqa: E402
