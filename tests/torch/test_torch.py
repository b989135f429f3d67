"""`tracegrad.torch`, shaped like `torch`: its modules, that they re-export tracegrad's own
objects, what exists only there (dtypes, devices, hardware modules, torch.compile), the error
for a name tracegrad does not provide, tied state dicts, and `python -m tracegrad run` on
unchanged PyTorch-style scripts."""

from __future__ import annotations

import contextlib
import copy
import importlib
import pickle
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch
from tracegrad.compiler import lowering

ROOT = Path(__file__).resolve().parents[2]

SUBMODULES = ["nn", "nn.functional", "nn.init", "nn.utils", "nn.parallel", "optim",
              "optim.lr_scheduler", "utils", "utils.data", "utils.data.dataloader",
              "utils.data.dataset", "utils.data.sampler", "autograd", "cuda", "cuda.amp", "amp",
              "backends", "backends.cudnn", "backends.mps", "backends.cuda", "linalg", "random",
              "fft", "distributed", "accelerator", "onnx", "serialization", "special", "version",
              "nn.utils.rnn", "nn.utils.parametrize", "nn.utils.parametrizations", "nn.modules",
              "nn.modules.module", "utils.checkpoint", "utils.hooks", "autograd.function",
              "autograd.functional", "func", "jit", "compiler", "profiler", "testing",
              "optim.swa_utils", "distributions", "nn.parameter", "nn.utils.prune",
              "nn.attention", "multiprocessing"]  # fmt: skip


@pytest.mark.parametrize("name", SUBMODULES)
def test_each_submodule_is_a_module_reached_by_attribute_and_by_import(name):
    module = importlib.import_module(f"tracegrad.torch.{name}")
    assert isinstance(module, types.ModuleType)
    reached = torch
    for part in name.split("."):
        reached = getattr(reached, part)
    assert reached is module


