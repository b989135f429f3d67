"""Convolution, pooling, embeddings, attention and batch norm: values and gradients against
float64 finite differences (always) and PyTorch (where installed); the layers' state_dict keys
and initialization; a traced CNN step with batch norm and a traced GPT step against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad, traced_matches_eager
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # CI has no torch: the finite-difference checks still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed")

CONVS = [  # (N, C, H, W), out, kernel, stride, padding, dilation, groups
    ((2, 4, 6, 5), 6, 3, 1, 1, 1, 2),
    ((1, 3, 7, 6), 2, 3, 2, 0, 1, 1),
    ((2, 2, 6, 7), 4, 2, 1, "same", 2, 1),
    ((1, 2, 7, 7), 3, 3, 2, 2, 2, 1),
]


def draw(rng, *shapes):
    return [rng.standard_normal(s) for s in shapes]


# --- finite differences (no torch needed) ------------------------------------------------------


@pytest.mark.parametrize("shape, out, k, stride, padding, dilation, groups", CONVS)
def test_conv2d_gradients_match_finite_differences(rng, shape, out, k, stride, padding,
                                                   dilation, groups):  # fmt: skip
    x, w, b = draw(rng, shape, (out, shape[1] // groups, k, k), (out,))
    conv = lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups)
    check_grad(conv, x, w, b)


def test_conv2d_second_order_matches_finite_differences(rng):
    """The input and weight gradients are ops with VJPs of their own (each other)."""
    x, w = draw(rng, (1, 2, 5, 5), (3, 2, 3, 3))

    def gradient_norm(x, w):
        gx, gw = tg.grad(lambda x, w: (F.conv2d(x, w, padding=1) ** 3.0).sum(), (0, 1))(x, w)
        return (gx * gx).sum() + (gw * gw).sum()

    gx, gw = tg.grad(gradient_norm, (0, 1))(tg.tensor(x), tg.tensor(w))
    expected_x = numeric_grad(lambda a: float(gradient_norm(tg.tensor(a), tg.tensor(w))), x)
    expected_w = numeric_grad(lambda a: float(gradient_norm(tg.tensor(x), tg.tensor(a))), w)
    np.testing.assert_allclose(gx.numpy(), expected_x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw.numpy(), expected_w, rtol=1e-5, atol=1e-5)


def test_conv1d_same_padding_gradients(rng):
    x, w, b = draw(rng, (2, 3, 9), (4, 3, 4), (4,))
    check_grad(lambda x, w, b: F.conv1d(x, w, b, padding="same", dilation=2), x, w, b)


@pytest.mark.parametrize(
    "pool", [lambda x: F.max_pool2d(x, 2), lambda x: F.max_pool2d(x, 3, 2, 1, 2),
             lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
             lambda x: F.adaptive_avg_pool2d(x, (2, 3)), lambda x: F.adaptive_avg_pool2d(x, 1)],
)  # fmt: skip
def test_pooling_gradients(rng, pool):
    check_grad(pool, rng.standard_normal((2, 2, 7, 6)))


def test_embedding_gradient_is_a_scatter_add_that_skips_the_padding_row(rng):
    idx = tg.tensor(np.array([[0, 2, 2], [3, 1, 0]]))
    check_grad(lambda w: F.embedding(idx, w), rng.standard_normal((4, 3)))
    w = tg.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    F.embedding(idx, w, padding_idx=2).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy()[:, 0], [2, 1, 0, 1])


@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_attention_gradients(rng, mask):
    q, k, v = draw(rng, (2, 3, 4), (2, 5, 4), (2, 5, 2))
    attn_mask = {"bool": rng.random((3, 5)) > 0.3, "float": rng.standard_normal((3, 5))}.get(mask)
    if mask == "bool":
        attn_mask[:, 0] = True  # every query sees a key
    causal = mask == "causal"
    if causal:
        k, v = k[:, :3], v[:, :3]
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=causal)
    check_grad(sdpa, q, k, v)


def test_batch_norm_training_gradients_and_running_stats(rng):
    x, w, b = draw(rng, (4, 3, 2, 2), (3,), (3,))
    check_grad(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), x, w, b)
    mean, var = tg.tensor(np.zeros(3)), tg.tensor(np.ones(3))
    F.batch_norm(tg.tensor(x), mean, var, training=True, momentum=0.5)
    np.testing.assert_allclose(mean.numpy(), 0.5 * x.mean((0, 2, 3)))
    np.testing.assert_allclose(var.numpy(), 0.5 + 0.5 * x.var((0, 2, 3), ddof=1))


@pytest.mark.parametrize("fn", [lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"),
                                F.silu])  # fmt: skip
def test_activation_gradients(rng, fn):
    check_grad(fn, rng.standard_normal((3, 4)))


def test_one_hot():
    out = F.one_hot(tg.tensor(np.array([2, 0, 1])))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out.numpy(), np.eye(3, dtype=np.int64)[[2, 0, 1]])
    assert F.one_hot(tg.tensor(np.array([1])), num_classes=4).shape == (1, 4)


def test_conv2d_shape_errors_name_the_op_and_shapes():
    x = tg.tensor(np.zeros((1, 3, 5, 5), np.float32))
    with pytest.raises(tg.ShapeError, match=r"conv2d.*\(1, 3, 5, 5\).*\(4, 2, 3, 3\)"):
        F.conv2d(x, np.zeros((4, 2, 3, 3), np.float32))
    with pytest.raises(tg.ShapeError, match="smaller than"):
        F.conv2d(x, np.zeros((4, 3, 7, 7), np.float32))
    with pytest.raises(ValueError, match="same"):
        F.conv2d(x, np.zeros((4, 3, 3, 3), np.float32), stride=2, padding="same")


def test_init_draws_with_pytorchs_scales():
    nn.manual_seed(0)
    w = tg.tensor(np.zeros((400, 100, 3, 3), np.float32))
    nn.init.kaiming_uniform_(w, nonlinearity="relu")
    bound = np.sqrt(6 / 900)
    assert abs(w.numpy()).max() <= bound and abs(w.numpy()).max() > 0.99 * bound
    nn.init.kaiming_normal_(w, mode="fan_out")
    np.testing.assert_allclose(w.numpy().std(), np.sqrt(2 / 1.0001) / np.sqrt(3600), rtol=0.01)
    nn.init.xavier_normal_(w, gain=2.0)
    np.testing.assert_allclose(w.numpy().std(), 2 * np.sqrt(2 / 4500), rtol=0.01)
    nn.init.xavier_uniform_(w)
    assert abs(w.numpy()).max() <= np.sqrt(6 / 4500)
    assert nn.init.zeros_(w).numpy().max() == 0 and nn.init.ones_(w).numpy().min() == 1
    nn.init.uniform_(w, 2, 3)
    assert w.numpy().min() >= 2 and w.numpy().max() <= 3


def test_containers_register_their_modules():
    layers = nn.ModuleList([nn.Linear(2, 3), nn.Identity()]).append(nn.Linear(3, 1))
    assert len(layers) == 3 and isinstance(layers[1], nn.Identity)
    heads = nn.ModuleDict({"a": nn.Linear(2, 2)})
    heads["b"] = nn.Conv1d(2, 2, 1)
    keys = set(nn.Sequential(layers, heads).state_dict())
    assert keys == {"0.0.weight", "0.0.bias", "0.2.weight", "0.2.bias", "1.a.weight", "1.a.bias",
                    "1.b.weight", "1.b.bias"}  # fmt: skip
    assert nn.Flatten()(tg.zeros((2, 3, 4, 5))).shape == (2, 60)


# --- against PyTorch ------------------------------------------------------------------------


def both(fn_tg, fn_torch, *arrays):
    """Values and gradients of sum(fn(*xs) * c) in tracegrad and PyTorch (float64)."""
    xs = [tg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y, ty = fn_tg(*xs), fn_torch(*ts)
    c = np.random.default_rng(5).standard_normal(y.shape)
    (y * c).sum().backward()
    (ty * torch.tensor(c)).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), atol=1e-10)
    for x, t in zip(xs, ts, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), atol=1e-10)


@needs_torch
@pytest.mark.parametrize("shape, out, k, stride, padding, dilation, groups", CONVS)
def test_conv2d_matches_torch(rng, shape, out, k, stride, padding, dilation, groups):
    x, w, b = draw(rng, shape, (out, shape[1] // groups, k, k), (out,))
    args = (stride, padding, dilation, groups)
    both(lambda *a: F.conv2d(*a, *args), lambda *a: TF.conv2d(*a, *args), x, w, b)
    x, w = draw(rng, shape[:3], (out, shape[1] // groups, k))
    both(lambda *a: F.conv1d(*a, None, *args), lambda *a: TF.conv1d(*a, None, *args), x, w)


@needs_torch
@pytest.mark.parametrize("shape, normalized", [((2, 5, 6), (6,)), ((2, 3, 4), (3, 4))])
def test_layer_norm_matches_torch(rng, shape, normalized):
    x, w, b = draw(rng, shape, normalized, normalized)
    both(lambda *a: F.layer_norm(a[0], normalized, *a[1:]),
         lambda *a: TF.layer_norm(a[0], normalized, *a[1:]), x, w, b)  # fmt: skip


@needs_torch
@pytest.mark.parametrize(
    "name, args",
    [("max_pool2d", (2,)), ("max_pool2d", (3, 2, 1, 2)), ("avg_pool2d", (3, 2, 1)),
     ("avg_pool2d", (3, 1, 1, False, False)), ("adaptive_avg_pool2d", ((3, 2),)),
     ("adaptive_avg_pool2d", (1,)), ("gelu", ()), ("silu", ())],
)  # fmt: skip
def test_functional_matches_torch(rng, name, args):
    x = rng.standard_normal((2, 3, 7, 6))
    both(lambda x: getattr(F, name)(x, *args), lambda x: getattr(TF, name)(x, *args), x)


@needs_torch
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_attention_matches_torch(rng, mask):
    q, k, v = draw(rng, (2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 3))
    attn_mask = {"bool": rng.random((4, 4)) > 0.3, "float": rng.standard_normal((4, 4))}.get(mask)
    if mask == "bool":
        attn_mask[:, 0] = True
    causal = mask == "causal"
    tmask = None if attn_mask is None else torch.tensor(attn_mask)
    both(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=causal),
         lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, tmask, is_causal=causal),
         q, k, v)  # fmt: skip


def torch_twin(module, twin):
    """Copy the tracegrad module's state into the torch module (keys must agree), float64."""
    state = {k: torch.tensor(v.numpy()) for k, v in module.state_dict().items()}
    assert list(state) == list(twin.state_dict())
    twin.load_state_dict(state)
    return twin.double()


