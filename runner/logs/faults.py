"""Why the log's file cannot be used, named so that a person can act on it.

SQLite reports a full disk in several ways: SQLITE_FULL ("database or disk is full") when
a page cannot be written, but only "disk I/O error" or "unable to open database file" when
the write-ahead log or its index (the -wal and -shm files a WAL database needs before its
first read) cannot be created. Python reports ENOSPC. All of them are "the disk holding
<path> is full", with the fix, when the file system says it has no room left; likewise a
read-only file system, a damaged file and a lock held elsewhere each get their own words.
Every place that turns a failure of the log into a LogStoreError goes through `log_error`.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from ..errors import LogStoreError

# Below this much free space, an I/O error of SQLite is taken for a full disk: a WAL
# index alone needs 32 kB, and the file systems SQLite fails on this way report 0 left.
_NEARLY_FULL_BYTES = 1 << 20
_IO_ERRORS = ("SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_FULL")


def free_bytes(path: Path) -> int | None:
    """Bytes free on the file system holding `path` (as the caller may use them), or None."""
    for where in (path, *path.parents):
        try:
            found = os.statvfs(where)
        except OSError:
            continue
        blocks = found.f_bfree if os.geteuid() == 0 else found.f_bavail
        return blocks * found.f_frsize
    return None


def on_read_only_fs(path: Path) -> bool:
    for where in (path, *path.parents):
        try:
            return bool(os.statvfs(where).f_flag & os.ST_RDONLY)
        except OSError:
            continue
    return False


def is_disk_full(exc: BaseException, path: Path) -> bool:
    """Whether `exc` (from SQLite or the OS, on `path`) is a full disk."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if not isinstance(exc, sqlite3.Error):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL") or "disk is full" in str(exc):
        return True
    if name.startswith(_IO_ERRORS) or "disk I/O error" in str(exc):
        free = free_bytes(path)
        return free is not None and free < _NEARLY_FULL_BYTES
    return False


def is_read_only(exc: BaseException, path: Path) -> bool:
    if isinstance(exc, OSError) and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return True
    if not isinstance(exc, sqlite3.Error):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_READONLY") or "readonly database" in str(exc):
        return True
    return name.startswith(_IO_ERRORS) and on_read_only_fs(path)


def is_damaged(exc: BaseException) -> bool:
    """A file that is not a database, or a database whose pages or schema are damaged."""
    if isinstance(exc, UnicodeDecodeError):
        return True  # text in the schema (or a row) that is not UTF-8: damaged bytes
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    return name in ("SQLITE_NOTADB", "SQLITE_CORRUPT") or name.startswith("SQLITE_CORRUPT") \
        or "not a database" in text or "malformed" in text


def is_busy(exc: BaseException) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def disk_full_error(path: Path, doing: str, exc: BaseException) -> LogStoreError:
    return LogStoreError(
        f"the disk holding {path} is full: could not {doing} ({exc})",
        fix=f"free space on that disk (`df -h {path.parent}` shows what is left), or set "
            "RUNNER_HOME to a directory on another disk")


def log_error(path: Path, exc: BaseException, *, doing: str,
              fix: str | None = None) -> LogStoreError:
    """The LogStoreError for `exc`, raised while trying to `doing` ("open the log",
    "write to the agent log") the log at `path`. `fix` is the advice for a failure with
    no cause of its own."""
    detail = f"{type(exc).__name__}: {exc}" if not isinstance(exc, sqlite3.Error) else str(exc)
    if isinstance(exc, UnicodeDecodeError):
        # SQLite's own message quotes the damaged bytes, which are not text.
        detail = f"bytes that are not text: {exc.object[:120]!r}"
    if is_disk_full(exc, path):
        return disk_full_error(path, doing, exc)
    if is_damaged(exc):
        return LogStoreError(
            f"{path} is damaged: could not {doing} ({detail})",
            fix="`runner logs recover` copies every readable row into a new log and keeps the "
                "damaged file beside it (`runner logs check` shows what is readable); or move "
                f"it away (mv {path} {path}.bad), or set RUNNER_HOME to another directory")
    if is_busy(exc):
        return LogStoreError(
            f"{path} is locked by another process: could not {doing} ({detail})",
            fix="retry when the other runner process is done, or set RUNNER_HOME to another "
                "directory")
    if is_read_only(exc, path):
        return LogStoreError(
            f"{path} cannot be written (a read-only file system, or no permission): could "
            f"not {doing} ({detail})",
            fix="reading commands work as they are (they open the log read-only); to run and "
                "log, make it writable or set RUNNER_HOME to a writable directory")
    return LogStoreError(
        f"could not {doing} {path} ({detail})",
        fix=fix or "check that the file and its directory are writable, or set RUNNER_HOME "
                   "to another directory")
