"""`torch.distributions.beta`: Beta."""

from tracegrad.distributions import Beta  # noqa: F401
