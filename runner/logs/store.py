"""The log store: every execution, in one SQLite file that any SQLite tool can read.

Design choices, and why:
- WAL mode with `synchronous=NORMAL`: readers never block the writer, several processes
  can write the same file (each waits up to the busy timeout for the write lock), and a
  process killed mid-write cannot corrupt the file or lose a committed row.
- One connection per `LogStore`, shared by all threads behind a lock: simple, and the
  writes are tiny, so serialising them costs nothing measurable.
- A result is never lost: if the database write fails for any reason, the record is
  appended to a spool file (`unlogged.jsonl` next to the database) and imported,
  idempotently, the next time a store opens that database. Agent runs have a spool of
  their own (`unlogged_runs.jsonl`, see `AgentLog.spool`), imported after it. When the
  spool beside the database cannot be written either (its disk is full), a private
  directory under the temporary directory takes it (`runner.logs.spool`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_jsonable_python

from ..encodable import encodable_text
from ..errors import ConfigurationError, LogStoreError, NotFoundError
from ..paths import log_db_path
from ..types import ExecutionRequest, ExecutionResult, Resources, Status
from .execution_files import insert_files, load_files, with_files
from .faults import is_busy, is_damaged, log_error
from .migrations import (
    MIGRATIONS,
    Migration,
    apply_migrations,
    latest_version,
    user_version,
)
from .query import ExecutionFilter, count_executions
from .rows import lenient_text, like_prefix, readable, to_iso, to_json, unreadable
from .spool import append_locked, append_to_spool, has_bytes, spool_files, take_spool

logger = logging.getLogger("runner.logs")

SPOOL_NAME = "unlogged.jsonl"
REJECTED_SPOOL_NAME = "unlogged.rejected.jsonl"
# Agent runs the database could not take (written whole, as `runner.logs.agent` reads them).
RUN_SPOOL_NAME = "unlogged_runs.jsonl"
DEFAULT_BUSY_TIMEOUT_S = 5.0
# The logs whose search index this process could not update, and said so (once each).
_INDEX_WARNED: set[Path] = set()

T = TypeVar("T")

_COLUMNS = (
    "id", "started_at", "source", "backend", "status", "exit_code", "duration_ms", "function",
    "code", "limits_json", "request_limits_json", "packages_json", "package_versions_json",
    "image", "stdout", "stderr", "stdout_truncated", "stderr_truncated",
    "error_type", "error_message", "error_traceback", "return_value_json",
    "cpu_ms", "max_rss_kb", "meta_json", "request_extra_json", "result_extra_json",
)  # fmt: skip
# Foreign keys, derived from the meta of a record (`agent_run`, `agent_turn`, `replay_of`).
# Each is set only when the row it names is there (a subquery, not a failed insert): an
# execution is written before its turn, and a spooled one may arrive before its run.
_LINKS = ("agent_run_id", "agent_turn", "replay_of")
_LINK_VALUES = (
    "(SELECT id FROM agent_runs WHERE id = :agent_run_id)",
    "(SELECT number FROM agent_turns WHERE run_id = :agent_run_id AND number = :agent_turn)",
    "(SELECT id FROM executions WHERE id = :replay_of)",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM executions"
_INSERT = (f"INSERT INTO executions ({', '.join(_COLUMNS + _LINKS)}) "
           f"VALUES ({', '.join([':' + c for c in _COLUMNS] + list(_LINK_VALUES))})")
_INSERT_OR_IGNORE = _INSERT.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# The fields of the models that have columns of their own; the rest goes to *_extra_json.
_REQUEST_COLUMN_FIELDS = frozenset({"code", "limits", "packages"})
_RESULT_COLUMN_FIELDS = frozenset({
    "id", "backend", "status", "exit_code", "stdout", "stderr", "stdout_truncated",
    "stderr_truncated", "error", "return_value", "duration_ms", "limits", "resources",
    "packages", "image", "started_at"})
_ERROR_COLUMN_FIELDS = frozenset({"type", "message", "traceback"})
_RESOURCES_COLUMN_FIELDS = frozenset({"cpu_ms", "max_rss_kb"})


class ExecutionRecord(BaseModel):
    """One logged execution: what was asked, what happened, who asked, and free-form notes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request: ExecutionRequest
    result: ExecutionResult
    source: str = "api"
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.result.id


