"""Base of the log's side tables (function versions, agent runs): their own short-lived
SQLite connections on the log database, opened per operation and closed at once.

Each table keeps its rows in the same file as the executions (one database to review);
it does not share the LogStore's connection, so a long agent run never holds that one.
Given a read-only store, its connections are read-only too.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..errors import LogStoreError
from .store import DEFAULT_BUSY_TIMEOUT_S, LogStore, connect

T = TypeVar("T")


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
            except sqlite3.Error as exc:
                raise self._error(verb, exc) from exc
            try:
                return work(conn)
            except sqlite3.Error as exc:
                raise self._error(verb, exc) from exc
            finally:
                conn.close()

    def _error(self, verb: str, exc: sqlite3.Error) -> LogStoreError:
        return LogStoreError(f"cannot {verb} {self.what} in {self._path}: {exc}",
                             fix="check that the log database is writable and not locked for "
                                 "long; `runner logs path` shows where it is")
