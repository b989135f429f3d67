"""tracegrad.optim: each update rule against a hand-written NumPy reference over several steps,
plus the properties the tracer relies on (eager state tensors, in-place updates)."""

from __future__ import annotations

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import optim
from tracegrad.core.vocabulary import Phase

STEPS = 5


def np_sgd(p, grads, lr, momentum=0.0, weight_decay=0.0, nesterov=False):
    p, buf = p.copy(), np.zeros_like(p)
    for g in grads:
        g = g + weight_decay * p
        if momentum:
            buf = momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def np_adam(p, grads, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    (b1, b2), p = betas, p.copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        p = p - lr * m_hat / (np.sqrt(v_hat) + eps)
    return p


CASES = [
    (optim.SGD, np_sgd, dict(lr=0.1)),
    (optim.SGD, np_sgd, dict(lr=0.1, momentum=0.9)),
    (optim.SGD, np_sgd, dict(lr=0.05, momentum=0.8, nesterov=True)),
    (optim.SGD, np_sgd, dict(lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True)),
    (optim.SGD, np_sgd, dict(lr=0.1, weight_decay=0.2)),
    (optim.Adam, np_adam, dict(lr=0.01)),
    (optim.Adam, np_adam, dict(lr=0.02, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)),
    (optim.AdamW, lambda p, g, **kw: np_adam(p, g, decoupled=True, weight_decay=0.01, **kw),
     dict(lr=0.01)),
    (optim.AdamW, lambda p, g, **kw: np_adam(p, g, decoupled=True, **kw),
     dict(lr=0.05, betas=(0.5, 0.9), weight_decay=0.3)),
]  # fmt: skip


def trained(opt_cls: type, kwargs: dict, starts: list, grads: list) -> list:
    """Parameters from `starts` after STEPS steps of `opt_cls(**kwargs)`, each parameter's
    gradients (`grads`, one list a parameter) one a step."""
    params = [tg.tensor(p.copy(), requires_grad=True) for p in starts]
    opt = opt_cls(params, **kwargs)
    for step in range(STEPS):
        for p, g in zip(params, grads, strict=True):
            p.grad = g[step]
        opt.step()
    return params


@pytest.mark.parametrize("opt_cls, reference, kwargs", CASES)
def test_update_rule_matches_numpy_reference(opt_cls, reference, kwargs, rng):
    p0 = [rng.standard_normal((3, 4)), rng.standard_normal(4)]
    grads = [[rng.standard_normal(p.shape) for _ in range(STEPS)] for p in p0]
    params = trained(opt_cls, kwargs, p0, grads)
    for p, start, g in zip(params, p0, grads, strict=True):
        expected = reference(start, g, **kwargs)
        assert not np.allclose(expected, start)  # the reference did move the parameter
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("opt_cls, reference, kwargs", CASES)
@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_eager_updates_of_large_parameters_run_one_fused_kernel_each(
    opt_cls, reference, kwargs, dtype, tol, rng, monkeypatch, request
):
    """Eagerly, once its kernel has loaded, SGD's or Adam's update of a large parameter and its
    state is one fused kernel (`runtime.eager.run_group`, where NumPy made a pass per op), with
    the reference's results; the first call of a signature runs the ops while the kernel loads,
    and a parameter below `lowering.KERNEL_MIN` takes the ops, as a plan does."""
    from tracegrad.core import vocabulary
    from tracegrad.runtime import eager

    monkeypatch.setattr(eager, "_kernels", {})
    ran = []

    def spy(*args):
        ran.append(eager.run_group(*args))
        return ran[-1]

    original = vocabulary.EAGER_GROUPS[:]
    vocabulary.EAGER_GROUPS[:] = [spy]  # the list optim holds; put back after the test
    request.addfinalizer(lambda: vocabulary.EAGER_GROUPS.__setitem__(slice(None), original))
    shapes = [(300, 256), (40,)]
    warm = [tg.tensor(np.ones(shape, dtype), requires_grad=True) for shape in shapes]
    for p in warm:
        p.grad = np.ones(p.shape, dtype)
    opt_cls(warm, **kwargs).step()  # the ops, and the kernels' loading
    eager.wait_for_kernels()
    assert ran == [False, False]
    p0 = [rng.standard_normal(shape).astype(dtype) for shape in shapes]
    grads = [[rng.standard_normal(p.shape).astype(dtype) for _ in range(STEPS)] for p in p0]
    params = trained(opt_cls, kwargs, p0, grads)
    assert ran[2:] == [True, False] * STEPS
    for p, start, g in zip(params, p0, grads, strict=True):
        assert p.dtype == dtype
        expected = reference(start.astype(np.float64), [x.astype(np.float64) for x in g],
                             **kwargs)  # fmt: skip
        np.testing.assert_allclose(p.numpy(), expected, rtol=tol, atol=tol)
    assert params[0]._version[0] == STEPS  # each write counted


UPDATE_EDGES = [(optim.Adam, dict(lr=0.01, maximize=True)), (optim.SGD, dict(lr=0.1, momentum=0.9)),
           (optim.AdamW, dict(lr=0.01, amsgrad=True))]  # fmt: skip


@pytest.mark.parametrize("opt_cls, kwargs", UPDATE_EDGES)
def test_eager_updates_agree_with_or_without_fused_kernels(opt_cls, kwargs, rng, request):
    """Maximizing, a gradient laid out transposed (the ops take it), amsgrad (the ops): the
    same parameters whether the fused kernels run (`vocabulary.EAGER_GROUPS`) or not."""
    from tracegrad.core import vocabulary
    from tracegrad.runtime import eager

    original = vocabulary.EAGER_GROUPS[:]
    request.addfinalizer(lambda: vocabulary.EAGER_GROUPS.__setitem__(slice(None), original))
    start = rng.standard_normal((400, 300))
    grads = [rng.standard_normal((300, 400)).T for _ in range(STEPS)]  # columns contiguous

    def train(groups: list) -> np.ndarray:
        vocabulary.EAGER_GROUPS[:] = groups
        p, q = (tg.tensor(start.copy(), requires_grad=True) for _ in "pq")
        opt = opt_cls([p, q], **kwargs)
        for g in grads:
            p.grad, q.grad = g, np.ascontiguousarray(g)
            opt.step()
            eager.wait_for_kernels()
        return np.stack([p.numpy(), q.numpy()])

    np.testing.assert_allclose(train(original), train([]), rtol=1e-12, atol=1e-12)


def _parts(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], -1)


