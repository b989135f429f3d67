"""`torch.distributions.pareto`: Pareto."""

from tracegrad.distributions import Pareto  # noqa: F401
