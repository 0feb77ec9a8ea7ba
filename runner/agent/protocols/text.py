"""Labelled text, as ReAct prompts ask for it:

    Thought: ...
    Tool: NAME
    Tool Input: {"argument": value}

or `Thought: ...` / `Final Answer: ...`. The result comes back as `Observation: ...`.

Labels are read case-insensitively, also in Markdown emphasis, and `Action:` / `Action
Input:` count as `Tool:` / `Tool Input:`. The input may span several lines and is
repaired if it is near-JSON. Only the first action of a reply counts: an `Observation:`
the model wrote itself, further tools and a `Final Answer:` after a tool are dropped, and
the model is told so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import feedback
from ..actions import AnswerAction, CallAction, ParsedReply, ReplyProblem
from ..feedback import ActionReport
from ..llm import ChatReply, Message
from ..parsing import Segment, json_objects, label_segments, read_action
from .base import ReplyProtocol, functions_section

if TYPE_CHECKING:
    from ...functions import FunctionSet

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EMPTY_INPUTS = {"", "{}", "none", "null", "n/a", "no input", "-"}


class TextProtocol(ReplyProtocol):
    name = "text"

    def system_prompt(self, functions: FunctionSet) -> str:
        return ("You are a careful assistant that solves the user's task step by step by calling "
                "functions. " + self.template(functions) + "\nAfter a Tool Input, stop: the "
                "orchestrator runs the tool and replies with \"Observation: <result>\". Never "
                "write an Observation yourself.\n\n" + functions_section(functions))

    def template(self, functions: FunctionSet) -> str:
        return ("Reply in this format:\n"
                "Thought: <your reasoning>\n"
                "Tool: <function name>\n"
                "Tool Input: <the arguments as one JSON object>\n"
                "or, when you know the answer:\n"
                "Thought: <your reasoning>\n"
                "Final Answer: <the answer>")

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        segments = label_segments(reply.content)
        first = next((i for i, s in enumerate(segments) if s.label in ("tool", "answer")), None)
        if first is None:
            if any(s.label == "input" for s in segments):
                message = "the reply has a Tool Input but no Tool line naming the function"
            else:
                message = "the reply has neither a Tool: line nor a Final Answer: line"
            return ParsedReply(problems=(ReplyProblem(message=message),))
        segment = segments[first]
        if segment.label == "answer":
            answer = segment.text.strip()
            if not answer:
                return ParsedReply(problems=(ReplyProblem(message="the Final Answer is empty"),))
            return ParsedReply(actions=(AnswerAction(answer=answer),))

        rest = segments[first + 1:]
        tool_input = None
        if rest and rest[0].label == "input":
            tool_input = rest[0].text
            rest = rest[1:]
        notes = _ignored_notes(rest)
        if segment.text.lstrip().startswith("{"):  # Tool: {"function": .., "arguments": ..}
            objects = json_objects(segment.text)
            read = read_action(objects[0].value) if objects else None
            if read is not None and read.kind == "call" and read.function:
                return ParsedReply(actions=(CallAction(function=read.function,
                                                       arguments=read.arguments),), notes=notes)
        match = _NAME.search(segment.text.strip().strip("`*'\"[]"))
        if match is None:
            return ParsedReply(problems=(ReplyProblem(message="the Tool: line names no function",
                                                      details={"tool": segment.text[:200]}),),
                               notes=notes)
        function = match.group(0)
        if tool_input is None or tool_input.strip().strip("`").lower() in _EMPTY_INPUTS:
            arguments: object = {}
        else:
            objects = json_objects(tool_input)
            if not objects:
                return ParsedReply(problems=(ReplyProblem(
                    message=f"the Tool Input of {function} is not a JSON object",
                    details={"tool_input": tool_input[:500]}),), notes=notes)
            arguments = objects[0].value
            if len(objects) > 1:
                notes = (f"the Tool Input had {len(objects)} JSON objects; only the first was used",
                         *notes)
        return ParsedReply(actions=(CallAction(function=function, arguments=arguments),),
                           notes=notes)

    def feedback_messages(self, reply: ChatReply, observations: Sequence[ActionReport],
                          notes: Sequence[str]) -> list[Message]:
        # A tool's result is an Observation; a reply that could not be read is not.
        parts = [o.text if "MALFORMED_RESPONSE" in o.codes else f"Observation: {o.text}"
                 for o in observations]
        body = feedback.join([*parts, feedback.notes_text(notes)])
        return [{"role": "user", "content": body}] if body else []


def _ignored_notes(rest: Sequence[Segment]) -> tuple[str, ...]:
    labels = [segment.label for segment in rest]
    notes = []
    if "observation" in labels:
        notes.append("the Observation you wrote was ignored: observations come from running the "
                     "tool, and the real one is above")
    if "tool" in labels:
        notes.append("only the first Tool of your reply ran; the other tools were ignored. Use one "
                     "Tool per reply and wait for its Observation")
    if "answer" in labels:
        notes.append("the Final Answer after your Tool was ignored, because you wrote it before "
                     "seeing the tool's result")
    return tuple(notes)
