"""`torch.compile(model)`: a module whose calls run compiled plans, as PyTorch's AOTAutograd
runs them. The module's forward and its backward are traced together once per input signature
(`joint`), the graph is cut where the cotangents enter (`split`), and each half compiles to a
plan: the forward plan also returns what the backward reads (its *residuals*), and one node on
the tape runs the backward plan when `loss.backward()` reaches it. The loss, the backward call
and the optimizer stay eager, as they are around a module PyTorch compiled. Where the trace
refuses (a graph break in PyTorch), that call signature runs eagerly, with a warning."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tracegrad.core import ir
from tracegrad.core.errors import warn_user
from tracegrad.frontend import pytree
from tracegrad.frontend.autodiff import is_grad_enabled
from tracegrad.frontend.autograd import grad
from tracegrad.frontend.function import Function, FunctionCtx
from tracegrad.frontend.tensor import Listeners, Tensor, TraceError
from tracegrad.frontend.tracer import (
    Capture,
    Held,
    capture,
    is_argument,
    is_array,
    keep,
    name_of,
    signature,
)
from tracegrad.nn.modules import MODULE_COMPILER, Module

if TYPE_CHECKING:
    from tracegrad.runtime.plan import Plan

COTANGENT = 1 << 30  # the cotangents' positions among the joint trace's arguments start here
PLANS_KEPT = 8  # signatures compiled per module; other calls run eagerly (PyTorch's default)


def _flat(n: int) -> Any:
    """The tree of a flat tuple of `n` leaves (a plan's results)."""
    return pytree.flatten(tuple(range(n)), lambda x: isinstance(x, int))[1]


@dataclass
class Compiled:
    """One input signature's plans: the forward (its results: the module's output leaves, then
    the residuals) and the backward (its arguments: the residuals, then one cotangent per
    differentiable output; its results: the gradients that are not None)."""

    forward: Plan
    backward: Plan | None
    out_tree: Any
    n_out: int  # the output leaves, then the `n_kept` tensors the forward keeps
    differentiable: list[int]  # output leaves with a gradient (a cotangent each)
    has_grad: list[bool]  # per tensor gradients go to: whether its gradient is not None
    n_kept: int
    held: list[Held]  # where Python state keeps outputs (`keep`)

    def runs_here(self) -> bool:
        return self.forward.runs_here() and (self.backward is None or self.backward.runs_here())


@dataclass
class Joint:
    """What the joint trace learns besides its graph."""

    out_tree: Any = None
    n_out: int = 0
    differentiable: list[int] = field(default_factory=list)
    has_grad: list[bool] = field(default_factory=list)
    n_kept: int = 0


def _needed(values: Sequence[ir.Value], made_by: dict[ir.Value, ir.Node]) -> set[ir.Node]:
    """The nodes `values` are computed by, directly or not."""
    seen: set[ir.Node] = set()
    todo = [made_by[v] for v in values if v in made_by]
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(made_by[v] for v in n.inputs if v in made_by)
    return seen


def split(cap: Capture, n_out: int, remat: bool = True) -> tuple[Capture, Capture | None]:
    """The joint capture cut in two: the forward computes the output leaves and the state
    writes (batch norm's running statistics, the random state); the backward, the gradients
    (the results after the first `n_out`) from the cotangents (the arguments at `COTANGENT`
    and after) and the residuals: the forward's values it reads, the arguments, and state the
    forward writes, as they were at the forward (state it does not write it reads itself)."""
    from passes import rematerialize  # the compiler loads with the first trace

    # first, backward recomputes the cheap forward values it can (`rematerialize`): fewer,
    # smaller residuals live from the forward call to the backward one
    g, n_results = rematerialize(cap.graph)[0] if remat else cap.graph, cap.n_results
    outs, grads = g.outputs[:n_out], g.outputs[n_out:n_results]
    writes = g.outputs[n_results:]
    made_by = {v: n for n in g.nodes for v in n.outputs}
    forward = _needed([*outs, *writes], made_by)
    n_args = len(cap.args)
    module_args = [v for v, a in zip(g.inputs, cap.args, strict=False) if a < COTANGENT]
    cotangents = [v for v, a in zip(g.inputs, cap.args, strict=False) if a >= COTANGENT]
    reads = dict(zip(g.inputs[n_args:], cap.reads, strict=True))
    written = {id(r.tensor) for r in cap.value_writes if r.tensor is not None}
    fwd_nodes = [n for n in g.nodes if n in forward]
    used = {v for n in fwd_nodes for v in n.inputs} | set(outs) | set(writes)
    fwd_reads = [v for v in reads if v in used]
    if not grads:
        fwd = ir.Graph([*module_args, *fwd_reads], fwd_nodes, [*outs, *writes])
        return _forward_capture(cap, fwd, fwd_reads, reads, n_out), None
    backward = _needed(grads, made_by) - forward
    bwd_nodes = [n for n in g.nodes if n in backward]
    read_later = {v for v in reads if id(reads[v][0].tensor) not in written}
    residuals, bwd_reads = _crossing(bwd_nodes, grads, cotangents, read_later)
    fwd = ir.Graph([*module_args, *fwd_reads], fwd_nodes, [*outs, *residuals, *writes])
    bwd = ir.Graph([*residuals, *cotangents, *bwd_reads], bwd_nodes, list(grads))
    n_args = len(residuals) + len(cotangents)
    bwd_cap = Capture(bwd, list(range(n_args)), [reads[v] for v in bwd_reads], [], [],
                      _flat(len(grads)), len(grads), [])  # fmt: skip
    return _forward_capture(cap, fwd, fwd_reads, reads, n_out + len(residuals)), bwd_cap


def _crossing(nodes: list[ir.Node], grads: Sequence[ir.Value], cotangents: list[ir.Value],
              read_later: set[ir.Value]) -> tuple[list[ir.Value], list[ir.Value]]:  # fmt: skip
    """What the backward `nodes` (and the gradients) read from before them, once each: the
    residuals the forward hands over, and the state inputs backward reads itself."""
    residuals, reads = [], []
    seen = {*cotangents, *(v for n in nodes for v in n.outputs)}
    for v in [*(x for n in nodes for x in n.inputs), *grads]:
        if v not in seen and v.const is None:
            seen.add(v)
            (reads if v in read_later else residuals).append(v)
    return residuals, reads


def _forward_capture(cap: Capture, graph: ir.Graph, fwd_reads: list, reads: dict,
                     n_results: int) -> Capture:  # fmt: skip
    """The forward half's capture: the module's arguments and the state it reads; its guards
    leave out whether a parameter's grad is None (the forward never reads a grad)."""
    args = [a for a in cap.args if a < COTANGENT]
    guards = [(ref, shape, dtype, None, grads) for ref, shape, dtype, _, grads in cap.guards]
    return Capture(graph, args, [reads[v] for v in fwd_reads], cap.value_writes, [],
                   _flat(n_results), n_results, [i for i in cap.numbers if i < n_results],
                   guards, cap.checks, cap.watched, cap.after, cap.places)  # fmt: skip


class _Call(Function):
    """The tape's node for one call of a compiled module: its inputs are the tensors the
    gradients go to (the parameters, the arguments that require grad); forward runs the
    forward plan, backward the backward plan."""

    @staticmethod
    def forward(ctx: FunctionCtx, plans: Compiled, leaves: list, *wrt: Tensor) -> tuple:
        results = plans.forward(leaves)
        outs = results[: plans.n_out]
        # a residual that is an output is saved as that tensor: an in-place write to it before
        # backward then raises, as PyTorch's saved-tensor check does
        named = {id(t._value): t for t in outs if isinstance(t, Tensor)}
        ctx.plans = plans
        ctx.save_for_backward(*(named.get(id(r._value), r) for r in results[plans.n_out :]))
        # the state the backward plan reads itself (parameters), as the forward left it
        ctx.read = [(t, t._version[0]) for t in _state(plans.backward)]
        ctx.mark_non_differentiable(*(t for i, t in enumerate(outs) if isinstance(t, Tensor)
                                      and i not in plans.differentiable))  # fmt: skip
        return tuple(outs)

    @staticmethod
    def backward(ctx: FunctionCtx, *cotangents: Tensor | None) -> tuple:
        plans, residuals = ctx.plans, ctx.saved_tensors
        if is_grad_enabled():
            raise RuntimeError(
                "a compiled module's backward is not differentiable (create_graph=True): "
                "torch.compile does not support double backward; call the module uncompiled"
            )
        changed = [t for t, version in ctx.read if t._version[0] != version]
        if changed:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: a tensor of shape {changed[0].shape} that the compiled "
                "module's backward reads was written between its forward and this backward"
            )
        given = [cotangents[i] for i in plans.differentiable]
        grads = iter(plans.backward([*residuals, *given]))
        return (None, None, *(next(grads) if has else None for has in plans.has_grad))