class LogStore:
    """The executions log. Safe to share between threads; several processes may write too.

    Use as a context manager, or call `close()`. Opening runs pending migrations and
    imports any spooled records left by earlier failed writes.

    `read_only=True` opens the file with SQLite's `mode=ro` (every write fails inside
    SQLite itself), migrates nothing and imports nothing: for reading a log on a
    read-only mount, or for a viewer that must not change what it shows. It needs a
    database already at this runner's schema version.
    """

    _conn: sqlite3.Connection | None  # None once closed (or never opened: `for_writing`)

    def __init__(
        self,
        path: Path | str | None = None,
        *,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        migrations: Sequence[Migration] = MIGRATIONS,
        read_only: bool = False,
        keep_index: bool = True,
    ) -> None:
        self._state(path, read_only=read_only, keep_index=keep_index)
        if read_only:
            self._conn = open_read_only(self._path, busy_timeout_s, migrations)
        else:
            self._conn = _open(self._path, busy_timeout_s, migrations)
            self._import_spool()
            self._index_pending()  # rows a writer that died left out of the search index

    def _state(self, path: Path | str | None, *, read_only: bool, keep_index: bool) -> None:
        """Everything but the connection."""
        self._path = Path(path) if path is not None else log_db_path()
        self._lock = threading.RLock()
        self._read_only = read_only
        # A store opened only to read (`for_reading`) leaves the search index as it is:
        # searches match the rows not yet indexed anyway, and a reader must not warn
        # that it could not write.
        self._keep_index = keep_index and not read_only
        self._unavailable: LogStoreError | None = None  # why `for_writing` could not open it
        self._indexed_up_to = 0  # the search index's mark, as this store last saw it
        self._conn = None

    @classmethod
    def for_reading(cls, path: Path | str | None = None) -> LogStore:
        """A store to read from, opened read-only when nothing needs writing first.

        It opens read-write (creating, migrating, importing the spool) only when the file
        is missing, has an older schema, or has spooled records waiting; if that fails
        (a read-only mount), it reads what is there read-only.
        """
        where = Path(path) if path is not None else log_db_path()
        spooled = any(has_bytes(spool) for name in (SPOOL_NAME, RUN_SPOOL_NAME)
                      for spool in spool_files(where, name))
        if where.exists() and not spooled:
            try:
                return cls(where, read_only=True)
            except SchemaBehindError:
                pass  # migrate below
        try:
            return cls(where, keep_index=False)
        except LogStoreError:
            if not where.exists():
                raise
            return cls(where, read_only=True)

    @classmethod
    def for_writing(cls, path: Path | str | None = None) -> LogStore:
        """A store to log runs to that never stops a run from starting: when the database
        cannot be opened (a full disk, a read-only directory, a damaged file), a store whose
        records go to the spool (`spool_path`, imported the next time the log opens; if the
        spool cannot be written either, a warning names each record lost). Reads from it
        raise the error that kept it from opening."""
        try:
            return cls(path)
        except LogStoreError as exc:
            store = cls.__new__(cls)  # not opened: __init__ is what failed
            store._state(path, read_only=False, keep_index=False)
            store._unavailable = exc
            logger.warning("runs go on, but the log cannot be opened: %s (fix: %s)",
                           exc.message, exc.fix)
            return store

    @property
    def unavailable(self) -> LogStoreError | None:
        """Why this store (from `for_writing`) could not open its database; None if open."""
        return self._unavailable

    @property
    def read_only(self) -> bool:
        return self._read_only

    # -- lifecycle -------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def spool_path(self) -> Path:
        """Where records go when the database cannot take them."""
        return self._path.parent / SPOOL_NAME

    def close(self) -> None:
        """Close the connection. Idempotent. Later writes go to the spool, reads raise."""
        with self._lock:
            if self._conn is not None:
                if self._keep_index:
                    self._index_pending()
                self._conn.close()
                self._conn = None

    def __enter__(self) -> LogStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._conn is None else "open"
        return f"LogStore({str(self._path)!r}, {state})"

    # -- writing ---------------------------------------------------------------------

    def record_execution(
        self,
        request: ExecutionRequest,
        result: ExecutionResult,
        *,
        source: str = "api",
        meta: dict[str, Any] | None = None,
    ) -> None:
        """Log one execution. Never raises: a failed write goes to the spool file instead.

        The insert is a single autocommit statement, i.e. one transaction: after this
        returns the row is durable against a crash of this process.
        """
        try:
            row = _to_row(request, result, source, meta or {})
            with self._lock:
                conn = self._connection()
                if request.files or result.files:
                    with transaction(conn):  # the row and its files, or neither
                        seq = conn.execute(_INSERT, row).lastrowid or 0
                        insert_files(conn, request, result)
                else:
                    seq = conn.execute(_INSERT, row).lastrowid or 0
                if self._keep_index and seq - self._indexed_up_to >= INDEX_BATCH:
                    self._index_pending()
            return
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" in str(exc):
                # Same id twice means the same result was recorded twice; keep the first.
                logger.warning("execution %s is already in %s; kept the first record", result.id, self._path)
                return
            failure: BaseException = exc
        except Exception as exc:  # anything at all: the result must not be lost
            failure = exc
        self._spool(request, result, source, meta, failure)

    def _spool(
        self,
        request: ExecutionRequest,
        result: ExecutionResult,
        source: str,
        meta: dict[str, Any] | None,
        failure: BaseException,
    ) -> None:
        if failure is self._unavailable:
            failure = RuntimeError("the log could not be opened, as said when it was")
        elif isinstance(failure, LogStoreError):
            failure = RuntimeError(failure.message)  # its fix is the spool's business here
        try:
            line = _spool_line(request, result, source, meta)
            where = append_to_spool(self._path, SPOOL_NAME, line)
        except Exception as spool_exc:
            logger.warning(
                "could not log execution %s to %s (%s) nor to %s (%s); the record is lost",
                result.id, self._path, failure, self.spool_path, spool_exc,
            )  # fmt: skip
            return
        logger.warning(
            "could not log execution %s to %s (%s); saved it to %s, which is imported the "
            "next time the log is opened",
            result.id, self._path, failure, where,
        )  # fmt: skip

    def _import_spool(self) -> None:
        """Move records spooled by earlier failed writes into the database, then delete the
        spool; from each place a spool may be (`runner.logs.spool`), executions first.

        Failures here are logged, not raised: the spool stays and a later open retries.
        """
        for name, insert, what in ((SPOOL_NAME, self._insert_spooled, "execution(s)"),
                                   (RUN_SPOOL_NAME, self._insert_spooled_runs, "agent run(s)")):
            for path in spool_files(self._path, name):
                try:
                    count = take_spool(path, insert)
                except Exception as exc:
                    logger.warning("could not import %s into %s: %s; will retry on next open",
                                   path, self._path, exc)
                    return
                if count:
                    logger.info("imported %d spooled %s from %s", count, what, path)
                if path.parent != self._path.parent:  # a fallback place: leave nothing behind
                    with contextlib.suppress(OSError):
                        path.parent.rmdir()

    def _insert_spooled_runs(self, lines: list[bytes]) -> int:
        from .agent import import_spooled_runs  # the agent log builds on this module

        with self._lock:
            count, rejected = import_spooled_runs(self._connection(), lines)
        if rejected:
            rejected_path = self._path.parent / REJECTED_SPOOL_NAME
            append_locked(rejected_path, b"".join(_ends_with_newline(r) for r in rejected))
        return count

    def _insert_spooled(self, lines: list[bytes]) -> int:
        records, accepted, rejected = [], [], []
        for line in lines:
            try:
                records.append(_record_from_spool(line))
                accepted.append(line)
            except (ValueError, KeyError, TypeError, ValidationError):
                rejected.append(line)  # e.g. half a line from a writer killed mid-append
        with self._lock:
            conn = self._connection()
            try:
                with transaction(conn):
                    for record in records:
                        _insert_or_ignore(conn, record)
            except (sqlite3.IntegrityError, sqlite3.DataError, OverflowError):
                # One row SQLite cannot store (an out-of-range integer, say) must not hold
                # the others back for good: insert one by one, reject the ones that fail.
                kept = []
                for record, line in zip(records, accepted, strict=True):
                    try:
                        with transaction(conn):
                            _insert_or_ignore(conn, record)
                        kept.append(record)
                    except (sqlite3.IntegrityError, sqlite3.DataError, OverflowError):
                        rejected.append(line)
                records = kept
        self._index_pending()
        if rejected:
            # After the insert, so that a failed insert (spool kept) cannot move them twice.
            rejected_path = self._path.parent / REJECTED_SPOOL_NAME
            append_locked(rejected_path, b"".join(_ends_with_newline(r) for r in rejected))
            logger.warning(
                "%d unreadable line(s) in %s were moved to %s", len(rejected), self.spool_path, rejected_path
            )
        return len(records)

    def _index_pending(self) -> None:
        """Bring the search index up to the last row (see `index_pending`). A failure costs
        a warning: the rows are logged, and searches still match rows not yet indexed.
        A store opened to read leaves the index to the next writer."""
        if not self._keep_index:
            return
        with self._lock:
            conn = self._connection()
            try:
                with transaction(conn):
                    self._indexed_up_to = index_pending(conn)
            except sqlite3.Error as exc:
                # Once per log and process: every later write would fail the same way, and
                # the rows themselves are logged.
                if self._path not in _INDEX_WARNED:
                    _INDEX_WARNED.add(self._path)
                    logger.warning("%s; searches still find the rows not yet indexed",
                                   log_error(self._path, exc, doing="update the search index").message)

    # -- reading ---------------------------------------------------------------------

    def get_execution(self, id_or_prefix: str) -> ExecutionRecord:
        """The execution with this id, or the only one whose id starts with this prefix.

        Matching is case-insensitive (ULIDs are upper case, people type lower case).
        """
        wanted = id_or_prefix.strip()
        if not wanted:
            raise NotFoundError("an execution id or id prefix is required", fix=_LIST_HINT)
        exact = self._query(f"{_SELECT} WHERE id = ?", (wanted.upper(),))
        if exact:
            return self._with_files([_from_row(exact[0])])[0]
        where = "WHERE id LIKE ? ESCAPE '\\'"
        pattern = (like_prefix(wanted),)
        ids = [r[0] for r in self._query(f"SELECT id FROM executions {where} ORDER BY id LIMIT 5", pattern)]
        if len(ids) == 1:
            return self._with_files([_from_row(self._query(f"{_SELECT} WHERE id = ?", (ids[0],))[0])])[0]
        if not ids:
            raise NotFoundError(f"no execution with an id starting {wanted!r} in {self._path}", fix=_LIST_HINT)
        count = self._query(f"SELECT COUNT(*) FROM executions {where}", pattern)[0][0]
        shown = ", ".join(ids) + (", ..." if count > len(ids) else "")
        raise NotFoundError(f"{wanted!r} matches {count} executions ({shown})", fix="type more characters of the id")

    def list_executions(
        self,
        *,
        status: Status | str | None = None,
        backend: str | None = None,
        source: str | None = None,
        function: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        query: str | None = None,
        agent_run: str | None = None,
        limit: int | None = 20,
    ) -> list[ExecutionRecord]:
        """Executions matching every given filter, newest first; `limit=None` for all.

        `query` is full-text search words over code, output and errors (see
        `runner.logs.search`); `since`/`until` bound the start time. The records of a list
        carry no files (`get_execution` reads an execution with its files)."""
        if limit is not None and limit < 1:
            raise ConfigurationError(f"limit must be at least 1, got {limit}", fix="pass a positive limit or None")
        where = ExecutionFilter.of(status=status, backend=backend, source=source, function=function,
                                   since=since, until=until, query=query, agent_run=agent_run)
        def rows(conn: sqlite3.Connection) -> list[Any]:
            found = where.where(conn)
            sql = f"{_SELECT}{found.sql} ORDER BY started_at DESC, id DESC"
            params = [*found.params, *([limit] if limit is not None else [])]
            return conn.execute(sql + (" LIMIT ?" if limit is not None else ""), params).fetchall()

        return readable(self.read(rows), _from_row)

    def iter_executions(self, where: ExecutionFilter, *, batch: int = 500) -> Iterator[ExecutionRecord]:
        """Every matching execution, oldest first, read in batches (for exports)."""
        found = self.read(where.where)
        sql_where, params = found.sql, found.params
        last: tuple[str, str] | None = None
        while True:
            clause = sql_where
            extra: list[Any] = []
            if last is not None:
                keyset = "(started_at, id) > (?, ?)"
                clause = f"{clause} AND {keyset}" if clause else f" WHERE {keyset}"
                extra = list(last)
            rows = self._query(f"{_SELECT}{clause} ORDER BY started_at, id LIMIT ?",
                               [*params, *extra, batch])
            yield from self._with_files(readable(rows, _from_row))
            if len(rows) < batch:
                return
            last = (rows[-1][1], rows[-1][0])

    def count_executions(
        self,
        *,
        status: Status | str | None = None,
        backend: str | None = None,
        source: str | None = None,
    ) -> int:
        where = ExecutionFilter.of(status=status, backend=backend, source=source)
        return self.read(lambda conn: count_executions(conn, where))

    def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run `work` on the store's connection, under its lock and outside a transaction
        (reads, and statements that cannot be in one, like VACUUM); SQLite errors become
        LogStoreError. The queries of `runner.logs.query` are meant for this."""
        with self._lock:
            conn = self._connection()
            try:
                return work(conn)
            except (sqlite3.Error, UnicodeDecodeError) as exc:
                raise log_error(self._path, exc, doing="read the log database",
                                fix="retry; if it persists, check the file with `runner logs check`",
                                ) from exc

    def write(self, work: Callable[[sqlite3.Connection], T], *, verb: str = "write to") -> T:
        """Run `work` in one transaction (all or nothing) on the store's connection."""
        with self._lock:
            conn = self._connection()
            if self._read_only:
                raise LogStoreError(f"cannot {verb} {self._path}: it was opened read-only",
                                    fix="open it without read_only (it needs write access)")
            try:
                with transaction(conn):
                    return work(conn)
            except (sqlite3.Error, UnicodeDecodeError, OSError) as exc:
                raise log_error(self._path, exc, doing=f"{verb} the log database",
                                fix="check that the file is writable and not locked for long by "
                                    "another process") from exc

    # -- internals -------------------------------------------------------------------

    def _with_files(self, records: list[ExecutionRecord]) -> list[ExecutionRecord]:
        """The records with their files (execution_files.py), read in one query."""
        found = self.read(lambda conn: load_files(conn, [record.id for record in records]))
        if not found:
            return records
        filed = []
        for record in records:
            request, result = with_files(record.request, record.result, found.get(record.id))
            filed.append(record.model_copy(update={"request": request, "result": result}))
        return filed

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a read under the lock; SQLite errors become LogStoreError (translated once, here)."""
        return self.read(lambda conn: conn.execute(sql, params).fetchall())

    def _connection(self) -> sqlite3.Connection:
        if self._unavailable is not None:
            raise self._unavailable
        if self._conn is None:
            raise LogStoreError(f"the log store for {self._path} is closed", fix="open a new LogStore")
        return self._conn


_LIST_HINT = "run `runner logs list` to see recent ids"


# -- opening -----------------------------------------------------------------------------


def _open(path: Path, busy_timeout_s: float, migrations: Sequence[Migration]) -> sqlite3.Connection:
    """Connect, configure and migrate; every SQLite failure becomes a LogStoreError with a fix."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise log_error(path, exc, doing="create the directory of the log database",
                        fix="check the directory's permissions, or set RUNNER_HOME to a "
                            "writable directory") from exc
    conn: sqlite3.Connection | None = None
    try:
        # isolation_level=None: autocommit, so transactions are exactly the BEGINs we write.
        conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                               check_same_thread=False, factory=EncodableConnection)
        conn.text_factory = lenient_text
        _configure(conn, path, busy_timeout_s)
        apply_migrations(conn, path, migrations)
        return conn
    except BaseException as exc:
        if conn is not None:
            conn.close()
        if isinstance(exc, (sqlite3.Error, UnicodeDecodeError)):  # damaged schema text: the latter
            raise _open_error(path, exc) from exc
        raise