def test_the_submodules_are_torchs_in_a_fresh_interpreter():
    """`from package import name` takes an attribute before a submodule: tracegrad's own nn or
    autograd must not stand in for torch.nn or torch.autograd."""
    code = ("import tracegrad.torch as t; print(t.nn.__name__, t.autograd.__name__, "
            "t.optim.__name__, t.utils.__name__, t.linalg.__name__)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.split()  # fmt: skip
    assert out == [f"tracegrad.torch.{n}" for n in ("nn", "autograd", "optim", "utils", "linalg")]


def test_the_namespace_re_exports_tracegrads_objects():
    import tracegrad.torch.nn.functional as F

    assert torch.Tensor is tg.Tensor and torch.nn.Module is tg.nn.Module
    assert torch.nn.Parameter is tg.nn.Parameter and torch.optim.AdamW is tg.optim.AdamW
    assert torch.utils.data.DataLoader is tg.utils.data.DataLoader
    assert torch.utils.data.dataloader.DataLoader is tg.utils.data.DataLoader
    assert torch.optim.lr_scheduler.StepLR is tg.optim.lr_scheduler.StepLR
    assert torch.autograd.grad is tg.autograd.grad and torch.linalg.norm is tg.linalg.norm
    assert all(getattr(F, n) is getattr(tg.nn.functional, n) for n in tg.nn.functional.__all__)
    assert all(getattr(torch.nn, n) is getattr(tg.nn, n) for n in tg.nn.__all__
               if n not in ("functional", "init", "utils"))  # fmt: skip
    own = {"trace", "Size", "manual_seed", "default_generator", "get_default_dtype",
           "float16", "float32", "float64", "int32", "int64", "long", "bool", "complex64",
           "complex128", "cfloat", "cdouble"}  # fmt: skip
    shared = [n for n in torch.__all__ if hasattr(tg, n) and n not in own]
    assert len(shared) > 150
    differ = {n for n in shared if getattr(torch, n) is not getattr(tg, n)}
    # torch's modules in the places of tracegrad's (tracegrad.distributed, once imported, too;
    # torch.compiler is PyTorch's API, tracegrad.compiler the code generator); conv2d is
    # PyTorch's function there, tracegrad's own op here
    assert {"autograd", "compiler", "conv2d", "distributions", "fft", "linalg", "nn", "optim",
            "utils"} <= differ  # fmt: skip
    assert differ <= {"autograd", "compiler", "conv2d", "distributed", "distributions", "fft",
                      "linalg", "nn", "optim", "utils"}, differ  # fmt: skip


def test_tracegrads_own_names_are_not_pytorchs():
    for name in ("GradManager", "defprimitive", "PRIMITIVES", "vjp", "interpret"):
        with pytest.raises(AttributeError, match=f"torch.{name} is not provided by tracegrad"):
            getattr(torch, name)
    a = torch.tensor(np.arange(9.0).reshape(3, 3))
    assert float(torch.trace(a)) == 12.0  # PyTorch's trace: the diagonal's sum


def test_a_missing_name_says_what_and_where():
    with pytest.raises(AttributeError) as e:
        torch.nn.functional.fancy_new_loss(1)
    line = sys._getframe().f_lineno - 1
    assert str(e.value).startswith(
        f"torch.nn.functional.fancy_new_loss is not provided by tracegrad (used at "
        f"test_torch.py:{line})"
    )
    assert not hasattr(torch, "nested") and hasattr(torch.nn.functional, "cross_entropy")


def test_the_functions_real_training_code_asks_for():
    """Each is tracegrad's own (one object at both levels), with PyTorch's name."""
    for name in ("cumprod", "unique", "bincount", "searchsorted", "bucketize", "meshgrid",
                 "tril_indices", "triu_indices", "addmm", "baddbmm", "cdist", "lgamma",
                 "digamma", "erfinv", "logdet", "det", "slogdet", "cholesky", "cummax",
                 "logcumsumexp", "block_diag", "diag_embed", "histc", "polygamma"):  # fmt: skip
        assert getattr(torch, name) is getattr(tg, name), name
    assert torch.special.gammaln(torch.tensor([4.0])).item() == pytest.approx(np.log(6.0))


def test_the_legacy_constructors_of_older_code():
    """`nn.Parameter(torch.Tensor(n, m))` then an init (pygcn, many older repositories):
    `torch.Tensor` and the legacy types construct as PyTorch's do, in their float dtype, and a
    tensor of a legacy type's dtype is its instance."""
    assert torch.Tensor(3, 4).shape == (3, 4) and torch.Tensor(3, 4).dtype == torch.float32
    assert torch.Tensor(5).shape == (5,) and torch.Tensor().shape == (0,)
    assert torch.Tensor(torch.Size([2, 3])).shape == (2, 3)
    assert torch.Tensor((2, 3)).tolist() == [2.0, 3.0]  # a plain tuple is data
    assert torch.Tensor([1, 2]).dtype == torch.float32 == torch.Tensor(np.arange(2)).dtype
    a = np.zeros(2, np.float32)
    copied = torch.Tensor(a)
    a[0] = 1.0
    assert copied.tolist() == [0.0, 0.0]  # a copy, as PyTorch's
    w = torch.nn.Parameter(torch.Tensor(4, 2))
    torch.nn.init.xavier_uniform_(w)
    assert w.shape == (4, 2) and w.requires_grad and np.abs(w.numpy()).max() > 0
    long, floats = torch.LongTensor([1, 2]), torch.FloatTensor(2, 3)
    assert long.dtype == np.int64 and floats.shape == (2, 3) and floats.dtype == np.float32
    assert isinstance(long, torch.LongTensor) and not isinstance(long, torch.FloatTensor)
    assert torch.tensor([1.5]).type(torch.LongTensor).dtype == np.int64
    assert torch.BoolTensor([1, 0]).tolist() == [True, False]
    with pytest.raises(TypeError, match="expected data or sizes"):
        torch.Tensor([1.0], 2)


def test_factories_take_size_as_a_keyword_and_normal_samples():
    """gat's `torch.empty(size=(n, m))`; `torch.normal` of tensors or of numbers and a size."""
    for make in (torch.empty, torch.zeros, torch.ones, torch.rand, torch.randn):
        assert make(size=(2, 3)).shape == (2, 3), make.__name__
    with pytest.raises(TypeError, match="zeros: sizes given twice"):
        torch.zeros(2, size=(3,))
    torch.manual_seed(0)
    x = torch.normal(5.0, 0.5, size=(20000,))
    assert x.dtype == np.float32 and x.mean().item() == pytest.approx(5.0, abs=0.02)
    assert x.std().item() == pytest.approx(0.5, rel=0.03)
    mean = torch.zeros(3, 1, dtype=torch.float64, requires_grad=True)
    y = torch.normal(mean, torch.ones(1, 2, dtype=torch.float64))
    assert y.shape == (3, 2) and y.dtype == np.float64 and not y.requires_grad
    with pytest.raises(TypeError, match="give size="):
        torch.normal(0.0, 1.0)
    a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
    np.testing.assert_array_equal(torch.spmm(torch.tensor(a), torch.tensor(b)).numpy(), a @ b)


def test_a_list_of_tensors_without_grad_becomes_their_values():
    """actor-critic's `torch.tensor([reward])` of 0-d tensors: their values, as PyTorch's; a
    list holding a tensor that requires grad is refused (the new leaf would cut its gradient:
    stack keeps it)."""
    r = torch.tensor([1.0, 2.0])
    assert torch.tensor([r[0]]).tolist() == [1.0]
    assert torch.tensor([[r[0], r[1]], [r[1], r[0]]]).tolist() == [[1.0, 2.0], [2.0, 1.0]]
    with pytest.raises(TypeError, match="require grad"):
        torch.tensor([torch.tensor(1.0, requires_grad=True) * 2])


def test_thread_counts_map_onto_numbas_and_blass():
    import numba

    try:
        import threadpoolctl

        blas = threadpoolctl.threadpool_limits(limits=None, user_api="blas")  # restores BLAS's
    except ImportError:
        blas = contextlib.nullcontext()
    before = numba.get_num_threads()
    with blas:
        try:
            torch.set_num_threads(1)
            assert torch.get_num_threads() == 1 == numba.get_num_threads()
            if "threadpoolctl" in sys.modules:
                counts = [p["num_threads"] for p in threadpoolctl.threadpool_info()
                          if p["user_api"] == "blas"]  # fmt: skip
                assert counts and set(counts) == {1}
            torch.set_num_threads(10_000)  # more than Numba started with: as many as it has
            assert torch.get_num_threads() == numba.config.NUMBA_NUM_THREADS
            with pytest.raises(ValueError, match="positive"):
                torch.set_num_threads(0)
        finally:
            numba.set_num_threads(before)
    torch.set_num_interop_threads(3)
    assert torch.get_num_interop_threads() == 3
    torch.set_num_interop_threads(1)


# --- dtypes, devices, hardware ------------------------------------------------------------------


def test_dtypes_stand_for_numpys():
    assert repr(torch.float32) == "torch.float32" and torch.float is torch.float32
    assert (
        torch.double is torch.float64 and torch.long is torch.int64 and torch.half is torch.float16
    )
    assert torch.zeros(2).dtype == torch.float32 and torch.float32 == torch.zeros(2).dtype
    assert np.dtype(torch.float64) == np.float64 and torch.int64 == np.int64
    x = torch.zeros(2, 3, dtype=torch.float64)
    assert x.dtype == torch.double and x.to(torch.long).dtype == torch.int64
    assert x.type(torch.int32).dtype == np.int32 and x.float().dtype == torch.float
    assert {torch.float32: "f"}[x.float().dtype] == "f"  # hashes as NumPy's dtype
    assert isinstance(x.dtype, torch.dtype) and isinstance(torch.int8, torch.dtype)
    assert not isinstance("float32", torch.dtype) and not isinstance(np.float32, torch.dtype)
    assert torch.float32.is_floating_point and not torch.int64.is_floating_point
    assert torch.int8.is_signed and not torch.uint8.is_signed and torch.float64.itemsize == 8
    assert torch.tensor([1, 2], dtype=torch.int).dtype == np.int32
    assert torch.bfloat16 != torch.float16  # its bits only (tests/frontend/test_dtypes.py)
    with pytest.raises(TypeError, match="torch.float8_e4m3fn is not provided by tracegrad"):
        torch.zeros(2, dtype=torch.float8_e4m3fn)
    assert (
        torch.finfo(torch.float32).eps == np.finfo(np.float32).eps
        and torch.iinfo(torch.int8).max == 127
    )
    # Python floats, as PyTorch's: NumPy's float32 eps would promote a float16 tensor
    info = torch.finfo(torch.float32)
    assert type(info.eps) is float and info.resolution == 1e-06 and info.bits == 32
    assert (torch.ones(2, dtype=torch.float16) + info.eps).dtype == torch.float16


def test_complex_dtypes_and_torch_fft():
    """torch.cfloat and torch.cdouble are NumPy's complex dtypes; torch.fft is tracegrad.fft,
    also where code imports it by name."""
    assert torch.cfloat is torch.complex64 and torch.cdouble is torch.complex128
    assert torch.complex64.is_complex and torch.complex64.to_real() is torch.float32
    assert torch.float64.to_complex() is torch.complex128
    assert torch.float32.to_real() is torch.float32
    w = torch.nn.Parameter(torch.rand(2, 3, dtype=torch.cfloat))
    assert w.dtype == torch.complex64 and w.is_complex() and torch.is_complex(w)
    spectrum = torch.fft.rfft2(torch.ones(4, 4))
    assert spectrum.dtype == torch.complex64 and spectrum[0, 0].item() == 16
    with torch.imported_as_torch():
        import torch.fft as fft

        assert fft.irfft2 is tg.fft.irfft2


def test_the_default_dtype_is_a_torch_dtype():
    assert torch.get_default_dtype() is torch.float32
    torch.set_default_dtype(torch.float64)
    try:
        assert (
            torch.get_default_dtype() is torch.float64 and torch.tensor([0.5]).dtype == torch.double
        )
    finally:
        torch.set_default_dtype(torch.float32)


def test_devices_and_hardware_that_is_not_there():
    cpu = torch.device("cpu")
    assert str(cpu) == "cpu" and repr(cpu) == "device(type='cpu')" and cpu.index is None
    assert torch.device("cuda:1").index == 1 and torch.device("cuda", 0) == torch.device("cuda:0")
    assert cpu != "cpu" and torch.zeros(1).device == cpu  # as PyTorch's
    assert torch.zeros(2, device=cpu).shape == (2,)
    with pytest.raises(ValueError, match="'cuda' is not available: tracegrad runs on the CPU"):
        torch.zeros(2, device=torch.device("cuda"))
    assert not torch.cuda.is_available() and torch.cuda.device_count() == 0
    assert not torch.cuda.is_initialized() and not torch.cuda._initialized  # reversible layers
    assert torch.cuda.default_generators == ()  # none to seed from (transformers' Reformer)
    assert not torch.cuda.is_bf16_supported() and torch.cuda.manual_seed_all(1) is None
    assert torch.cuda.max_memory_allocated() == 0 and torch.cuda.memory_stats() == {}  # llm.c
    assert not torch.backends.mps.is_available() and not torch.backends.cudnn.is_available()
    assert not torch.accelerator.is_available() and torch.accelerator.current_accelerator() is None
    torch.backends.cudnn.benchmark = True  # settings are accepted
    torch.backends.cuda.matmul.allow_tf32 = True
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        torch.cuda.set_device(0)
    # torch.distributed is there (gloo's part: tests/torch/test_distributed.py); NCCL is not
    assert torch.distributed.is_available() and not torch.distributed.is_nccl_available()
    with pytest.raises(RuntimeError, match="doesn't have NCCL built in.*backend='gloo'"):
        torch.distributed.init_process_group(backend="nccl")
    # named in default arguments, which run at import (`def all_reduce(t, op=ReduceOp.SUM)`)
    dist = torch.distributed
    assert dist.ReduceOp.SUM != dist.ReduceOp.MAX and dist.Backend.NCCL == "nccl"
    assert dist.group.WORLD is None and not dist.is_initialized()


def test_data_parallel_wrappers():
    inner = torch.nn.Linear(2, 1)
    wrapped = torch.nn.DataParallel(inner)
    x = torch.ones(3, 2)
    assert wrapped.module is inner and np.array_equal(wrapped(x).numpy(), inner(x).numpy())
    assert set(wrapped.state_dict()) == {"module.weight", "module.bias"}
    assert torch.nn.parallel.data_parallel(inner, x).shape == (3, 1)
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        torch.nn.parallel.data_parallel(inner, x, range(2))
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        torch.nn.DataParallel(inner, device_ids=[0, 1])
    with pytest.raises(ValueError, match="tracegrad runs on the CPU"):
        torch.nn.parallel.DistributedDataParallel(inner, device_ids=[0])
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        torch.nn.parallel.DistributedDataParallel(inner)
    from tracegrad.torch.nn.parallel.scatter_gather import scatter  # captum imports it

    with pytest.raises(ValueError, match="scatter moves tensors to GPUs"):
        scatter(x, ["cpu", "cpu"])
    assert torch.Future is torch.futures.Future


def test_sequential_of_an_ordered_dict_names_its_layers():
    from collections import OrderedDict

    model = torch.nn.Sequential(OrderedDict(fc=torch.nn.Linear(2, 3), act=torch.nn.ReLU()))
    assert list(model.state_dict()) == ["fc.weight", "fc.bias"] and model[1] is model.act
    assert model(torch.ones(4, 2)).shape == (4, 3)


def test_mixed_precision_is_a_no_op():
    with pytest.warns(UserWarning, match="GradScaler is enabled, but tracegrad has no CUDA"):
        scaler = torch.cuda.amp.GradScaler(enabled=True)
    p = torch.tensor(np.ones(2), requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.5)
    loss = (p * p).sum()
    assert scaler.scale(loss) is loss and not scaler.is_enabled()
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert p.numpy().tolist() == [0.0, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            assert (torch.ones(2) @ torch.ones(2)).dtype == torch.float32
    with torch.amp.autocast("cuda", enabled=False):
        pass
    from tracegrad.torch.amp.grad_scaler import GradScaler, OptState  # PyTorch's files (fastai)

    assert GradScaler is torch.amp.GradScaler and OptState.READY.value == 0
    assert torch.amp.autocast_mode.autocast is torch.autocast


def test_small_things_of_the_namespace():
    g = torch.manual_seed(3)
    assert isinstance(g, torch.Generator) and g.initial_seed() == 3 == torch.initial_seed()
    a = torch.randn(4)
    torch.manual_seed(3)
    assert np.array_equal(a.numpy(), torch.randn(4).numpy())
    size = torch.Size([2, 3])
    assert size == (2, 3) and size.numel() == 6 and repr(size) == "torch.Size([2, 3])"
    assert torch.is_tensor(a) and not torch.is_tensor(a.numpy()) and torch.numel(a) == 4
    assert torch.is_floating_point(a) and torch.__version__.startswith("2.")
    assert torch.version.cuda is None and torch.clone(a) is not a
    x = torch.tensor(np.ones(2), requires_grad=True)
    with torch.inference_mode():
        assert not (x * 2).requires_grad
    with torch.inference_mode(False):
        assert (x * 2).requires_grad

    @torch.inference_mode()
    def f(x):
        return x * 2

    @torch.inference_mode
    def g(x):
        return x * 2

    assert not f(x).requires_grad and not g(x).requires_grad
    assert torch.autograd.Variable(a) is a and isinstance(a, torch.autograd.Variable)
    assert torch.autograd.Variable([1.0], requires_grad=True).requires_grad
    with torch.serialization.safe_globals([dict]):
        pass
    assert np.allclose(torch.bmm(torch.ones(2, 3, 4), torch.ones(2, 4, 5)).numpy(), 4)
    assert np.allclose(torch.rsqrt(torch.tensor([4.0])).numpy(), 0.5)
    assert np.allclose(torch.norm(torch.tensor([[3.0, 4.0]]), dim=1).numpy(), [5.0])
    p = torch.tensor(np.ones(2), requires_grad=True)
    p.grad = torch.tensor(np.array([3.0, 4.0]))
    norm = torch.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True, foreach=True)
    assert float(norm) == 5.0 and np.allclose(p.grad.numpy(), [0.6, 0.8])
    p.grad = torch.tensor(np.array([np.inf, 0.0]))
    with pytest.raises(RuntimeError, match="total norm of order 2.0 of the gradients is inf"):
        torch.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)


