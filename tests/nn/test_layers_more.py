"""PyTorch's less common layers, functions and losses that real models use (MobileNet's
hardswish, LLaMA's RMSNorm, 1-d CNNs' pooling, distillation's kl_div, metric learning's
distances and margins, parameter containers): values and gradients against PyTorch in float64
where it is installed, else against finite differences; a traced step against the eager one."""

from __future__ import annotations

import functools
import inspect
import math

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad
from tests.nn.test_layers_resampling import both, needs_torch, same_module
from tracegrad import nn
from tracegrad.compiler import lowering
from tracegrad.nn import functional as F

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # the checks without PyTorch still run
    torch = None


def _x(rng, *shape, scale=2.0):
    """Normal samples kept 0.05 away from the kinks at 0, +-0.5, +-3, 6 and the threshold."""
    x = rng.standard_normal(shape) * scale
    for kink in (0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 6.0, 0.1):
        x = np.where(np.abs(x - kink) < 0.05, kink + 0.2, x)
    return x


# (tracegrad's function by name, its arguments after the input, the input's shape, scale)
ELEMENTWISE = [
    ("relu6", (), (12,), 4.0), ("hardsigmoid", (), (12,), 3.0), ("hardswish", (), (12,), 3.0),
    ("logsigmoid", (), (12,), 20.0), ("softsign", (), (12,), 2.0), ("tanhshrink", (), (12,), 2.0),
    ("softshrink", (), (12,), 2.0), ("softshrink", (1.0,), (12,), 2.0),
    ("hardshrink", (), (12,), 2.0), ("celu", (), (12,), 2.0), ("celu", (0.5,), (12,), 2.0),
    ("threshold", (0.1, 20.0), (12,), 2.0), ("glu", (), (3, 4), 2.0), ("glu", (0,), (4, 3), 2.0),
    ("softmin", (1,), (3, 4), 2.0),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name, args, shape, scale", ELEMENTWISE)
def test_elementwise_functions_match_torch(rng, name, args, shape, scale):
    x = _x(rng, *shape, scale=scale)
    both(lambda a: getattr(F, name)(a, *args), lambda t: getattr(TF, name)(t, *args), x)


@pytest.mark.parametrize("name, args, shape, scale", ELEMENTWISE)
def test_elementwise_gradients_match_finite_differences(rng, name, args, shape, scale):
    check_grad(lambda a: getattr(F, name)(a, *args), _x(rng, *shape, scale=scale))


MODULES = [  # tracegrad's and PyTorch's layer of one name, built with these arguments
    ("ReLU6", ()), ("Hardsigmoid", ()), ("Hardswish", ()), ("LogSigmoid", ()), ("Softsign", ()),
    ("Tanhshrink", ()), ("Softshrink", (0.7,)), ("Hardshrink", ()), ("CELU", (2.0,)),
    ("Threshold", (0.1, -5.0)), ("GLU", (1,)), ("Softmin", (1,)), ("Softmax2d", ()),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name, args", MODULES)
def test_activation_layers_match_torchs(rng, name, args):
    x = _x(rng, 2, 4, 3, 3, scale=3.0)
    both(lambda a: getattr(nn, name)(*args)(a), lambda t: getattr(torch.nn, name)(*args)(t), x)


def test_hardswish_at_its_bounds_has_pytorchs_gradient():
    """PyTorch's kernel: 0 at -3 and below, 1 at 3 and above, x / 3 + 1/2 between (the one-sided
    derivatives outside: -0.5 and 1.5 were its old rule); values continuous at both."""
    x = tg.tensor([-3.0, 3.0, -4.0, 4.0, -2.5, 2.5], requires_grad=True)
    y = F.hardswish(x)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 1.0, 0.0, 1.0, -1 / 3, 4 / 3])
    np.testing.assert_allclose(y.numpy(), [0.0, 3.0, 0.0, 4.0, -2.5 * 0.5 / 6, 2.5 * 5.5 / 6])
    x = tg.tensor([-3.0, 3.0, 0.0], requires_grad=True)
    F.hardsigmoid(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0.0, 0.0, 1 / 6])


@needs_torch
@pytest.mark.parametrize("channels", [1, 3])
def test_prelu_matches_torch(rng, channels):
    x, w = _x(rng, 2, 3, 5), rng.uniform(0.1, 0.5, channels)
    both(F.prelu, TF.prelu, x, w)
    layer, twin = nn.PReLU(channels, 0.3), torch.nn.PReLU(channels, 0.3)
    same_module(layer, twin, x)


