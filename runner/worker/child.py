"""What a forked child does: isolate itself, apply limits, run requests, report.

A child is forked by the forkserver (forkserver.py), which has never held any request,
so a child starts with nothing of any other run in its memory. It owns nothing the
supervisor needs: its own process group (so everything it starts can be killed at
once), stdout and stderr redirected at the file-descriptor level into pipes the
supervisor reads and caps, and a separate result pipe for reports.

The result pipe carries frames (wire.py): a `denied` frame the moment a guard refuses
something, and one `report` per request. The supervisor treats a denial as final, so
code that later escapes the policy cannot take it back, and it judges timeouts, memory
and crashes from what it observes, never from what the child says. Stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import math
import os
import random
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from . import error_types, jail, linux, privileges, run_files, seccomp, wire
from .protocol import BLOBS, encode, read_message
from .tracebacks import safe_str

MIB = 1024 * 1024
# Bound once: the report must not depend on what user code did to `os`.
_write, _fstat = os.write, os.fstat
PR_SET_PDEATHSIG = linux.PR_SET_PDEATHSIG
PR_SET_DUMPABLE = linux.PR_SET_DUMPABLE
PR_SET_NO_NEW_PRIVS = linux.PR_SET_NO_NEW_PRIVS
MAX_MESSAGE_CHARS = 64 * 1024  # of an error message or a denial, in a report
# A child's result and request pipes always have these numbers, so what refers to them
# (the audit hook's announcements) can be built once, before any child exists.
RESULT_FD = 3
REQUEST_FD = 4
MAX_TRACEBACK_CHARS = 256 * 1024


@dataclass(frozen=True)
class ChildConfig:
    """How children are set up; passed from the worker's command line, never a global."""

    container: bool = False
    # RLIMIT_NPROC per run: only where each run has a user namespace of its own (the kernel
    # counts a user's processes per user namespace): always in the restricted jail; in a
    # container where the kernel allows it (the container's pids limit bounds it anyway).
    limit_processes: bool = True
    # (uid, gid) a child switches to before it reads a request (containers: the worker
    # runs as root with only the capabilities to do this, user code never does).
    run_as: tuple[int, int] | None = None
    # Base directory for working directories (made per request by executors with files
    # that do not mount one of their own); None: no such directory.
    base_dir: str | None = None
    # The supervisor's pid: a child's parent once it is set up (see forkserver.py).
    supervisor_pid: int = 0
    # Each child is pid 2 of a PID namespace of its own (the local tiers' jail): its parent,
    # the supervisor, is outside it, so the child reads its parent's pid as 0.
    own_pid_namespace: bool = False
    # The forkserver answers with pids as /proc and the supervisor see them, which are not
    # its own (a container's worker: forkserver.enter_base_pid_namespace).
    translate_pids: bool = False


class Executor(Protocol):
    """Runs one request inside the child and describes the outcome as plain data.

    The outcome is a dict with `kind` (wire.OUTCOME_KINDS), and optionally `error`
    ({type, message, traceback}), `exit_code` and `return_value`.
    """

    name: str

    def new_namespace(self) -> dict[str, Any]: ...

    uses_files: bool  # False: the code cannot touch files, so it gets no working directory
    # True: the child mounts a directory of its own (jail.enter_run), sized by the fork
    # command, before it gives up its privileges.
    mounts_run_dir: bool
    # True: the child confines itself completely before its request arrives, and the
    # supervisor sets its limits (prlimit) just before handing the request over, since a
    # confined child may not set them itself.
    confined_before_request: bool

    def enter_run(self, disk_mb: int) -> None:
        """In the child, first, while it still holds the worker's privileges: the kernel
        objects of its own (jail.RunPlan), or nothing."""

    def before_request(self, reporter: Reporter, config: ChildConfig) -> None:
        """In the child, as soon as it is set up (before its request arrives)."""

    def isolation(self) -> dict[str, Any]:
        """What isolates a run (wire.ISOLATION_FIELDS), for every result's `resources`:
        asked in the child once it is set up, before its request, while nothing but the
        worker's own code has run in it."""

    def execute(self, request: dict[str, Any], namespace: dict[str, Any],
                reporter: Reporter) -> dict[str, Any]: ...


