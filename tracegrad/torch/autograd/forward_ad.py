"""`torch.autograd.forward_ad`: dual tensors are not provided (`torch.func.jvp` computes
forward-mode products here). No tensor carries a tangent, so `unpack_dual` answers a tensor's
tangent as None, which is what code asks before taking a path for dual inputs (kornia's
augmentations, at every call); making a dual tensor raises."""

from __future__ import annotations

from typing import Any, NamedTuple

from tracegrad.torch._support import not_provided as _not_provided


class UnpackedDualTensor(NamedTuple):
    primal: Any
    tangent: Any


def unpack_dual(tensor: Any, *, level: int | None = None) -> UnpackedDualTensor:
    return UnpackedDualTensor(tensor, None)


def make_dual(tensor: Any, tangent: Any, *, level: int | None = None) -> Any:
    raise NotImplementedError(
        "torch.autograd.forward_ad.make_dual: dual tensors are not provided by tracegrad; "
        "torch.func.jvp computes Jacobian-vector products"
    )


class dual_level:  # noqa: N801 (PyTorch's name)
    """The scope dual tensors live in: entering it is harmless, making one raises."""

    def __enter__(self) -> int:
        return 0

    def __exit__(self, *exc: Any) -> None:
        return None


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
