"""HIPS autograd's own test files, run against `tracegrad.numpy`: prints pass/fail counts per file.

    python benchmarks/autograd_tests.py /path/to/autograd [-k EXPR] [--failures N]

The test files import `autograd`, `autograd.numpy`, `autograd.numpy.random`,
`autograd.test_util`, ...; here those names resolve to a shim: `autograd.numpy` is
`tracegrad.numpy`, `autograd.numpy.random` NumPy's random module (as autograd's), and the
differential operators (`grad`, `jacobian`, `make_vjp`, `check_grads`, ...) are written over
tracegrad's `vjp`. Forward mode (`make_jvp`, autograd's "fwd" checks) is the derivative of a
VJP, which tracegrad's higher order gives. Nothing of autograd is copied: its tests run from the
checkout given, with its own conftest; its package is never imported. `--failures N` prints the
N most common first lines of the failures' errors, the main causes.
"""

from __future__ import annotations

import argparse
import builtins
import collections
import functools
import inspect
import os
import sys
import tempfile
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import tracegrad as tg
import tracegrad.numpy as tnp
from tracegrad.frontend import pytree
from tracegrad.frontend.tensor import Listeners

# --- values: tensors, and containers of them ------------------------------------------------------


def _is_leaf(x: Any) -> bool:
    return not isinstance(x, tuple | list | dict)


def _flatten(x: Any) -> tuple[list, Any]:
    return pytree.flatten(x, _is_leaf)


def _as_array(x: Any) -> Any:
    """A tensor for a number or array (float64 for Python floats, as NumPy's); containers
    recursively."""
    leaves, tree = _flatten(x)
    return pytree.unflatten(tree, [tnp.asarray(v) for v in leaves])


def _numpy(x: Any) -> Any:
    leaves, tree = _flatten(x)
    return pytree.unflatten(tree, [np.asarray(v) for v in leaves])


def _map(f: Callable, *xs: Any) -> Any:
    leaves, tree = _flatten(xs[0])
    others = [_flatten(x)[0] for x in xs[1:]]
    return pytree.unflatten(tree, [f(*vs) for vs in zip(leaves, *others, strict=True)])


def _randn(x: Any) -> Any:
    """Standard normal values of x's shape, from NumPy's global generator (which the tests
    seed), as autograd's vspace(x).randn()."""
    return _map(lambda v: np.random.randn(*np.shape(v)), x)


def _inner(a: Any, b: Any) -> float:
    pairs = zip(_flatten(a)[0], _flatten(b)[0], strict=True)
    return builtins.sum(float(np.sum(np.asarray(u) * np.asarray(v))) for u, v in pairs)


def _shape(x: Any) -> Any:
    return _map(np.shape, x)


# --- the differential operators -----------------------------------------------------------------


def make_vjp_unary(fun: Callable, x: Any) -> tuple[Callable, Any]:
    """(vjp, fun(x)) for x and fun(x) values or containers of values: tracegrad's vjp of the
    function from x's leaves to the concatenation of the result's leaves."""
    leaves, tree = _flatten(_as_array(x))
    out: dict = {}

    def flat_fun(*values: Any) -> Any:
        out["leaves"], out["tree"] = _flatten(fun(pytree.unflatten(tree, list(values))))
        parts = [tnp.asarray(v) for v in out["leaves"]]
        out["shapes"] = [p.shape for p in parts]
        return parts[0] if out["tree"] == "*" else tnp.concatenate([tnp.ravel(p) for p in parts])

    ans, vjp_fn = tg.vjp(flat_fun, *leaves)
    single = out["tree"] == "*"

    def vjp(g: Any) -> Any:
        parts = [tnp.ravel(tnp.asarray(v)) for v in _flatten(g)[0]]
        cotangent = tnp.asarray(g) if single else tnp.concatenate(parts)
        return pytree.unflatten(tree, list(vjp_fn(cotangent)))

    if single:
        return vjp, ans
    sizes = np.cumsum([0, *(int(np.prod(s)) for s in out["shapes"])])
    pieces = [tnp.reshape(ans[a:b], s) for a, b, s in zip(sizes, sizes[1:], out["shapes"],
                                                              strict=False)]  # fmt: skip
    return vjp, pytree.unflatten(out["tree"], pieces)


