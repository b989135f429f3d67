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


@pytest.fixture(scope="module")
def cnn_digits():
    return load_example("train_cnn_digits")


def test_cnn_digits_learns_and_its_traced_step_matches_eager(cnn_digits):
    _, traced = cnn_digits.train(epochs=1, max_steps=12, progress=False)
    assert np.mean(traced[-4:]) < 0.8 * np.mean(traced[:4])
    _, eager = cnn_digits.train(epochs=1, max_steps=12, progress=False, trace=False)
    np.testing.assert_allclose(traced, eager, rtol=1e-4)


def test_cnn_digits_main_prints_the_accuracy_last(cnn_digits, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_cnn_digits.py", "--epochs", "1"])
    cnn_digits.main()
    out = capsys.readouterr()
    assert re.fullmatch(r"test accuracy: [01]\.\d{3}", out.out.strip().splitlines()[-1])
    assert "epoch 1/1" in out.err


@pytest.fixture(scope="module")
def gpt():
    return load_example("train_gpt")


def test_gpt_trains_checkpoints_and_resumes(gpt, tmp_path):
    small = dict(batch_size=4, context=16, d=16, layers=1, heads=2, files=40, progress=False)
    path = str(tmp_path / "gpt.npz")
    _, losses, (train_codes, val_codes) = gpt.train(steps=30, lr=1e-2, checkpoint=path, **small)
    assert len(losses) == 30 and np.mean(losses[-5:]) < np.mean(losses[:5])
    assert len(train_codes) > 5 * len(val_codes) > 0
    model, more, _ = gpt.train(steps=35, lr=1e-2, checkpoint=path, resume=True, **small)
    assert len(more) == 5  # continued from step 30
    saved = gpt.tg.load(path)
    assert int(saved["step"]) == 35
    np.testing.assert_array_equal(saved["model"]["head.weight"], model.head.weight.numpy())
    assert 0 < gpt.unigram_entropy(train_codes) < np.log(len(gpt.VOCAB))
    text = gpt.sample(model, "def ", 10, 0.8, 0)
    assert text.startswith("def ") and len(text) == 14


def test_gpt_main_prints_validation_loss_and_a_sample(gpt, monkeypatch, capsys, tmp_path):
    argv = ["train_gpt.py", "--steps", "2", "--files", "20", "--checkpoint",
            str(tmp_path / "g.npz"), "--batch-size", "2", "--context", "8", "--d", "8",
            "--layers", "1", "--heads", "2", "--prompt", "import "]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    gpt.main()
    out = capsys.readouterr()
    assert re.search(r"validation loss: \d\.\d{3} nats/char \(unigram entropy: \d\.\d{3}\)",
                     out.out)  # fmt: skip
    assert out.out.split("\n", 1)[1].startswith("import ")  # the sample follows the prompt
    assert "training" in out.err  # the progress bar
