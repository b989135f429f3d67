"""`torch.nn.utils`: `tracegrad.nn.utils` (gradient clipping, parameters as a vector, the
hook-based weight_norm and spectral_norm), with PyTorch's submodules `rnn`, `parametrize` and
`parametrizations`, `prune`, `fusion`, `stateless`, and the files PyTorch keeps its functions in
(`clip_grad`, `weight_norm`, `spectral_norm`), which code imports from."""

import warnings
from typing import Any

from tracegrad import nn as _nn
from tracegrad.nn.fusion import *  # noqa: F403
from tracegrad.nn.utils import *  # noqa: F403
from tracegrad.nn.utils import SpectralNorm, WeightNorm
from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch.nn.utils import (
    fusion,
    parametrizations,
    parametrize,
    prune,
    rnn,
    stateless,
)


def clip_grad_norm(parameters: Any, max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False, foreach: Any = None) -> Any:  # fmt: skip
    """PyTorch's deprecated spelling of `clip_grad_norm_` (older scripts call it)."""
    warnings.warn("torch.nn.utils.clip_grad_norm is now deprecated in favor of "
                  "torch.nn.utils.clip_grad_norm_.", FutureWarning, stacklevel=2)  # fmt: skip
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)  # noqa: F405


def skip_init(module_cls: type, *args: Any, **kwargs: Any) -> Any:
    """A module whose parameters' values are left unspecified, for code that fills them next
    (PyTorch skips the initializing; here it runs, and its values are as good as any)."""
    if "device" not in module_cls.__init__.__code__.co_varnames:
        raise RuntimeError(f"Module must support a 'device' arg to skip initialization: "
                           f"{module_cls.__name__}")  # fmt: skip
    return module_cls(*args, **kwargs)


def convert_conv2d_weight_memory_format(module: Any, memory_format: Any) -> Any:
    """`module` as it is: memory formats are layouts of PyTorch's kernels, not values."""
    return module


convert_conv3d_weight_memory_format = convert_conv2d_weight_memory_format
_CLIP = ("clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm")
clip_grad = file_module(f"{__name__}.clip_grad", "`torch.nn.utils.clip_grad`",
                        {name: getattr(_nn.utils, name) for name in _CLIP}
                        | {"clip_grad_norm": clip_grad_norm})  # fmt: skip
weight_norm_module = file_module(f"{__name__}.weight_norm", "`torch.nn.utils.weight_norm`", {
    "WeightNorm": WeightNorm, "weight_norm": _nn.utils.weight_norm,
    "remove_weight_norm": _nn.utils.remove_weight_norm,
})  # fmt: skip
spectral_norm_module = file_module(f"{__name__}.spectral_norm", "`torch.nn.utils.spectral_norm`", {
    "SpectralNorm": SpectralNorm, "spectral_norm": _nn.utils.spectral_norm,
    "remove_spectral_norm": _nn.utils.remove_spectral_norm,
})  # fmt: skip


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