def make_jvp_unary(fun: Callable, x: Any) -> Callable:
    """jvp(v) = (fun(x), J v): the VJP is linear in its cotangent u, so J v is the gradient of
    <vjp(u), v> with respect to u."""

    def jvp(v: Any) -> tuple[Any, Any]:
        vjp, ans = make_vjp_unary(fun, x)
        zeros = _map(lambda a: tnp.zeros(np.shape(a), np.asarray(a).dtype), ans)
        tangent, _ = make_vjp_unary(lambda u: _inner_tensors(vjp(u), _as_array(v)), zeros)
        return ans, tangent(1.0)

    return jvp


def _inner_tensors(a: Any, b: Any) -> Any:
    pairs = zip(_flatten(a)[0], _flatten(b)[0], strict=True)
    return builtins.sum((tnp.sum(u * v) for u, v in pairs), tnp.asarray(0.0))


def unary_to_nary(unary_operator: Callable) -> Callable:
    """`op(fun, argnum)(*args)` from `op(unary_fun, x)`: x is args[argnum] (a tuple of them for
    a tuple of argnums)."""

    @functools.wraps(unary_operator)
    def nary_operator(fun: Callable, argnum: Any = 0, *op_args: Any, **op_kwargs: Any):
        @functools.wraps(fun)
        def nary_f(*args: Any, **kwargs: Any) -> Any:
            @functools.wraps(fun)
            def unary_f(x: Any) -> Any:
                new = list(args)
                for i, v in zip(*(([argnum], [x]) if isinstance(argnum, int) else (argnum, x)),
                                strict=True):  # fmt: skip
                    new[i] = v
                return fun(*new, **kwargs)

            x = args[argnum] if isinstance(argnum, int) else tuple(args[i] for i in argnum)
            return unary_operator(unary_f, x, *op_args, **op_kwargs)

        return nary_f

    return nary_operator


make_vjp = unary_to_nary(make_vjp_unary)
make_jvp = unary_to_nary(make_jvp_unary)


@unary_to_nary
def grad(fun: Callable, x: Any) -> Any:
    vjp, ans = make_vjp_unary(fun, x)
    if ans.size != 1:
        raise TypeError("Grad only applies to real scalar-output functions.")
    return vjp(tnp.ones(ans.shape, ans.dtype))


@unary_to_nary
def elementwise_grad(fun: Callable, x: Any) -> Any:
    vjp, ans = make_vjp_unary(fun, x)
    return vjp(_map(lambda a: np.ones(np.shape(a)), ans))


@unary_to_nary
def deriv(fun: Callable, x: Any) -> Any:
    return make_jvp_unary(fun, x)(_map(np.ones_like, _numpy(x)))[1]


@unary_to_nary
def value_and_grad(fun: Callable, x: Any) -> tuple[Any, Any]:
    vjp, ans = make_vjp_unary(fun, x)
    return ans, vjp(tnp.ones(ans.shape, ans.dtype))


@unary_to_nary
def grad_and_aux(fun: Callable, x: Any) -> tuple[Any, Any]:
    aux = []
    vjp, ans = make_vjp_unary(lambda v: aux.append(fun(v)[1]) or fun(v)[0], x)
    return vjp(tnp.ones(ans.shape, ans.dtype)), aux[0]


@unary_to_nary
def jacobian(fun: Callable, x: Any) -> Any:
    vjp, ans = make_vjp_unary(fun, x)
    rows = [vjp(tnp.asarray(np.eye(ans.size)[i].reshape(ans.shape))) for i in range(ans.size)]
    return tnp.reshape(tnp.stack(rows), ans.shape + np.shape(_numpy(x)))


@unary_to_nary
def holomorphic_grad(fun: Callable, x: Any) -> Any:
    raise NotImplementedError("holomorphic_grad: tracegrad has no complex numbers")


def hessian(fun: Callable, argnum: int = 0) -> Callable:
    return jacobian(jacobian(fun, argnum), argnum)


@unary_to_nary
def make_hvp(fun: Callable, x: Any) -> tuple[Callable, Any]:
    return make_vjp_unary(grad(fun), x)


def hessian_tensor_product(fun: Callable, argnum: int = 0) -> Callable:
    gradient = grad(fun, argnum)

    def dot_gradient(*args: Any) -> Any:
        *rest, vector = args
        return tnp.tensordot(gradient(*rest), vector, np.ndim(vector))

    return grad(dot_gradient, argnum)


def tensor_jacobian_product(fun: Callable, argnum: int = 0) -> Callable:
    def dot_fun(*args: Any) -> Any:
        *rest, vector = args
        return tnp.tensordot(vector, fun(*rest), np.ndim(vector))

    return jacobian(dot_fun, argnum)


