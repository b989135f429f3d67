"""`torch.__future__`: PyTorch's switches for how `module.to()`, `.double()` and the like treat
parameters. Here a conversion always keeps each parameter object and gives it the new values
(what code relying on either switch sees: the module's parameters, and an optimizer holding
them, stay the same objects), so the switches are kept and read back, and change nothing."""

from typing import Any

from tracegrad.torch._support import not_provided as _not_provided

_switches = {"overwrite": False, "swap": False}


def set_overwrite_module_params_on_conversion(value: bool) -> None:
    _switches["overwrite"] = bool(value)


def get_overwrite_module_params_on_conversion() -> bool:
    return _switches["overwrite"]


def set_swap_module_params_on_conversion(value: bool) -> None:
    _switches["swap"] = bool(value)


def get_swap_module_params_on_conversion() -> bool:
    return _switches["swap"]


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
