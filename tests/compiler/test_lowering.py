"""Lowering's choice of kernels: large fused groups, and small ones whose pattern repeats."""

import numpy as np
import pytest

import passes
import tracegrad as tg
from tracegrad.compiler import lowering
from tracegrad.core.vocabulary import Phase

SIZES = (5, 7, 7, 7, 7, 7, 7, 7, 7, 3)  # eight small hidden layers: 18 small parameters


def deep_step():
    """A step of a deep net of small layers with Adam: every parameter's update is a small fused
    group, and all of the weights' (and all of the biases') have one pattern."""
    rng = np.random.default_rng(0)
    params = []
    for m, n in zip(SIZES[:-1], SIZES[1:], strict=True):
        params += [tg.tensor(rng.standard_normal((m, n)) / np.sqrt(m)), tg.tensor(np.zeros(n))]
    for p in params:
        p.requires_grad_(True)
    opt = tg.optim.Adam(params, lr=1e-2, weight_decay=1e-3)

    def step(x, y):
        opt.zero_grad()
        h = x
        for w, b in zip(params[::2], params[1::2], strict=True):
            h = tg.tanh(h @ w + b)
        loss = ((h - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step, params


def data(steps=3):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((4, SIZES[0])), rng.standard_normal((4, SIZES[-1])))
            for _ in range(steps)]  # fmt: skip


def traced_training(model, batches):
    """`model`'s cross-entropy SGD step, traced on the Numba backend, after a call per batch."""
    opt = tg.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        tg.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    traced = tg.trace(step, backend="numba")
    for x, y in batches:
        traced(tg.tensor(x), tg.tensor(y))
    return traced


def kernel_lines(step):
    return [line for line in step.latest.source.splitlines() if line.lstrip().startswith("kernel")]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_of_many_small_parameters_matches_eager(backend):
    eager, eager_params = deep_step()
    step, params = deep_step()
    traced = tg.trace(step, backend=backend)
    for x, y in data():
        want = float(eager(tg.tensor(x), tg.tensor(y)))
        got = float(traced(x, y))
        assert got == pytest.approx(want, rel=1e-12)
    for p, q in zip(params, eager_params, strict=True):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-12, atol=1e-14)
    assert bool(kernel_lines(traced)) == (backend == "numba")


def test_small_groups_get_a_kernel_only_when_their_pattern_repeats(monkeypatch):
    step, _ = deep_step()
    traced = tg.trace(step, backend="numba")
    traced(*data(1)[0])
    traced(*data(1)[0])  # the second trace: the grads exist now
    fused, _ = passes.run(traced.latest.capture.graph, [*passes.DEFAULT, passes.fuse])
    chosen = lowering.kernel_groups(fused)
    assert chosen and all(v.size < lowering.KERNEL_MIN for n in chosen
                          for v in (*n.inputs, *n.outputs))  # fmt: skip
    updates = [line for line in kernel_lines(traced) if "update" in line]
    assert len(updates) >= len(SIZES) - 1  # at least each weight's update is one kernel
    monkeypatch.setattr(lowering, "REPEATED_MIN", 10**6)
    assert lowering.kernel_groups(fused) == []


