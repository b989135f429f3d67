"""The lines training scripts start with (matmul precision, determinism, print options, the RNG
state, `@torch.jit.script`, `torch.compiler.is_compiling()`, anomaly detection) and
`torch.testing.assert_close`: each means on tracegrad what it can, or says what it cannot."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch


def test_settings_are_accepted_and_remembered():
    torch.set_float32_matmul_precision("high")
    assert torch.get_float32_matmul_precision() == "high"
    torch.set_float32_matmul_precision("highest")
    with pytest.raises(ValueError, match="'highest', 'high', 'medium'"):
        torch.set_float32_matmul_precision("tf32")
    torch.use_deterministic_algorithms(True)
    assert torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(False)
    torch.set_default_device("cpu")
    assert str(torch.get_default_device()) == "cpu"
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        torch.set_default_device("cuda")
    with pytest.warns(UserWarning, match="denormals are kept"):
        assert torch.set_flush_denormal(True) is False


def test_rng_state_round_trips():
    torch.manual_seed(3)
    state = torch.get_rng_state()
    first = torch.randn(4).numpy()
    torch.randn(2)
    torch.set_rng_state(state)
    np.testing.assert_array_equal(torch.randn(4).numpy(), first)


def test_fork_rng_restores_the_state_after_its_block():
    torch.manual_seed(3)
    with torch.random.fork_rng(devices=[]):
        torch.randn(3)
        torch.manual_seed(9)
    after = torch.randn(4).numpy()
    torch.manual_seed(3)
    np.testing.assert_array_equal(torch.randn(4).numpy(), after)
    with torch.random.fork_rng(enabled=False):
        torch.randn(2)
    assert not np.array_equal(torch.randn(4).numpy(), after)
    with pytest.raises(ValueError, match="CPU only"), torch.random.fork_rng(devices=[0]):
        pass


def test_type_facts():
    assert torch.typename(torch.zeros(2)) == "torch.FloatTensor"
    assert torch.typename(torch.zeros(2, dtype=torch.int64)) == "torch.LongTensor"
    assert torch.promote_types(torch.int64, torch.float32) == torch.float32  # not NumPy's rule
    assert torch.promote_types(torch.float32, torch.float64) == torch.float64
    assert torch.promote_types(torch.uint8, torch.int8) == torch.int16
    assert torch.promote_types(torch.bool, torch.int32) == torch.int32
    assert torch.can_cast(torch.int64, torch.float32) and torch.can_cast(torch.bool, torch.int8)
    assert not torch.can_cast(torch.float32, torch.int64)
    assert not torch.can_cast(torch.int32, torch.bool)
    assert torch.is_nonzero(torch.tensor([2.0])) and not torch.is_nonzero(torch.tensor(0))
    with pytest.raises(RuntimeError, match="ambiguous"):
        torch.is_nonzero(torch.ones(2))


def test_jit_gives_back_what_it_is_given():
    @torch.jit.script
    def gelu(x):
        return x * 0.5 * (1.0 + torch.erf(x / 1.41421))

    @torch.jit.ignore
    def helper(x):
        return x

    layer = torch.nn.Linear(2, 2)
    assert torch.jit.script(layer) is layer and torch.jit.trace(layer, torch.ones(1, 2)) is layer
    assert helper(3) == 3 and not torch.jit.is_scripting() and torch.jit.annotate(int, 4) == 4
    np.testing.assert_allclose(gelu(torch.ones(1)).numpy(), [0.8413], rtol=1e-3)
    with pytest.raises(AttributeError, match="torch.jit.CompilationUnit is not provided"):
        torch.jit.CompilationUnit("def f(x): return x")


def test_is_compiling_inside_a_traced_step_only():
    seen = []

    @torch.compile
    def step(x):
        seen.append(torch.compiler.is_compiling())
        return x * 2

    step(torch.ones(2))
    step(torch.ones(2))  # runs the plan: the Python is not run again
    assert seen == [True] and not torch.compiler.is_compiling()
    assert torch.compiler.disable(step) is step


def test_dynamos_hints_are_accepted():
    """einops imports `torch._dynamo.allow_in_graph` (a warning where it is missing); code
    marks dimensions dynamic before compiling."""
    import tracegrad.torch._dynamo as dynamo

    def f(x):
        return x * 2

    assert dynamo.allow_in_graph(f) is f and torch.compiler.allow_in_graph(f) is f
    x = torch.ones(3, 2)
    dynamo.mark_dynamic(x, 0), dynamo.maybe_mark_dynamic(x, 1), dynamo.mark_static(x, 0)
    np.testing.assert_array_equal(torch.compile(f)(x).numpy(), np.full((3, 2), 2.0))


def test_record_function_labels_without_changing_anything():
    with torch.profiler.record_function("forward"):
        y = torch.ones(2) * 3

    @torch.profiler.record_function("decorated")
    def f(x):
        return x + 1

    np.testing.assert_array_equal(f(y).numpy(), [4.0, 4.0])
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        f(f(y))  # the decorated function, twice (tests/torch/test_profiler.py: the rest)
    assert {a.key: a.count for a in prof.key_averages()} == {"decorated": 2, "add": 2}


def test_anomaly_detection_names_the_op_that_made_a_nan():
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    with torch.autograd.detect_anomaly():
        assert torch.autograd.is_anomaly_enabled()
        y = (torch.sqrt(x) * 0).sum()  # sqrt's derivative at 0 is inf: inf * 0 is nan
        with pytest.raises(RuntimeError, match=r"'SqrtBackward0' returned nan values in its 0th "
                                               r"output \(the forward op ran at "):  # fmt: skip
            y.backward()
    assert not torch.autograd.is_anomaly_enabled()
    (torch.sqrt(x) * 0).sum().backward()  # off: the nan goes into the gradient, as PyTorch's
    assert np.isnan(x.grad.numpy()[0])
    torch.autograd.set_detect_anomaly(True)
    try:
        assert torch.autograd.is_anomaly_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_assert_close_uses_pytorchs_tolerances():
    a = torch.tensor([1.0, 2.0])
    torch.testing.assert_close(a, a + 1e-6)  # float32: rtol 1.3e-6, atol 1e-5
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        torch.testing.assert_close(a, torch.tensor([1.0, 2.1]))
    with pytest.raises(AssertionError, match="dtype"):
        torch.testing.assert_close(a, a.double())
    with pytest.raises(AssertionError, match="shape"):
        torch.testing.assert_close(a, torch.ones(3))
    torch.testing.assert_close({"w": [a, 3]}, {"w": [a.clone(), 3]})
    torch.testing.assert_close(a.double(), a.double() + 1e-8, rtol=0.0, atol=1e-7)
    torch.testing.assert_allclose(a, np.array([1.0, 2.0]))
    with pytest.raises(AssertionError):
        torch.testing.assert_close(tg.tensor([1, 2]), tg.tensor([1, 3]))  # integers: exact
    b = a.bfloat16()  # rtol 1.6e-2: compared as values, not as their bits
    torch.testing.assert_close(b, torch.tensor([1.0, 2.03]).bfloat16())
    with pytest.raises(AssertionError, match="Mismatched elements: 1 / 2"):
        torch.testing.assert_close(b, torch.tensor([1.0, 2.1]).bfloat16())


def test_memory_formats_are_accepted():
    model = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    x = torch.ones(1, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    assert model(x).shape == (1, 4, 3, 3) and repr(torch.channels_last) == "torch.channels_last"
    assert torch.contiguous_format is not torch.preserve_format
    assert torch.legacy_contiguous_format is torch.contiguous_format  # Phi-MoE's empty_like
    assert torch.empty_like(x, memory_format=torch.legacy_contiguous_format).shape == x.shape


def test_hubs_progress_bar_and_directory(tmp_path):
    """pytorch/examples' vision_transformer imports `from torch.hub import tqdm`."""
    from tracegrad.torch.hub import tqdm

    assert list(tqdm(range(3))) == [0, 1, 2]
    before = torch.hub.get_dir()
    torch.hub.set_dir(str(tmp_path))
    assert torch.hub.get_dir() == str(tmp_path)
    torch.hub.set_dir(before)


