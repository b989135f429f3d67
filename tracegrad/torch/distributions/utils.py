"""`torch.distributions.utils`: the helpers custom distributions call (broadcast_all,
probs_to_logits, logits_to_probs, clamp_probs, lazy_property, and PyTorch's private ones that
libraries import: _sum_rightmost, _standard_normal)."""

from typing import Any

from tracegrad.distributions.distribution import broadcast_all as _broadcast_all
from tracegrad.distributions.distribution import clamp_probs, logits_to_probs, probs_to_logits
from tracegrad.distributions.distribution import sum_rightmost as _sum_rightmost
from tracegrad.distributions.utils import (
    lazy_property,
    standard_normal,
    tril_matrix_to_vec,
    vec_to_tril_matrix,
)

__all__ = ["broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs", "probs_to_logits",
           "tril_matrix_to_vec", "vec_to_tril_matrix"]  # fmt: skip
euler_constant = 0.57721566490153286060


def broadcast_all(*values: Any) -> tuple:
    """The values as float tensors of one broadcast shape (Python numbers take the tensors'
    dtype)."""
    return tuple(_broadcast_all("broadcast_all", **{f"value {i}": v for i, v in enumerate(values)}))


def _standard_normal(shape: Any, dtype: Any, device: Any = None) -> Any:
    return standard_normal(shape, dtype)
