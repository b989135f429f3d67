"""`tracegrad.torch`: tracegrad shaped like `torch`, so that PyTorch training code runs with
`import tracegrad.torch as torch` (or unchanged, with `python -m tracegrad run script.py`).

Everything here is tracegrad's own implementation, re-exported under PyTorch's names: the top
level of `tracegrad` (PyTorch's meanings), `torch.nn` (+ `functional`, `init`, `utils`,
`parallel`), `torch.optim` (+ `lr_scheduler`), `torch.utils.data`, `torch.autograd`,
`torch.linalg`, `torch.random`, `torch.special`. What exists only here: PyTorch's dtype objects
(`torch.float32`, ...), `torch.device`, `torch.Size`, `torch.compile`, and the modules for
hardware tracegrad does not have (`torch.cuda`, `torch.backends`, `torch.accelerator`,
`torch.amp`), which say there is none. A name tracegrad does not provide raises
`AttributeError: torch.X is not provided by tracegrad (used at file.py:12)`.
"""

from __future__ import annotations

import builtins
import functools
import sys as _sys
import warnings
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

import tracegrad as _tg
from tracegrad import *  # noqa: F403 (the top level has PyTorch's meanings)
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.device import device
from tracegrad.frontend.functions import pytorch_keywords
from tracegrad.frontend.methods import legacy_types
from tracegrad.frontend.rearrange import matrix_trace as trace
from tracegrad.frontend.storage import UntypedStorage
from tracegrad.frontend.tensor import Size, Tensor
from tracegrad.nn import functional as _F
from tracegrad.runtime.compiled_module import OptimizedModule, backend_named
from tracegrad.runtime.trace import Traced as _Traced
from tracegrad.torch._support import ALIASES as _ALIASES
from tracegrad.torch._support import DTYPES as _DTYPES
from tracegrad.torch._support import dtype, imported_as_torch
from tracegrad.torch._support import file_module as _file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.torch._support import torch_dtype as _torch_dtype

# tracegrad's own names that are not PyTorch's (its compiler, its GradManager, its op table)
for _name in ("Composite", "GradManager", "GraphError", "Kind", "MemoryBudgetError",
              "PRIMITIVES", "Phase", "Primitive", "ShapeError", "TraceError", "CheckpointError",
              "allreduce", "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "defprimitive",
              "getitem", "grad", "guard", "interpret", "sum_to", "uniform", "vjp",
              # tracegrad's modules, whose places the torch ones below take
              "autograd", "distributed", "distributions", "fft", "linalg", "nn", "optim",
              "utils"):  # fmt: skip
    globals().pop(_name, None)

globals().update(_DTYPES)
globals().update({alias: _DTYPES[name] for alias, name in _ALIASES.items()})


# PyTorch's other spellings of the same functions
acos, asin, atan, atan2 = _tg.arccos, _tg.arcsin, _tg.arctan, _tg.arctan2
acosh, asinh, atanh = _tg.arccosh, _tg.arcsinh, _tg.arctanh
mm = _tg.matmul
spmm = _tg.matmul  # a sparse matrix's product (`frontend.sparse`: a GCN's adjacency)
ger = _tg.outer
torch = _sys.modules[__name__]  # PyTorch's `torch.torch` is torch (annotations name it so)

# PyTorch's convolutions are builtins, which a class body may hold (`conv = torch.conv2d`) and
# call through self without binding: staticmethod gives that, and calls as the function
conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d = (
    staticmethod(getattr(_F, _name))
    for _name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d")
)  # fmt: skip


class SymInt:
    """A symbolic size while PyTorch's compiler traces; code tests `isinstance(n, SymInt)`, and
    sizes here are always ints, so nothing is one."""


class SymFloat(SymInt):
    pass


class SymBool(SymInt):
    pass


@pytorch_keywords
def clone(input: Tensor, *, memory_format: Any = None) -> Tensor:
    """A copy autograd tracks; `memory_format` (optimizers' `torch.preserve_format`) means
    nothing to NumPy's arrays."""
    return _tg.positive(input)


@pytorch_keywords
def rsqrt(input: Any) -> Tensor:
    return 1.0 / _tg.sqrt(input)


