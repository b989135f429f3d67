"""`torch.distributed.distributed_c10d`: the process group and its collectives (what
`torch.distributed` exports), over the sockets of `_sockets.py`: `init_process_group` (env:// as
torchrun sets it, or tcp://), the collectives on tensors (in place, as PyTorch's; inside a
compiled step an `all_reduce` of sum or average is a node of the plan) and on Python objects,
point-to-point messages. NCCL and MPI backends are not built in, as in PyTorch's CPU wheels."""

from __future__ import annotations

import datetime
import os
import pickle
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.core.ops.collectives import use_group
from tracegrad.frontend.tensor import Listeners, Tensor
from tracegrad.torch.distributed._sockets import SocketGroup, Work, rendezvous

__all__ = [
    "Backend",
    "GroupMember",
    "ProcessGroup",
    "ReduceOp",
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_object",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "broadcast_object_list",
    "destroy_process_group",
    "gather",
    "gather_object",
    "get_backend",
    "get_default_backend_for_device",
    "get_global_rank",
    "get_group_rank",
    "get_node_local_rank",
    "get_process_group_ranks",
    "get_rank",
    "get_world_size",
    "group",
    "init_process_group",
    "irecv",
    "is_available",
    "is_gloo_available",
    "is_initialized",
    "is_mpi_available",
    "is_nccl_available",
    "is_torchelastic_launched",
    "isend",
    "monitored_barrier",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "scatter_object_list",
    "send",
]  # what torch.distributed exports

DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)  # PyTorch's for gloo


class ReduceOp:
    """The reductions' names (`def all_reduce(t, op=dist.ReduceOp.SUM)` runs at import)."""

    SUM, PRODUCT, MIN, MAX = "sum", "product", "min", "max"
    BAND, BOR, BXOR, AVG, PREMUL_SUM = "band", "bor", "bxor", "avg", "premul_sum"
    RedOpType = str


class Backend(str):
    """The backends' names, as strings (`Backend("gloo")`, `Backend.NCCL`)."""

    UNDEFINED, GLOO, NCCL, UCC, MPI = "undefined", "gloo", "nccl", "ucc", "mpi"
    default_device_backend_map = {"cpu": "gloo", "cuda": "nccl"}
    backend_list = ["undefined", "gloo", "nccl", "ucc", "mpi"]


def get_default_backend_for_device(device: Any) -> str:
    """gloo for the CPU (the only device here)."""
    kind = getattr(device, "type", device)
    if kind not in (None, "cpu"):
        raise RuntimeError(f"get_default_backend_for_device({device!r}): tracegrad runs on the "
                           "CPU, whose backend is gloo")  # fmt: skip
    return "gloo"


class group:  # noqa: N801 (PyTorch's name)
    """`group.WORLD`: the default group, once `init_process_group` made it."""

    WORLD: Any = None


GroupMember = group


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return group.WORLD is not None


def is_gloo_available() -> bool:
    return True


def is_nccl_available() -> bool:
    return False


def is_mpi_available() -> bool:
    return False


def is_torchelastic_launched() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


def _backend(name: Any) -> str:
    """gloo (asked for or not): the CPU backend; NCCL and MPI raise as in PyTorch's CPU wheels."""
    wanted = {part.split(":")[-1] for part in str(name or "gloo").lower().split(",")}
    if "gloo" in wanted:
        return "gloo"
    raise RuntimeError(
        f"init_process_group(backend={name!r}): distributed package doesn't have "
        f"{'/'.join(sorted(wanted)).upper()} built in; tracegrad runs on the CPU: use "
        "backend='gloo' (or tracegrad.distributed, over MPI)"
    )


def _number(name: str, given: int) -> int:
    if given is not None and given >= 0:
        return given
    if name not in os.environ:
        raise ValueError(f"init_process_group: give {name.lower()}= or set ${name} (torchrun "
                         "sets it)")  # fmt: skip
    return int(os.environ[name])


def _address(init_method: str | None) -> tuple[str, int]:
    if init_method is None or init_method == "env://":
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise ValueError(f"init_process_group: env:// needs ${' and $'.join(missing)} "
                             "(torchrun sets them)")  # fmt: skip
        return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if init_method.startswith("tcp://"):
        host, _, port = init_method.removeprefix("tcp://").split("?")[0].rpartition(":")
        return host.strip("[]"), int(port)
    raise ValueError(f"init_process_group: init_method {init_method!r} is not provided by "
                     "tracegrad (env:// and tcp://host:port are)")  # fmt: skip


