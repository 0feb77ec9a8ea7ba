"""MathChat on runner: `MathUserProxyAgent`'s code blocks in one runner session per problem.

    from autogen.agentchat.contrib.math_user_proxy_agent import MathUserProxyAgent
    from runner.integrations.ag2 import RunnerMathChat

    class SandboxedMathProxy(RunnerMathChat, MathUserProxyAgent):
        pass

    proxy = SandboxedMathProxy(name="mathproxyagent", human_input_mode="NEVER", sandbox=sb)

AG2's `MathUserProxyAgent.execute_one_python_code` pastes every earlier block in front of
each new one and runs the lot on the host with `execute_code`, twice (a 5 s run, then a
check run); `code_execution_config={"executor": ...}` fails inside it. This mixin
overrides that one method: each block runs once, in a runner session that keeps the
problem's state, so nothing is replayed. `reset()` and `_reset()` (which
`MathUserProxyAgent.message_generator` calls as each problem starts, and the AgentOptimizer
notebook at each problem's end) end the session: the next problem starts from nothing.

What the model reads follows MathChat: the printed output, `Error: ...` for a failure,
"No output found. Make sure you print the results." for a silent block, and the
too-long-output notice past 2,000 characters (the log keeps all of it). As MathChat does,
a bare expression on the block's last line is printed (here by parsing the block, so a
`;` inside a string is never split).

A reply that calls a function (a learned one: `register_function(function_map=...)`) is
left to AG2's function- and tool-call replies, which MathChat's reply would otherwise
answer first. The agent's other code path (AG2's generic code-execution reply) gets the
same executor,
so no block of this agent reaches the host whichever path AG2 takes. The keyword arguments
`sandbox`, `backend`, `timeout`, `limits`, `packages`, `functions` and `executor` (a
`RunnerCodeExecutor` to share) configure it and are not passed on to AG2.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...backends.base import DEFAULT_BACKEND
from ...functions import FunctionSet
from ...last_expression import wrap_last_expression
from ...sandbox import Sandbox
from ...types import Limits, Status
from ..common import block_output
from .executor import RunnerCodeExecutor

# MathChat's own wording (autogen/agentchat/contrib/math_user_proxy_agent.py), so a model
# tuned on MathChat conversations reads what it expects.
NO_OUTPUT = "No output found."
NO_PRINT = "No output found. Make sure you print the results."
TOO_LONG = ("Your requested query response is too long. You might have made a mistake. Please "
            "revise your reasoning and query.")
MAX_OUTPUT_CHARS = 2000


class RunnerMathChat:
    """Mix in before `MathUserProxyAgent`; see the module docstring."""

    runner_executor: RunnerCodeExecutor

    def __init__(self, *args: Any, sandbox: Sandbox | None = None, backend: str = DEFAULT_BACKEND,
                 timeout: float | None = None, limits: Limits | None = None,
                 packages: Iterable[str] = (), functions: FunctionSet | None = None,
                 executor: RunnerCodeExecutor | None = None, **kwargs: Any) -> None:
        if executor is None:
            executor = RunnerCodeExecutor(sandbox, backend=backend, timeout=timeout, limits=limits,
                                          packages=packages, functions=functions,
                                          meta={"mathchat": True})
        self.runner_executor = executor
        # Whatever host execution was configured (work_dir, use_docker) is replaced: every
        # block of this agent goes to the sandbox.
        if kwargs.get("code_execution_config") is not False:
            kwargs["code_execution_config"] = {"executor": executor}
        super().__init__(*args, **kwargs)
        # MathChat's reply comes before AG2's function- and tool-call replies and answers
        # every message; this one lets those replies carry out a learned function's call.
        for entry in self._reply_func_list:  # type: ignore[attr-defined]
            if getattr(entry["reply_func"], "__name__", "") == "_generate_math_reply":
                entry["reply_func"] = RunnerMathChat._math_reply

    def _math_reply(self, messages: list[dict[str, Any]] | None = None, sender: Any = None,
                    config: Any = None) -> tuple[bool, Any]:
        """MathChat's reply, except to a function or tool call (AG2's next replies run it)."""
        last = (messages if messages is not None else self._oai_messages[sender])[-1]  # type: ignore[attr-defined]
        if last.get("tool_calls") or last.get("function_call"):
            return False, None
        return super()._generate_math_reply(messages, sender, config)  # type: ignore[misc, no-any-return]

    def execute_one_python_code(self, pycode: str) -> tuple[str, bool]:
        """Run one block once in the problem's session; (what the model reads, success)."""
        code = print_last_expression(pycode)
        run = self.runner_executor.run_block(code)
        result = run.result
        if result.status is Status.OK:
            output = (result.stdout + result.stderr).strip("\n")
            success = True
            if output == "":
                output, success = (NO_OUTPUT, True) if "print" in code else (NO_PRINT, False)
            else:
                output = block_output(result, max_chars=MAX_OUTPUT_CHARS * 10)
        else:
            output = "Error: " + block_output(result, setup=run.setup, max_chars=MAX_OUTPUT_CHARS * 10)
            success = False
        if len(output) > MAX_OUTPUT_CHARS:
            return TOO_LONG, False
        return output, success

    def _reset(self) -> None:
        super()._reset()  # type: ignore[misc]  # MathUserProxyAgent's, after this in the MRO
        self.runner_executor.restart()

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.runner_executor.restart()


def print_last_expression(code: str) -> str:
    """MathChat's rule: a block without `print(` prints its last line when that is an
    expression. Code that does not parse is left for the sandbox to report."""
    if "print(" in code:
        return code
    return wrap_last_expression(code, "print")
