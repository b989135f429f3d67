"""The op vocabulary: `Primitive`, the record every op is, and the facts a pass may ask of an op
(`Kind`) or of a node (`Phase`). The ops themselves are records in `core/ops/`, one module per
family beside its NumPy implementations; `core.primitives` gathers them into the one table.

Part of the core, under the IR (which stores a node's `Phase`): it imports only the errors.
Calling a primitive binds it, through `Primitive.__call__`, which the front end (tensor.py)
attaches.
"""

from __future__ import annotations

import builtins
import enum
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tracegrad.core.bfloat16 import BFLOAT16, Widen
from tracegrad.core.errors import IndexShapeError, ShapeError

PRIMITIVES: dict[str, Primitive] = {}
# Ops whose eager calls a backend may run with kernels of its own: `run(prim, arrays, params,
# shape, dtype)` gives the result, or None for the op's NumPy version (`runtime.eager`).
EAGER_KERNELS: dict[Primitive, Callable] = {}
# `runtime.eager.run_group` once a backend is loaded (an optimizer's update as one kernel): it
# runs a graph of elementwise ops eagerly as one fused kernel, or says the caller runs the ops.
EAGER_GROUPS: list[Callable] = []


# What a scalar template may call and still be arithmetic (`Primitive.arithmetic`).
ONE_INSTRUCTION = {"abs", "maximum", "minimum", "sign"}


class Kind(str, enum.Enum):
    """What a pass may know about an op's results. Passes ask the properties `Primitive` derives
    from it (`has_effects`, `may_rerun`, `single_pass`, `cheap`) rather than lists of kinds."""

    ELEMENTWISE = "elementwise"  # each result element from same-index (broadcast) input elements
    REDUCTION = "reduction"  # folds axes with `combine` from `identity`
    VIEW = "view"  # the result aliases the first input
    CONTRACTION = "contraction"  # a matrix product or convolution (BLAS)
    INDEX = "index"  # gathers and scatters by index arrays
    RANDOM = "random"  # reads and advances a random state: an effect
    COLLECTIVE = "collective"  # communicates with other processes: an effect
    CHECK = "check"  # returns its input unchanged, or raises eager's error
    OPAQUE = "opaque"  # anything else
    COMPOSITE = "composite"  # a body graph run as one op (a fused group)

    def __str__(self) -> str:
        return self.value


class Phase(str, enum.Enum):
    """The part of a training step a node belongs to, set where that part starts."""

    FORWARD = "forward"
    BACKWARD = "backward"  # inside a backward pass
    UPDATE = "update"  # inside an optimizer's step
    RECOMPUTE = "recompute"  # a forward value run again in backward (remat)
    REBUILD = "rebuild"  # a forward segment run again from a checkpoint (memory budget)

    def __str__(self) -> str:
        return self.value


_EFFECTS = frozenset({Kind.RANDOM, Kind.COLLECTIVE, Kind.CHECK})
_RERUNNABLE = frozenset({Kind.ELEMENTWISE, Kind.REDUCTION, Kind.VIEW, Kind.CONTRACTION, Kind.INDEX})
# kinds whose ops may raise at run time: a check, an index out of range, a peer that fails, and
# whatever an opaque op does (a linear-algebra routine on a singular matrix)
_FALLIBLE = frozenset({Kind.CHECK, Kind.COLLECTIVE, Kind.INDEX, Kind.OPAQUE})
# ops that take bfloat16 bits as they are, besides views: the cast itself, and indexing (a view,
# or a gather of whole elements); every other op widens them to float32 (`bfloat16.Widen`), as
# PyTorch's CPU kernels compute them (NumPy has no bfloat16 arithmetic). Of float16 operands
# only products are widened: NumPy has no BLAS for them (its float16 products are plain C
# loops), and its float16 loops compute elementwise ops in float32 already.
_MOVES_BITS = frozenset({"astype", "getitem"})


