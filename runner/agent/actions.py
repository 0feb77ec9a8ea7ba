"""What a model's reply asks for, once a protocol has parsed it.

A reply becomes a `ParsedReply`: the actions to carry out in order (call a function, run a
code block, give the final answer, or end the conversation without one), the problems that
made (part of) it unusable, and notes for the model about what was ignored. These are plain frozen data: the loop runs
them, the feedback module words them, and the log stores them as JSON.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CallAction(_Frozen):
    """Call a function of the set. `arguments` is what the model gave (a mapping, or JSON text
    that could not be read as an object: validation then says what is wrong)."""

    kind: Literal["call"] = "call"
    function: str
    arguments: Any = Field(default_factory=dict)
    call_id: str | None = None  # the native tool call's id (tools protocol)


class CodeAction(_Frozen):
    """Run a code block in the conversation's sandbox session."""

    kind: Literal["code"] = "code"
    code: str
    language: str = "python"


class AnswerAction(_Frozen):
    """The model's final answer: the run ends `answered`."""

    kind: Literal["answer"] = "answer"
    answer: str


class StopAction(_Frozen):
    """The model ended the conversation without an answer (MathChat's TERMINATE): the run
    ends `terminated`."""

    kind: Literal["stop"] = "stop"
    word: str


Action = Annotated[CallAction | CodeAction | AnswerAction | StopAction, Field(discriminator="kind")]


class ReplyProblem(_Frozen):
    """Why a reply (or one tool call in it) cannot be carried out: a MALFORMED_RESPONSE."""

    message: str
    details: dict[str, Any] = Field(default_factory=dict)
    call_id: str | None = None  # set when the problem is one native tool call's


class ParsedReply(_Frozen):
    """Actions in the order the reply gave them, the problems, and notes about ignored parts."""

    actions: tuple[Action, ...] = ()
    problems: tuple[ReplyProblem, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def answer(self) -> str | None:
        """The final answer, when the reply is nothing but one."""
        if len(self.actions) == 1 and isinstance(self.actions[0], AnswerAction) and not self.problems:
            return self.actions[0].answer
        return None

    @property
    def stop(self) -> bool:
        """Whether the reply ends the conversation without an answer (nothing else in it)."""
        return len(self.actions) == 1 and isinstance(self.actions[0], StopAction) \
            and not self.problems
