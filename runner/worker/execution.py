"""One run inside the child, for every executor: compile, execute, call, describe.

An executor supplies how source is compiled and what namespace it runs in (the
restricted tier compiles with RestrictedPython and guarded builtins; the Docker tier
uses plain CPython). Everything else is shared: the order of steps, how exceptions,
`SystemExit` and refusals become outcomes, how a function call's return value becomes
JSON. Stdlib only.

A request is a dict: `code` (str), optional `preamble` (a list of [filename, source]
run first in the same namespace, e.g. the other functions of a function set), and
optional `call` ({"name": str, "arguments": {...}}) to call a function the code defines.
"""

from __future__ import annotations

import ast
import dis
from collections.abc import Callable
from typing import Any

from . import error_types
from .tracebacks import USER_FILENAME, describe_exception, register_source
from .values import to_json_value


def _defined_functions(namespace: dict[str, Any]) -> list[str]:
    return sorted(name for name, value in namespace.items()
                  if callable(value) and not name.startswith("_")
                  and getattr(value, "__module__", None) == "__main__")


def run_request(
    request: dict[str, Any],
    *,
    compile_source: Callable[[ast.Module, str, dict[str, Any]], Any],
    namespace: dict[str, Any],
    refusal: type[BaseException],
    execute: Callable[[Any, dict[str, Any]], None] = exec,
    refusals_recorded: Callable[[], list[str]] = list,
    explain: Callable[[BaseException, dict[str, Any]], str | None] | None = None,
) -> dict[str, Any]:
    """Execute a request; returns the outcome dict the parent judges. `compile_source`
    gets each source's tree, its file name, and the context it compiles in (every tree of
    the request, and the namespace it will run in). `explain` may add a note to the
    message of an exception the code raised: what the sandbox did, and what to do."""
    sources = [(str(name), str(text)) for name, text in request.get("preamble") or ()]
    sources.append((str(request.get("filename") or USER_FILENAME), request["code"]))
    user_files = frozenset(name for name, _ in sources)

    def describe(exc: BaseException) -> dict[str, str]:
        return describe_exception(exc, user_files)

    trees: list[tuple[str, ast.Module]] = []
    for filename, source in sources:
        if source.startswith("\ufeff"):  # a UTF-8 byte order mark, as plain Python accepts
            source = source[1:]
        register_source(source, filename)
        try:
            trees.append((filename, ast.parse(source, filename, "exec")))
        except SyntaxError as exc:
            return {"kind": "error", "error": describe(exc)}
        except ValueError as exc:  # e.g. a NUL byte in the source
            return {"kind": "error", "error": {"type": error_types.SYNTAX_ERROR, "traceback": "",
                                               "message": f"{exc} (in {filename})"}}
    context = {"trees": [tree for _, tree in trees], "namespace": namespace}
    compiled = []
    for filename, tree in trees:
        try:
            compiled.append(compile_source(tree, filename, context))
        except refusal as exc:  # the executor's policy refused the code as written
            return {"kind": "denied", "error": {"type": error_types.DENIED, "message": str(exc),
                                                "traceback": ""}}
    outcome: dict[str, Any]
    try:
        for code in compiled[:-1]:
            execute(code, namespace)
        call = request.get("call")
        before = dict(namespace) if call else {}  # only calls need to know what `code` added
        execute(compiled[-1], namespace)
        outcome = {"kind": "ok"}
        if call:
            own = {k: v for k, v in namespace.items() if before.get(k) is not v}
            outcome = _call(namespace, call, own)
    except refusal as exc:
        outcome = {"kind": "denied", "error": {"type": error_types.DENIED, "message": str(exc),
                                               "traceback": ""}}
    except SystemExit as exc:
        code = exc.code if exc.code is None or (isinstance(exc.code, int)
                                                and 0 <= exc.code <= 255) else 1
        outcome = {"kind": "exit", "exit_code": code, "error": describe(exc)}
    except BaseException as exc:  # everything user code raises is a result
        outcome = {"kind": "error", "error": describe(exc)}
        if isinstance(exc, MemoryError) and allocation_failed(exc):
            outcome["allocation_failed"] = True
        note = explain(exc, request) if explain is not None else None
        if note:
            outcome["error"]["message"] += f" ({note})"
    recorded = refusals_recorded()
    if recorded:  # the first refusal, even if user code caught it and went on
        outcome = {"kind": "denied", "error": {"type": error_types.DENIED, "message": recorded[0],
                                               "traceback": ""}}
    return outcome


def allocation_failed(exc: BaseException) -> bool:
    """A MemoryError the interpreter raised because an allocation failed (the memory
    limit), not one some Python code raised itself (`raise MemoryError`): the innermost
    frame of its traceback was not at a `raise` instruction."""
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code.co_code
    offset = tb.tb_lasti
    if not 0 <= offset < len(code):
        return True
    return code[offset] not in _RAISE_OPCODES


_RAISE_OPCODES = frozenset(dis.opmap[name] for name in ("RAISE_VARARGS", "RERAISE")
                           if name in dis.opmap)


def _call(namespace: dict[str, Any], call: dict[str, Any], own: dict[str, Any]
          ) -> dict[str, Any]:
    name = call.get("name")
    function = namespace.get(name) if isinstance(name, str) else None
    if function is None or not callable(function):
        defined = _defined_functions(own)  # what this code defines, not the preamble
        return {"kind": "error", "error": {
            "type": error_types.FUNCTION_NOT_DEFINED,
            "message": f"the code does not define a function named {name!r}; it defines: "
                       + (", ".join(defined) if defined else "no functions"),
            "traceback": ""}}
    arguments = call.get("arguments") or {}
    value = function(**arguments)
    converted = to_json_value(value)
    return {"kind": "ok", "return_value": converted["value"], "return_repr": converted["repr"],
            "return_is_repr": converted["is_repr"]}
