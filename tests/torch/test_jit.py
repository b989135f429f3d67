"""torch.jit's save and load: a scripted module round-trips with its extra files; a TorchScript
archive and a checkpoint jit.save did not write are refused by name."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

import tracegrad.torch as torch


def test_a_scripted_module_round_trips_with_its_extra_files(tmp_path):
    model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh()))
    path = tmp_path / "model.pt"
    torch.jit.save(model, path, _extra_files={"config.json": '{"d": 3}'})
    extra = {"config.json": "", "absent": ""}
    loaded = torch.jit.load(path, _extra_files=extra)
    x = torch.randn(4, 3)
    np.testing.assert_array_equal(loaded(x).detach().numpy(), model(x).detach().numpy())
    assert extra == {"config.json": '{"d": 3}', "absent": ""}
    buffer = io.BytesIO()
    torch.jit.save(model, buffer)
    buffer.seek(0)
    assert isinstance(torch.jit.load(buffer), torch.nn.Sequential)


def test_archives_it_cannot_run_are_refused(tmp_path):
    archive = tmp_path / "scripted.pt"
    with zipfile.ZipFile(archive, "w") as z:  # TorchScript's layout: compiled code under code/
        z.writestr("scripted/code/__torch__.py", "class Linear: ...")
        z.writestr("scripted/data.pkl", b"")
    with pytest.raises(RuntimeError, match="TorchScript archive"):
        torch.jit.load(archive)
    torch.save({"weight": torch.ones(2)}, tmp_path / "state.pt")
    with pytest.raises(RuntimeError, match="not written by torch.jit.save"):
        torch.jit.load(tmp_path / "state.pt")


def test_torchscripts_annotations_mean_nothing_and_isinstance_checks_contents():
    """monai decorates with jit.interface and refines with jit.isinstance."""

    class Proto:
        pass

    assert torch.jit.interface(Proto) is Proto and torch.jit.Attribute(3, int) == 3
    check = torch.jit.isinstance
    assert check([1, 2], list[int]) and not check([1, "a"], list[int])
    assert check({"w": torch.ones(1)}, dict[str, torch.Tensor])
    assert not check({1: 2}, dict[str, int]) and check([[1]], list[list[int]])
    assert check(None, int | None) and check((1, "a"), tuple[int, str])
    assert not check((1,), tuple[int, str]) and check(3, (str, int)) and not check("3", int)
