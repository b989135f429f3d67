"""One training step per method, built from the same workload arrays.

`build(method, workload)` does the set-up (imports, parameters, data) and returns `step()`, which
runs forward, backward and the SGD update once and returns the loss before the update as a float.
Each method imports its framework only here, so a process that runs one method pays for no other.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
from workloads import GELU_K, LEARNING_RATE, Workload, init_params, make_batch, one_hot

Step = Callable[[], float]


def unavailable(method: str) -> str | None:
    """Why `method` cannot run here (a missing framework or feature), or None."""
    needs = {"torch": "torch", "jax": "jax"}.get(method)
    if needs and importlib.util.find_spec(needs) is None:
        return f"{needs} not installed"
    if method in ("tg-numpy", "tg-numba"):
        import tracegrad

        if not hasattr(tracegrad, "trace"):
            return "tracegrad.trace not available yet"
    return None


def build(method: str, w: Workload) -> Step:
    return BUILDERS[method](w)


# --- the GEMM floor -----------------------------------------------------------------------------


def build_gemm(w: Workload) -> Step:
    """Only the step's matrix products, into preallocated buffers: forward Y = X @ W, backward
    dW = X.T @ dY for every layer and dX = dY @ W.T for all but the first (its input is data)."""
    rng = np.random.default_rng(0)
    layers = []
    for fan_in, fan_out in w.layer_shapes:
        x = rng.standard_normal((w.batch, fan_in), dtype=np.float32)
        weight = rng.standard_normal((fan_in, fan_out), dtype=np.float32)
        y = np.empty((w.batch, fan_out), np.float32)
        layers.append((x, weight, y, np.empty_like(weight), np.empty_like(x)))

    def step() -> float:
        for x, weight, y, _, _ in layers:
            np.matmul(x, weight, out=y)
        for i, (x, weight, dy, dw, dx) in enumerate(reversed(layers)):
            np.matmul(x.T, dy, out=dw)
            if i < len(layers) - 1:
                np.matmul(dy, weight.T, out=dx)
        return float("nan")

    return step


# --- hand-written NumPy -------------------------------------------------------------------------


def _gelu_parts(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """tanh-GELU: returns (gelu(u), t) with t = tanh(k (u + c u^3)), kept for the backward."""
    t = u * u
    t *= 0.044715
    t += 1.0
    t *= u
    t *= GELU_K
    np.tanh(t, out=t)
    h = t + 1.0
    h *= u
    h *= 0.5
    return h, t


def _gelu_backward(dh: np.ndarray, u: np.ndarray, t: np.ndarray) -> np.ndarray:
    """d gelu / du = 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 c u^2), times dh."""
    inner = u * u
    inner *= 3 * 0.044715 * GELU_K
    inner += GELU_K
    inner *= u
    sech2 = t * t
    np.subtract(1.0, sech2, out=sech2)
    inner *= sech2
    inner += t
    inner += 1.0
    inner *= dh
    inner *= 0.5
    return inner


def build_numpy(w: Workload) -> Step:
    """A careful NumPy reference: saves each layer's input and pre-activation (plus tanh for
    GELU), updates each layer as soon as its gradient exists."""
    params = init_params(w)
    x, labels = make_batch(w)
    targets = one_hot(labels)
    lr = np.float32(LEARNING_RATE)

    def step() -> float:
        saved, h = [], x
        for weight, bias in params[:-1]:
            u = h @ weight
            u += bias
            if w.activation == "relu":
                saved.append((h, u, None))
                h = np.maximum(u, 0)
            else:
                nxt, t = _gelu_parts(u)
                saved.append((h, u, t))
                h = nxt
        weight, bias = params[-1]
        logits = h @ weight
        logits += bias
        logits -= logits.max(axis=1, keepdims=True)
        prob = np.exp(logits)
        total = prob.sum(axis=1, keepdims=True)
        loss = float(np.log(total).mean() - (logits * targets).sum() / w.batch)
        prob /= total
        prob -= targets
        prob /= w.batch
        dy = prob
        for i in reversed(range(len(params))):
            weight, bias = params[i]
            h_in = saved[i][0] if i < len(saved) else h
            dw, db = h_in.T @ dy, dy.sum(axis=0)
            if i > 0:
                dh = dy @ weight.T
                _, u, t = saved[i - 1]
                dy = np.where(u > 0, dh, 0) if t is None else _gelu_backward(dh, u, t)
            weight -= lr * dw
            bias -= lr * db
        return loss

    return step


# --- PyTorch and JAX ----------------------------------------------------------------------------


def _gelu(u, tanh):
    return 0.5 * u * (1 + tanh(GELU_K * (u + 0.044715 * u**3)))


def build_torch(w: Workload, wrap: Callable[[Callable], Callable] = lambda f: f) -> Step:
    """PyTorch eager on 2 threads, the same elementwise tanh-GELU; `wrap` takes the forward and
    loss (`torch.compile`, say), while the SGD update stays eager."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    params = [
        (torch.tensor(a).requires_grad_(), torch.tensor(b).requires_grad_())
        for a, b in init_params(w)
    ]
    flat = [p for pair in params for p in pair]
    x, labels = (torch.from_numpy(a) for a in make_batch(w))
    act = torch.relu if w.activation == "relu" else (lambda u: _gelu(u, torch.tanh))

    @wrap
    def forward(x, labels):
        h = x
        for weight, bias in params[:-1]:
            h = act(h @ weight + bias)
        return F.cross_entropy(h @ params[-1][0] + params[-1][1], labels)

    def step() -> float:
        loss = forward(x, labels)
        loss.backward()
        with torch.no_grad():
            for p in flat:
                p -= LEARNING_RATE * p.grad
                p.grad = None
        return loss.item()

    return step


