"""Plans: a traced step that fails anywhere leaves every piece of state as it was."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import tracegrad as tg
from tracegrad import nn, optim
from tracegrad.compiler import lowering
from tracegrad.compiler.codegen import compile_source, generate
from tracegrad.frontend import random
from tracegrad.runtime.commit import enter_commit


class Fault(Exception):
    """Raised by a statement injected into a plan."""


def _model():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Dropout(0.25),
                          nn.Linear(8, 3))  # fmt: skip
    opt = optim.Adam(model.parameters(), lr=0.01)
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    return model, opt, sched


def _state(model, opt, sched) -> list[np.ndarray]:
    """Every array a step may change: parameters and their gradients, the optimizer's state and
    hyperparameter tensors, the batch-norm statistics, the random state, the schedule's count."""
    tensors = [*model.parameters(), *(p.grad for p in model.parameters() if p.grad is not None),
               *model.buffers(), random.default_state, sched._epoch]  # fmt: skip
    tensors += [t for state in opt.state for t in state.values()]
    tensors += [t for group in opt.param_groups for ts in group.held.values() for t in ts]
    return [t.numpy().copy() for t in tensors]


def _loss(logits, y, k):
    loss = nn.functional.cross_entropy(logits, y)
    return loss + logits.gather(1, logits.argmax(1, keepdim=True)).mean() if k else loss


class Injector:
    """The plan's source with a call `_fault(k)` after the k-th node's statement (the lines that
    carry a node's comment), compiled once in the namespace the plan's own source runs in;
    `arm(k, error)` makes that call raise `error`."""

    def __init__(self, plan):
        source, namespace = generate(plan.graph, plan.name, plan.memory, plan.kernels)
        assert source == plan.source
        lines, self.statements, self.commit = [], 0, None
        for line in source.splitlines():
            lines.append(line)
            if line.startswith("    _commit()"):
                self.commit = self.statements  # statements from here on come after it
            elif line.startswith("    ") and "  # " in line and "return (" not in line:
                lines.append(f"    _fault({self.statements})")
                self.statements += 1
        namespace["_fault"], namespace["_commit"] = self._fault, enter_commit  # as plan.py does
        self.run = compile_source("\n".join(lines) + "\n", namespace, plan.name)
        self.armed: tuple[int, BaseException] | None = None

    def arm(self, k: int, error: BaseException) -> None:
        self.armed = (k, error)

    def _fault(self, k: int) -> None:
        if self.armed is not None and self.armed[0] == k:
            if isinstance(self.armed[1], KeyboardInterrupt):  # a real Ctrl-C, as a user sends
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.01)  # Python runs the handler at its next instruction
                return
            raise self.armed[1]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("calls", [1, 2])
