"""`torch.distributions.half_cauchy`: HalfCauchy."""

from tracegrad.distributions import HalfCauchy  # noqa: F401
