"""The forkserver: the warm, clean process every child is forked from.

The worker's first process imports the preloaded libraries and then splits in two: the
supervisor (supervisor.py), which talks to the host and to children and so holds
requests, outputs and results in its memory, and this forkserver, which never reads
any of them. A child is a copy of its parent's memory, freed heap included; forked from
here, a child starts with no trace of any earlier run's code, arguments or output.

The supervisor asks over a Unix socket, passing the child's ends of four pipes it made
(stdout, stderr, result, request). The forkserver makes the child the supervisor's own:
with `clone(CLONE_PARENT)` where the platform allows it (one copy of the process, the
interpreter's fork hooks run as for os.fork), otherwise by forking twice, so that the
child is an orphan that the supervisor (a child subreaper) adopts. Either way the
supervisor waits for it, reads its exit status and resource usage, and kills it at its
deadline exactly as it would a child of its own. In containers the forkserver also runs
the clean-up between runs, as the sandbox user (cleanup.py). Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import signal
import socket
import struct
from typing import Any, NoReturn

from .child import ChildConfig, Executor, child_main

FORK_RUN = b"R"
FORK_SESSION = b"S"
CLEAN = b"C"
_PID = struct.Struct("=i")


def serve_forks(executor: Executor, config: ChildConfig, control: socket.socket) -> NoReturn:
    """The forkserver's loop; ends (with the process) when the supervisor goes away."""
    try:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(control, 16, 4)
            except (ConnectionError, OSError):
                break
            if not message:
                break
            try:
                if message[:1] in (FORK_RUN, FORK_SESSION) and len(fds) == 4:
                    pid = _fork_child(executor, config, message[:1] == FORK_SESSION, fds,
                                      control.fileno())
                elif message[:1] == CLEAN:
                    pid = _clean(config, control.fileno())
                else:
                    pid = -errno.EINVAL
            finally:
                for fd in fds:
                    os.close(fd)
            control.sendall(_PID.pack(pid))
    finally:
        os._exit(0)


def _fork_child(executor: Executor, config: ChildConfig, session: bool, fds: list[int],
                control_fd: int) -> int:
    """Fork a child through an intermediate process; its pid, or -errno."""
    stdout_fd, stderr_fd, result_fd, request_fd = fds

    def body() -> NoReturn:
        child_main(executor, config, session=session, stdout_fd=stdout_fd,
                   stderr_fd=stderr_fd, result_fd=result_fd, request_fd=request_fd)

    return _orphan(body, control_fd)


def _clean(config: ChildConfig, control_fd: int) -> int:
    """Run the clean-up as the sandbox user and wait for it; 0 when it finished."""
    from .cleanup import clean_as

    def body() -> NoReturn:
        try:
            clean_as(config)
        finally:
            os._exit(0)

    pid = _orphan(body, control_fd, adopt=False)
    return 0 if pid > 0 else pid


CLONE_PARENT = 0x00008000
_SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())


def _load_apis() -> tuple[Any, Any]:
    try:
        return ctypes.CDLL(None, use_errno=True), ctypes.pythonapi
    except (OSError, AttributeError):
        return None, None


_libc, _python = _load_apis()


def _clone_sibling() -> int | None:
    """Fork a process whose parent is our parent (the supervisor). None when the
    platform cannot (then the caller forks twice instead)."""
    if _SYS_CLONE is None or _libc is None or _python is None:
        return None
    _python.PyOS_BeforeFork()
    # A fork-like clone (no shared memory, a copy of this stack): the interpreter's own
    # before/after hooks keep its locks and at-fork callbacks as os.fork keeps them.
    pid = int(_libc.syscall(_SYS_CLONE, CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0))
    if pid == 0:
        _python.PyOS_AfterFork_Child()
        return 0
    _python.PyOS_AfterFork_Parent()
    if pid < 0:
        error = ctypes.get_errno()
        if error in (errno.EINVAL, errno.EPERM, errno.ENOSYS):
            return None  # e.g. we are the init of a PID namespace
        return -(error or errno.EAGAIN)
    return pid


def _orphan(body: Any, control_fd: int, *, adopt: bool = True) -> int:
    """Run `body` in a new process. With `adopt`, that process is a grandchild whose
    parent has already exited, so the supervisor (a subreaper) adopts it; otherwise it is
    our own child and we wait for it here."""
    if not adopt:
        try:
            pid = os.fork()
        except OSError as exc:
            return -(exc.errno or errno.EAGAIN)
        if pid == 0:
            os.close(control_fd)
            body()
        _, status = os.waitpid(pid, 0)
        return pid if os.waitstatus_to_exitcode(status) == 0 else -errno.ECHILD
    sibling = _clone_sibling()
    if sibling == 0:
        os.close(control_fd)
        try:
            body()
        finally:
            os._exit(70)
    if sibling is not None:
        return sibling
    read_end, write_end = os.pipe()
    try:
        middle = os.fork()
    except OSError as exc:
        os.close(read_end)
        os.close(write_end)
        return -(exc.errno or errno.EAGAIN)
    if middle == 0:
        try:
            os.close(read_end)
            os.close(control_fd)
            try:
                pid = os.fork()
            except OSError as exc:
                pid = -(exc.errno or errno.EAGAIN)
            if pid == 0:
                os.close(write_end)
                body()
            os.write(write_end, _PID.pack(pid))
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while len(data) < _PID.size:
        chunk = os.read(read_end, _PID.size - len(data))
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(middle, 0)  # after this the grandchild is the supervisor's
    return _PID.unpack(data)[0] if len(data) == _PID.size else -errno.ECHILD


class ForkClient:
    """The supervisor's end of the forkserver's socket."""

    def __init__(self, control: socket.socket, pid: int) -> None:
        self.control = control
        self.pid = pid

    def send(self, command: bytes, fds: list[int] | None = None) -> None:
        """Send a command, with the child's pipe ends (closed here once sent). The answer
        is read with `receive`, so the fork can go on while the supervisor works."""
        try:
            socket.send_fds(self.control, [command], fds or [])
        finally:
            for fd in fds or []:
                os.close(fd)

    def receive(self) -> int:
        """The answer to the last command: a pid, or -errno."""
        data = self.control.recv(_PID.size)
        if len(data) != _PID.size:
            raise OSError(errno.EPIPE, "the forkserver has exited")
        return int(_PID.unpack(data)[0])

    def request(self, command: bytes, fds: list[int] | None = None) -> int:
        self.send(command, fds)
        return self.receive()

    def close(self) -> None:
        self.control.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
