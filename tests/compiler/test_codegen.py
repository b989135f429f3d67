"""The generated plan's statements: cheaper spellings of NumPy calls compute what the op's own
function computes, and a traceback names the plan's line."""

import threading

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler.codegen import compile_source


def views_and_reductions(x, c):
    y = (x.T * 2.0).reshape(-1, 4)  # transpose and reshape of arrays: their methods
    z = tg.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3)).T  # a constant's view
    return (
        y.sum(axis=1, keepdims=True),  # np.add.reduce
        y.max(),  # np.maximum.reduce
        y.min(),
        (y > 0).sum(axis=0),  # of bools: int64 counts, as np.sum's
        (c * 1.5).prod(axis=1),
        z.sum(axis=0) + x[0, :2].sum(),
        x[..., 1:3] * x[2, 1:3],  # basic indexes: subscripts
    )


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_cheaper_spellings_compute_what_numpy_functions_do(backend):
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    c = tg.tensor(rng.integers(-3, 4, (3, 5)).astype(np.int32))
    traced = tg.trace(views_and_reductions, backend=backend)
    for _ in range(2):
        got, want = traced(x, c), views_and_reductions(x, c)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g.numpy(), w.numpy())
    source = traced.latest.source
    assert ".transpose((1, 0))" in source and "np.add.reduce(" in source
    assert "np.maximum.reduce(" in source and "np.multiply.reduce(" in source
    assert "np.sum(" not in source and "np.transpose(" not in source
    assert "[(Ellipsis, slice(1, 3, None))]" in source and "getitem" not in source


def test_a_sum_around_a_kept_axis_keeps_sums_own_function():
    """Batch norm's (0, 2, 3) sum of a large array is a matrix-vector product in sum's own
    function, which the plan calls rather than np.add.reduce; a small one is spelt cheaply."""
    x = tg.tensor(np.random.default_rng(0).standard_normal((64, 8, 16, 16)).astype(np.float32))
    traced = tg.trace(lambda x: (x.sum((0, 2, 3)), x[:2].sum((0, 2, 3))), backend="numpy")
    got, want = traced(x), (x.sum((0, 2, 3)), x[:2].sum((0, 2, 3)))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert "= sum_impl0(a, " in traced.latest.source and "np.add.reduce(c, " in traced.latest.source


def test_a_plans_calls_map_no_memory_whatever_its_frames_size():
    """CPython maps a fresh chunk of its frame stack (16 KiB) for a call whose frame does not fit
    in the last one, and unmaps it on return. A plan's frame holds a local per value: one that
    filled a thread's first chunk to near its end made each of its calls into Python map a
    chunk and fault it in. Plans of every size around a chunk's, each run on a fresh thread:
    their calls fault no pages in."""
    resource = pytest.importorskip("resource")
    if not hasattr(resource, "RUSAGE_THREAD"):
        pytest.skip("needs per-thread page fault counts (Linux)")
    calls = 200

    def faults(locals_: int) -> int:
        lines = ["def plan(f):", *(f"    v{i} = 0" for i in range(locals_ - calls))]
        lines += [f"    w{i} = f()" for i in range(calls)] + ["    return w0"]
        run = compile_source("\n".join(lines) + "\n", {}, "plan")
        counts = []

        def on_a_thread() -> None:
            run(int)  # a first call may map what later ones reuse
            before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
            run(lambda: 0)
            counts.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

        thread = threading.Thread(target=on_a_thread)
        thread.start()
        thread.join()
        return counts[0]

    worst = max(faults(n) for n in range(1700, 2100, 8))
    assert worst < calls // 4
