"""What training frameworks (lightning) read of torch beyond models: the module-`to` parser,
the checkpoint reader, pytree's registry, DataLoader iterators' classes, per-device RNG states
and the names they import, each meaning here what it can."""

from __future__ import annotations

import collections
import importlib
import struct

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.torch.utils import _pytree


def test_parse_to_reads_module_to_arguments_as_pytorch():
    """lightning's `LightningModule.to` asks `torch._C._nn._parse_to` what a call means."""
    parse = torch._C._nn._parse_to
    assert parse(torch.float64) == (None, torch.float64, False, None)
    assert parse("cpu", torch.float16, non_blocking=True) == (
        torch.device("cpu"),
        torch.float16,
        True,
        None,
    )
    like = torch.zeros(2, dtype=torch.float64)
    assert parse(like) == (like.device, torch.float64, False, None)
    assert parse(device="cpu", dtype=torch.int32)[:2] == (torch.device("cpu"), torch.int32)
    assert parse("cpu", torch.float16, True) == (torch.device("cpu"), torch.float16, True, None)
    reference = pytest.importorskip("torch")
    assert reference._C._nn._parse_to("cpu", reference.float16)[2:] == (False, None)


def test_the_checkpoint_reader_names_records_as_pytorchs(tmp_path):
    torch.save({"w": torch.arange(4.0)}, tmp_path / "c.pt")
    reader = torch.PyTorchFileReader(str(tmp_path / "c.pt"))
    assert {"data.pkl", "version", "byteorder", "data/0"} <= set(reader.get_all_records())
    assert reader.has_record("data/0") and not reader.has_record("data/1")
    assert np.frombuffer(reader.get_record("data/0"), np.float32).tolist() == [0, 1, 2, 3]
    at = reader.get_record_offset("data/0")
    raw = (tmp_path / "c.pt").read_bytes()
    assert at % 64 == 0 and struct.unpack("<4f", raw[at : at + 16]) == (0.0, 1.0, 2.0, 3.0)


def test_pytrees_registry_flattens_as_pytorchs():
    """lightning walks containers with `SUPPORTED_NODES[_get_node_type(x)].flatten_fn`."""
    Point = collections.namedtuple("Point", "x y")
    nodes = _pytree.SUPPORTED_NODES
    assert _pytree._get_node_type(Point(1, 2)) is collections.namedtuple
    assert _pytree._get_node_type([1]) is list and dict in nodes and int not in nodes
    children, context = nodes[dict].flatten_fn({"a": 1, "b": [2]})
    assert children == [1, [2]] and nodes[dict].unflatten_fn(children, context) == {
        "a": 1,
        "b": [2],
    }
    children, context = nodes[collections.namedtuple].flatten_fn(Point(1, 2))
    spec = _pytree.TreeSpec(collections.namedtuple, context,
                            [_pytree.LeafSpec(), _pytree.LeafSpec()])  # fmt: skip
    assert _pytree.tree_unflatten([3, 4], spec) == Point(3, 4)


def test_a_dataloaders_iterator_is_pytorchs_class():
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(5.0)),
                                         batch_size=2)  # fmt: skip
    dataloader = importlib.import_module("tracegrad.torch.utils.data.dataloader")
    it = iter(loader)
    assert isinstance(it, dataloader._BaseDataLoaderIter) and iter(it) is it and len(it) == 3
    assert not isinstance(it, dataloader._MultiProcessingDataLoaderIter)
    assert [b[0].tolist() for b in it] == [[0, 1], [2, 3], [4]]
    with pytest.raises(StopIteration):
        next(it)


def test_per_device_rng_states_are_none_without_cuda():
    assert torch.cuda.get_rng_state_all() == []
    torch.cuda.set_rng_state_all([])  # lightning restores what it saved: nothing
    with pytest.raises(RuntimeError, match="no CUDA devices"):
        torch.cuda.set_rng_state_all([torch.zeros(4, dtype=torch.uint8)])


