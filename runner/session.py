"""Sessions: consecutive code blocks that share state, as a notebook or a MathChat
conversation needs.

A session keeps one child process alive between blocks, so variables, imports and
functions defined in one block are there in the next. Every block gets the same
per-block limits, and the session as a whole has a time budget. A block that is killed
(timeout, memory) ends the child; the next block starts a fresh one, and its result
says so in `meta` of the log and in `Session.restarts`.

Threads: a session is one namespace in one process, so its blocks run one at a time. A
`Session` may be shared by several threads; their blocks are serialised by a lock (each
waits for the block in progress), in the order the lock grants, and `close()` waits for
the block in progress to finish. For blocks that should run in parallel, use one session
per thread (or plain `Sandbox.run`, which is parallel up to the pool size).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .errors import SandboxClosedError
from .ids import new_id
from .types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Status

if TYPE_CHECKING:
    from .backends.worker_backend import BackendSession
    from .sandbox import Sandbox


class Session:
    """Use as a context manager: `with sandbox.session() as s: s.run(block)`.

    Safe to share between threads: blocks run one at a time (see the module docstring)."""

    def __init__(self, sandbox: Sandbox, backend_session: BackendSession, *, limits: Limits,
                 packages: Iterable[str], budget_s: float | None) -> None:
        self.id = new_id()
        self._sandbox = sandbox
        self._backend_session = backend_session
        self.limits = limits
        self.packages = tuple(packages)
        self.budget_s = budget_s
        self.used_s = 0.0
        self.blocks = 0
        self.restarts = 0
        self._closed = False
        # One block at a time: the worker's session child, the budget and the block count
        # are shared state that concurrent blocks would corrupt.
        self._lock = threading.Lock()

    def run(self, code: str, *, limits: Limits | None = None,
            meta: dict[str, Any] | None = None) -> ExecutionResult:
        """Run one block in the session's namespace; other threads' blocks wait for it."""
        with self._lock:
            return self._run(code, limits, meta)

    def _run(self, code: str, limits: Limits | None,
             meta: dict[str, Any] | None) -> ExecutionResult:
        if self._closed or self._sandbox.closed:
            raise SandboxClosedError("this session is closed", fix="open a new session")
        limits = limits or self.limits
        request = ExecutionRequest(code=code, limits=limits, packages=self.packages)
        run_id = new_id()
        block_meta = {"session": self.id, "block": self.blocks, **(meta or {})}
        remaining = None if self.budget_s is None else self.budget_s - self.used_s
        if remaining is not None and remaining <= 0:
            result = ExecutionResult(
                id=run_id, backend=self._sandbox.backend, status=Status.TIMEOUT, limits=limits,
                error=ErrorInfo(type="Timeout", message=(
                    f"the session's time budget of {self.budget_s:g} s is used up; "
                    "start a new session to run more code")))
        else:
            if remaining is not None and remaining < limits.timeout_s:
                request = request.model_copy(update={
                    "limits": limits.with_overrides(timeout_s=max(remaining, 0.001))})
            result, fresh = self._backend_session.run(request, run_id=run_id)
            if fresh and self.blocks > 0:
                self.restarts += 1
                block_meta["session_restarted"] = True
            self.used_s += result.duration_ms / 1000
        self.blocks += 1
        self._sandbox.record(request, result, block_meta)
        return result

    def close(self) -> None:
        """End the session (after the block in progress, if any). Idempotent."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._backend_session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
