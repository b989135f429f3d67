"""torch.utils.benchmark: Timer's measurements time what they run, and Compare tables them."""

from __future__ import annotations

import time

import pytest

from tracegrad.torch.utils import benchmark


def test_timer_measures_the_statement_it_runs():
    calls = []
    timer = benchmark.Timer("f()", globals={"f": lambda: calls.append(1) or time.sleep(0.002)},
                            label="sleep", sub_label="2 ms", description="tracegrad")  # fmt: skip
    m = timer.timeit(5)
    assert len(calls) == 5 + 5  # the warm-up, then the timed runs
    assert 0.002 <= m.mean < 0.05 and m.times == [m.raw_times[0] / 5] and m.number_per_run == 5
    blocked = timer.blocked_autorange(min_run_time=0.05)
    assert sum(blocked.raw_times) >= 0.05 and 0.002 <= blocked.median < 0.05
    assert "Median:" in repr(blocked) and "sleep: 2 ms" in repr(blocked)
    table = str(benchmark.Compare([m, blocked]))
    assert "sleep" in table and "tracegrad" in table and "2 ms" in table


def test_timer_takes_setup_and_refuses_other_languages():
    m = benchmark.Timer("y = x * 2", setup="x = 21").timeit(10)
    assert m.mean >= 0 and m.stmt == "y = x * 2"
    with pytest.raises(ValueError, match="only Python"):
        benchmark.Timer("x", language="c++")