class Reporter:
    """The child's end of its result pipe. Only frames go there. Before every frame it
    checks that the descriptor is still that pipe: code holding the real builtins could
    close it, or put a pipe of its own in its place, after writing a report of its own."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._identity = self._pipe_identity()

    def _pipe_identity(self) -> tuple[int, int] | None:
        try:
            info = _fstat(self.fd)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def frame(self, message: dict[str, Any]) -> None:
        data = memoryview(encode(message, wire.MAX_REPORT_BYTES))  # FrameTooLarge: a ValueError
        try:
            if self._identity is None or self._pipe_identity() != self._identity:
                raise OSError("the result channel was replaced")
            while data:
                written = _write(self.fd, data)
                if written <= 0:
                    raise OSError("the result channel accepts nothing")
                data = data[written:]
        except OSError:
            # Someone closed or replaced our result channel: nothing this child says
            # can be trusted any more, so it says nothing, and ends in a way the
            # supervisor reads as exactly that.
            os._exit(wire.CHANNEL_REPLACED_EXIT)

    def denied(self, message: str) -> None:
        self.frame({"kind": wire.DENIED, "message": _cap(message, MAX_MESSAGE_CHARS)})

    def report(self, outcome: dict[str, Any], seq: Any = None) -> None:
        blobs = outcome.pop(BLOBS, None)  # the files' bytes: after the JSON, not in it
        outcome = _bounded_outcome(outcome)
        try:
            self.frame({"kind": wire.REPORT, "outcome": outcome, wire.SEQ: seq,
                        **({BLOBS: blobs} if blobs else {})})
        except (TypeError, ValueError, RecursionError, MemoryError) as exc:
            self.frame({"kind": wire.REPORT, wire.SEQ: seq, "outcome": {"kind": "error", "error": {
                "type": error_types.RESULT_ERROR, "message": f"the result could not be returned: {exc}",
                "traceback": ""}}})


def _cap(text: Any, limit: int) -> str:
    shown: str = text if type(text) is str else safe_str(text)
    if len(shown) <= limit:
        return shown
    return shown[:limit] + f"... [{len(shown) - limit} more characters cut]"


def _bounded_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """An exception's message or traceback can be any size (a 40 MB message is easy to
    raise): cut them, so the report always fits its channel."""
    error = outcome.get("error")
    if isinstance(error, dict):
        error = dict(error)
        error["message"] = _cap(error.get("message", ""), MAX_MESSAGE_CHARS)
        error["traceback"] = _cap(error.get("traceback", ""), MAX_TRACEBACK_CHARS)
        error["type"] = _cap(error.get("type", "Error"), 200)
        outcome = {**outcome, "error": error}
    return outcome


_libc = linux.libc


def _prctl(*args: int) -> int:
    return int(_libc.prctl(*args)) if _libc is not None else -1


def address_space_bytes(pid: int = 0) -> int:
    """Current virtual size; the memory limit is counted on top of the warm interpreter."""
    try:
        with open(f"/proc/{pid or 'self'}/statm", "rb") as statm:
            pages = int(statm.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _set_limit(which: int, value: int, pid: int) -> None:
    """Soft and hard limit both `value`, so the run cannot raise its own limit (or, where
    the hard limit is lower and cannot be raised, both that)."""
    try:
        resource.prlimit(pid, which, (value, value))
    except (ValueError, OSError):
        _, hard = resource.prlimit(pid, which)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.prlimit(pid, which, (value, value))


def _cpu_seconds(pid: int) -> float:
    """CPU time process `pid` (0: this one) has used so far, all its threads together."""
    if pid == 0:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    return (process_cpu_ns(pid) or 0) / 1e9


def process_cpu_ns(pid: int) -> int | None:
    """CPU time of live process `pid`, every thread together (those that ended included),
    in nanoseconds: the precise per-thread counters of its live threads, or the process's
    own total (in clock ticks, and so coarser) where that is more (threads that ended)."""
    precise = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        threads = []
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat", "rb") as stat:
                precise += int(stat.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return precise or None
    return max(precise, ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK"))


def block_cpu_limit(limits: dict[str, Any], pid: int = 0) -> int:
    """The CPU limit for the next request of process `pid`: what it has used so far plus
    the request's CPU time (the kernel counts a process's CPU time from its start)."""
    cpu = float(limits.get("cpu_s") or limits["timeout_s"])
    return max(1, math.ceil(_cpu_seconds(pid) + cpu))


def set_block_cpu_limit(limits: dict[str, Any], pid: int = 0) -> None:
    """A session block's CPU limit: the soft limit only (SIGXCPU there; the judge and, in a
    container, the supervisor's meter hold the block to it), since raising a hard limit
    for the next block would need a privilege nobody in the sandbox has."""
    _, hard = resource.prlimit(pid, resource.RLIMIT_CPU)
    soft = block_cpu_limit(limits, pid)
    resource.prlimit(pid, resource.RLIMIT_CPU,
                     (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def apply_limits(limits: dict[str, Any], config: ChildConfig, *, session: bool = False,
                 base_address_space: int | None = None, pid: int = 0,
                 limit_processes: bool | None = None) -> None:
    """The request's limits on process `pid` (0: this one), soft and hard alike (the CPU
    limit of a session block: soft only). A session's other limits are the same for every
    block (Session checks it), set again before each. The memory limit is counted on top
    of the process's address space when it started (`base_address_space`, read now if not
    given); the CPU limit on top of the CPU time it has used so far."""
    if session:
        set_block_cpu_limit(limits, pid)
    else:
        cpu = block_cpu_limit(limits, pid)
        _set_limit(resource.RLIMIT_CPU, cpu, pid)  # the kernel kills it there
    base = address_space_bytes(pid) if base_address_space is None else base_address_space
    _set_limit(resource.RLIMIT_AS, base + int(limits["memory_mb"]) * MIB, pid)
    _set_limit(resource.RLIMIT_NOFILE, int(limits["max_open_files"]), pid)
    _set_limit(resource.RLIMIT_FSIZE, int(limits["max_file_size_mb"]) * MIB, pid)
    if config.limit_processes if limit_processes is None else limit_processes:
        _set_limit(resource.RLIMIT_NPROC, int(limits["max_processes"]), pid)
    _set_limit(resource.RLIMIT_CORE, 0, pid)


def _redirect_stdio(stdout_fd: int, stderr_fd: int) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(stdout_fd, 1)
    os.dup2(stderr_fd, 2)
    if stdout_fd > 2:
        os.close(stdout_fd)
    if stderr_fd > 2:
        os.close(stderr_fd)
    # Line buffering: a run killed at its deadline still shows every complete line it
    # printed, at one write per line rather than one per print() argument.
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the run's stdin, for the whole run
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


def _fixed_fds(result_fd: int, request_fd: int) -> None:
    """Move the result and request pipes to RESULT_FD and REQUEST_FD (through numbers
    above both, so that neither is overwritten on the way)."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in (result_fd, request_fd)]
    for fd in (result_fd, request_fd):
        os.close(fd)
    os.dup2(high[0], RESULT_FD)
    os.dup2(high[1], REQUEST_FD)
    for fd in high:
        os.close(fd)