@needs_torch
@pytest.mark.parametrize(
    "make, make_torch, shape",
    [(lambda m: m.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), None, (2, 4, 7, 7)),
     (lambda m: m.Conv1d(3, 5, 3, padding="same", dilation=2), None, (2, 3, 9)),
     (lambda m: m.BatchNorm2d(3), None, (4, 3, 5, 5)),
     (lambda m: m.BatchNorm1d(3, momentum=None), None, (6, 3)),
     (lambda m: m.Embedding(7, 4, padding_idx=1), None, None),
     (lambda m: m.LayerNorm((3, 4)), None, (2, 5, 3, 4)),
     (lambda m: m.Sequential(m.MaxPool2d(2), m.AvgPool2d(2, 1), m.AdaptiveAvgPool2d(1),
                             m.Flatten()), None, (2, 3, 8, 8))],
)  # fmt: skip
def test_modules_match_torch(rng, make, make_torch, shape):
    module = make(nn)
    twin = torch_twin(module, make(torch.nn))
    module = module  # float32 parameters; compare in float32 tolerance
    for _ in range(2):  # batch norm: running statistics move; then evaluation uses them
        data = rng.integers(0, 7, (3, 5)) if shape is None else rng.standard_normal(shape)
        x = tg.tensor(data if shape is None else data.astype(np.float32))
        y, ty = module(x), twin(torch.tensor(data))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for k, v in twin.state_dict().items():
        np.testing.assert_allclose(module.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-6)
    module.eval(), twin.eval()
    y, ty = module(x), twin(torch.tensor(data))
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_matches_torch(rng, batch_first):
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    twin = torch_twin(mha, torch.nn.MultiheadAttention(8, 2, batch_first=batch_first))
    mha.double()  # float64 inputs into a float32 module raise, as in PyTorch
    q, kv = rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 5, 8))
    if not batch_first:
        q, kv = q.transpose(1, 0, 2).copy(), kv.transpose(1, 0, 2).copy()
    mask = rng.random((4, 5)) > 0.7
    mask[:, 0] = False
    padding = np.zeros((2, 5), np.bool_)
    padding[1, 3:] = True
    both_masks = {"attn_mask": rng.standard_normal((4, 5)), "key_padding_mask": padding}
    for kwargs in ({}, {"attn_mask": mask}, {"need_weights": False}, both_masks):
        tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        out, weights = mha(q, kv, kv, **kwargs)
        tout, tweights = twin(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), **tkw)
        np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
        if weights is None:
            assert tweights is None
        else:
            np.testing.assert_allclose(weights.numpy(), tweights.detach().numpy(), atol=1e-5)


