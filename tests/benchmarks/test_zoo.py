"""The benchmark zoo's models (benchmarks/zoo.py) train, in tiny sizes and float64: traced on
both backends as eager does, and eager as PyTorch does (where installed), from the same
weights and data; the floor counts the step's matrix products."""

from __future__ import annotations

import os
import sys
import warnings
from collections import Counter

import numpy as np
import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
)
import zoo  # noqa: E402
from workloads import Workload  # noqa: E402

from tracegrad.core import primitives as P  # noqa: E402
from tracegrad.core.vocabulary import Phase  # noqa: E402

SMALL = {
    "tiny": {"hidden": 16, "batch": 4},
    "mlp": {"workload": Workload("small", batch=16, width=16, depth=2, activation="gelu", steps=1)},
    "cnn": {"batch": 2},
    "gpt": {"vocab": 11, "context": 8, "batch": 2, "d": 16, "layers": 2, "heads": 2},
    "resnet": {"widths": (4, 8, 16), "blocks": 1, "image": 8, "batch": 2},
    "mobilenet": {
        "stem": 4,
        "head": 16,
        "image": 8,
        "batch": 2,
        "stages": ((1, 4, 1, 1), (2, 6, 2, 2)),
    },
    "dcgan": {"nz": 8, "ngf": 4, "ndf": 4, "batch": 2},
    "lstm": {"vocab": 50, "emb": 8, "hidden": 8, "bptt": 5, "batch": 3},
    "vit": {"image": 8, "patch": 4, "d": 16, "layers": 2, "heads": 2, "mlp": 32, "batch": 2},
    "unet": {"ch": 8, "tdim": 8, "image": 8, "batch": 2, "steps": 50},
}


def train(name: str, method: str, backend: str = "numba", steps: int = 3):
    """The losses of `steps` steps and the networks after them."""
    run = zoo.make_step(zoo.MODELS[name], method, {**SMALL[name], "dtype": "float64"}, backend)
    return [run() for _ in range(steps)], run.nets


def states(nets: dict) -> dict[str, np.ndarray]:
    return {f"{name}.{k}": np.asarray(v.numpy()) for name, net in nets.items()
            for k, v in net.state_dict().items()}  # fmt: skip


def test_every_model_has_a_small_size():
    assert set(SMALL) == set(zoo.MODELS)


@pytest.mark.parametrize("name", list(SMALL))
def test_traced_steps_train_as_eager_ones(name):
    eager, nets = train(name, "tg-eager")
    assert eager[-1] < eager[0], f"{name} did not train: {eager}"
    expected = states(nets)
    for backend in ("numpy", "numba"):
        traced, traced_nets = train(name, "tg-traced", backend)
        np.testing.assert_allclose(traced, eager, rtol=1e-10, err_msg=backend)
        for key, value in states(traced_nets).items():  # weights, optimizer-free state: BN's
            np.testing.assert_allclose(value, expected[key], rtol=1e-8, atol=1e-10,
                                       err_msg=f"{backend}: {key}")  # fmt: skip


@pytest.mark.parametrize("name", list(SMALL))
def test_compiled_modules_train_as_eager_ones(name):
    """Each network `torch.compile`d as a module (runtime/compiled_module.py), the step around
    them eager: a GAN's two networks and their two backward passes, an LSTM's carried state,
    batch norm's statistics written by the compiled forward."""
    eager, nets = train(name, "tg-eager")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "torch.compile")  # no call runs eagerly
        compiled, compiled_nets = train(name, "tg-module", "numpy")
    np.testing.assert_allclose(compiled, eager, rtol=1e-10)
    expected = states(nets)
    for key, value in states(compiled_nets).items():
        key = key.replace("_orig_mod.", "")
        np.testing.assert_allclose(value, expected[key], rtol=1e-8, atol=1e-10, err_msg=key)


