"""The valid range of a numeric setting, read from the pydantic field that defines it.

`Limits` declares its bounds once (`Field(gt=0, le=3600)`); the CLI options, the error
messages of the Python API and the docs all read them from there, so a bound cannot be
changed in one place and stay stale in another. `describe_errors` turns pydantic's
`ValidationError` into one sentence per field that names the value given and the range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import annotated_types
from pydantic import BaseModel, ValidationError


@dataclass(frozen=True, slots=True)
class Range:
    """A closed or open interval of numbers; None for an open end."""

    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    integer: bool = False

    def text(self) -> str:
        parts = []
        if self.low is not None:
            parts.append(f"{'greater than' if self.low_open else 'at least'} {_number(self.low)}")
        if self.high is not None:
            parts.append(f"{'less than' if self.high_open else 'at most'} {_number(self.high)}")
        kind = "a whole number" if self.integer else "a finite number"
        return kind + (" " + " and ".join(parts) if parts else "")

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return not (self.high is not None
                    and (value > self.high or (self.high_open and value == self.high)))


def field_range(model: type[BaseModel], name: str) -> Range:
    """The bounds declared on `model`'s field `name` (gt/ge/lt/le)."""
    low: float | None = None
    high: float | None = None
    low_open = high_open = False
    for item in model.model_fields[name].metadata:
        if isinstance(item, annotated_types.Gt):
            low, low_open = float(item.gt), True  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Ge):
            low, low_open = float(item.ge), False  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Lt):
            high, high_open = float(item.lt), True  # type: ignore[arg-type]
        elif isinstance(item, annotated_types.Le):
            high, high_open = float(item.le), False  # type: ignore[arg-type]
    return Range(low, low_open, high, high_open, integer=model.model_fields[name].annotation is int)


def describe_errors(model: type[BaseModel], exc: ValidationError) -> str:
    """'timeout_s must be a finite number greater than 0 and at most 3600, got nan; ...'"""
    parts: list[str] = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error["loc"])
        field = str(error["loc"][0]) if error["loc"] else ""
        given = _shown(error.get("input"))
        if field in model.model_fields and error["type"] in _NUMBER_ERRORS:
            parts.append(f"{location} must be {field_range(model, field).text()}, got {given}")
        elif error["type"] == "extra_forbidden":
            parts.append(f"{location} is not a field of {model.__name__} (fields: "
                         f"{', '.join(model.model_fields)})")
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            parts.append(f"{location}: {message}, got {given}" if location else message)
    return "; ".join(parts)


_NUMBER_ERRORS = frozenset({
    "greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number",
    "float_parsing", "float_type", "int_parsing", "int_type", "int_from_float",
})


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _shown(value: Any) -> str:
    import reprlib

    return reprlib.Repr().repr(value)[:80]


def require(name: str, value: Any, valid: Range, *, fix: str, optional: bool = False) -> None:
    """Raise ConfigurationError unless `value` is a number in `valid` (or None if optional)."""
    from .errors import ConfigurationError

    if value is None and optional:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (valid.integer and not isinstance(value, int)) or not valid.contains(float(value)):
        raise ConfigurationError(f"{name} must be {valid.text()}, got {_shown(value)}", fix=fix)