def test_names_libraries_import_at_import_time():
    """timm imports these as it loads: `@torch.fx.wrap` on module functions, torch.hub's
    HASH_REGEX and download functions, `torch.jit.annotations.List`, `Sampler[List[int]]`."""
    from tracegrad.torch.hub import HASH_REGEX, download_url_to_file, urlparse  # noqa: F401
    from tracegrad.torch.jit.annotations import BroadcastingList2, List
    from tracegrad.torch.nn.utils.fusion import fuse_conv_bn_eval  # noqa: F401
    from tracegrad.torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

    def f(x):
        return x

    assert torch.fx.wrap(f) is f and torch.fx.wrap("f") == "f"
    assert HASH_REGEX.search("resnet18-5c106cde.pth").group(1) == "5c106cde"
    assert BroadcastingList2[int] == list[int] and List[int] is not None
    assert Sampler[List[int]] is Sampler and DataLoader[int] is DataLoader

    class Numbers(IterableDataset[int]):
        def __iter__(self):
            return iter(range(3))

    assert list(Numbers()) == [0, 1, 2] and Dataset[int] is Dataset


def test_distributed_nn_imports_and_its_collectives_need_a_group():
    """vector-quantize-pytorch imports `from torch.distributed import nn` at the top and calls
    its `all_reduce` only when a process group is initialized (tests/torch/test_distributed.py
    runs them on ranks)."""
    from tracegrad.torch.distributed import nn as dist_nn

    assert torch.distributed.nn is dist_nn
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        dist_nn.all_reduce(torch.zeros(2))