@pytorch_keywords
def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
         dtype: Any = None) -> Tensor:  # fmt: skip
    """PyTorch's (deprecated but common) `torch.norm`: the method `input.norm(p, dim)`."""
    x = input if dtype is None else input.to(dtype)
    return x.norm(p, dim, keepdim)


def broadcast_shapes(*shapes: Any) -> Size:
    """The shape the shapes broadcast to (an int is a 1-d shape)."""
    sizes = [(s,) if isinstance(s, builtins.int | np.integer) else tuple(s) for s in shapes]
    return Size(np.broadcast_shapes(*sizes))


def is_tensor(obj: Any) -> bool:
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> int:
    return input.numel()


def is_floating_point(input: Tensor) -> bool:
    return input.is_floating_point()


def get_default_dtype() -> dtype:
    """torch.float32 unless `set_default_dtype(torch.float64)`."""
    return _torch_dtype(_tg.get_default_dtype())


class finfo:  # noqa: N801 (PyTorch's name)
    """A float dtype's limits (the default dtype's without one), as PyTorch's: Python floats, so
    `x + torch.finfo(x.dtype).eps` keeps x's dtype as in PyTorch (a NumPy float32 scalar would
    promote a float16 x)."""

    def __init__(self, type: Any = None) -> None:  # noqa: A002
        type = get_default_dtype() if type is None else type  # noqa: A001
        known = _NO_NUMPY_FLOATS.get(getattr(type, "name", None))
        if known is not None:  # bfloat16, float8: limits known though NumPy cannot hold them
            self.bits, self.dtype, self.resolution = known[0], type.name, known[5]
            self.eps, self.max, self.min, self.tiny = known[1:5]
            self.smallest_normal = self.tiny
            return
        info = np.finfo(np.dtype(type))
        self.bits, self.dtype = info.bits, info.dtype.name
        number = builtins.float  # `float` here is torch.float, a dtype
        self.eps, self.max, self.min = number(info.eps), number(info.max), number(info.min)
        self.tiny = self.smallest_normal = number(info.smallest_normal)
        self.resolution = 10.0**-info.precision

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution:g}, min={self.min:g}, max={self.max:g}, "
                f"eps={self.eps:g}, smallest_normal={self.tiny:g}, tiny={self.tiny:g}, "
                f"dtype={self.dtype})")  # fmt: skip


# bits, eps, max, min, smallest normal, resolution of PyTorch's floats that NumPy lacks
_NO_NUMPY_FLOATS = {
    "bfloat16": (16, 2.0**-7, 3.3895313892515355e38, -3.3895313892515355e38, 2.0**-126, 0.01),
    "float8_e4m3fn": (8, 0.125, 448.0, -448.0, 2.0**-6, 1.0),
    "float8_e5m2": (8, 0.25, 57344.0, -57344.0, 2.0**-14, 1.0),
    "float8_e4m3fnuz": (8, 0.125, 240.0, -240.0, 2.0**-7, 1.0),
    "float8_e5m2fnuz": (8, 0.125, 57344.0, -57344.0, 2.0**-15, 1.0),
}  # fmt: skip


def iinfo(type: Any) -> np.iinfo:  # noqa: A002
    return np.iinfo(np.dtype(type))


# --- threads -----------------------------------------------------------------------------------


def set_num_threads(num: int) -> None:
    """PyTorch's intra-op thread count, mapped onto tracegrad's: the Numba threads of the
    compiled kernels (clamped to the NUMBA_NUM_THREADS the process started with; kernels built
    before keep theirs) and the BLAS threads (through threadpoolctl, where it is installed)."""
    n = builtins.int(num)
    if n < 1:
        raise ValueError(f"set_num_threads: expects a positive number of threads, got {num!r}")
    numba.set_num_threads(builtins.min(n, numba.config.NUMBA_NUM_THREADS))
    try:
        import threadpoolctl
    except ImportError:  # not a dependency: BLAS keeps its own count
        return
    threadpoolctl.threadpool_limits(limits=n, user_api="blas")


def get_num_threads() -> int:
    """The Numba threads compiled kernels run on (what `set_num_threads` set)."""
    return numba.get_num_threads()


_interop_threads = [1]


def set_num_interop_threads(num: int) -> None:
    """Recorded only: tracegrad runs no inter-op thread pool."""
    _interop_threads[0] = builtins.int(num)


