"""Recurrent layers with PyTorch's arguments, weight names (`weight_ih_l0`, `bias_hh_l1_reverse`)
and gate order (LSTM: i, f, g, o; GRU: r, z, n), so state dicts load both ways: RNN, LSTM, GRU
and their cells.

A layer's input projection x W_ih^T + b_ih is one matrix product for all time steps and all gates;
each step then adds h W_hh^T (one product for all gates) and applies the gates' elementwise math,
which the compiler's fuser can make one kernel per step. A PackedSequence (`tracegrad.nn.packed`)
runs padded, each sequence's states kept from the step after its end (a mask per step where
some sequence has ended), so outputs and final states are PyTorch's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError, warn_user
from tracegrad.frontend.functions import concatenate, matmul, permute, reshape, stack
from tracegrad.frontend.tensor import Tensor, as_tensor
from tracegrad.nn import functional as F
from tracegrad.nn.modules import Module, empty_parameter, inverse_sqrt, reset_uniform
from tracegrad.nn.packed import PackedSequence, pack_padded_sequence, pad_packed_sequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# --- one step: the gates' products and elementwise math ------------------------------------------


def _recurrent(h: Tensor, w_hh_t: Tensor, b_hh: Tensor | None) -> Tensor:
    """h W_hh^T + b_hh, every gate in one product."""
    out = matmul(h, w_hh_t)
    return out if b_hh is None else out + b_hh


def _gate(gates: Tensor, k: int, size: int) -> Tensor:
    return gates[..., k * size : (k + 1) * size]


def _rnn_step(x_part: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Tensor | None,
              activation: Callable) -> Tensor:  # fmt: skip
    return activation(x_part + _recurrent(h, w_hh_t, b_hh))


def _lstm_step(x_part: Tensor, h: Tensor, c: Tensor, w_hh_t: Tensor, b_hh: Tensor | None,
               w_hr_t: Tensor | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """c' = sigmoid(f) c + sigmoid(i) tanh(g), h' = sigmoid(o) tanh(c') (projected by W_hr)."""
    gates, size = x_part + _recurrent(h, w_hh_t, b_hh), c.shape[-1]
    i, f, g, o = (_gate(gates, k, size) for k in range(4))
    c = P.sigmoid(f) * c + P.sigmoid(i) * P.tanh(g)
    h = P.sigmoid(o) * P.tanh(c)
    return (h if w_hr_t is None else matmul(h, w_hr_t)), c


def _gru_step(x_part: Tensor, h: Tensor, w_hh_t: Tensor, b_hh: Tensor | None) -> Tensor:
    """r, z = sigmoid(W_i x + b_i + W_h h + b_h); n = tanh(W_in x + b_in + r (W_hn h + b_hn));
    h' = (1 - z) n + z h."""
    hidden, size = _recurrent(h, w_hh_t, b_hh), h.shape[-1]
    r = P.sigmoid(_gate(x_part, 0, size) + _gate(hidden, 0, size))
    z = P.sigmoid(_gate(x_part, 1, size) + _gate(hidden, 1, size))
    n = P.tanh(_gate(x_part, 2, size) + r * _gate(hidden, 2, size))
    return n + z * (h - n)


def _activation(nonlinearity: str) -> Callable:
    if nonlinearity == "tanh":
        return P.tanh
    if nonlinearity == "relu":
        return F.relu
    raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', not {nonlinearity!r}")


def _sequence(op: str, input: Any) -> Tensor:
    if hasattr(input, "batch_sizes"):
        raise TypeError(f"{op}: this PackedSequence is not tracegrad's; pack with "
                        "tracegrad.nn.packed (torch.nn.utils.rnn), or pass a padded "
                        "tensor")  # fmt: skip
    return as_tensor(input)


class RNNBase(Module):
    """A stack of recurrent layers, each one direction or two (`bidirectional`): inputs
    (L, N, H_in), or (N, L, H_in) with `batch_first`, or unbatched (L, H_in); initial states
    (layers * directions, N, H) default to zeros. Returns (output, h_n), for LSTM (output,
    (h_n, c_n)). `dropout` applies to every layer's output but the last, in training."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        name = type(self).__name__
        if isinstance(dropout, bool) or not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout must be a probability in [0, 1], not {dropout}")
        if dropout and num_layers == 1:
            warn_user("dropout option adds dropout after all but last recurrent layer, so "
                      "non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}")  # fmt: skip
        if min(input_size, hidden_size, num_layers) <= 0:
            raise ValueError(f"{name}: input_size {input_size}, hidden_size {hidden_size} and "
                             f"num_layers {num_layers} must be positive")  # fmt: skip
        if proj_size and (mode != "LSTM" or not 0 < proj_size < hidden_size):
            raise ValueError(f"{name}: proj_size {proj_size} is for LSTM only, and must be "
                             f"smaller than hidden_size {hidden_size}")  # fmt: skip
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, proj_size
        gates, out_size = _GATES[mode] * hidden_size, proj_size or hidden_size
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            for suffix in self._suffixes():
                inputs = input_size if layer == 0 else out_size * len(self._suffixes())
                shapes = {"weight_ih": (gates, inputs), "weight_hh": (gates, out_size)}
                if bias:
                    shapes.update(bias_ih=(gates,), bias_hh=(gates,))
                if proj_size:
                    shapes["weight_hr"] = (proj_size, hidden_size)
                for kind, shape in shapes.items():
                    setattr(self, f"{kind}_l{layer}{suffix}", empty_parameter(*shape))
                    self._flat_weights_names.append(f"{kind}_l{layer}{suffix}")
        self.reset_parameters()
        self.to(device, dtype)

    def reset_parameters(self) -> None:
        """PyTorch's: every parameter, in order, from U(-1/sqrt(H), 1/sqrt(H))."""
        reset_uniform(inverse_sqrt(self.hidden_size), *self.parameters())

    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    @property
    def all_weights(self) -> list[list[Tensor]]:
        """Each layer and direction's parameters, in PyTorch's order."""
        per = len(self._flat_weights_names) // (self.num_layers * len(self._suffixes()))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i : i + per]] for i in range(0, len(names), per)]

    def flatten_parameters(self) -> None:
        """cuDNN packs the weights into one buffer; there is nothing to pack here."""

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        for flag, default in (("bias", True), ("batch_first", False), ("dropout", 0.0),
                              ("bidirectional", False), ("proj_size", 0)):  # fmt: skip
            if getattr(self, flag) != default:
                text += f", {flag}={getattr(self, flag)}"
        return text

    def _weights(self, layer: int, suffix: str) -> tuple:
        """(W_ih, W_hh^T, b_ih, b_hh, W_hr^T or None) of one layer and direction."""
        get = lambda kind: getattr(self, f"{kind}_l{layer}{suffix}", None)  # noqa: E731
        w_hr = get("weight_hr")
        return (get("weight_ih"), get("weight_hh").T, get("bias_ih"), get("bias_hh"),
                None if w_hr is None else w_hr.T)  # fmt: skip

    def _states(self, hx: Any, batch: int, dtype: Any, batched: bool) -> list[Tensor]:
        """The initial states [h0] or [h0, c0], each (layers * directions, N, size)."""
        count = self.num_layers * len(self._suffixes())
        sizes = [self.proj_size or self.hidden_size]
        if self.mode == "LSTM":
            sizes.append(self.hidden_size)
        if hx is None:
            return [Tensor._of(np.zeros((count, batch, s), dtype)) for s in sizes]
        given = list(hx) if self.mode == "LSTM" else [hx]
        if len(given) != len(sizes):
            raise TypeError(f"{type(self).__name__}: hx must be (h0, c0) for an LSTM, else h0")
        states = []
        for state, size in zip(given, sizes, strict=True):
            state = as_tensor(state)
            if not batched:
                state = reshape(state, (state.shape[0], 1, *state.shape[1:]))
            if state.shape != (count, batch, size):
                raise ShapeError(
                    f"{type(self).__name__}: initial state {state.shape}, expected "
                    f"{(count, batch, size) if batched else (count, size)}"
                )
            states.append(state)
        return states

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:
        if isinstance(input, PackedSequence):
            return self._packed(input, hx)
        name = type(self).__name__
        x = _sequence(name, input)
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input {x.shape}, expected (L, N, {self.input_size}), "
                             f"(N, L, {self.input_size}) with batch_first, or unbatched "
                             f"(L, {self.input_size})")  # fmt: skip
        return self._run(x, hx, None)

    def _packed(self, input: PackedSequence, hx: Any) -> tuple[PackedSequence, Any]:
        """Run the padded batch in its sorted order, the states of the sequences that have
        ended masked, and pack the output as the input was packed."""
        sorted_input = input._replace(sorted_indices=None, unsorted_indices=None)
        x, lengths = pad_packed_sequence(sorted_input)
        if x.shape[-1] != self.input_size:
            raise ShapeError(f"{type(self).__name__}: packed input {input.data.shape}, expected "
                             f"(steps, {self.input_size})")  # fmt: skip
        order, unorder = input.sorted_indices, input.unsorted_indices
        if hx is not None and order is not None:  # given in the batch's order
            hx = tuple(as_tensor(h)[:, order] for h in hx) if self.mode == "LSTM" else \
                as_tensor(hx)[:, order]  # fmt: skip
        y, finals = self._run(x, hx, lengths.numpy(), packed=True)
        data = pack_padded_sequence(y, lengths).data
        if unorder is not None:
            finals = tuple(f[:, unorder] for f in finals) if self.mode == "LSTM" else \
                finals[:, unorder]  # fmt: skip
        return input._replace(data=data), finals

    def _run(self, x: Tensor, hx: Any, lengths: np.ndarray | None,
             packed: bool = False) -> tuple[Tensor, Any]:  # fmt: skip
        batched, given = x.ndim == 3, x.shape
        if not batched:
            x = reshape(x, (x.shape[0], 1, x.shape[1]))
        elif self.batch_first and not packed:
            x = permute(x, (1, 0, 2))
        if x.shape[0] == 0:  # PyTorch's refusal too: no step, no final state to give
            raise ShapeError(f"{type(self).__name__}: a sequence of no steps, input {given}")
        states = self._states(hx, x.shape[1], _state_dtype(x), batched)
        finals: list[list[Tensor]] = [[] for _ in states]
        for layer in range(self.num_layers):
            outputs = []
            for d, suffix in enumerate(self._suffixes()):
                k = layer * len(self._suffixes()) + d
                ys, last = self._direction(x, [s[k] for s in states], layer, suffix, lengths)
                outputs.append(ys)
                for final, value in zip(finals, last, strict=True):
                    final.append(value)
            x = outputs[0] if len(outputs) == 1 else concatenate(outputs, axis=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        finals = [stack(f, axis=0) for f in finals]
        if not batched:
            x, finals = reshape(x, (x.shape[0], x.shape[2])), [f[:, 0] for f in finals]
        elif self.batch_first and not packed:
            x = permute(x, (1, 0, 2))
        return x, (tuple(finals) if self.mode == "LSTM" else finals[0])

    def _direction(self, x: Tensor, state: list[Tensor], layer: int, suffix: str,
                   lengths: np.ndarray | None = None) -> tuple:  # fmt: skip
        """One layer in one direction over the whole sequence: the outputs (L, N, H) and the
        final states. With `lengths` (decreasing), a sequence's state stays as it was at the
        steps past its end: forward its last valid state, backward the initial one until its
        end (PyTorch's packed semantics; the outputs there are never read)."""
        w_ih, w_hh_t, b_ih, b_hh, w_hr_t = self._weights(layer, suffix)
        x_parts = _input_part(x, w_ih, b_ih)  # every step's and gate's: one GEMM
        if b_hh is not None and self.mode != "GRU":  # hoisted too: outside GRU's r * (...)
            x_parts, b_hh = x_parts + b_hh, None
        if self.mode == "LSTM" and w_hr_t is None and lengths is None:  # one op (`lstm_scan`)
            out, steps = P.lstm_scan(x_parts, w_hh_t, *state, reverse=bool(suffix)), x.shape[0]
            last = 0 if suffix else steps - 1  # the h's, then the final c (then the workspace)
            return out[:steps], [out[last], out[steps]]
        if self.mode == "GRU" and lengths is None:  # one op (`gru_scan`)
            if b_hh is None:
                b_hh = Tensor._of(np.zeros(w_hh_t.shape[1], x_parts.dtype))
            out = P.gru_scan(x_parts, w_hh_t, b_hh, state[0], reverse=bool(suffix))
            return out[: x.shape[0]], [out[x.shape[0]]]
        steps = range(x.shape[0] - 1, -1, -1) if suffix else range(x.shape[0])
        outputs: list[Any] = [None] * x.shape[0]
        for t in steps:
            if self.mode == "LSTM":
                new = list(_lstm_step(x_parts[t], *state, w_hh_t, b_hh, w_hr_t))
            elif self.mode == "GRU":
                new = [_gru_step(x_parts[t], state[0], w_hh_t, b_hh)]
            else:
                act = _activation("tanh" if self.mode == "RNN_TANH" else "relu")
                new = [_rnn_step(x_parts[t], state[0], w_hh_t, b_hh, act)]
            if lengths is not None and lengths[-1] <= t:  # some sequence has ended
                valid = Tensor._of((lengths > t)[:, None])
                new = [P.where(valid, n, s) for n, s in zip(new, state, strict=True)]
            state = new
            outputs[t] = state[0]
        return stack(outputs, axis=0), state


class RNN(RNNBase):
    """h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu: `nonlinearity`)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        _activation(nonlinearity)
        super().__init__(f"RNN_{nonlinearity.upper()}", input_size, hidden_size, num_layers,
                         bias, batch_first, dropout, bidirectional, 0, device, dtype)  # fmt: skip
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None):  # fmt: skip
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, proj_size, device, dtype)  # fmt: skip


class GRU(RNNBase):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None):  # fmt: skip
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first, dropout,
                         bidirectional, 0, device, dtype)  # fmt: skip


# --- cells: one step ---------------------------------------------------------------------------


class RNNCellBase(Module):
    """weight_ih (gates * H, H_in), weight_hh (gates * H, H), bias_ih and bias_hh, all drawn
    from U(-1/sqrt(H), 1/sqrt(H)). Inputs (N, H_in) or unbatched (H_in,); the state defaults
    to zeros."""

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        rows = self.gates * hidden_size
        self.weight_ih = empty_parameter(rows, input_size)
        self.weight_hh = empty_parameter(rows, hidden_size)
        self.bias_ih = empty_parameter(rows) if bias else None
        self.bias_hh = empty_parameter(rows) if bias else None
        self.reset_parameters()
        self.to(device, dtype)

    reset_parameters = RNNBase.reset_parameters

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")

    def _prepare(self, input: Any, hx: Any, count: int) -> tuple[Tensor, list[Tensor], bool]:
        """The input as (N, H_in), the `count` states as (N, H), and whether it was batched."""
        name = type(self).__name__
        x = _sequence(name, input)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ShapeError(f"{name}: input {x.shape}, expected (N, {self.input_size}) or "
                             f"({self.input_size},)")  # fmt: skip
        batched = x.ndim == 2
        x = x if batched else reshape(x, (1, x.shape[0]))
        shape = (x.shape[0], self.hidden_size)
        if hx is None:
            dtype = _state_dtype(x)
            return x, [Tensor._of(np.zeros(shape, dtype)) for _ in range(count)], batched
        states = [as_tensor(h) for h in (hx if count > 1 else [hx])]
        states = [s if batched else reshape(s, (1, *s.shape)) for s in states]
        if len(states) != count or any(s.shape != shape for s in states):
            raise ShapeError(f"{name}: states {[s.shape for s in states]}, expected {count} of "
                             f"{shape if batched else shape[1:]}")  # fmt: skip
        return x, states, batched


def _unbatch(t: Tensor, batched: bool) -> Tensor:
    return t if batched else t[0]


class RNNCell(RNNCellBase):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device: Any = None, dtype: Any = None):  # fmt: skip
        _activation(nonlinearity)
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Any, hx: Any = None) -> Tensor:
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _rnn_step(_input_part(x, self.weight_ih, self.bias_ih), h, self.weight_hh.T,
                      self.bias_hh, _activation(self.nonlinearity))  # fmt: skip
        return _unbatch(h, batched)


class LSTMCell(RNNCellBase):
    gates = 4

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Tensor]:
        x, (h, c), batched = self._prepare(input, hx, 2)
        h, c = lstm_cell(x, (h, c), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return _unbatch(h, batched), _unbatch(c, batched)


class GRUCell(RNNCellBase):
    gates = 3

    def forward(self, input: Any, hx: Any = None) -> Tensor:
        x, (h,), batched = self._prepare(input, hx, 1)
        return _unbatch(gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih,
                                 self.bias_hh), batched)  # fmt: skip


def lstm_cell(input: Tensor, hx: tuple[Tensor, Tensor], w_ih: Tensor, w_hh: Tensor,
              b_ih: Tensor | None = None,
              b_hh: Tensor | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """PyTorch's `torch.lstm_cell`: one step of (N, H_in) from the states (h, c), each (N, H).
    The gates' math as ops, which a plan fuses into one kernel a step: a one-step `lstm_scan`
    runs its NumPy version (written for many steps) wherever a plan has no kernels."""
    return _lstm_step(_input_part(input, w_ih, b_ih), *hx, w_hh.T, b_hh)


def gru_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None = None,
             b_hh: Tensor | None = None) -> Tensor:  # fmt: skip
    """PyTorch's `torch.gru_cell`: one step (see `lstm_cell`)."""
    return _gru_step(_input_part(input, w_ih, b_ih), hx, w_hh.T, b_hh)


def rnn_tanh_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:  # fmt: skip
    """PyTorch's `torch.rnn_tanh_cell`: tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    return _rnn_step(_input_part(input, w_ih, b_ih), hx, w_hh.T, b_hh, P.tanh)


def rnn_relu_cell(input: Tensor, hx: Tensor, w_ih: Tensor, w_hh: Tensor,
                  b_ih: Tensor | None = None, b_hh: Tensor | None = None) -> Tensor:  # fmt: skip
    """PyTorch's `torch.rnn_relu_cell`: relu(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    return _rnn_step(_input_part(input, w_ih, b_ih), hx, w_hh.T, b_hh, F.relu)


def _input_part(x: Tensor, w_ih: Tensor, b_ih: Tensor | None) -> Tensor:
    """x W_ih^T + b_ih: every gate's input part."""
    out = matmul(x, w_ih.T)
    return out if b_ih is None else out + b_ih


def _state_dtype(x: Tensor) -> np.dtype:
    """The dtype of zero initial states: the input's if floating (bfloat16 too), as PyTorch's."""
    return np.dtype(x.dtype) if x.dtype.kind == "f" else np.dtype(np.float32)
