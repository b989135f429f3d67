"""THE op table: every op is one record (`vocabulary.Primitive`) in the module of its family
under `core/ops/`, beside its NumPy implementation; this module gathers them, so that
`primitives.<name>` is every op and `PRIMITIVES` maps names to records. Passes and kernels ask a
record what they need to know (its kind, its templates); they never match its name."""

from tracegrad.core.ops.attention import *  # noqa: F403
from tracegrad.core.ops.checks import *  # noqa: F403
from tracegrad.core.ops.collectives import *  # noqa: F403
from tracegrad.core.ops.conv import *  # noqa: F403
from tracegrad.core.ops.elementwise import *  # noqa: F403
from tracegrad.core.ops.fft import *  # noqa: F403
from tracegrad.core.ops.linalg import *  # noqa: F403
from tracegrad.core.ops.losses import *  # noqa: F403
from tracegrad.core.ops.norm import *  # noqa: F403
from tracegrad.core.ops.pooling import *  # noqa: F403
from tracegrad.core.ops.random import *  # noqa: F403
from tracegrad.core.ops.recurrent import *  # noqa: F403
from tracegrad.core.ops.reductions import *  # noqa: F403
from tracegrad.core.ops.special import *  # noqa: F403
from tracegrad.core.ops.views import *  # noqa: F403
from tracegrad.core.ops.views import sum_to
from tracegrad.core.vocabulary import (
    PRIMITIVES,
    Composite,
    Kind,
    Phase,
    Primitive,
    defprimitive,
    fused,  # noqa: F401 (the composite op: exported through the scan below)
)

__all__ = ["PRIMITIVES", "Composite", "Kind", "Phase", "Primitive", "defprimitive", "sum_to"]
__all__ += [n for n, p in list(globals().items()) if isinstance(p, Primitive) and n[0] != "_"]
