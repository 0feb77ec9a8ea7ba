"""Finding things in the log: filters, full-text search, keyset pages, summaries, statistics.

Everything here reads through a `sqlite3.Connection` handed in by the caller (the
LogStore's, read-only or not), so the CLI and the viewer ask the same questions with the
same SQL. Text a person typed is never pasted into SQL: filters are parameters, and a
search box's words become a quoted FTS5 query and substring tests (`runner.logs.search`),
so `"`, `*`, `AND` or `NEAR(` in it cannot be a syntax error or change its meaning.

Pages are keyset pages (`WHERE (sort_key, id) < (last_key, last_id)`), not OFFSET ones: the
hundredth page costs what the first does, and rows written meanwhile do not shift it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigurationError
from ..types import Status
from .rows import rows_by_id, to_iso
from .search import contains_all, parse_search

# Markers snippet() puts around matched words: private-use characters that the renderers
# turn into highlighting after escaping, never into markup taken from the text itself.
HIT_START = "\ue000"
HIT_END = "\ue001"
PAGE_SIZE = 50

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """A moment from `30m`, `1h`, `2d`, `1w` (that long ago) or an ISO date or date-time.

    A date or time without a zone is the reader's local time, as the CLI shows times.
    """
    now = now or datetime.now(UTC)
    match = _DURATION.match(text)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
        try:
            return now - timedelta(seconds=seconds)
        except OverflowError:
            raise ConfigurationError(f"{text!r} is too long ago",
                                     fix="use a shorter duration, e.g. 30d") from None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigurationError(
            f"cannot read {text!r} as a time",
            fix="use a duration such as 30m, 12h, 7d or 2w, or a date such as 2024-05-01 "
                "or 2024-05-01T12:00") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as the reader sees times
    return moment.astimezone(UTC)


# -- executions ------------------------------------------------------------------------------

SortKey = Literal["started", "duration", "cpu", "memory"]
SORT_COLUMNS: dict[str, str] = {"started": "started_at", "duration": "duration_ms",
                                "cpu": "cpu_ms", "memory": "max_rss_kb"}


class ExecutionFilter(BaseModel):
    """Which executions: every given field must hold. `query` is full-text search words."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Status | None = None
    backend: str | None = None
    source: str | None = None
    function: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    query: str | None = None
    agent_run: str | None = None

    @field_validator("backend", "source", "function", "query", "agent_run", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @classmethod
    def of(cls, **fields: Any) -> ExecutionFilter:
        """A filter from loose values (a status as text, say); a bad one is a ConfigurationError."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ConfigurationError(
                f"bad filter ({problems})",
                fix="statuses are: " + ", ".join(s.value for s in Status)) from None

    def where(self, conn: sqlite3.Connection, *, by_time: bool = True) -> Where:
        """The WHERE clause (" WHERE ..." or "") with its parameters. A search also matches
        the rows not yet in the index (see `pending_matches`), so it needs the connection.

        `by_time`: the rows will be read newest (or oldest) first. Then a search for common
        words walks the time index and checks each row against the matches, which stops
        after a page; rarer words are looked up the other way round (their few rows
        fetched, then sorted). Which is which is found by counting a few matches."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (("status", self.status), ("backend", self.backend),
                              ("source", self.source), ("function", self.function),
                              ("agent_run_id", self.agent_run)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(str(value))
        if self.since is not None:
            clauses.append("started_at >= ?")
            params.append(to_iso(self.since))
        if self.until is not None:
            clauses.append("started_at < ?")
            params.append(to_iso(self.until))
        search = parse_search(self.query) if self.query else None
        match = search.match if search is not None else None
        pending: dict[int, str] = {}
        if search is not None and search.short:
            short, short_params = contains_all(FTS_COLUMNS, search.short)
            clauses.append(short)
            params += short_params
        if match is not None:
            pending = pending_matches(conn, match)
            common = by_time and conn.execute(
                "SELECT COUNT(*) FROM (SELECT 1 FROM executions_fts WHERE executions_fts MATCH ? "
                "LIMIT ?)", (match, _COMMON_MATCHES)).fetchone()[0] >= _COMMON_MATCHES
            # The unary + keeps SQLite from driving the query by the search's rows.
            column = "+seq" if common else "seq"
            indexed = f"{column} IN (SELECT rowid FROM executions_fts WHERE executions_fts MATCH ?)"
            params.append(match)
            if pending:
                indexed = f"({indexed} OR seq IN ({', '.join('?' for _ in pending)}))"
                params += list(pending)
            clauses.append(indexed)
        return Where(" WHERE " + " AND ".join(clauses) if clauses else "", params, pending,
                     match)


# A search matching at least this many rows is read along the time index (see `where`).
_COMMON_MATCHES = 500


class Where(NamedTuple):
    sql: str
    params: list[Any]
    pending_snippets: dict[int, str]  # seq -> snippet, for matching rows not yet indexed
    match: str | None  # the FTS5 query, if searching


FTS_COLUMNS = ("code", "stdout", "stderr", "error_type", "error_message", "error_traceback")


def pending_matches(conn: sqlite3.Connection, match: str) -> dict[int, str]:
    """The rows after the search index's mark (the writer indexes in batches) that match
    `match`, with their snippets: found by an in-memory index of the same kind, built for
    this query from those few rows, so a search sees every row the moment it is logged."""
    columns = ", ".join(FTS_COLUMNS)
    rows = conn.execute(f"SELECT seq, {columns} FROM executions WHERE seq > "
                        "(SELECT indexed_up_to FROM executions_fts_state) ORDER BY seq").fetchall()
    if not rows:
        return {}
    memory = sqlite3.connect(":memory:")
    try:
        memory.execute(f"CREATE VIRTUAL TABLE pending USING fts5 ({columns}, tokenize = 'trigram')")
        memory.executemany(f"INSERT INTO pending (rowid, {columns}) VALUES "
                           f"({', '.join('?' * (len(FTS_COLUMNS) + 1))})", rows)
        found = memory.execute("SELECT rowid, snippet(pending, -1, ?, ?, '…', 16) FROM pending "
                               "WHERE pending MATCH ?", (HIT_START, HIT_END, match)).fetchall()
    finally:
        memory.close()
    return {int(row[0]): str(row[1]) for row in found}


class Cursor(BaseModel):
    """Where a page ends: the last row's sort value and id. Opaque text in URLs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: str | int
    id: str = Field(max_length=64)

    def encode(self) -> str:
        raw = json.dumps([self.value, self.id], separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """The cursor in `text`; a ConfigurationError for anything else (it is user input)."""
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            value, row_id = json.loads(raw)
            if isinstance(value, bool) or not isinstance(row_id, str):
                raise TypeError("wrong types")
            return cls(value=value, id=row_id)
        except (ValueError, TypeError, binascii.Error, ValidationError):
            raise ConfigurationError("the page link is damaged",
                                     fix="go back to the first page") from None


class ExecutionSummary(BaseModel):
    """What a list shows of one execution (no bodies beyond short previews)."""

    model_config = ConfigDict(frozen=True)

    id: str
    started_at: datetime
    source: str
    backend: str
    status: str
    duration_ms: int
    cpu_ms: int
    max_rss_kb: int
    function: str | None
    code_preview: str
    error_type: str | None
    error_preview: str | None
    agent_run_id: str | None
    agent_turn: int | None
    replay_of: str | None
    truncated: bool
    snippet: str | None = None  # matched text with HIT_START/HIT_END markers

    def sort_value(self, sort: str) -> str | int:
        if sort == "started":
            return to_iso(self.started_at)
        return int(getattr(self, {"duration": "duration_ms", "cpu": "cpu_ms",
                                  "memory": "max_rss_kb"}[sort]))


class Page(BaseModel):
    """One page of a list, and the cursor of the next one (None on the last page)."""

    model_config = ConfigDict(frozen=True)

    items: list[Any]
    next_cursor: str | None


_SUMMARY_COLUMNS = (
    "id, started_at, source, backend, status, duration_ms, cpu_ms, max_rss_kb, function, "
    "substr(code, 1, 300), error_type, substr(error_message, 1, 300), agent_run_id, "
    "agent_turn, replay_of, stdout_truncated OR stderr_truncated, seq")


def list_executions(conn: sqlite3.Connection, where: ExecutionFilter, *, sort: str = "started",
                    descending: bool = True, after: Cursor | None = None,
                    limit: int = PAGE_SIZE) -> Page:
    """One page of executions matching `where`, ordered by `sort` (then id)."""
    column = SORT_COLUMNS.get(sort)
    if column is None:
        raise ConfigurationError(f"cannot sort by {sort!r}",
                                 fix="sort by one of: " + ", ".join(SORT_COLUMNS))
    found = where.where(conn, by_time=sort == "started")
    sql_where, params = found.sql, list(found.params)
    if after is not None:
        keyset = f"({column}, id) {'<' if descending else '>'} (?, ?)"
        sql_where = f"{sql_where} AND {keyset}" if sql_where else f" WHERE {keyset}"
        params += [after.value, after.id]
    direction = "DESC" if descending else "ASC"
    sql = (f"SELECT {_SUMMARY_COLUMNS} FROM executions{sql_where} "
           f"ORDER BY {column} {direction}, id {direction} LIMIT ?")
    rows = conn.execute(sql, [*params, limit + 1]).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    snippets = _snippets(conn, found, [row[-1] for row in rows])
    items = [ExecutionSummary(
        id=r[0], started_at=datetime.fromisoformat(r[1]), source=r[2], backend=r[3], status=r[4],
        duration_ms=r[5], cpu_ms=r[6], max_rss_kb=r[7], function=r[8], code_preview=r[9] or "",
        error_type=r[10], error_preview=r[11], agent_run_id=r[12], agent_turn=r[13],
        replay_of=r[14], truncated=bool(r[15]), snippet=snippets.get(r[-1])) for r in rows]
    next_cursor = None
    if more and items:
        last = items[-1]
        next_cursor = Cursor(value=last.sort_value(sort), id=last.id).encode()
    return Page(items=items, next_cursor=next_cursor)


def _snippets(conn: sqlite3.Connection, found: Where, seqs: Sequence[int]) -> dict[int, str]:
    """The matched words in context, for the rows of one page only (snippets cost work)."""
    if found.match is None or not seqs:
        return {}
    snippets = {seq: found.pending_snippets[seq] for seq in seqs if seq in found.pending_snippets}
    indexed = [seq for seq in seqs if seq not in snippets]
    if indexed:
        marks = ", ".join("?" for _ in indexed)
        rows = conn.execute(
            f"SELECT rowid, snippet(executions_fts, -1, ?, ?, '…', 16) FROM executions_fts "
            f"WHERE executions_fts MATCH ? AND rowid IN ({marks})",
            [HIT_START, HIT_END, found.match, *indexed]).fetchall()
        snippets.update({int(row[0]): str(row[1]) for row in rows})
    return snippets


def count_executions(conn: sqlite3.Connection, where: ExecutionFilter) -> int:
    found = where.where(conn)
    return int(conn.execute(f"SELECT COUNT(*) FROM executions{found.sql}", found.params).fetchone()[0])


def execution_ids(conn: sqlite3.Connection, where: ExecutionFilter, *, limit: int | None = None,
                  newest_first: bool = True) -> list[str]:
    """Ids of the matching executions, by time."""
    found = where.where(conn)
    sql_where, params = found.sql, list(found.params)
    direction = "DESC" if newest_first else "ASC"
    sql = f"SELECT id FROM executions{sql_where} ORDER BY started_at {direction}, id {direction}"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [row[0] for row in conn.execute(sql, params).fetchall()]


def execution_links(conn: sqlite3.Connection, execution_id: str) -> tuple[str | None, int | None, str | None]:
    """(agent run, turn, original of a replay) that an execution's foreign keys name."""
    row = conn.execute("SELECT agent_run_id, agent_turn, replay_of FROM executions WHERE id = ?",
                       (execution_id,)).fetchone()
    return (row[0], row[1], row[2]) if row else (None, None, None)


def replays_of(conn: sqlite3.Connection, execution_id: str) -> list[tuple[str, str]]:
    """(id, status) of the recorded replays of one execution, oldest first."""
    rows = conn.execute("SELECT id, status FROM executions WHERE replay_of = ? ORDER BY id",
                        (execution_id,)).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def distinct_values(conn: sqlite3.Connection, column: Literal["backend", "source", "function"],
                    *, limit: int = 200) -> list[str]:
    """The values a filter can take (for a form's choices), from the facets table that a
    trigger keeps (see migration 4)."""
    rows = conn.execute("SELECT value FROM execution_facets WHERE kind = ? ORDER BY value LIMIT ?",
                        (column, limit)).fetchall()
    return [str(row[0]) for row in rows]


# -- agent runs ------------------------------------------------------------------------------


class RunSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    started_at: datetime
    finished_at: datetime | None
    task: str
    protocol: str
    model: str | None
    status: str
    turn_count: int
    prompt_tokens: int | None
    completion_tokens: int | None
    sandbox_ms: int
    final_answer: str | None


def list_runs(conn: sqlite3.Connection, *, status: str | None = None, query: str | None = None,
              after: Cursor | None = None, limit: int = PAGE_SIZE) -> Page:
    """Agent runs, newest first; `query` searches the replies and feedback, and the task."""
    clauses: list[str] = []
    params: list[Any] = []
    if status:
        clauses.append("status = ?")
        params.append(status)
    search = parse_search(query) if query else None
    if search is not None and query is not None:
        # Every term in the model's replies and the feedback (the index for the long ones,
        # the text for the short), or the whole query in the task.
        words: list[str] = []
        if search.match is not None:
            words.append("id IN (SELECT t.run_id FROM agent_turns t WHERE t.seq IN "
                         "(SELECT rowid FROM agent_turns_fts WHERE agent_turns_fts MATCH ?))")
            params.append(search.match)
        if search.short:
            short, short_params = contains_all(("t.reply_json", "t.feedback_text"), search.short)
            words.append(f"id IN (SELECT t.run_id FROM agent_turns t WHERE {short})")
            params += short_params
        clauses.append("((" + " AND ".join(words) + ") OR instr(lower(task), lower(?)) > 0)")
        params.append(query.strip())
    if after is not None:
        clauses.append("(started_at, id) < (?, ?)")
        params += [after.value, after.id]
    where = " WHERE " + " AND ".join(clauses) if clauses else ""
    rows = conn.execute(
        "SELECT id, started_at, finished_at, substr(task, 1, 500), protocol, model, status, "
        "(SELECT COUNT(*) FROM agent_turns t WHERE t.run_id = agent_runs.id), prompt_tokens, "
        f"completion_tokens, sandbox_ms, substr(final_answer, 1, 300) FROM agent_runs{where} "
        "ORDER BY started_at DESC, id DESC LIMIT ?", [*params, limit + 1]).fetchall()
    more = len(rows) > limit
    items = [RunSummary(
        id=r[0], started_at=datetime.fromisoformat(r[1]),
        finished_at=datetime.fromisoformat(r[2]) if r[2] else None, task=r[3], protocol=r[4],
        model=r[5], status=r[6], turn_count=r[7], prompt_tokens=r[8], completion_tokens=r[9],
        sandbox_ms=r[10] or 0, final_answer=r[11]) for r in rows[:limit]]
    next_cursor = None
    if more and items:
        next_cursor = Cursor(value=to_iso(items[-1].started_at), id=items[-1].id).encode()
    return Page(items=items, next_cursor=next_cursor)


def run_statuses(conn: sqlite3.Connection) -> list[str]:
    return [str(r[0]) for r in conn.execute("SELECT DISTINCT status FROM agent_runs ORDER BY 1")]


def find_ids(conn: sqlite3.Connection, prefix: str, *, limit: int = 6) -> dict[str, list[str]]:
    """Ids starting with `prefix` (any case) in each table that has ids people type:
    {"execution": [...], "agent_run": [...]}, at most `limit` of each. An exact id
    comes back alone."""
    wanted = prefix.strip().upper()
    found: dict[str, list[str]] = {"execution": [], "agent_run": []}
    if not wanted:
        return found
    for kind, table in (("execution", "executions"), ("agent_run", "agent_runs")):
        exact = conn.execute(f"SELECT id FROM {table} WHERE id = ?", (wanted,)).fetchall()
        if exact:
            return {**{k: [] for k in found}, kind: [exact[0][0]]}
    for kind, table in (("execution", "executions"), ("agent_run", "agent_runs")):
        rows = rows_by_id(conn, f"SELECT id FROM {table}", wanted, limit=limit)
        found[kind] = [str(r[0]) for r in rows]
    return found


# -- function sets ---------------------------------------------------------------------------


class FunctionSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    set_name: str
    function: str
    version: int
    action: str
    changed_at: datetime
    author: str
    changes: int


def list_functions(conn: sqlite3.Connection) -> list[FunctionSummary]:
    """Every function of every set, with its latest change and how many it has had."""
    rows = conn.execute(
        "SELECT f.set_name, f.function, f.version, f.action, f.changed_at, "
        "f.author_kind || ' ' || f.author, "
        "(SELECT COUNT(*) FROM function_versions c WHERE c.set_name = f.set_name "
        " AND c.function = f.function) "
        "FROM function_versions f WHERE f.id = (SELECT MAX(id) FROM function_versions l "
        " WHERE l.set_name = f.set_name AND l.function = f.function) "
        "ORDER BY f.set_name, f.function").fetchall()
    return [FunctionSummary(set_name=r[0], function=r[1], version=r[2], action=r[3],
                            changed_at=datetime.fromisoformat(r[4]), author=r[5], changes=r[6])
            for r in rows]


# -- statistics ------------------------------------------------------------------------------


class Stats(BaseModel):
    """Counts for `runner logs stats`."""

    model_config = ConfigDict(frozen=True)

    executions: int
    by_status: dict[str, int]
    by_backend: dict[str, int]
    by_source: dict[str, int]
    by_day: dict[str, int]  # UTC date -> executions started that day (the last `days` days)
    oldest: datetime | None
    newest: datetime | None
    agent_runs: int
    agent_runs_by_status: dict[str, int]
    agent_turns: int
    function_versions: int
    replays: int
    database_bytes: int  # pages in use and free, i.e. the main file after a checkpoint
    free_bytes: int  # what VACUUM would give back


def stats(conn: sqlite3.Connection, *, days: int = 14, now: datetime | None = None) -> Stats:
    now = now or datetime.now(UTC)

    def grouped(sql: str, params: Sequence[Any] = ()) -> dict[str, int]:
        return {str(key): int(count) for key, count in conn.execute(sql, params).fetchall()}

    def scalar(sql: str) -> Any:
        return conn.execute(sql).fetchone()[0]

    since = to_iso(now - timedelta(days=days))
    oldest, newest = conn.execute("SELECT MIN(started_at), MAX(started_at) FROM executions").fetchone()
    page_size = int(scalar("PRAGMA page_size"))
    return Stats(
        executions=int(scalar("SELECT COUNT(*) FROM executions")),
        by_status=grouped("SELECT status, COUNT(*) FROM executions GROUP BY 1 ORDER BY 2 DESC"),
        by_backend=grouped("SELECT backend, COUNT(*) FROM executions GROUP BY 1 ORDER BY 2 DESC"),
        by_source=grouped("SELECT source, COUNT(*) FROM executions GROUP BY 1 ORDER BY 2 DESC"),
        by_day=grouped("SELECT substr(started_at, 1, 10), COUNT(*) FROM executions "
                       "WHERE started_at >= ? GROUP BY 1 ORDER BY 1", (since,)),
        oldest=datetime.fromisoformat(oldest) if oldest else None,
        newest=datetime.fromisoformat(newest) if newest else None,
        agent_runs=int(scalar("SELECT COUNT(*) FROM agent_runs")),
        agent_runs_by_status=grouped("SELECT status, COUNT(*) FROM agent_runs GROUP BY 1 "
                                     "ORDER BY 2 DESC"),
        agent_turns=int(scalar("SELECT COUNT(*) FROM agent_turns")),
        function_versions=int(scalar("SELECT COUNT(*) FROM function_versions")),
        replays=int(scalar("SELECT COUNT(*) FROM executions WHERE replay_of IS NOT NULL")),
        database_bytes=int(scalar("PRAGMA page_count")) * page_size,
        free_bytes=int(scalar("PRAGMA freelist_count")) * page_size,
    )
