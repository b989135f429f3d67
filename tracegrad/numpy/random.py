"""`tracegrad.numpy.random`: NumPy's random module itself. Its draws are data, not
differentiable (as in HIPS autograd's `autograd.numpy.random`); tracegrad's own generators,
which a traced step draws afresh, are `tracegrad.randn` and `tracegrad.nn.functional.dropout`.
"""

from numpy.random import *  # noqa: F403
from numpy.random import __all__  # noqa: F401
