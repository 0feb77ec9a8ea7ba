"""A framework executor's `work_dir`: a directory on the host kept in step with the
sandbox session's working directory, as AG2's and AutoGen's own executors keep theirs.

Their executors run code in `work_dir` (the local ones directly, the Docker ones through a
bind mount), so a file the user puts there is what the code reads, and a file the code
saves is there afterwards. runner never mounts a host directory into a sandbox: before
each block the files of `work_dir` that are new or changed since the session last saw
them are handed to the block (runner.files' rules and limits), and after it the files
the block made or changed are written back into `work_dir`.

- Only regular files cross; links, devices and sockets in `work_dir` are passed over (a
  link there could name any file of the host), and so are names runner.files refuses.
- What is handed in per block is bounded by runner.files (MAX_INPUT_FILES, MAX_INPUT_BYTES);
  what did not fit is named, so the model can be told (`Handover.left_out`).
- Writing back never follows a link and replaces only a regular file (runner.files.save_files).
- A fresh session (the first, after a restart, or after a block that ended the session's
  process) starts with an empty directory, so `forget` makes the next block hand over
  everything again.
- A file the sandbox deletes stays in `work_dir`: deletions are not reported.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigurationError
from ..files import MAX_INPUT_BYTES, MAX_INPUT_FILES, FileNameError, check_name, save_files
from ..types import ExecutionResult, OutputFile

__all__ = ["PRIVATE_DIR", "Handover", "WorkDir", "agents_files", "private", "work_dir_argument"]

# The integrations' own files in a run's directory (a long final answer): never written to
# work_dir, never named to the model; the log keeps them like any other.
PRIVATE_DIR = ".runner"

MAX_LISTED = 20_000  # entries looked at in work_dir per block, however many it holds

# (inode, size, modification time): what tells that a file changed since the session saw it.
_Stamp = tuple[int, int, int]


@dataclass
class Handover:
    """The files handed to one block, and the names that were not (with why)."""

    files: dict[str, bytes] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)

    def note(self) -> str:
        """What the model reads of the files that were not handed over ("" for none)."""
        if not self.left_out:
            return ""
        shown = ", ".join(self.left_out[:10]) + (f" and {len(self.left_out) - 10} more"
                                                 if len(self.left_out) > 10 else "")
        return f"Note: these files of the working directory were not handed to the sandbox: {shown}."


def private(made: OutputFile) -> bool:
    """Whether a file a run made is an integration's own (under PRIVATE_DIR)."""
    return made.name.startswith(PRIVATE_DIR + "/")


def agents_files(result: ExecutionResult) -> ExecutionResult:
    """`result` with only the files the agent's code made (the integrations' own left out)."""
    if not any(private(made) for made in result.files):
        return result
    return result.model_copy(update={"files": tuple(made for made in result.files if not private(made))})


def work_dir_argument(work_dir: str | os.PathLike[str] | None) -> Path | None:
    """`work_dir` as a directory that exists (made if missing), or None."""
    if work_dir is None:
        return None
    path = Path(work_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"work_dir {path} cannot be made: {exc.strerror or exc}",
                                 fix="name a directory this process can write") from None
    if not path.is_dir():
        raise ConfigurationError(f"work_dir {path} is not a directory", fix="name a directory")
    return path.resolve()


