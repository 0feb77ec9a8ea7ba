"""The restricted tier: RestrictedPython in warm worker processes on this host.

No Docker, no network, no packages beyond an allowlist of preloaded modules. Each run
is a fork of a warm worker (see runner/worker/), so a run costs milliseconds and
shares nothing with the previous one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from ..packages import PackageRequestError, installed_version, parse_requirements
from ..types import ErrorInfo, ExecutionRequest, ExecutionResult, Status
from ..worker.guards import DEFAULT_ALLOWED_MODULES
from .worker_process import WorkerLost, WorkerPool, WorkerProcess

OUTER_GRACE_S = 10.0  # beyond the run's own timeout, before the host gives up on a worker


def _worker_env() -> dict[str, str]:
    """No host variables (keys, tokens) reach the worker."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


class RestrictedBackend:
    name = "restricted"

    def __init__(self, *, allowed_modules: Iterable[str] | None = None,
                 pool_size: int | None = None) -> None:
        self.allowed_modules = tuple(sorted(set(allowed_modules or DEFAULT_ALLOWED_MODULES)))
        argv = [sys.executable, "-I", "-m", "runner.worker", "--executor", "restricted",
                "--allow", ",".join(self.allowed_modules)]
        env = _worker_env()
        self._pool = WorkerPool(lambda: WorkerProcess(argv, env=env),
                                pool_size or min(4, os.cpu_count() or 2))

    def warm(self) -> None:
        self._pool.warm()

    def close(self) -> None:
        self._pool.close()

    def _check_packages(self, requested: Iterable[str]) -> tuple[dict[str, str], str | None]:
        """Versions of the requested packages, or the reason they are refused."""
        try:
            requests = parse_requirements(requested)
        except PackageRequestError as exc:
            return {}, str(exc)
        versions: dict[str, str] = {}
        for request in requests:
            name = request.name
            if name not in self.allowed_modules:
                return versions, (
                    f"package '{request}' is not available in the restricted backend, which "
                    f"offers only: {', '.join(self.allowed_modules)}; use --backend docker "
                    "(Sandbox(backend='docker')) to install packages")
            version = installed_version(name)
            if version is None and name in sys.stdlib_module_names:
                versions[name] = "stdlib"
                continue
            if version is None:
                return versions, (f"package '{name}' is allowed but not installed on this host; "
                                  "use --backend docker to install it")
            if request.requirement.specifier and not request.requirement.specifier.contains(
                    version, prereleases=True):
                return versions, (f"package '{request}' was requested but the restricted backend "
                                  f"has {name} {version}; use --backend docker for other versions")
            versions[name] = version
        return versions, None

    def run(self, request: ExecutionRequest, *, run_id: str) -> ExecutionResult:
        versions, refusal = self._check_packages(request.packages)
        base: dict[str, Any] = {"id": run_id, "backend": self.name, "limits": request.limits,
                                "packages": versions}
        if refusal:
            return ExecutionResult(**base, status=Status.DENIED, exit_code=None,
                                   error=ErrorInfo(type="PackageUnavailable", message=refusal))
        message = request.worker_message(run_id)
        timeout = request.limits.timeout_s + OUTER_GRACE_S
        try:
            with self._pool.lease() as worker:
                reply = worker.request(message, timeout)
        except WorkerLost as exc:
            return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(
                type="WorkerLost", message=f"{exc}; the worker was replaced"))
        return _result_from_reply(reply, base)


def _result_from_reply(reply: dict[str, Any], base: dict[str, Any]) -> ExecutionResult:
    fields = {key: reply.get(key) for key in (
        "status", "exit_code", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
        "error", "return_value", "return_repr", "return_is_repr", "duration_ms", "resources")
        if key in reply}
    try:
        return ExecutionResult(**base, **fields)
    except ValidationError as exc:
        return ExecutionResult(**base, status=Status.CRASHED, error=ErrorInfo(
            type="ProtocolError", message=f"the worker sent a malformed result: {exc}"))