@pytest.mark.parametrize("opt_cls, reference, kwargs", CASES)
def test_a_complex_parameter_is_updated_as_its_real_view(opt_cls, reference, kwargs, rng):
    """PyTorch's optimizers update a complex parameter (and its state) as the real tensor of
    its parts: Adam's second moment is of each part, not of g * g. The state stays complex."""
    start = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4)) for _ in range(STEPS)]
    p = tg.tensor(start.copy(), requires_grad=True)
    data = p.numpy()
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = g
        opt.step()
    expected = reference(_parts(start), [_parts(g) for g in grads], **kwargs)
    assert p.numpy() is data and p.dtype == np.complex128
    np.testing.assert_allclose(_parts(p.numpy()), expected, rtol=1e-12, atol=1e-12)
    assert all(t.dtype == np.complex128 for k, t in opt.state[0].items() if k != "step")
    with pytest.raises(TypeError, match="LBFGS: complex parameters are not provided"):
        optim.LBFGS([p])


@pytest.mark.parametrize("opt_cls, reference, kwargs", CASES[1:2] + CASES[5:6])
def test_float32_parameters_stay_float32_and_close(opt_cls, reference, kwargs, rng):
    start = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(STEPS)]
    p = tg.tensor(start.copy(), requires_grad=True)
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = g
        opt.step()
    assert p.dtype == np.float32
    expected = reference(start.astype(np.float64), [g.astype(np.float64) for g in grads], **kwargs)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_updates_are_in_place_and_state_is_created_eagerly():
    p = tg.tensor(np.ones(3, np.float32), requires_grad=True)
    data = p.numpy()
    adam = optim.Adam([p])
    state = adam.state[0]
    assert set(state) == {"step", "exp_avg", "exp_avg_sq"}
    assert state["step"].shape == () and state["step"].dtype == np.float32
    buffers = {k: t.numpy() for k, t in state.items()}
    for _ in range(3):
        p.grad = np.ones(3, np.float32)
        adam.step()
    assert p.numpy() is data and not np.allclose(data, 1.0)
    assert all(state[k].numpy() is buffers[k] for k in state)  # written in place, not replaced
    assert state["step"].item() == 3.0
    assert set(optim.SGD([p], lr=0.1, momentum=0.9).state[0]) == {"momentum_buffer"}
    assert optim.SGD([p], lr=0.1).state == [{}]


