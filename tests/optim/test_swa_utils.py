"""swa_utils: AveragedModel (EMA and SWA; avg_fn, multi_avg_fn, use_buffers) against PyTorch in
float64 and against the averages' definitions; its update inside a traced step (both backends)
against the eager one; its state_dict's keys and round trip; SWALR and update_bn."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler import lowering
from tracegrad.optim import swa_utils

STEPS = 6
R = np.random.default_rng(7)
X = [R.standard_normal((8, 3)) for _ in range(STEPS)]
Y = [R.standard_normal((8, 2)) for _ in range(STEPS)]


def make_model(torch):
    """Linear, BatchNorm1d (float and int64 buffers), Linear; the same float64 weights in both
    libraries."""
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                                torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()  # fmt: skip
    r = np.random.default_rng(11)
    weights = {k: r.standard_normal(tuple(v.shape)) for k, v in model.state_dict().items()
               if k.endswith(("weight", "bias"))}  # fmt: skip
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    return model


AVERAGES = {
    "ema multi": dict(multi_avg_fn="ema"),
    "ema avg_fn": dict(avg_fn="ema"),
    "swa default": {},
    "swa multi": dict(multi_avg_fn="swa"),
    "ema buffers": dict(multi_avg_fn="ema", use_buffers=True),
    "swa buffers": dict(use_buffers=True),
}


def averaged(torch, model, kwargs):
    su = torch.optim.swa_utils
    # decay 0.7: the int64 count's average never lands on a whole number, where float32 (in
    # PyTorch) and float64 (here) products of it may round to either side
    fns = {"multi_avg_fn": {"ema": lambda: su.get_ema_multi_avg_fn(0.7),
                            "swa": su.get_swa_multi_avg_fn},
           "avg_fn": {"ema": lambda: su.get_ema_avg_fn(0.7)}}  # fmt: skip
    kwargs = {k: fns[k][v]() if k in fns else v for k, v in kwargs.items()}
    return su.AveragedModel(model, **kwargs)


def train(lib, kwargs, backend=None):
    """STEPS steps of SGD on the model, the average updated after each (inside the step when
    traced): the average's state_dict after each step, as arrays."""
    if lib == "torch":
        import torch
    else:
        torch = tg
    model = make_model(torch)
    avg = averaged(torch, model, kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        avg.update_parameters(model)
        return loss

    run = tg.trace(step, backend=backend) if backend else step
    seen = []
    for x, y in zip(X, Y, strict=True):
        run(torch.tensor(x), torch.tensor(y))
        seen.append({k: v.detach().numpy().copy() for k, v in avg.state_dict().items()})
    if backend:
        assert sum(len(plans) for plans in run.plans.values()) <= 2
    return seen, avg, model


def _same(got, want, rtol):
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        assert list(a) == list(b), f"state_dict keys, step {k}"
        for name in b:
            assert a[name].dtype == b[name].dtype, name
            np.testing.assert_allclose(a[name], b[name], rtol=rtol, atol=1e-13,
                                       err_msg=f"{name}, step {k}")  # fmt: skip


@pytest.mark.parametrize("case", AVERAGES)
def test_averaged_model_matches_pytorch_in_float64(case):
    pytest.importorskip("torch")
    got, _, _ = train("tg", AVERAGES[case])
    want, _, _ = train("torch", AVERAGES[case])
    _same(got, want, rtol=1e-10)
    assert got[-1]["n_averaged"] == STEPS


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("case", ["ema multi", "ema avg_fn", "swa default", "ema buffers"])
def test_an_average_updated_inside_a_traced_step_matches_the_eager_one(case, backend,
                                                                      monkeypatch):  # fmt: skip
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    got, avg, model = train("tg", AVERAGES[case], backend)
    want, _, _ = train("tg", AVERAGES[case])
    _same(got, want, rtol=1e-12)
    assert avg.n_averaged.item() == STEPS and avg.n_averaged.dtype == np.int64
    # the average is not the model: the traced step updated both, each its own way
    w = "module.0.weight"
    assert not np.allclose(got[-1][w], model.state_dict()["0.weight"].numpy())


# --- definitions, without PyTorch --------------------------------------------------------------


def _weights_each_step(kwargs):
    """The model's weights after each step, and the average's, eagerly."""
    model = make_model(tg)
    avg = averaged(tg, model, kwargs)
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ws, avgs = [], []
    for x, y in zip(X, Y, strict=True):
        opt.zero_grad()
        ((model(tg.tensor(x)) - tg.tensor(y)) ** 2).mean().backward()
        opt.step()
        avg.update_parameters(model)
        ws.append(model[0].weight.numpy().copy())
        avgs.append(avg.module[0].weight.numpy().copy())
    return ws, avgs, avg, model


def test_ema_and_swa_by_their_definitions():
    ws, avgs, avg, model = _weights_each_step(AVERAGES["ema multi"])
    ema = ws[0]  # the first update copies
    for w, got in zip(ws, avgs, strict=True):
        ema = ema if w is ws[0] else 0.7 * ema + 0.3 * w
        np.testing.assert_allclose(got, ema, rtol=1e-12)
    ws, avgs, avg, model = _weights_each_step(AVERAGES["swa default"])
    for k, got in enumerate(avgs):
        np.testing.assert_allclose(got, np.mean(ws[: k + 1], axis=0), rtol=1e-12)
    # buffers are copied from the model without use_buffers
    np.testing.assert_array_equal(avg.module[1].running_mean.numpy(),
                                  model[1].running_mean.numpy())  # fmt: skip
    assert avg.module[1].num_batches_tracked.item() == STEPS
    assert avg.module[0].weight is not model[0].weight  # a copy


def test_use_buffers_averages_the_running_statistics():
    means = []
    model = make_model(tg)
    avg = averaged(tg, model, AVERAGES["swa buffers"])
    opt = tg.optim.SGD(model.parameters(), lr=0.1)
    for x, y in zip(X, Y, strict=True):
        opt.zero_grad()
        ((model(tg.tensor(x)) - tg.tensor(y)) ** 2).mean().backward()
        opt.step()
        avg.update_parameters(model)
        means.append(model[1].running_mean.numpy().copy())
    np.testing.assert_allclose(avg.module[1].running_mean.numpy(), np.mean(means, axis=0),
                               rtol=1e-12)  # fmt: skip
    # the int64 count is averaged too, as PyTorch's: truncated to int64 at every update
    count = 1
    for n in range(1, STEPS):
        count = int(count + (n + 1 - count) / (n + 1))
    assert avg.module[1].num_batches_tracked.dtype == np.int64
    assert avg.module[1].num_batches_tracked.item() == count


def test_state_dict_keys_are_pytorchs_and_round_trip():
    _, _, avg, model = _weights_each_step(AVERAGES["ema multi"])
    state = avg.state_dict()
    assert list(state)[0] == "n_averaged"
    assert list(state)[1:] == [f"module.{k}" for k in model.state_dict()]
    again = swa_utils.AveragedModel(make_model(tg), multi_avg_fn=swa_utils.get_ema_multi_avg_fn())
    again.load_state_dict(state)
    for k, v in again.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k].numpy())
    assert again.n_averaged.item() == STEPS
    x = tg.tensor(X[0])
    avg.eval(), again.eval()
    np.testing.assert_array_equal(again(x).numpy(), avg(x).numpy())  # forward is the copy's


