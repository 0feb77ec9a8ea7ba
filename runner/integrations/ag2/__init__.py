"""runner in AG2 (`pip install runner-sandbox[ag2]`; AG2 0.9, the line that ships MathUserProxyAgent
and AgentOptimizer): every code block and every learned function runs in runner's sandbox.

- `executor`: `RunnerCodeExecutor`, for `code_execution_config={"executor": ...}`, and
  `session_per_chat(agent)` (a fresh session for each chat of the agent);
- `mathchat`: `RunnerMathChat`, a mixin for `MathUserProxyAgent` (one session per problem,
  each block once);
- `functions`: `function_map` and `function_signatures` from a `FunctionSet`;
- `optimizer`: `SandboxedAgentOptimizer`, AG2's AgentOptimizer whose actions are checked,
  smoke-run and kept as versions of a `FunctionSet`.

Every run's log row carries `{"integration": "ag2"}` in its meta.
"""

from __future__ import annotations

from .executor import RunnerCodeExecutor, RunnerCodeResult, session_per_chat
from .functions import FunctionCallFailed, function_map, function_signatures, sandboxed_function
from .mathchat import RunnerMathChat, print_last_expression
from .optimizer import ActionVerdict, SandboxedAgentOptimizer

__all__ = [
    "ActionVerdict",
    "FunctionCallFailed",
    "RunnerCodeExecutor",
    "RunnerCodeResult",
    "RunnerMathChat",
    "SandboxedAgentOptimizer",
    "function_map",
    "function_signatures",
    "print_last_expression",
    "sandboxed_function",
    "session_per_chat",
]
