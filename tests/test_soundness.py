"""A traced step does what the eager step does, or refuses: each case here once diverged from
eager or crashed under @trace. Every test runs the same function eagerly and traced, on both
backends, and compares."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import tracegrad as tg
from tracegrad.compiler import lowering

BACKENDS = ["numpy", "numba"]


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)  # kernels even for tiny groups
    return request.param


def test_in_place_writes_go_to_each_calls_argument(backend):
    @tg.trace(backend=backend)
    def update(p, g):
        with tg.no_grad():
            p -= 0.5 * g

    a, b, g = tg.tensor([1.0, 2.0]), tg.tensor([1.0, 2.0]), tg.tensor([2.0, 2.0])
    update(a, g)
    update(b, g)
    update(b, g)
    np.testing.assert_allclose(a.numpy(), [0.0, 1.0])
    np.testing.assert_allclose(b.numpy(), [-1.0, 0.0])
    arr = np.array([1.0, 2.0], np.float32)  # an ndarray argument is written in place too
    update(arr, g)
    np.testing.assert_allclose(arr, [0.0, 1.0])


def test_gradients_go_to_each_calls_argument(backend):
    """Input gradients (adversarial examples): a GradManager attached to an argument."""
    w = tg.tensor([[1.0, -2.0], [0.5, 3.0]])

    def input_grad(x):
        gm = tg.GradManager().attach(x)
        with gm:
            gm.backward((tg.tanh(x @ w) ** 2).sum())
        return x.grad

    traced = tg.trace(input_grad, backend=backend)
    for data in ([[0.1, 0.2]], [[-1.0, 0.5]], [[2.0, 1.0]]):
        x_eager, x_traced = tg.tensor(data), tg.tensor(data)
        want = input_grad(x_eager).numpy()
        got = traced(x_traced)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)  # float32 kernels' tanh
        np.testing.assert_allclose(x_traced.grad.numpy(), want, rtol=1e-5)

    def backward_into(x):
        (x * x).sum().backward()

    traced = tg.trace(backward_into, backend=backend)
    a, b = tg.tensor([1.0, 2.0], requires_grad=True), tg.tensor([3.0, 4.0], requires_grad=True)
    traced(a)
    traced(b)
    traced(b)  # accumulates: b.grad is no longer None, a new signature
    np.testing.assert_allclose(a.grad.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(b.grad.numpy(), [12.0, 16.0])


def test_a_concrete_value_assigned_to_state_is_stored(backend):
    opt_w = tg.tensor([1.0, 1.0])
    gm = tg.GradManager().attach(opt_w)
    opt = tg.optim.SGD([opt_w], lr=0.1)

    @tg.trace(backend=backend)
    def step(lr):
        opt.lr = lr  # inside the step
        with gm:
            gm.backward((opt_w * opt_w).sum())
        opt.step()
        opt.zero_grad()

    step(0.5)
    np.testing.assert_allclose(opt_w.numpy(), [0.0, 0.0])
    assert opt.lr == 0.5 and opt.lr_for(opt_w).item() == 0.5
    opt_w._assign(tg.tensor([1.0, 1.0]))
    step(0.25)  # another lr: the step reads it
    np.testing.assert_allclose(opt_w.numpy(), [0.5, 0.5])


def test_load_state_dict_inside_a_step_copies_the_weights(backend):
    tg.nn.manual_seed(0)
    net, target = tg.nn.Linear(3, 2), tg.nn.Linear(3, 2)

    @tg.trace(backend=backend)
    def sync():
        target.load_state_dict(net.state_dict())

    sync()
    np.testing.assert_array_equal(target.weight.numpy(), net.weight.numpy())
    with tg.no_grad():
        net.weight += 1.0
    sync()
    np.testing.assert_array_equal(target.weight.numpy(), net.weight.numpy())


def test_swapping_two_state_tensors(backend):
    s1, s2 = tg.tensor([1.0]), tg.tensor([2.0])

    @tg.trace(backend=backend)
    def swap():
        old = s1 * 1.0
        s1._assign(s2)
        s2._assign(old)

    swap()
    assert (s1.item(), s2.item()) == (2.0, 1.0)
    swap()
    assert (s1.item(), s2.item()) == (1.0, 2.0)


def test_write_back_does_not_alias(backend):
    p, prev = tg.tensor([1.0]), tg.tensor([0.0])

    @tg.trace(backend=backend)
    def ema():
        prev._assign(p * 1.0)  # simplify turns this into p itself
        p._assign(p + 1.0)

    ema()
    assert (prev.item(), p.item()) == (1.0, 2.0)
    ema()
    assert (prev.item(), p.item()) == (2.0, 3.0)


def test_integer_true_division_gives_floats(backend):
    t = tg.tensor(np.array([1, 2, 1, 3]))
    f = lambda t: ((t == 1).sum() / 4, t / 2)
    for got, want in zip(tg.trace(f, backend=backend)(t), f(t), strict=True):
        assert got.dtype == want.dtype == np.float32  # the default float, as PyTorch's
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert f(t)[0].item() == 0.5 and list(f(t)[1].numpy()) == [0.5, 1.0, 0.5, 1.5]


@pytest.mark.parametrize(
    "fn, data",
    [
        # a 0-d operand of the same category does not widen (PyTorch's): uint8 wraps to 144
        (lambda x: x * np.int64(2), np.array([200], np.uint8)),
        # np.float64 is a Python float, weak as one: float32, 16777216
        (lambda x: x * np.float64(16777217), np.array([1.0], np.float32)),
        (lambda x: x + 2, np.array([250], np.uint8)),  # a Python int stays weak: wraps to 252
        (lambda x: x * 0.1, np.array([3.0], np.float32)),  # a Python float too: float32
        # a float32 constant meeting float64 keeps its float32 value (0.10000000149...)
        (lambda x: x * np.float32(0.1), np.array([3.0], np.float64)),
        (lambda x: x + np.float32(1 / 3), np.array([1.0], np.float64)),
        (lambda x: x * tg.tensor(np.float32(0.1)).item(), np.array([3.0], np.float64)),
        (lambda x: x * np.float16(0.1), np.array([3.0], np.float64)),
    ],
)
def test_numpy_scalars_keep_their_dtype(backend, fn, data):
    want = fn(tg.tensor(data))
    got = tg.trace(fn, backend=backend)(tg.tensor(data))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_non_finite_constants_and_constant_results(backend):
    f = lambda x: (tg.where(x > 0, x, float("-inf")), tg.where(x > 0, float("nan"), x))
    x = tg.tensor([1.0, -1.0])
    for got, want in zip(tg.trace(f, backend=backend)(x), f(x), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for make in (lambda x: tg.tensor(0.0), lambda x: tg.tensor(3), lambda x: tg.tensor([1, 2])):
        got = tg.trace(make, backend=backend)(x)
        np.testing.assert_array_equal(got.numpy(), make(x).numpy())
        assert got.dtype == make(x).dtype


@pytest.mark.parametrize("view", [lambda y: y.T, lambda y: y[::-1]], ids=["transposed", "reversed"])
def test_a_result_is_never_written_into_a_strided_view(backend, view):
    """The view dies where the product reads it; its buffer is not the product's layout."""
    x = tg.tensor(np.random.default_rng(0).random((300, 300)).astype(np.float32))
    f = lambda x: view(tg.exp(x * 2.0)) * 3.0 + 1.0
    np.testing.assert_allclose(tg.trace(f, backend=backend)(x).numpy(), f(x).numpy(), rtol=1e-5)


