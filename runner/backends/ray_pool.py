"""The ray backend's pool of actors: placement over the nodes, dispatch, loss, replacement.

One pool serves every `RayBackend` of this process that asks for the same configuration
(Sandboxes in one driver share its actors rather than compete for the cluster's CPUs);
the last one to close it ends its actors. A monitor thread settles actors as they start
(or say what their node lacks), follows the cluster's node list (a dead node takes its
actors along) and places new actors wherever a node has room for its share.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import __version__
from ..cancellation import Cancellation
from ..errors import BackendUnavailableError, RunnerError, SandboxClosedError
from ..types import ErrorInfo, ExecutionRequest, ExecutionResult, Resources, Status
from ..worker import error_types
from .ray_actor import ActorReport, SandboxActor
from .worker_backend import OUTER_GRACE_S

log = logging.getLogger("runner.backends.ray")

_POLL_S = 0.5  # how often a waiting run looks up whether its actor was lost
_PING_TIMEOUT_S = 5.0  # an actor on a suspect node that does not answer a ping in this time is lost
_PROBLEM_RETRY_S = 60.0  # a node that could not serve is tried again after this long
_SHUTDOWN_WAIT_S = 10.0
# Beyond the runs queued ahead and its own limits, how long a run may take before the
# driver gives up on its actor: installing packages (docker) happens before the timeout starts.
_INSTALL_ALLOWANCE_S = 600.0
_START_ALLOWANCE_S = 60.0


@dataclass(frozen=True)
class PoolConfig:
    """What makes two pools different; Sandboxes asking for the same one share it."""

    inner: str
    inner_options: dict[str, Any]
    actors_per_node: int | None
    queue_depth: int
    num_cpus: float
    build_images: bool
    start_timeout: float
    capacity_wait_s: float
    poll_s: float

    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, default=repr)


class State(Enum):
    PENDING = "pending"  # created, not yet reported ready
    READY = "ready"
    LOST = "lost"  # died, unreachable, or its node did; never used again


@dataclass(eq=False)
class Actor:
    handle: Any
    node_id: str
    node: str  # how results and messages name the node
    ready_ref: Any
    created: float
    state: State = State.PENDING
    in_flight: int = 0
    served: int = 0
    sessions: int = 0
    lost_reason: str = ""
    node_died: bool = False  # lost with its node (else only the actor's process died)


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


class Lost(Exception):
    """The actor a run was sent to is gone; the run's outcome is unknown."""


# -- results the driver decides --------------------------------------------------------------

def on_node(result: ExecutionResult, node: str) -> ExecutionResult:
    return result.model_copy(update={"resources": result.resources.model_copy(update={"node": node})})


def lost_result(base: dict[str, Any], node: str, reason: str, started: float, *,
                node_died: bool = True) -> ExecutionResult:
    """A run whose actor went away: with its node, as the cluster reported (`node_died`),
    or its process died (which a node's loss also does first, before the cluster says so:
    the words hold either way)."""
    what = (f"the Ray node {node} was lost while this ran ({reason}); its output is gone. A "
            "sandboxed run leaves nothing behind, so it can be run again: new runs go to the "
            "nodes that are left") if node_died else (
            f"the sandbox actor running this on Ray node {node} died ({reason}); its output is "
            "gone. A sandboxed run leaves nothing behind, so it can be run again: a new actor "
            "takes its place, on that node while it is in the cluster, else on the nodes left")
    return ExecutionResult(
        **base, status=Status.CRASHED, duration_ms=int((time.monotonic() - started) * 1000),
        resources=Resources(node=node), error=ErrorInfo(type=error_types.NODE_LOST, message=what))


@contextmanager
def stopping_on(actor: Actor, run_id: str, cancel: Cancellation | None) -> Iterator[None]:
    """While a run waits, its caller's `cancel` asks its actor to stop it (the actor's
    inner tier kills the run's worker; the result comes back cancelled, as on any tier)."""
    if cancel is None:
        yield
        return
    with cancel.on_cancel(lambda: actor.handle.cancel.remote(run_id)):
        yield


def no_capacity_result(base: dict[str, Any], waited_s: float) -> ExecutionResult:
    return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(type=error_types.NO_CAPACITY, message=(
        f"no Ray node could take this run within {waited_s:.0f} s: the cluster has no live "
        "actor left; it was not run (add or restart nodes; new actors are placed as they come)")))


def _actor_error(exc: RayActorError) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


