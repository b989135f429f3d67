"""`torch.distributions.half_normal`: HalfNormal."""

from tracegrad.distributions import HalfNormal  # noqa: F401