def test_layers_read_their_options_at_each_call():
    """PyTorch's attributes: setting one after construction takes effect."""
    loss, x = nn.MSELoss(), tg.tensor([1.0, 3.0])
    loss.reduction = "sum"
    assert float(loss(x, tg.zeros(2))) == 10.0
    act = nn.Softshrink(0.5)
    act.lambd = 2.0
    assert act(tg.tensor([1.0, 3.0])).numpy().tolist() == [0.0, 1.0]
    assert repr(act) == "Softshrink(2.0)"  # PyTorch's repr
    with pytest.raises(tg.ShapeError, match="glu: dim -1 of input"):
        F.glu(tg.tensor(1.0))


def test_prelu_gradients_and_errors(rng):
    check_grad(F.prelu, _x(rng, 2, 3, 4), rng.uniform(0.1, 0.5, 3))
    with pytest.raises(tg.ShapeError, match="prelu: 2 weights for input"):
        F.prelu(tg.ones((2, 3, 4)), tg.ones(2))


# --- pooling ------------------------------------------------------------------------------------

POOLS = [  # tracegrad's and torch's function, arguments, input shape
    ("max_pool1d", (3,), (2, 3, 11)), ("max_pool1d", (3, 2, 1), (2, 3, 11)),
    ("max_pool1d", (2, 1, 0, 2), (1, 2, 9)), ("avg_pool1d", (3, 2, 1), (2, 3, 11)),
    ("avg_pool1d", (3, 2, 1, False, False), (2, 3, 11)), ("adaptive_avg_pool1d", (4,), (2, 3, 10)),
    ("adaptive_avg_pool1d", (5,), (2, 3, 10)), ("adaptive_max_pool1d", (3,), (2, 3, 10)),
    ("adaptive_max_pool2d", ((3, 2),), (2, 3, 7, 5)), ("adaptive_max_pool2d", (2,), (2, 3, 8, 8)),
    ("adaptive_max_pool2d", ((None, 3),), (1, 2, 4, 7)),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name, args, shape", POOLS)
def test_pools_match_torch(rng, name, args, shape):
    x = rng.standard_normal(shape)
    both(lambda a: getattr(F, name)(a, *args), lambda t: getattr(TF, name)(t, *args), x)


@pytest.mark.parametrize("name, args, shape", POOLS)
def test_pool_gradients_match_finite_differences(rng, name, args, shape):
    check_grad(lambda a: getattr(F, name)(a, *args), rng.standard_normal(shape))


def test_pools_name_their_input_rules():
    with pytest.raises(
        tg.ShapeError, match=r"max_pool1d: input torch.Size\(\[1, 3, 4, 5\]\) must be 3-d"
    ):
        F.max_pool1d(tg.ones((1, 3, 4, 5)), 2)
    assert F.max_pool1d(tg.ones((3, 4)), 2).shape == (3, 2)  # one unbatched (C, L), as PyTorch
    with pytest.raises(ValueError, match="avg_pool1d: kernel_size must be an int or one int"):
        F.avg_pool1d(tg.ones((1, 3, 4)), (2, 2))
    layer = nn.AdaptiveMaxPool2d(1)
    assert layer(tg.ones((2, 3, 4, 5))).shape == (2, 3, 1, 1)
    assert nn.MaxPool1d(2)(tg.ones((2, 3, 8))).shape == (2, 3, 4)
    assert nn.AvgPool1d(4, 2)(tg.ones((2, 3, 8))).shape == (2, 3, 3)
    assert nn.AdaptiveAvgPool1d(1)(tg.ones((2, 3, 8))).shape == (2, 3, 1)
    assert nn.AdaptiveMaxPool1d(2)(tg.ones((2, 3, 8))).shape == (2, 3, 2)


# --- normalization, distances -------------------------------------------------------------------


@needs_torch
def test_rms_norm_matches_torch(rng):
    x, w = rng.standard_normal((2, 3, 4)), rng.standard_normal(4)
    both(lambda a, b: F.rms_norm(a, (4,), b), lambda a, b: TF.rms_norm(a, (4,), b), x, w)
    both(lambda a: F.rms_norm(a, (3, 4), eps=1e-3), lambda a: TF.rms_norm(a, (3, 4), eps=1e-3), x)
    same_module(nn.RMSNorm(4), torch.nn.RMSNorm(4), x)


def test_rms_norm_values_gradients_and_errors(rng):
    x = rng.standard_normal((3, 5))
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + np.finfo(np.float64).eps)
    np.testing.assert_allclose(F.rms_norm(tg.tensor(x), (5,)).numpy(), want, rtol=1e-12)
    check_grad(lambda a, b: F.rms_norm(a, 5, b, eps=1e-5), x, rng.standard_normal(5))
    assert nn.RMSNorm(5).weight.numpy().tolist() == [1.0] * 5
    with pytest.raises(tg.ShapeError, match=r"rms_norm: input of shape torch.Size\(\[3, 5\]\)"):
        F.rms_norm(tg.ones((3, 5)), (4,))


