"""The rounds' children: which environment each method's child gets."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))

import harness  # noqa: E402


def test_peers_children_run_with_the_c_librarys_allocator_defaults():
    """tracegrad's heap settings come with its import, which every child makes (the shared
    weights): a peer's child turns them off, tracegrad's keep them."""
    seen = {}

    def measure(method, env, first_only):
        seen[method] = env.get("TRACEGRAD_KEEP_FREED_MEMORY")
        return {}

    harness.run_rounds(measure, ["tg-traced", "tg-eager", "torch", "torch-compile"], rounds=1)
    assert seen == {"tg-traced": None, "tg-eager": None, "torch": "0", "torch-compile": "0"}
