"""Package environments built from wheels: what the Docker and jail tiers share.

Both tiers build an environment per package set once and cache it under
`$RUNNER_HOME/envs/`: pip downloads wheels on the host (binary only, with the user's own pip
configuration: index, certificates, find-links), installs them into a staging directory
with no index, and the finished directory replaces nothing but an unfinished one, atomically
(a half-built environment is never used). One build per key at a time: a thread lock for
this process and a file lock for the others. The tiers differ in where pip installs (the
Docker tier in a throwaway container, for the image's Python; the jail tier with this
host's Python) and in how sandboxes see the result.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from packaging.utils import canonicalize_name

from .paths import runner_home

COMPLETE = ".complete"  # in a finished environment: the versions it holds, as JSON
# Says, once per build, that a package set is being installed (the CLI shows it).
log = logging.getLogger("runner.install")
_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class InstallFailed(Exception):
    """pip could not resolve or install the request; the message is pip's reason."""


def pip_reason(stderr: str) -> str:
    """pip's own explanation, trimmed to the lines that say what went wrong."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR") or "No matching" in line]
    return "\n".join((errors or lines)[-6:])[-1500:] or "pip failed without a message"


def run_pip(command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise InstallFailed(f"pip did not finish within {timeout:g} s (a slow or unreachable "
                            "index?)") from None


def installed_versions(target: Path) -> dict[str, str]:
    """Distribution name -> version, for every distribution installed in `target`."""
    versions = {}
    for info in target.glob("*.dist-info"):
        match = re.match(r"(.+)-([^-]+)\.dist-info$", info.name)
        if match:
            versions[str(canonicalize_name(match.group(1)))] = match.group(2)
    return versions


def _thread_lock(key: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


@contextlib.contextmanager
def locked(root: Path, key: str) -> Iterator[None]:
    """Hold the build lock of environment `key` under `root` (threads and processes)."""
    with _thread_lock(f"{root}/{key}"), open(root / f".{key}.lock", "w") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        yield


def envs_root() -> Path:
    root = runner_home(writable=True) / "envs"
    root.mkdir(parents=True, exist_ok=True)
    return root


def wheel_cache(key: str) -> Path:
    wheels = runner_home(writable=True) / "cache" / "wheels" / key
    wheels.mkdir(parents=True, exist_ok=True)
    return wheels


def readable_by_all(root: Path) -> None:
    """Sandboxes run as another user and see the environment read-only: every directory
    and file readable (and directories searchable) by all."""
    for directory, _subdirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def build_once(target: Path, install: Callable[[Path], None], what: str) -> dict[str, str]:
    """The versions in the finished environment at `target`, built now by `install` (into
    a staging directory beside it) unless it is already there. The caller holds the lock."""
    complete = target / COMPLETE
    if complete.is_file():
        versions: dict[str, str] = json.loads(complete.read_text())
        return versions
    log.info("installing %s into a cached environment (first use of this package set; "
             "later runs reuse it)", what)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        install(staging)
        versions = installed_versions(staging)
        (staging / COMPLETE).write_text(json.dumps(versions))
        shutil.rmtree(target, ignore_errors=True)  # only ever an unfinished one here
        staging.replace(target)  # atomic: a half-built environment is never used
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return versions