def test_eager_updates_cast_a_hyperparameter_once_until_it_is_written(rng, monkeypatch):
    """float32 parameters' updates multiply by float32 casts of the held float64 learning rate
    and momentum: eagerly one cast per value, kept while the held tensor's version stays, made
    again once it is written (by the group, or in place); the kept cast refuses writes."""
    from tracegrad.core import primitives as P

    ps = [tg.tensor(rng.standard_normal(4).astype(np.float32), requires_grad=True)
          for _ in range(3)]  # fmt: skip
    opt = optim.SGD(ps, lr=0.1, momentum=0.9)
    grads = [rng.standard_normal(4).astype(np.float32) for _ in ps]
    casts, impl = [], P.astype.impl
    monkeypatch.setattr(P.astype, "impl", lambda *a, **k: casts.append(1) or impl(*a, **k))
    want = [p.numpy().astype(np.float64) for p in ps]
    bufs = [np.zeros(4) for _ in ps]
    for step, lr in enumerate([0.1, 0.1, 0.05, 0.02]):
        if step == 2:
            opt.param_groups[0]["lr"] = lr
        if step == 3:
            opt.param_groups[0].held["lr"][0].copy_(tg.tensor(lr, dtype=tg.float64))
        casts.clear()
        for p, g in zip(ps, grads, strict=True):
            p.grad = tg.tensor(g)
        opt.step()
        assert len(casts) == [2, 0, 1, 1][step]  # lr and momentum, then only a new lr
        for k, g in enumerate(grads):
            bufs[k] = 0.9 * bufs[k] + g
            want[k] = want[k] - np.float32(lr) * bufs[k]
    for p, w in zip(ps, want, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-5)
    with pytest.raises(ValueError):
        opt.lr_for(ps[0]).numpy()[...] = 1.0


def test_step_records_nothing_and_skips_parameters_without_grad():
    a = tg.tensor([1.0, 2.0], requires_grad=True)
    b = tg.tensor([3.0], requires_grad=True)
    opt = optim.SGD([a, b], lr=0.5, momentum=0.9)
    a.grad = tg.tensor([1.0, 1.0])
    opt.step()
    np.testing.assert_array_equal(a.numpy(), [0.5, 1.5])
    np.testing.assert_array_equal(b.numpy(), [3.0])
    np.testing.assert_array_equal(opt.state[1]["momentum_buffer"].numpy(), [0.0])
    assert a.is_leaf and a.grad_fn is None


def test_zero_grad_sets_grads_to_none():
    p = tg.tensor([1.0], requires_grad=True)
    (p * 2.0).sum().backward()
    opt = optim.SGD([p], lr=0.1)
    opt.zero_grad()
    assert p.grad is None
    (p * 3.0).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), [3.0])  # no stale accumulation


def test_training_with_grad_manager_reduces_a_quadratic():
    target = np.array([1.0, -2.0, 3.0], np.float32)
    w = tg.tensor(np.zeros(3, np.float32), requires_grad=True)
    gm = tg.GradManager().attach([w])
    opt = optim.Adam([w], lr=0.1)
    for _ in range(200):
        with gm:
            loss = ((w - target) ** 2.0).sum()
            gm.backward(loss)
        opt.step()
        opt.clear_grad()
    np.testing.assert_allclose(w.numpy(), target, atol=1e-2)


def test_shared_parameters_are_updated_once():
    p = tg.tensor([1.0], requires_grad=True)
    opt = optim.SGD([p, p], lr=1.0)
    assert len(opt.params) == 1
    p.grad = tg.tensor([1.0])
    opt.step()
    np.testing.assert_array_equal(p.numpy(), [0.0])


def test_invalid_arguments():
    p = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD([p], lr=-1.0)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="floating"):
        optim.SGD([tg.tensor(np.array([1]))], lr=0.1)
    with pytest.raises(TypeError, match="Tensors"):
        optim.SGD([np.ones(2)], lr=0.1)


RESUMABLE = [
    (optim.SGD, dict(lr=0.1, momentum=0.9)),
    (optim.AdamW, dict(lr=0.01, betas=(0.8, 0.99))),
]


