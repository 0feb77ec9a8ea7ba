"""runner in AutoGen 0.7 (`pip install runner-sandbox[autogen]`): an `autogen_core` `CodeExecutor`.

    from autogen_agentchat.agents import CodeExecutorAgent
    from runner.integrations.autogen import RunnerCodeExecutor

    executor = RunnerCodeExecutor(timeout=30)      # or RunnerCodeExecutor(sandbox=sb)
    agent = CodeExecutorAgent("runner", code_executor=executor)   # alone, or in a team

Python blocks run in one runner session (state carries from message to message, like
AutoGen's Jupyter executors); `restart()` (what an agent's reset calls) starts a fresh
one. The blocks of a call run in order and stop at the first that fails. The conventions
are those of AutoGen's local command-line executor, and every outcome is a result, never
an exception that ends the team's run: a block that runs out of time gets exit code 124
and "Timeout"; one in another language exit code 1 and "unknown language ..."; a cancelled
`CancellationToken` returns at once with exit code 125 and "Cancelled", and the block is
stopped then (runner.cancellation: its worker is killed, the run is logged as cancelled),
so the next block starts in a fresh session.

Files: with `work_dir=`, the directory's files are in the session's working directory for
the blocks (as with AutoGen's own executors' `work_dir`), and what a block saves there (a
`plt.show()` figure too, as figure-N.png) is written back into it and listed in the
result's `output_files`; the agent's message names each file, its size and type.
Without it, saved files go to a temporary directory (`executor.work_dir`).

Each block runs in a worker thread (`asyncio.to_thread`), so the event loop and the
team's other agents go on meanwhile. Every block's log row names the integration
(`{"integration": "autogen"}`).

A conversation of its own: AutoGen's `CodeExecutorAgent.on_reset` (what `team.reset()`
calls) leaves its executor as it is, so the next task would read the previous one's
variables. `RunnerCodeExecutorAgent` is that agent with a reset that restarts its
executor's session (AutoGen's own hook), so an app that reuses a team for several users
never shares their state.

The executor is an AutoGen component, as AutoGen's own executors are: `dump_component()`
gives its declarative form (the tier, the blocks' limits, packages, the function set's
data, `work_dir`, the output cap) and `load_component` builds it again, with a sandbox
of its own (a sandbox passed in is described by its tier and limits: a live object has
no declarative form), so agents and teams that use it dump and load (AutoGen Studio).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any, ClassVar, Self

from autogen_agentchat.agents import CodeExecutorAgent
from autogen_core import CancellationToken, Component
from autogen_core.code_executor import (
    CodeBlock,
    CodeExecutor,
    CodeResult,
    FunctionWithRequirements,
    FunctionWithRequirementsStr,
)
from autogen_core.code_executor._func_with_reqs import build_python_functions_file, to_stub
from pydantic import BaseModel, ConfigDict, Field

from ..backends.base import DEFAULT_BACKEND
from ..cancellation import Cancellation
from ..errors import ConfigurationError
from ..functions import FunctionSet
from ..sandbox import Sandbox
from ..types import Limits
from .common import (
    CANCELLED_EXIT_CODE,
    CANCELLED_MARK,
    DEFAULT_MAX_OUTPUT_CHARS,
    BlockOutputs,
    SessionExecutor,
)

__all__ = ["RunnerCodeExecutor", "RunnerCodeExecutorAgent", "RunnerCodeExecutorConfig",
           "RunnerCodeResult", "module_code"]

AutoGenFunction = FunctionWithRequirements[Any, Any] | Callable[..., Any] | FunctionWithRequirementsStr
# The prompt AutoGen's command-line executors give for their functions (its wording, so a
# model prompted for them reads the same), with the module's name and the functions' stubs.
# (autogen_ext's copy cannot be imported without its docker extra.)
FUNCTION_PROMPT_TEMPLATE = (
    "You have access to the following user defined functions. They can be accessed from the "
    "module called `$module_name` by their function names.\n\n"
    "For example, if there was a function called `foo` you could import it by writing "
    "`from $module_name import foo`\n\n$functions")


def module_code(name: str, source: str) -> str:
    """Session code that makes `source` importable as module `name` (AutoGen's executors
    write it to `name`.py beside the blocks; a session holds it in memory)."""
    return (f"import sys as _runner_sys, types as _runner_types\n"
            f"_runner_module = _runner_types.ModuleType({name!r})\n"
            f"_runner_module.__file__ = {name + '.py'!r}\n"
            f"exec(compile({source!r}, {name + '.py'!r}, 'exec'), _runner_module.__dict__)\n"
            f"_runner_sys.modules[{name!r}] = _runner_module\n"
            f"del _runner_sys, _runner_types, _runner_module\n")

INTEGRATION = "autogen"


@dataclass
class RunnerCodeResult(CodeResult):
    """AutoGen's `CodeResult`, with the files the blocks saved (`output_files`, as its
    Jupyter executors report them) and the ids of the executions in runner's log."""

    output_files: list[Path] = field(default_factory=list)
    execution_ids: list[str] = field(default_factory=list)


class RunnerCodeExecutorConfig(BaseModel):
    """The executor's declarative form (`dump_component` / `load_component`)."""

    model_config = ConfigDict(extra="forbid")

    backend: str = DEFAULT_BACKEND
    limits: Limits = Field(default_factory=Limits)
    packages: list[str] = Field(default_factory=list)
    functions: dict[str, Any] | None = None  # a FunctionSet's data, as its file holds it
    work_dir: str | None = None
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    backend_options: dict[str, Any] = Field(default_factory=dict)
    functions_module: str = "functions"
    functions_source: str | None = None  # AutoGen's functions, as their module's source


