"""Option types shared by the `runner` commands: numbers checked against their valid range.

click's FloatRange lets `nan` through (every comparison with nan is false) and knows
nothing of the library's own bounds. `Number` refuses nan and infinities, and states the
range in its usage error; `limit` reads the range from the `Limits` field itself, so the
CLI and the Python API accept exactly the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .backends.base import RAY_INNER_BACKENDS
from .ranges import Range, field_range
from .types import Limits

F = TypeVar("F", bound=Callable[..., Any])


class Number(click.ParamType[float, Any]):
    """A finite number in `valid`; a usage error (exit 2) that states the range otherwise."""

    def __init__(self, valid: Range) -> None:
        self.valid = valid
        self.name = "integer" if valid.integer else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: float = value
        else:
            try:
                number = int(str(value)) if self.valid.integer else float(str(value))
            except ValueError:
                self.fail(f"{value!r} is not {self.valid.text()}", param, ctx)
        if not self.valid.contains(float(number)):
            shown = number if math.isfinite(number) else str(number)
            self.fail(f"{shown} is not {self.valid.text()}", param, ctx)
        return number

    def __repr__(self) -> str:
        return f"Number({self.valid.text()})"


def limit(field: str) -> Number:
    """The type of the option that sets `Limits.<field>`."""
    return Number(field_range(Limits, field))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           integer: bool = False) -> Number:
    return Number(Range(low, low_open, high, False, integer=integer))


def ray_options(command: F) -> F:
    """--ray-address and --ray-inner, for the commands that take --backend."""
    command = click.option(
        "--ray-inner", type=click.Choice(RAY_INNER_BACKENDS),
        help="With --backend ray: the isolation tier on the cluster's nodes (default restricted).")(command)
    return click.option(
        "--ray-address", metavar="ADDRESS",
        help="With --backend ray: the cluster, 'auto' (the one running here), host:port or "
             "ray://host:10001 (default: RAY_ADDRESS, else a local Ray).")(command)


def backend_options(backend: str, ray_address: str | None, ray_inner: str | None) -> dict[str, Any]:
    """The Sandbox options the backend flags ask for; a usage error for ray flags without ray."""
    if backend != "ray":
        if ray_address is not None or ray_inner is not None:
            raise click.UsageError("--ray-address and --ray-inner go with --backend ray")
        return {}
    options: dict[str, Any] = {}
    if ray_address is not None:
        options["ray_address"] = ray_address
    if ray_inner is not None:
        options["inner"] = ray_inner
    return options
