"""The ray backend: runs spread over a Ray cluster, each on a warm sandbox of an inner tier.

`Sandbox(backend="ray", ray_address=..., inner="jail" | "restricted" | "docker")` sends every
request to a pool of Ray actors (runner/backends/ray_actor.py), each holding a warm
inner backend on its node. Everything above the backend seam is unchanged, and the log
store stays here on the driver: actors return results and the driver's Sandbox records
them, so one database sees every run. Results name the isolation tier that ran them
(`backend` is the inner tier's name, as is `Sandbox.backend`; `Sandbox.backend_name` is
"ray") and the node (`resources.node`, "<node name>/<node id prefix>").

- Connection: `ray_address=None` starts a private local Ray for this process (bound to
  the loopback interface, a token of this process's own, set before `ray` is imported
  (ray_env.py), dashboard and usage statistics off) unless RAY_ADDRESS names a cluster;
  "auto" joins the cluster running on this machine; "host:port" or "ray://host:10001"
  joins that one, once something answers there (a dead address fails in seconds, naming
  it). Every node needs this runner installed, same version.
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

The actors and their monitor are an `ActorPool` (ray_pool.py), shared by every RayBackend
of this process with the same configuration; the actor itself is in ray_actor.py.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from typing import Any

import ray

from ..cancellation import Cancellation
from ..errors import BackendUnavailableError, ConfigurationError, SandboxClosedError
from ..ids import new_id
from ..types import ExecutionRequest, ExecutionResult
from . import ray_env
from .base import DEFAULT_BACKEND, RAY_INNER_BACKENDS
from .ray_pool import (
    Actor,
    ActorPool,
    Lost,
    PoolConfig,
    State,
    log,
    lost_result,
    no_capacity_result,
    on_node,
    stopping_on,
)

_SHUTDOWN_WAIT_S = 10.0


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
        ray_env.prepare(address)  # done by the loader already, unless ray was imported first
        target = ray_env.target(address)
        if target == "local" or ray_env.on_loopback(target):
            _loopback_only()
        ray_env.reachable(target)  # a dead address fails in seconds, not after Ray's retries
        for attempt in range(1, _CLIENT_INIT_TRIES + 1):
            try:
                ray.init(address=target, include_dashboard=False, log_to_driver=False,
                         logging_level=logging.WARNING, configure_logging=False)
                _errors_to_the_log()
                break
            except Exception as exc:  # Ray's errors: translated here, once, in one line
                if attempt < _CLIENT_INIT_TRIES and _client_init_failed(exc):
                    # The Ray Client server could not start this client's own server in
                    # time (a loaded head node): a new connection starts another.
                    with contextlib.suppress(Exception):
                        ray.shutdown()
                    time.sleep(attempt)
                    continue
                raise BackendUnavailableError(
                    f"could not connect to the Ray cluster at {target}: {_reason(exc)}",
                    fix="start the cluster (`ray start --head`), check the address (host:port "
                        "or ray://host:10001), or leave the address out for a local Ray"
                ) from None
        _connection_users, _connection_owned, _connection_address = 1, True, address


def _errors_to_the_log() -> None:
    """Ray's driver prints the cluster's error messages ("(raylet) A worker died or was
    killed...", a dozen lines) on standard output, whatever `log_to_driver` says: into a
    command's `--json` output and a user's terminal. They go to runner's logger instead
    (at debug level: what died reaches the caller in the run's result, in runner's words).
    The hook is the module function Ray's listener thread calls; a Ray without it prints
    as before."""
    import ray._private.worker as ray_worker

    if callable(getattr(ray_worker, "print_to_stdstream", None)):
        def to_the_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
            lines = data.get("lines") or []
            log.debug("Ray (%s): %s", data.get("pid"), " ".join(map(str, lines))[:2000])

        ray_worker.print_to_stdstream = to_the_log


_CLIENT_INIT_TRIES = 2  # each failure takes Ray Client 30 s or more
_CLIENT_INIT_FAILURE = "Initialization failure from server"


def _client_init_failed(exc: BaseException) -> bool:
    """Whether a ray:// connection failed because the server could not set up this client
    (Ray Client starts a server process per client; it may not be ready in time)."""
    return _CLIENT_INIT_FAILURE in str(exc)


def _reason(exc: BaseException) -> str:
    """An exception's message as one line. Ray's carry tracebacks and advice: the first
    line, or, when that only introduces what follows ("...from server:"), the last one,
    which names the error."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[-1]}"
    return text if len(text) <= 300 else text[:300] + "..."


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


class RayBackend:
    """Runs on a pool of Ray actors, each holding a warm inner backend on its node."""

    def __init__(self, *, ray_address: str | None = None, inner: str = DEFAULT_BACKEND,
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
        _check_numbers(actors_per_node=actors_per_node, queue_depth=queue_depth, num_cpus=num_cpus,
                       start_timeout=start_timeout, capacity_wait_s=capacity_wait_s, poll_s=poll_s)
        self.name = inner  # results name the isolation tier that ran them
        self.inner = inner
        options = dict(inner_options)
        workers = options.setdefault("pool_size", 1)  # one inner worker per actor (per CPU)
        self.config = PoolConfig(
            inner=inner, inner_options=options, actors_per_node=actors_per_node,
            queue_depth=queue_depth or int(workers) + 1, num_cpus=float(num_cpus),
            build_images=build_images, start_timeout=float(start_timeout),
            capacity_wait_s=float(capacity_wait_s), poll_s=float(poll_s))
        self._closed = False
        _connect(ray_address)
        try:
            self._pool = _take_pool(self.config)
        except BaseException:
            _disconnect()
            raise

    def warm(self) -> None:
        """Wait until every actor placed so far has started (or failed, saying why)."""
        self._pool.warm()

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> ExecutionResult:
        return self._pool.run(request, run_id=run_id, cancel=cancel)

    def open_session(self, template: ExecutionRequest) -> RaySession:
        if self._closed:
            raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
        return RaySession(self._pool, template)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _give_back_pool(self._pool)
        _disconnect()

    def placement(self) -> dict[str, int]:
        """How many ready actors each node (by label) has."""
        return self._pool.placement()


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


# -- the pools: one per configuration, shared by the RayBackends of this process -------------

_pools_lock = threading.Lock()
_pools: dict[str, ActorPool] = {}


def _take_pool(config: PoolConfig) -> ActorPool:
    with _pools_lock:
        pool = _pools.get(config.key())
        if pool is None:
            pool = _pools[config.key()] = ActorPool(config)
        pool.users += 1
        return pool


def _give_back_pool(pool: ActorPool) -> None:
    with _pools_lock:
        pool.users -= 1
        if pool.users > 0:
            return
        _pools.pop(pool.config.key(), None)
    pool.close()


class RaySession:
    """A session pinned to one actor, whose inner session keeps the state between blocks."""

    def __init__(self, pool: ActorPool, template: ExecutionRequest) -> None:
        self.pool = pool
        self.template = template
        self.key = new_id()
        self._actor: Actor | None = None
        self._lock = threading.Lock()

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> tuple[ExecutionResult, bool]:
        """The result, and whether the block ran in a fresh session (earlier state gone);
        `cancel` stops the block on its actor (the session's state goes with it)."""
        with self._lock:
            base = {"id": run_id, "backend": self.pool.config.inner, "limits": request.limits}
            started = time.monotonic()
            if self._actor is not None and self._actor.state is State.LOST:
                self._drop()  # lost between blocks: this block starts afresh elsewhere
            if self._actor is None:
                self._actor = self.pool.acquire(sessions=True)
                if self._actor is None:
                    return no_capacity_result(base, time.monotonic() - started), False
            actor = self._actor
            ref = actor.handle.session_run.remote(self.key, self.template, request, run_id)
            try:
                with stopping_on(actor, run_id, cancel):
                    result, fresh = self.pool.wait_for(actor, ref, self.pool.deadline(request, 1))
            except Lost:
                self._drop()
                # Not "fresh" yet: the next block's reply says its session started anew.
                return lost_result(base, actor.node, actor.lost_reason, started,
                                   node_died=actor.node_died), False
            return on_node(result, actor.node), bool(fresh)

    def _drop(self) -> None:
        if self._actor is not None:
            self.pool.unpin(self._actor)
            self._actor = None

    def close(self) -> None:
        with self._lock:
            actor = self._actor
            if actor is None:
                return
            self._drop()
            if actor.state is not State.LOST:
                with contextlib.suppress(Exception):
                    ray.get(actor.handle.session_close.remote(self.key), timeout=_SHUTDOWN_WAIT_S)