def test_the_names_frameworks_import_mean_what_they_can():
    assert torch.nn.parallel.distributed.DistributedDataParallel is \
        torch.nn.parallel.DistributedDataParallel  # fmt: skip
    assert not torch.profiler.kineto_available()
    assert not isinstance(torch.nn.Linear(1, 1), torch.ScriptModule | torch.fx.GraphModule)
    assert torch.ScriptModule is torch.jit.ScriptModule
    assert isinstance(torch.Tensor, torch._C._TensorMeta)
    assert isinstance(torch.nn.Parameter, torch._C._TensorMeta)
    with pytest.raises(NotImplementedError, match="TorchScript is not"):
        torch.jit.ScriptModule()
    with torch.autograd.profiler.record_function("label"):
        pass
    counter = torch.utils.flop_counter.FlopCounterMode(display=False, depth=2)
    assert counter.get_flop_counts() == {} and counter.get_total_flops() == 0
    with pytest.raises(NotImplementedError, match="counting FLOPs is not provided"):
        with counter:
            pass
    assert not torch.overrides.has_torch_function((torch.ones(1),))


def test_a_torch_function_mode_runs_its_block_as_it_would_without_it():
    """lightning enters a mode around module construction: its `__torch_function__` would
    only skip initializers; here it is not called, and the block runs as written."""
    calls = []

    class Counting(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append(func)
            return func(*args, **(kwargs or {}))

    with Counting():
        layer = torch.nn.Linear(3, 2)
    assert calls == [] and layer.weight.shape == (2, 3) and layer.weight.abs().sum().item() > 0


def test_what_hugging_faces_libraries_read():
    """diffusers, peft and accelerate: the device module, a generator's device object, the
    low-rank SVD, kaiming's fan, the distributed names in annotations, submodules as
    attributes."""
    assert torch.get_device_module("cpu") is torch.cpu is torch.get_device_module()
    assert torch.get_device_module(torch.device("cuda")) is torch.cuda
    assert torch.cpu.is_available() and torch.cpu.device_count() == 1
    torch.cpu.synchronize()
    assert (
        torch.Generator().device == torch.device("cpu") and torch.Generator().device.type == "cpu"
    )
    a = torch.randn(9, 6, dtype=torch.float64)
    u, s, v = torch.svd_lowrank(a, q=3)
    assert u.shape == (9, 3) and s.shape == (3,) and v.shape == (6, 3)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(a.numpy(), compute_uv=False)[:3])
    np.testing.assert_allclose((u * s) @ v.T.numpy(), _best_rank(a.numpy(), 3), atol=1e-12)
    _, s, _ = torch.pca_lowrank(a)
    centered = a.numpy() - a.numpy().mean(0)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(centered, compute_uv=False)[:6])
    w = torch.empty(4, 3, 2)
    assert torch.nn.init._calculate_correct_fan(w, "fan_in") == 6
    assert torch.nn.init._calculate_correct_fan(w, "fan_out") == 8
    with pytest.raises(NotImplementedError, match="not provided by tracegrad"):
        torch.distributed.device_mesh.DeviceMesh("cpu", [0])
    assert isinstance(torch._dynamo.eval_frame.OptimizedModule, type) and torch._inductor


def _best_rank(x, q):
    u, s, vh = np.linalg.svd(x, full_matrices=False)
    return (u[:, :q] * s[:q]) @ vh[:q]


def test_a_module_dict_updates_from_another():
    """peft's get_peft_model: `ModuleDict.update(other ModuleDict)` took the keys as pairs."""
    first = torch.nn.ModuleDict({"a": torch.nn.ReLU()})
    second = torch.nn.ModuleDict({"b": torch.nn.Tanh()})
    first.update(second)
    assert list(first) == ["a", "b"] and first["b"] is second["b"]


