"""Call a sandboxed function: validate the arguments, then run the body in the sandbox.

Invalid arguments never reach a backend: the result has status `invalid_args` and an
`ErrorInfo` of type `InvalidArguments` whose message names every problem (for people and
models) and whose `detail` holds the same facts as JSON (`ArgumentErrors`: missing,
unexpected, wrong_type, invalid, parameters). A name that is not in the set is refused the
same way, with type `UnknownFunction`. Both are logged with `Sandbox.record`.

A valid call runs as one request: the other functions of the set as `preamble` (one
source file per function, named `<function NAME>`, so a traceback shows each function's
own lines), the called function's code as `code`, the packages of the whole set (one
environment per set, whichever function is called), and a `FunctionCall` with the
validated arguments, which travel as JSON data and are never pasted into code. The log
row's meta names the set, function, version, spec digest and arguments.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic_core import to_jsonable_python

from ..errors import ConfigurationError
from ..ids import new_id
from ..jsonlimits import ARGUMENT_BOUNDS, JsonBoundsError, json_problem, loads
from ..types import (
    ErrorInfo,
    ExecutionRequest,
    ExecutionResult,
    FunctionCall,
    InputFile,
    Limits,
    SourceFile,
    Status,
)
from ..worker import error_types
from .sets import FunctionLike, FunctionSet, as_spec
from .spec import FunctionSpec
from .validation import validate_arguments

if TYPE_CHECKING:
    from ..sandbox import Sandbox


_LOGGED_TEXT = 100_000  # characters of argument text that could not be read as an object


def source_filename(name: str) -> str:
    """The file name a function's code has in tracebacks when it runs as part of a set."""
    return f"<function {name}>"


def build_request(spec: FunctionSpec, arguments: dict[str, Any], *,
                  function_set: FunctionSet | None, limits: Limits,
                  files: tuple[InputFile, ...] = ()) -> ExecutionRequest:
    """The request that runs `spec` (with its set around it) on already-validated arguments,
    with `files` in its working directory."""
    others = [s for s in function_set if s.name != spec.name] if function_set is not None else []
    packages = function_set.packages if function_set is not None else list(spec.packages)
    return ExecutionRequest(
        code=spec.code, limits=limits, packages=tuple(packages),
        preamble=tuple(SourceFile(filename=source_filename(s.name), code=s.code) for s in others),
        call=FunctionCall(name=spec.name, arguments=arguments),
        filename=source_filename(spec.name), files=files)


def call_function(sandbox: Sandbox, target: FunctionSet | FunctionLike, name: str | None,
                  arguments: Any, *, limits: Limits | None = None,
                  meta: dict[str, Any] | None = None, execution_id: str | None = None,
                  files: tuple[InputFile, ...] = ()) -> ExecutionResult:
    """Validate `arguments` for the function `name` of `target` (a set, or one spec or
    `@tool` function, where `name` may be None), then run it in `sandbox`.

    `arguments` is a mapping, a JSON object text (as model tool calls carry it) or None.
    Mistakes of the caller's program (no name for a set of several functions, a name that
    contradicts a single spec) raise ConfigurationError; everything a model could get
    wrong comes back as a result. `meta` is added to what the log records (e.g. the
    agent run and turn that made the call); `execution_id` is the result's id (new by default);
    `files` are in the run's working directory when the function is called.
    """
    execution_id = execution_id or new_id()
    limits = limits or sandbox.limits
    extra = dict(meta or {})
    function_set = target if isinstance(target, FunctionSet) else None
    if function_set is not None:
        if name is None:
            if len(function_set) != 1:
                raise ConfigurationError(
                    f"which function of set {function_set.name!r}? it has {len(function_set)}",
                    fix="pass the name: sandbox.call(function_set, name, arguments)")
            name = function_set.names[0]
        spec = function_set.get(name)
        if spec is None:
            return _unknown_function(sandbox, function_set, name, arguments, limits, extra,
                                     execution_id)
        version: int | None = function_set.version(name)
    else:
        spec = as_spec(target)  # type: ignore[arg-type]
        if name is not None and name != spec.name:
            raise ConfigurationError(f"asked to call {name!r}, but the function given is {spec.name!r}",
                                     fix="pass the function's own name, or no name")
        version = None

    call_meta: dict[str, Any] = {**extra, "function": spec.name, "version": version,
                                 "set": function_set.name if function_set is not None else None,
                                 "spec_sha256": spec.digest}
    data, problems = validate_arguments(spec, arguments)
    if problems is not None:
        request = build_request(spec, _loggable(arguments), function_set=function_set, limits=limits)
        detail = problems.model_dump(mode="json")
        result = _refused(sandbox, limits, ErrorInfo(
            type=error_types.INVALID_ARGUMENTS, message=problems.message(), detail=detail), execution_id)
        # The log row keeps the detail in meta too: it is the queryable copy.
        sandbox.record(request, result, {**call_meta, "arguments": _loggable(arguments),
                                         "invalid_arguments": detail})
        return result
    request = build_request(spec, data, function_set=function_set, limits=limits, files=files)
    return sandbox.execute(request, meta={**call_meta, "arguments": data}, execution_id=execution_id)


def _unknown_function(sandbox: Sandbox, function_set: FunctionSet, name: str, arguments: Any,
                      limits: Limits, extra: dict[str, Any], execution_id: str) -> ExecutionResult:
    available = function_set.names
    detail = {"function": name, "set": function_set.name, "available": available}
    message = (f"there is no function {name!r} in set {function_set.name!r}; the functions are: "
               + (", ".join(available) if available else "none"))
    result = _refused(sandbox, limits, ErrorInfo(type=error_types.UNKNOWN_FUNCTION, message=message,
                                                 detail=detail), execution_id)
    request = ExecutionRequest(code="", limits=limits,
                               call=FunctionCall(name=name, arguments=_loggable(arguments)))
    sandbox.record(request, result, {**extra, "function": name, "version": None,
                                     "set": function_set.name, "arguments": _loggable(arguments),
                                     "unknown_function": detail})
    return result


def _refused(sandbox: Sandbox, limits: Limits, error: ErrorInfo, execution_id: str) -> ExecutionResult:
    return ExecutionResult(id=execution_id, backend=sandbox.backend, status=Status.INVALID_ARGS,
                           error=error, limits=limits)


def _loggable(arguments: Any) -> dict[str, Any]:
    """Whatever was passed, as a JSON object for the log (non-JSON values as their repr).

    Arguments beyond the bounds are described, not copied: copying them is what the
    bounds are there to avoid."""
    if isinstance(arguments, bytes):
        arguments = arguments.decode("utf-8", "replace")
    if isinstance(arguments, str):
        try:
            parsed = loads(arguments, ARGUMENT_BOUNDS, types=False)
        except JsonBoundsError:
            parsed = None
        if not isinstance(parsed, dict):
            shown = arguments if len(arguments) <= _LOGGED_TEXT else (
                arguments[:_LOGGED_TEXT] + f"... [{len(arguments) - _LOGGED_TEXT:,} more characters]")
            return {"(arguments)": shown}
        arguments = parsed
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        arguments = dict(arguments)
    too_big = json_problem(arguments, ARGUMENT_BOUNDS, types=False)
    if too_big is not None:
        return {"(arguments)": f"[not logged: {too_big.message}]"}
    if isinstance(arguments, dict):
        return {key if isinstance(key, str) else reprlib.repr(key): to_jsonable_python(value, fallback=repr)
                for key, value in arguments.items()}
    return {"(arguments)": to_jsonable_python(arguments, fallback=repr)}
