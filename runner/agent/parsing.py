"""Forgiving readers for what models actually reply.

Weak models wrap JSON in prose and Markdown fences, write Python literals (`True`,
`None`), single quotes and trailing commas, send two or three objects where one was asked
for, and use near-miss keys (`actions`, `args`). Strong models need none of this help, and
it costs them nothing. The readers here are pure functions of the text:

- `json_objects(text)`: every JSON object in a reply, in order: the whole reply, objects
  in fenced blocks or in prose (the first balanced `{...}` and the ones after it), each
  repaired with the `json-repair` library when strict parsing fails;
- `load_arguments(text)`: a tool call's argument text as an object, repaired if needed;
- `read_action(obj)`: the function call (or final answer) a JSON object asks for, with
  near-miss keys accepted when unambiguous;
- `label_segments(text)`: `Thought:` / `Tool:` / `Tool Input:` / `Final Answer:` sections;
- `fenced_blocks(text)` and `last_boxed(text)` for the code protocol.

Which object counts, and what the model is told about the rest, is the protocols' call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal, NamedTuple

from ..jsonlimits import JsonBounds, JsonBoundsError, json_problem, loads
from .boxed import last_boxed as last_boxed  # one rule for agent and evaluation

# What one reply may hold as JSON: replies are bounded by the model's token limit, but a
# server can send anything. Beyond these, text is not read as JSON (and the model is told).
REPLY_BOUNDS = JsonBounds(max_chars=4_000_000, max_depth=100, max_items=200_000)
_MAX_REPAIR_CHARS = 200_000  # json-repair is pure Python and recursive: only modest text

# -- JSON objects in text ------------------------------------------------------------------


class FoundObject(NamedTuple):
    value: dict[str, Any]
    start: int
    end: int
    repaired: bool  # strict JSON could not read it; json-repair could


def _parse(text: str) -> tuple[Any, bool]:
    """(strict JSON within REPLY_BOUNDS or None, whether the text is JSON beyond the bounds).

    Text beyond the bounds is not repaired either: what json-repair made of it would not
    be what the model wrote (an over-long integer becomes something else)."""
    try:
        return loads(text, REPLY_BOUNDS, types=False), False
    except JsonBoundsError as exc:
        return None, exc.kind != "syntax"


def _strict(text: str) -> Any:
    """Strict JSON within REPLY_BOUNDS (never a RecursionError); None when it is not."""
    return _parse(text)[0]


def repair(text: str) -> Any:
    """What `json-repair` makes of `text`; None when it makes nothing of it (or the text,
    or what it makes of it, is beyond REPLY_BOUNDS)."""
    from json_repair import repair_json

    if len(text) > _MAX_REPAIR_CHARS:
        return None
    try:
        value = repair_json(text, return_objects=True)
    except Exception:  # a bug in the repair library (or RecursionError) must not cost the reply
        return None
    if value == "" or json_problem(value, REPLY_BOUNDS, types=False) is not None:
        return None
    return value


def json_text_problem(text: str) -> str | None:
    """Why `text` cannot be read as JSON within the bounds, or None if it can."""
    try:
        loads(text, REPLY_BOUNDS, types=False)
    except JsonBoundsError as exc:
        return str(exc)
    return None


def _balanced_spans(text: str, quotes: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each outermost `{...}` in text, skipping braces inside strings
    delimited by any of `quotes`. Unbalanced tails yield nothing."""
    position = 0
    length = len(text)
    while True:
        start = text.find("{", position)
        if start < 0:
            return
        depth = 0
        quote: str | None = None
        index = start
        end = -1
        while index < length:
            char = text[index]
            if quote is not None:
                if char == "\\":
                    index += 2
                    continue
                if char == quote:
                    quote = None
            elif char in quotes:
                quote = char
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = index + 1
                    break
            index += 1
        if end < 0:
            return
        yield start, end
        position = end


def _read_candidate(candidate: str) -> tuple[dict[str, Any] | None, bool]:
    value, beyond = _parse(candidate)
    if isinstance(value, dict):
        return value, False
    if beyond or ":" not in candidate:  # `{x}` in LaTeX or prose is no object
        return None, False
    value = repair(candidate)
    if isinstance(value, dict) and value:
        return value, True
    return None, False


