"""A `FunctionSet` as AG2 function calls: the signatures for the model, callables that run
each function in runner's sandbox.

    from runner.integrations.ag2 import function_map, function_signatures
    for signature in function_signatures(learned):
        assistant.update_function_signature(signature, is_remove=False)
    user_proxy.register_function(function_map=function_map(learned, sandbox))

Each callable belongs to one function (its own closure, never a shared loop variable) and
calls it by name in the set as the set is at call time, so a revised function runs its
newest version. Arguments are validated against the function's schema before anything
runs; the body runs in the sandbox with the set's packages (the sandbox's environments,
never pip on the host); every call is logged with the set, the function's version and
the integration. The value comes back as text (JSON for anything but a string, control
characters made visible: AG2 prints it to a terminal). A call
that fails raises `FunctionCallFailed` with runner's feedback (what was wrong, what a
valid call looks like): AG2's `execute_function` turns any exception into an
`Error: ...` reply with `is_exec_success=False`, its ordinary way of reporting a failed
call, so the conversation goes on.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...agent.feedback import call_label, problem_for_result, render
from ...functions import FunctionSet
from ...sandbox import Sandbox
from ...terminal import sanitize_for_terminal
from ...types import ExecutionResult, Limits, Status
from ..common import integration_meta

INTEGRATION = "ag2"


class FunctionCallFailed(Exception):
    """A learned function's call did not return a value; the message says why and how to
    call it correctly (AG2 shows it to the model as `Error: <message>`)."""

    def __init__(self, message: str, result: ExecutionResult) -> None:
        super().__init__(message)
        self.result = result


def function_signatures(functions: FunctionSet) -> list[dict[str, Any]]:
    """What `update_function_signature` takes for each function: name, description, parameters."""
    return [{"name": spec.name, "description": spec.description, "parameters": spec.parameters}
            for spec in functions]


def function_map(functions: FunctionSet, sandbox: Sandbox, *, limits: Limits | None = None,
                 integration: str = INTEGRATION) -> dict[str, Callable[..., str]]:
    """A callable per function of `functions`, each running its function in `sandbox`."""
    return {name: sandboxed_function(functions, name, sandbox, limits=limits, integration=integration)
            for name in functions.names}


def sandboxed_function(functions: FunctionSet, name: str, sandbox: Sandbox, *,
                       limits: Limits | None = None, integration: str = INTEGRATION
                       ) -> Callable[..., str]:
    """The callable of one function (see the module docstring)."""

    def call(**arguments: Any) -> str:
        result = sandbox.call(functions, name, arguments, limits=limits,
                              meta=integration_meta(integration, {"ag2_function_call": name}))
        if result.status is not Status.OK:
            problem = problem_for_result(result, label=call_label(name, arguments),
                                         spec=functions.get(name), kind="call")
            assert problem is not None
            raise FunctionCallFailed(sanitize_for_terminal(render(problem)), result)
        return sanitize_for_terminal(value_text(result))

    call.__name__ = name
    call.__qualname__ = f"sandboxed_function.<{name}>"
    call.__doc__ = functions[name].description
    return call


def value_text(result: ExecutionResult) -> str:
    """A call's value as the text AG2 puts in the function's reply (what it printed first)."""
    value = result.return_value
    shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    printed = result.stdout.strip()
    return f"{printed}\n{shown}" if printed and value is not None else (printed or shown)