def _state(plan: Plan) -> list[Tensor]:
    """The tensors from outside (parameters) a plan reads at each call."""
    return [ref.tensor for ref, _ in plan.capture.reads if ref.tensor is not None]


class CompiledCalls:
    """The plans of a module's calls, per input signature, whether gradients are recorded and
    which tensors take them; see the module's docstring."""

    def __init__(self, module: Any, backend: str = "numba", fullgraph: bool = False,
                 passes: Sequence[Callable] | None = None, budget: int | None = None):  # fmt: skip
        self.module, self.backend, self.fullgraph = module, backend, fullgraph
        # the module's call without its own compiled calls (`Module.compile`'s)
        self.call = getattr(module, "call_uncompiled", module)
        self.passes, self.budget = passes, budget  # `trace`'s: None, the default pipeline
        self.plans: dict[Any, list[Compiled]] = {}
        self.eager: set[Any] = set()  # signatures whose trace refused: they run eagerly
        self.latest: Compiled | None = None  # the plans of the latest compiled call

    def __call__(self, args: tuple, kwargs: dict) -> Any:
        if Listeners.tracers:  # inside a traced step: its ops are the step's
            return self.call(*args, **kwargs)
        try:
            leaves, key = signature(args, kwargs)
        except TypeError:  # an argument that is not a tensor and cannot be hashed
            leaves, key = None, None
        params, grad_args = self._wrt(leaves or [])
        plans = self._plans(key, args, kwargs, params, grad_args)
        if plans is None:  # this call runs eagerly (a graph break, said once)
            return self.call(*args, **kwargs)
        self.latest = plans
        if plans.backward is None:
            outs = plans.forward(leaves)[: plans.n_out]
        else:
            outs = _Call.apply(plans, leaves, *params, *(leaves[i] for i in grad_args))
        keep(plans.held, outs)
        return pytree.unflatten(plans.out_tree, list(outs[: plans.n_out - plans.n_kept]))

    def _plans(self, key: Any, args: tuple, kwargs: dict, params: list[Tensor],
               grad_args: tuple[int, ...]) -> Compiled | None:  # fmt: skip
        """The plans for this call: kept ones whose guards hold, or new ones; None where the
        call runs eagerly."""
        if key is None:
            return self._eagerly(None, "an argument cannot be hashed")
        key = (key, tuple(id(p) for p in params), grad_args)
        if key in self.eager:
            return None
        known = self.plans.get(key, [])
        plans = next((c for c in known if c.runs_here() and c.forward.capture.guards_hold()),
                     None)  # fmt: skip
        if plans is not None:
            return plans
        if known:
            self._say_why(known[-1].forward.capture)
        if sum(map(len, self.plans.values())) >= PLANS_KEPT:
            full = f"{PLANS_KEPT} signatures compiled already (PyTorch's cache_size_limit)"
            return self._eagerly(None, full + "; pad or bucket shapes that vary")
        try:
            plans = self._compile(args, kwargs, params, grad_args)
        except TraceError as e:
            return self._eagerly(key, str(e))
        self.plans.setdefault(key, []).append(plans)
        return plans

    def __deepcopy__(self, memo: dict) -> CompiledCalls:
        """The calls of a copy of the module (an EMA model's `deepcopy(model)`) compile plans of
        their own: these read and write the original's tensors."""
        module = copy.deepcopy(self.module, memo)
        return CompiledCalls(module, self.backend, self.fullgraph, self.passes, self.budget)

    def wait_for_kernels(self) -> None:
        """Wait until every plan's kernels, compiling in the background, are ready."""
        for compiled in (c for cs in self.plans.values() for c in cs):
            for plan in (compiled.forward, compiled.backward):
                if plan is not None:
                    plan.adopt_kernels(wait=True)

    def _wrt(self, leaves: list) -> tuple[list[Tensor], tuple[int, ...]]:
        """Whom gradients go to: the parameters that require grad, and the positions of the
        tensor arguments that do (none under no_grad)."""
        if not is_grad_enabled():
            return [], ()
        params = [p for p in self.module.parameters() if p.requires_grad]
        args = tuple(i for i, x in enumerate(leaves) if isinstance(x, Tensor) and x.requires_grad
                     and not any(x is p for p in params))  # fmt: skip
        return params, args

    def _compile(self, args: tuple, kwargs: dict, params: list[Tensor],
                 grad_args: tuple[int, ...]) -> Compiled:  # fmt: skip
        from tracegrad.runtime.plan import compile_plan  # the compiler loads with the first trace

        joint = Joint()
        cap = capture(self._joint(joint, params, grad_args), args, kwargs)
        forward, backward = split(cap, joint.n_out, remat=self.passes is None)
        name = name_of(self.module)
        fplan = compile_plan(forward, self.backend, self.passes, f"{name}_forward", self.budget)
        bplan = backward and compile_plan(backward, self.backend, self.passes,
                                          f"{name}_backward", self.budget)  # fmt: skip
        for plan in (fplan, bplan) if bplan else (fplan,):
            # kernels compile from the second call on: during the first training step other
            # modules (a GAN's) and signatures still trace and run as NumPy calls
            plan.kernels_after_call = 2
        return Compiled(fplan, bplan, joint.out_tree, joint.n_out, joint.differentiable,
                        joint.has_grad, joint.n_kept, cap.held)  # fmt: skip

    def _joint(self, joint: Joint, params: list[Tensor], grad_args: tuple[int, ...]) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            # an argument's gradient is the plan's to compute, its history the tape's to follow
            leaves, tree = pytree.flatten((args, kwargs), is_argument)
            for i in grad_args:
                leaves[i] = leaves[i].detach().requires_grad_()
            args, kwargs = pytree.unflatten(tree, leaves)
            wrt = [*params, *(leaves[i] for i in grad_args)]
            leaves, joint.out_tree = pytree.flatten(self.call(*args, **kwargs), is_array)
            tracer = Listeners.tracers[-1]
            # what the forward keeps in Python state that autograd tracks (llama2.c's
            # `self.last_loss`, a mixture of experts' `self.aux_loss`) is an output too, which
            # each call puts where the forward kept it (`Capture.held`): backward reaches it
            kept = [t for t in tracer.escaped(leaves) if t.requires_grad] if wrt else []
            joint.n_kept = len(kept)
            leaves += kept
            joint.n_out = len(leaves)
            joint.differentiable = [i for i, t in enumerate(leaves)
                                    if isinstance(t, Tensor) and t.requires_grad]  # fmt: skip
            if not wrt or not joint.differentiable:
                joint.differentiable, joint.has_grad = [], []
                return tuple(leaves)
            _check_all_taken(tracer, wrt)
            cotangents = []
            for k, i in enumerate(joint.differentiable):
                ct = Tensor._wrap(np.zeros(leaves[i].shape, leaves[i].dtype))
                tracer.stand_in(ct, arg=COTANGENT + k)
                cotangents.append(ct)
            outs = [leaves[i] for i in joint.differentiable]
            grads = grad(outs, wrt, cotangents, allow_unused=True)
            joint.has_grad = [g is not None for g in grads]
            return (*leaves, *(g for g in grads if g is not None))

        run.__wrapped__ = self.call  # what the trace reads Python state through
        return run

    def _say_why(self, cap: Capture) -> None:
        """Warn when a Python value the plans baked in changed and forces a new trace."""
        for w in cap.changed():
            warn_user(f"torch.compile({name_of(self.module)}) is traced again because "
                      f"{w.change()}: each new value compiles anew")  # fmt: skip

    def _eagerly(self, key: Any, why: str) -> None:
        """Say why a call runs eagerly (and, with a key, every call of its signature); with
        `fullgraph=True`, refuse."""
        if self.fullgraph:
            raise TraceError(f"torch.compile(fullgraph=True): {why}")
        if key is not None:
            self.eager.add(key)
        warn_user(f"torch.compile({name_of(self.module)}): this call runs eagerly (PyTorch would "
                  f"break the graph here): {why}")  # fmt: skip


