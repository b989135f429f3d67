"""DataLoader's worker processes (`utils.workers`): the batches of the in-process loader, in
order, with PyTorch's worker semantics (`get_worker_info`, seeds, `worker_init_fn`, errors
naming the worker, persistent workers, timeouts)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.utils import data

ROOT = Path(__file__).resolve().parents[2]


class Numbered(data.Dataset):
    """Sample i: (i, which worker loaded it, its process, a draw from each of the worker's
    generators)."""

    def __len__(self):
        return 23

    def __getitem__(self, i):
        if i == 17 and getattr(self, "fail", False):
            raise KeyError("no sample 17")
        info = data.get_worker_info()
        who = -1 if info is None else info.id
        return (tg.tensor(float(i)), who, os.getpid(), float(tg.rand(())), random.random(),
                float(np.random.rand()), getattr(self, "started", -1))  # fmt: skip


class Split(data.IterableDataset):
    """Samples 0..9, split among the workers by `get_worker_info()`, as PyTorch's docs do."""

    def __iter__(self):
        info = data.get_worker_info()
        ids = range(10) if info is None else range(info.id, 10, info.num_workers)
        return (tg.tensor(float(i)) for i in ids)


def column(batches, k):
    return [b[k].tolist() if isinstance(b[k], tg.Tensor) else list(b[k]) for b in batches]


def test_workers_load_the_in_process_batches_in_order_in_shared_memory():
    alone = list(data.DataLoader(Numbered(), batch_size=4))
    loader = data.DataLoader(Numbered(), batch_size=4, num_workers=3)
    batches = list(loader)
    assert column(batches, 0) == column(alone, 0) and len(loader) == 6
    assert column(batches, 1) == [[w] * len(b) for w, b in zip([0, 1, 2, 0, 1, 2], column(
        batches, 0), strict=True)]  # fmt: skip
    assert len({p for b in column(batches, 2) for p in b} - {os.getpid()}) == 3
    assert all(b[0].is_shared() for b in batches)
    unordered = data.DataLoader(Numbered(), batch_size=4, num_workers=2, in_order=False)
    assert sorted(v for b in column(list(unordered), 0) for v in b) == list(range(23))
    single = data.DataLoader(Numbered(), batch_size=None, num_workers=2, shuffle=True)
    assert sorted(float(b[0]) for b in single) == list(range(23))


def test_an_iterable_dataset_splits_its_samples_by_worker_info():
    assert data.get_worker_info() is None
    batches = [b.tolist() for b in data.DataLoader(Split(), batch_size=3, num_workers=2)]
    assert batches == [[0.0, 2.0, 4.0], [1.0, 3.0, 5.0], [6.0, 8.0], [7.0, 9.0]]  # PyTorch's
    batches = [b.tolist() for b in data.DataLoader(Split(), batch_size=3, num_workers=3,
                                                   drop_last=True)]  # fmt: skip
    assert batches == [[0.0, 3.0, 6.0], [1.0, 4.0, 7.0], [2.0, 5.0, 8.0]]


def _started(worker_id):
    data.get_worker_info().dataset.started = worker_id * 10


def test_workers_are_seeded_from_the_loaders_generator_and_run_worker_init_fn():
    def draws(seed):
        loader = data.DataLoader(Numbered(), batch_size=4, num_workers=2,
                                 generator=tg.Generator().manual_seed(seed),
                                 worker_init_fn=_started)  # fmt: skip
        return list(loader)

    first, again, other = draws(0), draws(0), draws(1)
    for k in (3, 4, 5):  # tracegrad's generator, Python's random, NumPy's global generator
        assert column(first, k) == column(again, k) != column(other, k)
        assert column(first, k)[0] != column(first, k)[1]  # the two workers draw apart
    assert column(first, 6) == [[w * 10] * len(b) for w, b in zip([0, 1] * 3, column(
        first, 0), strict=True)]  # fmt: skip


