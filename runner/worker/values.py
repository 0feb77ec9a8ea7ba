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


def _float(value: float, state: dict[str, bool]) -> Any:
    """JSON has no NaN or infinity: those become strings (flagged as converted)."""
    if math.isfinite(value):
        return value
    state["converted"] = True
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _convert(value: Any, depth: int, state: dict[str, bool]) -> Any:
    if depth > MAX_DEPTH:
        raise _Unconvertible("nested too deeply")
    kind = type(value)
    # Exact types first, read with the base type's own methods: a subclass can override
    # any method (an int whose bit_length or __index__ lies), and user code wrote it.
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        if int.bit_length(value) > 13_000:  # ~4000 digits: beyond what JSON text may carry
            raise _Unconvertible("an integer too large for JSON")
        return value
    if kind is float:
        return _float(value, state)
    if isinstance(value, bool):
        state["converted"] = True
        return bool.__bool__(value)
    if isinstance(value, str):
        state["converted"] = True
        return str.__str__(value)
    if isinstance(value, int):
        state["converted"] = True
        return _convert(int.__int__(value), depth, state)
    if isinstance(value, float):
        state["converted"] = True
        return _float(float.__float__(value), state)
    if kind is list:
        return [_convert(item, depth + 1, state) for item in _bounded(value)]
    if kind is dict:
        out = {}
        for key, item in _bounded(list(dict.items(value))):
            if type(key) is not str:
                state["converted"] = True
                key = _scalar_key(key)
            out[key] = _convert(item, depth + 1, state)
        return out
    state["converted"] = True
    if isinstance(value, (list, tuple)):
        items = list.__iter__(value) if isinstance(value, list) else tuple.__iter__(value)
        return [_convert(item, depth + 1, state) for item in _bounded(list(items))]
    if isinstance(value, dict):
        return _convert(dict(dict.items(value)), depth, state)
    if isinstance(value, (set, frozenset)):
        members = list(set.__iter__(value)) if isinstance(value, set) else \
            list(frozenset.__iter__(value))
        converted = [_convert(item, depth + 1, state) for item in _bounded(members)]
        try:
            return sorted(converted)
        except TypeError:
            return converted
    if isinstance(value, Fraction):
        # Through the int rule: an integer part too large for JSON is described, as a plain
        # int's is.
        if value.denominator == 1:
            return _convert(int(value.numerator), depth, state)
        return _float(float(value), state)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return _float(float(value), state) if not value.is_nan() else "nan"
        if value == value.to_integral_value():
            return _convert(int(value), depth, state)
        return _float(float(value), state)
    if isinstance(value, complex):
        return {"real": _float(complex.real.__get__(value), state),
                "imag": _float(complex.imag.__get__(value), state)}
    module = _module_of(value)
    if module.startswith("numpy"):
        return _convert(value.tolist(), depth + 1, state)
    if module.startswith("sympy"):
        return _convert_sympy(value, depth, state)
    raise _Unconvertible(kind.__name__)


def _scalar_key(key: Any) -> str:
    if key is True or key is False:
        return "true" if key else "false"
    if type(key) in (int, float) or key is None:
        return str(key)
    return _safe_repr(key, 1000) if not isinstance(key, str) else str.__str__(key)


def _bounded(items: Any) -> Any:
    if len(items) > MAX_ITEMS:
        raise _Unconvertible(f"more than {MAX_ITEMS} items")
    return items


def _convert_sympy(value: Any, depth: int, state: dict[str, bool]) -> Any:
    if getattr(value, "is_Matrix", False):
        return _convert(value.tolist(), depth + 1, state)
    if getattr(value, "is_Integer", False):
        return _convert(int(value), depth, state)
    if getattr(value, "is_Rational", False) or getattr(value, "is_Float", False):
        return _float(float(value), state)
    if type(value).__name__ in ("BooleanTrue", "BooleanFalse"):
        return type(value).__name__ == "BooleanTrue"
    if getattr(value, "is_number", False) and getattr(value, "is_real", False):
        try:
            return _float(float(value), state)
        except (TypeError, ValueError):
            pass
    return str(value)


def to_json_value(value: Any) -> dict[str, Any]:
    """{"value": JSON, "repr": str | None, "is_repr": bool} for a function's return value."""
    state = {"converted": False}
    try:
        converted = _convert(value, 0, state)
    except (_Unconvertible, RecursionError, ValueError, TypeError, OverflowError, MemoryError):
        text = _describe_huge(value)
        if text is not None:
            return {"value": text, "repr": text, "is_repr": True}
        text = _safe_repr(value)
        return {"value": text, "repr": text, "is_repr": True}
    return {"value": converted, "repr": _safe_repr(value) if state["converted"] else None,
            "is_repr": False}


def _describe_huge(value: Any) -> str | None:
    """Numbers whose digits str() refuses to write (over 4,300): their size instead."""
    if type(value) is int and int.bit_length(value) > 13_000:
        return f"<int with {int.bit_length(value)} bits>"
    if isinstance(value, Fraction):
        numerator, denominator = int(value.numerator), int(value.denominator)
        if max(numerator.bit_length(), denominator.bit_length()) > 13_000:
            return (f"<Fraction with a {numerator.bit_length()}-bit numerator and a "
                    f"{denominator.bit_length()}-bit denominator>")
    if isinstance(value, Decimal) and value.is_finite() and value.adjusted() > 4000:
        return f"<Decimal with {value.adjusted() + 1} digits before the point>"
    return None


def _safe_repr(value: Any, limit: int = 10_000) -> str:
    try:
        text = repr(value)
    except BaseException as exc:  # a user-defined __repr__ can raise (or be refused) anything
        text = f"<{type(value).__name__} object (repr failed: {type(exc).__name__})>"
    return text if len(text) <= limit else text[:limit] + "...[truncated]"
