"""One Numba kernel per fused group: elementwise nodes, broadcast operands, trailing reductions.

`compile_group` reduces a group to its canonical `Structure` (ops and wiring, dtypes, which
canonical axes each operand spans, reduction axes; no sizes and no constant values), generates a
kernel from that alone and caches it by its hash, so every layer of a deep net with the same
pattern shares one compiled kernel. Of the sizes only one bit counts: whether the group is big
enough to run in parallel (`prange` over chunks of the outer axis). Adjacent axes that every
operand and reduction treats alike are merged first: an (m, n) group with only full-size
operands runs as 1-D, one with a bias row or a column sum as 2-D, a channel's bias over (N, C,
H, W) as 3-D. Supported: canonical 1-D and 2-D domains, and 3-D ones whose reductions fold
the outer and inner axes (a channel's statistics over (N, C, H * W));
elementwise ops with a scalar template, and reductions with a combine template over
any canonical axes, as group outputs; a row's reductions read again by later nodes (the kernel
then sweeps each row once per stage, `_body_2d`). Everything about an op comes from its
primitive: the templates, the kernel helpers they call, a reduction's identity. Anything else
raises NotImplementedError (the caller falls back to NumPy).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numba
import numpy as np

from tracegrad.compiler.kernels import fastmath, team
from tracegrad.compiler.kernels.cache import KernelCache, default_cache, in_c_order
from tracegrad.core import primitives as P
from tracegrad.core.bfloat16 import BFLOAT16
from tracegrad.core.ir import Graph, Node, Value
from tracegrad.core.ops import shapes
from tracegrad.core.vocabulary import Kind, stages, sweeps

# Only a fold's own arithmetic may reassociate (LLVM then runs it in SIMD lanes): a kernel's
# (x - m) - log(s) reassociated to x - (m + log(s)) loses a log-softmax's precision.
FOLD_FLAGS = frozenset(fastmath.FLAGS | {"reassoc"})
# Groups smaller than this (or any, when Numba has one thread) run on one thread and compile
# without `parallel=True`, which compiles the loop body a second time (as a gufunc) and wakes
# the threads at every call: more than a small group gains.
PARALLEL_MIN = 1 << 17
# Groups without partial sums from this much work (elements times nodes) up compile for both:
# they share their work when the team is awake (`team.awake`) and run on the calling thread
# when it is not. Their results are the same either way (only partial sums depend on chunks).
AWAKE_MIN = 1 << 14
SUPPORTED_DTYPES = frozenset(
    np.dtype(t).name
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float32, np.float64)
)  # fmt: skip


def threaded(work: int) -> bool:
    """Whether a kernel of `work` elements (or their equivalent) runs its `prange` on several
    threads: waking them costs more than a small kernel's work. Every generated kernel asks."""
    return work >= PARALLEL_MIN and numba.config.NUMBA_NUM_THREADS > 1


def _shares(elements: int, nodes: int, partials: bool) -> bool:
    """Whether a group compiles for several threads: always from PARALLEL_MIN elements, and
    from AWAKE_MIN work when its results do not depend on the chunks (no partial sums)."""
    if numba.config.NUMBA_NUM_THREADS == 1:
        return False
    return elements >= PARALLEL_MIN or (not partials and elements * nodes >= AWAKE_MIN)


@dataclass(frozen=True)
class Reduction:
    """A group output reducing value `slot` over the canonical `axes` into dtype `dtype`, by the
    op's `combine` template from its `identity`."""

    op: str
    combine: str
    identity: float
    slot: int
    axes: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Structure:
    """Everything a kernel's code depends on, and nothing else: the cache key's content.

    `parallel`: whether the group is big enough (PARALLEL_MIN) to run on several threads.
    Slots number the group's values: kernel inputs first, then one per elementwise node.
    `inputs` gives each input's dtype and, per canonical axis, whether it spans it (False:
    broadcast along it). `nodes` are (op, scalar template, operand slots, result dtype);
    `outputs` are slots stored elementwise or `Reduction`s; `helpers` the functions of
    `tracegrad.compiler.kernels.scalar` the templates call.
    """

    ndim: int
    parallel: bool
    inputs: tuple[tuple[str, tuple[bool, ...]], ...]
    nodes: tuple[tuple[str, str, tuple[int, ...], str], ...]
    outputs: tuple[int | Reduction, ...]
    helpers: tuple[str, ...]
    # row reductions the group reads again, as (their slot, the reduction): a 2-D kernel then
    # sweeps each row once per stage, the row still in cache (a softmax's max, then its exps
    # and their sum, then its output)
    folds: tuple[tuple[int, Reduction], ...] = ()
    # per node slot, its stage and the sweep that computes it (`vocabulary.stages`, `sweeps`)
    stages: tuple[int, ...] = ()
    sweeps: tuple[int, ...] = ()


class Layout(NamedTuple):
    """One group's sizes: what its kernel's launches need besides the structure."""

    sizes: tuple[int, ...]  # of the canonical axes
    input_shapes: list[tuple[int, ...]]  # each input (and bound constant), reshaped
    output_shapes: list[tuple[int, ...]]
    consts: list[np.ndarray]  # values of constants read but not listed as inputs
    given: Sequence[tuple[int, ...]] = ()  # the shapes the plan holds its inputs and outputs in


