"""tracegrad.save / tracegrad.load: round trips, atomic writes, no pickle, clear errors."""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import zipfile

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.frontend import serialization


def test_round_trip_of_nested_state(tmp_path):
    state = {
        "model": {"0.weight": tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))},
        "optimizer": {"state": {0: {"step": np.float32(3.0)}}, "lr": 0.01, "betas": (0.9, 0.99)},
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
    assert isinstance(weight, tg.Tensor) and weight.dtype == np.float32
    assert not weight.requires_grad
    np.testing.assert_array_equal(weight.numpy(), np.arange(6).reshape(2, 3))
    step = loaded["optimizer"]["state"][0]["step"]  # an int key stays an int
    assert isinstance(step, np.float32) and step == 3.0
    assert loaded["optimizer"]["lr"] == 0.01 and loaded["optimizer"]["betas"] == (0.9, 0.99)
    assert loaded["epoch"] == 7 and type(loaded["epoch"]) is int
    assert loaded["done"] is False and loaded["name"] == "run/1" and loaded["nothing"] is None
    assert type(loaded["ints"]) is np.ndarray and loaded["ints"].dtype == np.int64
    assert loaded["empty"] == {}


def test_what_pytorch_scripts_save_comes_back_as_it_went_in(tmp_path):
    w = tg.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    Point = collections.namedtuple("Point", "x y")
    for obj in [
        w,
        np.arange(3.0),
        [w, 2, "three", None, (4.5, [np.int32(6)])],
        (1, 2),
        {"model": {"w": w.detach()}, "iter_num": 5, "best_val_loss": 1.25, "args": {"lr": 3e-4}},
        {1: "one", 2.5: "two and a half", None: "none", False: "no"},
        Point(1, 2),  # a namedtuple comes back as a plain tuple
        float("inf"),
    ]:
        tg.save(obj, tmp_path / "c.npz")
        assert_same(tg.load(tmp_path / "c.npz"), obj)


def assert_same(loaded, saved):
    assert type(loaded) is (tuple if isinstance(saved, tuple) else type(saved))
    if isinstance(saved, tg.Tensor):
        assert loaded.dtype == saved.dtype and loaded.requires_grad == saved.requires_grad
        np.testing.assert_array_equal(loaded.numpy(), saved.numpy())
    elif isinstance(saved, np.ndarray | np.generic):
        assert loaded.dtype == saved.dtype and np.array_equal(loaded, saved)
    elif isinstance(saved, dict):
        assert [(k, type(k)) for k in loaded] == [(k, type(k)) for k in saved]
        for k in saved:
            assert_same(loaded[k], saved[k])
    elif isinstance(saved, list | tuple):
        assert len(loaded) == len(saved)
        for a, b in zip(loaded, saved, strict=True):
            assert_same(a, b)
    else:
        assert loaded == saved


def test_file_objects_as_well_as_paths(tmp_path):
    buffer = io.BytesIO()
    tg.save({"w": tg.tensor([1.0, 2.0])}, buffer)
    buffer.seek(0)
    np.testing.assert_array_equal(tg.load(buffer)["w"].numpy(), [1.0, 2.0])
    with open(tmp_path / "c.npz", "wb") as f:
        tg.save([np.ones(2)], f)
    with open(tmp_path / "c.npz", "rb") as f:
        np.testing.assert_array_equal(tg.load(f, map_location="cpu")[0], [1.0, 1.0])


def test_load_refuses_a_gpu_map_location(tmp_path):
    tg.save({"w": np.ones(1)}, tmp_path / "c.npz")
    assert tg.load(tmp_path / "c.npz", map_location="cpu", weights_only=True)["w"] == 1.0
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        tg.load(tmp_path / "c.npz", map_location="cuda:0")


def test_a_tied_state_dict_is_stored_once_and_loads_tied(tmp_path):
    model = TiedLM()
    state = model.state_dict()
    assert list(state) == ["wte.weight", "head.weight"]
    tg.save(state, tmp_path / "c.npz")
    with np.load(tmp_path / "c.npz") as npz:
        assert len(npz.files) == 2  # the manifest and one array
    loaded = tg.load(tmp_path / "c.npz")
    assert loaded["wte.weight"].numpy() is loaded["head.weight"].numpy()
    fresh = TiedLM()
    assert fresh.load_state_dict(loaded) == ([], [])
    np.testing.assert_array_equal(fresh.head.weight.numpy(), model.wte.weight.numpy())


