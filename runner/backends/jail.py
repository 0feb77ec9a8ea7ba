"""The jail tier (the default): real CPython in warm worker processes on this host, inside
the jail the restricted tier also runs in, without its policy.

No Docker, no network. Each run is a fork of a warm worker (runner/worker/), pid 2 of a
PID namespace of its own, with its own mount and IPC namespaces and a writable directory of
its own (a tmpfs of `Limits.disk_mb`: its working directory and /tmp); the kernel layer
(the jail's view, an unprivileged user, Landlock, a seccomp allow list, limits set from
outside) is what confines it. Package sets (`packages=[...]`) are the host's own packages
where they satisfy the request, else environments built once from wheels
(jail_packages.py); workers are pooled per package set.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path

from ..errors import ConfigurationError, SandboxClosedError
from ..packages import PackageRequestError, allowlist_of, parse_requirements, refused_by
from ..paths import private_temp_dir, runner_home
from ..types import ExecutionRequest, Status
from ..wheels import InstallFailed
from ..worker import error_types
from .jail_packages import PackageSet, resolve
from .worker_backend import Placement, RequestRefused, WorkerBackend
from .worker_process import WorkerPool, WorkerProcess


def worker_env() -> dict[str, str]:
    """No host variables (keys, tokens) reach a local worker; what the preloaded libraries
    need to start quietly and alike everywhere (one BLAS thread per run: the run's
    process limit counts threads; matplotlib's headless canvas and font cache; two
    malloc arenas)."""
    try:
        cache = runner_home(writable=True) / "cache" / "matplotlib"
        cache.mkdir(parents=True, exist_ok=True)
    except (ConfigurationError, OSError):
        # A read-only RUNNER_HOME (or a full disk) must not stop a run: the font cache is
        # only a speed-up, so it goes to this user's temporary directory instead.
        private = private_temp_dir()
        cache = (private if private is not None else Path(tempfile.mkdtemp())) / "matplotlib"
        with contextlib.suppress(OSError):
            cache.mkdir(exist_ok=True, mode=0o700)
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": str(cache),
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            # A run's memory limit counts address space: the C library's 64 MB arena per
            # thread would let a handful of threads use it up.
            "MALLOC_ARENA_MAX": "2"}


class JailBackend(WorkerBackend):
    name = "jail"

    def __init__(self, *, pool_size: int | None = None,
                 package_allowlist: Iterable[str] | None = None,
                 start_timeout: float = 120.0) -> None:
        self.pool_size = pool_size or min(4, os.cpu_count() or 2)
        self.package_allowlist = allowlist_of(package_allowlist)
        self.start_timeout = start_timeout
        self._pools: dict[str, WorkerPool] = {}
        self._sets: dict[tuple[str, ...], PackageSet] = {}
        self._lock = threading.Lock()
        self._closed = False

    def pools(self) -> list[WorkerPool]:
        with self._lock:
            return list(self._pools.values())

    def warm(self) -> None:
        self._pool(PackageSet()).warm()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        super().close()

    def _pool(self, packages: PackageSet) -> WorkerPool:
        with self._lock:
            if self._closed:  # a run that was building a package set during close()
                raise SandboxClosedError("this Sandbox is closed", fix="create a new Sandbox")
            pool = self._pools.get(packages.key)
            if pool is None:
                argv = [sys.executable, "-I", "-m", "runner.worker", "--executor", "jail"]
                for path in packages.paths:
                    argv += ["--path", path]
                for path in packages.binds:
                    argv += ["--bind", path]
                env = worker_env()
                timeout = self.start_timeout

                def start() -> WorkerProcess:
                    return WorkerProcess(argv, env=env, start_timeout=timeout)

                pool = self._pools[packages.key] = WorkerPool(start, self.pool_size)
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
        packages = self._sets.get(key)
        if packages is None:
            try:
                packages = resolve(requests)
            except InstallFailed as exc:
                raise RequestRefused(Status.INSTALL_FAILED, error_types.INSTALL_FAILED,
                                     f"installing {', '.join(key)} failed: {exc}") from None
            self._sets[key] = packages
        return Placement(self._pool(packages), packages.versions)
