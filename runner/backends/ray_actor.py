"""The far side of the ray backend: one Ray actor holding a warm sandbox on a cluster node.

Each actor builds the inner backend (restricted or docker) on its node, warms it once,
then serves the runs and session blocks the driver's `RayBackend` sends it. It returns
results and logs nothing: the driver's Sandbox records every result in its own log store.

What the node lacks (the Docker engine, the sandbox image, a worker that starts) is found
when the actor starts and reported by `ready()`, so the driver can say which node lacks
what. A missing sandbox image is built on first use with the project's own image scripts
(`runner images build`), one build per node at a time.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ray

from .. import __version__
from ..cancellation import Cancellation
from ..errors import BackendUnavailableError, RunnerError
from ..types import ExecutionRequest, ExecutionResult
from .base import Backend
from .registry import create_backend

# The actor's threads: runs take the default group, sized per actor to the driver's queue
# (`max_concurrency`); session blocks have their own (one thread per block in flight, so
# up to SESSION_SLOTS sessions per actor run at once); control calls must never wait
# behind runs (a ping queued behind a long run would look like a dead node).
SESSIONS, CONTROL = "sessions", "control"
SESSION_SLOTS = 64


@dataclass(frozen=True)
class ActorReport:
    """What an actor tells the driver once it has started (or failed to)."""

    node_id: str
    version: str
    problem: str | None  # what this node lacks to serve the inner backend, with the fix


def prepare_node(inner: str, options: dict[str, Any], *, build_images: bool) -> None:
    """Make sure this node can serve `inner`; raise a RunnerError that says what it lacks."""
    if inner != "docker":
        return  # the local tiers need only this runner, which is running
    from ..docker import images
    from ..docker.engine import engine_info

    engine_info()  # no engine: EngineUnavailableError with the fix
    image = options.get("image")
    status = images.status(image if isinstance(image, str) else None)
    if status.built:
        return
    if not build_images:
        raise BackendUnavailableError(f"the sandbox image {status.tag} is not built on this node",
                                      fix="run `runner images build` on the node")
    # Several actors start on one node at once: the first builds, the others wait and find it.
    lock_path = os.path.join(tempfile.gettempdir(), "runner-image-build.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not images.status(status.tag).built:
            images.build(status.tag)


@ray.remote(concurrency_groups={SESSIONS: SESSION_SLOTS, CONTROL: 2})  # type: ignore[call-overload]
class SandboxActor:
    """One warm inner backend on this node; sessions are kept here by the driver's key."""

    def __init__(self, inner: str, options: dict[str, Any], build_images: bool) -> None:
        self._node_id = ray.get_runtime_context().get_node_id()
        self._sessions: dict[str, Any] = {}
        self._cancels: dict[str, Cancellation] = {}  # the runs in progress, by run id
        self._lock = threading.Lock()
        self._backend: Backend | None = None
        self._problem: str | None = None
        try:
            prepare_node(inner, options, build_images=build_images)
            backend = create_backend(inner, **options)
            try:
                backend.warm()
            except BaseException:
                backend.close()
                raise
            self._backend = backend
        except RunnerError as exc:
            self._problem = str(exc)

    @ray.method(concurrency_group=CONTROL)
    def ready(self) -> ActorReport:
        return ActorReport(self._node_id, __version__, self._problem)

    @ray.method(concurrency_group=CONTROL)
    def ping(self) -> bool:
        return True

    def _serving(self) -> Backend:
        if self._backend is None:  # the driver never sends work to an actor that reported a problem
            raise BackendUnavailableError(self._problem or "this actor has no sandbox")
        return self._backend

    def run(self, request: ExecutionRequest, run_id: str) -> ExecutionResult:
        with self._cancellable(run_id) as cancel:
            return self._serving().run(request, run_id=run_id, cancel=cancel)

    @ray.method(concurrency_group=CONTROL)
    def cancel(self, run_id: str) -> None:
        """Stop the run `run_id` (its caller cancelled it): the inner tier kills its worker,
        and the run comes back cancelled. Nothing for a run that has ended."""
        with self._lock:
            cancel = self._cancels.get(run_id)
        if cancel is not None:
            cancel.cancel()

    @contextmanager
    def _cancellable(self, run_id: str) -> Iterator[Cancellation]:
        cancel = Cancellation()
        with self._lock:
            self._cancels[run_id] = cancel
        try:
            yield cancel
        finally:
            with self._lock:
                self._cancels.pop(run_id, None)

    @ray.method(concurrency_group=SESSIONS)
    def session_run(self, key: str, template: ExecutionRequest, request: ExecutionRequest,
                    run_id: str) -> tuple[ExecutionResult, bool]:
        """A block of the session `key`, opened here on its first block."""
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = self._sessions[key] = self._serving().open_session(template)
        with self._cancellable(run_id) as cancel:
            result, fresh = session.run(request, run_id=run_id, cancel=cancel)
        return result, bool(fresh)

    @ray.method(concurrency_group=CONTROL)
    def session_close(self, key: str) -> None:
        with self._lock:
            session = self._sessions.pop(key, None)
        if session is not None:
            session.close()

    @ray.method(concurrency_group=CONTROL)
    def shutdown(self) -> None:
        """Close the sessions and the inner backend (its workers or containers)."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()
        if self._backend is not None:
            self._backend.close()
