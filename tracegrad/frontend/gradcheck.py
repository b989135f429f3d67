"""PyTorch's `torch.autograd.gradcheck` and `gradgradcheck`: a function's gradients, as autograd
computes them, against central finite differences of the function itself, for the tests people
write of their own ops (a custom `autograd.Function`). Slow by design (one backward per output
element, two calls per input element); meant for small double-precision inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.frontend import autograd, forward_ad
from tracegrad.frontend.creation import randn
from tracegrad.frontend.tensor import Tensor

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]


class GradcheckError(RuntimeError):
    """A gradient that does not match its finite differences (PyTorch's name)."""


def gradcheck(func: Callable, inputs: Any, *, eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True,
              **options: Any) -> bool:  # fmt: skip
    """Whether autograd's Jacobian of `func(*inputs)` with respect to each input that requires
    grad matches the central differences of `func` (|analytic - numeric| <= atol + rtol
    |numeric| elementwise); on a mismatch GradcheckError names the output and input, unless
    `raise_exception` is False (then False). With `check_forward_ad=True` the Jacobian that
    forward-mode AD gives (dual tensors, one tangent per input element) is checked too, and
    `check_backward_ad=False` skips reverse mode's. PyTorch's other options (`fast_mode`,
    `check_undefined_grad`, `nondet_tol`, ...) are accepted: this is its slow, full check."""
    args, wrt = _inputs(inputs)
    if not wrt:
        raise ValueError("gradcheck expects at least one input tensor to require gradient")
    outputs = _outputs(func(*args))
    numerics = _numeric(func, args, wrt, [o.size for o in outputs], eps)
    modes = {
        "": options.get("check_backward_ad", True),
        " (forward AD)": options.get("check_forward_ad", False),
    }
    forward = _forward(func, args, wrt, [o.size for o in outputs]) if modes[" (forward AD)"] else []
    for k, (out, numeric) in enumerate(zip(outputs, numerics, strict=True)):
        found = {"": (lambda: _analytic(out, [args[i] for i in wrt])),
                 " (forward AD)": lambda: forward[k]}  # fmt: skip
        for mode in (m for m, wanted in modes.items() if wanted):
            for i, a, n in zip(wrt, found[mode](), numeric, strict=True):
                if not np.allclose(a, n, rtol=rtol, atol=atol):
                    if not raise_exception:
                        return False
                    raise GradcheckError(
                        f"Jacobian mismatch{mode} for output {k} with respect to input {i},\n"
                        f"numerical:{n}\nanalytical:{a}\n"
                    )
    return True


def gradgradcheck(func: Callable, inputs: Any, grad_outputs: Any = None, *, eps: float = 1e-6,
                  atol: float = 1e-5, rtol: float = 1e-3, raise_exception: bool = True,
                  **options: Any) -> bool:  # fmt: skip
    """`gradcheck` of the first derivatives: the gradients of `func(*inputs)` weighted by
    `grad_outputs` (random normal ones, requiring grad, if not given), as a function of the
    inputs and those weights, checked against their own finite differences."""
    args, wrt = _inputs(inputs)
    if grad_outputs is None:
        outputs = _outputs(func(*args))
        grad_outputs = [randn(*o.shape, dtype=o.dtype).requires_grad_() for o in outputs]
    weights = list(grad_outputs) if isinstance(grad_outputs, tuple | list) else [grad_outputs]

    def first_derivatives(*both: Any) -> tuple:
        ins, ws = both[: len(args)], both[len(args) :]
        grads = autograd.grad(_outputs(func(*ins)), [ins[i] for i in wrt], list(ws),
                              create_graph=True, allow_unused=True)  # fmt: skip
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivatives, (*args, *weights), eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception)  # fmt: skip


def _inputs(inputs: Any) -> tuple[tuple, list[int]]:
    """The function's arguments, and the positions of those that require grad."""
    args = tuple(inputs) if isinstance(inputs, tuple | list) else (inputs,)
    return args, [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]


def _outputs(result: Any) -> list[Tensor]:
    """The differentiable (real floating) tensors among a function's results."""
    results = result if isinstance(result, tuple | list) else (result,)
    return [r for r in results if isinstance(r, Tensor) and r.dtype.kind == "f"]


def _forward(func: Callable, args: tuple, wrt: list[int],
             sizes: list[int]) -> list[list[np.ndarray]]:  # fmt: skip
    """Forward-mode AD's Jacobian of each output in each input of `wrt`, (out.size, x.size)
    each, by output then input: one call of `func` per input element, its tangent one-hot."""
    jacobians = [[np.zeros((size, args[i].numel())) for i in wrt] for size in sizes]
    for column, i in enumerate(wrt):
        x = args[i].detach()
        for e in range(x.numel()):
            onehot = np.zeros(x.numel(), x.dtype)
            onehot[e] = 1
            with forward_ad.dual_level():
                ins = list(args)
                ins[i] = forward_ad.make_dual(x, Tensor._of(onehot.reshape(x.shape)))
                for k, out in enumerate(_outputs(func(*ins))):
                    tangent = forward_ad.unpack_dual(out).tangent
                    if tangent is not None:
                        jacobians[k][column][:, e] = np.asarray(tangent.numpy()).reshape(-1)
    return jacobians


def _analytic(out: Tensor, wrt: Sequence[Tensor]) -> list[np.ndarray]:
    """Autograd's Jacobian of `out` in each of `wrt`, (out.size, x.size) each: one backward
    pass per element of `out`."""
    rows: list[list[np.ndarray]] = [[] for _ in wrt]
    if not out.requires_grad:  # no history: it does not depend on them
        return [np.zeros((out.size, x.size)) for x in wrt]
    for j in range(out.size):
        onehot = np.zeros(out.size, out.dtype)
        onehot[j] = 1
        grads = autograd.grad(out, list(wrt), Tensor._of(onehot.reshape(out.shape)),
                              retain_graph=True, allow_unused=True)  # fmt: skip
        for r, g, x in zip(rows, grads, wrt, strict=True):
            r.append(np.zeros(x.size) if g is None else np.asarray(g.numpy()).reshape(-1))
    return [np.array(r).reshape(out.size, x.size) for r, x in zip(rows, wrt, strict=True)]


def _numeric(func: Callable, args: tuple, wrt: list[int], sizes: list[int],
             eps: float) -> list[list[np.ndarray]]:  # fmt: skip
    """Central differences of each output (of `sizes` elements) in each input of `wrt`,
    (out.size, x.size) each, by output then input, the other inputs as given: two calls of
    `func` per input element, every output read from each."""
    base = [np.array(a.detach().numpy()) if i in wrt else a for i, a in enumerate(args)]
    jacobians = [[np.zeros((size, base[i].size)) for i in wrt] for size in sizes]

    def outputs() -> list[np.ndarray]:  # inputs as given, requiring grad: a function
        ins = [Tensor._of(v).requires_grad_() if i in wrt else v  # may differentiate them
               for i, v in enumerate(base)]  # fmt: skip
        return [np.asarray(o.detach().numpy(), np.float64).reshape(-1)
                for o in _outputs(func(*ins))]  # fmt: skip

    for j, i in enumerate(wrt):
        flat = base[i].reshape(-1)
        for e in range(flat.size):
            old = flat[e]
            flat[e] = old + eps
            up = outputs()
            flat[e] = old - eps
            down = outputs()
            flat[e] = old
            for by_input, u, d in zip(jacobians, up, down, strict=True):
                by_input[j][:, e] = (u - d) / (2 * eps)
    return jacobians
