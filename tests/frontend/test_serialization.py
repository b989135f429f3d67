"""tracegrad.save / tracegrad.load: PyTorch's file format both ways, round trips, atomic writes,
nothing of a file run unless trusted, clear errors."""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.frontend import serialization, torch_checkpoint


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
    path = tmp_path / "ckpt.pt"
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
    for obj in [
        w,
        np.arange(3.0),
        [w, 2, "three", None, (4.5, [np.int32(6)])],
        (1, 2),
        {"model": {"w": w.detach()}, "iter_num": 5, "best_val_loss": 1.25, "args": {"lr": 3e-4}},
        {1: "one", 2.5: "two and a half", None: "none", False: "no"},
        {(0, 1): {2, 3}, "z": frozenset([4]), "c": 1 + 2j},
        np.array([None, 1], dtype=object),
        float("inf"),
    ]:
        tg.save(obj, tmp_path / "c.pt")
        assert_same(tg.load(tmp_path / "c.pt"), obj)


def assert_same(loaded, saved):
    assert type(loaded) is type(saved)
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
    with open(tmp_path / "c.pt", "wb") as f:
        tg.save([np.ones(2)], f)
    with open(tmp_path / "c.pt", "rb") as f:
        np.testing.assert_array_equal(tg.load(f, map_location="cpu")[0], [1.0, 1.0])


def test_load_refuses_a_gpu_map_location(tmp_path):
    tg.save({"w": np.ones(1)}, tmp_path / "c.pt")
    assert tg.load(tmp_path / "c.pt", map_location="cpu", weights_only=True)["w"] == 1.0
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        tg.load(tmp_path / "c.pt", map_location="cuda:0")


def test_a_tied_state_dict_is_stored_once_and_loads_tied(tmp_path):
    model = TiedLM()
    state = model.state_dict()
    assert list(state) == ["wte.weight", "head.weight"]
    tg.save(state, tmp_path / "c.pt")
    with zipfile.ZipFile(tmp_path / "c.pt") as z:
        assert [n for n in z.namelist() if "/data/" in n] == ["archive/data/0"]  # one storage
    loaded = tg.load(tmp_path / "c.pt")
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
    tg.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "c.pt")
    steps(model, opt, 3)

    nn.manual_seed(1)  # a different initialization, overwritten by the checkpoint
    resumed, resumed_opt = make()
    ckpt = tg.load(tmp_path / "c.pt")
    resumed.load_state_dict(ckpt["model"])
    resumed_opt.load_state_dict(ckpt["optimizer"])
    steps(resumed, resumed_opt, 3)
    for (name, a), (_, b) in zip(model.named_parameters(), resumed.named_parameters(), strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)


def test_the_file_is_pytorchs_zip_with_aligned_storages(tmp_path):
    """PyTorch's records (its pickle, version, byte order, one record per storage), each
    record's bytes at a multiple of 64 in the file, as PyTorch writes them for mapped loads."""
    x = tg.arange(10.0)
    tg.save({"x": x, "tail": x[3:], "i": tg.tensor([1, 2])}, tmp_path / "c.pt")
    raw = (tmp_path / "c.pt").read_bytes()
    with zipfile.ZipFile(tmp_path / "c.pt") as z:
        names = z.namelist()
        assert names[0] == "archive/data.pkl" and z.read("archive/version") == b"3\n"
        assert z.read("archive/byteorder") == b"little"
        assert [n for n in names if "/data/" in n] == ["archive/data/0", "archive/data/1"]
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26 :][:4])
            assert (info.header_offset + 30 + name_length + extra_length) % 64 == 0, info.filename
        assert np.frombuffer(z.read("archive/data/0"), np.float32).tolist() == x.tolist()
    back = tg.load(tmp_path / "c.pt")
    assert back["tail"].storage_offset() == 3 and back["tail"].tolist() == x[3:].tolist()


def test_tensors_saved_sharing_memory_load_sharing_it(tmp_path):
    """A tensor, its transpose and a row of it: one storage, three views again (PyTorch's)."""
    x = tg.arange(12.0).reshape(3, 4)
    tg.save({"x": x, "xt": x.t(), "row": x[1]}, tmp_path / "c.pt")
    back = tg.load(tmp_path / "c.pt")
    back["x"][1, 0] = 100.0
    assert back["row"].tolist() == [100.0, 5.0, 6.0, 7.0] and back["xt"][0].tolist() == [0, 100, 8]
    copied = back["xt"].contiguous()  # a transposed view is not contiguous: a copy
    copied[0, 0] = -1.0
    assert back["x"][0, 0].item() == 0.0 and copied.tolist()[1] == [1.0, 5.0, 9.0]


