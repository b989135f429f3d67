"""PyTorch's public names that code meets beyond the common ones (`torch._functions`, Tensor
methods such as `index_reduce` and `apply_`, the inference and autocast switches, the files
PyTorch keeps functions in), each against PyTorch where it is installed, else against what the
name must mean."""

from __future__ import annotations

import gc
import importlib
import warnings

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as ttorch
from tests.conftest import check_grad

rng = np.random.default_rng(0)


def torch_or_skip():
    return pytest.importorskip("torch", reason="PyTorch is the oracle here; not installed")


def same(ours, theirs, tol=1e-12):
    if isinstance(theirs, list | tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            same(a, b, tol)
        return
    a, b = np.asarray(ours.numpy()), theirs.detach().numpy()
    assert a.shape == b.shape and a.dtype == b.dtype
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


FUNCTIONS = {
    "row_stack": lambda t, x: t.row_stack([x, x]),
    "frobenius_norm": lambda t, x: t.frobenius_norm(x, dim=(0, 1)),
    "nuclear_norm": lambda t, x: t.nuclear_norm(x),
    "nuclear_norm keepdim": lambda t, x: t.nuclear_norm(x, True),
    "constant_pad_nd": lambda t, x: t.constant_pad_nd(x, [1, 2, 0, 1], 0.5),
    "unsafe_split": lambda t, x: t.unsafe_split(x, 2, 1),
    "unsafe_chunk": lambda t, x: t.unsafe_chunk(x, 2, 0),
    "unsafe_split_with_sizes": lambda t, x: t.unsafe_split_with_sizes(x, [1, 3], 1),
    "cond": lambda t, x: t.cond(x.sum() > 0, lambda a: a * 2, lambda a: a - 1, (x,)),
    "while_loop": lambda t, x: t.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2),
                                            (0, x))[1],  # fmt: skip
    "view_copy": lambda t, x: t.view_copy(x, (4, 3)),
    "permute_copy": lambda t, x: t.permute_copy(x, (1, 0)),
    "split_copy": lambda t, x: t.split_copy(x, 2, 1),
    "unbind_copy": lambda t, x: t.unbind_copy(x, 0),
    "t_copy": lambda t, x: t.t_copy(x),
    "diagonal_copy": lambda t, x: t.diagonal_copy(x, 1),
    "expand_copy": lambda t, x: t.expand_copy(x[:1], (5, 4)),
    "index_reduce prod": lambda t, x: x.index_reduce(0, t.tensor([0, 2, 0]), x * 2, "prod"),
    "index_reduce mean": lambda t, x: x.index_reduce(1, t.tensor([3, 3, 0, 1]), x, "mean"),
    "index_reduce amax no self": lambda t, x: x.index_reduce(0, t.tensor([1, 1, 2]), x, "amax",
                                                             include_self=False),  # fmt: skip
    "index_reduce amin": lambda t, x: x.index_reduce(-1, t.tensor([0, 0, 1, 1]), x - 1, "amin"),
    "stft method": lambda t, x: t.view_as_real(x.reshape(-1).stft(4, return_complex=True)),
    "dim_order": lambda t, x: t.tensor(x.dim_order()),
}  # fmt: skip


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_and_methods_match_pytorch(name):
    torch = torch_or_skip()
    x = rng.standard_normal((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # index_reduce is "beta" in PyTorch
        same(FUNCTIONS[name](ttorch, ttorch.tensor(x)), FUNCTIONS[name](torch, torch.tensor(x)))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_gradients_match_finite_differences(reduce):
    x, s = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    index = tg.tensor([0, 3, 3, 1, 0])
    check_grad(lambda a, b: a.index_reduce(0, index, b, reduce), x, s)
    check_grad(lambda a, b: a.index_reduce(0, index, b, reduce, include_self=False), x, s)


def test_index_reduce_in_place_and_its_refusal():
    x = tg.zeros(2, 2)
    assert x.index_reduce_(0, tg.tensor([1]), tg.ones(1, 2) * 3, "amax") is x
    assert x.tolist() == [[0.0, 0.0], [3.0, 3.0]]
    with pytest.raises(ValueError, match="index_reduce: reduce must be"):
        x.index_reduce(0, tg.tensor([1]), tg.ones(1, 2), "sum")


def test_range_is_inclusive_and_warns_as_pytorch():
    torch = torch_or_skip()
    for args in [(1, 4), (0, 1, 0.25), (-1, 5), (1, 2, 0.3)]:
        with pytest.warns(UserWarning, match="torch.range is deprecated"):
            ours = ttorch.range(*args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same(ours, torch.range(*args), 1e-6)


def test_set_default_tensor_type_sets_the_default_float_dtype():
    try:
        with pytest.warns(UserWarning, match="deprecated"):
            ttorch.set_default_tensor_type(ttorch.DoubleTensor)
        assert ttorch.ones(1).dtype == ttorch.float64 and ttorch.tensor([1.5]).dtype == np.float64
        with pytest.warns(UserWarning):
            ttorch.set_default_tensor_type("torch.FloatTensor")
        assert ttorch.ones(1).dtype == ttorch.float32
        with pytest.raises(RuntimeError, match="no CUDA"), pytest.warns(UserWarning):
            ttorch.set_default_tensor_type("torch.cuda.FloatTensor")
        with pytest.raises(TypeError, match="floating-point"), pytest.warns(UserWarning):
            ttorch.set_default_tensor_type(ttorch.LongTensor)
    finally:
        tg.set_default_dtype(np.float32)


def test_poisson_and_binomial_draw_their_laws_and_follow_a_generator():
    rates = ttorch.tensor([0.5, 4.0, 30.0]).repeat(20000, 1)
    draws = ttorch.poisson(rates)
    assert draws.dtype == np.float32 and (draws.numpy() == np.round(draws.numpy())).all()
    np.testing.assert_allclose(draws.mean(0).numpy(), [0.5, 4.0, 30.0], rtol=0.03)
    np.testing.assert_allclose(draws.var(0).numpy(), [0.5, 4.0, 30.0], rtol=0.06)
    n, p = ttorch.tensor([5.0, 40.0, 100.0]).repeat(20000, 1), ttorch.tensor([0.3, 0.5, 0.9])
    b = ttorch.binomial(n, p.expand(20000, 3))
    assert (b.numpy() <= n.numpy()).all() and (b.numpy() >= 0).all()
    np.testing.assert_allclose(b.mean(0).numpy(), [1.5, 20.0, 90.0], rtol=0.03)
    one, two = (ttorch.poisson(rates[:5], generator=ttorch.Generator().manual_seed(3))
                for _ in range(2))  # fmt: skip
    assert one.tolist() == two.tolist()


def test_inference_mode_is_reported_and_nests_as_pytorch():
    x = ttorch.ones(2, requires_grad=True)
    assert not ttorch.is_inference_mode_enabled()
    with ttorch.inference_mode():
        assert ttorch.is_inference_mode_enabled() and not (x * 2).requires_grad
        with ttorch.inference_mode(False):
            assert not ttorch.is_inference_mode_enabled() and (x * 2).requires_grad
        assert ttorch.is_inference_mode_enabled() and not ttorch.is_grad_enabled()

    @ttorch.inference_mode
    def bare():
        return ttorch.is_inference_mode_enabled(), (x * 2).requires_grad

    @ttorch.autograd.grad_mode.inference_mode()
    def called():
        return bare()

    assert bare() == called() == (True, False)
    assert not ttorch.is_inference_mode_enabled() and ttorch.is_grad_enabled()
    assert not ttorch.is_inference(x) and not x.is_inference()


def test_autocast_switches_answer_that_nothing_is_lowered():
    ttorch.set_autocast_enabled(True)
    ttorch.set_autocast_cpu_dtype(ttorch.bfloat16)
    assert not ttorch.is_autocast_cpu_enabled() and not ttorch.is_autocast_enabled()
    assert ttorch.get_autocast_cpu_dtype() == ttorch.get_autocast_gpu_dtype() == ttorch.float32
    assert ttorch.autocast_increment_nesting() == ttorch.autocast_decrement_nesting() == 0


def test_symbolic_size_helpers_are_pythons_on_ints():
    assert ttorch.sym_max(2, 5) == 5 and ttorch.sym_min(2, 5) == 2 and ttorch.sym_not(0)
    assert ttorch.sym_int(-2.7) == -2 and ttorch.sym_float(3) == 3.0
    assert ttorch.sym_ite(False, "a", "b") == "b" and ttorch.sym_sum([1, 2, 3]) == 6
    assert ttorch.sym_sqrt(9) == 3.0


def test_small_queries_and_spellings():
    x = ttorch.ones(2, 3)
    assert ttorch.get_device(x) == -1 and ttorch.is_signed(x) and not ttorch.is_conj(x)
    assert not ttorch.is_neg(x) and not x.is_pinned() and not ttorch.is_vulkan_available()
    assert ttorch.is_storage(x.untyped_storage()) and not ttorch.is_storage(x)
    assert ttorch.empty_strided((2, 3), (1, 2)).shape == (2, 3)
    assert x.new_empty_strided((4,), (1,), dtype=ttorch.float64).dtype == np.float64
    with pytest.raises(RuntimeError, match="mismatch in length of strides"):
        ttorch.empty_strided((2, 3), (1,))
    assert issubclass(ttorch.cuda.OutOfMemoryError, RuntimeError)
    assert ttorch.OutOfMemoryError is ttorch.cuda.OutOfMemoryError
    assert ttorch.GradScaler is ttorch.amp.GradScaler and ttorch.xpu.device_count() == 0
    assert not ttorch.mps.is_available() and not ttorch.xpu.is_available()


def test_apply_and_map_run_python_on_each_element_in_place():
    x = ttorch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert x.apply_(lambda v: v * v) is x and x.tolist() == [[1, 4], [9, 16]]
    x.map_(ttorch.tensor([10.0, 20.0]), lambda a, b: a + b)
    assert x.tolist() == [[11, 24], [19, 36]]
    x.map2_(ttorch.ones(2, 2), ttorch.full((2, 2), 2.0), lambda a, b, c: a - b * c)
    assert x.tolist() == [[9, 22], [17, 34]] and x.dtype == np.float32


def test_private_helpers_code_imports():
    a, b = ttorch.randn(2, 3), ttorch.randn(4)
    flat = ttorch._utils._flatten_dense_tensors([a, b])
    assert flat.shape == (10,)
    back = ttorch._utils._unflatten_dense_tensors(flat, [a, b])
    assert [t.shape for t in back] == [(2, 3), (4,)] and back[0].tolist() == a.tolist()
    assert list(ttorch._utils._accumulate([1, 2, 3])) == [1, 3, 6]
    assert ttorch._utils._get_device_index("cpu", allow_cpu=True) == -1
    assert ttorch._utils._import_dotted_name("tracegrad.torch.nn.Linear") is ttorch.nn.Linear


def test_weak_id_dictionary_holds_tensors_by_identity():
    d = ttorch.utils.weak.WeakIdKeyDictionary()
    a, b = ttorch.ones(2), ttorch.ones(2)  # equal values, two keys
    d[a], d[b] = 1, 2
    assert d[a] == 1 and d[b] == 2 and a in d and len(d) == 2
    del a
    gc.collect()
    assert len(d) == 1 and list(d.values()) == [2]


def test_deprecated_spellings_warn_and_do_the_same():
    p = ttorch.nn.Parameter(ttorch.ones(3))
    p.grad = ttorch.full((3,), 4.0)
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        norm = ttorch.nn.utils.clip_grad_norm([p], 1.0)
    assert float(norm) == pytest.approx(np.sqrt(48)) and float(p.grad.norm()) == pytest.approx(1)
    lin = ttorch.nn.Linear(2, 1)
    params = {"weight": ttorch.ones(1, 2), "bias": ttorch.zeros(1)}
    with pytest.warns(FutureWarning, match="torch.func.functional_call"):
        out = ttorch.nn.utils.stateless.functional_call(lin, params, (ttorch.ones(1, 2),))
    assert out.tolist() == [[2.0]]
    assert ttorch.nn.utils.skip_init(ttorch.nn.Linear, 3, 4).weight.shape == (4, 3)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_conv_gradient_functions_are_adjoint_to_the_convolution(dims):
    """<conv(x, w), g> = <x, conv_input(g)> = <w, conv_weight(x, g)>: each function is the
    convolution's transpose in its argument, checked by that identity in float64."""
    conv = getattr(ttorch.nn.functional, f"conv{dims}d")
    grad = ttorch.nn.grad
    x = ttorch.tensor(rng.standard_normal((2, 4) + (7,) * dims))
    w = ttorch.tensor(rng.standard_normal((6, 2) + (3,) * dims))
    options = {"stride": 2, "padding": 1, "dilation": 1, "groups": 2}
    g = ttorch.tensor(rng.standard_normal(conv(x, w, None, **options).shape))
    total = float((conv(x, w, None, **options) * g).sum())
    gx = getattr(grad, f"conv{dims}d_input")(x.shape, w, g, **options)
    gw = getattr(grad, f"conv{dims}d_weight")(x, w.shape, g, **options)
    assert float((x * gx).sum()) == pytest.approx(total, rel=1e-12)
    assert float((w * gw).sum()) == pytest.approx(total, rel=1e-12)


def test_conv_gradient_functions_match_pytorch():
    torch = torch_or_skip()
    x, w = rng.standard_normal((2, 4, 9, 9)), rng.standard_normal((6, 2, 3, 3))
    g = rng.standard_normal((2, 6, 5, 5))

    def both(lib):
        t = lib.tensor
        gx = lib.nn.grad.conv2d_input(x.shape, t(w), t(g), stride=2, padding=1, groups=2)
        return [gx, lib.nn.grad.conv2d_weight(t(x), w.shape, t(g), stride=2, padding=1, groups=2)]

    same(both(ttorch), both(torch))


SYMBOLIC = "tracegrad.torch.fx.experimental.symbolic_shapes"


def test_symbolic_shape_guards_are_truth_of_concrete_sizes():
    shapes = importlib.import_module(SYMBOLIC)
    assert shapes.guard_size_oblivious(3 == 3) and not shapes.statically_known_true(0)
    assert shapes.is_concrete_int(4) and not shapes.has_free_symbols(4)
    assert shapes.free_symbols(4) == set() and shapes.definitely_false(0)


INTS, BOOLS = np.arange(-3, 9).reshape(3, 4), (np.arange(12).reshape(3, 4) % 3) == 0
NANS = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, 2.0]])
IMAGE = np.sin(np.arange(96.0)).reshape(2, 6, 8)  # one unbatched (C, H, W) image
EDGES = {  # what a sweep of Tensor methods and torch functions against PyTorch found differing
    "copysign of ints": lambda t: t.tensor(INTS).copysign(t.tensor(-1)),
    "logit of ints": lambda t: t.tensor(INTS).logit(),
    "mvlgamma of ints": lambda t: (t.tensor(INTS) + 4).mvlgamma(2),
    "cov of ints": lambda t: t.tensor(INTS).cov(),
    "corrcoef of ints": lambda t: t.tensor(INTS).corrcoef(),
    "special of ints": lambda t: t.special.ndtr(t.tensor(INTS)),
    "nan_to_num of ints": lambda t: t.tensor(INTS).nan_to_num(),
    "nan_to_num of bools": lambda t: t.tensor(BOOLS).nan_to_num(1.0),
    "nansum of ints": lambda t: t.tensor(INTS).nansum(0),
    "square of bools": lambda t: t.tensor(BOOLS).square(),
    "diff of bools": lambda t: t.tensor(BOOLS).diff(dim=1),
    "isfinite of bools": lambda t: t.tensor(BOOLS).isfinite(),
    "isfinite of ints": lambda t: t.tensor(INTS).isfinite(),
    "min of bools by dim": lambda t: t.tensor(BOOLS).min(1),
    "broadcast_to an int": lambda t: t.tensor(2.5).broadcast_to(3),
    "broadcast_to with -1": lambda t: t.tensor(INTS).broadcast_to((2, -1, 4)),
    "softmax of 0-d": lambda t: t.tensor(1.5).softmax(0),
    "nonzero of 0-d": lambda t: t.tensor(1.5).nonzero(),
    "nonzero of 0-d zero": lambda t: t.tensor(0.0).nonzero(),
    "H of 0-d": lambda t: t.tensor(1.5).H,
    "mT of 0-d": lambda t: t.tensor(1.5).mT,
    "max_pool1d unbatched": lambda t: t.nn.functional.max_pool1d(t.tensor(INTS * 1.0), 2),
    "avg_pool1d unbatched": lambda t: t.nn.functional.avg_pool1d(t.tensor(INTS * 1.0), 2),
    "adaptive_max_pool1d unbatched": lambda t: t.nn.functional.adaptive_max_pool1d(
        t.tensor(INTS * 1.0), 3, True),
    "lp_pool1d unbatched": lambda t: t.nn.functional.lp_pool1d(t.tensor(INTS * 1.0), 2, 2),
    "max_pool2d unbatched": lambda t: t.nn.MaxPool2d(2, return_indices=True)(t.tensor(IMAGE)),
    "avg_pool2d unbatched": lambda t: t.nn.AvgPool2d(3, 2, 1)(t.tensor(IMAGE)),
    "adaptive pools 2d unbatched": lambda t: (t.nn.AdaptiveAvgPool2d(3)(t.tensor(IMAGE)),
                                              t.nn.AdaptiveMaxPool2d(2)(t.tensor(IMAGE))),
    "lp_pool2d unbatched": lambda t: t.nn.LPPool2d(2, 2)(t.tensor(IMAGE)),
    "conv3d unbatched": lambda t: t.nn.functional.conv3d(t.tensor(IMAGE[None]),
                                                         t.ones(3, 1, 2, 2, 2, dtype=t.float64)),
    "pools 3d unbatched": lambda t: (t.nn.MaxPool3d(2)(t.tensor(IMAGE[None])),
                                     t.nn.AvgPool3d(2)(t.tensor(IMAGE[None])),
                                     t.nn.AdaptiveMaxPool3d(1)(t.tensor(IMAGE[None]))),
    "alias_copy": lambda t: t.alias_copy(t.tensor(INTS)),
    "isclose of bools": lambda t: t.isclose(t.tensor(BOOLS), t.tensor(BOOLS[::-1].copy())),
    "xlogy of float16 and ints": lambda t: t.xlogy(t.tensor(INTS * 0.5).half(), t.tensor(INTS)),
    "ldexp of float16 and ints": lambda t: t.ldexp(t.tensor(INTS * 0.5).half(), t.tensor(INTS)),
    "norm over a nan": lambda t: t.stack([t.tensor(NANS).norm(), t.linalg.norm(t.tensor(NANS)),
                                          t.linalg.vector_norm(t.tensor(NANS), 3)]),
    "matrix norm over a nan": lambda t: t.linalg.matrix_norm(t.tensor(NANS)),
    "var and std of nothing": lambda t: t.stack([t.zeros(0, 3).var(), t.zeros(0, 3).std()]),
    "logsumexp of nothing": lambda t: t.logsumexp(t.zeros(0, 3), 0),
    "unique keeps each nan": lambda t: t.unique(t.tensor(NANS)),
    "median of nothing": lambda t: t.zeros(0).median(),
    "mode among nans": lambda t: t.tensor(NANS).mode().values,
}  # fmt: skip


