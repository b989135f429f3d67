"""`torch.distributions.logistic_normal`: LogisticNormal."""

from tracegrad.distributions import LogisticNormal  # noqa: F401
