"""Between runs in a container: nothing a run made may reach the next one.

Runs execute as the sandbox user, the worker as root with no power over files it does
not own. So the clean-up runs as the sandbox user too, in a process forked for the
purpose, and removes everything that user can own:

- processes: `kill(-1, SIGKILL)` until none is left (root's worker is out of reach);
- files in /tmp, /dev/shm (POSIX shared memory and semaphores) and /dev/mqueue (POSIX
  message queues), however deep or unreadable (directories are made searchable first,
  and the walk holds one directory open at a time, so a 3,000-deep tree is no problem);
- System V shared memory, message queues and semaphore sets (a segment left behind
  would otherwise count against the next run's memory).

Stdlib only (ctypes for the System V calls).
"""

from __future__ import annotations

import os
import signal
import stat
import time
from typing import Any

from .child import ChildConfig, drop_privileges

SCRATCH = ("/tmp", "/dev/shm", "/dev/mqueue")
MAX_STEPS = 2_000_000  # a bound on the file walk, whatever a run built
IPC_RMID = 0


def nothing_left(config: ChildConfig, deadline_s: float = 2.0) -> bool:
    """Whether a run left nothing at all, judged from outside (by the supervisor, which
    may not open what the sandbox user made, but can see that it is there): no process of
    the sandbox user still running, nothing in the scratch directories but the worker's
    own (empty) base directory, no System V object. Then the clean-up can be skipped; if
    in doubt, it runs."""
    if config.run_as is None:
        return False
    uid = config.run_as[0]
    # A killed run tears down its memory for a moment: wait for that (it runs no more
    # code), so the next run has all its memory and process slots; anything that still
    # runs code needs the clean-up.
    until = time.monotonic() + deadline_s
    while processes := _processes_of(uid, os.getpid()):
        if RUNS in processes.values() or time.monotonic() > until:
            return False
        time.sleep(0.0005)
    for directory in SCRATCH:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for name in entries:
            if os.path.join(directory, name) != config.base_dir:
                return False
    if config.base_dir is not None:
        try:
            if os.listdir(config.base_dir):
                return False
        except OSError:
            return False
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}", encoding="ascii", errors="replace") as table:
                if len(table.read().splitlines()) > 1:
                    return False
        except OSError:
            return False  # cannot tell: clean up
    return True


def clean_as(config: ChildConfig) -> None:
    if config.run_as is not None:
        drop_privileges(config.run_as)
    kill_everything_of_ours()
    for directory in SCRATCH:
        clear_directory(directory, keep={config.base_dir} if config.base_dir else set())
    remove_sysv_ipc(os.getuid())


def kill_everything_of_ours(deadline_s: float = 5.0) -> None:
    """SIGKILL every process this user owns except ourselves, until none is left, not even
    one tearing down its memory (zombies count as gone: the supervisor reaps them;
    signalling them still succeeds)."""
    me = os.getpid()
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # nothing left to signal
        if not _processes_of(os.getuid(), me):
            return
        time.sleep(0.001)


RUNS, EXITING, GONE = "runs", "exiting", "gone"