class FusedKernel:
    """`kernel(*input_arrays, *output_arrays)`: writes the group's outputs into the given arrays.

    Constants the group reads but were not listed as inputs are bound here and passed after
    the caller's inputs. Inputs are reshaped to the canonical axes (a view when contiguous) and
    cast to their Value's dtype if they differ (a Python float, a float64 0-d array);
    outputs must be C-contiguous, since they are written through such a view. A parallel
    kernel splits the outer axis into one chunk per Numba thread (as many as at construction);
    one below PARALLEL_MIN elements only while the team is awake (`when_awake`), else it runs
    on the calling thread.
    """

    def __init__(
        self, compiled: Callable, structure: Structure, key: str, path: Path, layout: Layout
    ):
        self.compiled, self.structure, self.key, self.path = compiled, structure, key, path
        self.sizes, input_shapes, self.output_shapes, consts, given = layout
        self.n_inputs = len(input_shapes) - len(consts)
        layouts = [
            (s, np.dtype(d)) for s, (d, _) in zip(input_shapes, structure.inputs, strict=True)
        ]
        self.input_layouts = layouts[: self.n_inputs]
        self.consts = [
            _c_view(c, *lay) for c, lay in zip(consts, layouts[self.n_inputs :], strict=True)
        ]
        threads = numba.get_num_threads() if structure.parallel else 1
        self.chunks = min(threads, self.sizes[0])
        self.partials = [
            _partial_layout(r, structure.ndim, self.chunks, self.sizes)
            for r in structure.outputs
            if isinstance(r, Reduction) and _partial(r, structure.ndim)
        ]
        self.when_awake = self.chunks > 1 and not threaded(math.prod(self.sizes))
        self.launch = _launcher(self, given)

    @property
    def source(self) -> str:
        return self.path.read_text()

    def __call__(self, *arrays: np.ndarray) -> None:
        n = self.n_inputs
        if len(arrays) != n + len(self.output_shapes):
            raise TypeError(
                f"fused kernel takes {n} inputs and {len(self.output_shapes)} outputs, "
                f"got {len(arrays)} arrays"
            )
        arrays = [as_bits(a) for a in arrays]
        ins = [_c_view(a, *lay) for a, lay in zip(arrays[:n], self.input_layouts, strict=True)]
        given = arrays[n:]
        outs = [_out_view(a, s) for a, s in zip(given, self.output_shapes, strict=True)]
        parts = [_new_partial(*layout) for layout in self.partials]
        self.compiled(*ins, *self.consts, *outs, *parts, *self.sizes, self.chunks)
        for a, out in zip(given, outs, strict=True):
            if not a.flags.c_contiguous:  # computed apart: see _out_view
                np.copyto(a, out.reshape(a.shape))

    def __repr__(self) -> str:
        return f"<FusedKernel {self.key} at {self.path}>"


_LAUNCH = """def launch({params}):
    if fast:
        try:
{call}
            return
        except (TypeError, AttributeError):
            fast.clear()
    careful({params})
"""
# how the launcher calls a kernel on one thread, on all, or on all only while they are awake
_CALLS = {
    "one": "            compiled({args}, 1)",
    "all": "            compiled({args}, {chunks})\n            last[0] = clock()",
    "awake": """            if clock() - last[0] < WINDOW:
                compiled({args}, {chunks})
                last[0] = clock()
            else:
                compiled({args}, 1)""",
}
_launch_code: dict[str, Any] = {}  # launcher source -> its code: layers of one shape share it


def _launcher(kernel: FusedKernel, given: Sequence[tuple[int, ...]]) -> Callable:
    """`kernel(*arrays)` as one call of the compiled function with everything fixed by the
    plan's shapes bound (a plan's launch of a small kernel otherwise costs more than its work):
    each array reshaped to its canonical shape only where the plan holds it in another, the
    constants, fresh partials, the sizes. An argument the signature does not take as it is (of
    another dtype, read-only, not contiguous, a Python number) makes Numba raise TypeError
    before anything runs; then the careful `kernel.__call__` converts it (an output it cannot
    write through is computed apart and copied in), from then on: Numba's error costs far more
    than a launch, and what the plan passes a kernel (a read-only broadcast, say) is the same at
    every call. An output is reshaped only if C-contiguous: a reshaped copy would take the
    results."""
    n, sizes = kernel.n_inputs, kernel.sizes
    canonical = [s for s, _ in kernel.input_layouts] + list(kernel.output_shapes)
    if len(given) != len(canonical):  # a kernel built without the plan's shapes
        given = [()] * len(canonical)
    params = [f"a{k}" for k in range(len(canonical))]
    bits = _bits_params(kernel.structure)
    args = []
    for k, (have, want) in enumerate(zip(given, canonical, strict=True)):
        param = f"{params[k]}.view(np.uint16)" if k in bits else params[k]
        # ravel() is reshape((n,)) at half the cost: an elementwise kernel takes 1-D arrays
        shaped = f"{param}.ravel()" if len(want) == 1 else f"{param}.reshape({want!r})"
        if have == want:
            args.append(param)
        elif k < n:
            args.append(shaped)
        else:
            args.append(f"({shaped} if {params[k]}.flags.c_contiguous else None)")
    args[n:n] = [f"c{k}" for k in range(len(kernel.consts))]
    args += [f"np.full({shape!r}, i{k}, dt{k})" for k, (shape, _, _) in enumerate(kernel.partials)]
    args += [repr(v) for v in sizes]
    how = "awake" if kernel.when_awake else "all" if kernel.chunks > 1 else "one"
    call = _CALLS[how].format(args=", ".join(args), chunks=kernel.chunks)
    source = _LAUNCH.format(params=", ".join(params), call=call)
    if source not in _launch_code:
        _launch_code[source] = compile(source, "<tracegrad fused kernel launch>", "exec")
    namespace = {"np": np, "compiled": kernel.compiled, "careful": kernel.__call__, "fast": [1],
                 "clock": team.clock, "last": team.last, "WINDOW": team.WINDOW}  # fmt: skip
    namespace.update({f"c{k}": c for k, c in enumerate(kernel.consts)})
    for k, (_, dtype, init) in enumerate(kernel.partials):
        namespace[f"dt{k}"], namespace[f"i{k}"] = dtype, init
    exec(_launch_code[source], namespace)  # noqa: S102 (our own generated code)
    return namespace["launch"]


