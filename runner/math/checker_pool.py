"""The answer checker's worker processes, each a pebble process pool of one, with deadlines
enforced from outside.

Math-Verify's own timeout is `signal.alarm`, which only works on the main thread and cannot
interrupt a long C call, and a pathological answer can exhaust memory or the C stack. So
every comparison runs in a separate process (`runner.math.checker_worker`) that has imported
sympy and Math-Verify once. pebble runs each comparison with a deadline; on the deadline
or a crash it kills the process and starts a replacement, and the caller gets a verdict in
every case.

Why a pool of one per worker rather than one pool of several: a worker that reports it
was interrupted mid-computation (`retire`) may hold half-built library caches and must
not serve again, and pebble can stop a whole pool but not pick one of its processes.
Each slot is borrowed by one caller thread at a time, so stopping its pool stops exactly
the process that must go.

Processes are forked from the caller (`spawn` or `forkserver` would run the caller's main
script again in every worker, which a script without an `if __name__ == "__main__"`
guard cannot survive), lazily on the first comparison, all slots at once; each imports
the checker's libraries itself, so the caller does not pay for them. An idle slot parses
a few representative answers at a time until all are warm.

Whether a process started is asked, never inferred. A process that cannot start says
why (`checker_worker.started`, and `run` replies `unavailable`). pebble's
BrokenProcessPool only says that a process ended while pebble knew of no task running
on it: at its start, but equally while idle (killed from outside) or just as it took a
task whose acknowledgement pebble had not read yet (a crash on that answer). So on that
error the slot gets a new process and the caller waits for it to start: if it does, the
request is answered (run there, or a `crashed` verdict if it was the one running); only
a new process that cannot start either makes the checker unavailable.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import threading
from concurrent.futures import Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from pebble import ProcessExpired, ProcessPool

from ..errors import RunnerError
from . import checker_worker
from .checker_worker import UNAVAILABLE, WARM_UP, CompareReply, CompareRequest

# Importing sympy and Math-Verify takes 1-2 s on an idle machine; allow for a busy one.
START_TIMEOUT_S = 90.0
DEFAULT_MEMORY_MB = 2048
_WARM_CHUNK = 8  # forms parsed per idle turn: a request waits for at most one chunk
_FORK = multiprocessing.get_context("fork")


class CheckerUnavailableError(RunnerError):
    """The checker's worker process cannot start (Math-Verify missing or broken)."""

    code = "CHECKER_UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class Failure:
    """A comparison the worker did not answer: `rule` is "timeout" or "crashed"."""

    rule: str
    reason: str


class _Slot:
    """One worker process: a pebble pool of one, and the warm-up forms it has still to parse."""

    def __init__(self, memory_mb: int) -> None:
        self.pool = ProcessPool(max_workers=1, initializer=checker_worker.initialize,
                                initargs=(memory_mb,), context=_FORK)
        self._cold = list(WARM_UP)
        # The first task, which also starts the process now (no caller waits for its
        # imports): whether it started, for `wait_ready`.
        self.ready: Future[str | None]
        try:
            self.ready = self.pool.schedule(checker_worker.started)
        except RuntimeError as exc:  # pebble could not fork it (BrokenProcessPool is one)
            self.ready = Future()
            self.ready.set_exception(exc)
        self.warm_some()

    def wait_ready(self) -> None:
        """Wait until the process has started; CheckerUnavailableError if it does not."""
        try:
            failure = self.ready.result(timeout=START_TIMEOUT_S)
        except TimeoutError:
            raise _not_started("it stalled before it was ready") from None
        except Exception:  # BrokenProcessPool, ProcessExpired: it ended before answering
            raise _not_started("the process ended before it was ready") from None
        if failure is not None:
            raise _not_started(failure)

    def warm_some(self) -> None:
        """Queue the next few warm-up forms; a request queued after them waits for them."""
        forms, self._cold = tuple(self._cold[:_WARM_CHUNK]), self._cold[_WARM_CHUNK:]
        if forms:
            # A pool that broke meanwhile (its process could not start) refuses the work;
            # the next request finds that out and says so.
            with contextlib.suppress(RuntimeError):
                self.pool.schedule(checker_worker.warm, args=(forms,),
                                   timeout=2.0 * len(forms) + 1)

    def replaced(self) -> None:
        """pebble started a new process after a kill: it is cold again."""
        self._cold = list(WARM_UP)

    def pid(self) -> int:
        return int(self.pool.schedule(os.getpid).result(timeout=START_TIMEOUT_S))

    def stop(self) -> None:
        self.pool.stop()  # type: ignore[no-untyped-call]  # (pebble leaves it unannotated)
        self.pool.join(timeout=10)


