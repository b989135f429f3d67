"""tracegrad.save / tracegrad.load: round trips, atomic writes, no pickle, clear errors."""

from __future__ import annotations

import os
import zipfile

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.frontend import serialization


def test_round_trip_of_nested_state(tmp_path):
    state = {
        "model": {"0.weight": tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))},
        "optimizer": {"state": {"0": {"step": np.float32(3.0)}}, "lr": 0.01, "betas": (0.9, 0.99)},
        "epoch": 7,
        "done": False,
        "name": "run/1",
        "ints": np.array([1, 2], np.int64),
        "empty": {},
        "nothing": None,
    }
    path = tmp_path / "ckpt.npz"
    tg.save(state, path)
    loaded = tg.load(path)
    assert set(loaded) == set(state)
    weight = loaded["model"]["0.weight"]
    assert isinstance(weight, np.ndarray) and weight.dtype == np.float32
    np.testing.assert_array_equal(weight, np.arange(6).reshape(2, 3))
    step = loaded["optimizer"]["state"]["0"]["step"]
    assert step.dtype == np.float32 and step.shape == () and step == 3.0
    assert loaded["optimizer"]["lr"] == 0.01 and loaded["optimizer"]["betas"] == [0.9, 0.99]
    assert loaded["epoch"] == 7 and type(loaded["epoch"]) is int
    assert loaded["done"] is False and loaded["name"] == "run/1" and loaded["nothing"] is None
    assert loaded["ints"].dtype == np.int64 and loaded["empty"] == {}


def test_model_and_optimizer_resume_from_a_checkpoint(tmp_path, rng):
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = rng.integers(0, 2, 8)

    def make():
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        return model, optim.Adam(model.parameters(), lr=0.05)

    def steps(model, opt, n):
        for _ in range(n):
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()

    nn.manual_seed(0)
    model, opt = make()
    steps(model, opt, 2)
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "c.npz")
    steps(model, opt, 3)

    nn.manual_seed(1)  # a different initialization, overwritten by the checkpoint
    resumed, resumed_opt = make()
    ckpt = tg.load(tmp_path / "c.npz")
    resumed.load_state_dict(ckpt["model"])
    resumed_opt.load_state_dict(ckpt["optimizer"])
    steps(resumed, resumed_opt, 3)
    for (name, a), (_, b) in zip(model.named_parameters(), resumed.named_parameters(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_file_is_plain_npz_without_pickles(tmp_path):
    tg.save({"w": np.ones(3)}, tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz", allow_pickle=False) as npz:
        assert serialization.MANIFEST in npz.files
        assert all(npz[k].dtype != object for k in npz.files)


def test_save_is_atomic_a_failed_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    tg.save({"w": np.zeros(2)}, path)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        tg.save({"w": np.ones(2)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(tg.load(path)["w"], [0.0, 0.0])
    assert os.listdir(tmp_path) == ["c.npz"]  # no temporary file left behind


def test_saved_file_gets_a_normal_mode(tmp_path):
    tg.save({"w": np.zeros(1)}, tmp_path / "c.npz")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "c.npz").st_mode & 0o777 == 0o666 & ~umask


def test_save_rejects_what_it_cannot_store(tmp_path):
    with pytest.raises(TypeError, match=r"state\['a'\]\['b'\] is a set"):
        tg.save({"a": {"b": {1, 2}}}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="key 0 .* not a string"):
        tg.save({0: np.ones(1)}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="object array"):
        tg.save({"a": np.array([None, 1], dtype=object)}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="must be a dict"):
        tg.save(np.ones(2), tmp_path / "c.npz")
    assert list(tmp_path.iterdir()) == []


def test_saving_into_a_missing_directory_names_the_path_given(tmp_path):
    """The error named the temporary file beside the target (.tmp-xxxx.npz)."""
    path = tmp_path / "missing" / "c.npz"
    with pytest.raises(FileNotFoundError, match=f"no directory {tmp_path / 'missing'}") as e:
        tg.save({"a": np.ones(1)}, path)
    assert e.value.filename == str(path) and ".tmp-" not in str(e.value)


def test_corrupt_and_foreign_files_get_clear_errors(tmp_path):
    tg.save({"w": np.arange(1000.0)}, tmp_path / "good.npz")
    data = (tmp_path / "good.npz").read_bytes()

    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.npz").write_text("hello, I am not a checkpoint\n")
    np.savez(tmp_path / "foreign.npz", w=np.ones(2))
    np.save(tmp_path / "array.npy", np.ones(2))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(tmp_path / "manifest.npz", "w") as z:
        z.writestr(serialization.MANIFEST + ".npy", b"garbage")

    expected = {
        "truncated.npz": "not a readable tracegrad checkpoint",
        "text.npz": "not an .npz file",
        "foreign.npz": "an .npz file but not a tracegrad checkpoint",
        "array.npy": "not an .npz file",
        "pickled.npy": "not an .npz file",
        "manifest.npz": "not a readable tracegrad checkpoint",
    }
    for name, message in expected.items():
        with pytest.raises(tg.CheckpointError, match=message) as info:
            tg.load(tmp_path / name)
        assert name in str(info.value)
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.npz")


def test_a_flipped_byte_in_the_data_is_detected(tmp_path):
    path = tmp_path / "c.npz"
    tg.save({"w": np.arange(1000.0)}, path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the array's bytes: zip's CRC check catches it
    path.write_bytes(bytes(data))
    with pytest.raises(tg.CheckpointError):
        tg.load(path)
