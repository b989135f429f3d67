"""bfloat16 arithmetic: NumPy has none, so each op of bfloat16 operands computes in float32 and
rounds its float result to bfloat16, as PyTorch's CPU kernels do; autograd, in-place ops,
optimizers and traced steps go through the same casts."""

from __future__ import annotations

import math

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch

BF = torch.bfloat16


def exact(values: np.ndarray) -> np.ndarray:
    """float64 values that bfloat16 holds exactly (8 significant bits), chosen by hand."""
    return np.vectorize(lambda v: round(v * 64) / 64)(values)


def within_half_an_ulp(result: torch.Tensor, want: np.ndarray) -> None:
    """`result` is bfloat16 and is `want` (float64) rounded to nearest: off by at most half a
    unit in its 8th significant bit (truncating would be off by up to a whole one)."""
    assert result.dtype is BF
    got = np.asarray(result.float().tolist(), np.float64)
    ulp = np.vectorize(lambda v: 2.0 ** (math.frexp(v)[1] - 8) if v else 2.0**-133)(want)
    assert np.all(np.abs(got - want) <= 0.5 * ulp * (1 + 1e-6)), (got, want)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                               torch.nn.Linear(16, 3))  # fmt: skip


@pytest.fixture
def operands():
    rng = np.random.default_rng(0)
    a, b = exact(rng.uniform(-2, 2, (3, 5))), exact(rng.uniform(-2, 2, (3, 5)))
    return a, b, torch.tensor(a, dtype=BF), torch.tensor(b, dtype=BF)


def test_each_op_computes_in_float32_and_rounds_its_result(operands):
    a, b, x, y = operands
    within_half_an_ulp(x + y, a + b)
    within_half_an_ulp(x * 0.3, a * np.float64(np.float32(0.3)))
    within_half_an_ulp(x @ y.T, a @ b.T)
    within_half_an_ulp(x.exp(), np.exp(a))
    within_half_an_ulp(x.sum(1), a.sum(1))
    within_half_an_ulp(x.mean(), a.mean())
    e = np.exp(a - a.max(1, keepdims=True))
    within_half_an_ulp(torch.softmax(x, -1), e / e.sum(1, keepdims=True))
    erf = np.vectorize(math.erf)
    within_half_an_ulp(torch.nn.functional.gelu(x), a * (1 + erf(a / 2**0.5)) / 2)
    assert (x > 0).dtype is torch.bool and (x > 0).tolist() == (a > 0).tolist()
    assert x.argmax().item() == a.argmax() and float(x[0, 0]) == a[0, 0]
    with pytest.raises(TypeError, match="nextafter: not provided for bfloat16"):
        torch.nextafter(x, y)  # float32's next value would round back to x


def test_promotion_follows_pytorch(operands):
    """bfloat16 is a float of the same rank as float16, each widening to float32 beside the
    other; Python numbers and integer tensors take it, as 0-d tensors of another float do."""
    _, _, x, _ = operands
    f32, i64 = torch.ones(3, 5), torch.ones(3, 5, dtype=torch.int64)
    cases = [
        (x + f32, torch.float32), (x + f32.half(), torch.float32),
        (x + f32.double(), torch.float64), (x + i64, BF), (x + 2.5, BF), (2 * x, BF),
        (x + True, BF),
        (x + torch.tensor(1.0), BF), (f32 + torch.tensor(1.0, dtype=BF), torch.float32),
        (i64 + torch.tensor(1.0, dtype=BF), BF), (torch.where(x > 0, x, 0.0), BF),
    ]  # fmt: skip
    assert [r.dtype for r, _ in cases] == [d for _, d in cases]
    assert torch.promote_types(BF, torch.float16) is torch.float32
    assert torch.can_cast(BF, torch.float32) and not torch.can_cast(BF, torch.int64)
    assert torch.equal(x + f32, x.float() + f32)  # the wider float: no rounding to bfloat16


