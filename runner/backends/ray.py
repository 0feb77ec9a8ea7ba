"""The ray backend: runs spread over a Ray cluster, each on a warm sandbox of an inner tier.

`Sandbox(backend="ray", ray_address=..., inner="restricted" | "docker")` sends every
request to a pool of Ray actors (runner/backends/ray_actor.py), each holding a warm
inner backend on its node. Everything above the backend seam is unchanged, and the log
store stays here on the driver: actors return results and the driver's Sandbox records
them, so one database sees every run. Results name the isolation tier that ran them
(`backend` is the inner tier's name, as is `Sandbox.backend`; `Sandbox.backend_name` is
"ray") and the node (`resources.node`, "<node name>/<node id prefix>").

- Connection: `ray_address=None` starts a private local Ray for this process (bound to
  the loopback interface, dashboard and usage statistics off) unless RAY_ADDRESS names a
  cluster; "auto" joins the cluster running on this machine; "host:port" or
  "ray://host:10001" joins that one. Every node needs this runner installed, same version.
- Placement: actors are pinned to nodes (node-affinity scheduling), by default one per
  CPU of each node, so they spread over the cluster; each warms its inner backend once.
- Backpressure: at most `queue_depth` runs are in flight per actor (one running per inner
  worker plus one waiting, so a worker never idles between runs); callers beyond that wait
  here, so a 10,000-item evaluation never floods the cluster or the object store.
- Faults: a node or actor that goes away mid-run turns each run in flight there into a
  `crashed` result of error type "NodeLost" naming the node (never a hang: Ray reports
  the lost connection within seconds, the cluster's node list is watched, and each run has
  a backstop deadline). New runs go to the surviving actors; a monitor thread places new
  actors wherever capacity appears (a node that comes back, a new node).
- Sessions are pinned to one actor. A session whose actor was lost reports its state
  lost like a killed block: the next block starts a fresh session on another actor.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import __version__
from ..errors import BackendUnavailableError, ConfigurationError, RunnerError, SandboxClosedError
from ..ids import new_id
from ..types import ErrorInfo, ExecutionRequest, ExecutionResult, Resources, Status
from .base import RAY_INNER_BACKENDS
from .ray_actor import ActorReport, SandboxActor
from .worker_backend import OUTER_GRACE_S

log = logging.getLogger(__name__)

_POLL_S = 0.5  # how often a waiting run looks up whether its actor was lost
_PING_TIMEOUT_S = 5.0  # an actor on a suspect node that does not answer a ping in this time is lost
_PROBLEM_RETRY_S = 60.0  # a node that could not serve is tried again after this long
_SHUTDOWN_WAIT_S = 10.0
# Beyond the runs queued ahead and its own limits, how long a run may take before the
# driver gives up on its actor: installing packages (docker) happens before the timeout starts.
_INSTALL_ALLOWANCE_S = 600.0
_START_ALLOWANCE_S = 60.0


class _State(Enum):
    PENDING = "pending"  # created, not yet reported ready
    READY = "ready"
    LOST = "lost"  # died, unreachable, or its node did; never used again


@dataclass(eq=False)
class _Actor:
    handle: Any
    node_id: str
    node: str  # how results and messages name the node
    ready_ref: Any
    created: float
    state: _State = _State.PENDING
    in_flight: int = 0
    served: int = 0
    sessions: int = 0
    lost_reason: str = ""


@dataclass
class _Node:
    node_id: str
    name: str
    cpus: float
    problem: str | None = None
    problem_at: float = 0.0
    suspect: bool = False
    label: str = field(init=False)

    def __post_init__(self) -> None:
        self.label = f"{self.name}/{self.node_id[:12]}"


class _Lost(Exception):
    """The actor a run was sent to is gone; the run's outcome is unknown."""


# -- the connection: one per process, shared by every RayBackend in it ----------------------

_connection_lock = threading.Lock()
_connection_users = 0
_connection_owned = False  # we called ray.init, so the last backend to close shuts it down
_connection_address: str | None = None


