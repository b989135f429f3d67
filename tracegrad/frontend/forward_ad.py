"""Forward-mode AD with dual tensors, PyTorch's `torch.autograd.forward_ad`: inside a
`dual_level`, `make_dual(primal, tangent)` gives a tensor whose computations carry the
tangent, and `unpack_dual(y).tangent` is the Jacobian-vector product J t of what y was
computed from.

The tangents are not pushed through each op (the op table holds VJP rules only); the level
records the computation on the tape and `unpack_dual` pulls the product out when asked: the
VJP `u -> J^T u` is linear in `u`, so J t is the gradient in `u` of `<J^T u, t>` (reverse mode
twice, `transforms.linearize_jvp`'s way). A custom `Function` with a `jvp` gives its outputs'
tangents itself; they become new dual roots, where the pulling stops. So every op with a
differentiable VJP rule has forward-mode AD, and the values are exact; what a computation
under `no_grad` produced inside the level carries no tangent (PyTorch's would)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tracegrad.core import bfloat16
from tracegrad.frontend import autodiff
from tracegrad.frontend.autodiff import enable_grad
from tracegrad.frontend.grad_manager import GradManager
from tracegrad.frontend.tensor import Tensor

__all__ = ["UnpackedDualTensor", "dual_level", "enter_dual_level", "exit_dual_level",
           "make_dual", "unpack_dual"]  # fmt: skip


class UnpackedDualTensor(NamedTuple):
    primal: Any
    tangent: Any


class _Level:
    """The dual tensors made in a level (the roots tangents are pulled from) and the
    GradManager that records what they compute while the level lasts."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.roots: dict[int, tuple[Tensor, Tensor]] = {}  # id(dual) -> (dual, tangent)
        self.recorder = GradManager()
        self.recorder.record()

    def add_root(self, dual: Tensor, tangent: Tensor) -> Tensor:
        if dual.dtype.kind in "fc" and autodiff.edge(dual) is None:
            self.recorder.attach(dual)
        self.roots[id(dual)] = (dual, tangent)
        return dual


_LEVELS: list[_Level] = []


def enter_dual_level() -> int:
    if _LEVELS:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _LEVELS.append(_Level(0))
    return 0


def exit_dual_level(*, level: int | None = None) -> None:
    if not _LEVELS or (level is not None and level != _LEVELS[-1].index):
        raise RuntimeError(f"exit_dual_level: level {level} is not the current dual level")
    _LEVELS.pop().recorder.release()


class dual_level:  # noqa: N801 (PyTorch's name)
    """`with dual_level():`: the scope dual tensors live in; on leaving it, they are plain
    tensors again (their tangents gone)."""

    def __enter__(self) -> int:
        return enter_dual_level()

    def __exit__(self, *exc: Any) -> None:
        exit_dual_level()


def _current(level: int | None, where: str) -> _Level | None:
    if level is not None and (not _LEVELS or _LEVELS[-1].index != level):
        raise RuntimeError(f"{where}: dual level {level} is not the current one")
    return _LEVELS[-1] if _LEVELS else None


def make_dual(tensor: Tensor, tangent: Tensor, *, level: int | None = None) -> Tensor:
    """A tensor equal to `tensor` whose computations carry `tangent` (of its shape); still
    differentiable backward to `tensor` where that requires grad."""
    current = _current(level, "make_dual")
    if current is None:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, "
                           "make sure to enter_dual_level() first.")  # fmt: skip
    if not isinstance(tangent, Tensor):
        raise TypeError(f"make_dual: expected a Tensor tangent, got {type(tangent).__name__}")
    if tangent.shape != tensor.shape:
        raise RuntimeError(
            "Trying to set a forward gradient that has a different size than that of the "
            f"original Tensor, this is not supported. Tensor is of size {list(tensor.shape)} "
            f"while the given forward gradient is of size {list(tangent.shape)}."
        )
    if tensor.dtype.kind not in "fc":
        raise ValueError(f"make_dual: expected a floating point or complex tensor as primal, "
                         f"got {tensor.dtype}")  # fmt: skip
    with enable_grad():
        dual = tensor.view_as(tensor) if tensor.requires_grad else tensor.detach()
    if tangent.dtype != tensor.dtype:
        tangent = tangent.to(tensor.dtype)
    return current.add_root(dual, tangent)


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    """(tensor, its tangent): the tangent given to a dual tensor, or the Jacobian-vector product
    of what `tensor` was computed from; None outside a level or for a tensor that depends on no
    dual tensor."""
    current = _current(level, "unpack_dual")
    if current is None or not isinstance(tensor, Tensor):
        return UnpackedDualTensor(tensor, None)
    root = current.roots.get(id(tensor))
    if root is not None and root[0] is tensor:
        return UnpackedDualTensor(tensor, root[1])
    return UnpackedDualTensor(tensor, _pulled_tangent(current, tensor))


def _pulled_tangent(current: _Level, y: Tensor) -> Tensor | None:
    """J t: the gradient in u of <J^T u, t>, J^T u pulled back to the roots (each an
    independent input: a Function's output root already holds its inputs' part)."""
    if autodiff.edge(y) is None or y.dtype.kind not in "fc":
        return None
    roots = [r for r in current.roots.values() if autodiff.edge(r[0]) is not None]
    slots = {autodiff.edge(d): i for i, (d, _) in enumerate(roots)}
    pulled: list[Tensor | None] = [None] * len(roots)

    def deliver(node: Any) -> Any:
        i = slots.get(node)
        return None if i is None else (lambda g: pulled.__setitem__(i, g))

    u = Tensor._of(np.zeros(y.shape, y.dtype), requires_grad=True)
    with enable_grad():
        autodiff.run_backward([y], [u], deliver, True, True, stop_at_sinks=True)
        pairs = [(g * t).sum() for g, (_, t) in zip(pulled, roots, strict=True) if g is not None]
        if not pairs:
            return None
        total = sum(pairs[1:], pairs[0])
    found: list[Tensor | None] = [None]
    sink = autodiff.edge(u)
    if autodiff.edge(total) is not None:  # the graph kept: other outputs may be unpacked next
        one = Tensor._of(bfloat16.full((), 1, total.dtype))
        keep = lambda g: found.__setitem__(0, g)  # noqa: E731
        autodiff.run_backward([total], [one], lambda n: keep if n is sink else None, True)
    tangent = found[0]
    return Tensor._of(np.zeros(y.shape, y.dtype)) if tangent is None else tangent.detach()


def function_tangents(jvp: Any, ctx: Any, args: Sequence[Any], outs: Sequence[Any]) -> None:
    """A custom Function's outputs as dual roots, their tangents `jvp(ctx, *input tangents)`
    (None for an input without one), when a level is open and an input carries a tangent."""
    if not _LEVELS:
        return
    current = _LEVELS[-1]
    tangents = [unpack_dual(a).tangent if isinstance(a, Tensor) else None for a in args]
    if all(t is None for t in tangents):
        return
    given = jvp(ctx, *tangents)
    given = given if isinstance(given, tuple | list) else (given,)
    for out, tangent in zip(outs, given, strict=False):
        if isinstance(out, Tensor) and isinstance(tangent, Tensor):
            current.add_root(out, tangent)