def test_the_averaging_functions_check_their_arguments():
    with pytest.raises(ValueError, match="decay"):
        swa_utils.get_ema_multi_avg_fn(1.5)
    with pytest.raises(ValueError, match="decay"):
        swa_utils.get_ema_avg_fn(-0.1)
    model = make_model(tg)
    with pytest.raises(AssertionError, match="Only one"):
        swa_utils.AveragedModel(model, avg_fn=swa_utils.get_swa_avg_fn(),
                                multi_avg_fn=swa_utils.get_swa_multi_avg_fn())  # fmt: skip


def test_lerp_computes_as_pytorchs_from_either_end():
    """Weights below 0.5 step from the start, the others back from the end: bit for bit as
    PyTorch's lerp, which the SWA multi-average uses with weights 1 and 1/2."""
    a, b = np.array([0.1, 1e8, -3.3]), np.array([0.7, -2.0, 1e-9])
    for w in (0.001, 0.3, 0.5, 1.0):
        t = tg.tensor(a.copy())
        swa_utils.lerp_(t, tg.tensor(b), w)
        want = a + w * (b - a) if w < 0.5 else b - (b - a) * (1 - w)
        np.testing.assert_array_equal(t.numpy(), want)
    t = tg.tensor(a.copy())
    swa_utils.lerp_(t, tg.tensor(b), 1.0)
    np.testing.assert_array_equal(t.numpy(), b)  # exactly the end, where a + (b - a) is not


# --- SWALR and update_bn -----------------------------------------------------------------------


