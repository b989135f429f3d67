"""`python -m tracegrad` (or the `tracegrad` command):

    python -m tracegrad run train.py [args...]        run a PyTorch script on tracegrad
    python -m tracegrad run -m module [args...]       run a module so (torch.distributed.run)
    python -m tracegrad report train.py [args...] -o out/

`run` runs the script unchanged with `import torch` (and its submodules) meaning
`tracegrad.torch`; `report` runs it with TRACEGRAD_DUMP on and says where each traced step's
report is. The top floor: it only sets up the import system or the environment and runs the
user's script."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
from collections.abc import Sequence

OUT_FLAGS = ("-o", "--out")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tracegrad",
        description="Inspect the steps tracegrad compiles. Every @tracegrad.trace function "
        "writes, per input signature, graph.txt, graph.svg, plan.py, trace.json, timeline.png "
        "and report.html (needs matplotlib: pip install 'tracegrad[viz]').",
    )
    sub = p.add_subparsers(dest="command", required=True)
    run_parser = sub.add_parser(
        "run",
        help="run a PyTorch script with `import torch` meaning tracegrad.torch",
        description="Run SCRIPT with its ARGS as `python SCRIPT ARGS` would, with `import torch` "
        "(and torch.nn, torch.utils.data, ...) resolved to tracegrad.torch. A torch name that "
        "tracegrad does not provide fails where it is first used, naming it and the line. "
        "`run -m MODULE ARGS` runs a module as `python -m` does: `run -m torch.distributed.run "
        "--nproc_per_node 2 train.py` is torchrun.",
    )
    run_parser.add_argument("script", help="the Python script to run")
    run_parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    r = sub.add_parser(
        "report",
        help="run a script with TRACEGRAD_DUMP=OUT and list the reports it wrote",
        description="Run SCRIPT with its ARGS as `python SCRIPT ARGS` would, with "
        "TRACEGRAD_DUMP=OUT, then print where each report is. -o/--out may come before "
        "SCRIPT or as the last two arguments.",
    )
    r.add_argument("-o", "--out", default=None, help="directory to write to (tracegrad-dump)")
    r.add_argument("script", help="the Python script to run")
    r.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["run", "-m"] and len(argv) > 2:  # as `python -m`: what follows is its own
        return run(argv[2], argv[3:], module=True)
    ns = parser().parse_args(argv)
    args = list(ns.args)
    if ns.command == "run":
        return run(ns.script, args)
    if ns.out is None and len(args) >= 2 and args[-2] in OUT_FLAGS:
        ns.out, args = args[-1], args[:-2]
    return report(ns.script, args, ns.out or "tracegrad-dump")


def run(script: str, args: list[str], module: bool = False) -> int:
    """Run `script` (or the module of that name) as __main__ with `import torch` meaning
    tracegrad.torch, also in the Python processes it starts (multiprocessing's spawned workers,
    scripts it runs, `torch.distributed.run`'s ranks); its exit code."""
    from tracegrad.torch import imported_as_torch
    from tracegrad.torch._support import CHILDREN_PATH

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([CHILDREN_PATH, *filter(None, [before])])
    sys.path.insert(0, CHILDREN_PATH)  # a spawned worker takes its parent's sys.path
    try:
        with imported_as_torch():
            return run_script(script, args, module)
    finally:
        sys.path.remove(CHILDREN_PATH)
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def run_script(script: str, args: list[str], module: bool = False) -> int:
    """Run `script` as `python script args` would (as __main__, with sys.argv and its directory
    first on sys.path), or the module `script` as `python -m script args`; its exit code."""
    sys.argv = [script, *args]
    sys.path.insert(0, os.getcwd() if module else os.path.dirname(os.path.abspath(script)))
    try:
        if module:  # torch's modules by their own names (the alias has no code to run)
            real = f"tracegrad.{script}" if script.split(".")[0] == "torch" else script
            runpy.run_module(real, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def report(script: str, args: list[str], out: str) -> int:
    """Run `script` as __main__ with dumping into `out`; print each report.html it wrote."""
    out = os.path.abspath(out)
    os.makedirs(out, exist_ok=True)
    os.environ["TRACEGRAD_DUMP"] = out
    started = time.time()
    code = run_script(script, args)
    written = sorted(
        os.path.join(d, "report.html")
        for d, _, files in os.walk(out)
        if "report.html" in files and os.path.getmtime(os.path.join(d, "report.html")) >= started
    )
    print(f"tracegrad: {len(written)} report(s) in {out}", file=sys.stderr)
    for path in written:
        print(path, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
