"""`__torch_function__` for Tensor subclasses, as PyTorch's documentation uses it: a subclass
sees the functions and methods called on it, results keep the subclass, gradients flow, and
Parameter (with PyTorch's disabled implementation) stays out of it."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

import tracegrad.torch as torch
from tracegrad.core.errors import TraceError
from tracegrad.frontend.torch_function import DisableTorchFunctionSubclass

CALLS: list[str] = []


@pytest.fixture
def subclasses():
    """Two subclasses as PyTorch's documentation writes them (defining the first puts the
    dispatching wrappers in place; conftest takes them away after each test)."""

    class LoggingTensor(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            CALLS.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs or {})

    class Meters(torch.Tensor):
        """A unit-carrying tensor that overrides one function and leaves the rest to Tensor."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is torch.mean:
                return "meters: " + str(float(args[0].sum()) / args[0].numel())
            return super().__torch_function__(func, types, args, kwargs or {})

    CALLS.clear()
    return LoggingTensor, Meters


def test_a_subclass_sees_functions_methods_and_operators_and_keeps_its_class(subclasses):
    LoggingTensor, _ = subclasses
    x = torch.ones(2, 3).as_subclass(LoggingTensor)
    results = [torch.add(x, 1), x + 1, x.sum(), x[0], torch.cat([x, x]), x.t()]
    assert all(type(r) is LoggingTensor for r in results)
    assert CALLS[:3] == ["add", "add", "sum"] and len(CALLS) >= len(results)
    values, index = torch.max(x, dim=1)
    assert type(values) is LoggingTensor and type(index) is LoggingTensor


def test_layers_dispatch_through_their_functions_and_gradients_flow(subclasses):
    LoggingTensor, _ = subclasses
    layer = torch.nn.Linear(3, 2)
    x = torch.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = layer(x.as_subclass(LoggingTensor))
    assert type(y) is LoggingTensor and "linear" in CALLS
    (y * 2).sum().backward()
    want = np.repeat(2 * layer.weight.detach().numpy().sum(0)[None], 2, axis=0)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)
    assert type(layer.weight.grad) is torch.Tensor


def test_an_override_of_one_function_and_the_default_elsewhere(subclasses):
    _, Meters = subclasses
    d = torch.tensor([1.0, 2.0, 3.0]).as_subclass(Meters)
    assert torch.mean(d) == "meters: 2.0"
    assert type(d * 2) is Meters and float((d * 2).sum()) == 12.0


def test_parameters_and_disabled_blocks_stay_plain(subclasses):
    LoggingTensor, _ = subclasses

    class MyParameter(torch.nn.Parameter):  # inherits Parameter's disabled implementation
        pass

    for p in (torch.nn.Parameter(torch.ones(2)), MyParameter(torch.ones(2))):
        assert type(p * 2) is torch.Tensor
    x = torch.ones(2).as_subclass(LoggingTensor)
    with DisableTorchFunctionSubclass():
        assert type(x + 1) is torch.Tensor  # the op ran as it is, without dispatching
    assert CALLS == []


def test_a_refusal_by_every_class_is_a_type_error(subclasses):
    class Refuses(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    with pytest.raises(TypeError, match="no implementation found for 'add'"):
        torch.add(torch.ones(1).as_subclass(Refuses), 1)


def test_functions_stay_comparable_picklable_and_traceable_once_subclasses_dispatch():
    """What a library built before the first subclass still finds: a set of functions, a
    module holding a function (pickled by name), torch.fx's names for functions."""
    forced = {torch.Tensor.clone, torch.add, torch.nn.functional.relu}
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    model.act = torch.nn.functional.relu

    class Plain(torch.Tensor):
        pass

    assert torch.Tensor.clone in forced and torch.add in forced
    assert torch.nn.functional.relu in forced and torch.add == torch.add
    for f in (torch.nn.functional.relu, torch.add, torch.linalg.norm):
        assert pickle.loads(pickle.dumps(f)) == f
    buffer = io.BytesIO()
    torch.save(model, buffer)  # its function taken before: the checkpoint still finds it
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False).act is model.act
    traced = torch.fx.symbolic_trace(lambda x: torch.relu(x) + torch.add(x, 1))
    assert "torch.relu(" in traced.code and "torch.add(" in traced.code
    x = torch.ones(2).as_subclass(Plain)
    assert type(traced(x)) is Plain and float(traced(x).sum()) == 6.0


def test_a_users_function_takes_part_through_torch_overrides(subclasses):
    LoggingTensor, Meters = subclasses

    def scaled(x, factor=2.0):
        if torch.overrides.has_torch_function_unary(x):
            return torch.overrides.handle_torch_function(scaled, (x,), x, factor=factor)
        return x * factor

    x = torch.ones(2).as_subclass(LoggingTensor)
    assert type(scaled(x)) is LoggingTensor and CALLS[0] == "scaled"
    assert not torch.overrides.has_torch_function((torch.ones(1), 2.0))
    with DisableTorchFunctionSubclass():
        assert not torch.overrides.has_torch_function_variadic(x, Meters)


def test_a_compiled_step_refuses_an_overriding_subclass_and_runs_a_plain_one(subclasses):
    LoggingTensor, _ = subclasses

    class Plain(torch.Tensor):  # Tensor's default: results keep the class, values the same
        pass

    layer = torch.nn.Linear(3, 2)
    step = torch.compile(lambda x: (layer(x) ** 2).mean())
    x = torch.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    eager = float((layer(x.as_subclass(Plain)) ** 2).mean())
    assert [float(step(x.as_subclass(Plain))) for _ in range(3)] == pytest.approx([eager] * 3)
    with pytest.raises(TraceError, match=r"argument is a LoggingTensor, .* own __torch_function_"):
        step(x.as_subclass(LoggingTensor))


def test_a_subclass_casting_itself_and_methods_a_library_patched_in_do_not_dispatch():
    """fastai's TensorBase: its `clone` casts itself to Tensor and back (`as_subclass` never
    dispatches, as PyTorch's), and fastai patches Tensor with methods of its own, which stay
    plain functions."""

    def show(self):  # a method a library adds to Tensor
        return f"{type(self).__name__} of {self.numel()}"

    torch.Tensor.show = show
    try:

        class Base(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return super().__torch_function__(func, types, args, kwargs or {})

            def clone(self):
                return self.as_subclass(torch.Tensor).clone().as_subclass(type(self))

        x = torch.ones(3).as_subclass(Base)
        assert type(x.clone()) is Base and type(x.as_subclass(torch.Tensor)) is torch.Tensor
        assert torch.Tensor.show is show and x.show() == "Base of 3"
    finally:
        del torch.Tensor.show