def _state_of(pid: str) -> str:
    """RUNS if any thread of the process can still run code; EXITING if it was killed and
    is on its way out (every thread a zombie or flagged PF_EXITING: it runs no more code,
    but still holds its memory and its place under the pids limit); GONE if every thread
    is a zombie or the process has ended; if in doubt, RUNS. Each thread is looked at, not
    the leader alone: a leader that ended its own thread shows as a zombie while the
    others go on."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return GONE
    except OSError:
        return RUNS  # cannot tell: assume the worst
    state = GONE
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            thread_state, flags = fields[0], int(fields[6])
        except (FileNotFoundError, ProcessLookupError):
            continue  # this thread ended meanwhile
        except (OSError, IndexError, ValueError):
            return RUNS
        if thread_state in (b"Z", b"X"):
            continue
        if not flags & 0x4:
            return RUNS
        state = EXITING
    return state


_SIGKILL_BIT = 1 << (9 - 1)


def _killed(status: dict[bytes, bytes]) -> bool:
    """SIGKILL is pending for the process (shared) or its thread (private)."""
    try:
        pending = int(status.get(b"ShdPnd", b"0").strip(), 16) | \
            int(status.get(b"SigPnd", b"0").strip(), 16)
    except ValueError:
        return False
    return bool(pending & _SIGKILL_BIT)


def _processes_of(uid: int, me: int) -> dict[int, str]:
    """The processes of `uid` (but `me`) that are not gone, with their state."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:  # status, not the directory's owner: a non-dumpable process's is root
            with open(f"/proc/{entry}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status if b":" in line)
            real_uid = int(fields[b"Uid"].split()[0])
        except (OSError, KeyError, IndexError, ValueError):
            continue
        if real_uid != uid:
            continue
        state = _state_of(entry)
        if state == RUNS and _killed(fields):
            # SIGKILL is pending: the process runs no more user code (the kernel handles
            # it before returning to user mode); it is tearing itself down.
            state = EXITING
        if state != GONE:
            found[int(entry)] = state
    return found


def clear_directory(root: str, keep: set[str] | frozenset[str] = frozenset()) -> None:
    """Remove what is inside `root` (not `root` itself, nor the paths in `keep`, whose
    contents are cleared instead)."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    kept = set()
    for path in keep:
        try:
            info = os.lstat(path)
            kept.add((info.st_dev, info.st_ino))
        except OSError:
            continue
    failed: set[tuple[int, int]] = set()
    names: list[str] = []  # the path from root to the directory `fd` is open on
    steps = 0
    try:
        while steps < MAX_STEPS:
            steps += 1
            descended = False
            try:
                entries = list(os.scandir(fd))
            except OSError:
                entries = []
            for entry in entries:
                steps += 1
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                identity = (info.st_dev, info.st_ino)
                if not stat.S_ISDIR(info.st_mode):
                    _quietly(os.unlink, entry.name, dir_fd=fd)
                    continue
                if identity in failed:
                    continue
                if identity not in kept:
                    if _quietly(os.rmdir, entry.name, dir_fd=fd):
                        continue
                    # Our own unreadable or unsearchable directory: open it up first.
                    _quietly(os.chmod, entry.name, 0o700, dir_fd=fd, follow_symlinks=False)
                try:
                    inner = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                    dir_fd=fd)
                except OSError:
                    failed.add(identity)
                    continue
                if identity in kept:
                    kept.discard(identity)  # cleared once, then left in place
                    failed.add(identity)
                os.close(fd)
                fd = inner
                names.append(entry.name)
                descended = True
                break
            if descended:
                continue
            if not names:
                return
            parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            here = os.fstat(fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            if (here.st_dev, here.st_ino) not in failed and \
                    not _quietly(os.rmdir, name, dir_fd=fd):
                failed.add((here.st_dev, here.st_ino))
    finally:
        os.close(fd)


def _quietly(function: Any, *args: Any, **kwargs: Any) -> bool:
    try:
        function(*args, **kwargs)
    except OSError:
        return False
    return True


def remove_sysv_ipc(uid: int) -> int:
    """Remove the System V IPC objects `uid` owns or created; how many were removed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):
        return 0
    def remove(kind: str, ident: int) -> int:
        if kind == "shm":
            return int(libc.shmctl(ident, IPC_RMID, None))
        if kind == "msg":
            return int(libc.msgctl(ident, IPC_RMID, None))
        return int(libc.semctl(ident, 0, IPC_RMID))

    removed = 0
    for kind in ("shm", "msg", "sem"):
        for ident in _ipc_ids(kind, 1, uid):
            if remove(kind, ident) == 0:
                removed += 1
    return removed


def _ipc_ids(kind: str, id_column: int, uid: int) -> list[int]:
    """Ids from /proc/sysvipc/<kind> whose owner or creator is `uid`."""
    try:
        with open(f"/proc/sysvipc/{kind}", encoding="ascii", errors="replace") as table:
            header = table.readline().split()
            rows = [line.split() for line in table]
    except OSError:
        return []
    columns = {name: index for index, name in enumerate(header)}
    found = []
    for row in rows:
        try:
            owners = {int(row[columns[name]]) for name in ("uid", "cuid") if name in columns}
            if uid in owners:
                found.append(int(row[id_column]))
        except (ValueError, IndexError):
            continue
    return found
