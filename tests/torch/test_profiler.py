"""`torch.profiler` over tracegrad's eager ops: what a profile records (ops, labelled ranges,
compiled calls), the self times of nested ranges, schedules, and the traces it writes."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.frontend.tensor import PROFILERS
from tracegrad.torch.profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def test_a_profile_records_each_op_and_labelled_range_with_self_times():
    model, x = _model(), torch.randn(4, 6)
    expected = model(x).numpy()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("forward"):
            out = model(x)
    np.testing.assert_array_equal(out.numpy(), expected)  # profiling changes nothing
    assert not PROFILERS  # and costs nothing once it ends
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["linear"].count == 2 and averages["tanh"].count == 1
    outer = averages["forward"]
    inner = sum(a.cpu_time_total for k, a in averages.items() if k != "forward")
    assert outer.cpu_time_total >= inner > 0
    assert outer.self_cpu_time_total == pytest.approx(outer.cpu_time_total - inner)
    shapes = {str(e.input_shapes) for e in prof.events() if e.name == "linear"}
    assert shapes == {"[[4, 6], [8, 6], [8]]", "[[4, 8], [3, 8], [3]]"}
    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=2)
    lines = table.splitlines()
    assert "Self CPU %" in lines[1] and lines[3].split()[0] == "forward" and len(lines) == 7
    with pytest.raises(AttributeError, match="CPU time only"):
        prof.key_averages().table(sort_by="cuda_time_total")


def test_backward_and_the_optimizer_are_recorded_and_compiled_calls_are_one_event_each():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 6), torch.tensor([0, 1, 2, 0])

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    with profile() as prof:
        step()
    names = {e.name for e in prof.events()}
    assert "cross_entropy" in names and "cross_entropy_grad" in names  # forward and backward
    assert "matmul" in names  # the linear layers' gradients
    compiled = torch.compile(step)
    compiled()
    with profile() as prof:
        for _ in range(3):
            compiled()
    assert [(a.key, a.count) for a in prof.key_averages()] == [("compiled step", 3)]


def test_a_schedule_keeps_only_the_active_steps_and_hands_each_cycle_over(tmp_path):
    actions = schedule(skip_first=1, wait=1, warmup=1, active=2, repeat=2)
    assert [actions(i).name for i in range(10)] == [
        "NONE", "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE",
        "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE",
    ]  # fmt: skip
    model, x = _model(), torch.randn(4, 6)
    traces = []

    def ready(prof):
        traces.append(sorted(a.count for a in prof.key_averages() if a.key == "step"))

    with profile(schedule=actions, on_trace_ready=ready) as prof:
        for _ in range(10):
            with record_function("step"):
                model(x)
            prof.step()
    assert traces == [[2], [2]]  # each cycle's two active steps, its warm-up dropped
    assert prof.action is ProfilerAction.NONE
    handler = tensorboard_trace_handler(str(tmp_path / "log"), worker_name="w0")
    with profile(on_trace_ready=handler):
        model(x)
    [written] = (tmp_path / "log").iterdir()
    assert written.name.startswith("w0.") and written.name.endswith(".pt.trace.json")
    events = json.loads(written.read_text())["traceEvents"]
    assert {e["name"] for e in events} == {"linear", "tanh"}
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_a_gpu_profile_is_refused():
    with pytest.raises(RuntimeError, match="runs on the CPU"):
        profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with pytest.raises(RuntimeError, match="runs on the CPU"):
        torch.autograd.profiler.profile(use_cuda=True)
