"""The engine's HTTP API, for what its command line cannot say.

Everything else goes through the `docker` command (engine.py). Creating a sandbox
container goes through the API because only the API takes `HostConfig.MaskedPaths`: the
/proc files a container must not read (the host kernel's command line, its boot id), on
top of the engine's own list. The client is docker-py's, pointed at the endpoint the
`docker` command itself uses (its current context, or DOCKER_HOST), so what works in a
terminal works here. Its exceptions are translated here, once.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from ..errors import BackendUnavailableError
from .engine import ENGINE_FIX, DockerCommandError, EngineUnavailableError, docker

_clients: dict[str | None, Any] = {}  # by DOCKER_HOST, which may change (tests point it away)
_client_lock = threading.Lock()


def _endpoint() -> str:
    """The engine address the `docker` command uses (DOCKER_HOST, else its context)."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    proc = docker(["context", "inspect", "--format", "{{json .Endpoints.docker.Host}}"],
                  check=False, timeout=30)
    try:
        host = json.loads(proc.stdout or b'""')
    except ValueError:
        host = ""
    return host if isinstance(host, str) and host else "unix:///var/run/docker.sock"


def client() -> Any:
    """A docker-py API client for this process (one per engine address)."""
    key = os.environ.get("DOCKER_HOST")
    with _client_lock:
        if key not in _clients:
            import docker as docker_py

            kwargs = docker_py.utils.kwargs_from_env()
            kwargs["base_url"] = _endpoint()
            # The API version the engine speaks, asked once (not "auto", which asks the
            # engine at construction and fails when it is down).
            _clients[key] = docker_py.APIClient(version=_API_VERSION, timeout=60, **kwargs)
        return _clients[key]


def create_container(name: str, config: dict[str, Any]) -> str:
    """Create (not start) a container; its id. Raises EngineUnavailableError when the engine
    does not answer and BackendUnavailableError when the image is not there."""
    import docker as docker_py
    import requests

    try:
        created = client().create_container_from_config(config, name=name)
    except docker_py.errors.ImageNotFound:
        raise BackendUnavailableError(
            f"the sandbox image {config.get('Image')} is not in the Docker engine",
            fix="run `runner images build` (or `runner doctor --fix`)") from None
    except docker_py.errors.APIError as exc:
        raise DockerCommandError(f"the Docker engine refused to create the container: "
                                 f"{exc.explanation or exc}",
                                 fix="run `runner doctor` to check the engine and the image") from None
    except (requests.exceptions.ConnectionError, docker_py.errors.DockerException,
            OSError) as exc:
        raise EngineUnavailableError(f"the Docker engine is not reachable: {exc}",
                                     fix=ENGINE_FIX) from None
    return str(created.get("Id", ""))


def set_memory_limit(name: str, limit_bytes: int) -> None:
    """Set a running container's memory limit (memory and swap alike)."""
    import docker as docker_py
    import requests

    try:
        client().update_container(name, mem_limit=limit_bytes, memswap_limit=limit_bytes)
    except docker_py.errors.APIError as exc:
        raise DockerCommandError(f"the Docker engine refused to set the container's memory "
                                 f"limit: {exc.explanation or exc}",
                                 fix="run `runner doctor` to check the engine") from None
    except (requests.exceptions.ConnectionError, docker_py.errors.DockerException,
            OSError) as exc:
        raise EngineUnavailableError(f"the Docker engine is not reachable: {exc}",
                                     fix=ENGINE_FIX) from None


_API_VERSION = "1.41"  # Docker 20.10 and later; MaskedPaths exists since 1.40
