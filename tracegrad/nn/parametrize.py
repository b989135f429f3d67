"""Parametrizations (PyTorch's `torch.nn.utils.parametrize` and `parametrizations`): a module's
tensor `name` becomes a property computed at each read from `parametrizations.name.original`
(or `original0`, `original1`, ... where a parametrization's `right_inverse` splits it), as
PyTorch does it: the module's class is swapped for a subclass holding the property, so
`state_dict` keys, and code that reads `module.weight`, are PyTorch's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend import creation, functions, linalg
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import pytorch_keywords
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn import functional as F
from tracegrad.nn.layers import ModuleDict, ModuleList
from tracegrad.nn.modules import Module, Parameter
from tracegrad.nn.utils import as_matrix, default_spectral_dim, norm_except_dim, random_unit_vector

__all__ = [
    "ParametrizationList",
    "cached",
    "is_parametrized",
    "orthogonal",
    "register_parametrization",
    "remove_parametrizations",
    "spectral_norm",
    "weight_norm",
]


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order to its `original` (or, where the
    first's right_inverse returns several tensors, to `original0`, `original1`, ...)."""

    def __init__(self, modules: Sequence[Module], original: Tensor, unsafe: bool = False):
        super().__init__(modules)
        self.unsafe = unsafe
        with no_grad():
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    new = module.right_inverse(new)
        object.__setattr__(self, "is_tensor", isinstance(new, Tensor))
        object.__setattr__(self, "ntensors", 1 if self.is_tensor else len(new))
        if self.is_tensor:
            if not unsafe and (new.dtype != original.dtype or new.shape != original.shape):
                raise ValueError(
                    "register_parametrization: right_inverse must keep the tensor's shape and "
                    f"dtype ({original.shape} {original.dtype}), it gave {new.shape} {new.dtype}"
                )
            original.data = new  # the same tensor: an optimizer holding it keeps working
            _register(self, "original", original)
        else:
            for i, part in enumerate(new):
                part = Parameter(part.detach(), original.requires_grad) \
                    if isinstance(original, Parameter) else part.detach()  # fmt: skip
                _register(self, f"original{i}", part)

    def right_inverse(self, value: Tensor) -> None:
        """`module.name = value`: store what the parametrizations map to `value`."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
            parts = [value] if self.is_tensor else list(value)
            for name, part in zip(self._original_names(), parts, strict=True):
                getattr(self, name).copy_(part)

    def _original_names(self) -> list[str]:
        return ["original"] if self.is_tensor else [f"original{i}" for i in range(self.ntensors)]

    def forward(self) -> Tensor:
        first, *rest = list(self)
        x = first(*(getattr(self, name) for name in self._original_names()))
        for module in rest:
            x = module(x)
        return x


def _register(module: Module, name: str, tensor: Tensor) -> None:
    if isinstance(tensor, Parameter):
        module.register_parameter(name, tensor)
    else:
        module.register_buffer(name, tensor)


class ParametrizedModule:
    """The mixin of the classes `register_parametrization` swaps in: `module.name = value`
    for a parametrized name goes through the parametrizations' right_inverse."""

    def __setattr__(self, name: str, value: Any) -> None:
        if is_parametrized(self, name):
            self.parametrizations[name].right_inverse(value)
        else:
            super().__setattr__(name, value)


def _parametrized_class(cls: type) -> type:
    """A subclass of `cls` to give this one module its properties (PyTorch's
    `Parametrized<cls>`), so that other instances of `cls` are untouched."""
    return type(f"Parametrized{cls.__name__}", (ParametrizedModule, cls), {})


def _property(name: str) -> property:
    return property(lambda self: self.parametrizations[name](), doc=f"`{name}`, parametrized")


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """Make `module.tensor_name` the output of `parametrization` (a module whose forward takes
    the original tensor, or the tensors its `right_inverse` returns); a second registration on
    the same name is applied after the first."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    state = dict(module.named_parameters(recurse=False))
    state.update(module.named_buffers(recurse=False))
    if tensor_name not in state:
        raise ValueError(
            f"register_parametrization: {type(module).__name__} has no parameter or buffer "
            f"{tensor_name!r}"
        )
    original = state[tensor_name]
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        module.__class__ = _parametrized_class(type(module))
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    setattr(type(module), tensor_name, _property(tensor_name))
    return module


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has parametrizations (on `tensor_name`, if given)."""
    parametrizations = module.__dict__.get("parametrizations")
    if not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else tensor_name in parametrizations


