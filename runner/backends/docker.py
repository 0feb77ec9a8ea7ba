"""The Docker tier: unrestricted Python in hardened, warm containers.

Each container's main process is the worker program (stdlib only), started with the
flags below; it preloads sympy and numpy and forks a child per run, exactly like the
restricted tier's worker on the host. Containers are pooled per (image, package
environment, limits profile) and discarded after any kill, crash or protocol error.

Hardening (every one of these is attacked by tests/test_docker_attacks.py): no network,
all capabilities dropped, no-new-privileges, read-only root with size-limited tmpfs,
a non-root user, pids/memory(+swap)/CPU limits, open-files and file-size ulimits, an
init process, no host mounts except read-only package environments, and an empty
environment. gVisor (`runsc`) is used when RUNNER_DOCKER_RUNTIME=runsc.

The engine is outside the runner's control: it can be stopped or restarted under an open
Sandbox. Runs meanwhile come back `crashed` with a message naming the engine (never "the
image is not built" or "reinstall the runner"), and the same Sandbox works again once the
engine answers, because dead containers are simply replaced.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

from ..cancellation import Cancellation
from ..docker import images
from ..docker.engine import (
    LABEL,
    OWNER_LABEL,
    EngineUnavailableError,
    containers,
    docker,
    engine_problem,
    image_id,
    no_such_image,
    remove_containers,
)
from ..docker.environments import MOUNT_POINT, Environment, resolve
from ..docker.seccomp_profile import security_option
from ..errors import BackendUnavailableError, SandboxClosedError, WorkerStartError
from ..ids import new_id
from ..packages import PackageRequestError, allowlist_of, parse_requirements, refused_by
from ..types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Status
from ..wheels import InstallFailed
from ..worker import error_types, wire
from .worker_backend import BackendSession, Placement, RequestRefused, WorkerBackend
from .worker_process import WorkerLost, WorkerPool, WorkerProcess

SANDBOX_USER = "10001:10001"  # who user code runs as
MIB = 1024 * 1024
WORKER_CAPABILITIES = ("SETUID", "SETGID", "KILL", "SETPCAP")
# A run's processes together may hold its memory limit plus this much: the pages a run's
# child copies from the warm worker as it touches them (sympy's objects) count too.
RUN_MEMORY_ALLOWANCE_MB = 32
# Memory for the warm worker itself (interpreter, sympy, numpy) on top of the run's own
# limit, which the worker enforces per run with RLIMIT_AS; the cgroup limit is the backstop.
WORKER_OVERHEAD_MB = 384
TMPFS_MB = 256
PROCESS_OVERHEAD = 10  # init, supervisor, forkserver, spare, clean-up and fork helpers
WORKER_MAIN = ("import sys; sys.path.insert(0, '/opt/runner'); "
               "from worker.__main__ import main; main()")


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Profile:
    """The container-level limits; runs with other timeouts share containers."""

    memory_mb: int  # what a run's processes and its directory (a tmpfs) hold together
    max_processes: int
    max_file_size_mb: int

    @classmethod
    def of(cls, limits: Limits) -> Profile:
        return cls(limits.memory_mb, limits.max_processes, limits.max_file_size_mb)


# The engine's own list of /proc and /sys paths it hides (MaskedPaths replaces it, so it
# is repeated here), and what the sandbox must not see besides: the host kernel's command
# line and its boot id (a host identifier that survives across containers).
DOCKER_MASKED_PATHS = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
    "/sys/firmware", "/sys/devices/virtual/powercap",
)
MASKED_PATHS = (*DOCKER_MASKED_PATHS, "/proc/cmdline", "/proc/sys/kernel/random/boot_id")


def container_config(*, image: str, profile: Profile, env: Environment,
                     runtime: str | None = None, extra_labels: dict[str, str] | None = None
                     ) -> dict[str, Any]:
    """The engine API's create request for one warm sandbox container (created through
    the API, which never pulls: a missing image is an error that says so)."""
    memory = (profile.memory_mb + WORKER_OVERHEAD_MB) * 1024 * 1024
    worker = ["--executor", "plain", "--container", "--run-as", SANDBOX_USER]
    mounts: list[dict[str, Any]] = []
    if env.volume is not None:
        # A named volume: inside, the mount shows the engine's neutral volume path, never
        # a host directory (which would name the host's user and paths).
        mounts.append({"Type": "volume", "Source": env.volume, "Target": MOUNT_POINT,
                       "ReadOnly": True})
        worker += ["--path", MOUNT_POINT]
    host_config: dict[str, Any] = {
        "AutoRemove": True,
        "NetworkMode": "none",
        # Neutral names: nothing of the host (its resolver, the container's id as its
        # hostname, the host's cgroup paths, its kernel command line) is visible inside.
        "Dns": ["192.0.2.1"],
        "CgroupnsMode": "private",
        "MaskedPaths": list(MASKED_PATHS),
        # The worker runs as root with only the capabilities to start each run as the
        # sandbox user and to stop it; user code never has any capability, and as a
        # different user it cannot signal, limit or inspect the worker.
        "CapDrop": ["ALL"],
        "CapAdd": list(WORKER_CAPABILITIES),
        # The project's own allow-list profile, not the engine's default (which differs
        # between engine versions: older ones allow io_uring).
        "SecurityOpt": ["no-new-privileges", security_option()],
        "ReadonlyRootfs": True,
        "Tmpfs": {"/tmp": f"rw,nosuid,nodev,size={TMPFS_MB}m,mode=1777"},
        "PidsLimit": profile.max_processes + PROCESS_OVERHEAD,
        "Memory": memory,
        "MemorySwap": memory,
        "NanoCpus": 1_000_000_000,
        "Ulimits": [{"Name": "nofile", "Soft": 1024, "Hard": 1024},
                    {"Name": "fsize", "Soft": profile.max_file_size_mb * 1024 * 1024,
                     "Hard": profile.max_file_size_mb * 1024 * 1024}],
        "Init": os.environ.get("RUNNER_DOCKER_INIT", "1") == "1",
        "Mounts": mounts,
    }
    if runtime:
        host_config["Runtime"] = runtime
    return {
        "Image": image,
        "Cmd": ["python3", "-I", "-c", WORKER_MAIN, *worker],
        "User": "0:0",
        "WorkingDir": "/tmp",
        "Env": ["HOME=/tmp"],
        "Hostname": "sandbox",
        "Labels": {LABEL: "1", OWNER_LABEL: owner_id(), **(extra_labels or {})},
        "AttachStdin": True, "AttachStdout": True, "AttachStderr": True,
        "OpenStdin": True, "StdinOnce": True, "Tty": False,
        "HostConfig": host_config,
    }


class DockerWorker(WorkerProcess):
    """A worker whose process is `docker start -a -i` of a container created through the
    API: killing it must remove the container.

    Its failures are told apart by asking the engine: an engine that does not answer is
    the cause whatever the worker's own symptom (EOF, exit status 125 or 143)."""

    def __init__(self, config: dict[str, Any], name: str, start_timeout: float, *,
                 image: str = "", run_memory_mb: int | None = None) -> None:
        self.name = name
        from ..docker.api import create_container
        from ..docker.engine import docker_cli

        try:
            create_container(name, config)
            try:
                super().__init__([docker_cli(), "start", "-a", "-i", name], env=_client_env(),
                                 start_timeout=start_timeout)
            except WorkerStartError as exc:
                raise _start_failure(exc, image) from None
            if run_memory_mb is not None:
                self._hold_runs_to(run_memory_mb)
        except BaseException:
            # Whatever stopped the start (a failure, or Ctrl-C/SIGTERM while the container
            # was being created or the worker warmed up), the container is this process's
            # to remove: nothing else holds its name, and a later sweep only runs once this
            # process is gone.
            remove_containers([name])
            with suppress(AttributeError):  # the worker process had not started
                super().kill()
            raise

    def _hold_runs_to(self, run_memory_mb: int) -> None:
        """The container's memory limit becomes what the warm worker holds plus one run's
        limit (and a small allowance), so a run's processes together stay within it."""
        from ..docker.api import set_memory_limit

        in_use = self.info.get(wire.MEMORY_IN_USE)
        if not isinstance(in_use, int) or isinstance(in_use, bool) or in_use <= 0:
            return  # no counter to read: the creation limit (with its overhead) stays
        set_memory_limit(self.name, in_use + (run_memory_mb + RUN_MEMORY_ALLOWANCE_MB) * MIB)

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            return super().request(message, timeout)
        except WorkerLost as exc:
            problem = engine_problem()
            if problem is None:
                raise
            raise WorkerLost(f"the Docker engine went away during the run ({exc}): "
                             f"{problem.message}; runs fail until it answers again "
                             "(`runner doctor --fix`), then this Sandbox works again") from None

    def kill(self) -> None:
        remove_containers([self.name])
        super().kill()

    def close(self, timeout: float = 5.0) -> None:
        super().close(timeout)
        remove_containers([self.name])