# --- torch.compile ------------------------------------------------------------------------------


def _pytorch_style_training(compile_step, backend=None, steps=4):
    """An MLP classifier trained the PyTorch way: zero_grad, loss.backward(), clipping, step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.double()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    rng = np.random.default_rng(0)
    x, y = torch.tensor(rng.standard_normal((16, 4))), torch.tensor(rng.integers(0, 3, 16))

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    if compile_step == "trace":
        step = tg.trace(step, backend=backend)
    elif compile_step == "compile":
        step = torch.compile(step)
    losses = []
    for _ in range(steps):
        losses.append(float(step(x, y)))
        sched.step()
    return losses, [p.numpy().copy() for p in model.parameters()], step


@pytest.mark.parametrize("how, backend", [("trace", "numpy"), ("trace", "numba"),
                                          ("compile", None)])  # fmt: skip
def test_a_step_written_the_pytorch_way_compiles_and_matches_eager(how, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    want, want_params, _ = _pytorch_style_training(None)
    got, params, step = _pytorch_style_training(how, backend)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    assert want[-1] < want[0]
    assert sum(len(p) for p in step.plans.values()) == 2  # .grad None, then set


def test_compile_forms_and_modules():
    def f(x):
        return x * 2

    assert isinstance(torch.compile(f), type(tg.trace(f)))
    assert isinstance(torch.compile(mode="max-autotune", fullgraph=True)(f), type(tg.trace(f)))
    decorated = torch.compile(f)
    assert float(decorated(torch.ones(()))) == 2.0
    assert torch.compile(f, disable=True) is f
    model = torch.nn.Linear(2, 2)
    assert torch.compile(model)._orig_mod is model  # tests/runtime/test_compiled_module.py
    with pytest.raises(ValueError, match="unknown backend"):
        torch.compile(f, backend="tensorrt")
    calls = []
    with pytest.warns(UserWarning, match="custom backend 'counter' is not called"):

        def counter(gm, inputs):
            calls.append(gm)
            return gm.forward

        counted = torch.compile(f, backend=counter)
    assert float(counted(torch.ones(()))) == 2.0 and calls == []


# --- tied weights in state dicts (nanoGPT ties its embedding and output weights) --------------


def _tied(lib):
    class Tiny(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = lib.nn.ModuleDict(dict(wte=lib.nn.Embedding(5, 3),
                                                      ln_f=lib.nn.LayerNorm(3)))  # fmt: skip
            self.lm_head = lib.nn.Linear(3, 5, bias=False)
            self.transformer.wte.weight = self.lm_head.weight

        def forward(self, idx):
            return self.lm_head(self.transformer.ln_f(self.transformer.wte(idx)))

    return Tiny().double()


KEYS = ["transformer.wte.weight", "transformer.ln_f.weight", "transformer.ln_f.bias",
        "lm_head.weight"]  # fmt: skip


def test_tied_weights_are_listed_under_each_name_and_load_back(tmp_path):
    model = _tied(torch)
    sd = model.state_dict()
    assert list(sd) == KEYS and len(list(model.parameters())) == 3
    assert np.shares_memory(sd["transformer.wte.weight"].numpy(), sd["lm_head.weight"].numpy())
    torch.save({"model": sd}, tmp_path / "ckpt.pt")
    loaded = torch.load(tmp_path / "ckpt.pt", map_location="cpu")["model"]
    other = _tied(torch)
    assert not other.load_state_dict(loaded).missing_keys
    assert other.lm_head.weight is other.transformer.wte.weight
    idx = torch.tensor([[0, 3, 4]])
    np.testing.assert_array_equal(other(idx).numpy(), model(idx).numpy())


def test_tied_weights_load_both_ways_with_pytorch():
    real = pytest.importorskip("torch")
    ours, theirs = _tied(torch), _tied(real)
    assert list(theirs.state_dict()) == list(ours.state_dict()) == KEYS
    theirs.load_state_dict({k: real.tensor(v.numpy()) for k, v in ours.state_dict().items()})
    idx = np.array([[0, 3, 4, 1]])
    want = theirs(real.tensor(idx)).detach().numpy()
    np.testing.assert_allclose(ours(torch.tensor(idx)).numpy(), want, rtol=1e-12)
    back = _tied(torch)
    back.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    np.testing.assert_allclose(back(torch.tensor(idx)).numpy(), want, rtol=1e-12)


# --- torch._foreach_* -----------------------------------------------------------------------------

FOREACH = [  # name, the operands after the tensors (arrays: one per tensor), options
    ("_foreach_add", ["B"], {"alpha": 2.0}), ("_foreach_add_", [2.0], {}),
    ("_foreach_sub", [[1.0, 2.0]], {}), ("_foreach_mul_", ["B"], {}),
    ("_foreach_div", ["C"], {}), ("_foreach_lerp_", ["B", 0.1], {}),
    ("_foreach_lerp", ["B", [0.1, 0.3]], {}), ("_foreach_addcmul_", ["B", "C"], {"value": 0.5}),
    ("_foreach_addcdiv", ["B", "C"], {}), ("_foreach_sqrt", [], {}), ("_foreach_neg_", [], {}),
    ("_foreach_zero_", [], {}), ("_foreach_copy_", ["B"], {}), ("_foreach_maximum", ["B"], {}),
    ("_foreach_clamp_max_", [0.1], {}), ("_foreach_norm", [], {}), ("_foreach_pow", [2.0], {}),
]  # fmt: skip


def _foreach(lib, name, operands, options):
    rng = np.random.default_rng(0)
    arrays = {k: [rng.uniform(1, 2, (3, 2)), rng.uniform(1, 2, 4)] for k in "ABC"}
    tensors = [lib.tensor(a) for a in arrays["A"]]
    given = [[lib.tensor(a) for a in arrays[o]] if isinstance(o, str) else o for o in operands]
    out = getattr(lib, name)(tensors, *given, **options)
    return [np.array(t.numpy()) for t in (tensors if out is None else out)]


@pytest.mark.parametrize("name, operands, options", FOREACH)
def test_foreach_functions_match_pytorchs(name, operands, options):
    """EMA code's `torch._foreach_lerp_(ema, params, 1 - decay)` and its kin: the op over lists,
    with a number, a tensor or one of either per tensor."""
    real = pytest.importorskip("torch")
    got, want = _foreach(torch, name, operands, options), _foreach(real, name, operands, options)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_foreach_operands_by_name_and_the_legacy_spellings_optimizers_use():
    """schedulefree's `_foreach_lerp_(y, z, weight=c)`, torch-optimizer's `grad.new(n, n)`,
    `torch.clone(p, memory_format=torch.preserve_format)`, Adahessian's
    `autograd.grad(..., only_inputs=True)`, the constructors' `out=`."""
    ys, zs = [torch.zeros(2), torch.ones(3)], [torch.ones(2), torch.ones(3) * 3]
    torch._foreach_lerp_(ys, zs, weight=0.25)
    assert ys[0].tolist() == [0.25, 0.25] and ys[1].tolist() == [1.5, 1.5, 1.5]
    g = torch.ones(2, dtype=torch.float64)
    assert g.new(2, 3).shape == (2, 3) and g.new(2, 3).dtype == torch.float64
    assert g.new().shape == (0,) and g.new(torch.Size([4])).shape == (4,)
    assert g.new([1, 2]).tolist() == [1.0, 2.0] and g.new([1, 2]).dtype == torch.float64
    p = torch.ones(2, requires_grad=True)
    c = torch.clone(p, memory_format=torch.preserve_format)
    assert c.tolist() == [1.0, 1.0] and c.requires_grad and c is not p
    (dp,) = torch.autograd.grad((p**3).sum(), [p], only_inputs=True)
    assert dp.tolist() == [3.0, 3.0]
    into = g.new(2, 2)  # Shampoo's `torch.eye(n, out=grad.new(n, n))`
    assert torch.eye(2, out=into) is into and into.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert torch.full((2,), 3.0, out=g.new(2)).tolist() == [3.0, 3.0]
    # the random constructors and multinomial too (botorch's batched_multinomial passes out=)
    for make in (lambda o: torch.arange(3, out=o), lambda o: torch.randperm(3, out=o),
                 lambda o: torch.randint(0, 3, (3,), out=o),
                 lambda o: torch.multinomial(torch.ones(3), 3, out=o)):  # fmt: skip
        into = torch.empty(0, dtype=torch.long)
        assert make(into) is into and into.shape == (3,)
        assert 0 <= min(into.tolist()) and max(into.tolist()) < 3
    assert torch.arange(3, out=into).tolist() == [0, 1, 2]
    assert sorted(torch.randperm(3, out=into).tolist()) == [0, 1, 2]
    into = torch.empty(0)
    for make in (torch.randn, torch.rand, lambda *s, out: torch.normal(0.0, 1.0, s, out=out)):
        assert make(2, 3, out=into) is into and into.shape == (2, 3)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_foreach_ema_compiles_as_it_runs_eagerly(backend):
    model = torch.nn.Linear(3, 2)
    ema = [p.detach().clone() for p in model.parameters()]

    def update(decay):
        with torch.no_grad():
            torch._foreach_lerp_(ema, list(model.parameters()), 1.0 - decay)
            torch._foreach_mul_(ema, 1.0)

    want = [e.numpy() + 0.1 * (p.detach().numpy() * 2 - e.numpy()) for e, p in
            zip(ema, model.parameters(), strict=True)]  # fmt: skip
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    torch.compile(update, backend=backend)(torch.tensor(0.9))
    for e, w in zip(ema, want, strict=True):
        np.testing.assert_allclose(e.numpy(), w, rtol=1e-6)