def json_objects(text: str) -> list[FoundObject]:
    """Every JSON object in `text`, in order of appearance (nested ones belong to their parent)."""
    stripped = text.strip()
    whole, beyond = _parse(stripped)
    if isinstance(whole, dict):
        start = text.index(stripped[0])
        return [FoundObject(whole, start, start + len(stripped), False)]
    if beyond:
        return []
    found: list[FoundObject] = []
    # Braces inside double-quoted strings do not count; single quotes are apostrophes in
    # prose far more often than string delimiters, so they count only on a second try.
    for quotes in ('"', "\"'"):
        for start, end in _balanced_spans(text, quotes):
            value, repaired = _read_candidate(text[start:end])
            if value is not None:
                found.append(FoundObject(value, start, end, repaired))
        if found:
            return found
    # An object cut short (a stop token, a length limit): repair from its first brace to
    # the end of its fenced block, or of the text.
    start = text.find("{")
    if start >= 0:
        fence = text.find("```", start)
        end = fence if fence >= 0 else len(text)
        value = repair(text[start:end])
        if isinstance(value, dict) and value:
            return [FoundObject(value, start, end, True)]
    return []


def load_arguments(text: Any) -> tuple[Any, bool]:
    """A tool call's arguments as an object when possible: (value, repaired).

    Empty text is no arguments. Text that is no object even after repair is returned as
    it was, so that argument validation can say what is wrong with it.
    """
    if text is None:
        return {}, False
    if not isinstance(text, str):
        return text, False
    if not text.strip():
        return {}, False
    value, beyond = _parse(text)
    if isinstance(value, dict):
        return value, False
    if beyond:  # validation says what is wrong with it
        return text, False
    if isinstance(value, str):  # JSON text of JSON text, as some servers double-encode
        inner = _strict(value)
        if isinstance(inner, dict):
            return inner, True
    objects = json_objects(text)
    if objects:
        return objects[0].value, True
    return text, False


# -- actions in JSON objects -----------------------------------------------------------------

_ACTION_KEYS = ("action", "actions", "tool_call", "tool_calls", "function_call")
_FUNCTION_KEYS = ("function", "name", "tool", "function_name", "tool_name")
_ARGUMENT_KEYS = ("arguments", "args", "parameters", "params", "argument", "input", "tool_input",
                  "action_input", "kwargs", "inputs")
_THOUGHT_KEYS = ("thought", "thoughts", "reasoning", "reason", "think", "thinking", "plan",
                 "explanation", "type", "id")
_ANSWER_KEYS = ("final_answer", "finalanswer")


def normal_key(key: object) -> str:
    """`Tool Input`, `tool-input` and `TOOL_INPUT` are all `tool_input`."""
    return re.sub(r"[\s\-]+", "_", str(key).strip()).lower()


class ActionRead(NamedTuple):
    """What one JSON object asks for."""

    kind: Literal["call", "answer", "none", "ambiguous"]
    function: str | None = None
    arguments: Any = None
    answer: str | None = None
    problem: str | None = None
    notes: tuple[str, ...] = ()