@pytest.mark.parametrize("opt_cls, kwargs", RESUMABLE)
def test_state_dict_round_trip_resumes_identically(opt_cls, kwargs, rng):
    start = rng.standard_normal(4)
    grads = [rng.standard_normal(4) for _ in range(6)]

    def run(p, opt, gs):
        for g in gs:
            p.grad = g
            opt.step()

    p_full = tg.tensor(start.copy(), requires_grad=True)
    run(p_full, opt_cls([p_full], **kwargs), grads)

    p_first = tg.tensor(start.copy(), requires_grad=True)
    first = opt_cls([p_first], **kwargs)
    run(p_first, first, grads[:3])
    state = first.state_dict()
    state_arrays = {  # as tracegrad.load returns it: arrays, lists for tuples
        "state": {
            i: {k: t.numpy().copy() for k, t in s.items()} for i, s in state["state"].items()
        },
        "param_groups": [
            {k: list(v) if isinstance(v, tuple) else v for k, v in g.items()}
            for g in state["param_groups"]
        ],
    }
    p_resumed = tg.tensor(p_first.numpy().copy(), requires_grad=True)
    resumed = opt_cls([p_resumed], **kwargs)
    resumed.lr, resumed.weight_decay = 123.0, 0.5
    buffers = [t.numpy() for t in resumed.state[0].values()]
    resumed.load_state_dict(state_arrays)
    after = [t.numpy() for t in resumed.state[0].values()]
    assert all(a is b for a, b in zip(after, buffers, strict=True))
    hyper = {k: getattr(first, k) for k in first.hyperparameters}
    assert {k: getattr(resumed, k) for k in resumed.hyperparameters} == hyper
    run(p_resumed, resumed, grads[3:])
    np.testing.assert_array_equal(p_resumed.numpy(), p_full.numpy())


def test_load_state_dict_rejects_mismatches():
    p, q = tg.tensor(np.zeros(3), requires_grad=True), tg.tensor(np.zeros(2), requires_grad=True)
    adam_state = optim.Adam([p]).state_dict()
    with pytest.raises(ValueError, match="a saved group has 1 parameters, this optimizer's 2"):
        optim.Adam([p, q]).load_state_dict(adam_state)
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 0 has shape \(3,\)"):
        optim.Adam([q]).load_state_dict(adam_state)
    with pytest.raises(ValueError, match="parameter 0 has state"):
        optim.SGD([p], lr=0.1, momentum=0.9).load_state_dict(adam_state)
    sgd_state = optim.SGD([p], lr=0.1).state_dict()
    with pytest.raises(ValueError, match="unknown hyperparameters"):
        optim.SGD([p], lr=0.1).load_state_dict(
            {**sgd_state, "param_groups": [{**sgd_state["param_groups"][0], "betas": 1}]}
        )
    with pytest.raises(ValueError, match="2 parameters, this optimizer's 1"):
        optim.SGD([p], lr=0.1).load_state_dict(
            {**sgd_state, "param_groups": [{**sgd_state["param_groups"][0], "params": [0, 1]}]}
        )


def test_state_dict_has_pytorchs_layout():
    """Parameters numbered across the groups, each group's hyperparameters with its numbers:
    code reading `state_dict()["param_groups"][0]["lr"]` reads the learning rate."""
    w, b = tg.tensor(np.ones((2, 2)), requires_grad=True), tg.tensor(np.ones(2), requires_grad=True)
    opt = optim.Adam([{"params": [w]}, {"params": [b], "lr": 0.01}], lr=0.1)
    saved = opt.state_dict()
    assert sorted(saved) == ["param_groups", "state"] and sorted(saved["state"]) == [0, 1]
    assert [g["params"] for g in saved["param_groups"]] == [[0], [1]]
    assert [g["lr"] for g in saved["param_groups"]] == [0.1, 0.01]
    assert saved["param_groups"][0]["betas"] == (0.9, 0.999)
    assert sorted(saved["state"][1]) == ["exp_avg", "exp_avg_sq", "step"]
    again = optim.Adam([{"params": [w]}, {"params": [b]}], lr=0.5)
    again.load_state_dict(saved)
    assert [g["lr"] for g in again.param_groups] == [0.1, 0.01] and again.lr == 0.1


