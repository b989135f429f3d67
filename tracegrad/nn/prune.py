"""PyTorch's `torch.nn.utils.prune`: a pruned parameter `name` becomes `name_orig` (the
parameter, still trained) times the buffer `name_mask`, recomputed by a forward pre-hook before
each call (also inside a compiled step, which reads the mask at every call). Pruning again
prunes among the entries still kept, as PyTorch's PruningContainer does; `remove` makes the
masked weight a plain parameter again."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend.tensor import Tensor
from tracegrad.nn.modules import Module, Parameter, init_generator

__all__ = ["BasePruningMethod", "CustomFromMask", "Identity", "L1Unstructured", "LnStructured",
           "RandomStructured", "RandomUnstructured", "custom_from_mask", "global_unstructured",
           "identity", "is_pruned", "l1_unstructured", "ln_structured", "random_structured",
           "random_unstructured", "remove"]  # fmt: skip


class _Pruned:
    """The forward pre-hook of a pruned parameter: name = name_orig * name_mask."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.handle: Any = None

    def __call__(self, module: Module, inputs: Any) -> None:
        setattr(module, self.name, self.weight(module))

    def weight(self, module: Module) -> Tensor:
        return getattr(module, self.name + "_orig") * getattr(module, self.name + "_mask")


def _hook(module: Module, name: str) -> _Pruned | None:
    return next((h for h in module._forward_pre_hooks.values()
                 if isinstance(h, _Pruned) and h.name == name), None)  # fmt: skip


def _count(amount: int | float, n: int) -> int:
    """How many of n entries (or slices) `amount` prunes: an int is a count, a float in [0, 1] a
    fraction (rounded, as PyTorch's)."""
    if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
        raise ValueError(f"prune: amount must be a non-negative int or a float in [0, 1], not "
                         f"{amount!r}")  # fmt: skip
    if isinstance(amount, float):
        if amount > 1:
            raise ValueError(f"prune: a float amount must be at most 1, not {amount}")
        return round(amount * n)
    if amount > n:
        raise ValueError(f"prune: amount {amount} exceeds the {n} entries to prune")
    return amount


def _apply(module: Module, name: str, mask_of: Any) -> Module:
    """Prune `module.name` by `mask_of(values, kept)`: a 0/1 array over the entries still kept
    (`kept`, the current mask), which it multiplies in."""
    hook = _hook(module, name)
    if hook is None:
        weight = dict(module.named_parameters(recurse=False)).get(name)
        if weight is None:
            raise ValueError(f"prune: {type(module).__name__} has no parameter {name!r}")
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        module.register_buffer(
            name + "_mask", Tensor._of(bfloat16.full(weight.shape, 1, weight.dtype))
        )
        hook = _Pruned(name)
        hook.handle = module.register_forward_pre_hook(hook)
    orig, mask = getattr(module, name + "_orig"), getattr(module, name + "_mask")
    kept = mask.numpy() != 0
    new = mask_of(orig.detach().numpy(), kept).astype(mask.dtype) * mask.numpy()
    mask._assign(Tensor._of(new))
    setattr(module, name, hook.weight(module))
    return module


def _checked(amount: int | float) -> int | float:
    """`amount` if it is one (checked when a method is made, as PyTorch's)."""
    _count(amount, amount if isinstance(amount, int) and not isinstance(amount, bool) else 1)
    return amount


def _smallest(scores: np.ndarray, kept: np.ndarray, amount: int | float) -> np.ndarray:
    """A mask pruning the `amount` of the kept entries with the smallest scores."""
    candidates = np.flatnonzero(kept)
    k = _count(amount, candidates.size)
    mask = np.ones(scores.size)
    order = candidates[np.argsort(scores.reshape(-1)[candidates], kind="stable")]
    mask[order[:k]] = 0
    return mask.reshape(scores.shape)


class BasePruningMethod:
    """PyTorch's base of pruning methods: a subclass says which entries stay
    (`compute_mask(t, default_mask)`: a 0/1 tensor, from the scores `t` and the mask so far),
    and `apply(module, name, ...)` prunes the parameter by it (user-defined methods too)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not define compute_mask")

    def prune(self, t: Tensor, default_mask: Tensor | None = None,
              importance_scores: Tensor | None = None) -> Tensor:  # fmt: skip
        """`t` times its mask (nothing registered on a module)."""
        kept = (
            Tensor._of(bfloat16.full(t.shape, 1, t.dtype)) if default_mask is None else default_mask
        )
        return t * self.compute_mask(t if importance_scores is None else importance_scores, kept)

    @classmethod
    def apply(cls, module: Module, name: str, *args: Any, importance_scores: Any = None,
              **kwargs: Any) -> BasePruningMethod:  # fmt: skip
        method = cls(*args, **kwargs)

        def mask_of(w: np.ndarray, kept: np.ndarray) -> np.ndarray:
            scores = w if importance_scores is None else _array(importance_scores)
            mask = method.compute_mask(Tensor._of(scores), Tensor._of(kept.astype(w.dtype)))
            return _array(mask)

        _apply(module, name, mask_of)
        return method


def _array(x: Any) -> np.ndarray:
    return x.detach().numpy() if isinstance(x, Tensor) else np.asarray(x)


class Identity(BasePruningMethod):
    """Prunes nothing (the reparametrization only)."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        return default_mask


