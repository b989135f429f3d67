"""`torch.distributed` over sockets and `DistributedDataParallel`: scripts written as PyTorch's
are started by `python -m tracegrad run -m torch.distributed.run` (torchrun) on 2 or 3 ranks;
their results are checked against NumPy and against one process with the whole batch."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tracegrad.torch as torch


def torchrun(tmp_path: Path, code: str, ranks: int, timeout: float = 120) -> tuple[int, str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-P", "-m", "tracegrad", "run", "-m", "torch.distributed.run",
               "--standalone", f"--nproc_per_node={ranks}", str(script)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def results(tmp_path: Path, ranks: int) -> list[dict]:
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(ranks)]


COLLECTIVES = """
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
out = {"rank": r, "size": n, "local": int(os.environ["LOCAL_RANK"]), "backend": dist.get_backend()}
x = torch.arange(7, dtype=torch.float64) * (r + 1)
dist.all_reduce(x)
out["sum"] = x.tolist()
x = torch.arange(7, dtype=torch.float32) + r
dist.all_reduce(x, op=dist.ReduceOp.AVG)
out["avg"] = x.tolist()
x = torch.tensor([3, 1, 2]) + r
dist.all_reduce(x, op=dist.ReduceOp.MAX)
out["max"], out["max_dtype"] = x.tolist(), str(x.dtype)
x = torch.tensor([2, 3]) * (r + 1)
dist.all_reduce(x, op=dist.ReduceOp.PRODUCT)
out["product"] = x.tolist()
m = torch.zeros(3, 4)
m[:, 1] = float(r + 1)                                   # a column: a view that is not contiguous
col = m[:, 1]
work = dist.all_reduce(col, async_op=True)
work.wait()
out["column"], out["matrix"] = col.tolist(), m.tolist()
x = torch.full((2, 2), float(r))
dist.broadcast(x, src=n - 1)
out["broadcast"] = x.tolist()
parts = [torch.zeros(2) for _ in range(n)]
dist.all_gather(parts, torch.tensor([r, 10.0 * r]))
out["all_gather"] = [p.tolist() for p in parts]
flat = torch.zeros(2 * n)
dist.all_gather_into_tensor(flat, torch.tensor([r, -r], dtype=torch.float32))
out["all_gather_into_tensor"] = flat.tolist()
mine = torch.zeros(2)
dist.reduce_scatter_tensor(mine, torch.arange(2.0 * n) * (r + 1))
out["reduce_scatter"] = mine.tolist()
got = [torch.zeros(1) for _ in range(n)] if r == 0 else None
dist.gather(torch.tensor([r * 2.0]), got, dst=0)
out["gather"] = None if got is None else [g.item() for g in got]
piece = torch.zeros(2)
dist.scatter(piece, [torch.tensor([i, i + 0.5]) for i in range(n)] if r == 1 else None, src=1)
out["scatter"] = piece.tolist()
y = torch.ones(2) * (r + 1)
dist.reduce(y, dst=0)
out["reduce"] = y.tolist() if r == 0 else None
token = torch.tensor([float(r)])
sending = dist.isend(token, (r + 1) % n)
incoming = torch.zeros(1)
dist.recv(incoming, (r - 1) % n)
sending.wait()
out["ring"] = incoming.item()
objects = [None] * n
dist.all_gather_object(objects, {"rank": r, "name": "r" * (r + 1)})
out["objects"] = objects
outs = [torch.zeros(2) for _ in range(n)]
dist.all_to_all(outs, [torch.tensor([10.0 * r + q, -q]) for q in range(n)])
out["all_to_all"] = [o.tolist() for o in outs]
got = torch.zeros(n * (r + 1))     # rank q gets q + 1 elements from every rank
dist.all_to_all_single(got, torch.arange(n * (n + 1) / 2) + 100 * r, [r + 1] * n,
                       [q + 1 for q in range(n)])
