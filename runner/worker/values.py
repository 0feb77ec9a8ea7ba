"""Return values to JSON: exact where JSON has the type, converted with a repr kept beside
where it does not, and the repr alone (flagged) for anything else.

Runs inside the sandbox child, so it is stdlib only and recognises sympy and numpy
objects by duck typing rather than by importing them.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

MAX_DEPTH = 50
MAX_ITEMS = 100_000


class _Unconvertible(Exception):
    pass


def _module_of(value: Any) -> str:
    return getattr(type(value), "__module__", "") or ""


def _convert(value: Any, depth: int, state: dict[str, bool]) -> Any:
    if depth > MAX_DEPTH:
        raise _Unconvertible("nested too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        if value.bit_length() > 13_000:  # ~4000 digits: beyond what JSON text may carry
            raise _Unconvertible("an integer too large for JSON")
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        state["converted"] = True
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, list):
        return [_convert(item, depth + 1, state) for item in _bounded(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in _bounded(list(value.items())):
            if not isinstance(key, str):
                state["converted"] = True
                key = str(key) if not isinstance(key, (int, float, bool)) or key is None else \
                    _scalar_key(key)
            out[key] = _convert(item, depth + 1, state)
        return out
    state["converted"] = True
    if isinstance(value, tuple):
        return [_convert(item, depth + 1, state) for item in _bounded(list(value))]
    if isinstance(value, (set, frozenset)):
        items = [_convert(item, depth + 1, state) for item in _bounded(list(value))]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else float(value)
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and value.is_finite() else float(value)
    if isinstance(value, complex):
        return {"real": value.real, "imag": value.imag}
    module = _module_of(value)
    if module.startswith("numpy"):
        return _convert(value.tolist(), depth + 1, state)
    if module.startswith("sympy"):
        return _convert_sympy(value, depth, state)
    raise _Unconvertible(type(value).__name__)


def _scalar_key(key: Any) -> str:
    return "true" if key is True else "false" if key is False else str(key)


def _bounded(items: Any) -> Any:
    if len(items) > MAX_ITEMS:
        raise _Unconvertible(f"more than {MAX_ITEMS} items")
    return items


def _convert_sympy(value: Any, depth: int, state: dict[str, bool]) -> Any:
    if getattr(value, "is_Matrix", False):
        return _convert(value.tolist(), depth + 1, state)
    if getattr(value, "is_Integer", False):
        return int(value)
    if getattr(value, "is_Rational", False) or getattr(value, "is_Float", False):
        return float(value)
    if type(value).__name__ in ("BooleanTrue", "BooleanFalse"):
        return type(value).__name__ == "BooleanTrue"
    if getattr(value, "is_number", False) and getattr(value, "is_real", False):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    return str(value)


def to_json_value(value: Any) -> dict[str, Any]:
    """{"value": JSON, "repr": str | None, "is_repr": bool} for a function's return value."""
    state = {"converted": False}
    try:
        converted = _convert(value, 0, state)
    except (_Unconvertible, RecursionError, ValueError, TypeError, OverflowError):
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 13_000:
            text = f"<int with {len(format(value, 'x')) * 4} bits>"  # str() is refused this large
            return {"value": text, "repr": text, "is_repr": True}
        text = _safe_repr(value)
        return {"value": text, "repr": text, "is_repr": True}
    return {"value": converted, "repr": _safe_repr(value) if state["converted"] else None,
            "is_repr": False}


def _safe_repr(value: Any, limit: int = 10_000) -> str:
    try:
        text = repr(value)
    except BaseException as exc:  # a user-defined __repr__ can raise (or be refused) anything
        text = f"<{type(value).__name__} object (repr failed: {type(exc).__name__})>"
    return text if len(text) <= limit else text[:limit] + "...[truncated]"