def test_updates_of_parameters_of_any_rank_are_one_pattern_and_one_kernel():
    """Adam's update of a (C,) bias, a (C, D) weight and a (C, D, 1, 1) kernel: lowering counts
    them as one pattern, as the kernel generator compiles them to one kernel (the same canonical
    structure), so together they reach REPEATED_MIN where apart they would not."""
    from tracegrad.compiler.kernels import fused as fused_kernels

    rng = np.random.default_rng(0)
    shapes = [(3,), (3, 5), (3, 5, 1, 1)]
    params = [tg.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    opt = tg.optim.Adam(params, lr=1e-2)

    def step():
        opt.zero_grad()
        sum(((p * p).sum() for p in params), tg.tensor(0.0)).backward()
        opt.step()

    traced = tg.trace(step, backend="numpy")
    traced()
    traced()  # the second trace: the grads exist now
    graph, _ = passes.run(traced.latest.capture.graph, [*passes.DEFAULT, passes.fuse])
    updates = [n for n in graph.nodes if n.op == "fused" and n.outputs[0].shape in shapes
               and "mul" in [m.op for m in n.attrs["body"].nodes]]  # fmt: skip
    assert sorted(n.outputs[0].shape for n in updates) == sorted(shapes)
    bodies = [n.attrs["body"] for n in updates]
    assert len({lowering._pattern(b) for b in bodies}) == 1
    structures = {fused_kernels.analyze(b.inputs, b.nodes, b.outputs)[0] for b in bodies}
    assert len(structures) == 1


def test_squeeze_excitation_and_group_norm_blocks_run_as_kernels_and_train_as_eager(
    monkeypatch,
):
    """A conv net with group norm, SiLU and squeeze-and-excitation gates (pooled per sample and
    channel, where a channel's scale also broadcasts): every fused group compiles (no sigmoid
    is left to NumPy), the group norms run the layer-norm kernels, and training traced equals
    eager in float64."""
    from tests.conftest import assert_traced_training_matches_eager

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    nn = tg.nn

    class Gate(nn.Module):
        def __init__(self, c: int):
            super().__init__()
            self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 2),
                                    nn.ReLU(), nn.Linear(2, c), nn.Sigmoid())  # fmt: skip

        def forward(self, x):
            return x * self.fc(x)[:, :, None, None]

    def make_model():
        layers = [nn.Conv2d(3, 4, 3, padding=1), nn.GroupNorm(2, 4), nn.SiLU(), Gate(4),
                  nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.SiLU(), Gate(4),
                  nn.Flatten(), nn.Linear(64, 3)]  # fmt: skip
        return nn.Sequential(*layers).double()

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 3, 8, 8)), rng.integers(0, 3, 2)) for _ in range(3)]
    assert_traced_training_matches_eager(make_model, batches, "numba")
    traced = traced_training(make_model(), batches)
    assert "sigmoid_impl" not in traced.latest.source
    assert "layer_norm kernel" in traced.latest.source
    assert "layer_norm_grad kernel" in traced.latest.source


class NormedBlock(tg.nn.Module):
    """conv, batch norm, an activation, conv: the activation is the second conv's image, and
    with `tap` a linear layer's too."""

    def __init__(self, activation: tg.nn.Module, tap: bool = False):
        super().__init__()
        nn = tg.nn
        self.conv1, self.norm = nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6)
        self.activation, self.conv2 = activation, nn.Conv2d(6, 6, 3, stride=2, padding=1)
        self.fc, self.tap = nn.Linear(6 * 4 * 4, 3), nn.Linear(6 * 8 * 8, 3) if tap else None

    def forward(self, x):
        h = self.activation(self.norm(self.conv1(x)))
        out = self.fc(self.conv2(h).flatten(1))
        return out + self.tap(h.flatten(1)) if self.tap else out


@pytest.mark.parametrize(
    "activation, tap, expected",
    [("relu", False, ["conv2d", "conv2d_weight_grad"]),
     ("leaky", False, ["conv2d", "conv2d_weight_grad"]),
     ("silu", False, []),  # its exp stays in the fused kernels
     ("relu", True, None)],  # the activation read by a product too: forward's conv reads it
)  # fmt: skip
def test_a_norm_and_activation_only_convolutions_read_is_their_prologue(
    monkeypatch, activation, tap, expected
):
    """The second convolution (forward, and its weight gradient from the rebuilt activation)
    applies the batch norm's scale and shift and a ReLU or leaky ReLU as it copies its image
    (`lowering._conv_prologues`), and no kernel writes the activation; training traced equals
    eager in float64."""
    from tests.conftest import assert_traced_training_matches_eager

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    nn = tg.nn
    act = {"relu": nn.ReLU, "leaky": lambda: nn.LeakyReLU(0.2), "silu": nn.SiLU}[activation]
    make_model = lambda: NormedBlock(act(), tap).double()  # noqa: E731
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 3, 8, 8)), rng.integers(0, 3, 2)) for _ in range(3)]
    assert_traced_training_matches_eager(make_model, batches, "numba")
    graph = traced_training(make_model(), batches).latest.graph
    prologues = [n for n in graph.nodes if "prologue" in n.attrs]
    taken = sorted(n.op for n in prologues)
    if expected is None:
        assert "conv2d" not in taken
        return
    assert taken == expected
    activations = {n.attrs["prologue"].outputs[0] for n in prologues}
    assert not activations & {v for n in graph.nodes for v in n.outputs}  # nothing writes them