def remove_parametrizations(
    module: Module, tensor_name: str, leave_parametrized: bool = True
) -> Module:
    """Undo `register_parametrization` on `tensor_name`: the tensor is a parameter (or buffer)
    again, holding its parametrized value (or, with leave_parametrized=False, the original)."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"remove_parametrizations: {type(module).__name__} has no "
                         f"parametrization on {tensor_name!r}")  # fmt: skip
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                original.copy_(getattr(module, tensor_name))  # the same tensor, as PyTorch's
    elif leave_parametrized:
        value = getattr(module, tensor_name).detach()
        original = Parameter(value, plist.original0.requires_grad) \
            if isinstance(plist.original0, Parameter) else value  # fmt: skip
    else:
        raise ValueError(
            "remove_parametrizations: cannot leave unparametrized (leave_parametrized=False) a "
            "tensor that is parametrized in terms of a sequence of tensors"
        )
    delattr(type(module), tensor_name)
    delattr(module.parametrizations, tensor_name)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = type(module).__bases__[1]
    _register(module, tensor_name, original)
    return module


@contextlib.contextmanager
def cached() -> Iterator[None]:
    """PyTorch's cache of parametrized tensors inside the block: accepted, and does nothing
    here; in a traced step the compiler computes a parametrized tensor once per step anyway."""
    yield


# --- the parametrizations ------------------------------------------------------------------


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_v * (weight_g / norm_except_dim(weight_v, self.dim))

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return norm_except_dim(weight, self.dim), weight


@pytorch_keywords
def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """`module.name` = g * v / ||v|| (the norm over every axis but `dim`; None: over all), g
    and v the parameters `parametrizations.name.original0` and `original1`, as PyTorch's
    `torch.nn.utils.parametrizations.weight_norm`."""
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def _is_orthogonal(q: np.ndarray) -> bool:
    """Q^H Q = I to PyTorch's tolerance (`torch.allclose`, atol 10 n eps)."""
    eye = np.eye(q.shape[-1], dtype=q.dtype)
    eps = 10.0 * q.shape[-2] * np.finfo(q.dtype).eps
    return np.allclose(np.swapaxes(q.conj(), -1, -2) @ q, eye, rtol=1e-5, atol=eps)


def _make_orthogonal(a: Tensor) -> Tensor:
    """The Q of a tall A = QR with R's diagonal made positive (PyTorch's, from LAPACK's QR)."""
    h, tau = linalg.geqrf(a)
    signs = np.sign(np.diagonal(h.numpy(), axis1=-2, axis2=-1))[..., None, :]
    return linalg.householder_product(h, tau) * Tensor._of(signs.astype(h.dtype))


