"""Datasets, samplers and `DataLoader` with the meaning of PyTorch's `torch.utils.data`.

A DataLoader draws indices from a sampler, groups them with a `BatchSampler`, fetches the samples
and collates them: `default_collate` stacks tensors, ndarrays and numbers into tracegrad tensors
and recurses into tuples, lists, dicts and namedtuples, as PyTorch's does.

Randomness comes from a `tracegrad.Generator` (`generator=`), or, without one, from a seed drawn
from the generator `tracegrad.manual_seed` seeds, as PyTorch draws from its global one. The same
seed gives the same order in every tracegrad run; it is not the order PyTorch gives for that seed
(tracegrad draws with NumPy's PCG64, not PyTorch's Mersenne Twister).

With `num_workers > 0`, worker processes load the batches, as PyTorch's (`utils.workers`);
`pin_memory` is accepted and ignored (there is no device to copy to).
"""

from __future__ import annotations

import bisect
import copy
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from tracegrad import distributed
from tracegrad.frontend import creation, functions
from tracegrad.frontend.random import Generator
from tracegrad.frontend.tensor import Tensor
from tracegrad.utils import workers
from tracegrad.utils.workers import WorkerInfo

__all__ = [
    "BatchSampler", "ChainDataset", "ConcatDataset", "DataLoader", "Dataset",
    "DistributedSampler", "IterableDataset",
    "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
    "StackDataset", "TensorDataset", "WeightedRandomSampler", "collate", "default_collate",
    "default_collate_fn_map", "default_convert",
    "get_worker_info", "random_split",
]  # fmt: skip


def _parameterized(cls: type, params: Any) -> type:
    """`Dataset[int]`, `Sampler[List[int]]` (PyTorch's classes are typing generics; code
    subscripts them in annotations and base classes): the class itself."""
    return cls


# --- datasets ---------------------------------------------------------------------------------


class Dataset:
    """A map-style dataset: `dataset[i]` is a sample (subclasses define `__getitem__` and usually
    `__len__`; an optional `__getitems__(indices)` fetches a whole batch's samples at once)."""

    __class_getitem__ = classmethod(_parameterized)

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses define `__iter__`."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not define __iter__")

    def __add__(self, other: Dataset) -> ChainDataset:
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for each tensor): tensors (or arrays) of the same first extent."""

    def __init__(self, *tensors: Any):
        sizes = [len(t) for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(f"TensorDataset: size mismatch between tensors, first extents {sizes}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return len(self.tensors[0])


class StackDataset(Dataset):
    """Sample i is (d[i] for each dataset), or {name: d[i]} for datasets given by keyword:
    datasets of one length, as PyTorch's (inputs and targets kept apart, zipped by index)."""

    def __init__(self, *args: Any, **kwargs: Any):
        if args and kwargs:
            raise ValueError("StackDataset: give the datasets by position (tuple samples) or by "
                             "keyword (dict samples), not both")  # fmt: skip
        if not (args or kwargs):
            raise ValueError("StackDataset: at least one dataset should be passed")
        self.datasets = args or kwargs
        sizes = [len(d) for d in (args or kwargs.values())]
        if len(set(sizes)) > 1:
            raise ValueError(f"StackDataset: size mismatch between datasets, lengths {sizes}")
        self._length = sizes[0]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(self.datasets, dict):
            return {key: d[index] for key, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __getitems__(self, indices: list[int]) -> list:
        """Each dataset's samples fetched at once where it can (`__getitems__`)."""
        named = self.datasets if isinstance(self.datasets, dict) else dict(enumerate(self.datasets))
        columns = {key: _fetch(d, indices) for key, d in named.items()}
        if isinstance(self.datasets, dict):
            return [{key: c[i] for key, c in columns.items()} for i in range(len(indices))]
        return list(zip(*columns.values(), strict=True))

    def __len__(self) -> int:
        return self._length


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Any, indices: Sequence[int]):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: list[int]) -> list:
        return _fetch(self.dataset, [self.indices[i] for i in indices])

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Map-style datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise TypeError("ConcatDataset does not support IterableDataset (use ChainDataset)")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        if which == len(self.datasets):
            raise IndexError(f"ConcatDataset: index {index} out of range for length {len(self)}")
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


