"""How the optimizer model is asked to reply: the `tools` or `json` protocol, with TERMINATE.

The optimizer's replies are read by the agent's own protocols, native tool calls or one
JSON object per reply (for models served without tool calling), with two differences:
the system prompt explains the optimizer's job, and a reply must be an action or the
word TERMINATE. A reply with the word and no action ends the conversation (`terminated`:
the list needs no change); a reply with neither is a MALFORMED_RESPONSE, as any reply
the protocol cannot use.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..agent.actions import AnswerAction, CallAction, ParsedReply, ReplyProblem, StopAction
from ..agent.llm import ChatReply
from ..agent.protocols import JsonProtocol, ReplyProtocol, ToolsProtocol
from .proposals import ADD, REMOVE, REVISE

if TYPE_CHECKING:
    from ..functions import FunctionSet

STOP_WORD = "TERMINATE"
_STOP = re.compile(rf"(?<![A-Za-z0-9_]){STOP_WORD}(?![A-Za-z0-9_])")

_ROLE = f"""\
You improve the list of functions that an assistant can call while it solves tasks. You \
read how the assistant did with the current list (List A) and change the list (List B) one \
action at a time:
1. {ADD}: add a function that would have helped: general enough for other tasks of the \
same kind, with every value it needs passed in as an argument, never a value of one task.
2. {REVISE}: fix or improve a function of List B, above all one that failed or misled in \
the conversations (its code, description, arguments or packages): give its whole new \
definition under the same name.
3. {REMOVE}: remove a function of List B that is not needed or does harm.
4. Reply with the single word {STOP_WORD} when List B needs no further change.

A function has five elements: name (a Python identifier); description (what it does, what \
it returns, when to use it); arguments (the JSON Schema of its parameters: \
{{"type": "object", "properties": {{...}}, "required": [...]}}); packages (the packages its \
code imports, e.g. ["sympy"]: plain names only); and code (Python source that defines \
exactly one top-level function with that name, imports inside it or above it, helpers \
inside it, returning a JSON-serialisable value).

Each action is checked before it is accepted: the code must compile and define the named \
function, the schema must be valid and match the function's parameters, the packages must \
be available, and the function is run once on example arguments. A refused action comes \
back with the reason: fix it and try again."""


def _stop_or_refuse(parsed: ParsedReply, reply: ChatReply) -> ParsedReply:
    """TERMINATE alone ends the conversation; a reply that takes no action is malformed."""
    has_call = any(isinstance(action, CallAction) for action in parsed.actions)
    if has_call:
        return parsed
    text = reply.content
    answers = [a.answer for a in parsed.actions if isinstance(a, AnswerAction)]
    if _STOP.search(text) or any(_STOP.search(answer) for answer in answers):
        return ParsedReply(actions=(StopAction(word=STOP_WORD),), notes=parsed.notes)
    if parsed.problems:
        return parsed
    return ParsedReply(problems=(ReplyProblem(
        message=f"the reply takes no action: call {ADD}, {REVISE} or {REMOVE}, or reply with "
                f"the single word {STOP_WORD}"),), notes=parsed.notes)


class OptimizerToolsProtocol(ToolsProtocol):
    """Actions as native tool calls."""

    def system_prompt(self, functions: FunctionSet) -> str:
        return _ROLE + "\n\n" + self.template(functions)

    def template(self, functions: FunctionSet) -> str:
        return (f"Call one of {ADD}, {REVISE} or {REMOVE} through the tool-calling interface, "
                f"with a JSON object of arguments; or reply with the single word {STOP_WORD}.")

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        return _stop_or_refuse(super().parse(reply, functions), reply)


class OptimizerJsonProtocol(JsonProtocol):
    """Actions as one JSON object per reply, for models served without tool calling."""

    def system_prompt(self, functions: FunctionSet) -> str:
        from ..agent.protocols.base import functions_section

        return (_ROLE + "\n\n" + self.template(functions) + "\n\nThe actions, and the schema of "
                "their arguments:\n" + functions_section(functions).removeprefix("The functions:\n"))

    def template(self, functions: FunctionSet) -> str:
        return ("Reply with exactly one JSON object and nothing else:\n"
                '{"thought": "<your reasoning>", "action": {"function": "<' + ADD + ", " + REVISE
                + " or " + REMOVE + '>", "arguments": {"name": "...", "description": "...", '
                '"arguments": {"type": "object", "properties": {...}, "required": [...]}, '
                '"packages": [], "code": "def ...:\\n    ..."}}}\n'
                f"or, when no change is needed, the single word {STOP_WORD}.")

    def parse(self, reply: ChatReply, functions: FunctionSet) -> ParsedReply:
        return _stop_or_refuse(super().parse(reply, functions), reply)


def optimizer_protocol(name: str) -> ReplyProtocol:
    """`tools` or `json`."""
    if name == "tools":
        return OptimizerToolsProtocol()
    if name == "json":
        return OptimizerJsonProtocol()
    from ..errors import ConfigurationError

    raise ConfigurationError(f"unknown optimizer protocol {name!r}",
                             fix="use auto (tool calls, or JSON when the server has none), "
                                 "tools or json")


def protocol_names() -> tuple[str, ...]:
    return ("auto", "tools", "json")