def test_sigmoid_keeps_small_values_and_logsumexp_of_minus_inf_rows(backend):
    def f(x, rows):
        return tg.log(tg.sigmoid(x)), tg.logsumexp(rows, axis=1)

    x = tg.tensor([-20.0, -5.0, 0.0, 30.0])
    rows = tg.tensor([[-np.inf, -np.inf], [0.0, -np.inf], [np.inf, 1.0]])
    for got, want in zip(tg.trace(f, backend=backend)(x, rows), f(x, rows), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    log_sig, lse = f(x, rows)
    np.testing.assert_allclose(log_sig.numpy()[:2], [-20.0, -5.0067153], rtol=1e-6)  # PyTorch
    np.testing.assert_array_equal(lse.numpy(), [-np.inf, 0.0, np.inf])
    x = tg.tensor([-20.0], requires_grad=True)
    tg.log(tg.sigmoid(x)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0])  # was NaN: log(0) then 0 * inf


@pytest.mark.parametrize("bad, found", [(-1, -1), (3, 3)])
def test_label_checks_run_in_the_plan_and_nothing_is_lost(backend, bad, found):
    tg.nn.manual_seed(0)
    model = tg.nn.Linear(4, 3)
    gm = tg.GradManager().attach(model.parameters())
    opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    @tg.trace(backend=backend)
    def step(x, y):
        with gm:
            loss = tg.nn.functional.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step()
        opt.zero_grad()
        return loss

    x = np.ones((5, 4), np.float32)
    step(x, np.array([0, 1, 2, 0, 1]))
    before = [p.numpy().copy() for p in model.parameters()]
    state = [t.numpy().copy() for s in opt.state for t in s.values()]
    labels = np.array([0, 1, bad, 0, 1])
    message = rf"labels must lie in \[0, 3\), found {found} \(at test_soundness.py:\d+\)"
    with pytest.raises(ValueError, match=message):
        step(x, labels)
    with pytest.raises(ValueError, match=message):  # eager says the same
        tg.nn.functional.cross_entropy(model(x), labels)
    for p, b in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), b)
    for t, b in zip((t for s in opt.state for t in s.values()), state, strict=True):
        np.testing.assert_array_equal(t.numpy(), b)


