"""Products with PyTorch's meanings: `dot` and `outer` of vectors only, `cross(dim)`,
`tensordot(dims)`, and `einsum` (a string, or NumPy's and PyTorch's sublist form). NumPy's
general `dot`, flattening `outer` and `cross` of 2-vectors are in `tracegrad.numpy`."""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.errors import ShapeError
from tracegrad.frontend.functions import (
    matmul,
    moveaxis,
    permute,
    promoting_matmul,
    pytorch_keywords,
    reshape,
    same_dtypes,
    stack,
)
from tracegrad.frontend.rearrange import diagonal
from tracegrad.frontend.tensor import Tensor, as_tensor


@pytorch_keywords
def dot(input: Any, other: Any) -> Tensor:
    """The inner product of two vectors (NumPy's dot of any ranks is `tracegrad.numpy.dot`)."""
    a, b = as_tensor(input), as_tensor(other)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"dot: 1-D tensors expected, got {a.shape} and {b.shape} (use matmul, "
                         "or tracegrad.numpy.dot for NumPy's)")  # fmt: skip
    return matmul(a, b)


@pytorch_keywords
def vdot(input: Any, other: Any) -> Tensor:
    """The inner product of two vectors: `dot`'s, tracegrad's tensors being real."""
    return dot(input, other)


@pytorch_keywords
def inner(input: Any, other: Any) -> Tensor:
    """The sum over both operands' last dimension (a product for 0-D operands)."""
    a, b = as_tensor(input), as_tensor(other)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    return tensordot(a, b, ([-1], [-1]))


@pytorch_keywords
def outer(input: Any, vec2: Any) -> Tensor:
    """The outer product of two vectors."""
    a, b = as_tensor(input), as_tensor(vec2)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"outer: 1-D tensors expected, got {a.shape} and {b.shape} "
                         "(tracegrad.numpy.outer flattens)")  # fmt: skip
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))


@pytorch_keywords
def kron(input: Any, other: Any) -> Tensor:
    a, b = as_tensor(input), as_tensor(other)
    n = a.ndim if a.ndim > b.ndim else b.ndim
    a = reshape(a, (1,) * (n - a.ndim) + a.shape)
    b = reshape(b, (1,) * (n - b.ndim) + b.shape)
    spread = reshape(a, tuple(v for d in a.shape for v in (d, 1))) * reshape(
        b, tuple(v for d in b.shape for v in (1, d))
    )
    return reshape(spread, tuple(x * y for x, y in zip(a.shape, b.shape, strict=True)))


def cross3(a: Tensor, b: Tensor, dim: int) -> Tensor:
    """The cross product of 3-vectors along `dim` of a and b (broadcast)."""
    a, b = moveaxis(a, dim, -1), moveaxis(b, dim, -1)
    (a0, a1, a2), (b0, b1, b2) = [a[..., i] for i in range(3)], [b[..., i] for i in range(3)]
    out = stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return moveaxis(out, -1, dim % out.ndim)


@pytorch_keywords
def cross(input: Any, other: Any, dim: int | None = None) -> Tensor:
    """The cross product of 3-vectors along `dim`; by default the first dimension of size 3
    (PyTorch's rule)."""
    a, b = as_tensor(input), as_tensor(other)
    if dim is None:
        dim = next((d for d, n in enumerate(np.broadcast_shapes(a.shape, b.shape)) if n == 3),
                   None)  # fmt: skip
        if dim is None:
            raise ShapeError(f"cross: no dimension of size 3 in {a.shape} and {b.shape}")
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise ShapeError(f"cross: dimension {dim} of {a.shape} and {b.shape} must be 3")
    return cross3(a, b, dim)


@pytorch_keywords
def tensordot(a: Any, b: Any, dims: Any = 2) -> Tensor:
    """The sum over the last `dims` axes of a and the first of b, or over the listed pairs
    ([a's], [b's]): the summed axes moved inside, then one matrix product."""
    a, b = as_tensor(a), as_tensor(b)
    if isinstance(dims, int | np.integer):
        sa, sb = list(range(a.ndim - int(dims), a.ndim)), list(range(int(dims)))
    else:
        sa = (np.atleast_1d(dims[0]) % max(a.ndim, 1)).tolist()
        sb = (np.atleast_1d(dims[1]) % max(b.ndim, 1)).tolist()
    if [a.shape[i] for i in sa] != [b.shape[i] for i in sb]:
        raise ShapeError(f"tensordot: {a.shape} and {b.shape} over dims {sa} and {sb}")
    fa = [i for i in range(a.ndim) if i not in sa]
    fb = [i for i in range(b.ndim) if i not in sb]
    k = math.prod(a.shape[i] for i in sa)
    a2 = reshape(permute(a, fa + sa), (-1, k))
    b2 = reshape(permute(b, sb + fb), (k, -1))
    return reshape(
        promoting_matmul(a2, b2), tuple(a.shape[i] for i in fa) + tuple(b.shape[i] for i in fb)
    )