def make_ggnvp(f: Callable, g: Callable | None = None, f_argnum: int = 0) -> Callable:
    """The generalized Gauss-Newton product J_f^T H_g J_f v."""
    g = g or (lambda y: 0.5 * tnp.sum(y**2, axis=-1))

    @unary_to_nary
    def ggnvp_maker(f: Callable, x: Any) -> Callable:
        f_vjp, f_x = make_vjp_unary(f, x)
        g_hvp, _ = make_vjp_unary(grad(g), f_x)
        return lambda v: f_vjp(g_hvp(make_jvp_unary(f, x)(v)[1]))

    return ggnvp_maker(f, f_argnum)


def grad_named(fun: Callable, argname: str) -> Callable:
    return grad(fun, list(inspect.signature(fun).parameters).index(argname))


def multigrad_dict(fun: Callable) -> Callable:
    names = list(inspect.signature(fun).parameters)

    def gradients(*args: Any, **kwargs: Any) -> dict:
        bound = inspect.signature(fun).bind(*args, **kwargs)
        values = tuple(bound.arguments[n] for n in names)
        grads = grad(lambda *vs: fun(*vs), tuple(range(len(names))))(*values)
        return dict(zip(names, grads, strict=True))

    return gradients


def checkpoint(fun: Callable) -> Callable:
    return fun  # recomputation is a memory trade; the values are the same


# --- test_util ---------------------------------------------------------------------------------

TOL = RTOL = EPS = 1e-6


def scalar_close(a: Any, b: Any) -> bool:
    a, b = float(a), float(b)
    return abs(a - b) < TOL or abs(a - b) / abs(a + b) < RTOL


def _numerical_jvp(f: Callable, x: Any) -> Callable:
    def jvp(v: Any) -> Any:
        up = f(_map(lambda a, d: np.asarray(a) + d * EPS / 2, _numpy(x), v))
        down = f(_map(lambda a, d: np.asarray(a) - d * EPS / 2, _numpy(x), v))
        return _map(lambda u, w: (np.asarray(u) - np.asarray(w)) / EPS, _numpy(up), _numpy(down))

    return jvp


def check_vjp(f: Callable, x: Any) -> None:
    vjp, y = make_vjp_unary(f, x)
    x_v, y_v = _randn(_numpy(x)), _randn(_numpy(y))
    vjp_y = vjp(y_v)
    assert _shape(_numpy(vjp_y)) == _shape(_numpy(x)), "VJP shape mismatch"
    exact, numeric = _inner(x_v, vjp_y), _inner(y_v, _numerical_jvp(f, x)(x_v))
    name = getattr(f, "__name__", repr(f))
    assert scalar_close(numeric, exact), (
        f"Derivative (VJP) check of {name} failed with arg {x}:\nanalytic: {exact}\n"
        f"numeric:  {numeric}"
    )


def check_jvp(f: Callable, x: Any) -> None:
    v = _randn(_numpy(x))
    check_equivalent(make_jvp_unary(f, x)(v)[1], _numerical_jvp(f, x)(v))


def check_equivalent(x: Any, y: Any) -> None:
    assert _shape(_numpy(x)) == _shape(_numpy(y)), f"VSpace mismatch:\nx: {x}\ny: {y}"
    v = _randn(_numpy(x))
    assert scalar_close(_inner(x, v), _inner(y, v)), f"Value mismatch:\nx: {x}\ny: {y}"


@unary_to_nary
def check_grads(f: Callable, x: Any, modes: Any = None, order: int = 2) -> None:
    modes = ["fwd", "rev"] if modes is None else modes
    if "fwd" in modes:
        check_jvp(f, x)
        if order > 1:
            v = _randn(_numpy(x))
            jvp_f = lambda x, v: make_jvp_unary(f, x)(v)[1]  # noqa: E731
            jvp_f.__name__ = f"jvp_{getattr(f, '__name__', 'f')}"
            check_grads(jvp_f, (0, 1), modes, order=order - 1)(x, v)
    if "rev" in modes:
        check_vjp(f, x)
        if order > 1:
            v = _randn(_numpy(f(x)))
            vjp_f = lambda x, v: make_vjp_unary(f, x)[0](v)  # noqa: E731
            vjp_f.__name__ = f"vjp_{getattr(f, '__name__', 'f')}"
            check_grads(vjp_f, (0, 1), modes, order=order - 1)(x, v)