@pytest.mark.parametrize("name", EDGES)
def test_edges_a_sweep_found_match_pytorch(name):
    torch = torch_or_skip()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        same(EDGES[name](ttorch), EDGES[name](torch), 1e-6)


def test_edges_without_pytorch():
    ints, bools = ttorch.tensor(INTS), ttorch.tensor(BOOLS)
    assert ints.copysign(ttorch.tensor(-1)).dtype == np.float32  # the default float
    assert ints.nan_to_num().dtype == np.int64 and ints.nansum().dtype == np.int64
    assert bools.square().dtype == np.int64 and bools.isfinite().all()
    assert bools.diff(dim=1).tolist() == (BOOLS[:, 1:] != BOOLS[:, :-1]).tolist()
    assert bools.min(1).values.tolist() == BOOLS.min(1).tolist()
    assert ttorch.tensor(2.5).broadcast_to(3).tolist() == [2.5] * 3
    assert ttorch.tensor(3.0).nonzero().shape == (1, 0)
    assert ttorch.nn.functional.max_pool1d(ttorch.ones(2, 6), 2).shape == (2, 3)
    assert np.isnan(ttorch.tensor(NANS).norm().item())  # was 0: a nan gradient clipped unseen
    assert np.isnan(ttorch.zeros(0, 3).var().item())


