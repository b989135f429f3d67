"""`torch.distributions.transforms`: the transforms (the elementwise and structural ones of
`tracegrad.distributions.transforms`, the matrix and simplex ones of `matrix_transforms`), with
PyTorch's `__all__` and its `_InverseTransform` (the class of `t.inv`: code dispatches on it)."""

from tracegrad.distributions.matrix_transforms import *  # noqa: F403
from tracegrad.distributions.matrix_transforms import __all__ as _matrix_names
from tracegrad.distributions.transforms import *  # noqa: F403
from tracegrad.distributions.transforms import ExpTransform as _Exp
from tracegrad.distributions.transforms import __all__ as _names

__all__ = sorted([*_names, *_matrix_names])
_InverseTransform = type(_Exp().inv)