def _bits_params(s: Structure) -> set[int]:
    """The kernel's arrays (inputs, then outputs) of uint16: viewed as such by the launcher,
    since a plan holds bfloat16 values (`_kernel_dtype`) in their own dtype."""
    dtypes = [d for d, _ in s.inputs] + [
        o.dtype if isinstance(o, Reduction) else _slot_dtype(s, o) for o in s.outputs
    ]
    return {k for k, d in enumerate(dtypes) if d == "uint16"}


def compile_group(
    inputs: Sequence[Value],
    nodes: Sequence[Node],
    outputs: Sequence[Value],
    cache: KernelCache | None = None,
) -> FusedKernel:
    """A kernel computing `outputs` of the topologically ordered elementwise `nodes`.

    Raises NotImplementedError for groups this generator does not handle.
    """
    return _kernel(*analyze(inputs, nodes, outputs), cache or default_cache())


def _kernel(structure: Structure, layout: Layout, cache: KernelCache) -> FusedKernel:
    """The launcher of the kernel for `structure` (from memory, the disk cache, or compiled)."""
    key = structure_key(structure)
    module = _module(key)
    compiled = cache.load(module, lambda: generate_source(structure, key))
    return FusedKernel(compiled, structure, key, cache.path(module), layout)


def _module(key: str) -> str:
    return f"tracegrad_kernel_{key}"


def compile_groups(
    groups: Sequence[tuple[Sequence[Value], Sequence[Node], Sequence[Value]]],
    progress: Any = None,
    cache: KernelCache | None = None,
    compile: bool = True,
    background: bool = False,
    also: dict[str, str] | None = None,
) -> list[tuple[bool, FusedKernel | None]]:
    """`compile_group` for every (inputs, nodes, outputs) of a plan at once, so that new kernels
    compile in two processes (`KernelCache.load_all`): per group (True, kernel), or (False,
    None) for a group this generator does not handle. `progress` (`total`, `step()`) counts
    distinct kernels; `compile=False` only decides (kernels are None); `background=True`
    compiles every new kernel in child processes (a background thread's call). `also`, other
    generators' modules (`{module_name: source}`), loads in the same round."""
    cache = cache or default_cache()
    found: list[tuple[Structure, Layout] | None] = []
    for inputs, nodes, outputs in groups:
        try:
            found.append(analyze(inputs, nodes, outputs))
        except NotImplementedError:
            found.append(None)
    if not compile:
        return [(f is not None, None) for f in found]
    structures = {structure_key(s): s for s, _ in filter(None, found)}
    sources = {_module(k): generate_source(s, k) for k, s in structures.items()} | (also or {})
    if progress is not None:
        progress.total = len(sources)
    cache.load_all(sources, progress.step if progress is not None else lambda: None, background)
    return [(False, None) if f is None else (True, _kernel(*f, cache)) for f in found]


def structure_key(structure: Structure) -> str:
    text = f"{GENERATOR_VERSION}|{structure!r}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- analysis: group -> canonical structure + the sizes of this instance ----------------------