DISTANCES = [  # tracegrad's and torch's function, its keyword arguments, the inputs' shapes
    ("normalize", {}, [(3, 4)]), ("normalize", {"p": 1.0, "dim": -1}, [(3, 4)]),
    ("cosine_similarity", {}, [(3, 4), (3, 4)]),
    ("cosine_similarity", {"dim": -1}, [(3, 4), (1, 4)]),
    ("pairwise_distance", {}, [(3, 4), (3, 4)]),
    ("pairwise_distance", {"p": 3.0, "keepdim": True}, [(3, 4), (3, 4)]),
]  # fmt: skip


@needs_torch
@pytest.mark.parametrize("name, kwargs, shapes", DISTANCES)
def test_distances_match_torch(rng, name, kwargs, shapes):
    xs = [rng.standard_normal(s) for s in shapes]
    both(lambda *a: getattr(F, name)(*a, **kwargs), lambda *t: getattr(TF, name)(*t, **kwargs),
         *xs)  # fmt: skip


@pytest.mark.parametrize("name, kwargs, shapes", DISTANCES)
def test_distance_gradients_match_finite_differences(rng, name, kwargs, shapes):
    check_grad(lambda *a: getattr(F, name)(*a, **kwargs), *[rng.standard_normal(s) for s in shapes])


def test_the_norm_of_zeros_has_gradient_zero_as_in_pytorch():
    """Not NaN: normalizing (or clipping) an all-zero vector must not poison the step."""
    for norm in (lambda v: tg.linalg.vector_norm(v), lambda v: tg.linalg.vector_norm(v, 3.0),
                 lambda v: tg.linalg.matrix_norm(v.reshape(2, 2))):  # fmt: skip
        x = tg.zeros(4, requires_grad=True)
        norm(x).backward()
        assert x.grad.numpy().tolist() == [0.0] * 4
    x = tg.zeros((2, 3), requires_grad=True)
    y = F.normalize(x)
    y.sum().backward()
    assert np.all(y.numpy() == 0) and np.all(np.isfinite(x.grad.numpy()))
    cosine = nn.CosineSimilarity()(tg.ones((2, 3)), tg.ones((2, 3)) * 2.0)
    np.testing.assert_allclose(cosine.numpy(), [1.0, 1.0], rtol=1e-6)
    distance = nn.PairwiseDistance(eps=0.0)(tg.tensor([[3.0, 0.0]]), tg.tensor([[0.0, 4.0]]))
    np.testing.assert_allclose(distance.numpy(), [5.0])


# --- losses -------------------------------------------------------------------------------------


def _probabilities(rng, shape):
    z = rng.standard_normal(shape)
    return np.exp(z) / np.exp(z).sum(-1, keepdims=True)


@needs_torch
@pytest.mark.parametrize("reduction", ["mean", "batchmean", "sum", "none"])
def test_kl_div_matches_torch(rng, reduction):
    x, t = np.log(_probabilities(rng, (4, 5))), _probabilities(rng, (4, 5))
    both(lambda a, b: F.kl_div(a, b, reduction=reduction),
         lambda a, b: TF.kl_div(a, b, reduction=reduction), x, t)  # fmt: skip
    both(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=True),
         lambda a, b: TF.kl_div(a, b, reduction=reduction, log_target=True),
         x, np.log(t + 0.1))  # fmt: skip


def test_kl_div_is_the_kl_divergence_with_batchmean(rng):
    p, q = _probabilities(rng, (3, 4)), _probabilities(rng, (3, 4))
    want = (p * np.log(p / q)).sum() / 3
    got = F.kl_div(tg.tensor(np.log(q)), tg.tensor(p), reduction="batchmean")
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    check_grad(lambda a, b: F.kl_div(a, b, reduction="sum"), np.log(q), p)
    x, t = tg.tensor([-1.0, -2.0], requires_grad=True), tg.tensor([0.0, 0.5], requires_grad=True)
    F.kl_div(x, t, reduction="sum").backward()  # 0 log 0 is 0; PyTorch's target gradient is NaN
    np.testing.assert_allclose(t.grad.numpy(), [1.0, math.log(0.5) + 1.0 + 2.0])
    with pytest.raises(ValueError, match="kl_div: reduction must be one of"):
        F.kl_div(tg.tensor(q), tg.tensor(p), reduction="max")