class SchemaBehindError(LogStoreError):
    """A database at an older schema version, opened read-only (so it cannot be migrated)."""


def open_read_only(path: Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
                   migrations: Sequence[Migration] = MIGRATIONS) -> sqlite3.Connection:
    """A connection that cannot write: SQLite's `mode=ro`, plus `query_only` as a second lock.

    A database in WAL mode needs its shared-memory file; on a read-only mount where that
    file cannot be created, the database is opened `immutable` instead (nothing can be
    writing to a read-only mount), unless its write-ahead log holds changes: an immutable
    open would not see them, and a log that silently misses rows is worse than an error.
    """
    if not path.is_file():
        raise LogStoreError(f"there is no log database at {path}",
                            fix="nothing has been logged there yet; check RUNNER_HOME "
                                "(`runner logs path` shows where the log is)")
    uri = path.resolve().as_uri()
    last_error: sqlite3.Error | UnicodeDecodeError | None = None
    for options in ("mode=ro", "mode=ro&immutable=1"):
        wal = path.with_name(path.name + "-wal")
        if "immutable" in options and wal.is_file() and wal.stat().st_size > 0:
            raise LogStoreError(
                f"cannot read {path} read-only: its write-ahead log ({wal.name}) holds changes "
                f"that only a writable open can bring in ({last_error})",
                fix="open the log once where it is writable (any `runner logs` command "
                    "checkpoints it), or copy the .db, .db-wal and .db-shm files together")
        conn = None
        try:
            conn = sqlite3.connect(f"{uri}?{options}", uri=True, timeout=busy_timeout_s,
                                   isolation_level=None, check_same_thread=False)
            conn.text_factory = lenient_text
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            conn.execute("PRAGMA query_only = ON")
            version = user_version(conn)  # the first read: fails here if the WAL index cannot open
            # The schema is parsed at the first statement that names a table: damaged, it
            # fails here, where the error can name the file, not in the middle of a page.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except (sqlite3.Error, UnicodeDecodeError) as exc:
            if conn is not None:
                conn.close()
            last_error = exc
            if isinstance(exc, UnicodeDecodeError) or _is_busy(exc) or is_damaged(exc):
                break
            continue
        latest = latest_version(migrations)
        if version != latest:
            conn.close()
            if version > latest:
                _raise_newer(path, version, latest)
            raise SchemaBehindError(
                f"{path} has schema version {version}, this runner reads version {latest}, and "
                "it was opened read-only, so it cannot be migrated",
                fix="run any `runner logs` command once with write access to the file (it "
                    "migrates it), or copy the file to a writable place and set RUNNER_HOME")
        return conn
    assert last_error is not None
    raise _open_error(path, last_error) from last_error


