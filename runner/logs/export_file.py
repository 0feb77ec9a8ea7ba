"""`runner logs export` into a file or a pipe, whole or with a clear error.

A file is written under a temporary name in its own directory (so the rename cannot cross
file systems) and renamed over the target only at the end: a failed export (a full disk,
a record that cannot be read) leaves no empty or partial file behind, and an earlier file
of that name as it was. Standard output cannot be taken back; a failure there is still
named, with how many records got out, instead of a traceback at exit.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import IO

from ..errors import RunnerError
from .faults import is_disk_full
from .store import LogStore
from .transfer import export_lines


class ExportWriteError(RunnerError):
    """The export could not be written where it was asked to go."""

    code = "EXPORT_WRITE"


def export_to_file(store: LogStore, target: Path, *, run_id: str | None = None,
                   since: datetime | None = None) -> int:
    """Write the export to `target` whole (see the module docstring); how many records."""
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:
        raise _write_error(str(target), exc, 0, kept=True) from exc
    temporary = Path(name)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for line in export_lines(store, run_id=run_id, since=since):
                handle.write(line + "\n")
                count += 1
            handle.flush()
            os.fsync(handle.fileno())  # a full disk shows here at the latest, not after the rename
        os.replace(temporary, target)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise _write_error(str(target), exc, count, kept=True) from exc
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return count


def export_to_stream(store: LogStore, out: IO[str], *, run_id: str | None = None,
                     since: datetime | None = None) -> int:
    """Write the export to a stream (standard output); how many records."""
    count = 0
    try:
        for line in export_lines(store, run_id=run_id, since=since):
            out.write(line + "\n")
            count += 1
        out.flush()
    except OSError as exc:
        raise _write_error("standard output", exc, count, kept=False) from exc
    return count


def _write_error(where: str, exc: OSError, count: int, *, kept: bool) -> ExportWriteError:
    cause = exc.strerror or str(exc)
    left = (f"nothing was written to {where} (a file there before is as it was)" if kept
            else "what was written there is incomplete")
    after = f"after {count} record{'' if count == 1 else 's'}"
    if is_disk_full(exc, Path(where) if kept else Path.cwd()):
        return ExportWriteError(
            f"the disk holding {where} is full: the export stopped {after} ({cause}); {left}",
            fix="free space on that disk, or export to another one (-o PATH)")
    return ExportWriteError(f"could not write the export to {where}: {cause} ({after}); {left}",
                            fix="check that the directory exists and is writable, or export "
                                "elsewhere (-o PATH)")