def combo_check(fun: Callable, *args: Any, **kwargs: Any) -> Callable:
    import itertools

    def check(*arg_lists: Any, **kwarg_lists: Any) -> None:
        choices = [[(k, v) for v in vs] for k, vs in kwarg_lists.items()]
        for values in itertools.product(*arg_lists):
            for options in itertools.product(*choices):
                check_grads(fun, *args, **kwargs)(*values, **dict(options))

    return check


# --- extend: user-defined primitives as ops of tracegrad's table ---------------------------------

primitive_vjps: dict = {}  # primitive -> {argnum: vjp maker}, as autograd's registry


class Primitive:
    """autograd's `@primitive`: on tensors, one op of tracegrad's table (`defprimitive`) whose
    VJP rules are the makers `defvjp` gave; the arguments that are not tensors are attributes."""

    def __init__(self, f: Callable) -> None:
        functools.update_wrapper(self, f)
        self.f = f
        primitive_vjps[self] = {}
        self.op = tg.defprimitive(f"autograd_{f.__name__}", self._impl, vjp=self._vjp,
                                  shape=self._shape, saves="in+out")  # fmt: skip

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        at = tuple(i for i, a in enumerate(args) if isinstance(a, tg.Tensor))
        if not at:
            return self.f(*args, **kwargs)
        static = tuple((i, a) for i, a in enumerate(args) if i not in at)
        return self.op(*(args[i] for i in at), at=at, static=static, kwargs=tuple(kwargs.items()))

    def _args(self, values: Any, at: tuple, static: tuple) -> list:
        args = dict(static) | dict(zip(at, values, strict=True))
        return [args[i] for i in range(len(args))]

    def _impl(self, *values: Any, at: tuple, static: tuple, kwargs: tuple) -> Any:
        return self.f(*self._args(values, at, static), **dict(kwargs))

    def _shape(self, *ins: Any, at: tuple, static: tuple, kwargs: tuple) -> tuple:
        zeros = [np.zeros(x.shape, x.dtype) for x in ins]
        out = np.asarray(self._impl(*zeros, at=at, static=static, kwargs=kwargs))
        return out.shape, out.dtype

    def _vjp(self, i: int, g: Any, out: Any, *ins: Any, at: tuple, static: tuple, kwargs: tuple):
        maker = primitive_vjps[self].get(at[i])
        if maker is None:
            raise NotImplementedError(f"VJP of {self.f.__name__} wrt argument {at[i]} not defined")
        return maker(out, *self._args(ins, at, static), **dict(kwargs))(g)


def defvjp(fun: Primitive, *makers: Callable | None, argnums: Any = None) -> None:
    for argnum, maker in zip(argnums or range(len(makers)), makers, strict=True):
        if maker is not None:
            primitive_vjps[fun][argnum] = maker


def flatten(value: Any) -> tuple[Any, Callable]:
    """autograd.misc.flatten: the leaves raveled into one vector, and the inverse."""
    leaves, tree = _flatten(value)
    arrays = [tnp.asarray(v) for v in leaves]
    shapes = [a.shape for a in arrays]
    bounds = np.cumsum([0, *(int(np.prod(shp)) for shp in shapes)])
    vector = tnp.concatenate([tnp.ravel(a) for a in arrays]) if arrays else tnp.zeros(0)

    def unflatten(vector: Any) -> Any:
        parts = [tnp.reshape(vector[a:b], shp) for a, b, shp in zip(bounds, bounds[1:], shapes,
                                                                   strict=False)]  # fmt: skip
        return pytree.unflatten(tree, [p.item() if p.ndim == 0 else p for p in parts])

    return vector, unflatten


def const_graph(fun: Callable, *args: Any, **kwargs: Any) -> Callable:
    """`fun` with leading arguments fixed (autograd also caches its graph: a speed-up only)."""
    return functools.partial(fun, *args, **kwargs)


# --- the modules ---------------------------------------------------------------------------------


def _isinstance(obj: Any, classes: Any) -> bool:
    """autograd's isinstance sees through its boxes: a tensor is an ndarray here."""
    if isinstance(obj, tg.Tensor):
        classes = classes if isinstance(classes, tuple) else (classes,)
        return np.ndarray in classes or any(isinstance(obj, c) for c in classes)
    return isinstance(obj, classes)


