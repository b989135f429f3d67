"""`torch.utils.data._utils`: the loader's internals PyTorch code imports by their file paths,
`collate` (custom collates extend `default_collate_fn_map`) and `worker` (`get_worker_info`)."""

import re
from typing import Any

from tracegrad.torch._support import file_module
from tracegrad.torch._support import not_provided as _not_provided
from tracegrad.utils import data

_COLLATE_NAMES = ("collate", "collate_float_fn", "collate_int_fn", "collate_numpy_array_fn",
                  "collate_numpy_scalar_fn", "collate_str_fn", "collate_tensor_fn",
                  "default_collate", "default_collate_fn_map", "default_convert")  # fmt: skip
collate = file_module(f"{__name__}.collate", "`torch.utils.data._utils.collate`", {
    **{name: getattr(data, name) for name in _COLLATE_NAMES},
    # what PyTorch's collate tests arrays and formats errors with (monai's collate reuses them)
    "np_str_obj_array_pattern": re.compile(r"[SaUO]"),
    "default_collate_err_msg_format": (
        "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
        "found {}"
    ),
})  # fmt: skip
worker = file_module(
    f"{__name__}.worker",
    "`torch.utils.data._utils.worker`",
    {"get_worker_info": data.get_worker_info, "WorkerInfo": data.WorkerInfo},
)
IS_WINDOWS = False
MP_STATUS_CHECK_INTERVAL = 5.0  # seconds between a worker's checks that its parent is alive


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
