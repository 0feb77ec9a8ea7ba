"""The worker's supervisor: talks to the host, hands requests to children, replies.

It reads framed requests (wire.py) on its stdin, gets each request's child from the
forkserver (forkserver.py: forked ahead of time where that is safe), watches it
(observe.py), turns what it saw into a result (judge.py) and writes the reply. Sessions
keep one child alive between blocks. In a container, after every run, the forkserver
clears what the run left behind (cleanup.py) before the next child exists.

The supervisor holds requests and outputs in its memory, which is why it never forks a
child that runs user code: the forkserver does, from memory that never held any.
Stdlib only.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import gc
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
from typing import Any

from . import error_types, wire
from .cgroup import memory_in_use
from .child import (
    ChildConfig,
    Executor,
    address_space_bytes,
    apply_limits,
    collect_generators,
)
from .cleanup import nothing_left
from .forkserver import CLEAN, FORK_RUN, FORK_SESSION, ForkClient, serve_forks
from .judge import judge
from .observe import ChildPipes, await_ready, kill_group, open_pidfd, watch
from .protocol import BLOBS, MAX_MESSAGE_BYTES, ProtocolError, read_message, write_message

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
SPARES = 1  # children kept forked and set up ahead of the requests that will use them
SESSION_LOST = ("; the session's state is lost, and its next block starts a fresh session")


class ForkserverGone(Exception):
    """The forkserver died: this worker cannot start children any more."""


class Supervisor:
    """The request loop's state: the spare child, an open session, children to reap."""

    def __init__(self, forks: ForkClient, config: ChildConfig, *,
                 sets_limits: bool = False, sized: bool = False) -> None:
        self.forks = forks
        self.config = config
        self.sets_limits = sets_limits  # the children are confined before their request
        # Children mount a directory of the request's size (disk_mb) before their request:
        # a spare of another size is not used.
        self.sized = sized
        self.next_disk_mb = wire.DEFAULT_DISK_MB
        self.spares: collections.deque[ChildPipes] = collections.deque()
        self._pending: ChildPipes | None = None  # asked for; the pid is not in yet
        self.session: ChildPipes | None = None
        self.session_base = 0
        self.unreaped: set[int] = set()
        # A process we did not start was collected (an orphan a run left, adopted by us as
        # the subreaper) since the last clean-up: then the clean-up always runs.
        self.adopted = False

    # -- children ---------------------------------------------------------------------
    def _disk_mb(self, limits: dict[str, Any] | None = None) -> int:
        if not self.sized:
            return 0
        return int((limits or {}).get("disk_mb") or self.next_disk_mb)

    def _ask(self, command: bytes, disk_mb: int = 0) -> ChildPipes:
        """Ask the forkserver for a child; its pid arrives with `_receive`."""
        self._settle()
        ends = [os.pipe() for _ in range(4)]
        (out_r, out_w), (err_r, err_w), (res_r, res_w), (go_r, go_w) = ends
        pipes = ChildPipes(pid=0, stdout=out_r, stderr=err_r, result=res_r, request=go_w,
                           pidfd=None, disk_mb=disk_mb)
        try:
            self.forks.send(command, [out_w, err_w, res_w, go_r], disk_mb)
        except OSError as exc:
            pipes.close()
            raise ForkserverGone(str(exc)) from None
        self._pending = pipes
        return pipes

    def _receive(self) -> ChildPipes | None:
        pipes, self._pending = self._pending, None
        if pipes is None:
            return None
        try:
            pid, holder = self.forks.receive()
        except OSError as exc:
            pipes.close()
            raise ForkserverGone(str(exc)) from None
        if holder > 0:
            pipes.holder = holder
        if pid <= 0:
            self._end_namespace(pipes)
            pipes.close()
            if -pid in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE):
                return None  # out of processes or memory right now: retried later
            raise ForkserverGone(f"the forkserver could not fork: {os.strerror(-pid)}")
        pipes.pid = pid
        pipes.pidfd = open_pidfd(pid)
        return pipes

    def _settle(self, wait: bool = True) -> None:
        """Collect the answer to a command still in flight (one at a time); without `wait`,
        only if it has arrived."""
        if self._pending is None:
            return
        if not wait and not select.select([self.forks.control], [], [], 0)[0]:
            return
        received = self._receive()
        if received is not None:
            self.spares.append(received)

    def prepare_spare(self) -> None:
        """Ask for a next run's child now (it forks on the other core while we work), with
        a directory the size the last request asked for."""
        self._settle(wait=False)
        if self._pending is None and len(self.spares) < SPARES:
            self._ask(FORK_RUN, self._disk_mb())

    def _take_spare(self, disk_mb: int) -> ChildPipes | None:
        if not self.spares:
            self._settle()
        while self.spares:
            spare = self.spares.popleft()
            if spare.disk_mb == disk_mb and _alive(spare):
                return spare
            self._discard(spare)
        self._ask(FORK_RUN, disk_mb)
        return self._receive()

    def _end_namespace(self, child: ChildPipes) -> None:
        """Kill the holder of the child's PID namespace: the kernel then kills whatever is
        left in it (the child, and anything the run started)."""
        if child.holder > 0:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child.holder, signal.SIGKILL)
            self.unreaped.add(child.holder)
            child.holder = 0

    def _discard(self, child: ChildPipes) -> None:
        child.close()  # end of file on its request pipe: a waiting child exits
        kill_group(child.pid)
        self._end_namespace(child)
        _reap(child.pid)

    # -- requests ---------------------------------------------------------------------
    def run(self, message: dict[str, Any]) -> dict[str, Any]:
        request = _child_request(message)
        disk_mb = self._disk_mb(request["limits"])
        self.next_disk_mb = disk_mb or self.next_disk_mb
        child = self._take_spare(disk_mb)
        if child is None:
            return _could_not_start()
        if self.sets_limits:
            # Only once it is set up: limits set while it is still setting itself up
            # would apply to that work too.
            failure = await_ready(child)
            if failure is not None:
                child.close()
                kill_group(child.pid)
                self._end_namespace(child)
                self.unreaped.add(child.pid)
                return _could_not_start(f"its process failed to set itself up: {failure}")
            apply_limits(request["limits"], self.config, pid=child.pid)
        # The next child is asked for once this one has its request, so that both run on
        # the two cores. (In a container it stays the worker's user until its own request
        # comes: out of reach of this run, and of the clean-up after it.)
        seen = watch(child, request, one_shot=True, in_container=self.config.container,
                     started_hook=self.prepare_spare)
        child.close()
        self._end_namespace(child)
        if not seen.exited:
            self.unreaped.add(child.pid)
        return judge(seen, request["limits"])

    def session_run(self, message: dict[str, Any]) -> dict[str, Any]:
        fresh = self.session is None
        request = _child_request(message)
        if self.session is None:
            self._ask(FORK_SESSION, self._disk_mb(request["limits"]))
            self.session = self._receive()
            if self.session is None:
                return {**_could_not_start(), wire.SESSION_STARTED: True}
            failure = await_ready(self.session) if self.sets_limits else None
            if failure is not None:
                self._end_session()
                return {**_could_not_start(f"its process failed to set itself up: {failure}"),
                        wire.SESSION_STARTED: True}
            # Memory limits count on top of what the child held when the session began.
            self.session_base = address_space_bytes(self.session.pid)
        if self.sets_limits:
            # Each block's limits, set while the child waits (stopped after its last block).
            # (A container's child sets them itself: this worker may not.)
            apply_limits(request["limits"], self.config, session=True, pid=self.session.pid,
                         base_address_space=self.session_base)
        seen = watch(self.session, request, one_shot=False, in_container=self.config.container)
        result = judge(seen, request["limits"])
        if seen.exited or seen.timed_out or seen.cpu_exceeded or seen.malformed or seen.trailing:
            # Its state, or its result channel, cannot be trusted any more.
            self._end_session()
            if result.get("error"):
                result["error"]["message"] += SESSION_LOST
        result[wire.SESSION_STARTED] = fresh
        return result

    def close_session(self) -> None:
        if self.session is not None:
            self._end_session()
            if self.config.container:
                self.clean_up()

    def _end_session(self) -> None:
        session, self.session = self.session, None
        if session is None:
            return
        kill_group(session.pid)
        session.close()
        self._end_namespace(session)
        _reap(session.pid)

    def clean_up(self) -> None:
        """Container mode, after a run: the forkserver clears what it left (as the sandbox
        user), then the orphans it killed are collected."""
        self._settle()
        if self.session is not None:
            self._end_session()  # the clean-up ends every process of the sandbox user
        self.reap()
        if not self.adopted and nothing_left(self.config):
            # Seen from outside: no process, file or IPC object of the sandbox user. A
            # process the look missed (made after it listed /proc) has a parent that
            # ended while it looked: that parent, or an ancestor, is an orphan we adopted,
            # and collecting it now tells us.
            self.reap()
            if not self.adopted:
                return
        try:
            self.forks.request(CLEAN)
        except OSError as exc:
            raise ForkserverGone(str(exc)) from None
        self.reap()
        self.adopted = False

    def reap(self) -> None:
        """Collect children that are gone: runs reported and killed, and (in containers)
        processes that user code left behind, which we adopt as a subreaper."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.forks.pid:
                raise ForkserverGone("the forkserver exited")
            if pid in self.unreaped:
                self.unreaped.discard(pid)
            else:
                self.adopted = True

    def close(self) -> None:
        self._settle()
        self._end_session()
        while self.spares:
            self._discard(self.spares.popleft())
        self.forks.close()
        for pid in list(self.unreaped):
            _reap(pid)


def _alive(child: ChildPipes) -> bool:
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _could_not_start(reason: str = "out of processes or memory on the host"
                     ) -> dict[str, Any]:
    return {"status": "crashed", "exit_code": None, "stdout": "", "stderr": "",
            "error": {"type": error_types.WORKER_ERROR, "traceback": "",
                      "message": f"could not start the run: {reason}"}}


def _child_request(message: dict[str, Any]) -> dict[str, Any]:
    """What a child gets: the work, not the protocol's message id or type."""
    return {key: message[key] for key in (*wire.REQUEST_FIELDS, BLOBS) if key in message}