def _connect(address: str | None) -> None:
    global _connection_users, _connection_owned, _connection_address
    with _connection_lock:
        if ray.is_initialized():
            if _connection_users and address != _connection_address:
                raise ConfigurationError(
                    f"this process is already connected to the Ray cluster "
                    f"{_connection_address or '(local)'}, and Ray allows one per process",
                    fix=f"use ray_address={_connection_address!r} in every Sandbox of this process")
            _connection_users += 1
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        target = address or os.environ.get("RAY_ADDRESS") or "local"
        if target == "local" or _on_loopback(target):
            _loopback_only()
        try:
            ray.init(address=target, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.WARNING, configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise BackendUnavailableError(
                f"could not connect to the Ray cluster at {target}: {exc}",
                fix="start the cluster (`ray start --head`), check the address (host:port or "
                    "ray://host:10001), or leave the address out for a local Ray") from None
        _connection_users, _connection_owned, _connection_address = 1, True, address


def _on_loopback(address: str) -> bool:
    """Whether `address` (host:port, or ray://host:port) names this machine's loopback."""
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host == "::1" or host.startswith("127.")


def _loopback_only() -> None:
    """A private local Ray listens on the loopback interface only (Ray has no authentication:
    on a machine's network address anyone who reaches it could run code). Ray binds to the
    address it resolves for this node, which it resolves to 127.0.0.1 when multi-node
    clusters are off: off here (read at each call) and in the Ray processes it starts."""
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def _disconnect() -> None:
    global _connection_users, _connection_owned, _connection_address
    with _connection_lock:
        _connection_users = max(0, _connection_users - 1)
        if _connection_users == 0 and _connection_owned:
            _connection_owned, _connection_address = False, None
            with contextlib.suppress(Exception):
                ray.shutdown()


# -- results the driver decides --------------------------------------------------------------

def _on_node(result: ExecutionResult, node: str) -> ExecutionResult:
    return result.model_copy(update={"resources": result.resources.model_copy(update={"node": node})})


def _lost_result(base: dict[str, Any], node: str, reason: str, started: float) -> ExecutionResult:
    return ExecutionResult(
        **base, status=Status.CRASHED, duration_ms=int((time.monotonic() - started) * 1000),
        resources=Resources(node=node), error=ErrorInfo(type="NodeLost", message=(
            f"the Ray node {node} was lost while this ran ({reason}); its output is gone. A "
            "sandboxed run leaves nothing behind, so it can be run again: new runs go to the "
            "nodes that are left")))


def _no_capacity_result(base: dict[str, Any], waited_s: float) -> ExecutionResult:
    return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(type="NoCapacity", message=(
        f"no Ray node could take this run within {waited_s:.0f} s: the cluster has no live "
        "actor left; it was not run (add or restart nodes; new actors are placed as they come)")))


def _actor_error(exc: RayActorError) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