def test_an_error_inside_a_plan_names_the_users_line(backend):
    @tg.trace(backend=backend)
    def pick(x, i):
        return tg.exp(x)[i]  # the line the error must name

    pick(tg.tensor([1.0, 2.0]), np.array([1]))
    with pytest.raises(IndexError) as info:
        pick(tg.tensor([1.0, 2.0]), np.array([5]))
    notes = "\n".join(getattr(info.value, "__notes__", []))
    line = pick.__wrapped__.__code__.co_firstlineno + 2
    assert f"raised by the traced step at test_soundness.py:{line} (plan line" in notes


SCALE = 2.0


def test_a_global_number_the_step_reads_is_guarded_and_named_when_it_changes(backend):
    global SCALE
    f = lambda x: x * SCALE
    traced = tg.trace(f, backend=backend)
    x = tg.tensor([1.0, 2.0])
    np.testing.assert_array_equal(traced(x).numpy(), [2.0, 4.0])
    SCALE = 3.0
    try:
        with pytest.warns(UserWarning, match="traced again because global `SCALE` changed"):
            np.testing.assert_array_equal(traced(x).numpy(), [3.0, 6.0])
    finally:
        SCALE = 2.0
    np.testing.assert_array_equal(traced(x).numpy(), [2.0, 4.0])  # the first plan again


step = 0  # a loop counter named like the optimizer's method, as in the README's tour


def test_an_attribute_named_like_a_global_number_is_not_a_guard(backend):
    """`opt.step()` reads the attribute `step`, not the global: a training loop's counter
    `step` changing must not trace again (it did, every step of the README's tour)."""
    global step
    w = tg.tensor([1.0, 2.0], requires_grad=True)
    gm, opt = tg.GradManager().attach([w]), tg.optim.SGD([w], lr=0.1)

    def train_step(x):
        with gm:
            gm.backward((w * x).sum())
        opt.step()
        opt.zero_grad()

    traced = tg.trace(train_step, backend=backend)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for step in range(3):  # noqa: B007 (the global the step must not watch)
                traced(tg.tensor([1.0, 1.0]))
    finally:
        step = 0
    assert sum(len(p) for p in traced.plans.values()) == 1
    np.testing.assert_allclose(w.numpy(), [0.7, 1.7], rtol=1e-6)


