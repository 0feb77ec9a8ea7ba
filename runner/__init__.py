"""runner: sandboxed execution of model-written Python, with limits and a log of every run."""

from __future__ import annotations

from .errors import RunnerError
from .sandbox import Sandbox
from .types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Resources, Status

__version__ = "0.1.0"

__all__ = [
    "ErrorInfo",
    "ExecutionRequest",
    "ExecutionResult",
    "Limits",
    "Resources",
    "RunnerError",
    "Sandbox",
    "Status",
    "__version__",
]
