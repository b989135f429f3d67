"""`DataLoader(num_workers=n)`'s worker processes, as PyTorch's: each worker fetches and collates
the batches whose indices the loader sends it (an IterableDataset's copy in each worker yields
its own batches, split among workers by `get_worker_info()`), and the loader yields them in
order. Workers start with the loader's `multiprocessing_context` (Python's default: fork on
Linux), are seeded `base_seed + id` (Python's `random`, tracegrad's generators, NumPy's global
one), run `worker_init_fn(id)`, and send batches through multiprocessing, which puts tensors in
shared memory (`frontend.sharing`). An error in a worker is raised by the loader, naming the
worker and carrying its traceback."""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import random
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracegrad import nn
from tracegrad.frontend import creation

_STATUS_EVERY = 5.0  # seconds between checks that the workers are alive, while waiting


@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` answers in a worker process (None in the main process)."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


INFO: WorkerInfo | None = None  # this process's, when it is a worker


class _Exhausted:
    """An IterableDataset's worker ran out of samples."""


class _Resume:
    """A persistent worker's signal: a new epoch of its IterableDataset begins."""


@dataclass
class _Failure:
    """An exception in a worker, carried to the loader as its type and formatted traceback."""

    kind: type
    worker: int
    text: str

    def reraise(self) -> None:
        message = f"Caught {self.kind.__name__} in DataLoader worker process {self.worker}.\n"
        message += f"Original {self.text}"
        try:
            error = self.kind(message)
        except Exception:  # noqa: BLE001 - a type that takes other arguments
            error = RuntimeError(message)
        raise error


def _seed(seed: int) -> None:
    """Every generator a worker's samples may draw from (`tracegrad.manual_seed`'s, Python's,
    NumPy's global one), so that workers draw apart and a seeded loader repeats its draws."""
    random.seed(seed)
    creation.seed(seed)
    nn.manual_seed(seed)
    np.random.seed(np.random.SeedSequence(seed).generate_state(4))


def _batches(loader: Any) -> Any:
    """A worker's IterableDataset batches (its copy of the dataset)."""
    return iter(loader._iterable_batches())


def _worker(loader: Any, worker: int, seed: int, tasks: Any, results: Any) -> None:
    """The worker process: answers each task (send index, batch indices) with (send index,
    batch or failure) until it gets None."""
    global INFO
    INFO = WorkerInfo(worker, loader.num_workers, seed, loader.dataset)
    iterable = loader._iterable
    try:
        _seed(seed)
        if loader.worker_init_fn is not None:
            loader.worker_init_fn(worker)
        batches = _batches(loader) if iterable else None
    except Exception as e:  # noqa: BLE001 - the loader raises it
        failed: _Failure | None = _Failure(type(e), worker, traceback.format_exc())
    else:
        failed = None
    while (task := tasks.get()) is not None:
        index, indices = task
        if isinstance(indices, _Resume):
            batches = _batches(loader)
            continue
        if failed is not None:
            results.put((index, failed))
            continue
        try:
            batch = next(batches, _Exhausted()) if iterable else loader._batch(indices)
        except Exception as e:  # noqa: BLE001 - the loader raises it
            batch = _Failure(type(e), worker, traceback.format_exc())
        results.put((index, batch))


class Workers:
    """The loader's worker processes and their queues; batches come back in the order their
    tasks were sent (or as they arrive, without `in_order`)."""

    def __init__(self, loader: Any, base_seed: int) -> None:
        context = loader.multiprocessing_context
        if isinstance(context, str):
            context = multiprocessing.get_context(context)
        context = context or multiprocessing.get_context()
        self.loader, self.results = loader, context.Queue()
        self.tasks = [context.Queue() for _ in range(loader.num_workers)]
        self.processes = [
            context.Process(
                target=_worker, args=(loader, i, base_seed + i, q, self.results), daemon=True
            )  # fmt: skip
            for i, q in enumerate(self.tasks)
        ]
        for p in self.processes:
            p.start()
        self.owner: dict[int, int] = {}  # send index -> the worker it was sent to
        self.epoch(first=True)

    def epoch(self, first: bool = False) -> None:
        """Start an epoch: the sampler's batches from the start, each worker's dataset anew."""
        loader = self.loader
        sampler = loader.sampler if loader.batch_sampler is None else loader.batch_sampler
        self.indices = None if loader._iterable else iter(sampler)
        self.sent = self.received = 0
        self.arrived: dict[int, Any] = {}
        self.active = [True] * len(self.tasks)
        self.turn = itertools.cycle(range(len(self.tasks)))
        if not first:
            while self.owner:  # the last epoch's tasks, answered after it was left
                self.owner.pop(self._get()[0])
            if loader._iterable:
                for q in self.tasks:
                    q.put((-1, _Resume()))
        for _ in range(loader.prefetch_factor * len(self.tasks)):
            self._send()

    def _send(self) -> None:
        if self.indices is None:
            indices = None
        elif (indices := next(self.indices, None)) is None:
            return
        if not any(self.active):
            return
        worker = next(w for w in self.turn if self.active[w])
        self.tasks[worker].put((self.sent, indices))
        self.owner[self.sent] = worker
        self.sent += 1

    def next(self) -> Any:
        """The next batch; StopIteration when every task sent was answered."""
        while True:
            self._skip()
            if self.received >= self.sent:
                raise StopIteration
            if self.received in self.arrived:
                return self._yield(self.received, self.arrived.pop(self.received))
            index, batch = self._get()
            worker = self.owner.pop(index)
            if isinstance(batch, _Exhausted):
                self.active[worker] = False
            elif index == self.received or not self.loader.in_order:
                return self._yield(index, batch)
            else:
                self.arrived[index] = batch

    def _skip(self) -> None:
        """Past tasks answered already (out of order), and those of workers whose dataset ran
        out (each answers the rest of its tasks so)."""
        while (
            self.received < self.sent
            and self.received not in self.arrived
            and (self.received not in self.owner or not self.active[self.owner[self.received]])
        ):
            self.received += 1

    def _yield(self, index: int, batch: Any) -> Any:
        if index == self.received:
            self.received += 1
        self._send()
        if isinstance(batch, _Failure):
            self.close()
            batch.reraise()
        return batch

    def _get(self) -> tuple[int, Any]:
        timeout = self.loader.timeout
        while True:
            try:
                return self.results.get(timeout=timeout or _STATUS_EVERY)
            except queue.Empty:
                if timeout:
                    self.close()
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
                dead = [p.pid for p in self.processes if not p.is_alive()]
                if dead:
                    self.close()
                    raise RuntimeError(
                        f"DataLoader worker (pid(s) {', '.join(map(str, dead))}) exited "
                        "unexpectedly"
                    ) from None

    def close(self) -> None:
        """Stop the workers (each finishes its task first), then end any that hang; once."""
        if not self.processes:
            return
        for q in self.tasks:
            q.put(None)
        for p in self.processes:
            p.join(timeout=5.0)
            if p.is_alive():
                p.terminate()
        for q in (*self.tasks, self.results):
            q.cancel_join_thread()
            q.close()
        self.processes = []
