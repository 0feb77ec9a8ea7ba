"""What the restricted and Docker tiers share: warm worker programs behind a pool.

A tier says how to get a pool for a request (which worker program, which packages) and
everything else is here: sending the request with an outer deadline, turning the reply
into an `ExecutionResult`, replacing a worker that failed, and sessions (one worker
leased for a whole conversation, whose child keeps its namespace between blocks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from ..cancellation import Cancellation
from ..files import MIB, decode_outputs
from ..packages import PackageRequestError, parse_requirements, refused_by
from ..types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Status
from ..worker import error_types, wire
from ..worker.protocol import BLOBS, ProtocolError, encode
from .worker_process import WorkerLost, WorkerPool, WorkerProcess

OUTER_GRACE_S = 10.0  # beyond the run's own timeout, before the host gives up on a worker


@dataclass(frozen=True)
class Placement:
    """Where a request runs: the pool to use and the package versions it will see."""

    pool: WorkerPool
    packages: dict[str, str]


class RequestRefused(Exception):
    """A request refused before it reaches a worker; becomes a result with this status."""

    def __init__(self, status: Status, type_: str, message: str,
                 packages: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.packages = packages or {}


def result_from_reply(reply: dict[str, Any], base: dict[str, Any]) -> ExecutionResult:
    fields = {key: reply[key] for key in wire.RESULT_FIELDS if key in reply}
    if any(key in fields for key in wire.FILE_FIELDS):
        # Named, sized and typed here: the run wrote them, and may have written anything.
        limits = base.get("limits")
        cap = limits.max_returned_files_mb * MIB if isinstance(limits, Limits) else 0
        kept, left_out = decode_outputs(fields.pop("files", None),
                                        fields.pop("files_left_out", None), cap,
                                        reply.get(BLOBS))
        truncated = fields.pop("files_truncated", False) is True
        fields.update(files=kept, files_left_out=left_out, files_truncated=truncated or bool(left_out))
    if isinstance(fields.get("resources"), dict):
        # Only what the worker measures; where a run ran is the host's to say (the ray
        # backend), never the worker's.
        fields["resources"] = {key: value for key, value in fields["resources"].items()
                               if key in wire.RESOURCE_FIELDS}
    try:
        return ExecutionResult(**base, **fields)
    except ValidationError as exc:
        return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(
            type=error_types.PROTOCOL_ERROR, message=f"the worker sent a malformed result: {exc}"))


def refused_result(refusal: RequestRefused, base: dict[str, Any]) -> ExecutionResult:
    return ExecutionResult(**{**base, "packages": refusal.packages}, status=refusal.status,
                           error=ErrorInfo(type=refusal.type, message=refusal.message))


def lost_result(exc: WorkerLost, base: dict[str, Any], started: float) -> ExecutionResult:
    # The time is real (a wedged worker costs the whole outer deadline): budgets count it.
    return ExecutionResult(**base, status=Status.CRASHED,
                           duration_ms=int((time.monotonic() - started) * 1000),
                           error=ErrorInfo(type=error_types.WORKER_LOST,
                                           message=f"{exc}; the worker was replaced"))


def stopped_by(cancel: Cancellation | None, worker: WorkerProcess) -> AbstractContextManager[None]:
    """While the worker runs the request, cancelling kills it (the run goes with it)."""
    return cancel.on_cancel(worker.kill_from_outside) if cancel is not None else nullcontext()


def cancelled_result(base: dict[str, Any], started: float) -> ExecutionResult:
    return ExecutionResult(**base, status=Status.CRASHED,
                           duration_ms=int((time.monotonic() - started) * 1000),
                           error=ErrorInfo(type=error_types.CANCELLED, message=(
                               "its caller cancelled the run, and it was stopped then; its "
                               "output was not collected")))


def unsendable_result(exc: Exception, base: dict[str, Any]) -> ExecutionResult:
    return ExecutionResult(**base, status=Status.INVALID_ARGS, error=ErrorInfo(
        type=error_types.INVALID_REQUEST, message=f"the request cannot be sent to the sandbox as JSON: {exc}"))


def _encodable(message: dict[str, Any]) -> None:
    """Raise TypeError/ValueError/ProtocolError now, before a worker is involved (the
    JSON part only: the attachments are bytes, which always go)."""
    encode({key: value for key, value in message.items() if key != BLOBS})


class WorkerBackend:
    """Base of the tiers that run code in warm worker programs."""

    name = "worker"
    package_allowlist: frozenset[str] | None = None  # (set by the tiers that take one)

    def package_refusal(self, packages: Sequence[str]) -> str | None:
        """Why `packages` cannot be had on this tier, found without installing anything (a
        requirement that does not parse, a package outside the allowlist), or None."""
        try:
            requests = parse_requirements(packages)
        except PackageRequestError as exc:
            return str(exc)
        return refused_by(self.package_allowlist, requests)

    def place(self, request: ExecutionRequest) -> Placement:
        """The pool for this request; raises RequestRefused when it cannot run at all."""
        raise NotImplementedError

    def pools(self) -> list[WorkerPool]:
        raise NotImplementedError

    def result_fields(self) -> dict[str, Any]:
        """Fields every result of this tier carries (the Docker tier: its image id)."""
        return {}

    def base_fields(self, request: ExecutionRequest, run_id: str) -> dict[str, Any]:
        # Called as the run is asked for: its start, not when its result is built.
        return {"id": run_id, "backend": self.name, "limits": request.limits,
                "started_at": datetime.now(timezone.utc), **self.result_fields()}

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> ExecutionResult:
        base = self.base_fields(request, run_id)
        try:
            placement = self.place(request)
        except RequestRefused as refusal:
            return refused_result(refusal, base)
        base["packages"] = placement.packages
        message = request.worker_message(run_id)
        try:
            _encodable(message)
        except (TypeError, ValueError, ProtocolError) as exc:
            return unsendable_result(exc, base)
        started = time.monotonic()
        try:
            with placement.pool.lease() as worker, stopped_by(cancel, worker):
                reply = worker.request(message, request.limits.timeout_s + OUTER_GRACE_S)
        except WorkerLost as exc:
            if cancel is not None and cancel.cancelled:
                return cancelled_result(base, started)
            return lost_result(exc, base, started)
        return result_from_reply(reply, base)

    def open_session(self, request: ExecutionRequest) -> BackendSession:
        """A session whose blocks run with the packages of `request` (code unused)."""
        return BackendSession(self, request)

    def warm(self) -> None:
        for pool in self.pools()[:1]:
            pool.warm()

    def close(self) -> None:
        for pool in self.pools():
            pool.close()


class BackendSession:
    """One worker leased for a session; its session child keeps state between blocks.

    Blocks are serialised by a lock: the leased worker serves one request at a time."""

    def __init__(self, backend: WorkerBackend, template: ExecutionRequest) -> None:
        self.backend = backend
        self.template = template
        self._placement: Placement | None = None
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> tuple[ExecutionResult, bool]:
        """The result, and whether the block ran in a fresh session (earlier state gone)."""
        with self._lock:
            return self._run(request, run_id, cancel)

    def _run(self, request: ExecutionRequest, run_id: str,
             cancel: Cancellation | None = None) -> tuple[ExecutionResult, bool]:
        base = self.backend.base_fields(request, run_id)
        try:
            if self._placement is None:
                self._placement = self.backend.place(self.template)
        except RequestRefused as refusal:
            return refused_result(refusal, base), False
        base["packages"] = self._placement.packages
        message = request.worker_message(run_id, wire.SESSION_RUN)
        try:
            _encodable(message)
        except (TypeError, ValueError, ProtocolError) as exc:
            return unsendable_result(exc, base), False
        if self._worker is None:
            self._worker = self._placement.pool.take()
        started = time.monotonic()
        try:
            with stopped_by(cancel, self._worker):
                reply = self._worker.request(message, request.limits.timeout_s + OUTER_GRACE_S)
        except WorkerLost as exc:
            self._placement.pool.give_back(self._worker, healthy=False)
            self._worker = None
            if cancel is not None and cancel.cancelled:
                return cancelled_result(base, started), False
            # Not "fresh" yet: the next block's reply says its session started anew.
            return lost_result(exc, base, started), False
        return result_from_reply(reply, base), reply.get(wire.SESSION_STARTED) is True

    def close(self) -> None:
        with self._lock:
            if self._worker is None or self._placement is None:
                return
            worker, self._worker = self._worker, None
            try:
                worker.request({"type": wire.SESSION_CLOSE}, OUTER_GRACE_S)
            except WorkerLost:
                self._placement.pool.give_back(worker, healthy=False)
                return
            self._placement.pool.give_back(worker, healthy=True)
