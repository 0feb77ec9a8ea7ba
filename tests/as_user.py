"""Run a Python script as an ordinary user, from a test that runs as root (as CI does).

The project's Python may live where an ordinary user cannot reach it (pyenv under /root,
a checkout in a 0700 temporary directory). This launcher, started as root, makes a
private mount namespace in which every directory on the way to the paths the script
needs can be passed through (each one that others may not enter is replaced by an empty
tmpfs holding only the next step, bound back from the original), then becomes the given
user (no supplementary groups, no capabilities) and runs the script with this Python.
Nothing outside its own mount namespace changes.

Usage: python tests/as_user.py UID:GID SCRIPT [ARGS...]
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
import sysconfig

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    if _libc.mount(source.encode() if source else None, target.encode(),
                   fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        raise OSError(ctypes.get_errno(), f"mount {source} on {target}")


def _closed(path: str) -> list[str]:
    """Directories on the way to `path` (itself included) that others may not enter."""
    found, current = [], "/"
    for part in [*path.strip("/").split("/"), ""]:
        if os.path.isdir(current) and not os.stat(current).st_mode & stat.S_IXOTH:
            found.append(current)
        if not part:
            break
        current = os.path.join(current, part)
    return found


def open_up(paths: list[str]) -> None:
    """In this (private) mount namespace, make every path in `paths` reachable by others:
    each closed directory on the way becomes an open tmpfs holding binds of just what is
    needed from it (everything in it, when it is itself one of the paths)."""
    staging = "/run/as-user-staging"
    os.makedirs(staging, exist_ok=True)
    _mount("tmpfs", staging, "tmpfs", 0, "mode=0700")
    reals = [os.path.realpath(path) for path in paths]
    closed = sorted({directory for path in reals for directory in _closed(path)}, key=len)
    for number, directory in enumerate(closed):
        wanted: set[str] = set()
        for path in reals:
            if path == directory:
                wanted.update(os.listdir(directory))
            elif path.startswith(directory.rstrip("/") + "/"):
                wanted.add(os.path.relpath(path, directory).split("/")[0])
        keep = f"{staging}/{number}"
        os.makedirs(keep)
        _mount(directory, keep, None, MS_BIND | MS_REC)
        _mount("tmpfs", directory, "tmpfs", 0, "mode=0755")
        for entry in sorted(wanted):
            source, target = os.path.join(keep, entry), os.path.join(directory, entry)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
                continue
            if os.path.isdir(source):
                os.makedirs(target, exist_ok=True)
            else:
                open(target, "w").close()
            _mount(source, target, None, MS_BIND | MS_REC)


def main() -> None:
    uid, _, gid = sys.argv[1].partition(":")
    script = sys.argv[2]
    if _libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    here = os.path.dirname(os.path.abspath(__file__))
    needed = [sys.executable, sys.prefix, sys.base_prefix, sysconfig.get_path("stdlib"),
              os.path.dirname(here), os.path.abspath(script)]
    open_up([path for path in needed if os.path.exists(path)])
    os.setgroups([])
    os.setresgid(int(gid or uid), int(gid or uid), int(gid or uid))
    os.setresuid(int(uid), int(uid), int(uid))
    os.chdir("/tmp")
    os.execv(sys.executable, [sys.executable, script, *sys.argv[3:]])


if __name__ == "__main__":
    main()
