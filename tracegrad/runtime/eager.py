"""Eager calls of the ops that have kernels of their own (convolutions, max-pooling, attention,
layer norm, batch norm, log-softmax, softmax and cross-entropy, LSTM's and GRU's scans, matrix
products), and of the elementwise ops whose NumPy versions are many passes (GELU's, SiLU's, the
sigmoid's), run those kernels (a fused kernel of the one op, for the latter), where the call is
large enough for a plan to run one (`lowering.KERNEL_MIN` elements; max-pooling and grouped
convolutions at any size once a kernel has loaded: `_any_size`); so does a small graph of
elementwise ops a caller hands over whole (`run_group`: an optimizer's update). A signature's
first calls run the op's NumPy version while a thread loads its kernel (compiled in child
processes where Numba's disk cache lacks it, as a traced step's first calls do), the later ones
the kernel. The kernels compute what the NumPy versions compute, to rounding (docs/kernels.md);
PyTorch's eager ops are native kernels too."""

from __future__ import annotations

import math
import os
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.compiler import lowering
from tracegrad.core import ir, vocabulary
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16

OPS = (P.conv2d, P.conv2d_input_grad, P.conv2d_weight_grad, P.max_pool2d_argmax, P.max_pool2d,
       P.max_pool2d_scatter, P.max_pool2d_gather, P.attention, P.attention_grad, P.layer_norm,
       P.layer_norm_grad, P.batch_norm, P.batch_norm_grad, P.batch_stats, P.log_softmax,
       P.log_softmax_grad, P.softmax, P.softmax_grad, P.cross_entropy, P.cross_entropy_grad,
       P.lstm_scan, P.lstm_scan_grad, P.gru_scan, P.gru_scan_grad, P.matmul, P.astype)  # fmt: skip
# Elementwise ops whose NumPy versions are many passes over memory. (Ops of one NumPy pass, as
# exp or tanh, stay NumPy's: the kernels' float32 versions of them round differently.)
ELEMENTWISE = (P.gelu, P.gelu_slope, P.gelu_tanh, P.gelu_tanh_slope, P.silu, P.silu_slope,
               P.sigmoid, P.sigmoid_grad, P.tanh_grad)  # fmt: skip
# The exact ones (arithmetic, selects, comparisons): NumPy runs those on one thread and faults in
# a fresh result's pages at each call, a kernel on every core. They take kernels only where that
# pays: from EXACT_MIN elements, since the kernels' threads fall asleep between eager ops and
# waking them costs more than NumPy's pass below that (docs/benchmarks.md), and only in a process
# that runs other kernels already, since the first kernel tells OpenBLAS to sleep between calls,
# which costs each later matrix product a wake-up too.
EXACT = (P.add, P.sub, P.mul, P.div, P.neg, P.maximum, P.minimum, P.where, P.less, P.less_equal,
         P.greater, P.greater_equal, P.equal, P.not_equal)  # fmt: skip
EXACT_MIN = 1 << 19
# Ops whose NumPy versions are a pass per tap or a call per group, whose fixed cost is many
# times a kernel's call at any size (a depthwise 7 x 7 is 49 passes over windows a few elements
# wide): max-pooling, and convolutions of several groups. They take their kernels at any size, as
# in plans, once a kernel has loaded (a small program never loads Numba for its small ops). Not
# the others: a small call would round as the kernel does or as NumPy does by whether its kernel
# had loaded yet.
POOLING = (P.max_pool2d_argmax, P.max_pool2d, P.max_pool2d_scatter, P.max_pool2d_gather)
CONVOLUTIONS = (P.conv2d, P.conv2d_input_grad, P.conv2d_weight_grad)
_LOADING = None  # a signature whose kernel is loading, or that has none
_kernels: dict[tuple, Callable | None] = {}
_requests: queue.Queue = queue.Queue()
_worker: list[threading.Thread] = []
_quiet: list[bool] = []  # OpenBLAS told to sleep at once, as for a plan


def _quiet_openblas() -> bool:
    """`blas.quiet_openblas`, from the caller's thread between calls: OpenBLAS's idle workers
    would spin on the cores the kernels' threads run on (docs/benchmarks.md has the cost).
    Imported here, not at the top: `import tracegrad` loads no compiler."""
    from tracegrad.compiler.kernels.blas import quiet_openblas

    return quiet_openblas()