class WorkDir:
    """A session's view of one host directory; see the module docstring. Thread-safe.

    Without a `path`, nothing is handed in, and the first block that makes files gets a
    temporary directory (named `prefix`...) to write them to, as AutoGen's Jupyter
    executors do with theirs; it is left for the caller, like theirs."""

    def __init__(self, path: Path | None, *, prefix: str = "runner-files-") -> None:
        self._path = path
        self._given = path is not None
        self._prefix = prefix
        self._seen: dict[str, _Stamp] = {}  # what the session's directory holds, as of when
        self._lock = threading.Lock()

    @property
    def path(self) -> Path | None:
        """The directory (None until a block made files, when none was given)."""
        return self._path

    @property
    def given(self) -> Path | None:
        """The directory the caller gave, if any (not a temporary one made here)."""
        return self._path if self._given else None

    def forget(self) -> None:
        """The session's directory is empty again (a fresh session): hand over everything."""
        with self._lock:
            self._seen.clear()

    def handover(self) -> Handover:
        """The files new or changed since the session last saw them, in name order, while
        they fit runner.files' limits."""
        done = Handover()
        total = 0
        with self._lock:
            if not self._given:
                return done
            for name, stamp, path in self._listing(done):
                if self._seen.get(name) == stamp:
                    continue
                size = stamp[1]
                if len(done.files) >= MAX_INPUT_FILES or total + size > MAX_INPUT_BYTES:
                    done.left_out.append(f"{name} (past the limit of {MAX_INPUT_FILES} files or "
                                         f"{MAX_INPUT_BYTES // (1024 * 1024)} MB per block)")
                    continue
                try:
                    data = _read_regular(path, stamp)
                except OSError as exc:
                    done.left_out.append(f"{name} ({exc.strerror or exc})")
                    continue
                if total + len(data) > MAX_INPUT_BYTES:  # it grew since it was listed
                    done.left_out.append(f"{name} (it grew past the limit while it was read)")
                    continue
                total += len(data)
                done.files[name] = data
                self._seen[name] = stamp
        return done

    def receive(self, result: ExecutionResult) -> tuple[list[Path], list[str]]:
        """Write the files the block made into the directory: (the paths written, what could
        not be written and why: a directory or link in the way, a full disk)."""
        written: list[Path] = []
        problems: list[str] = []
        if not any(made.kept for made in agents_files(result).files):
            return written, problems
        with self._lock:
            if self._path is None:
                self._path = Path(tempfile.mkdtemp(prefix=self._prefix))
            for made in agents_files(result).files:
                if not made.kept:  # a result read back from the log without its bytes
                    continue
                try:
                    [path] = save_files([made], self._path, replace=True)
                except ConfigurationError as exc:
                    problems.append(exc.message)
                    continue
                info = path.lstat()
                self._seen[made.name] = (info.st_ino, info.st_size, info.st_mtime_ns)
                written.append(path)
        return written, problems

    def _listing(self, done: Handover) -> list[tuple[str, _Stamp, Path]]:
        """(name, stamp, path) of each regular file under the directory, in name order,
        without following links; names runner.files refuses join `done.left_out`."""
        found: list[tuple[str, _Stamp, Path]] = []
        looked = 0
        assert self._path is not None
        for top, dirs, names in os.walk(self._path, followlinks=False):
            dirs.sort()
            for leaf in sorted(names):
                looked += 1
                if looked > MAX_LISTED:
                    done.left_out.append(f"(more than {MAX_LISTED} entries: the rest were not read)")
                    return sorted(found)
                path = Path(top, leaf)
                name = path.relative_to(self._path).as_posix()
                try:
                    info = path.lstat()
                except OSError:
                    continue  # gone meanwhile
                if not stat.S_ISREG(info.st_mode):
                    continue  # links, FIFOs, sockets, devices: never read through
                try:
                    check_name(name)
                except FileNameError as exc:
                    done.left_out.append(f"{name!r} ({exc})")
                    continue
                found.append((name, (info.st_ino, info.st_size, info.st_mtime_ns), path))
        return sorted(found)


def _read_regular(path: Path, stamp: _Stamp) -> bytes:
    """The file's bytes, if it is still the regular file that was listed (a link or FIFO
    put in its place meanwhile is not opened through: O_NOFOLLOW, O_NONBLOCK, fstat)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_ino != stamp[0]:
            raise OSError(0, "changed while it was read")
        if info.st_size > MAX_INPUT_BYTES:
            raise OSError(0, "too large")
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read(MAX_INPUT_BYTES + 1)[:MAX_INPUT_BYTES]
    finally:
        os.close(fd)