def _check_all_taken(tracer: Any, wrt: list[Tensor]) -> None:
    """Refuse a forward that read a tensor from outside that requires grad and is not among
    those the gradients go to (another module's parameter, a global one): its gradient would
    be lost. The call then runs eagerly."""
    taken = {id(t) for t in wrt}
    for slot in tracer.slots.values():
        t = slot.tensor
        if slot.arg is None and t.is_leaf and t.requires_grad and id(t) not in taken:
            raise TraceError(
                f"the forward reads a tensor of shape {t.shape} that requires grad and is not "
                "one of the module's parameters (another module's, a global one): the compiled "
                "backward would not reach it"
            )


class _Forward:
    """A traced function whose results autograd tracks, as `CompiledCalls` calls a module: the
    tensors from outside it read that require grad are its parameters."""

    def __init__(self, fn: Callable, params: list[Tensor]):
        self.fn, self.params, self.__name__ = fn, params, name_of(fn)
        self.__wrapped__ = fn  # what a trace reads Python state through (`watch_python_values`)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def parameters(self) -> list[Tensor]:
        return self.params


def differentiable_function(fn: Callable, cap: Capture, backend: str,
                            passes: Sequence[Callable] | None = None, budget: int | None = None,
                            fullgraph: bool = True) -> CompiledCalls:  # fmt: skip
    """`trace(fn)` (`torch.compile(fn)`) for a function that returns what autograd tracks
    without running backward itself (a forward, a loss): its calls with grad enabled run a
    forward and a backward plan, as a compiled module's do. Its parameters: the leaf tensors
    from outside that the first trace read and that require grad."""
    params = [ref.tensor for ref, via_grad in cap.reads if not via_grad and ref.tensor is not None
              and ref.tensor.is_leaf and ref.tensor.requires_grad]  # fmt: skip
    return CompiledCalls(_Forward(fn, params), backend, fullgraph, passes, budget)


