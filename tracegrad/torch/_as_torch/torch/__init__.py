"""`import torch` in a process started under `python -m tracegrad run` (a spawned worker, a
script that the script runs): tracegrad.torch, as in the parent. `run` puts the directory above
this package first on PYTHONPATH, so that such a child finds this before PyTorch."""

from tracegrad.torch._support import alias_torch

alias_torch()  # sys.modules["torch"] is tracegrad.torch now: the import returns it
