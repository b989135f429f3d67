"""`torch.distributions.kl`: kl_divergence and register_kl."""

from tracegrad.distributions import kl_divergence, register_kl  # noqa: F401
