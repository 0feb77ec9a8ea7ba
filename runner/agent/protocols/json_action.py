"""One JSON object per reply: `{"thought": ..., "action": {"function": NAME, "arguments": {...}}}`.

The run ends with the pseudo-function `finish_conversation` and its argument
`final_answer`. Parsing is forgiving (see `runner.agent.parsing`): prose and fences around
the object, repaired near-JSON, near-miss keys. When a reply holds several objects, only
the first action runs and the model is told the rest was ignored; a final answer that
comes after an action in the same reply is never accepted, because the model wrote it
before seeing the action's result.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..actions import AnswerAction, CallAction, ParsedReply, ReplyProblem
from ..llm import ChatReply
from ..parsing import json_objects, read_action
from .base import ReplyProtocol, functions_section

if TYPE_CHECKING:
    from ...functions import FunctionSet

FINISH = "finish_conversation"
# What models call it when they misremember the name (unless the set has such a function).
_FINISH_ALIASES = frozenset({"finish", "final_answer", "finish_task", "submit_final_answer"})
_ANSWER_ARGUMENT = "final_answer"


class JsonProtocol(ReplyProtocol):
    name = "json"

    def system_prompt(self, functions: FunctionSet) -> str:
        return ("You are a careful assistant that solves the user's task step by step by calling "
                "functions. " + self.template(functions) + "\nAfter each reply you receive the "
                "result of the action. Never write a result yourself, and never finish before you "
                "have seen the results you need.\n\n" + functions_section(functions))

    def template(self, functions: FunctionSet) -> str:
        return ("Reply with exactly one JSON object and nothing else:\n"
                '{"thought": "<your reasoning>", "action": {"function": "<function name>", '
                '"arguments": {"<argument>": <value>}}}\n'
                "When you know the answer, finish with:\n"
                '{"thought": "<your reasoning>", "action": {"function": "finish_conversation", '
                '"arguments": {"final_answer": "<the answer>"}}}')

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        objects = json_objects(reply.content)
        if not objects:
            return ParsedReply(problems=(ReplyProblem(
                message="the reply holds no JSON object" if reply.content.strip()
                else "the reply is empty"),))
        chosen = None
        for index, found in enumerate(objects):
            read = read_action(found.value)
            if read.kind != "none":
                chosen = index
                break
        if chosen is None:
            return ParsedReply(problems=(ReplyProblem(
                message="no JSON object in the reply has an `action` with a `function`",
                details={"objects": len(objects)}),))
        notes = list(read.notes)
        others = [read_action(found.value) for i, found in enumerate(objects) if i != chosen]
        if others:
            notes.append(_ignored_note(len(objects), others, read.kind))
        if read.kind == "ambiguous":
            return ParsedReply(problems=(ReplyProblem(message=read.problem or "ambiguous action"),),
                               notes=tuple(notes))
        if read.kind == "answer":
            return ParsedReply(actions=(AnswerAction(answer=read.answer or ""),), notes=tuple(notes))
        assert read.function is not None
        if read.function == FINISH or (read.function in _FINISH_ALIASES and read.function not in functions):
            answer = _final_answer(read.arguments)
            if answer is None:
                return ParsedReply(problems=(ReplyProblem(
                    message=f"{FINISH} needs the argument {_ANSWER_ARGUMENT} (the answer, as a "
                            "string)", details={"arguments": read.arguments}),),
                    notes=tuple(notes))
            return ParsedReply(actions=(AnswerAction(answer=answer),), notes=tuple(notes))
        return ParsedReply(actions=(CallAction(function=read.function, arguments=read.arguments),),
                           notes=tuple(notes))


def _final_answer(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        return arguments.strip() or None
    if not isinstance(arguments, dict):
        return None
    if _ANSWER_ARGUMENT in arguments:
        value = arguments[_ANSWER_ARGUMENT]
    elif len(arguments) == 1:  # {"answer": ...}: one argument, whatever its name
        value = next(iter(arguments.values()))
    else:
        return None
    if value is None:
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text.strip() or None


def _ignored_note(total: int, others: list[Any], kind: str) -> str:
    note = (f"your reply had {total} JSON objects; only the first action was taken and the other "
            f"{total - 1} were ignored. Reply with one object, then wait for its result")
    finishes = any(o.kind == "answer" or (o.kind == "call" and o.function == FINISH) for o in others)
    if finishes and kind != "answer":
        note += ("; the final answer you wrote after the action was ignored, because it came "
                 "before you saw the action's result")
    return note
