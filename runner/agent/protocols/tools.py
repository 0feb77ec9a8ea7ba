"""Native tool calls: the functions go in the request's `tools`, the model answers with
`tool_calls` (several per reply allowed), each result goes back as a `tool` message, in
order. A reply without tool calls is the final answer, unless it is a call written as
text (`{"name": ..., "arguments": ...}`, as models served without a tool-call parser
write them) naming a function of the set: that call runs, and the model is reminded to use
the interface.

Argument text that is not strict JSON is repaired; a call whose arguments still are no
JSON object, or that names no function, is answered (in its own tool message) with
MALFORMED_RESPONSE, so every call id gets its reply as the API requires.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import feedback
from ..actions import AnswerAction, CallAction, ParsedReply, ReplyProblem
from ..feedback import ActionReport
from ..llm import ChatReply, Message
from ..parsing import json_objects, json_text_problem, load_arguments, read_action
from .base import ReplyProtocol

if TYPE_CHECKING:
    from ...functions import FunctionSet


class ToolsProtocol(ReplyProtocol):
    name = "tools"

    def system_prompt(self, functions: FunctionSet) -> str:
        if not len(functions):
            return ("You are a careful assistant. Answer the user's task. There are no functions "
                    "to call: reply with the final answer as plain text.")
        return ("You are a careful assistant. Solve the user's task using the functions (tools) "
                "you were given: call them with the tool-calling interface, several at once if "
                "they do not depend on each other, and wait for their results. Never invent a "
                "result. When you know the answer, reply with the final answer as plain text, "
                "without calling a function.")

    def template(self, functions: FunctionSet) -> str:
        names = ", ".join(functions.names) or "none"
        return ("call a function through the tool-calling interface with a JSON object of "
                f"arguments (functions: {names}), or reply with the final answer as plain text")

    def tools(self, functions: FunctionSet) -> list[dict[str, Any]] | None:
        return functions.to_openai_tools() or None

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        if not reply.tool_calls:
            written = _written_call(reply.content, functions)
            if written is not None:
                return ParsedReply(actions=(written,), notes=(
                    (f"you wrote the call to {written.function} as text; it ran, but call "
                     "functions through the tool-calling interface"),))
            answer = reply.content.strip()
            if answer:
                return ParsedReply(actions=(AnswerAction(answer=answer),))
            return ParsedReply(problems=(ReplyProblem(
                message="the reply is empty: it has neither a tool call nor an answer"),))
        actions, problems = tool_call_actions(reply)
        return ParsedReply(actions=tuple(actions), problems=tuple(problems))

    def feedback_messages(self, reply: ChatReply, observations: Sequence[ActionReport],
                          notes: Sequence[str]) -> list[Message]:
        return tool_messages(reply, observations, notes)


def tool_call_actions(reply: ChatReply) -> tuple[list[CallAction], list[ReplyProblem]]:
    """The native tool calls of a reply as actions, and the calls that cannot run."""
    actions: list[CallAction] = []
    problems: list[ReplyProblem] = []
    for call in reply.tool_calls:
        if not call.name.strip():
            problems.append(ReplyProblem(message="a tool call names no function",
                                         call_id=call.id))
            continue
        arguments, _ = load_arguments(call.arguments)
        if not isinstance(arguments, dict):
            reason = json_text_problem(call.arguments)
            problems.append(ReplyProblem(
                message=f"the arguments of the call to {call.name} are not a JSON object"
                        + (f" ({reason})" if reason else ""),
                details={"arguments": call.arguments[:500]}, call_id=call.id))
            continue
        actions.append(CallAction(function=call.name.strip(), arguments=arguments,
                                  call_id=call.id))
    return actions, problems


def tool_messages(reply: ChatReply, observations: Sequence[ActionReport],
                  notes: Sequence[str]) -> list[Message]:
    """One `tool` message per native call of `reply` (as the API requires), with the other
    observations and the notes appended to the last of them."""
    by_id = {o.call_id: o for o in observations if o.call_id is not None}
    loose = [o.text for o in observations if o.call_id is None]
    messages: list[Message] = []
    for call in reply.tool_calls:
        observation = by_id.get(call.id)
        text = observation.text if observation is not None else \
            "[not run] the conversation ended before this call ran"
        messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    extra = feedback.join([*loose, feedback.notes_text(notes)])
    if extra and messages:
        # Appended to the last tool message: some chat templates refuse a user message
        # between tool results and the next assistant turn.
        messages[-1]["content"] += "\n\n" + extra
    elif extra:
        messages.append({"role": "user", "content": extra})
    return messages


def _written_call(content: str, functions: FunctionSet) -> CallAction | None:
    """A call the model wrote into its text instead of the tool interface (models served
    without a tool-call parser do this: `<tool_call>{"name": ..., "arguments": ...}`),
    when it names a function of the set; such text is no final answer."""
    if "{" not in content:
        return None
    for found in json_objects(content):
        read = read_action(found.value)
        if (read.kind == "call" and read.function is not None and read.function in functions
                and isinstance(read.arguments, dict)):
            return CallAction(function=read.function, arguments=read.arguments)
    return None
