"""runner: sandboxed execution of model-written Python, with limits and a log of every run."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .errors import RunnerError
    from .functions.sets import FunctionSet
    from .functions.spec import FunctionSpec
    from .functions.tool import tool
    from .logs.functions import Author
    from .sandbox import Sandbox
    from .types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Resources, Status

# Every public name is imported on first use. The worker program is part of this package
# (`python -m runner.worker`), and its memory is what every run's process is forked
# from: it must not hold pydantic, the log store and the rest of the host's side, which
# would make every fork slower and every run's copy larger.
_WHERE = {
    "RunnerError": ".errors", "Author": ".logs.functions", "Sandbox": ".sandbox",
    "ErrorInfo": ".types", "ExecutionRequest": ".types", "ExecutionResult": ".types",
    "Limits": ".types", "Resources": ".types", "Status": ".types",
    "FunctionSet": ".functions", "FunctionSpec": ".functions", "tool": ".functions",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'runner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # once found, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


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
