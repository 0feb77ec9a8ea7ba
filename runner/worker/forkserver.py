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
import select
import signal
import socket
import struct
from typing import Any, NoReturn

from . import linux
from .child import ChildConfig, Executor, child_main

FORK_RUN = b"R"
FORK_SESSION = b"S"
CLEAN = b"C"
# A fork command carries the run directory's size in MB (0: none); the answer is the
# child's pid (or -errno) and the pid of its PID namespace's holder (0: none).
_SIZE = struct.Struct("=I")
_PIDS = struct.Struct("=ii")
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
            holder = 0
            try:
                if message[:1] in (FORK_RUN, FORK_SESSION) and len(fds) == 4 and \
                        len(message) == 1 + _SIZE.size:
                    (disk_mb,) = _SIZE.unpack(message[1:])
                    pid, holder = _fork_child(executor, config, message[:1] == FORK_SESSION,
                                              fds, control.fileno(), disk_mb)
                    if config.translate_pids:
                        pid, holder = (_as_seen_by_proc(n) if n > 0 else n for n in (pid, holder))
                elif message[:1] == CLEAN:
                    pid = _clean(config, control.fileno())
                else:
                    pid = -errno.EINVAL
            finally:
                for fd in fds:
                    os.close(fd)
            control.sendall(_PIDS.pack(pid, holder))
    finally:
        os._exit(0)


def _fork_child(executor: Executor, config: ChildConfig, session: bool, fds: list[int],
                control_fd: int, disk_mb: int) -> tuple[int, int]:
    """Fork a child that is the supervisor's (pid, or -errno), in a PID namespace of its
    own when the config says so (then also the pid of that namespace's holder)."""
    stdout_fd, stderr_fd, result_fd, request_fd = fds

    def body() -> NoReturn:
        child_main(executor, config, session=session, stdout_fd=stdout_fd,
                   stderr_fd=stderr_fd, result_fd=result_fd, request_fd=request_fd,
                   disk_mb=disk_mb)

    if not config.own_pid_namespace:
        return _orphan(body, control_fd), 0
    return _in_new_pid_namespace(body, control_fd)


# Stacks for the PID namespaces' holders, used in turn: a holder touches its stack only
# while it starts (the C library's clone() calls its function there), long before its
# stack comes round again.
_HOLDER_STACK_BYTES = 16 * 1024
_holder_stacks = [ctypes.create_string_buffer(_HOLDER_STACK_BYTES) for _ in range(8)]
_holder_turn = 0
_own_pid_namespace: int | None = None


def _pid_namespace_holder(*, for_parent: bool = True) -> int:
    """A new PID namespace, held by its pid 1: a process that shares our memory (clone
    with CLONE_VM costs no copy of it) and runs no Python at all, only the C library's
    syscall(SYS_pause): it waits, ignoring every signal its namespace may send it (pid 1
    is immune to those), until the supervisor (its parent: CLONE_PARENT) kills it, which
    kills everything in the namespace. It shares our descriptor table too, so it holds
    none of its own. Its pid, or -errno."""
    global _holder_turn
    if linux.SYS_PAUSE is None or _libc is None:
        return -errno.ENOSYS
    stack = _holder_stacks[_holder_turn]
    _holder_turn = (_holder_turn + 1) % len(_holder_stacks)
    top = (ctypes.addressof(stack) + _HOLDER_STACK_BYTES - 64) & ~0xF
    # CLONE_FILES: it holds no descriptor of its own (else it would keep the run's pipes,
    # which we hold while it starts, open after the run).
    flags = (linux.CLONE_VM | linux.CLONE_FILES | linux.CLONE_NEWPID | signal.SIGCHLD
             | (linux.CLONE_PARENT if for_parent else 0))
    pid = int(_libc.clone(ctypes.cast(_libc.syscall, ctypes.c_void_p), ctypes.c_void_p(top),
                          flags, ctypes.c_void_p(linux.SYS_PAUSE)))
    return pid if pid > 0 else -(ctypes.get_errno() or errno.EAGAIN)


def pid_namespace_works() -> bool:
    """Whether this process can hold a new PID namespace (a probe: the holder is killed)."""
    holder = _pid_namespace_holder(for_parent=False)
    if holder <= 0:
        return False
    _kill(holder)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(holder, 0)
    return True


