"""Write the report of one benchmark workload's compiled step (tg-numba unless told).

    python benchmarks/report.py [--workload gelu] [--method tg-numba] [-o tracegrad-dump]

Runs three steps with TRACEGRAD_DUMP set: graph.txt, graph.svg, plan.py, trace.json,
timeline.png and report.html land in OUT/train_step-1/, and the text report is printed.
"""

from __future__ import annotations

import argparse
import os

from steps import build
from workloads import WORKLOADS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="gelu", choices=list(WORKLOADS))
    p.add_argument("--method", default="tg-numba", choices=["tg-numba", "tg-numpy"])
    p.add_argument("-o", "--out", default="tracegrad-dump")
    args = p.parse_args()
    os.environ["TRACEGRAD_DUMP"] = os.path.abspath(args.out)
    step = build(args.method, WORKLOADS[args.workload])
    for _ in range(3):
        step()
    print(step.traced.report())
    print(f"\nreport: {step.traced.dumped[0]}/report.html")


if __name__ == "__main__":
    main()
