"""`RunnerCodeExecutor`: AG2's `CodeExecutor` protocol on a runner session.

    from runner.integrations.ag2 import RunnerCodeExecutor
    executor = RunnerCodeExecutor(timeout=30)          # or RunnerCodeExecutor(sandbox=sb)
    agent = ConversableAgent("runner", llm_config=False,
                             code_execution_config={"executor": executor})

The protocol is the one `autogen.coding.base.CodeExecutor` declares (AG2 0.9 to 0.14:
`code_extractor`, `execute_code_blocks`, `restart`). Python blocks run in one runner
session, so variables, imports and functions carry from block to block and from reply to
reply; `restart` ends it and the next block starts a fresh one. The blocks of one call run
in order and stop at the first that fails, as AG2's own executors do. A block in another
language is not run: it gets exit code 1 and "unknown language ...", which tells the model
to write Python. A block that runs out of time gets exit code 124 and "Timeout" in the
output (AG2's convention), and never an exception: the agent's loop goes on.

A conversation of its own: AG2 does not tell a code executor that a chat began, so two
`initiate_chat` calls of one agent would share the session (the second reading the
first's variables). `session_per_chat(agent)` registers AG2's own hook
(`process_all_messages_before_reply`) that starts a fresh session whenever the agent
replies in a chat that is not the one before (a chat started with `clear_history`, AG2's
default), so an app that reuses an agent for several users never shares their state.

Files: with `work_dir=`, the directory's files are in the session's working directory for
the blocks, as with AG2's own executors' `work_dir`, and what a block saves there (a
`plt.show()` figure too, as figure-N.png) is written back into it and listed in the
result's `output_files`; the model reads each file's name, size and type. Without it,
saved files go to a temporary directory (`executor.work_dir`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from autogen.coding.base import CodeBlock, CodeResult
from autogen.coding.markdown_code_extractor import MarkdownCodeExtractor
from pydantic import Field

from ...errors import ConfigurationError
from ..common import (
    BlockOutputs,
    BlockRun,
    SessionExecutor,
)

INTEGRATION = "ag2"


class RunnerCodeResult(CodeResult):  # type: ignore[misc]  # AG2 ships no type information
    """AG2's `CodeResult`, with the files the blocks saved (as AG2's IPython executor
    reports them) and the ids of the executions in runner's log."""

    output_files: list[str] = Field(default_factory=list,
                                    description="The files the blocks saved, as written to work_dir.")
    execution_ids: list[str] = Field(default_factory=list,
                                     description="The runner executions of these blocks, in order.")


class RunnerCodeExecutor(SessionExecutor):
    """Runs AG2's code blocks in runner's sandbox; see the module docstring and
    `SessionExecutor` for the arguments (`close` ends the session)."""

    integration = INTEGRATION
    _extractor = MarkdownCodeExtractor()  # stateless: one for every executor

    # -- AG2's protocol -------------------------------------------------------------------------

    @property
    def code_extractor(self) -> MarkdownCodeExtractor:
        """Markdown fences, as AG2's own executors read them."""
        return self._extractor

    def execute_code_blocks(self, code_blocks: list[CodeBlock]) -> RunnerCodeResult:
        """Run the blocks in order in the session; stop at the first that fails."""
        done = BlockOutputs(self.max_output_chars)
        for block in code_blocks:
            code = self._blocks.get().python_for(block.language, block.code)
            if code is None:
                done.refuse(block.language)
                break
            if not done.add(self.run_block(code)):
                break
        return RunnerCodeResult(exit_code=done.exit_code, output=done.output,
                                output_files=[str(path) for path in done.saved],
                                execution_ids=done.ids)

    def restart(self) -> None:
        """End the session: the next block starts in a fresh one."""
        self._blocks.restart()

    # -- runner's side ------------------------------------------------------------------------------

    def run_block(self, code: str, *, meta: Mapping[str, Any] | None = None) -> BlockRun:
        """Run one Python block in the session; its runner result (for MathChat and tools)."""
        return self._blocks.get().run(code, meta={**self._meta, **(meta or {})})

    def close(self) -> None:
        """End the session, and close the sandbox if this executor opened it."""
        owned = self._blocks.close()
        if owned is not None:
            owned.close()

    def __enter__(self) -> RunnerCodeExecutor:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def session_per_chat(agent: Any) -> Any:
    """Make each chat of `agent` (an AG2 agent whose executor is a RunnerCodeExecutor)
    start its blocks in a fresh session; `agent` back. A chat is told by its messages:
    within one, each reply sees more messages than the last, under the same first one
    (AG2 hands the hook copies, so they are compared by content)."""
    executor = getattr(agent, "code_executor", None)
    if not isinstance(executor, RunnerCodeExecutor):
        raise ConfigurationError(
            f"{type(agent).__name__} {getattr(agent, 'name', '')!r} has no RunnerCodeExecutor",
            fix="create it with code_execution_config={'executor': RunnerCodeExecutor(...)}")
    seen: dict[str, Any] = {"first": None, "count": 0}

    def new_chat_new_session(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        first = _said(messages[0]) if messages else None
        if seen["count"] and (first != seen["first"] or len(messages) <= seen["count"]):
            executor.restart()
        seen["first"], seen["count"] = first, len(messages)
        return messages

    agent.register_hook("process_all_messages_before_reply", new_chat_new_session)
    return agent


def _said(message: Any) -> tuple[Any, Any, Any]:
    return (message.get("role"), message.get("name"), message.get("content")) \
        if isinstance(message, dict) else (None, None, message)