@pytest.mark.parametrize("dtype", [BF, torch.float16])
def test_a_half_float_default_dtype_makes_rounded_values_and_parameters(dtype):
    """transformers' `from_pretrained(dtype=torch.bfloat16)` builds the model with the default
    dtype set to it: floats made without a dtype (values, constructors, draws, parameters) are
    of it, rounded from float32, not NumPy's cast of numbers into bfloat16's bits."""
    torch.set_default_dtype(dtype)
    try:
        made = [
            torch.tensor([1.5, 0.1]),
            torch.full((2,), 0.1),
            torch.linspace(0, 0.1, 2),
            torch.ones(2) * 0.1,
            torch.tensor([1, 2]) * 0.1,
            torch.nn.LayerNorm(2).weight,
        ]
        drawn = [torch.randn(3), torch.rand(3), torch.nn.Linear(3, 2).weight]
        assert torch.get_default_dtype() is dtype and torch.finfo().bits == 16
    finally:
        torch.set_default_dtype(torch.float32)
    tenth = torch.tensor(0.1, dtype=dtype).item()  # 0.10009765625 or 0.0999755859375
    want = [[1.5, tenth], [tenth] * 2, [0.0, tenth], [tenth] * 2, [tenth, 2 * tenth], [1.0, 1.0]]
    assert [t.dtype for t in made + drawn] == [dtype] * 9
    assert [t.tolist() for t in made] == want
    assert all(t.abs().max().item() < 10 for t in drawn)
    assert torch.tensor([0.5]).dtype is torch.float32


def test_ops_that_read_the_array_compare_values_not_bits():
    """`unique` sorted bfloat16 by its bits (every positive value before the negatives); a
    cross-entropy against probabilities took bfloat16 ones for class indices."""
    x = torch.tensor([0.5, -2.0, 0.5, -0.25, 3.0], dtype=BF)
    values, counts = torch.unique(x, return_counts=True)
    assert values.dtype is BF and values.tolist() == [-2.0, -0.25, 0.5, 3.0]
    assert counts.tolist() == [1, 1, 2, 1]
    assert torch.unique_consecutive(torch.tensor([-0.0, 0.0, 1.0], dtype=BF)).tolist() == [0.0, 1.0]
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=BF)
    probs = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=BF)
    want = torch.nn.functional.cross_entropy(logits.float(), probs.float())
    got = torch.nn.functional.cross_entropy(logits, probs)
    assert got.dtype is BF and abs(got.item() - want.item()) <= 2**-8 * want.item()


def test_float16_products_are_computed_in_float32_and_rounded(operands):
    """NumPy multiplies float16 matrices without BLAS (hundreds of times float32's time): they
    are widened as bfloat16's are, the product rounded to float16; other float16 ops keep
    NumPy's float16 loops, which compute in float32 too."""
    a, b, _, _ = operands
    x, w = torch.tensor(a, dtype=torch.float16), torch.tensor(b, dtype=torch.float16)
    got = torch.nn.functional.linear(x, w)
    assert got.dtype is torch.float16 and (x @ w.T).dtype is torch.float16
    want = a @ b.T
    ulp = np.vectorize(lambda v: 2.0 ** (math.frexp(v)[1] - 11) if v else 2.0**-24)(want)
    assert np.all(np.abs(got.float().numpy() - want) <= 0.5 * ulp * (1 + 1e-6))
    assert torch.equal(x @ w.T, got)


def test_random_draws_of_a_half_float_dtype_are_float32_draws_rounded():
    """Dropout draws its mask in its input's dtype; uniform and normal draws took float32 and
    float64 only."""
    for dtype in (BF, torch.float16):
        torch.manual_seed(0)
        drawn = [torch.rand(4, dtype=dtype), torch.randn_like(torch.zeros(4, dtype=dtype))]
        torch.manual_seed(0)
        want = [torch.rand(4).to(dtype), torch.randn(4).to(dtype)]
        assert [t.dtype for t in drawn] == [dtype] * 2
        assert [t.tolist() for t in drawn] == [t.tolist() for t in want]
        kept = torch.nn.functional.dropout(torch.ones(1000, dtype=dtype), 0.5)
        assert kept.dtype is dtype and set(kept.tolist()) == {0.0, 2.0}


def test_gradients_are_bfloat16_and_near_float32s():
    """A bfloat16 model's gradients, against the same weights' float32 gradients: within what
    the roundings of a forward and backward pass of a few ops move them."""
    torch.manual_seed(0)
    model, wide = mlp().to(BF), mlp()
    wide.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    x = torch.randn(6, 8).bfloat16()
    for m, data in ((model, x), (wide, x.float())):
        torch.nn.functional.cross_entropy(m(data).float(), torch.tensor([0, 1, 2] * 2)).backward()
    for p, q in zip(model.parameters(), wide.parameters(), strict=True):
        assert p.grad.dtype is BF
        g, want = p.grad.float().numpy(), q.grad.numpy()
        np.testing.assert_allclose(g, want, rtol=0.05, atol=0.02 * np.abs(want).max())


def test_gradients_of_a_value_used_twice_add_up():
    """Cotangents summed in place (a value used twice, slices of one tensor) are bfloat16 bits,
    which NumPy cannot add: they are summed by the op, in float32."""
    w = torch.tensor([1.5, -2.0, 3.0], dtype=BF, requires_grad=True)
    ((w * 3).sum() + (w * w).sum() + w[0] * 2 + w[1:].sum()).backward()
    assert w.grad.dtype is BF and w.grad.tolist() == [8.0, 0.0, 10.0]  # 3 + 2w + [2, 1, 1]