def einsum(*args: Any) -> Tensor:
    """einsum("ij,jk->ik", a, b) (or the operands as one list), or the sublist form
    einsum(a, [0, 1], b, [1, 2], [0, 2]); explicit or implicit output and `...`, as one
    contraction op, of operands of one dtype (PyTorch's rule; `promoting_einsum` is NumPy's),
    save that a real operand may meet a complex one of its precision."""
    spec, operands = _spec_and_operands(args)
    if len({x.dtype if x.dtype.kind != "c" else _real_of(x.dtype) for x in operands}) > 1:
        same_dtypes("einsum", *operands)
    return _einsum(spec, operands)


def _real_of(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"f{dtype.itemsize // 2}")


def promoting_einsum(*args: Any) -> Tensor:
    """einsum whose operands may differ in dtype, promoted as NumPy's are."""
    return _einsum(*_spec_and_operands(args))


def _spec_and_operands(args: tuple) -> tuple[str, list[Tensor]]:
    if isinstance(args[0], str):
        spec, operands = args[0], list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], list | tuple):
            operands = list(operands[0])
    else:
        spec, operands = _sublists(args)
    return spec, [as_tensor(x) for x in operands]


def _sublists(args: tuple) -> tuple[str, list]:
    """The subscripts string of einsum's sublist form: operands alternate with lists of ints
    (or `...`), optionally followed by the output's list."""
    out = args[-1] if len(args) % 2 else None
    operands, subs = list(args[0 : len(args) - len(args) % 2 : 2]), list(args[1::2])

    def letters(sub: Sequence[Any]) -> str:
        return "".join("..." if s is Ellipsis else string.ascii_letters[int(s)] for s in sub)

    spec = ",".join(letters(s) for s in subs)
    return (spec if out is None else spec + "->" + letters(out)), operands


def _einsum(subscripts: str, xs: list[Tensor]) -> Tensor:
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    ins = ins.split(",")
    if len(ins) != len(xs):
        raise ShapeError(f"einsum '{subscripts}': {len(ins)} subscripts for {len(xs)} operands")
    used = set(spec) - set(".,->")
    spare = iter(c for c in string.ascii_letters if c not in used)
    ell_n = max([x.ndim - len(s.replace("...", "")) if "..." in s else 0
                 for s, x in zip(ins, xs, strict=True)])  # fmt: skip
    ell = "".join(next(spare) for _ in range(ell_n))
    ins = [s.replace("...", ell[len(ell) - (x.ndim - len(s) + 3) :])
           for s, x in zip(ins, xs, strict=True)]  # fmt: skip
    if arrow:
        out = out.replace("...", ell)
    else:
        letters = "".join(ins)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1
                                   and c not in ell))  # fmt: skip
    for subs, x in zip(ins, xs, strict=True):
        if len(subs) != x.ndim:
            raise ShapeError(f"einsum '{subscripts}': operand of shape {x.shape} for '{subs}'")
    pairs = [_diagonals(s, x) for s, x in zip(ins, xs, strict=True)]
    ins, xs = [s for s, _ in pairs], [x for _, x in pairs]
    ins, xs = _broadcast_ones(ins, xs)
    return P.einsum(*xs, spec=",".join(ins) + "->" + out)


def _diagonals(subs: str, x: Tensor) -> tuple[str, Tensor]:
    """An operand's repeated index ("ii", "bii") as its diagonal, an index of its own (last),
    so that the contraction, and its gradient, see each index once."""
    c = next((c for c in subs if subs.count(c) > 1), None)
    if c is None:
        return subs, x
    p, q = subs.index(c), subs.index(c, subs.index(c) + 1)
    rest = subs[:p] + subs[p + 1 : q] + subs[q + 1 :]
    return _diagonals(rest + c, diagonal(x, 0, p, q))