# --- import torch as tracegrad.torch ------------------------------------------------------------


def test_imported_as_torch_resolves_torch_and_restores_the_import_system():
    before = {k: v for k, v in sys.modules.items() if k == "torch" or k.startswith("torch.")}
    with torch.imported_as_torch():
        import torch as aliased
        import torch.nn.functional as F
        from torch.utils.data.dataloader import DataLoader

        assert (
            aliased is torch and F is torch.nn.functional and DataLoader is tg.utils.data.DataLoader
        )
        assert aliased.__spec__.name == "tracegrad.torch"  # its own spec, kept
        with pytest.raises(ModuleNotFoundError, match="'torch.nested': tracegrad.torch does not"):
            importlib.import_module("torch.nested")
    after = {k: v for k, v in sys.modules.items() if k == "torch" or k.startswith("torch.")}
    assert after == before
    assert torch.__spec__.name == "tracegrad.torch"


SCRIPT = """
import argparse
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(64, 4)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True)
    model = Net().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for epoch in range(1, args.epochs + 1):
        total = 0.0
        for data, target in loader:
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()
            total += loss.item()
        print("epoch {} loss {:.4f}".format(epoch, total / len(loader)))
    with torch.no_grad():
        correct = model(x).argmax(dim=1, keepdim=True).eq(y.view(-1, 1)).sum().item()
    print(f"argv {sys.argv[1:]} correct {correct}/{len(x)} torch {torch.__spec__.name}")


if __name__ == "__main__":
    main()
"""