def get_num_interop_threads() -> int:
    return _interop_threads[0]


# --- torch.compile ----------------------------------------------------------------------------


def compile(  # noqa: A001 (PyTorch's name)
    model: Any = None, *, fullgraph: bool = False, dynamic: Any = None, backend: Any = "inductor",
    mode: Any = None, options: Any = None, disable: bool = False,
) -> Any:  # fmt: skip
    """PyTorch's `torch.compile`. On a function (a training step that runs forward, backward and
    the optimizer, or an inference function) it is `tracegrad.trace`: compiled per input
    signature. On a module (`model = torch.compile(model)`) it returns an `OptimizedModule`
    whose calls run a compiled forward, and a compiled backward when `loss.backward()` reaches
    it. Where the trace refuses (PyTorch would break the graph), that signature's calls run
    eagerly with a warning (the refusal is raised with `fullgraph=True`). Used bare, as
    `@torch.compile`, or with options."""
    if model is None:
        return functools.partial(compile, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, options=options, disable=disable)  # fmt: skip
    if disable:
        return model
    tracegrad_backend = backend_named(backend)
    if isinstance(model, nn.Module):
        return OptimizedModule(model, tracegrad_backend, fullgraph)
    if not callable(model):
        raise TypeError(f"torch.compile: expected a function or a module, got {model!r}")
    return _Traced(model, tracegrad_backend, None, fullgraph=fullgraph)


from tracegrad.frontend import torch_function as _torch_function  # noqa: E402
from tracegrad.frontend.sparse import sparse_coo_tensor  # noqa: E402
from tracegrad.torch import (  # noqa: E402 (the submodules read the names above)
    _C,
    __config__,
    __future__,
    _aten,
    _custom_ops,
    _dynamo,
    _foreach,
    _higher_order_ops,
    _inductor,
    _subclasses,
    _tensor_str,
    _utils,
    accelerator,
    amp,
    ao,
    autograd,
    backends,
    compiler,
    cpu,
    cuda,
    distributed,
    distributions,
    fft,
    func,
    functional,
    futures,
    fx,
    hub,
    jit,
    library,
    linalg,
    mps,
    multiprocessing,
    nn,
    onnx,
    optim,
    overrides,
    profiler,
    quasirandom,
    random,
    return_types,
    serialization,
    signal,
    sparse,
    special,
    storage,
    testing,
    types,
    utils,
    version,
)
from tracegrad.torch._aten import *  # noqa: E402, F403
from tracegrad.torch._environment import *  # noqa: E402, F403
from tracegrad.torch._functions import *  # noqa: E402, F403
from tracegrad.torch._functions import COPIES as _COPIES  # noqa: E402
from tracegrad.torch._ops import ops  # noqa: E402
from tracegrad.torch.amp import GradScaler, autocast  # noqa: E402
from tracegrad.torch.autograd import inference_mode, is_inference_mode_enabled  # noqa: E402
from tracegrad.torch.futures import Future  # noqa: E402 (torch.Future, which captum checks for)
from tracegrad.torch.random import default_generator, initial_seed, manual_seed, seed  # noqa: E402
from tracegrad.torch.utils.dlpack import from_dlpack, to_dlpack  # noqa: E402
from tracegrad.torch.version import __version__  # noqa: E402

del _name
globals().update(legacy_types())  # torch.FloatTensor, torch.LongTensor, ...
globals().update(_foreach.FUNCTIONS)  # torch._foreach_mul_(tensors, 0.5), ...
globals().update(_aten.IN_PLACE_FUNCTIONS)  # torch.relu_(x), torch.zero_(x), ...
globals().update(_COPIES)  # torch.view_copy(x, shape), torch.permute_copy(x, dims), ...
newaxis = None
ScriptModule = jit.ScriptModule
xpu = mps.xpu
quantization = _file_module(
    f"{__name__}.quantization",
    "`torch.quantization`: `torch.ao.quantization`'s first home",
    {name: getattr(ao.quantization, name) for name in ao.quantization.__all__},
)
# `torch._VF`: the top level by ATen's names, as PyTorch's own modules call it and code written
# like them does (`_VF.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)`, `_VF.einsum`)
_VF = _file_module(f"{__name__}._VF", "`torch._VF`: the top level's functions", {})
_VF.__getattr__ = functools.partial(getattr, _sys.modules[__name__])


