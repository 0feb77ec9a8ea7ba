"""What a forked child does: isolate itself, apply limits, run the code, report.

The child owns nothing the parent needs: a fresh working directory, its own process
group (so the parent can kill everything it started at once), stdout and stderr
redirected at the file-descriptor level into pipes the parent reads and caps, and a
separate result pipe for the outcome. Printing can never forge the result because
stdout and the result channel are different pipes. Stdlib only.
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import signal
import sys
from typing import Any, NoReturn, Protocol

from .protocol import read_message, write_message
from .tracebacks import safe_str

MIB = 1024 * 1024
PR_SET_PDEATHSIG = 1
# RLIMIT_NPROC counts a user's processes across the whole host; the zygote turns it off
# in containers, where the pids cgroup limits each sandbox on its own.
LIMIT_PROCESSES = True


class Executor(Protocol):
    """Runs one request inside the child and describes the outcome as plain data.

    The outcome is a dict with `kind` ("ok", "error", "exit", "denied"), and optionally
    `error` ({type, message, traceback}), `exit_code` and `return_value`.
    """

    name: str

    def new_namespace(self) -> dict[str, Any]: ...

    def execute(self, request: dict[str, Any], namespace: dict[str, Any] | None = None
                ) -> dict[str, Any]: ...


def _load_prctl() -> Any:
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: the process group kill still applies
        return None


# Loaded once in the parent: importing ctypes in every child would cost milliseconds.
_prctl = _load_prctl()


def _set_parent_death_signal() -> None:
    """Die with the parent: a child must never outlive the worker that watches it."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _address_space_bytes() -> int:
    """Current virtual size; the memory limit is counted on top of the warm interpreter."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _set_limit(which: int, soft: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
        new_hard = hard
    else:
        new_hard = soft
    try:
        resource.setrlimit(which, (soft, new_hard))
    except (ValueError, OSError):
        resource.setrlimit(which, (soft, hard))


def apply_limits(limits: dict[str, Any], *, session: bool = False) -> None:
    cpu = max(1, math.ceil(float(limits.get("cpu_s") or limits["timeout_s"])))
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    if session:
        # CPU time adds up over a session's blocks, and a confined child may not change
        # its limits later: each block is bounded by the parent's wall-clock kill instead.
        pass
    elif cpu_hard == resource.RLIM_INFINITY or cpu_hard > cpu + 1:
        # The hard value is one second above the soft one: SIGXCPU first, which we
        # report as a timeout, and SIGKILL if the code ignores it.
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _set_limit(resource.RLIMIT_AS, _address_space_bytes() + int(limits["memory_mb"]) * MIB)
    _set_limit(resource.RLIMIT_NOFILE, int(limits["max_open_files"]))
    _set_limit(resource.RLIMIT_FSIZE, int(limits["max_file_size_mb"]) * MIB)
    if LIMIT_PROCESSES:
        _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]))
    _set_limit(resource.RLIMIT_CORE, 0)


def _redirect_stdio(stdout_fd: int, stderr_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    # Line buffering: a run killed at its deadline still shows every complete line it
    # printed, at one write per line rather than one per print() argument.
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
        encoding="utf-8", errors="backslashreplace", line_buffering=True,
    )
    sys.stderr = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8", errors="backslashreplace", line_buffering=True,
    )
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = (  # type: ignore[misc]
        sys.stdout, sys.stderr, sys.stdin)


def _close_other_fds(keep: tuple[int, ...]) -> None:
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _finish_streams() -> None:
    """Flush and close stdout/stderr, so the parent sees their end before ours."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # a closed or broken stream must not hide the result
            pass
    for fd in (1, 2):
        try:
            os.close(fd)
        except OSError:
            pass


def _report(result_fd: int, outcome: dict[str, Any]) -> None:
    try:
        data = json.dumps(outcome, ensure_ascii=False, default=repr).encode(
            "utf-8", errors="replace")  # lone surrogates from user text become "?"
    except BaseException as exc:  # e.g. MemoryError, or a value json cannot encode
        data = json.dumps(
            {"kind": "internal", "error": {"type": type(exc).__name__,
                                            "message": f"result could not be encoded: {exc}"}}
        ).encode("utf-8")
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(result_fd, view):]
        os.close(result_fd)
    except OSError:
        # Someone closed or replaced our result channel: exit non-zero, so whatever was
        # written there is not taken as this run's report.
        os._exit(71)


