"""Text that every encoder takes: lone surrogates written out as `\\udXXX` escapes.

A model's reply is JSON, and JSON may carry a lone surrogate (`"\\ud800"` is valid JSON
and decodes to a Python string holding U+D800). No UTF encoding can write such a
character: SQLite refuses the row, `print` fails, an HTTP response cannot be sent. So text
that arrives from outside is made encodable where it enters (the model client's reading of
a reply, the log store's writes, the CLI's output streams): each lone surrogate becomes the
six characters of its JSON escape, which is what the wire carried. Everything else (NUL
and other controls included) is kept exactly; the terminal and the viewer show controls as
escapes of their own (`runner.terminal`).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group(0)):04x}"


def encodable_text(text: str) -> str:
    """`text` with each lone surrogate written as `\\udXXX` (the same object when it has none)."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(_escape, text)


def encodable(value: Any) -> Any:
    """`value` with every string in it (dict keys too, in lists, tuples and dicts at any
    depth) made encodable; other values as they are."""
    if isinstance(value, str):
        return encodable_text(value)
    if isinstance(value, dict):
        return {encodable(key): encodable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [encodable(item) for item in value]
    if isinstance(value, tuple):
        return tuple(encodable(item) for item in value)
    return value