class BiasedBlock(tg.nn.Module):
    """conv and its bias, then max pooling and a ReLU (as the MNIST example's), or a tanh and a
    linear layer, or a transposed conv and its bias, a tanh and a linear layer; with `tap` a
    linear layer reads the product before its bias too."""

    def __init__(self, finish: str, tap: bool = False):
        super().__init__()
        nn = tg.nn
        self.conv, self.finish = nn.Conv2d(3, 6, 3, padding=1), finish
        self.up = nn.ConvTranspose2d(3, 6, 4, stride=2, padding=1)
        self.fc = nn.Linear(6 * {"pool": 4 * 4, "tanh": 8 * 8, "transposed": 16 * 16}[finish], 3)
        self.tap = nn.Linear(6 * 8 * 8, 3) if tap else None

    def forward(self, x):
        if self.finish == "transposed":  # 3 x 8 x 8 -> 6 x 16 x 16
            return self.fc(tg.tanh(self.up(x)).flatten(1))
        product = tg.nn.functional.conv2d(x, self.conv.weight, padding=1)
        y = product + self.conv.bias[:, None, None]
        h = tg.relu(tg.nn.functional.max_pool2d(y, 2)) if self.finish == "pool" else tg.tanh(y)
        out = self.fc(h.flatten(1))
        return out + self.tap(product.flatten(1)) if self.tap else out


@pytest.mark.parametrize("finish, tap", [("pool", False), ("tanh", False), ("transposed", False),
                                         ("pool", True)])  # fmt: skip
def test_a_bias_and_activation_all_a_convolution_feeds_are_its_epilogue(monkeypatch, finish,
                                                                        tap):  # fmt: skip
    """A convolution's bias (and a tanh after it) are done by the convolution as it writes its
    results (`lowering._conv_epilogues`), a transposed one's too: no fused kernel reads its
    result in forward; not where a layer reads the product before the bias too. Training traced
    equals eager in float64."""
    from tests.conftest import assert_traced_training_matches_eager

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    make_model = lambda: BiasedBlock(finish, tap).double()  # noqa: E731
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 3, 8, 8)), rng.integers(0, 3, 2)) for _ in range(3)]
    assert_traced_training_matches_eager(make_model, batches, "numba")
    graph = traced_training(make_model(), batches).latest.graph
    op = "conv2d_input_grad" if finish == "transposed" else "conv2d"
    (forward,) = [n for n in graph.nodes if n.op == op and n.phase is Phase.FORWARD]
    if tap:
        assert "epilogue" not in forward.attrs
        return
    ops = [n.op for n in forward.attrs["epilogue"].nodes]
    assert ops == (["add"] if finish == "pool" else ["add", "tanh"])
    readers = [n for n in graph.nodes if set(n.inputs) & set(forward.outputs)]
    assert readers and not any(n.op == "fused" and n.phase is forward.phase for n in readers)