def test_a_one_element_index_is_a_view_with_its_address():
    """safetensors finds a storage's end by `t.view(-1)[-1].data_ptr()` (transformers' tied
    weights): an element was a copy at another address, so tied weights were saved twice."""
    x = torch.zeros(4, 3)
    assert x.view(-1)[-1].data_ptr() - x.data_ptr() == 44
    assert x[1, 2].data_ptr() - x.data_ptr() == 20
    element = x[0, 1]
    x[0, 1] = 7.0
    assert element.item() == 7.0  # a view, as PyTorch's


def test_lambda_lr_saves_no_functions():
    """transformers' schedules are partials of module functions: the state dict held them, so
    `weights_only` loading refused it (every resume_from_checkpoint), and a lambda could not
    be saved at all. As PyTorch's: functions are not saved, callable objects' attributes are."""
    import functools
    import io

    def linear(step, total):
        return 1 - step / total

    class Warmup:
        def __init__(self):
            self.steps = 2

        def __call__(self, step):
            return min(1.0, (step + 1) / self.steps)

    params = [torch.nn.Parameter(torch.zeros(2))]
    for schedule, saved in ((functools.partial(linear, total=6), {}), (lambda e: 1.0, None),
                            (Warmup(), {"steps": 2})):  # fmt: skip
        scheduler = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(params, lr=1.0), schedule)
        scheduler.step()
        buffer = io.BytesIO()
        torch.save(scheduler.state_dict(), buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
        assert state["lr_lambdas"] == [saved] and state["last_epoch"] == 1
    fresh = Warmup()
    fresh.steps = 9
    scheduler = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD(params, lr=1.0), fresh)
    scheduler.load_state_dict(state)
    assert fresh.steps == 2 and scheduler.last_epoch == 1


def test_random_states_by_pytorchs_names_and_a_foreign_one_refused():
    state = torch.random.get_rng_state()
    first = torch.rand(3).tolist()
    torch.random.set_rng_state(state)
    assert torch.rand(3).tolist() == first
    with pytest.raises(ValueError, match="5056 bytes that are not a state tracegrad saved"):
        torch.set_rng_state(torch.zeros(5056, dtype=torch.uint8))


def test_what_pyg_and_transformers_trainer_read_at_import():
    assert "USE_MKL=OFF" in torch.__config__.show()
    assert torch._C._disabled_torch_function_impl(torch.add, (), (1, 2)) == 3
    clone = torch.ops.aten.clone.default
    assert clone == torch.ops.aten.clone.default and {clone: 1}[torch.ops.aten.clone.default]
    assert clone(torch.ones(2)).tolist() == [1.0, 1.0]
    assert torch.ops.aten.add.Tensor(torch.ones(1), torch.ones(1)).item() == 2.0
    assert torch._tensor_str._tensor_str(torch.tensor([1.5, 2.0]), 0) == "[1.5000, 2.0000]"
    assert torch._tensor_str.PRINT_OPTS.threshold == 1000
    assert not torch.distributed.rpc.is_available()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(False)
    assert torch.zeros(1).layout != torch.sparse_csr and torch.sparse_csc != torch.strided
    with pytest.raises(NotImplementedError, match="not provided by tracegrad"):
        torch.distributed.tensor.DTensor()


def test_a_future_is_set_later_and_chains():
    future = torch.futures.Future()
    doubled = future.then(lambda f: f.value() * 2)
    both = torch.futures.collect_all([future, doubled])
    assert not future.done() and not both.done()
    future.set_result(21)
    assert future.wait() == 21 and doubled.wait() == 42 and both.done()
    assert torch.futures.wait_all([future, doubled]) == [21, 42]


def test_a_static_cache_marks_its_tensors():
    """transformers' static key-value cache: `torch._dynamo.mark_static_address` (a hint)."""
    cache = torch.zeros(2, 3)
    assert torch._dynamo.mark_static_address(cache) is None and cache.shape == (2, 3)