SIGNS = np.array([1.0, -1.0, 1.0, -1.0, -1.0])
LOSSES = [  # name, keyword arguments, shapes of the differentiated inputs, constant last input
    ("margin_ranking_loss", {"margin": 0.3}, [(5,), (5,)], SIGNS),
    ("hinge_embedding_loss", {"margin": 0.7}, [(5,)], SIGNS),
    ("soft_margin_loss", {}, [(5,)], SIGNS),
    ("cosine_embedding_loss", {"margin": 0.1}, [(5, 3), (5, 3)], SIGNS),
    ("multilabel_soft_margin_loss", {}, [(5,)], (SIGNS > 0).astype(float)),
    ("triplet_margin_loss", {}, [(5, 3), (5, 3), (5, 3)], None),
    ("triplet_margin_loss", {"swap": True, "p": 1.0, "margin": 2.0}, [(5, 3)] * 3, None),
    ("poisson_nll_loss", {}, [(5,)], np.array([0.0, 1.0, 2.0, 5.0, 3.0])),
    ("poisson_nll_loss", {"full": True}, [(5,)], np.array([0.0, 1.0, 2.0, 5.0, 3.0])),
    ("gaussian_nll_loss", {}, [(5, 2), (5, 2)], None),
    ("multi_margin_loss", {}, [(5, 4)], np.array([0, 3, 1, 1, 2])),
    ("multi_margin_loss", {"p": 2, "margin": 0.7}, [(5, 4)], np.array([2, 0, 3, 1, 2])),
    (
        "multilabel_margin_loss",
        {},
        [(3, 4)],
        np.array([[3, 0, -1, 1], [1, 2, 3, 0], [2, -1, 0, 0]]),
    ),
    ("triplet_margin_with_distance_loss", {"swap": True}, [(5, 3)] * 3, None),
]


def _loss_inputs(rng, name, shapes):
    xs = [rng.standard_normal(s) for s in shapes]
    if name == "gaussian_nll_loss":  # input, target; the variance is differentiated too
        xs.append(rng.uniform(0.5, 2.0, shapes[0][0]))
    return xs


@needs_torch
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name, kwargs, shapes, const", LOSSES)
def test_losses_match_torch(rng, name, kwargs, shapes, const, reduction):
    xs = _loss_inputs(rng, name, shapes)
    extra = () if const is None else (const,)
    both(lambda *a: getattr(F, name)(*a, *[tg.tensor(c) for c in extra], **kwargs,
                                     reduction=reduction),
         lambda *t: getattr(TF, name)(*t, *[torch.tensor(c) for c in extra], **kwargs,
                                      reduction=reduction), *xs)  # fmt: skip


@pytest.mark.parametrize("name, kwargs, shapes, const", LOSSES)
def test_loss_gradients_match_finite_differences(rng, name, kwargs, shapes, const):
    xs = _loss_inputs(rng, name, shapes)
    extra = () if const is None else (tg.tensor(const),)
    check_grad(lambda *a: getattr(F, name)(*a, *extra, **kwargs, reduction="none"), *xs)


PROBABILITIES = np.array([[0.2, 0.7, 0.4], [0.9, 0.1, 0.5]])
COMMON_LOSSES = [  # name, the inputs after the first (PROBABILITIES, or its log)
    ("mse_loss", [PROBABILITIES[::-1]]), ("l1_loss", [PROBABILITIES[::-1]]),
    ("smooth_l1_loss", [PROBABILITIES[::-1]]), ("binary_cross_entropy", [PROBABILITIES[::-1]]),
    ("binary_cross_entropy_with_logits", [PROBABILITIES[::-1]]),
    ("kl_div", [PROBABILITIES[::-1]]), ("cross_entropy", [np.array([2, 0])]),
    ("nll_loss", [np.array([1, 2])]),
]  # fmt: skip


def _common_inputs(rng, name, rest):
    return [np.log(PROBABILITIES) if name in ("kl_div", "nll_loss") else PROBABILITIES, *rest]


def _listed_inputs(rng, name, shapes, const):
    return [*_loss_inputs(rng, name, shapes), *([] if const is None else [const])]


