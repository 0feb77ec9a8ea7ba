"""Package requests are untrusted input: parse them strictly, refuse anything but names.

A model asks for packages by writing requirement strings. Each one must be a plain
PEP 508 requirement (a name, optional extras and version specifiers, optional marker);
options (`--index-url`), URLs, paths and VCS specs are refused, because they would let
the request choose where code comes from.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

# (A result whose packages were refused before anything ran carries the error type
# `error_types.PACKAGE_UNAVAILABLE`, the same on every backend.)

MAX_REQUIREMENT_LENGTH = 200
ALLOWLIST_VARIABLE = "RUNNER_PACKAGE_ALLOWLIST"


class PackageRequestError(ValueError):
    """A requirement string that is refused; the message says why."""


@dataclass(frozen=True, slots=True)
class PackageRequest:
    requirement: Requirement

    @property
    def name(self) -> str:
        return canonicalize_name(self.requirement.name)

    def __str__(self) -> str:
        return str(self.requirement)


def parse_requirement(text: str, *, allow_marker: bool = True) -> PackageRequest:
    """`text` as a requirement, or PackageRequestError saying why not.

    With `allow_marker=False` an environment marker is refused too: a model proposing the
    packages of its own function has no business choosing the environments they apply in
    (`x; os_name == "posix"` is a name with a condition smuggled in)."""
    spec = text.strip()
    if not spec:
        raise PackageRequestError("an empty package requirement")
    if len(spec) > MAX_REQUIREMENT_LENGTH:
        raise PackageRequestError(f"the requirement {spec[:40]!r}... is longer than "
                                  f"{MAX_REQUIREMENT_LENGTH} characters")
    if spec.startswith("-"):
        raise PackageRequestError(f"{spec!r} looks like a pip option; only package names "
                                  "with optional version specifiers are accepted")
    if any(ch in spec for ch in ("\n", "\r", "\x00")):
        raise PackageRequestError(f"{spec!r} contains control characters")
    try:
        requirement = Requirement(spec)
    except InvalidRequirement as exc:
        raise PackageRequestError(f"{spec!r} is not a valid requirement: {exc}") from None
    if requirement.url:
        raise PackageRequestError(f"{spec!r} points at a URL or path; only package names from "
                                  "the configured index are accepted")
    if requirement.marker is not None and not allow_marker:
        raise PackageRequestError(f"{spec!r} has an environment marker ({requirement.marker}); "
                                  "give a plain package name, optionally with a version")
    return PackageRequest(requirement)


def parse_requirements(texts: Iterable[str]) -> list[PackageRequest]:
    return [parse_requirement(text) for text in texts]


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def allowlist_of(configured: Iterable[str] | None) -> frozenset[str] | None:
    """The distributions a sandbox may be asked for (any version), or None for any: the
    argument, else RUNNER_PACKAGE_ALLOWLIST ("sympy numpy tabulate")."""
    names = list(configured) if configured is not None else \
        os.environ.get(ALLOWLIST_VARIABLE, "").replace(",", " ").split()
    return frozenset(canonicalize_name(name) for name in names) or None


def refused_by(allowlist: frozenset[str] | None, requests: Iterable[PackageRequest]) -> str | None:
    """Why `requests` are refused by `allowlist` (None: they are not)."""
    if allowlist is None:
        return None
    refused = [request.name for request in requests if request.name not in allowlist]
    if not refused:
        return None
    return (f"package {', '.join(refused)} is not on this sandbox's allowlist "
            f"({', '.join(sorted(allowlist))})")
