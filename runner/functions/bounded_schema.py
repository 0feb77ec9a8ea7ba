"""JSON Schemas written by a model: checked once when a spec is loaded, applied within bounds.

A function's `parameters` schema is untrusted input, and validating arguments against it
is work done in the caller's own process, where no sandbox limit applies. So:

- Regular expressions (`pattern`, `patternProperties`, and `additionalProperties` next to
  them) run on RE2 (google-re2), whose matching time is linear in the text: `^(a+)+$`
  cannot backtrack. RE2 rather than a timeout, because a match in Python's `re` is one C
  call holding the GIL that nothing in the process can interrupt, and a regex timeout (the
  `regex` module's) would still burn its whole allowance on every call. JSON Schema itself
  recommends the subset RE2 supports (no backreferences, no lookaround); a pattern outside
  it is an invalid schema, with RE2's reason.
- `$ref` never leaves the document and nothing is ever retrieved: references resolve
  against the schema itself only (its `$defs`, JSON pointers, anchors, embedded `$id`s);
  any other URI (`http://`, `file://`, ...) is an invalid schema, and so is a dangling
  reference or a loop of references that never descends into the arguments.
- The schema is bounded in size and depth (`SCHEMA_BOUNDS`), declares its dialect only at
  its top (`$schema` deeper down would switch validation to an unguarded validator), and
  does not combine `unevaluatedProperties` with `patternProperties` (that pair is matched
  by jsonschema's own regex code, outside these guards).
- Applying it is bounded in time: every keyword checks a deadline (`VALIDATION_TIME_S`),
  `uniqueItems` hashes instead of comparing every pair, and at most `MAX_ERRORS` problems
  are collected.

`check_schema` raises `SchemaProblem` (a ValueError, so pydantic reports it on the spec's
`parameters` field); `errors_of` returns the violations or raises `SchemaProblem` when the
schema cannot be applied to these arguments within the bounds.
"""

from __future__ import annotations

import contextvars
import functools
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import re2
import referencing.jsonschema
from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
    validators,
)
from jsonschema.exceptions import SchemaError
from jsonschema.exceptions import ValidationError as SchemaViolation
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable, Unretrievable

from ..jsonlimits import JsonBounds, json_problem

SCHEMA_BOUNDS = JsonBounds(max_chars=200_000, max_depth=48, max_items=20_000, max_int_digits=300)
MAX_PATTERN_CHARS = 1000
VALIDATION_TIME_S = 2.0
MAX_ERRORS = 50

_DIALECTS: dict[str, Any] = {}
for _class in (Draft4Validator, Draft6Validator, Draft7Validator, Draft201909Validator,
               Draft202012Validator):
    _DIALECTS[str(_class.META_SCHEMA["$schema"]).rstrip("#")] = _class

_PATTERN_HINT = ("patterns run on RE2: characters, classes, quantifiers, groups, alternation "
                 "and anchors work; backreferences and lookaround do not")


class SchemaProblem(ValueError):
    """A schema runner will not apply; the message says why."""


class _OutOfTime(Exception):
    """Raised from inside validation when its deadline has passed."""


# -- regular expressions ------------------------------------------------------------------------

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr
_OPTIONS.max_mem = 8 << 20  # the compiled program; `(a{999}){999}` is refused, not built

_ECMA_ESCAPE = re.compile(r"\\\\|\\u\{([0-9A-Fa-f]{1,6})\}|\\u([0-9A-Fa-f]{4})")


def _to_re2(pattern: str) -> str:
    """ECMA-262 spellings RE2 lacks: `\\uXXXX` and `\\u{X...}` become `\\x{...}`."""
    def replace(match: re.Match[str]) -> str:
        code = match.group(1) or match.group(2)
        return match.group(0) if code is None else f"\\x{{{code}}}"

    return _ECMA_ESCAPE.sub(replace, pattern)


