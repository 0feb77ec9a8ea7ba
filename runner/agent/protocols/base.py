"""What every reply protocol provides: a system prompt, a parser and a feedback hook.

A protocol is the contract between the orchestrator and the model about what a reply
looks like: native tool calls, one JSON object, labelled text or fenced code. It says
how to ask (`system_prompt`, `tools`), how to read a reply (`parse`, into the actions of
`runner.agent.actions`), what a valid reply looks like (`template`, quoted in every
reminder), and how the texts that `runner.agent.feedback` wrote are packaged as the next
messages (`feedback_messages`). It holds no state of a conversation, so one instance can
serve many runs.

A few settings of a protocol steer the loop (defaults: off): `require_output` (a code
block that prints nothing is a NO_OUTPUT problem), `reason_after_failures` (after that
many failing blocks in a row the model is told to reason the step out instead),
`tools_optional` (the native `tools` are a convenience: a server that refuses them is
asked again without) and `answer_from_output` (the answer can be what the code printed).

A protocol that answers code blocks its own way, as MathChat's user proxy agent does,
returns `ConversationRules` from `conversation_rules()`: one object per conversation (it
may keep state, such as the last reply and a count of invalid ones) that says what runs
for each block, what the model reads of its result, and the message that answers a
reply. The loop then leaves its own feedback for code blocks aside (no NO_OUTPUT, no
CODE_KEEPS_FAILING, no giving up on a repeated block).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from .. import feedback
from ..actions import CodeAction, ParsedReply
from ..feedback import ActionReport
from ..llm import ChatReply, Message

if TYPE_CHECKING:
    from ...functions import FunctionSet
    from ...types import ExecutionResult


class ReplyProtocol(ABC):
    """Base of the four protocols; see the module docstring."""

    name: ClassVar[str]
    #: a code block that runs but prints nothing is a NO_OUTPUT problem
    require_output: bool = False
    #: after this many failing code blocks in a row, tell the model to reason instead
    reason_after_failures: int | None = None
    #: the request's `tools` may be dropped when the server refuses native tool calls
    tools_optional: bool = False
    #: a reply cut off at the token limit is read like any other (not refused as
    #: TRUNCATED_REPLY): the protocol's own rules decide what of it counts
    reads_cut_replies: bool = False

    @abstractmethod
    def system_prompt(self, functions: FunctionSet) -> str:
        """The system message that explains the task format and the functions."""

    @abstractmethod
    def template(self, functions: FunctionSet) -> str:
        """What a valid reply looks like, in a few lines (quoted in reminders)."""

    @abstractmethod
    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        """The actions a reply asks for, its problems and notes about ignored parts."""

    def tools(self, functions: FunctionSet) -> list[dict[str, Any]] | None:
        """The `tools` parameter of the request (only native tool calling has one)."""
        return None

    def task_message(self, task: str) -> str:
        return task

    def answer_from_output(self, results: Sequence[ExecutionResult]) -> str | None:
        """The final answer read from what a reply's code blocks printed, for protocols
        whose program's output is the answer; None (the default) to go on."""
        return None

    def feedback_messages(self, reply: ChatReply, observations: Sequence[ActionReport],
                          notes: Sequence[str]) -> list[Message]:
        """The messages that answer `reply`: by default one user message with every
        observation, then the notes."""
        body = feedback.join([*(o.text for o in observations), feedback.notes_text(notes)])
        return [{"role": "user", "content": body}] if body else []

    def conversation_rules(self) -> ConversationRules | None:
        """Rules of its own for code blocks, one object per conversation; None (the
        default) for the loop's own feedback."""
        return None

    def __repr__(self) -> str:
        return f"<protocol {self.name}>"


def functions_section(functions: FunctionSet) -> str:
    if not len(functions):
        return "There are no functions."
    return "The functions:\n" + feedback.functions_reference(functions)


class ConversationRules(ABC):
    """How one conversation answers code blocks, for protocols with rules of their own (see
    the module docstring). The loop calls `code_to_run` and `report` for each block in
    order, then `respond` once for the reply."""

    @abstractmethod
    def code_to_run(self, action: CodeAction) -> str | None:
        """The code to run for a block, or None when it is not run (then `report` gets no
        result and says why)."""

    @abstractmethod
    def report(self, action: CodeAction, result: ExecutionResult | None) -> ActionReport:
        """What the model reads of one block: its output or error, and whether it counts
        as a valid query."""

    @abstractmethod
    def respond(self, reply: ChatReply, observations: Sequence[ActionReport],
                notes: Sequence[str]) -> list[Message]:
        """The messages that answer `reply` (after its blocks ran, or when it had none)."""