def run_script(tmp_path, text, *args):
    path = tmp_path / "script.py"
    path.write_text(text)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TRACEGRAD_BACKGROUND_COMPILE": "0"}
    command = [sys.executable, "-m", "tracegrad", "run", str(path), *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)  # fmt: skip


def test_run_runs_an_unchanged_pytorch_script(tmp_path):
    done = run_script(tmp_path, SCRIPT, "--epochs", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    losses = [float(line.split()[-1]) for line in lines if line.startswith("epoch")]
    assert len(losses) == 5 and losses[-1] < losses[0]
    assert lines[-1].startswith("argv ['--epochs', '5'] correct ")
    assert lines[-1].endswith("torch tracegrad.torch")
    assert int(lines[-1].split()[-3].split("/")[0]) > 40


def test_run_names_what_is_missing_and_the_line(tmp_path):
    text = "import torch\n\nx = torch.ones(3)\ny = torch.nested.nested_tensor([x, x])\n"
    done = run_script(tmp_path, text)
    assert done.returncode == 1
    assert "torch.nested is not provided by tracegrad (used at script.py:4)" in done.stderr
    done = run_script(tmp_path, "import torch.nested\n")
    assert done.returncode == 1
    assert "No module named 'torch.nested': tracegrad.torch does not provide it" in done.stderr
    done = run_script(tmp_path, "import sys\nsys.exit(3)\n")
    assert done.returncode == 3


CHILDREN = """
import multiprocessing, subprocess, sys
import torch


def child(queue):
    import torch.nn.functional as F

    queue.put(F.__name__)


if __name__ == "__main__":
    spawn = multiprocessing.get_context("spawn")
    queue = spawn.Queue()
    worker = spawn.Process(target=child, args=(queue,))
    worker.start()
    print(torch.__spec__.name, queue.get())
    worker.join()
    print(subprocess.run([sys.executable, "-c", "import torch; print(torch.__spec__.name)"],
                         capture_output=True, text=True, check=True).stdout.strip())
"""


def test_run_gives_the_scripts_own_python_processes_tracegrad_too(tmp_path):
    """A spawned worker re-imports the script and a script may run Python again: both import
    tracegrad.torch, not an installed PyTorch (which would take tracegrad's tensors as foreign)."""
    done = run_script(tmp_path, CHILDREN)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tracegrad.torch", "tracegrad.torch.nn.functional",
                                   "tracegrad.torch"]  # fmt: skip


