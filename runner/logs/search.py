"""What a search box's words become: FTS5 queries over the log's trigram indexes, and
substring tests for the words too short for them.

The search indexes (migration 9) use SQLite's trigram tokenizer: every run of three
characters is indexed, so any part of a word is found, case aside, in any script (a CJK
sentence has no spaces between its words; `猫很可` is found inside `我们的猫很可爱`).
A search's terms are its words (`"quoted words"` are one term, spaces included; a trailing
`*` changes nothing, since a term is found wherever it occurs); every term must occur.
Terms of three characters or more go to the index, as a quoted FTS5 query, so `"`, `*`,
`AND` or `NEAR(` in them cannot be syntax; shorter ones (`猫`, `id`) are tested as
substrings of the text itself, which reads every row the other conditions leave.

A search with no letters or digits at all (`*`, `"`, an emoji) is refused with a clear
error rather than matching everything.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from ..errors import ConfigurationError

TRIGRAM = 3
_TERM = re.compile(r'"[^"]*"|\S+')


class Search(NamedTuple):
    match: str | None  # the FTS5 query of the terms the index can find
    short: tuple[str, ...]  # the terms shorter than a trigram


def parse_search(text: str) -> Search | None:
    """The search in `text`; None when it is blank, a ConfigurationError when it has no
    letters or digits."""
    terms: list[str] = []
    for token in _TERM.findall(text):
        if len(token) >= 2 and token.startswith('"') and token.endswith('"'):
            inner = token[1:-1].strip()
        else:
            inner = token.rstrip("*")  # a prefix: found like any part of a word
        if any(ch.isalnum() for ch in inner):
            terms.append(inner)
    if not terms:
        if text.strip():
            raise ConfigurationError(
                f"the search {text.strip()[:60]!r} has no letters or digits to look for",
                fix="search for a word or a part of one (e.g. ZeroDivisionError), or leave the "
                    "search out")
        return None
    long = [term for term in terms if len(term) >= TRIGRAM]
    match = " AND ".join('"' + term.replace('"', '""') + '"' for term in long) or None
    return Search(match, tuple(term for term in terms if len(term) < TRIGRAM))


def contains_all(columns: Sequence[str], terms: Sequence[str]) -> tuple[str, list[Any]]:
    """SQL (and its parameters) that holds when every term occurs, in any case, in one of
    `columns`."""
    clauses: list[str] = []
    params: list[Any] = []
    for term in terms:
        clauses.append("(" + " OR ".join(f"instr(lower(coalesce({column}, '')), lower(?)) > 0"
                                         for column in columns) + ")")
        params += [term] * len(columns)
    return " AND ".join(clauses), params
