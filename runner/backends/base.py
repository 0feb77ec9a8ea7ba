"""What every backend is, and the registry that picks one by name.

Backends receive an `ExecutionRequest` and return an `ExecutionResult`; nothing above
them knows which isolation tier ran the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import BackendUnavailableError, UnknownBackendError
from ..types import ExecutionRequest, ExecutionResult, Status
from ..worker import error_types


class Backend(Protocol):
    name: str

    def run(self, request: ExecutionRequest, *, run_id: str) -> ExecutionResult: ...

    def warm(self) -> None: ...

    def open_session(self, template: ExecutionRequest) -> Any: ...

    def close(self) -> None: ...


# Error types of `crashed` results whose run the backend lost: its cluster node (or the
# actor holding the sandbox there) went away mid-run, or no node could take the run. They
# say nothing about the code, and a sandboxed run leaves nothing behind, so a caller that
# counts outcomes (an evaluation) runs such a request again instead of counting it.
LOST_RUN_ERRORS = error_types.LOST_RUN


def run_was_lost(result: ExecutionResult) -> bool:
    """Whether the backend lost this run (see LOST_RUN_ERRORS): run it again, once."""
    return result.status is Status.CRASHED and result.error is not None and \
        result.error.type in LOST_RUN_ERRORS


# The tiers a ray backend's actors can hold on the cluster's nodes.
RAY_INNER_BACKENDS = ("restricted", "docker")

BackendFactory = Callable[..., Backend]
_REGISTRY: dict[str, Callable[[], BackendFactory]] = {}


def register_backend(name: str, loader: Callable[[], BackendFactory]) -> None:
    """Register a backend; `loader` imports it lazily so optional tiers cost nothing."""
    _REGISTRY[name] = loader


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def create_backend(name: str, **options: Any) -> Backend:
    try:
        loader = _REGISTRY[name]
    except KeyError:
        raise UnknownBackendError(
            f"unknown backend {name!r}",
            fix=f"choose one of: {', '.join(backend_names())}") from None
    return loader()(**options)


def _load_restricted() -> BackendFactory:
    from .restricted import RestrictedBackend

    return RestrictedBackend


def _load_docker() -> BackendFactory:
    from .docker import DockerBackend

    return DockerBackend


def _load_ray() -> BackendFactory:
    try:
        import ray  # noqa: F401  (an optional extra)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"the ray backend needs Ray, which cannot be imported here ({exc})",
            fix="pip install 'runner[ray]'") from None
    from .ray import RayBackend

    return RayBackend


register_backend("restricted", _load_restricted)
register_backend("docker", _load_docker)
register_backend("ray", _load_ray)
