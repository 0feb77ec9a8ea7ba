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


def clean_as(config: ChildConfig) -> None:
    if config.run_as is not None:
        drop_privileges(config.run_as)
    kill_everything_of_ours()
    for directory in SCRATCH:
        clear_directory(directory, keep={config.base_dir})
    remove_sysv_ipc(os.getuid())


def kill_everything_of_ours(deadline_s: float = 5.0) -> None:
    """SIGKILL every process this user owns except ourselves, until none is left running
    (zombies count as gone: the supervisor reaps them; signalling them still succeeds)."""
    me = os.getpid()
    until = time.monotonic() + deadline_s
    while time.monotonic() < until:
        try:
            os.kill(-1, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return  # nothing left to signal
        if not _running_processes_of(os.getuid(), me):
            return
        time.sleep(0.001)


def _running_processes_of(uid: int, me: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:  # status, not the directory's owner: a non-dumpable process's is root
            with open(f"/proc/{entry}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status if b":" in line)
            state = fields[b"State"].split()[0]
            real_uid = int(fields[b"Uid"].split()[0])
        except (OSError, KeyError, IndexError, ValueError):
            continue
        if state in (b"Z", b"X") or real_uid != uid:
            continue
        found.append(int(entry))
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