def test_pytorchs_module_paths_and_base_classes():
    """`torch.nn.modules.<file>` as PyTorch lays them out, with the private bases code tests
    with isinstance (weight-decay groups) or subclasses (custom losses), and `utils._pair`."""
    with torch.imported_as_torch():
        import torch as t
        from torch.nn.modules.batchnorm import _BatchNorm
        from torch.nn.modules.conv import _ConvNd
        from torch.nn.modules.loss import _Loss, _WeightedLoss
        from torch.nn.modules.utils import _pair, _triple

    model = t.nn.Sequential(t.nn.Conv2d(1, 2, 3), t.nn.BatchNorm2d(2), t.nn.LayerNorm(2))
    assert [isinstance(m, _BatchNorm) for m in model] == [False, True, False]
    assert isinstance(model[0], _ConvNd) and isinstance(t.nn.CrossEntropyLoss(), _Loss)
    assert _pair(3) == (3, 3) and _triple((1, 2, 3)) == (1, 2, 3)

    class Weighted(_WeightedLoss):  # a custom loss, as PyTorch code writes one
        def forward(self, x, y):
            return t.nn.functional.cross_entropy(x, y, weight=self.weight,
                                                 reduction=self.reduction)  # fmt: skip

    loss = Weighted(weight=t.tensor([1.0, 3.0]), reduction="sum")
    assert "weight" in loss.state_dict()
    np.testing.assert_allclose(loss(t.zeros((2, 2)), t.tensor([0, 1])).item(), 4 * np.log(2),
                               rtol=1e-6)  # fmt: skip
    with pytest.raises(AttributeError, match="torch.nn.modules.conv.Conv4d is not provided"):
        _ = t.nn.modules.conv.Conv4d


