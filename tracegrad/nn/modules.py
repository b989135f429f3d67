"""`Module` and the layers PyTorch and MegEngine users expect.

Parameters are leaf tensors with `requires_grad=True`, registered (like submodules) when assigned
as attributes. Loading a state dict writes into the existing parameter tensors, so an optimizer
(or a traced step) that holds them keeps seeing the loaded values.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from tracegrad.frontend import random
from tracegrad.frontend.tensor import Listeners, Tensor
from tracegrad.frontend.tracer import watch
from tracegrad.nn import functional as F

_generator = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed the generator behind parameter initialization and the default random state that
    unseeded Dropout layers draw from (eagerly and in traced steps alike)."""
    global _generator
    _generator = np.random.default_rng(seed)
    random.manual_seed(seed)


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    data = _generator.uniform(-bound, bound, shape).astype(np.float32)
    return Tensor(data, requires_grad=True)


class Parameter(Tensor):
    """PyTorch's nn.Parameter: a leaf tensor that requires grad, sharing `data`'s array; assigned
    to a Module it is registered as a parameter (as every leaf that requires grad is)."""

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True):
        super().__init__(np.zeros(0, np.float32) if data is None else data,
                         requires_grad=requires_grad)  # fmt: skip


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class: subclasses set parameters and submodules as attributes and define `forward`."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign '{name}' before Module.__init__(): call super().__init__() first"
            )
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        if name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"buffer '{name}' must be a Tensor or None, not {type(value)}")
            self._buffers[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor) and value.is_leaf and value.requires_grad:
            self._parameters[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers.pop(name, None)
        object.__delattr__(self, name)

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """State that is not a parameter (batch norm's running statistics): in `state_dict`
        unless not `persistent`; a traced step that writes it in place writes it back."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot register a buffer before Module.__init__()")
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor(tensor)
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)
        object.__setattr__(self, name, tensor)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if Listeners.tracers:  # a traced step bakes in what `training` selects: guard it
            watch((id(self), "training"), f"{type(self).__name__}.training",
                  lambda: self.training, warn=False)  # fmt: skip
        return self.forward(*args, **kwargs)

    # --- traversal -------------------------------------------------------------------------
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module and every submodule, depth first in registration order, each once."""
        seen: set[int] = set()

        def walk(module: Module, path: str) -> Iterator[tuple[str, Module]]:
            if id(module) in seen:
                return
            seen.add(id(module))
            yield path, module
            for name, child in module._modules.items():
                yield from walk(child, f"{path}.{name}" if path else name)

        return walk(self, prefix)

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def children(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return iter(self._modules.items())

    def apply(self, fn: Any) -> Module:
        """Call `fn` on every submodule, then on this module (PyTorch's order); returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop the parameters' gradients (or zero them in place with set_to_none=False)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = Tensor(np.zeros(p.shape, p.grad.dtype))

    def named_parameters(self) -> Iterator[tuple[str, Tensor]]:
        """("0.weight", tensor) pairs, recursive, in registration order; shared ones once."""
        seen: set[int] = set()
        for path, module in self.named_modules():
            for name, p in module._parameters.items():
                if id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{path}.{name}" if path else name), p

    def parameters(self) -> Iterator[Tensor]:
        return (p for _, p in self.named_parameters())

    def named_buffers(self) -> Iterator[tuple[str, Tensor]]:
        for path, module in self.named_modules():
            for name, b in module._buffers.items():
                if b is not None:
                    yield (f"{path}.{name}" if path else name), b

    def buffers(self) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers())

    def _state(self) -> dict[str, Tensor]:
        """Parameters and persistent buffers by name, each module's parameters first."""
        params = {id(p): name for name, p in self.named_parameters()}
        state = {}
        for path, module in self.named_modules():
            prefix = f"{path}." if path else ""
            for name, p in module._parameters.items():
                if params.get(id(p)) == prefix + name:
                    state[prefix + name] = p
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[prefix + name] = b
        return state

    # --- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Parameter (and buffer) name -> a detached tensor sharing its data (as in PyTorch)."""
        return {name: p.detach() for name, p in self._state().items()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy `state` into the existing parameters. Checks everything before writing anything."""
        params = self._state()
        missing = [k for k in params if k not in state]
        unexpected = [k for k in state if k not in params]
        arrays = {k: v if isinstance(v, Tensor) else Tensor(np.asarray(v))  # traced: symbolic
                  for k, v in state.items() if k in params}  # fmt: skip
        problems = [
            f"shape mismatch for '{k}': checkpoint {a.shape}, model {params[k].shape}"
            for k, a in arrays.items()
            if a.shape != params[k].shape
        ]
        if strict:
            problems += [f"missing key '{k}'" for k in missing]
            problems += [f"unexpected key '{k}'" for k in unexpected]
        if problems:
            raise RuntimeError(f"{type(self).__name__}.load_state_dict: " + "; ".join(problems))
        for k, a in arrays.items():
            params[k]._assign(a)
        return IncompatibleKeys(missing, unexpected)

    def to(self, *args: Any, **kwargs: Any) -> Module:
        """PyTorch's model.to("cpu") (the CPU is the only device: the module itself) and
        model.to(dtype): floating parameters and buffers (and their grads) cast in place, so an
        optimizer holding them keeps them."""
        for a in (*args, *kwargs.values()):
            if a is None or isinstance(a, bool) or isinstance(a, str) and a.startswith("cpu"):
                continue  # no device, non_blocking=, copy=
            if isinstance(a, str):
                raise ValueError(f"{type(self).__name__}.to({a!r}): only 'cpu' is supported")
            self._cast(np.dtype(a))
        return self

    def double(self) -> Module:
        return self.to(np.float64)

    def float(self) -> Module:
        return self.to(np.float32)

    def half(self) -> Module:
        return self.to(np.float16)

    def _cast(self, dtype: np.dtype) -> None:
        if dtype.kind != "f":
            raise TypeError(f"{type(self).__name__}.to({dtype}): only floating dtypes")
        if Listeners.tracers:
            raise RuntimeError(f"{type(self).__name__}.to({dtype}) inside a traced step: cast "
                               "the model before tracing")  # fmt: skip
        for t in (*self.parameters(), *self.buffers()):
            if t.dtype.kind == "f" and t.dtype != dtype:
                t._value = t._value.astype(dtype)
                if t._grad is not None:
                    t._grad = Tensor(t._grad.numpy().astype(dtype))

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    # --- repr ------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not self._modules:
            return head + ")"
        lines = [
            f"  ({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()
        ]
        return head + "\n" + "\n".join(lines) + "\n)"


class Linear(Module):
    """y = x @ weight.T + bias, weight of shape (out, in); PyTorch's default initialization."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        # kaiming_uniform(a=sqrt(5)) reduces to U(-1/sqrt(in), 1/sqrt(in)), as for the bias
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Sequential(Module):
    """Applies its layers in order; they are registered as "0", "1", ... (as in PyTorch)."""

    def __init__(self, *layers: Module):
        super().__init__()
        for i, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential: layer {i} is a {type(layer).__name__}, not a Module")
            setattr(self, str(i), layer)

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x, self.inplace)


class GELU(Module):
    """GELU: exact (erf) by default, or `approximate="tanh"`, as PyTorch's."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class LayerNorm(Module):
    """Normalizes over the trailing `normalized_shape` axes, with a learned scale and shift."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True):  # fmt: skip
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape, self.eps = tuple(shape), eps
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = Tensor(np.ones(self.normalized_shape, np.float32), requires_grad=True)
        if elementwise_affine and bias:
            self.bias = Tensor(np.zeros(self.normalized_shape, np.float32), requires_grad=True)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        affine = self.weight is not None
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={affine}"


class Dropout(Module):
    """Zeroes each element with probability `p` in training and scales the rest by 1/(1-p).

    The mask is drawn from a random state tensor (tracegrad.random): the default one, or one of
    its own when `seed` is given. A traced step reads and advances that state, so each call
    draws a fresh mask, and a traced run draws the same masks as an eager run with the same
    seed."""

    def __init__(self, p: float = 0.5, inplace: bool = False, *, seed: int | None = None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], not {p}")
        self.p, self.inplace = p, inplace
        self.random_state = None if seed is None else random.new_state(seed)

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training, self.inplace, state=self.random_state)

    def extra_repr(self) -> str:
        return f"p={self.p}"