def _write_reply(fd: int, reply: dict[str, Any]) -> None:
    """Send a reply; one too large for a frame (huge, heavily escaped output) is sent with
    its output cut further, flagged as truncated, rather than failing the worker."""
    try:
        write_message(fd, reply)
        return
    except ProtocolError:
        pass
    from .judge import TRUNCATION_MARKER

    room = MAX_MESSAGE_BYTES // 16  # characters per stream; JSON escaping grows them <= 6x
    for stream in ("stdout", "stderr"):
        text = reply.get(stream) or ""
        if len(text) > room:
            reply[stream] = text[:room] + TRUNCATION_MARKER
            reply[f"{stream}_truncated"] = True
    try:
        write_message(fd, reply)
    except ProtocolError as exc:  # e.g. an enormous return value
        write_message(fd, {"type": wire.RESULT, "id": reply.get("id"), "status": "crashed",
                           "exit_code": None, "stdout": "", "stderr": "",
                           "error": {"type": error_types.WORKER_ERROR, "traceback": "",
                                     "message": f"the result was too large to send: {exc}"}})


def _take_protocol_fds() -> tuple[int, int]:
    """Move the protocol off fds 0/1 so stray prints cannot corrupt a frame."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    return in_fd, out_fd


def _prctl(option: int, value: int) -> None:
    """Not dumpable: processes of the same user cannot open our /proc files (the pipes to
    the host) or trace us. Subreaper: children the forkserver orphans become ours."""
    from .child import _prctl as prctl

    prctl(option, value, 0, 0, 0)


def serve(executor: Executor, ready_info: dict[str, Any], config: ChildConfig) -> None:
    """Split into forkserver and supervisor, then answer requests until stdin closes."""
    in_fd, out_fd = _take_protocol_fds()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when we stop
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Runs that touch no files (the restricted tier, whose jail has a read-only /tmp) get
    # no working directory, and runs that mount their own (the jail tier) make it
    # themselves: the worker makes a directory for them only in a container.
    base_dir = tempfile.mkdtemp(prefix="runner-worker-") \
        if executor.uses_files and not executor.mounts_run_dir else None
    if base_dir is not None and config.container:
        os.chmod(base_dir, 0o1777)  # children (the sandbox user) make their workdirs here
    config = dataclasses.replace(config, base_dir=base_dir, supervisor_pid=os.getpid())
    collect_generators()
    # Everything imported so far is shared with every child; keep the collector from
    # touching (and so copying) those pages after each fork.
    gc.collect()
    gc.freeze()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    forkserver = os.fork()
    if forkserver == 0:
        os.close(in_fd)
        os.close(out_fd)
        ours.close()
        serve_forks(executor, config, theirs)
    theirs.close()
    supervisor = Supervisor(ForkClient(ours, forkserver), config,
                            sets_limits=executor.confined_before_request,
                            sized=executor.mounts_run_dir)
    try:
        supervisor.prepare_spare()
        if config.container:
            # What the warm worker holds: the host sets the container's memory limit to
            # this plus one run's limit, so a run's processes together stay within theirs.
            ready_info = {**ready_info, wire.MEMORY_IN_USE: memory_in_use()}
        write_message(out_fd, {"type": wire.READY, "pid": os.getpid(), "forkserver": forkserver,
                               "executor": executor.name,
                               "python": sys.version.split()[0], **ready_info})
        while True:
            supervisor.reap()
            message = read_message(in_fd)
            if message is None:
                return
            kind = message.get("type")
            reply: dict[str, Any]
            if kind == wire.RUN:
                reply = {"type": wire.RESULT, **supervisor.run(message)}
            elif kind == wire.SESSION_RUN:
                reply = {"type": wire.RESULT, **supervisor.session_run(message)}
            elif kind == wire.SESSION_CLOSE:
                supervisor.close_session()
                reply = {"type": wire.SESSION_CLOSED}
            elif kind == wire.PING:
                reply = {"type": wire.PONG}
            else:
                reply = {"type": wire.ERROR, "message": f"unknown message type {kind!r}"}
            _write_reply(out_fd, {**reply, "id": message.get("id")})
            if config.container and kind == wire.RUN:
                # After the reply (off the caller's clock), before the next request is
                # read: nothing of this run survives into the next one.
                supervisor.clean_up()
                supervisor.prepare_spare()
    finally:
        supervisor.close()
        if base_dir is not None:
            shutil.rmtree(base_dir, ignore_errors=True)
