"""examples/train_under_budget.py: under the same address-space cap, the eager step runs out of
memory and the budgeted traced step trains (Linux: RLIMIT_AS and /proc)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import train_under_budget  # noqa: E402


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_eager_runs_out_of_memory_and_the_budgeted_step_trains(capsys):
    outcomes = train_under_budget.main(["--steps", "4"])
    assert outcomes["eager"]["outcome"] == "MemoryError", outcomes["eager"]
    traced = outcomes["traced"]
    assert traced["outcome"] == "trained", traced
    losses = traced["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    out = capsys.readouterr().out
    assert "eager step: MemoryError" in out and "trained, losses" in out
