"""`torch.onnx`: exporting is not provided (importing it works, so a script that exports only on
request runs; using it names what is missing). Registering a custom op's export (torchvision's
at import) is accepted and does nothing, since nothing is exported."""

from collections.abc import Callable
from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided


def register_custom_op_symbolic(
    symbolic_name: str, symbolic_fn: Callable, opset_version: int
) -> None:
    return None


def unregister_custom_op_symbolic(symbolic_name: str, opset_version: int) -> None:
    return None


def is_in_onnx_export() -> bool:
    """False: nothing is exported here (code takes an export-only branch on True)."""
    return False


def _parse_args(*arg_descriptors: str) -> Callable:
    """The decorator a symbolic function is declared with: the function itself."""
    return lambda fn: fn


symbolic_helper = file_module(f"{__name__}.symbolic_helper", "`torch.onnx.symbolic_helper`",
                              {"parse_args": _parse_args})  # fmt: skip
symbolic_opset11 = file_module(f"{__name__}.symbolic_opset11", "`torch.onnx.symbolic_opset11`", {})


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