def swa_schedule(lib, strategy, backend=None, epochs=12, swa_start=4):
    """PyTorch's recipe: CosineAnnealingLR until swa_start, then SWALR (made at the start)."""
    torch = pytest.importorskip("torch") if lib == "torch" else tg
    w = torch.tensor(np.array([1.0, -1.0]), requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.5, momentum=0.9)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    swa = torch.optim.swa_utils.SWALR(opt, swa_lr=0.05, anneal_epochs=3,
                                      anneal_strategy=strategy)  # fmt: skip

    def step(late):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        (swa if late else cosine).step()

    early, late = step, step
    if backend:
        early = tg.trace(lambda: step(False), backend=backend)
        late = tg.trace(lambda: step(True), backend=backend)
    lrs = []
    for epoch in range(epochs):
        late() if backend and epoch > swa_start else early() if backend else step(epoch > swa_start)
        lrs.append(opt.param_groups[0]["lr"])
    return lrs


@pytest.mark.parametrize("strategy", ["cos", "linear"])
def test_swalr_matches_pytorch(strategy):
    pytest.importorskip("torch")
    got, want = swa_schedule("tg", strategy), swa_schedule("torch", strategy)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert want[-1] == pytest.approx(0.05) and want[5] != pytest.approx(0.05)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_swalr_stepped_inside_a_traced_step(backend, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    got = swa_schedule("tg", "cos", backend)
    np.testing.assert_allclose(got, swa_schedule("tg", "cos"), rtol=1e-12)


def test_swalr_by_its_definition():
    """From the lr it finds at its first step, to swa_lr over anneal_epochs steps."""
    lrs = swa_schedule("tg", "linear")
    start = lrs[4]  # the cosine's last value, before SWALR's first step
    for k, lr in enumerate(lrs[5:], 1):
        alpha = min(1.0, k / 3)
        assert lr == pytest.approx(0.05 * alpha + start * (1 - alpha), rel=1e-12)


def test_update_bn_recomputes_the_statistics_as_pytorch():
    pytest.importorskip("torch")
    import torch

    batches = [(torch.tensor(x), torch.tensor(y)) for x, y in zip(X, Y, strict=True)]
    want = make_model(torch)
    torch.optim.swa_utils.update_bn(batches, want)
    got = make_model(tg)
    swa_utils.update_bn([(tg.tensor(x), tg.tensor(y)) for x, y in zip(X, Y, strict=True)], got)
    for k, v in want.state_dict().items():
        np.testing.assert_allclose(got.state_dict()[k].numpy(), v.numpy(), rtol=1e-12, err_msg=k)


def test_update_bn_by_its_definition():
    model = make_model(tg)
    model[1].running_mean.numpy()[:] = 5.0  # stale statistics: reset first
    model.eval()
    swa_utils.update_bn([tg.tensor(x) for x in X], model)
    hidden = [x @ model[0].weight.numpy().T + model[0].bias.numpy() for x in X]
    np.testing.assert_allclose(
        model[1].running_mean.numpy(), np.mean([h.mean(0) for h in hidden], axis=0), rtol=1e-12
    )
    np.testing.assert_allclose(
        model[1].running_var.numpy(),
        np.mean([h.var(0, ddof=1) for h in hidden], axis=0),
        rtol=1e-12,
    )
    assert model[1].momentum == 0.1 and not model.training  # put back  # fmt: skip
    assert model[1].num_batches_tracked.item() == STEPS


def test_torch_namespace_has_swa_utils():
    import tracegrad.torch as torch

    assert torch.optim.swa_utils.AveragedModel is swa_utils.AveragedModel
    with pytest.raises(AttributeError, match="swa_utils.NoSuchThing is not provided"):
        torch.optim.swa_utils.NoSuchThing  # noqa: B018


def test_an_ema_in_a_step_compiled_the_pytorch_way():
    """`import torch` code: an EMA of the weights updated inside a `torch.compile`d step, with
    AdamW and a schedule, equals the same step run eagerly."""
    import tracegrad.torch as torch

    def train(compiled):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.GELU(),
                                    torch.nn.Linear(8, 2))  # fmt: skip
        ema = torch.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9)
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            ema.update_parameters(model)
            return loss

        run = torch.compile(step) if compiled else step
        losses = [run(torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32))
                  .item() for x, y in zip(X, Y, strict=True)]  # fmt: skip
        ema.eval()
        return losses, ema(torch.tensor(X[0], dtype=torch.float32)).numpy(), ema.n_averaged.item()

    (eager_losses, eager_out, eager_n), (losses, out, n) = train(False), train(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    np.testing.assert_allclose(out, eager_out, rtol=1e-5, atol=1e-6)
    assert n == eager_n == STEPS
