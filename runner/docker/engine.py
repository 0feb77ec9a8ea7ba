"""A thin, typed wrapper over the `docker` command line.

The runner talks to the engine through the same CLI a person uses, so what works in a
terminal works here, and a failure can be reproduced by pasting the command. Failures
become `BackendUnavailableError` with the fix in the message, once, here.
"""

from __future__ import annotations

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


class DockerCommandError(BackendUnavailableError):
    code = "DOCKER_COMMAND"

    def __init__(self, message: str, *, stderr: str = "", fix: str | None = None) -> None:
        self.stderr = stderr
        super().__init__(message, fix=fix)


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
        proc = subprocess.run(command, capture_output=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise DockerCommandError(f"`docker {' '.join(args[:3])}` did not finish in {timeout:g} s",
                                 fix="check that the engine is healthy: `docker info`") from None
    if check and proc.returncode != 0:
        stderr = proc.stderr.decode("utf-8", "replace").strip()
        fix = SETUP_HINT if _engine_down(stderr) else None
        raise DockerCommandError(f"`docker {' '.join(args[:3])}` failed: {stderr[-800:]}",
                                 stderr=stderr, fix=fix)
    return proc


def _engine_down(stderr: str) -> bool:
    return "Cannot connect to the Docker daemon" in stderr or "docker.sock" in stderr


def engine_info() -> dict[str, Any]:
    """`docker info` as a dict; raises when the engine is not reachable."""
    proc = docker(["info", "--format", "{{json .}}"], timeout=30)
    info = json.loads(proc.stdout or b"{}")
    if info.get("ServerErrors"):
        raise DockerCommandError("the Docker engine is not reachable: "
                                 + "; ".join(info["ServerErrors"]), fix=SETUP_HINT)
    if not isinstance(info, dict):
        raise DockerCommandError(f"`docker info` printed {type(info).__name__} where an object "
                                 "was expected", fix=SETUP_HINT)
    return info


def image_id(tag: str) -> str | None:
    proc = docker(["image", "inspect", "--format", "{{.Id}}", tag], check=False, timeout=30)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip() or None


def image_labels(tag: str) -> dict[str, str]:
    proc = docker(["image", "inspect", "--format", "{{json .Config.Labels}}", tag], timeout=30)
    return json.loads(proc.stdout or b"null") or {}


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
    if names_or_ids:
        docker(["rm", "-f", *names_or_ids], check=False, timeout=60)
