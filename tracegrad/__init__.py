"""tracegrad: eager autodiff over NumPy that compiles whole training steps for the CPU.

Layers, one folder each, each importing only those before it: core (errors, the IR, the op
table), frontend (Tensor and its methods, the functions, the tape, GradManager, the tracer), the
library (nn, optim, numpy, utils, distributions, distributed), the compiler (the top-level
`passes` package and `compiler`: lowering, codegen, kernels) and runtime (`@trace`, plans, the
arena, reports); this module is the front door.

The top level has PyTorch's meanings (`max(x, dim)` gives values and indices, `split` by chunk
size, `var` unbiased, `tensor` copies); `tracegrad.numpy` has NumPy's. A NumPy-only name asked
of the top level raises and says where it lives.
"""

import warnings as _warnings
from typing import Any as _Any

from tracegrad import distributions, nn, optim, utils
from tracegrad import numpy as _numpy
from tracegrad.core import primitives as _primitives
from tracegrad.core.errors import MemoryBudgetError, ShapeError, TraceError
from tracegrad.core.ir import GraphError
from tracegrad.core.primitives import (
    PRIMITIVES,
    Composite,
    Kind,
    Phase,
    Primitive,
    defprimitive,
    sum_to,
)
from tracegrad.frontend import autograd, fft, linalg
from tracegrad.frontend import dtypes as _dtypes
from tracegrad.frontend import methods as _methods  # noqa: F401 (attaches Tensor's methods)
from tracegrad.frontend import torch_function as _torch_function  # noqa: F401 (the protocol)
from tracegrad.frontend.autodiff import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from tracegrad.frontend.counting import *  # noqa: F403
from tracegrad.frontend.creation import *  # noqa: F403
from tracegrad.frontend.creation import seed as _seed
from tracegrad.frontend.elementwise import *  # noqa: F403
from tracegrad.frontend.fft import istft, stft
from tracegrad.frontend.functions import *  # noqa: F403
from tracegrad.frontend.functions import PUBLIC_VIEWS as _PUBLIC_VIEWS
from tracegrad.frontend.grad_manager import GradManager, grad, vjp
from tracegrad.frontend.heap import keep_freed_memory as _keep_freed_memory
from tracegrad.frontend.linalg import (
    adjoint,
    cdist,
    cholesky_inverse,
    cholesky_solve,
    det,
    dist,
    geqrf,
    inverse,
    logdet,
    lu_unpack,
    matrix_exp,
    matrix_power,
    pca_lowrank,
    pinverse,
    renorm,
    slogdet,
    svd_lowrank,
    triangular_solve,
)
from tracegrad.frontend.linalg import cholesky_top as cholesky
from tracegrad.frontend.linalg import householder_product as orgqr
from tracegrad.frontend.linalg import lu_solve_top as lu_solve
from tracegrad.frontend.linalg import lu_top as lu
from tracegrad.frontend.linalg import qr_top as qr
from tracegrad.frontend.linalg import svd_top as svd
from tracegrad.frontend.mutation import *  # noqa: F403
from tracegrad.frontend.products import *  # noqa: F403
from tracegrad.frontend.random import Generator
from tracegrad.frontend.rearrange import *  # noqa: F403
from tracegrad.frontend.reductions import *  # noqa: F403
from tracegrad.frontend.sampling import *  # noqa: F403
from tracegrad.frontend.serialization import CheckpointError, load, save
from tracegrad.frontend.sorting import *  # noqa: F403
from tracegrad.frontend.special import *  # noqa: F403
from tracegrad.frontend.tensor import Size, Tensor, get_default_dtype, set_default_dtype
from tracegrad.frontend.tracer import guard, interpret
from tracegrad.runtime import compiled_module as _compiled  # noqa: F401 - Module.compile's
from tracegrad.runtime import eager as _eager  # noqa: F401 - eager calls run kernels
from tracegrad.runtime.trace import trace as _compile