def test_dtypes_sizes_and_devices_round_trip(tmp_path):
    """bfloat16 as its bits and uint16 (no storage class of PyTorch's: untyped bytes, as PyTorch
    writes them), dtype objects, sizes and devices come back as the same objects."""
    import tracegrad.torch as torch

    b16 = torch.tensor([1.5, -2.25, 3e38]).bfloat16()
    u16 = torch.tensor([1, 65535], dtype=torch.uint16)
    obj = {"b16": b16, "u16": u16, "dt": torch.float64, "size": b16.shape,
           "dev": torch.device("cpu"), "c": torch.tensor([1 + 2j])}  # fmt: skip
    tg.save(obj, tmp_path / "c.pt")
    back = tg.load(tmp_path / "c.pt")
    assert back["b16"].dtype is torch.bfloat16 and back["u16"].dtype is torch.uint16
    assert back["b16"].float().tolist() == b16.float().tolist()
    assert back["u16"].tolist() == [1, 65535] and back["c"].tolist() == [1 + 2j]
    assert back["dt"] is torch.float64 and back["dev"] == torch.device("cpu")
    twice = {"a": u16, "b": u16[1:], "dtypes": [torch.float64, torch.float64]}
    tg.save(twice, tmp_path / "twice.pt")  # a dtype written twice raised in the pickler
    again = tg.load(tmp_path / "twice.pt")
    assert again["dtypes"] == [torch.float64] * 2 and again["b"].tolist() == [65535]
    again["a"][1] = 7  # one storage, read as uint16 once: the slice shares it
    assert again["b"].tolist() == [7] and again["b"].storage_offset() == 1
    assert type(back["size"]) is type(b16.shape) and back["size"] == (3,)


def test_parameters_load_as_parameters(tmp_path):
    layer = nn.Linear(2, 3)
    layer.bias.requires_grad_(False)
    tg.save({"w": layer.weight, "b": layer.bias}, tmp_path / "c.pt")
    back = tg.load(tmp_path / "c.pt")
    assert isinstance(back["w"], nn.Parameter) and back["w"].requires_grad
    assert isinstance(back["b"], nn.Parameter) and not back["b"].requires_grad
    np.testing.assert_array_equal(back["w"].numpy(), layer.weight.numpy())


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.norm = nn.BatchNorm1d(2)
        self.act = nn.functional.relu  # a function, pickled by its name

    def forward(self, x):
        return self.act(self.norm(self.fc(x)))


def test_a_whole_module_saves_and_loads_only_when_trusted(tmp_path, rng):
    """`torch.save(model, f)` (pytorch/examples' word_language_model): refused on load unless
    `weights_only=False` says the file is trusted, as PyTorch's since 2.6; then the same
    module, its parameters parameters, training on."""
    net = _Net()
    net(tg.tensor(rng.standard_normal((4, 3)).astype(np.float32)))  # running stats move
    tg.save(net, tmp_path / "net.pt")
    with pytest.raises(tg.CheckpointError, match=r"names .*_Net.* weights_only=False"):
        tg.load(tmp_path / "net.pt")
    back = tg.load(tmp_path / "net.pt", weights_only=False)
    assert type(back) is _Net and isinstance(back.fc.weight, nn.Parameter)
    x = tg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    back.eval(), net.eval()
    np.testing.assert_array_equal(back(x).numpy(), net(x).numpy())
    back.train()
    back(x).sum().backward()
    assert back.fc.weight.grad is not None and back.norm.weight.grad is not None


def test_pytorch_loads_what_tracegrad_saves(tmp_path, rng):
    """The same model trained a step here, saved, loaded by PyTorch into its own module and
    optimizer: equal outputs, and PyTorch steps on from the saved Adam state."""
    torch = pytest.importorskip("torch")
    nn.manual_seed(0)
    # (no bias straight before the norm: its gradient is rounding noise, which Adam scales up)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.BatchNorm1d(4), nn.Linear(4, 2))
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    model(tg.tensor(x)).square().sum().backward()
    opt.step()
    opt.zero_grad()
    extra = {"t": tg.arange(6).reshape(2, 3).t(), "b16": tg.tensor([1.5, -2.0]).bfloat16()}
    tg.save({"model": model.state_dict(), "opt": opt.state_dict(), **extra}, tmp_path / "c.pt")
    ckpt = torch.load(tmp_path / "c.pt", weights_only=True)
    reference = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2)
    )
    reference.load_state_dict(ckpt["model"])
    reference_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    reference_opt.load_state_dict(ckpt["opt"])
    assert ckpt["t"].stride() == (1, 3) and ckpt["t"].tolist() == extra["t"].tolist()
    assert ckpt["b16"].dtype == torch.bfloat16 and ckpt["b16"].tolist() == [1.5, -2.0]
    model.eval(), reference.eval()
    expected = reference(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(model(tg.tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-6)
    model.train(), reference.train()
    for net, step in ((model, opt), (reference, reference_opt)):
        net(torch.tensor(x) if net is reference else tg.tensor(x)).square().sum().backward()
        step.step()
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values(),
                            strict=True):  # fmt: skip
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_save_is_atomic_a_failed_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "c.pt"
    tg.save({"w": np.zeros(2)}, path)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(torch_checkpoint, "_record", crash)
    with pytest.raises(KeyboardInterrupt):
        tg.save({"w": np.ones(2)}, path)
    monkeypatch.undo()
    np.testing.assert_array_equal(tg.load(path)["w"], [0.0, 0.0])
    assert os.listdir(tmp_path) == ["c.pt"]  # no temporary file left behind


def test_saved_file_gets_a_normal_mode(tmp_path):
    tg.save({"w": np.zeros(1)}, tmp_path / "c.pt")
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "c.pt").st_mode & 0o777 == 0o666 & ~umask


