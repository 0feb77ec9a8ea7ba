"""How the log's tables write values to columns and read them back, and find rows by id.

One module for every table (executions, agent runs, function versions, evaluations,
trainings), so they agree on the formats a SQLite tool sees:
- JSON columns hold any value, an object JSON cannot carry by its repr, so that an odd
  value in settings or a return value can never fail a write; a lone surrogate (which no
  encoding can carry) is kept as its escape, in JSON columns as in plain ones;
- times are fixed-width UTC ISO 8601 (naive means UTC), so sorting the text sorts by time;
- ids are ULIDs, found by the whole id or by a prefix people type, in any case, with `%`,
  `_` and `\\` in the prefix matched as themselves.

Connections, transactions and the spool stay in `store.py`: these helpers take an open
connection and never commit.

Why not sqlite-utils (which simonw/llm uses for this job): its `Table.insert`/`upsert`
commit per call (`with conn:`) and create a table that is missing, while every write
here is one explicit `BEGIN IMMEDIATE` transaction across several tables (a turn and the
executions it links; an epoch and its actions), on autocommit connections that a failed
write falls back from to the spool; foreign keys are set by subqueries in the INSERT
(a spooled execution may arrive before its run), which its row dicts cannot say; and its
JSON columns are written with `json.dumps` defaults, not the formats these tables have
always had. What it would replace is the hundred lines below.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from pydantic_core import to_jsonable_python

from ..encodable import encodable
from ..errors import LogStoreError

logger = logging.getLogger("runner.logs")
R = TypeVar("R")

# A prefix lookup returns at most this many rows: enough to name a few of the ids an
# ambiguous prefix fits, and to tell one match from several.
PREFIX_MATCHES = 6


def to_json(value: Any, *, ascii_only: bool = False) -> str:
    """JSON text of any value (an object JSON cannot carry becomes its repr; a lone surrogate
    in a string, its `\\udXXX` text, so that it reads back as the text a plain column keeps,
    see `runner.encodable`)."""
    return json.dumps(encodable(to_jsonable_python(value, fallback=repr)), ensure_ascii=ascii_only)


def from_json(text: str | None, default: Any = None) -> Any:
    """The value of a JSON column; `default` for NULL or empty text."""
    return json.loads(text) if text else default


@overload
def to_iso(moment: datetime) -> str: ...
@overload
def to_iso(moment: None) -> None: ...
def to_iso(moment: datetime | None) -> str | None:
    """Fixed-width UTC ISO 8601 (microseconds), so the text sorts by time."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def now_iso() -> str:
    return to_iso(datetime.now(UTC))


def from_iso(text: str | None) -> datetime | None:
    """The time of a nullable time column."""
    return datetime.fromisoformat(text) if text else None


def like_prefix(prefix: str) -> str:
    """A LIKE pattern (with `ESCAPE '\\'`) for the ids that start with `prefix`."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def marks(values: Sequence[Any]) -> str:
    """`?, ?, ?`: one placeholder per value, for `IN (...)`."""
    return ", ".join("?" for _ in values)


def named_marks(columns: Sequence[str]) -> str:
    """`:a, :b`: the named placeholders of an INSERT that takes a row dict."""
    return ", ".join(":" + column for column in columns)


def rows_by_id(conn: sqlite3.Connection, select: str, wanted: str, *,
               limit: int = PREFIX_MATCHES) -> list[Any]:
    """The row whose id is `wanted` (upper case), or else the rows whose id starts with it,
    in id order, at most `limit`. `select` is `SELECT ... FROM table`."""
    exact = conn.execute(f"{select} WHERE id = ?", (wanted,)).fetchall()
    if exact:
        return exact
    return conn.execute(f"{select} WHERE id LIKE ? ESCAPE '\\' ORDER BY id LIMIT ?",
                        (like_prefix(wanted), limit)).fetchall()


def shown_ids(ids: Sequence[str], shown: int = 5) -> str:
    """The first ids an ambiguous prefix fits, for its error message."""
    return ", ".join(ids[:shown]) + (", ..." if len(ids) > shown else "")


class DamagedRowError(LogStoreError):
    """One row whose values do not parse (damaged, or edited by hand). Named when the row
    itself is asked for; left out, with a warning, where rows are listed or exported."""


def unreadable(what: str, exc: Exception) -> DamagedRowError:
    """A row whose values do not parse (edited by hand, or damaged)."""
    return DamagedRowError(
        f"{what} in the log database is damaged and cannot be read ({type(exc).__name__}: {exc})",
        fix="`runner logs check` lists every damaged row; fix or delete this one with a SQLite "
            "tool (`runner logs path` shows the file)")


_WARNED: set[str] = set()


def readable(rows: Iterable[Any], read: Callable[[Any], R]) -> list[R]:
    """The records of the rows that parse. A damaged row is left out, with a warning naming
    it (once per row and process), so that one bad row never hides the others."""
    records = []
    for row in rows:
        try:
            records.append(read(row))
        except DamagedRowError as exc:
            if exc.message not in _WARNED:
                _WARNED.add(exc.message)
                logger.warning("skipped: %s (fix: %s)", exc.message, exc.fix)
    return records


def lenient_text(data: bytes) -> str:
    """How the log's connections decode text: as UTF-8, and bytes that are not (a damaged
    page) as U+FFFD, so that one damaged value cannot fail a whole query."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace")
