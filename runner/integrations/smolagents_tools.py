"""An agent's smolagents tools, as the sandbox runs them.

Two kinds, each checked on the host before the run starts and defined in the session:

- a tool smolagents' `@tool` made from a plain function becomes a runner function
  (`tool_spec`): its source, every name it reads defined in it (smolagents' own
  `MethodChecker` finds the rest: a module constant of the host is not in the sandbox);
- a `Tool` subclass (smolagents' documented way; its own tools are written so) is shipped
  as smolagents' Docker and E2B executors ship it (`tool_classes_source`): a stand-in
  `Tool` base, the class's source as `instance_to_source` gives it, checked by
  `validate_tool_attributes`, and an instance made with its defaults under the tool's name.

A tool that cannot run there is a FunctionDefinitionError saying why.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Mapping
from typing import Any

from smolagents.tool_validation import MethodChecker, validate_tool_attributes
from smolagents.tools import Tool
from smolagents.utils import instance_to_source

from ..errors import FunctionDefinitionError
from ..functions import FunctionSpec, spec_from_callable

__all__ = ["checked_tool_class", "is_tool_class", "tool_classes_source", "tool_spec"]

# The base the shipped classes derive from, as smolagents' remote executors define it.
_TOOL_BASE = '''
class Tool:
    """smolagents' Tool, as its remote executors define it for the tools they ship."""

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        pass
'''


def is_tool_class(tool: Any) -> bool:
    """A `Tool` subclass with a `forward` method of its own (not a tool @tool made)."""
    return isinstance(tool, Tool) and inspect.ismethod(getattr(tool, "forward", None)) \
        and type(tool).__module__ != "smolagents.tools"


def checked_tool_class(name: str, tool: Tool) -> Tool:
    """`tool`, once smolagents' own check says its class's source stands alone."""
    if name != getattr(tool, "name", None):
        raise FunctionDefinitionError(f"{type(tool).__name__} is named {tool.name!r}, not {name!r}",
                                      fix="list the tool under its own name")
    try:
        validate_tool_attributes(type(tool), check_imports=False)
        instance_to_source(tool, base_cls=Tool)
    except (ValueError, TypeError, OSError) as exc:  # (OSError: no source to read)
        raise FunctionDefinitionError(" ".join(str(exc).split()),
                                      fix="define every name the tool reads inside its class") from None
    return tool


def tool_classes_source(tools: Mapping[str, Tool]) -> str:
    """The session code that defines `tools` (Tool subclasses), "" for none."""
    if not tools:
        return ""
    parts = [_TOOL_BASE]
    for name, tool in tools.items():
        source = instance_to_source(tool, base_cls=Tool).replace("from smolagents.tools import Tool", "")
        parts.append(f"{source}\n\n{name} = {type(tool).__name__}()\n")
    return "\n\n".join(parts)


def tool_spec(name: str, tool: Tool) -> FunctionSpec:
    """A tool @tool made from a plain function, as a runner function."""
    forward = getattr(tool, "forward", None)
    function = inspect.unwrap(forward) if forward is not None else None
    if function is None or not inspect.isfunction(function):
        raise FunctionDefinitionError(f"{type(tool).__name__} has no plain function to run",
                                      fix="use @tool on a plain function, or subclass Tool")
    if next(iter(inspect.signature(function).parameters), None) == "self":
        raise FunctionDefinitionError(f"{type(tool).__name__}.forward uses the tool object (self)",
                                      fix="use @tool on a plain function, or subclass Tool")
    undefined = _undefined_names(function)
    if undefined:
        raise FunctionDefinitionError(
            f"{function.__name__} reads {', '.join(undefined)}, which it does not define (the "
            "sandbox gets its source, not the host module around it)",
            fix="define or import them inside the function")
    return spec_from_callable(function, name=name, description=str(getattr(tool, "description", "")),
                              decorator_names=frozenset({"tool"}))


def _undefined_names(function: Any) -> list[str]:
    """The names a function reads and does not define, by smolagents' own checker."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return []  # spec_from_callable says why it cannot read the source
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None:
        return []
    node.decorator_list = []  # (`@tool` itself is the host's, not read by the function)
    checker = MethodChecker(set(), check_imports=False)
    checker.visit(node)
    return sorted(set(re.findall(r"Name '([^']+)' is undefined", "\n".join(checker.errors))))
