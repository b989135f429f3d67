"""Tensors in shared memory (`frontend.sharing`): `share_memory_()`, `Module.share_memory()`,
and tensors sent to other processes through multiprocessing's pickler, as PyTorch's."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest

import tracegrad as tg
import tracegrad.torch as torch

ROOT = Path(__file__).resolve().parents[2]


def _sent(x):
    """`x` pickled for another process and read back (here the same process: the descriptor
    goes through multiprocessing's resource sharer all the same)."""
    return ForkingPickler.loads(ForkingPickler.dumps(x))


def test_share_memory_moves_the_values_into_shared_memory_once():
    x = torch.arange(12.0).reshape(3, 4)
    assert not x.is_shared()
    assert x.share_memory_() is x and x.is_shared()
    np.testing.assert_array_equal(x.numpy(), np.arange(12.0).reshape(3, 4))
    held = x._value
    x.share_memory_()
    assert x._value is held  # already shared: nothing moves
    empty = torch.zeros(0, 3).share_memory_()
    assert empty.is_shared() and empty.shape == (0, 3)


def test_a_shared_view_moves_its_base_and_still_writes_it():
    base = torch.arange(12.0).reshape(3, 4)
    column = base.t()[1]  # a strided view of the base
    column.share_memory_()
    assert base.is_shared() and column.is_shared()
    column.add_(100.0)
    np.testing.assert_array_equal(base.numpy()[:, 1], [101.0, 105.0, 109.0])
    p = torch.nn.Parameter(torch.ones(2))
    p.data.share_memory_()  # `.data` is p's memory, as PyTorch's
    assert p.is_shared()


def test_module_share_memory_shares_parameters_buffers_and_gradients():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    model(torch.randn(4, 3)).sum().backward()
    assert model.share_memory() is model
    tensors = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters())]
    assert all(t.is_shared() for t in tensors)


def test_data_set_to_a_clone_unshares_a_received_module():
    """Lightning's spawned processes receive the module in shared memory and unshare it by
    `p.data = p.data.clone()`: each process then updates its own weights (before, the clone's
    values were copied back into the shared memory, and every rank's optimizer stepped the
    same weights)."""
    model = _sent(torch.nn.Linear(3, 2).share_memory())
    weight = model.weight
    assert weight.is_shared()
    received = weight.numpy()
    weight.data = weight.data.clone()
    assert not weight.is_shared() and not np.shares_memory(weight.numpy(), received)
    with torch.no_grad():
        weight.add_(1.0)
    assert not np.array_equal(weight.numpy(), received)


def test_a_tensor_sent_to_a_process_is_moved_to_shared_memory_and_received_there():
    """PyTorch's rule: sending moves the sender's tensor into shared memory, so writes by
    either side reach the other."""
    x = torch.tensor([1.0, 2.0])
    got = _sent(x)
    assert x.is_shared() and got.is_shared() and type(got) is torch.Tensor
    got.mul_(10.0)
    np.testing.assert_array_equal(x.numpy(), [10.0, 20.0])
    p = torch.nn.Parameter(torch.ones(3), requires_grad=False)
    q = _sent(p)
    assert type(q) is torch.nn.Parameter and not q.requires_grad
    w = _sent(torch.ones(2, requires_grad=True))
    assert w.requires_grad and w.is_leaf


def test_arrays_and_plain_pickles_are_copies():
    a = np.arange(3.0)
    b = _sent(a)
    b[0] = 7.0
    assert a[0] == 0.0  # an ndarray outside shared memory goes as NumPy pickles it
    x = torch.ones(2).share_memory_()
    y = pickle.loads(pickle.dumps(x))  # torch.save's kind of pickle: the values
    assert not y.is_shared()
    y.add_(1.0)
    assert x.tolist() == [1.0, 1.0]


