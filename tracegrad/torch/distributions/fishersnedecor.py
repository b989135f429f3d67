"""`torch.distributions.fishersnedecor`: FisherSnedecor."""

from tracegrad.distributions import FisherSnedecor  # noqa: F401
