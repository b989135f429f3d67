"""`torch.multiprocessing.spawn` and `start_processes`, as PyTorch's: a context to join when not
joined at once (Lightning's launcher), and a failing process's error with its traceback."""

from __future__ import annotations

import pytest

from tracegrad.torch import multiprocessing as mp


def _write_rank(rank, path):  # spawned: a module-level function, as pickling asks
    (path / f"rank{rank}").write_text(str(rank))


def _fail_on_one(rank, path):
    if rank == 1:
        raise ValueError(f"rank {rank} cannot go on")
    (path / f"rank{rank}").write_text(str(rank))


def _exit_on_one(rank):
    if rank == 1:
        raise SystemExit(3)


def test_start_processes_without_join_gives_a_context_to_join(tmp_path):
    context = mp.start_processes(_write_rank, args=(tmp_path,), nprocs=2, join=False)
    assert len(context.processes) == 2 and all(isinstance(p, int) for p in context.pids())
    while not context.join():
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def test_a_process_that_raises_fails_spawn_with_its_traceback(tmp_path):
    with pytest.raises(mp.ProcessRaisedException, match="(?s)Process 1 terminated.*cannot go on"):
        mp.spawn(_fail_on_one, args=(tmp_path,), nprocs=2)
    with pytest.raises(mp.ProcessExitedException, match="process 1 terminated with exit code 3"):
        mp.spawn(_exit_on_one, nprocs=2)