def _pick(data: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[list[str], list[Any]]:
    """The (original) keys of `data` that normalise to one of `keys`, and their values."""
    names: list[str] = []
    values: list[Any] = []
    for key, value in data.items():
        if normal_key(key) in keys:
            names.append(str(key))
            values.append(value)
    return names, values


def _distinct(values: list[Any]) -> list[Any]:
    unique: list[Any] = []
    for value in values:
        if value not in unique:
            unique.append(value)
    return unique


def read_action(obj: Mapping[str, Any]) -> ActionRead:
    """The call or final answer `obj` asks for.

    Accepted: `{"thought": .., "action": {"function": .., "arguments": {..}}}` and its
    near misses: `actions` (an object, or a list whose first item counts), the call at the
    top level, `name`/`tool` for `function`, `args`/`parameters`/`input` for `arguments`,
    arguments as JSON text, `{"action": "NAME", "action_input": {..}}`, and a top-level
    `final_answer`. Two different values for one role (say `args` and `arguments`) are
    ambiguous: nothing is guessed.
    """
    notes: list[str] = []
    names, values = _pick(obj, _ACTION_KEYS)
    values = _distinct(values)
    if len(values) > 1:
        return ActionRead("ambiguous", problem=f"the object has {len(names)} different actions "
                          f"({', '.join(repr(n) for n in names)}); give exactly one `action`")
    if values:
        action = values[0]
        if isinstance(action, list):
            items = [item for item in action if item not in (None, {}, [])]
            if not items:
                return ActionRead("ambiguous", problem=f"`{names[0]}` is an empty list; "
                                  "give one action object")
            if len(items) > 1:
                notes.append(f"`{names[0]}` listed {len(items)} actions; only the first one ran. "
                             "Give one action per reply and wait for its result")
            action = items[0]
        if isinstance(action, str):  # {"action": "NAME", "action_input": {...}}
            rest = {k: v for k, v in obj.items() if normal_key(k) not in _ACTION_KEYS}
            read = _read_call({"function": action, **rest}, top_level=True)
        elif isinstance(action, Mapping):
            read = _read_call(action, top_level=False)
        else:
            return ActionRead("ambiguous", problem=f"`{names[0]}` must be an object with "
                              f"`function` and `arguments`, got {type(action).__name__}")
        return read._replace(notes=tuple(notes) + read.notes)
    _, function_values = _pick(obj, _FUNCTION_KEYS)
    if function_values:
        return _read_call(obj, top_level=True)
    _, answers = _pick(obj, _ANSWER_KEYS)
    if answers:
        return ActionRead("answer", answer=_text(answers[0]))
    return ActionRead("none")


def _read_call(action: Mapping[str, Any], *, top_level: bool) -> ActionRead:
    names, values = _pick(action, _FUNCTION_KEYS)
    values = _distinct(values)
    if not values:
        return ActionRead("ambiguous", problem="the action names no function: give "
                          "`\"function\": NAME`")
    if len(values) > 1:
        return ActionRead("ambiguous", problem=f"the action names {len(values)} functions "
                          f"({', '.join(repr(n) for n in names)}); give one `function`")
    function = values[0]
    if isinstance(function, Mapping):  # {"function": {"name": .., "arguments": ..}}
        return _read_call(function, top_level=False)
    if not isinstance(function, str) or not function.strip():
        return ActionRead("ambiguous", problem="`function` must be the name of a function, got "
                          f"{json.dumps(function)}")
    function = function.strip().strip("`'\"").removesuffix("()").strip()
    argument_names, argument_values = _pick(action, _ARGUMENT_KEYS)
    argument_values = _distinct(argument_values)
    if len(argument_values) > 1:
        return ActionRead("ambiguous", function=function, problem=(
            f"the action gives arguments twice, differently ({', '.join(repr(n) for n in argument_names)}); "
            "give one `arguments` object"))
    if argument_values:
        arguments, _ = load_arguments(argument_values[0])
    else:
        # {"function": "calculate", "formula": "1+1"}: the other keys are the arguments.
        skip = set(_FUNCTION_KEYS) | set(_THOUGHT_KEYS) | (set(_ACTION_KEYS) if top_level else set())
        arguments = {key: value for key, value in action.items() if normal_key(key) not in skip}
    return ActionRead("call", function=function, arguments=arguments)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


# -- labelled text (Thought / Tool / Tool Input / Final Answer) -----------------------------------

_LABELS = {
    "thought": "thought", "thoughts": "thought",
    "tool_input": "input", "action_input": "input", "tool_inputs": "input", "input": "input",
    "tool": "tool", "action": "tool", "tool_name": "tool",
    "observation": "observation", "tool_output": "observation", "result": "observation",
    "final_answer": "answer",
}
_LABEL = re.compile(
    r"^[ \t]*(?:[#>*\-]+[ \t]*)?[*_]{0,2}[ \t]*"
    r"(thoughts?|tool[ _]inputs?|action[ _]input|tool[ _]name|tool[ _]output|tool|action|"
    r"observation|final[ _]answer)"
    r"[ \t]*[*_]{0,2}[ \t]*:[ \t]*[*_]{0,2}[ \t]*",
    re.IGNORECASE | re.MULTILINE)


class Segment(NamedTuple):
    label: str  # thought, tool, input, observation, answer
    text: str
    start: int


def label_segments(text: str) -> list[Segment]:
    """The labelled sections of a ReAct-style reply, in order; text before the first label
    is dropped. Labels are matched case-insensitively, also inside Markdown emphasis."""
    matches = list(_LABEL.finditer(text))
    segments: list[Segment] = []
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        label = _LABELS[normal_key(match.group(1))]
        segments.append(Segment(label, text[match.end():end].strip(), match.start()))
    return segments


# -- fenced blocks and boxed answers -------------------------------------------------------------

_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n]*\n", re.MULTILINE)


class Fence(NamedTuple):
    language: str  # lower case; "" when the fence names none
    body: str
    start: int
    end: int
    closed: bool


def fenced_blocks(text: str) -> list[Fence]:
    """Markdown fenced blocks in order. A closing fence may end a code line (```` print(1)``` ````);
    a block left open at the end of the reply (a stop token cut it) runs to the end."""
    blocks: list[Fence] = []
    position = 0
    while True:
        match = _FENCE_OPEN.search(text, position)
        if not match:
            return blocks
        marker = match.group(1)
        body_start = match.end()
        close = re.compile(rf"{re.escape(marker)}[ \t]*(?:\n|$)")
        closing = close.search(text, body_start)
        if closing:
            body, end, closed = text[body_start:closing.start()], closing.end(), True
        else:
            body, end, closed = text[body_start:], len(text), False
        language = match.group(2).strip().lower().lstrip("{.").rstrip("}")
        blocks.append(Fence(language, body.rstrip("\n").rstrip(), match.start(), end, closed))
        position = end


# `last_boxed(text)`: one rule for the agent and the math evaluation (runner.agent.boxed).
