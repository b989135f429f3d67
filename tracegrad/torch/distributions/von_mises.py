"""`torch.distributions.von_mises`: VonMises."""

from tracegrad.distributions import VonMises  # noqa: F401
