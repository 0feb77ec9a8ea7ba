"""The backends by name: `create_backend("docker", ...)` imports and builds one.

Each entry imports its implementation only when it is asked for, so an optional tier
(Ray) costs nothing until it is used, and the interface (`runner.backends.base`) stays
free of imports of the implementations.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BackendUnavailableError, ConfigurationError, UnknownBackendError
from .base import Backend

BackendFactory = Callable[..., Backend]
_REGISTRY: dict[str, Callable[[], BackendFactory]] = {}


def register_backend(name: str, loader: Callable[[], BackendFactory]) -> None:
    """Register a backend; `loader` imports it lazily so optional tiers cost nothing."""
    _REGISTRY[name] = loader


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


# Options of other tools' executors that users carry over; what runner does instead.
_FOREIGN_OPTIONS = {
    "use_docker": "runner picks the tier by name: backend='docker' runs blocks in Docker",
    "image": "the Docker tier builds its own image: backend='docker', and packages=[...] for "
             "what the blocks need",
    "virtual_env_context": "packages=[...] installs what the blocks need, for the sandbox only",
}


def check_backend(name: str, options: Mapping[str, Any] | None = None) -> BackendFactory:
    """The factory of backend `name`, once `name` and `options` are known to fit it: an
    UnknownBackendError (with the nearest name) or a ConfigurationError (naming the option
    and the ones the backend takes) otherwise, before anything is started."""
    if not isinstance(name, str) or name not in _REGISTRY:
        near = difflib.get_close_matches(str(name), backend_names(), n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise UnknownBackendError(f"unknown backend {name!r}",
                                  fix=f"{hint}choose one of: {', '.join(backend_names())}")
    factory = _REGISTRY[name]()
    parameters = inspect.signature(factory).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return factory  # (it checks its own options when it is built)
    taken = [p.name for p in parameters.values() if p.kind is not inspect.Parameter.VAR_POSITIONAL]
    for option in options or {}:
        if option not in taken:
            fix = _FOREIGN_OPTIONS.get(option) or (
                f"the {name} backend takes: {', '.join(taken)}" if taken
                else f"the {name} backend takes no options")
            raise ConfigurationError(f"the {name} backend has no option {option!r}", fix=fix)
    return factory


def create_backend(name: str, **options: Any) -> Backend:
    return check_backend(name, options)(**options)


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