@functools.lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Any:
    """The RE2 program of a schema pattern; SchemaProblem when RE2 cannot run it."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise SchemaProblem(f"the pattern {pattern[:40]!r}... has {len(pattern):,} characters; "
                            f"at most {MAX_PATTERN_CHARS} are accepted")
    try:
        return re2.compile(_to_re2(pattern), _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise SchemaProblem(f"the pattern {pattern!r} cannot be used ({reason}); "
                            f"{_PATTERN_HINT}") from None


def pattern_matches(pattern: str, text: str) -> bool:
    """JSON Schema semantics: the pattern matches anywhere in `text` (not anchored)."""
    return compile_pattern(pattern).search(text) is not None


# -- keywords -------------------------------------------------------------------------------------

_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("runner_schema_deadline",
                                                                   default=float("inf"))

Keyword = Callable[[Any, Any, Any, Any], Any]


def _timed(keyword: Keyword) -> Keyword:
    """The keyword, refusing to start once the validation's deadline has passed."""
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if time.monotonic() > _deadline.get():
            raise _OutOfTime
        return keyword(validator, value, instance, schema)

    return check


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[SchemaViolation]:
    if validator.is_type(instance, "string") and not pattern_matches(pattern, instance):
        yield SchemaViolation(f"{_short(instance)} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
                        ) -> Iterator[SchemaViolation]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if pattern_matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _extras(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [key for key in instance if key not in properties
            and not any(pattern_matches(p, key) for p in patterns)]


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any
                           ) -> Iterator[SchemaViolation]:
    if not validator.is_type(instance, "object"):
        return
    extras = _extras(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        names = ", ".join(repr(name) for name in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield SchemaViolation(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form in which two values are equal exactly when JSON Schema says so
    (1 and 1.0 are equal, true and 1 are not, object key order does not matter)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)  # hash(1) == hash(1.0) and 1 == 1.0
    if isinstance(value, (list, tuple)):
        return ("array", tuple(_canonical(item) for item in value))
    if isinstance(value, dict):
        return ("object", frozenset((key, _canonical(item)) for key, item in value.items()))
    return ("other", repr(value))


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any
                  ) -> Iterator[SchemaViolation]:
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _canonical(item)
        if key in seen:
            yield SchemaViolation(f"{_short(instance)} has non-unique elements")
            return
        seen.add(key)


_OVERRIDES: dict[str, Keyword] = {
    "pattern": _pattern, "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties, "uniqueItems": _unique_items,
}


@functools.cache
def _guarded_class(base: Any) -> Any:
    keywords = {name: _timed(_OVERRIDES.get(name, function))
                for name, function in base.VALIDATORS.items()}
    return validators.extend(base, keywords)  # type: ignore[no-untyped-call]


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise SchemaProblem(f"{uri!r} is outside the schema; runner never fetches schemas")


_NO_FETCH: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


# -- checking a schema once ----------------------------------------------------------------------

_ONE = ("additionalProperties", "additionalItems", "contains", "propertyNames", "not", "if",
        "then", "else", "unevaluatedItems", "unevaluatedProperties", "items")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
        "dependencies")
# Keywords that apply a subschema to the same value: a loop through these never ends.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
             "dependencies")


def _dialect(schema: Mapping[str, Any]) -> Any:
    declared = schema.get("$schema")
    if declared is None:
        return Draft202012Validator
    if not isinstance(declared, str) or declared.rstrip("#") not in _DIALECTS:
        raise SchemaProblem(f"$schema {_short(declared)} is not a dialect runner applies; use "
                            "draft 2020-12 (the default, by leaving $schema out), 2019-09, 7, 6 or 4")
    return _DIALECTS[declared.rstrip("#")]


class _Node:
    """A subschema met while walking, with the resolver its `$ref`s resolve against."""

    __slots__ = ("resolver", "schema", "where")

    def __init__(self, schema: Any, resolver: Any, where: str) -> None:
        self.schema = schema
        self.resolver = resolver
        self.where = where


def check_schema(schema: Any) -> None:
    """Raise SchemaProblem naming what makes `schema` unusable; return when it is fine."""
    if not isinstance(schema, dict):
        raise SchemaProblem("the schema must be a JSON object")
    problem = json_problem(schema, SCHEMA_BOUNDS)
    if problem is not None:
        raise SchemaProblem(f"the schema is too big or not JSON: {problem.message} (schemas may "
                            f"have {SCHEMA_BOUNDS.describe()})")
    dialect = _dialect(schema)
    try:
        dialect.check_schema(schema, format_checker=FormatChecker(formats=()))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path) or "(top)"
        raise SchemaProblem(f"it is not a valid JSON schema at {where}: {exc.message}") from None
    _walk(schema, dialect)


