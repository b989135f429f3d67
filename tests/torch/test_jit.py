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