def init_process_group(backend: Any = None, init_method: str | None = None,
                       timeout: datetime.timedelta | None = None, world_size: int = -1,
                       rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> None:  # fmt: skip
    """Join the job's other processes (every rank calls it): rank and size from the arguments or
    $RANK and $WORLD_SIZE, the master from `init_method` or $MASTER_ADDR and $MASTER_PORT."""
    if group.WORLD is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if store is not None:
        raise ValueError("init_process_group: a store is not provided by tracegrad; give "
                         "init_method='env://' or 'tcp://host:port'")  # fmt: skip
    name = _backend(backend)
    host, port = _address(init_method)
    size, me = _number("WORLD_SIZE", world_size), _number("RANK", rank)
    if not 0 <= me < size:
        raise ValueError(f"init_process_group: rank {me} is not in 0..{size - 1}")
    seconds = (timeout or DEFAULT_TIMEOUT).total_seconds()
    world = SocketGroup(me, size, rendezvous(me, size, host, port, seconds), seconds)
    world.backend = name
    group.WORLD = world
    use_group(world)
    # replicas stay identical only if every rank runs the same plans: compiled before use, not
    # NumPy's calls on one rank while another's kernels are still compiling
    os.environ["TRACEGRAD_BACKGROUND_COMPILE"] = "0"


def destroy_process_group(group: Any = None) -> None:
    if GroupMember.WORLD is not None:
        GroupMember.WORLD.close()
        GroupMember.WORLD = None
        use_group(None)


def _world(which: Any = None) -> SocketGroup:
    if group.WORLD is None:
        raise ValueError("Default process group has not been initialized, please make sure to "
                         "call init_process_group.")  # fmt: skip
    if which is not None and which is not group.WORLD:
        raise ValueError("tracegrad's process groups: only the default (world) group exists")
    return group.WORLD


def get_rank(group: Any = None) -> int:
    return _world(group).rank


def get_world_size(group: Any = None) -> int:
    return _world(group).size


def get_backend(group: Any = None) -> str:
    return _world(group).backend


def get_global_rank(group: Any, group_rank: int) -> int:
    _world(group)
    return group_rank


get_group_rank = get_global_rank


def get_process_group_ranks(group: Any) -> list[int]:
    return list(range(_world(group).size))


def get_node_local_rank(fallback_rank: int | None = None) -> int:
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    if fallback_rank is None:
        raise RuntimeError("get_node_local_rank: $LOCAL_RANK is not set (torchrun sets it)")
    return fallback_rank


def new_group(ranks: Sequence[int] | None = None, *args: Any, **kwargs: Any) -> SocketGroup:
    """The world again, if `ranks` is all of it: tracegrad has no smaller groups."""
    world = _world()
    if ranks is not None and sorted(ranks) != list(range(world.size)):
        raise NotImplementedError(f"new_group(ranks={list(ranks)}): tracegrad's process groups "
                                  "hold every rank (the world)")  # fmt: skip
    return world


# ----- tensors in and out


def _op(op: Any) -> str:
    name = str(op).lower().rsplit(".", 1)[-1]
    if name not in ("sum", "product", "min", "max", "band", "bor", "bxor", "avg"):
        raise ValueError(f"reduce op {op!r} is not provided by tracegrad")
    return name


def _refuse_traced(what: str) -> None:
    if Listeners.tracers:
        raise RuntimeError(f"torch.distributed.{what} inside a compiled step is not provided by "
                           "tracegrad (all_reduce with SUM or AVG is); call it outside the "
                           "compiled function")  # fmt: skip


def _buffer(t: Tensor) -> tuple[np.ndarray, bool]:
    """The array a collective writes `t` through: `t`'s own when it is contiguous and writable
    (written in place, as PyTorch's), else a copy to assign back (the flag)."""
    value = t._value
    if isinstance(value, np.ndarray) and value.flags.c_contiguous and value.flags.writeable:
        t._version[0] += 1
        return value.reshape(-1), False
    return np.array(value, order="C").reshape(-1), True


def _run(what: str, run: Any, async_op: bool, write: Any = None) -> Work | None:
    """Submit `run(number)`; `write()` runs on the caller's thread when the work is waited for
    (copies back into tensors that were not written in place)."""
    work = _world().submit(what, run)
    if write is not None:
        work.then.append(write)
    if async_op:
        return work
    work.wait()
    return None


def _into(t: Tensor, flat: np.ndarray) -> Any:
    return lambda: t._assign(Tensor._of(flat.reshape(t.shape)))


def all_reduce(tensor: Tensor, op: Any = ReduceOp.SUM, group: Any = None,
               async_op: bool = False) -> Work | None:  # fmt: skip
    """Every rank's `tensor` becomes the reduction over ranks (in place). Inside a compiled
    step (sum or average), a node of the plan."""
    name = _op(op)
    world = _world(group)
    if Listeners.tracers:
        if name not in ("sum", "avg"):
            _refuse_traced(f"all_reduce(op={op})")
        tensor._assign(P.allreduce(tensor, op="mean" if name == "avg" else "sum", timeout=None))
        return _done() if async_op else None
    flat, copied = _buffer(tensor)
    return _run("all_reduce", lambda n: world.all_reduce(flat, name, n), async_op,
                _into(tensor, flat) if copied else None)  # fmt: skip


def _done() -> Work:
    work = Work("all_reduce")
    work.finish()
    return work


def reduce(tensor: Tensor, dst: int, op: Any = ReduceOp.SUM, group: Any = None,
           async_op: bool = False) -> Work | None:  # fmt: skip
    """`dst`'s `tensor` becomes the reduction (the others' are left as they were)."""
    _refuse_traced("reduce")
    name, world = _op(op), _world(group)
    flat = np.array(tensor._value, order="C").reshape(-1)
    keep = _into(tensor, flat) if world.rank == dst else None
    return _run("reduce", lambda n: world.all_reduce(flat, name, n), async_op, keep)


def broadcast(tensor: Tensor, src: int, group: Any = None, async_op: bool = False) -> Work | None:
    """Every rank's `tensor` becomes rank `src`'s."""
    _refuse_traced("broadcast")
    world = _world(group)
    flat, copied = _buffer(tensor)
    return _run("broadcast", lambda n: world.broadcast(flat, src, n), async_op,
                _into(tensor, flat) if copied else None)  # fmt: skip


def _same_shapes(what: str, tensor: Tensor, others: Sequence[Tensor]) -> None:
    for o in others:
        if tuple(o.shape) != tuple(tensor.shape) or o.dtype != tensor.dtype:
            raise ValueError(f"{what}: every tensor of the list must have the input's shape "
                             f"{tuple(tensor.shape)} and dtype {tensor.dtype}, not "
                             f"{tuple(o.shape)} {o.dtype}")  # fmt: skip


def all_gather(tensor_list: list[Tensor], tensor: Tensor, group: Any = None,
               async_op: bool = False) -> Work | None:  # fmt: skip
    """`tensor_list[r]` becomes rank r's `tensor`, on every rank."""
    _refuse_traced("all_gather")
    world = _world(group)
    if len(tensor_list) != world.size:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for "
                         f"{world.size} ranks")  # fmt: skip
    _same_shapes("all_gather", tensor, tensor_list)
    blocks = np.empty((world.size, tensor.numel()), tensor._value.dtype)
    blocks[world.rank] = tensor._value.reshape(-1)

    def write() -> None:
        for t, block in zip(tensor_list, blocks, strict=True):
            t._assign(Tensor._of(block.reshape(t.shape)))

    return _run("all_gather", lambda n: world.all_gather(list(blocks), n), async_op, write)


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group: Any = None,
                           async_op: bool = False) -> Work | None:  # fmt: skip
    """`output_tensor` (world size times the input's elements: stacked or concatenated along
    dim 0) becomes every rank's input in rank order."""
    _refuse_traced("all_gather_into_tensor")
    world = _world(group)
    if output_tensor.numel() != world.size * input_tensor.numel():
        raise ValueError(
            f"all_gather_into_tensor: output of shape {tuple(output_tensor.shape)} "
            f"for {world.size} inputs of shape {tuple(input_tensor.shape)}"
        )
    flat, copied = _buffer(output_tensor)
    blocks = np.split(flat, world.size)
    blocks[world.rank][...] = input_tensor._value.reshape(-1)
    return _run("all_gather_into_tensor", lambda n: world.all_gather(blocks, n),
                async_op, _into(output_tensor, flat) if copied else None)  # fmt: skip


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: Any = ReduceOp.SUM,
                          group: Any = None, async_op: bool = False) -> Work | None:  # fmt: skip
    """`output` becomes this rank's block of `input` (world size blocks along dim 0), reduced
    over ranks."""
    _refuse_traced("reduce_scatter_tensor")
    name, world = _op(op), _world(group)
    if input.numel() != world.size * output.numel():
        raise ValueError(
            f"reduce_scatter_tensor: input of shape {tuple(input.shape)} for "
            f"{world.size} outputs of shape {tuple(output.shape)}"
        )
    blocks = np.split(np.array(input._value, order="C").reshape(-1), world.size)
    return _run(
        "reduce_scatter_tensor",
        lambda n: world.reduce_scatter(blocks, name, n),
        async_op,
        lambda: output._assign(Tensor._of(blocks[world.rank].reshape(output.shape))),
    )


