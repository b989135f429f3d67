"""`torch.distributions.constraint_registry`: biject_to, transform_to and their class."""

from tracegrad.distributions.constraint_registry import *  # noqa: F403
from tracegrad.distributions.constraint_registry import __all__  # noqa: F401
