"""A thin, typed wrapper over the `docker` command line.

The runner talks to the engine through the same CLI a person uses, so what works in a
terminal works here, and a failure can be reproduced by pasting the command. Failures
become `BackendUnavailableError` with the fix in the message, once, here, and an engine
that does not answer is told apart from everything else (`EngineUnavailableError`): its
fix is the engine, never the image or the runner's installation.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from ..errors import BackendUnavailableError

LABEL = "org.runner.sandbox"  # every container the runner creates carries it
OWNER_LABEL = "org.runner.owner"  # "<hostname>:<pid>" of the process that created it
SETUP_HINT = ("run `runner doctor --fix` (as root it installs and starts the engine and "
              "builds the images), or start Docker yourself and run `runner images build`")
ENGINE_FIX = ("the Docker engine is the problem, not the image or the runner: start it with "
              "`runner doctor --fix` (as root), or start Docker yourself (e.g. `systemctl start "
              "docker`); an open Sandbox works again once the engine answers")
PERMISSION_FIX = ("let this user use the engine's socket: `sudo usermod -aG docker $USER`, then "
                  "log in again (or point DOCKER_HOST at an engine you may use)")
# What the docker client prints when it cannot talk to the engine at all.
_UNREACHABLE = ("Cannot connect to the Docker daemon", "Is the docker daemon running")
_NO_SUCH_IMAGE = ("No such image", "No such object", "Unable to find image")


class DockerCommandError(BackendUnavailableError):
    code = "DOCKER_COMMAND"

    def __init__(self, message: str, *, stderr: str = "", fix: str | None = None) -> None:
        self.stderr = stderr
        super().__init__(message, fix=fix)


class DockerTimeoutError(DockerCommandError):
    """A docker command ran past its time (a slow build, or a wedged engine)."""


class EngineUnavailableError(DockerCommandError):
    """The engine does not answer (stopped, restarting, or its socket is not ours to use)."""

    code = "DOCKER_ENGINE_UNAVAILABLE"


def engine_unreachable(stderr: str) -> bool:
    """Whether the docker client's error output says the engine itself did not answer."""
    return any(sign in stderr for sign in _UNREACHABLE) or _permission_denied(stderr)


def _permission_denied(stderr: str) -> bool:
    return "permission denied" in stderr and "docker" in stderr.lower() and ".sock" in stderr


def no_such_image(stderr: str) -> bool:
    return any(sign.lower() in stderr.lower() for sign in _NO_SUCH_IMAGE)


def unavailable(stderr: str) -> EngineUnavailableError:
    """The error for an engine that did not answer, with the fix that fits why."""
    detail = stderr.strip().splitlines()[0] if stderr.strip() else "no answer"
    if _permission_denied(stderr):
        return EngineUnavailableError(f"this user may not use the Docker engine: {detail[:300]}",
                                      stderr=stderr, fix=PERMISSION_FIX)
    return EngineUnavailableError(f"the Docker engine is not reachable: {detail[:300]}",
                                  stderr=stderr, fix=ENGINE_FIX)


def docker_cli() -> str:
    path = shutil.which("docker")
    if path is None:
        raise BackendUnavailableError("the `docker` command is not installed",
                                      fix="install Docker (Debian: apt-get install docker.io), "
                                          "or " + SETUP_HINT)
    return path


def docker(args: Sequence[str], *, timeout: float = 120, check: bool = True,
           input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run `docker ARGS`; raise DockerCommandError (with its stderr) when it fails."""
    command = [docker_cli(), *args]
    try:
        proc = subprocess.run(command, check=False, capture_output=True, timeout=timeout,
                              input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DockerTimeoutError(f"`docker {' '.join(args[:3])}` did not finish in {timeout:g} s",
                                 fix="check that the engine is healthy: `docker info`") from None
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        if engine_unreachable(stderr):  # whatever the caller expected, this is not it
            raise unavailable(stderr)
        if check:
            raise DockerCommandError(f"`docker {' '.join(args[:3])}` failed: {stderr[-800:]}",
                                     stderr=stderr)
    return proc


def engine_info(timeout: float = 30) -> dict[str, Any]:
    """`docker info` as a dict; raises EngineUnavailableError when the engine does not answer."""
    try:
        proc = docker(["info", "--format", "{{json .}}"], timeout=timeout)
    except DockerTimeoutError:
        # `docker info` is instant on a healthy engine: one that does not answer it is wedged
        # or in the middle of shutting down.
        raise EngineUnavailableError(f"the Docker engine did not answer `docker info` in "
                                     f"{timeout:g} s", fix=ENGINE_FIX) from None
    info: dict[str, Any] = json.loads(proc.stdout or b"{}")
    if info.get("ServerErrors"):
        raise unavailable("; ".join(info["ServerErrors"]))
    if not isinstance(info, dict):
        raise DockerCommandError(f"`docker info` printed {type(info).__name__} where an object "
                                 "was expected", fix=SETUP_HINT)
    return info


def engine_problem(timeout: float = 10) -> EngineUnavailableError | None:
    """Why the engine does not answer right now, or None when it does."""
    try:
        engine_info(timeout)
    except EngineUnavailableError as exc:
        return exc
    return None


def image_id(tag: str) -> str | None:
    """The image's id; None when the engine has no such image (an unreachable engine raises)."""
    proc = docker(["image", "inspect", "--format", "{{.Id}}", tag], check=False, timeout=30)
    if proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace")
        if no_such_image(stderr) or not stderr.strip():
            return None
        raise DockerCommandError(f"`docker image inspect {tag}` failed: {stderr.strip()[-800:]}",
                                 stderr=stderr)
    return proc.stdout.decode().strip() or None


def list_images(reference: str) -> list[dict[str, str]]:
    proc = docker(["image", "ls", "--format", "{{json .}}", reference], timeout=30)
    return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]


def containers(label_filter: str, *, all_states: bool = True) -> list[dict[str, str]]:
    args = ["ps", "--no-trunc", "--format", "{{json .}}", "--filter", f"label={label_filter}"]
    if all_states:
        args.insert(1, "-a")
    proc = docker(args, timeout=30)
    return [json.loads(line) for line in proc.stdout.decode().splitlines() if line.strip()]


def remove_containers(names_or_ids: Sequence[str]) -> None:
    """Best effort: with the engine down there is nothing to remove it from."""
    if names_or_ids:
        with contextlib.suppress(EngineUnavailableError):
            docker(["rm", "-f", *names_or_ids], check=False, timeout=60)
