"""`torch.distributions.relaxed_bernoulli`: RelaxedBernoulli."""

from tracegrad.distributions import RelaxedBernoulli  # noqa: F401
