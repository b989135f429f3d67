"""PyTorch's process-wide settings that training scripts set in their first lines, each meaning
what it can on tracegrad (NumPy on the CPU): matmul precision and determinism are what they
already are, print options are PyTorch's (`frontend.printing`), the RNG state is the default
generator's."""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

import tracegrad as _tg
from tracegrad.frontend import printing, promotion
from tracegrad.frontend.device import CPU, require_cpu
from tracegrad.frontend.sparse import layout, sparse_coo, strided
from tracegrad.frontend.tensor import DEVICE_BLOCKS, Tensor, as_tensor
from tracegrad.torch._support import dtype, torch_dtype
from tracegrad.torch.random import get_rng_state, set_rng_state

__all__ = ["are_deterministic_algorithms_enabled", "can_cast", "channels_last",
           "get_autocast_dtype", "is_autocast_enabled", "is_autocast_cpu_enabled",
           "get_autocast_cpu_dtype", "get_autocast_gpu_dtype", "set_autocast_enabled",
           "set_autocast_cpu_enabled", "set_autocast_gpu_enabled", "set_autocast_dtype",
           "set_autocast_cpu_dtype", "set_autocast_gpu_dtype", "set_autocast_cache_enabled",
           "clear_autocast_cache", "is_autocast_cache_enabled", "autocast_increment_nesting",
           "autocast_decrement_nesting", "layout", "sparse_coo", "strided",
           "is_deterministic_algorithms_warn_only_enabled", "sparse_bsc", "sparse_bsr",
           "sparse_csc", "sparse_csr",
           "channels_last_3d", "contiguous_format", "get_default_device", "memory_format",
           "legacy_contiguous_format", "preserve_format",
           "get_float32_matmul_precision", "get_printoptions", "get_rng_state", "is_nonzero",
           "printoptions", "promote_types",
           "result_type",
           "set_default_device", "set_float32_matmul_precision", "set_flush_denormal",
           "set_printoptions", "set_rng_state", "typename",
           "use_deterministic_algorithms"]  # fmt: skip

_settings = {"matmul_precision": "highest", "deterministic": False}


class memory_format:  # noqa: N801 (PyTorch's name)
    """PyTorch's memory layouts, accepted wherever PyTorch takes one (`x.contiguous(
    memory_format=torch.channels_last)`, `model.to(memory_format=...)`): tracegrad's arrays stay
    row-major, and its convolution kernels choose their own layouts."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """False: autocast changes no op's dtype here (`torch.amp.autocast`)."""
    return False


def get_autocast_dtype(device_type: str) -> dtype:
    """The dtype autocast would lower to: the default dtype, since it lowers none."""
    return torch_dtype(_tg.get_default_dtype())


def is_autocast_cpu_enabled() -> bool:
    return False


def get_autocast_cpu_dtype() -> dtype:
    return get_autocast_dtype("cpu")


get_autocast_gpu_dtype = get_autocast_cpu_dtype


def set_autocast_enabled(*args: Any) -> None:
    """Accepted, as `autocast` is: ops run in their operands' dtypes either way."""


set_autocast_cpu_enabled = set_autocast_gpu_enabled = set_autocast_enabled
set_autocast_dtype = set_autocast_cpu_dtype = set_autocast_gpu_dtype = set_autocast_enabled
set_autocast_cache_enabled = clear_autocast_cache = set_autocast_enabled


def is_autocast_cache_enabled() -> bool:
    return False


def autocast_increment_nesting() -> int:
    """PyTorch's autocast nesting count (its cache is cleared when it falls to 0): none here."""
    return 0


autocast_decrement_nesting = autocast_increment_nesting
contiguous_format = memory_format("contiguous_format")
legacy_contiguous_format = contiguous_format  # one object, as PyTorch's (Phi-MoE's Gumbel noise)
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


