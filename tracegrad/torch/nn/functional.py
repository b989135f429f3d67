"""`torch.nn.functional`: tracegrad's (`tracegrad.nn.functional`), and
`multi_head_attention_forward`, which is `nn.MultiheadAttention`'s forward."""

from typing import Any

from tracegrad.nn.functional import *  # noqa: F403
from tracegrad.nn.layers import multi_head_attention_forward
from tracegrad.torch._support import not_provided as _not_provided


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
