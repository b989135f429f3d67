"""The names packages built on PyTorch touch as they import (torchvision's registrations of its
C++ operators, ONNX symbolics, TorchScript decorators, quantization stubs) and in ordinary calls
(`torch._assert`, `torch.strided`, autocast queries): each imports under `import torch`, and
means what it can here."""

from __future__ import annotations

import importlib
import types

import numpy as np
import pytest

import tracegrad.torch as torch

MODULES = ["torch._C", "torch.library", "torch._custom_ops", "torch.utils.model_zoo",
           "torch.onnx.symbolic_helper", "torch.onnx.symbolic_opset11", "torch._dynamo.utils",
           "torch.ao.quantization", "torch.ao.nn.quantized", "torch.nn.quantized", "torch.types",
           "torch.backends.cpu", "torch.backends.mkldnn", "torch.utils.dlpack",
           "torch.autograd.forward_ad", "torch._subclasses.fake_tensor", "torch.profiler",
           "torch.fx.experimental.proxy_tensor", "torch.overrides", "torch.autograd.profiler",
           "torch.utils.flop_counter", "torch.nn.parallel.distributed",
           "torch.utils.data._utils.collate", "torch.utils.data._utils.worker",
           "torch.nn.common_types", "torch.nn.utils.clip_grad", "torch.nn.utils.weight_norm",
           "torch.nn.utils.spectral_norm", "torch.nn.utils.stateless", "torch.nn.grad",
           "torch.autograd.grad_mode", "torch.autograd.variable", "torch.autograd.anomaly_mode",
           "torch._utils", "torch.storage", "torch.utils.weak", "torch.utils.benchmark",
           "torch.signal.windows", "torch.quantization", "torch.mps", "torch.xpu",
           "torch.fx.experimental.symbolic_shapes", "torch.return_types",
           "torch._higher_order_ops.associative_scan", "torch._higher_order_ops.scan"]  # fmt: skip


def test_each_file_is_its_packages_attribute():
    """`torch.nn.functional` is the file `tracegrad/torch/nn/functional.py` (with
    `multi_head_attention_forward`), not tracegrad.nn's module a star import bound first."""
    import pkgutil

    functions = {"tracegrad.torch.nn.utils.weight_norm", "tracegrad.torch.nn.utils.spectral_norm"}
    shadowed = []
    for info in pkgutil.walk_packages(torch.__path__, "tracegrad.torch."):
        parent, _, child = info.name.rpartition(".")
        if child.startswith("_") or info.name in functions or ".distributed." in info.name:
            continue
        bound = getattr(importlib.import_module(parent), child, None)  # before importing it
        if isinstance(bound, types.ModuleType) and bound.__name__ != info.name:
            shadowed.append(f"{info.name} is {bound.__name__}")
    assert not shadowed
    assert callable(torch.nn.functional.multi_head_attention_forward)


def test_importing_a_file_module_keeps_the_function_of_its_name():
    """`import torch.nn.utils.weight_norm` (the file) leaves `torch.nn.utils.weight_norm` the
    function, as in PyTorch, where the file was imported with torch."""
    with torch.imported_as_torch():
        importlib.import_module("torch.nn.utils.weight_norm")
        from torch.nn.utils.spectral_norm import SpectralNorm  # noqa: F401

        utils = importlib.import_module("torch.nn.utils")
    assert callable(utils.weight_norm) and callable(utils.spectral_norm)
    assert utils.weight_norm is torch.nn.utils.weight_norm_module.weight_norm


@pytest.mark.parametrize("name", MODULES)
def test_modules_import_as_torch(name):
    with torch.imported_as_torch():
        module = importlib.import_module(name)
    assert module is importlib.import_module("tracegrad." + name)


def test_operators_of_extensions_do_not_exist_and_their_libraries_do_not_load():
    with pytest.raises(OSError, match="C\\+\\+ extensions"):  # torchvision catches OSError
        torch.ops.load_library("/somewhere/_C.so")
    with pytest.raises(AttributeError, match="torchvision.nms"):
        torch.ops.torchvision.nms  # noqa: B018


