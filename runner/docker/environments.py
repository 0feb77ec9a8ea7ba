"""Package environments for the Docker tier: resolved on the host, built offline,
cached, mounted read-only.

1. Requirements are parsed strictly (runner.packages): names and versions only.
2. When the image already has a satisfying version of every requested package, there
   is nothing to build: the preinstalled ones are used.
3. Otherwise pip downloads wheels on the host, with the user's own pip configuration
   (index, certificates, find-links), binary only, for the image's Python and platform.
4. A throwaway container with no network installs them into a directory (pip runs
   from its own wheel; the sandbox image carries no pip) and compiles bytecode.
5. The directory is cached under $RUNNER_HOME/envs/<hash of the requests and image>,
   and copied once into a named volume of the engine (runner-env-<hash>), which is what
   sandboxes mount, read-only: inside a sandbox the mount shows the engine's neutral
   volume path, never a host directory. The second use costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from ..packages import PackageRequest
from ..paths import runner_home
from ..wheels import InstallFailed, build_once, envs_root, locked, pip_reason, readable_by_all, run_pip, wheel_cache
from .engine import DockerCommandError, EngineUnavailableError, docker

IMAGE_PYTHON = "3.11"  # the sandbox image is Debian bookworm's python3
MOUNT_POINT = "/opt/env"


@dataclass(frozen=True)
class Environment:
    key: str  # "" when the image's own packages satisfy the request
    path: Path | None
    versions: dict[str, str]  # requested name -> version that will run
    volume: str | None = None  # the engine volume sandboxes mount (a copy of `path`)


def _pip_platforms() -> list[str]:
    machine = platform.machine() or "x86_64"
    tags = [f"manylinux_2_{minor}_{machine}" for minor in (36, 34, 31, 28, 27, 24, 17)]
    return [*tags, f"manylinux2014_{machine}", f"linux_{machine}"]


def _download(requests: list[PackageRequest], wheels: Path, timeout: float) -> None:
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
               "--only-binary=:all:", "--python-version", IMAGE_PYTHON,
               "--implementation", "cp", "--dest", str(wheels)]
    for tag in _pip_platforms():
        command += ["--platform", tag]
    command += ["--", *[str(request) for request in requests]]
    proc = run_pip(command, timeout)
    if proc.returncode != 0:
        raise InstallFailed(pip_reason(proc.stderr))


def _pip_wheel(cache: Path, timeout: float) -> Path:
    """A pip wheel to run inside the throwaway container (the image has no pip)."""
    tools = cache / "pip-tool"
    found = sorted(tools.glob("pip-*.whl"))
    if not found:
        tools.mkdir(parents=True, exist_ok=True)
        proc = run_pip([sys.executable, "-m", "pip", "download", "--no-deps",
                        "--only-binary=:all:", "--dest", str(tools), "pip"], timeout)
        if proc.returncode != 0:
            raise InstallFailed("could not fetch pip itself: " + pip_reason(proc.stderr))
        found = sorted(tools.glob("pip-*.whl"))
    return found[-1]


def _select(versions: dict[str, str], requests: list[PackageRequest]) -> dict[str, str]:
    return {request.name: versions[request.name] for request in requests
            if request.name in versions}


def resolve(requests: list[PackageRequest], *, image: str, image_id: str,
            image_versions: dict[str, str], timeout: float = 600) -> Environment:
    """The environment for `requests` on `image`, built on first use."""
    if not requests:
        return Environment("", None, {})
    satisfied = all(
        request.name in image_versions and request.requirement.specifier.contains(
            image_versions[request.name], prereleases=True)
        for request in requests)
    if satisfied:
        return Environment("", None, _select(image_versions, requests))

    key = hashlib.sha256(json.dumps(
        [sorted(str(r) for r in requests), image_id]).encode()).hexdigest()[:16]
    root = envs_root()
    target = root / key
    # One build per key, and a finished environment (which containers may have mounted)
    # is never replaced.
    with locked(root, key):
        def install(staging: Path) -> None:
            wheels = wheel_cache(key)
            _download(requests, wheels, timeout)
            pip = _pip_wheel(runner_home(writable=True) / "cache", timeout)
            _install(image, wheels, pip, staging, requests, timeout)
            readable_by_all(staging)  # sandboxes run as another user and mount it read-only

        versions = build_once(target, install, ", ".join(str(r) for r in requests))
        volume = _volume(key, target, image, timeout)
        return Environment(key, target, _select(versions, requests), volume)


_VOLUME_LABEL = "org.runner.env"
_VOLUME_RECORD = ".volume"  # in the environment's directory: the volume it was copied to


def _volume(key: str, target: Path, image: str, timeout: float) -> str:
    """The engine volume holding a copy of the environment at `target`, copied now if the
    engine does not have it (first use, or an engine whose storage was reset). The caller
    holds the environment's lock."""
    name = f"runner-env-{key}"
    record = target / _VOLUME_RECORD
    created = _volume_created(name)
    if created is not None and record.is_file() and record.read_text() == created:
        return name
    if created is not None:  # there, but not known to be complete: start again
        docker(["volume", "rm", "-f", name], check=False, timeout=60)
    docker(["volume", "create", "--label", f"{_VOLUME_LABEL}={key}", name], timeout=60)
    args = ["run", "--rm", "--pull", "never", "--network", "none", "--cap-drop", "ALL",
            "--cap-add", "DAC_OVERRIDE", "--cap-add", "CHOWN", "--cap-add", "FOWNER",
            "--security-opt", "no-new-privileges", "--user", "0:0",
            "-v", f"{target}:/src:ro", "-v", f"{name}:/dst", "--entrypoint", "sh", image,
            "-c", "cp -a /src/. /dst/ && chmod -R a+rX /dst"]
    try:
        docker(args, timeout=timeout)
    except EngineUnavailableError:
        raise
    except DockerCommandError as exc:
        docker(["volume", "rm", "-f", name], check=False, timeout=60)
        raise InstallFailed(f"could not copy the environment into the volume {name}: "
                            f"{exc.stderr[-500:] or exc.message}") from None
    created = _volume_created(name)
    record.write_text(created or "")
    return name


def _volume_created(name: str) -> str | None:
    proc = docker(["volume", "inspect", "--format", "{{.CreatedAt}}", name], check=False,
                  timeout=30)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def _install(image: str, wheels: Path, pip: Path, target: Path,
             requests: list[PackageRequest], timeout: float) -> None:
    script = (f"python3 /pip/{pip.name}/pip install --disable-pip-version-check --no-index "
              "--find-links /wheels --only-binary=:all: --no-warn-script-location "
              "--target /env -r /dev/stdin && python3 -m compileall -q /env >/dev/null")
    args = ["run", "--rm", "-i", "--pull", "never", "--network", "none", "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges", "--user", f"{os.getuid()}:{os.getgid()}",
            "-e", "HOME=/tmp", "-v", f"{wheels}:/wheels:ro", "-v", f"{pip.parent}:/pip:ro",
            "-v", f"{target}:/env", "--entrypoint", "sh", image, "-c", script]
    requirements = "\n".join(str(request) for request in requests).encode()
    try:
        docker(args, timeout=timeout, input=requirements)
    except EngineUnavailableError:
        raise  # not the packages' fault: the caller reports the engine
    except DockerCommandError as exc:
        raise InstallFailed(pip_reason(exc.stderr)) from None
