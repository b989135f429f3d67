"""`torch.distributions.laplace`: Laplace."""

from tracegrad.distributions import Laplace  # noqa: F401
