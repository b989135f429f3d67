"""`torch.quasirandom.SobolEngine`: Sobol's low-discrepancy sequence, as PyTorch's. The
direction numbers are Joe and Kuo's table, which PyTorch and SciPy both ship: tracegrad reads
SciPy's copy (the `qmc` extra), so an unscrambled engine draws PyTorch's points exactly.
Scrambling is PyTorch's kind (a random lower-triangular linear scramble of each dimension's
bits and a random digital shift) drawn from tracegrad's generator: another draw of the same
kind, not PyTorch's numbers."""

from __future__ import annotations

from typing import Any

import numpy as np

import tracegrad as tg
from tracegrad.frontend.tensor import Tensor

__all__ = ["SobolEngine"]


def _direction_numbers(dimension: int, bits: int) -> np.ndarray:
    """(dimension, bits) integers: bit b of the index's Gray code flips these bits in."""
    try:
        from scipy.stats import qmc
    except ImportError:
        raise ImportError(
            "torch.quasirandom.SobolEngine reads its direction numbers from SciPy: "
            'pip install "tracegrad[qmc]"'
        ) from None
    return qmc.Sobol(dimension, scramble=False, bits=bits)._sv.astype(np.int64)


class SobolEngine:
    """`draw(n)` gives the next n points of the sequence in [0, 1)^dimension; `draw_base2(m)`
    2^m of them (keeping the count a power of two, which the balance needs)."""

    MAXBIT, MAXDIM = 30, 21201

    def __init__(self, dimension: int, scramble: bool = False, seed: int | None = None) -> None:
        if not 1 <= dimension <= self.MAXDIM:
            raise ValueError(
                f"Supported range of dimensionality for SobolEngine is [1, {self.MAXDIM}]"
            )
        self.dimension, self.scramble, self.seed = dimension, scramble, seed
        self._directions = _direction_numbers(dimension, self.MAXBIT)
        self._shift = np.zeros(dimension, np.int64)
        if scramble:
            self._scramble()
        self.reset()

    def _scramble(self) -> None:
        generator = None if self.seed is None else tg.Generator().manual_seed(self.seed)
        bits, dim = self.MAXBIT, self.dimension
        self._shift = tg.randint(0, 2**bits, (dim,), generator=generator).numpy()
        lower = tg.randint(0, 2, (dim, bits, bits), generator=generator).numpy()
        lower = np.tril(lower, -1) + np.eye(bits, dtype=lower.dtype)  # unit diagonal: a bijection
        # bit r (from the top) of each direction number becomes the parity of `lower[r]` with
        # its bits from the top down to r
        top_down = 1 << np.arange(bits - 1, -1, -1)
        digits = (self._directions[:, :, None] & top_down) != 0  # (dim, column, bit)
        mixed = np.einsum("drq,dcq->dcr", lower, digits.astype(np.int64)) % 2
        self._directions = mixed @ top_down

    @property
    def sobolstate(self) -> Tensor:
        return tg.tensor(self._directions)

    @property
    def quasi(self) -> Tensor:
        """The last point drawn, as integers (the shift before any)."""
        return tg.tensor(self._points(max(self.num_generated - 1, 0), 1)[0])

    def _points(self, start: int, n: int) -> np.ndarray:
        """Points start .. start + n - 1 as integers: the shift with the directions of the set
        bits of each index's Gray code flipped in."""
        index = np.arange(start, start + n, dtype=np.int64)
        gray = index ^ (index >> 1)
        points = np.repeat(self._shift[None], n, axis=0)
        for b in range(int(gray.max(initial=0)).bit_length()):
            flip = ((gray >> b) & 1).astype(bool)
            points[flip] ^= self._directions[:, b]
        return points

    def draw(self, n: int = 1, out: Tensor | None = None, dtype: Any = None) -> Tensor:
        points = self._points(self.num_generated, n) * 2.0**-self.MAXBIT
        self.num_generated += n
        result = tg.tensor(points, dtype=dtype or tg.get_default_dtype())
        if out is not None:
            out.resize_as_(result).copy_(result)
            return out
        return result

    def draw_base2(self, m: int, out: Tensor | None = None,
                   dtype: Any = None) -> Tensor:  # fmt: skip
        n = 2**m
        total = self.num_generated + n
        if total & (total - 1):
            raise ValueError(
                "The balance properties of Sobol' points require n to be a power of 2. "
                f"{self.num_generated} points have been previously generated, then: "
                f"n={self.num_generated}+2**{m}={total}. If you still want to do this, please "
                "use 'SobolEngine.draw()' instead."
            )
        return self.draw(n, out, dtype)

    def reset(self) -> SobolEngine:
        self.num_generated = 0
        return self

    def fast_forward(self, n: int) -> SobolEngine:
        self.num_generated += n
        return self

    def __repr__(self) -> str:
        parts = [f"dimension={self.dimension}"]
        parts += ["scramble=True"] if self.scramble else []
        parts += [] if self.seed is None else [f"seed={self.seed}"]
        return f"{type(self).__name__}({', '.join(parts)})"
