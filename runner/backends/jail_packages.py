"""Package sets for the jail tier: the host's own packages where they satisfy a request,
else an environment built once from wheels, cached, and bound read-only into the jail.

Requested names are untrusted (a model chose them), and so is the code they bring: it
runs only inside a run's child, after every privilege is gone, never in the worker (whose
first steps in the jail still see the host's files). The worker preloads only the
default set installed with the runner (numpy, sympy, mpmath, matplotlib), so those are
warm; a requested package imports in the run that asks for it.

- No packages: the default set, nothing to bind.
- Every requested distribution is installed on the host in a satisfying version: its
  files and those of everything it requires are bound read-only where Python finds them.
- Otherwise pip downloads wheels for this interpreter (binary only, the user's pip
  configuration) and installs them with no index into `$RUNNER_HOME/envs/jail-<hash>`
  (wheels run no code when installed), constrained to the versions of the preloaded
  packages the worker holds, so that the two never disagree; the directory is bound
  read-only and comes first on the run's `sys.path`. The second use costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..packages import PackageRequest
from ..wheels import (
    InstallFailed,
    build_once,
    envs_root,
    locked,
    pip_reason,
    readable_by_all,
    run_pip,
    wheel_cache,
)

# The distributions whose modules every jail worker preloads (runner's own dependencies).
PRELOADED = ("numpy", "sympy", "mpmath", "matplotlib")


@dataclass(frozen=True)
class PackageSet:
    """What a request's packages need of a worker: pools are per `key`."""

    key: str = ""                               # "" : the default set
    paths: tuple[str, ...] = ()                 # environments: first on sys.path, bound
    binds: tuple[str, ...] = ()                 # the host's own package files, bound
    versions: dict[str, str] = field(default_factory=dict)  # requested name -> version


def resolve(requests: list[PackageRequest], *, timeout: float = 600) -> PackageSet:
    """The package set for `requests`, built on first use (InstallFailed says why not)."""
    if not requests:
        return PackageSet()
    host = _host_versions(requests)
    if host is not None:
        binds = sorted(_files_of_closure([request.requirement for request in requests]))
        key = "host-" + _digest([str(request) for request in requests])
        return PackageSet(key, (), tuple(binds), host)
    return _environment(requests, timeout)


def _digest(parts: list[str]) -> str:
    return hashlib.sha256(json.dumps([*sorted(parts), sys.version, sysconfig.get_platform()])
                          .encode()).hexdigest()[:16]


def _host_versions(requests: list[PackageRequest]) -> dict[str, str] | None:
    """Requested name -> host version, when the host satisfies every request; else None."""
    versions = {}
    for request in requests:
        try:
            version = metadata.version(request.name)
        except metadata.PackageNotFoundError:
            return None
        if request.requirement.specifier and not request.requirement.specifier.contains(
                version, prereleases=True):
            return None
        versions[request.name] = version
    return versions


def _files_of_closure(requirements: list[Requirement]) -> set[str]:
    """The top-level files and directories of the distributions `requirements` name and of
    everything they require (extras included where asked for), as installed here."""
    found: set[str] = set()
    seen: set[str] = set()
    pending = [(requirement, frozenset(requirement.extras)) for requirement in requirements]
    while pending:
        requirement, extras = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed
        seen.add(name)
        found.update(_top_level_paths(dist))
        for text in dist.requires or ():
            child = Requirement(text)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if child.marker is None or any(child.marker.evaluate(env) for env in environments):
                pending.append((child, frozenset(child.extras)))
    return found


def _top_level_paths(dist: metadata.Distribution) -> set[str]:
    """Absolute paths of a distribution's top-level entries in its site directory
    (packages, module files, `name.libs` directories of bundled C libraries)."""
    paths: set[str] = set()
    for file in dist.files or ():
        parts = Path(str(file)).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(
                (".dist-info", ".egg-info", ".data", ".pth")):
            continue
        location = os.path.normpath(str(dist.locate_file(parts[0])))
        if os.path.exists(location):
            paths.add(location)
    return paths


def _environment(requests: list[PackageRequest], timeout: float) -> PackageSet:
    texts = [str(request) for request in requests]
    key = "jail-" + _digest(texts)
    root = envs_root()
    target = root / key
    with locked(root, key):
        def install(staging: Path) -> None:
            wheels = wheel_cache(key)
            constraints = wheels / "constraints.txt"
            constraints.write_text("".join(f"{name}=={version}\n"
                                           for name, version in _preloaded_versions().items()))
            _pip(["download", "--only-binary=:all:", "--dest", str(wheels),
                  "--constraint", str(constraints), "--", *texts], timeout)
            readable_by_all(staging)
            _pip(["install", "--no-index", "--find-links", str(wheels), "--only-binary=:all:",
                  "--no-warn-script-location", "--target", str(staging),
                  "--constraint", str(constraints), "--", *texts], timeout)
            readable_by_all(staging)

        versions = build_once(target, install, ", ".join(texts))
    chosen = {request.name: versions[request.name] for request in requests
              if request.name in versions}
    return PackageSet(key, (str(target),), (), chosen)


def _preloaded_versions() -> dict[str, str]:
    versions = {}
    for name in PRELOADED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _pip(arguments: list[str], timeout: float) -> None:
    proc = run_pip([sys.executable, "-m", "pip", "--disable-pip-version-check", *arguments],
                   timeout)
    if proc.returncode != 0:
        raise InstallFailed(pip_reason(proc.stderr))
