"""Fenced code blocks, MathChat style: every ```python block of a reply runs, in order, in
one sandbox session per conversation, so variables, imports and functions carry across
blocks and replies. The functions of the set are defined in that session, so a block can
call them like any Python function; a ```json block holding one call
(`{"function": NAME, "arguments": {...}}`) runs that function on its own, with its
arguments checked first. Blocks and calls may be mixed in one reply.

The final answer is what the answer rule finds in a reply without code: by default the
content of the last `\\boxed{...}`. A boxed answer in a reply that also has code is not
accepted: the model wrote it before seeing what its code printed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..actions import Action, AnswerAction, CallAction, CodeAction, ParsedReply, ReplyProblem
from ..llm import ChatReply
from ..parsing import fenced_blocks, json_objects, last_boxed, read_action
from .base import ReplyProtocol, functions_section

if TYPE_CHECKING:
    from ...functions import FunctionSet

PYTHON = frozenset({"python", "py", "python3", "py3", "ipython", "sympy", ""})
JSON = frozenset({"json", "json5", "jsonc"})
OUTPUTS = frozenset({"output", "text", "console", "stdout", "result", "plaintext", "txt"})

AnswerRule = Callable[[str], "str | None"]


class CodeProtocol(ReplyProtocol):
    name = "code"
    uses_session = True

    def __init__(self, answer_rule: AnswerRule = last_boxed, *,
                 answer_format: str = "\\boxed{<answer>}") -> None:
        self.answer_rule = answer_rule
        self.answer_format = answer_format

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
        if actions:
            if answer is not None:
                notes.append(f"the answer {answer!r} was not accepted, because it came with code "
                             "whose results you had not seen; check them, then reply with the "
                             "answer alone")
            return ParsedReply(actions=tuple(actions), notes=tuple(notes))
        if answer is not None and answer.strip():
            return ParsedReply(actions=(AnswerAction(answer=answer.strip()),), notes=tuple(notes))
        message = ("the reply has no ```python block and no final answer in "
                   f"{self.answer_format}")
        return ParsedReply(problems=(ReplyProblem(message=message),), notes=tuple(notes))
