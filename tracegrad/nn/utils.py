"""`nn.utils`: gradient clipping, written with tensor ops so that a traced step clips too (the
scale is computed in the graph, not read back into Python); flattening parameters to a vector;
`pad_sequence`; and PyTorch's older, hook-based `weight_norm` and `spectral_norm` (the newer
ones, on parametrizations, are in `tracegrad.nn.parametrize`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.core.primitives import abs, minimum, sqrt
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import (
    concatenate,
    permute,
    pytorch_keywords,
    reshape,
    stack,
)
from tracegrad.frontend.linalg import vector_norm
from tracegrad.frontend.reductions import amax, sum
from tracegrad.frontend.tensor import Tensor, as_tensor
from tracegrad.nn import functional as F
from tracegrad.nn.layers import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from tracegrad.nn.modules import Module, Parameter, RemovableHandle, init_generator

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "clip_grads_with_norm_",
    "get_total_norm",
    "pad_sequence",
    "parameters_to_vector",
    "remove_spectral_norm",
    "remove_weight_norm",
    "spectral_norm",
    "unpad_sequence",
    "vector_to_parameters",
    "weight_norm",
]


def _with_grads(parameters: Tensor | Iterable[Tensor]) -> list[Tensor]:
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    return [p for p in params if p.grad is not None]


@no_grad()
def clip_grad_norm_(
    parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0,
    error_if_nonfinite: bool = False, foreach: bool | None = None,
) -> Tensor:  # fmt: skip
    """Scale all gradients together so that their joint norm is at most `max_norm`; returns
    the norm before clipping (PyTorch's). `error_if_nonfinite` raises on a nan or infinite norm
    (eagerly; a traced step cannot look at it); `foreach` is accepted."""
    params = _with_grads(parameters)
    if not params:
        return Tensor._of(0.0)
    total = get_total_norm([p.grad for p in params], norm_type, error_if_nonfinite)
    clip_grads_with_norm_(params, max_norm, total)
    return total


@no_grad()
def get_total_norm(
    tensors: Tensor | Iterable[Tensor], norm_type: float = 2.0,
    error_if_nonfinite: bool = False, foreach: bool | None = None,
) -> Tensor:  # fmt: skip
    """The norm of all `tensors` together, as one vector's (PyTorch 2.6's first half of
    `clip_grad_norm_`); `foreach` is accepted."""
    tensors = [tensors] if isinstance(tensors, Tensor) else [t for t in tensors if t is not None]
    if not tensors:
        return Tensor._of(0.0)
    norm_type = float(norm_type)  # PyTorch's takes "inf" too
    if norm_type == math.inf:
        total = amax(stack([amax(abs(t)) for t in tensors]))
    else:
        parts = stack([sum(_power(t, norm_type)) for t in tensors])
        total = sqrt(sum(parts)) if norm_type == 2.0 else sum(parts) ** (1.0 / norm_type)
    if error_if_nonfinite and not total.is_symbolic and not math.isfinite(total.item()):
        raise RuntimeError(
            f"clip_grad_norm_: the total norm of order {norm_type} of the gradients is "
            f"{total.item()}, so they cannot be clipped (error_if_nonfinite=True)"
        )
    return total


@no_grad()
def clip_grads_with_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float,
                          total_norm: Any, foreach: bool | None = None) -> None:  # fmt: skip
    """Scale the gradients by max_norm / total_norm where that is below 1 (PyTorch 2.6's second
    half of `clip_grad_norm_`); `foreach` is accepted."""
    scale = minimum(max_norm / (as_tensor(total_norm) + 1e-6), 1.0)
    for p in _with_grads(parameters):  # in place, as PyTorch: a held `p.grad` sees it
        p.grad.mul_(scale.astype(p.grad.dtype))


def _power(g: Tensor, norm_type: float) -> Tensor:
    """|g| ** norm_type; for the 2-norm g * g, exactly, in one pass over a real gradient."""
    if norm_type != 2.0:
        return abs(g) ** float(norm_type)
    a = abs(g) if g.dtype.kind == "c" else g
    return a * a


@no_grad()
def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
    """Clip every gradient element to [-clip_value, clip_value]."""
    for p in _with_grads(parameters):  # in place, as PyTorch
        p.grad.clamp_(-clip_value, clip_value)


# --- parameters as one vector --------------------------------------------------------------------


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and joined, in order, into one vector (differentiable)."""
    return concatenate([reshape(p, (-1,)) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Write consecutive slices of `vec` into the parameters (PyTorch's `param.data = ...`:
    not recorded by autograd)."""
    vec = as_tensor(vec)
    if vec.ndim != 1:
        raise TypeError(f"vector_to_parameters: expected a 1-d vector, got shape {vec.shape}")
    start = 0
    with no_grad():
        for p in parameters:
            p.copy_(reshape(vec[start : start + p.size], p.shape))
            start += p.size


# --- sequences ---------------------------------------------------------------------------------


def pad_sequence(
    sequences: Tensor | Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
    padding_side: str = "right",
) -> Tensor:  # fmt: skip
    """Tensors (L_i, *) padded with `padding_value` to the longest and stacked: (L, B, *), or
    (B, L, *) with batch_first; the padding goes after each sequence, or before it with
    padding_side="left". Differentiable in each sequence."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', not "
                         f"{padding_side!r}")  # fmt: skip
    xs = [as_tensor(s) for s in sequences]
    if not xs:
        raise RuntimeError("pad_sequence: received an empty list of sequences")
    longest = max(x.shape[0] for x in xs)
    padded = []
    for x in xs:
        fill = Tensor._of(
            bfloat16.full((longest - x.shape[0], *x.shape[1:]), padding_value, x.dtype)
        )
        padded.append(concatenate([x, fill] if padding_side == "right" else [fill, x]))
    return stack(padded, axis=0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Any, batch_first: bool = False
                   ) -> list[Tensor]:  # fmt: skip
    """`pad_sequence` undone: the first lengths[i] steps of each sequence, a list."""
    x = as_tensor(padded_sequences)
    x = x if batch_first else permute(x, (1, 0, *range(2, x.ndim)))
    lengths = lengths.numpy() if isinstance(lengths, Tensor) else np.asarray(lengths)
    return [x[i, : int(n)] for i, n in enumerate(lengths)]


# --- weight_norm and spectral_norm, PyTorch's hook-based versions -------------------------------


@pytorch_keywords
def norm_except_dim(v: Tensor, dim: int) -> Tensor:
    """The 2-norm of `v` over every axis but `dim`, kept as size-1 axes (PyTorch's
    `torch.norm_except_dim`); over the whole tensor, a 0-d one, when dim is -1 (PyTorch's
    convention here, not the last axis)."""
    if dim == -1:
        return vector_norm(v)
    axes = tuple(a for a in range(v.ndim) if a != dim)
    return vector_norm(v, 2.0, axes, keepdim=True)


class WeightNorm:
    """The forward pre-hook of `weight_norm`: name = g * v / ||v|| from name_g and name_v."""

    def __init__(self, name: str, dim: int) -> None:
        self.name, self.dim = name, dim
        self.handle: RemovableHandle | None = None

    def compute_weight(self, module: Module) -> Tensor:
        v, g = getattr(module, self.name + "_v"), getattr(module, self.name + "_g")
        return v * (g / norm_except_dim(v, self.dim))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module))