def get_device_module(device: Any = None) -> Any:  # noqa: F811 (PyTorch's argument name)
    """The module of a device type's functions (`torch.cpu`, `torch.cuda`), as code asks for it
    to call the same ones on any device."""
    kind = "cpu" if device is None else getattr(device, "type", str(device).split(":")[0])
    if kind not in ("cpu", "cuda"):
        raise RuntimeError(f"torch.get_device_module: unknown device type {kind!r}")
    return cpu if kind == "cpu" else cuda


PyTorchFileReader, TensorType = _C.PyTorchFileReader, _C.TensorType
vmap = func.vmap
is_anomaly_enabled = autograd.is_anomaly_enabled


def set_anomaly_enabled(enabled: bool, check_nan: bool = True) -> None:
    """`torch.autograd.set_detect_anomaly(enabled)` (which always checks for nan)."""
    autograd.set_detect_anomaly(enabled)


def is_anomaly_check_nan_enabled() -> bool:
    return autograd.is_anomaly_enabled()


_warn_always = [False]


def set_warn_always(b: bool) -> None:
    """Recorded only: tracegrad's warnings follow Python's `warnings` filters."""
    _warn_always[0] = builtins.bool(b)


def is_warn_always_enabled() -> bool:
    return _warn_always[0]


def _assert(condition: Any, message: str) -> None:
    """`assert condition, message`, as a function (PyTorch's for scripted code)."""
    if not condition:
        raise AssertionError(message)


def _assert_async(condition: Any, message: str | None = None) -> None:
    """PyTorch's check of a one-element tensor that does not wait on a device: here at once."""
    if not condition:
        raise RuntimeError(message or "Expected the asserted tensor to be true")


def _checker(error: type[Exception]) -> Callable:
    def check(cond: Any, message: Callable[[], str] | None = None) -> None:
        if not cond:
            raise error(message() if message is not None else f"Expected {cond} to be True")

    check.__doc__ = f"Raise {error.__name__} (its text `message()`) unless `cond`."
    return check


_check = _checker(RuntimeError)
_check_index = _checker(IndexError)
_check_value = _checker(ValueError)
_check_type = _checker(TypeError)


def frombuffer(buffer: Any, *, dtype: Any, count: int = -1, offset: int = 0,
               requires_grad: bool = False) -> Tensor:  # fmt: skip
    """A 1-d tensor of `buffer`'s bytes (anything with the buffer protocol) read as `dtype`,
    sharing its memory as PyTorch's (a read-only buffer is copied: tensors here are
    writable)."""
    a = np.frombuffer(buffer, dtype=np.dtype(dtype), count=count, offset=offset)
    t = Tensor._of(a if a.flags.writeable else a.copy())
    return t.requires_grad_() if requires_grad else t


class Stream:
    """PyTorch's device-generic stream (annotations and `isinstance` checks name it): work here
    runs in order on the CPU, so there are no streams to make."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("torch.Stream: tracegrad runs on the CPU, without streams")


class Event(Stream):
    pass


def _standard_gamma(input: Tensor) -> Tensor:
    """Draws of Gamma(input, 1), one per element (no gradient: `distributions.gamma`)."""
    from tracegrad.distributions.gamma import standard_gamma

    return standard_gamma(input)


def _standard_gamma_grad(input: Tensor, output: Tensor) -> Tensor:
    """d output / d input of draws `output` of Gamma(input, 1) (implicit reparameterization)."""
    from tracegrad.core.primitives import gamma_draw_slope

    return gamma_draw_slope(output, input)


def _sample_dirichlet(input: Tensor) -> Tensor:
    """A draw of Dirichlet(row) for each row of `input` (its last axis)."""
    x = _standard_gamma(input)
    return x / x.sum(-1, keepdim=True)


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)


__all__ = sorted(
    name for name, value in globals().items()
    if not name.startswith("_") and name not in ("annotations", "builtins", "functools",
                                                 "warnings", "np", "numba", "Any",
                                                 "Callable")
)  # fmt: skip

_torch_function.wrap_namespaces()  # a Tensor subclass defined before `import torch`