def _close_other_fds(keep: tuple[int, ...]) -> None:
    low = 3
    for fd in sorted(set(keep)):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        # a closed or broken stream must not hide the result
        with contextlib.suppress(BaseException):
            stream.flush()


def _finish_streams() -> None:
    """Flush and close stdout/stderr, so the supervisor sees their end before ours."""
    _flush_streams()
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.close(fd)


def drop_privileges(run_as: tuple[int, int]) -> None:
    """Become the sandbox user for good (containers: the worker is root with only the
    capabilities to do this): no capabilities, not even in the bounding set, no
    supplementary groups, all three user and group ids changed, no_new_privs. The
    capabilities are cleared explicitly: a worker in a user namespace of its own, where
    its own ids are not mapped, is not that namespace's root, so the change of user alone
    would leave them (and with them the power to signal the worker's processes)."""
    privileges.switch_user(*run_as)
    privileges.drop_everything()


def _reseed() -> None:
    """Every child starts from one copy of the parent's memory, random generators
    included: reseed them all from the kernel, so no two runs draw the same numbers."""
    random.seed()
    for generator in _GENERATORS:
        with contextlib.suppress(Exception):
            generator()


_GENERATORS: list[Any] = []


def collect_generators() -> None:
    """In the forkserver, once everything is imported: the reseed call of every random
    number generator the preloaded libraries made (module-level `random.Random`
    instances, numpy's global state)."""
    import gc

    _GENERATORS.clear()
    for obj in gc.get_objects():
        if isinstance(obj, random.Random) and obj is not getattr(random, "_inst", None):
            _GENERATORS.append(obj.seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        seed = getattr(getattr(numpy, "random", None), "seed", None)
        if callable(seed):
            _GENERATORS.append(seed)


def prepare_child(*, stdout_fd: int, stderr_fd: int, result_fd: int, request_fd: int,
                  keep_fds: tuple[int, ...], config: ChildConfig, become_user: bool,
                  enter_run: Any = None) -> None:
    """Everything that does not depend on the request: done before the request arrives.
    Afterwards the result and request pipes are RESULT_FD and REQUEST_FD. Without
    `become_user`, the child stays the worker's user until its request arrives."""
    # A session of its own (and so a process group): everything it starts can be killed at
    # once, and it cannot send the worker SIGCONT, which the kernel allows within a session.
    os.setsid()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    # stdout and stderr first: their pipes may have any number, 3 and 4 included.
    result_fd, request_fd = (fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in (result_fd, request_fd))
    _redirect_stdio(stdout_fd, stderr_fd)
    _fixed_fds(result_fd, request_fd)
    _close_other_fds((RESULT_FD, REQUEST_FD, *keep_fds))
    if enter_run is not None:
        enter_run()  # while it still holds the worker's privileges
    if become_user:
        become_sandbox_user(config)
    else:
        _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    _reseed()


def become_sandbox_user(config: ChildConfig) -> bool:
    """Switch to the sandbox user and give up every privilege (privileges.py), in a user
    namespace of the child's own (True when it has one: then RLIMIT_NPROC counts this
    run alone), then make this process not dumpable: another process of the same user
    cannot open our /proc files (pipes, memory) or trace us; forks of user code inherit
    it. (A change of user resets the flag, so it is set after.)"""
    own_namespace = True
    if config.container:
        # The kernel's out-of-memory killer takes a run's processes before the worker's.
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as adjust:
            adjust.write("1000")
        if config.run_as is not None:
            drop_privileges(config.run_as)
        try:
            privileges.enter_own_user_namespace()
        except privileges.PrivilegeError:
            own_namespace = False  # the container's pids limit still bounds the run
        # Every capability goes, in whichever user namespace the child is (a worker in a
        # user namespace of its own keeps them across the change of user above).
        privileges.drop_everything()
        # Nothing the run starts may make namespaces or mounts (the container's profile
        # lets the worker make each run's).
        seccomp.refuse_namespaces()
    else:
        privileges.become_unprivileged(config.run_as)
    _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    return own_namespace


def supervisor_is_parent(config: ChildConfig) -> bool:
    """Whether the supervisor is this child's parent (in a PID namespace of the child's
    own, a parent outside it reads as 0: only the supervisor makes such children)."""
    parent = os.getppid()
    return not config.supervisor_pid or parent == config.supervisor_pid or (
        config.own_pid_namespace and parent == 0)


def set_parent_death_signal(config: ChildConfig) -> None:
    """Never outlive the supervisor. A child made by a double fork is the supervisor's only
    once the forkserver's intermediate process has exited (at once): until then that
    process is its parent, whose exit would fire the signal, so wait for it first."""
    for _ in range(2000):
        if supervisor_is_parent(config):
            break
        time.sleep(0.0005)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def enter_workdir(executor: Executor, workdir: str | None) -> None:
    """Made when the first request arrives, not when the child is forked. Executors whose
    code cannot touch files (the restricted tier) need none; a child that mounted its own
    (jail.enter_run) is in it already."""
    if not executor.uses_files or workdir is None:
        if executor.mounts_run_dir:
            os.environ.update(HOME=jail.RUN_DIR, TMPDIR="/tmp")
        else:
            os.chdir("/")
        return
    os.mkdir(workdir, 0o700)
    os.chdir(workdir)
    os.environ["HOME"] = workdir
    os.environ["TMPDIR"] = workdir


def _leave_if_forked(me: int) -> None:
    """A process user code forked that ran off the end of the code (or raised) must not
    report: only the child the forkserver made speaks on the result channel."""
    if os.getpid() != me:
        _finish_streams()
        os._exit(0)


def _run_with_files(executor: Executor, request: dict[str, Any], namespace: dict[str, Any],
                    reporter: Reporter) -> dict[str, Any]:
    """`_run_one`, with the request's files written into the working directory first and
    the files the run made or changed there added to its outcome (run_files.py), for the
    executors whose runs have a directory."""
    if not executor.uses_files:
        return _run_one(executor, request, namespace, reporter)
    try:
        run_files.write_inputs(request.get("files"), request.get(BLOBS))
    except (OSError, ValueError) as exc:
        return {"kind": "error", "error": {
            "type": error_types.INPUT_FILES, "traceback": "",
            "message": f"the files handed to the run could not be written: {safe_str(exc)}"}}
    before = run_files.snapshot()
    outcome = _run_one(executor, request, namespace, reporter)
    cap = int(request["limits"].get("max_returned_files_mb") or 0) * MIB
    try:
        outcome.update(run_files.changed_files(before, cap))
    except Exception as exc:
        outcome["files_left_out"] = [f"(the files could not be read: {safe_str(exc)})"]
    return outcome


def _run_one(executor: Executor, request: dict[str, Any], namespace: dict[str, Any],
             reporter: Reporter) -> dict[str, Any]:
    me = os.getpid()
    try:
        try:
            return executor.execute(request, namespace, reporter)
        finally:
            _leave_if_forked(me)
    except MemoryError:
        return {"kind": "error", "allocation_failed": True,
                "error": {"type": error_types.MEMORY_ERROR, "message": "", "traceback": ""}}
    except BaseException as exc:  # report it: the child must not die silently
        return {"kind": "internal", "error": {
            "type": type(exc).__name__, "message": safe_str(exc), "traceback": ""}}


def child_main(executor: Executor, config: ChildConfig, *, session: bool, stdout_fd: int,
               stderr_fd: int, result_fd: int, request_fd: int, disk_mb: int = 0) -> NoReturn:
    """Never returns: the child always ends with os._exit.

    Forked ahead of time, it sets itself up and blocks on `request_fd` until the
    supervisor hands it a request. A one-shot child runs one request and exits; a
    session child keeps one namespace across requests until its pipe closes.
    """
    try:
        # A child that confines itself before its request becomes the sandbox user first.
        # Otherwise (in a container) it stays the worker's user until its request comes:
        # it can then be made while the run before it still goes on, and the clean-up
        # between runs, which ends every process of the sandbox user, leaves it alone.
        prepare_child(stdout_fd=stdout_fd, stderr_fd=stderr_fd, result_fd=result_fd,
                      request_fd=request_fd, config=config, keep_fds=_inherited(executor),
                      become_user=executor.confined_before_request,
                      enter_run=lambda: executor.enter_run(disk_mb))
        result_fd, request_fd = RESULT_FD, REQUEST_FD
        reporter = Reporter(result_fd)
        base_address_space = address_space_bytes()  # before Landlock hides /proc
        executor.before_request(reporter, config)
        reporter.frame({"kind": wire.CHILD_READY, wire.ISOLATION: executor.isolation()})
        namespace: dict[str, Any] | None = None
        workdir = None if config.base_dir is None or executor.mounts_run_dir else \
            os.path.join(config.base_dir, f"{'session' if session else 'run'}-{os.getpid()}")
        while True:
            request = read_message(request_fd)
            if request is None:  # the supervisor is done with us
                break
            if not session:
                os.close(request_fd)  # one request only: nothing more comes this way
            if namespace is None:
                if not executor.confined_before_request:
                    # First: a change of user resets the parent-death signal.
                    own_namespace = become_sandbox_user(config)
                    set_parent_death_signal(config)
                    enter_workdir(executor, workdir)
                    apply_limits(request["limits"], config, session=session,
                                 base_address_space=base_address_space,
                                 limit_processes=config.limit_processes and own_namespace)
                if not supervisor_is_parent(config):
                    break  # the supervisor is already gone
                namespace = executor.new_namespace()
            elif not executor.confined_before_request:
                # A later block of a session in a container: its own CPU time (its other
                # limits are the session's, set with the first block).
                set_block_cpu_limit(request["limits"])
            outcome = _run_with_files(executor, request, namespace, reporter)
            if not session:
                if workdir is not None:
                    # An empty working directory goes now, so that a run that made nothing
                    # leaves nothing (the clean-up is then skipped).
                    with contextlib.suppress(OSError):
                        os.rmdir(workdir)
                _finish_streams()
                reporter.report(outcome)
                os.close(result_fd)
                # Stop, and let the supervisor read our usage while our memory is still
                # there, then kill us: exiting now would make it wait for the teardown of
                # the whole address space (milliseconds) to learn the same figures.
                signal.raise_signal(signal.SIGSTOP)  # not audited: the hook must not refuse it
                break
            _flush_streams()
            reporter.report(outcome, request.get(wire.SEQ))
            # Stopped until the next block: the supervisor sees this block end, nothing of
            # the session runs between blocks, and it sets the next block's limits before
            # it continues us (see Supervisor.session_run).
            signal.raise_signal(signal.SIGSTOP)
    except BaseException as exc:  # our own code failed: say so, if anyone listens
        with contextlib.suppress(BaseException):
            Reporter(RESULT_FD).report({"kind": "internal", "error": {
                "type": type(exc).__name__, "message": f"the child failed: {safe_str(exc)}",
                "traceback": ""}})
    finally:
        os._exit(0)


def _inherited(executor: Executor) -> tuple[int, ...]:
    return tuple(getattr(executor, "inherited_fds", lambda: ())())