def _np_attention(mha, q, k, v, padding):
    """PyTorch's MultiheadAttention by hand, (T, N, E) inputs: separate projections, bias_k and
    bias_v appended to the keys and values, then a zero key and value, all attended."""
    p = {name: t.numpy() for name, t in mha.named_parameters()}
    e, h = mha.embed_dim, mha.num_heads
    bias = np.split(p["in_proj_bias"], 3)
    projected = zip((q, k, v), "qkv", bias, strict=True)
    qp, kp, vp = (x @ p[f"{c}_proj_weight"].T + b for x, c, b in projected)
    n = q.shape[1]
    kp = np.concatenate([kp, np.broadcast_to(p["bias_k"], (1, n, e)), np.zeros((1, n, e))])
    vp = np.concatenate([vp, np.broadcast_to(p["bias_v"], (1, n, e)), np.zeros((1, n, e))])
    split = lambda x: x.reshape(x.shape[0], n, h, e // h).transpose(1, 2, 0, 3)  # noqa: E731
    scores = split(qp) @ split(kp).transpose(0, 1, 3, 2) / np.sqrt(e // h)
    masked = np.concatenate([padding, np.zeros((n, 2), bool)], 1)[:, None, None]
    scores = np.where(masked, -np.inf, scores)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    out = (weights @ split(vp)).transpose(2, 0, 1, 3).reshape(q.shape[0], n, e)
    return out @ p["out_proj.weight"].T + p["out_proj.bias"], weights.mean(1)


def test_multihead_attention_with_kdim_vdim_bias_kv_and_zero_attention(rng):
    """kdim/vdim (q, k and v_proj_weight), add_bias_kv and add_zero_attn, PyTorch's layout and
    arithmetic (they were refused); gradients by finite differences, traced as eager."""
    nn.manual_seed(0)
    mha = nn.MultiheadAttention(6, 2, kdim=5, vdim=3, add_bias_kv=True, add_zero_attn=True)
    mha.double()
    names = [name for name, _ in mha.named_parameters()]
    assert names == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                     "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"]  # fmt: skip
    assert mha.in_proj_weight is None and mha.bias_k.shape == (1, 1, 6)
    with tg.no_grad():
        mha.in_proj_bias.normal_()
    q, k, v = (
        rng.standard_normal((4, 2, 6)),
        rng.standard_normal((5, 2, 5)),
        rng.standard_normal((5, 2, 3)),
    )
    padding = np.array([[False, False, True, True, True], [False, True, False, False, False]])
    out, weights = mha(tg.tensor(q), tg.tensor(k), tg.tensor(v), key_padding_mask=padding)
    want, want_weights = _np_attention(mha, q, k, v, padding)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), want_weights, rtol=1e-12, atol=1e-12)
    check_grad(lambda q, k, v: mha(q, k, v, key_padding_mask=padding)[0], q, k, v)
    traced_matches_eager(lambda q, k, v: mha(q, k, v, need_weights=False)[0], q, k, v,
                         backend="numpy")  # fmt: skip