def analyze(
    inputs: Sequence[Value], nodes: Sequence[Node], outputs: Sequence[Value]
) -> tuple[Structure, Layout]:
    """The group's canonical structure (the cache key's content) and this instance's sizes."""
    if not nodes:
        raise NotImplementedError("an empty group has nothing to compute")
    consts = _unlisted_constants(inputs, nodes)
    kernel_inputs = [*inputs, *consts]
    reductions, reread = _check_nodes(nodes, outputs)
    for v in (*kernel_inputs, *(o for n in nodes for o in n.outputs)):
        if _kernel_dtype(v) not in SUPPORTED_DTYPES:
            raise NotImplementedError(f"dtype {v.dtype} in a fused kernel")
    domain = _domain(nodes, outputs, reductions)
    if 0 in domain:  # no element to visit: a reduction's output would never be written
        raise NotImplementedError(f"an empty domain {domain}")
    axes_of = {v: tuple(sorted(n.attrs["axis"])) for v, n in reductions.items()}
    rows = [v for v in outputs if v not in reductions and v.shape != domain]
    groups = shapes.canonical_axes(domain, [v.shape for v in (*kernel_inputs, *rows)],
                             list(axes_of.values()))  # fmt: skip
    if len(groups) > 3 or (len(groups) == 3 and (rows or reread)):
        raise NotImplementedError(f"{len(groups)} canonical axes (domain {domain})")
    for v, axes in axes_of.items():  # of three: the outer and inner (and the middle), or inner
        reduced = tuple(k for k, g in enumerate(groups) if g[0] in axes)
        if len(groups) == 3 and reduced not in ((0, 2), (0, 1, 2), (2,)):
            raise NotImplementedError(f"{reductions[v].op} over {axes} of a group of {domain}")
    if rows and (len(groups) != 2 or groups[1] != [len(domain) - 1]):
        raise NotImplementedError(f"a row's output of a group of {domain}")
    for v in reread:
        if len(groups) != 2 or set(axes_of[v]) != set(groups[1]) or v.ndim != len(domain):
            raise NotImplementedError(f"{reductions[v].op} over {axes_of[v]} read again in a "
                                      f"group of {domain} (only a row's, axes kept)")  # fmt: skip
    sizes = tuple(math.prod(domain[a] for a in g) for g in groups) or (1,)

    valued = [n for n in nodes if n.prim.kind is not Kind.REDUCTION or n.outputs[0] in reread]
    slots = {v: i for i, v in enumerate([*kernel_inputs, *(n.outputs[0] for n in valued)])}
    in_spec = tuple((_kernel_dtype(v), shapes.spans(v.shape, domain, groups))
                    for v in kernel_inputs)  # fmt: skip
    node_spec = tuple(
        (n.op, n.prim.combine if n.outputs[0] in reread else _template(n),
         tuple(slots[v] for v in n.inputs), _kernel_dtype(n.outputs[0]))
        for n in valued
    )  # fmt: skip

    def reduction(v: Value) -> Reduction:
        p, kept = reductions[v].prim, [k for k, g in enumerate(groups) if g[0] not in axes_of[v]]
        reduced = tuple(k for k in range(len(groups)) if k not in kept)
        return Reduction(p.name, p.combine, p.identity, slots[reductions[v].inputs[0]], reduced,
                         v.dtype.name)  # fmt: skip

    out_spec, out_shapes = [], []
    for v in outputs:
        if v in reductions:
            out_spec.append(reduction(v))
            kept = [k for k, g in enumerate(groups) if g[0] not in axes_of[v]]
            out_shapes.append(tuple(sizes[k] for k in kept) or (1,))
        else:
            out_spec.append(slots[v])
            out_shapes.append(sizes)  # or one number a row: below
    folds = tuple((slots[v], reduction(v)) for v in reread)
    body = Graph(inputs, nodes, outputs)
    stage, sweep = (stages(body), sweeps(body)) if reread else ({}, {})
    partials = any(isinstance(o, Reduction) and _partial(o, len(sizes)) for o in out_spec)
    parallel = _shares(math.prod(sizes), len(nodes), partials)
    helpers = tuple(sorted({h for n in nodes for h in (*n.prim.helpers, *_cast_helper(n))}))
    structure = Structure(len(sizes), parallel, in_spec, node_spec, tuple(out_spec), helpers,
                          folds, tuple(stage[n.outputs[0]] for n in valued) if reread else (),
                          tuple(sweep[n] for n in valued) if reread else ())  # fmt: skip
    levels = _levels(structure)  # a value of the row axis only is stored once a row
    out_shapes = [sizes[:1] if isinstance(o, int) and levels[o] == PER_ROW else shape
                  for o, shape in zip(out_spec, out_shapes, strict=True)]  # fmt: skip
    in_shapes = [
        tuple(s for s, full in zip(sizes, spans, strict=True) if full) or (1,)
        for _, spans in in_spec
    ]
    given = [v.shape for v in (*inputs, *outputs)]
    return structure, Layout(sizes, in_shapes, out_shapes, [c.const for c in consts], given)


def _kernel_dtype(v: Value) -> str:
    """The dtype a kernel holds `v` in: bfloat16 as its bits (uint16), which only casts read and
    make (every other op widens bfloat16 to float32 first: core/bfloat16)."""
    return "uint16" if v.dtype == BFLOAT16 else v.dtype.name


def _cast_helper(n: Node) -> tuple[str, ...]:
    """The scalar helper a cast from or to bfloat16 is (`scalar.bfloat16_widened` or `_bits`);
    NotImplementedError for any other op on bfloat16, or a cast to it from other than
    float32 (rounding float64 through float32 would round twice)."""
    source, target = n.inputs[0].dtype if n.inputs else None, n.outputs[0].dtype
    if BFLOAT16 not in (source, target):
        return ()
    if n.prim is P.astype and source == BFLOAT16:
        return ("bfloat16_widened",)
    if n.prim is P.astype and source == np.float32:
        return ("bfloat16_bits",)
    raise NotImplementedError(f"{n.op} of {source} to {target} in a fused kernel")


def _template(n: Node) -> str:
    """`n`'s scalar expression: its op's, or a bfloat16 cast's helper."""
    helper = _cast_helper(n)
    return f"{helper[0]}({{0}})" if helper else n.prim.scalar


def _unlisted_constants(inputs: Sequence[Value], nodes: Sequence[Node]) -> list[Value]:
    known = set(inputs) | {v for n in nodes for v in n.outputs}
    consts: list[Value] = []
    for n in nodes:
        for v in n.inputs:
            if v in known:
                continue
            if v.const is None:
                raise ValueError(f"{n.op} reads {v}, which is neither an input nor computed")
            consts.append(v)
            known.add(v)
    return consts


def _check_nodes(
    nodes: Sequence[Node], outputs: Sequence[Value]
) -> tuple[dict[Value, Node], list[Value]]:
    """The reduction nodes by their value, and those read again inside the group, after
    checking every node is one we can fuse."""
    reductions: dict[Value, Node] = {}
    reread = []
    for n in nodes:
        reread += [v for v in n.inputs if v in reductions and v not in reread]
        if n.prim.kind is Kind.REDUCTION:
            if n.prim.combine is None:
                raise NotImplementedError(f"{n.op} has no combine template")
            if not math.isfinite(n.prim.identity) and n.inputs[0].dtype.kind != "f":
                raise NotImplementedError(f"{n.op} of {n.inputs[0].dtype}")
            if not n.attrs["axis"]:
                raise NotImplementedError(f"{n.op} over no axes")
            reductions[n.outputs[0]] = n
        elif n.prim.scalar is None:
            raise NotImplementedError(f"{n.op} has no scalar template")
        elif len(n.outputs) != 1:
            raise NotImplementedError(f"{n.op} with {len(n.outputs)} outputs")
    for v, n in reductions.items():
        if v not in outputs and v not in reread:
            raise NotImplementedError(f"{n.op} that nothing reads")
    return reductions, reread


