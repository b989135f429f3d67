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


def test_each_method_starts_from_caches_of_its_own():
    """A first call "with empty caches" must not find kernels another method compiled."""
    caches = {}

    def measure(method, env, first_only):
        caches.setdefault(method, set()).add(env["TRACEGRAD_CACHE_DIR"])
        return {}

    harness.run_rounds(measure, ["tg-traced", "tg-eager", "tg-module"], rounds=2)
    assert all(len(c) == 1 for c in caches.values())  # the same one from round to round
    assert len(set.union(*caches.values())) == 3