class RayBackend:
    """Runs on a pool of Ray actors, each holding a warm inner backend on its node."""

    def __init__(self, *, ray_address: str | None = None, inner: str = "restricted",
                 actors_per_node: int | None = None, queue_depth: int | None = None,
                 num_cpus: float = 1.0, build_images: bool = True, start_timeout: float = 600.0,
                 capacity_wait_s: float = 60.0, poll_s: float = 1.0,
                 **inner_options: Any) -> None:
        if inner not in RAY_INNER_BACKENDS:
            raise ConfigurationError(f"inner backend {inner!r} cannot run on Ray actors",
                                     fix=f"choose one of: {', '.join(RAY_INNER_BACKENDS)}")
        if ray_address is not None and not isinstance(ray_address, str):
            raise ConfigurationError("ray_address must be a string such as 'auto', 'host:6379' or "
                                     "'ray://host:10001'", fix="pass ray_address='auto', or leave it out")
        self._check_numbers(actors_per_node=actors_per_node, queue_depth=queue_depth,
                            num_cpus=num_cpus,
                            start_timeout=start_timeout, capacity_wait_s=capacity_wait_s, poll_s=poll_s)
        self.name = inner  # results name the isolation tier that ran them
        self.inner = inner
        options = dict(inner_options)
        workers = options.setdefault("pool_size", 1)  # one inner worker per actor (per CPU)
        self.queue_depth = queue_depth or int(workers) + 1
        self.actors_per_node = actors_per_node
        self.num_cpus = num_cpus
        self.start_timeout = start_timeout
        self.capacity_wait_s = capacity_wait_s
        self.poll_s = poll_s
        self._inner_options = options
        self._build_images = build_images
        self._actors: list[_Actor] = []
        self._nodes: dict[str, _Node] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._stop = threading.Event()
        _connect(ray_address)
        try:
            self._tick()  # places the first actors now; they warm up while the caller goes on
            if not self._nodes:
                raise BackendUnavailableError(
                    f"the Ray cluster has no live node with {num_cpus:g} CPU for a sandbox actor",
                    fix="add a node with CPUs to the cluster, or pass a smaller num_cpus")
        except BaseException:
            self._kill_all()
            _disconnect()
            raise
        self._monitor = threading.Thread(target=self._watch, name="runner-ray-monitor", daemon=True)
        self._monitor.start()

    @staticmethod
    def _check_numbers(**values: float | None) -> None:
        for key, value in values.items():
            if value is None:
                continue
            integer = key in ("actors_per_node", "queue_depth")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    (integer and not isinstance(value, int)) or not math.isfinite(value) or value <= 0:
                kind = "a positive integer" if integer else "a positive number"
                raise ConfigurationError(f"{key} must be {kind}, got {value!r}",
                                         fix=f"pass {key}=1 or more, or leave it out")

    # -- the Backend protocol -----------------------------------------------------------------

    def warm(self) -> None:
        """Wait until every actor placed so far has started (or failed, saying why)."""
        deadline = time.monotonic() + self.start_timeout
        with self._cond:
            while any(a.state is _State.PENDING for a in self._actors) and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, self.poll_s))
            if not any(a.state is _State.READY for a in self._actors):
                self._raise_unservable()

    def run(self, request: ExecutionRequest, *, run_id: str) -> ExecutionResult:
        base = {"id": run_id, "backend": self.name, "limits": request.limits}
        started = time.monotonic()
        actor = self._acquire(sessions=False)
        if actor is None:
            return _no_capacity_result(base, time.monotonic() - started)
        try:
            ref = actor.handle.run.remote(request, run_id)
            result = self._await(actor, ref, self._deadline(request, self.queue_depth))
        except _Lost:
            return _lost_result(base, actor.node, actor.lost_reason, started)
        finally:
            self._release(actor)
        return _on_node(result, actor.node)

    def open_session(self, template: ExecutionRequest) -> RaySession:
        with self._cond:
            if self._closed:
                raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
        return RaySession(self, template)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        self._monitor.join(timeout=10)
        self._kill_all()
        _disconnect()

    # -- what the tests and callers may ask ---------------------------------------------------

    def placement(self) -> dict[str, int]:
        """How many ready actors each node label has."""
        with self._cond:
            counts: dict[str, int] = {}
            for actor in self._actors:
                if actor.state is _State.READY:
                    counts[actor.node] = counts.get(actor.node, 0) + 1
            return counts

    # -- dispatch -----------------------------------------------------------------------------

    def _deadline(self, request: ExecutionRequest, ahead: int) -> float:
        """The backstop for a run (or block) and up to `ahead` queued before it on its actor.
        Only a wedged actor or an unreachable node reaches it: lost nodes are noticed sooner."""
        per_run = request.limits.timeout_s + OUTER_GRACE_S
        allowance = _INSTALL_ALLOWANCE_S if request.packages else _START_ALLOWANCE_S
        return time.monotonic() + per_run * ahead + allowance

    def _acquire(self, *, sessions: bool) -> _Actor | None:
        """An actor with room (the least busy; ties go round the nodes), or None when none
        could be had within capacity_wait_s of there being no live or starting actor."""
        idle_since: float | None = None
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
                suspect = {n.node_id for n in self._nodes.values() if n.suspect}
                usable = [a for a in self._actors if a.state is _State.READY and a.node_id not in suspect]
                if sessions:
                    if usable:
                        actor = min(usable, key=lambda a: (a.sessions, a.served))
                        actor.sessions += 1
                        actor.served += 1
                        return actor
                else:
                    free = [a for a in usable if a.in_flight < self.queue_depth]
                    if free:
                        actor = min(free, key=lambda a: (a.in_flight, a.served))
                        actor.in_flight += 1
                        actor.served += 1
                        return actor
                if usable or any(a.state is _State.PENDING for a in self._actors):
                    idle_since = None  # busy, or starting: work is coming
                else:
                    if self._nodes and all(n.problem for n in self._nodes.values()):
                        self._raise_unservable()
                    now = time.monotonic()
                    idle_since = idle_since or now
                    if now - idle_since >= self.capacity_wait_s:
                        return None
                self._cond.wait(self.poll_s)

    def _release(self, actor: _Actor) -> None:
        with self._cond:
            actor.in_flight -= 1
            self._cond.notify_all()

    def _unpin(self, actor: _Actor) -> None:
        with self._cond:
            actor.sessions -= 1

    def _await(self, actor: _Actor, ref: Any, deadline: float) -> Any:
        """The actor's answer; _Lost when the actor or its node went away first."""
        while True:
            try:
                return ray.get(ref, timeout=_POLL_S)
            except GetTimeoutError:
                if actor.state is _State.LOST:
                    raise _Lost from None
                if time.monotonic() > deadline:
                    self._lose(actor, "its sandbox actor stopped answering; it was replaced")
                    raise _Lost from None
            except RayActorError as exc:
                self._lose(actor, _actor_error(exc))
                raise _Lost from None
            except RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, RunnerError):  # e.g. the node's Docker engine: say which node
                    cause.message = f"on Ray node {actor.node}: {cause.message}"
                    cause.args = (f"{cause.message} (fix: {cause.fix})" if cause.fix else cause.message,)
                    raise cause from None
                raise

    def _lose(self, actor: _Actor, reason: str) -> None:
        """Take an actor out of service for good (its runs in flight end as NodeLost), and
        distrust its node until its other actors answer a ping."""
        with self._cond:
            if actor.state is _State.LOST:
                return
            actor.state, actor.lost_reason = _State.LOST, reason
            node = self._nodes.get(actor.node_id)
            if node is not None:
                node.suspect = True
            self._cond.notify_all()
        log.warning("Ray actor on node %s lost: %s", actor.node, reason)
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)

    def _raise_unservable(self) -> None:
        problems = [f"node {n.label}: {n.problem}" for n in self._nodes.values() if n.problem]
        if problems:
            raise BackendUnavailableError(
                f"no Ray node can serve the {self.inner} backend: " + "; ".join(problems),
                fix="fix what each node lacks (the message says what), then create a new Sandbox")
        raise BackendUnavailableError(
            f"no sandbox actor started on the Ray cluster within {self.start_timeout:.0f} s",
            fix="check that the nodes have free CPUs (`ray status`) and this runner installed")

    # -- the monitor: actors' start-up, lost nodes, new capacity ------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._tick()
            except Exception:  # the monitor must outlive a bad answer from the cluster
                log.warning("the Ray backend's monitor could not check the cluster", exc_info=True)

    def _tick(self) -> None:
        self._settle_pending()
        self._follow_nodes()
        self._check_suspects()
        self._place()
        with self._cond:
            self._actors = [a for a in self._actors if a.state is not _State.LOST]
            self._cond.notify_all()

    def _settle_pending(self) -> None:
        with self._cond:
            pending = [a for a in self._actors if a.state is _State.PENDING]
        if not pending:
            return
        done, _ = ray.wait([a.ready_ref for a in pending], num_returns=len(pending), timeout=0)
        finished = set(done)
        for actor in pending:
            if actor.ready_ref not in finished:
                if time.monotonic() - actor.created > self.start_timeout:
                    self._problem(actor, f"its sandbox actor did not start within "
                                         f"{self.start_timeout:.0f} s (no free CPU there?)")
                continue
            try:
                report: ActorReport = ray.get(actor.ready_ref)
            except RayActorError as exc:
                self._problem(actor, f"its sandbox actor failed to start: {_actor_error(exc)}")
                continue
            if report.problem is None and report.version != __version__:
                report = ActorReport(report.node_id, report.version, (
                    f"it has runner {report.version} and this driver runner {__version__} "
                    "(fix: install the same runner version on every node)"))
            if report.problem is not None:
                self._problem(actor, report.problem)
                continue
            with self._cond:
                if actor.state is _State.PENDING:
                    actor.state = _State.READY
                    node = self._nodes.get(actor.node_id)
                    if node is not None:
                        node.problem = None
                    self._cond.notify_all()

    def _problem(self, actor: _Actor, problem: str) -> None:
        with self._cond:
            if actor.state is _State.LOST:  # its node went away meanwhile: nothing to report
                return
            node = self._nodes.get(actor.node_id)
            if node is not None:
                node.problem, node.problem_at = problem, time.monotonic()
            actor.state, actor.lost_reason = _State.LOST, problem
            self._cond.notify_all()
        log.warning("Ray node %s cannot serve the %s backend: %s", actor.node, self.inner, problem)
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)

    def _follow_nodes(self) -> None:
        """Nodes the cluster reports: new ones are added, dead ones take their actors along."""
        alive: dict[str, _Node] = {}
        dead: dict[str, str] = {}
        for entry in ray.nodes():  # type: ignore[no-untyped-call]
            node_id = str(entry.get("NodeID", ""))
            if entry.get("Alive"):
                cpus = float((entry.get("Resources") or {}).get("CPU", 0.0))
                name = str(entry.get("NodeName") or entry.get("NodeManagerAddress") or "node")
                alive[node_id] = _Node(node_id, name, cpus)
            else:
                dead[node_id] = str(entry.get("DeathReasonMessage") or "the cluster marked it dead")
        with self._cond:
            for node_id, node in alive.items():
                if node.cpus >= self.num_cpus:
                    self._nodes.setdefault(node_id, node)
            gone = [n for n in self._nodes if n not in alive]
            for node_id in gone:
                del self._nodes[node_id]
            doomed = [a for a in self._actors if a.state is not _State.LOST and a.node_id not in self._nodes]
        for actor in doomed:
            reason = dead.get(actor.node_id, "the node left the cluster")
            self._lose(actor, f"the cluster reports the node dead: {reason}")

    def _check_suspects(self) -> None:
        with self._cond:
            suspects = [n for n in self._nodes.values() if n.suspect]
            actors = [a for a in self._actors if a.state is _State.READY
                      and any(a.node_id == n.node_id for n in suspects)]
        if not suspects:
            return
        pings = {id(a): a.handle.ping.remote() for a in actors}
        if pings:
            ray.wait(list(pings.values()), num_returns=len(pings), timeout=_PING_TIMEOUT_S)
        for actor in actors:
            try:
                ray.get(pings[id(actor)], timeout=0)
            except (RayActorError, GetTimeoutError) as exc:
                reason = "it did not answer a ping" if isinstance(exc, GetTimeoutError) else _actor_error(exc)
                self._lose(actor, reason)
        with self._cond:
            for node in suspects:
                node.suspect = False

    def _place(self) -> None:
        """Start actors where a node has fewer than its share (new nodes, lost actors)."""
        if self._stop.is_set():
            return
        now = time.monotonic()
        with self._cond:
            if self._closed:
                return
            wanted: list[_Node] = []
            for node in self._nodes.values():
                if node.problem and now - node.problem_at < _PROBLEM_RETRY_S:
                    continue
                share = self.actors_per_node or max(1, int(node.cpus // self.num_cpus))
                have = sum(1 for a in self._actors if a.node_id == node.node_id and a.state is not _State.LOST)
                wanted += [node] * max(0, share - have)
            for node in wanted:
                handle = SandboxActor.options(  # type: ignore[attr-defined]
                    num_cpus=self.num_cpus, max_concurrency=self.queue_depth,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                ).remote(self.inner, self._inner_options, self._build_images)
                self._actors.append(_Actor(handle, node.node_id, node.label, handle.ready.remote(),
                                           time.monotonic()))

    def _kill_all(self) -> None:
        with self._cond:
            actors, self._actors = [a for a in self._actors if a.state is not _State.LOST], []
        closing = []
        for actor in actors:  # a pending actor may never answer (its node is gone): killed only
            if actor.state is _State.READY:
                with contextlib.suppress(Exception):
                    closing.append(actor.handle.shutdown.remote())
        if closing:
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=_SHUTDOWN_WAIT_S)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)