class RandomUnstructured(BasePruningMethod):
    def __init__(self, amount: int | float) -> None:
        self.amount = _checked(amount)

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        kept = _array(default_mask) != 0
        return Tensor._of(_smallest(init_generator().random(t.shape), kept, self.amount)
                          * _array(default_mask))  # fmt: skip


class L1Unstructured(RandomUnstructured):
    """Prunes the `amount` entries of smallest magnitude."""

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        kept = _array(default_mask) != 0
        return Tensor._of(_smallest(np.abs(_array(t)), kept, self.amount) * _array(default_mask))


class RandomStructured(BasePruningMethod):
    """Prunes `amount` of the kept slices along `dim` at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount: int | float, dim: int = -1) -> None:
        self.amount, self.dim = _checked(amount), dim

    def score(self, s: np.ndarray) -> float:
        return init_generator().random()

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        kept = _array(default_mask) != 0
        mask = _structured(_array(t), kept, self.amount, self.dim, self.score)
        return Tensor._of(mask * _array(default_mask))


class LnStructured(RandomStructured):
    """Prunes the `amount` slices along `dim` of smallest Ln norm (n as numpy.linalg.norm
    takes, "fro" or an order)."""

    def __init__(self, amount: int | float, n: Any, dim: int = -1) -> None:
        super().__init__(amount, dim)
        self.n = None if n == "fro" else n

    def score(self, s: np.ndarray) -> float:
        return float(np.linalg.norm(s, self.n))


class CustomFromMask(BasePruningMethod):
    """Prunes where `mask` is 0."""

    def __init__(self, mask: Any) -> None:
        self.mask = mask

    def compute_mask(self, t: Tensor, default_mask: Tensor) -> Tensor:
        given = np.broadcast_to(_array(self.mask), t.shape)
        return Tensor._of(given.astype(_array(default_mask).dtype) * _array(default_mask))


def identity(module: Module, name: str) -> Module:
    Identity.apply(module, name)
    return module


def random_unstructured(module: Module, name: str, amount: int | float) -> Module:
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module: Module, name: str, amount: int | float,
                    importance_scores: Any = None) -> Module:  # fmt: skip
    """Prune the `amount` entries of smallest magnitude (or `importance_scores`)."""
    L1Unstructured.apply(module, name, amount, importance_scores=importance_scores)
    return module


def _structured(w: np.ndarray, kept: np.ndarray, amount: int | float, dim: int,
                score: Any) -> np.ndarray:  # fmt: skip
    """A mask removing whole slices along `dim`: the `amount` of the kept ones (those with a kept
    entry) with the smallest `score(slice)`."""
    dim %= w.ndim
    slices = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    alive = np.moveaxis(kept, dim, 0).reshape(w.shape[dim], -1).any(axis=1)
    per_slice = _smallest(np.array([score(s) for s in slices]), alive, amount)
    return np.broadcast_to(per_slice.reshape([-1 if a == dim else 1 for a in range(w.ndim)]),
                           w.shape)  # fmt: skip


def ln_structured(module: Module, name: str, amount: int | float, n: Any, dim: int,
                  importance_scores: Any = None) -> Module:  # fmt: skip
    """Prune the `amount` slices along `dim` of smallest Ln norm."""
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def random_structured(module: Module, name: str, amount: int | float, dim: int) -> Module:
    RandomStructured.apply(module, name, amount, dim)
    return module


def custom_from_mask(module: Module, name: str, mask: Any) -> Module:
    """Prune where `mask` is 0."""
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters: Iterable[tuple[Module, str]], pruning_method: Any,
                        importance_scores: Any = None, **kwargs: Any) -> None:  # fmt: skip
    """Prune `amount` entries across all the (module, name) pairs together: the smallest
    magnitudes of them all (`pruning_method` l1_unstructured; PyTorch's class L1Unstructured
    is accepted too)."""
    if pruning_method not in (l1_unstructured, L1Unstructured):
        raise NotImplementedError("global_unstructured: only l1_unstructured is provided")
    pairs = list(parameters)
    for module, name in pairs:
        if _hook(module, name) is None:
            identity(module, name)
    values = [getattr(m, n + "_orig").detach().numpy() for m, n in pairs]
    masks = [getattr(m, n + "_mask").numpy() != 0 for m, n in pairs]
    flat = np.concatenate([np.abs(v).reshape(-1) for v in values])
    mask = _smallest(flat, np.concatenate([k.reshape(-1) for k in masks]), kwargs["amount"])
    start = 0
    for (module, name), v in zip(pairs, values, strict=True):
        part = mask[start : start + v.size].reshape(v.shape)
        start += v.size
        custom_from_mask(module, name, part)


def is_pruned(module: Module) -> bool:
    return any(isinstance(h, _Pruned) for m in module.modules()
               for h in m._forward_pre_hooks.values())  # fmt: skip


def remove(module: Module, name: str) -> Module:
    """Make the pruning permanent: `module.name` a parameter holding orig * mask."""
    hook = _hook(module, name)
    if hook is None:
        raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning "
                         "can be removed")  # fmt: skip
    weight = hook.weight(module).detach()
    hook.handle.remove()
    delattr(module, name + "_orig")
    delattr(module, name + "_mask")
    delattr(module, name)
    module.register_parameter(name, Parameter(np.array(weight.numpy())))
    return module