def _inherited(executor: Executor) -> tuple[int, ...]:
    return tuple(getattr(executor, "inherited_fds", lambda: ())())


def prepare_child(*, stdout_fd: int, stderr_fd: int, keep_fds: tuple[int, ...]) -> None:
    """Everything that does not depend on the request: done before the request arrives."""
    os.setpgid(0, 0)
    _set_parent_death_signal()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    _redirect_stdio(stdout_fd, stderr_fd)
    _close_other_fds(keep_fds)


def enter_workdir(executor: Executor, workdir: str) -> None:
    """Created when the request arrives, not when the child is forked: a child forked
    while another run was going on has nothing that run could have touched. Executors
    whose code cannot touch files (the restricted tier) need none."""
    if not getattr(executor, "uses_files", True):
        os.chdir("/")
        return
    os.mkdir(workdir, 0o700)
    os.chdir(workdir)
    os.environ["HOME"] = workdir
    os.environ["TMPDIR"] = workdir


def child_main(
    executor: Executor,
    *,
    workdir: str,
    stdout_fd: int,
    stderr_fd: int,
    result_fd: int,
    request_fd: int,
) -> NoReturn:
    """Never returns: the child always ends with os._exit.

    The child is forked ahead of time and blocks on `request_fd` until the parent
    hands it a request, so forking and setting up is not on the run's critical path.
    """
    outcome: dict[str, Any]
    try:
        prepare_child(stdout_fd=stdout_fd, stderr_fd=stderr_fd,
                      keep_fds=(result_fd, request_fd, *_inherited(executor)))
        request = read_message(request_fd)
        os.close(request_fd)
        if request is None:  # the parent went away before handing us work
            os._exit(0)
        enter_workdir(executor, workdir)
        apply_limits(request["limits"])
        me = os.getpid()
        try:
            outcome = executor.execute(request)
        finally:
            _leave_if_forked(me)
    except MemoryError:
        outcome = {"kind": "error", "error": {"type": "MemoryError", "message": "", "traceback": ""}}
    except BaseException as exc:
        outcome = {"kind": "internal",
                   "error": {"type": type(exc).__name__, "message": safe_str(exc), "traceback": ""}}
    _finish_streams()
    try:
        _report(result_fd, outcome)
    finally:
        os._exit(0)


def _leave_if_forked(me: int) -> None:
    """A process user code forked that ran off the end of the code (or raised) must not
    report: only the child the parent forked speaks on the result channel."""
    if os.getpid() != me:
        _finish_streams()
        os._exit(0)


def session_main(
    executor: Executor,
    *,
    workdir: str,
    stdout_fd: int,
    stderr_fd: int,
    result_fd: int,
    request_fd: int,
) -> NoReturn:
    """A child that keeps one namespace across many requests (a notebook, a MathChat
    conversation). Each request is answered with one framed outcome on `result_fd`,
    after its output has been flushed, so the parent can tell the blocks apart."""
    try:
        prepare_child(stdout_fd=stdout_fd, stderr_fd=stderr_fd,
                      keep_fds=(result_fd, request_fd, *_inherited(executor)))
        enter_workdir(executor, workdir)
        namespace = executor.new_namespace()
        first = True
        while True:
            request = read_message(request_fd)
            if request is None:
                break
            try:
                if first:
                    apply_limits(request["limits"], session=True)  # memory: whole session
                    first = False
                me = os.getpid()
                try:
                    outcome = executor.execute(request, namespace)
                finally:
                    _leave_if_forked(me)
            except MemoryError:
                outcome = {"kind": "error",
                           "error": {"type": "MemoryError", "message": "", "traceback": ""}}
            except BaseException as exc:  # report it: the session must not die silently
                outcome = {"kind": "internal", "error": {
                    "type": type(exc).__name__, "message": safe_str(exc), "traceback": ""}}
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
            try:
                write_message(result_fd, outcome)
            except (TypeError, ValueError) as exc:
                write_message(result_fd, {"kind": "internal", "error": {
                    "type": type(exc).__name__, "message": f"result could not be encoded: {exc}",
                    "traceback": ""}})
    finally:
        os._exit(0)
