"""Storages (`frontend.storage`, `torch.UntypedStorage`): the bytes under tensors, as
checkpoint readers use them. safetensors' loader maps the file, slices each tensor's bytes out
and reads them as a tensor; its writer and tied-weight finder read `data_ptr()`s."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import tracegrad.torch as torch


def _write_checkpoint(path, arrays: dict) -> int:
    """A safetensors file (an 8-byte header length, a JSON header, the bytes), written by
    hand; returns where the bytes start."""
    header, blobs, at = {}, [], 0
    for name, a in arrays.items():
        blobs.append(a.tobytes())
        kind = {"float32": "F32", "float64": "F64", "int64": "I64"}[a.dtype.name]
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return 8 + len(text)


def test_a_checkpoint_read_as_safetensors_reads_it_shares_the_mapped_bytes(tmp_path):
    arrays = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "i": np.arange(3) - 1}
    start = _write_checkpoint(tmp_path / "m.safetensors", arrays)
    size = (tmp_path / "m.safetensors").stat().st_size
    storage = torch.UntypedStorage.from_file(str(tmp_path / "m.safetensors"), shared=False,
                                             nbytes=size).untyped()  # fmt: skip
    assert storage.nbytes() == len(storage) == size
    header = json.loads((tmp_path / "m.safetensors").read_bytes()[8:start])
    read = {}
    for name, info in header.items():
        a, b = (start + o for o in info["data_offsets"])
        dtype = {"F32": torch.float32, "I64": torch.int64}[info["dtype"]]
        raw = torch.asarray(storage[a:b], dtype=torch.uint8)
        read[name] = raw.view(dtype=dtype).reshape(info["shape"])
        assert read[name].untyped_storage().data_ptr() == storage.data_ptr() + a
    for name, a in arrays.items():
        assert read[name].dtype == a.dtype and read[name].tolist() == a.tolist()
    read["w"][0, 0] = 7.0  # copy on write: the file keeps its bytes
    assert (tmp_path / "m.safetensors").read_bytes()[start : start + 4] == bytes(4)


def test_a_tensors_storage_is_its_owners_bytes():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    s, row = x.untyped_storage(), x[1]
    assert row.untyped_storage().data_ptr() == s.data_ptr() == x.data_ptr()
    assert row.storage_offset() == 3 and x.storage_offset() == 0
    assert s.nbytes() == 24 and s.size() == 24 and s.element_size() == 1
    typed = x.storage()
    assert len(typed) == typed.size() == 6 and typed.dtype is torch.float32
    assert torch.asarray(s[4:8], dtype=torch.float32).tolist() == [1.0]
    assert torch.asarray(torch.UntypedStorage(8), dtype=torch.float32).tolist() == [0.0, 0.0]
    assert s[4] == 0 and s[7] == 63  # 1.0 as little-endian bytes: 0 0 128 63


def test_safetensors_round_trip_when_installed(tmp_path):
    pytest.importorskip("safetensors")
    state = {"w": torch.randn(3, 4), "b": torch.arange(5), "h": torch.ones(2, dtype=torch.float64)}
    with torch.imported_as_torch():  # its compiled reader imports torch when it reads
        from safetensors.torch import load_file, save_file

        save_file(state, str(tmp_path / "m.safetensors"))
        back = load_file(str(tmp_path / "m.safetensors"))
    assert sorted(back) == sorted(state)
    for k, v in state.items():
        assert back[k].dtype is v.dtype and torch.equal(back[k], v)
