"""Watching one request run in a child: the supervisor's single watch loop.

For one-shot children and session children alike: hand the child its request, read
its stdout and stderr with byte caps and its result pipe frame by frame, kill its
process group at the wall-clock deadline, and note how it ended (wait status, CPU time,
peak memory). What the observation holds about limits comes from the supervisor's own
clock and the kernel, never from the child; the child contributes only its frames.

A one-shot child's report counts once the child has stopped running user code: it has
exited, or its only thread has begun to exit. A report followed by more work (a forged
report, then a loop) is therefore a timeout, not the forged result. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import wire
from .cgroup import CpuMeter, oom_kills
from .cgroup import cpu_used_ns as cgroup_cpu_used_ns
from .child import process_cpu_ns
from .protocol import (
    BLOBS,
    PIPE_DEFAULT_BYTES,
    PIPE_MOST_BYTES,
    FrameReader,
    ProtocolError,
    make_room,
    write_message,
)

DRAIN_SECONDS = 0.5  # after the child exits, how long descendants may keep pipes open
PF_EXITING = 0x4


class Capture:
    """Keeps the first `cap` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass
class Observation:
    """Everything the supervisor saw of one request."""

    stdout: Capture
    stderr: Capture
    outcome: dict[str, Any] | None = None  # the child's report, if one arrived whole
    denial: str | None = None               # the first refusal the child announced
    malformed: str | None = None            # why the result channel could not be read
    trailing: str | None = None             # what came on the result channel after the report
    one_shot: bool = True
    timed_out: bool = False
    cpu_exceeded: bool = False              # its processes together used up its CPU time
    exited: bool = False                    # the child is gone (its status is below)
    wait_status: int | None = None
    cpu_ms: int = 0
    max_rss_kb: int = 0
    duration_ms: int = 0
    oom_kills_before: int | None = None
    isolation: dict[str, Any] | None = None  # what the child said confines it, when ready
    extra: dict[str, Any] = field(default_factory=dict)


def kill_group(pid: int) -> None:
    # Gone already (or the id was reused by something that is not ours): nothing to do.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def cpu_ms_of(pid: int) -> int | None:
    """CPU time of a live child so far, all its threads together."""
    used = process_cpu_ns(pid)
    return None if used is None else used // 1_000_000