def _broadcast_ones(ins: list[str], xs: list[Tensor]) -> tuple[list[str], list[Tensor]]:
    """An index of size 1 in one operand and n in another broadcasts, as in NumPy's and
    PyTorch's einsum: the operand is constant along it, so the index leaves it (squeezed)."""
    sizes: dict[str, int] = {}
    for subs, x in zip(ins, xs, strict=True):
        sizes.update((c, max(sizes.get(c, 1), d)) for c, d in zip(subs, x.shape, strict=True))
    out_ins, out_xs = [], []
    for subs, x in zip(ins, xs, strict=True):
        kept = [k for k, c in enumerate(subs) if x.shape[k] != 1 or sizes[c] == 1]
        out_ins.append("".join(subs[k] for k in kept))
        out_xs.append(x if len(kept) == x.ndim else reshape(x, tuple(x.shape[k] for k in kept)))
    return out_ins, out_xs


@pytorch_keywords
def mv(input: Any, vec: Any) -> Tensor:
    """A matrix times a vector."""
    a, b = as_tensor(input), as_tensor(vec)
    if a.ndim != 2 or b.ndim != 1:
        raise ShapeError(f"mv: expects a 2-D and a 1-D tensor, got {a.shape} and {b.shape}")
    return matmul(a, b)


@pytorch_keywords
def bmm(input: Any, mat2: Any) -> Tensor:
    """Batched matrix product of two 3-D tensors (no broadcasting: that is `matmul`)."""
    a, b = as_tensor(input), as_tensor(mat2)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ShapeError(f"bmm: expects 3-D tensors of one batch size, got {a.shape} and {b.shape}")
    return matmul(a, b)


# --- products added to a tensor (BLAS's gemm form) ------------------------------------------------


def _added(input: Any, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """beta * input + alpha * product; with beta = 0 input is not read (its nan and inf do not
    spread, as in PyTorch)."""
    out = product if alpha == 1 else product * alpha
    if beta == 0:
        return out
    x = as_tensor(input)
    return (x if beta == 1 else x * beta) + out


def _ranks(op: str, want: tuple[int, ...], *xs: Tensor) -> None:
    if tuple(x.ndim for x in xs) != want:
        raise ShapeError(f"{op}: expects operands of {want} dimensions, got "
                         + ", ".join(str(x.shape) for x in xs))  # fmt: skip


@pytorch_keywords
def addmm(input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2), for matrices (input broadcast)."""
    a, b = as_tensor(mat1), as_tensor(mat2)
    _ranks("addmm", (2, 2), a, b)
    return _added(input, matmul(a, b), beta, alpha)


@pytorch_keywords
def addmv(input: Any, mat: Any, vec: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """beta * input + alpha * (mat @ vec)."""
    a, v = as_tensor(mat), as_tensor(vec)
    _ranks("addmv", (2, 1), a, v)
    return _added(input, matmul(a, v), beta, alpha)


@pytorch_keywords
def addr(input: Any, vec1: Any, vec2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """beta * input + alpha * outer(vec1, vec2)."""
    return _added(input, outer(vec1, vec2), beta, alpha)


def baddbmm(input: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """beta * input + alpha * (batch1 @ batch2), for batches of matrices (attention's scores
    with a bias: baddbmm(bias, q, k.mT, alpha=scale))."""
    a, b = as_tensor(batch1), as_tensor(batch2)
    _ranks("baddbmm", (3, 3), a, b)
    return _added(input, matmul(a, b), beta, alpha)


@pytorch_keywords
def addbmm(input: Any, batch1: Any, batch2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    """beta * input + alpha * sum_b batch1[b] @ batch2[b]: one product of the batches laid
    side by side, (n, b*m) @ (b*m, p)."""
    a, b = as_tensor(batch1), as_tensor(batch2)
    _ranks("addbmm", (3, 3), a, b)
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        raise ShapeError(f"addbmm: batches {a.shape} and {b.shape} do not multiply")
    rows = reshape(permute(a, (1, 0, 2)), (a.shape[1], -1))
    return _added(input, matmul(rows, reshape(b, (-1, b.shape[2]))), beta, alpha)


__all__ = ["addbmm", "addmm", "addmv", "addr", "baddbmm", "bmm", "cross", "dot", "einsum",
           "inner", "kron", "mv", "outer", "tensordot", "vdot"]  # fmt: skip