class RaySession:
    """A session pinned to one actor, whose inner session keeps the state between blocks."""

    def __init__(self, backend: RayBackend, template: ExecutionRequest) -> None:
        self.backend = backend
        self.template = template
        self.key = new_id()
        self._actor: _Actor | None = None
        self._lock = threading.Lock()

    def run(self, request: ExecutionRequest, *, run_id: str) -> tuple[ExecutionResult, bool]:
        """The result, and whether the block ran in a fresh session (earlier state gone)."""
        with self._lock:
            base = {"id": run_id, "backend": self.backend.name, "limits": request.limits}
            started = time.monotonic()
            if self._actor is not None and self._actor.state is _State.LOST:
                self._drop()  # lost between blocks: this block starts afresh elsewhere
            if self._actor is None:
                self._actor = self.backend._acquire(sessions=True)
                if self._actor is None:
                    return _no_capacity_result(base, time.monotonic() - started), False
            actor = self._actor
            ref = actor.handle.session_run.remote(self.key, self.template, request, run_id)
            try:
                result, fresh = self.backend._await(actor, ref, self.backend._deadline(request, 1))
            except _Lost:
                self._drop()
                # Not "fresh" yet: the next block's reply says its session started anew.
                return _lost_result(base, actor.node, actor.lost_reason, started), False
            return _on_node(result, actor.node), bool(fresh)

    def _drop(self) -> None:
        if self._actor is not None:
            self.backend._unpin(self._actor)
            self._actor = None

    def close(self) -> None:
        with self._lock:
            actor = self._actor
            if actor is None:
                return
            self._drop()
            if actor.state is not _State.LOST:
                with contextlib.suppress(Exception):
                    ray.get(actor.handle.session_close.remote(self.key), timeout=_SHUTDOWN_WAIT_S)