def set_float32_matmul_precision(precision: str) -> None:
    """Accepted: "highest", "high" or "medium" let PyTorch use TF32 or bfloat16 on GPUs; NumPy's
    float32 products are float32 at every setting."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"set_float32_matmul_precision: {precision!r} is not one of "
                         "'highest', 'high', 'medium'")  # fmt: skip
    _settings["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _settings["matmul_precision"]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Accepted and remembered: tracegrad's kernels give the same results from the same inputs
    and thread count, run after run (no atomics, no autotuning)."""
    _settings["deterministic"] = bool(mode)
    _settings["deterministic_warn_only"] = bool(mode) and bool(warn_only)


def are_deterministic_algorithms_enabled() -> bool:
    return _settings["deterministic"]


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    return _settings.get("deterministic_warn_only", False)


# PyTorch's compressed sparse layouts: no tensor here has one (only COO is provided), so a
# layout test (`t.layout == torch.sparse_csr`, PyG's) answers False
sparse_csr, sparse_csc = layout("sparse_csr"), layout("sparse_csc")
sparse_bsr, sparse_bsc = layout("sparse_bsr"), layout("sparse_bsc")


def set_printoptions(precision: int | None = None, threshold: float | None = None,
                     edgeitems: int | None = None, linewidth: int | None = None,
                     profile: str | None = None, sci_mode: bool | None = None) -> None:  # fmt: skip
    """How tensors print (`frontend.printing`), as PyTorch's: `profile` "default", "short" or
    "full", then the options given."""
    printing.set_options(precision, threshold, edgeitems, linewidth, profile, sci_mode)


def get_printoptions() -> dict[str, Any]:
    return dataclasses.asdict(printing.OPTIONS)


@contextlib.contextmanager
def printoptions(**options: Any) -> Iterator[None]:
    """The print options set within the block, restored after."""
    before = get_printoptions()
    set_printoptions(**options)
    try:
        yield
    finally:
        set_printoptions(**before)


def is_nonzero(input: Tensor) -> bool:
    """The truth of a one-element tensor."""
    x = as_tensor(input)
    if x.size != 1:
        raise RuntimeError(f"is_nonzero: a tensor with {x.size} elements is ambiguous")
    return bool(x)


def set_default_device(device: Any) -> None:
    """The CPU is the only device: "cpu" (or None) is accepted, any other raises."""
    if device is not None:
        require_cpu(device, "set_default_device")


def get_default_device() -> Any:
    """The CPU, or the device the innermost `with torch.device(...)` block names."""
    return DEVICE_BLOCKS[-1] if DEVICE_BLOCKS else CPU


def set_flush_denormal(mode: bool) -> bool:
    """Whether flushing denormal floats to zero is supported: it is not (NumPy's arithmetic
    keeps them), so False, as PyTorch returns on CPUs without it."""
    if mode:
        warnings.warn("set_flush_denormal: not supported by tracegrad; denormals are kept",
                      stacklevel=2)  # fmt: skip
    return False


_TYPE_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "int64": "Long",
               "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
               "bool": "Bool"}  # fmt: skip


def typename(obj: Any) -> str:
    """PyTorch's type string of a tensor ("torch.FloatTensor"), or Python's type name."""
    if isinstance(obj, Tensor):
        return f"torch.{_TYPE_NAMES.get(obj.dtype.name, obj.dtype.name)}Tensor"
    return f"{type(obj).__module__}.{type(obj).__qualname__}".removeprefix("builtins.")


def promote_types(type1: Any, type2: Any) -> dtype:
    """PyTorch's promotion: a higher category wins whatever its size (int64 and float32 give
    float32, where NumPy says float64); within a category, NumPy's rule."""
    return torch_dtype(promotion.promote_types(np.dtype(type1), np.dtype(type2)))


def result_type(tensor1: Any, tensor2: Any) -> dtype:
    """The dtype an arithmetic op of the two computes in: dimensioned tensors above 0-d ones
    above Python numbers, unless a lower group's category is higher."""
    operands = [a if isinstance(a, Tensor) or promotion.is_number(a) else as_tensor(a)
                for a in (tensor1, tensor2)]  # fmt: skip
    return torch_dtype(promotion.result_type(*operands))


def can_cast(from_: Any, to: Any) -> bool:
    """Whether PyTorch's casting rules allow it: not to a lower kind (float to int, to bool)."""
    return promotion.category(np.dtype(from_)) <= promotion.category(np.dtype(to))