class _Orthogonal(Module):
    """PyTorch's `_Orthogonal`: a tall (or, transposed, wide) matrix with orthonormal columns
    from an unconstrained one, by the matrix exponential or the Cayley map of a skew-symmetric
    matrix, or by Householder reflectors; with `use_trivialization` composed with the buffer
    `base` (the dynamic trivialization), which `right_inverse` sets."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *,
                 use_trivialization: bool = True) -> None:  # fmt: skip
        super().__init__()
        if weight.dtype.kind == "c" and orthogonal_map == "householder":
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape, self.orthogonal_map = tuple(weight.shape), orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2:]
        transposed = n < k
        if transposed:
            X, (n, k) = X.mT, (k, n)
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:  # embedded in a square matrix
                X = functions.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], -1)
            A = X - X.mH
            if self.orthogonal_map == "matrix_exp":
                Q = linalg.matrix_exp(A)
            else:  # (I + A/2)(I - A/2)^-1
                eye = Tensor._of(np.eye(n, dtype=A.dtype))
                Q = linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            Q = Q[..., :k] if n != k else Q
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = linalg.householder_product(A, tau)
            # X's diagonal holds 1s and -1s, not differentiated through (PyTorch's cast)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        if tuple(Q.shape) != self.shape:
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {tuple(Q.shape)}.")  # fmt: skip
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q: Tensor) -> Tensor:
        start, (n, k) = Q, Q.shape[-2:]
        transpose = n < k
        if transpose:
            Q, (n, k) = Q.mT, (k, n)
        if not hasattr(self, "base"):
            if self.orthogonal_map != "householder":
                raise NotImplementedError("It is not possible to assign to the matrix exponential "
                                          "or the Cayley parametrizations when "
                                          "use_trivialization=False.")  # fmt: skip
            h, tau = linalg.geqrf(Q)  # R's diagonal positive: a reflection where tau is 0 flips
            a = h.numpy().copy()
            d = np.sign(np.diagonal(a, axis1=-2, axis2=-1)) * np.where(tau.numpy() == 0, -1, 1)
            diag = np.arange(min(a.shape[-2:]))
            a[..., diag, diag] = d
            return Tensor._of(np.swapaxes(a, -1, -2).copy() if transpose else a)
        if n == k:
            Q = Q.clone() if _is_orthogonal(Q.numpy()) else _make_orthogonal(Q)
        else:  # completed to an n x n orthogonal matrix
            N = creation.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype)
            Q = _make_orthogonal(functions.cat([Q, N], dim=-1))
        self.base = Q
        diag = np.arange(min(start.shape[-2:]))
        neg_eye = np.zeros(start.shape, start.dtype)
        neg_eye[..., diag, diag] = -1.0  # so that householder(zeros) is the identity
        return Tensor._of(neg_eye)


@pytorch_keywords
def orthogonal(module: Module, name: str = "weight", orthogonal_map: str | None = None, *,
               use_trivialization: bool = True) -> Module:  # fmt: skip
    """`module.name` kept orthogonal (orthonormal columns if tall, rows if wide; a batch of
    matrices for more dimensions), as PyTorch's `parametrizations.orthogonal`: by
    `"matrix_exp"` (the default for square or complex matrices), `"cayley"` or
    `"householder"` (the default otherwise) of `parametrizations.name.original`, composed with
    the buffer `parametrizations.name.0.base` under `use_trivialization`. The initial value is
    the tensor itself if orthogonal, else the Q of its QR decomposition."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} "
                         "dimensions.")  # fmt: skip
    if orthogonal_map is None:
        square = weight.shape[-2] == weight.shape[-1]
        orthogonal_map = "matrix_exp" if square or weight.dtype.kind == "c" else "householder"
    if orthogonal_map not in ORTHOGONAL_MAPS:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")  # fmt: skip
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    return register_parametrization(module, name, orth, unsafe=True)


class _SpectralNorm(Module):
    """weight / sigma, sigma estimated by power iteration on buffers `_u` and `_v` that
    training updates in place (under no_grad; a traced step writes them back at each call)."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12) -> None:  # fmt: skip
        super().__init__()
        if not -weight.ndim <= dim < weight.ndim:
            raise IndexError(f"spectral_norm: dim {dim} is out of range for a {weight.ndim}-d "
                             "weight")  # fmt: skip
        if n_power_iterations <= 0:
            raise ValueError("spectral_norm: n_power_iterations must be positive, not "
                             f"{n_power_iterations}")  # fmt: skip
        self.dim, self.eps = dim % weight.ndim, eps
        if weight.ndim > 1:
            self.n_power_iterations = n_power_iterations
            h, w = as_matrix(weight, self.dim).shape
            self.register_buffer("_u", random_unit_vector(h, weight.dtype, eps))
            self.register_buffer("_v", random_unit_vector(w, weight.dtype, eps))
            self._power_method(as_matrix(weight.detach(), self.dim), 15)

    def _power_method(self, matrix: Tensor, n_power_iterations: int) -> None:
        with no_grad():
            for _ in range(n_power_iterations):  # u first, then v: PyTorch's order here
                self._u.copy_(F.normalize(matrix @ self._v, dim=0, eps=self.eps))
                self._v.copy_(F.normalize(matrix.T @ self._u, dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        matrix = as_matrix(weight, self.dim)
        if self.training:
            self._power_method(matrix, self.n_power_iterations)
        u, v = self._u.detach().clone(), self._v.detach().clone()  # `SpectralNorm`'s reason
        return weight / (u * (matrix @ v)).sum()

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


@pytorch_keywords
def spectral_norm(
    module: Module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12,
    dim: int | None = None,
) -> Module:  # fmt: skip
    """`module.name` divided by its spectral norm (PyTorch's
    `torch.nn.utils.parametrizations.spectral_norm`): the parameter is
    `parametrizations.name.original`, the power iteration's vectors the buffers
    `parametrizations.name.0._u` and `_v`."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"spectral_norm: {type(module).__name__}.{name} is not a tensor")
    dim = default_spectral_dim(module) if dim is None else dim
    parametrization = _SpectralNorm(weight, n_power_iterations, dim, eps)
    return register_parametrization(module, name, parametrization)
