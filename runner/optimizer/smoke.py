"""Run a proposed function once in the sandbox before it is accepted.

Two executions, both logged and linked to the optimizer's turn:

1. the definition: the rest of the list, then the function's code, with the list's
   packages (a package the backend does not offer, an import that fails or is refused, a
   top-level statement that raises: the function is refused);
2. a smoke call, with example arguments built from its schema (`example_arguments`), run as
   any call of the set runs. Made-up arguments may well make a correct function raise
   (a ValueError for an example string), so only failures that no arguments could cause
   refuse it: an import that fails or is refused, a name the code never defines, a
   package that cannot be had, and a call that runs past its time limit (a function that
   does not end on small example arguments would cost every later call its whole limit).
   Anything else is reported to the optimizer with the acceptance, for it to judge.

Package environments are the backend's (built once per set of requirements and cached);
nothing here installs anything.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..agent import feedback
from ..agent.feedback import Feedback
from ..functions import FunctionSet, FunctionSpec, call_function, validate_arguments
from ..functions.call import source_filename
from ..ids import new_id
from ..sandbox import Sandbox
from ..types import ExecutionRequest, ExecutionResult, Limits, SourceFile, Status
from ..worker import error_types

# Errors of a call that no choice of arguments explains: the code itself is broken.
_BROKEN = frozenset({ImportError.__name__, ModuleNotFoundError.__name__, NameError.__name__,
                     error_types.PACKAGE_UNAVAILABLE, error_types.FUNCTION_NOT_DEFINED,
                     error_types.DENIED})
_MAX_DEPTH = 8  # nesting of example values
_SHOWN = 300  # characters of a smoke call's value or error shown to the optimizer


@dataclass(frozen=True)
class SmokeOutcome:
    problem: Feedback | None  # why the function is refused
    note: str  # what the smoke call showed, for the optimizer


def smoke_test(sandbox: Sandbox, spec: FunctionSpec, candidate: FunctionSet, *, action: str,
               meta: dict[str, Any], execution_ids: list[str], limits: Limits,
               template: str = "") -> SmokeOutcome:
    """Define `spec` within `candidate` (List B with the change made), then call it once."""
    others = [s for s in candidate if s.name != spec.name]
    request = ExecutionRequest(
        code=spec.code, limits=limits, packages=tuple(candidate.packages),
        preamble=tuple(SourceFile(filename=source_filename(s.name), code=s.code) for s in others),
        filename=source_filename(spec.name))
    execution_ids.append(new_id())
    defined = sandbox.execute(request, meta={**meta, "optimizer_smoke": "define",
                                             "function": spec.name}, execution_id=execution_ids[-1])
    if defined.status is not Status.OK:
        problem = feedback.problem_for_result(defined, label=f"defining {spec.name}",
                                              template=template, kind="code")
        assert problem is not None
        return SmokeOutcome(problem=problem.model_copy(update={
            "message": f"{action}({spec.name!r}) was refused: {problem.message}"}), note="")
    arguments = example_arguments(spec.parameters)
    _, problems = validate_arguments(spec, arguments)
    if problems is not None:
        return SmokeOutcome(problem=None, note=(
            f"{spec.name} defines and imports fine; no smoke call was made, because no example "
            f"arguments could be built from its schema ({problems.message()})"))
    execution_ids.append(new_id())
    called = call_function(sandbox, candidate, spec.name, arguments, limits=limits,
                           meta={**meta, "optimizer_smoke": "call"}, execution_id=execution_ids[-1])
    label = feedback.call_label(spec.name, arguments)
    if _broken(called):
        problem = feedback.problem_for_result(called, label=f"the smoke call {label}",
                                              spec=spec, template=template, kind="call")
        assert problem is not None
        return SmokeOutcome(problem=problem.model_copy(update={
            "message": f"{action}({spec.name!r}) was refused: {problem.message}"}), note="")
    return SmokeOutcome(problem=None, note=_call_note(called, label))


def _broken(result: ExecutionResult) -> bool:
    if result.status in (Status.DENIED, Status.INSTALL_FAILED, Status.TIMEOUT):
        return True
    return result.status is Status.ERROR and result.error is not None and result.error.type in _BROKEN


def _call_note(result: ExecutionResult, label: str) -> str:
    if result.status is Status.OK:
        value, _ = feedback.clip(json.dumps(result.return_value, ensure_ascii=False, default=repr),
                                 _SHOWN)
        return f"a smoke call {label} returned {value}"
    error = result.error
    what = f"{error.type}: {error.message}" if error else str(result.status)
    what, _ = feedback.clip(what, _SHOWN)
    return (f"a smoke call {label} with made-up arguments ended with {result.status} ({what}); "
            "the function was accepted because its code defines and imports fine, but make sure "
            "it handles the inputs it will get")


def example_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments for a smoke call: every required property with an example value."""
    value = example_value(schema, 0)
    return value if isinstance(value, dict) else {}


def example_value(schema: Any, depth: int) -> Any:
    """A value that fits `schema` where that is easy to see: its default, const, first
    example or enum member, else a small value of its type (2, "2", [2], ...)."""
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return None
    for key in ("default", "const"):
        if key in schema:
            return schema[key]
    for key in ("examples", "enum"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return options[0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, dict) and option.get("type") != "null":
                    return example_value({**{k: v for k, v in schema.items() if k != key}, **option},
                                         depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "integer":
        return int(_number(schema, integer=True))
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "array":
        prefix = schema.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            return [example_value(item, depth + 1) for item in prefix]
        count = schema.get("minItems")
        count = max(1, min(count, 8)) if isinstance(count, int) else 1
        return [example_value(schema.get("items", {"type": "integer"}), depth + 1)] * count
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        names = [n for n in required if isinstance(n, str)] if isinstance(required, list) else []
        return {name: example_value(properties.get(name, {}), depth + 1) for name in names}
    length = schema.get("minLength")
    return "2" * (max(1, min(length, 64)) if isinstance(length, int) else 1)


def _number(schema: dict[str, Any], *, integer: bool) -> float:
    value = 2.0
    low, high = _real(schema.get("minimum")), _real(schema.get("maximum"))
    low_open, high_open = _real(schema.get("exclusiveMinimum")), _real(schema.get("exclusiveMaximum"))
    if low is not None and value < low:
        value = low
    if low_open is not None and value <= low_open:
        value = low_open + 1
    if high is not None and value > high:
        value = high
    if high_open is not None and value >= high_open:
        value = high_open - 1
    if integer:
        value = float(math.ceil(value) if low is not None or low_open is not None else math.floor(value))
    return value


def _real(value: Any) -> float | None:
    """A finite number of a schema keyword, or None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