@pytorch_keywords
def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Reparametrize `module.name` as g * v / ||v|| (the norm over every axis but `dim`; dim
    None: over the whole tensor), g and v the parameters name_g and name_v, recomputed before
    each forward (PyTorch's `torch.nn.utils.weight_norm`). A traced step computes the weight
    inside, but does not set the attribute, which keeps the last eager forward's value: the
    parametrizations' `weight_norm` (tracegrad.nn.parametrize) computes it at every read."""
    fn = WeightNorm(name, -1 if dim is None else dim)
    weight = dict(module.named_parameters(recurse=False)).get(name)
    if weight is None:
        raise ValueError(f"weight_norm: {type(module).__name__} has no parameter {name!r}")
    delattr(module, name)
    module.register_parameter(name + "_g", Parameter(norm_except_dim(weight, fn.dim).detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    setattr(module, name, fn.compute_weight(module))
    fn.handle = module.register_forward_pre_hook(fn)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: `module.name` is a parameter again, holding the current weight."""
    fn = _hook_of(module, WeightNorm, name, "weight_norm")
    weight = fn.compute_weight(module).detach()
    for suffix in ("", "_g", "_v"):
        delattr(module, name + suffix)
    module.register_parameter(name, Parameter(weight))
    return module


def _hook_of(module: Module, kind: type, name: str, what: str) -> Any:
    for hook in module._forward_pre_hooks.values():
        if isinstance(hook, kind) and hook.name == name:
            hook.handle.remove()
            return hook
    raise ValueError(f"{what} of '{name}' not found in {module}")


def default_spectral_dim(module: Module) -> int:
    """PyTorch's: the output axis, 1 for a transposed convolution's weight, else 0."""
    return 1 if isinstance(module, ConvTranspose1d | ConvTranspose2d | ConvTranspose3d) else 0


def as_matrix(weight: Tensor, dim: int) -> Tensor:
    """`weight` with axis `dim` first, the rest flattened: (size of dim, -1)."""
    if dim != 0:
        weight = permute(weight, (dim, *(a for a in range(weight.ndim) if a != dim)))
    return reshape(weight, (weight.shape[0], -1))


def random_unit_vector(n: int, dtype: np.dtype, eps: float) -> Tensor:
    """A normalized N(0, 1) draw from the parameter-initialization generator."""
    return F.normalize(
        Tensor._of(init_generator().standard_normal(n).astype(dtype)), dim=0, eps=eps
    )


class SpectralNorm:
    """The forward pre-hook of `spectral_norm`: name = name_orig / sigma, sigma estimated by
    power iteration on the buffers name_u and name_v, which training updates in place (under
    no_grad; a traced step writes them back at every call, as the eager step does)."""

    def __init__(self, name: str, n_power_iterations: int, dim: int, eps: float) -> None:
        if n_power_iterations <= 0:
            raise ValueError("spectral_norm: n_power_iterations must be positive, not "
                             f"{n_power_iterations}")  # fmt: skip
        self.name, self.n_power_iterations, self.dim, self.eps = name, n_power_iterations, dim, eps
        self.handle: RemovableHandle | None = None

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        matrix = as_matrix(weight, self.dim)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n_power_iterations):  # v first, then u: PyTorch's order
                    v.copy_(F.normalize(permute(matrix, (1, 0)) @ u, dim=0, eps=self.eps))
                    u.copy_(F.normalize(matrix @ v, dim=0, eps=self.eps))
        # copies, as PyTorch's: the next forward's power iteration writes the buffers, and this
        # forward's backward must still read these values (a GAN's D(real), D(fake), one backward)
        u, v = u.detach().clone(), v.detach().clone()
        return weight / sum(u * (matrix @ v))

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))


@pytorch_keywords
def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
    dim: int | None = None,
) -> Module:  # fmt: skip
    """Divide `module.name` by its spectral norm, estimated by power iteration before each
    forward (PyTorch's `torch.nn.utils.spectral_norm`): parameter name_orig, buffers name_u and
    name_v (the singular vectors' estimates), as PyTorch names them in `state_dict`. As for
    `weight_norm`, the attribute `module.name` is set by eager forwards only."""
    weight = dict(module.named_parameters(recurse=False)).get(name)
    if weight is None:
        raise ValueError(f"spectral_norm: {type(module).__name__} has no parameter {name!r}")
    fn = SpectralNorm(name, n_power_iterations,
                      default_spectral_dim(module) if dim is None else dim, eps)  # fmt: skip
    h, w = as_matrix(weight, fn.dim).shape
    u, v = random_unit_vector(h, weight.dtype, eps), random_unit_vector(w, weight.dtype, eps)
    delattr(module, name)
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    fn.handle = module.register_forward_pre_hook(fn)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: `module.name` is a parameter again, holding the normalized weight
    (without a further power iteration)."""
    fn = _hook_of(module, SpectralNorm, name, "spectral_norm")
    weight = fn.compute_weight(module, do_power_iteration=False).detach()
    for suffix in ("", "_orig", "_u", "_v"):
        delattr(module, name + suffix)
    module.register_parameter(name, Parameter(weight))
    return module