def test_optimizers_under_pytorchs_file_paths_and_pickled_by_them():
    """`torch.optim.rmsprop.RMSprop` and the others: code imports them there, and a pickle made
    by PyTorch (stable-baselines3 pickles its policy's optimizer class) names them there."""
    with torch.imported_as_torch():
        import importlib

        from torch.optim.adam import Adam
        from torch.optim.sgd import SGD

        rmsprop = importlib.import_module("torch.optim.rmsprop")
        by_reference = pickle.loads(
            b"\x80\x04\x95#\x00\x00\x00\x00\x00\x00\x00\x8c\x13"
            b"torch.optim.rmsprop\x94\x8c\x07RMSprop\x94\x93\x94."
        )
    assert Adam is torch.optim.Adam and SGD is torch.optim.SGD
    assert rmsprop.RMSprop is torch.optim.RMSprop is by_reference
    with pytest.raises(AttributeError, match="torch.optim.adam.Nothing is not provided"):
        _ = torch.optim.adam.Nothing


def test_attention_kernel_choices_are_accepted():
    from tracegrad.torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.ones((1, 2, 3, 4))
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]):
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    np.testing.assert_allclose(out.numpy(), 1.0, rtol=1e-6)


def test_the_deprecated_sdp_kernel_context_and_flags():
    """vit-pytorch's flash-attention ViT: `with torch.backends.cuda.sdp_kernel(...)`."""
    q = torch.randn(2, 2, 4, 8)
    with pytest.warns(FutureWarning, match="sdp_kernel"):
        with torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False):
            assert not torch.backends.cuda.flash_sdp_enabled()
            out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert torch.backends.cuda.flash_sdp_enabled() and out.shape == (2, 2, 4, 8)


def test_a_parameter_list_holds_a_parameter_list():
    """nViT appends ParameterLists to a ParameterList: they are submodules, as in PyTorch."""
    inner = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(2)), torch.ones(3)])
    outer = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(1))])
    outer.append(inner)
    assert len(outer) == 2 and outer[1] is inner and list(outer)[0].shape == (1,)
    assert [n for n, _ in outer.named_parameters()] == ["0", "1.0", "1.1"]


def _record_rank(rank, path):  # a spawned worker: a module-level function, as pickling asks
    (path / f"rank{rank}").write_text(str(rank))