@pytest.mark.filterwarnings("ignore:size_average and reduce")
@pytest.mark.parametrize(
    "name, inputs",
    [(n, functools.partial(_common_inputs, name=n, rest=r)) for n, r in COMMON_LOSSES]
    + [(n, functools.partial(_listed_inputs, name=n, shapes=sh, const=c))
       for n, kw, sh, c in LOSSES if "size_average" in inspect.signature(getattr(F, n)).parameters],
)  # fmt: skip
def test_losses_take_pytorchs_deprecated_size_average_and_reduce(rng, name, inputs):
    """Old PyTorch code says size_average=False for a sum and reduce=False for per-element
    losses (the VAE of a well-known tutorial); each loss reads them as PyTorch does."""
    args = [tg.tensor(a) for a in inputs(rng)]
    loss = getattr(F, name)

    def same(legacy: dict, reduction: str) -> None:
        np.testing.assert_array_equal(loss(*args, **legacy).numpy(),
                                      loss(*args, reduction=reduction).numpy())  # fmt: skip

    same({"size_average": False}, "sum")
    same({"size_average": True, "reduce": True}, "mean")
    same({"reduce": False}, "none")
    same({"size_average": True, "reduce": False}, "none")
    with pytest.warns(UserWarning, match="size_average and reduce"):
        loss(*args, size_average=False)
    with pytest.raises(TypeError, match="give the reduction by keyword"):
        loss(*args, size_average="sum")  # PyTorch would read it as True: a mean


@pytest.mark.filterwarnings("ignore:size_average and reduce")
def test_loss_classes_take_the_deprecated_arguments():
    takes = [c for c in vars(nn).values() if isinstance(c, type) and issubclass(c, nn.Module)
             and "size_average" in inspect.signature(c).parameters]  # fmt: skip
    assert len(takes) >= 17
    for cls in takes:
        assert cls(size_average=False).reduction == "sum", cls
        assert cls(reduce=False).reduction == "none", cls
        assert cls().reduction == "mean", cls
    x = tg.tensor(PROBABILITIES)
    got = nn.BCELoss(size_average=False)(x, x[::-1])
    assert float(got) == float(F.binary_cross_entropy(x, x[::-1], reduction="sum"))


def test_gaussian_nll_loss_keeps_the_variance_above_eps_for_its_value_only():
    x, t = tg.tensor([1.0]), tg.tensor([0.0])
    var = tg.tensor([0.0], requires_grad=True)
    loss = F.gaussian_nll_loss(x, t, var, eps=0.5, full=True)
    np.testing.assert_allclose(loss.numpy(), 0.5 * (math.log(0.5) + 2.0 + math.log(2 * math.pi)))
    loss.backward()
    np.testing.assert_allclose(var.grad.numpy(), [0.5 * (1 / 0.5 - 1 / 0.25)])


LOSS_MODULES = [  # layer name, its arguments, how many inputs it is called with
    ("KLDivLoss", {"reduction": "batchmean"}, 2), ("PoissonNLLLoss", {"log_input": True}, 2),
    ("GaussianNLLLoss", {"eps": 1e-3}, 3), ("SoftMarginLoss", {}, 2),
    ("HingeEmbeddingLoss", {"margin": 2.0}, 2), ("MultiLabelSoftMarginLoss", {}, 2),
    ("MarginRankingLoss", {"margin": 0.5}, 3), ("CosineEmbeddingLoss", {"margin": 0.2}, 3),
    ("TripletMarginLoss", {"margin": 0.5, "swap": True}, 3),
    ("TripletMarginWithDistanceLoss", {"margin": 0.5, "swap": True}, 3),
]  # fmt: skip


SIGNED = {"MarginRankingLoss": (4, 3), "CosineEmbeddingLoss": (4,), "HingeEmbeddingLoss": (4, 3)}


