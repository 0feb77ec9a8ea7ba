"""Check a call's arguments against the function's JSON Schema before anything runs.

The verdict is structured, so a caller (or a model) can fix exactly what is wrong:
missing, unexpected and wrongly typed arguments each named (nested ones by path, such as
`point.y` or `values[2]`), other constraint failures with the validator's message, and the
schema that a valid call satisfies.

Arguments are JSON data: anything JSON cannot carry (a datetime, NaN, a set) is refused
here, and what the sandbox receives is exactly the JSON round trip of what was validated.
They are bounded (`runner.jsonlimits.ARGUMENT_BOUNDS`: size, nesting, integer digits) and
the schema is applied within the time and error bounds of `bounded_schema`, so arguments
or a schema written to exhaust the caller's process are refused as `invalid_args`.
An argument that is not among the schema's `properties` is unexpected unless the schema
says otherwise (`additionalProperties` true or a schema, or a matching `patternProperties`),
because a function receives its arguments by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema.exceptions import ValidationError as SchemaViolation
from pydantic import BaseModel, ConfigDict, Field

from ..jsonlimits import ARGUMENT_BOUNDS, JsonBoundsError, json_problem, loads
from .bounded_schema import MAX_ERRORS, SchemaProblem, errors_of, pattern_matches
from .spec import FunctionSpec, schema_type_text

_MAX_MESSAGE = 300  # characters of one problem's message (they quote the offending value)


class ArgumentProblem(BaseModel):
    """One argument (or a part of one) that does not fit the schema."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    argument: str | None  # the top-level argument, None for the arguments as a whole
    path: str  # "principal", "point.y", "values[2]", "" for the whole
    message: str
    expected: str | None = None  # for type errors: the schema's type, e.g. "number" or "integer|null"
    got: str | None = None  # for type errors: the JSON type (or Python type) that was given


class ArgumentErrors(BaseModel):
    """Why a call was refused. Empty lists mean no problem of that kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    function: str
    missing: list[str] = Field(default_factory=list)
    unexpected: list[str] = Field(default_factory=list)
    wrong_type: list[ArgumentProblem] = Field(default_factory=list)
    invalid: list[ArgumentProblem] = Field(default_factory=list)
    parameters: dict[str, Any]  # the schema a valid call satisfies

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.wrong_type or self.invalid)

    def message(self) -> str:
        """One paragraph naming every problem, then what the function takes."""
        parts: list[str] = []
        if self.missing:
            parts.append(_plural("missing required argument", self.missing))
        if self.unexpected:
            parts.append(_plural("unexpected argument", self.unexpected))
        for problem in self.wrong_type:
            parts.append(f"argument '{problem.path}' must be {problem.expected}, got {problem.got}")
        for problem in self.invalid:
            parts.append(f"argument '{problem.path}': {problem.message}" if problem.path
                         else problem.message)
        return (f"invalid arguments for {self.function}: " + "; ".join(parts) + ". "
                + takes_text(self.function, self.parameters))


def _plural(text: str, names: list[str]) -> str:
    quoted = ", ".join(f"'{name}'" for name in names)
    return f"{text}s {quoted}" if len(names) > 1 else f"{text} {quoted}"


def takes_text(function: str, parameters: dict[str, Any]) -> str:
    """'loan_payment takes: principal (number, required), months (integer).'"""
    properties = parameters.get("properties") or {}
    if not properties:
        return f"{function} takes no arguments."
    required = set(parameters.get("required") or ())
    items = []
    for name, schema in properties.items():
        kind = schema_type_text(schema if isinstance(schema, dict) else {})
        items.append(f"{name} ({kind}{', required' if name in required else ''})")
    return f"{function} takes: " + ", ".join(items) + "."


# -- JSON types -----------------------------------------------------------------------------


def json_type(value: Any) -> str:
    """The JSON Schema type name of a value; the Python type name if JSON has none."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _format_path(parts: Sequence[Any]) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


# -- validation -------------------------------------------------------------------------------


