"""Files in and out of a run: what a name may be, how much may cross, what a file is.

A caller hands a run files (`files={"data.csv": b"..." or a Path}`): they appear in the
run's working directory before its code starts. The files the run created or changed
there come back on its result, each with its name, size, media type, sha256 and bytes.
Both directions cross a trust boundary, and the rules for both are here, once:

- a name is a relative path inside the working directory and nothing else: no absolute
  path, no `..`, no empty or `.` part, no control character, at most MAX_DEPTH parts of
  at most MAX_PART_CHARS characters;
- what goes in is bounded (MAX_INPUT_FILES files, MAX_INPUT_BYTES in all): beyond that
  the call is a ConfigurationError that names the limit;
- what comes out is bounded by the run's `Limits.max_returned_files_mb` and
  MAX_OUTPUT_FILES: the worker returns whole files in name order while they fit, and the
  result lists the rest (`files_left_out`, with `files_truncated` set);
- a file's media type is sniffed from its bytes (puremagic), never taken from its name:
  what a run names `notes.txt` may well be HTML.

The worker's side (writing inputs, finding what changed) is runner/worker/run_files.py,
stdlib only; it applies the same name rule again before it writes anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import puremagic

from .errors import ConfigurationError
from .types import InputFile, OutputFile
from .worker.run_files import MAX_DEPTH, MAX_OUTPUT_FILES, MAX_PART_CHARS, name_problem, open_parent

MIB = 1024 * 1024
MAX_INPUT_FILES = 256
MAX_INPUT_BYTES = 32 * MIB  # a request travels to the worker as one frame (64 MB as JSON)
# Raster images a browser shows as pictures and nothing else (never SVG: it runs script).
RASTER_IMAGES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})

__all__ = ["MAX_DEPTH", "MAX_INPUT_BYTES", "MAX_INPUT_FILES", "MAX_OUTPUT_FILES",
           "MAX_PART_CHARS", "RASTER_IMAGES", "FileNameError", "check_name", "decode_outputs",
           "format_size", "input_files", "media_type", "output_file", "save_files"]


class FileNameError(ValueError):
    """A file name that is not a relative path inside the working directory."""


def check_name(name: object) -> str:
    """`name` if it is a relative path inside the working directory, else FileNameError
    saying why."""
    if not isinstance(name, str):
        raise FileNameError(f"a file name must be a string, got {type(name).__name__}")
    problem = name_problem(name)
    if problem is not None:
        raise FileNameError(f"file name {name[:80]!r} {problem}")
    return name


def input_files(files: Any) -> tuple[InputFile, ...]:
    """The files a caller hands a run: a mapping of name -> bytes, str (written as UTF-8)
    or a path to read on this host; or InputFile objects. ConfigurationError, naming the
    rule or the limit, for anything else."""
    if files is None:
        return ()
    items: list[tuple[Any, Any]]
    if isinstance(files, Mapping):
        items = list(files.items())
    elif isinstance(files, Iterable) and not isinstance(files, (str, bytes)):
        listed = list(files)
        if not all(isinstance(item, InputFile) for item in listed):
            raise ConfigurationError(
                "files must be a dict of name -> bytes, text or a path, or InputFile objects",
                fix="pass e.g. files={'data.csv': Path('data.csv')}")
        items = [(item.name, item.data) for item in listed]
    else:
        raise ConfigurationError(f"files must be a dict of name -> content, got {type(files).__name__}",
                                 fix="pass e.g. files={'data.csv': b'a,b\\n1,2\\n'}")
    if len(items) > MAX_INPUT_FILES:
        raise ConfigurationError(f"{len(items)} files were given; a run takes at most {MAX_INPUT_FILES}",
                                 fix="pack them into one archive, or hand over fewer")
    made: list[InputFile] = []
    total = 0
    seen: set[str] = set()
    for name, content in items:
        try:
            name = check_name(name)
        except FileNameError as exc:
            raise ConfigurationError(str(exc), fix="name each file by a relative path inside the "
                                     "run's directory, e.g. 'data.csv' or 'inputs/data.csv'") from None
        if name in seen or any(other.startswith(name + "/") or name.startswith(other + "/")
                               for other in seen):
            raise ConfigurationError(f"file name {name!r} is given twice, or as a file and a directory",
                                     fix="give each file a name of its own")
        seen.add(name)
        data = _content(name, content)
        total += len(data)
        if total > MAX_INPUT_BYTES:
            raise ConfigurationError(
                f"the files given to one run hold more than {MAX_INPUT_BYTES // MIB} MB in all "
                f"(the limit for files handed to a run; {name!r} went past it)",
                fix="hand over less, or let the run compute its data")
        made.append(InputFile(name=name, data=data))
    return tuple(made)


def _content(name: str, content: Any) -> bytes:
    if isinstance(content, bytes):
        return content
    if isinstance(content, (bytearray, memoryview)):
        return bytes(content)
    if isinstance(content, str):
        return content.encode("utf-8", errors="surrogateescape")
    if isinstance(content, os.PathLike):
        path = Path(content)
        try:
            if not path.is_file():
                raise ConfigurationError(f"file {name!r}: {path} is not a regular file",
                                         fix="name a file that exists")
            size = path.stat().st_size
            if size > MAX_INPUT_BYTES:
                raise ConfigurationError(
                    f"file {name!r}: {path} holds {size // MIB} MB; a run takes at most "
                    f"{MAX_INPUT_BYTES // MIB} MB of files in all", fix="hand over less")
            return path.read_bytes()
        except OSError as exc:
            raise ConfigurationError(f"file {name!r}: {path} cannot be read: {exc.strerror or exc}",
                                     fix="check the path and its permissions") from None
    raise ConfigurationError(f"file {name!r}: the content must be bytes, text or a path, got "
                             f"{type(content).__name__}", fix="pass bytes, a str or a pathlib.Path")


def format_size(size: int) -> str:
    """A size for people: 512 B, 12.3 kB, 4.0 MB."""
    if size < 1024:
        return f"{size} B"
    if size < MIB:
        return f"{size / 1024:.1f} kB"
    return f"{size / MIB:.1f} MB"


def media_type(data: bytes) -> str:
    """What the bytes are, by their content: a known format's type, else text/plain for
    UTF-8 text, else application/octet-stream."""
    if data:
        try:
            found = puremagic.magic_string(data[:8192])
        except (puremagic.PureError, ValueError):
            found = []
        for match in found:
            if match.mime_type:
                return str(match.mime_type)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    return "text/plain"


def decode_outputs(files: Any, left_out: Any, cap_bytes: int, blobs: Any = None
                   ) -> tuple[list[OutputFile], list[str]]:
    """The files a worker returned ([[name, index], ...], each file's bytes the reply's
    attachment `index`, from a run whose code may have written anything there), checked
    here: each name by the rule above, each attachment used once, the total within
    `cap_bytes` and MAX_OUTPUT_FILES. What does not pass joins `left_out` (with the
    reason), which is also checked to be a list of strings."""
    kept: list[OutputFile] = []
    omitted = [str(name)[:300] for name in left_out] if isinstance(left_out, list) else []
    if len(omitted) > MAX_OUTPUT_FILES:  # a worker's list: the count says the rest
        omitted = [*omitted[:MAX_OUTPUT_FILES - 1],
                   f"(and {len(omitted) - MAX_OUTPUT_FILES + 1:,} more)"]
    names: set[str] = set()
    if not isinstance(files, list):
        return kept, omitted
    blobs = blobs if isinstance(blobs, list) else []
    used: set[int] = set()
    total = 0
    for item in files:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                and type(item[1]) is int and 0 <= item[1] < len(blobs) and item[1] not in used
                and isinstance(blobs[item[1]], (bytes, memoryview))):
            omitted.append("(an entry that is not a file)")
            continue
        name, index = item
        used.add(index)
        data = bytes(blobs[index])
        try:
            check_name(name)
        except FileNameError as exc:
            omitted.append(f"{name[:200]} ({exc})")
            continue
        if name in names:  # one name, one file: a second would replace the first unseen
            omitted.append(f"{name[:200]} (a second file of that name)")
            continue
        if len(kept) >= MAX_OUTPUT_FILES or total + len(data) > cap_bytes:
            omitted.append(name)
            continue
        names.add(name)
        total += len(data)
        kept.append(output_file(name, data))
    return kept, omitted


def output_file(name: str, data: bytes) -> OutputFile:
    return OutputFile(name=name, size=len(data), media_type=media_type(data),
                      sha256=hashlib.sha256(data).hexdigest(), data=data)


def _write_new(here: int, leaf: str, data: bytes, *, shown: Path, replace: bool) -> None:
    """Write `data` as `leaf` in the directory `here`. A new file is made exclusively (no
    link, FIFO or file already there is opened); a replacement is written under a fresh
    name and renamed over the old entry, so what the old name pointed at (a hard link's
    other names, a FIFO's reader) is never written or waited on, and only a regular file
    is replaced."""
    try:
        old = os.stat(leaf, dir_fd=here, follow_symlinks=False)
    except FileNotFoundError:
        old = None
    if old is not None and not replace:
        raise ConfigurationError(f"{shown} exists already",
                                 fix="choose another directory, or replace it (--force)")
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise ConfigurationError(f"{shown} exists and is not a regular file (a link, a "
                                 "directory, a FIFO or a device): it is not replaced",
                                 fix="remove it, or choose another directory")
    temporary = leaf if old is None else f".runner-{secrets.token_hex(8)}.part"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(temporary, flags, 0o644, dir_fd=here)
    except FileExistsError:  # made between the look and the write: not ours to replace
        raise ConfigurationError(f"{shown} exists already",
                                 fix="choose another directory, or replace it (--force)") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        if temporary != leaf:
            os.replace(temporary, leaf, src_dir_fd=here, dst_dir_fd=here)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=here)
        raise


def save_files(files: Iterable[OutputFile], directory: Path, *, replace: bool = False) -> list[Path]:
    """Write files a run made into `directory` (made if missing), under their names. The
    names are the run's: each is checked again, every directory on the way is made or
    opened without following a link, and an existing file is replaced only with
    `replace` (else a ConfigurationError names it). The paths written."""
    written = []
    directory.mkdir(parents=True, exist_ok=True)
    for made in files:
        if not made.kept:
            continue
        try:
            name = check_name(made.name)
        except FileNameError as exc:
            raise ConfigurationError(str(exc), fix="this file's name cannot be written safely") from None
        try:
            here, leaf = open_parent(str(directory), name)
        except OSError as exc:
            raise ConfigurationError(f"cannot write {directory / name}: {exc.strerror or exc}",
                                     fix="check the directory and its permissions") from None
        try:
            _write_new(here, leaf, made.data, shown=directory / name, replace=replace)
        except OSError as exc:
            raise ConfigurationError(f"cannot write {directory / name}: {exc.strerror or exc}",
                                     fix="check the directory and its permissions") from None
        finally:
            os.close(here)
        written.append(directory / name)
    return written