@pytest.mark.parametrize("large", [True, False])
def test_a_small_channel_statistic_is_a_kernel_where_the_plan_runs_kernels(large):
    """A batch norm's sum over (0, 2, 3) of a small (2, 3, 4, 4) input: a kernel in a plan that
    loads Numba anyway (NumPy's reduce around kept axes is several times slower at any size),
    NumPy calls in a plan of small arrays only; traced equals eager either way."""
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((2, 3, 4, 4)))
    big = tg.tensor(rng.standard_normal((lowering.KERNEL_MIN if large else 8,)))

    def f(x, big):
        return (x * x).sum((0, 2, 3), keepdim=True), tg.tanh(big) * 2.0

    traced = tg.trace(f, backend="numba")
    for got, want in zip(traced(x, big), f(x, big), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    graph, _ = passes.run(traced.latest.capture.graph, [*passes.DEFAULT, passes.fuse])
    chosen = [[m.op for m in n.attrs["body"].nodes] for n in lowering.kernel_groups(graph)]
    assert (["mul", "sum"] in chosen) == large


@pytest.mark.parametrize("large", [True, False])
def test_a_small_layers_bias_and_relu_are_a_kernel_where_the_plan_runs_kernels(large):
    """A (64, 256) layer's bias and ReLU, two ops over 16K elements: one kernel in a plan that
    loads Numba anyway, NumPy calls in a plan of small arrays only; a lone op over as many, or
    two over a few elements, NumPy calls either way; traced equals eager."""
    rng = np.random.default_rng(0)
    shapes = [
        (64, 32),
        (32, 256),
        (256,),
        (64, 256),
        (4, 8),
        (lowering.KERNEL_MIN if large else 8,),
    ]
    args = [tg.tensor(rng.standard_normal(s)) for s in shapes]

    def f(x, w, b, z, small, big):
        return tg.relu(x @ w + b), z * 3.0, small * 2.0 + 1.0, tg.tanh(big) * 2.0

    traced = tg.trace(f, backend="numba")
    for got, want in zip(traced(*args), f(*args), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    graph, _ = passes.run(traced.latest.capture.graph, [*passes.DEFAULT, passes.fuse])
    chosen = [[m.op for m in n.attrs["body"].nodes] for n in lowering.kernel_groups(graph)]
    assert (["add", "maximum"] in chosen) == large
    assert ["mul"] not in chosen and ["mul", "add"] not in chosen


def test_products_from_gemms_minimum_run_on_the_gemm_kernel_in_a_plan_that_loads_numba():
    """A recurrent step's (32, 128) @ (128, 384) is below the plan-wide KERNEL_MIN but above
    gemm's own: it takes the GEMM kernel (np.matmul's threads cost more there); a (16, 16)
    product stays np.matmul; traced equals eager."""
    from tracegrad.compiler.kernels import gemm

    rng = np.random.default_rng(0)
    h, w = rng.standard_normal((32, 128)), rng.standard_normal((128, 384))
    a, b = rng.standard_normal((16, 16)), rng.standard_normal((16, 16))
    big = rng.standard_normal(lowering.KERNEL_MIN)

    def f(h, w, a, b, big):
        return h @ w, a @ b, tg.tanh(big)

    args = [tg.tensor(v) for v in (h, w, a, b, big)]
    traced = tg.trace(f, backend="numba")
    for got, want in zip(traced(*args), f(*args), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)
    chosen = {n.outputs[0].shape for n in lowering.native_nodes(traced.latest.graph)}
    assert (32, 384) in chosen and (16, 16) not in chosen
    assert 16 * 16 < gemm.KERNEL_MIN <= 32 * 128


def test_a_skip_connections_gradient_halves_are_copied_once_for_the_kernels_that_read_them(
    monkeypatch,
):
    """A U-Net's skip connection: the gradient of cat([up, skip], dim=1) splits along channels
    into two strided halves, which convolutions and fused kernels read; each half is copied
    once, by NumPy into the arena, and no kernel is handed a strided array (each would copy it
    at every call). Training traced equals eager in float64."""
    from tests.conftest import assert_traced_training_matches_eager

    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    nn = tg.nn

    class Skip(nn.Module):
        def __init__(self):
            super().__init__()
            self.down, self.up = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
            self.merge, self.head = nn.Conv2d(8, 4, 3, padding=1), nn.Linear(4 * 8 * 8, 3)

        def forward(self, x):
            skip = nn.functional.silu(self.down(x))
            merged = self.merge(tg.cat([self.up(skip), skip], dim=1))
            return self.head(tg.tanh(merged).flatten(1))

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((2, 3, 8, 8)), rng.integers(0, 3, 2)) for _ in range(3)]
    assert_traced_training_matches_eager(lambda: Skip().double(), batches, "numba")
    graph = traced_training(Skip().double(), batches[:1]).latest.graph
    halves = {v for n in graph.nodes if lowering._strided_slice(n) for v in n.outputs}
    assert len(halves) == 2  # of the merge's input gradient
    assert [n.op for n in graph.nodes if halves & set(n.inputs)] == ["positive", "positive"]


@pytest.mark.parametrize(
    ("index", "strided"),
    [((slice(None), slice(0, 4)), True),  # channels of a batch: a concatenation's gradient
     ((slice(0, 2),), False),  # samples: one contiguous block
     ((0, slice(0, 4)), False),  # a sample's first channels
     ((slice(None), slice(None), slice(None), slice(0, 3)), True),
     ((slice(None),), False)],
)  # fmt: skip
def test_strided_slices_are_told_from_contiguous_ones_by_shape_alone(index, strided):
    from tracegrad.core import ir
    from tracegrad.core import primitives as P

    x = ir.Value((2, 8, 5, 5), np.dtype(np.float32))
    out_shape = np.empty(x.shape, x.dtype)[index].shape
    node = ir.Node(P.getitem, [x], [ir.Value(out_shape, x.dtype)], {"template": index})
    assert lowering._strided_slice(node) is strided
