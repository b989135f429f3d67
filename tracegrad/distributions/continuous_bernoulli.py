"""`ContinuousBernoulli`, PyTorch's (Loaiza-Ganem and Cunningham, 2019): the density on [0, 1]
proportional to p^x (1 - p)^(1 - x), a VAE's likelihood for pixel intensities. Its normalizer
and moments are 0/0 at p = 1/2: within `lims` of it they are Taylor expansions, as PyTorch's.
Draws invert the cdf, so `rsample` is reparameterized."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import (
    ExponentialFamily,
    broadcast_all,
    clamp_probs,
    float_tensor,
    logits_to_probs,
    probs_to_logits,
)
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.creation import rand
from tracegrad.frontend.tensor import Tensor


class ContinuousBernoulli(ExponentialFamily):
    """The continuous Bernoulli of `probs` (or `logits`); `lims` bound the region around 1/2
    where Taylor expansions replace the closed forms."""

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 lims: tuple[float, float] = (0.499, 0.501),
                 validate_args: bool | None = None) -> None:  # fmt: skip
        if (probs is None) == (logits is None):
            raise ValueError("ContinuousBernoulli: either probs or logits must be specified, "
                             "but not both")  # fmt: skip
        if probs is not None:
            (probs,) = broadcast_all("ContinuousBernoulli", probs=probs)
            self._check_probs(probs, validate_args)
            self.probs = clamp_probs(probs)
            self._param, self._param_name = self.probs, "probs"
        else:
            (self.logits,) = broadcast_all("ContinuousBernoulli", logits=logits)
            self._param, self._param_name = self.logits, "logits"
        self._lims = lims
        super().__init__(self._param.shape, (), validate_args)

    def _check_probs(self, probs: Tensor, validate_args: bool | None) -> None:
        """Before the clamp, which would hide them (PyTorch checks only when validate_args is
        given)."""
        if validate_args is None or probs.is_symbolic:
            return
        if not bool(np.all(constraints.unit_interval.test(probs.numpy()))):
            raise ValueError("ContinuousBernoulli: the parameter probs has invalid values:\n"
                             f"{probs.numpy()}")  # fmt: skip

    def _parameters(self) -> dict[str, Tensor]:
        return {self._param_name: self._param}

    def expand(self, batch_shape: Any, _instance: Any = None) -> Any:
        new = super().expand(batch_shape, _instance)
        new._lims = self._lims
        return new

    @lazy_property
    def logits(self) -> Tensor:
        return probs_to_logits(self.probs, is_binary=True)

    @lazy_property
    def probs(self) -> Tensor:
        return clamp_probs(logits_to_probs(self.logits, is_binary=True))

    @property
    def param_shape(self) -> tuple:
        return self._param.shape

    def _outside_unstable_region(self) -> Tensor:
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self) -> Tensor:
        return P.where(self._outside_unstable_region(), self.probs, self._lims[0])

    def _cont_bern_log_norm(self) -> Tensor:
        """log C(p), C the normalizing constant: 2 atanh(1 - 2p) / (1 - 2p)."""
        cut = self._cut_probs()
        below = P.where(cut <= 0.5, cut, 0.0)
        above = P.where(cut >= 0.5, cut, 1.0)
        log_norm = P.log(P.abs(P.log1p(-cut) - P.log(cut))) - P.where(
            cut <= 0.5, P.log1p(below * -2.0), P.log(above * 2.0 - 1.0)
        )
        x = (self.probs - 0.5) ** 2
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return P.where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self) -> Tensor:
        cut = self._cut_probs()
        mus = cut / (cut * 2.0 - 1.0) + 1.0 / (P.log1p(-cut) - P.log(cut))
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x * x) * x
        return P.where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self) -> Tensor:
        cut = self._cut_probs()
        log_ratio = P.log1p(-cut) - P.log(cut)
        var = cut * (cut - 1.0) / (1.0 - cut * 2.0) ** 2 + 1.0 / (log_ratio * log_ratio)
        x = (self.probs - 0.5) ** 2
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return P.where(self._outside_unstable_region(), var, taylor)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.icdf(rand(self._extended_shape(sample_shape), dtype=self.probs.dtype))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        logits, value = broadcast_all("ContinuousBernoulli.log_prob", logits=self.logits,
                                      value=self._value(value))  # fmt: skip
        bce = P.softplus(logits) - logits * value  # binary cross-entropy with logits
        return -bce + self._cont_bern_log_norm()

    def cdf(self, value: Any) -> Tensor:
        value = self._value(value, "cdf")
        cut = self._cut_probs()
        cdfs = (cut**value * (1.0 - cut) ** (1.0 - value) + cut - 1.0) / (cut * 2.0 - 1.0)
        unbounded = P.where(self._outside_unstable_region(), cdfs, value)
        return P.where(value <= 0.0, 0.0, P.where(value >= 1.0, 1.0, unbounded))

    def icdf(self, value: Any) -> Tensor:
        value = float_tensor(value, self.probs.dtype)
        cut = self._cut_probs()
        inverted = (P.log1p(-cut + value * (cut * 2.0 - 1.0)) - P.log1p(-cut)) / (
            P.log(cut) - P.log1p(-cut)
        )
        return P.where(self._outside_unstable_region(), inverted, value)

    def entropy(self) -> Tensor:
        log_probs0, log_probs1 = P.log1p(-self.probs), P.log(self.probs)
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0


__all__ = ["ContinuousBernoulli"]
