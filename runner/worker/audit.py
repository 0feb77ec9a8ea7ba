"""The restricted tier's last line: an audit hook in every child that runs user code.

The guards decide what user code may reach. Libraries are large, though, and a library
function that does `getattr(obj, name)` with a name the user chose can hand out what the
guards would refuse. This hook does not care how something was reached: in a restricted
child, nothing may start a process, open a socket, load a C library, write or delete a
file, read a file outside the Python installation, trace frames, or compile/execute
code directly from user code (libraries compiling their own code, and the sandbox
compiling the user's, are fine). Python's audit hooks cannot be removed once added, and
the child is discarded after the run, so the hook never reaches the warm parent.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .guards import deny

_DENIED_EVENTS = (
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod",
    "os.chown", "os.link", "os.symlink", "os.truncate", "os.utime", "os.putenv",
    "os.unsetenv", "os.chdir", "os.chroot", "os.setuid",
    "subprocess.", "pty.", "socket.", "ctypes.", "shutil.", "mmap.", "sys.settrace",
    "sys.setprofile", "sys._current_frames", "code.__new__",
    "function.__new__", "signal.", "resource.setrlimit", "fcntl.", "glob.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_installed = False
_busy = False


def _readable_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             "/usr/share/zoneinfo", os.path.dirname(os.path.dirname(__file__))}
    roots.update(path for path in sys.path if path and os.path.isdir(path))
    return tuple(sorted(os.path.join(os.path.realpath(root), "") for root in roots))


class suspended:
    """The worker's own privileged steps in the child (raising a session's CPU limit)."""

    def __enter__(self) -> None:
        global _busy
        self._was = _busy
        _busy = True

    def __exit__(self, *exc: object) -> None:
        global _busy
        _busy = self._was


_readable: tuple[str, ...] | None = None


def prepare() -> None:
    """Work out the readable roots once, in the zygote, so no child pays for it."""
    global _readable
    _readable = _readable_roots()


def install() -> None:
    """Add the hook (idempotent; call it in the child, never in the zygote)."""
    global _installed
    if _installed:
        return
    _installed = True
    readable = _readable or _readable_roots()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        global _busy
        if _busy:  # events raised by the hook's own work
            return
        if event.startswith(_DENIED_EVENTS):
            _busy = True
            try:
                deny(f"the restricted backend does not allow '{event}' (processes, files, "
                     "sockets and C libraries are off limits)")
            finally:
                _busy = False
        elif event == "open":
            _check_open(args, readable)
        elif event in ("exec", "compile"):
            _check_caller(event)

    sys.addaudithook(hook)


def _check_open(args: tuple[Any, ...], readable: tuple[str, ...]) -> None:
    global _busy
    path, mode, flags = (list(args) + [None, None, 0])[:3]
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
        bool((flags or 0) & _WRITE_FLAGS)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        if writing:
            _busy = True
            try:
                deny("opening a file descriptor for writing is not allowed")
            finally:
                _busy = False
        return
    _busy = True
    try:
        real = os.path.realpath(path)
        if writing:
            deny(f"writing files ({path}) is not allowed in the restricted backend")
        if not real.startswith(readable):
            deny(f"reading {path} is not allowed in the restricted backend")
    finally:
        _busy = False


def _check_caller(event: str) -> None:
    global _busy
    _busy = True
    try:
        # Frame 0 is this function, 1 the hook, 2 whoever called exec/eval/compile.
        caller = sys._getframe(2)
        filename = caller.f_code.co_filename
        if filename.startswith("<") and not filename.startswith("<frozen "):
            deny(f"calling {'eval/exec' if event == 'exec' else 'compile'} directly is not "
                 "allowed in the restricted backend")
    finally:
        _busy = False
