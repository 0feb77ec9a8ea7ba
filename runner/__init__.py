"""runner: sandboxed execution of model-written Python, with limits and a log of every run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import RunnerError
from .logs.functions import Author
from .sandbox import Sandbox
from .types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Resources, Status

if TYPE_CHECKING:
    from .functions import FunctionSet, FunctionSpec, tool

# Imported on first use: the worker program imports this package too, and should not pay
# for jsonschema and the rest of the functions layer at every start.
_LAZY = frozenset({"FunctionSet", "FunctionSpec", "tool"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import functions

        return getattr(functions, name)
    raise AttributeError(f"module 'runner' has no attribute {name!r}")


# The one place the version is written: pyproject.toml reads it from here
# ([tool.setuptools.dynamic]), and the CLI and the image tags read it from the package.
__version__ = "0.1.0"

__all__ = [
    "Author",
    "ErrorInfo",
    "ExecutionRequest",
    "ExecutionResult",
    "FunctionSet",
    "FunctionSpec",
    "Limits",
    "Resources",
    "RunnerError",
    "Sandbox",
    "Status",
    "__version__",
    "tool",
]