out["all_to_all_single"] = got.tolist()
listed = [r, "mine"] if r == 0 else [None, None]
dist.broadcast_object_list(listed, src=0)
out["broadcast_object_list"] = listed
dist.barrier()
json.dump(out, open(f"rank{r}.json", "w"))
dist.destroy_process_group()
"""


def test_collectives_on_three_ranks_give_what_numpy_computes(tmp_path):
    code, output = torchrun(tmp_path, COLLECTIVES, 3)
    assert code == 0, output
    n = 3
    ranks = results(tmp_path, n)
    for r, got in enumerate(ranks):
        assert (got["rank"], got["size"], got["local"], got["backend"]) == (r, n, r, "gloo")
        assert got["sum"] == (np.arange(7.0) * sum(range(1, n + 1))).tolist()
        np.testing.assert_allclose(got["avg"], np.arange(7.0) + (n - 1) / 2, rtol=1e-6)
        assert got["max"] == [3 + n - 1, 1 + n - 1, 2 + n - 1] and got["max_dtype"] == "torch.int64"
        assert got["product"] == [2**n * 6, 3**n * 6]
        assert got["column"] == [6.0] * 3
        assert np.array_equal(np.array(got["matrix"])[:, 1], [6.0] * 3)  # written through
        assert np.array(got["matrix"])[:, [0, 2, 3]].sum() == 0
        assert got["broadcast"] == [[n - 1.0] * 2] * 2
        assert got["all_gather"] == [[q, 10.0 * q] for q in range(n)]
        assert got["all_gather_into_tensor"] == [v for q in range(n) for v in (q, -q)]
        whole = np.arange(2.0 * n) * sum(range(1, n + 1))
        assert got["reduce_scatter"] == whole[2 * r : 2 * r + 2].tolist()
        assert got["gather"] == ([0.0, 2.0, 4.0] if r == 0 else None)
        assert got["scatter"] == [r, r + 0.5]
        assert got["reduce"] == ([6.0, 6.0] if r == 0 else None)
        assert got["ring"] == (r - 1) % n
        assert got["objects"] == [{"rank": q, "name": "r" * (q + 1)} for q in range(n)]
        assert got["all_to_all"] == [[10.0 * q + r, -r] for q in range(n)]
        start = r * (r + 1) // 2  # where rank r's block begins in every rank's input
        assert got["all_to_all_single"] == [
            100.0 * q + start + i for q in range(n) for i in range(r + 1)
        ]
        assert got["broadcast_object_list"] == [0, "mine"]


DDP = """
import json, os
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.manual_seed(0)
def make():
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 3)).double()
g = np.random.default_rng(1)
X, Y = torch.tensor(g.standard_normal((4, 8, 5))), torch.tensor(g.standard_normal((4, 8, 3)))
single = os.environ.get("SINGLE") == "1"
if not single:
    dist.init_process_group("gloo")
r, n = (0, 1) if single else (dist.get_rank(), dist.get_world_size())
if not single:
    torch.manual_seed(r)                 # replicas start apart: DDP copies rank 0's weights
model = make()
net = model if single else DDP(model, bucket_cap_mb=0.0005)   # several buckets
opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)

def loss_of(x, y):
    return ((net(x) - y) ** 2).mean()

def step(i):
    opt.zero_grad()
    x, y = X[i][r::n], Y[i][r::n]
    half = len(x) // 2
    if single:
        (loss_of(x[:half], y[:half]) / 2).backward()
        (loss_of(x[half:], y[half:]) / 2).backward()
    else:
        with net.no_sync():          # gradient accumulation: the second backward reduces the sum
            (loss_of(x[:half], y[:half]) / 2).backward()
        (loss_of(x[half:], y[half:]) / 2).backward()
    opt.step()

run = torch.compile(step) if os.environ.get("COMPILE") == "1" else step
for i in range(4):
    run(i)