def _raise_newer(path: Path, version: int, latest: int) -> None:
    raise LogStoreError(
        f"{path} was written by a newer runner (schema version {version}, this runner knows "
        f"versions up to {latest})",
        fix="upgrade runner (pip install -U runner), or set RUNNER_HOME to another directory")


class EncodableConnection(sqlite3.Connection):
    """A connection whose statements take any text: a string parameter holding a lone
    surrogate (which SQLite cannot store, failing the whole write) is written with the
    surrogate as its `\\udXXX` escape (`runner.encodable`). Every connection that writes
    the log is one, so no caller can lose a row to the text a model or program produced."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, _encodable_parameters(parameters))

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> sqlite3.Cursor:
        return super().executemany(sql, (_encodable_parameters(p) for p in parameters))


def _encodable_parameters(parameters: Any) -> Any:
    if isinstance(parameters, dict):
        return {key: encodable_text(value) if isinstance(value, str) else value
                for key, value in parameters.items()}
    if isinstance(parameters, (list, tuple)):
        return [encodable_text(value) if isinstance(value, str) else value for value in parameters]
    return parameters


def connect(path: Path, *, read_only: bool, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
            ) -> sqlite3.Connection:
    """A short-lived connection to a database that is already at the current schema (the
    side tables open one per operation): read-only as `open_read_only` does, or read-write
    with foreign keys enforced."""
    if read_only:
        return open_read_only(path, busy_timeout_s)
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None,
                           factory=EncodableConnection)
    conn.text_factory = lenient_text
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        # As the store's own connection: in WAL mode a commit survives a crash of the
        # process without an fsync per statement (only a power cut can undo it).
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _configure(conn: sqlite3.Connection, path: Path, busy_timeout_s: float) -> None:
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    mode = _enable_wal(conn, busy_timeout_s)
    if str(mode).lower() != "wal":
        # Happens on file systems without shared memory (some network mounts): still
        # usable, but concurrent writers will block each other more.
        logger.warning("%s could not switch to WAL mode (journal_mode=%s)", path, mode)
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")


def _enable_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> str:
    """Switch to WAL, retrying while busy; returns the journal mode now in force.

    SQLite answers SQLITE_BUSY to this pragma without consulting the busy handler when
    another process is switching the same fresh file at the same moment, so the wait
    that the busy timeout gives every other statement is done here by hand.
    """
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _is_busy(exc: sqlite3.Error) -> bool:
    return is_busy(exc)


def _open_error(path: Path, exc: BaseException) -> LogStoreError:
    return log_error(path, exc, doing="open the log database")


class transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any error (the connection is in autocommit)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            self._conn.execute("ROLLBACK")


# -- rows ------------------------------------------------------------------------------


def _to_row(request: ExecutionRequest, result: ExecutionResult, source: str, meta: dict[str, Any]) -> dict[str, Any]:
    """The row of one execution: every field once, in its column or in the *_extra_json."""
    error = result.error
    # Files have tables of their own (execution_files.py).
    result_extra = result.model_dump(exclude=set(_RESULT_COLUMN_FIELDS) | {"files"},
                                     exclude_defaults=True)
    if error is not None:
        error_extra = error.model_dump(exclude=set(_ERROR_COLUMN_FIELDS), exclude_defaults=True)
        if error_extra:
            result_extra["error"] = error_extra  # e.g. the structured detail of invalid arguments
    resources_extra = result.resources.model_dump(exclude=set(_RESOURCES_COLUMN_FIELDS), exclude_defaults=True)
    if resources_extra:
        result_extra["resources"] = resources_extra  # e.g. the cluster node that ran it
    return {
        "id": result.id,
        "started_at": to_iso(result.started_at),
        "source": source,
        "backend": result.backend,
        "status": str(result.status),
        "exit_code": result.exit_code,
        "duration_ms": result.duration_ms,
        "function": request.call.name if request.call is not None else None,
        "code": request.code,
        "limits_json": result.limits.model_dump_json(),
        "request_limits_json": request.limits.model_dump_json(),
        "packages_json": json.dumps(list(request.packages)),
        "package_versions_json": json.dumps(result.packages, sort_keys=True),
        "image": result.image,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "stdout_truncated": int(result.stdout_truncated),
        "stderr_truncated": int(result.stderr_truncated),
        "error_type": error.type if error else None,
        "error_message": error.message if error else None,
        "error_traceback": error.traceback if error else None,
        "return_value_json": _json(result.return_value),
        "cpu_ms": result.resources.cpu_ms,
        "max_rss_kb": result.resources.max_rss_kb,
        "meta_json": _json(meta),
        "request_extra_json": _json(request.model_dump(exclude=set(_REQUEST_COLUMN_FIELDS) | {"files"},
                                                       exclude_defaults=True)),
        "result_extra_json": _json(result_extra),
        **_links(meta),
    }


def _links(meta: dict[str, Any]) -> dict[str, Any]:
    """The foreign keys a record's meta names (None where it names nothing usable)."""
    run, turn, original = meta.get("agent_run"), meta.get("agent_turn"), meta.get("replay_of")
    return {
        "agent_run_id": run if isinstance(run, str) else None,
        "agent_turn": turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
        "replay_of": original if isinstance(original, str) else None,
    }