# --- traced against eager -------------------------------------------------------------------


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, padding="same"),
                                      nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())  # fmt: skip
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        return self.head(self.features(x))


class GPT(nn.Module):
    """Pre-LayerNorm decoder: token and position embeddings, causal attention, MLP."""

    def __init__(self, vocab=11, context=6, d=8, heads=2, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(self.block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    @staticmethod
    def block(d, heads):
        attn = nn.MultiheadAttention(d, heads, batch_first=True)
        return nn.ModuleDict({"ln1": nn.LayerNorm(d), "attn": attn, "ln2": nn.LayerNorm(d),
                              "fc": nn.Linear(d, 4 * d), "proj": nn.Linear(4 * d, d)})  # fmt: skip

    def forward(self, idx):
        x = self.tok(idx) + self.pos(tg.tensor(np.arange(idx.shape[1])))
        for b in self.blocks:
            h = b["ln1"](x)
            x = x + b["attn"](h, h, h, need_weights=False, is_causal=True)[0]
            x = x + b["proj"](F.gelu(b["fc"](b["ln2"](x)), approximate="tanh"))
        return self.head(self.ln(x))


def model_step(model, opt_cls, **opt_args):
    gm = tg.GradManager().attach(model.parameters())
    opt = opt_cls(model.parameters(), **opt_args)

    def step(x, y):
        with gm:
            logits = model(x)
            loss = F.cross_entropy(tg.reshape(logits, (-1, logits.shape[-1])), tg.reshape(y, -1))
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    return step


def float64(model):
    """The model in float64, so that eager and traced steps agree far beyond their rounding
    (attention's key bias has a gradient of exactly zero, seen as float32 noise)."""
    for t in [*model.parameters(), *model.buffers()]:
        if t.dtype == np.float32:
            t._value = t.numpy().astype(np.float64)
    return model


def compare(make_model, opt_cls, opt_args, data, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    nn.manual_seed(0)
    eager_model = float64(make_model())
    nn.manual_seed(0)
    traced_model = float64(make_model())
    eager = model_step(eager_model, opt_cls, **opt_args)
    traced = tg.trace(model_step(traced_model, opt_cls, **opt_args), backend=backend)
    for x, y in data:
        a, b = float(eager(tg.tensor(x), tg.tensor(y))), float(traced(x, y))
        np.testing.assert_allclose(b, a, rtol=1e-10)
    for (k, v), (_, w) in zip(eager_model.state_dict().items(), traced_model.state_dict().items(),
                              strict=True):  # fmt: skip
        np.testing.assert_allclose(w.numpy(), v.numpy(), rtol=1e-8, atol=1e-10, err_msg=k)
    return eager_model, traced_model


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_cnn_step_with_batch_norm_matches_eager(rng, backend, monkeypatch):
    data = [(rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 3, 8))
            for _ in range(3)]  # fmt: skip
    eager, traced = compare(CNN, optim.SGD, {"lr": 0.1, "momentum": 0.9}, data, backend,
                            monkeypatch)  # fmt: skip
    assert int(traced.features[1].num_batches_tracked.numpy()) == 3
    assert not np.allclose(traced.features[1].running_mean.numpy(), 0)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_pooling_with_padding_matches_eager(rng, backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = rng.standard_normal((2, 3, 7, 6))

    def pooled(x):
        y = F.avg_pool2d(x, 3, 2, 1, count_include_pad=False) + F.max_pool2d(x, 3, 2, 1)
        return y * F.adaptive_avg_pool2d(x, (4, 3))

    np.testing.assert_allclose(tg.trace(pooled, backend=backend)(x).numpy(), pooled(x).numpy())


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_traced_gpt_step_matches_eager(rng, backend, monkeypatch):
    data = [(rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 6))) for _ in range(3)]
    compare(GPT, optim.AdamW, {"lr": 1e-2}, data, backend, monkeypatch)


# --- what these models found in the compiler --------------------------------------------------


def test_no_result_is_written_into_a_square_transposed_view(rng, monkeypatch):
    """A transposed square matrix has its owner's shape, not its layout: a kernel's output
    buffer must not be that view (kernels write C-contiguous memory)."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    x = rng.standard_normal((6, 6))

    def f(x):
        return tg.tanh(tg.t(x * 2.0) + 1.0) * 3.0

    np.testing.assert_allclose(tg.trace(f, backend="numba")(x).numpy(), f(x).numpy())


def test_detach_of_state_while_tracing_reads_the_current_value():
    """`detach()` of a tensor from before the trace is state, not a constant of the first call."""
    counter = tg.tensor(np.zeros((), np.int64))
    total = tg.tensor(np.zeros(3))

    def step(x):
        with tg.no_grad():
            counter._assign(counter.detach() + 1)
            total._assign(total.detach() + x)
        return counter + 0

    traced = tg.trace(step)
    for i in range(1, 4):
        assert int(traced(np.ones(3))) == i
    np.testing.assert_array_equal(total.numpy(), [3.0, 3.0, 3.0])


def test_rows_times_a_matrix_is_one_product_with_the_right_gradients(rng):
    """(N, T, D) @ (D, M), as every Linear on sequences: one GEMM over N * T rows."""
    a, b = draw(rng, (2, 3, 4), (4, 5))
    check_grad(lambda a, b: a @ b, a, b)
    check_grad(lambda a, b: tg.permute(a, (1, 0, 2)) @ b, a, b)  # rows not contiguous


def test_convolutions_print_as_pytorchs():
    """PyTorch's reprs (what PyTorch 2.13 prints): the sizes and stride, then what differs from
    the defaults."""
    assert str(nn.Conv2d(1, 6, 5)) == "Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1))"
    assert str(nn.Conv2d(1, 6, 3, padding=1, bias=False)) == (
        "Conv2d(1, 6, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)"
    )
    assert str(nn.Conv1d(2, 4, 3, dilation=2, groups=2)) == (
        "Conv1d(2, 4, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2)"
    )
    assert str(nn.ConvTranspose2d(4, 2, 3, 2, 1, output_padding=1)) == (
        "ConvTranspose2d(4, 2, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
        "output_padding=(1, 1))"
    )
    assert str(nn.Conv2d(2, 2, 3, padding="same", padding_mode="reflect")) == (
        "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=same, padding_mode=reflect)"
    )


def test_multi_head_attention_forward_is_the_modules_on_given_weights():
    """PyTorch's functional form ((L, N, E) inputs): against attention written out in NumPy
    (two heads), and against PyTorch's with masks, bias_k/v and separate projections where
    PyTorch is installed."""
    from tracegrad.torch.nn.functional import multi_head_attention_forward as mha

    rng = np.random.default_rng(0)
    q, kv = rng.standard_normal((1, 2, 8)), rng.standard_normal((5, 2, 8))
    w, b, ow, ob = (rng.standard_normal(s) for s in ((24, 8), (24,), (8, 8), (8,)))
    out, att = mha(tg.tensor(q), tg.tensor(kv), tg.tensor(kv), 8, 2, tg.tensor(w), tg.tensor(b),
                   None, None, False, 0.0, tg.tensor(ow), tg.tensor(ob))  # fmt: skip

    def heads(x, i):  # (N, heads, T, 4)
        y = x @ w[8 * i : 8 * i + 8].T + b[8 * i : 8 * i + 8]
        return y.transpose(1, 0, 2).reshape(2, -1, 2, 4).transpose(0, 2, 1, 3)

    scores = heads(q, 0) @ heads(kv, 1).transpose(0, 1, 3, 2) / 2.0
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    joined = (p @ heads(kv, 2)).transpose(2, 0, 1, 3).reshape(1, 2, 8)
    np.testing.assert_allclose(out.numpy(), joined @ ow.T + ob, rtol=1e-12)
    np.testing.assert_allclose(att.numpy(), p.mean(1), rtol=1e-12)

    torch = pytest.importorskip("torch")
    bk, bv, wk, wv = (rng.standard_normal(s) for s in ((1, 1, 8), (1, 1, 8), (8, 8), (8, 8)))
    mask = np.array([[False, False, True, False, True]] * 2)
    for lib in (tg.torch, torch):
        t = lib.tensor
        got = lib.nn.functional.multi_head_attention_forward(
            t(q),
            t(kv),
            t(kv),
            8,
            2,
            None,
            t(b),
            t(bk),
            t(bv),
            True,
            0.0,
            t(ow),
            t(ob),
            key_padding_mask=t(mask),
            use_separate_proj_weight=True,
            q_proj_weight=t(w[:8]),
            k_proj_weight=t(wk),
            v_proj_weight=t(wv),
            average_attn_weights=False,
        )
        results = [r.detach().numpy() for r in got] if lib is torch else [r.numpy() for r in got]
        if lib is tg.torch:
            ours = results
    for a, b_ in zip(ours, results, strict=True):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-12)