def test_compiler_settings_and_distributed_names_import():
    """llm.c's `train_gpt2.py` imports `torch._inductor.config` (and sets a tuning flag if it
    has it) and `ZeroRedundancyOptimizer` at the top; optimizer libraries import the base class
    from `torch.optim.optimizer`."""
    import tracegrad.torch._inductor.config as config
    from tracegrad.torch.distributed.optim import ZeroRedundancyOptimizer
    from tracegrad.torch.optim.optimizer import Optimizer, required

    assert hasattr(config, "coordinate_descent_tuning") and torch._inductor.config is config
    config.coordinate_descent_tuning = True
    assert Optimizer is torch.optim.Optimizer and repr(required) == "<required parameter>"
    with pytest.raises(RuntimeError, match="ZeroRedundancyOptimizer is not provided"):
        ZeroRedundancyOptimizer([torch.zeros(1)], optimizer_class=torch.optim.AdamW)


def test_a_device_as_a_context_and_the_loaders_mmap(tmp_path):
    """PyTorch's recipe for loading a checkpoint without initializing twice: the model made
    under `torch.device("meta")` (real values here), `torch.load(mmap=True)`, then
    `load_state_dict(assign=True)`; another device as a context raises."""
    with torch.device("cpu"):
        src = torch.nn.Linear(3, 2).double()
    torch.save(src.state_dict(), tmp_path / "m.pt")
    with torch.device("meta"):
        dst = torch.nn.Linear(3, 2)
    state = torch.load(tmp_path / "m.pt", mmap=True, weights_only=True)
    dst.load_state_dict(state, assign=True)
    assert dst.weight.dtype == np.float64 and isinstance(dst.weight, torch.nn.Parameter)
    np.testing.assert_array_equal(dst.weight.numpy(), src.weight.numpy())
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"), torch.device("cuda"):
        pass


def test_what_a_meta_block_makes_answers_meta_so_loaders_skip_initializing_it():
    """transformers' from_pretrained builds the model in `torch.device("meta")` and asks
    `torch.tensor([]).device` whether it does: told "cpu", it initialized the model there and
    marked it done, so the non-persistent buffers it then replaced (BERT's position_ids,
    Llama's rotary inv_freq) stayed zeros, silently."""
    before = torch.zeros(2)
    with torch.device("meta"):
        assert torch.tensor([]).device == torch.device("meta") and torch.empty(3).is_meta
        assert torch.get_default_device().type == "meta" and before.device.type == "cpu"
        layer = torch.nn.Linear(3, 2)
        buffer = torch.nn.Buffer(torch.arange(4))
    assert torch.get_default_device().type == "cpu" and torch.tensor([]).device.type == "cpu"
    assert layer.weight.is_meta and isinstance(layer.weight, torch.nn.Parameter)
    assert buffer.device.type == "meta" and torch.nn.Parameter(layer.weight).is_meta
    assert layer.to_empty(device="cpu") is layer and layer.weight.device.type == "cpu"
    assert not layer.bias.is_meta and repr(layer.bias.device) == "device(type='cpu')"


def test_future_switches_are_kept_and_a_conversion_keeps_the_parameter():
    torch.__future__.set_swap_module_params_on_conversion(True)
    assert torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(False)
    m = torch.nn.Linear(2, 2)
    weight = m.weight
    m.double()
    assert m.weight is weight and weight.dtype == np.float64
