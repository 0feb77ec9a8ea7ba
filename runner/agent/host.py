"""Functions the agent loop carries out on the host instead of in the sandbox.

Some tools are not code for the sandbox but requests to the program that drives the
agent: the AgentOptimizer's `add_function`, `revise_function` and `remove_function` change
a function list. Such a tool is still a `FunctionSpec` of the agent's set (so every
protocol offers it, reads calls of it and reminds the model of its schema), and a
`HostFunction` handles its calls: `Agent(..., handlers={"add_function": handler})`.

A handler gets the call as the model made it (`HostCall`: its arguments, the meta that
executions it causes should carry, and the list their ids go into, so the turn names
them) and answers with a `HostOutcome`: the text for the model, or the problem (a
`Feedback` of `runner.agent.feedback`, rendered like any other), and, if the call ends the
conversation, the run's final answer. Everything else (repeated failing calls, logging,
the feedback turn) is the loop's, as for sandboxed calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .feedback import Feedback

if TYPE_CHECKING:
    from ..sandbox import Sandbox


@dataclass(frozen=True)
class HostCall:
    """One call of a host function, as the model made it."""

    function: str
    arguments: Any  # a mapping, or the text that could not be read as one
    sandbox: Sandbox  # for anything the handler runs (smoke tests): logged like the turn's
    meta: dict[str, Any]  # the agent run, turn and action: give it to executions it causes
    execution_ids: list[str]  # append the id of each execution it causes, before it runs
    template: str  # the protocol's reply template, for reminders
    call_id: str | None = None


@dataclass(frozen=True)
class HostOutcome:
    """What came of a host call: `text` when it worked, `problem` when it did not; `finish`
    ends the run `answered` with this as its final answer."""

    text: str = ""
    problem: Feedback | None = None
    finish: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.problem is None


HostFunction = Callable[[HostCall], HostOutcome]