def _in_new_pid_namespace(body: Any, control_fd: int) -> tuple[int, int]:
    """`body` in a new process that is pid 2 of a new PID namespace: its pids, thread ids
    and /proc start afresh, whatever earlier runs did to theirs. (pid 2, not 1: the
    kernel lets no process stop itself as pid 1, and a child stops itself after its
    report.) Returns (pid or -errno, the holder's pid or 0)."""
    global _own_pid_namespace
    if _own_pid_namespace is None:
        _own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    holder = _pid_namespace_holder()
    if holder < 0:
        return holder, 0
    try:
        holder_fd = os.pidfd_open(holder)
    except OSError as exc:
        _kill(holder)
        return -(exc.errno or errno.ESRCH), holder
    # Entering a namespace through a process needs ptrace's read access to it, which a
    # process that is not dumpable (we are not, and the holder shares our memory) grants
    # only to a capability of the host's: dumpable for this one call. (No run can see us
    # meanwhile: each sees only its own PID namespace.)
    _libc.prctl(linux.PR_SET_DUMPABLE, 1, 0, 0, 0)
    entered = _libc.setns(holder_fd, linux.CLONE_NEWPID) == 0
    error = ctypes.get_errno()
    _libc.prctl(linux.PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.close(holder_fd)
    if not entered:
        _kill(holder)
        return -(error or errno.EPERM), holder
    child = _clone_sibling()
    if child == 0:
        os.close(control_fd)
        try:
            body()
        finally:
            os._exit(70)
    # Our own later children (the clean-up's, the next holder) are in our namespace again.
    if _libc.setns(_own_pid_namespace, linux.CLONE_NEWPID) != 0:
        os._exit(71)  # cannot happen: setns back to our own active namespace
    if child is None or child < 0:
        _kill(holder)
        return (child if child is not None else -errno.ENOSYS), holder
    return child, holder


def _as_seen_by_proc(pid: int) -> int:
    """Process `pid` (of our PID namespace) by its number in the namespace of /proc, which
    is the supervisor's (a container's worker forks in a namespace of its own, whose /proc
    the container's masked /proc forbids mounting): the kernel tells it in a pidfd's
    fdinfo. -ESRCH when it is gone already."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return -errno.ESRCH
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as info:
            for line in info:
                if line.startswith(b"Pid:"):
                    found = int(line.split()[1])
                    return found if found > 0 else -errno.ESRCH
    except (OSError, ValueError, IndexError):
        pass
    finally:
        os.close(fd)
    return -errno.ESRCH


def enter_base_pid_namespace() -> None:
    """A container's worker, in a user namespace of its own (jail.enter_user_namespace):
    the processes it forks from now on (the forkserver) go into a PID namespace that
    namespace owns, held by a process like each run's holder, so that the forkserver may
    enter each run's namespace and come back (the container's own namespace is not the
    worker's to enter). Raises OSError when it cannot."""
    holder = _pid_namespace_holder(for_parent=False)
    if holder <= 0:
        raise OSError(-holder, "the worker's PID namespace could not be made")
    fd = os.pidfd_open(holder)
    try:
        _libc.prctl(linux.PR_SET_DUMPABLE, 1, 0, 0, 0)
        entered = _libc.setns(fd, linux.CLONE_NEWPID) == 0
        error = ctypes.get_errno()
        _libc.prctl(linux.PR_SET_DUMPABLE, 0, 0, 0, 0)
    finally:
        os.close(fd)
    if not entered:
        _kill(holder)
        raise OSError(error, "entering the worker's PID namespace failed")


def _kill(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)


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


_libc = linux.libc
_python = getattr(ctypes, "pythonapi", None)


def _clone_sibling() -> int | None:
    """Fork a process whose parent is our parent (the supervisor). None when the
    platform cannot (then the caller forks twice instead)."""
    if linux.SYS_CLONE is None or _libc is None or _python is None:
        return None
    _python.PyOS_BeforeFork()
    # A fork-like clone (no shared memory, a copy of this stack): the interpreter's own
    # before/after hooks keep its locks and at-fork callbacks as os.fork keeps them.
    pid = int(_libc.syscall(linux.SYS_CLONE, linux.CLONE_PARENT | signal.SIGCHLD, 0, 0, 0, 0))
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
        # Its end of the socket may outlive it (a namespace's holder shares its descriptor
        # table): its exit is watched directly.
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def send(self, command: bytes, fds: list[int] | None = None, disk_mb: int = 0) -> None:
        """Send a command, with the child's pipe ends (closed here once sent) and, for a
        fork, the size of the run's directory. The answer is read with `receive`, so the
        fork can go on while the supervisor works."""
        if command in (FORK_RUN, FORK_SESSION):
            command += _SIZE.pack(disk_mb)
        try:
            socket.send_fds(self.control, [command], fds or [])
        finally:
            for fd in fds or []:
                os.close(fd)

    def receive(self) -> tuple[int, int]:
        """The answer to the last command: a pid (or -errno), and the pid of the holder
        of the child's PID namespace (0: none)."""
        while self._pidfd is not None:
            ready, _, _ = select.select([self.control.fileno(), self._pidfd], [], [])
            if self.control.fileno() in ready:
                break
            raise OSError(errno.EPIPE, "the forkserver has exited")
        data = self.control.recv(_PIDS.size)
        if len(data) != _PIDS.size:
            raise OSError(errno.EPIPE, "the forkserver has exited")
        pid, holder = _PIDS.unpack(data)
        return int(pid), int(holder)

    def request(self, command: bytes, fds: list[int] | None = None) -> int:
        self.send(command, fds)
        return self.receive()[0]

    def close(self) -> None:
        self.control.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