def reduce_scatter(output: Tensor, input_list: list[Tensor], op: Any = ReduceOp.SUM,
                   group: Any = None, async_op: bool = False) -> Work | None:  # fmt: skip
    _same_shapes("reduce_scatter", output, input_list)
    stacked = Tensor._of(np.stack([t._value for t in input_list]))
    return reduce_scatter_tensor(output, stacked, op, group, async_op)


def gather(tensor: Tensor, gather_list: list[Tensor] | None = None, dst: int = 0,
           group: Any = None, async_op: bool = False) -> Work | None:  # fmt: skip
    """`dst`'s `gather_list[r]` becomes rank r's `tensor`."""
    _refuse_traced("gather")
    world = _world(group)
    flat = np.array(tensor._value, order="C").reshape(-1)
    if world.rank != dst:
        return _run("gather", lambda n: world.gather(flat, None, dst, n), async_op)
    if gather_list is None or len(gather_list) != world.size:
        raise ValueError(f"gather: rank {dst} needs a gather_list of {world.size} tensors")
    _same_shapes("gather", tensor, gather_list)
    blocks = np.empty((world.size, flat.size), flat.dtype)

    def write() -> None:
        for t, block in zip(gather_list, blocks, strict=True):
            t._assign(Tensor._of(block.reshape(t.shape)))

    return _run("gather", lambda n: world.gather(flat, list(blocks), dst, n), async_op,
                write)  # fmt: skip