def test_a_checkpoint_of_the_earlier_layout_still_loads():
    """tracegrad wrote {"state": {"0": ...}, "hyperparameters": ..., "param_groups": {"0": ...}}
    before it took PyTorch's layout."""
    p = tg.tensor(np.ones(3), requires_grad=True)
    old = {"state": {"0": {"momentum_buffer": np.full(3, 2.0)}},
           "hyperparameters": {"lr": 0.5, "momentum": 0.8, "dampening": 0.0,
                               "weight_decay": 0.0, "nesterov": False},
           "param_groups": {"0": {"lr": 0.25, "momentum": 0.8, "dampening": 0.0,
                                  "weight_decay": 0.0, "nesterov": False}}}  # fmt: skip
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    opt.load_state_dict(old)
    assert opt.lr == 0.25 and opt.momentum == 0.8
    assert opt.state[0]["momentum_buffer"].tolist() == [2.0, 2.0, 2.0]
    opt.load_state_dict({**old, "param_groups": None})
    assert opt.lr == 0.5


def _quadratic_run(opt_cls, kwargs, schedule, traced):
    """Minimize |w - t|^2 for a few steps, setting hyperparameters from `schedule` before each."""
    w = tg.tensor(np.linspace(-1, 1, 6), requires_grad=True)
    target = np.cos(np.arange(6.0))
    opt = opt_cls([w], **kwargs)
    gm = tg.GradManager().attach([w])

    def step(t):
        with gm:
            loss = ((w - t) ** 2).sum()
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    run = tg.trace(step, backend="numpy") if traced else step
    for settings in schedule:
        for name, value in settings.items():
            setattr(opt, name, value)
        run(target)
    return w.numpy().copy(), run


@pytest.mark.parametrize(
    "opt_cls, kwargs, schedule",
    [
        (optim.SGD, {"lr": 0.1, "momentum": 0.9}, [{"lr": 0.1 * 0.5**i} for i in range(6)]),
        (optim.AdamW, {"lr": 0.1}, [{"lr": 0.1 * 0.5**i} for i in range(6)]),
        (
            optim.SGD,
            {"lr": 0.1, "momentum": 0.9},
            [{"momentum": 0.95 - 0.03 * i} for i in range(6)],
        ),
        (optim.Adam, {"lr": 0.1}, [{"betas": (0.95 - 0.03 * i, 0.999)} for i in range(6)]),
        (
            optim.RMSprop,
            {"lr": 0.1, "momentum": 0.9},
            [{"momentum": 0.5 + 0.1 * i} for i in range(4)],
        ),
    ],
)
def test_a_traced_step_follows_a_schedule_without_tracing_again(opt_cls, kwargs, schedule):
    """The learning rate, momentum and betas (what schedules change) are state of the step."""
    eager, _ = _quadratic_run(opt_cls, kwargs, schedule, traced=False)
    traced, step = _quadratic_run(opt_cls, kwargs, schedule, traced=True)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert sum(len(plans) for plans in step.plans.values()) == 1
    frozen, _ = _quadratic_run(opt_cls, kwargs, schedule[:1] * len(schedule), traced=False)
    assert not np.allclose(frozen, eager)  # the schedule matters


def test_a_traced_step_traces_again_when_a_baked_hyperparameter_changes():
    schedule = [{"weight_decay": w} for w in (0.1, 0.1, 0.5, 0.5, 0.1)]
    kwargs = {"lr": 0.1, "momentum": 0.9}
    eager, _ = _quadratic_run(optim.SGD, kwargs, schedule, traced=False)
    traced, step = _quadratic_run(optim.SGD, kwargs, schedule, traced=True)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert sum(len(plans) for plans in step.plans.values()) == 2  # 0.1 and 0.5; 0.1 reused
    schedule = [{"momentum": m} for m in (0.9, 0.0, 0.9)]  # momentum on or off: baked
    eager, _ = _quadratic_run(optim.SGD, kwargs, schedule, traced=False)
    traced, step = _quadratic_run(optim.SGD, kwargs, schedule, traced=True)
    np.testing.assert_allclose(traced, eager, rtol=1e-12)
    assert sum(len(plans) for plans in step.plans.values()) == 2