def test_a_step_failing_at_any_statement_of_its_plan_changes_nothing(backend, calls, monkeypatch):
    """Also a step that calls `step()` twice, whose second loss gathers the logits of the
    updated weights at their argmax (DQN's greedy action): an index op that may fail after the
    first update, which then writes new buffers until the commit point."""
    monkeypatch.setattr(lowering, "KERNEL_MIN", 0)
    model, opt, sched = _model()
    rng = np.random.default_rng(1)
    x = tg.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    y = tg.tensor(rng.integers(0, 3, 5))

    @tg.trace(backend=backend)
    def step(x, y):
        for k in range(calls):
            loss = _loss(model(x), y, k)
            loss.backward()  # accumulates into the gradients of the call before
            opt.step()
        sched.step()
        return loss

    step(x, y)
    step(x, y)  # the gradients exist now: the plan reads and writes them
    step.wait_for_kernels()
    plan = step.latest
    assert backend == "numpy" or plan.kernels
    good, injector = plan.run.run, Injector(plan)
    assert 30 * calls <= injector.statements <= 400 * calls
    plan.run.run = injector.run
    commit = injector.statements if injector.commit is None else injector.commit
    updates = [i for i, n in enumerate(plan.graph.nodes) if n.phase is tg.Phase.UPDATE]
    assert (updates[0] < plan.memory.commit) == (calls == 2)
    completed = 2  # calls that ran to their end
    assert 0 < commit <= injector.statements
    try:
        for k in range(injector.statements):
            # nothing after the commit point can raise (passes/commit.py), so an exception is
            # injected only before it; a Ctrl-C after it is deferred: the step ends, then raises
            for error in (Fault(k), KeyboardInterrupt()) if k < commit else (KeyboardInterrupt(),):
                before, epoch = _state(model, opt, sched), sched.last_epoch
                injector.arm(k, error)
                with pytest.raises(type(error)):
                    step(x, y)
                after = _state(model, opt, sched)
                if k >= commit:  # the step completed: its update and schedule were written
                    assert sched.last_epoch == epoch + 1, k
                    pairs = zip(before, after, strict=True)
                    assert any(a.tobytes() != b.tobytes() for a, b in pairs), k
                    completed += 1
                    continue
                for i, (a, b) in enumerate(zip(before, after, strict=True)):
                    assert a.tobytes() == b.tobytes(), (k, i)
                assert sched.last_epoch == epoch
    finally:
        plan.run.run = good
    assert step.latest is plan  # every failing call ran this plan
    # and the step still runs as eagerly: the same calls without the trace
    losses = [step(x, y).item() for _ in range(2)]
    model2, opt2, sched2 = _model()

    def eager(x, y):
        for k in range(calls):
            loss = _loss(model2(x), y, k)
            loss.backward()
            opt2.step()
        sched2.step()
        return loss

    # _model() seeded the same; the interrupted calls after the commit point were whole steps
    want = [eager(x, y).item() for _ in range(completed + 2)][completed:]
    np.testing.assert_allclose(losses, want, rtol=1e-5)


def test_writable_copies_a_written_input_that_shares_memory_with_another():
    from tracegrad.core.ir import Value
    from tracegrad.runtime.plan import writable

    base, foreign = np.zeros(10), np.frombuffer(bytearray(80), np.float64)
    separate = [np.zeros(4), np.zeros(4), np.zeros(4)]
    types = [Value((4,), np.float64) for _ in range(3)]
    for inputs, copied in [
        (separate, []),
        ([base[:4], base[3:7], np.zeros(4)], [0]),  # views of one array that overlap
        ([base[:4], base[4:8], np.zeros(4)], []),  # views of one array that do not
        # two arrays over one buffer NumPy did not allocate
        ([foreign[:4], foreign[3:7], base[:4]], [0]),
    ]:  # fmt: skip
        given = list(inputs)
        writable(given, [0, 2], types)
        assert [k for k in (0, 2) if given[k] is not inputs[k]] == copied
        for a, b in zip(given, inputs, strict=True):
            np.testing.assert_array_equal(a, b)


def test_writable_leaves_inputs_alone_when_nothing_is_written_in_place():
    from tracegrad.core.ir import Value
    from tracegrad.runtime.plan import writable

    base = np.zeros(10)
    inputs = [base[:4], base[3:7]]
    writable(inputs, [], [Value((4,), np.float64)] * 2)
    assert inputs[0].base is base and inputs[1].base is base


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_results_are_made_outside_the_arena_and_handed_over_uncopied(backend):
    """A plan's results are the caller's: made in buffers of their own, so the next plan,
    which reuses the shared arena, cannot overwrite them, and nothing copies them out."""
    w = tg.tensor(np.random.default_rng(0).standard_normal((64, 64)))
    step = tg.trace(lambda x: (tg.tanh(x @ w), (x @ w).reshape(-1)), backend=backend)
    x = tg.ones(32, 64, dtype=tg.float64)
    a, b = step(x)
    step.wait_for_kernels()
    a, b = step(x)
    arena = tg.runtime.arena.shared_arena().buffer
    assert step.latest.memory.own_buffers == {0, 1}
    assert not np.shares_memory(a.numpy(), arena) and not np.shares_memory(b.numpy(), arena)
    other = tg.trace(lambda x: x * 3.0 + 1.0, backend=backend)
    other(tg.ones(32, 64, dtype=tg.float64))  # reuses the arena
    np.testing.assert_allclose(a.numpy(), np.tanh(np.ones((32, 64)) @ w.numpy()))
    np.testing.assert_allclose(b.numpy(), (np.ones((32, 64)) @ w.numpy()).reshape(-1))