state = {k: v.tolist() for k, v in model.state_dict().items()}
json.dump(state, open(f"rank{r}.json", "w"))
"""


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The same steps in one process with the whole batch."""
    where = tmp_path_factory.mktemp("single")
    (where / "script.py").write_text(textwrap.dedent(DDP))
    env = {**os.environ, "SINGLE": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    command = [sys.executable, "-P", "-m", "tracegrad", "run", "script.py"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=where, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return results(where, 1)[0]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ddp_on_two_ranks_matches_one_process_with_the_whole_batch(
    tmp_path, one_process, compiled, monkeypatch
):
    monkeypatch.setenv("COMPILE", "1" if compiled else "0")
    code, output = torchrun(tmp_path, DDP, 2)
    assert code == 0, output
    first, second = results(tmp_path, 2)
    assert first == second  # replicas stay bit-equal
    for name, value in one_process.items():
        np.testing.assert_allclose(first[name], value, rtol=1e-12, atol=1e-14, err_msg=name)
    assert "traced again" not in output and "eagerly" not in output  # one plan, no fallback


BATCH_NORM = """
import json, os
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

dist.init_process_group("gloo")
r = dist.get_rank()
torch.manual_seed(r)
model = torch.nn.Sequential(torch.nn.Linear(3, 8, bias=False), torch.nn.BatchNorm1d(8),
                            torch.nn.ReLU(),
                            torch.nn.Linear(8, 1)).double()
net = DDP(model)
opt = torch.optim.Adam(net.parameters(), lr=0.01)
data = torch.tensor(np.random.default_rng(0).standard_normal((16, 4)))
order = list(DistributedSampler(range(16), shuffle=False))    # this rank's share

def step(x, y):
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss

run = torch.compile(step) if os.environ.get("COMPILE") == "1" else step
for i in range(3):
    batch = data[order][:, :3] * (i + 1)
    run(batch, data[order][:, 3:])
json.dump({"order": order, **{k: v.tolist() for k, v in model.state_dict().items()}},
          open(f"rank{r}.json", "w"))
"""


def test_ddp_with_batch_norm_keeps_rank_0s_statistics_compiled_as_eagerly(tmp_path, monkeypatch):
    """Each forward copies rank 0's running statistics to every rank (in a compiled step, as
    nodes of the plan); the ranks' shares come from the process group."""
    runs = {}
    for compiled in ("0", "1"):
        monkeypatch.setenv("COMPILE", compiled)
        code, output = torchrun(tmp_path, BATCH_NORM, 2)
        assert code == 0, output
        runs[compiled] = results(tmp_path, 2)
    for ranks in runs.values():
        assert ranks[0]["order"] == list(range(0, 16, 2)) and ranks[1]["order"] == list(
            range(1, 16, 2)
        )
        # the parameters agree; the buffers are rank 0's as of the last forward (each rank
        # then updated its own from its batch)
        for name in ("0.weight", "1.weight", "1.bias", "3.bias"):
            assert ranks[0][name] == ranks[1][name], name
        assert ranks[0]["1.num_batches_tracked"] == ranks[1]["1.num_batches_tracked"] == 3
        assert ranks[0]["1.running_mean"] != ranks[1]["1.running_mean"]
    # (no bias before the batch norm: its gradient would be rounding noise, which Adam turns
    # into steps of either sign)
    for name, value in runs["0"][1].items():
        np.testing.assert_allclose(runs["1"][1][name], value, rtol=1e-12, err_msg=name)


COMPILED_WAYS = """
import json, os
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(r)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                            torch.nn.Linear(16, 1)).double()
way = os.environ["WAY"]
net = {"compile_then_ddp": lambda: DDP(torch.compile(model)),
       "ddp_then_compile": lambda: torch.compile(DDP(model))}.get(way, lambda: DDP(model))()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
g = np.random.default_rng(1)
X, Y = torch.tensor(g.standard_normal((8, 4))), torch.tensor(g.standard_normal((8, 1)))

def step(x, y):
    opt.zero_grad()
    loss = ((net(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean, op=dist.ReduceOp.AVG)   # inside the compiled step when way == "step"
    return mean

run = torch.compile(step) if way == "step" else step
losses = [run(X[r::n], Y[r::n]).item() for _ in range(4)]
json.dump({"losses": losses, "w": model[0].weight.tolist()}, open(f"rank{r}.json", "w"))
"""


def test_ddp_compiled_every_way_pytorch_code_does_it(tmp_path, monkeypatch):
    """nanoGPT compiles the model and then wraps it, others wrap and then compile, or compile
    the whole step (with an all-reduce of the loss inside it): the same losses and weights."""
    seen = {}
    for way in ("eager", "compile_then_ddp", "ddp_then_compile", "step"):
        monkeypatch.setenv("WAY", way)
        code, output = torchrun(tmp_path, COMPILED_WAYS, 2)
        assert code == 0, output
        first, second = results(tmp_path, 2)
        assert first == second
        seen[way] = first
    for way, got in seen.items():
        np.testing.assert_allclose(got["losses"], seen["eager"]["losses"], rtol=1e-12,
                                   err_msg=way)  # fmt: skip
        np.testing.assert_allclose(got["w"], seen["eager"]["w"], rtol=1e-12, err_msg=way)


ACCUMULATION = """
import json, os, warnings
import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(),
                            torch.nn.Linear(16, 1)).double()
net = DDP(model)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
g = np.random.default_rng(1)
X = torch.tensor(g.standard_normal((8, 4))) * (r + 1)
Y = torch.tensor(g.standard_normal((8, 1)))
compiled = os.environ["COMPILE"] == "1"

def loss_of(x, y):
    return ((net(x) - y) ** 2).mean() / 2

def inside(x, y):          # nanoGPT's accumulation: the flag set before each backward
    for micro in range(2):
        net.require_backward_grad_sync = micro == 1
        loss_of(x[micro::2], y[micro::2]).backward()
    opt.step()
    opt.zero_grad()

def backward(x, y):        # the flag set around the compiled function
    loss_of(x, y).backward()

inside_run = torch.compile(inside) if compiled else inside
backward_run = torch.compile(backward) if compiled else backward
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for _ in range(3):
        inside_run(X, Y)
    inside_warnings = [str(w.message) for w in caught]
    for _ in range(3):
        with net.no_sync():
            backward_run(X[:4], Y[:4])
        backward_run(X[4:], Y[4:])
        opt.step()
        opt.zero_grad()
json.dump({"w": model[0].weight.tolist(), "inside": inside_warnings,
           "all": [str(w.message) for w in caught]}, open(f"rank{r}.json", "w"))
"""


def test_ddp_gradient_accumulation_compiled_as_eagerly(tmp_path, monkeypatch):
    """The sync flag set inside a compiled step before each backward is the step's own (no new
    trace); set around a compiled function (no_sync), each setting has its plan."""
    runs = {}
    for compiled in ("0", "1"):
        monkeypatch.setenv("COMPILE", compiled)
        code, output = torchrun(tmp_path, ACCUMULATION, 2)
        assert code == 0, output
        first, second = results(tmp_path, 2)
        assert first["w"] == second["w"]
        runs[compiled] = first
    np.testing.assert_allclose(runs["1"]["w"], runs["0"]["w"], rtol=1e-12)
    assert runs["1"]["inside"] == []
    assert [m for m in runs["1"]["all"] if "traced again" in m] == [
        m for m in runs["1"]["all"] if "require_backward_grad_sync" in m
    ]


SYNC_BN = """
import json, os
import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
data = np.random.default_rng(0).standard_normal((8, 3, 4, 4))
scale = torch.tensor(np.random.default_rng(1).standard_normal((8, 3, 4, 4)))
# every rank's own part, then the whole batch in one batch norm (its gradient the reference)
sync = torch.nn.SyncBatchNorm(3).double()
alone = torch.nn.BatchNorm2d(3).double()
with torch.no_grad():
    for m in (sync, alone):
        m.weight.copy_(torch.tensor([1.0, 2.0, -1.0]))
        m.bias.copy_(torch.tensor([0.5, 0.0, 1.0]))
step = torch.compile(lambda m, x, s: (m(x) * s).sum()) if os.environ["COMPILE"] == "1" else (
    lambda m, x, s: (m(x) * s).sum())
mine = torch.tensor(data[r::n]).requires_grad_()
loss = step(sync, mine, scale[r::n])
loss.backward()
whole = torch.tensor(data).requires_grad_()
(alone(whole) * scale).sum().backward()
weight_grad = sync.weight.grad.clone()
dist.all_reduce(weight_grad)
json.dump({
    "x_grad": float((mine.grad - whole.grad[r::n]).abs().max()),
    "out": float((sync(mine).detach() - alone(whole).detach()[r::n]).abs().max()),
    "weight_grad": float((weight_grad - alone.weight.grad).abs().max()),
    "running": float((sync.running_var - alone.running_var).abs().max()
                     + (sync.running_mean - alone.running_mean).abs().max()),
}, open(f"rank{r}.json", "w"))
"""


@pytest.mark.parametrize("compiled", ["0", "1"], ids=["eager", "compiled"])
def test_sync_batch_norm_on_two_ranks_is_batch_norm_of_the_whole_batch(tmp_path, monkeypatch,
                                                                       compiled):  # fmt: skip
    """Outputs, input gradients (through the all-reduces) and running statistics equal one
    batch norm over both ranks' samples; the weight's gradients sum to its."""
    monkeypatch.setenv("COMPILE", compiled)
    code, output = torchrun(tmp_path, SYNC_BN, 2)
    assert code == 0, output
    for got in results(tmp_path, 2):
        assert max(got.values()) < 1e-12, got


UNUSED = """
import json
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
r = dist.get_rank()
torch.manual_seed(0)
class Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.both, self.first, self.never = (torch.nn.Linear(2, 1) for _ in range(3))
    def forward(self, x):
        return self.both(x) + (self.first(x) if r == 0 else 0)
net = DDP(Branches(), find_unused_parameters=True)
x = torch.tensor([[1.0, 2.0]]) * (r + 1)
net(x).sum().backward()
m = net.module
json.dump({"first": m.first.weight.grad.tolist(), "both": m.both.weight.grad.tolist(),
           "never": m.never.weight.grad is None}, open(f"rank{r}.json", "w"))
"""


def test_a_parameter_one_rank_used_gets_the_mean_and_one_none_used_keeps_no_grad(tmp_path):
    code, output = torchrun(tmp_path, UNUSED, 2)
    assert code == 0, output
    for got in results(tmp_path, 2):
        assert got["both"] == [[1.5, 3.0]]  # (x0 + x1) / 2
        assert got["first"] == [[0.5, 1.0]]  # only rank 0's x0, over 2 ranks
        assert got["never"]


GATHERED_LOSS = """
import json
import torch
import torch.distributed as dist
from torch.distributed.nn.functional import all_gather, all_reduce

dist.init_process_group("gloo")
r = dist.get_rank()
x = torch.tensor([1.0, 2.0], dtype=torch.float64) * (r + 1)
x.requires_grad_()
everyone = torch.cat(all_gather(x * 3.0))          # (a contrastive loss's embeddings)
loss = (everyone ** 2).sum() * (r + 1) + all_reduce(x.sum() * (r + 1))
loss.backward()
json.dump({"grad": x.grad.tolist(), "everyone": everyone.tolist()}, open(f"rank{r}.json", "w"))
"""


def test_differentiable_collectives_send_each_rank_the_gradient_of_every_ranks_loss(tmp_path):
    """Rank r's loss is c_r * sum((3 x_q)^2 over q) + S, S = sum over q of c_q * sum(x_q), c_r =
    r + 1: x_r's gradient is the sum over ranks of their losses' gradients with respect to it,
    18 x_r (c_0 + c_1) from the gathered term, and c_r from each rank's S."""
    code, output = torchrun(tmp_path, GATHERED_LOSS, 2)
    assert code == 0, output
    for r, got in enumerate(results(tmp_path, 2)):
        x = np.array([1.0, 2.0]) * (r + 1)
        np.testing.assert_allclose(got["grad"], 18 * x * (1 + 2) + 2 * (r + 1), rtol=1e-15)
        assert got["everyone"] == [3.0, 6.0, 6.0, 12.0]


def test_ranks_calling_different_collectives_get_an_error_naming_both(tmp_path):
    code, output = torchrun(tmp_path, """
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        r = dist.get_rank()
        dist.all_reduce(torch.ones(3 + r))
    """, 2)  # fmt: skip
    assert code != 0
    assert "every rank must call the same collectives" in output
    assert re.search(
        r"rank \d of 2 sent \d+ bytes for its collective #0, this rank expects "
        r"\d+ for its collective #0",
        output,
    )


def test_a_rank_that_fails_stops_the_job_instead_of_leaving_the_others_waiting(tmp_path):
    start = time.monotonic()
    code, output = torchrun(tmp_path, """
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            raise ValueError("rank 1 gives up")
        dist.all_reduce(torch.ones(3))
    """, 2, timeout=60)  # fmt: skip
    assert code != 0 and "rank 1 gives up" in output
    assert "local rank" in output and "failed with exit code 1" in output
    assert time.monotonic() - start < 30


def test_init_process_group_says_what_is_missing(monkeypatch):
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match="MASTER_ADDR and \\$MASTER_PORT"):
        torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    with pytest.raises(RuntimeError, match="doesn't have MPI built in"):
        torch.distributed.init_process_group("mpi")
    with pytest.raises(ValueError, match="has not been initialized"):
        torch.distributed.get_rank()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"cannot listen at port {port}.*MASTER_PORT"):
            torch.distributed.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=2
            )
    assert not torch.distributed.is_initialized()


