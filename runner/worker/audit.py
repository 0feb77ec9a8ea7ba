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
    "sys.setprofile", "sys._current_frames", "code.__new__", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents",
    "function.__new__", "signal.", "resource.setrlimit", "fcntl.", "glob.",
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_readable: tuple[str, ...] | None = None


def _readable_roots() -> tuple[str, ...]:
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             "/usr/share/zoneinfo", "/etc/localtime", os.path.dirname(os.path.dirname(__file__))}
    roots.update(path for path in sys.path if path and os.path.isdir(path))
    return tuple(sorted(os.path.join(os.path.realpath(root), "") for root in roots))


def prepare() -> None:
    """Work out the readable roots once, in the zygote, so no child pays for it."""
    global _readable
    _readable = _readable_roots()


def readable_roots() -> tuple[str, ...]:
    return _readable or _readable_roots()


def install() -> None:
    """Add the hook (call it once, in the child, never in the zygote). Its state lives in
    its closure, not in a module global that code holding the real builtins could flip."""
    readable = readable_roots()
    busy = [False]  # events raised by the hook's own work
    refuse = deny  # captured now: replacing guards.deny later changes nothing here

    def refuse_quietly(message: str) -> None:
        busy[0] = True
        try:
            refuse(message)
        finally:
            busy[0] = False

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if busy[0]:
            return
        if event.startswith(_DENIED_EVENTS):
            refuse_quietly(f"the restricted backend does not allow '{event}' (processes, "
                           "files, sockets and C libraries are off limits)")
        elif event == "open":
            busy[0] = True
            try:
                problem = _open_problem(args, readable)
            finally:
                busy[0] = False
            if problem:
                refuse_quietly(problem)
        elif event in ("exec", "compile"):
            # Frame 0 is this hook, 1 whoever called exec/eval/compile.
            filename = sys._getframe(1).f_code.co_filename
            if filename.startswith("<") and not filename.startswith("<frozen "):
                refuse_quietly(f"calling {'eval/exec' if event == 'exec' else 'compile'} "
                               "directly is not allowed in the restricted backend")

    sys.addaudithook(hook)


def _open_problem(args: tuple[Any, ...], readable: tuple[str, ...]) -> str | None:
    path, mode, flags = (list(args) + [None, None, 0])[:3]
    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
        bool((flags or 0) & _WRITE_FLAGS)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, str):
        return "opening a file descriptor for writing is not allowed" if writing else None
    if writing:
        return f"writing files ({path}) is not allowed in the restricted backend"
    if not os.path.realpath(path).startswith(readable):
        return f"reading {path} is not allowed in the restricted backend"
    return None