def scatter(tensor: Tensor, scatter_list: list[Tensor] | None = None, src: int = 0,
            group: Any = None, async_op: bool = False) -> Work | None:  # fmt: skip
    """Every rank's `tensor` becomes `src`'s `scatter_list[rank]`."""
    _refuse_traced("scatter")
    world = _world(group)
    flat = np.empty(tensor.numel(), tensor._value.dtype)
    parts = None
    if world.rank == src:
        if scatter_list is None or len(scatter_list) != world.size:
            raise ValueError(f"scatter: rank {src} needs a scatter_list of {world.size} tensors")
        _same_shapes("scatter", tensor, scatter_list)
        parts = [t._value.reshape(-1) for t in scatter_list]
    return _run("scatter", lambda n: world.scatter(flat, parts, src, n), async_op,
                _into(tensor, flat))  # fmt: skip


def all_to_all(output_tensor_list: list[Tensor], input_tensor_list: list[Tensor],
               group: Any = None, async_op: bool = False) -> Work | None:  # fmt: skip
    """`output_tensor_list[q]` becomes rank q's `input_tensor_list[rank]`."""
    _refuse_traced("all_to_all")
    world = _world(group)
    if len(output_tensor_list) != world.size or len(input_tensor_list) != world.size:
        raise ValueError(f"all_to_all: give {world.size} output and {world.size} input tensors")
    sends = [np.ascontiguousarray(t._value) for t in input_tensor_list]
    recvs = [np.empty(t.shape, t._value.dtype) for t in output_tensor_list]

    def write() -> None:
        for t, got in zip(output_tensor_list, recvs, strict=True):
            t._assign(Tensor._of(got))

    return _run("all_to_all", lambda n: world.all_to_all(sends, recvs, n), async_op, write)