class ChainDataset(IterableDataset):
    """Iterable datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self.datasets)

    def __len__(self) -> int:
        return sum(len(d) for d in self.datasets)


def random_split(
    dataset: Any, lengths: Sequence[int | float], generator: Generator | None = None
) -> list[Subset]:
    """Split `dataset` into non-overlapping random subsets of the given lengths, or fractions
    summing to 1 (floored, the remainder handed out one by one from the first, as PyTorch's)."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        if any(not 0 <= f <= 1 for f in lengths):
            raise ValueError(f"random_split: fractions must lie in [0, 1], got {lengths}")
        fractions, lengths = lengths, [math.floor(n * f) for f in lengths]
        for i in range(n - sum(lengths)):
            lengths[i % len(lengths)] += 1
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(
                    f"random_split: the split at index {i} (fraction {fractions[i]}) is empty",
                    stacklevel=2,
                )
    if sum(lengths) != n:
        raise ValueError(
            f"random_split: the lengths {lengths} sum to {sum(lengths)}, not to the dataset's "
            f"length {n}"
        )
    order = _rng(generator).permutation(n).tolist()
    starts = [0, *itertools.accumulate(lengths)]
    return [Subset(dataset, order[a:b]) for a, b in itertools.pairwise(starts)]


def _rng(generator: Generator | None) -> np.random.Generator:
    """The generator's draws, or (without one) fresh ones seeded from the global generator."""
    if generator is not None:
        return generator.rng
    seed = int(creation.randint(0, 2**62, (1,)).item())
    return Generator().manual_seed(seed).rng


# --- samplers ---------------------------------------------------------------------------------


class Sampler:
    """Yields dataset indices (or, for a batch sampler, lists of them)."""

    __class_getitem__ = classmethod(_parameterized)

    def __init__(self, data_source: Any = None) -> None:
        pass

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} does not define __iter__")