def test_fake_implementations_register_and_dispatcher_registrations_refuse():
    @torch.library.register_fake("torchvision::nms")  # no such op: accepted
    def fake(dets, scores, iou_threshold):
        return dets

    assert torch.library.fakes["torchvision::nms"] is fake
    assert torch.library.register_fake("ns::op", len) is len
    lib = torch.library.Library("torchvision", "IMPL", "CPU")
    with pytest.raises(NotImplementedError, match="autograd.Function"):
        lib.impl("nms", fake)
    with pytest.raises(NotImplementedError, match="register_autograd"):
        torch.library.register_autograd("ns::op", fake)
    with pytest.raises(NotImplementedError, match="fake-tensor"):
        torch._custom_ops.get_ctx()


def test_core_names_used_at_import():
    C = torch._C
    keys = C.DispatchKeySet(C.DispatchKey.AutocastCPU) | C.DispatchKeySet(
        C.DispatchKey.AutocastCUDA
    )
    assert keys.has(C.DispatchKey.AutocastCUDA) and not keys.has(C.DispatchKey.CPU)
    with C._ExcludeDispatchKeyGuard(keys), C.DisableTorchFunctionSubclass():
        pass
    assert C._get_tracing_state() is None and C._log_api_usage_once("x") is None
    with pytest.raises(AttributeError, match="not provided"):
        C._no_such_thing  # noqa: B018


def test_export_and_scripting_decorators_give_back_the_function():
    def f(x):
        return x

    assert torch.onnx.symbolic_helper.parse_args("v", "f")(f) is f
    assert torch.onnx.register_custom_op_symbolic("ns::op", f, 11) is None
    assert torch.jit._script_if_tracing(f) is f and torch.jit._overload_method(f) is f
    assert torch._dynamo.utils.is_compile_supported("cpu")
    assert not torch._dynamo.utils.is_compile_supported("cuda")


def test_quantization_stubs_and_float_functional_compute_in_float():
    x, y = torch.tensor([1.0, -2.0]), torch.tensor([0.5, 1.0])
    assert torch.ao.quantization.QuantStub()(x) is x
    assert torch.ao.quantization.DeQuantStub()(x) is x
    ff = torch.nn.quantized.FloatFunctional()
    assert (
        ff is not None
        and torch.nn.quantized.FloatFunctional is torch.ao.nn.quantized.FloatFunctional
    )
    np.testing.assert_array_equal(ff.add(x, y).numpy(), [1.5, -1.0])
    np.testing.assert_array_equal(ff.add_relu(x, y).numpy(), [1.5, 0.0])
    np.testing.assert_array_equal(ff.mul(x, y).numpy(), [0.5, -2.0])
    np.testing.assert_array_equal(ff.cat([x, y]).numpy(), [1.0, -2.0, 0.5, 1.0])
    np.testing.assert_array_equal(ff.mul_scalar(x, 3.0).numpy(), [3.0, -6.0])
    with pytest.raises(RuntimeError, match="methods"):
        ff(x)


def test_assert_and_check():
    torch._assert(True, "unused")
    with pytest.raises(AssertionError, match="wrong size"):
        torch._assert(torch.tensor(2) == 3, "wrong size")
    torch._check(True)
    with pytest.raises(RuntimeError, match="too big"):
        torch._check(False, lambda: "too big")
    with pytest.raises(IndexError):
        torch._check_index(False)
    with pytest.raises(ValueError):
        torch._check_value(False, lambda: "bad")


def test_layouts_autocast_queries_and_cpu_capability():
    x = torch.ones(2, 3)
    assert torch.full_like(x, 7.0, layout=torch.strided).tolist() == [[7.0] * 3] * 2
    assert repr(torch.strided) == "torch.strided" and isinstance(torch.strided, torch.layout)
    assert torch.is_autocast_enabled() is False and torch.is_autocast_enabled("cpu") is False
    assert torch.get_autocast_dtype("cpu") == torch.float32
    assert torch.amp.is_autocast_available("cpu") is False
    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    assert torch.utils.model_zoo.load_url is torch.hub.load_state_dict_from_url