def test_a_closure_number_is_guarded(backend):
    def make():
        k = 1.0

        def step(x):
            return x * k

        def bump():
            nonlocal k
            k += 1.0

        return step, bump

    step, bump = make()
    traced = tg.trace(step, backend=backend)
    x = tg.tensor([1.0])
    assert traced(x).item() == 1.0
    bump()
    with pytest.warns(UserWarning, match="`k` \\(from an enclosing function\\) changed"):
        assert traced(x).item() == 2.0


def test_a_float_argument_that_varies_becomes_an_input_not_a_retrace(backend):
    """The first value is baked in; a second makes it an input of the plan, promoted as a
    Python float (weakly: float32 data stays float32); later values reuse that plan."""

    def f(x, scale):
        return x * scale + scale * 2.0  # Python arithmetic on the float, then with the tensor

    traced = tg.trace(f, backend=backend)
    x = tg.tensor([1.0, 2.0])
    for scale in (0.5, 0.25, 3.0, 1e-3):
        got, want = traced(x, scale), f(x, scale)
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert sum(len(p) for p in traced.plans.values()) == 2  # 0.5 baked in, then one for all


def test_a_varying_float_used_as_a_python_number_is_baked_in_with_a_warning(backend):
    def f(x, t):
        return x * 2.0 if t > 1.0 else x

    traced = tg.trace(f, backend=backend)
    x = tg.tensor([1.0])
    assert traced(x, 0.5).item() == 1.0
    with pytest.warns(UserWarning, match="used as a Python number"):
        assert traced(x, 2.0).item() == 2.0
    assert traced(x, 0.5).item() == 1.0 and traced(x, 3.0).item() == 2.0


# --- threads and resources ---------------------------------------------------------------------


def test_grad_manager_recording_is_per_thread():
    """Thread A records with gm_a; thread B's backward meanwhile must not become a recorded,
    higher-order one that keeps its saved values (it did while recording was process-wide)."""
    import threading

    gm_a = tg.GradManager().attach(tg.tensor([1.0]))
    inside, done = threading.Event(), threading.Event()

    def thread_a():
        with gm_a:
            inside.set()
            done.wait(5)

    a = threading.Thread(target=thread_a)
    a.start()
    inside.wait(5)
    w = tg.tensor([2.0])
    gm_b = tg.GradManager().attach(w)
    with gm_b:
        y = (w * w).sum()
        gm_b.backward(y)
    done.set()
    a.join()
    assert w.grad.item() == 4.0 and w.grad.grad_fn is None  # a plain gradient, no graph
    assert y.grad_fn.freed  # its saved values were released (a recorded backward keeps them)


def test_save_never_changes_the_process_umask(tmp_path, monkeypatch):
    import os

    expected = 0o666 & ~(os.umask(0o022) or 0o022)
    os.umask(0o022)

    def forbidden(mask):
        raise AssertionError("save() must not set the umask: other threads' files see it")

    monkeypatch.setattr(os, "umask", forbidden)
    tg.save({"x": tg.tensor([1.0])}, tmp_path / "ckpt.pt")
    assert (tmp_path / "ckpt.pt").stat().st_mode & 0o777 == expected


def test_a_plans_source_leaves_linecache_with_the_plan():
    import gc
    import linecache

    traced = tg.trace(lambda x: x * 2.0, backend="numpy")
    traced(tg.tensor([1.0]))
    names = [k for k in linecache.cache if k.startswith("<tracegrad plan")]
    mine = max(names, key=lambda k: int(k.split()[2].rstrip(":")))
    del traced
    gc.collect()
    assert mine not in linecache.cache