class ActorPool:
    """Ray actors, each holding a warm inner backend on its node; safe to share between threads."""

    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.users = 0  # RayBackends holding this pool (counted by the registry in ray.py)
        self._actors: list[Actor] = []
        self._nodes: dict[str, _Node] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._stop = threading.Event()
        try:
            self._tick()  # places the first actors now; they warm up while the caller goes on
            if not self._nodes:
                raise BackendUnavailableError(
                    f"the Ray cluster has no live node with {config.num_cpus:g} CPU for a sandbox actor",
                    fix="add a node with CPUs to the cluster, or pass a smaller num_cpus")
        except BaseException:
            self._kill_all()
            raise
        self._monitor = threading.Thread(target=self._watch, name="runner-ray-monitor", daemon=True)
        self._monitor.start()

    def warm(self) -> None:
        """Wait until every actor placed so far has started (or failed, saying why)."""
        deadline = time.monotonic() + self.config.start_timeout
        with self._cond:
            while any(a.state is State.PENDING for a in self._actors) and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(min(remaining, self.config.poll_s))
            if not any(a.state is State.READY for a in self._actors):
                self._raise_unservable()

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> ExecutionResult:
        base = {"id": run_id, "backend": self.config.inner, "limits": request.limits}
        started = time.monotonic()
        actor = self.acquire(sessions=False)
        if actor is None:
            return no_capacity_result(base, time.monotonic() - started)
        try:
            ref = actor.handle.run.remote(request, run_id)
            with stopping_on(actor, run_id, cancel):
                result = self.wait_for(actor, ref, self.deadline(request, self.config.queue_depth))
        except Lost:
            return lost_result(base, actor.node, actor.lost_reason, started,
                               node_died=actor.node_died)
        finally:
            self._release(actor)
        return on_node(result, actor.node)

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        self._monitor.join(timeout=10)
        self._kill_all()

    def placement(self) -> dict[str, int]:
        """How many ready actors each node label has."""
        with self._cond:
            counts: dict[str, int] = {}
            for actor in self._actors:
                if actor.state is State.READY:
                    counts[actor.node] = counts.get(actor.node, 0) + 1
            return counts

    # -- dispatch -----------------------------------------------------------------------------

    def deadline(self, request: ExecutionRequest, ahead: int) -> float:
        """The backstop for a run (or block) and up to `ahead` queued before it on its actor.
        Only a wedged actor or an unreachable node reaches it: lost nodes are noticed sooner."""
        per_run = request.limits.timeout_s + OUTER_GRACE_S
        allowance = _INSTALL_ALLOWANCE_S if request.packages else _START_ALLOWANCE_S
        return time.monotonic() + per_run * ahead + allowance

    def acquire(self, *, sessions: bool) -> Actor | None:
        """An actor with room (the least busy; ties go round the nodes), or None when none
        could be had within capacity_wait_s of there being no live or starting actor."""
        idle_since: float | None = None
        with self._cond:
            while True:
                if self._closed:
                    raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
                suspect = {n.node_id for n in self._nodes.values() if n.suspect}
                usable = [a for a in self._actors if a.state is State.READY and a.node_id not in suspect]
                if sessions:
                    if usable:
                        actor = min(usable, key=lambda a: (a.sessions, a.served))
                        actor.sessions += 1
                        actor.served += 1
                        return actor
                else:
                    free = [a for a in usable if a.in_flight < self.config.queue_depth]
                    if free:
                        actor = min(free, key=lambda a: (a.in_flight, a.served))
                        actor.in_flight += 1
                        actor.served += 1
                        return actor
                if usable or any(a.state is State.PENDING for a in self._actors):
                    idle_since = None  # busy, or starting: work is coming
                else:
                    if self._nodes and all(n.problem for n in self._nodes.values()):
                        self._raise_unservable()
                    now = time.monotonic()
                    idle_since = idle_since or now
                    if now - idle_since >= self.config.capacity_wait_s:
                        return None
                self._cond.wait(self.config.poll_s)

    def _release(self, actor: Actor) -> None:
        with self._cond:
            actor.in_flight -= 1
            self._cond.notify_all()

    def unpin(self, actor: Actor) -> None:
        with self._cond:
            actor.sessions -= 1

    def wait_for(self, actor: Actor, ref: Any, deadline: float) -> Any:
        """The actor's answer; Lost when the actor or its node went away first."""
        while True:
            try:
                return ray.get(ref, timeout=_POLL_S)
            except GetTimeoutError:
                if actor.state is State.LOST:
                    raise Lost from None
                if time.monotonic() > deadline:
                    self._lose(actor, "its sandbox actor stopped answering; it was replaced")
                    raise Lost from None
            except RayActorError as exc:
                self._lose(actor, _actor_error(exc))
                raise Lost from None
            except RayTaskError as exc:
                cause = exc.cause
                if isinstance(cause, RunnerError):  # e.g. the node's Docker engine: say which node
                    cause.message = f"on Ray node {actor.node}: {cause.message}"
                    cause.args = (f"{cause.message} (fix: {cause.fix})" if cause.fix else cause.message,)
                    raise cause from None
                raise

    def _lose(self, actor: Actor, reason: str, *, node_died: bool = False) -> None:
        """Take an actor out of service for good (its runs in flight end as NodeLost), and
        distrust its node until its other actors answer a ping."""
        with self._cond:
            if actor.state is State.LOST:
                return
            actor.state, actor.lost_reason = State.LOST, reason
            actor.node_died = node_died
            node = self._nodes.get(actor.node_id)
            if node is not None:
                node.suspect = True
            self._cond.notify_all()
        # (the runs it held say so in their results; a log line on a caller's stderr would
        # say it again, in the middle of a command's output)
        log.info("Ray actor on node %s lost: %s", actor.node, reason)
        with contextlib.suppress(Exception):
            ray.kill(actor.handle, no_restart=True)

    def _raise_unservable(self) -> None:
        problems = [f"node {n.label}: {n.problem}" for n in self._nodes.values() if n.problem]
        if problems:
            raise BackendUnavailableError(
                f"no Ray node can serve the {self.config.inner} backend: " + "; ".join(problems),
                fix="fix what each node lacks (the message says what), then create a new Sandbox")
        raise BackendUnavailableError(
            f"no sandbox actor started on the Ray cluster within {self.config.start_timeout:.0f} s",
            fix="check that the nodes have free CPUs (`ray status`) and this runner installed")

    # -- the monitor: actors' start-up, lost nodes, new capacity ------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(self.config.poll_s):
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
            self._actors = [a for a in self._actors if a.state is not State.LOST]
            self._cond.notify_all()

    def _settle_pending(self) -> None:
        with self._cond:
            pending = [a for a in self._actors if a.state is State.PENDING]
        if not pending:
            return
        done, _ = ray.wait([a.ready_ref for a in pending], num_returns=len(pending), timeout=0)
        finished = set(done)
        for actor in pending:
            if actor.ready_ref not in finished:
                if time.monotonic() - actor.created > self.config.start_timeout:
                    self._problem(actor, f"its sandbox actor did not start within "
                                         f"{self.config.start_timeout:.0f} s (no free CPU there?)")
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
                if actor.state is State.PENDING:
                    actor.state = State.READY
                    node = self._nodes.get(actor.node_id)
                    if node is not None:
                        node.problem = None
                    self._cond.notify_all()

    def _problem(self, actor: Actor, problem: str) -> None:
        with self._cond:
            if actor.state is State.LOST:  # its node went away meanwhile: nothing to report
                return
            node = self._nodes.get(actor.node_id)
            if node is not None:
                node.problem, node.problem_at = problem, time.monotonic()
            actor.state, actor.lost_reason = State.LOST, problem
            self._cond.notify_all()
        log.warning("Ray node %s cannot serve the %s backend: %s", actor.node, self.config.inner, problem)
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
                if node.cpus >= self.config.num_cpus:
                    self._nodes.setdefault(node_id, node)
            gone = [n for n in self._nodes if n not in alive]
            for node_id in gone:
                del self._nodes[node_id]
            doomed = [a for a in self._actors if a.state is not State.LOST and a.node_id not in self._nodes]
        for actor in doomed:
            reason = dead.get(actor.node_id, "the node left the cluster")
            self._lose(actor, f"the cluster reports the node dead: {reason}", node_died=True)

    def _check_suspects(self) -> None:
        with self._cond:
            suspects = [n for n in self._nodes.values() if n.suspect]
            actors = [a for a in self._actors if a.state is State.READY
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
                share = self.config.actors_per_node or max(1, int(node.cpus // self.config.num_cpus))
                have = sum(1 for a in self._actors if a.node_id == node.node_id and a.state is not State.LOST)
                wanted += [node] * max(0, share - have)
            for node in wanted:
                handle = SandboxActor.options(  # type: ignore[attr-defined]
                    num_cpus=self.config.num_cpus, max_concurrency=self.config.queue_depth,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
                ).remote(self.config.inner, self.config.inner_options, self.config.build_images)
                self._actors.append(Actor(handle, node.node_id, node.label, handle.ready.remote(),
                                           time.monotonic()))

    def _kill_all(self) -> None:
        with self._cond:
            actors, self._actors = [a for a in self._actors if a.state is not State.LOST], []
        closing = []
        for actor in actors:  # a pending actor may never answer (its node is gone): killed only
            if actor.state is State.READY:
                with contextlib.suppress(Exception):
                    closing.append(actor.handle.shutdown.remote())
        if closing:
            with contextlib.suppress(Exception):
                ray.wait(closing, num_returns=len(closing), timeout=_SHUTDOWN_WAIT_S)
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