def validate_arguments(spec: FunctionSpec, arguments: Any
                       ) -> tuple[dict[str, Any], ArgumentErrors | None]:
    """(the arguments as the sandbox will receive them, None) or ({}, what is wrong).

    `arguments` may be a mapping, a JSON text of an object (as model tool calls carry
    it), or None for no arguments.
    """
    schema = spec.parameters

    def refuse(**problems: Any) -> tuple[dict[str, Any], ArgumentErrors]:
        return {}, ArgumentErrors(function=spec.name, parameters=schema, **problems)

    if arguments is None:
        arguments = {}
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = loads(arguments, ARGUMENT_BOUNDS, what="the arguments text", types=False)
        except JsonBoundsError as exc:
            return refuse(invalid=[ArgumentProblem(argument=None, path="", message=str(exc))])
    if not isinstance(arguments, Mapping):
        return refuse(invalid=[ArgumentProblem(
            argument=None, path="", message="the arguments must be a JSON object mapping argument "
            f"names to values, got {json_type(arguments)}")])
    arguments = dict(arguments)
    too_big = json_problem(arguments, ARGUMENT_BOUNDS, types=False)
    if too_big is not None:
        where = too_big.path.split(".")[0].split("[")[0]
        return refuse(invalid=[ArgumentProblem(
            argument=where or None, path=where, message=f"{too_big.message} (arguments may have "
            f"{ARGUMENT_BOUNDS.describe()})")])

    unexpected = [_key_text(key) for key in arguments if not isinstance(key, str)]
    given = {key: value for key, value in arguments.items() if isinstance(key, str)}
    wrong_type: list[ArgumentProblem] = []
    for key in list(given):
        problem = json_problem(given[key], ARGUMENT_BOUNDS, path=key)
        if problem is not None:
            wrong_type.append(ArgumentProblem(
                argument=key, path=key, message=problem.message, got=type(given[key]).__name__,
                expected=_expected_text(schema, key)))
            del given[key]
    # What the sandbox receives: the JSON round trip (tuples become lists, and so on).
    data: dict[str, Any] = json.loads(json.dumps(given, allow_nan=False))

    properties = schema.get("properties") or {}
    missing = [name for name in schema.get("required") or () if name not in data
               and name not in {p.argument for p in wrong_type}]
    invalid: list[ArgumentProblem] = []
    try:
        unexpected += [key for key in data if not _allowed_extra(schema, key)]
        violations, more = errors_of(schema, data)
    except SchemaProblem as exc:
        return refuse(invalid=[ArgumentProblem(argument=None, path="", message=str(exc))])
    for error in violations:
        _classify(error, missing, unexpected, wrong_type, invalid)
    if more:
        invalid.append(ArgumentProblem(argument=None, path="", message=(
            f"there are more problems; only the first {MAX_ERRORS} are listed")))

    order = {name: index for index, name in enumerate(properties)}

    def position(problem: ArgumentProblem) -> tuple[int, str]:
        return (order.get(problem.argument or "", len(order)), problem.path)

    errors = ArgumentErrors(function=spec.name, missing=_unique(missing),
                            unexpected=_unique(unexpected),
                            wrong_type=sorted(wrong_type, key=position),
                            invalid=sorted(invalid, key=position), parameters=schema)
    return (data, None) if errors.ok else ({}, errors)


def _key_text(key: Any) -> str:
    import reprlib

    return reprlib.Repr().repr(key)[:80]


def _cut(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE - 3] + "..."


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))


def _expected_text(schema: dict[str, Any], argument: str) -> str:
    argument_schema = (schema.get("properties") or {}).get(argument)
    return schema_type_text(argument_schema) if isinstance(argument_schema, dict) else "JSON data"


def _allowed_extra(schema: dict[str, Any], key: str) -> bool:
    """Whether an argument is allowed by the schema (named, or explicitly allowed as extra)."""
    if key in (schema.get("properties") or {}):
        return True
    if any(pattern_matches(pattern, key) for pattern in schema.get("patternProperties") or {}):
        return True
    extra = schema.get("additionalProperties")
    return extra is True or isinstance(extra, dict)


def _classify(error: SchemaViolation, missing: list[str], unexpected: list[str],
              wrong_type: list[ArgumentProblem], invalid: list[ArgumentProblem]) -> None:
    parts = list(error.absolute_path)
    path = _format_path(parts)
    argument = str(parts[0]) if parts else None
    kind = error.validator
    if kind == "required":
        if parts:  # top-level ones are counted from the schema's own `required` list
            instance = error.instance if isinstance(error.instance, dict) else {}
            required: Any = error.validator_value
            missing.extend(f"{path}.{name}" for name in required if name not in instance)
        return
    if kind == "additionalProperties":
        if parts and isinstance(error.instance, dict):
            allowed = error.schema if isinstance(error.schema, dict) else {}
            unexpected.extend(f"{path}.{name}" for name in error.instance
                              if not _allowed_extra(allowed, name))
        return  # top-level extras were counted before validating
    if kind == "type":
        wrong_type.append(ArgumentProblem(
            argument=argument, path=path, message=_cut(error.message),
            expected=_type_text(error.validator_value), got=json_type(error.instance)))
        return
    if kind in ("anyOf", "oneOf") and error.context and all(
            sub.validator == "type" and not list(sub.relative_path) for sub in error.context):
        expected: list[str] = []
        for sub in error.context:
            for name in _type_text(sub.validator_value).split("|"):
                if name not in expected:
                    expected.append(name)
        wrong_type.append(ArgumentProblem(
            argument=argument, path=path, message=_cut(error.message), expected="|".join(expected),
            got=json_type(error.instance)))
        return
    if kind in ("anyOf", "oneOf") and error.context:
        branch = _matching_branch(error.context)
        if branch:  # the value has the type of exactly one alternative: report inside it
            for sub in branch:
                _classify(sub, missing, unexpected, wrong_type, invalid)
            return
    invalid.append(ArgumentProblem(argument=argument, path=path, message=_cut(error.message)))


def _matching_branch(context: list[SchemaViolation]) -> list[SchemaViolation] | None:
    """The errors of the one anyOf/oneOf alternative whose type the value has, if just one."""
    branches: dict[Any, list[SchemaViolation]] = {}
    for sub in context:
        branches.setdefault(sub.relative_schema_path[0], []).append(sub)
    fitting = [errors for errors in branches.values()
               if not any(e.validator == "type" and not list(e.relative_path) for e in errors)]
    return fitting[0] if len(fitting) == 1 else None


def _type_text(value: Any) -> str:
    return "|".join(str(v) for v in value) if isinstance(value, list) else str(value)
