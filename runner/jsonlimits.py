"""Bounds for JSON that a model or a caller hands the runner: size, depth, integer size.

The standard library's JSON code recurses: text nested 100,000 deep stops the parser with
`RecursionError`, a Python value nested that deep does the same to `json.dumps`, `==`,
`repr` and schema validation, and Python 3.11 refuses to convert integers of more than
4,300 digits (`ValueError`). A value this module has accepted is plain JSON data (dicts
with string keys, lists, strings, finite numbers, booleans, None) that every later step
can parse, copy, compare, serialise and validate in time proportional to its size.

`loads` parses text within bounds; `json_problem` checks a Python value that is already
there (iteratively, so a self-containing list or a very deep one is a finding, not a
crash). Both name the first problem and where it is.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple


@dataclass(frozen=True, slots=True)
class JsonBounds:
    """How much JSON the runner accepts from outside in one piece."""

    max_chars: int = 1_000_000  # of JSON text (for values: the characters of their strings)
    max_depth: int = 100  # nested lists and objects
    max_items: int = 100_000  # members of all lists and objects together
    max_int_digits: int = 300  # about the range of a double; 1e308 has 309

    def describe(self) -> str:
        return (f"at most {self.max_chars:,} characters, {self.max_depth} levels of nesting, "
                f"{self.max_items:,} list items and object members, and integers of at most "
                f"{self.max_int_digits} digits")


# Function arguments and a model's tool-call arguments.
ARGUMENT_BOUNDS = JsonBounds()


class JsonProblem(NamedTuple):
    """Why a value is refused: `type` (JSON cannot carry it) or `bounds` (too big or deep)."""

    kind: Literal["type", "bounds"]
    path: str
    message: str


class JsonBoundsError(ValueError):
    """Text that is not JSON, or JSON beyond the bounds; the message says which and where."""

    def __init__(self, message: str, *, kind: Literal["syntax", "type", "bounds"]) -> None:
        super().__init__(message)
        self.kind = kind


def loads(text: str | bytes, bounds: JsonBounds = ARGUMENT_BOUNDS, *, what: str = "the JSON text",
          types: bool = True) -> Any:
    """Parse `text` as JSON within `bounds`; raises JsonBoundsError naming the problem.

    `types=False` lets NaN and Infinity through (Python's parser reads them), for a caller
    that reports those itself, per argument."""
    if len(text) > bounds.max_chars:
        raise JsonBoundsError(f"{what} has {len(text):,} characters; at most "
                              f"{bounds.max_chars:,} are accepted", kind="bounds")
    try:
        value = json.loads(text)
    except RecursionError:  # the C parser checks the interpreter's limit itself: no crash
        raise JsonBoundsError(f"{what} is nested deeper than {bounds.max_depth} levels",
                              kind="bounds") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise JsonBoundsError(f"{what} has an integer of more than {bounds.max_int_digits} "
                                  "digits", kind="bounds") from None
        raise JsonBoundsError(f"{what} is not valid JSON ({exc})", kind="syntax") from None
    problem = json_problem(value, bounds, types=types)
    if problem is not None:
        raise JsonBoundsError(f"{what}: {problem.message}", kind=problem.kind)
    return value


def json_problem(value: Any, bounds: JsonBounds = ARGUMENT_BOUNDS, *, path: str = "",
                 types: bool = True) -> JsonProblem | None:
    """The first reason `value` is not bounded JSON data, or None.

    Tuples count as lists (they serialise as lists). Walks the value with an explicit
    stack, so depth and cycles are findings; stops at the first problem. With
    `types=False` only the bounds are checked (values JSON cannot carry are skipped).
    """
    too_big = 10 ** bounds.max_int_digits  # compared, never converted to text (that is slow)
    chars = 0
    items = 0
    stack: list[tuple[Any, str, int]] = [(value, path, 0)]
    while stack:
        item, where, depth = stack.pop()
        shown = where or "the value"
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) >= too_big:
                return JsonProblem("bounds", where, f"{shown} is an integer of more than "
                                   f"{bounds.max_int_digits} digits")
            continue
        if isinstance(item, float):
            if types and not math.isfinite(item):
                return JsonProblem("type", where, f"{shown} is {item!r}, which JSON cannot carry")
            continue
        if isinstance(item, str):
            chars += len(item)
            if chars > bounds.max_chars:
                return JsonProblem("bounds", where, f"the strings add up to more than "
                                   f"{bounds.max_chars:,} characters")
            continue
        if isinstance(item, (list, tuple, dict)):
            if depth >= bounds.max_depth:
                return JsonProblem("bounds", where, f"{shown} is nested deeper than "
                                   f"{bounds.max_depth} levels")
            items += len(item)
            if items > bounds.max_items:
                return JsonProblem("bounds", where, f"there are more than {bounds.max_items:,} "
                                   "list items and object members in all")
            if isinstance(item, dict):
                children: list[tuple[Any, str, int]] = []
                for key, member in item.items():
                    if not isinstance(key, str):
                        if not types:
                            continue
                        return JsonProblem("type", where,
                                           f"{shown} has a key {_short_repr(key)} that is not a string")
                    chars += len(key)
                    children.append((member, _join(where, f".{key}" if where else key), depth + 1))
            else:
                children = [(member, _join(where, f"[{index}]"), depth + 1)
                            for index, member in enumerate(item)]
            stack.extend(reversed(children))  # reversed: the first problem in reading order
            continue
        if types:
            return JsonProblem("type", where,
                               f"{shown} is a {type(item).__name__}, which is not JSON data")
    return None


_MAX_PATH = 120


def _join(path: str, part: str) -> str:
    """`path` + `part`, shortened with "..." (a path into a very deep value is no help)."""
    if path.endswith("..."):
        return path
    joined = path + part
    return joined if len(joined) <= _MAX_PATH else joined[:_MAX_PATH] + "..."


def _short_repr(value: Any) -> str:
    """A repr that cannot recurse without end or grow without bound."""
    import reprlib

    return reprlib.Repr().repr(value)[:80]