def test_guard_outside_tracing_does_nothing_and_inside_retraces():
    flag = {"scale": 2.0}
    calls = []

    @tg.trace(backend="numpy")
    def scaled(x):
        calls.append(1)
        value = flag["scale"]
        tg.guard(lambda: flag["scale"] == value)
        return x * value

    tg.guard(lambda: False)  # not tracing: ignored
    assert float(scaled(np.ones(()))) == 2.0
    assert float(scaled(np.ones(()))) == 2.0 and len(calls) == 1
    flag["scale"] = 3.0
    assert float(scaled(np.ones(()))) == 3.0 and len(calls) == 2


def test_a_step_traced_again_and_again_warns_once():
    schedule = [{"weight_decay": 0.01 * i} for i in range(10)]
    with pytest.warns(UserWarning, match="traced 8 times for one signature") as caught:
        _quadratic_run(optim.SGD, {"lr": 0.1, "momentum": 0.9}, schedule, traced=True)
    assert len(caught) == 1


def _train(lib, opt_name, dtype=np.float64, backend=None, steps=4, scale=1.0, one_cycle=None,
           **opt_kwargs):  # fmt: skip
    """`steps` steps of optimizer `opt_name` (lr 0.01 unless given) on a two-layer tanh
    network's squared error, stepping a OneCycleLR(**one_cycle) after each if given. Returns
    the parameters and, per step, the first group's lr, momentum and betas as used by it.
    `lib` is "tg" (eager, or traced on `backend`) or "torch"."""
    rng = np.random.default_rng(5)
    start = [(scale * rng.standard_normal(s)).astype(dtype) for s in ((6, 8), (8,), (8, 3))]
    x, y = rng.standard_normal((16, 6)).astype(dtype), rng.standard_normal((16, 3)).astype(dtype)
    opt_kwargs = {"lr": 0.01, **opt_kwargs}
    if lib == "torch":
        import torch

        ps = [torch.tensor(a, requires_grad=True) for a in start]
        opt = getattr(torch.optim, opt_name)(ps, **opt_kwargs)
        x, y = torch.tensor(x), torch.tensor(y)

        def step():
            opt.zero_grad()
            loss = ((torch.tanh(x @ ps[0] + ps[1]) @ ps[2] - y) ** 2).sum()
            loss.backward()
            opt.step()

    else:
        torch = tg
        ps = [tg.tensor(a, requires_grad=True) for a in start]
        opt = getattr(optim, opt_name)(ps, **opt_kwargs)
        gm = tg.GradManager().attach(ps)

        def step():
            with gm:
                loss = ((tg.tanh(x @ ps[0] + ps[1]) @ ps[2] - y) ** 2).sum()
                gm.backward(loss)
            opt.step()
            opt.zero_grad()

        step = tg.trace(step, backend=backend) if backend else step
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, **one_cycle) if one_cycle else None
    used = []
    for _ in range(steps):
        used.append({k: opt.param_groups[0].get(k) for k in ("lr", "momentum", "betas")})
        step()
        if scheduler:
            scheduler.step()
    if backend:
        assert sum(len(plans) for plans in step.plans.values()) == 1  # traced once
    return [p.detach().numpy() if lib == "torch" else p.numpy() for p in ps], used


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
@pytest.mark.parametrize("opt_name", ["Adam", "AdamW"])
def test_adam_matches_pytorch_in_float64(opt_name, backend):
    """The bias corrections 1 - beta**t are computed in float64 from the float32 step count,
    as PyTorch computes them: in float32 one step was 7e-6 off relative (beta2 = 0.999)."""
    pytest.importorskip("torch")
    got, _ = _train("tg", opt_name, np.float64, backend)
    want, _ = _train("torch", opt_name, np.float64)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
def test_adam_matches_pytorch_in_float32(backend):
    """Float32 parameters to float32 rounding. Small parameters, so that a step of lr = 0.01
    is resolved to 1e-7: with float32 bias corrections it was 7e-6 off."""
    pytest.importorskip("torch")
    got, _ = _train("tg", "Adam", np.float32, backend, steps=1, scale=1e-3)
    want, _ = _train("torch", "Adam", np.float32, steps=1, scale=1e-3)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


