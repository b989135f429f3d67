"""benchmarks/pytorch_scripts.py's machinery on a small PyTorch-style file written here (the real
checkouts are not needed): the file loads once with PyTorch and once with tracegrad.torch, both
train from PyTorch's weights, and the differences it reports are tiny when the two agree and
large when they do not."""

from __future__ import annotations

import math
import os
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("torch")

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
)
import pytorch_scripts as ps  # noqa: E402

MODEL = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

# a library-dependent knob, so that the test can make the two loads disagree (tracegrad.torch
# answers __name__ "torch" while it stands for torch: its file tells them apart)
SCALE = 1.5 if SKEW and "tracegrad" in torch.__file__ else 1.0


class Net(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(6, width)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(width, 3)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        if BREAK and "tracegrad" in torch.__file__:
            raise RuntimeError("broken under tracegrad")
        self.calls.add_(1)
        return F.log_softmax(self.fc2(self.drop(torch.tanh(self.fc1(x) * SCALE))), dim=1)


print(undefined_at_import)  # the top level does more than define the model (main.py's do)
"""


def net_step(mod, lib, nets, c):
    model = nets["model"]
    opt = lib.optim.Adam(model.parameters(), lr=c["lr"])

    def step(x, y):
        opt.zero_grad()
        loss = lib.nn.functional.nll_loss(model(x), y)
        loss.backward()
        lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
        return loss

    return step


def net_data(c, rng):
    return (rng.standard_normal((c["batch"], 6)), rng.integers(0, 3, c["batch"])), ()


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A checkouts directory holding toy/model.py, registered as the script `toy`."""
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "model.py").write_text(textwrap.dedent(MODEL))
    script = ps.Script(
        "toy/model.py",
        lambda mod, lib, c: {"model": mod.Net(c["width"])},
        net_step,
        net_data,
        parity={"width": 5, "batch": 4, "lr": 0.05},
        timing={"width": 8, "batch": 4, "lr": 0.05},
        keep=("SCALE", "Net"),
        settings=lambda c: {"SKEW": c.get("skew", False), "BREAK": c.get("break", False)},
    )
    monkeypatch.setitem(ps.SCRIPTS, "toy", script)
    return tmp_path


def test_load_runs_the_kept_part_with_each_library(toy):
    import torch

    import tracegrad.torch as tgt

    for lib_name, lib in (("torch", torch), ("tracegrad", tgt)):
        with ps.library(lib_name) as got:
            assert got is lib
            mod = ps.load(toy, ps.SCRIPTS["toy"], lib_name, {})
        assert mod.torch is lib and mod.nn is lib.nn and mod.F is lib.nn.functional
        assert isinstance(mod.Net(3), lib.nn.Module)
        assert not hasattr(mod, "undefined_at_import")
    assert sys.modules["torch"] is torch  # the hook is gone


def test_parity_of_a_model_that_agrees(toy):
    row = ps.parity(toy, "toy", steps=4)
    losses = row["torch"]["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    for method in ("eager", "traced"):
        r = row[method]
        assert "error" not in r, r.get("error")
        assert r["loss_diff"] <= 1e-12 and r["grad_diff"] <= 1e-12 and r["state_diff"] <= 1e-12
        # the buffer was updated in place at every step, by each library
        assert r["state"]["model.calls"] == pytest.approx([4.0])
    assert set(row["traced"]["grads"]) == set(row["torch"]["grads"])


def test_parity_finds_a_model_that_disagrees(toy):
    row = ps.parity(toy, "toy", steps=2, config={"skew": True})
    for method in ("eager", "traced"):
        assert row[method]["loss_diff"] > 1e-3
        assert row[method]["grad_diff"] > 1e-3


def test_a_failing_method_is_reported_not_raised(toy):
    row = ps.parity(toy, "toy", steps=1, config={"break": True})
    assert row["eager"]["error"] == "RuntimeError: broken under tracegrad"
    assert "broken under tracegrad" in row["traced"]["error"]
    assert len(row["torch"]["losses"]) == 1


def test_rel_diff_and_compare():
    a = np.array([1.0, 2.0])
    assert ps.rel_diff(a, a) == 0.0
    assert ps.rel_diff(a + 1e-6, a) == pytest.approx(5e-7)
    assert ps.rel_diff(None, None) == 0.0
    assert ps.rel_diff(a, None) == math.inf and ps.rel_diff(a, a[:1]) == math.inf
    worst, where = ps.compare({"x": a, "y": a * (1 + 1e-3)}, {"x": a, "y": a})
    assert where == "y" and worst == pytest.approx(1e-3)
    assert ps.compare({"x": a}, {"x": a, "z": a}) == (math.inf, "z")


@pytest.mark.parametrize("method", ["torch", "tg-traced"])
def test_a_timing_child_times_steps(toy, method):
    result = ps.child(toy, "toy", method, steps=2, budget=0.2)
    assert result["median_s"] > 0 and len(result["times_s"]) >= 2
    assert math.isfinite(result["loss2"])
