"""The host's handle on one worker program, and a pool of them.

The host never trusts a worker to stay healthy: every request has an outer deadline
(the run's own timeout plus a grace period), and a worker that misses it, dies, or
sends something malformed is killed and replaced. A worker serves one request at a
time; the pool lets several threads use one Sandbox at once, queueing beyond its size.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from ..errors import SandboxClosedError, WorkerStartError
from ..worker import wire
from ..worker.protocol import FrameReader, ProtocolError, encode, make_room


class WorkerLost(Exception):
    """The worker died, wedged or broke the protocol; it has been killed."""


class WorkerProcess:
    """One warm worker program, spoken to over its stdin/stdout."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None,
                 cwd: str | None = None, start_timeout: float = 120.0) -> None:
        self.argv = list(argv)
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker
        self._reader = FrameReader()
        try:
            self.proc = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                env=env, cwd=cwd or tempfile.gettempdir(), start_new_session=True, close_fds=True,
            )
        except OSError as exc:
            raise WorkerStartError(f"could not start the worker program {self.argv[0]!r}: {exc}",
                                   fix="check that the runner is installed in this environment") from exc
        try:
            self.info = self._read(time.monotonic() + start_timeout)
        except WorkerLost as exc:
            tail = self.stderr_tail()
            self.kill()
            raise WorkerStartError(
                f"the worker program did not start: {exc}. Its error output:\n{tail}",
                fix="reinstall the runner into this environment (`make venv`, or "
                    "`pip install -e .`) and check that its dependencies import") from None
        if self.info.get("type") != wire.READY:
            self.kill()
            raise WorkerStartError(f"the worker program sent {self.info!r} instead of a ready message")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - limit))
            return self._stderr.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one message and wait for the answer; kills the worker on any failure."""
        deadline = time.monotonic() + timeout
        try:
            assert self.proc.stdin is not None
            frame = encode(message)
            make_room(self.proc.stdin.fileno(), len(frame))
            self.proc.stdin.write(frame)
            self.proc.stdin.flush()
        except (OSError, ValueError, ProtocolError) as exc:
            self.kill()
            raise WorkerLost(f"could not send the request to the worker: {exc}") from None
        try:
            reply = self._read(deadline)
        except WorkerLost:
            self.kill()
            raise
        expected = wire.REPLY_TYPES.get(message.get("type", ""))
        if ("id" in message and reply.get("id") != message["id"]) or \
                (expected is not None and reply.get("type") != expected):
            # Only a worker whose channel was tampered with answers the wrong request.
            self.kill()
            raise WorkerLost("the worker answered a different request than the one sent")
        return reply

    def _read(self, deadline: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                message = self._reader.next()
            except ProtocolError as exc:
                raise WorkerLost(f"the worker broke the protocol: {exc}") from None
            if message is not None:
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerLost("the worker stopped answering before the deadline")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, max(self._reader.needed(), 1 << 16))
            if not chunk:
                try:  # its output closed: it is exiting, so its status comes soon
                    code: int | None = self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                raise WorkerLost("the worker exited" + (f" (status {code})" if code is not None
                                                        else " (it closed its output)"))
            self._reader.feed(chunk)

    def kill(self) -> None:
        self.kill_from_outside()
        self._reap()

    def kill_from_outside(self) -> None:
        """Kill the worker and its runs, from a thread other than the one waiting on it:
        only the signal (that thread sees the end of its output, and reaps it)."""
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self, timeout: float = 2.0) -> None:
        """Ask the worker to stop (end of its input), and kill it if it does not."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)
        self.kill()

    def _reap(self) -> None:
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        with suppress(OSError):
            self._stderr.close()


class WorkerPool:
    """Up to `size` workers, created on demand, shared by threads."""

    def __init__(self, factory: Callable[[], WorkerProcess], size: int) -> None:
        self._factory = factory
        self._size = max(1, size)
        self._idle: list[WorkerProcess] = []
        self._count = 0
        self._closed = False
        self._cond = threading.Condition()

    @property
    def size(self) -> int:
        return self._size

    def take(self) -> WorkerProcess:
        """A worker that leaves the pool (for a session, which may hold it for long):
        an idle one if there is one, else a new one; never waits, and the pool may start
        another worker in its place, so sessions can never starve plain runs."""
        with self._cond:
            if self._closed:
                raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
            while self._idle:
                worker = self._idle.pop()
                self._count -= 1
                self._cond.notify()
                if worker.alive():
                    return worker
                worker.kill()
        return self._factory()

    def give_back(self, worker: WorkerProcess, *, healthy: bool) -> None:
        """Return a worker from `take`: kept if the pool has room, else closed."""
        with self._cond:
            if healthy and not self._closed and worker.alive() and self._count < self._size:
                self._count += 1
                self._idle.append(worker)
                self._cond.notify()
                return
        if healthy:
            worker.close()
        else:
            worker.kill()

    def _acquire(self) -> WorkerProcess:
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
                while self._idle:
                    worker = self._idle.pop()
                    if worker.alive():
                        return worker
                    worker.kill()
                    self._count -= 1
                if self._count < self._size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return self._factory()
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _release(self, worker: WorkerProcess, healthy: bool) -> None:
        with self._cond:
            if healthy and not self._closed and worker.alive():
                self._idle.append(worker)
                self._cond.notify()
                return
            self._count -= 1
            self._cond.notify()
        worker.kill()

    @contextmanager
    def lease(self) -> Iterator[WorkerProcess]:
        """A worker for one request; a worker whose request raised is discarded."""
        worker = self._acquire()
        healthy = False
        try:
            yield worker
            healthy = True
        finally:
            self._release(worker, healthy)

    def warm(self) -> None:
        """Start one worker now instead of at the first run."""
        with self.lease():
            pass

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            worker.close()
