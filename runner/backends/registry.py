"""The backends by name: `create_backend("docker", ...)` imports and builds one.

Each entry imports its implementation only when it is asked for, so an optional tier
(Ray) costs nothing until it is used, and the interface (`runner.backends.base`) stays
free of imports of the implementations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import BackendUnavailableError, UnknownBackendError
from .base import Backend

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


def _load_jail() -> BackendFactory:
    from .jail import JailBackend

    return JailBackend


def _load_restricted() -> BackendFactory:
    from .restricted import RestrictedBackend

    return RestrictedBackend


def _load_docker() -> BackendFactory:
    from .docker import DockerBackend

    return DockerBackend


def _load_ray() -> BackendFactory:
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # a module entry that is not a module (None)
        found = False
    if not found:  # an optional extra
        raise BackendUnavailableError(
            "the ray backend needs Ray, which is not installed here",
            fix="pip install 'runner-sandbox[ray]'")

    def make(**options: Any) -> Backend:
        from .ray_env import prepare

        # Before `ray` is imported: it reads its authentication settings then.
        prepare(options.get("ray_address"))
        try:
            from .ray import RayBackend
        except ImportError as exc:
            raise BackendUnavailableError(
                f"the ray backend needs Ray, which cannot be imported here ({exc})",
                fix="pip install 'runner-sandbox[ray]'") from None
        return RayBackend(**options)

    return make


register_backend("jail", _load_jail)
register_backend("restricted", _load_restricted)
register_backend("docker", _load_docker)
register_backend("ray", _load_ray)