class RunnerCodeExecutor(SessionExecutor, CodeExecutor, Component[RunnerCodeExecutorConfig]):
    """Runs AutoGen's code blocks in runner's sandbox; see the module docstring and
    `SessionExecutor` for the arguments (`stop` ends the session)."""

    integration = INTEGRATION
    component_config_schema = RunnerCodeExecutorConfig
    component_provider_override = "runner.integrations.autogen.RunnerCodeExecutor"
    FUNCTION_PROMPT_TEMPLATE: ClassVar[str] = FUNCTION_PROMPT_TEMPLATE

    def __init__(self, sandbox: Sandbox | None = None, *,
                 functions: FunctionSet | Sequence[AutoGenFunction] | None = None,
                 functions_module: str = "functions", packages: Iterable[str] = (),
                 **options: Any) -> None:
        """`functions`: a runner `FunctionSet` (defined in the session, calls validated),
        or AutoGen's own (`FunctionWithRequirements`, `@with_requirements` functions, plain
        callables, `FunctionWithRequirements.from_str`), which the blocks import from
        `functions_module` as with AutoGen's executors, their packages installed for the
        sandbox; see `SessionExecutor` for the rest."""
        theirs: list[AutoGenFunction] = []
        if functions is not None and not isinstance(functions, FunctionSet):
            theirs, functions = list(functions), None
        if not functions_module.isidentifier():
            raise ConfigurationError(f"functions_module {functions_module!r} is not a module name",
                                     fix="use a Python identifier, such as 'functions'")
        extra = [p for f in theirs if isinstance(f, (FunctionWithRequirements, FunctionWithRequirementsStr))
                 for p in f.python_packages]
        super().__init__(sandbox, functions=functions, packages=[*packages, *extra], **options)
        self._autogen_functions = theirs
        self._functions_module = functions_module
        self._functions_source = build_python_functions_file(theirs) if theirs else None
        self._define_module()

    def _define_module(self) -> None:
        if self._functions_source is None:
            return
        module = module_code(self._functions_module, self._functions_source)
        session_functions = self._blocks.setup_code
        self._blocks.setup_code = lambda: session_functions() + module

    def format_functions_for_prompt(self, prompt_template: str = FUNCTION_PROMPT_TEMPLATE) -> str:
        """AutoGen's prompt naming the functions the blocks can import (as its executors)."""
        return Template(prompt_template).substitute(
            module_name=self._functions_module,
            functions="\n\n".join(to_stub(f.func if isinstance(f, FunctionWithRequirements) else f)
                                   for f in self._autogen_functions))

    @property
    def functions_module(self) -> str:
        return self._functions_module

    def _to_config(self) -> RunnerCodeExecutorConfig:
        blocks = self._blocks
        functions = blocks.functions
        return RunnerCodeExecutorConfig(
            backend=blocks.backend_name, limits=self.limits, packages=list(blocks.packages),
            functions=functions.to_dict() if functions is not None and len(functions) else None,
            work_dir=str(blocks.work_dir.given) if blocks.work_dir.given is not None else None,
            max_output_chars=self.max_output_chars, backend_options=blocks.backend_options,
            functions_module=self._functions_module, functions_source=self._functions_source)

    @classmethod
    def _from_config(cls, config: RunnerCodeExecutorConfig) -> Self:
        functions = FunctionSet.from_data(config.functions, log_store=False) \
            if config.functions is not None else None
        made = cls(backend=config.backend, limits=config.limits, packages=config.packages,
                   functions=functions, work_dir=config.work_dir,
                   max_output_chars=config.max_output_chars, functions_module=config.functions_module,
                   **config.backend_options)
        made._functions_source = config.functions_source  # (their packages are in `packages`)
        made._define_module()
        return made

    async def execute_code_blocks(self, code_blocks: list[CodeBlock],
                                  cancellation_token: CancellationToken) -> RunnerCodeResult:
        """Run the blocks in order in the session; stop at the first that fails."""
        done = BlockOutputs(self.max_output_chars)
        blocks = self._blocks.get()
        for block in code_blocks:
            code = blocks.python_for(block.language, block.code)
            if code is None:
                done.refuse(block.language)
                break
            cancel = Cancellation()
            task = asyncio.ensure_future(asyncio.to_thread(blocks.run, code, meta=self._meta,
                                                           cancel=cancel))
            cancellation_token.link_future(task)
            try:
                run = await task
            except asyncio.CancelledError:
                cancel.cancel()  # the run stops now, whoever cancelled
                blocks.abandon()
                if not cancellation_token.is_cancelled():
                    raise  # the caller's own task was cancelled: let it end
                done.stop(f"{CANCELLED_MARK}: the run was cancelled; the session's state is "
                          "gone, the next block starts in a fresh session.", CANCELLED_EXIT_CODE)
                break
            if not done.add(run):
                break
        return RunnerCodeResult(exit_code=done.exit_code, output=done.output,
                                output_files=done.saved, execution_ids=done.ids)

    async def start(self) -> None:
        """Nothing to start: the session opens with the first block."""

    async def stop(self) -> None:
        """End the session, and close the sandbox if this executor opened it."""
        owned = self._blocks.close()
        if owned is not None:
            await asyncio.to_thread(owned.close)

    async def restart(self) -> None:
        """End the session: the next block starts in a fresh one."""
        self._blocks.restart()


class RunnerCodeExecutorAgent(CodeExecutorAgent):
    """AutoGen's `CodeExecutorAgent`, whose reset (a team's `reset()`) also restarts its
    executor, so the next task starts in a fresh session (AutoGen's own reset leaves the
    executor as it is). Everything else is AutoGen's agent."""

    component_provider_override = "runner.integrations.autogen.RunnerCodeExecutorAgent"

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        await super().on_reset(cancellation_token)
        await self._code_executor.restart()
