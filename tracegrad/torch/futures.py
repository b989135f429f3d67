"""`torch.futures`: a value that arrives later (`Future`), as `torch.distributed.rpc` hands
them out; here nothing runs asynchronously, so a future is set by whoever made it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tracegrad.torch._support import not_provided as _not_provided

__all__ = ["Future", "collect_all", "wait_all"]

T = TypeVar("T")


class Future(Generic[T]):
    def __init__(self, *, devices: Any = None) -> None:
        self._done, self._value, self._error = threading.Event(), None, None
        self._callbacks: list[Callable[[Future[T]], None]] = []

    def done(self) -> bool:
        return self._done.is_set()

    def set_result(self, result: T) -> None:
        self._finish(result, None)

    def set_exception(self, error: BaseException) -> None:
        self._finish(None, error)

    def _finish(self, value: Any, error: BaseException | None) -> None:
        if self.done():
            raise RuntimeError("Future: its result is already set")
        self._value, self._error = value, error
        self._done.set()
        for callback in self._callbacks:
            callback(self)

    def wait(self) -> T:
        self._done.wait()
        return self.value()

    def value(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        if self.done():
            callback(self)
        else:
            self._callbacks.append(callback)

    def then(self, callback: Callable[[Future[T]], Any]) -> Future[Any]:
        """A future of `callback(self)`, set once this one is."""
        after: Future[Any] = Future()

        def chain(done: Future[T]) -> None:
            try:
                after.set_result(callback(done))
            except BaseException as e:  # noqa: BLE001 (the next future carries it)
                after.set_exception(e)

        self.add_done_callback(chain)
        return after


def wait_all(futures: list[Future]) -> list:
    return [f.wait() for f in futures]


def collect_all(futures: list[Future]) -> Future[list[Future]]:
    """A future set (to `futures`) once all of them are."""
    all_done: Future[list[Future]] = Future()

    def check(_: Any = None) -> None:
        if not all_done.done() and all(f.done() for f in futures):
            all_done.set_result(futures)

    for f in futures:
        f.add_done_callback(check)
    check()
    return all_done


def __getattr__(name: str) -> Any:
    raise _not_provided(__name__, name)
