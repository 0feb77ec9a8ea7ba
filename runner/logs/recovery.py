"""A damaged log: `runner logs check` says what is wrong, `runner logs recover` copies out
every row that can still be read.

Check: does the file open as the log (its schema parses), what SQLite's integrity check
finds, and which rows do not parse as records (bad JSON, a bad time) and so are skipped
where rows are listed.

Recover: a new log is made beside the damaged one, at this runner's schema, and each
table's rows are copied into it in rowid order, a batch at a time; a batch that cannot be
read (a damaged page) is read again row by row, so one bad page costs only its own rows.
The damaged file is read with SQLite's `writable_schema` on, which makes it skip schema
entries it cannot parse instead of refusing the whole file, and text that is not UTF-8 is
kept with U+FFFD in place of the bad bytes. The search index is not copied: it is rebuilt
from the rows. At the end the damaged file (with its -wal) is renamed aside,
`runner.db.damaged-<time>`, and the new one takes its place; nothing is deleted.
Other processes with the log open are found first (`processes_using`: every process
whose open files this user may see) and recovery is refused while they run, naming
them: a row they wrote meanwhile would go to the damaged file (or, once it is renamed,
to a new one that the recovered file replaces). `force` recovers anyway.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..errors import LogStoreError
from .faults import log_error
from .rows import DamagedRowError, lenient_text
from .store import LogStore

_BATCH = 200
# Tables not copied: SQLite's own, the search index (rebuilt from the rows), and the
# filter choices (a trigger fills them as executions are copied).
_NOT_COPIED = ("sqlite_", "executions_fts", "agent_turns_fts", "execution_facets")
_SHOWN = 50  # damaged rows listed by a check


class DamagedRow(BaseModel):
    model_config = ConfigDict(frozen=True)

    table: str
    id: str
    error: str


class CheckReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    open_error: str | None  # why the log does not open, if it does not
    integrity: list[str]  # ["ok"], or what SQLite's integrity check found
    damaged_rows: list[DamagedRow]
    rows: dict[str, int]  # rows per table that could be counted

    @property
    def ok(self) -> bool:
        return self.open_error is None and self.integrity == ["ok"] and not self.damaged_rows


class TableCopy(BaseModel):
    model_config = ConfigDict(frozen=True)

    table: str
    copied: int
    unreadable: int  # rows (or batches, where a row could not even be addressed) lost


class RecoverReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    damaged_copy: str  # where the damaged file was moved
    tables: list[TableCopy]

    @property
    def copied(self) -> int:
        return sum(table.copied for table in self.tables)


def check(path: Path) -> CheckReport:
    """What is wrong with the log at `path`, if anything (it is only read)."""
    if not path.is_file():
        raise LogStoreError(f"there is no log database at {path}",
                            fix="`runner logs path` shows where the log is")
    open_error = None
    try:
        LogStore(path, read_only=True).close()
    except LogStoreError as exc:
        open_error = exc.message
    with _lenient(path, skip_bad_schema=False) as conn:
        try:
            integrity = [str(row[0]) for row in conn.execute("PRAGMA integrity_check(20)")]
        except UnicodeDecodeError as exc:  # SQLite's own message quotes the damaged bytes
            integrity = [f"malformed database schema: {exc.object[:120]!r}"]
        except sqlite3.Error as exc:
            integrity = [str(exc)]
    damaged: list[DamagedRow] = []
    rows: dict[str, int] = {}
    with _lenient(path) as conn:
        for table, column, read in _record_readers():
            try:
                found = conn.execute(f"SELECT {column} FROM {table}").fetchall()
            except sqlite3.Error:
                continue
            rows[table] = len(found)
            for row in found:
                try:
                    read(row)
                except DamagedRowError as exc:
                    damaged.append(DamagedRow(table=table, id=str(row[_id_index(column)]),
                                              error=exc.message))
    return CheckReport(path=str(path), open_error=open_error, integrity=integrity,
                       damaged_rows=damaged[:_SHOWN], rows=rows)


def processes_using(path: Path) -> list[int]:
    """The pids of other processes that hold the log (or its -wal) open, as far as this
    user can see (Linux's /proc: every process of this user; all of them as root)."""
    wanted = set()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            info = os.stat(path.with_name(path.name + suffix))
            wanted.add((info.st_dev, info.st_ino))
    found = []
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            descriptors = os.scandir(f"/proc/{entry.name}/fd")
        except OSError:  # another user's, or gone
            continue
        with descriptors:
            for descriptor in descriptors:
                try:
                    info = os.stat(descriptor.path)
                except OSError:
                    continue
                if (info.st_dev, info.st_ino) in wanted:
                    found.append(int(entry.name))
                    break
    return sorted(found)


def recover(path: Path, *, force: bool = False) -> RecoverReport:
    """Copy every readable row of the log at `path` into a new log that takes its place;
    the damaged file is kept beside it (see the module docstring). Refused while other
    processes have the log open, unless `force`."""
    if not path.is_file():
        raise LogStoreError(f"there is no log database at {path}",
                            fix="`runner logs path` shows where the log is")
    users = [] if force else processes_using(path)
    if users:
        shown = ", ".join(str(pid) for pid in users[:10]) + (" ..." if len(users) > 10 else "")
        raise LogStoreError(
            f"{len(users)} other process(es) have {path} open (pid {shown}): what they write "
            "during recovery would be lost",
            fix="stop them (a viewer, an evaluation, a server), then run `runner logs recover` "
                "again; or `runner logs recover --force` to recover anyway")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    # In a directory of its own: a store opened beside the log would import the log's
    # spool into the new file before the old rows are in (and take their row numbers).
    work = path.with_name(f".{path.name}.recovering-{stamp}")
    fresh = work / path.name
    aside = path.with_name(f"{path.name}.damaged-{stamp}")
    try:
        work.mkdir()
        LogStore(fresh, keep_index=False).close()  # this runner's schema, empty
        copies = _copy_tables(path, fresh)
        LogStore(fresh).close()  # indexes the copied rows for search
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        if isinstance(exc, (sqlite3.Error, OSError)):
            raise log_error(fresh, exc, doing="write the recovered log") from exc
        raise
    for suffix in ("-wal", "", "-shm"):  # the -wal first: it belongs to the file beside it
        source = path.with_name(path.name + suffix)
        if source.exists():
            source.rename(aside.with_name(aside.name + suffix))
    fresh.rename(path)
    shutil.rmtree(work, ignore_errors=True)
    return RecoverReport(path=str(path), damaged_copy=str(aside), tables=copies)


def _copy_tables(source: Path, target: Path) -> list[TableCopy]:
    out = sqlite3.connect(target, isolation_level=None)
    try:
        out.execute("PRAGMA foreign_keys = OFF")  # a row whose parent was lost is kept
        tables = [str(row[0]) for row in out.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY rowid")
            if not str(row[0]).startswith(_NOT_COPIED)]
        copies = []
        with _lenient(source) as conn:
            for table in tables:
                columns = [str(row[1]) for row in out.execute(f"PRAGMA table_info({table})")]
                try:
                    there = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
                except sqlite3.Error:
                    there = set()
                shared = [c for c in columns if c in there]
                if not shared:
                    copies.append(TableCopy(table=table, copied=0, unreadable=0))
                    continue
                insert = (f"INSERT OR IGNORE INTO {table} ({', '.join(shared)}) "
                          f"VALUES ({', '.join('?' for _ in shared)})")
                copied = lost = 0
                out.execute("BEGIN")
                for row in _readable_rows(conn, table, shared):
                    if row is None:
                        lost += 1
                        continue
                    copied += out.execute(insert, row).rowcount
                out.execute("COMMIT")
                copies.append(TableCopy(table=table, copied=copied, unreadable=lost))
        return copies
    finally:
        out.close()


def _readable_rows(conn: sqlite3.Connection, table: str, columns: Sequence[str]
                   ) -> Iterator[Sequence[Any] | None]:
    """The table's rows in rowid order; None for each row (or unaddressable batch) that
    cannot be read."""
    listed = ", ".join(columns)
    try:
        top = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    except sqlite3.Error:
        top = None
    last = None
    while True:
        try:
            batch = conn.execute(
                f"SELECT rowid, {listed} FROM {table} WHERE rowid > ? ORDER BY rowid LIMIT ?",
                (last if last is not None else -(1 << 63), _BATCH)).fetchall()
        except sqlite3.OperationalError as exc:
            if "rowid" in str(exc):  # a WITHOUT ROWID table: one scan, as far as it reads
                yield from _scan(conn, f"SELECT {listed} FROM {table}")
                return
            batch = None
        except sqlite3.DatabaseError:
            batch = None
        if batch is not None:
            for row in batch:
                yield row[1:]
            if len(batch) < _BATCH:
                return
            last = batch[-1][0]
            continue
        # A damaged page: the rows it held are lost, the ones after it are looked up one
        # by one until a batch reads again.
        start = (last if last is not None else 0) + 1
        end = start + _BATCH if top is None else min(start + _BATCH, int(top) + 1)
        for rowid in range(start, end):
            try:
                found = conn.execute(f"SELECT {listed} FROM {table} WHERE rowid = ?",
                                     (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                yield None
                continue
            if found is not None:
                yield found
        if top is None or end > int(top):
            return
        last = end - 1


def _scan(conn: sqlite3.Connection, sql: str) -> Iterator[Sequence[Any] | None]:
    try:
        cursor = conn.execute(sql)
        while batch := cursor.fetchmany(_BATCH):
            yield from batch
    except sqlite3.DatabaseError:
        yield None


class _lenient:
    """A read-only connection to a possibly damaged log: bad text decoded with U+FFFD and,
    unless told otherwise, schema entries SQLite cannot parse skipped."""

    def __init__(self, path: Path, *, skip_bad_schema: bool = True) -> None:
        self._conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True,
                                     isolation_level=None)
        self._conn.text_factory = lenient_text
        if skip_bad_schema:
            self._conn.execute("PRAGMA writable_schema = ON")

    def __enter__(self) -> sqlite3.Connection:
        return self._conn

    def __exit__(self, *_: object) -> None:
        self._conn.close()


def _record_readers() -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(table, the columns a record is read from, how) for each kind of record people list."""
    from . import agent, evaluations, functions, store, trainings

    return [
        ("executions", ", ".join(store._COLUMNS), store._from_row),
        ("agent_runs", ", ".join(agent._RUN_COLUMNS), lambda row: agent._run_from_row(row, [])),
        ("agent_turns", ", ".join(agent._TURN_COLUMNS), agent._turn_from_row),
        ("evaluations", ", ".join(evaluations._EVAL_COLUMNS), evaluations._evaluation),
        ("evaluation_items", ", ".join(evaluations._ITEM_COLUMNS), evaluations._item),
        ("trainings", ", ".join(trainings._TRAINING_COLUMNS), trainings._training_row),
        ("training_epochs", ", ".join(trainings._EPOCH_COLUMNS), trainings._epoch),
        ("training_actions", ", ".join(trainings._ACTION_COLUMNS), trainings._action),
        ("function_versions", ", ".join(functions._COLUMNS), functions._record),
    ]


def _id_index(columns: str) -> int:
    """Where the id a person looks a row up by is: its own, else its run's or job's."""
    names = [name.strip() for name in columns.split(",")]
    for key in ("id", "run_id", "evaluation_id", "training_id"):
        if key in names:
            return names.index(key)
    return 0
