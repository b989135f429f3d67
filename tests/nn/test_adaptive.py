"""`AdaptiveLogSoftmaxWithLoss`: PyTorch's parameters and keys, values against a NumPy
computation of the factored distribution, gradients against finite differences, the traced
step against eager."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tests.conftest import check_grad, numeric_grad
from tracegrad import nn


def _model(head_bias=False):
    nn.manual_seed(0)
    model = nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 9, 15], div_value=2.0, head_bias=head_bias)
    return model.double()


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _reference(model, x):
    """log p(c | x): the head's log-probability of c's cluster plus c's within it."""
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    head = _log_softmax(x @ state["head.weight"].T + state.get("head.bias", 0.0))
    parts = [head[:, :4]]
    for i in range(3):
        tail = x @ state[f"tail.{i}.0.weight"].T @ state[f"tail.{i}.1.weight"].T
        parts.append(_log_softmax(tail) + head[:, 4 + i : 5 + i])
    return np.concatenate(parts, 1)


TARGETS = np.array([0, 3, 4, 8, 9, 14, 15, 19, 1, 16, 5, 2])


@pytest.mark.parametrize("head_bias", [False, True])
def test_pytorchs_parameters_and_the_factored_distribution(rng, head_bias):
    model = _model(head_bias)
    keys = ["head.weight", *(["head.bias"] if head_bias else [])]
    keys += [f"tail.{i}.{j}.weight" for i in range(3) for j in range(2)]
    assert list(model.state_dict()) == keys
    assert [model.state_dict()[f"tail.{i}.0.weight"].shape for i in range(3)] == [
        (8, 16), (4, 16), (2, 16)
    ]  # fmt: skip
    x = rng.standard_normal((12, 16))
    want = _reference(model, x)
    np.testing.assert_allclose(np.exp(want).sum(1), 1.0, rtol=1e-12)
    output, loss = model(tg.tensor(x), tg.tensor(TARGETS))
    picked = want[np.arange(12), TARGETS]
    np.testing.assert_allclose(output.numpy(), picked, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loss.item(), -picked.mean(), rtol=1e-12)
    np.testing.assert_allclose(model.log_prob(tg.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-12)
    for scale in (0.1, 3.0, 30.0):  # all, some and most rows outside the shortlist
        xs = rng.standard_normal((40, 16)) * scale
        np.testing.assert_array_equal(model.predict(tg.tensor(xs)).numpy(),
                                      _reference(model, xs).argmax(1))  # fmt: skip
    one, one_loss = model(tg.tensor(x[3]), tg.tensor(TARGETS[3]))
    assert one.shape == () and abs(one.item() - picked[3]) < 1e-12
    assert type(model(tg.tensor(x), tg.tensor(TARGETS))).__name__ == "_ASMoutput"


def test_gradients_match_finite_differences(rng):
    model = _model(True)
    x = rng.standard_normal((12, 16))
    check_grad(lambda a: model(a, tg.tensor(TARGETS)).output, x)
    check_grad(lambda a: model.log_prob(a), x[:3])
    model.zero_grad()  # check_grad's backward passes reached the parameters too
    model(tg.tensor(x), tg.tensor(TARGETS)).loss.backward()
    for name, parameter in model.named_parameters():
        start = parameter.numpy().copy()

        def loss(w, parameter=parameter):
            with tg.no_grad():
                parameter.copy_(tg.tensor(w))
                return model(tg.tensor(x), tg.tensor(TARGETS)).loss.item()

        expected = numeric_grad(loss, start)
        loss(start)
        np.testing.assert_allclose(parameter.grad.numpy(), expected, rtol=1e-5, atol=1e-7,
                                   err_msg=name)  # fmt: skip


def test_a_traced_step_matches_eager(rng):
    x = rng.standard_normal((12, 16))
    runs = []
    for traced in (False, True):
        model = _model()
        opt = tg.optim.SGD(model.parameters(), lr=0.1)

        def step(a, t, model=model, opt=opt):
            opt.zero_grad()
            output, loss = model(a, t)
            loss.backward()
            opt.step()
            return output, model.predict(a)

        run = tg.trace(step) if traced else step
        outs = [run(tg.tensor(x), tg.tensor(TARGETS)) for _ in range(3)]
        runs.append(([o.numpy() for out in outs for o in out], model.state_dict()))
    (want, eager), (got, compiled) = runs
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    for key, value in eager.items():
        np.testing.assert_allclose(compiled[key].numpy(), value.numpy(), rtol=1e-12, atol=1e-14)


def test_it_refuses_what_pytorch_refuses():
    with pytest.raises(ValueError, match="cutoffs should be a sequence of unique"):
        nn.AdaptiveLogSoftmaxWithLoss(16, 20, [4, 4])
    with pytest.raises(ValueError, match="length larger than 0"):
        nn.AdaptiveLogSoftmaxWithLoss(16, 20, [])
    model = _model()
    with pytest.raises(RuntimeError, match=r"Target values should be in \[0, 19\]"):
        model(tg.ones((2, 16), dtype=np.float64), tg.tensor(np.array([0, 20])))
    with pytest.raises(RuntimeError, match="same size in the batch"):
        model(tg.ones((3, 16), dtype=np.float64), tg.tensor(np.array([0, 1])))