def _walk(schema: dict[str, Any], dialect: Any) -> None:
    """Check every subschema (and every `$ref` target) once; then look for reference loops."""
    specification = referencing.jsonschema.specification_with(
        str(dialect.META_SCHEMA["$schema"]), default=referencing.jsonschema.DRAFT202012)
    root = specification.create_resource(schema)
    resolver = _NO_FETCH.resolver_with_root(root)
    edges: dict[int, list[int]] = {}
    places: dict[int, str] = {}
    has_unevaluated = has_patterns = False
    pending = [_Node(schema, resolver, "#")]
    seen: set[int] = set()
    while pending:
        node = pending.pop()
        if not isinstance(node.schema, dict) or id(node.schema) in seen:
            continue
        seen.add(id(node.schema))
        current: dict[str, Any] = node.schema
        places[id(current)] = node.where
        resolver = node.resolver
        if node.where != "#" and "$schema" in current:
            raise SchemaProblem(f"$schema appears at {node.where}; it is allowed only at the top "
                                "of the schema")
        if node.where != "#" and specification.id_of(current):
            resolver = resolver.in_subresource(specification.create_resource(current))
        has_unevaluated = has_unevaluated or "unevaluatedProperties" in current
        has_patterns = has_patterns or "patternProperties" in current
        if isinstance(current.get("pattern"), str):
            compile_pattern(current["pattern"])
        for pattern in current.get("patternProperties") or {}:
            compile_pattern(pattern)
        in_place: list[int] = []
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            reference = current.get(keyword)
            if not isinstance(reference, str):
                continue
            target = _resolve(resolver, reference, keyword, node.where)
            pending.append(_Node(target.contents, target.resolver, f"{node.where} -> {reference}"))
            in_place.append(id(target.contents))
        for keyword, value in current.items():
            children = _subschemas(keyword, value)
            for label, child in children:
                pending.append(_Node(child, resolver, f"{node.where}/{keyword}{label}"))
                if keyword in _IN_PLACE and isinstance(child, dict):
                    in_place.append(id(child))
        edges[id(current)] = in_place
    if has_unevaluated and has_patterns:
        raise SchemaProblem("unevaluatedProperties together with patternProperties is not "
                            "supported; use additionalProperties instead")
    _find_loop(edges, places)


def _subschemas(keyword: str, value: Any) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if keyword in _ONE and isinstance(value, dict):
        found.append(("", value))
    if keyword in _LIST and isinstance(value, list):
        found += [(f"/{index}", item) for index, item in enumerate(value)]
    if keyword in _MAP and isinstance(value, dict):
        found += [(f"/{name}", item) for name, item in value.items() if isinstance(item, dict)]
    return found


def _resolve(resolver: Any, reference: str, keyword: str, where: str) -> Any:
    try:
        return resolver.lookup(reference)
    except SchemaProblem:
        raise
    except Unresolvable as exc:
        if isinstance(exc.__cause__ or exc.__context__, Unretrievable):
            raise SchemaProblem(f"{keyword} {reference!r} at {where} points outside the schema; "
                                "references must stay inside it (e.g. #/$defs/NAME): runner never "
                                "fetches schemas") from None
        raise SchemaProblem(f"{keyword} {reference!r} at {where} does not resolve to anything in "
                            "the schema (a dangling reference)") from None
    except Exception as exc:  # a malformed reference text, say
        raise SchemaProblem(f"{keyword} {reference!r} at {where} cannot be resolved "
                            f"({type(exc).__name__}: {exc})") from None


def _find_loop(edges: dict[int, list[int]], places: dict[int, str]) -> None:
    """Refuse references that lead back to where they started without entering the value:
    validating with them would never end."""
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[int, Iterator[int]]] = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                continue
            if state.get(child) == 1:
                raise SchemaProblem(f"the schema loops: {places.get(child, '#')} leads back to "
                                    "itself through references without entering the value, so "
                                    "validating would never end")
            if not state.get(child):
                state[child] = 1
                stack.append((child, iter(edges.get(child, ()))))


# -- applying it --------------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _validator(schema_text: str) -> Any:
    schema = json.loads(schema_text)
    dialect = _dialect(schema)
    if "$schema" in schema:  # chosen above; left in, a `$ref` to the root would switch classes
        schema = {key: value for key, value in schema.items() if key != "$schema"}
    return _guarded_class(dialect)(schema, registry=_NO_FETCH)


def errors_of(schema: dict[str, Any], instance: Any, *, time_s: float = VALIDATION_TIME_S
              ) -> tuple[list[SchemaViolation], bool]:
    """(the first MAX_ERRORS violations, whether there were more), within `time_s`.

    `schema` must have passed `check_schema`; `instance` must be bounded JSON data. Raises
    SchemaProblem when the schema cannot be applied within the bounds.
    """
    validator = _validator(json.dumps(schema, sort_keys=True))
    token = _deadline.set(time.monotonic() + time_s)
    found: list[SchemaViolation] = []
    try:
        for error in validator.iter_errors(instance):
            if len(found) == MAX_ERRORS:
                return found, True
            found.append(error)
    except _OutOfTime:
        raise SchemaProblem(f"checking the arguments against the schema took longer than "
                            f"{time_s:g} s, so they were not accepted; simplify the schema "
                            "(fewer nested anyOf/oneOf alternatives) or the arguments") from None
    except RecursionError:
        raise SchemaProblem("the schema and the arguments together nest too deeply to check"
                            ) from None
    except Unresolvable as exc:
        raise SchemaProblem(f"a reference in the schema cannot be resolved ({exc})") from None
    finally:
        _deadline.reset(token)
    return found, False