def test_make_tensor_draws_within_its_bounds():
    x = ttorch.testing.make_tensor(50, 4, dtype=ttorch.float32, low=-1, high=1, requires_grad=True)
    assert x.dtype == np.float32 and x.shape == (50, 4) and x.requires_grad
    assert -1 <= float(x.min()) and float(x.max()) < 1
    n = ttorch.testing.make_tensor((200,), dtype=ttorch.int64, exclude_zero=True)
    assert n.dtype == np.int64 and -9 <= int(n.min()) and int(n.max()) < 10 and (n != 0).all()
    assert ttorch.testing.make_tensor(3, dtype=ttorch.bool).dtype == np.bool_


def test_jit_fork_runs_now_and_wait_gives_the_result():
    future = ttorch.jit.fork(lambda a, b: a * b, 3, b=4)
    assert future.done() and ttorch.jit.wait(future) == 12
    failed = ttorch.jit.fork(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        ttorch.jit.wait(failed)


def _selective_scan_combine(left, right):
    """Mamba's combine of (decay, input) pairs: h = a h + b, associative but not commutative."""
    return left[0] * right[0], right[0] * left[1] + right[1]


@pytest.mark.parametrize("reverse", [False, True])
def test_associative_scan_equals_the_sequential_recurrence(reverse):
    from tracegrad.torch._higher_order_ops.associative_scan import associative_scan

    a, b = rng.uniform(0.5, 1.0, (2, 11, 3)), rng.standard_normal((2, 11, 3))
    _, h = associative_scan(_selective_scan_combine, (ttorch.tensor(a), ttorch.tensor(b)), dim=1,
                            reverse=reverse, combine_mode="generic")  # fmt: skip
    want, state = np.zeros_like(b), np.zeros((2, 3))
    for i in range(10, -1, -1) if reverse else range(11):
        state = a[:, i] * state + b[:, i]
        want[:, i] = state
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-12)
    check_grad(lambda x, y: associative_scan(_selective_scan_combine, (x, y), 1)[1], a, b)