class OptimizedModule(Module):
    """What `torch.compile(module)` returns, as PyTorch's: the module is `_orig_mod` (its
    parameters' names, and `state_dict`'s keys, start with `_orig_mod.`), its attributes read
    through, and calling it runs compiled plans (`CompiledCalls`)."""

    def __init__(self, mod: Module, backend: str = "numba", fullgraph: bool = False):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_calls", CompiledCalls(mod, backend, fullgraph))

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._calls(args, kwargs)

    def wait_for_kernels(self) -> None:
        """Wait until the kernels of the plans so far are ready (`Traced.wait_for_kernels`)."""
        self._calls.wait_for_kernels()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or "_modules" not in self.__dict__:
            raise AttributeError(name)
        if name == "_orig_mod":  # registered: kept out of the dict where a class has __getattr__
            return self._modules[name]
        return getattr(self._modules["_orig_mod"], name)


TORCH_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")


def backend_named(backend: Any) -> str:
    """tracegrad's backend for `torch.compile(backend=...)`: PyTorch's backends (and a callable
    one) compile with Numba; "numpy" and "numba" are tracegrad's own. A callable is never
    called (it would take an FX graph, which tracegrad does not make), and says so: code that
    counts compilations or inspects graphs through one would otherwise see nothing, silently."""
    if backend in ("numpy", "numba"):
        return backend
    if callable(backend):
        warn_user(f"torch.compile: the custom backend {getattr(backend, '__name__', backend)!r} "
                  "is not called: tracegrad compiles the step with its own compiler, which "
                  "makes no FX graph (`step.latest.graph` is its graph)")  # fmt: skip
    elif backend not in TORCH_BACKENDS:
        raise ValueError(f"torch.compile: unknown backend {backend!r}")
    return "numba"


def compile_module(module: Module, *, fullgraph: bool = False, backend: Any = "inductor"
                   ) -> CompiledCalls:  # fmt: skip
    """`module.compile()`'s calls."""
    return CompiledCalls(module, backend_named(backend), fullgraph)


MODULE_COMPILER.append(compile_module)

__all__ = ["CompiledCalls", "OptimizedModule", "backend_named", "compile_module", "split"]
