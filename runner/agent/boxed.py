"""The boxed answer: the content of the last `\\boxed{...}` in a reply.

The code protocol's answer rule (a reply without code whose last box is the answer), and
the rule the math package reads answers and datasets' solutions with, so both agree.
See `runner.math.extract` for the full rules, and the text fallbacks an evaluation may ask
for. Linear in the text's length: replies are hostile and can be megabytes long.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["BOX_COMMAND", "TRAILING_PUNCTUATION", "Box", "box_argument", "closing_brace", "last_boxed"]

# `\boxed` / `\fbox`, then a brace or whitespace; `\boxed5` is not LaTeX and not an answer.
BOX_COMMAND = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_SPACE_ARGUMENT_END = re.compile(r"[\s$]")
TRAILING_PUNCTUATION = ".,;:!?"


def closing_brace(text: str, open_index: int, limit: int | None = None) -> int:
    """Index of the brace matching the one at `open_index` (before `limit`), or -1."""
    depth = 0
    index = open_index
    length = len(text) if limit is None else min(limit, len(text))
    while index < length:
        char = text[index]
        if char == "\\":
            index += 2  # an escaped character, `\{` and `\}` included, is never structure
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return -1


class Box(NamedTuple):
    """A box's argument, and where in the text it ends (after its closing brace)."""

    content: str
    end: int


def box_argument(text: str, command_end: int, limit: int | None = None) -> Box | None:
    """The argument of a box command ending at `command_end` (and before `limit`); None when
    broken or empty."""
    index = command_end
    length = len(text) if limit is None else min(limit, len(text))
    while index < length and text[index] in " \t":
        index += 1
    if index >= length:
        return None
    if text[index] == "{":
        close = closing_brace(text, index, length)
        if close < 0:
            return None
        content = text[index + 1:close].strip()
        return Box(content, close + 1) if content else None
    if index == command_end:
        return None  # `\boxedx`: not the command followed by an argument
    end_match = _SPACE_ARGUMENT_END.search(text, index, length)
    end = end_match.start() if end_match else length
    content = text[index:end].rstrip(TRAILING_PUNCTUATION).strip()
    return Box(content, end) if content else None


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}`/`\\fbox{...}`/`\\boxed X` in `text`, or None.

    None also when that last box is unbalanced or empty (see the module docstring)."""
    last = None
    for match in BOX_COMMAND.finditer(text):
        last = match
    if last is None:
        return None
    box = box_argument(text, last.end())
    return box.content if box is not None else None