def _start_failure(exc: WorkerStartError, image: str) -> BackendUnavailableError:
    """The error that says why a container did not start: the engine, the image, or else."""
    problem = engine_problem()
    if problem is not None:
        return problem
    if no_such_image(exc.message) or (image and image_id(image) is None):
        return BackendUnavailableError(
            f"the sandbox image {image or '(unknown)'} is not in the Docker engine",
            fix="run `runner images build` (or `runner doctor --fix`)")
    return WorkerStartError(exc.message, fix="run `runner doctor` to check the engine and the "
                                             "image")


def engine_down_result(exc: EngineUnavailableError, base: dict[str, Any]) -> ExecutionResult:
    """A run that could not start because the engine does not answer: data, not an exception,
    since the Sandbox itself is fine and works again once the engine is back."""
    return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(
        type=error_types.ENGINE_UNAVAILABLE, message=f"{exc.message}; the run did not start. Fix: {exc.fix}"))


class DockerSession(BackendSession):
    """A session whose blocks become `crashed` results while the engine is down."""

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> tuple[ExecutionResult, bool]:
        try:
            return super().run(request, run_id=run_id, cancel=cancel)
        except EngineUnavailableError as exc:
            return engine_down_result(exc, self.backend.base_fields(request, run_id)), False


def _client_env() -> dict[str, str]:
    """The docker client needs to find the engine; the sandbox gets none of this."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_CERT_PATH",
            "DOCKER_TLS_VERIFY", "XDG_RUNTIME_DIR")
    return {key: os.environ[key] for key in keep if key in os.environ}


def sweep_orphans() -> int:
    """Remove sandbox containers left behind by host processes that no longer exist."""
    host = socket.gethostname()
    stale = []
    for container in containers(LABEL):
        labels = dict(item.split("=", 1) for item in container.get("Labels", "").split(",")
                      if "=" in item)
        owner = labels.get(OWNER_LABEL, "")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            stale.append(container["ID"])
    remove_containers(stale)
    return len(stale)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DockerBackend(WorkerBackend):
    name = "docker"

    def __init__(self, *, image: str | None = None, pool_size: int | None = None,
                 runtime: str | None = None, start_timeout: float = 120.0,
                 labels: dict[str, str] | None = None,
                 package_allowlist: Iterable[str] | None = None) -> None:
        status = images.require(image)
        self.image = status.tag
        self.image_id = status.id or ""
        self.runtime = runtime or os.environ.get("RUNNER_DOCKER_RUNTIME") or None
        self.pool_size = pool_size or 2
        self.start_timeout = start_timeout
        self.labels = dict(labels or {})
        # Optional policy: only these distributions may be requested (names, any version).
        self.package_allowlist = allowlist_of(package_allowlist)
        self._pools: dict[tuple[str, Profile], WorkerPool] = {}
        self._environments: dict[tuple[str, ...], Environment] = {}
        self._image_versions: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._closed = False
        sweep_orphans()

    def pools(self) -> list[WorkerPool]:
        with self._lock:
            return list(self._pools.values())

    def warm(self) -> None:
        self._pool(Environment("", None, {}), Profile.of(Limits())).warm()

    def image_versions(self) -> dict[str, str]:
        """Versions of what the image has installed, as its worker reports them."""
        if self._image_versions is None:
            pool = self._pool(Environment("", None, {}), Profile.of(Limits()))
            with pool.lease() as worker:
                self._image_versions = dict(worker.info.get("versions") or {})
        return self._image_versions

    def close(self) -> None:
        with self._lock:
            self._closed = True
        super().close()

    def _pool(self, env: Environment, profile: Profile) -> WorkerPool:
        key = (env.key, profile)
        with self._lock:
            if self._closed:  # a run that was building a package environment during close()
                raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
            pool = self._pools.get(key)
            if pool is None:
                def start() -> WorkerProcess:
                    name = f"runner-{new_id().lower()}"
                    config = container_config(image=self.image, profile=profile, env=env,
                                              runtime=self.runtime, extra_labels=self.labels)
                    return DockerWorker(config, name, self.start_timeout, image=self.image,
                                        run_memory_mb=profile.memory_mb)

                pool = self._pools[key] = WorkerPool(start, self.pool_size)
            return pool

    def place(self, request: ExecutionRequest) -> Placement:
        try:
            requests = parse_requirements(request.packages)
        except PackageRequestError as exc:
            raise RequestRefused(Status.DENIED, error_types.PACKAGE_UNAVAILABLE, str(exc)) from None
        refused = refused_by(self.package_allowlist, requests)
        if refused:
            raise RequestRefused(Status.DENIED, error_types.PACKAGE_UNAVAILABLE, refused)
        key = tuple(sorted(str(r) for r in requests))
        env = self._environments.get(key)
        if env is None:
            try:
                env = resolve(requests, image=self.image, image_id=self.image_id,
                              image_versions=self.image_versions() if requests else {})
            except InstallFailed as exc:
                raise RequestRefused(Status.INSTALL_FAILED, error_types.INSTALL_FAILED,
                              f"installing {', '.join(key)} failed: {exc}") from None
            self._environments[key] = env
        return Placement(self._pool(env, Profile.of(request.limits)), env.versions)

    def run(self, request: ExecutionRequest, *, run_id: str,
            cancel: Cancellation | None = None) -> ExecutionResult:
        try:
            return super().run(request, run_id=run_id, cancel=cancel)
        except EngineUnavailableError as exc:
            return engine_down_result(exc, self.base_fields(request, run_id))

    def open_session(self, request: ExecutionRequest) -> BackendSession:
        return DockerSession(self, request)

    def result_fields(self) -> dict[str, Any]:
        return {"image": self.image_id}

    def describe(self) -> dict[str, Any]:
        return {"image": self.image, "image_id": self.image_id, "runtime": self.runtime or "runc"}


def check_available() -> None:
    """Raise BackendUnavailableError with the fix when Docker cannot be used here."""
    from ..docker.engine import engine_info

    engine_info()
    images.require()


__all__ = [
    "BackendUnavailableError",
    "DockerBackend",
    "check_available",
    "container_config",
    "docker",
    "sweep_orphans",
]