def test_save_refuses_what_pickle_cannot_write_and_leaves_no_file(tmp_path):
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        tg.save({"f": lambda x: x}, tmp_path / "c.pt")
    assert list(tmp_path.iterdir()) == []


def test_saving_into_a_missing_directory_names_the_path_given(tmp_path):
    """The error named the temporary file beside the target (.tmp-xxxx.pt)."""
    path = tmp_path / "missing" / "c.pt"
    with pytest.raises(FileNotFoundError, match=f"no directory {tmp_path / 'missing'}") as e:
        tg.save({"a": np.ones(1)}, path)
    assert e.value.filename == str(path) and ".tmp-" not in str(e.value)


def test_corrupt_and_foreign_files_get_clear_errors(tmp_path):
    tg.save({"w": np.arange(1000.0)}, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()

    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.npz").write_text("hello, I am not a checkpoint\n")
    np.savez(tmp_path / "foreign.npz", w=np.ones(2))
    np.save(tmp_path / "array.npy", np.ones(2))
    np.save(tmp_path / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(tmp_path / "manifest.npz", "w") as z:
        z.writestr(serialization.MANIFEST + ".npy", b"garbage")

    expected = {
        "truncated.npz": "not a readable checkpoint",
        "text.npz": "not a zip file",
        "foreign.npz": "a zip file but not a checkpoint",
        "array.npy": "not a zip file",
        "pickled.npy": "not a zip file",
        "manifest.npz": "not a readable checkpoint",
    }
    for name, message in expected.items():
        with pytest.raises(tg.CheckpointError, match=message) as info:
            tg.load(tmp_path / name)
        assert name in str(info.value)
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.npz")


def test_a_flipped_byte_in_the_data_is_detected(tmp_path):
    path = tmp_path / "c.pt"
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
    assert "legacy.pt" in message and "legacy format" in message
    assert "torch.save(torch.load(path, weights_only=True), 'model.pt')" in message


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
    """Tensors of every common dtype (bfloat16 as its bits), a view, a tied weight, a Parameter,
    numbers and strings, from PyTorch's own `torch.save`."""
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
    assert isinstance(ckpt["p"], nn.Parameter) and not isinstance(ckpt["t"], nn.Parameter)
    assert ckpt["bf"].dtype == tg.bfloat16 and ckpt["bf"].float().tolist() == [1.5, -2.25]
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
    tg.save({"args": args, "epoch": 3}, tmp_path / "c.pt")
    with torch.serialization.safe_globals([argparse.Namespace]):
        back = tg.load(tmp_path / "c.pt")["args"]
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


def test_pytorchs_own_tensors_save_as_tensors(tmp_path):
    """A state dict of PyTorch's tensors given to tracegrad's save (converting a checkpoint
    where both are installed): saved as tensors, requiring grad as they did."""
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(3, dtype=torch.float64), "p": torch.nn.Parameter(torch.ones(2))}
    tg.save(state, tmp_path / "c.pt")
    back = tg.load(tmp_path / "c.pt")
    assert back["w"].dtype == tg.float64 and back["w"].tolist() == [0.0, 1.0, 2.0]
    assert back["p"].requires_grad and not back["w"].requires_grad
    assert torch.load(tmp_path / "c.pt", weights_only=True)["w"].tolist() == [0.0, 1.0, 2.0]


def test_pytorchs_save_options_are_taken_or_refused(tmp_path):
    """monai passes `pickle_protocol=torch.serialization.DEFAULT_PROTOCOL`."""
    import pickle

    import tracegrad.torch as torch

    path = tmp_path / "state.pt"
    state = {"w": torch.arange(3.0)}
    for protocol in (torch.serialization.DEFAULT_PROTOCOL, 4):
        torch.save(state, path, pickle_module=pickle, pickle_protocol=protocol)
        assert torch.load(path)["w"].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(NotImplementedError, match="pickle_module=json"):
        torch.save(state, path, pickle_module=__import__("json"))
    with pytest.raises(NotImplementedError, match="legacy"):
        torch.save(state, path, _use_new_zipfile_serialization=False)