def run(prim: vocabulary.Primitive, arrays: list[np.ndarray], params: dict[str, Any],
        shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:  # fmt: skip
    """`prim(*arrays, **params)` by its kernel, or None where the caller runs NumPy: a small
    call, or a signature whose kernel is not loaded (its loading starts then) or that has none."""
    size = math.prod(shape)
    if size < lowering.KERNEL_MIN:  # a loop, not max() over a generator: every small op asks
        for a in arrays:
            if a.size >= lowering.KERNEL_MIN:
                break
        else:
            if not (_quiet and _any_size(prim, params)):
                return None
    if prim in EXACT and not (_quiet and size >= EXACT_MIN and _floating(dtype, arrays)):
        return None
    if prim is P.astype and BFLOAT16 not in (dtype, arrays[0].dtype):  # `kernels.casts`' only
        return None
    key = (prim.name, *((a.shape, a.dtype.str) for a in arrays), repr(sorted(params.items())))

    def node() -> ir.Node:
        values = [ir.Value(a.shape, a.dtype) for a in arrays]
        return ir.Node(prim, values, [ir.Value(shape, dtype)], dict(params))

    kernel = _loaded(key, node)
    if kernel is None:
        return None
    out = np.empty(shape, dtype)
    kernel(*arrays, out)
    return out


def _any_size(prim: vocabulary.Primitive, params: dict[str, Any]) -> bool:
    return prim in POOLING or (prim in CONVOLUTIONS and params["groups"] > 1)


def run_group(key: tuple, size: int, group: Callable[[], tuple[list, list, list]],
              arrays: Callable[[], Sequence[np.ndarray] | None]) -> bool:  # fmt: skip
    """Run a graph of elementwise ops over `size` elements as one fused kernel, if it has
    loaded: `group()` builds the graph (its input values, nodes, output values); `arrays()`
    gives its inputs, then the arrays its outputs are written into, which may be inputs (an
    update in place), or None where the caller must run the ops; `key` names the graph and
    its shapes. False, having at most started the loading, where the caller runs the ops (an
    optimizer's update: a dozen passes over each parameter, against one); and below
    `lowering.KERNEL_MIN` elements, where a plan runs the ops too and eager rounds as it does
    (asked first: an update of a small parameter pays for nothing else)."""
    if size < lowering.KERNEL_MIN:
        return False
    kernel = _loaded(key, group)
    given = None if kernel is None else arrays()
    if given is None:
        return False
    kernel(*given)
    return True


def _loaded(key: tuple, request: Callable[[], ir.Node | tuple[list, list, list]]) -> Any:
    """The kernel of `key` if it has loaded (NumPy's OpenBLAS told to sleep between calls from
    the first on), else None, its loading started by the first ask (`request()` builds what
    to compile: a node, or a group's inputs, nodes and outputs)."""
    if key not in _kernels:
        _kernels[key] = _LOADING
        _request(key, request())
    kernel = _kernels[key]
    if kernel is not _LOADING and not _quiet:
        _quiet.append(_quiet_openblas())
    return kernel


def _floating(dtype: np.dtype, arrays: list[np.ndarray]) -> bool:
    """Floats and masks only: integer arithmetic stays NumPy's (its overflow, its division)."""
    return dtype.kind in "fb" and all(a.dtype.kind in "fb" for a in arrays)


def _request(key: tuple, node: ir.Node | tuple[list, list, list]) -> None:
    _requests.put((key, node))
    if not _worker:
        _worker.append(threading.Thread(target=_load, daemon=True, name="tracegrad-eager"))
        _worker[0].start()


def _load() -> None:
    """Load the requested kernels one at a time, in this thread: a kernel that fails to load
    leaves its signature to NumPy."""
    from tracegrad.compiler.kernels import fused, native
    from tracegrad.compiler.kernels.cache import default_cache

    while True:
        key, node = _requests.get()
        try:
            if isinstance(node, tuple) or node.prim in ELEMENTWISE or node.prim in EXACT:
                group = node if isinstance(node, tuple) else (node.inputs, [node], node.outputs)
                [(_, kernel)] = fused.compile_groups([group], background=True)
            else:
                found = native.modules([node])
                default_cache().load_all(dict(found.values()), background=True)
                kernel = native.launchers(found).get(node)
            _kernels[key] = kernel
        except Exception:  # noqa: BLE001 - NumPy runs the op, as before
            _kernels[key] = _LOADING
        finally:
            _requests.task_done()


def _after_fork_in_child() -> None:
    """A forked process has no loading thread (only the forking thread survives a fork): its
    requests start one of its own, and the parent's pending ones are asked again."""
    global _requests
    _requests = queue.Queue()
    _worker.clear()
    for key in [k for k, v in _kernels.items() if v is _LOADING]:
        del _kernels[key]


os.register_at_fork(after_in_child=_after_fork_in_child)


def wait_for_kernels() -> None:
    """Return once the kernels requested so far have loaded (or failed to): the calls after
    run them. (A benchmark's steady state; a script need not wait.)"""
    _requests.join()


for _prim in OPS + ELEMENTWISE + EXACT:
    vocabulary.EAGER_KERNELS[_prim] = run
vocabulary.EAGER_GROUPS[:] = [run_group]