def test_multiprocessing_is_pythons_with_spawn(tmp_path):
    """`from torch import multiprocessing as mp` imports, and `mp.spawn(fn, args, nprocs)` runs
    fn(rank, *args) in new processes."""
    from tracegrad.torch import multiprocessing as mp

    assert mp.cpu_count() >= 1 and mp.get_context("spawn") is not None
    mp.spawn(_record_rank, args=(tmp_path,), nprocs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def test_pytorchs_keyword_forms_of_the_tensor_methods():
    """`x.reshape(shape=...)` (DiT, MAE), `x.split(split_size=..., dim=-1)`, `x.pow(exponent=2)`:
    the keywords PyTorch's methods and functions take, against the positional forms."""
    x = torch.arange(24.0).reshape(2, 3, 4)
    same = [
        (x.reshape(shape=(4, 6)), x.reshape(4, 6)), (x.view(size=(4, 6)), x.view(4, 6)),
        (x.permute(dims=(2, 0, 1)), x.permute(2, 0, 1)), (x.flip(dims=(1,)), x.flip(1)),
        (x[:, :1].expand(size=(2, 5, 4)), x[:, :1].expand(2, 5, 4)),
        (x.repeat(repeats=(1, 2, 1)), x.repeat(1, 2, 1)), (x.tile(dims=(2,)), x.tile(2)),
        (x.pow(exponent=2), x.pow(2)), (x.mul(other=3), x * 3),
        (torch.mul(input=x, other=x), x * x), (torch.reshape(x, shape=(24,)), x.reshape(24)),
        (torch.permute(x, dims=(1, 0, 2)), x.permute(1, 0, 2)),
        (x.split(split_size=[1, 3], dim=-1)[1], x[..., 1:]),
        (x.new_zeros(size=(2, 2)), torch.zeros(2, 2)), (x.new_ones(size=(3,)), torch.ones(3)),
    ]  # fmt: skip
    for got, want in same:
        assert got.shape == want.shape and got.tolist() == want.tolist()


def test_a_view_as_another_dtype_reads_the_same_bytes():
    x = torch.tensor([1.0, -2.0])
    assert x.view(torch.int32).tolist() == [1065353216, -1073741824]
    assert x.view(dtype=torch.int32).tolist() == x.view(torch.int32).tolist()
    assert x.view(torch.uint8).shape == (8,) and x.view(torch.int16).shape == (4,)
    bits = x.view(torch.int32)
    bits[0] = 0  # the same memory, as PyTorch's
    assert x.tolist() == [0.0, -2.0]


def test_tensors_and_parameters_take_attributes_of_the_users():
    """`p._no_weight_decay = True` (mamba.py), kept by deepcopy as PyTorch's."""
    p = torch.nn.Parameter(torch.ones(3))
    p._no_weight_decay = True
    t = torch.ones(2)
    t.tag = "x"
    assert p._no_weight_decay and t.tag == "x" and not hasattr(torch.ones(1), "tag")
    assert copy.deepcopy(p)._no_weight_decay


def test_size_is_a_torch_size_that_counts_its_elements():
    """`x.shape` and `x.size()` are PyTorch's `torch.Size`: `.numel()`, a slice is one too
    (torchdiffeq's `shape[1:].numel()`; `x.shape` was a plain tuple), it prints as PyTorch's,
    and as the legacy constructor's one argument it is a shape, not data."""
    x = torch.zeros(4, 3)
    assert isinstance(x.size(), torch.Size) and x.size() == (4, 3) and x.size().numel() == 12
    assert type(x.shape) is torch.Size and x.shape.numel() == 12 and x.shape[1:].numel() == 3
    assert type(x.size()[:1]) is torch.Size and x.shape[0] == 4 and x.shape[-1:] == (3,)
    assert x.size(1) == 3 and repr(x.size()) == "torch.Size([4, 3])" == str(x.shape)
    assert torch.Tensor(x.size()).shape == (4, 3) and torch.Tensor(x.shape).shape == (4, 3)
    assert torch.Tensor((4, 3)).shape == (2,)


def test_run_answers_for_torchs_metadata_and_only_while_it_runs(tmp_path):
    """Libraries ask `importlib.metadata.version("torch")` whether torch is installed
    (accelerate, peft, older transformers): while `run` runs a script, torch's is tracegrad's."""
    text = ("import importlib.metadata as md, torch\n"
            "print(md.version('torch'), torch.__version__)\n")  # fmt: skip
    done = run_script(tmp_path, text)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2.13.0+tracegrad", "2.13.0+tracegrad"]
    outside = subprocess.run([sys.executable, "-c", text.splitlines()[0].split(",")[0] + "\n"
                              "print(md.version('torch'))"], capture_output=True, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert "PackageNotFoundError" in outside.stderr or outside.stdout.strip() != "2.13.0+tracegrad"


RACING_IMPORTS = """
import sys, threading, types, time
sys.setswitchinterval(1e-6)


def churn():  # another thread importing as the script ends (tqdm's monitor, a hub thread)
    i = 0
    while True:
        sys.modules[f"_churn_{i % 1000}"] = types.ModuleType("x")
        sys.modules.pop(f"_churn_{(i + 500) % 1000}", None)
        i += 1


threading.Thread(target=churn, daemon=True).start()
import torch
time.sleep(0.2)
print("done")
"""


def test_run_ends_cleanly_while_another_thread_imports(tmp_path):
    """Putting the import system back iterated sys.modules while a thread changed it: the run
    failed after the script had finished (RuntimeError: dictionary changed size)."""
    done = run_script(tmp_path, RACING_IMPORTS)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
