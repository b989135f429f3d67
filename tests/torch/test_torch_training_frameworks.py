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
    with pytest.raises(NotImplementedError, match="no process groups"):
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
