"""The examples keep running: their training functions run a few steps here, so they cannot rot.

Needs the `examples` extra (scikit-learn, tqdm): `pip install -e ".[dev,examples]"`."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the examples extra is not installed")
pytest.importorskip("tqdm", reason="the examples extra is not installed")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def digits():
    return load_example("train_digits")


def test_digits_training_steps_learn_and_are_deterministic(digits):
    model, losses = digits.train(epochs=1, max_steps=20, progress=False)
    assert len(losses) == 20
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    _, again = digits.train(epochs=1, max_steps=20, progress=False)
    assert again == losses
    _, other_seed = digits.train(epochs=1, max_steps=20, progress=False, seed=1)
    assert other_seed != losses
    _, x_test, _, y_test = digits.load_data(0)
    assert 0.0 <= digits.accuracy(model, x_test, y_test) <= 1.0


def test_digits_traced_step_matches_eager(digits):
    """50 steps cross an epoch end, so the short last batch adds a second traced signature."""
    _, eager = digits.train(epochs=2, max_steps=50, progress=False, trace=False)
    _, traced = digits.train(epochs=2, max_steps=50, progress=False, trace=True)
    np.testing.assert_allclose(traced, eager, rtol=1e-5)


def test_digits_main_prints_the_accuracy_last(digits, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_digits.py", "--epochs", "1"])
    digits.main()
    out = capsys.readouterr()
    assert re.fullmatch(r"test accuracy: [01]\.\d{3}", out.out.strip().splitlines()[-1])
    assert "epoch 1/1" in out.err  # the progress bar


@pytest.mark.slow
def test_digits_reaches_the_promised_accuracy(digits):
    model, _ = digits.train(progress=False)
    _, x_test, _, y_test = digits.load_data(0)
    assert digits.accuracy(model, x_test, y_test) >= 0.95
