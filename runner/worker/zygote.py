"""The warm parent: preloaded once, forks a child per run, judges how the child ended.

The zygote reads framed requests, forks a child for each (see child.py), collects its
stdout/stderr with byte caps and its outcome from the result pipe, kills the child's
whole process group at the wall-clock deadline, and tells timeout, memory limit and
crash apart from how the child ended. Everything the zygote reports about limits comes
from its own observation (wait status, rusage, its own clock), never from the child.
Stdlib only.
"""

from __future__ import annotations

import errno
import gc
import json
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .child import Executor, child_main, session_main
from .protocol import HEADER, MAX_MESSAGE_BYTES, ProtocolError, read_message, write_message

MAX_RESULT_BYTES = 32 * 1024 * 1024
DRAIN_SECONDS = 0.5  # after the child exits, how long descendants may keep pipes open
TRUNCATION_MARKER = "\n[... output truncated ...]\n"


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


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:  # the group is gone and the id was reused: nothing of ours
        pass


def _open_pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


class Watch:
    """Everything the parent saw of one child."""

    def __init__(self, limits: dict[str, Any]) -> None:
        cap = int(limits["max_output_bytes"])
        self.stdout = Capture(cap)
        self.stderr = Capture(cap)
        self.result = Capture(MAX_RESULT_BYTES)
        self.timed_out = False
        self.reaped = False  # False: the child reported and was killed; reap it later
        self.wait_status = 0
        self.cpu_ms = 0
        self.max_rss_kb = 0
        self.duration_ms = 0
        self.memory_mb = int(limits.get("memory_mb") or 0)
        self.oom_before = _oom_kills() if CHECK_OOM else None

    def oom_killed(self) -> bool:
        after = _oom_kills() if CHECK_OOM else None
        if after is not None and self.oom_before is not None:
            return after > self.oom_before
        # No cgroup counter to read: judge by how much memory the run had reached.
        return self.max_rss_kb >= self.memory_mb * 1024 * 0.8

    def reported(self) -> bool:
        """A complete result arrived and the child closed every stream it had."""
        if not self.result.data or self.result.truncated:
            return False
        return _parse_report(bytes(self.result.data)) is not None


# Set in containers, where the cgroup's OOM killer is how memory limits end runs. On the
# host (restricted tier) memory ends a run with MemoryError under RLIMIT_AS instead.
CHECK_OOM = False
_OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")


def _oom_kills() -> int | None:
    """The cgroup's count of out-of-memory kills (v2 or v1), if it can be read."""
    for path in _OOM_FILES:
        try:
            with open(path, "rb") as events:
                for line in events:
                    if line.startswith(b"oom_kill "):
                        return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return None