def test_scan_carries_state_and_stacks_outputs_as_pytorch():
    torch = torch_or_skip()
    from torch._higher_order_ops.scan import scan as theirs
    from tracegrad.torch._higher_order_ops.scan import scan as ours

    x = rng.standard_normal((4, 3))
    for reverse in (False, True):
        got = ours(lambda c, v: (c + v, c * v), ttorch.zeros(3, dtype=ttorch.float64),
                   ttorch.tensor(x), reverse=reverse)  # fmt: skip
        want = theirs(lambda c, v: (c + v, c * v), torch.zeros(3, dtype=torch.float64),
                      torch.tensor(x), reverse=reverse)  # fmt: skip
        same(list(got), list(want))


def test_results_are_their_return_types():
    x = ttorch.randn(3, 4)
    results = {"max": x.max(1), "min": x.min(1), "sort": x.sort(), "topk": x.topk(2),
               "median": x.median(1), "mode": x.mode(1), "cummax": x.cummax(1),
               "aminmax": x.aminmax(), "kthvalue": x.kthvalue(2), "frexp": x.frexp(),
               "slogdet": ttorch.linalg.slogdet(ttorch.eye(3)), "svd": x.svd(),
               "linalg_svd": ttorch.linalg.svd(x), "linalg_qr": ttorch.linalg.qr(x),
               "linalg_eigh": ttorch.linalg.eigh(ttorch.eye(3))}  # fmt: skip
    for name, result in results.items():
        assert isinstance(result, getattr(ttorch.return_types, name)), name
    assert ttorch.return_types.max in ttorch.return_types.all_return_types


def test_the_tensor_type_of_torchscript_annotations():
    """open_clip imports `torch.TensorType` for its annotations."""
    assert ttorch.TensorType is ttorch._C.TensorType and repr(ttorch.TensorType.get()) == "Tensor"
