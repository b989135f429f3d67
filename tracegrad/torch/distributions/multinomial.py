"""`torch.distributions.multinomial`: Multinomial."""

from tracegrad.distributions import Multinomial  # noqa: F401
