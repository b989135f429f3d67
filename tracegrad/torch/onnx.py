"""`torch.onnx`: not provided (importing it works, so a script that exports only on request
runs; using it names what is missing)."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