def test_one_rank_alone_runs_every_collective_in_process():
    dist = torch.distributed
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        with pytest.raises(ValueError, match="twice"):
            dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
        x = torch.arange(4.0)
        dist.all_reduce(x, op=dist.ReduceOp.AVG)
        assert x.tolist() == [0.0, 1.0, 2.0, 3.0] and dist.get_world_size() == 1
        model = torch.nn.Linear(3, 1)
        net = torch.nn.parallel.DistributedDataParallel(model)
        net(torch.ones(2, 3)).sum().backward()
        assert model.weight.grad.tolist() == [[2.0, 2.0, 2.0]]
        assert list(net.state_dict()) == ["module.weight", "module.bias"]
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


def test_what_lightning_reads_of_torch_distributed():
    """Names Lightning's DDP strategies read before and after making the group."""
    dist = torch.distributed
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.get_default_backend_for_device(torch.device("cpu")) == "gloo"
    assert dist.constants.default_pg_timeout.total_seconds() == 1800
    from tracegrad.torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook

    state = post_localSGD_hook.PostLocalSGDState
    assert isinstance(state, type)
    from tracegrad.torch.distributed.elastic.multiprocessing.errors import record

    main = record(lambda: 7)
    assert main() == 7


def test_the_parts_not_provided_import_and_refuse_when_used():
    """FSDP, DTensor, distributed checkpoints: their modules import at any depth (libraries
    import them once torch.distributed is available), their classes are classes, and making
    or calling one raises, naming it."""
    import importlib

    fsdp = importlib.import_module("tracegrad.torch.distributed.fsdp.fully_sharded_data_parallel")
    FSDP, state = fsdp.FullyShardedDataParallel, fsdp.StateDictType  # noqa: N806
    assert isinstance(FSDP, type) and not isinstance(torch.nn.Linear(2, 2), FSDP)
    with pytest.raises(
        NotImplementedError, match="fully_sharded_data_parallel.Fully.*not provided"
    ):
        FSDP(torch.nn.Linear(2, 2))
    hooks = importlib.import_module("tracegrad.torch.distributed.algorithms.ddp_comm_hooks")
    assert hooks.default_hooks.__name__.endswith("ddp_comm_hooks.default_hooks")  # a module
    with pytest.raises(NotImplementedError, match="checkpoint.state_dict.get_model_state_dict"):
        torch.distributed.checkpoint.state_dict.get_model_state_dict(torch.nn.Linear(2, 2))
    assert state is fsdp.StateDictType
    placements = importlib.import_module("tracegrad.torch.distributed.tensor.placement_types")
    assert placements.Shard(-1) == placements.Shard(-1) != placements.Shard(0)
    assert placements.Replicate().is_replicate() and repr(placements.Shard(1)) == "Shard(dim=1)"


def test_launchers_calling_run_get_childfailederror(tmp_path):
    """accelerate calls `torch.distributed.run.run(parsed)` and catches ChildFailedError."""
    from tracegrad.torch.distributed import run as torchrun_module

    script = tmp_path / "fails.py"
    script.write_text("raise SystemExit(3)\n")
    parsed = torchrun_module.get_args_parser().parse_args(["--standalone", str(script)])
    with pytest.raises(torch.distributed.ChildFailedError, match="fails.py FAILED"):
        torchrun_module.run(parsed)
