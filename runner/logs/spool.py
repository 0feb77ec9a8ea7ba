"""The spool: where records wait when the log cannot take them, to be imported (whole,
idempotently) the next time a store opens the log read-write.

Its place is beside the log (`unlogged.jsonl`, `unlogged_runs.jsonl`). When that cannot
take a line either (the disk holding the log is full, or it is read-only), a private
directory of this user under the temporary directory does, one per log (named by a hash
of the log's path), so that a run on a full disk is still not lost as long as the
temporary directory is on another file system; the importer looks in both places.
Appends and imports hold an exclusive flock on the spool file, so that no line is lost
to a concurrent import.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from ..paths import private_temp_dir


def places(database: Path) -> list[Path]:
    """The directories a spool of `database` may be in: beside it, then the fallback."""
    fallback = _fallback(database)
    return [database.parent, *([fallback] if fallback is not None else [])]


def spool_files(database: Path, name: str) -> list[Path]:
    return [directory / name for directory in places(database)]


def append_to_spool(database: Path, name: str, data: bytes) -> Path:
    """Append `data` to the first spool of `database` that takes it; where it went. The
    error of the spool beside the log when none does."""
    first: OSError | None = None
    for directory in places(database):
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            append_locked(directory / name, data)
            return directory / name
        except OSError as exc:
            first = first or exc
    assert first is not None
    raise first


def _fallback(database: Path) -> Path | None:
    """This user's spool directory for `database` under the temporary directory, or None
    when there is no private place there (`runner.paths.private_temp_dir`)."""
    base = private_temp_dir()
    if base is None:
        return None
    key = hashlib.sha256(str(database.resolve()).encode()).hexdigest()[:16]
    return base / "unlogged" / key


def append_locked(path: Path, data: bytes) -> None:
    """Append under an exclusive flock, to the file currently at `path`.

    The importer deletes the spool while holding the same lock, so after taking the
    lock we check that our descriptor still is the file at `path`; if not, the bytes
    would land in a deleted file, so reopen and try again.
    """
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if not _same_file(fd, path):
                continue
            _write_all(fd, data)
            os.fsync(fd)
            return
        finally:
            os.close(fd)  # also releases the lock


def take_spool(path: Path, insert: Callable[[list[bytes]], int]) -> int:
    """Read the spool under its lock, hand the lines to `insert`, and delete it on success."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _same_file(fd, path):
            return 0  # another process imported and deleted it while we waited
        with os.fdopen(os.dup(fd), "rb") as spool:
            lines = [line for line in spool if line.strip()]
        count = insert(lines)
        os.unlink(path)
        return count
    finally:
        os.close(fd)


def has_bytes(path: Path) -> bool:
    """Whether a spool holds anything (an append that a full disk refused leaves it empty)."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
