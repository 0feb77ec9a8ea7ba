"""A run's files, in the child: writing the ones it was given, finding the ones it made.

Both happen in the run's working directory (its own tmpfs on the local tiers), by the
run's own process, as the run's user, after its confinement is in place:

- `write_inputs`, before the code starts: each name checked again (`name_problem`, the
  one rule runner.files applies on the host too), every directory on the way opened with
  O_NOFOLLOW from the working directory down and each file made with O_EXCL (nothing of a
  link, device or FIFO is followed, even in a session whose earlier block planted one);
- `snapshot`, just before the code starts, and `changed_files`, once it has ended: the
  regular files made or changed meanwhile (not links, devices, FIFOs or sockets), read
  whole, in name order, while they fit within the cap; the rest are named as left out.

Stdlib only: this runs inside the sandbox images too.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import Any

from .protocol import BLOBS

MAX_DEPTH = 16
MAX_PART_CHARS = 255
MAX_OUTPUT_FILES = 256
MAX_SCANNED = 20_000  # entries looked at when finding what changed, whatever a run made

# (inode, size, modification time, change time): what tells a file changed.
Stamp = tuple[int, int, int, int]


# Unicode's bidirectional marks, embeddings, overrides and isolates.
_DIRECTION_MARKS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                             "\u2066\u2067\u2068\u2069")


def name_problem(name: str) -> str | None:
    """Why `name` is not a relative path inside the working directory, or None."""
    if not name:
        return "is empty"
    if name.startswith("/"):
        return "is an absolute path; name a file inside the run's directory"
    if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in name):
        return "holds a control character"
    if any(0xD800 <= ord(ch) < 0xE000 for ch in name):
        return "is not valid UTF-8"
    if any(ch in _DIRECTION_MARKS for ch in name):
        # They make a name show as another (`\u202egnp.html` shows as "lmth.png").
        return "holds a text-direction character"
    parts = name.split("/")
    if len(parts) > MAX_DEPTH:
        return f"has more than {MAX_DEPTH} parts"
    for part in parts:
        if part in ("", ".", ".."):
            return "has an empty, '.' or '..' part"
        if len(part) > MAX_PART_CHARS:
            return f"has a part longer than {MAX_PART_CHARS} characters"
    return None


def write_inputs(files: Any, blobs: Any = None) -> None:
    """Write the request's files ([[name, index], ...]: each file's bytes are the request's
    attachment `index`) into the working directory. OSError (with the name) if one cannot
    be written; ValueError for a name or entry that is not what the host sends."""
    if not files:
        return
    blobs = blobs if isinstance(blobs, list) else []
    for item in files:
        name, index = item
        problem = name_problem(name) if isinstance(name, str) else "is not a string"
        if problem is not None:
            raise ValueError(f"input file {name!r} {problem}")
        if type(index) is not int or not 0 <= index < len(blobs):
            raise ValueError(f"input file {name!r} has no content in the request")
        data = blobs[index]
        try:
            _write_input(name, data)
        except OSError as exc:  # say which file (a full directory, a directory in the way)
            raise OSError(exc.errno, f"input file {name!r}: {exc.strerror or exc}") from None


def _write_input(name: str, data: bytes) -> None:
    here, leaf = open_parent(".", name)
    try:
        try:
            os.unlink(leaf, dir_fd=here)  # a session's earlier file of that name
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise OSError(errno.EISDIR, "a directory is in the way") from None
        fd = os.open(leaf, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                     dir_fd=here)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    finally:
        os.close(here)


def open_parent(root: str, name: str) -> tuple[int, str]:
    """(a descriptor of the directory `name` is in, below `root`, and its last part): every
    directory on the way made if missing and opened without following a link, so that
    nothing a link points at is written. The caller closes the descriptor."""
    *directories, leaf = name.split("/")
    here = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in directories:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=here)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            os.close(here)
            here = inner
    except BaseException:
        os.close(here)
        raise
    return here, leaf


def snapshot() -> dict[str, Stamp]:
    """Every regular file below the working directory, by name, with its stamp (and each
    directory too deep to look into, by its name and a trailing slash)."""
    found: dict[str, Stamp] = {}
    files, too_deep, _ = _walk()
    for name, info in files + too_deep:
        found[name] = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    return found


def changed_files(before: dict[str, Stamp], cap_bytes: int) -> dict[str, Any]:
    """The regular files made or changed since `before`, as the report carries them:
    {"files": [[name, index], ...], "files_left_out": [...], "files_truncated": bool,
    BLOBS: [bytes, ...]} (each file's bytes are attachment `index`; protocol.py), empty
    when nothing changed. What is left out says why where it is not the size cap: a name
    that cannot be carried, a directory too deep to look into, an end to the looking."""
    files_found, too_deep, stopped = _walk()
    changed, notes = [], []
    for name, info in files_found:
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if before.get(name) != stamp:
            changed.append(name)
    for name, info in too_deep:
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if before.get(name) != stamp:
            notes.append(f"{_shown(name)} (more than {MAX_DEPTH} directories deep: not looked "
                         "into)")
    if stopped:
        notes.append(f"(more than {MAX_SCANNED:,} entries: the rest were not looked at)")
    if not changed and not notes:
        return {}
    files: list[list[Any]] = []
    blobs: list[bytes] = []
    left_out: list[str] = []
    room = cap_bytes
    for name in sorted(changed):
        problem = name_problem(name)
        if problem is not None:
            left_out.append(f"{_shown(name)} ({problem})")
            continue
        data = _read_regular(name, room) if len(files) < MAX_OUTPUT_FILES else None
        if data is None:
            left_out.append(name)
            continue
        room -= len(data)
        files.append([name, len(blobs)])
        blobs.append(data)
    left_out = notes + left_out
    if len(left_out) > MAX_OUTPUT_FILES:  # the count says the rest
        left_out = [*left_out[:MAX_OUTPUT_FILES - 1],
                    f"(and {len(left_out) - MAX_OUTPUT_FILES + 1:,} more)"]
    return {"files": files, "files_left_out": left_out, "files_truncated": bool(left_out),
            BLOBS: blobs}


def _shown(name: str) -> str:
    """A name that cannot be carried as it is, as text that can: bytes that are not UTF-8
    as `\\xff`, what is not printable as `\\u202e`, cut to a readable length."""
    try:
        text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to: show it escaped
        text = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in text)[:200]


def _read_regular(name: str, room: int) -> bytes | None:
    """The whole file if it is still a regular file that fits in `room` bytes, else None
    (a thread of the run may swap it for something else meanwhile: the check is on the
    opened descriptor)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > room:
            return None
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, room - total + 1))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > room:
                return None
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _walk() -> tuple[list[tuple[str, os.stat_result]], list[tuple[str, os.stat_result]], bool]:
    """(name, lstat) of every regular file below the working directory, links not
    followed, at most MAX_DEPTH deep and MAX_SCANNED entries; the directories not looked
    into for their depth ("name/", lstat); whether the entry limit stopped the walk."""
    found: list[tuple[str, os.stat_result]] = []
    too_deep: list[tuple[str, os.stat_result]] = []
    pending = [("", 0)]
    scanned = 0
    while pending:
        prefix, depth = pending.pop()
        try:
            entries = list(os.scandir(prefix or "."))
        except OSError:
            continue
        for entry in entries:
            scanned += 1
            if scanned > MAX_SCANNED:
                return found, too_deep, True
            name = prefix + entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                if depth + 1 < MAX_DEPTH:
                    pending.append((name + "/", depth + 1))
                else:
                    too_deep.append((name + "/", info))
            elif stat.S_ISREG(info.st_mode):
                found.append((name, info))
    return found, too_deep, False