@needs_torch
@pytest.mark.parametrize("name, kwargs, count", LOSS_MODULES)
def test_loss_layers_match_torchs(rng, name, kwargs, count):
    xs = [rng.uniform(0.2, 1.0, (4, 3)) for _ in range(count)]
    if name in SIGNED:  # targets of +-1
        xs[-1] = np.where(rng.standard_normal(SIGNED[name]) > 0, 1.0, -1.0)
    ours, theirs = getattr(nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    got = ours(*[tg.tensor(x) for x in xs]).numpy()
    np.testing.assert_allclose(got, theirs(*[torch.tensor(x) for x in xs]).numpy(), rtol=1e-10)


# --- channel dropout, containers, unflatten -----------------------------------------------------


@pytest.mark.filterwarnings("ignore:dropout2d")  # a 3-d input is PyTorch's deprecated (N, C, L)
@pytest.mark.parametrize("layer, shape, spatial", [(nn.Dropout1d, (64, 8, 5), 1),
                                                   (nn.Dropout2d, (64, 8, 3, 3), 2),
                                                   (nn.Dropout2d, (80, 3, 3), 1)])  # fmt: skip
def test_channel_dropout_zeroes_whole_channels_and_scales_the_rest(layer, shape, spatial):
    drop = layer(0.25, seed=3)
    y = drop(tg.ones(shape)).numpy()
    per_channel = y.reshape(-1, math.prod(shape[-spatial:]))
    assert set(np.unique(per_channel)) <= {0.0, np.float32(1 / 0.75)}
    assert np.all(per_channel.min(1) == per_channel.max(1))  # a channel is dropped whole
    assert 0.1 < (per_channel[:, 0] == 0).mean() < 0.4
    drop.eval()
    assert np.all(drop(tg.ones(shape)).numpy() == 1.0)
    with pytest.raises(tg.ShapeError, match="dropout1d: input"):
        F.dropout1d(tg.ones((2, 3, 4, 5)))
    with pytest.warns(UserWarning, match="dropout2d: a 2-d input"):  # element by element
        rows = F.dropout2d(tg.ones((50, 40)), 0.5).numpy()
    assert not np.all(rows.min(1) == rows.max(1))


def test_parameter_containers_register_their_parameters():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([nn.Parameter(np.ones(2)), tg.zeros(3)])
            self.table = nn.ParameterDict({"a": tg.ones(1)})
            self.table["b"] = nn.Parameter(np.zeros(2))

    net = Net()
    names = [k for k, _ in net.named_parameters()]
    assert names == ["scales.0", "scales.1", "table.a", "table.b"]
    assert list(net.state_dict()) == names
    assert len(net.scales) == 2 and isinstance(net.scales[1], nn.Parameter)
    assert "a" in net.table and list(net.table.keys()) == ["a", "b"]
    net.scales.append(tg.ones(4))
    assert [p.shape for p in net.scales] == [(2,), (3,), (4,)]
    assert len(list(net.parameters())) == 5
    with pytest.raises(TypeError, match="a parameter container holds tensors, not int"):
        net.scales.append(3)
    net.scales[0] = tg.zeros(5)  # PyTorch's keywords and item assignment, in every container
    assert net.scales[0].shape == (5,) and isinstance(net.scales[0], nn.Parameter)
    blocks = nn.ModuleList(modules=[nn.Linear(2, 2)])
    blocks[0] = nn.Identity()
    assert isinstance(blocks[0], nn.Identity) and len(blocks[:1]) == 1
    named = nn.ModuleDict(modules={"a": nn.Identity()})
    named.update({"b": nn.Linear(1, 1)})
    assert list(named) == ["a", "b"] and len(nn.ParameterDict(parameters={"w": tg.ones(1)})) == 1


def test_unflatten_layer_and_method():
    x = tg.tensor(np.arange(24.0).reshape(2, 12))
    assert nn.Unflatten(1, (3, 4))(x).shape == (2, 3, 4)
    assert x.unflatten(-1, (2, -1)).shape == (2, 2, 6)
    assert tg.unflatten(x, 0, (1, 2)).shape == (1, 2, 12)
    np.testing.assert_allclose(x.rsqrt().numpy()[0, 1:3], [1.0, 1 / math.sqrt(2.0)])


# --- a traced step against the eager one ---------------------------------------------------------


class _AudioNet(nn.Module):
    """A 1-d CNN with the layers above: what a keyword-spotting or text CNN looks like."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.act, self.pool = nn.Hardswish(), nn.MaxPool1d(2)
        self.gate = nn.Conv1d(8, 16, 1)
        self.glu, self.prelu = nn.GLU(1), nn.PReLU(8)
        self.norm = nn.RMSNorm(8)
        self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 5))

    def forward(self, x):
        h = self.pool(self.act(self.conv(x)))
        h = self.prelu(self.glu(self.gate(h)))
        h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        return self.head(h)


def _train(traced, backend=None, steps=3):
    tg.nn.manual_seed(0)
    model = _AudioNet()
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    x = tg.tensor(rng.standard_normal((6, 4, 16)).astype(np.float32))
    target = tg.tensor(_probabilities(rng, (6, 5)).astype(np.float32))

    def step(x, target):
        opt.zero_grad()
        loss = F.kl_div(F.log_softmax(model(x), dim=-1), target, reduction="batchmean")
        loss = loss + F.cosine_embedding_loss(model(x), target, tg.ones(6)) * 0.1
        loss.backward()
        opt.step()
        return loss

    if traced:
        step = tg.trace(step, backend=backend)
    return [float(step(x, target)) for _ in range(steps)], [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_step_with_these_layers_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    want, want_params = _train(False)
    got, params = _train(True, backend)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for a, b in zip(params, want_params, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert want[-1] < want[0]


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, "same"])
def test_convolutions_pad_their_input_by_padding_mode(mode, padding):
    rng = np.random.default_rng(0)
    conv = nn.Conv2d(3, 4, 3, padding=padding, padding_mode=mode).double()
    x = rng.standard_normal((2, 3, 6, 7))
    padded = F.pad(tg.tensor(x), (1, 1, 1, 1), mode=mode)  # what PyTorch's layer does first
    want = F.conv2d(padded, conv.weight, conv.bias).numpy()
    np.testing.assert_allclose(conv(tg.tensor(x)).numpy(), want, rtol=1e-12)
    row = nn.Conv1d(3, 2, 5, padding=2, padding_mode=mode).double()
    want = F.conv1d(F.pad(tg.tensor(x[:, :, 0]), (2, 2), mode=mode), row.weight, row.bias)
    np.testing.assert_allclose(row(tg.tensor(x[:, :, 0])).numpy(), want.numpy(), rtol=1e-12)
    if torch is not None:
        theirs = torch.nn.Conv2d(3, 4, 3, padding=padding, padding_mode=mode).double()
        theirs.load_state_dict({k: torch.tensor(v.numpy()) for k, v in conv.state_dict().items()})
        want = theirs(torch.tensor(x)).detach().numpy()
        np.testing.assert_allclose(conv(tg.tensor(x)).numpy(), want, rtol=1e-12)
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


def test_margin_loss_layers_take_their_options():
    x = tg.tensor(np.array([[0.1, 0.8, -0.3], [0.5, 0.2, 0.9]]))
    y = tg.tensor(np.array([1, 2]))
    loss = nn.MultiMarginLoss(margin=0.5, weight=tg.tensor(np.array([1.0, 2.0, 3.0])))(x, y)
    # sample 0: target 1 (weight 2): max(0, .5 - .8 + .1) + max(0, .5 - .8 - .3) = 0
    # sample 1: target 2 (weight 3): 3 * (max(0, .5 - .9 + .5) + max(0, .5 - .9 + .2)) / 3
    np.testing.assert_allclose(loss.numpy(), (0.0 + 0.1) / 2)
    labels = tg.tensor(np.array([[1, -1, 0], [2, 0, -1]]))
    assert nn.MultiLabelMarginLoss(reduction="none")(x, labels).shape == (2,)


# --- PyTorch's other spellings and smaller layers ----------------------------------------------


@needs_torch
def test_spellings_and_small_functions_match_torch(rng):
    x = rng.standard_normal((2, 3, 7, 8))
    for name, args in [("elu_", ()), ("leaky_relu_", (0.2,)), ("selu_", ()), ("celu_", ()),
                       ("hardtanh_", ()), ("threshold_", (0.1, 2.0)), ("relu_", ())]:  # fmt: skip
        ours, theirs = tg.tensor(x.copy()), torch.tensor(x.copy())
        getattr(F, name)(ours, *args)
        getattr(TF, name)(theirs, *args)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, err_msg=name)
    with pytest.warns(UserWarning):  # PyTorch's own deprecation warning
        want = TF.upsample_bilinear(torch.tensor(x), size=(5, 9)).numpy()
    np.testing.assert_allclose(F.upsample_bilinear(tg.tensor(x), size=(5, 9)).numpy(), want)
    m = rng.standard_normal((5, 3))
    for p in (1.0, 2.0, 3.5):
        np.testing.assert_allclose(F.pdist(tg.tensor(m), p).numpy(),
                                   TF.pdist(torch.tensor(m), p).numpy(), rtol=1e-12)  # fmt: skip
    positive = np.abs(x) + 0.1
    for p, ceil in [(1.0, False), (2.0, True), (3.0, False)]:
        both(lambda a, p=p, ceil=ceil: F.lp_pool2d(a, p, 3, 2, ceil),
             lambda t, p=p, ceil=ceil: TF.lp_pool2d(t, p, 3, 2, ceil), positive)  # fmt: skip
    np.testing.assert_allclose(F.rrelu(tg.tensor(x)).numpy(), TF.rrelu(torch.tensor(x)).numpy())
    v = rng.standard_normal((2, 3, 10))
    a, ai = F.max_pool1d(tg.tensor(v), 2, return_indices=True)
    b, bi = TF.max_pool1d(torch.tensor(v), 2, return_indices=True)
    np.testing.assert_allclose(nn.MaxUnpool1d(2)(a, ai).numpy(), TF.max_unpool1d(b, bi, 2).numpy())


def test_small_functions_against_numpy(rng):
    m = rng.standard_normal((5, 3))
    i, j = np.triu_indices(5, 1)
    np.testing.assert_allclose(F.pdist(tg.tensor(m)).numpy(),
                               np.linalg.norm(m[i] - m[j], axis=1), rtol=1e-12)  # fmt: skip
    check_grad(lambda a: F.pdist(a, 3.0), m)
    x = np.abs(rng.standard_normal((1, 2, 6, 6))) + 0.1
    want = (x**2).reshape(1, 2, 3, 2, 3, 2).sum(axis=(3, 5)) ** 0.5
    np.testing.assert_allclose(nn.LPPool2d(2, 2)(tg.tensor(x)).numpy(), want, rtol=1e-12)
    check_grad(lambda a: F.lp_pool2d(a, 3.0, 2), x)
    slopes = -F.rrelu(tg.tensor(-np.ones(20000)), training=True).numpy()
    assert 1 / 8 <= slopes.min() and slopes.max() <= 1 / 3
    assert abs(slopes.mean() - (1 / 8 + 1 / 3) / 2) < 0.005  # U(1/8, 1/3): sd 0.06 / sqrt(2e4)
    np.testing.assert_allclose(nn.RReLU().eval()(tg.tensor([-2.0, 3.0])).numpy(),
                               [-2.0 * (1 / 8 + 1 / 3) / 2, 3.0])  # fmt: skip
    w = tg.zeros((3, 4))
    with pytest.warns(FutureWarning, match="xavier_uniform_"):
        tg.nn.init.xavier_uniform(w)
    assert np.abs(w.numpy()).max() > 0 and nn.NLLLoss2d is nn.NLLLoss


def test_fan_in_and_fan_out_by_pytorchs_private_name():
    """Layers' own `reset_parameters` call `nn.init._calculate_fan_in_and_fan_out`."""
    import tracegrad.torch.nn.init as init  # the torch tree's module, as `import torch` gives

    assert init._calculate_fan_in_and_fan_out(tg.empty(3, 5)) == (5, 3)
    assert init._calculate_fan_in_and_fan_out(tg.empty(8, 4, 3, 3)) == (36, 72)


def test_embedding_from_pretrained_and_its_pytorch_arguments():
    """nlp-tutorial's Transformer: `nn.Embedding.from_pretrained(table, freeze=True)`."""
    table = tg.tensor(np.arange(6.0).reshape(3, 2))
    frozen = nn.Embedding.from_pretrained(table)
    assert frozen(tg.tensor([2, 0])).tolist() == [[4.0, 5.0], [0.0, 1.0]]
    assert not frozen.weight.requires_grad and list(frozen.state_dict()) == ["weight"]
    trained = nn.Embedding.from_pretrained(table, freeze=False, padding_idx=0)
    assert trained.weight.requires_grad and trained.padding_idx == 0
    bag = nn.EmbeddingBag.from_pretrained(table, mode="sum")
    assert bag(tg.tensor([[0, 2]])).tolist() == [[4.0, 6.0]] and not bag.weight.requires_grad
    assert nn.Embedding(4, 2, sparse=True).weight.shape == (4, 2)
    # transformers' sinusoidal position tables: `_freeze=True` without `_weight`, never trained
    assert not nn.Embedding(4, 2, _freeze=True).weight.requires_grad
    scaled = nn.Embedding(4, 2, scale_grad_by_freq=True)  # each pick's gradient / its count
    scaled(tg.tensor([1, 1, 3])).sum().backward()
    assert scaled.weight.grad.tolist() == [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_softmax_without_dim_takes_pytorchs_deprecated_choice():
    """F.softmax(x) of a 3-d x normalizes dim 0 (PyTorch's old rule: 0 for 0-, 1- and 3-d
    inputs, else 1), with its warning; it had taken the last dim silently."""
    x = tg.tensor(np.arange(24.0).reshape(2, 3, 4))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        np.testing.assert_allclose(F.softmax(x).numpy().sum(0), np.ones((3, 4)))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        np.testing.assert_allclose(F.log_softmax(x[0]).exp().numpy().sum(1), np.ones(3))


def test_one_layer_rnn_dropout_warns_as_pytorch():
    with pytest.warns(UserWarning, match="num_layers greater than 1"):
        nn.RNN(3, 4, dropout=0.5)
