"""Fractional max-pooling: values, indices and gradients against PyTorch's with the same random
samples, gradients against finite differences, fresh windows at each call, traced as eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as tt
from tests.conftest import check_grad

rng = np.random.default_rng(3)
CASES = {  # dims, input shape, kernel, output size, output ratio
    "2d": (2, (2, 3, 9, 11), 3, (4, 5), None),
    "2d ratio": (2, (2, 3, 9, 11), (2, 3), None, (0.5, 0.6)),
    "2d unbatched": (2, (3, 10, 10), 2, 5, None),
    "2d one output": (2, (1, 1, 5, 5), 2, 1, None),
    "3d": (3, (1, 2, 7, 8, 9), 2, (3, 4, 5), None),
}  # fmt: skip


def pool(lib, case, x, samples, dtype):
    dims, shape, k, size, ratio = CASES[case]
    f = getattr(lib.nn.functional, f"fractional_max_pool{dims}d")
    return f(x, k, size, ratio, True, lib.tensor(samples, dtype=dtype))


def samples_for(case):
    dims, shape = CASES[case][:2]
    planes = (shape[0], shape[1]) if len(shape) == dims + 2 else (1, shape[0])
    return rng.random((*planes, dims))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matches_pytorch_with_the_same_samples(case, dtype):
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")
    x, s = rng.standard_normal(CASES[case][1]), samples_for(case)
    ours_x = tt.tensor(x, dtype=getattr(tt, dtype), requires_grad=True)
    theirs_x = torch.tensor(x, dtype=getattr(torch, dtype), requires_grad=True)
    (a, ia), (b, ib) = (pool(tt, case, ours_x, s, getattr(tt, dtype)),
                        pool(torch, case, theirs_x, s, getattr(torch, dtype)))  # fmt: skip
    g = rng.standard_normal(tuple(b.shape))
    (a * tt.tensor(g, dtype=getattr(tt, dtype))).sum().backward()
    (b * torch.tensor(g, dtype=getattr(torch, dtype))).sum().backward()
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    np.testing.assert_array_equal(ia.numpy(), ib.numpy())
    np.testing.assert_array_equal(ours_x.grad.numpy(), theirs_x.grad.numpy())


@pytest.mark.parametrize("case", ["2d", "3d"])
def test_gradients_match_finite_differences(case):
    x, s = rng.standard_normal(CASES[case][1]), samples_for(case)
    check_grad(lambda t: pool(tt, case, t, s, tt.float64)[0], x)


def test_windows_are_drawn_afresh_and_the_module_matches_the_function():
    x = tg.tensor(rng.standard_normal((4, 2, 12, 12)))
    m = tt.nn.FractionalMaxPool2d(3, output_ratio=0.5)
    assert m(x).shape == (4, 2, 6, 6)
    assert not np.array_equal(m(x).numpy(), m(x).numpy())  # new samples each call
    s = tt.tensor(rng.random((4, 2, 2)))
    fixed = tt.nn.FractionalMaxPool2d(3, output_size=5, return_indices=True, _random_samples=s)
    out, idx = fixed(x)
    same = tt.nn.functional.fractional_max_pool2d(x, 3, 5, _random_samples=s)
    np.testing.assert_array_equal(out.numpy(), same.numpy())
    np.testing.assert_array_equal(np.take_along_axis(x.numpy().reshape(4, 2, -1),
                                                     idx.numpy().reshape(4, 2, -1), -1),
                                  out.numpy().reshape(4, 2, -1))  # fmt: skip


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_pools_as_eager(backend):
    x, s = tg.tensor(rng.standard_normal((2, 3, 9, 11))), tt.tensor(rng.random((2, 3, 2)))

    def step(x, s):
        return (tt.nn.functional.fractional_max_pool2d(x, 3, (4, 5), _random_samples=s) ** 2).sum()

    traced = tg.trace(step, backend=backend)
    for _ in range(2):
        np.testing.assert_allclose(traced(x, s).numpy(), step(x, s).numpy(), rtol=1e-12)


def test_refusals():
    x = tg.tensor(rng.standard_normal((1, 1, 6, 6)))
    with pytest.raises(ValueError, match="either an output_size or an output_ratio"):
        tt.nn.functional.fractional_max_pool2d(x, 2)
    with pytest.raises(ValueError, match="between 0 and 1"):
        tt.nn.functional.fractional_max_pool2d(x, 2, output_ratio=1.5)
    with pytest.raises(RuntimeError, match="too large"):
        tt.nn.functional.fractional_max_pool2d(x, 4, output_size=4)
    with pytest.raises(ValueError, match="requires specifying"):
        tt.nn.FractionalMaxPool2d(2)