def all_to_all_single(output: Tensor, input: Tensor, output_split_sizes: list[int] | None = None,
                      input_split_sizes: list[int] | None = None, group: Any = None,
                      async_op: bool = False) -> Work | None:  # fmt: skip
    """`all_to_all` of `input`'s blocks along dim 0 (equal, or `input_split_sizes`), received
    into `output`'s (equal, or `output_split_sizes`)."""
    _refuse_traced("all_to_all_single")
    n = _world(group).size

    def blocks(t: Tensor, sizes: list[int] | None) -> list[Tensor]:
        if sizes is None:
            if t.shape[0] % n:
                raise ValueError(f"all_to_all_single: dim 0 of {tuple(t.shape)} does not split "
                                 f"into {n} equal blocks; give the split sizes")  # fmt: skip
            sizes = [t.shape[0] // n] * n
        bounds = np.cumsum([0, *sizes])
        pairs = zip(bounds[:-1], bounds[1:], strict=True)
        return [Tensor._of(np.array(t._value[a:b])) for a, b in pairs]

    outs = blocks(output, output_split_sizes)
    work = all_to_all(outs, blocks(input, input_split_sizes), group, async_op=True)

    work.then.append(lambda: output._assign(Tensor._of(np.concatenate([o._value for o in outs]))))
    if async_op:
        return work
    work.wait()
    return None


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> Work | None:
    """Returns once every rank has called it."""
    world = _world(group)
    flag = np.zeros(1, np.int64)
    return _run("barrier", lambda n: world.all_reduce(flag, "sum", n), async_op)


def monitored_barrier(group: Any = None, timeout: Any = None,
                      wait_all_ranks: bool = False) -> None:  # fmt: skip
    barrier(group)


# ----- point to point


def isend(tensor: Tensor, dst: int, group: Any = None, tag: int = 0) -> Work:
    _refuse_traced("isend")
    return _world(group).send(np.array(tensor._value, order="C").reshape(-1), dst)


def irecv(tensor: Tensor, src: int | None = None, group: Any = None, tag: int = 0) -> Work:
    _refuse_traced("irecv")
    if src is None:
        raise NotImplementedError("recv from any source (src=None) is not provided by tracegrad")
    flat = np.empty(tensor.numel(), tensor._value.dtype)
    work = _world(group).recv(flat, src)
    work.then.append(lambda: tensor._assign(Tensor._of(flat.reshape(tensor.shape))))
    return work


def send(tensor: Tensor, dst: int, group: Any = None, tag: int = 0) -> None:
    isend(tensor, dst, group, tag).wait()


def recv(tensor: Tensor, src: int | None = None, group: Any = None, tag: int = 0) -> int:
    irecv(tensor, src, group, tag).wait()
    return src


# ----- Python objects (pickled)


def _pickled(obj: Any) -> np.ndarray:
    return np.frombuffer(pickle.dumps(obj), np.uint8)


def all_gather_object(object_list: list[Any], obj: Any, group: Any = None) -> None:
    """`object_list[r]` becomes rank r's `obj`, on every rank."""
    world = _world(group)
    mine = _pickled(obj)
    sizes = np.zeros((world.size, 1), np.int64)
    sizes[world.rank] = mine.size
    _run("all_gather_object", lambda n: world.all_gather(list(sizes), n), False)
    blocks = np.zeros((world.size, int(sizes.max())), np.uint8)
    blocks[world.rank, : mine.size] = mine
    _run("all_gather_object", lambda n: world.all_gather(list(blocks), n), False)
    pairs = zip(blocks, sizes[:, 0], strict=True)
    object_list[:] = [pickle.loads(b[: int(s)].tobytes()) for b, s in pairs]


def gather_object(obj: Any, object_gather_list: list[Any] | None = None, dst: int = 0,
                  group: Any = None) -> None:  # fmt: skip
    gathered: list[Any] = [None] * _world(group).size
    all_gather_object(gathered, obj, group)
    if get_rank() == dst:
        object_gather_list[:] = gathered


def broadcast_object_list(object_list: list[Any], src: int = 0, group: Any = None,
                          device: Any = None) -> None:  # fmt: skip
    """Every rank's `object_list` gets `src`'s entries (in place)."""
    world = _world(group)
    data = _pickled(list(object_list)) if world.rank == src else None
    size = np.array([0 if data is None else data.size], np.int64)
    _run("broadcast_object_list", lambda n: world.broadcast(size, src, n), False)
    buf = data.copy() if data is not None else np.empty(int(size[0]), np.uint8)
    _run("broadcast_object_list", lambda n: world.broadcast(buf, src, n), False)
    object_list[:] = pickle.loads(buf.tobytes())


def scatter_object_list(scatter_object_output_list: list[Any],
                        scatter_object_input_list: list[Any] | None = None, src: int = 0,
                        group: Any = None) -> None:  # fmt: skip
    world = _world(group)
    objects = [list(scatter_object_input_list or [])]
    broadcast_object_list(objects, src, group)
    scatter_object_output_list[0] = objects[0][world.rank]


class ProcessGroup:
    """PyTorch's class of process groups (annotations name it); `init_process_group` makes
    tracegrad's (`SocketGroup`), and one is not built directly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("torch.distributed.ProcessGroup: make the group with "
                                  "init_process_group")  # fmt: skip


def _get_default_group() -> SocketGroup:
    return _world()


class _GroupMap(dict):
    """`distributed_c10d._pg_map`: the groups that exist (the world, once made)."""

    def _groups(self) -> dict:
        return {} if group.WORLD is None else {group.WORLD: ("gloo", None)}

    def __len__(self) -> int:
        return len(self._groups())

    def __contains__(self, key: object) -> bool:
        return key in self._groups()

    def __iter__(self) -> Any:
        return iter(self._groups())

    def __getitem__(self, key: Any) -> Any:
        return self._groups()[key]


_pg_map = _GroupMap()
