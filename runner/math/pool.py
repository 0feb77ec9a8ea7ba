"""A small pool of long-lived checker worker processes, with deadlines enforced from outside.

Math-Verify's own timeout is `signal.alarm`, which only works on the main thread and cannot
interrupt a long C call, and a pathological answer can exhaust memory or the C stack. So
every comparison runs in a separate process (`runner.math.checker_worker`) that has imported
sympy and Math-Verify once; the host waits for its reply with a deadline, and on the
deadline, a crash, or a garbled reply it kills the worker's whole process group and starts
a replacement in the background. The caller gets a verdict in every case.

Workers start lazily (the first comparison that needs one) and concurrently; `close()` ends
them. The pool is thread-safe: each caller thread borrows one idle worker at a time.
"""

from __future__ import annotations

import contextlib
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from pydantic import ValidationError

from ..errors import RunnerError
from .wire import MAX_REPLY_BYTES, CompareReply, CompareRequest, WorkerReady

# Importing sympy and Math-Verify takes 1-2 s on an idle machine; allow for a busy one.
START_TIMEOUT_S = 90.0
DEFAULT_MEMORY_MB = 2048


class CheckerUnavailableError(RunnerError):
    """The checker's worker process cannot start (Math-Verify missing or broken)."""

    code = "CHECKER_UNAVAILABLE"


@dataclass(frozen=True, slots=True)
class Failure:
    """A comparison the worker did not answer: `rule` is "timeout" or "crashed"."""

    rule: str
    reason: str


class _Worker:
    """One worker process and the line-oriented channel to it."""

    def __init__(self, memory_mb: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runner.math.checker_worker", str(memory_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: one kill ends everything it made
            env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"})
        assert self.process.stdin is not None and self.process.stdout is not None
        self._stdin = self.process.stdin
        self._stdout_fd = self.process.stdout.fileno()
        os.set_blocking(self._stdout_fd, False)
        self._buffer = bytearray()
        self.ready: WorkerReady | None = None

    def _read_line(self, deadline: float) -> bytes | None:
        """One line from the worker, or None on deadline, end of stream or an oversized line."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._stdout_fd, selectors.EVENT_READ)
            while True:
                newline = self._buffer.find(b"\n")
                if newline >= 0:
                    line = bytes(self._buffer[:newline])
                    del self._buffer[:newline + 1]
                    return line
                if len(self._buffer) > MAX_REPLY_BYTES:
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                try:
                    chunk = os.read(self._stdout_fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    return None
                self._buffer += chunk

    def wait_ready(self) -> bool:
        if self.ready is not None:
            return True
        line = self._read_line(time.monotonic() + START_TIMEOUT_S)
        if line is None:
            return False
        try:
            self.ready = WorkerReady.model_validate_json(line)
        except ValidationError:
            return False
        return self.ready.ready

    def compare(self, request: CompareRequest, hard_timeout_s: float) -> CompareReply | Failure:
        deadline = time.monotonic() + hard_timeout_s
        try:
            self._stdin.write(request.model_dump_json().encode("utf-8") + b"\n")
            self._stdin.flush()
        except (BrokenPipeError, OSError):
            return Failure("crashed", "the checker process ended before the comparison")
        line = self._read_line(deadline)
        if line is None:
            if self.process.poll() is not None:
                return Failure("crashed", "the checker process crashed on this answer "
                                          f"(exit status {self.process.returncode})")
            if time.monotonic() >= deadline:
                return Failure("timeout", f"the comparison took longer than "
                                          f"{hard_timeout_s:g} s and was stopped")
            return Failure("crashed", "the checker process sent an oversized reply")
        try:
            reply = CompareReply.model_validate_json(line)
        except ValidationError:
            return Failure("crashed", "the checker process sent a malformed reply")
        if reply.id != request.id:
            return Failure("crashed", "the checker process answered another request")
        return reply

    def kill(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


class WorkerPool:
    """`size` checker processes; `compare()` borrows one for a request and returns it."""

    def __init__(self, size: int, *, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        if size < 1:
            raise ValueError("a checker pool needs at least one worker")
        self.size = size
        self.memory_mb = memory_mb
        # Only started, ready workers are queued; None means closed, a string a failed start.
        self._idle: queue.SimpleQueue[_Worker | str | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._all: set[_Worker] = set()
        self.versions: dict[str, str] = {}
        self.replacements = 0  # how many workers were killed and replaced (for tests, benches)

    def _launch(self) -> None:
        """Start a worker in the background; it joins the idle queue once it is ready, so no
        comparison waits for an import while another worker could serve it."""
        threading.Thread(target=self._bring_up, name="runner-checker-start", daemon=True).start()

    def _bring_up(self) -> None:
        try:
            worker = _Worker(self.memory_mb)
        except OSError as exc:
            self._idle.put(f"cannot start a process: {exc.strerror}")
            return
        with self._lock:
            if self._closed:
                worker.kill()
                return
            self._all.add(worker)
        if worker.wait_ready():
            if worker.ready is not None and not self.versions:
                self.versions = dict(worker.ready.versions)
            self._idle.put(worker)
        else:
            self._retire(worker)
            self._idle.put("the process ended or stalled before it was ready")

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for _ in range(self.size):
            self._launch()

    def _retire(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.discard(worker)

    def _closed_error(self) -> CheckerUnavailableError:
        return CheckerUnavailableError("the answer checker was closed", fix="create a new Checker")

    def compare(self, request: CompareRequest, hard_timeout_s: float) -> CompareReply | Failure:
        if self._closed:
            raise self._closed_error()
        self._start()
        worker = self._idle.get()
        if worker is None:  # closed while waiting: wake the next waiter too
            self._idle.put(None)
            raise self._closed_error()
        if isinstance(worker, str):
            if not self._closed:
                self._launch()  # try again for the next comparison; this one has no worker
            raise CheckerUnavailableError(
                f"the answer checker's worker process did not start ({worker})",
                fix="install the checker's dependencies: pip install "
                    "'math-verify[antlr4_13_2]' (run `python -m runner.math.checker_worker` "
                    "to see the error)")
        outcome = worker.compare(request, hard_timeout_s)
        if isinstance(outcome, Failure) or outcome.retire:
            # Whatever state it is in, this process is not trusted again.
            self._retire(worker)
            with self._lock:
                self.replacements += 1
            if not self._closed:
                self._launch()
        else:
            self._idle.put(worker)
        return outcome

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = list(self._all)
            self._all.clear()
        for worker in workers:
            worker.kill()
        self._idle.put(None)
