"""The commit part of a traced step: from its commit point (after every node that may fail) to
the end of its write-back, the plan writes parameters and optimizer state in place, so it must
not stop halfway. SIGINT (Ctrl-C) is deferred across it and delivered when the state is whole:
the step completes, then raises KeyboardInterrupt. Only the main thread receives signals, and
only there can a handler be installed; other threads run the commit part as it is."""

from __future__ import annotations

import _signal  # signal.signal's C function: the wrapper's enum conversions cost more than it
import signal
import threading
from types import FrameType
from typing import Any

_deferred: dict[str, Any] = {"active": False, "previous": None, "pending": False}


def _hold(signum: int, frame: FrameType | None) -> None:
    _deferred["pending"] = True


def _main() -> bool:
    return threading.current_thread() is threading.main_thread()


def enter_commit() -> None:
    """Called by the plan at its commit point: defer SIGINT until `leave_commit()`."""
    if _deferred["active"] or not _main():
        return
    try:
        _deferred["previous"] = _signal.signal(signal.SIGINT, _hold)
    except (ValueError, TypeError):  # no signal support here (an embedded interpreter)
        return
    _deferred["active"] = True


def leave_commit() -> None:
    """After the write-back (or a failure): restore the handler and deliver a deferred SIGINT."""
    if not _deferred["active"] or not _main():
        return
    _deferred["active"] = False
    previous = _deferred["previous"]
    _signal.signal(signal.SIGINT, signal.SIG_DFL if previous is None else previous)
    if _deferred["pending"]:
        _deferred["pending"] = False
        signal.raise_signal(signal.SIGINT)  # the restored handler runs now
