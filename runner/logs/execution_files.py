"""An execution's files in the log: each content stored once, by its sha256.

Two tables (migration 10): `file_blobs` holds each distinct content once (its sha256,
size and bytes), `execution_files` names the files of each execution (the ones handed to
it, `in`, and the ones it made or changed, `out`), in order, with their media type, by
the sha256 of their content. A file two runs made alike is stored once; pruning an
execution drops its rows, and the blobs no row names any more go with them.

What the log keeps of the bytes is bounded: a run returns at most its
`max_returned_files_mb`, and all the blobs of output files together at most
RUNNER_LOG_FILES_MB (1024 by default). Past that an output file is recorded (name, size,
type, digest) without its bytes, and reads back with `kept=False`. Files handed to a run
are always kept: a replay needs them.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable
from typing import Any

from ..files import media_type
from ..types import ExecutionRequest, ExecutionResult, InputFile, OutputFile

CAP_VARIABLE = "RUNNER_LOG_FILES_MB"
DEFAULT_CAP_MB = 1024
IN, OUT = "in", "out"


def cap_bytes() -> int:
    """How many bytes of output files the whole log keeps (RUNNER_LOG_FILES_MB)."""
    try:
        return max(0, int(os.environ.get(CAP_VARIABLE, DEFAULT_CAP_MB))) * 1024 * 1024
    except ValueError:
        return DEFAULT_CAP_MB * 1024 * 1024


def insert_files(conn: sqlite3.Connection, request: ExecutionRequest, result: ExecutionResult) -> None:
    """The files of one execution (just inserted); the caller holds the transaction."""
    rows: list[tuple[str, int, str, int, str, str]] = []
    for position, given in enumerate(request.files):
        digest, size = _store(conn, given.data, always=True)
        rows.append((IN, position, given.name, size, media_type(given.data), digest))
    for position, made in enumerate(result.files):
        _store(conn, made.data, always=False, digest=made.sha256, kept=made.kept)
        rows.append((OUT, position, made.name, made.size, made.media_type, made.sha256))
    conn.executemany(
        "INSERT OR IGNORE INTO execution_files (execution_id, direction, position, name, size, "
        "media_type, sha256) VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(result.id, *row) for row in rows])


def _store(conn: sqlite3.Connection, data: bytes, *, always: bool, digest: str | None = None,
           kept: bool = True) -> tuple[str, int]:
    """Store `data` once under its digest (computed if not given); within the cap unless
    `always`. A blob first stored without its bytes gets them when a later copy fits."""
    digest = digest or hashlib.sha256(data).hexdigest()
    row = conn.execute("SELECT data IS NOT NULL FROM file_blobs WHERE sha256 = ?", (digest,)).fetchone()
    if row is not None and row[0]:
        return digest, len(data)
    keep = kept and (always or _stored_bytes(conn) + len(data) <= cap_bytes())
    if row is None:
        conn.execute("INSERT INTO file_blobs (sha256, size, data) VALUES (?, ?, ?)",
                     (digest, len(data), data if keep else None))
    elif keep:
        conn.execute("UPDATE file_blobs SET data = ? WHERE sha256 = ?", (data, digest))
    return digest, len(data)


def _stored_bytes(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(sum(size), 0) FROM file_blobs "
                            "WHERE data IS NOT NULL").fetchone()[0])


def load_files(conn: sqlite3.Connection, ids: Iterable[str]
               ) -> dict[str, tuple[list[InputFile], list[OutputFile]]]:
    """The files of the executions `ids` (those that have any), in order."""
    wanted = list(dict.fromkeys(ids))
    found: dict[str, tuple[list[InputFile], list[OutputFile]]] = {}
    for start in range(0, len(wanted), 500):  # SQLite limits the parameters of one statement
        chunk = wanted[start:start + 500]
        rows = conn.execute(
            "SELECT f.execution_id, f.direction, f.name, f.size, f.media_type, f.sha256, b.data "
            "FROM execution_files f JOIN file_blobs b ON b.sha256 = f.sha256 "
            f"WHERE f.execution_id IN ({', '.join('?' for _ in chunk)}) "
            "ORDER BY f.execution_id, f.direction, f.position", chunk).fetchall()
        for execution_id, direction, name, size, sniffed, digest, data in rows:
            inputs, outputs = found.setdefault(execution_id, ([], []))
            if direction == IN:
                inputs.append(InputFile(name=name, data=bytes(data or b"")))
            else:
                outputs.append(OutputFile(name=name, size=size, media_type=sniffed,
                                          sha256=digest, data=bytes(data or b""),
                                          kept=data is not None))
    return found


def with_files(request: ExecutionRequest, result: ExecutionResult,
               files: tuple[list[InputFile], list[OutputFile]] | None
               ) -> tuple[ExecutionRequest, ExecutionResult]:
    if files is None:
        return request, result
    inputs, outputs = files
    return (request.model_copy(update={"files": tuple(inputs)}),
            result.model_copy(update={"files": tuple(outputs)}))


def drop_orphans(conn: sqlite3.Connection) -> int:
    """Delete the blobs no execution names any more; how many went."""
    cursor = conn.execute("DELETE FROM file_blobs WHERE sha256 NOT IN "
                          "(SELECT sha256 FROM execution_files)")
    return max(cursor.rowcount, 0)


def file_row(conn: sqlite3.Connection, execution_id: str, direction: str, position: int
             ) -> dict[str, Any] | None:
    """One file of an execution, bytes included (the viewer serves it from this)."""
    row = conn.execute(
        "SELECT f.name, f.size, f.media_type, f.sha256, b.data FROM execution_files f "
        "JOIN file_blobs b ON b.sha256 = f.sha256 WHERE f.execution_id = ? AND "
        "f.direction = ? AND f.position = ?", (execution_id, direction, position)).fetchone()
    if row is None:
        return None
    name, size, media_type, digest, data = row
    return {"name": name, "size": size, "media_type": media_type, "sha256": digest,
            "data": bytes(data) if data is not None else None}
