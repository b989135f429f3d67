"""The examples keep running: their training functions run a few steps here, so they cannot rot;
and each is a command-line tool (`--help` prints usage and exits, every flag explained).

Needs the `examples` extra (scikit-learn, tqdm): `pip install -e ".[dev,examples]"`."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the examples extra is not installed")
pytest.importorskip("tqdm", reason="the examples extra is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALL = sorted(p.stem for p in EXAMPLES.glob("*.py"))


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ALL)
def test_help_prints_usage_and_exits_without_running(name):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLES.parent)}
    start = time.perf_counter()
    out = subprocess.run([sys.executable, str(EXAMPLES / f"{name}.py"), "--help"],
                         capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-1000:]
    assert out.stdout.startswith("usage: ") and out.stderr == ""
    assert time.perf_counter() - start < 60  # no training, no tracing
    summary = out.stdout.split("\n\n")[1]  # the docstring's first paragraph, whole
    assert summary.rstrip().endswith(".")


@pytest.mark.parametrize("name", ALL)
def test_every_flag_is_explained(name):
    sys.path.insert(0, str(EXAMPLES))
    try:
        parser = load_example(name).parser()
    finally:
        sys.path.remove(str(EXAMPLES))
    for action in parser._actions:
        if action.help is not argparse.SUPPRESS:
            assert action.help, f"{name}: {action.option_strings} has no help"


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
    path = str(tmp_path / "gpt.pt")
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
    argv = ["train_gpt.py", "--steps", "2", "--files", "20", "-o", str(tmp_path / "out"),
            "--batch-size", "2", "--context", "8", "--d", "8", "--layers", "1", "--heads", "2",
            "--prompt", "import ", "--length", "12"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    gpt.main()
    out = capsys.readouterr()
    assert re.search(r"validation loss: \d\.\d{3} nats/char \(unigram entropy: \d\.\d{3}\)",
                     out.out)  # fmt: skip
    sample = out.out.split("\n", 1)[1]
    assert sample.startswith("import ") and len(sample.rstrip("\n")) >= 12 + len("import ") - 1
    for phase in ("text: ", "training", "evaluating", "sampling"):  # progress of each phase
        assert phase in out.err
    assert (tmp_path / "out" / "gpt_stdlib.pt").exists()


def test_gpt_samples_with_one_compiled_step(gpt, monkeypatch):
    small = dict(batch_size=2, context=8, d=8, layers=1, heads=2, files=20, progress=False)
    model, _, _ = gpt.train(steps=2, **small)
    traced = []
    original = gpt.tg.trace
    monkeypatch.setattr(gpt.tg, "trace", lambda fn: traced.append(original(fn)) or traced[-1])
    compiled = gpt.sample(model, "def f", 12, 0.8, 0, progress=False)
    monkeypatch.undo()
    assert len(traced) == 1 and len(traced[0].plans) == 1  # one shape for every draw
    assert compiled == gpt.sample(model, "def f", 12, 0.8, 0, progress=False, trace=False)


def test_pictures_draws_the_readme_pictures_into_the_directory_given(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the viz extra is not installed")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    pictures = load_example("pictures")
    monkeypatch.setitem(pictures.GPT, "d", 32)  # the structure is what is drawn
    monkeypatch.setitem(pictures.GPT, "context", 16)
    monkeypatch.setattr(sys, "argv", ["pictures.py", "-o", str(tmp_path), "--engine", "layered"])
    pictures.main()
    assert (tmp_path / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    tour = (tmp_path / "graph.svg").read_text()
    assert all(f'class="tg_cluster" data-module="{m}"' in tour for m in ("0", "1", "2"))
    gpt = (tmp_path / "gpt_graph.svg").read_text()
    for module in ("tok", "pos", "blocks", "ln", "head"):
        assert f'class="tg_module" data-module="{module}"' in gpt
    if shutil.which("chromium") or shutil.which("chromium-browser"):
        assert (tmp_path / "gpt_graph.png").read_bytes()[:4] == b"\x89PNG"