def _domain(nodes, outputs, reductions) -> tuple[int, ...]:
    """The shape every elementwise value broadcasts to: the shape the kernel iterates over."""
    computed = [n.outputs[0].shape for n in nodes if n.prim.kind is not Kind.REDUCTION]
    reduced = [n.inputs[0].shape for n in reductions.values()]
    domain = tuple(np.broadcast_shapes(*computed, *reduced))
    for shape in reduced:
        if shape != domain:
            raise NotImplementedError(f"a reduction over {shape} in a group of shape {domain}")
    for v in outputs:
        if v not in reductions and v.shape != domain and not shapes.row_shaped(v.shape, domain):
            raise NotImplementedError(f"an output of shape {v.shape} in a group of {domain}")
    return domain


def as_bits(a: Any) -> Any:
    """A bfloat16 array as the uint16 array of its bits, which kernels take; anything else as
    it is."""
    return a.view(np.uint16) if getattr(a, "dtype", None) == BFLOAT16 else a


def _c_view(a: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """`a` as a C-contiguous, writeable array of `shape` and `dtype` (the kernel's signature
    says so; a read-only constant or argument is copied): a view when it already is one."""
    a = np.asarray(a).reshape(shape)
    return in_c_order(a) if a.dtype == dtype else np.array(a, dtype, order="C")


def _out_view(a: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Where the kernel writes `a`: `a` itself, C-contiguous as the signature says, or a new
    array copied into `a` after the call. A dying input's buffer the plan reuses may have any
    layout: NumPy's `x[..., index]` returns a transposed one."""
    if not a.flags.c_contiguous:
        return np.empty(shape, a.dtype)
    return a.reshape(shape)


# --- reductions: where partial results go -----------------------------------------------------


def _partial_layout(r: Reduction, ndim: int, chunks: int, sizes: tuple[int, ...]):
    """(shape, dtype, initial value) of a reduction's per-chunk partial results."""
    shape = (chunks,) if _form(r, ndim) == "all" else (chunks, sizes[1])
    return shape, _accumulator_dtype(r, ndim), r.identity


def _new_partial(shape: tuple[int, ...], dtype: np.dtype, init: float) -> np.ndarray:
    return np.zeros(shape, dtype) if init == 0 else np.full(shape, init, dtype)


def _form(r: Reduction, ndim: int) -> str:
    """ "all": everything to one number; "rows": over the inner axis; "cols": over the outer;
    "mid": over the outer and inner of three, one number per middle index (a batch norm's
    statistics of a channel over (N, C, H * W)); "cells": over the inner of three, one number
    per outer and middle index (a squeeze-and-excitation's pooling of each sample's channel,
    where a channel's scale and shift also broadcast)."""
    if len(r.axes) == ndim:
        return "all"
    if ndim == 3:
        return "cells" if r.axes == (2,) else "mid"
    return "rows" if r.axes == (1,) else "cols"


def _partial(r: Reduction, ndim: int) -> bool:
    """Whether chunks fold `r` into partial results (else each writes its own outputs)."""
    return _form(r, ndim) not in ("rows", "cells")


def _accumulator_dtype(r: Reduction, ndim: int) -> np.dtype:
    """Arithmetic folds (sums, products) run in float64 (int64 for integers), except column
    partials, which are read and written per element in the hot loop: float64 there would halve
    its SIMD width. They fold rows one by one in the result's dtype, as NumPy's own axis-0 sums
    do. A fold from an infinite identity (max, min) is exact in its own dtype."""
    exact = not math.isfinite(r.identity)
    if exact or (_form(r, ndim) == "cols" and np.dtype(r.dtype).kind == "f"):
        return np.dtype(r.dtype)
    return np.dtype(np.float64 if np.dtype(r.dtype).kind == "f" else np.int64)


# --- code generation: structure -> Python source ----------------------------------------------

_HEADER = '''\
"""tracegrad fused kernel {key}: generated from its structure, rewritten if edited.

{structure}
"""

import math

import numpy as np
from numba import njit, prange
{imports}
{folds}

@njit(
    "{signature}",
    parallel={parallel},
    fastmath={flags},
    error_model="numpy",
    cache=True,
)
def kernel({params}):
'''


def generate_source(s: Structure, key: str) -> str:
    """The module text of the kernel for `s` (a function of `s` and `key` only)."""
    reductions = [(k, r) for k, r in enumerate(s.outputs) if isinstance(r, Reduction)]
    partials = [(k, r) for k, r in reductions if _partial(r, s.ndim)]
    sizes = ["n0", "n1", "n2"][: s.ndim]
    params = (
        [f"in{k}" for k in range(len(s.inputs))]
        + [f"out{k}" for k in range(len(s.outputs))]
        + [f"part{k}" for k, _ in partials]
        + [*sizes, "chunks"]
    )
    header = _HEADER.format(
        key=key,
        structure=_describe(s),
        signature=_signature(s, partials),
        parallel=s.parallel,
        flags=fastmath.flags_literal(fastmath.FLAGS),
        params=", ".join(params),
        imports=_helper_imports(s.helpers),
        folds=_fold_helpers(s),
    )
    lines = _body(s, reductions, partials)
    if s.parallel and not partials:  # chunks == 1: see `FusedKernel.when_awake`
        alone = _body(dataclasses.replace(s, parallel=False), reductions, partials)
        lines = ["    if chunks == 1:  # prange would wake the other threads",
                 *("    " + line for line in alone), "        return", *lines]  # fmt: skip
    return header + "\n".join(lines) + "\n"


_FOLD = """

@njit(fastmath={flags}, error_model="numpy", cache=True)
def fold_{op}(a, b):
    return {expr}
"""


def _fold_helpers(s: Structure) -> str:
    """A function per reduction op that folds a value into an accumulator, compiled with
    FOLD_FLAGS: inlined into the kernel, only its own instructions reassociate. (An extreme's,
    `scalar.maximum` or `minimum`, vectorizes and propagates NaN without reassociating.)"""
    ops = {r.op: r for r in (*s.outputs, *(r for _, r in s.folds)) if isinstance(r, Reduction)}
    return "".join(
        _FOLD.format(flags=fastmath.flags_literal(FOLD_FLAGS), op=op,
                     expr=r.combine.format("a", "b"))
        for op, r in sorted(ops.items())
    )  # fmt: skip


def _helper_imports(helpers: tuple[str, ...]) -> str:
    return (
        f"\nfrom tracegrad.compiler.kernels.scalar import {', '.join(helpers)}" if helpers else ""
    )


def _body(s: Structure, reductions, partials) -> list[str]:
    """The loops. Indices are cast to unsigned: Numba then skips the negative-index wraparound
    that otherwise stops LLVM from vectorizing the inner loop."""
    if s.ndim == 3:
        return _body_3d(s, reductions, partials)
    if s.ndim == 2:
        return _body_2d(s, reductions, partials)
    levels = _levels(s)
    lines = [f"v{k} = in{k}[0]" for k, (_, spans) in enumerate(s.inputs) if not any(spans)]
    lines += _computed(s, levels, INVARIANT)
    lines.append(f"for c in {'prange' if s.parallel else 'range'}(chunks):")
    lines += ["    " + line for k, r in reductions for line in _start(r, f"acc{k}", s.ndim)]
    inner = _loads(s, "i", levels, PER_ELEMENT) + _computed(s, levels, PER_ELEMENT)
    inner += _stores(s, "i", range(len(s.outputs)))
    accs = [(f"acc{k}", r) for k, r in reductions]
    loop = _sweep(s, ("row", "i", "c * n0 // chunks", "(c + 1) * n0 // chunks"), inner, accs)
    lines += ["    " + line for line in loop]
    lines += [f"    {_fold(r, f'part{k}[c]', f'acc{k}')}" for k, r in reductions]
    for k, r in partials:
        lines += _combine(k, r, "all")
    return ["    " + line for line in lines]


def _body_2d(s: Structure, reductions, partials) -> list[str]:
    """Chunks of rows; in each row, one sweep over its columns per stage (`stages`). Each
    node is computed in one sweep (`Structure.sweeps`); a later sweep that reads it loads it
    from a row of scratch that sweep stored (one per chunk). A row's reductions end with their
    sweep: the next reads them as row values."""
    n_in = len(s.inputs)
    levels, stage_of = _levels(s), [0] * n_in + list(s.stages or [0] * len(s.nodes))
    sweep = {k: s.sweeps[k - n_in] if s.sweeps else 0 for k in range(n_in, n_in + len(s.nodes))}
    element = [k for k in sweep if levels[k] == PER_ELEMENT and k not in dict(s.folds)]
    folded = dict(reductions)
    # each reduction once: (accumulator, reduction, output position or None)
    runs = [(f"acc{k}", r, k) for k, r in reductions]
    runs += [(f"fold{slot}", r, None) for slot, r in s.folds if r not in folded.values()]
    values = {r: slot for slot, r in s.folds}
    stored = [(k, out) for k, out in enumerate(s.outputs) if not isinstance(out, Reduction)]
    per_row = [(k, out) for k, out in stored if levels[out] != PER_ELEMENT]  # row_shaped ones
    stored = [(k, out) for k, out in stored if levels[out] == PER_ELEMENT]
    last = max([stage_of[r.slot] for _, r, _ in runs] + [sweep[k] for k in element], default=0)
    reads = {k: _reads(s, k) for k in element}
    carried = sorted({o for k in element for o in reads[k] if o in reads and sweep[o] < sweep[k]})

    def row_values(stage: int) -> list[str]:
        lines = _computed(s, levels, PER_ROW, stage_of, stage)
        return lines + [f"out{k}[i] = v{out}" for k, out in per_row if stage_of[out] == stage]

    lines = [f"v{k} = in{k}[0]" for k, (_, spans) in enumerate(s.inputs) if not any(spans)]
    lines += _computed(s, levels, INVARIANT)
    lines.append(f"for c in {'prange' if s.parallel else 'range'}(chunks):")
    lines += [f"    row{k} = np.empty(n1, np.{_slot_dtype(s, k)})" for k in carried]
    lines += ["    for row in range(c * n0 // chunks, (c + 1) * n0 // chunks):",
              "        i = np.uint64(row)"]  # fmt: skip
    row = _loads(s, "i, j", levels, PER_ROW) + row_values(0)
    for stage in range(last + 1):
        here = [run for run in runs if stage_of[run[1].slot] == stage]
        made = [k for k in element if sweep[k] == stage]
        # what this sweep reads: loads of inputs, scratch of values an earlier sweep computed
        wanted = {o for k in made for o in reads[k]} | {r.slot for _, r, _ in here}
        inner = _loads(s, "i, j", levels, PER_ELEMENT, {k for k in wanted if k < n_in})
        inner += [f"v{k} = row{k}[j]" for k in carried if k in wanted and sweep[k] < stage]
        inner += _computed(s, levels, PER_ELEMENT, only=set(made))
        inner += [f"row{k}[j] = v{k}" for k in carried if k in made]
        # a result is stored as soon as it is computed; the memory plan gives it no input's
        # buffer that a later sweep reads (`Composite.overwrites_safely`)
        inner += _stores(s, "i, j", [k for k, out in stored if sweep[out] == stage])
        for _, r, k in here:
            if _form(r, 2) == "cols":
                inner.append(_fold(r, f"part{k}[c, j]", f"v{r.slot}", _accumulator_dtype(r, 2)))
        row += [line for acc, r, _ in here if _form(r, 2) != "cols" for line in _start(r, acc, 2)]
        accs = [(acc, r) for acc, r, _ in here if _form(r, 2) != "cols"]
        row += _sweep(s, ("col", "j", "0", "n1"), inner, accs)
        for acc, r, k in here:
            if _form(r, 2) == "all":
                row.append(_fold(r, f"part{k}[c]", acc))
            elif _form(r, 2) == "rows" and k is not None:
                row.append(f"out{k}[i] = {acc}")
            if r in values:
                row.append(f"v{values[r]} = {scalar_cast(_slot_dtype(s, values[r]))}({acc})")
        row += row_values(stage + 1)
    lines += ["        " + line for line in row]
    for k, r in partials:
        lines += _combine(k, r, _form(r, 2))
    return ["    " + line for line in lines]


def _reads(s: Structure, k: int) -> tuple[int, ...]:
    return s.nodes[k - len(s.inputs)][2]


BLOCK = 256  # elements a float32 sum adds in float32 before it adds the block in float64


def _sweep(s: Structure, loop: tuple[str, str, str, str], body: list[str], accs) -> list[str]:
    """The loop (variable, its unsigned index, start, stop) running `body` and folding each
    (accumulator, reduction) of `accs`. A float32 value summed into a float64 accumulator is
    summed in float32 over blocks of BLOCK elements first, in SIMD lanes of its own width
    (float64 would halve them), and each block's sum added in float64: as accurate as NumPy's
    pairwise float32 sums, or more, at the speed of float32 ones."""
    var, index, start, stop = loop
    blocked = [(acc, r) for acc, r in accs if _by_blocks(s, r)]
    folds = []
    for acc, r in accs:
        if (acc, r) in blocked:
            folds += _accumulate(r, f"{acc}_b", np.dtype(_slot_dtype(s, r.slot)))
        else:
            folds += _accumulate(r, acc, _accumulator_dtype(r, s.ndim))
    if not blocked:
        return [f"for {var} in range({start}, {stop}):", f"    {index} = np.uint64({var})",
                *("    " + line for line in body + folds)]  # fmt: skip
    lines = [f"for {var}0 in range({start}, {stop}, {BLOCK}):"]
    lines += [
        f"    {acc}_b = {scalar_cast(_slot_dtype(s, r.slot))}({r.identity!r})" for acc, r in blocked
    ]
    lines += [f"    for {var} in range({var}0, min({var}0 + {BLOCK}, {stop})):",
              f"        {index} = np.uint64({var})"]  # fmt: skip
    lines += ["        " + line for line in body + folds]
    lines += [
        f"    {_fold(r, acc, f'{acc}_b', _accumulator_dtype(r, s.ndim))}" for acc, r in blocked
    ]
    return lines


def _by_blocks(s: Structure, r: Reduction) -> bool:
    wide = _accumulator_dtype(r, s.ndim) == np.float64
    return wide and not _extreme(r) and _slot_dtype(s, r.slot) == "float32"


def _body_3d(s: Structure, reductions, partials) -> list[str]:
    """Three canonical axes: chunks of the outer axis, then the middle one, then a sweep of the
    inner one, which folds each reduction (over all three, or all but the middle) into a
    partial result per chunk (and middle index), or one over the inner axis into its cell."""
    levels = _levels(s)
    lines = [f"v{k} = in{k}[0]" for k, (_, spans) in enumerate(s.inputs) if not any(spans)]
    lines += _computed(s, levels, INVARIANT)
    lines += [
        f"for c in {'prange' if s.parallel else 'range'}(chunks):",
        "    for row in range(c * n0 // chunks, (c + 1) * n0 // chunks):",
        "        i = np.uint64(row)",
        "        for mid in range(n1):",
        "            j = np.uint64(mid)",
    ]
    inner = [line for k, r in reductions for line in _start(r, f"acc{k}", s.ndim)]
    accs = [(f"acc{k}", r) for k, r in reductions]
    element = _loads(s, "i, j, k", levels, PER_ELEMENT) + _computed(s, levels, PER_ELEMENT)
    element += _stores(s, "i, j, k", range(len(s.outputs)))
    inner += _sweep(s, ("col", "k", "0", "n2"), element, accs)
    target = {"all": "part{}[c]", "mid": "part{}[c, j]", "cells": "out{}[i, j]"}
    for k, r in reductions:
        if _partial(r, 3):
            inner.append(_fold(r, target[_form(r, 3)].format(k), f"acc{k}"))
        else:
            inner.append(f"{target['cells'].format(k)} = acc{k}")
    lines += ["            " + line for line in inner]
    for k, r in partials:
        lines += _combine(k, r, _form(r, 3))
    return ["    " + line for line in lines]


INVARIANT, PER_ROW, PER_ELEMENT = 0, 1, 2  # where in a kernel's loops a slot changes


def _levels(s: Structure) -> list[int]:
    """Each slot's level: an input spanning no axis is INVARIANT, one spanning only the outer
    axis of two PER_ROW (a row's maximum or sum), any other PER_ELEMENT; a node's is its
    operands' highest, a row reduction read again PER_ROW. A node is computed where its level
    says, once and not at every element: the log of a row's sum of exps (log-softmax) is a log
    per row, not one per element, which LLVM cannot hoist itself (the stores in the loop might
    write what the loads read)."""
    levels = []
    for _, spans in s.inputs:
        if not any(spans):
            levels.append(INVARIANT)
        else:
            levels.append(PER_ROW if s.ndim == 2 and spans == (True, False) else PER_ELEMENT)
    folds = {slot for slot, _ in s.folds}
    for k, (_, _, operands, _) in enumerate(s.nodes, start=len(s.inputs)):
        level = max((levels[o] for o in operands), default=INVARIANT)
        levels.append(PER_ROW if k in folds else level)
    return levels


def _loads(
    s: Structure, index: str, levels: list[int], level: int, only: set[int] | None = None
) -> list[str]:
    """The loads of the inputs of `level` (INVARIANT ones are loaded before the loops)."""
    lines = []
    for k, (_, spans) in enumerate(s.inputs):
        if any(spans) and levels[k] == level and (only is None or k in only):
            own = ", ".join(i for i, full in zip(index.split(", "), spans, strict=True) if full)
            lines.append(f"v{k} = in{k}[{own}]")
    return lines


def _computed(
    s: Structure,
    levels: list[int],
    level: int,
    stages: list[int] | None = None,
    stage: int = 0,
    only: set[int] | None = None,
) -> list[str]:
    """The expressions of the nodes of `level` (and `stage`, or in `only`, if given), in
    order; a row reduction's value comes from its sweep."""
    folds = {slot for slot, _ in s.folds}
    lines = []
    for k, (_, template, operands, dtype) in enumerate(s.nodes, start=len(s.inputs)):
        if levels[k] != level or k in folds:
            continue
        if (stages is not None and stages[k] != stage) or (only is not None and k not in only):
            continue
        expr = template.format(*(f"v{o}" for o in operands))
        lines.append(f"v{k} = {scalar_cast(dtype)}({expr})")
    return lines


def _stores(s: Structure, index: str, which) -> list[str]:
    return [f"out{k}[{index}] = v{s.outputs[k]}" for k in which
            if not isinstance(s.outputs[k], Reduction)]  # fmt: skip


def _combine(k: int, r: Reduction, form: str) -> list[str]:
    """After the parallel loop: fold the chunks' partials into the output."""
    if form == "all":
        return [
            f"total{k} = part{k}[0]",
            "for c in range(1, chunks):",
            f"    {_fold(r, f'total{k}', f'part{k}[c]')}",
            f"out{k}[0] = total{k}",
        ]
    return [
        "for j in range(n1):",
        f"    total{k} = part{k}[0, j]",
        "    for c in range(1, chunks):",
        f"        {_fold(r, f'total{k}', f'part{k}[c, j]')}",
        f"    out{k}[j] = total{k}",
    ]


def _fold(r: Reduction, target: str, value: str, dtype: np.dtype | None = None) -> str:
    """The statement folding `value` (cast to `dtype`, if given) into `target`."""
    if dtype is not None:
        value = f"{scalar_cast(dtype.name)}({value})"
    return f"{target} = {r.combine.format(target, value)}"


def _start(r: Reduction, acc: str, ndim: int) -> list[str]:
    """An accumulator's first value."""
    return [f"{acc} = {_init(r, ndim)}"]


def _accumulate(r: Reduction, acc: str, dtype: np.dtype) -> list[str]:
    """Fold v{slot} (cast to `dtype`) into `acc` through the op's fold function."""
    return [f"{acc} = fold_{r.op}({acc}, {scalar_cast(dtype.name)}(v{r.slot}))"]


def _extreme(r: Reduction) -> bool:
    return not math.isfinite(r.identity) and np.dtype(r.dtype).kind == "f"


def _init(r: Reduction, ndim: int) -> str:
    dtype = _accumulator_dtype(r, ndim).name
    return f"{scalar_cast(dtype)}({r.identity!r})".replace("inf", "np.inf")


def scalar_cast(dtype: str) -> str:
    return "np.bool_" if dtype == "bool" else f"np.{dtype}"


def _signature(s: Structure, partials) -> str:
    def array(dtype: str, ndim: int) -> str:
        name = "boolean" if dtype == "bool" else dtype
        return f"{name}[{', '.join([':'] * (ndim - 1) + ['::1'])}]"

    types = [array(d, max(1, sum(spans))) for d, spans in s.inputs]
    levels = _levels(s)
    for out in s.outputs:
        if isinstance(out, Reduction):
            types.append(array(out.dtype, max(1, s.ndim - len(out.axes))))
        else:
            types.append(array(_slot_dtype(s, out), 1 if levels[out] == PER_ROW else s.ndim))
    for _, r in partials:
        types.append(
            array(_accumulator_dtype(r, s.ndim).name, 1 if _form(r, s.ndim) == "all" else 2)
        )
    types += ["int64"] * (s.ndim + 1)
    return f"void({', '.join(types)})"


def _slot_dtype(s: Structure, slot: int) -> str:
    n = len(s.inputs)
    return s.inputs[slot][0] if slot < n else s.nodes[slot - n][3]


def _describe(s: Structure) -> str:
    axes = "ijk"[: s.ndim]

    def operand(k: int) -> str:
        dtype, spans = s.inputs[k]
        own = "".join(a for a, full in zip(axes, spans, strict=True) if full)
        return f"in{k}: {dtype}[{own}]" if own else f"in{k}: {dtype} scalar"

    threads = "parallel" if s.parallel else "one thread"
    lines = [f"domain [{axes}], {threads}; " + ", ".join(operand(k) for k in range(len(s.inputs)))]
    for k, (op, _, operands, dtype) in enumerate(s.nodes, start=len(s.inputs)):
        lines.append(f"v{k}: {dtype} = {op}({', '.join(f'v{o}' for o in operands)})")
    for k, out in enumerate(s.outputs):
        if isinstance(out, Reduction):
            lines.append(f"out{k} = {out.op}(v{out.slot}, axes={out.axes})")
        else:
            lines.append(f"out{k} = v{out}")
    return "\n".join(lines)


def _generator_version() -> str:
    """Hash of everything a cached kernel's machine code depends on besides its structure."""
    here = Path(__file__).parent
    h = hashlib.sha256(numba.__version__.encode())
    for name in ("fused.py", "scalar.py", "fastmath.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()[:16]


GENERATOR_VERSION = _generator_version()
