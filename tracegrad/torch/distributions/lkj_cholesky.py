"""`torch.distributions.lkj_cholesky`: LKJCholesky."""

from tracegrad.distributions import LKJCholesky  # noqa: F401