ONE_CYCLE = {
    "sgd": ("SGD", dict(momentum=0.9), dict(max_lr=0.005, total_steps=10)),
    "sgd without momentum": ("SGD", {}, dict(max_lr=0.005, total_steps=10, base_momentum=0.8)),
    "nesterov three phases": ("SGD", dict(momentum=0.9, nesterov=True),
                              dict(max_lr=0.005, total_steps=10, three_phase=True,
                                   anneal_strategy="linear")),
    "adam": ("Adam", {}, dict(max_lr=0.05, total_steps=10, max_momentum=0.9)),
    "adamw": ("AdamW", dict(betas=(0.8, 0.99)), dict(max_lr=0.05, total_steps=10)),
    "rmsprop": ("RMSprop", dict(momentum=0.5), dict(max_lr=0.01, total_steps=10)),
}  # fmt: skip


@pytest.mark.parametrize("backend", [None, "numpy", "numba"])
@pytest.mark.parametrize("case", ONE_CYCLE)
def test_one_cycle_cycles_momentum_as_pytorch_and_traces_once(case, backend):
    """OneCycleLR's default cycle_momentum: momentum (SGD, RMSprop) or beta1 (Adam) runs from
    max_momentum to base_momentum and back while the lr rises and falls; a traced step reads
    both as state. Against PyTorch: the values used at each step and the parameters after."""
    pytest.importorskip("torch")
    opt_name, opt_kwargs, one_cycle = ONE_CYCLE[case]
    got, got_used = _train("tg", opt_name, backend=backend, steps=10, one_cycle=one_cycle,
                           **opt_kwargs)  # fmt: skip
    want, want_used = _train("torch", opt_name, steps=10, one_cycle=one_cycle, **opt_kwargs)
    assert len({str(u) for u in want_used}) == 10  # every step a new lr and momentum
    for a, b in zip(got_used, want_used, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            none = a[k] is None
            assert none == (b[k] is None)
            assert none or np.allclose(a[k], b[k], rtol=1e-14, atol=0), (k, a[k], b[k])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)


def test_one_cycle_momentum_by_its_definition():
    """Without PyTorch: momentum falls from max to base while the lr warms up, then rises."""
    p = tg.tensor([1.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    scheduler = optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=11, pct_start=6 / 11,
                                              anneal_strategy="linear")  # fmt: skip
    momenta = []
    for _ in range(11):
        momenta.append(opt.momentum)
        scheduler.step()
    np.testing.assert_allclose(momenta, [0.95, 0.93, 0.91, 0.89, 0.87, 0.85, 0.87, 0.89, 0.91,
                                         0.93, 0.95])  # fmt: skip
    assert opt.param_groups[0].tensors("momentum")[0].item() == opt.momentum


def test_one_cycle_refuses_to_cycle_what_an_optimizer_lacks():
    p = tg.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="Adagrad has neither momentum nor betas"):
        optim.lr_scheduler.OneCycleLR(optim.Adagrad([p]), max_lr=0.1, total_steps=5)
    optim.lr_scheduler.OneCycleLR(optim.Adagrad([p]), 0.1, 5, cycle_momentum=False)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("opt_name", ["Adam", "AdamW"])
