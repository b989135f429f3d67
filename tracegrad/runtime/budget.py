"""The `memory_budget=` argument: bytes from a number, a size or a share of available memory."""

from __future__ import annotations

import os

import numpy as np

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}  # fmt: skip


def parse_budget(budget: int | str) -> int:
    """Bytes from an int, "300MB" / "1.5GiB" (decimal and binary units), or "40%" of the
    memory available now."""
    if isinstance(budget, int | np.integer) and not isinstance(budget, bool) and budget > 0:
        return int(budget)
    if isinstance(budget, str):
        text = budget.strip().upper().replace(" ", "")
        number = text.rstrip("KMGTIBP%")
        unit = text[len(number) :]
        try:
            value = float(number)
        except ValueError:
            value = -1.0
        if value > 0 and unit == "%" and value <= 100:
            return int(available_memory() * value / 100)
        if value > 0 and unit in _UNITS:
            return int(value * _UNITS[unit])
    raise ValueError(
        f"memory_budget: {budget!r} is not a positive number of bytes, a size such as '300MB' "
        "or '1.5GiB', or a share such as '40%'"
    )


def available_memory() -> int:
    """Bytes the system can give without swapping (MemAvailable), or free physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
