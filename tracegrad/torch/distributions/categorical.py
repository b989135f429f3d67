"""`torch.distributions.categorical`: Categorical."""

from tracegrad.distributions import Categorical  # noqa: F401
