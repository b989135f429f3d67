"""`distributions.utils` and the names `torch.distributions.utils` gives libraries (pyro imports
lazy_property, broadcast_all, _sum_rightmost, clamp_probs, ...): lazy_property computes once,
with gradients, and is a property on the class; the triangle to vector maps against PyTorch's
and each other's inverse, with gradients; and torch.distributions' names as PyTorch's
(`__all__` of transforms and constraints, the submodules)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch.distributions as TGD
from tests.conftest import check_grad
from tests.distributions.reference import needs_torch
from tracegrad.distributions.utils import lazy_property, tril_matrix_to_vec, vec_to_tril_matrix

try:
    import torch
    import torch.distributions as TD
    from torch.distributions import utils as torch_utils
except ImportError:
    torch = TD = torch_utils = None


def test_lazy_property_computes_once_with_gradients_and_is_a_property_on_the_class():
    calls = []

    class Thing:
        def __init__(self, x):
            self.x = x

        @lazy_property
        def doubled(self):
            """twice x"""
            calls.append(1)
            return self.x * 2.0

    x = tg.tensor([1.0, 2.0], requires_grad=True)
    t = Thing(x)
    with tg.no_grad():
        y = t.doubled
    assert t.doubled is y and len(calls) == 1 and y.requires_grad
    assert isinstance(Thing.doubled, property) and Thing.doubled.__doc__ == "twice x"


@needs_torch
@pytest.mark.parametrize("diag", [-2, -1, 0, 1])
def test_triangle_vectors_match_torch_and_invert_each_other(diag):
    m = np.random.default_rng(0).standard_normal((2, 4, 4))
    got = tril_matrix_to_vec(tg.tensor(m), diag).numpy()
    want = torch_utils.tril_matrix_to_vec(torch.tensor(m), diag).numpy()
    np.testing.assert_array_equal(got, want)
    back = vec_to_tril_matrix(tg.tensor(got), diag).numpy()
    np.testing.assert_array_equal(back, torch_utils.vec_to_tril_matrix(torch.tensor(want),
                                                                       diag).numpy())  # fmt: skip
    check_grad(lambda v: vec_to_tril_matrix(v, diag) * 1.0, got)
    check_grad(lambda a: tril_matrix_to_vec(a, diag), m)


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match="not the number of entries of a triangular matrix"):
        vec_to_tril_matrix(tg.zeros(5))
    with pytest.raises(ValueError, match=r"diag \(4\) provided is outside \[-3, 2\]"):
        tril_matrix_to_vec(tg.zeros((3, 3)), 4)


def test_the_torch_namespace_has_what_libraries_import():
    from tracegrad.torch.distributions import constraint_registry, constraints, transforms, utils

    for name in ("broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs",
                 "probs_to_logits", "_sum_rightmost", "_standard_normal", "tril_matrix_to_vec",
                 "vec_to_tril_matrix", "euler_constant"):  # fmt: skip
        assert hasattr(utils, name), name
    assert utils._sum_rightmost(tg.ones((2, 3, 4)), 2).numpy().tolist() == [12.0, 12.0]
    assert utils._standard_normal((3,), dtype=tg.float64, device="cpu").shape == (3,)
    a, b = utils.broadcast_all(tg.zeros((2, 1), dtype=tg.float64), 1.0)
    assert a.shape == b.shape == (2, 1) and b.dtype == np.float64
    for name in transforms.__all__:
        assert isinstance(getattr(transforms, name), type | transforms.Transform), name
    assert transforms._InverseTransform is type(transforms.ExpTransform().inv)
    assert constraints._CorrCholesky is type(constraints.corr_cholesky)
    assert constraint_registry.biject_to is TGD.biject_to
    with pytest.raises(AttributeError, match="torch.distributions.utils.nope is not provided"):
        utils.nope  # noqa: B018


@needs_torch
def test_the_names_are_pytorchs():
    """Every distribution class, transform and submodule of torch.distributions is here."""
    import torch.distributions.transforms as torch_transforms

    from tracegrad.torch.distributions import transforms

    assert set(transforms.__all__) == set(torch_transforms.__all__)
    missing = {name for name in TD.__all__ if not hasattr(TGD, name)}
    assert not missing, missing
    modules = {n for n, v in vars(TD).items() if type(v) is type(torch) and not n.startswith("_")}
    missing = {n for n in modules if not hasattr(TGD, n)}
    assert missing <= {"generalized_pareto"}, missing