def test_a_gradient_summed_over_an_empty_batch_is_zero(backend):
    """Found by the differential suite: a (2,) operand broadcast over a (0, 0, 2) batch; its
    gradient is a sum over no elements, which a kernel never wrote (arena garbage)."""

    def f(a, b):
        gm = tg.GradManager().attach([a, b])
        with gm:
            gm.backward((a * b).sum())
        return a.grad, b.grad

    a, b = np.ones(2, np.float32), np.ones((0, 1), np.float32)
    want = f(tg.tensor(a), tg.tensor(b))
    for got, expected in zip(tg.trace(f, backend=backend)(a, b), want, strict=True):
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_the_gradient_of_a_max_over_a_recomputed_input_is_finite(backend):
    """Found by the differential suite: remat rebuilt max's input in backward, where a kernel's
    float32 math differs in the last bits from the forward's, and the VJP compared it with the
    forward maximum: no element matched, 0 / 0. The VJP now takes the maximum of what it sees,
    and CSE keeps backward reductions apart from forward ones."""

    def f(x):
        gm = tg.GradManager().attach(x)
        with gm:
            y = tg.amax((tg.tanh(x) * tg.tanh(x) + 0.5) ** 1.5, dim=-1, keepdim=True)
            gm.backward(y.sum())
        return x.grad

    x = np.random.default_rng(0).standard_normal((64, 2, 3)).astype(np.float32)
    got, want = tg.trace(f, backend=backend)(x.copy()), f(tg.tensor(x))
    assert np.isfinite(got.numpy()).all()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("how", ["backward", "grad_manager"])