def _isbox(x: Any) -> bool:
    """A value being differentiated: a tensor while a gradient is being recorded."""
    return isinstance(x, tg.Tensor) and bool(Listeners.recording)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def install() -> None:
    """Put the shim in sys.modules under autograd's names."""
    operators = {name: value for name, value in globals().items() if name in (
        "grad", "elementwise_grad", "deriv", "value_and_grad", "grad_and_aux", "jacobian",
        "hessian", "holomorphic_grad", "make_vjp", "make_jvp", "make_hvp", "make_ggnvp",
        "hessian_tensor_product", "tensor_jacobian_product", "grad_named", "multigrad_dict",
        "checkpoint")}  # fmt: skip
    operators.update(hessian_vector_product=hessian_tensor_product,
                     vector_jacobian_product=tensor_jacobian_product)  # fmt: skip
    containers = dict(isinstance=_isinstance, list=list, tuple=tuple, dict=dict, type=type)
    modules = {
        "autograd": _module("autograd", **operators, **containers),
        "autograd.numpy": tnp,
        "autograd.numpy.random": tnp.random,
        "autograd.numpy.linalg": tnp.linalg,
        "autograd.builtins": _module("autograd.builtins", **containers),
        "autograd.differential_operators": _module("autograd.differential_operators", **operators),
        "autograd.wrap_util": _module("autograd.wrap_util", unary_to_nary=unary_to_nary),
        "autograd.core": _module(
            "autograd.core",
            make_vjp=make_vjp_unary,
            make_jvp=make_jvp_unary,
            primitive_vjps=primitive_vjps,
            primitive=Primitive,
            defvjp=defvjp,
        ),  # fmt: skip
        "autograd.extend": _module("autograd.extend", primitive=Primitive, defvjp=defvjp),
        "autograd.misc": _module("autograd.misc", flatten=flatten, const_graph=const_graph),
        "autograd.tracer": _module("autograd.tracer", isbox=_isbox, primitive=Primitive),
        "autograd.test_util": _module(
            "autograd.test_util",
            check_grads=check_grads,
            check_vjp=check_vjp,
            check_jvp=check_jvp,
            check_equivalent=check_equivalent,
            combo_check=combo_check,
            scalar_close=scalar_close,
        ),  # fmt: skip
    }
    for name, module in modules.items():
        sys.modules[name] = module
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, module)


# --- running -------------------------------------------------------------------------------------


class Tally:
    """A pytest plugin counting outcomes per file and the first lines of the failures."""

    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.causes: collections.Counter = collections.Counter()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.counts[Path(report.nodeid).name]["errors"] += 1
            self.causes[_first_error_line(report)] += 1

    def pytest_runtest_logreport(self, report: Any) -> None:
        file = Path(report.nodeid.split("::")[0]).name
        if report.when == "call" and report.passed:
            self.counts[file]["passed"] += 1
        elif report.failed:
            self.counts[file]["failed"] += 1
            self.causes[_first_error_line(report)] += 1
        elif report.skipped and report.when == "setup":
            self.counts[file]["skipped"] += 1


def _first_error_line(report: Any) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:150] if text.strip() else "?"


def run(checkout: Path, select: str | None, failures: int) -> dict:
    import pytest

    install()
    tests = checkout / "tests"
    files = sorted(str(p) for p in tests.glob("test_*.py"))
    tally = Tally()
    with tempfile.TemporaryDirectory() as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")  # not autograd's options (coverage, xdist)
        args = ["-q", "-p", "no:cacheprovider", "-c", str(ini), "--rootdir", str(tests),
                "--no-header", "--continue-on-collection-errors", *files]  # fmt: skip
        if select:
            args += ["-k", select]
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                pytest.main(args, plugins=[tally])
            finally:
                sys.stdout = stdout
    total = collections.Counter()
    print(f"{'file':26} {'passed':>7} {'failed':>7} {'errors':>7} {'skipped':>8}")
    for file in sorted(tally.counts):
        c = tally.counts[file]
        total.update(c)
        print(f"{file:26} {c['passed']:7} {c['failed']:7} {c['errors']:7} {c['skipped']:8}")
    print(f"{'total':26} {total['passed']:7} {total['failed']:7} {total['errors']:7} "
          f"{total['skipped']:8}")  # fmt: skip
    if failures:
        print(f"\nthe {failures} most common causes of failure:")
        for cause, n in tally.causes.most_common(failures):
            print(f"{n:5}  {cause}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path, help="a checkout of HIPS autograd")
    parser.add_argument("-k", dest="select", help="pytest's -k expression")
    parser.add_argument("--failures", type=int, default=0, metavar="N",
                        help="print the N most common first lines of the failures")  # fmt: skip
    args = parser.parse_args()
    if not (args.checkout / "tests").is_dir():
        parser.error(f"{args.checkout} has no tests/ folder")
    run(args.checkout.resolve(), args.select, args.failures)


if __name__ == "__main__":
    main()
