"""Option types shared by the `runner` commands: numbers checked against their valid range.

click's FloatRange lets `nan` through (every comparison with nan is false) and knows
nothing of the library's own bounds. `Number` refuses nan and infinities, and states the
range in its usage error; `limit` reads the range from the `Limits` field itself, so the
CLI and the Python API accept exactly the same values.
"""

from __future__ import annotations

import math
from typing import Any

import click

from .ranges import Range, field_range
from .types import Limits


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
