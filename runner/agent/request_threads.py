"""Daemon threads that make the model client's requests, reused from one request to the next.

A request is made on one of these rather than in the caller's thread so that the caller can
stop waiting for it at once (Ctrl-C in the main thread, or `OpenAIChat.stop` when a job in
worker threads is stopping) without waiting for the server. They are daemon threads: an
abandoned request never keeps the process from exiting. They are reused (a new one starts
only when every one is busy), because every thread a process starts can grow its memory
arenas, and a process's address space is what a forked child (the answer checker's
workers) inherits under its limit.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class Call:
    """One call handed to a request thread: `finished` is set once it has a value or an
    error (or when the caller gives up on it)."""

    def __init__(self, work: Callable[[], Any]) -> None:
        self.work = work
        self.finished = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = False

    def run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as exc:  # handed to the caller, which decides what it means
            self.error = exc
        finally:
            self.done = True
            self.finished.set()


class RequestThreads:
    """A pool of daemon threads that grows to the number of calls in flight at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[Call] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._count = 0

    def submit(self, work: Callable[[], Any]) -> Call:
        call = Call(work)
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._count += 1
                threading.Thread(target=self._serve, name=f"{self.name}-{self._count}",
                                 daemon=True).start()
        self._calls.put(call)
        return call

    def _serve(self) -> None:
        while True:
            self._calls.get().run()
            with self._lock:
                self._idle += 1


REQUESTS = RequestThreads("runner-llm-request")