def test_gradients_accumulate_into_the_grad_of_each_call(backend, set_to_none, how):
    """zero_grad() between traced calls makes a new `.grad` (or none): the plan accumulates into
    the gradient the parameter holds at each call, not the one it held when traced."""

    def run(traced):
        p = tg.tensor(np.zeros(2), requires_grad=how == "backward")
        gm = tg.GradManager().attach(p)
        opt = tg.optim.SGD([p], lr=0.1)

        def accumulate(x):
            if how == "backward":
                (p * x).sum().backward()
            else:
                with gm:
                    gm.backward((p * x).sum())

        f = tg.trace(accumulate, backend=backend) if traced else accumulate
        seen = []
        for _ in range(3):
            f(tg.tensor([1.0, 2.0]))
            f(tg.tensor([1.0, 2.0]))
            seen.append(p.grad.numpy().copy())
            opt.step()
            opt.zero_grad(set_to_none=set_to_none)
        return np.array(seen), p.numpy()

    want, got = run(False), run(True)
    np.testing.assert_array_equal(want[0], [[2.0, 4.0]] * 3)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_random_numbers_in_a_traced_step_are_drawn_afresh_as_eager_draws_them(backend):
    """randn/rand/randint/randperm/*_like inside a step read the random state at every call."""
    gen = tg.Generator()

    def draws(x):
        return (
            x + tg.randn_like(x), tg.rand(3), tg.randint(0, 10, (4,)), tg.randperm(5),
            tg.randn(2, dtype=np.float64), tg.rand_like(x), tg.randint_like(x, 3, 9),
            tg.randn(2, generator=gen), x.clone().normal_(), x.clone().uniform_(-1, 1),
        )  # fmt: skip

    def run(f):
        tg.manual_seed(3)
        gen.manual_seed(5)
        return [[a.numpy() for a in f(tg.ones(3))] for _ in range(3)]

    want, got = run(draws), run(tg.trace(draws, backend=backend))
    for w, g in zip(want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(b, a)
    for i in range(len(want[0])):
        assert not np.array_equal(got[0][i], got[1][i])  # fresh numbers at every call


def test_a_vae_reparameterization_trains_on_fresh_noise(backend):
    """eps = randn_like(std): traced training follows eager training draw for draw."""

    def train(traced):
        tg.manual_seed(0)
        enc, dec = tg.nn.Linear(4, 4), tg.nn.Linear(2, 4)
        params = list(enc.parameters()) + list(dec.parameters())
        opt = tg.optim.SGD(params, lr=0.1)

        def step(x):
            mu, logvar = enc(x).chunk(2, dim=-1)
            std = tg.exp(0.5 * logvar)
            z = mu + std * tg.randn_like(std)
            loss = ((dec(z) - x) ** 2).mean() - 0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        f = tg.trace(step, backend=backend) if traced else step
        x = tg.tensor(np.linspace(-1, 1, 24).reshape(6, 4).astype(np.float32))
        losses = [f(x).item() for _ in range(5)]
        return losses, [p.numpy() for p in params]

    (want, want_p), (got, got_p) = train(False), train(True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(want_p, got_p, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["data", "detach", "detach then -="])
def test_a_manual_update_through_data_or_detach_updates_the_parameter(backend, how):
    """word_language_model's SGD: `p.data.add_(p.grad, alpha=-lr)`; the same through
    `p.detach()`, whose in-place writes reach p as PyTorch's shared storage does."""

    def run(traced):
        p = tg.tensor(np.array([1.0, 2.0]), requires_grad=True)

        def step(x):
            p.grad = None
            (p * x).sum().backward()
            if how == "data":
                p.data.add_(p.grad, alpha=-0.1)
            elif how == "detach":
                p.detach().add_(p.grad, alpha=-0.1)
            else:
                d = p.detach()
                d -= 0.1 * p.grad

        f = tg.trace(step, backend=backend) if traced else step
        for _ in range(3):
            f(tg.tensor([1.0, 3.0]))
        return p.numpy()

    want = run(False)
    np.testing.assert_allclose(want, [0.7, 1.1])
    np.testing.assert_allclose(run(True), want, rtol=1e-12)


@pytest.mark.parametrize("layer", ["linear", "conv", "matmul"])
def test_a_float64_batch_into_a_float32_model_raises_as_in_pytorch(backend, layer):
    """Not a whole step silently promoted to float64: the op, both dtypes and the user's line."""
    tg.manual_seed(0)
    if layer == "linear":
        model, x = tg.nn.Linear(3, 2), np.ones((2, 3))
    elif layer == "conv":
        model, x = tg.nn.Conv2d(1, 2, 2), np.ones((1, 1, 3, 3))
    else:
        w = tg.tensor(np.ones((3, 2), np.float32))
        model, x = (lambda x: x @ w), np.ones((2, 3))

    def step(x):
        return model(x).sum()  # the line named

    code = model.__code__ if layer == "matmul" else step.__code__  # the innermost user line
    line = f"test_soundness.py:{code.co_firstlineno + (layer != 'matmul')}"
    for f in (step, tg.trace(step, backend=backend)):
        with pytest.raises(ValueError, match=f"float64, float32.*PyTorch.*{line}"):
            f(tg.tensor(x))
    assert step(tg.tensor(x.astype(np.float32))).dtype == np.float32
    # NumPy's namespace keeps NumPy's promotion
    assert tg.numpy.matmul(np.ones((2, 3)), np.ones((3, 2), np.float32)).dtype == np.float64


def test_one_traced_step_called_from_two_threads_runs_its_calls_one_at_a_time(backend):
    """Calls of one traced step are serialized: each reads the state the previous one wrote, so
    the result is that of some serial order (here every order gives the same)."""
    import threading

    def train(threads: int, calls: int) -> np.ndarray:
        tg.manual_seed(0)
        model = tg.nn.Sequential(tg.nn.Linear(64, 64), tg.nn.Tanh(), tg.nn.Linear(64, 1))
        opt = tg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = tg.tensor(np.linspace(-1, 1, 256 * 64).reshape(256, 64).astype(np.float32))

        @tg.trace(backend=backend)
        def step(x):
            opt.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            opt.step()
            return loss

        step(x)  # traced here, once
        start = threading.Barrier(threads)

        def work():
            start.wait()
            for _ in range(calls):
                step(x)

        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return np.concatenate([p.numpy().ravel() for p in model.parameters()])

    np.testing.assert_array_equal(train(2, 40), train(1, 80))


def test_an_elementwise_result_written_over_a_transposed_numpy_result(backend):
    """NumPy's x[..., index] comes back with a transposed layout; a fused kernel whose output
    reuses that dying buffer raised ("outputs must be C-contiguous"); it computes apart and
    copies in instead."""
    index = tg.tensor([1, 0, 2])

    def f(x, y):
        return x[..., index] * y + 1.0

    x, y = tg.tensor(np.arange(12.0).reshape(4, 3)), tg.tensor(np.full((4, 3), 2.0))
    np.testing.assert_array_equal(tg.trace(f, backend=backend)(x, y).numpy(), f(x, y).numpy())


def _mlp(n_in, n_out, seed):
    tg.nn.manual_seed(seed)
    return tg.nn.Sequential(tg.nn.Linear(n_in, 8), tg.nn.Tanh(), tg.nn.Linear(8, n_out)).double()


def _two_step_case(case):
    """(modules, optimizers, step): a step that calls one optimizer's `step()` twice. "sgd": a
    k-updates inner loop on one batch, SGD with momentum; "adam": Adam on two batches, a forward
    and backward over the updated weights between the steps; "actor_critic": SAC's critic
    update, the actor's through the updated critic, the critic's again."""
    F = tg.nn.functional
    if case == "actor_critic":
        actor, critic = _mlp(3, 2, 0), _mlp(5, 1, 1)
        actor_opt = tg.optim.SGD(actor.parameters(), lr=0.05, momentum=0.9)
        critic_opt = tg.optim.Adam(critic.parameters(), lr=0.01)

        def critic_update(s, a, r):
            critic_opt.zero_grad()
            loss = F.mse_loss(critic(tg.cat([s, a], 1)), r)
            loss.backward()
            critic_opt.step()
            return loss

        def step(s, a, r):
            first = critic_update(s, a, r)
            actor_opt.zero_grad()
            actor_loss = -critic(tg.cat([s, tg.tanh(actor(s))], 1)).mean()
            actor_loss.backward()  # also into the critic's grads, which the next update zeroes
            actor_opt.step()
            return tg.stack([first, actor_loss, critic_update(s, a, r)])

        return [actor, critic], [actor_opt, critic_opt], step
    model = _mlp(3, 2, 0)
    if case == "sgd":
        opt = tg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(s, a, r):
            losses = []
            for _ in range(2):
                opt.zero_grad()
                losses.append(F.mse_loss(model(s), a))
                losses[-1].backward()
                opt.step()
            return tg.stack(losses)

        return [model], [opt], step
    opt = tg.optim.Adam(model.parameters(), lr=0.01)

    def step(s, a, r):
        first = F.mse_loss(model(s), a)
        first.backward()
        opt.step()
        opt.zero_grad()
        second = F.mse_loss(model(s * 2.0), a - 1.0)  # another batch, on the new weights
        second.backward()
        opt.step()
        opt.zero_grad()
        return tg.stack([first, second])

    return [model], [opt], step


def _state_of(modules, optimizers):
    return [t.numpy().copy() for t in [
        *(p for m in modules for p in m.parameters()),
        *(t for opt in optimizers for state in opt.state for t in state.values()),
    ]]  # fmt: skip


@pytest.mark.parametrize("case", ["sgd", "adam", "actor_critic"])
def test_a_step_may_call_an_optimizers_step_twice(backend, case):
    """The second `step()` reads the weights the first wrote, through a second backward: the
    schedule kept both updates of a parameter in one piece, which waited for its own result
    (the plan lost nodes)."""
    rng = np.random.default_rng(0)
    batches = [[tg.tensor(rng.standard_normal(shape)) for shape in ((4, 3), (4, 2), (4, 1))]
               for _ in range(3)]  # fmt: skip
    eager, traced = _two_step_case(case), _two_step_case(case)
    step = tg.trace(traced[2], backend=backend)
    for batch in batches:
        np.testing.assert_allclose(step(*batch).numpy(), eager[2](*batch).numpy(), rtol=1e-12)
    want, got = _state_of(*eager[:2]), _state_of(*traced[:2])
    assert len(got) == len(want) >= 8
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