def test_private_samplers_torchvision_calls():
    torch.manual_seed(0)
    d = torch._sample_dirichlet(torch.tensor([[1.0, 1.0, 1.0]] * 4000, dtype=torch.float64))
    np.testing.assert_allclose(d.sum(-1).numpy(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(d.mean(0).numpy(), [1 / 3] * 3, atol=0.02)
    g = torch._standard_gamma(torch.full((20000,), 3.0, dtype=torch.float64))
    assert abs(float(g.mean()) - 3.0) < 0.06 and float(g.min()) > 0


def test_names_transformers_imports():
    """What `transformers`' model modules name as they import: each exists, and those that need
    what tracegrad lacks (CUDA, float8) raise when used, not when named."""
    with torch.imported_as_torch():
        from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
        from torch.autograd.graph import save_on_cpu
        from torch.nn.attention.flex_attention import _DEFAULT_SPARSE_BLOCK_SIZE, BlockMask
        from torch.nn.modules.module import _EXTRA_STATE_KEY_SUFFIX, _IncompatibleKeys
        from torch.utils._pytree import _dict_flatten_with_keys
    assert _DEFAULT_SPARSE_BLOCK_SIZE == 128 and _EXTRA_STATE_KEY_SUFFIX == "_extra_state"
    assert _IncompatibleKeys([], []).missing_keys == []
    assert BlockMask.from_kv_blocks.__name__ == "from_kv_blocks"
    with TransformGetItemToIndex(), save_on_cpu(pin_memory=True):
        pass
    assert _dict_flatten_with_keys({"a": 1, "b": 2}) == ([("a", 1), ("b", 2)], ["a", "b"])
    for cls in (torch.cuda.CUDAGraph, torch.cuda.Stream, torch.cuda.StreamContext, torch.Stream):
        with pytest.raises(RuntimeError):
            cls()
    assert torch.finfo(torch.float8_e4m3fn).max == 448.0
    assert torch.finfo(torch.float8_e5m2).max == 57344.0
    assert torch.finfo(torch.bfloat16).eps == 2.0**-7 and torch.finfo(torch.bfloat16).bits == 16
    with pytest.raises(TypeError, match="float8"):
        torch.zeros(2, dtype=torch.float8_e4m3fn)


def test_sparse_initialization():
    torch.manual_seed(0)
    w = torch.nn.init.sparse_(torch.empty(10, 200), sparsity=0.3, std=0.02)
    zeros = (w.numpy() == 0).sum(axis=0)
    assert np.all(zeros == 3)  # ceil(0.3 * 10) a column
    assert abs(float(w.numpy()[w.numpy() != 0].std()) - 0.02) < 0.003
    with pytest.raises(ValueError, match="2-d"):
        torch.nn.init.sparse_(torch.empty(3), 0.1)


def test_a_custom_op_runs_its_function_and_its_registered_backward():
    @torch.library.custom_op("testlib::scaled", mutates_args=())
    def scaled(x: torch.Tensor, k: float) -> torch.Tensor:
        return x * k

    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    def backward(ctx, grad):
        return grad * ctx.k, None

    x = torch.tensor([1.0, 2.0], requires_grad=True)
    assert torch.ops.testlib.scaled is scaled and torch.ops.testlib.scaled.default is scaled
    np.testing.assert_array_equal(scaled(x, 3.0).detach().numpy(), [3.0, 6.0])
    torch.library.register_autograd("testlib::scaled", backward, setup_context=setup_context)
    torch.ops.testlib.scaled(x, k=3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])

    @scaled.register_kernel("cpu")
    def _(x, k):
        return x * k + 1

    np.testing.assert_array_equal(scaled(x.detach(), 2.0).numpy(), [3.0, 5.0])
    with pytest.raises(NotImplementedError, match="custom_op"):
        torch.library.register_autograd("testlib::missing", backward)


def test_requires_grad_on_a_non_leaf_and_storages():
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    assert y.requires_grad_(True) is y  # it requires grad already: nothing to change
    with pytest.raises(RuntimeError, match="leaf"):
        y.requires_grad_(False)
    a = torch.zeros(4, 3)
    assert a.untyped_storage().data_ptr() == a[1:].untyped_storage().data_ptr()
    assert a.untyped_storage().nbytes() == 48 and a.storage().element_size() == 4
    assert a.untyped_storage().data_ptr() != torch.zeros(4, 3).untyped_storage().data_ptr()
    buffer = bytearray(np.array([1.5, -2.0], np.float32).tobytes())
    t = torch.frombuffer(buffer, dtype=torch.float32)
    np.testing.assert_array_equal(t.numpy(), [1.5, -2.0])
    t[0] = 4.0  # shares the buffer's memory, as PyTorch's
    assert np.frombuffer(buffer, np.float32)[0] == 4.0


def test_names_kornia_and_torchdiffeq_meet_mean_what_they_can():
    """Each of these stopped `import kornia` or its calls (a probe of kornia 0.9): asked at
    import or before a branch, they answer what holds here."""
    assert torch.torch is torch and not torch.backends.mkldnn.is_available()
    assert not torch.onnx.is_in_onnx_export() and not torch._C._are_functorch_transforms_active()
    assert not torch._subclasses.fake_tensor.is_fake(torch.zeros(1))
    assert torch.fx.experimental.proxy_tensor.get_proxy_mode() is None
    assert not isinstance(3, torch.SymInt) and not isinstance(2.0, torch.SymFloat)
    x = torch.ones(2)
    assert torch.autograd.forward_ad.unpack_dual(x).tangent is None
    with pytest.raises(RuntimeError, match="no level exists"):  # as PyTorch's, outside a level
        torch.autograd.forward_ad.make_dual(x, x)
    assert torch.complex32.is_complex and torch.chalf is torch.complex32
    assert torch.complex32.to_real() is torch.float16 and torch.complex32 != torch.complex64
    with pytest.raises(TypeError, match="complex32"):
        torch.zeros(1, dtype=torch.complex32)
    torch._assert_async(torch.tensor(True))
    with pytest.raises(RuntimeError, match="bad"):
        torch._assert_async(torch.tensor(False), "bad")
    assert torch.profiler.ProfilerActivity.CPU.name == "CPU"
    assert torch.ger(torch.ones(2), torch.arange(3.0)).tolist() == [[0.0, 1.0, 2.0]] * 2


def test_a_convolution_held_by_a_class_does_not_bind():
    """PyTorch's torch.conv2d is a builtin: a class body may hold it and call it through self
    (kornia's HausdorffERLoss: `conv = torch.conv2d`, then `self.conv(x, weight=w)`)."""

    class Loss:
        conv = torch.conv2d

    x, w = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 3, 3)
    assert torch.equal(Loss().conv(x, weight=w), torch.nn.functional.conv2d(x, w))


def test_dlpack_shares_memory_both_ways():
    a = np.arange(4.0)
    t = torch.utils.dlpack.from_dlpack(a)
    t[0] = 9.0
    assert a[0] == 9.0 and torch.from_dlpack(np.ones(2)).dtype is torch.float64
    back = np.from_dlpack(t)
    back[1] = 7.0
    assert t[1].item() == 7.0
    assert torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(t)).tolist() == a.tolist()


def test_torch_is_named_torch_while_it_is_torch():
    """pyro checks `torch.__name__ == "torch"` at import; outside the alias the module keeps its
    own name (importing its submodules goes by it)."""
    with torch.imported_as_torch():
        import torch as aliased

        assert aliased is torch and aliased.__name__ == "torch"
        from torch import linalg  # a submodule imported by the name "torch"

        assert linalg is torch.linalg
    assert torch.__name__ == "tracegrad.torch"


def test_names_pyro_imports():
    """pyro's param store annotates `load` with `torch.serialization.MAP_LOCATION`."""
    with torch.imported_as_torch():
        from torch.serialization import FILE_LIKE, MAP_LOCATION
    assert isinstance("cpu", MAP_LOCATION.__args__[1]) and isinstance("f.pt", FILE_LIKE.__args__[0])