def _from_row(row: Sequence[Any]) -> ExecutionRecord:
    """Columns first; the *_extra_json supply the fields that have no column of their own."""
    r = dict(zip(_COLUMNS, row, strict=True))
    try:
        request = json.loads(r["request_extra_json"] or "{}")
        request.update(
            code=r["code"],
            limits=json.loads(r["request_limits_json"]),
            packages=json.loads(r["packages_json"]),
        )
        result = json.loads(r["result_extra_json"] or "{}")
        error_extra = result.pop("error", None)
        resources_extra = result.pop("resources", None)
        error = None
        if r["error_type"] is not None:
            error = {**(error_extra if isinstance(error_extra, dict) else {}),
                     "type": r["error_type"], "message": r["error_message"] or "",
                     "traceback": r["error_traceback"] or ""}
        result.update(
            id=r["id"],
            backend=r["backend"],
            status=Status(r["status"]),
            exit_code=r["exit_code"],
            stdout=r["stdout"],
            stderr=r["stderr"],
            stdout_truncated=bool(r["stdout_truncated"]),
            stderr_truncated=bool(r["stderr_truncated"]),
            error=error,
            return_value=json.loads(r["return_value_json"]),
            duration_ms=r["duration_ms"],
            limits=json.loads(r["limits_json"]),
            resources=Resources(**(resources_extra if isinstance(resources_extra, dict) else {}),
                                cpu_ms=r["cpu_ms"], max_rss_kb=r["max_rss_kb"]),
            packages=json.loads(r["package_versions_json"]),
            image=r["image"],
            started_at=datetime.fromisoformat(r["started_at"]),
        )
        return ExecutionRecord(request=ExecutionRequest.model_validate(request),
                               result=ExecutionResult.model_validate(result),
                               source=r["source"], meta=json.loads(r["meta_json"]))
    except (ValueError, ValidationError, TypeError) as exc:  # json and enum errors are ValueErrors
        raise unreadable(f"execution {r['id']}", exc) from exc


