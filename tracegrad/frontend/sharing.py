"""Tensors in memory that processes share, as PyTorch's (`t.share_memory_()`,
`model.share_memory()`, and every tensor sent to another process by `torch.multiprocessing`).

Hogwild training (pytorch/examples' `mnist_hogwild`, A3C's shared model and shared Adam state)
hands a model to worker processes that each write its parameters in place; the parent sees what
they wrote. A shared tensor's array lies in a file in shared memory (`/dev/shm`), removed from
the file system as soon as it is made and passed to another process by its file descriptor, as
PyTorch's default "file_descriptor" strategy; the memory is freed when the last process lets go.

Pickling for a process (multiprocessing's `ForkingPickler`: `Process` arguments, queues, pipes)
moves a tensor into shared memory first, as PyTorch does, so the receiver maps the sender's
memory and writes by either reach both. Plain pickling (`torch.save`, `pickle.dumps`) copies, as
before. Eager writes keep a tensor's array (optimizers update in place, a traced step's state
writes copy into it), so a shared tensor stays shared through training.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from collections.abc import Callable
from multiprocessing import reduction
from typing import Any

import numpy as np

from tracegrad.frontend.storage import memory_owner
from tracegrad.frontend.tensor import Alias, Listeners, Tensor

_SHM = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # else the temporary directory


class SharedMemory:
    """A block of memory that other processes map: an unlinked file, kept open (by its
    descriptor) while an array uses the block. NumPy reads it through `__array_interface__`, so
    the block is the base of every array made over it (`shared_block` finds it)."""

    def __init__(self, nbytes: int, fd: int = -1) -> None:
        if fd < 0:
            fd, name = tempfile.mkstemp(prefix="tracegrad-", dir=_SHM)
            os.unlink(name)
            os.ftruncate(fd, max(nbytes, 1))
        self.fd, self.nbytes = fd, nbytes
        weakref.finalize(self, os.close, fd)
        self._bytes = np.frombuffer(mmap.mmap(fd, max(nbytes, 1)), np.uint8, nbytes)
        self.__array_interface__ = self._bytes.__array_interface__

    def array(self, shape: tuple[int, ...], dtype: np.dtype, offset: int = 0,
              strides: tuple[int, ...] | None = None) -> np.ndarray:  # fmt: skip
        return np.ndarray(shape, dtype, np.asarray(self), offset, strides)


def _rebuild_block(nbytes: int, fd: Any) -> SharedMemory:
    return SharedMemory(nbytes, fd.detach())


def _reduce_block(block: SharedMemory) -> tuple:
    """Another process gets a duplicate of the descriptor (multiprocessing passes it over a
    Unix socket, or to a child it spawns), not the bytes."""
    return _rebuild_block, (block.nbytes, reduction.DupFd(block.fd))


def shared_block(a: np.ndarray) -> SharedMemory | None:
    """The shared block an array lies in, if it does."""
    base = memory_owner(a).base
    return base if isinstance(base, SharedMemory) else None


def _rebuild_array(block: SharedMemory, shape: tuple, dtype: np.dtype, offset: int,
                   strides: tuple) -> np.ndarray:  # fmt: skip
    return block.array(shape, dtype, offset, strides)


def _reduce_array(a: np.ndarray) -> tuple:
    """An array in a shared block goes as the block and where in it the array lies; any other
    array as NumPy pickles it (a copy)."""
    block = shared_block(a)
    if block is None:
        return a.__reduce__()
    offset = a.__array_interface__["data"][0] - block.__array_interface__["data"][0]
    return _rebuild_array, (block, a.shape, a.dtype, offset, a.strides)


def share_memory_(t: Tensor) -> Tensor:
    """Move `t`'s array into shared memory (nothing to do if it is there). A view moves its
    base and is remade over the base's new memory, as PyTorch moves the whole storage (a view
    made before the move, and not reached from `t`, keeps the old memory)."""
    if Listeners.tracers or not isinstance(t._value, np.ndarray):
        raise RuntimeError(f"share_memory_: a tensor of shape {t.shape} inside a traced step; "
                           "share tensors before the step")  # fmt: skip
    if shared_block(t._value) is not None:
        return t
    if isinstance(t, Alias):
        t._value = share_memory_(t._base)._value
        return t
    if t._view is not None and np.may_share_memory(t._value, t._view[0]._value):
        base = t._view[0]
        start = t._value.__array_interface__["data"][0] - memory_owner(base._value).ctypes.data
        share_memory_(base)
        block = shared_block(base._value)
        t._value = block.array(t._value.shape, t._value.dtype, start, t._value.strides)
        return t
    old = t._value
    block = SharedMemory(old.nbytes)
    t._value = block.array(old.shape, old.dtype)
    np.copyto(t._value, old)
    return t


def is_shared(t: Tensor) -> bool:
    return isinstance(t._value, np.ndarray) and shared_block(t._value) is not None


def _reducer(rebuild: Callable[[np.ndarray, bool], Tensor]) -> Callable[[Tensor], tuple]:
    def reduce(t: Tensor) -> tuple:
        if t.requires_grad and not t.is_leaf:
            raise RuntimeError(
                "Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
                "autograd does not support crossing process boundaries.  If you just want to "
                "transfer the data, call detach() on the tensor before serializing (e.g., "
                "putting it on the queue)."
            )
        return rebuild, (share_memory_(t)._value, t.requires_grad)

    return reduce


def _rebuild_tensor(value: np.ndarray, requires_grad: bool) -> Tensor:
    return Tensor._of(value, requires_grad=requires_grad)


def send_shared(cls: type, rebuild: Callable[[np.ndarray, bool], Tensor] = _rebuild_tensor,
                ) -> None:  # fmt: skip
    """Tensors of class `cls` sent to another process go in shared memory, rebuilt there by
    `rebuild(array, requires_grad)` (a Parameter as a Parameter; other classes as tensors, as
    PyTorch's `rebuild_tensor`)."""
    reduction.ForkingPickler.register(cls, _reducer(rebuild))


reduction.ForkingPickler.register(SharedMemory, _reduce_block)
reduction.ForkingPickler.register(np.ndarray, _reduce_array)
send_shared(Tensor)
send_shared(Alias)