@pytest.mark.parametrize("name", list(SMALL))
def test_losses_match_pytorch(name):
    pytest.importorskip("torch")
    theirs, their_nets = train(name, "torch")
    ours, our_nets = train(name, "tg-eager")
    np.testing.assert_allclose(ours, theirs, rtol=1e-10)
    expected = states(their_nets)
    for key, value in states(our_nets).items():
        np.testing.assert_allclose(value, expected[key], rtol=1e-8, atol=1e-10, err_msg=key)


def test_the_floor_counts_every_matrix_product_of_the_step():
    """784-16-10 on a batch of 4: each layer's product forward and its weight gradient (as
    PyTorch lays a Linear's weight out: g^T x), the input gradient of the second layer only
    (the data needs none)."""
    shapes, _ = zoo.step_gemms(zoo.MODELS["tiny"], SMALL["tiny"])
    assert shapes == Counter({(1, 4, 784, 16): 1, (1, 4, 16, 10): 1, (1, 16, 4, 784): 1,
                              (1, 10, 4, 16): 1, (1, 4, 10, 16): 1})  # fmt: skip


def test_the_floor_counts_convolutions_as_their_im2col_products():
    """Every convolution's weight gradient is one product of its forward's size (a transposed
    convolution's forward is conv2d_input_grad), and the floor counts each conv op."""
    for name in ("resnet", "dcgan"):
        _, graph = zoo.step_gemms(zoo.MODELS[name], SMALL[name])
        forward, weight_grads, ops = 0, 0, set()
        for n in graph.nodes:
            flops = sum(2 * int(np.prod(g)) for g in zoo.gemms(n))
            if flops and n.op.startswith("conv"):
                ops.add(n.op)
                forward += flops if n.phase is Phase.FORWARD else 0
                weight_grads += flops if n.prim is P.conv2d_weight_grad else 0
        assert forward == weight_grads > 0, name
        assert ops == {"conv2d", "conv2d_input_grad", "conv2d_weight_grad"}, name


def test_the_floor_counts_each_step_of_a_recurrent_scan():
    """The 2-layer LSTM's scans (whole layers, one op each way): forward each step's (B, H) by
    W_hh (H, 4H), backward the gates' cotangents by W_hh and W_hh's gradient, twice that."""
    c = {**zoo.MODELS["lstm"].config, **SMALL["lstm"]}
    _, graph = zoo.step_gemms(zoo.MODELS["lstm"], SMALL["lstm"])
    flops = Counter()
    for n in graph.nodes:
        flops[n.op] += sum(2 * int(np.prod(g)) for g in zoo.gemms(n))
    each_step = 2 * c["batch"] * c["hidden"] * 4 * c["hidden"]
    assert flops["lstm_scan"] == c["layers"] * c["bptt"] * each_step
    assert flops["lstm_scan_grad"] == 2 * flops["lstm_scan"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_floor_times_the_plans_own_gemm_on_the_whole_product(dtype):
    """The floor's run of the plans' GEMM routine in halves (`plan_gemm_halves`) computes the
    whole product, 2-D (rows split) and batched (the batch split), odd sizes included."""
    rng = np.random.default_rng(0)
    for shape in ((1, 37, 23, 19), (5, 7, 11, 13)):
        b, m, k, n = shape
        lead = (b,) if b > 1 else ()
        x, w = rng.standard_normal((*lead, m, k)), rng.standard_normal((*lead, k, n))
        x, w = x.astype(dtype), w.astype(dtype)
        out = np.full((*lead, m, n), np.nan, dtype)
        run = zoo.plan_gemm_halves(x, w, out)
        if run is None:
            pytest.skip("no BLAS GEMM routine to call: the floor is NumPy's matmul alone")
        run()
        tol = 1e-5 if dtype == np.float32 else 1e-12  # relative to the sums' scale, about 5
        np.testing.assert_allclose(out, x @ w, rtol=tol, atol=5 * tol)
