"""Whether Numba's threads are awake: a kernel small enough to run on the calling thread alone
may share its work when the team still spins from the last parallel call, at no wake-up, and so
keeps the team awake for the product or kernel after it (a recurrent net's gates between its
per-step products). Asleep, waking the team costs more than such a kernel's work.

Parallel launches record when they return (`finished`); `awake()` asks whether the last was
within `WINDOW`, a time shorter than the team's spin (`GOMP_SPINCOUNT`, `kernels/__init__.py`)
on the hosts measured (docs/kernels.md, "Which threads")."""

from __future__ import annotations

import os
import time

clock = time.perf_counter


def _window() -> float:
    """Seconds after a parallel call within which the team surely still spins: shorter than
    3,000 rounds of spin take on any host measured (docs/kernels.md), scaled down for fewer;
    none if the user has the threads sleep at once."""
    if os.environ.get("OMP_WAIT_POLICY", "").lower() == "passive":
        return 0.0
    rounds = os.environ.get("GOMP_SPINCOUNT", "3000")
    return 25e-6 * min(int(rounds), 3000) / 3000 if rounds.isdigit() else 25e-6


WINDOW = _window()
# when the last parallel call returned (one list, so generated launchers share it by reference)
last = [-1.0]


def finished() -> None:
    """Record that a parallel call just returned."""
    last[0] = clock()


def awake() -> bool:
    """Whether the team still spins from the last parallel call."""
    return clock() - last[0] < WINDOW