def test_trained_tensors_views_and_optimizers_pickle_as_pytorchs():
    """Plain pickles (multiprocessing's with `fork`, joblib, `copy` of an optimizer) after
    training: a leaf's gradient accumulator, a view's base link and a history stay behind,
    and an unpickled tensor is a leaf with the same `requires_grad`, as PyTorch's."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.3, betas=(0.8, 0.9))
    model(torch.ones(3, 2)).sum().backward()
    optimizer.step()
    again = pickle.loads(pickle.dumps(optimizer))
    weight, bias = again.param_groups[0]["params"]
    assert again.state[weight]["step"].item() == 1.0
    assert again.param_groups[0]["betas"] == (0.8, 0.9)
    np.testing.assert_array_equal(again.state[bias]["exp_avg"].numpy(),
                                  optimizer.state[model.bias]["exp_avg"].numpy())  # fmt: skip
    weight.grad, bias.grad = torch.ones(2, 2), torch.ones(2)
    again.step()
    assert again.state[weight]["step"].item() == 2.0 and optimizer.state[model.weight]["step"] == 1
    x = torch.arange(6.0).reshape(2, 3).requires_grad_()
    for view in (x.detach().t(), x.detach().view(-1), x.t() * 2):
        got = pickle.loads(pickle.dumps(view))
        np.testing.assert_array_equal(got.numpy(), view.detach().numpy())
        assert got.is_leaf and got.requires_grad == view.requires_grad and got._view is None


def test_a_tensor_with_a_history_is_not_sent():
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        ForkingPickler.dumps(x * 2)
    assert _sent((x * 2).detach()).tolist() == [2.0, 2.0]


def test_a_traced_step_writes_shared_parameters_in_place():
    model = torch.nn.Linear(3, 1).share_memory()
    twin = torch.nn.Linear(3, 1)
    twin.load_state_dict(model.state_dict())
    x = torch.randn(5, 3)

    def step(m, opt):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()

    opt, twin_opt = (
        torch.optim.SGD(model.parameters(), 0.1),
        torch.optim.SGD(twin.parameters(), 0.1),
    )
    compiled = torch.compile(step)
    for _ in range(3):
        compiled(model, opt)
        step(twin, twin_opt)
    assert model.weight.is_shared() and model.bias.is_shared()
    np.testing.assert_allclose(model.weight.numpy(), twin.weight.numpy(), rtol=1e-6)


def test_share_memory_inside_a_traced_step_is_refused():
    @tg.trace
    def step(x):
        return (x * 2).share_memory_()

    with pytest.raises(RuntimeError, match="share_memory_: .*traced step"):
        step(tg.ones(2))


def test_sharing_strategies_are_pytorchs_names():
    mp = torch.multiprocessing
    assert mp.get_all_sharing_strategies() == {"file_descriptor", "file_system"}
    mp.set_sharing_strategy("file_system")
    assert mp.get_sharing_strategy() == "file_system"
    mp.set_sharing_strategy("file_descriptor")
    with pytest.raises(ValueError, match="not one of"):
        mp.set_sharing_strategy("shm")


HOGWILD = """
import sys
import numpy as np
import torch
import torch.multiprocessing as mp


def train(rank, model, optimizer, data, done):
    x, y = data[rank]
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    done.put(rank)


def shared_adam(model):
    # A3C's SharedAdam: state made up front (a step count of shape (1,)) and shared
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for p in model.parameters():
        optimizer.state[p] = {"step": torch.zeros(1), "exp_avg": torch.zeros_like(p),
                              "exp_avg_sq": torch.zeros_like(p)}
        for t in optimizer.state[p].values():
            t.share_memory_()
    return optimizer


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    model = model.double()
    data = [(torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 1, dtype=torch.float64))
            for _ in range(2)]
    here = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    here = here.double()
    here.load_state_dict(model.state_dict())
    model.share_memory()
    optimizer, here_optimizer = shared_adam(model), shared_adam(here)
    context = mp.get_context(sys.argv[1])
    done = context.Queue()
    for rank in range(2):  # one after the other, so that the result is exact
        worker = context.Process(target=train, args=(rank, model, optimizer, data, done))
        worker.start()
        assert done.get(timeout=120) == rank
        worker.join()
        train(rank, here, here_optimizer, data, done)
        done.get()
    for p, q in zip(model.parameters(), here.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-12)
        for k, v in optimizer.state[p].items():
            np.testing.assert_allclose(v.numpy(), here_optimizer.state[q][k].numpy(), rtol=1e-12)
    print("steps", optimizer.state[model[0].weight]["step"].item())
"""


@pytest.mark.parametrize("start", ["spawn", "forkserver"])
def test_hogwild_workers_train_the_parents_model_and_shared_optimizer_state(tmp_path, start):
    """pytorch/examples' mnist_hogwild and A3C's shared Adam: each worker process trains the
    parent's model in place; the parent then holds exactly what the same steps give in one
    process."""
    script = tmp_path / "hogwild.py"
    script.write_text(textwrap.dedent(HOGWILD))
    done = subprocess.run([sys.executable, "-m", "tracegrad", "run", str(script), start],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["steps", "6.0"]
