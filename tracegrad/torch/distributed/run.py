"""`torchrun` (`python -m torch.distributed.run`): start `--nproc_per_node` copies of a training
script on this host, each told its place by the environment `init_process_group` reads (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...), and wait
for them; when one fails, the others are stopped and its exit code is returned. Several hosts
join by `--nnodes N --node_rank R --master_addr A` (static rendezvous: each host's ranks are
numbered after the hosts before it). The scripts run on tracegrad: `import torch` in them means
`tracegrad.torch`. Elastic restarts are not provided (`--max_restarts` must be 0)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

from tracegrad.torch._support import CHILDREN_PATH
from tracegrad.torch.distributed import ChildFailedError

POLL_S = 0.1
STOP_GRACE_S = 5.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="torchrun", description=__doc__.split("\n\n")[0])
    add = p.add_argument
    add("--nproc_per_node", "--nproc-per-node", default="1",
        help="processes on this host: a number, or auto/cpu (one per core)")  # fmt: skip
    add("--nnodes", default="1", help="hosts (N, or MIN:MAX with MIN == MAX)")
    add("--node_rank", "--node-rank", type=int, default=0)
    add("--master_addr", "--master-addr", default="127.0.0.1")
    add("--master_port", "--master-port", type=int, default=29500)
    add("--rdzv_endpoint", "--rdzv-endpoint", default="", help="host:port of rank 0's master")
    add("--rdzv_backend", "--rdzv-backend", default="static")
    add("--rdzv_id", "--rdzv-id", default="none")
    add("--rdzv_conf", "--rdzv-conf", default="")
    add("--standalone", action="store_true", help="one host, on a free port")
    add("--max_restarts", "--max-restarts", type=int, default=0)
    add("--monitor_interval", "--monitor-interval", type=float, default=POLL_S)
    add("--role", default="default")
    add("-m", "--module", action="store_true", help="run the script as a module (python -m)")
    add("--no_python", "--no-python", action="store_true", help="run the script as a program")
    add("--local_addr", "--local-addr", default=None)
    add("--log_dir", "--log-dir", default=None)
    add("-r", "--redirects", default="0")
    add("-t", "--tee", default="0")
    add("training_script", help="the script every rank runs")
    add("training_script_args", nargs=argparse.REMAINDER)
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _count(nproc: str) -> int:
    if nproc in ("auto", "cpu"):
        return os.cpu_count() or 1
    return int(nproc)


def _nodes(nnodes: str) -> int:
    low, _, high = nnodes.partition(":")
    if high and high != low:
        raise ValueError(f"torchrun --nnodes {nnodes}: elastic ranges are not provided by "
                         "tracegrad; give a number of hosts")  # fmt: skip
    return int(low)


def rank_environments(ns: argparse.Namespace, legacy: bool = False) -> list[dict[str, str]]:
    """Each local rank's environment: this process's, plus where it stands in the job."""
    if ns.max_restarts:
        raise ValueError("torchrun --max_restarts: elastic restarts are not provided by tracegrad")
    local, nodes = _count(ns.nproc_per_node), _nodes(ns.nnodes)
    host, port = ns.master_addr, ns.master_port
    if ns.standalone:
        host, port, nodes = "127.0.0.1", _free_port(), 1
    elif ns.rdzv_endpoint:
        host, _, given = ns.rdzv_endpoint.rpartition(":") if ":" in ns.rdzv_endpoint else (
            ns.rdzv_endpoint, "", str(port))  # fmt: skip
        port = int(given)
    base = dict(os.environ)
    base["PYTHONPATH"] = os.pathsep.join(
        dict.fromkeys([CHILDREN_PATH, *filter(None, base.get("PYTHONPATH", "").split(os.pathsep))])
    )  # the ranks' `import torch` is tracegrad's, however this launcher was started
    if local > 1 and "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = "1"  # as torchrun: ranks sharing a host do not oversubscribe it
    run_id = ns.rdzv_id if ns.rdzv_id != "none" else uuid.uuid4().hex[:8]
    envs = []
    for i in range(local):
        env = dict(base)
        env.update(
            RANK=str(ns.node_rank * local + i), LOCAL_RANK=str(i), GROUP_RANK=str(ns.node_rank),
            ROLE_RANK=str(ns.node_rank * local + i), ROLE_NAME=ns.role,
            WORLD_SIZE=str(nodes * local), LOCAL_WORLD_SIZE=str(local), ROLE_WORLD_SIZE=str(
                nodes * local), GROUP_WORLD_SIZE=str(nodes), MASTER_ADDR=host,
            MASTER_PORT=str(port), TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_RESTART_COUNT="0",
            TORCHELASTIC_MAX_RESTARTS="0", TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
        )  # fmt: skip
        if legacy:
            env.pop("TORCHELASTIC_RUN_ID")
        envs.append(env)
    return envs


def commands(ns: argparse.Namespace, envs: list[dict[str, str]], legacy_flag: bool) -> list:
    """Each rank's command line (`--local-rank=i` appended for `torch.distributed.launch`
    without `--use-env`)."""
    head = [] if ns.no_python else [sys.executable, "-u", *(["-m"] if ns.module else [])]
    out = []
    for env in envs:
        extra = [f"--local-rank={env['LOCAL_RANK']}"] if legacy_flag else []
        out.append([*head, ns.training_script, *extra, *ns.training_script_args])
    return out


def launch(cmds: list[list[str]], envs: list[dict[str, str]], poll: float = POLL_S) -> int:
    """Start every rank and wait: 0 when all succeed, else the first failure's exit code (the
    others are stopped, as torchrun stops them)."""
    procs = [subprocess.Popen(c, env=e) for c, e in zip(cmds, envs, strict=True)]
    with contextlib.suppress(ValueError):  # (not the main thread: no handler, as Python allows)
        signal.signal(signal.SIGTERM, _terminated)  # so that `finally` stops the ranks
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                i, code = failed[0]
                sys.stderr.write(
                    f"torchrun (tracegrad): local rank {i} (pid {procs[i].pid}) "
                    f"failed with exit code {code}; stopping the others\n"
                )
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            time.sleep(poll)
    finally:
        _stop([p for p in procs if p.poll() is None])


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline = time.time() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(deadline - time.time(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(args: Sequence[str] | None = None, legacy: bool = False) -> int:
    """torchrun's command line; `legacy`: `torch.distributed.launch`'s (`--use-env`)."""
    p = _parser()
    if legacy:
        p.add_argument("--use_env", "--use-env", action="store_true")
    ns = p.parse_args(args)
    envs = rank_environments(ns, legacy)
    return launch(commands(ns, envs, legacy and not ns.use_env), envs, ns.monitor_interval)


def run(args: argparse.Namespace) -> None:
    """`torch.distributed.run.run(parsed_args)`, as launchers call it (accelerate's): raises
    ChildFailedError when a rank fails."""
    envs = rank_environments(args)
    code = launch(commands(args, envs, False), envs, args.monitor_interval)
    if code:
        raise ChildFailedError(args.training_script, {"exitcode": code})


get_args_parser = _parser

if __name__ == "__main__":
    sys.exit(main())