class TiedLM(nn.Module):
    """nanoGPT's tying: the output layer's weight is the token embedding's."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        return self.head(self.wte(idx))


def test_files_of_the_first_format_still_load(tmp_path):
    tree = ["dict", {"w": ["array", "a0"], "betas": ["value", [0.9, 0.99]]}]
    manifest = {"format": serialization.FORMAT, "version": 1, "tree": tree}
    np.savez(tmp_path / "old.npz", __tracegrad__=np.array(json.dumps(manifest)), a0=np.ones(2))
    loaded = tg.load(tmp_path / "old.npz")
    assert type(loaded["w"]) is np.ndarray and loaded["betas"] == [0.9, 0.99]


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
    with pytest.raises(TypeError, match=r"obj\['a'\]\['b'\] is a set"):
        tg.save({"a": {"b": {1, 2}}}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match=r"key \(0, 1\) .* keys must be strings, numbers"):
        tg.save({(0, 1): np.ones(1)}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match="object array"):
        tg.save({"a": np.array([None, 1], dtype=object)}, tmp_path / "c.npz")
    with pytest.raises(TypeError, match=r"obj\[1\] is a Linear; save its state_dict\(\)"):
        tg.save([1, nn.Linear(2, 2)], tmp_path / "c.npz")
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


def test_legacy_pickles_are_refused_with_how_to_convert_them(tmp_path):
    (tmp_path / "legacy.pt").write_bytes(pickle.dumps({"w": [1.0]}, protocol=2))
    with pytest.raises(tg.CheckpointError) as info:
        tg.load(tmp_path / "legacy.pt")
    message = str(info.value)
    assert "legacy.pt" in message and "unpickling runs" in message
    assert "tracegrad.save(torch.load(path, weights_only=True)" in message


class _Script:
    """A class of the script's own, which a checkpoint must not make `load` build."""


def test_a_pytorch_zip_checkpoint_loads_what_weights_only_allows(tmp_path):
    """torch.save's layout (a pickle and its storages in a zip) loads where its pickle names
    only containers and tensors; anything else is refused by name, nothing of it run."""
    with zipfile.ZipFile(tmp_path / "plain.pt", "w") as z:
        z.writestr("plain/data.pkl", pickle.dumps(collections.OrderedDict(w=[1.0], n=2)))
        z.writestr("plain/version", "3")
    assert tg.load(tmp_path / "plain.pt") == {"w": [1.0], "n": 2}
    with zipfile.ZipFile(tmp_path / "code.pt", "w") as z:
        z.writestr("code/data.pkl", pickle.dumps({"obj": _Script()}))
    with pytest.raises(tg.CheckpointError, match=r"code.pt: the checkpoint names .*_Script"):
        tg.load(tmp_path / "code.pt")


def test_a_pytorch_checkpoint_loads_as_pytorch_wrote_it(tmp_path):
    """Tensors of every common dtype (bfloat16 widened to float32), a view, a tied weight, a
    Parameter, numbers and strings, from PyTorch's own `torch.save`."""
    torch = pytest.importorskip("torch")
    reference = torch.nn.Linear(3, 2)
    state = reference.state_dict()
    extra = {"t": torch.arange(6).reshape(2, 3).t(), "h": torch.ones(2, dtype=torch.float16),
             "bf": torch.tensor([1.5, -2.25], dtype=torch.bfloat16), "b": torch.tensor([True]),
             "p": torch.nn.Parameter(torch.zeros(2)), "tied": state["weight"]}  # fmt: skip
    torch.save({"model": state, "step": 7, "name": "run", **extra}, tmp_path / "ckpt.pt")
    ckpt = tg.load(tmp_path / "ckpt.pt")
    model = nn.Linear(3, 2)
    model.load_state_dict(ckpt["model"])
    assert ckpt["step"] == 7 and ckpt["name"] == "run"
    assert ckpt["tied"] is ckpt["model"]["weight"] and ckpt["p"].requires_grad
    assert ckpt["bf"].dtype == np.float32 and ckpt["bf"].tolist() == [1.5, -2.25]
    for key in ("t", "h", "b"):
        np.testing.assert_array_equal(ckpt[key].numpy(), extra[key].numpy())
        assert ckpt[key].dtype == extra[key].numpy().dtype
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    expected = reference(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(model(tg.tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-6)


def test_a_scripts_argparse_namespace_is_saved_and_allowed_when_loading_pytorchs(tmp_path):
    """timm's checkpoints hold its training arguments (an argparse.Namespace): saving one was
    refused, and so was PyTorch's file holding one, even in `safe_globals([Namespace])`,
    which is how timm loads it (as PyTorch's weights_only loader allows)."""
    import argparse

    import tracegrad.torch as torch

    args = argparse.Namespace(lr=0.1, model="resnet18", sizes=[1, 2])
    tg.save({"args": args, "epoch": 3}, tmp_path / "c.npz")
    back = tg.load(tmp_path / "c.npz")["args"]
    assert isinstance(back, argparse.Namespace) and vars(back) == vars(args)
    with zipfile.ZipFile(tmp_path / "ns.pt", "w") as z:
        z.writestr("ns/data.pkl", pickle.dumps({"args": args, "epoch": 3}))
    with pytest.raises(tg.CheckpointError, match="argparse.Namespace.*add_safe_globals"):
        tg.load(tmp_path / "ns.pt")
    with torch.serialization.safe_globals([argparse.Namespace]):
        loaded = torch.load(tmp_path / "ns.pt", weights_only=True)
    assert vars(loaded["args"]) == vars(args) and loaded["epoch"] == 3
    assert torch.serialization.get_safe_globals() == []
    with pytest.raises(tg.CheckpointError):
        tg.load(tmp_path / "ns.pt")  # allowed only inside the block
