"""Base of the log's side tables (function versions, agent runs): their own short-lived
SQLite connections on the log database, opened per operation and closed at once.

Each table keeps its rows in the same file as the executions (one database to review);
it does not share the LogStore's connection, so a long agent run never holds that one.
Given a read-only store, its connections are read-only too.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

from ..errors import LogStoreError, NotFoundError
from .faults import log_error
from .rows import readable, rows_by_id, shown_ids
from .store import DEFAULT_BUSY_TIMEOUT_S, LogStore, connect, transaction

T = TypeVar("T")
R = TypeVar("R")


class SideTable:
    """`what` names the table's contents in error messages ("the agent log")."""

    what = "the log"

    def __init__(self, store: LogStore | Path | str | None = None, *,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self._read_only = False
        if isinstance(store, LogStore):
            self._path = store.path  # an open store has applied every migration
            self._read_only = store.read_only
        else:
            if store is None:
                from ..paths import log_db_path

                store = log_db_path()
            self._path = Path(store)
            LogStore(self._path).close()  # create or migrate the database
        self._timeout = busy_timeout_s
        self._lock = threading.Lock()

    @classmethod
    def for_reading(cls, path: Path | str | None = None) -> Self:
        """The table of the log at `path` (the default log when None), read-only when
        nothing needs writing first (`LogStore.for_reading`): for commands that only read,
        which then work on a full disk or a read-only mount as well."""
        with LogStore.for_reading(path) as store:
            return cls(store)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def read_only(self) -> bool:
        return self._read_only

    def _run(self, work: Callable[[sqlite3.Connection], T], verb: str) -> T:
        with self._lock:
            try:
                conn = connect(self._path, read_only=self._read_only, busy_timeout_s=self._timeout)
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise self._error(verb, exc) from exc
            try:
                return work(conn)
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise self._error(verb, exc) from exc
            finally:
                conn.close()

    def _run_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` in one write transaction (all or nothing) on a connection of its own."""
        def transacted(conn: sqlite3.Connection) -> T:
            with transaction(conn):
                return work(conn)

        return self._run(transacted, "write to")

    def _find_row(self, select: str, id_or_prefix: str, plural: str) -> Sequence[Any] | None:
        """The row with this id, or the only one whose id starts with it (any case); None
        when none does. `select` is `SELECT ... FROM table`; `plural` names its rows in the
        error for a prefix that fits several."""
        wanted = id_or_prefix.strip().upper()
        if not wanted:
            return None
        rows = self._run(lambda conn: rows_by_id(conn, select, wanted), "read")
        if len(rows) > 1:
            raise NotFoundError(f"{id_or_prefix!r} matches several {plural} "
                                f"({shown_ids([r[0] for r in rows])})",
                                fix="type more characters of the id")
        return rows[0] if rows else None

    def _newest(self, select: str, time_column: str, *, where: Sequence[tuple[str, Any]] = (),
                before: tuple[str, str] | None = None, limit: int | None = None) -> list[Any]:
        """Rows newest first (by `time_column`, then id). `where` holds (clause, value)
        pairs; with `before` (time, id), only the rows after that one in this order (the
        next page)."""
        clauses = [clause for clause, _ in where]
        params: list[Any] = [value for _, value in where]
        if before is not None:
            clauses.append(f"({time_column}, id) < (?, ?)")
            params += [*before]
        sql = select + (" WHERE " + " AND ".join(clauses) if clauses else "")
        sql += f" ORDER BY {time_column} DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return self._run(lambda conn: conn.execute(sql, params).fetchall(), "read")

    def _error(self, verb: str, exc: BaseException) -> LogStoreError:
        return log_error(self._path, exc, doing=f"{verb} {self.what}",
                         fix="check that the log database is writable and not locked for long; "
                             "`runner logs path` shows where it is")


class RecordTable(SideTable, Generic[R]):
    """A side table whose rows people name by id (agent runs, evaluations, trainings): the
    row with an id or a unique id prefix, and pages of rows newest first.

    A subclass says what its rows are (`noun`, `plural`), how to select and read one
    (`select`, `_record`), and where people list them (`list_hint`, the fix of a miss)."""

    noun: ClassVar[str]
    plural: ClassVar[str]
    select: ClassVar[str]  # SELECT <the record's columns> FROM <table>
    list_hint: ClassVar[str]

    def _record(self, row: Sequence[Any]) -> R:
        raise NotImplementedError

    def find(self, id_or_prefix: str) -> R | None:
        """The row with this id, or the only one whose id starts with it; None if none does."""
        row = self._find_row(self.select, id_or_prefix, self.plural)
        return self._record(row) if row is not None else None

    def get(self, id_or_prefix: str) -> R:
        record = self.find(id_or_prefix)
        if record is None:
            raise NotFoundError(f"no {self.noun} with an id starting {id_or_prefix!r} in "
                                f"{self._path}", fix=self.list_hint)
        return record

    def _pages(self, *, limit: int | None, before: tuple[str, str] | None) -> list[R]:
        """Newest first by creation; with `before` (created_at, id), the ones after it."""
        rows = self._newest(self.select, "created_at", before=before, limit=limit)
        return readable(rows, self._record)