# PyTorch computes log(0) = -inf, 0 / 0 = nan and exp(1000) = inf silently, and code relies on
# it (`torch.where(p > 0, p.log(), 0)` takes the log of every element). NumPy warns from the
# line that called it, which for an op is tracegrad's: those warnings are silenced, and only
# those (NumPy's own on the user's arrays still warn). A filter costs nothing until a warning.
_warnings.filterwarnings(
    "ignore", r"(divide by zero|invalid value|overflow|underflow) encountered", RuntimeWarning,
    r"tracegrad(\.|$)",
)  # fmt: skip

# The op table's elementwise ops and tracegrad's own ops, as they are (calling one binds it).
_OWN_OPS = ("allreduce", "conv2d", "conv2d_input_grad", "conv2d_weight_grad", "getitem",
            "uniform")  # fmt: skip
# NumPy's, PyTorch's function above, or the parts of one (frexp's)
_NOT_PYTORCH = ("astype", "rint", "equal", "where", "frexp_mantissa", "frexp_exponent")
globals().update({
    name: op for name, op in vars(_primitives).items()
    if isinstance(op, Primitive) and name not in globals() and name not in _NOT_PYTORCH
    and (op.kind is Kind.ELEMENTWISE or name in _OWN_OPS)
})  # fmt: skip

# PyTorch's dtype objects (`tracegrad.float32 is x.dtype`); tracegrad.numpy has NumPy's types
globals().update(_dtypes.DTYPES)
globals().update({name: f for name, f in _PUBLIC_VIEWS.items() if name in globals()})
globals().update({alias: _dtypes.DTYPES[name] for alias, name in _dtypes.ALIASES.items()})
dtype = _dtypes.dtype
pi, e, inf, nan = _numpy.pi, _numpy.e, _numpy.inf, _numpy.nan


def trace(fn: _Any = None, **options: _Any) -> _Any:
    """`@trace` compiles a training step (see runtime.trace), also as `@trace(backend=...)`.
    It is only the compiler: a matrix's diagonal sum is `x.trace()` (PyTorch's) or
    `tracegrad.numpy.trace(a)` (NumPy's)."""
    if fn is not None and not callable(fn):
        raise TypeError(
            f"tracegrad.trace compiles a function (got {type(fn).__name__}); the sum of a "
            "matrix's diagonal is x.trace() (PyTorch's) or tracegrad.numpy.trace(a) (NumPy's)"
        )
    return _compile(fn, **options)


def manual_seed(seed: int) -> Generator:
    """Seed every generator tracegrad draws from: randn/rand, parameter initialization and the
    random state of dropout and sampling. Returns the generator behind randn (PyTorch's
    default generator)."""
    nn.manual_seed(seed)
    return _seed(seed)


# PyTorch's spelling of some NumPy-only names, for the error that points to them.
_PYTORCH_SPELLING = {
    "repeat": "repeat_interleave (x.repeat tiles, as np.tile)", "expand_dims": "unsqueeze",
    "take_along_axis": "take_along_dim", "array_split": "tensor_split", "power": "pow",
    "mod": "remainder", "fabs": "abs", "around": "round", "degrees": "rad2deg",
    "radians": "deg2rad", "conjugate": "conj", "rollaxis": "movedim", "array": "tensor",
    "asarray": "as_tensor", "astype": "x.to(dtype)", "rint": "round",
}  # fmt: skip


def __getattr__(name: str) -> _Any:
    """A NumPy-only name is not PyTorch's top level: say where it lives."""
    if not name.startswith("_") and hasattr(_numpy, name):
        hint = _PYTORCH_SPELLING.get(name)
        raise AttributeError(
            f"tracegrad.{name} is NumPy's; use tracegrad.numpy.{name}"
            + (f" (PyTorch's spelling: tracegrad.{hint})" if hint else "")
        )
    raise AttributeError(f"module 'tracegrad' has no attribute '{name}'")


_keep_freed_memory()  # eager steps refault their freed arrays otherwise (frontend/heap.py)

_SUBPACKAGES = ("compiler", "core", "frontend", "numpy", "runtime")  # not for import *
__all__ = sorted(name for name in dir() if not name.startswith("_") and name not in _SUBPACKAGES)