class SequentialSampler(Sampler):
    def __init__(self, data_source: Any):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (repeated when `num_samples` exceeds the length), or
    `num_samples` indices drawn with replacement. Each pass draws a new order."""

    def __init__(
        self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
        generator: Generator | None = None,
    ):  # fmt: skip
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got {replacement!r}")
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if not _is_positive_int(self.num_samples):
            raise ValueError(
                f"num_samples should be a positive integer value, but got {self.num_samples!r}"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), _rng(self.generator)
        if self.replacement:  # in chunks: num_samples may be huge (minGPT asks for 1e10)
            for start in range(0, self.num_samples, 32):
                yield from rng.integers(0, n, min(32, self.num_samples - start)).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n)[: self.num_samples % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, a new one each pass."""

    def __init__(self, indices: Sequence[int], generator: Generator | None = None):
        self.indices, self.generator = indices, generator

    def __iter__(self) -> Iterator[int]:
        for i in _rng(self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probabilities proportional to `weights`."""

    def __init__(
        self, weights: Any, num_samples: int, replacement: bool = True,
        generator: Generator | None = None,
    ):  # fmt: skip
        if not _is_positive_int(num_samples):
            raise ValueError(
                f"num_samples should be a positive integer value, but got {num_samples!r}"
            )
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got {replacement!r}")
        weights = np.asarray(weights, np.float64)
        if weights.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence, but have shape {weights.shape}")
        if not (np.isfinite(weights).all() and (weights >= 0).all() and weights.sum() > 0):
            raise ValueError("WeightedRandomSampler: weights must be finite, >= 0, not all zero")
        if not replacement and num_samples > np.count_nonzero(weights):
            raise ValueError(
                f"WeightedRandomSampler: cannot draw {num_samples} samples without replacement "
                f"from {np.count_nonzero(weights)} nonzero weights"
            )
        self.weights, self.num_samples = weights, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self) -> Iterator[int]:
        p = self.weights / self.weights.sum()
        draws = _rng(self.generator).choice(len(p), self.num_samples, self.replacement, p)
        return iter(draws.tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of `batch_size` indices from `sampler`; the last one shorter unless `drop_last`."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool):
        if not _is_positive_int(batch_size):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size!r}"
            )
        if not isinstance(drop_last, bool):
            raise ValueError(
                f"drop_last should be a boolean value, but got drop_last={drop_last!r}"
            )
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        indices = iter(self.sampler)
        while batch := list(itertools.islice(indices, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """This process's share of the dataset when `num_replicas` processes train on it (rank
    `rank`; by default tracegrad.distributed's size and rank): every `num_replicas`-th index of
    one order all ranks share (shuffled from `seed + epoch`; `set_epoch` at each epoch), padded by
    repeating indices so that the shares are equal, or cut short with `drop_last`."""

    def __init__(self, dataset: Any, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False) -> None:  # fmt: skip
        if num_replicas is None or rank is None:
            mine, size = _job_place()
            num_replicas = size if num_replicas is None else num_replicas
            rank = mine if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")  # fmt: skip
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        order = (np.random.default_rng(self.seed + self.epoch).permutation(n).tolist()
                 if self.shuffle else list(range(n)))  # fmt: skip
        if self.drop_last:
            order = order[: self.total_size]
        elif self.total_size > n:
            order = (order * math.ceil(self.total_size / n))[: self.total_size]
        return iter(order[self.rank : self.total_size : self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


def _job_place() -> tuple[int, int]:
    """This process's rank and the number of ranks: torch.distributed's process group's, else
    tracegrad.distributed's (MPI)."""
    found = distributed.job_place()
    if found is None:
        raise RuntimeError("DistributedSampler: give num_replicas and rank, or call "
                           "torch.distributed.init_process_group (or tracegrad.distributed.init) "
                           "first")  # fmt: skip
    return found


class _InfiniteConstantSampler(Sampler):
    """What an IterableDataset's loader samples: None forever (the dataset yields the data)."""

    def __iter__(self) -> Iterator[None]:
        return itertools.repeat(None)


def _is_positive_int(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0


# --- collation --------------------------------------------------------------------------------

_COLLATE_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def collate(batch: Sequence[Any], *, collate_fn_map: dict[type | tuple, Callable] | None = None
            ) -> Any:  # fmt: skip
    """PyTorch's general collation: the function `collate_fn_map` keeps for the first sample's
    type (or a base of it) collates the batch; else dicts, namedtuples, tuples and lists are
    collated field by field (a tuple's fields come back as a list, strings in a field as a
    tuple). Custom collates extend
    `default_collate_fn_map` with their own types."""
    elem, known = batch[0], collate_fn_map or {}
    if type(elem) in known:
        return known[type(elem)](batch, collate_fn_map=collate_fn_map)
    for kind, collate_fn in known.items():
        if isinstance(elem, kind):
            return collate_fn(batch, collate_fn_map=collate_fn_map)
    if isinstance(elem, Mapping):
        return _like(elem, {key: collate([d[key] for d in batch], collate_fn_map=collate_fn_map)
                            for key in elem})  # fmt: skip
    if isinstance(elem, Sequence):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [collate(f, collate_fn_map=collate_fn_map) for f in zip(*batch, strict=True)]
        if isinstance(elem, tuple):
            return type(elem)(*fields) if hasattr(elem, "_fields") else fields
        return _like(elem, fields)
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def collate_tensor_fn(batch: Sequence[Tensor], *, collate_fn_map: Any = None) -> Tensor:
    return functions.stack(list(batch))


def collate_numpy_array_fn(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Tensor:
    if batch[0].dtype.kind in "USO":
        raise TypeError(_COLLATE_ERROR.format(batch[0].dtype))
    return Tensor._of(np.stack(batch))


def collate_numpy_scalar_fn(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Tensor:
    return Tensor._of(np.array(batch))


def collate_float_fn(batch: Sequence[float], *, collate_fn_map: Any = None) -> Tensor:
    return Tensor._of(np.array(batch, np.float64))


def collate_int_fn(batch: Sequence[int], *, collate_fn_map: Any = None) -> Tensor:
    """As torch.tensor(batch): bool, int64, or float32 if a float hides behind the first int."""
    data = np.array(batch)
    return Tensor._of(data.astype({"b": bool, "f": np.float32}.get(data.dtype.kind, np.int64)))


def collate_str_fn(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Sequence[Any]:
    """Strings stay as the batch holds them: a list, or a tuple for a field of tuples."""
    return batch


# type -> how a batch of it collates: the first sample's exact type, else the first base in order
default_collate_fn_map: dict[type | tuple, Callable] = {
    Tensor: collate_tensor_fn, np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn, float: collate_float_fn,
    int: collate_int_fn, str: collate_str_fn, bytes: collate_str_fn,
}  # fmt: skip


def default_collate(batch: Sequence[Any]) -> Any:
    """PyTorch's: stack tensors and ndarrays (keeping their dtype), make ints int64 and floats
    float64 tensors (bools bool), keep strings as a list, and collate the fields of dicts,
    namedtuples, tuples and lists one by one."""
    return collate(batch, collate_fn_map=default_collate_fn_map)


def default_convert(data: Any) -> Any:
    """PyTorch's collation without batching (batch_size=None): ndarrays and NumPy scalars become
    tensors, in dicts, namedtuples and sequences too (tuples come back as lists); the rest stays."""
    if isinstance(data, np.ndarray | np.generic) and not isinstance(data, str | bytes):
        return data if data.dtype.kind in "USO" else Tensor._of(data)
    if isinstance(data, Mapping):
        return _like(data, {key: default_convert(v) for key, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, tuple):
        return [default_convert(v) for v in data]
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        return _like(data, [default_convert(v) for v in data])
    return data


def _like(example: Any, items: Any) -> Any:
    """`items` in the container type of `example` where it can be built so, else as they are."""
    if isinstance(example, MutableMapping):
        clone = copy.copy(example)
        clone.update(items)
        return clone
    try:
        return type(example)(items)
    except TypeError:
        return items


# --- the loader -------------------------------------------------------------------------------


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader's worker process, which worker it is (`id`, `num_workers`, `seed`, its
    copy of `dataset`: an IterableDataset splits its samples by it); None elsewhere."""
    return workers.INFO


def _fetch(dataset: Any, indices: list[int]) -> list:
    getitems = getattr(dataset, "__getitems__", None)
    return getitems(indices) if getitems is not None else [dataset[i] for i in indices]


class _DatasetKind:
    """PyTorch's two kinds of dataset its loader iterators fetch from."""

    Map = 0
    Iterable = 1


class _Samples(IterableDataset):
    """A loader-like object's dataset, iterated, and otherwise itself (in a worker,
    `get_worker_info().dataset` is what the object's own worker code expects)."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __iter__(self) -> Iterator[Any]:
        return iter(self.dataset)

    def __getattr__(self, name: str) -> Any:
        if name == "dataset":  # (not set yet: unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)


def _as_loader(like: Any) -> DataLoader:
    """A DataLoader that iterates as PyTorch's iterators iterate an object with a loader's
    private attributes (`_dataset_kind`, `_index_sampler`, `_auto_collation`, `collate_fn`)."""
    if isinstance(like, DataLoader):
        return like
    iterable, auto = like._dataset_kind == _DatasetKind.Iterable, like._auto_collation
    index = like._index_sampler
    parallel = like.num_workers > 0
    common = dict(
        collate_fn=like.collate_fn, num_workers=like.num_workers,
        timeout=getattr(like, "timeout", 0), worker_init_fn=getattr(like, "worker_init_fn", None),
        multiprocessing_context=getattr(like, "multiprocessing_context", None),
        prefetch_factor=getattr(like, "prefetch_factor", None) if parallel else None,
        in_order=getattr(like, "in_order", True),
    )  # fmt: skip
    if iterable:
        size = getattr(index, "batch_size", None) if auto else None
        return DataLoader(_Samples(like.dataset), size, drop_last=like.drop_last, **common)
    if auto:
        return DataLoader(like.dataset, batch_sampler=index, **common)
    return DataLoader(like.dataset, None, sampler=index, **common)


class DataLoader:
    """Batches of `dataset` in the order of a sampler, collated; PyTorch's arguments and checks.

    `shuffle=True` draws a new order each epoch from `generator` (see the module's docstring);
    `batch_size=None` yields the samples one by one, converted (`default_convert`) but not
    batched. `num_workers > 0` loads in worker processes; `pin_memory` is ignored."""

    __class_getitem__ = classmethod(_parameterized)

    def __init__(
        self, dataset: Any, batch_size: int | None = 1, shuffle: bool | None = None,
        sampler: Iterable | None = None, batch_sampler: Iterable | None = None,
        num_workers: int = 0, collate_fn: Callable | None = None, pin_memory: bool = False,
        drop_last: bool = False, timeout: float = 0, worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None, generator: Generator | None = None, *,
        prefetch_factor: int | None = None, persistent_workers: bool = False,
        pin_memory_device: str = "", in_order: bool = True,
    ):  # fmt: skip
        _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers)
        iterable = isinstance(dataset, IterableDataset)
        if iterable and shuffle not in (None, False):
            raise ValueError(
                f"DataLoader with IterableDataset: expected unspecified shuffle option, but got "
                f"shuffle={shuffle}"
            )
        if iterable and (sampler is not None or batch_sampler is not None):
            raise ValueError(
                "DataLoader with IterableDataset: expected unspecified sampler and batch_sampler "
                "options (the dataset decides the order)"
            )
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                    "shuffle, sampler, and drop_last"
                )
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError(
                "DataLoader: batch_size=None option disables auto-batching and is mutually "
                "exclusive with drop_last"
            )
        if sampler is None:
            if iterable:
                sampler = _InfiniteConstantSampler()
            elif shuffle:
                sampler = RandomSampler(dataset, generator=generator)
            else:
                sampler = SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.collate_fn = sampler, batch_sampler, collate_fn
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.worker_init_fn, self.generator = worker_init_fn, generator
        self.prefetch_factor = 2 if prefetch_factor is None and num_workers else prefetch_factor
        self.persistent_workers, self.in_order = persistent_workers, in_order
        self.multiprocessing_context, self.pin_memory_device = (
            multiprocessing_context,
            pin_memory_device,
        )
        self._iterable, self._workers = iterable, None

    def __iter__(self) -> _BaseDataLoaderIter:
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self, self._batches())
        return _MultiProcessingDataLoaderIter(self)

    # PyTorch's private view of a loader, which its iterators read (and code that builds
    # loader-like objects for them supplies: fastai's `_FakeLoader`)
    _dataset_kind = property(lambda s: _DatasetKind.Iterable if s._iterable else _DatasetKind.Map)
    _auto_collation = property(lambda self: self.batch_sampler is not None)
    _index_sampler = property(lambda s: s.batch_sampler if s._auto_collation else s.sampler)

    def __getstate__(self) -> dict[str, Any]:
        """A loader sent to its workers (or pickled) goes without its persistent workers."""
        return {**self.__dict__, "_workers": None}

    def _batch(self, indices: Any) -> Any:
        """One batch (a sample, without batching) of a map-style dataset, collated."""
        if self.batch_sampler is None:
            return self.collate_fn(self.dataset[indices])
        return self.collate_fn(_fetch(self.dataset, indices))

    def _batches(self) -> Iterator[Any]:
        if self._iterable:
            return self._iterable_batches()
        return map(self._batch, self.sampler if self.batch_sampler is None else self.batch_sampler)

    def _iterable_batches(self) -> Iterator[Any]:
        samples = iter(self.dataset)
        if self.batch_sampler is None:
            yield from map(self.collate_fn, samples)
            return
        while batch := list(itertools.islice(samples, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        """The number of batches (of samples without batching); for an IterableDataset, from
        its `__len__`, as PyTorch estimates it."""
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.sampler if self.batch_sampler is None else self.batch_sampler)


class _BaseDataLoaderIter:
    """What iterating a DataLoader gives: its batches, one per `next`, and the loader's length
    (PyTorch's class names: code tells loaders' iterators by them)."""

    def __init__(self, loader: DataLoader, batches: Iterator[Any] | None = None) -> None:
        """PyTorch's `(loader)` too, also of a loader-like object (see `_as_loader`)."""
        if batches is None:
            batches = _as_loader(loader)._batches()
        self._loader, self._batches, self._num_yielded = loader, batches, 0
        self._dataset = loader.dataset

    def __iter__(self) -> _BaseDataLoaderIter:
        return self

    def __next__(self) -> Any:
        batch = next(self._batches)
        self._num_yielded += 1
        return batch

    def __len__(self) -> int:
        return len(self._loader)


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    """Batches loaded in this process (always, here)."""


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Batches loaded by worker processes (`utils.workers`), which a persistent loader keeps
    from one epoch to the next and any other stops when its batches end or it is dropped."""

    def __init__(self, loader: DataLoader) -> None:
        like, loader = loader, _as_loader(loader)
        kept = loader._workers
        if kept is not None and kept.processes:
            kept.epoch()
        else:
            kept = workers.Workers(loader, int(_rng(loader.generator).integers(1 << 62)))
            loader._workers = kept if loader.persistent_workers else None
        super().__init__(like, _answers(kept, loader.persistent_workers))


def _answers(kept: workers.Workers, persistent: bool) -> Iterator[Any]:
    try:
        while True:
            try:
                batch = kept.next()
            except StopIteration:
                return
            yield batch
    finally:
        if not persistent:
            kept.close()


def _check_worker_options(
    num_workers: int, timeout: float, prefetch_factor: int | None, persistent_workers: bool
) -> None:
    if num_workers < 0:
        raise ValueError(
            "DataLoader: num_workers option should be non-negative; use num_workers=0 to "
            "disable multiprocessing"
        )
    if timeout < 0:
        raise ValueError("DataLoader: timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError(
            "DataLoader: prefetch_factor option could only be specified in multiprocessing; let "
            "num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None"
        )
    if persistent_workers and num_workers == 0:
        raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
