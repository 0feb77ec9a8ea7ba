"""Checks of what a caller hands the Python API, before anything is built from it.

A mistake in the caller's program (code that is not a string, limits that are not
`Limits`, packages given as one string) raises `ConfigurationError` naming the argument,
what was given and what to pass instead, rather than pydantic's `ValidationError` or an
`AttributeError` from deep inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from .errors import ConfigurationError
from .ranges import describe_errors
from .types import ExecutionRequest, Limits


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


def code_argument(code: Any) -> str:
    if not isinstance(code, str):
        raise ConfigurationError(f"code must be a string of Python source, got {_kind(code)}",
                                 fix="pass the code as text, e.g. sandbox.run('print(1)')")
    return code


def limits_argument(limits: Any, default: Limits) -> Limits:
    """None means `default`; a mapping is read as Limits fields."""
    if limits is None:
        return default
    if isinstance(limits, Limits):
        return limits
    if isinstance(limits, Mapping):
        return Limits(**dict(limits))  # raises ConfigurationError naming the bad field
    raise ConfigurationError(f"limits must be a runner.Limits, got {_kind(limits)}",
                             fix="pass e.g. limits=Limits(timeout_s=5)")


def packages_argument(packages: Any) -> tuple[str, ...]:
    """None or requirement strings; one string is one requirement (not its characters)."""
    if packages is None:
        return ()
    if isinstance(packages, str):
        return (packages,)
    if isinstance(packages, Iterable) and not isinstance(packages, (bytes, Mapping)):
        items = tuple(packages)
        wrong = [item for item in items if not isinstance(item, str)]
        if not wrong:
            return items
        raise ConfigurationError(f"packages must be requirement strings, got a {_kind(wrong[0])} "
                                 "among them", fix="pass e.g. packages=['sympy>=1.12']")
    raise ConfigurationError(f"packages must be a list of requirement strings, got {_kind(packages)}",
                             fix="pass e.g. packages=['sympy>=1.12']")


def meta_argument(meta: Any) -> dict[str, Any] | None:
    if meta is None:
        return None
    if isinstance(meta, Mapping):
        return dict(meta)
    raise ConfigurationError(f"meta must be a dict of notes for the log, got {_kind(meta)}",
                             fix="pass e.g. meta={'task': 'demo'}")


def build_request(**fields: Any) -> ExecutionRequest:
    """An ExecutionRequest from already-checked fields; anything pydantic still refuses
    becomes a ConfigurationError too."""
    try:
        return ExecutionRequest(**fields)
    except ValidationError as exc:
        raise ConfigurationError(f"invalid request: {describe_errors(ExecutionRequest, exc)}",
                                 fix="see help(runner.ExecutionRequest)") from None


def request_argument(request: Any) -> ExecutionRequest:
    if not isinstance(request, ExecutionRequest):
        raise ConfigurationError(f"execute() takes a runner.ExecutionRequest, got {_kind(request)}",
                                 fix="use sandbox.run(code) for code, or build an ExecutionRequest")
    return request
