"""Where the runner keeps its data: `$RUNNER_HOME`, or a per-user data directory.

An unusable directory (a file, somewhere that cannot be created, a kernel pseudo file
system such as /proc) raises ConfigurationError naming the path and the fix, not an
OSError from whichever write came first. Reading the log needs no write access (the log
can be reviewed on a read-only mount), so writability is checked only for callers that
write outside the log database (the log store reports its own write failures).
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import platformdirs

from .errors import ConfigurationError

# Kernel pseudo file systems: nothing the runner writes belongs there.
_PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))


def runner_home(*, writable: bool = False) -> Path:
    """The data directory, created on first use; checked to be writable if `writable`."""
    configured = os.environ.get("RUNNER_HOME")
    home = Path(configured).expanduser() if configured else Path(platformdirs.user_data_dir("runner"))
    source = "RUNNER_HOME" if configured else "the runner's data directory"
    fix = "set RUNNER_HOME to a writable directory, e.g. export RUNNER_HOME=~/.local/share/runner"
    resolved = home.resolve(strict=False)
    if any(resolved == pseudo or pseudo in resolved.parents for pseudo in _PSEUDO):
        raise ConfigurationError(f"{source} is {home}, inside the kernel's {_top(resolved)} file "
                                 "system, where no data can be kept", fix=fix)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ConfigurationError(f"{source} is {home}, which is not a directory (or is under a "
                                 "file)", fix=fix) from None
    except OSError as exc:
        raise ConfigurationError(f"{source} is {home}, which cannot be created: "
                                 f"{exc.strerror or exc}", fix=fix) from None
    if not home.is_dir():
        raise ConfigurationError(f"{source} is {home}, which is not a directory", fix=fix)
    if writable and not os.access(home, os.W_OK | os.X_OK):
        raise ConfigurationError(f"{source} is {home}, which this user (uid {os.getuid()}) "
                                 "cannot write to", fix=fix)
    return home


def _top(path: Path) -> str:
    parts = path.parts
    return "/" + parts[1] if len(parts) > 1 else str(path)


def log_db_path() -> Path:
    return runner_home() / "runner.db"


def private_temp_dir() -> Path | None:
    """This user's own directory under the temporary directory (`runner-<uid>`, mode 0700),
    for what must not fail when RUNNER_HOME cannot be written: made if missing; None when
    what is there is not a directory of this user (someone else could read or replace
    what is put in it)."""
    base = Path(tempfile.gettempdir()) / f"runner-{os.getuid()}"
    try:
        base.mkdir(mode=0o700, exist_ok=True)
        found = os.lstat(base)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid():
            return None
        if found.st_mode & 0o077:
            os.chmod(base, 0o700)  # ours (in a sticky /tmp no one else can swap it)
    except OSError:
        return None
    return base