def test_in_place_ops_and_an_optimizer_step_stay_bfloat16():
    x = torch.tensor([1.0, 2.5], dtype=BF)
    x.mul_(3).add_(0.1).sub_(torch.tensor([1.0, 1.0]))
    assert x.dtype is BF and x.tolist() == [2.09375, 6.59375]  # 3.1 -> 3.09375 first
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0], dtype=BF))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        opt.step()
    assert p.dtype is BF and opt.state[p]["momentum_buffer"].dtype is BF
    assert float(loss) == 1.28125 and p.tolist() == [0.458984375, -0.458984375]  # PyTorch's too
    # by hand, rounding each op's result: g = 2p, the buffer g, p <- 1 - 0.1 * 2 = 0.80078125;
    # the loss 2 * p^2 = 2 * 0.640625; g = 1.6015625, the buffer 0.9 * 2 + g = 1.796875 + g =
    # 3.40625 (a tie, to even); lr in p's dtype, 0.10009765625, times it: 0.341796875


class LossAndLogits(torch.nn.Module):
    """transformers' output: bfloat16 logits beside a float32 loss."""

    def __init__(self):
        super().__init__()
        self.net = mlp().to(BF)

    def forward(self, x, y):
        logits = self.net(x)
        return torch.nn.functional.cross_entropy(logits.float(), y), logits


def test_a_compiled_bfloat16_module_with_a_float32_output_trains_as_eager():
    """Its backward gathers the outputs' cotangents into one vector of their promoted dtype,
    which NumPy's promotion of bfloat16's bits refused."""
    torch.manual_seed(0)
    model = LossAndLogits()
    x, y = torch.randn(6, 8).bfloat16(), torch.tensor([0, 1, 2] * 2)
    grads = []
    for run in (model, torch.compile(model)):
        model.zero_grad()
        loss, logits = run(x, y)
        (loss + logits.float().square().mean()).backward()
        assert logits.dtype is BF and loss.dtype is torch.float32
        grads.append([p.grad.float().numpy() for p in model.parameters()])
    for eager, compiled in zip(*grads, strict=True):
        np.testing.assert_allclose(compiled, eager, rtol=2**-7, atol=2**-7 * np.abs(eager).max())


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_traced_bfloat16_step_equals_the_eager_step(backend):
    def make():
        torch.manual_seed(0)
        model = mlp().to(BF)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x, y = torch.randn(6, 8).bfloat16(), torch.tensor([0, 1, 2] * 2)
    (eager, eager_opt), (traced, traced_opt) = make(), make()
    compiled = tg.trace(backend=backend)(step)
    for _ in range(3):
        a, b = step(eager, eager_opt, x, y), compiled(traced, traced_opt, x, y)
        assert b.dtype is BF and a.tolist() == b.tolist()
    for p, q in zip(eager.parameters(), traced.parameters(), strict=True):
        assert q.dtype is BF and p.tolist() == q.tolist()


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_bfloat16_model_trains_as_in_pytorch(optimizer):
    """Four steps of the same bfloat16 model and data in both libraries: each op rounds where
    PyTorch's does, so the runs part only where one library's kernel is several ops in the
    other (the loss: PyTorch rounds its log-softmax, then its mean): by a unit or two in the
    last place."""
    reference = pytest.importorskip("torch")

    def run(lib):
        rng = np.random.default_rng(0)
        model = lib.nn.Sequential(lib.nn.Linear(16, 32), lib.nn.GELU(), lib.nn.LayerNorm(32),
                                  lib.nn.Linear(32, 4))  # fmt: skip
        with lib.no_grad():
            for p in model.parameters():
                p.copy_(lib.tensor(rng.standard_normal(tuple(p.shape)).astype(np.float32) * 0.3))
        model = model.to(lib.bfloat16)
        opt = (lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd"
               else lib.optim.AdamW(model.parameters(), lr=1e-2))  # fmt: skip
        x = lib.tensor(rng.standard_normal((8, 16)).astype(np.float32)).bfloat16()
        y = lib.tensor([0, 1, 2, 3] * 2)
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().float().numpy() for p in model.parameters()]

    (want, expected), (got, params) = run(reference), run(torch)
    np.testing.assert_allclose(got, want, rtol=2 * 2**-7)
    for p, q in zip(params, expected, strict=True):
        np.testing.assert_allclose(p, q, rtol=4 * 2**-8, atol=0.02)