def peak_rss_kb_of(pid: int) -> int | None:
    """Peak resident memory of a live child; None once it has released its memory."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/<pid>/stat after the command name (field 3 is index 0)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


STOPPED, EXITING = "stopped", "exiting"


def finished_running(pid: int) -> str | None:
    """Whether the child runs no more user code, and how: STOPPED (a child stops itself
    once its report is written; the kernel reports the stop to us, its parent, only once
    every thread has stopped), or EXITING (its only thread has begun to exit, or it is a
    zombie, or gone): which a child never does by itself after its report, so then its
    exit status decides. With several threads only the real exit counts. None: it runs."""
    try:
        stop = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return EXITING
    if stop is not None and stop.si_code == os.CLD_STOPPED:
        return STOPPED
    fields = _stat_fields(pid)
    if fields is None:
        return EXITING
    try:
        state, flags, threads = fields[0], int(fields[6]), int(fields[17])
    except (ValueError, IndexError):
        return None
    if state in (b"Z", b"X"):
        return EXITING if threads <= 1 else None
    return EXITING if threads == 1 and flags & PF_EXITING else None


@dataclass
class ChildPipes:
    """The supervisor's ends of one child's pipes, and how to wait for it."""

    pid: int
    stdout: int
    stderr: int
    result: int
    request: int
    pidfd: int | None
    reader: FrameReader = field(default_factory=lambda: FrameReader(wire.MAX_REPORT_BYTES))
    holder: int = 0  # the pid of its PID namespace's holder (0: none); killed with it
    disk_mb: int = 0  # the size of the directory it mounted (0: none)
    seq: int | None = None  # a session child: the number of the block being run
    ready: bool = False  # it said it is set up and waiting for its request
    isolation: dict[str, Any] | None = None  # the layers it said were in place, when ready

    def close(self) -> None:
        for fd in (self.stdout, self.stderr, self.result, self.request):
            _close(fd)
        if self.pidfd is not None:
            _close(self.pidfd)
            self.pidfd = None
        self.stdout = self.stderr = self.result = self.request = -1


def _close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def await_ready(child: ChildPipes, timeout_s: float = 30.0) -> str | None:
    """Wait until the child says it is set up (its first frame): None then, else why it
    is not (it died, went quiet, or said what failed). Nothing but the ready frame can
    come before the request."""
    deadline = time.monotonic() + timeout_s
    while not child.ready:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return f"it did not get ready within {timeout_s:g} s"
        ready, _, _ = select.select([child.result], [], [], remaining)
        if not ready:
            continue
        try:
            chunk = os.read(child.result, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            return "it ended before it was ready"
        seen = Observation(Capture(0), Capture(0))
        _take_frames(child, chunk, seen)
        if seen.malformed or seen.denial or seen.outcome:
            error = (seen.outcome or {}).get("error")
            said = error.get("message") if isinstance(error, dict) else None
            return str(said)[:2000] if said else "it sent something else than being ready"
    return None


def open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def watch(child: ChildPipes, request: dict[str, Any], *, one_shot: bool,
          in_container: bool, started_hook: Callable[[], None] | None = None) -> Observation:
    """Run `request` in `child` and observe it until it reports (and, one-shot, stops),
    dies, or reaches its deadline. The child's pipes stay open for a session. In a
    container (`in_container`) the run's processes share its control group: their CPU
    time together is stopped at the run's CPU limit, and an out-of-memory kill of any
    of them is seen.
    `started_hook` is called once the child has its request (the supervisor asks for the
    next child then, so that it is made on the other core while this one runs)."""
    limits = request["limits"]
    cap = int(limits["max_output_bytes"])
    seen = Observation(Capture(cap), Capture(cap), one_shot=one_shot,
                       oom_kills_before=oom_kills() if in_container else None)
    # Its CPU time, every thread (and, in a container, every process) together, is stopped
    # at its limit from here: the kernel's RLIMIT_CPU counts whole seconds only.
    meter = CpuMeter(float(limits.get("cpu_s") or limits["timeout_s"]),
                     cgroup_cpu_used_ns if in_container else lambda: process_cpu_ns(child.pid))
    started = time.monotonic()
    deadline = started + float(limits["timeout_s"])
    cpu_before = (cpu_ms_of(child.pid) or 0) if not one_shot else 0
    if not one_shot:
        child.seq = (child.seq or 0) + 1
        request = {**request, wire.SEQ: child.seq}
    if not one_shot:
        # A session child waits stopped between blocks (it stops itself after each report):
        # continued first, so that the stop after this block's report is the one we see.
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGCONT)
    # A child that died before its request is judged like any crash below.
    with contextlib.suppress(OSError):
        write_message(child.request, request)
    if one_shot:
        _close(child.request)
        child.request = -1
    if started_hook is not None:
        started_hook()
    streams = {child.stdout: seen.stdout, child.stderr: seen.stderr}
    open_fds = {child.stdout, child.stderr, child.result}
    for fd in open_fds:
        os.set_blocking(fd, False)
    drain_until: float | None = None
    settle_from: float | None = None  # when a finished-looking child was first seen running
    while True:
        now = time.monotonic()
        if seen.exited:
            if not open_fds or now >= (drain_until or now):
                break
        elif now >= deadline:
            seen.timed_out = True
            kill_group(child.pid)
            _wait(child, seen)
            break
        cpu_due = meter.seconds_until_due() if not seen.exited and not _reported(seen) \
            else None
        if cpu_due == 0.0:
            # Its processes together used its CPU time: the child's group now, the rest
            # by the clean-up after the reply.
            seen.cpu_exceeded = True
            kill_group(child.pid)
            _wait(child, seen)
            break
        if not seen.exited and _reported(seen):
            # Report in: it counts once the child stops running (it stops itself; a
            # session child is continued for its next block) and, one-shot, its pipes
            # are closed. Usage first: an exiting child soon releases its memory, and its
            # figures.
            peak, cpu = peak_rss_kb_of(child.pid), cpu_ms_of(child.pid)
            finished = finished_running(child.pid)
            if finished == EXITING:
                # Exiting after a report: the code it ran ended it (a child stops itself
                # once its report is written). Its exit status tells (judge.py).
                if peak is not None:
                    seen.max_rss_kb, seen.cpu_ms = peak, cpu or 0
                _wait(child, seen)
                break
            if finished == STOPPED:
                if not one_shot:
                    # Stopped: everything it wrote is in the pipes now.
                    for fd in list(open_fds):
                        _drain(fd, streams.get(fd), child, seen)
                    break
                seen.max_rss_kb, seen.cpu_ms = peak or 0, cpu or 0
                if not open_fds:
                    break
                # Processes it started still hold its pipes: as after an exit, they get
                # a moment to finish writing, then the group is killed.
                drain_until = drain_until or now + DRAIN_SECONDS
                if now >= drain_until:
                    break
            else:
                settle_from = settle_from or now
        waiting = list(open_fds)
        if not seen.exited and child.pidfd is not None:
            waiting.append(child.pidfd)
        if seen.exited:
            timeout = (drain_until or now) - now
        else:
            timeout = deadline - now
            if child.pidfd is None:
                timeout = min(timeout, 0.01)
            if cpu_due is not None:
                timeout = min(timeout, cpu_due)
            if drain_until is not None:
                timeout = min(timeout, drain_until - now)
            if settle_from is not None:
                # It is about to stop (or exit): look again soon, and keep looking, since a
                # stop is not something the pidfd tells (a busy machine may delay it).
                timeout = min(timeout, 0.0002 if now - settle_from < 0.01 else 0.005)
        ready, _, _ = select.select(waiting, [], [], max(0.0, min(timeout, 3600.0)))
        for fd in ready:
            if fd == child.pidfd:
                continue
            chunk = _read_available(fd, PIPE_MOST_BYTES if fd == child.result else PIPE_DEFAULT_BYTES)
            if chunk is None:
                continue
            if not chunk:
                open_fds.discard(fd)
                continue
            if fd == child.result:
                _take_frames(child, chunk, seen)
            else:
                streams[fd].feed(chunk)
        if not seen.exited and _has_exited(child, ready):
            seen.exited = True
            drain_until = time.monotonic() + DRAIN_SECONDS
            if not one_shot:
                # A session child that died: its last output is already in the pipes.
                for fd in list(open_fds):
                    _drain(fd, streams.get(fd), child, seen)
                _wait(child, seen)
                break
    for fd in list(open_fds):  # a block's output was flushed before its report
        _drain(fd, streams.get(fd), child, seen)
    if seen.outcome is not None and child.reader.pending and seen.trailing is None:
        seen.trailing = "an unfinished frame"
    if one_shot and seen.exited and seen.wait_status is None:
        kill_group(child.pid)  # anything the run left in its process group
        _wait(child, seen)
    elif one_shot and not seen.exited:
        kill_group(child.pid)  # it has stopped: reaped later
    if not one_shot and not seen.exited:
        seen.cpu_ms = max(0, (cpu_ms_of(child.pid) or cpu_before) - cpu_before)
        seen.max_rss_kb = peak_rss_kb_of(child.pid) or 0
    elif not one_shot and seen.wait_status is not None:
        seen.cpu_ms = max(0, seen.cpu_ms - cpu_before)
    seen.duration_ms = int((time.monotonic() - started) * 1000)
    seen.isolation = child.isolation
    return seen


def _reported(seen: Observation) -> bool:
    return seen.outcome is not None or seen.malformed is not None


def _take_frames(child: ChildPipes, chunk: bytes, seen: Observation) -> None:
    """Refusals count wherever they appear. A request's report is the one report the
    child sends before it stops (one-shot) or goes back to its read loop (a session
    block's, carrying the block's number; reports left over from earlier blocks are
    ignored). Anything after it (a second report, another frame, an unfinished frame)
    is kept in `trailing`: the run wrote on the result channel itself, and a run may
    decide its output and return value, never its status."""
    if seen.malformed is not None:
        return
    child.reader.feed(chunk)
    make_room(child.result, child.reader.needed())
    while True:
        try:
            frame = child.reader.next()
        except ProtocolError as exc:
            seen.malformed = str(exc)
            return
        if frame is None:
            return
        kind = frame.get("kind")
        if kind == wire.CHILD_READY and not child.ready:
            child.ready = True
            isolation = frame.get(wire.ISOLATION)
            if isinstance(isolation, dict):
                child.isolation = {key: isolation[key] for key in wire.ISOLATION_FIELDS
                                   if key in isolation}
        elif kind == wire.DENIED:
            if seen.denial is None:
                message = frame.get("message")
                seen.denial = message if isinstance(message, str) else "refused"
        elif kind == wire.REPORT and isinstance(frame.get("outcome"), dict):
            if child.seq is not None and frame.get(wire.SEQ) != child.seq:
                if seen.outcome is not None:
                    seen.trailing = seen.trailing or "a report for another block"
            elif seen.outcome is None:
                seen.outcome = frame["outcome"]
                if frame.get(BLOBS):  # the bytes of the files it made (run_files.py)
                    seen.outcome[BLOBS] = frame[BLOBS]
            else:
                seen.trailing = seen.trailing or "a second report"
        else:
            seen.malformed = "the child sent a frame that is neither a report nor a refusal"
            return


def _read_available(fd: int, size: int = PIPE_DEFAULT_BYTES) -> bytes | None:
    """What the pipe holds now; b"" at end of file, None when nothing is there yet."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _drain(fd: int, capture: Capture | None, child: ChildPipes, seen: Observation) -> None:
    while True:
        chunk = _read_available(fd)
        if not chunk:
            return
        if capture is not None:
            capture.feed(chunk)
        elif fd == child.result:
            _take_frames(child, chunk, seen)


def _has_exited(child: ChildPipes, ready: list[int]) -> bool:
    if child.pidfd is not None:
        return child.pidfd in ready
    try:
        return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _wait(child: ChildPipes, seen: Observation) -> None:
    try:
        _, status, usage = os.wait4(child.pid, 0)
    except ChildProcessError:
        seen.exited = True
        return
    seen.exited = True
    seen.wait_status = status
    seen.cpu_ms = int((usage.ru_utime + usage.ru_stime) * 1000)
    seen.max_rss_kb = int(usage.ru_maxrss)