def _cpu_ms_of(pid: int) -> int | None:
    """CPU time of a live child so far, read by the parent (ns-precise where possible)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as stat:
            return int(stat.read().split()[0]) // 1_000_000
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _peak_rss_kb_of(pid: int) -> int | None:
    """Peak resident memory of a live child; None once it has released its memory
    (exiting or a zombie), when waiting for it costs nothing and wait4 gives exact figures."""
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _watch_child(pid: int, fds: dict[int, Capture], deadline: float, watch: Watch) -> None:
    pidfd = _open_pidfd(pid)
    for fd in fds:
        os.set_blocking(fd, False)
    exited = False
    drain_until = 0.0
    try:
        while fds or not exited:
            now = time.monotonic()
            if not exited and now >= deadline:
                watch.timed_out = True
                _kill_group(pid)
                deadline = float("inf")
            if exited and now >= drain_until:
                break
            waiting = list(fds)
            if not exited and pidfd is not None:
                waiting.append(pidfd)
            limit = (drain_until if exited else deadline) - now
            # Without a pidfd, poll the child's state at a short interval instead.
            if pidfd is None and not exited:
                limit = min(limit, 0.01)
            ready, _, _ = select.select(waiting, [], [], max(0.0, min(limit, 3600.0)))
            for fd in ready:
                if fd == pidfd:
                    continue
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if chunk:
                    fds[fd].feed(chunk)
                else:
                    os.close(fd)
                    del fds[fd]
            if not fds and not exited and not watch.timed_out and watch.reported():
                # The child closed its streams after a complete report: it is about to
                # exit. Take its usage now and leave the exit (unmapping a large
                # address space takes about a millisecond) off the critical path.
                peak = _peak_rss_kb_of(pid)
                if peak is not None:
                    watch.max_rss_kb = peak
                    watch.cpu_ms = _cpu_ms_of(pid) or 0
                    return
            if not exited:
                if pidfd is not None:
                    exited = pidfd in ready
                else:
                    exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
                if exited:
                    drain_until = time.monotonic() + DRAIN_SECONDS
    finally:
        for fd in list(fds):
            os.close(fd)
        if pidfd is not None:
            os.close(pidfd)
        # Anything the run started in its process group dies with it.
        _kill_group(pid)
    _, status, usage = os.wait4(pid, 0)
    watch.reaped = True
    watch.wait_status = status
    watch.cpu_ms = int((usage.ru_utime + usage.ru_stime) * 1000)
    watch.max_rss_kb = int(usage.ru_maxrss)


def _parse_report(data: bytes) -> dict[str, Any] | None:
    """A child's report, or None. The child is untrusted: nothing it sends may end the
    zygote (deep nesting, wrong types), and only the expected shapes pass."""
    try:
        report = json.loads(data.decode("utf-8"))
    except Exception:  # noqa: BLE001 - includes RecursionError and MemoryError subclasses
        return None
    if not isinstance(report, dict) or not isinstance(report.get("kind"), str):
        return None
    error = report.get("error")
    if error is not None and not (isinstance(error, dict) and all(
            isinstance(error.get(key, ""), str) for key in ("type", "message", "traceback"))):
        report["error"] = {"type": "Error", "message": repr(error)[:2000], "traceback": ""}
    code = report.get("exit_code")
    if code is not None and not (isinstance(code, int) and 0 <= code <= 255):
        report["exit_code"] = 1  # an exit status is 0-255; anything else counts as 1
    return report


def _judge(watch: Watch, limits: dict[str, Any]) -> dict[str, Any]:
    """Turn what the parent saw into status, exit code and error."""
    outcome: dict[str, Any] | None = None
    if watch.result.data and not watch.result.truncated:
        outcome = _parse_report(bytes(watch.result.data))
    status = watch.wait_status
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    timeout_s = limits["timeout_s"]
    cpu_s = limits.get("cpu_s") or timeout_s

    def fail(kind: str, type_: str, message: str, exit_code: int | None) -> dict[str, Any]:
        return {"status": kind, "exit_code": exit_code,
                "error": {"type": type_, "message": message, "traceback": ""}, "return_value": None}

    if watch.timed_out:
        return fail("timeout", "Timeout",
                    f"wall-clock time limit of {timeout_s:g} s exceeded; the run was killed",
                    -signal.SIGKILL)
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and watch.cpu_ms >= cpu_s * 1000):
        return fail("timeout", "Timeout",
                    f"CPU time limit of {cpu_s:g} s exceeded; the run was killed", -signum)
    if signum == signal.SIGKILL:
        # Killed by something other than us: the out-of-memory killer, if the evidence
        # says so; otherwise the run killed itself (or a process it started did).
        if watch.oom_killed():
            return fail("memory_limit", "MemoryError",
                        f"memory limit of {limits['memory_mb']} MB exceeded; the run was killed",
                        -signum)
        return fail("crashed", "Crash", "the run was killed by SIGKILL (not by the runner)",
                    -signum)
    if signum is not None:
        name = signal.Signals(signum).name
        stderr = watch.stderr.text()
        if "MemoryError" in stderr or "out of memory" in stderr.lower():
            return fail("memory_limit", "MemoryError",
                        f"memory limit of {limits['memory_mb']} MB exceeded ({name})", -signum)
        return fail("crashed", "Crash", f"the run was terminated by signal {name}", -signum)
    if outcome is None:
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        why = ("its result was larger than the result channel allows"
               if watch.result.truncated else "it ended without reporting a result")
        return fail("crashed", "Crash", f"the run crashed: {why} (exit status {exit_code})",
                    exit_code)
    return _judge_outcome(outcome, limits)


def _judge_outcome(outcome: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    kind = outcome.get("kind")
    error = outcome.get("error")
    value = outcome.get("return_value")
    if kind == "ok":
        return {"status": "ok", "exit_code": 0, "error": None, "return_value": value,
                "return_repr": outcome.get("return_repr"),
                "return_is_repr": bool(outcome.get("return_is_repr"))}
    if kind == "exit":
        code = outcome.get("exit_code")
        if code in (0, None):
            return {"status": "ok", "exit_code": 0, "error": None, "return_value": None}
        return {"status": "error", "exit_code": code if isinstance(code, int) else 1,
                "error": error, "return_value": None}
    if kind == "denied":
        return {"status": "denied", "exit_code": 1, "error": error, "return_value": None}
    if kind == "error":
        if error and error.get("type") == "MemoryError":
            error = dict(error)
            error["message"] = (f"memory limit of {limits['memory_mb']} MB exceeded"
                                + (f": {error['message']}" if error.get("message") else ""))
            return {"status": "memory_limit", "exit_code": 1, "error": error, "return_value": None}
        return {"status": "error", "exit_code": 1, "error": error, "return_value": None}
    if kind == "invalid_args":
        return {"status": "invalid_args", "exit_code": 1, "error": error, "return_value": None}
    message = (error or {}).get("message", "unknown failure")
    return {"status": "crashed", "exit_code": None,
            "error": {"type": "WorkerError", "message": f"the worker failed: {message}",
                      "traceback": ""},
            "return_value": None}


class ForkedChild:
    """A child forked with its four pipes: stdout, stderr, result (to us), requests (to it).

    `main` is what the child runs (child_main for one request, session_main for many);
    it sets itself up and then blocks until a request arrives on its pipe.
    """

    def __init__(self, executor: Executor, base_dir: str, main: Callable[..., Any],
                 prefix: str) -> None:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        res_r, res_w = os.pipe()
        go_r, go_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (out_r, err_r, res_r, go_w):
                    os.close(fd)
                main(executor, workdir=os.path.join(base_dir, f"{prefix}{os.getpid()}"),
                     stdout_fd=out_w, stderr_fd=err_w, result_fd=res_w, request_fd=go_r)
            finally:  # whatever happens, a child never unwinds into the zygote's frames
                os._exit(70)
        # The child makes this directory itself once it has a request (see enter_workdir).
        self.workdir = os.path.join(base_dir, f"{prefix}{pid}")
        for fd in (out_w, err_w, res_w, go_r):
            os.close(fd)
        self.pid = pid
        self.out_r, self.err_r, self.res_r, self.go_w = out_r, err_r, res_r, go_w


class Spare(ForkedChild):
    """A child forked ahead of time, set up and blocked until it is handed a request."""

    def __init__(self, executor: Executor, base_dir: str) -> None:
        super().__init__(executor, base_dir, child_main, "run-")

    def discard(self) -> None:
        os.close(self.go_w)  # end of file: the child exits
        for fd in (self.out_r, self.err_r, self.res_r):
            os.close(fd)
        _kill_group(self.pid)
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:  # already reaped (found dead by ensure_spare)
            pass
        shutil.rmtree(self.workdir, ignore_errors=True)


def run_one(spare: Spare, request: dict[str, Any],
            while_running: Callable[[], None] = lambda: None) -> tuple[dict[str, Any], bool]:
    """Hand `request` to `spare` and watch it. Returns the result and whether it was reaped.

    `while_running` is called once the child has its request (the zygote uses it to fork
    the next spare on the other core while this run executes).
    """
    limits = request["limits"]
    watch = Watch(limits)
    started = time.monotonic()
    try:
        try:
            write_message(spare.go_w, request)
        except BrokenPipeError:
            pass  # the spare died before its request: judged like any crash below
        os.close(spare.go_w)
        while_running()
        _watch_child(spare.pid,
                     {spare.out_r: watch.stdout, spare.err_r: watch.stderr, spare.res_r: watch.result},
                     started + float(limits["timeout_s"]), watch)
    finally:
        shutil.rmtree(spare.workdir, ignore_errors=True)
    watch.duration_ms = int((time.monotonic() - started) * 1000)
    return _finish(_judge(watch, limits), watch), watch.reaped


class SessionChild(ForkedChild):
    """A child that keeps its namespace between requests; lives until closed or killed."""

    def __init__(self, executor: Executor, base_dir: str) -> None:
        super().__init__(executor, base_dir, session_main, "session-")
        for fd in (self.out_r, self.err_r, self.res_r):
            os.set_blocking(fd, False)
        self.pidfd = _open_pidfd(self.pid)
        self.alive = True
        self.blocks = 0

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        limits = request["limits"]
        watch = Watch(limits)
        started = time.monotonic()
        deadline = started + float(limits["timeout_s"])
        cpu_before = _cpu_ms_of(self.pid) or 0
        frame = bytearray()
        outcome: dict[str, Any] | None = None
        try:
            write_message(self.go_w, request)
        except BrokenPipeError:
            self.alive = False
        streams = {self.out_r: watch.stdout, self.err_r: watch.stderr}
        while self.alive and outcome is None:
            now = time.monotonic()
            if now >= deadline:
                watch.timed_out = True
                break
            waiting = [self.out_r, self.err_r, self.res_r]
            if self.pidfd is not None:
                waiting.append(self.pidfd)
            ready, _, _ = select.select(waiting, [], [], min(deadline - now, 0.05
                                                              if self.pidfd is None else 3600))
            for fd in ready:
                if fd in streams:
                    _read_into(fd, streams[fd])
                elif fd == self.res_r:
                    chunk = _read_available(fd)
                    if chunk is None:
                        continue
                    if not chunk:
                        self.alive = False
                    frame += chunk
                    outcome = _complete_frame(frame)
            if outcome is None and not self._still_running(ready):
                self.alive = False
        for fd, capture in streams.items():  # the block's output was flushed before its report
            _read_into(fd, capture)
        self.blocks += 1
        if outcome is not None and self.alive:
            watch.cpu_ms = max(0, (_cpu_ms_of(self.pid) or cpu_before) - cpu_before)
            watch.max_rss_kb = _peak_rss_kb_of(self.pid) or 0
            judged = _judge_outcome(outcome, limits)
        else:
            status, usage = self.kill()
            watch.wait_status = status
            if usage is not None:
                watch.cpu_ms = max(0, int((usage.ru_utime + usage.ru_stime) * 1000) - cpu_before)
                watch.max_rss_kb = int(usage.ru_maxrss)
            judged = _judge(watch, limits)
            judged["error"]["message"] += ("; the session's state is lost, and its next block "
                                           "starts a fresh session")
        watch.duration_ms = int((time.monotonic() - started) * 1000)
        return _finish(judged, watch)

    def _still_running(self, ready: list[int]) -> bool:
        if self.pidfd is not None:
            return self.pidfd not in ready
        return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

    def kill(self) -> tuple[int, Any]:
        """Kill the child; its wait status and usage (which _judge reads)."""
        self.alive = False
        _kill_group(self.pid)
        try:
            _, status, usage = os.wait4(self.pid, 0)
        except ChildProcessError:
            return 0, None
        return status, usage

    def close(self) -> None:
        if self.alive:
            self.kill()
        for fd in (self.go_w, self.out_r, self.err_r, self.res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        shutil.rmtree(self.workdir, ignore_errors=True)


def _read_available(fd: int) -> bytes | None:
    """What the pipe holds now; b"" at end of file, None when nothing is there yet."""
    try:
        return os.read(fd, 1 << 16)
    except BlockingIOError:
        return None


def _read_into(fd: int, capture: Capture) -> None:
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        capture.feed(chunk)


def _complete_frame(frame: bytearray) -> dict[str, Any] | None:
    if len(frame) < HEADER.size:
        return None
    (size,) = HEADER.unpack(frame[:HEADER.size])
    if len(frame) < HEADER.size + size:
        return None
    message = _parse_report(bytes(frame[HEADER.size:HEADER.size + size]))
    return message if message is not None else {
        "kind": "internal", "error": {"message": "the session sent a malformed report"}}


def _finish(judged: dict[str, Any], watch: Watch) -> dict[str, Any]:
    stdout, stderr = watch.stdout.text(), watch.stderr.text()
    if watch.stdout.truncated:
        stdout += TRUNCATION_MARKER
    if watch.stderr.truncated:
        stderr += TRUNCATION_MARKER
    judged.update(
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=watch.stdout.truncated,
        stderr_truncated=watch.stderr.truncated,
        duration_ms=watch.duration_ms,
        resources={"cpu_ms": watch.cpu_ms, "max_rss_kb": watch.max_rss_kb},
    )
    return judged


def _take_protocol_fds() -> tuple[int, int]:
    """Move the protocol off fds 0/1 so stray prints cannot corrupt a frame."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    return in_fd, out_fd


