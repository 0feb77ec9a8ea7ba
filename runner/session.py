"""Sessions: consecutive code blocks that share state, as a notebook or a MathChat
conversation needs.

A session keeps one child process alive between blocks, so variables, imports and
functions defined in one block are there in the next. The session's memory, process,
open-file and file-size limits hold for all its blocks (set when it opens); each block
has its own time and CPU limits, and the session as a whole has a time budget. Between
blocks the session's process is stopped: nothing it started runs on. A block that is killed
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
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from .api_checks import build_request, code_argument, limits_argument, meta_argument
from .budget import TimeBudget
from .cancellation import Cancellation
from .errors import ConfigurationError, SandboxClosedError
from .files import input_files
from .ids import new_id
from .stopping import RunInterrupted, stopped_by
from .types import ErrorInfo, ExecutionResult, InputFile, Limits, Status
from .worker import error_types

if TYPE_CHECKING:
    from .backends.worker_backend import BackendSession
    from .sandbox import Sandbox


class Session:
    """Use as a context manager: `with sandbox.session() as s: s.run(block)`.

    Safe to share between threads: blocks run one at a time (see the module docstring)."""

    def __init__(self, sandbox: Sandbox, backend_session: BackendSession, *, limits: Limits,
                 packages: Iterable[str], budget: TimeBudget) -> None:
        self.id = new_id()
        self._sandbox = sandbox
        self._backend_session = backend_session
        self.limits = limits
        self.packages = tuple(packages)
        self.budget = budget
        self.blocks = 0
        self.restarts = 0
        self._ended: tuple[int, ExecutionResult] | None = None  # the last block that did not end ok
        self._closed = False
        # One block at a time: the worker's session child, the budget and the block count
        # are shared state that concurrent blocks would corrupt.
        self._lock = threading.Lock()

    def run(self, code: str, *, limits: Limits | None = None,
            meta: dict[str, Any] | None = None, execution_id: str | None = None,
            files: Any = None, cancel: Cancellation | None = None) -> ExecutionResult:
        """Run one block in the session's namespace (`execution_id`: as for Sandbox.execute);
        other threads' blocks wait for it. `files` join the session's directory (which
        keeps what earlier blocks made) before the block starts. `cancel` stops the block
        from another thread (the session's state goes with it: the next block starts
        afresh)."""
        with self._lock:
            return self._run(code, limits, meta, execution_id, input_files(files), cancel)

    def _run(self, code: str, limits: Limits | None, meta: dict[str, Any] | None,
             execution_id: str | None, files: tuple[InputFile, ...] = (),
             cancel: Cancellation | None = None) -> ExecutionResult:
        if self._closed or self._sandbox.closed:
            raise SandboxClosedError("this session is closed", fix="open a new session")
        limits = limits_argument(limits, self.limits)
        _check_session_limits(limits, self.limits)
        request = build_request(code=code_argument(code), limits=limits, packages=self.packages,
                                files=files)
        block_meta = {"session": self.id, "block": self.blocks, **(meta_argument(meta) or {})}
        run_id = execution_id or new_id()
        if self.budget.exhausted:
            result = ExecutionResult(
                id=run_id, backend=self._sandbox.backend, status=Status.TIMEOUT, limits=limits,
                error=ErrorInfo(type=error_types.TIMEOUT, message=(
                    f"the session's {self.budget.used_up_message()}; start a new session to run "
                    "more code")))
        else:
            request = request.model_copy(update={"limits": self.budget.limits_for(limits)})
            started = time.monotonic()
            try:
                result, fresh = self._backend_session.run(request, run_id=run_id, cancel=cancel)
            except KeyboardInterrupt as exc:
                self.blocks += 1
                stopped = interrupted_result(run_id, self._sandbox.backend, request.limits,
                                             started)
                self._sandbox.record(request, stopped, block_meta)
                raise RunInterrupted(stopped) from exc
            if fresh and self.blocks > 0:
                self.restarts += 1
                block_meta["session_restarted"] = True
                result = self._say_state_lost(result)
            self.budget.charge(result)
        if result.status is not Status.OK:
            self._ended = (self.blocks, result)
        self.blocks += 1
        self._sandbox.record(request, result, block_meta)
        return result

    def _say_state_lost(self, result: ExecutionResult) -> ExecutionResult:
        """A block that ran in a fresh session and missed a name an earlier block defined:
        its NameError says the state was lost, when and why (the earlier block's end),
        instead of leaving the model to think the name was never defined."""
        error = result.error
        if error is None or error.type not in _LOST_NAME_ERRORS:
            return result
        why = "an earlier block's process ended"
        if self._ended is not None:
            number, ended = self._ended
            reason = ended.error.message if ended.error is not None else str(ended.status)
            why = f"block {number + 1} ended {ended.status}: {reason.split(';')[0]}"
        note = (f"the session's state was lost: {why}; this block ran in a fresh session, "
                "so what earlier blocks defined is gone: define it again")
        update = {"message": f"{error.message} ({note})"}
        if error.traceback:  # what integrations show a model: the note ends it too
            update["traceback"] = f"{error.traceback.rstrip(chr(10))}\nNote: {note}\n"
        return result.model_copy(update={"error": error.model_copy(update=update)})

    @property
    def budget_s(self) -> float | None:
        return self.budget.total_s

    @property
    def used_s(self) -> float:
        return self.budget.used_s

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


# What a block raises when a name an earlier block made is missing.
_LOST_NAME_ERRORS = frozenset({"NameError", "UnboundLocalError"})

# What a session's process holds for all its blocks: set when it starts, the same for every
# block (a later block could not get more than the first: raising a hard limit needs a
# privilege the sandbox never has; its directory is mounted once). A block's time and CPU
# limits are its own.
SESSION_WIDE_LIMITS = ("memory_mb", "max_processes", "max_open_files", "max_file_size_mb",
                       "disk_mb")


def _check_session_limits(block: Limits, session: Limits) -> None:
    different = {name: getattr(block, name) for name in SESSION_WIDE_LIMITS
                 if getattr(block, name) != getattr(session, name)}
    if different:
        asked = ", ".join(f"{name}={value}" for name, value in different.items())
        held = ", ".join(f"{name}={getattr(session, name)}" for name in different)
        raise ConfigurationError(
            f"a session's memory, process, open-file, file-size and directory limits are the "
            f"ones it was opened with ({held}); this block asked for {asked}",
            fix=f"open the session with those limits: sandbox.session(limits=Limits({asked}, "
                "...)); a block may change only timeout_s, cpu_s and max_output_bytes")


def interrupted_result(run_id: str, backend: str, limits: Limits, started: float
                       ) -> ExecutionResult:
    """What the log keeps for a run the caller stopped with Ctrl-C while it ran (since
    `started`, a time.monotonic())."""
    elapsed = time.monotonic() - started
    return ExecutionResult(
        id=run_id, backend=backend, status=Status.CRASHED, limits=limits,
        started_at=datetime.now(timezone.utc) - timedelta(seconds=elapsed),
        duration_ms=round(elapsed * 1000),
        error=ErrorInfo(type=error_types.INTERRUPTED, message=(
            f"the caller was interrupted ({stopped_by()}) while this ran; its output and result "
            "were not collected")))
