"""`torch.distributions.utils`: the helpers custom distributions call (broadcast_all,
probs_to_logits, logits_to_probs, clamp_probs)."""

from typing import Any

from tracegrad.distributions.distribution import broadcast_all as _broadcast_all
from tracegrad.distributions.distribution import clamp_probs, logits_to_probs, probs_to_logits
from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["broadcast_all", "clamp_probs", "logits_to_probs", "probs_to_logits"]


def broadcast_all(*values: Any) -> tuple:
    """The values as float tensors of one broadcast shape (Python numbers take the tensors'
    dtype)."""
    return tuple(_broadcast_all("broadcast_all", **{f"value {i}": v for i, v in enumerate(values)}))


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
