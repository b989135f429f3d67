"""`torch.distributed.nn`: the differentiable collectives over `torch.distributed`'s process
group, which tracegrad does not provide; the name imports (vector-quantize-pytorch imports it
at the top, calling it only when `torch.distributed` is initialized, which it never is here)
and each collective raises when called."""

from typing import Any

from tracegrad.torch._support import needs_process_group
from tracegrad.torch._support import not_provided as _not_provided

all_reduce = needs_process_group(__name__, "all_reduce")
all_gather = needs_process_group(__name__, "all_gather")
broadcast = needs_process_group(__name__, "broadcast")
reduce = needs_process_group(__name__, "reduce")


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
