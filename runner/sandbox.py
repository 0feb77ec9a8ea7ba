"""`Sandbox`: the one entry point for running code, whatever the isolation tier.

It picks a backend, fills in default limits, gives every run an id, and records every
run in the log store. A log write that fails never costs the caller the result.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Iterable
from types import TracebackType
from typing import Any

from .api_checks import (
    build_request,
    code_argument,
    limits_argument,
    meta_argument,
    packages_argument,
    request_argument,
)
from .backends.base import DEFAULT_BACKEND, Backend
from .backends.registry import create_backend
from .budget import TimeBudget
from .cancellation import Cancellation
from .errors import ConfigurationError, SandboxClosedError
from .files import input_files
from .ids import new_id
from .logs import LogStore
from .session import Session, interrupted_result
from .stopping import RunInterrupted
from .types import ExecutionRequest, ExecutionResult, Limits

DEFAULT_SOURCE = "api"
INTEGRATION_META_KEY = "integration"  # a run's meta names the framework it came through

log = logging.getLogger(__name__)


class Sandbox:
    """Runs untrusted Python. A context manager; safe to share between threads.

    >>> with Sandbox(backend="restricted") as sb:
    ...     sb.run("print(2**10)").stdout
    '1024\\n'
    """

    def __init__(self, backend: str = DEFAULT_BACKEND, *, limits: Limits | None = None,
                 log_store: LogStore | bool = True, source: str = DEFAULT_SOURCE,
                 **backend_options: Any) -> None:
        self.backend_name = backend
        self.limits = limits_argument(limits, Limits())
        if not isinstance(source, str):
            raise ConfigurationError(f"source must be a string (e.g. 'api'), got {type(source).__name__}",
                                     fix="pass source='api', or leave it out")
        if not isinstance(log_store, (bool, LogStore)):
            raise ConfigurationError(f"log_store must be True, False or a LogStore, got "
                                     f"{type(log_store).__name__}", fix="pass log_store=LogStore(path)")
        self.source = source
        self._backend: Backend = create_backend(backend, **backend_options)
        self._owns_store = log_store is True
        self._store: LogStore | None
        if log_store is True:
            # A log that cannot be opened (a full disk, say) must not stop the run: its
            # records go to the spool, and a warning says why.
            self._store = LogStore.for_writing()
        elif log_store is False:
            self._store = None
        else:
            self._store = log_store
        self._closed = False
        self._lock = threading.Lock()
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()

    @property
    def log_store(self) -> LogStore | None:
        return self._store

    def warm(self) -> None:
        """Start a worker now, so the first run does not pay for the start-up."""
        self._backend.warm()

    def run(self, code: str, *, limits: Limits | None = None,
            packages: Iterable[str] | None = None, meta: dict[str, Any] | None = None,
            files: Any = None, cancel: Cancellation | None = None) -> ExecutionResult:
        """Run a block of code; its output, error, timings and the files it made come back
        as a result. `files` ({name: bytes, text or a Path}) are in its working directory
        when it starts (runner.files has the rules). `cancel` (runner.cancellation) stops
        it from another thread."""
        request = build_request(code=code_argument(code), limits=limits_argument(limits, self.limits),
                                packages=packages_argument(packages), files=input_files(files))
        return self.execute(request, meta=meta, cancel=cancel)

    def execute(self, request: ExecutionRequest, *, meta: dict[str, Any] | None = None,
                execution_id: str | None = None,
                cancel: Cancellation | None = None) -> ExecutionResult:
        """Run any request (code, a function call, a preamble) and log it.

        `execution_id` is the id the result and its log row get (a new one by default; a
        caller that must name the execution before it ends, like the agent, passes one).
        Ctrl-C (KeyboardInterrupt) while it runs is logged as a `crashed` execution that
        says so, and then raised on as `RunInterrupted` (a KeyboardInterrupt holding that
        result): the caller stops, and the log tells what happened."""
        request = request_argument(request)
        meta = meta_argument(meta)
        if self._closed:
            raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
        run_id = execution_id or new_id()
        started = time.monotonic()
        try:
            result = self._backend.run(request, run_id=run_id, cancel=cancel)
        except KeyboardInterrupt as exc:
            stopped = interrupted_result(run_id, self.backend, request.limits, started)
            self.record(request, stopped, meta)
            raise RunInterrupted(stopped) from exc
        self.record(request, result, meta)
        return result

    def check_packages(self, packages: Iterable[str]) -> None:
        """A ConfigurationError now, saying why, when this tier cannot have `packages`
        (a requirement that does not parse, a package outside the allowlist, on the
        restricted tier anything beyond its modules), found without installing anything:
        for a caller that takes packages at construction and runs later."""
        wanted = packages_argument(packages)
        refusal = getattr(self._backend, "package_refusal", None)
        problem = refusal(list(wanted)) if wanted and callable(refusal) else None
        if problem:
            raise ConfigurationError(problem, fix=f"ask for packages the {self.backend} tier "
                                                  "has, or use a tier that installs them "
                                                  "(jail or docker)")

    def session(self, *, limits: Limits | None = None, packages: Iterable[str] | None = None,
                budget_s: float | None = None) -> Session:
        """Blocks that share state (variables persist), each with `limits`, all within
        `budget_s` seconds of run time. Holds one worker until closed."""
        if self._closed:
            raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
        limits = limits_argument(limits, self.limits)
        packages = packages_argument(packages)
        budget = TimeBudget(budget_s)  # checked before a worker is taken
        template = build_request(code="", limits=limits, packages=packages)
        session = Session(self, self._backend.open_session(template), limits=limits,
                          packages=packages, budget=budget)
        self._sessions.add(session)
        return session

    @property
    def closed(self) -> bool:
        return self._closed

    def call(self, function: Any, arguments_or_name: Any = None, arguments: Any = None, *,
             limits: Limits | None = None, meta: dict[str, Any] | None = None,
             execution_id: str | None = None, files: Any = None) -> ExecutionResult:
        """Call a sandboxed function: `call(spec_or_tool, args)` or `call(function_set, name, args)`.

        Arguments are validated first (status `invalid_args` if they do not fit); see
        `runner.functions.call`.
        """
        from .functions.call import call_function

        if self._closed:  # also for calls refused before running, which never reach execute()
            raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
        limits = limits_argument(limits, self.limits)
        meta = meta_argument(meta)
        from .functions.sets import FunctionSet
        from .functions.spec import NAME_PATTERN

        # A string is a function's name for a set; for one function it is the name only if
        # it looks like one (else it is the arguments as JSON text, as a model wrote them).
        if isinstance(arguments_or_name, str) and (
                isinstance(function, FunctionSet) or NAME_PATTERN.match(arguments_or_name)):
            return call_function(self, function, arguments_or_name, arguments, limits=limits,
                                 meta=meta, execution_id=execution_id, files=input_files(files))
        return call_function(self, function, None, arguments_or_name, limits=limits, meta=meta,
                             execution_id=execution_id, files=input_files(files))

    @property
    def backend(self) -> str:
        return self._backend.name

    def record(self, request: ExecutionRequest, result: ExecutionResult,
               meta: dict[str, Any] | None = None) -> None:
        """Log a result; also for results decided without running (e.g. invalid arguments).
        A run that came through a framework integration (its meta names it) is logged with
        the integration as its source, unless this sandbox was given a source of its own."""
        if self._store is None:
            return
        source = self.source
        through = (meta or {}).get(INTEGRATION_META_KEY)
        if source == DEFAULT_SOURCE and isinstance(through, str) and through:
            source = through
        try:
            self._store.record_execution(request, result, source=source, meta=meta)
        except Exception:  # the store spools on its own; this is the last line of defence
            log.warning("could not log execution %s", result.id, exc_info=True)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for session in list(self._sessions):  # their workers are outside the pools
            session.close()
        self._backend.close()
        if self._owns_store and self._store is not None:
            self._store.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
