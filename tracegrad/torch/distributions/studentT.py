"""`torch.distributions.studentT`: StudentT."""

from tracegrad.distributions import StudentT  # noqa: F401
