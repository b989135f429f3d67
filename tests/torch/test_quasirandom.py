"""SobolEngine: PyTorch's first points (worked out by hand: the first dimension is van der
Corput's sequence, the second Sobol's with x + 1), the balance every 2^m points must have,
scrambled or not, and the drawing API's bookkeeping."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad.torch as torch

pytest.importorskip("scipy")  # the direction numbers' table comes from SciPy (the qmc extra)
SobolEngine = torch.quasirandom.SobolEngine


def cells(points: np.ndarray, per_axis: tuple[int, ...]) -> np.ndarray:
    """How many points fall in each cell of a grid with `per_axis` cells along each axis."""
    index = [np.floor(points[:, a] * n).astype(int) for a, n in enumerate(per_axis)]
    counts = np.zeros(per_axis, int)
    np.add.at(counts, tuple(index), 1)
    return counts


def test_the_first_points_are_pytorchs():
    got = SobolEngine(2).draw(4).numpy()
    np.testing.assert_array_equal(got, [[0, 0], [0.5, 0.5], [0.75, 0.25], [0.25, 0.75]])
    assert SobolEngine(2).draw(1, dtype=torch.float64).dtype == torch.float64


@pytest.mark.parametrize("scramble", [False, True])
def test_every_power_of_two_points_are_balanced(scramble):
    """2^10 points: one in each of 2^10 slabs along any axis, and the first two dimensions
    form a (0, 10, 2)-net: one point in each 2^a x 2^(10-a) box."""
    points = SobolEngine(5, scramble=scramble, seed=3).draw_base2(10).double().numpy()
    assert (0 <= points).all() and (points < 1).all()
    for axis in range(5):
        assert (cells(points[:, [axis]], (1024,)) == 1).all()
    for a in range(11):
        assert (cells(points[:, :2], (2**a, 2 ** (10 - a))) == 1).all()


def test_draws_continue_the_sequence():
    whole = SobolEngine(3).draw(20).numpy()
    engine = SobolEngine(3)
    parts = [engine.draw(1), engine.draw(6), engine.fast_forward(5).draw(8)]
    np.testing.assert_array_equal(np.concatenate([parts[0], parts[1]]), whole[:7])
    np.testing.assert_array_equal(parts[2].numpy(), whole[12:])
    assert engine.num_generated == 20
    np.testing.assert_array_equal(engine.reset().draw(2).numpy(), whole[:2])
    with pytest.raises(ValueError, match="require n to be a power of 2"):
        engine.draw_base2(3)
    into = torch.empty(0)
    assert SobolEngine(3).draw(4, out=into) is into and into.shape == (4, 3)


def test_a_seed_fixes_the_scramble():
    first = SobolEngine(4, scramble=True, seed=7).draw(8).numpy()
    np.testing.assert_array_equal(SobolEngine(4, scramble=True, seed=7).draw(8).numpy(), first)
    assert not np.array_equal(SobolEngine(4, scramble=True, seed=8).draw(8).numpy(), first)
    assert (
        repr(SobolEngine(4, scramble=True, seed=7))
        == "SobolEngine(dimension=4, scramble=True, seed=7)"
    )
    with pytest.raises(ValueError, match=r"\[1, 21201\]"):
        SobolEngine(0)
