"""Stopping a run in progress from another thread: `Cancellation`.

A framework's caller cancels: an AutoGen `CancellationToken`, an MCP client's
`notifications/cancelled`, or a client that went away. The thread waiting for the run
cannot be interrupted the way Ctrl-C interrupts the main thread, so the backend registers
what stops the run (killing the worker that runs it: the kernel frees the run with it)
with `on_cancel` while it waits, and `cancel()` calls it at once. The run ends `crashed`
with the error type `Cancelled` in the log (it reads as `cancelled`), with how long it ran,
and a session whose block was cancelled starts its next block afresh (its worker died).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Cancellation"]


class Cancellation:
    """Set once by `cancel()`; what is registered with `on_cancel` runs then (or at once,
    if it already was). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._stops: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            stops, self._stops = self._stops, []
        for stop in stops:
            stop()

    @contextmanager
    def on_cancel(self, stop: Callable[[], None]) -> Iterator[None]:
        """While the block runs, `cancel()` calls `stop` (at once, if already cancelled)."""
        with self._lock:
            now = self._cancelled
            if not now:
                self._stops.append(stop)
        if now:
            stop()
        try:
            yield
        finally:
            with self._lock:
                if stop in self._stops:
                    self._stops.remove(stop)
