"""benchmarks/ddp.py: its DDP script runs under tracegrad's torchrun, eagerly and compiled, on 1
and 2 processes, and every way starts from the same losses (what the table's last column
shows; the mlp has no batch norm, whose statistics are each rank's own)."""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")
sys.path.insert(0, HERE)
import ddp  # noqa: E402


def test_every_way_of_running_the_script_starts_from_the_same_losses():
    args = argparse.Namespace(model="mlp", steps=1)
    runs = [ddp.launch(sys.executable, True, nproc, args, compiled)
            for nproc in (1, 2) for compiled in (False, True)]  # fmt: skip
    for run in runs:
        assert run["step"] > 0 and len(run["losses"]) == 3
        np.testing.assert_allclose(run["losses"], runs[0]["losses"], rtol=1e-5)
    assert abs(runs[0]["losses"][0] - np.log(10)) < 0.1  # 10 classes, small weights
