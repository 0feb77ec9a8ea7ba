"""Fenced code blocks, MathChat style: every ```python block of a reply runs, in order, in
one sandbox session per conversation, so variables, imports and functions carry across
blocks and replies. The functions of the set are defined in that session, so a block can
call them like any Python function; a ```json block holding one call
(`{"function": NAME, "arguments": {...}}`) runs that function on its own, with its
arguments checked first. Blocks and calls may be mixed in one reply.

The final answer is what the answer rule finds in a reply without code: by default the
content of the last `\\boxed{...}`. A boxed answer in a reply that also has code is not
accepted: the model wrote it before seeing what its code printed.

Options (all off by default; MathChat turns them on, see `runner.math.mathchat`):
`require_output` and `reason_after_failures` (see `ReplyProtocol`); `stop_word`: a reply
without code and without an answer that contains this word (`TERMINATE`) ends the run with
no answer; `native_tools`: the set's functions are also offered as native tool calls, whose
results come back as `tool` messages (dropped if the server refuses them);
`output_answer`: the answer is the last line printed by the reply's last block, when it
ran (Program of Thoughts: one program whose output is the answer), or the last value when
it spans lines (a numpy 2-D array prints a row a line: `last_printed_value`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...types import Status
from ..actions import (
    Action,
    AnswerAction,
    CallAction,
    CodeAction,
    ParsedReply,
    ReplyProblem,
    StopAction,
)
from ..feedback import ActionReport
from ..llm import ChatReply, Message
from ..parsing import fenced_blocks, json_objects, last_boxed, read_action
from .base import ReplyProtocol, functions_section
from .tools import tool_call_actions, tool_messages

if TYPE_CHECKING:
    from ...functions import FunctionSet
    from ...types import ExecutionResult

PYTHON = frozenset({"python", "py", "python3", "py3", "ipython", "sympy", ""})
JSON = frozenset({"json", "json5", "jsonc"})
OUTPUTS = frozenset({"output", "text", "console", "stdout", "result", "plaintext", "txt"})

AnswerRule = Callable[[str], "str | None"]


# A printed value spans at most this many lines (a 2-D array's rows); beyond, the last line.
MAX_VALUE_LINES = 200


def last_printed_value(lines: Sequence[str]) -> str:
    """The last value among printed `lines`: the last line, or the lines of one value that
    Python printed over several, as numpy does a 2-D array (`[[1 2]` then ` [3 4]]`): the
    lines back to where its brackets open. When they never balance, the last line."""
    depth = 0
    for index in range(len(lines) - 1, max(-1, len(lines) - 1 - MAX_VALUE_LINES), -1):
        depth += lines[index].count("]") - lines[index].count("[")
        if depth <= 0:
            return "\n".join(lines[index:])
    return lines[-1]


class CodeProtocol(ReplyProtocol):
    name = "code"

    def __init__(self, answer_rule: AnswerRule = last_boxed, *,
                 answer_format: str = "\\boxed{<answer>}", require_output: bool = False,
                 reason_after_failures: int | None = None, stop_word: str | None = None,
                 native_tools: bool = False, output_answer: bool = False) -> None:
        if reason_after_failures is not None and reason_after_failures < 1:
            raise ValueError("reason_after_failures must be at least 1")
        self.answer_rule = answer_rule
        self.answer_format = answer_format
        self.require_output = require_output
        self.reason_after_failures = reason_after_failures
        self.stop_word = stop_word
        self._stop = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(stop_word)}(?![A-Za-z0-9_])") \
            if stop_word else None
        self.native_tools = native_tools
        self.tools_optional = native_tools  # blocks and ```json calls work without them
        self.output_answer = output_answer

    def tools(self, functions: FunctionSet) -> list[dict[str, Any]] | None:
        if self.native_tools and len(functions):
            return functions.to_openai_tools()
        return None

    def feedback_messages(self, reply: ChatReply, observations: Sequence[ActionReport],
                          notes: Sequence[str]) -> list[Message]:
        if reply.tool_calls:  # each native call is answered by its own `tool` message
            return tool_messages(reply, observations, notes)
        return super().feedback_messages(reply, observations, notes)

    def answer_from_output(self, results: Sequence[ExecutionResult]) -> str | None:
        if not self.output_answer or not results or results[-1].status is not Status.OK:
            return None
        lines = [line.strip() for line in results[-1].stdout.splitlines() if line.strip()]
        if not lines:
            return None
        boxed = self.answer_rule(lines[-1])
        return (boxed if boxed is not None else last_printed_value(lines)).strip() or None

    def system_prompt(self, functions: FunctionSet) -> str:
        prompt = ("You are a careful assistant that solves the user's task with Python. "
                  + self.template(functions)
                  + "\nThe blocks run in one Python session, so variables, imports and "
                  "definitions carry over between blocks and replies. Use print() to see values: "
                  "only printed output comes back. Never write a block's output yourself.")
        if len(functions):
            prompt += ("\n\nThese functions are already defined in the session; call them in "
                       "your code. You can also call one on its own with a ```json block "
                       'holding {"function": "<name>", "arguments": {...}}.\n'
                       + functions_section(functions))
        return prompt

    def template(self, functions: FunctionSet) -> str:
        return ("Put code in ```python blocks. When you have the final answer, reply with it as "
                f"{self.answer_format} and no code block.")

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        actions: list[Action] = []
        notes: list[str] = []
        problems: list[ReplyProblem] = []
        if reply.tool_calls:
            calls, problems = tool_call_actions(reply)
            actions += calls
        skipped: list[str] = []
        invented_output = False
        for block in fenced_blocks(reply.content):
            if block.language in JSON or (block.language == "" and block.body.lstrip().startswith("{")):
                objects = json_objects(block.body)
                read = read_action(objects[0].value) if objects else None
                if read is not None and read.kind == "call" and read.function:
                    actions.append(CallAction(function=read.function, arguments=read.arguments))
                elif block.language in JSON:
                    skipped.append("json")
                else:
                    actions.append(CodeAction(code=block.body))
            elif block.language in PYTHON:
                if block.body.strip():
                    actions.append(CodeAction(code=block.body))
            elif block.language in OUTPUTS:
                invented_output = True
            else:
                skipped.append(block.language)
        if invented_output:
            notes.append("the output block you wrote was ignored: real output comes from running "
                         "your code")
        if skipped:
            kinds = ", ".join(f"```{kind}" for kind in dict.fromkeys(skipped))
            notes.append(f"only ```python blocks (and ```json function calls) run; your {kinds} "
                         "block was not run")
        answer = self.answer_rule(reply.content)
        stop = self._stop.search(reply.content) if self._stop is not None else None
        if actions or problems:
            if answer is not None:
                notes.append(f"the answer {answer!r} was not accepted, because it came with code "
                             "whose results you had not seen; check them, then reply with the "
                             "answer alone")
            elif stop is not None:
                notes.append(f"{self.stop_word} was ignored, because it came with code whose "
                             "results you had not seen")
            return ParsedReply(actions=tuple(actions), problems=tuple(problems),
                               notes=tuple(notes))
        if answer is not None and answer.strip():
            return ParsedReply(actions=(AnswerAction(answer=answer.strip()),), notes=tuple(notes))
        if stop is not None and self.stop_word is not None:
            return ParsedReply(actions=(StopAction(word=self.stop_word),), notes=tuple(notes))
        message = ("the reply has no ```python block and no final answer in "
                   f"{self.answer_format}")
        return ParsedReply(problems=(ReplyProblem(message=message),), notes=tuple(notes))
