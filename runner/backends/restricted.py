"""The restricted tier: RestrictedPython in warm worker processes on this host.

No Docker, no network, no packages beyond an allowlist of preloaded modules. Each run
is a fork of a warm worker (see runner/worker/), so a run costs milliseconds and
shares nothing with the previous one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence

from ..errors import ConfigurationError
from ..packages import PackageRequestError, installed_version, parse_requirements
from ..types import ExecutionRequest, Status
from ..worker import error_types
from ..worker.policy.names import DEFAULT_ALLOWED_MODULES
from ..worker.policy.refusals import ELSEWHERE
from .worker_backend import Placement, RequestRefused, WorkerBackend
from .worker_process import WorkerPool, WorkerProcess

# Fewer layers than "full" (real builtins under the audit hook and the kernel, or under
# the kernel alone) are for the isolation tests, which set this variable.
TEST_LAYERS_VARIABLE = "RUNNER_TEST_LAYERS"


def _worker_env() -> dict[str, str]:
    """No host variables (keys, tokens) reach the worker."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1"}


class RestrictedBackend(WorkerBackend):
    name = "restricted"

    def __init__(self, *, allowed_modules: Iterable[str] | None = None,
                 pool_size: int | None = None, layers: str = "full") -> None:
        self.allowed_modules = tuple(sorted(set(allowed_modules or DEFAULT_ALLOWED_MODULES)))
        if layers != "full" and os.environ.get(TEST_LAYERS_VARIABLE) != "1":
            raise ConfigurationError(
                f"layers={layers!r} runs code with the real builtins: it exists only for the "
                "isolation tests",
                fix=f"leave layers at 'full' (tests set {TEST_LAYERS_VARIABLE}=1 to use it)")
        self.layers = layers
        argv = [sys.executable, "-I", "-m", "runner.worker", "--executor", "restricted",
                "--allow", ",".join(self.allowed_modules), "--layers", layers]
        env = _worker_env()
        self._pool = WorkerPool(lambda: WorkerProcess(argv, env=env),
                                pool_size or min(4, os.cpu_count() or 2))

    def pools(self) -> list[WorkerPool]:
        return [self._pool]

    def place(self, request: ExecutionRequest) -> Placement:
        if request.files:
            raise RequestRefused(Status.DENIED, error_types.NO_FILES,
                                 "the restricted backend's runs have no files, so none can be "
                                 f"handed to them; {ELSEWHERE}")
        return Placement(self._pool, self._check_packages(request.packages))

    def package_refusal(self, packages: Sequence[str]) -> str | None:
        """Why `packages` cannot be had here (only the preloaded modules can), or None."""
        try:
            self._check_packages(packages)
        except RequestRefused as refusal:
            return refusal.message
        return None

    def _check_packages(self, requested: Iterable[str]) -> dict[str, str]:
        """Versions of the requested packages; RequestRefused says why they cannot be had here."""
        try:
            requests = parse_requirements(requested)
        except PackageRequestError as exc:
            raise RequestRefused(Status.DENIED, error_types.PACKAGE_UNAVAILABLE, str(exc)) from None
        versions: dict[str, str] = {}

        def refuse(message: str) -> RequestRefused:
            return RequestRefused(Status.DENIED, error_types.PACKAGE_UNAVAILABLE, message, versions)

        for request in requests:
            name = request.name
            if name not in self.allowed_modules:
                raise refuse(
                    f"package '{request}' is not available in the restricted backend, which "
                    f"offers only: {', '.join(self.allowed_modules)}; {ELSEWHERE}")
            version = installed_version(name)
            if version is None and name in sys.stdlib_module_names:
                versions[name] = "stdlib"
                continue
            if version is None:
                raise refuse(f"package '{name}' is allowed but not installed on this host; "
                             f"{ELSEWHERE}")
            if request.requirement.specifier and not request.requirement.specifier.contains(
                    version, prereleases=True):
                raise refuse(f"package '{request}' was requested but the restricted backend "
                             f"has {name} {version}; {ELSEWHERE}")
            versions[name] = version
        return versions