def _new_spare(executor: Executor, base_dir: str) -> Spare | None:
    try:
        return Spare(executor, base_dir)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE):
            raise
        return None  # out of processes or memory right now: retried at the next request


def _reap_finished(pids: list[int]) -> None:
    """Collect children that reported and were killed, without waiting for any."""
    for pid in list(pids):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            pids.remove(pid)


def _kill_strays(keep: set[int]) -> None:
    """In a container the worker owns the process namespace: anything alive that it is
    not keeping (a daemonised grandchild that left its process group) is killed."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        if pid in keep or pid == me or pid == 1 or pid == os.getppid():
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _clear_scratch(keep: str) -> None:
    """In a container: what a run left in /tmp or /dev/shm must not reach the next run."""
    for directory in ("/tmp", "/dev/shm"):
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for name in entries:
            path = os.path.join(directory, name)
            if path == keep:
                continue
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def _not_dumpable() -> None:
    """Children run as our user; without this they could open /proc/<worker>/fd/* (our
    pipes to the host, or the next run's) and write there. Inherited by every fork."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


class Zygote:
    """The request loop's state: the spare child, an open session, children to reap."""

    def __init__(self, executor: Executor, base_dir: str, *, container: bool) -> None:
        self.executor = executor
        self.base_dir = base_dir
        self.container = container
        self.spare: Spare | None = None
        self.session: SessionChild | None = None
        self.unreaped: list[int] = []

    def ensure_spare(self) -> Spare | None:
        """A live spare child, forking one if needed. A spare forked while a run was
        going on may have been signalled by it: dead ones are replaced, stopped ones
        continued (nothing else of it is reachable: the workdir does not exist yet and
        its pipes are closed to others because we are not dumpable)."""
        if self.spare is not None and not _alive_child(self.spare.pid):
            self.spare.discard()
            self.spare = None
        if self.spare is None:
            self.spare = _new_spare(self.executor, self.base_dir)
        elif self.container:
            try:
                os.kill(self.spare.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        return self.spare

    def _fork_next(self) -> None:
        self.spare = _new_spare(self.executor, self.base_dir)

    def run(self, message: dict[str, Any]) -> dict[str, Any]:
        current = self.ensure_spare()
        self.spare = None
        if current is None:
            return {"status": "crashed", "exit_code": None, "stdout": "", "stderr": "",
                    "error": {"type": "WorkerError", "traceback": "",
                              "message": "could not start the run: out of processes "
                                         "or memory on the host"}}
        # The next child is forked while this one runs, on the other core. In a
        # container the run could reach it (same user): clean_up and ensure_spare deal
        # with that before the next request is read.
        result, reaped = run_one(current, _child_request(message), self._fork_next)
        if not reaped:
            self.unreaped.append(current.pid)
        return result

    def clean_up(self) -> None:
        """Container mode: kill leftovers, clear scratch space (the worker's own base
        directory too, so nothing waits there for the next run's workdir)."""
        keep = {self.spare.pid} if self.spare else set()
        if self.session is not None and self.session.alive:
            keep.add(self.session.pid)
        _kill_strays(keep)
        for pid in self.unreaped:  # already reported and killed: wait until they are gone
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.unreaped.clear()
        _clear_scratch(self.base_dir)
        session_dir = self.session.workdir if self.session is not None else None
        for name in os.listdir(self.base_dir):
            path = os.path.join(self.base_dir, name)
            if path != session_dir:
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)

    def session_run(self, message: dict[str, Any]) -> dict[str, Any]:
        started_fresh = self.session is None or not self.session.alive
        if started_fresh:
            self.close_session()
            self.session = SessionChild(self.executor, self.base_dir)
        assert self.session is not None
        result = self.session.run(_child_request(message))
        result["session_started"] = started_fresh
        return result

    def close_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
            if self.container:
                self.clean_up()

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.spare is not None:
            self.spare.discard()
        for pid in self.unreaped:
            os.waitpid(pid, 0)


def _alive_child(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0


def _child_request(message: dict[str, Any]) -> dict[str, Any]:
    """What a child gets: the work, not the protocol's message id or type."""
    return {key: value for key, value in message.items() if key not in ("id", "type")}


def _write_reply(fd: int, reply: dict[str, Any]) -> None:
    """Send a reply; one too large for a frame (huge, heavily escaped output) is sent with
    its output cut further, flagged as truncated, rather than failing the worker."""
    try:
        write_message(fd, reply)
        return
    except ProtocolError:
        pass
    room = MAX_MESSAGE_BYTES // 16  # characters per stream; JSON escaping grows them <= 6x
    for stream in ("stdout", "stderr"):
        text = reply.get(stream) or ""
        if len(text) > room:
            reply[stream] = text[:room] + TRUNCATION_MARKER
            reply[f"{stream}_truncated"] = True
    try:
        write_message(fd, reply)
    except ProtocolError as exc:  # e.g. an enormous return value
        write_message(fd, {"type": "result", "id": reply.get("id"), "status": "crashed",
                           "exit_code": None, "stdout": "", "stderr": "",
                           "error": {"type": "WorkerError", "traceback": "",
                                     "message": f"the result was too large to send: {exc}"}})


def serve(executor: Executor, ready_info: dict[str, Any], *, container: bool = False) -> None:
    """Answer requests until the host closes our stdin."""
    in_fd, out_fd = _take_protocol_fds()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host decides when we stop
    _not_dumpable()
    if container:
        from . import child

        # Process counts are per user across the whole host; in a container the pids
        # cgroup (--pids-limit) is the per-sandbox limit instead.
        child.LIMIT_PROCESSES = False
        global CHECK_OOM
        CHECK_OOM = True
    base_dir = tempfile.mkdtemp(prefix="runner-worker-")
    # Everything imported so far is shared with every child; keep the collector from
    # touching (and so copying) those pages after each fork.
    gc.collect()
    gc.freeze()
    zygote = Zygote(executor, base_dir, container=container)
    zygote.ensure_spare()
    try:
        write_message(out_fd, {"type": "ready", "pid": os.getpid(), "executor": executor.name,
                               "python": sys.version.split()[0], **ready_info})
        while True:
            _reap_finished(zygote.unreaped)
            if container:
                zygote.ensure_spare()  # forked between requests, after the clean-up
            message = read_message(in_fd)
            if message is None:
                return
            kind = message.get("type")
            reply: dict[str, Any]
            if kind == "run":
                reply = {"type": "result", **zygote.run(message)}
            elif kind == "session_run":
                reply = {"type": "result", **zygote.session_run(message)}
            elif kind == "session_close":
                zygote.close_session()
                reply = {"type": "session_closed"}
            elif kind == "ping":
                reply = {"type": "pong"}
            else:
                reply = {"type": "error", "message": f"unknown message type {kind!r}"}
            _write_reply(out_fd, {**reply, "id": message.get("id")})
            if container and kind == "run":
                # After the reply (off the caller's clock), before the next request is
                # read: nothing of this run survives into the next one.
                zygote.clean_up()
    finally:
        zygote.close()
        shutil.rmtree(base_dir, ignore_errors=True)