def test_adam_computes_its_bias_corrections_once_per_group(opt_name, backend):
    """Two groups, float32 and float64 parameters mixed in one, one parameter without a
    gradient: the traced step matches the eager one, and its bias corrections are vector
    operations of each group (two powers a group), not scalar ones of each parameter."""

    def make():
        rng = np.random.default_rng(0)
        f32, f64 = np.float32, np.float64
        kinds = [((3, 4), f64), ((4,), f32), ((2, 2), f64), ((5,), f64), ((3,), f32), ((2,), f64)]
        ps = [tg.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
              for shape, dtype in kinds]  # fmt: skip
        groups = [{"params": ps[:3]}, {"params": ps[3:], "weight_decay": 0.0}]
        opt = getattr(optim, opt_name)(groups, lr=0.1, weight_decay=0.01)

        def step(x):
            opt.zero_grad()
            loss = (tg.tanh(x @ ps[0]) * ps[1]).sum() + (ps[2] ** 2).sum()
            loss = loss + (ps[3].astype(np.float32) * ps[4].sum()).sum()
            loss.backward()
            opt.step()
            return loss

        return step, ps, opt

    x = np.random.default_rng(1).standard_normal((2, 3))
    (eager, ps_e, opt_e), (step, ps_t, opt_t) = make(), make()
    traced = tg.trace(step, backend=backend)
    for _ in range(3):
        eager(tg.tensor(x))
        traced(x)
    for a, b in zip(ps_t, ps_e, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_allclose(
            a.numpy(), b.numpy(), rtol=1e-6 if a.dtype == np.float32 else 1e-13
        )
    steps = [(float(sa["step"]), float(sb["step"]))
             for sa, sb in zip(opt_t.state, opt_e.state, strict=True)]  # fmt: skip
    assert steps == [(3.0, 3.0)] * 5 + [(0.0, 0.0)]  # the last parameter has no gradient
    nodes = traced.latest.graph.nodes
    powers = [n for n in nodes if n.op == "pow" and n.phase is Phase.UPDATE]
    assert len(powers) == 4 and all(n.outputs[0].ndim == 1 for n in powers)


def test_zero_grad_goes_by_the_groups_a_wrapper_shares():
    """timm's Lookahead shares its base optimizer's groups and skips Optimizer.__init__:
    zero_grad, walking PyTorch's param_groups, works for it."""
    w = tg.tensor(np.ones(3), requires_grad=True)
    base = optim.SGD([w], lr=0.1)

    class Wrapper(optim.Optimizer):
        def __init__(self, base):
            self.base, self.param_groups, self.state = base, base.param_groups, base.state

        def step(self, closure=None):
            return self.base.step(closure)

    wrapper = Wrapper(base)
    (w * w).sum().backward()
    wrapper.step()
    wrapper.zero_grad()
    assert w.grad is None and w.tolist() == [0.8, 0.8, 0.8]


def test_a_saved_state_without_entries_for_unstepped_parameters_loads_them_fresh():
    """PyTorch saves no state for a parameter that never stepped (frozen, unused, or a
    checkpoint taken before the first step): loading leaves that state as new (timm's
    resume_checkpoint of such a file raised)."""
    a, b = tg.tensor(np.ones(2), requires_grad=True), tg.tensor(np.ones(3), requires_grad=True)
    opt = optim.Adam([a, b], lr=0.1)
    (a.sum() + (b * b).sum()).backward()
    opt.step()
    saved = opt.state_dict()  # references to the live state, as PyTorch's: copy the entry
    entry = {k: v.clone() for k, v in saved["state"][1].items()}
    pytorch_like = {"state": {1: entry}, "param_groups": saved["param_groups"]}
    (a.sum() + (b * b).sum()).backward()
    opt.step()
    opt.load_state_dict(pytorch_like)
    fresh, kept = opt.state[0], opt.state[1]
    assert fresh["step"].item() == 0 and not fresh["exp_avg"].numpy().any()
    assert kept["step"].item() == 1
    np.testing.assert_array_equal(kept["exp_avg"].numpy(), entry["exp_avg"].numpy())
    with pytest.raises(ValueError, match="state for 3 parameters, this optimizer has 2"):
        opt.load_state_dict({"state": {0: {}, 1: {}, 2: {}}, "param_groups": saved["param_groups"]})


@pytest.mark.parametrize("backend", [None, "numba"])
def test_adam_steps_parameters_whose_step_counts_differ(backend):
    """A parameter without a gradient at some steps is not stepped, so its count lags: the
    group's bias corrections are then computed per count (a vector), else once for all; each
    parameter against its own NumPy Adam over the gradients it got."""
    rng = np.random.default_rng(5)
    starts = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    grads = [[rng.standard_normal(a.shape) for _ in range(4)] for a in starts]
    ps = [tg.tensor(a, requires_grad=True) for a in starts]
    opt = optim.Adam(ps, lr=0.05)

    def step(g0, g1):
        ps[0].grad, ps[1].grad = g0, g1
        opt.step()

    step = step if backend is None else tg.trace(step, backend=backend)
    got = [[], []]
    for k in range(4):
        second = k % 2 == 0  # the second parameter gets gradients at steps 0 and 2 only
        step(tg.tensor(grads[0][k]), tg.tensor(grads[1][k]) if second else None)
        got[0].append(grads[0][k])
        if second:
            got[1].append(grads[1][k])
    for p, start, gs in zip(ps, starts, got, strict=True):
        np.testing.assert_allclose(p.numpy(), np_adam(start, gs, lr=0.05), rtol=1e-10)
    assert [float(s["step"]) for s in opt.state] == [4.0, 2.0]
