"""`VonMises`, PyTorch's: the circular normal on [-pi, pi) (angles, directions, phases). Its
normalizer is the modified Bessel function I0, evaluated as PyTorch evaluates it (Abramowitz and
Stegun's polynomials, relative error below 2e-7, in log space so large concentrations do not
overflow), so log_prob is PyTorch's. Draws are Best and Fisher's rejection sampler, vectorized:
each value takes the first accepted of CANDIDATES proposals (each accepted with probability
above 0.65)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tracegrad.core import primitives as P
from tracegrad.distributions import constraints
from tracegrad.distributions.distribution import Distribution, broadcast_all
from tracegrad.distributions.utils import lazy_property
from tracegrad.frontend import random
from tracegrad.frontend.autodiff import no_grad
from tracegrad.frontend.functions import broadcast_to, take_along_dim
from tracegrad.frontend.reductions import argmax
from tracegrad.frontend.tensor import Tensor

CANDIDATES = 48  # a value is left unaccepted with probability below 0.35 ** 48 < 1e-21

I0_SMALL = (1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.360768e-1, 0.45813e-2)
I0_LARGE = (0.39894228, 0.1328592e-1, 0.225319e-2, -0.157565e-2, 0.916281e-2, -0.2057706e-1,
            0.2635537e-1, -0.1647633e-1, 0.392377e-2)  # fmt: skip
I1_SMALL = (0.5, 0.87890594, 0.51498869, 0.15084934, 0.2658733e-1, 0.301532e-2, 0.32411e-3)
I1_LARGE = (0.39894228, -0.3988024e-1, -0.362018e-2, 0.163801e-2, -0.1031555e-1,
            0.2282967e-1, -0.2895312e-1, 0.1787654e-1, -0.420059e-2)  # fmt: skip


def _polynomial(y: Tensor, coefficients: Sequence[float]) -> Tensor:
    out: Any = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        out = y * out + c
    return out


def log_modified_bessel(x: Tensor, order: int = 0) -> Tensor:
    """log I_order(x) for x > 0 (order 0 or 1), PyTorch's approximation."""
    if order not in (0, 1):
        raise ValueError(f"log_modified_bessel: order must be 0 or 1, got {order}")
    y = x / 3.75
    small = _polynomial(y * y, I1_SMALL if order else I0_SMALL)
    small = P.log(P.abs(x) * small if order else small)
    x_large = P.maximum(x, 3.75)  # keeps the unused branch finite
    large = (x_large - P.log(x_large) * 0.5
             + P.log(_polynomial(3.75 / x_large, I1_LARGE if order else I0_LARGE)))  # fmt: skip
    return P.where(x < 3.75, small, large)


class VonMises(Distribution):
    """Density exp(concentration cos(x - loc)) / (2 pi I0(concentration)) on the circle; draws
    lie in [-pi, pi)."""

    arg_constraints = {"loc": constraints.real, "concentration": constraints.positive}
    support = constraints.real
    has_rsample = False

    def __init__(self, loc: Any, concentration: Any, validate_args: bool | None = None) -> None:
        self.loc, self.concentration = broadcast_all("VonMises", loc=loc,
                                                     concentration=concentration)  # fmt: skip
        super().__init__(self.loc.shape, (), validate_args)

    def log_prob(self, value: Any) -> Tensor:
        log_prob = self.concentration * P.cos(self._value(value) - self.loc)
        return log_prob - math.log(2 * math.pi) - log_modified_bessel(self.concentration, 0)

    @lazy_property
    def _proposal_r(self) -> Tensor:
        kappa = self.concentration.detach()
        tau = P.sqrt(kappa * kappa * 4.0 + 1.0) + 1.0
        rho = (tau - P.sqrt(tau * 2.0)) / (kappa * 2.0)
        return P.where(kappa < 1e-5, 1.0 / kappa + kappa, (rho * rho + 1.0) / (rho * 2.0))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            dtype, r = self.loc.dtype, broadcast_to(self._proposal_r, shape)
            kappa = broadcast_to(self.concentration.detach(), shape)
            u1, u2, u3 = (random.uniform((CANDIDATES, *shape), dtype) for _ in range(3))
            z = P.cos(u1 * math.pi)
            f = (r * z + 1.0) / (r + z)
            c = kappa * (r - f)
            accept = (c * (2.0 - c) - u2 > 0) | (P.log(c / u2) + 1.0 - c >= 0)
            x = P.sign(u3 - 0.5) * P.arccos(P.minimum(P.maximum(f, -1.0), 1.0))
            first = argmax(accept.astype(dtype), dim=0, keepdim=True)
            x = take_along_dim(x, first, dim=0)[0]
            return P.remainder(x + math.pi + self.loc.detach(), 2 * math.pi) - math.pi

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @lazy_property
    def variance(self) -> Tensor:  # type: ignore[override]
        """The circular variance, 1 - I1(k) / I0(k)."""
        k = self.concentration
        return 1.0 - P.exp(log_modified_bessel(k, 1) - log_modified_bessel(k, 0))


__all__ = ["VonMises"]