def insert_records(conn: sqlite3.Connection, records: Iterable[ExecutionRecord]) -> int:
    """Insert the records whose ids are not in the log yet, and index them; how many were
    new. For imports: the caller holds the transaction (`LogStore.write`)."""
    added = sum(_insert_or_ignore(conn, record) for record in records)
    index_pending(conn)
    return added


def _insert_or_ignore(conn: sqlite3.Connection, record: ExecutionRecord) -> int:
    """Insert a record (and its files) unless its id is in the log; 1 if it was new."""
    cursor = conn.execute(_INSERT_OR_IGNORE, _to_row(record.request, record.result,
                                                     record.source, record.meta))
    if cursor.rowcount > 0:
        insert_files(conn, record.request, record.result)
        return 1
    return 0


# Rows are added to the search index in batches of about this many: one index update per
# execution would cost as much as writing the execution itself.
INDEX_BATCH = 64
_INDEX_ROWS = (
    "INSERT INTO executions_fts (rowid, code, stdout, stderr, error_type, error_message, "
    "error_traceback) SELECT seq, code, stdout, stderr, error_type, error_message, "
    "error_traceback FROM executions WHERE seq > ? ORDER BY seq")


def index_pending(conn: sqlite3.Connection) -> int:
    """Add the rows after the index's mark to the search index and move the mark; returns
    the new mark. The caller holds a write transaction, so no row arrives meanwhile."""
    mark = int(conn.execute("SELECT indexed_up_to FROM executions_fts_state").fetchone()[0])
    last = int(conn.execute("SELECT coalesce(max(seq), 0) FROM executions").fetchone()[0])
    if last > mark:
        conn.execute(_INDEX_ROWS, (mark,))
        conn.execute("UPDATE executions_fts_state SET indexed_up_to = ?", (last,))
    return last


