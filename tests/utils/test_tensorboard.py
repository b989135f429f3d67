"""`SummaryWriter` writes TensorBoard's event files itself: the CRC-32C of TFRecord frames
against its published check value, and the events read back by a small independent decoder of
the frames and protobuf fields (tag, step, value), for scalars, histograms and text."""

from __future__ import annotations

import glob
import struct

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.utils.tensorboard import SummaryWriter, crc32c


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C catalogue's check value
    assert crc32c(b"") == 0


def _frames(path):
    """The records of a TFRecord file, each checked against its masked CRCs."""

    def masked(crc):
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

    data, out, i = open(path, "rb").read(), [], 0
    while i < len(data):
        (length,) = struct.unpack_from("<Q", data, i)
        assert struct.unpack_from("<I", data, i + 8)[0] == masked(crc32c(data[i : i + 8]))
        body = data[i + 12 : i + 12 + length]
        assert struct.unpack_from("<I", data, i + 12 + length)[0] == masked(crc32c(body))
        out.append(body)
        i += 16 + length
    return out


def _fields(buf):
    """A protobuf message's fields: {number: [values]} (varints as ints, fixed as bytes)."""
    fields, i = {}, 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        fields.setdefault(number, []).append(value)
    return fields


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def test_scalars_histograms_and_text_read_back(tmp_path):
    with SummaryWriter(log_dir=str(tmp_path)) as writer:
        for step in range(3):
            writer.add_scalar("loss", tg.tensor(1.5 - step), step)
        writer.add_scalars("lr", {"a": 0.1, "b": 0.2}, 7)
        writer.add_histogram("weights", np.arange(10.0), 4, bins=5)
        writer.add_text("note", "hello", 5)
        with pytest.warns(UserWarning, match="add_image.*skipped"):
            writer.add_image("img", np.zeros((3, 4, 4)))
    (path,) = glob.glob(str(tmp_path / "events.out.tfevents.*"))
    events = [_fields(frame) for frame in _frames(path)]
    assert events[0][3] == [b"brain.Event:2"]
    scalars = []
    for e in events[1:]:
        value = _fields(_fields(e[5][0])[1][0])
        tag, step = value[1][0].decode(), e.get(2, [0])[0]
        if 2 in value:
            scalars.append((tag, step, struct.unpack("<f", value[2][0])[0]))
        elif 5 in value:  # the histogram: min, max, num, sum, sum of squares, edges, counts
            histo = _fields(value[5][0])
            numbers = [struct.unpack("<d", histo[k][0])[0] for k in (1, 2, 3, 4, 5)]
            assert (tag, step, numbers) == ("weights", 4, [0.0, 9.0, 10.0, 45.0, 285.0])
            counts = struct.unpack("<5d", histo[7][0])
            assert counts == (2.0, 2.0, 2.0, 2.0, 2.0)
        else:
            assert tag == "note/text_summary" and step == 5 and b"hello" in value[8][0]
    want = [("loss", 0, 1.5), ("loss", 1, 0.5), ("loss", 2, -0.5),
            ("lr/a", 7, pytest.approx(0.1)), ("lr/b", 7, pytest.approx(0.2))]  # fmt: skip
    assert scalars == want


def test_a_closed_writer_refuses_to_write(tmp_path):
    writer = SummaryWriter(log_dir=str(tmp_path / "run"))
    writer.close()
    assert writer.get_logdir() == str(tmp_path / "run")
    with pytest.raises(RuntimeError, match="after close"):
        writer.add_scalar("x", 1.0)
