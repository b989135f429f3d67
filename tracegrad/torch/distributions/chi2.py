"""`torch.distributions.chi2`: Chi2."""

from tracegrad.distributions import Chi2  # noqa: F401