def _json(value: Any) -> str:
    # The executions table has always stored its JSON ASCII-only; kept, so that rows
    # written before and after read alike in any SQLite tool.
    return to_json(value, ascii_only=True)


# -- the spool ---------------------------------------------------------------------------


def _spool_line(request: ExecutionRequest, result: ExecutionResult, source: str, meta: dict[str, Any] | None) -> bytes:
    record = {
        "request": to_jsonable_python(request, fallback=repr),
        "result": to_jsonable_python(result, fallback=repr),
        "source": source,
        "meta": to_jsonable_python(meta or {}, fallback=repr),
    }
    # One line per record: json.dumps escapes newlines inside strings.
    return (json.dumps(record) + "\n").encode()


def _record_from_spool(line: bytes) -> ExecutionRecord:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("a spool line must be a JSON object")
    # From JSON text, so that the files' bytes are read back from their base64.
    request = ExecutionRequest.model_validate_json(json.dumps(data["request"]))
    result = ExecutionResult.model_validate_json(json.dumps(data["result"]))
    return ExecutionRecord(request=request, result=result, source=str(data.get("source") or "api"),
                           meta=dict(data.get("meta") or {}))


def _ends_with_newline(line: bytes) -> bytes:
    return line if line.endswith(b"\n") else line + b"\n"
