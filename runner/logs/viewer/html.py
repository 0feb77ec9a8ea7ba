"""Turning logged text into safe HTML: syntax colouring, diffs, search hits, long bodies.

Every function here takes untrusted text (code, output, tracebacks, model replies) and
returns `Markup` built only from escaped pieces: Pygments escapes what it highlights, and
the rest goes through `markupsafe.escape`. Control characters are first shown as visible
escapes (`\\x1b`), so an ANSI sequence in a program's output reads as what it is.
"""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import DiffLexer, JsonLexer, PythonLexer, PythonTracebackLexer

from ...terminal import sanitize_for_terminal
from ..query import HIT_END, HIT_START

CSS_CLASS = "hl"
# A body longer than this is cut in the page, with a link to the whole of it: a page of
# several megabytes helps no one and slows every browser.
PAGE_BODY_CHARS = 100_000

_LEXERS: dict[str, Lexer] = {
    "python": PythonLexer(stripnl=False, ensurenl=False),
    "json": JsonLexer(stripnl=False, ensurenl=False),
    "diff": DiffLexer(stripnl=False, ensurenl=False),
    "traceback": PythonTracebackLexer(stripnl=False, ensurenl=False),
}


def visible(text: object) -> str:
    """Control characters shown as escapes (for text that is then escaped for HTML)."""
    return sanitize_for_terminal("" if text is None else str(text))


def code_block(text: str, language: str = "python", *, line_numbers: bool = False) -> Markup:
    """`text` coloured by Pygments (which escapes it), optionally with line numbers."""
    formatter = HtmlFormatter(cssclass=CSS_CLASS, linenos="table" if line_numbers else False,
                              wrapcode=True)
    # Pygments escapes the text it highlights: its output is safe markup.
    return Markup(highlight(visible(text) or "\n", _LEXERS[language], formatter))


def json_block(value: Any) -> Markup:
    return code_block(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True,
                                 default=repr), "json")


def hits(snippet: str | None) -> Markup:
    """A search snippet with its matched words in <mark>, everything else escaped."""
    if not snippet:
        return Markup("")
    out: list[Markup] = []
    inside = False
    for piece in visible(snippet).replace(HIT_END, HIT_START).split(HIT_START):
        text = escape(piece)
        out.append(Markup("<mark>") + text + Markup("</mark>") if inside and piece else text)
        inside = not inside
    return Markup("").join(out)


def cut(text: str, *, full: bool) -> tuple[str, int]:
    """(what to show, how many characters were left out)."""
    if full or len(text) <= PAGE_BODY_CHARS:
        return text, 0
    return text[:PAGE_BODY_CHARS], len(text) - PAGE_BODY_CHARS


def stylesheet() -> str:
    """The colours of the highlighted blocks (served as /static/pygments.css)."""
    return str(HtmlFormatter(cssclass=CSS_CLASS, style="default").get_style_defs(f".{CSS_CLASS}"))