def build_jax(w: Workload, remat: str | None = None, every: int = 1, scan: bool = False) -> Step:
    """`jax.jit` of the whole step (value_and_grad + SGD), parameters donated to the update.

    For memory_budget.py: `remat` names a `jax.checkpoint_policies` policy; each run of `every`
    hidden layers is then one `jax.checkpoint`, whose backward recomputes what the policy does
    not save. `scan` stacks the hidden layers and runs them as a `lax.scan` over the runs, each
    run a `lax.scan` over its layers (`every` must divide the depth): in the unrolled loop XLA
    schedules the recomputation early and so keeps most of what checkpointing would drop."""
    import jax
    import jax.numpy as jnp

    act = jax.nn.relu if w.activation == "relu" else (lambda u: _gelu(u, jnp.tanh))

    def layer(h, weight, bias):
        return act(h @ weight + bias)

    def hidden(h, run):  # a list of (W, b), or with `scan` (W, b) stacked along a first axis
        if scan:
            return jax.lax.scan(lambda h, wb: (layer(h, *wb), None), h, run)[0]
        for weight, bias in run:
            h = layer(h, weight, bias)
        return h

    if remat is not None:
        hidden = jax.checkpoint(hidden, policy=getattr(jax.checkpoint_policies, remat))

    def loss_fn(params, x, targets):
        if scan:  # params[0]: (W, b) of shape (runs, every, ...)
            h = jax.lax.scan(lambda h, run: (hidden(h, run), None), x, params[0])[0]
        else:
            h, depth = x, len(params) - 1
            for i in range(0, depth, every):
                h = hidden(h, params[i : min(i + every, depth)])
        logits = h @ params[-1][0] + params[-1][1]
        return -jnp.sum(targets * jax.nn.log_softmax(logits)) / x.shape[0]

    def train_step(params, x, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, targets)
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss

    train_step = jax.jit(train_step, donate_argnums=0)
    params = init_params(w)
    if scan:
        if w.depth % every:
            raise ValueError(f"scan: runs of {every} layers do not divide depth {w.depth}")
        runs = (w.depth // every, every)
        stacked = tuple(np.stack(arrays).reshape(runs + arrays[0].shape)
                        for arrays in zip(*params[:-1], strict=True))  # fmt: skip
        params = [stacked, params[-1]]
    state = {"params": [tuple(jnp.asarray(a) for a in pair) for pair in params]}
    x, labels = make_batch(w)
    x, targets = jnp.asarray(x), jnp.asarray(one_hot(labels))

    def step() -> float:
        state["params"], loss = train_step(state["params"], x, targets)
        return float(loss)

    return step


# --- tracegrad ----------------------------------------------------------------------------------


def _tracegrad_step(
    w: Workload, callbacks: list | None = None, momentum: float = 0.0
) -> tuple[Callable, tuple]:
    """The user's step in tracegrad's core API, and its tensor arguments (`callbacks` for the
    GradManager: distributed.py's all-reduce; `momentum` for SGD's)."""
    import tracegrad as tg

    params = [
        (tg.tensor(a, requires_grad=True), tg.tensor(b, requires_grad=True))
        for a, b in init_params(w)
    ]
    flat = [p for pair in params for p in pair]
    gm = tg.GradManager().attach(flat, callbacks=callbacks)
    opt = tg.optim.SGD(flat, lr=LEARNING_RATE, momentum=momentum)
    x, labels = make_batch(w)
    act = (
        (lambda u: tg.maximum(u, 0.0)) if w.activation == "relu" else (lambda u: _gelu(u, tg.tanh))
    )

    def train_step(x, targets):
        with gm:
            h = x
            for weight, bias in params[:-1]:
                h = act(h @ weight + bias)
            logits = h @ params[-1][0] + params[-1][1]
            loss = -(targets * tg.log_softmax(logits)).sum() / x.shape[0]
            gm.backward(loss)
        opt.step()  # p -= lr * p.grad, labelled as the step's update for the schedule
        opt.zero_grad()
        return loss

    return train_step, (tg.tensor(x), tg.tensor(one_hot(labels)))


def build_tg_eager(w: Workload) -> Step:
    train_step, args = _tracegrad_step(w)
    return lambda: train_step(*args).item()


def _build_traced(backend: str) -> Callable[[Workload], Step]:
    def build_traced(w: Workload) -> Step:
        import tracegrad as tg

        train_step, args = _tracegrad_step(w)
        traced = tg.trace(backend=backend)(train_step)

        def step() -> float:
            return traced(*args).item()

        # what the plan keeps between steps (its arena), for memory.py to count with the step
        step.held_bytes = lambda: traced.latest.run.arena.buffer.nbytes
        step.traced = traced  # for report.py
        step.wait_for_kernels = traced.wait_for_kernels
        return step

    return build_traced


BUILDERS: dict[str, Callable[[Workload], Step]] = {
    "gemm": build_gemm,
    "numpy": build_numpy,
    "torch": build_torch,
    "jax": build_jax,
    "tg-eager": build_tg_eager,
    "tg-numpy": _build_traced("numpy"),
    "tg-numba": _build_traced("numba"),
}