def test_an_error_in_a_worker_is_raised_naming_the_worker_with_its_traceback():
    broken = Numbered()
    broken.fail = True
    loader = data.DataLoader(broken, batch_size=4, num_workers=2)
    with pytest.raises(KeyError, match=r"(?s)Caught KeyError in DataLoader worker process 0.*"
                                       "no sample 17"):  # fmt: skip
        list(loader)


def test_persistent_workers_serve_every_epoch_and_others_stop_with_their_batches():
    loader = data.DataLoader(Numbered(), batch_size=4, num_workers=2, persistent_workers=True)
    epochs = [column(list(loader), 2) for _ in range(2)]
    assert epochs[0] == epochs[1]
    next(iter(loader))  # an epoch left early: the next one starts clean
    assert column(list(loader), 0) == column(list(data.DataLoader(Numbered(), batch_size=4)), 0)
    processes = loader._workers.processes
    loader._workers.close()
    assert not any(p.is_alive() for p in processes)
    iterator = iter(data.DataLoader(Numbered(), batch_size=4, num_workers=2))
    next(iterator)
    processes = iterator._batches.gi_frame.f_locals["kept"].processes
    iterator._batches.close()  # what dropping the iterator does
    assert not any(p.is_alive() for p in processes)


class Slow(data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        time.sleep(1.0)
        return i


def test_a_timeout_ends_a_wait_for_a_batch():
    loader = data.DataLoader(Slow(), batch_size=1, num_workers=1, timeout=0.2)
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.2 seconds"):
        next(iter(loader))


SPAWNED = """
import tracegrad.torch as torch
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Squares(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        return torch.tensor(i * i), get_worker_info().id


if __name__ == "__main__":
    batches = DataLoader(Squares(), batch_size=3, num_workers=2, multiprocessing_context="spawn")
    print([(b.tolist(), w.tolist()) for b, w in batches])
"""


def test_workers_started_by_spawn(tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(textwrap.dedent(SPAWNED))
    done = subprocess.run([sys.executable, "-m", "tracegrad", "run", str(script)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "[([0, 1, 4], [0, 0, 0]), ([9, 16, 25], [1, 1, 1]), ([36, 49, 64], [0, 0, 0]), ([81], [1])]"
    )


class _LoaderLike:
    """An object with a loader's private attributes, as fastai's `_FakeLoader` hands one to
    PyTorch's iterators: its dataset is itself, yielding whole batches split among workers by
    the worker info of a `worker_init_fn`, and its collate function passes them through."""

    _auto_collation, drop_last, in_order, prefetch_factor = False, False, True, 2
    _index_sampler = range(10**9)
    _dataset_kind = data._DatasetKind.Iterable
    timeout, worker_init_fn, multiprocessing_context = 0, None, None

    def __init__(self, num_workers):
        self.dataset, self.num_workers = self, num_workers

    @staticmethod
    def collate_fn(batch):
        return batch

    def __iter__(self):
        info = data.get_worker_info()
        offset, step = (0, 1) if info is None else (info.dataset.id_of(info), info.num_workers)
        return (tg.arange(4.0) + 4 * i for i in range(offset, 6, step))

    def id_of(self, info):  # (reached through the worker's dataset, as fastai's `_wif`)
        return info.id


@pytest.mark.parametrize("workers", [0, 2])
def test_pytorchs_iterators_take_an_object_with_a_loaders_private_attributes(workers):
    iterator = (data._MultiProcessingDataLoaderIter if workers else
                data._SingleProcessDataLoaderIter)(_LoaderLike(workers))  # fmt: skip
    assert [b.tolist() for b in iterator] == [[4.0 * i + k for k in range(4)] for i in range(6)]
    loader = data.DataLoader(data.TensorDataset(tg.arange(6.0)), batch_size=4)
    assert loader._auto_collation and loader._index_sampler is loader.batch_sampler
    assert loader._dataset_kind == data._DatasetKind.Map
    assert [b[0].tolist() for b in data._SingleProcessDataLoaderIter(loader)] == [
        [0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]  # fmt: skip
