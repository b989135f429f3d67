"""`SummaryWriter`: what training scripts log with `torch.utils.tensorboard`, written as
TensorBoard's event files without TensorBoard or protobuf installed (TFRecord framing with
masked CRC32C checksums around hand-encoded `Event` protos). Scalars (`add_scalar`,
`add_scalars`), histograms and text are written; images, figures, graphs, embeddings, audio and
video are skipped with a warning (once per kind), so a script that logs them still trains."""

from __future__ import annotations

import os
import socket
import struct
import time
import warnings
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import numpy as np

__all__ = ["SummaryWriter"]


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecord frames carry."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, its masked CRC."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", _masked(crc32c(length))) + data
            + struct.pack("<I", _masked(crc32c(data))))  # fmt: skip


# --- the few protobuf fields an event needs ---------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint(number << 3 | wire) + payload


def _bytes(number: int, data: bytes) -> bytes:
    return _field(number, 2, _varint(len(data)) + data)


def _double(number: int, value: float) -> bytes:
    return _field(number, 1, struct.pack("<d", value))


def _packed_doubles(number: int, values: Iterable[float]) -> bytes:
    return _bytes(number, b"".join(struct.pack("<d", float(v)) for v in values))


def event(wall_time: float, step: int, summary: bytes = b"", file_version: str = "") -> bytes:
    """An `Event`: wall_time (1), step (2), file_version (3) or summary (5)."""
    body = _double(1, wall_time) + _field(2, 0, _varint(step))
    if file_version:
        body += _bytes(3, file_version.encode())
    if summary:
        body += _bytes(5, summary)
    return body


def scalar_entry(tag: str, value: float) -> bytes:
    """A `Summary.Value` with tag (1) and simple_value (2, a float)."""
    return _bytes(1, _bytes(1, tag.encode()) + _field(2, 5, struct.pack("<f", value)))


def histogram_entry(tag: str, values: np.ndarray, bins: int) -> bytes:
    """A `Summary.Value` with a `HistogramProto` (5): min, max, num, sum, sum of squares, the
    buckets' right edges and counts."""
    v = values.astype(np.float64).reshape(-1)
    counts, edges = np.histogram(v, bins=bins) if v.size else (np.zeros(0), np.zeros(1))
    histo = (_double(1, float(v.min()) if v.size else 0.0)
             + _double(2, float(v.max()) if v.size else 0.0) + _double(3, float(v.size))
             + _double(4, float(v.sum())) + _double(5, float((v * v).sum()))
             + _packed_doubles(6, edges[1:]) + _packed_doubles(7, counts))  # fmt: skip
    return _bytes(1, _bytes(1, tag.encode()) + _bytes(5, histo))


def text_entry(tag: str, text: str) -> bytes:
    """A `Summary.Value` holding a string tensor (8) with the text plugin's metadata (9)."""
    shape = _bytes(2, _bytes(2, _field(1, 0, _varint(1))))  # TensorShapeProto: one dim of 1
    tensor = _field(1, 0, _varint(7)) + shape + _bytes(8, text.encode())  # dtype DT_STRING
    metadata = _bytes(1, _bytes(1, b"text"))  # SummaryMetadata.plugin_data.plugin_name
    return _bytes(1, _bytes(1, (tag + "/text_summary").encode()) + _bytes(8, tensor)
                  + _bytes(9, metadata))  # fmt: skip


def _number(value: Any) -> float:
    if hasattr(value, "detach"):
        value = value.detach().numpy()
    return float(np.asarray(value).reshape(()))


def _array(values: Any) -> np.ndarray:
    return np.asarray(values.detach().numpy() if hasattr(values, "detach") else values)


class SummaryWriter:
    """PyTorch's `SummaryWriter(log_dir=None, comment="", purge_step=None, max_queue=10,
    flush_secs=120, filename_suffix="")`: an event file in `log_dir` (default
    runs/<date>_<host><comment>) that TensorBoard reads."""

    def __init__(self, log_dir: str | None = None, comment: str = "",
                 purge_step: int | None = None, max_queue: int = 10, flush_secs: int = 120,
                 filename_suffix: str = "") -> None:  # fmt: skip
        host = socket.gethostname()
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{host}{comment}")
        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        name = f"events.out.tfevents.{int(time.time())}.{host}.{os.getpid()}{filename_suffix}"
        self._file = open(os.path.join(log_dir, name), "ab")  # noqa: SIM115 (closed in close())
        self._max_queue, self._flush_secs = max(1, max_queue), flush_secs
        self._pending, self._last_flush = 0, time.time()
        self._skipped: set[str] = set()
        self._write(event(time.time(), 0, file_version="brain.Event:2"))

    def _write(self, data: bytes) -> None:
        if self._file is None:
            raise RuntimeError("SummaryWriter: write after close()")
        self._file.write(record(data))
        self._pending += 1
        if self._pending >= self._max_queue or time.time() - self._last_flush > self._flush_secs:
            self.flush()

    def _summary(self, value: bytes, step: int | None, walltime: float | None) -> None:
        self._write(event(time.time() if walltime is None else walltime,
                          0 if step is None else int(step), summary=value))  # fmt: skip

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None,
                   walltime: float | None = None, new_style: bool = False,
                   double_precision: bool = False) -> None:  # fmt: skip
        self._summary(scalar_entry(tag, _number(scalar_value)), global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: Mapping[str, Any],
                    global_step: int | None = None,
                    walltime: float | None = None) -> None:  # fmt: skip
        """Each scalar under main_tag/name (PyTorch writes them to files of their own, one per
        name; TensorBoard shows the same curves from one file)."""
        for name, value in tag_scalar_dict.items():
            self.add_scalar(f"{main_tag}/{name}", value, global_step, walltime)

    def add_histogram(self, tag: str, values: Any, global_step: int | None = None,
                      bins: Any = "tensorflow", walltime: float | None = None,
                      max_bins: int | None = None) -> None:  # fmt: skip
        count = bins if isinstance(bins, int) else 30
        self._summary(histogram_entry(tag, _array(values), count), global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None,
                 walltime: float | None = None) -> None:  # fmt: skip
        self._summary(text_entry(tag, str(text_string)), global_step, walltime)

    def _skip(self, kind: str) -> None:
        if kind not in self._skipped:
            self._skipped.add(kind)
            warnings.warn(f"SummaryWriter.{kind}: not written by tracegrad's SummaryWriter "
                          "(scalars, histograms and text are); skipped", stacklevel=3)  # fmt: skip

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
        self._pending, self._last_flush = 0, time.time()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None

    def get_logdir(self) -> str:
        return self.log_dir

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _skipping(kind: str) -> Any:
    def method(self: SummaryWriter, *args: Any, **kwargs: Any) -> None:
        self._skip(kind)

    method.__name__ = kind
    return method


for _kind in ("add_image", "add_images", "add_figure", "add_graph", "add_embedding",
              "add_hparams", "add_audio", "add_video", "add_mesh", "add_pr_curve"):  # fmt: skip
    setattr(SummaryWriter, _kind, _skipping(_kind))
