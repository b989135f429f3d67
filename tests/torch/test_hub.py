"""`torch.hub`: downloads into the cache (file:// URLs stand in for the network), checkpoints
loaded from it, and `hubconf.py` entry points from a local directory or a GitHub repository (a
zip laid out as GitHub's, handed over in place of the download)."""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.torch import hub

HUBCONF = '''
"""A repository's hub configuration."""
dependencies = ["numpy"]
from tinylayers import make


def tiny(width=3, scale=1.0):
    """A linear layer of `width` outputs."""
    return make(width, scale)


def _private():
    pass
'''
LAYERS = """
import tracegrad.torch as torch


def make(width, scale):
    layer = torch.nn.Linear(2, width)
    with torch.no_grad():
        layer.weight.fill_(scale)
    return layer
"""


@pytest.fixture
def hub_dir(tmp_path):
    before = hub.get_dir()
    hub.set_dir(str(tmp_path / "hub"))
    yield tmp_path / "hub"
    hub.set_dir(before)


def write_repo(directory):
    directory.mkdir(parents=True)
    (directory / "hubconf.py").write_text(HUBCONF)
    (directory / "tinylayers.py").write_text(LAYERS)
    return directory


def test_a_checkpoint_is_downloaded_once_and_read_from_the_cache(tmp_path, hub_dir):
    weights = {"w": torch.arange(6.0).reshape(2, 3), "b": torch.ones(2, dtype=torch.float64)}
    source = tmp_path / "weights.pth"
    torch.save(weights, source)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    named = tmp_path / f"net-{digest[:8]}.pth"
    shutil.copy(source, named)
    loaded = hub.load_state_dict_from_url(named.as_uri(), check_hash=True, progress=False)
    cached = hub_dir / "checkpoints" / named.name
    assert cached.exists() and sorted(loaded) == ["b", "w"]
    np.testing.assert_array_equal(loaded["w"].numpy(), weights["w"].numpy())
    assert loaded["b"].dtype == torch.float64
    named.unlink()  # the second call reads the cache, not the URL
    again = hub.load_state_dict_from_url(named.as_uri(), progress=False)
    np.testing.assert_array_equal(again["w"].numpy(), weights["w"].numpy())
    other = hub.load_state_dict_from_url(source.as_uri(), model_dir=str(tmp_path / "elsewhere"),
                                         file_name="renamed.pth", progress=False)  # fmt: skip
    assert (tmp_path / "elsewhere" / "renamed.pth").exists() and sorted(other) == ["b", "w"]
    assert torch.utils.model_zoo.load_url is hub.load_state_dict_from_url


def test_a_download_whose_hash_differs_is_refused_and_leaves_nothing(tmp_path, hub_dir):
    source = tmp_path / "net-0123abcd.pth"
    torch.save({"w": torch.zeros(2)}, source)
    with pytest.raises(RuntimeError, match='invalid hash value \\(expected "0123abcd"'):
        hub.load_state_dict_from_url(source.as_uri(), check_hash=True, progress=False)
    assert os.listdir(hub_dir / "checkpoints") == []  # no file the cache would take for whole
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    wrong = "0" if digest[0] != "0" else "1"  # not a constant: each save has its own id
    with pytest.raises(RuntimeError, match="invalid hash value"):
        hub.download_url_to_file(source.as_uri(), str(tmp_path / "copy"), wrong, progress=False)
    hub.download_url_to_file(source.as_uri(), str(tmp_path / "copy"), progress=False)
    assert (tmp_path / "copy").read_bytes() == source.read_bytes()


def test_a_checkpoint_zipped_alone_is_unpacked(tmp_path, hub_dir):
    """PyTorch's older releases published checkpoints zipped one to a file."""
    inner = tmp_path / "inner.pth"
    torch.save({"w": torch.full((2,), 7.0)}, inner)
    with zipfile.ZipFile(tmp_path / "old.zip", "w") as z:
        z.write(inner, "old.pth")
    loaded = hub.load_state_dict_from_url((tmp_path / "old.zip").as_uri(), progress=False)
    assert loaded["w"].tolist() == [7.0, 7.0]


def test_a_local_hubconf_builds_its_models(tmp_path):
    repo = write_repo(tmp_path / "repo")
    layer = hub.load(str(repo), "tiny", 4, source="local", scale=0.5)
    assert isinstance(layer, torch.nn.Linear) and layer.weight.shape == (4, 2)
    assert float(layer.weight.sum()) == 4.0
    assert str(repo) not in os.sys.path  # the repository is on the path only while it is used
    with pytest.raises(RuntimeError, match="Cannot find callable missing in hubconf"):
        hub.load(str(repo), "missing", source="local")
    with pytest.raises(ValueError, match='Unknown source: "s3"'):
        hub.load(str(repo), "tiny", source="s3")
    (repo / "hubconf.py").write_text(HUBCONF.replace('["numpy"]', '["numpy", "no_such_pkg"]'))
    with pytest.raises(RuntimeError, match="Missing dependencies: no_such_pkg"):
        hub.load(str(repo), "tiny", source="local")


def github_zip(tmp_path, top):
    """A repository zipped as GitHub's zipball: everything under one top directory."""
    write_repo(tmp_path / "src" / top)
    archive = shutil.make_archive(str(tmp_path / "zipball"), "zip", tmp_path / "src", top)
    return archive


def test_a_github_repository_is_downloaded_into_the_cache_and_trusted(
    tmp_path, hub_dir, monkeypatch
):
    archive = github_zip(tmp_path, "someone-models-0a1b2c3")
    asked = []

    def fetch(url, dst, hash_prefix=None, progress=True):
        asked.append(url)
        if not url.endswith("/main"):
            raise hub.urllib.error.HTTPError(url, 404, "Not Found", None, None)
        shutil.copy(archive, dst)

    monkeypatch.setattr(hub, "download_url_to_file", fetch)
    layer = hub.load("someone/models", "tiny", 5, trust_repo=True, verbose=False)
    assert layer.weight.shape == (5, 2)
    assert asked == ["https://github.com/someone/models/zipball/main"]
    assert (hub_dir / "someone_models_main" / "hubconf.py").exists()
    assert (hub_dir / "trusted_list").read_text().split() == ["someone_models"]
    # from the cache, nothing downloaded; every public callable, imported ones too (PyTorch's)
    assert hub.list("someone/models") == ["make", "tiny"]
    assert hub.help("someone/models", "tiny").strip() == "A linear layer of `width` outputs."
    assert len(asked) == 1
    hub.load("someone/models", "tiny", force_reload=True, verbose=False)
    assert len(asked) == 2
    with pytest.raises(hub.urllib.error.HTTPError):
        hub.load("someone/models:v2", "tiny", trust_repo=True)  # a ref that is not there


def test_an_untrusted_repository_asks_first(tmp_path, hub_dir, monkeypatch):
    archive = github_zip(tmp_path, "stranger-net-123")
    monkeypatch.setattr(hub, "download_url_to_file",
                        lambda url, dst, *a, **k: shutil.copy(archive, dst))  # fmt: skip
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    with pytest.raises(Exception, match="Untrusted repository"):
        hub.load("stranger/net:dev", "tiny", trust_repo="check")
    assert not (hub_dir / "stranger_net_dev").exists()
    assert hub.load("stranger/net:dev", "tiny", trust_repo=False).weight.shape == (3, 2)
    assert "stranger_net" in (hub_dir / "trusted_list").read_text().split()
    with pytest.raises(ValueError, match='"owner/name\\[:ref\\]"'):
        hub.load("no-slash", "tiny")
