"""What every backend is, and the registry that picks one by name.

Backends receive an `ExecutionRequest` and return an `ExecutionResult`; nothing above
them knows which isolation tier ran the code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import UnknownBackendError
from ..types import ExecutionRequest, ExecutionResult


class Backend(Protocol):
    name: str

    def run(self, request: ExecutionRequest, *, run_id: str) -> ExecutionResult: ...

    def warm(self) -> None: ...

    def open_session(self, template: ExecutionRequest) -> Any: ...

    def close(self) -> None: ...


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


register_backend("restricted", _load_restricted)
register_backend("docker", _load_docker)
