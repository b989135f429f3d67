"""In-place initializers with PyTorch's names and formulas (`nn.init.kaiming_uniform_`, ...).

They draw from the generator `nn.manual_seed` seeds, write into the tensor without recording a
gradient, and return it."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.random import Generator
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import modules

__all__ = [
    "calculate_gain",
    "constant_",
    "dirac_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "sparse_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]


_LINEAR = ("linear", "identity", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
           "conv_transpose2d", "conv_transpose3d")  # fmt: skip


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor by which a nonlinearity scales a signal's standard deviation, as PyTorch's."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is not None and (isinstance(param, bool) or not isinstance(param, int | float)):
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a number")
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out): dims 1 and 0 times the receptive field (kernel) size."""
    if tensor.ndim < 2:
        raise ValueError(f"fan in and fan out need a tensor of 2 or more dims, not {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


_calculate_fan_in_and_fan_out = _fans  # PyTorch's private name, which layers' own inits call


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    """The fan kaiming's `mode` names (PyTorch's private name: peft's LoRA init calls it)."""
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming init: mode must be 'fan_in' or 'fan_out', not {mode!r}")
    return _fans(tensor)[mode == "fan_out"]


def _fill(tensor: Tensor, data: np.ndarray) -> Tensor:
    with no_grad():
        tensor._assign(Tensor._of(bfloat16.as_dtype(data, tensor.dtype)))
    return tensor


def _rng(generator: np.random.Generator | Generator | None) -> np.random.Generator:
    """The generator to draw from: `generator` (a `torch.Generator`, whose host generator it
    is, as llm.c's `GPT` seeds its own for initialization; or a NumPy Generator), else the one
    `nn.manual_seed` seeds."""
    if isinstance(generator, Generator):
        return generator.rng
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise TypeError(f"generator must be a torch.Generator or a numpy.random.Generator, not "
                        f"{type(generator)}")  # fmt: skip
    return modules.init_generator() if generator is None else generator


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    return _fill(tensor, _rng(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    return _fill(tensor, _rng(generator).normal(mean, std, tensor.shape))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0, generator=None) -> Tensor:  # fmt: skip
    """N(mean, std^2) restricted to [a, b], by rejection as PyTorch draws it: from the normal
    when it mostly falls inside, else uniform proposals on [a, b] accepted by the density."""
    rng, n = _rng(generator), math.prod(tensor.shape)
    cdf = lambda v: (1.0 + math.erf((v - mean) / (std * math.sqrt(2.0)))) / 2.0  # noqa: E731
    inside = cdf(b) - cdf(a)
    log_peak = -0.5 * ((max(a, min(mean, b)) - mean) / std) ** 2

    def draw(k: int) -> np.ndarray:
        if inside > 0.3:
            v = rng.normal(mean, std, k)
            return v[(v >= a) & (v <= b)]
        v = rng.uniform(a, b, k)
        return v[np.log(rng.uniform(size=k)) <= -0.5 * ((v - mean) / std) ** 2 - log_peak]

    kept, have = [], 0
    while have < n:
        kept.append(draw(max(16, int(1.2 * (n - have) / max(inside, 1e-3)))))
        have += kept[-1].size
    return _fill(tensor, np.concatenate(kept)[:n].reshape(tensor.shape))


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix of the tensor viewed as (dim 0, the rest), times `gain`: the Q
    of a Gaussian matrix's QR, its columns' signs those of R's diagonal (Haar distributed)."""
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: needs a tensor of 2 or more dims, not {tensor.shape}")
    rows = tensor.shape[0]
    cols = math.prod(tensor.shape) // rows if rows else 0
    if rows == 0 or cols == 0:
        return tensor
    flat = _rng(generator).standard_normal((rows, cols))
    q, r = np.linalg.qr(flat.T if rows < cols else flat)
    q = q * np.sign(np.diag(r))
    return _fill(tensor, (q.T if rows < cols else q).reshape(tensor.shape) * gain)


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """A 2-d tensor drawn from N(0, std^2), then in each column ceil(sparsity * rows) entries
    at random rows set to zero (PyTorch's sparse initialization, Martens 2010)."""
    if tensor.ndim != 2:
        raise ValueError(f"sparse_: only 2-d tensors are supported, not {tensor.shape}")
    rows, cols = tensor.shape
    rng = _rng(generator)
    data = rng.normal(0.0, std, (rows, cols))
    zeros = math.ceil(sparsity * rows)
    for c in range(cols):
        data[rng.permutation(rows)[:zeros], c] = 0
    return _fill(tensor, data)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix (ones on the diagonal of a 2-d tensor of any shape)."""
    if tensor.ndim != 2:
        raise ValueError(f"eye_: needs a 2-d tensor, not {tensor.shape}")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """A convolution weight (out, in, *kernel) that passes its input through: in each group,
    output channel d reads input channel d at the kernel's centre."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError(f"dirac_: needs a 3-, 4- or 5-d tensor, not {tensor.shape}")
    if tensor.shape[0] % groups:
        raise ValueError(f"dirac_: dim 0 of {tensor.shape} must divide by groups {groups}")
    per_group = tensor.shape[0] // groups
    data = np.zeros(tensor.shape)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, tensor.shape[1])):
            data[(g * per_group + d, d, *centre)] = 1.0
    return _fill(tensor, data)


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, np.full(tensor.shape, val))


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _fans(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def _kaiming_std(tensor: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    return calculate_gain(nonlinearity, a) / math.sqrt(_calculate_correct_fan(tensor, mode))


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:  # fmt: skip
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:  # fmt: skip
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def _deprecated(name: str) -> Any:
    """PyTorch's old spelling `init.<name>` of `init.<name>_`: it warns and does the same."""
    new = globals()[name + "_"]

    def old(*args: Any, **kwargs: Any) -> Tensor:
        warnings.warn(f"nn.init.{name} is now deprecated in favor of nn.init.{name}_",
                      FutureWarning, stacklevel=2)  # fmt: skip
        return new(*args, **kwargs)

    old.__name__ = name
    return old


_OLD = ("uniform", "normal", "constant", "eye", "dirac", "xavier_uniform", "xavier_normal",
        "kaiming_uniform", "kaiming_normal", "orthogonal")  # fmt: skip
globals().update({name: _deprecated(name) for name in _OLD})
__all__ += list(_OLD)