class Primitive:
    """One op. `vjp` is a tuple with a rule per input (None: not differentiable in that input),
    or a callable `vjp(i, g, out, *ins, **params)` for ops with any number of inputs.
    A rule is called as `rule(g, out, *ins, **params)`; `saves` says which values the rules read,
    so the tape keeps nothing else: "out", and "in" (every input), "in0" (only the first) or
    "in1:" (all but the first), joined by "+"; an input not kept is seen as its shape and dtype.

    For the compiler: `kind` (a `Kind`), from which the facts passes ask follow
    (`has_effects`, `may_rerun`, `single_pass`); `scalar`, a format template of the op on
    scalars ("({0} + {1})") and `helpers`, the functions of `tracegrad.compiler.kernels.scalar`
    it calls; `combine` and `identity` for reductions; `accepts_out` (default: the impl is a
    ufunc) if the impl takes `out=`; `numpy`, the NumPy function the op stands for (default: a
    ufunc impl), which NumPy interop dispatches to it; `view`, a predicate `view(inputs, attrs)`
    for an op whose result is a view only sometimes (a `Kind.VIEW` op always is one); `cheap`,
    an op about as costly as a pass over its result, which the remat pass may run again in
    backward (elementwise ops always are; views cost nothing); whether the Numba backend has a
    kernel of its own for the op is the compiler's to say (`compiler.kernels.native`);
    `scratch`, `scratch(inputs, attrs)`: the bytes of the temporaries `impl` allocates and frees
    within one call (the convolutions' columns), which the memory plan counts at the node;
    `flops(inputs, outputs)`, the operations of one call where `cost`'s rule of thumb is wrong;
    `joint`: `vjp(wanted, g, out, *ins, create_graph=..., **params)` gives every input's
    cotangent in one call (None where `wanted[i]` is false), for an op whose cotangents share
    their work; `create_graph` says whether the cotangents will be differentiated again;
    `raises`, whether the op may raise at run time where its kind says otherwise (`may_raise`);
    `rerun`, whether it may run again where its kind says otherwise (`may_rerun`: an opaque op
    known to be a pure function, such as attention, which the memory budget may rebuild);
    `decompose`, the op as other ops, `decompose(*inputs, **params)`: if such an op saves its
    inputs, its `vjp` need only cover first derivatives of the inputs it names (a second
    derivative, or an input without a rule, differentiates the decomposition); one that saves
    only its result has a `vjp` in ops, differentiated again as it is; with
    `trace_parts` a trace records the decomposition in the op's place: eagerly the op is one
    call and one tape node, traced its parts fuse with their neighbours (PyTorch's split of
    native eager ops and a compiler's decompositions); without, a backend runs the op itself
    (a kernel of its own where its parts would be a score of small statements); with
    `traced_vjp` too, a trace differentiates the op by its own `vjp` (whose ops trace as their
    parts) rather than its parts: a gradient derived by hand knows what autodiff of the parts
    cannot (batch norm's: the centred values sum to zero, one pass over the batch fewer);
    `vjp_into`, `vjp_into(acc, g, *inputs, **params)` adds the first input's cotangent into
    `acc`, an array of its shape, in place: eager backward's way to gather the cotangents of many
    slices of one tensor (getitem's) in one buffer.

    For the front end: `promotion`, how operands of different dtypes meet (PyTorch's rules,
    `frontend.promotion`): "" as given; "operands", all cast to their result type; "values",
    all but the first (where's condition); "float", as "operands" and integers become the
    default float (sqrt, true division). The op's own rule then sees operands that agree.

    `complex_grad`: its VJP holds for complex values too, by PyTorch's convention (the cotangent
    of a real loss in z is dL/dRe z + i dL/dIm z: a holomorphic op's rule multiplies by the
    conjugate of its derivative). Autodiff refuses to record an op with a complex result that
    does not say so, where its real rule would give a wrong gradient silently."""

    def __init__(
        self,
        name: str,
        impl: Callable,
        shape: Callable,
        vjp: tuple | Callable | None = None,
        saves: str = "",
        *,
        kind: Kind | str = Kind.OPAQUE,
        scalar: str | None = None,
        helpers: Sequence[str] = (),
        combine: str | None = None,
        identity: float | None = None,
        accepts_out: bool | None = None,
        numpy: Callable | None = None,
        view: Callable | None = None,
        cheap: bool = False,
        scratch: Callable | None = None,
        flops: Callable | None = None,
        joint: bool = False,
        raises: bool | None = None,
        rerun: bool | None = None,
        decompose: Callable | None = None,
        trace_parts: bool = True,
        traced_vjp: bool = False,
        vjp_into: Callable | None = None,
        promotion: str = "",
        complex_grad: bool = False,
    ):
        if kind not in Kind.__members__.values():
            raise ValueError(f"primitive {name}: kind {kind!r} is not one of {[*map(str, Kind)]}")
        kind = Kind(kind)
        if scalar is not None and kind is not Kind.ELEMENTWISE:
            raise ValueError(f"primitive {name}: only elementwise ops have a scalar template")
        self.name, self.impl, self.rule, self.vjp, self.kind = name, impl, shape, vjp, kind
        self.saves_inputs, self.saves_output = "in" in saves, "out" in saves
        self.saved_inputs = _saved_inputs(saves)
        self.scalar, self.helpers = scalar, tuple(helpers)
        self.combine, self.identity = combine, identity
        is_ufunc = isinstance(impl, np.ufunc)
        self.accepts_out = is_ufunc if accepts_out is None else accepts_out
        self.numpy = numpy if numpy is not None else (impl if is_ufunc else None)
        self._view = view
        self.cheap = cheap or kind is Kind.ELEMENTWISE
        self._scratch = scratch
        self._flops, self.joint = flops, joint
        self._raises, self._rerun = raises, rerun
        self.decompose = decompose
        self.trace_parts = decompose is not None and trace_parts
        self.traced_vjp = traced_vjp
        self.vjp_into = vjp_into
        self.promotion = promotion
        self.complex_grad = complex_grad
        self._shapes: dict[tuple, tuple[tuple[int, ...], np.dtype]] = {}
        PRIMITIVES[name] = self

    @property
    def fusible(self) -> bool:
        """Whether a fused kernel can compute it: elementwise with a scalar template, or a
        reduction with a combine template."""
        return self.scalar is not None or (self.kind is Kind.REDUCTION and self.combine is not None)

    @property
    def has_effects(self) -> bool:
        """It does more than compute its results from its inputs: it draws random numbers,
        communicates with other processes, or raises eager's error. Such a node runs in every
        step: it is never folded into a constant."""
        return self.kind in _EFFECTS

    @property
    def may_raise(self) -> bool:
        """Running it may raise although its shapes were checked when tracing: a value check,
        an index array out of range, a collective whose peer failed, a linear-algebra routine
        on a singular matrix, anything an opaque op does (`raises=False` where the record knows
        better: a sort, attention). A traced step runs every such node before its commit point,
        the first write to state, so that a failure leaves the state as it was."""
        return self.kind in _FALLIBLE if self._raises is None else self._raises

    @property
    def may_rerun(self) -> bool:
        """Running it again on the same inputs gives the same results and does nothing else: the
        memory budget may rebuild it from a checkpoint, and remat recompute it in backward if it
        is also cheap. No effects, and a kind whose cost the passes know: an opaque op (a
        user's, say) is not assumed to be safe to run twice."""
        return self.kind in _RERUNNABLE if self._rerun is None else self._rerun

    @property
    def arithmetic(self) -> bool:
        """Elementwise and a few instructions (operators, abs, a maximum): a kernel computes it
        again for less than writing its result and reading it back, which a transcendental
        function (a call, a power) may not."""
        if self.scalar is None:
            return False
        calls = set(re.findall(r"([\w.]+)\(", self.scalar))
        return "**" not in self.scalar and calls <= ONE_INSTRUCTION

    @property
    def single_pass(self) -> bool:
        """It computes its result in one pass over its operands (an elementwise op, a
        reduction): running it again costs about what reading its inputs does, so cse keeps a
        copy of it per phase rather than hold a forward result until backward."""
        return self.kind in (Kind.ELEMENTWISE, Kind.REDUCTION)

    @property
    def arity(self) -> int | None:
        """The number of inputs, where the VJP table says it (None: any number)."""
        return len(self.vjp) if isinstance(self.vjp, tuple) else None

    def shape_rule(self, *ins: Any, **params: Any) -> tuple[tuple[int, ...], np.dtype]:
        """The result's shape and dtype, remembered per input shapes and dtypes and (typed)
        attributes: a rule depends on nothing else, and a step asks the same ones again and
        again. An index template's slices (unhashable before Python 3.12) and a list of ints
        are keyed by their fields; other unhashable attributes ask anew."""
        shapes = [(v.shape, v.dtype) for v in ins]
        if not params:
            try:
                return self._shapes[tuple(shapes)]
            except KeyError:
                pass
        try:
            key = (*shapes, *[(k, v.__class__, v) for k, v in params.items()])
            return self._shapes[key]
        except KeyError:
            pass
        except TypeError:
            try:
                key = (*shapes, *[(k, v.__class__, _hashable(v)) for k, v in params.items()])
                if key in self._shapes:
                    return self._shapes[key]
            except TypeError:
                return self._run_rule(ins, params)
        if len(self._shapes) >= 4096:  # shapes that keep changing: forget, do not grow
            self._shapes.clear()
        found = self._shapes[key] = self._run_rule(ins, params)
        return found

    def _run_rule(self, ins: tuple, params: dict) -> tuple[tuple[int, ...], np.dtype]:
        if self.kind is not Kind.VIEW and self.name not in _MOVES_BITS:
            dtypes = {getattr(v, "dtype", None) for v in ins}  # asked once per shapes (remembered)
            if BFLOAT16 in dtypes:
                if self.name == "nextafter":  # float32's next value would round back to x
                    raise TypeError("nextafter: not provided for bfloat16; convert first")
                raise Widen(f"{self.name}: bfloat16 operands are computed in float32")
            if self.kind is Kind.CONTRACTION and np.dtype(np.float16) in dtypes:
                raise Widen(f"{self.name}: float16 operands are multiplied in float32")
        try:
            shape, dtype = self.rule(*ins, **params)
        except ShapeError:
            raise
        except IndexError as e:
            raise IndexShapeError(f"{self.name}: {e}") from None
        except (ValueError, TypeError) as e:
            raise ShapeError(f"{self.name}: {e}") from None
        if shape.__class__ is not tuple or not isinstance(dtype, np.dtype):  # most rules' are
            shape, dtype = tuple(shape), np.dtype(dtype)
        return shape, dtype

    def infer(self, inputs: Sequence[Any], attrs: dict) -> list[tuple[tuple[int, ...], np.dtype]]:
        """The (shape, dtype) of each result: what `Graph.verify` checks a node against."""
        return [self.shape_rule(*inputs, **attrs)]

    def is_view(self, inputs: Sequence[Any], attrs: dict) -> bool:
        """The result aliases (part of) the first input instead of owning a buffer."""
        if self._view is not None:
            return self._view(inputs, attrs)
        return self.kind in (Kind.VIEW, Kind.CHECK)

    def overwrites_safely(self, attrs: dict, result: int = 0, operand: int = 0) -> bool:
        """Each result element is computed from same-index input elements, through `out=`:
        writing result `result` into the dying buffer of input `operand` is safe."""
        return self.kind is Kind.ELEMENTWISE and self.accepts_out

    def scratch(self, inputs: Sequence[Any], attrs: dict) -> int:
        """Bytes of temporaries one call allocates and frees besides its result."""
        return self._scratch(inputs, attrs) if self._scratch is not None else 0

    @property
    def starts_early(self) -> bool:
        """Runs as soon as its inputs exist: a collective's peers wait for this rank to join."""
        return self.kind is Kind.COLLECTIVE

    def cost(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[int, int]:
        """(floating-point operations, bytes moved) of one application, for the memory-budget
        solver's cost model: a contraction does 2 * (result size) * (contracted length), a view
        nothing, anything else about one operation per element it reads or writes."""
        if self.kind is Kind.VIEW:
            return 0, 0
        moved = builtins.sum(v.nbytes for v in (*inputs, *outputs) if v.const is None)
        if self._flops is not None:
            return self._flops(inputs, outputs), moved
        if self.kind is Kind.CONTRACTION:
            return 2 * builtins.sum(v.size for v in outputs) * inputs[0].shape[-1], moved
        return builtins.max((v.size for v in (*inputs, *outputs)), default=0), moved

    def vjp_rule(self, i: int) -> Callable | None:
        if callable(self.vjp):
            return lambda *a, **p: self.vjp(i, *a, **p)
        return self.vjp[i] if self.vjp is not None and i < len(self.vjp) else None

    def input_grads(self, wanted: Sequence[bool], g: Any, out: Any, ins: Sequence[Any],
                    params: dict, create_graph: bool = False) -> Sequence[Any]:  # fmt: skip
        """The cotangent of each input i with `wanted[i]` (None for the others)."""
        vjp = self.vjp
        if self.joint:
            return vjp(wanted, g, out, *ins, create_graph=create_graph, **params)
        if callable(vjp):  # one rule, told the input's position
            return [vjp(i, g, out, *ins, **params) if w else None for i, w in enumerate(wanted)]
        rules = vjp or ()
        return [rules[i](g, out, *ins, **params) if w and i < len(rules) and rules[i] else None
                for i, w in enumerate(wanted)]  # fmt: skip

    def __call__(self, *args: Any, **params: Any) -> Any:
        raise RuntimeError("tracegrad's front end is not loaded: import tracegrad")

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        """Bind like a function, so a primitive can serve directly as a Tensor method."""
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def _hashable(v: Any) -> Any:
    """A key standing for `v` where Python cannot hash it: a slice of int (or None) fields as
    those fields, a list or tuple item by item with their types; TypeError for anything else
    unhashable."""
    if v.__class__ is slice:
        fields = (v.start, v.stop, v.step)
        if all(f is None or f.__class__ is int for f in fields):
            return (slice, *fields)
        raise TypeError(f"unhashable slice {v!r}")
    if v.__class__ is tuple or v.__class__ is list:  # typed: [2] and [2.0] are two keys
        return (v.__class__, *[(item.__class__, _hashable(item)) for item in v])
    hash(v)
    return v


class Composite(Primitive):
    """An op whose `body` attribute is a graph: a fused group. Its implementation evaluates the
    body; a backend may compile the body into one kernel instead."""

    def __init__(self, name: str):
        super().__init__(name, self.evaluate, _no_rule, kind=Kind.COMPOSITE, accepts_out=True)

    @staticmethod
    def evaluate(*inputs: Any, body: Any) -> list[Any]:
        """Run `body` (an `ir.Graph`, which this module does not import: the IR stands on it)."""
        return body.evaluate(list(inputs))

    def infer(self, inputs: Sequence[Any], attrs: dict) -> list[tuple[tuple[int, ...], np.dtype]]:
        body = attrs["body"]
        body.verify()
        for outer, inner in zip(inputs, body.inputs, strict=True):
            if (outer.shape, outer.dtype) != (inner.shape, inner.dtype):
                raise ShapeError(f"{self.name}: input {outer} for body input {inner}")
        return [(v.shape, v.dtype) for v in body.outputs]

    def overwrites_safely(self, attrs: dict, result: int = 0, operand: int = 0) -> bool:
        """A fused group's kernel reads each element before it writes the results' element
        there, in each sweep over a row (`sweeps`); a result stored in an earlier sweep than the
        last that reads the input must not take the input's buffer."""
        apart = self.sweeps_apart(attrs, result, operand)
        return apart is not None and apart >= 0

    def sweeps_apart(self, attrs: dict, result: int, operand: int) -> int | None:
        """The sweep storing result `result` less the last sweep reading input `operand`; None
        for a body of other ops than elementwise ones and reductions (no kernel's sweeps)."""
        body = attrs["body"]
        if not all(n.prim.kind in (Kind.ELEMENTWISE, Kind.REDUCTION) for n in body.nodes):
            return None
        stage, sweep = stages(body), sweeps(body)
        v = body.inputs[operand]
        read = max((stage[v] if n.prim.kind is Kind.REDUCTION else sweep[n]
                    for n in body.nodes if v in n.inputs), default=0)  # fmt: skip
        made = next(n for n in body.nodes if body.outputs[result] in n.outputs)
        return (stage[made.outputs[0]] if made.prim.kind is Kind.REDUCTION else sweep[made]) - read


def stages(body: Any) -> dict[Any, int]:
    """Each value's stage in a fused group: 0, or one more than the stage of a reduction it
    reads (a softmax's max 1, its exps and their sum 1, its output 2). A kernel reading a
    row's reduction again sweeps each row once per stage."""
    stage = dict.fromkeys(body.inputs, 0)
    for n in body.nodes:
        at = max((stage.get(v, 0) for v in n.inputs), default=0)
        stage[n.outputs[0]] = at + 1 if n.prim.kind is Kind.REDUCTION else at
    return stage


def sweeps(body: Any) -> dict[Any, int]:
    """The sweep of a row in which a fused group's kernel computes each node: the first that
    needs it (to store it, fold it, or compute a node of its own); a later sweep reads the value
    back from a row of scratch, so every sweep sees the same bits (`x == max(x)` must hold for
    the max's gradient) and nothing is computed twice."""
    stage, users, outputs = stages(body), body.users(), set(body.outputs)
    sweep: dict[Any, int] = {}
    for n in reversed(body.nodes):
        out = n.outputs[0]
        uses = [stage[out] if r.prim.kind is Kind.REDUCTION else sweep[r]
                for r in users.get(out, ())]  # fmt: skip
        sweep[n] = min([*uses, *([stage[out]] if out in outputs else [])], default=stage[out])
    return sweep


def _no_rule(*ins: Any, **attrs: Any) -> Any:
    raise TypeError("a composite op's types come from its body")


def _saved_inputs(saves: str) -> slice:
    """The inputs a `saves` declaration keeps, as a slice of the input list."""
    token = next((t for t in saves.split("+") if t.startswith("in")), None)
    if token is None:
        return slice(0)
    if token == "in":
        return slice(None)
    start = int(token[2:].rstrip(":"))
    return slice(start, None if token.endswith(":") else start + 1)


def defprimitive(
    name: str,
    impl: Callable,
    *,
    vjp: Sequence[Callable | None] | Callable | None,
    saves: str = "",
    shape: Callable | None = None,
    kind: Kind | str = Kind.OPAQUE,
    scalar: str | None = None,
) -> Primitive:
    """A new op, as `torch.autograd.Function` or `jax.custom_vjp` make one.

    `impl` computes it with NumPy; `vjp` holds one rule per input, `rule(g, out, *inputs)`,
    written with tracegrad ops (None: not differentiable in that input); `saves` says what the
    rules read ("in", "out", "in+out", "in0", ...); `shape(*inputs)` gives the result's
    (shape, dtype), by default the first input's. With `kind="elementwise"` and a `scalar`
    template such as `"({0} / (1.0 + abs({0})))"` the op fuses into Numba kernels with its
    neighbours. The op works eagerly, to higher order and under `@trace`."""
    rules = vjp if vjp is None or callable(vjp) else tuple(vjp)
    return Primitive(name, impl, shape or _first_input, rules, saves, kind=kind, scalar=scalar)


fused = Composite("fused")


def _first_input(x: Any, *rest: Any, **attrs: Any) -> tuple:
    return x.shape, x.dtype
