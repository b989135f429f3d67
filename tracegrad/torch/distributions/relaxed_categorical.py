"""`torch.distributions.relaxed_categorical`: RelaxedOneHotCategorical."""

from tracegrad.distributions import RelaxedOneHotCategorical  # noqa: F401