class CheckerPool:
    """`size` checker processes; `compare()` borrows one for a request and gives it back."""

    def __init__(self, size: int, *, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        if size < 1:
            raise ValueError("a checker pool needs at least one worker")
        self.size = size
        self.memory_mb = memory_mb
        self._idle: queue.SimpleQueue[_Slot | None] = queue.SimpleQueue()  # None: closed
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._slots: set[_Slot] = set()
        self.replacements = 0  # how many workers were killed and replaced (for tests, benches)

    def compare(self, request: CompareRequest, hard_timeout_s: float) -> CompareReply | Failure:
        """The worker's reply, or a Failure (timeout, crash, error); CheckerUnavailableError
        only when a new worker process cannot start, or the pool is closed."""
        slot = self._borrow()
        try:
            future = slot.pool.schedule(checker_worker.run, args=(request,), timeout=hard_timeout_s)
        except RuntimeError:
            # The pool broke before this request: its process ended with no task pebble
            # knew of, at its start or later (see the module's docstring). The request
            # runs on a new process, if one starts.
            slot = self._renew(slot, counted=False)
            try:
                future = slot.pool.schedule(checker_worker.run, args=(request,),
                                            timeout=hard_timeout_s)
            except RuntimeError:
                self._replace(slot, counted=False)
                raise _not_started("the process ended before it was ready") from None
        # pebble's deadline counts from when the worker takes the request; this one also
        # covers a worker that never gets that far (it cannot start).
        wait([future], timeout=START_TIMEOUT_S + hard_timeout_s)
        if not future.done():  # stopping the slot's pool below ends the request too
            self._replace(slot, counted=False)
            raise _not_started("it stalled before it was ready")
        error = future.exception()
        if isinstance(error, BrokenProcessPool):
            # The process ended and pebble knew of no task on it: it did not start, or it
            # ended as it took this request. A new process tells which.
            self._release(self._renew(slot, counted=True))
            return Failure("crashed", "the checker process ended as it took this answer")
        if isinstance(error, TimeoutError):
            self._replaced_by_pebble(slot)
            return Failure("timeout", f"the comparison took longer than {hard_timeout_s:g} s "
                                      "and was stopped")
        if isinstance(error, ProcessExpired):
            self._replaced_by_pebble(slot)
            return Failure("crashed", "the checker process crashed on this answer "
                                      f"(exit status {error.exitcode})")
        if error is not None:
            # `run` answers for whatever goes wrong in a comparison: this escaped it (or
            # pebble could not carry the reply). Not the caller's to handle, and this
            # process is not trusted again.
            self._replace(slot, counted=True)
            return Failure("error", f"the checker process failed: {type(error).__name__}")
        reply = future.result()
        if reply.rule == UNAVAILABLE:  # the process could not start, and says why
            self._replace(slot, counted=False)
            raise _not_started(reply.reason)
        if reply.retire:  # whatever state it is in, this process is not trusted again
            self._replace(slot, counted=True)
        else:
            self._release(slot)
        return reply

    def worker_pids(self) -> list[int]:
        """The process ids of the workers now running (for tests: each is asked)."""
        with self._lock:
            slots = list(self._slots)
        return [slot.pid() for slot in slots]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = list(self._slots)
            self._slots.clear()
        for slot in slots:
            slot.stop()
        self._idle.put(None)

    # -- internals ------------------------------------------------------------------------

    def _borrow(self) -> _Slot:
        self._start()
        slot = self._idle.get()
        if slot is None:  # closed while waiting: wake the next waiter too
            self._idle.put(None)
            raise _closed()
        return slot

    def _start(self) -> None:
        with self._lock:
            if self._closed:
                raise _closed()
            if self._started:
                return
            self._started = True
        for _ in range(self.size):
            self._add_slot()

    def _add_slot(self) -> None:
        slot = _Slot(self.memory_mb)
        with self._lock:
            if not self._closed:
                self._slots.add(slot)
                self._idle.put(slot)
                return
        slot.stop()

    def _release(self, slot: _Slot) -> None:
        slot.warm_some()
        self._idle.put(slot)

    def _replaced_by_pebble(self, slot: _Slot) -> None:
        with self._lock:
            self.replacements += 1
        slot.replaced()
        self._release(slot)

    def _replace(self, slot: _Slot, *, counted: bool) -> None:
        with self._lock:
            self._slots.discard(slot)
            if counted:
                self.replacements += 1
        slot.stop()
        self._add_slot()

    def _renew(self, slot: _Slot, *, counted: bool) -> _Slot:
        """Replace `slot` by a new process and wait for it to start: the new slot, still
        borrowed by the caller. CheckerUnavailableError if it does not start (a fresh
        slot then waits for the next caller, which tries again)."""
        with self._lock:
            self._slots.discard(slot)
            if counted:
                self.replacements += 1
        slot.stop()
        fresh = _Slot(self.memory_mb)
        try:
            fresh.wait_ready()
        except CheckerUnavailableError:
            fresh.stop()
            self._add_slot()
            raise
        with self._lock:
            if not self._closed:
                self._slots.add(fresh)
                return fresh
        fresh.stop()
        raise _closed()


def _closed() -> CheckerUnavailableError:
    return CheckerUnavailableError("the answer checker was closed", fix="create a new Checker")


def _not_started(why: str) -> CheckerUnavailableError:
    if why.startswith("MemoryError"):
        fix = "give the checker more memory: Checker(memory_mb=...)"
    else:
        fix = ("install the checker's dependencies: pip install 'math-verify[antlr4_13_2]' "
               "(`python -c 'from runner.math.checker_worker import main; main()'` shows "
               "the error)")
    return CheckerUnavailableError(
        f"the answer checker's worker process did not start ({why})", fix=fix)
