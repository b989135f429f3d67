"""The parts of `torch.distributed` tracegrad does not provide (FSDP, DTensor and tensor
parallelism, distributed checkpoints, pipelining, elastic agents) as importable placeholders.

Libraries import their names at the top once `torch.distributed.is_available()` (transformers'
sharding helpers, Lightning's and accelerate's FSDP plugins), to use them only when a user asks
for that kind of parallelism. So every module below these packages imports, and every name in
it is a class: `isinstance(x, FullyShardedDataParallel)` is False, and making one (or calling
it) raises, naming it and the user's line. A few names have real meanings (`EXPLICIT`)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

from tracegrad.core.errors import user_location

PACKAGE = "tracegrad.torch.distributed"
PLACEHOLDERS = frozenset({
    "fsdp", "tensor", "_tensor", "checkpoint", "device_mesh", "pipelining", "_composable",
    "_functional_collectives", "algorithms", "launcher", "elastic", "_shard", "_sharded_tensor",
    "_symmetric_memory", "fsdp2", "_state_dict_utils", "autograd", "_tools",
})  # fmt: skip
EXPLICIT: dict[str, dict[str, Any]] = {}  # module -> names with a meaning of their own


class NotProvided:
    """A name of a part of torch.distributed that tracegrad does not provide."""

    _where = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"{cls._where}.{cls.__name__} is not provided by tracegrad (used at "
            f"{user_location()}): its distributed training is DistributedDataParallel over "
            "torch.distributed's gloo group (docs/pytorch.md)"
        )


class Placement:
    """How a DTensor lies over a mesh dimension: data only (transformers builds its tensor-
    parallel plans of them at import); there are no DTensors to place here."""

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and vars(self) == vars(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *vars(self).values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False


class Shard(Placement):
    def __init__(self, dim: int) -> None:
        self.dim = dim

    def is_shard(self, dim: int | None = None) -> bool:
        return dim is None or dim == self.dim


class _StridedShard(Shard):
    def __init__(self, dim: int, split_factor: int = 1) -> None:
        self.dim, self.split_factor = dim, split_factor


class Replicate(Placement):
    def is_replicate(self) -> bool:
        return True


class Partial(Placement):
    def __init__(self, reduce_op: str = "sum") -> None:
        self.reduce_op = reduce_op

    def is_partial(self) -> bool:
        return True


PLACEMENTS = {"Placement": Placement, "Shard": Shard, "Replicate": Replicate, "Partial": Partial,
              "_StridedShard": _StridedShard}  # fmt: skip


class _Module(types.ModuleType):
    """A placeholder module; called (a snake_case name may be a function: `fully_shard(m)`),
    it raises as a placeholder class does."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        where, _, name = self.__name__.removeprefix("tracegrad.").rpartition(".")
        return type(name, (NotProvided,), {"_where": where})()


def _placeholder_module(name: str) -> types.ModuleType:
    module = _Module(name, f"`{name.removeprefix('tracegrad.')}`: not provided")
    module.__path__ = []  # a package: its submodules import too
    module.__dict__.update(EXPLICIT.get(name, {}))
    where = name.removeprefix("tracegrad.")

    def __getattr__(attr: str) -> Any:
        """A snake_case name is a submodule (`ddp_comm_hooks.default_hooks`) or a function, a
        CamelCase one a class."""
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(f"module {where!r} has no attribute {attr!r}")
        if attr.lstrip("_")[:1].islower():
            return importlib.import_module(f"{name}.{attr}")
        made = type(attr, (NotProvided,), {"_where": where, "__module__": where})
        setattr(module, attr, made)
        return made

    module.__getattr__ = __getattr__
    return module


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes the placeholder modules as they are imported (after every real module: a file
    tracegrad has, `run.py`, is found first)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        parts = fullname.removeprefix(PACKAGE + ".").split(".")
        if not fullname.startswith(PACKAGE + ".") or parts[0] not in PLACEHOLDERS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        return _placeholder_module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        parent, _, child = module.__name__.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def install(explicit: dict[str, dict[str, Any]]) -> None:
    """Put the finder last on the import path, with the names that mean something."""
    explicit = {
        "tensor": PLACEMENTS,
        "tensor.placement_types": PLACEMENTS,
        "_tensor": PLACEMENTS,
        "_tensor.placement_types": PLACEMENTS,
        **explicit,
    }
    EXPLICIT.update({f"{PACKAGE}.{k}": v for k, v in explicit.items()})
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
