"""The jail tier (`backend="jail"`, the default), attacked as users get it.

The jail tier runs real CPython with the real builtins and no policy: every promise it
makes rests on the kernel layer (namespaces, a read-only view, an unprivileged user,
Landlock, the seccomp allow list of syscalls.JAIL_CHILD, limits set from outside) and on
what each run gets of its own (a PID, mount and IPC namespace, a /proc, a size-limited
tmpfs as /sandbox and /tmp). Every attack runs in one worker (default layers, one worker
per caller), started by root (as CI runs) and by an ordinary user (tests/as_user.py),
through tests/jail_tier_probe.py, which follows each attack with the same check run.
Every attack checks its status and message, that the host is unharmed, and that the next
run of the same worker is unharmed and finds nothing left behind:

- the system-call census: every number off the jail's allow list fails with EPERM (a
  call this project knows) or ENOSYS (one it does not), and the argument checks hold;
- host paths do not exist for a run; extended attributes, inode flags, inotify and
  fanotify are refused; writes anywhere but /sandbox and /tmp fail and reach no host file;
- no host process is visible or reachable; a run is pid 2 and its /proc shows only its
  own PID namespace;
- per-run kernel objects: files, locks, IPC, sockets, threads, the pid counter, directory
  times and inode numbers planted by one run are not there for the next;
- limits: the disk (bytes and inodes), CPU time over all threads, the thread limit, hard
  limits equal to soft;
- C extensions can do no more than Python (ctypes calls of refused system calls fail
  with EPERM), while numpy, matplotlib, sqlite3 and asyncio work;
- the result channel: a run that forges a report, or closes or replaces its channel,
  is "crashed", never what it claimed;
- and, with two workers (root caller only), that two runs at once share no lock.

Outcomes that depend on timing (whether the next run can start before the last one is
gone, how the supervisor sees a child end) are tried several times in the one worker.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

import numpy
import pytest
from conftest import TMP_MOUNT_POINTS
from test_isolation import FORGE, FORGED_MS
from test_jail import (
    CALLERS,
    EPILOGUE,
    FILE_METADATA,
    HERE,
    ORDINARY_USER,
    PRELUDE,
    PRIVILEGES,
    _host_paths,
    _outcome,
    host_processes,
    host_view,
)

from runner import Limits, Sandbox, Status
from runner.worker import jail, landlock, syscalls

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not landlock.available(),
                                reason="the jail tier's attack tests run as root (as CI does), on a "
                                       "kernel with Landlock")

PROBE = HERE / "jail_tier_probe.py"
MARKER = "jail-tier-planted"  # the name every attempted write uses, looked for on the host
MTIME_MARK = 123_456_789_000  # a directory time no run's tmpfs has by itself

# --- the check run after every attack -----------------------------------------------------

# What the next run of the worker sees; it must see exactly what the first run of a fresh
# worker sees (the directory times aside, which must only not be an earlier run's).
AFTER = PRELUDE + '''
import threading
OUT["pid"] = os.getpid()
OUT["cwd"] = os.getcwd()
OUT["umask"] = os.umask(0o022)
OUT["sandbox"] = sorted(os.listdir("/sandbox"))
OUT["tmp"] = sorted(os.listdir("/tmp"))
OUT["threads"] = threading.active_count()
OUT["tasks"] = sorted(os.listdir("/proc/self/task"))
OUT["proc"] = sorted(name for name in os.listdir("/proc") if name.isdigit())
disk = os.statvfs("/sandbox")
OUT["used"] = [disk.f_blocks - disk.f_bfree, disk.f_files - disk.f_ffree]
OUT["environ"] = sorted(name for name in os.environ if name.startswith("LEFT"))
OUT["mtimes"] = [os.stat(path).st_mtime_ns for path in ("/sandbox", "/tmp")]
''' + EPILOGUE


# --- 1. the system-call census --------------------------------------------------------------

def _skipped_in_census() -> set[int]:
    """Allowed calls are not called (exit, pause... would end or hang the child); the
    kernel's own uprobe calls are exempt from every filter."""
    return set(syscalls.allowed_numbers(syscalls.JAIL_CHILD)) | \
        {syscalls.X86_64[name] for name in syscalls.KERNEL_EXEMPT}


CENSUS = PRELUDE + f'''
for nr in range({syscalls.HIGHEST_KNOWN + 65}):
    if nr not in {sorted(_skipped_in_census())!r}:
        OUT[nr] = call(nr, 0, 0, 0, 0, 0, 0)
''' + EPILOGUE

_NR = syscalls.X86_64
# Allowed calls whose arguments the filter checks: each refused use, and one allowed use
# (so that a check that refused everything would be seen too).
ARGUMENT_CHECKS = PRELUDE + f'''
import socket
fd = os.open(os.__file__, os.O_RDONLY)
buf = ctypes.create_string_buffer(256)
refused = OUT["refused"] = {{}}
refused["fcntl F_SETOWN"] = call({_NR["fcntl"]}, fd, 8, os.getpid())
refused["fcntl F_SETSIG"] = call({_NR["fcntl"]}, fd, 10, 10)
refused["fcntl F_SETLEASE"] = call({_NR["fcntl"]}, fd, 1024, 0)
refused["fcntl F_NOTIFY"] = call({_NR["fcntl"]}, fd, 1026, 0)
refused["ioctl TIOCSTI"] = call({_NR["ioctl"]}, 0, 0x5412, buf)
refused["ioctl FS_IOC_GETVERSION"] = call({_NR["ioctl"]}, fd, 0x80087601, buf)
refused["socketpair AF_INET"] = call({_NR["socketpair"]}, 2, 1, 0, buf)
refused["socketpair AF_NETLINK"] = call({_NR["socketpair"]}, 16, 3, 0, buf)
refused["clone process"] = call({_NR["clone"]}, 17, 0, 0, 0, 0)
refused["clone thread in new user ns"] = call({_NR["clone"]}, 0x10000000 | 0x10000 | 0x800 | 0x100, 0, 0, 0, 0)
refused["kill 1"] = call({_NR["kill"]}, 1, 0)
refused["kill -1"] = call({_NR["kill"]}, -1, 0)
refused["tgkill 1"] = call({_NR["tgkill"]}, 1, 1, 0)
refused["tkill 1"] = call({_NR["tkill"]}, 1, 0)
refused["prlimit set own"] = call({_NR["prlimit64"]}, 0, 7, buf, 0)
refused["futex shared"] = call({_NR["futex"]}, buf, 1, 1, 0, 0, 0)
refused["getpgid 1"] = call({_NR["getpgid"]}, 1)
refused["getsid 1"] = call({_NR["getsid"]}, 1)
refused["sched_getaffinity 1"] = call({_NR["sched_getaffinity"]}, 1, 128, buf)
OUT["clone3"] = call({_NR["clone3"]}, buf, 88)
allowed = OUT["allowed"] = {{}}
allowed["fcntl F_GETFD"] = call({_NR["fcntl"]}, fd, 1)
allowed["ioctl FIONREAD"] = call({_NR["ioctl"]}, fd, 0x541B, buf)
allowed["socketpair AF_UNIX"] = attempt(lambda: socket.socketpair())
allowed["kill self 0"] = call({_NR["kill"]}, os.getpid(), 0)
allowed["prlimit read own"] = call({_NR["prlimit64"]}, 0, 7, 0, buf)
allowed["futex private"] = call({_NR["futex"]}, buf, 1 | 128, 1, 0, 0, 0)
allowed["getpgid own"] = call({_NR["getpgid"]}, 0)
''' + EPILOGUE


# --- 2. host paths, file metadata, writes ----------------------------------------------------

# test_jail's metadata attack (on a file of the view), and the same on a file of the run's
# own, writable directory: the tmpfs must not let what the view's read-only mount refuses.
SANDBOX_METADATA = FILE_METADATA.removesuffix(EPILOGUE) + f'''
own = "/sandbox/meta"
open(own, "w").close()
own_fd = os.open(own, os.O_RDONLY)
OUT["own setxattr"] = attempt(lambda: os.setxattr(own, "user.runner", b"x"))
OUT["own setxattr trusted"] = attempt(lambda: os.setxattr(own, "trusted.runner", b"x"))
OUT["own getxattr"] = attempt(lambda: os.getxattr(own, "user.runner"))
OUT["own listxattr"] = attempt(lambda: os.listxattr(own))
OUT["own FS_IOC_GETFLAGS"] = call({_NR["ioctl"]}, own_fd, 0x80086601, buf)
OUT["own FS_IOC_SETFLAGS"] = call({_NR["ioctl"]}, own_fd, 0x40086602, buf)
OUT["own inotify_add_watch"] = call({_NR["inotify_add_watch"]}, 0, own.encode(), 0xFFF)
OUT["own fanotify_mark"] = call({_NR["fanotify_mark"]}, 0, 1, 0x3B, -100, own.encode())
''' + EPILOGUE
# Calls the jail tier allows that a read-only view must still refuse.
VIEW_METADATA_CHANGES = ("chmod", "utime")


def _view_dirs() -> list[str]:
    """Directories a run sees (parts of the read-only view) that it must not write to."""
    dirs = ["/", "/etc", "/dev", "/usr/share/zoneinfo", sysconfig.get_path("stdlib"),
            os.path.dirname(numpy.__file__), str(HERE.parent / "runner"),
            os.path.dirname(os.path.dirname(numpy.__file__))]
    return list(dict.fromkeys(os.path.normpath(path) for path in dirs))


def _hidden_dirs(secret: Path) -> list[str]:
    """Host directories that are not in the view at all."""
    dirs = [str(secret.parent), str(HERE), os.environ["RUNNER_HOME"], "/home", "/var", "/srv",
            "/dev/shm", "/run"]
    return [path for path in dirs if os.path.isdir(path)]


def writes(secret: Path) -> str:
    return PRELUDE + f'''
MARKER = {MARKER!r}
view_dirs = {_view_dirs()!r}
hidden_dirs = {_hidden_dirs(secret)!r} + ["__PROBE_HOME__"]
def make(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
for group, dirs in (("view", view_dirs), ("hidden", hidden_dirs)):
    OUT[group] = {{}}
    for directory in dirs:
        base = os.path.join(directory, MARKER)
        OUT[group][directory] = {{
            "create": attempt(lambda: make(base)),
            "mkdir": attempt(lambda: os.mkdir(base + "-dir")),
            "symlink": attempt(lambda: os.symlink("/sandbox", base + "-link")),
            "stat": attempt(lambda: os.stat(directory)),
        }}
view_file = os.__file__
OUT["view file"] = {{
    "open for writing": attempt(lambda: os.close(os.open(view_file, os.O_WRONLY))),
    "open for appending": attempt(lambda: os.close(os.open(view_file, os.O_RDWR | os.O_APPEND))),
    "truncate": attempt(lambda: os.truncate(view_file, 0)),
    "unlink": attempt(lambda: os.unlink(view_file)),
    "rename into the sandbox": attempt(lambda: os.rename(view_file, "/sandbox/stolen")),
    "hard link into the sandbox": attempt(lambda: os.link(view_file, "/sandbox/linked")),
}}
OUT["proc"] = {{
    "comm": attempt(lambda: open("/proc/self/comm", "w").write("x")),
    "oom_score_adj": attempt(lambda: open("/proc/self/oom_score_adj", "w").write("-1000")),
    "create": attempt(lambda: make("/proc/" + MARKER)),
}}
OUT["special files"] = {{
    "fifo": attempt(lambda: os.mkfifo("/sandbox/fifo")),
    "device": attempt(lambda: os.mknod("/sandbox/null", 0o20666, os.makedev(1, 3))),
}}
# The run's own directory and /tmp are writable (so the refusals above are the view's).
OUT["own"] = {{path: attempt(lambda: make(path)) for path in ("/sandbox/" + MARKER, "/tmp/" + MARKER)}}
''' + EPILOGUE


def _planted_on_host(secret: Path) -> list[str]:
    found = []
    for directory in [*_view_dirs(), *_hidden_dirs(secret), "/sandbox", "/tmp", "/proc"]:
        for suffix in ("", "-dir", "-link"):
            path = os.path.join(directory, MARKER + suffix)
            if os.path.lexists(path):
                found.append(path)
    return found


# --- 3. processes ---------------------------------------------------------------------------

PROCESS_VIEW = PRELUDE + f'''
OUT["pid"] = os.getpid()
OUT["ppid"] = os.getppid()
OUT["proc entries"] = sorted(name for name in os.listdir("/proc") if name.isdigit())
OUT["host pids"] = {{}}
for pid in (__PROBE_PID__, __WORKER_PID__):
    OUT["host pids"][pid] = {{
        "kill 0": attempt(lambda: os.kill(pid, 0)),
        "kill 9": attempt(lambda: os.kill(pid, 9)),
        "status": attempt(lambda: open(f"/proc/{{pid}}/status").read()),
        "pidfd_open": call({_NR["pidfd_open"]}, pid, 0),
        "ptrace attach": call({_NR["ptrace"]}, 16, pid, 0, 0),
        "prlimit": call({_NR["prlimit64"]}, pid, 7, 0, ctypes.create_string_buffer(16)),
        "process_vm_readv": call({_NR["process_vm_readv"]}, pid, 0, 0, 0, 0, 0),
        "getpgid": call({_NR["getpgid"]}, pid),
    }}
# pid 1 of the run's namespace holds it open: present, unreachable.
OUT["pid 1"] = {{
    "kill 0": attempt(lambda: os.kill(1, 0)),
    "maps": attempt(lambda: open("/proc/1/maps").read()),
    "mem": attempt(lambda: open("/proc/1/mem", "rb").read(1)),
    "environ": attempt(lambda: open("/proc/1/environ", "rb").read()),
    "fd": attempt(lambda: os.listdir("/proc/1/fd")),
    "root": attempt(lambda: os.listdir("/proc/1/root")),
    "ptrace attach": call({_NR["ptrace"]}, 16, 1, 0, 0),
}}
''' + EPILOGUE


# --- 4. per-run kernel objects ----------------------------------------------------------------

_LOCK = '"hhqqi"'  # struct flock on x86_64: type, whence, start, len, pid
_LEFT_PATHS = ["/sandbox/left", "/tmp/left", "/sandbox/left-dir", "/tmp/left-dir"]
_IPC_KEYS = {"shm": 0x7A7A, "msg": 0x7A7B, "sem": 0x7A7C}

# The pid of a run, its first thread ids and the inode numbers of its first new files:
# what a fresh run gets, and what the run after PLANT must get too.
IDENTITY = '''
import threading
OUT["pid"] = os.getpid()
OUT["tids"] = []
for _ in range(3):
    thread = threading.Thread(target=lambda: OUT["tids"].append(threading.get_native_id()))
    thread.start()
    thread.join()
OUT["inodes"] = []
for path in ("/sandbox/first", "/tmp/first"):
    with open(path, "w") as first:
        OUT["inodes"].append(os.fstat(first.fileno()).st_ino)
'''

PLANT = PRELUDE + f'''
import fcntl, socket, struct, threading, time
for path in {_LEFT_PATHS!r}:
    if path.endswith("-dir"):
        os.mkdir(path)
    else:
        with open(path, "w") as left:
            left.write("left")
# Inodes: the next run's first new file must not get a number that tells how many were made.
for number in range(300):
    open(f"/sandbox/n{{number}}", "w").close()
    open(f"/tmp/n{{number}}", "w").close()
# Locks on a file of the view (the same inode in every run) and on its own file.
view = os.open(os.__file__, os.O_RDONLY)
view_ofd = os.open(os.__file__, os.O_RDONLY)
OUT["flock view"] = attempt(lambda: fcntl.flock(view, fcntl.LOCK_EX | fcntl.LOCK_NB))
OUT["posix lock view"] = attempt(lambda: fcntl.fcntl(view, fcntl.F_SETLK,
                                                     struct.pack({_LOCK}, fcntl.F_RDLCK, 0, 0, 0, 0)))
OUT["ofd lock view"] = attempt(lambda: fcntl.fcntl(view_ofd, 37,
                                                   struct.pack({_LOCK}, fcntl.F_RDLCK, 0, 0, 0, 0)))
own = os.open("/sandbox/left", os.O_RDWR)
OUT["flock own"] = attempt(lambda: fcntl.flock(own, fcntl.LOCK_EX))
OUT["posix lock own"] = attempt(lambda: fcntl.lockf(own, fcntl.LOCK_EX))
# IPC objects and sockets.
OUT["shmget"] = call({_NR["shmget"]}, {_IPC_KEYS["shm"]}, 4096, 0o1666)
OUT["msgget"] = call({_NR["msgget"]}, {_IPC_KEYS["msg"]}, 0o1666)
OUT["semget"] = call({_NR["semget"]}, {_IPC_KEYS["sem"]}, 1, 0o1666)
OUT["mq_open"] = call({_NR["mq_open"]}, b"jail-tier-left", 0o102, 0o666, 0)
OUT["abstract socket"] = attempt(lambda: socket.socket(socket.AF_UNIX).bind("\\0jail-tier-left"))
OUT["named socket"] = attempt(lambda: socket.socket(socket.AF_UNIX).bind("/sandbox/left.sock"))
OUT["add_key"] = call({_NR["add_key"]}, b"user", b"jail-tier-left", b"x", 1, -4)
OUT["memfd"] = call({_NR["memfd_create"]}, b"jail-tier-left", 0)
# Directory times.
for path in ("/sandbox", "/tmp"):
    os.utime(path, ns=({MTIME_MARK}, {MTIME_MARK}))
OUT["mtimes"] = [os.stat(path).st_mtime_ns for path in ("/sandbox", "/tmp")]
# The pid counter: threads one after another until the next id would be 1000.
last = 0
while last < 999:
    ids = []
    thread = threading.Thread(target=lambda: ids.append(threading.get_native_id()))
    thread.start()
    thread.join()
    last = ids[0]
OUT["last tid"] = last
# Threads left running: one writing (to stderr: stdout ends with this run's answer), one
# asleep (not a daemon).
def chatter():
    while True:
        os.write(2, b"LEFTOVER\\n")
        time.sleep(0.01)
threading.Thread(target=chatter, daemon=True).start()
threading.Thread(target=time.sleep, args=(60,)).start()
OUT["threads"] = threading.active_count()
# Memory in use, which the kernel takes a moment to free once the run is killed: the next
# run must not start while this one still holds anything (its locks above).
ballast = bytearray(128 << 20)
print(json.dumps(OUT), flush=True)
# This process's own state, changed after its output: the next run must not inherit it.
# (Not what its own report needs, such as json: that would only crash this run.)
os.listdir = lambda *args: ["TAMPERED"]
os.getcwd = lambda: "TAMPERED"
threading.active_count = lambda: -1
os.environ["LEFT_BEHIND"] = "1"
os.umask(0o777)
os.chdir("/tmp")
'''

LOOK = PRELUDE + '''
# Its threads before it starts any (a thread that was joined may take a moment to go).
OUT["tasks"] = sorted(os.listdir("/proc/self/task"))
''' + IDENTITY + f'''
import fcntl, socket, struct
OUT["found"] = [path for path in {_LEFT_PATHS!r} if os.path.lexists(path)]
OUT["sandbox"] = sorted(os.listdir("/sandbox"))
OUT["tmp"] = sorted(os.listdir("/tmp"))
view = os.open(os.__file__, os.O_RDONLY)
OUT["flock view"] = attempt(lambda: fcntl.flock(view, fcntl.LOCK_EX | fcntl.LOCK_NB))
fcntl.flock(view, fcntl.LOCK_UN)
query = struct.pack({_LOCK}, fcntl.F_WRLCK, 0, 0, 0, 0)
OUT["posix lock view"] = struct.unpack({_LOCK}, fcntl.fcntl(view, fcntl.F_GETLK, query))[0] == fcntl.F_UNLCK
OUT["ofd lock view"] = struct.unpack({_LOCK}, fcntl.fcntl(view, 36, query))[0] == fcntl.F_UNLCK
OUT["shmget"] = call({_NR["shmget"]}, {_IPC_KEYS["shm"]}, 4096, 0)
OUT["msgget"] = call({_NR["msgget"]}, {_IPC_KEYS["msg"]}, 0)
OUT["semget"] = call({_NR["semget"]}, {_IPC_KEYS["sem"]}, 1, 0)
OUT["mq_open"] = call({_NR["mq_open"]}, b"jail-tier-left", 0, 0, 0)
OUT["abstract socket"] = attempt(lambda: socket.socket(socket.AF_UNIX).connect("\\0jail-tier-left"))
OUT["request_key"] = call({_NR["request_key"]}, b"user", b"jail-tier-left", 0, 0)
OUT["threads"] = threading.active_count()
OUT["mtimes"] = [os.stat(path).st_mtime_ns for path in ("/sandbox", "/tmp")]
''' + EPILOGUE
# Planted and looked for several times: whether the next run can start before the last
# is gone is a matter of timing.
PLANT_TRIES = 5


# --- 5. limits --------------------------------------------------------------------------------

FILL_DISK = '''
with open("/sandbox/big", "wb") as big:
    chunk = b"x" * (1 << 20)
    for _ in range(1024):  # 1 GB
        big.write(chunk)
'''
FILL_INODES = '''
count = 0
try:
    while True:
        open(f"/sandbox/f{count}", "w").close()
        count += 1
finally:
    print(count)
'''
# Two threads busy outside the GIL (hashing releases it), on as many cores as there are:
# the run must end when they have used its CPU time together, not each, nor by the clock.
BUSY_THREADS = '''
import hashlib, threading
data = bytes(1 << 24)
def busy():
    while True:
        hashlib.sha256(data).digest()
threads = [threading.Thread(target=busy, daemon=True) for _ in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
'''

# As many threads as it can start. Small stacks: what binds must be the process limit, not
# the memory limit (a thread's stack and malloc arena count towards the run's address space:
# under the default 256 MB, about 7 threads fit whatever max_processes says).
THREAD_LIMIT = PRELUDE + '''
import threading, time
threading.stack_size(1 << 18)
started = 0
try:
    for _ in range(200):
        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
OUT["threads"] = started
''' + EPILOGUE

# --- 6. C extensions, and libraries that must work ---------------------------------------------

C_EXTENSIONS = PRELUDE + f'''
import socket, subprocess
def c(function, *args):
    ctypes.set_errno(0)
    result = function(*args)
    if result == 0 and function is libc.fork:
        os._exit(0)  # a forked copy must not report
    return "allowed" if result != -1 else errno.errorcode.get(ctypes.get_errno(), "?")
def fork():
    if os.fork() == 0:
        os._exit(0)
buf = ctypes.create_string_buffer(256)
argv = (ctypes.c_char_p * 2)(b"/bin/sh", None)
OUT["unshare user"] = c(libc.unshare, 0x10000000)
OUT["unshare mount"] = c(libc.unshare, 0x00020000)
OUT["unshare net"] = c(libc.unshare, 0x40000000)
OUT["mount"] = c(libc.mount, b"tmpfs", b"/sandbox", b"tmpfs", ctypes.c_ulong(0), None)
OUT["umount"] = c(libc.umount2, b"/sandbox", 2)
OUT["chroot"] = c(libc.chroot, b"/sandbox")
OUT["setns"] = c(libc.setns, 0, 0)
OUT["socket AF_INET"] = c(libc.socket, 2, 1, 0)
OUT["socket AF_INET6"] = c(libc.socket, 10, 2, 0)
OUT["socket AF_UNIX"] = c(libc.socket, 1, 1, 0)
OUT["socket AF_NETLINK"] = c(libc.socket, 16, 3, 0)
OUT["socket AF_PACKET"] = c(libc.socket, 17, 3, 0)
OUT["fork via syscall"] = call({_NR["fork"]})
OUT["vfork via syscall"] = call({_NR["vfork"]})
OUT["libc fork"] = c(libc.fork)
OUT["os.fork"] = attempt(fork)
OUT["subprocess"] = attempt(lambda: subprocess.run(["/bin/true"]))
OUT["execve"] = c(libc.execv, b"/bin/sh", argv)
OUT["ptrace traceme"] = c(libc.ptrace, 0, 0, None, None)
OUT["kill 1"] = c(libc.kill, 1, 9)
OUT["sethostname"] = c(libc.sethostname, b"x", 1)
OUT["setuid 0"] = c(libc.setuid, 0)
OUT["io_uring_setup"] = call({_NR["io_uring_setup"]}, 8, buf)
OUT["bpf"] = call({_NR["bpf"]}, 0, buf, 64)
OUT["perf_event_open"] = call({_NR["perf_event_open"]}, buf, 0, -1, -1, 0)
OUT["userfaultfd"] = call({_NR["userfaultfd"]}, 0)
OUT["memfd_create"] = c(libc.memfd_create, b"x", 0)
OUT["python socket"] = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
OUT["python connect"] = attempt(lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
''' + EPILOGUE

NUMPY = '''
import numpy as np
print(np.linalg.solve(np.array([[2.0, 1.0], [1.0, 3.0]]), np.array([3.0, 5.0])).round(6).tolist())
np.save("/sandbox/a.npy", np.arange(10))
print(int(np.load("/sandbox/a.npy").sum()))
'''
MATPLOTLIB = '''
import os
import matplotlib.pyplot as plt
figure, axes = plt.subplots()
axes.plot([0, 1, 2], [0, 1, 4])
axes.set_title("jail")
figure.savefig("/sandbox/plot.png")
with open("/sandbox/plot.png", "rb") as png:
    print(png.read(8) == b"\\x89PNG\\r\\n\\x1a\\n", os.path.getsize("/sandbox/plot.png") > 1000)
'''
SQLITE = '''
import sqlite3
for mode in ("delete", "wal"):
    path = f"/sandbox/{mode}.db"
    writer = sqlite3.connect(path)
    writer.execute(f"pragma journal_mode={mode}")
    writer.execute("create table t (x integer)")
    writer.executemany("insert into t values (?)", [(n,) for n in range(100)])
    writer.commit()
    reader = sqlite3.connect(path)
    print(mode, reader.execute("select sum(x) from t").fetchone()[0])
    reader.close()
    writer.close()
'''
ASYNCIO = '''
import asyncio
async def square(queue, out):
    while True:
        number = await queue.get()
        out.append(number * number)
        queue.task_done()
async def main():
    queue, out = asyncio.Queue(), []
    tasks = [asyncio.create_task(square(queue, out)) for _ in range(3)]
    for number in range(10):
        queue.put_nowait(number)
    await queue.join()
    for task in tasks:
        task.cancel()
    total = await asyncio.get_running_loop().run_in_executor(None, sum, range(10))
    await asyncio.sleep(0.01)
    return sorted(out), total
print(asyncio.run(main()))
'''
LIBRARIES = {
    "numpy": (NUMPY, "[0.8, 1.4]\n45\n"),
    "matplotlib": (MATPLOTLIB, "True True\n"),
    "sqlite3": (SQLITE, "delete 4950\nwal 4950\n"),
    "asyncio": (ASYNCIO, "([0, 1, 4, 9, 16, 25, 36, 49, 64, 81], 45)\n"),
}

# --- 7. the result channel ----------------------------------------------------------------------

CHANNEL = {
    "forge then exit": FORGE + "os._exit(0)\n",
    "forge then return": FORGE,
    "forge then raise": FORGE + "raise ValueError('the real outcome')\n",
    # (with memory in use, which makes its exit take a few milliseconds)
    "forge then close": FORGE + "ballast = bytearray(128 << 20)\nos.close(3)\n",
    "forge, close, then raise": FORGE + "ballast = bytearray(128 << 20)\nos.close(3)\n"
                                "raise ValueError('the real outcome')\n",
    "forge, close everything, then exit": FORGE + "ballast = bytearray(128 << 20)\n"
                                          "for fd in (1, 2, 3):\n    os.close(fd)\nos._exit(0)\n",
    "close the channel": "import os\nos.close(3)\n",
    # (dup3: the allow list has no dup2)
    "replace the channel": "import os\nread_end, write_end = os.pipe()\nos.dup2(write_end, 3, inheritable=False)\n",
}
# Each is tried several times: how the supervisor sees a child end is a matter of timing,
# and a forgery must never win, not just usually lose.
CHANNEL_TRIES = 12


# --- running the attacks --------------------------------------------------------------------------

# In order, in one worker: (name, its code or a function of the secret file giving it, its
# limits, whether the check run follows it).
ATTACKS: list[tuple[str, object, dict[str, float], bool]] = [
    ("census", CENSUS, {"timeout_s": 60}, True),
    ("argument checks", ARGUMENT_CHECKS, {}, True),
    ("file metadata", SANDBOX_METADATA, {}, True),
    ("host view", host_view, {}, True),
    ("writes", writes, {}, True),
    ("host processes", lambda secret: host_processes(os.getpid()), {}, True),
    ("process view", PROCESS_VIEW, {}, True),
    ("identity fresh", PRELUDE + IDENTITY + EPILOGUE, {}, True),
    # No check run in between: the very next run looks for what this one left.
    *((name, code, {}, name.startswith("look")) for n in range(PLANT_TRIES)
      for name, code in ((f"plant #{n}", PLANT), (f"look #{n}", LOOK))),
    ("privileges", PRIVILEGES, {}, True),
    ("threads", THREAD_LIMIT, {"max_processes": 8, "memory_mb": 4096}, True),
    ("threads unlimited", THREAD_LIMIT, {"max_processes": 32, "memory_mb": 4096}, True),
    ("fill the disk", FILL_DISK, {"disk_mb": 64, "max_file_size_mb": 2048}, True),
    ("fill the inodes", FILL_INODES, {"disk_mb": 8}, True),
    ("busy threads", BUSY_THREADS, {"cpu_s": 1, "timeout_s": 10}, True),
    ("c extensions", C_EXTENSIONS, {}, True),
    *((name, code, {}, True) for name, (code, _) in LIBRARIES.items()),
    *((f"{name} #{n}", code, {"timeout_s": 5}, True) for name, code in CHANNEL.items()
      for n in range(CHANNEL_TRIES)),
]


def _attacks(secret: Path) -> list[dict[str, object]]:
    return [{"name": name, "code": code(secret) if callable(code) else code, "limits": limits,
             "after": after} for name, code, limits, after in ATTACKS]


def _host_state() -> dict[str, object]:
    """What an attack could change on the host, and a listing of where it could leave a file."""
    digests = {path: hashlib.sha256(Path(path).read_bytes()).hexdigest()
               for path in ("/etc/passwd", "/etc/shadow") if os.path.exists(path)}
    return {"digests": digests, "tmp": sorted(os.listdir("/tmp")), "tests": sorted(os.listdir(HERE)),
            "sandbox exists": os.path.lexists("/sandbox")}


@pytest.fixture(scope="module")
def secret():
    """A host file the ordinary user could read (a 0755 directory under /tmp), so only the
    jail hides it, with an extended attribute whose value must not change."""
    directory = Path(tempfile.mkdtemp(prefix="jail-tier-secret-", dir="/tmp"))
    directory.chmod(0o755)
    path = directory / "secret.txt"
    path.write_text("host secret\n")
    path.chmod(0o644)
    os.setxattr(path, "user.runner", b"host value")
    yield path
    shutil.rmtree(directory, ignore_errors=True)


_RESULTS: dict[str, dict[str, dict[str, object]]] = {}


@pytest.fixture(scope="module", params=CALLERS)
def attacked(request: pytest.FixtureRequest, secret: Path):
    """Every attack, run in one worker started by the caller (cached per caller)."""
    caller = request.param
    if caller not in _RESULTS:
        command = [sys.executable, str(PROBE)]
        if caller == "ordinary-user":
            command = [sys.executable, str(HERE / "as_user.py"), ORDINARY_USER, str(PROBE)]
        before = _host_state()
        job = {"after": AFTER, "attacks": _attacks(secret)}
        proc = subprocess.run(command, input=json.dumps(job), capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = json.loads(proc.stdout)
        after = _host_state()
        results["_host"] = {
            "before": before, "after": after, "planted": _planted_on_host(secret),
            "new in /tmp": sorted(set(after["tmp"]) - set(before["tmp"]))}
        _RESULTS[caller] = results
    return caller, _RESULTS[caller]


def _check(outcome: dict[str, object]) -> dict[str, object]:
    """The check run's answer, without the directory times (which must only not be an
    earlier run's)."""
    return {key: value for key, value in outcome.items() if key != "mtimes"}


# --- the tests ---------------------------------------------------------------------------------

def test_the_caller_and_the_layers_are_as_users_get_them(attacked):
    caller, results = attacked
    assert (results["_caller"]["uid"] == 0) == (caller == "root")
    isolation = results["_fresh"]["isolation"]
    assert isolation["tier"] == "jail"
    assert isolation["namespaces"] == list(jail.NAMESPACE_NAMES)
    assert isolation["per_run"] == ["pid", "mnt", "ipc", "dir"]
    assert isolation["unprivileged"] and isolation["seccomp"] == "allow-list"
    assert isolation["landlock_abi"] > 0 and not isolation["policy"] and not isolation["audit_hook"]


@pytest.mark.parametrize("name", [attack[0] for attack in ATTACKS])
def test_after_each_attack_the_same_worker_runs_as_if_fresh(attacked, name):
    """The worker survives the attack, and its next run sees exactly what a fresh worker's
    first run sees: pid 2, its own empty directory and /tmp, one thread, no change the
    attack made to its own process (environment, umask, working directory, modules)."""
    _, results = attacked
    fresh = results["_fresh"]
    assert fresh["status"] == "ok", fresh
    seen_fresh = json.loads(fresh["stdout"])
    assert seen_fresh["pid"] == 2 and seen_fresh["sandbox"] == []
    assert seen_fresh["tmp"] == TMP_MOUNT_POINTS
    assert seen_fresh["threads"] == 1 and seen_fresh["tasks"] == ["2"] and seen_fresh["cwd"] == jail.RUN_DIR
    attack = results[name]
    assert attack["workers"] == fresh["workers"], f"{name}: the worker was replaced"
    if "after" not in attack:  # the plant: the run after it is the look
        return
    after = attack["after"]
    assert after["status"] == "ok" and after["stderr"] == "", f"{name}: {after}"
    seen = json.loads(after["stdout"])
    assert _check(seen) == _check(seen_fresh), name
    assert MTIME_MARK not in seen["mtimes"], name


def test_every_system_call_off_the_jail_allow_list_is_refused(attacked):
    _, results = attacked
    outcome = _outcome(results, "census")
    wrong = {}
    for number, answer in outcome.items():
        expected = "EPERM" if int(number) in syscalls.X86_64_NAMES else "ENOSYS"
        if answer != expected:
            wrong[f"{number} {syscalls.X86_64_NAMES.get(int(number), '?')}"] = answer
    assert not wrong, wrong
    assert len(outcome) == syscalls.HIGHEST_KNOWN + 65 - len(_skipped_in_census())


def test_the_allow_lists_argument_checks_hold(attacked):
    _, results = attacked
    outcome = _outcome(results, "argument checks")
    assert {key: value for key, value in outcome["refused"].items() if value != "EPERM"} == {}
    assert outcome["clone3"] == "ENOSYS"  # so that the C library falls back to clone
    assert {key: value for key, value in outcome["allowed"].items() if value != "allowed"} == {}


def test_extended_attributes_inode_flags_and_watches_are_refused(attacked, secret):
    _, results = attacked
    outcome = _outcome(results, "file metadata")
    refused = {key: value for key, value in outcome.items() if key not in VIEW_METADATA_CHANGES}
    assert {key: value for key, value in refused.items() if value != "EPERM"} == {}
    # chmod and utime are allowed calls here (for the run's own files): the view's
    # read-only mount refuses them.
    for key in VIEW_METADATA_CHANGES:
        assert outcome[key] in ("EROFS", "EPERM"), (key, outcome[key])
    assert os.getxattr(secret, "user.runner") == b"host value"
    assert os.listxattr(secret) == ["user.runner"]


def test_host_paths_do_not_exist_for_a_run(attacked, secret):
    _, results = attacked
    outcome = _outcome(results, "host view")
    assert set(outcome) == set(_host_paths(secret))
    for path, answers in outcome.items():
        assert set(answers.values()) == {"ENOENT"}, (path, answers)
    assert secret.read_text() == "host secret\n"


def test_writes_anywhere_but_the_runs_own_directory_fail_and_reach_no_host_file(attacked, secret):
    _, results = attacked
    outcome = _outcome(results, "writes")
    for directory, answers in outcome["view"].items():
        assert answers["stat"] == "allowed", (directory, answers)  # it is in the view...
        for what in ("create", "mkdir", "symlink"):  # ...read-only
            assert answers[what] in ("EROFS", "EACCES"), (directory, what, answers)
    for directory, answers in outcome["hidden"].items():
        assert set(answers.values()) == {"ENOENT"}, (directory, answers)
    for what, answer in outcome["view file"].items():
        expected = ("EXDEV", "EROFS", "EACCES") if "sandbox" in what else ("EROFS", "EACCES")
        assert answer in expected, (what, answer)
    for what, answer in outcome["proc"].items():
        assert answer in ("EACCES", "ENOENT"), (what, answer)
    for what, answer in outcome["special files"].items():
        assert answer in ("EPERM", "EACCES"), (what, answer)
    assert set(outcome["own"].values()) == {"allowed"}, outcome["own"]
    assert results["_host"]["planted"] == [], results["_host"]["planted"]


def test_the_host_is_unharmed_by_every_attack(attacked, secret):
    """After all of them (the probe reported, so the caller's process survived too)."""
    _, results = attacked
    host = results["_host"]
    assert host["planted"] == [], host["planted"]
    assert host["before"]["digests"] == host["after"]["digests"]
    assert host["before"]["tests"] == host["after"]["tests"]
    assert host["before"]["sandbox exists"] == host["after"]["sandbox exists"]
    # (Other processes on the machine may make files in /tmp meanwhile: only the runs'
    # own names count.)
    assert not [name for name in host["new in /tmp"] if "jail-tier" in name or "left" in name], host
    assert secret.read_text() == "host secret\n"
    assert os.getxattr(secret, "user.runner") == b"host value"


def test_no_host_process_is_visible_or_reachable(attacked):
    _, results = attacked
    outcome = _outcome(results, "host processes")
    for key in ("kill 0", "status", "pidfd_open", "ptrace", "prlimit other", "getpgid 1"):
        assert outcome[key] != "allowed", (key, outcome)
    view = _outcome(results, "process view")
    assert view["pid"] == 2, view
    assert view["ppid"] == 0, view  # its parent (the worker's supervisor) is outside
    # Only its own PID namespace: itself, and (visible where the caller was not root) the
    # process holding the namespace.
    assert view["proc entries"] in (["2"], ["1", "2"]), view
    for pid, answers in view["host pids"].items():
        assert {key: value for key, value in answers.items() if value == "allowed"} == {}, (pid, answers)
        assert answers["kill 9"] == answers["kill 0"] == "EPERM", (pid, answers)
    pid_1 = view["pid 1"]
    assert {key: value for key, value in pid_1.items() if value == "allowed"} == {}, pid_1


def _plants_and_looks(results: dict[str, dict[str, object]]) -> list[tuple[dict, dict, dict]]:
    """(what each plant did, what the run right after it found, that run's result)."""
    return [(_outcome(results, f"plant #{n}"), _outcome(results, f"look #{n}"), results[f"look #{n}"])
            for n in range(PLANT_TRIES)]


def test_nothing_a_run_plants_is_there_for_the_next(attacked):
    _, results = attacked
    for planted, look, result in _plants_and_looks(results):
        # What it could make, it made (so that finding nothing below means something).
        assert planted["mtimes"] == [MTIME_MARK, MTIME_MARK], planted
        assert planted["last tid"] >= 999 and planted["threads"] == 3, planted
        # What it could not make: refused outright.
        for key in ("shmget", "msgget", "semget", "mq_open", "abstract socket", "named socket", "add_key",
                    "memfd"):
            assert planted[key] in ("EPERM", "EACCES"), (key, planted)
        assert look["found"] == [] and look["sandbox"] == ["first"], look
        assert look["tmp"] == sorted(["first", *TMP_MOUNT_POINTS]), look
        for key in ("shmget", "msgget", "semget", "mq_open", "abstract socket", "request_key"):
            assert look[key] != "allowed", (key, look)
        assert look["threads"] == 1 and look["tasks"] == ["2"], look
        assert MTIME_MARK not in look["mtimes"], look
        assert "LEFTOVER" not in result["stdout"] + result["stderr"]


def test_no_lock_a_run_took_is_held_when_the_next_starts(attacked):
    """Locks on a file of the view (the same inode in every run): the run that took them
    must be gone, its locks with it, before the next run starts."""
    _, results = attacked
    held = []
    for planted, look, _ in _plants_and_looks(results):
        for key in ("flock view", "posix lock view", "ofd lock view", "flock own", "posix lock own"):
            assert planted[key] == "allowed", (key, planted)
        if look["flock view"] != "allowed" or look["posix lock view"] is not True or \
                look["ofd lock view"] is not True:
            held.append({key: look[key] for key in ("flock view", "posix lock view", "ofd lock view")})
    assert not held, f"{len(held)} of {PLANT_TRIES} next runs found the locks still held: {held}"


def test_the_pid_counter_and_inode_numbers_start_afresh_in_every_run(attacked):
    _, results = attacked
    fresh = _outcome(results, "identity fresh")
    for _, look, _ in _plants_and_looks(results):
        assert fresh["pid"] == look["pid"] == 2
        assert look["tids"] == fresh["tids"], (fresh, look)
        assert look["inodes"] == fresh["inodes"], (fresh, look)


def test_a_run_holds_no_privilege_and_hard_limits_equal_soft(attacked):
    _, results = attacked
    outcome = _outcome(results, "privileges")
    assert outcome["capabilities"] == [0] * 6
    (uids, gids, groups) = outcome["ids"]
    assert 0 not in uids and 0 not in gids and groups == []
    for name, (soft, hard) in outcome["limits"].items():
        assert soft == hard, (name, soft, hard)
    assert outcome["raise nofile"] in ("EPERM", "ValueError")
    assert outcome["unshare user"] == outcome["setuid 0"] == outcome["execve"] == "EPERM"


def test_the_thread_limit_binds_whoever_started_the_worker(attacked):
    _, results = attacked
    outcome = _outcome(results, "threads")
    assert 1 <= outcome["threads"] <= 7, outcome  # the run's own thread is the eighth
    # With room for more, more start: it was the process limit that bound above.
    assert _outcome(results, "threads unlimited")["threads"] > 7, results["threads unlimited"]


def test_filling_the_disk_ends_the_run_with_the_disk_limit_named(attacked):
    _, results = attacked
    for name, limit in (("fill the disk", 64), ("fill the inodes", 8)):
        result = results[name]
        assert result["status"] == "error" and result["error_type"] == "OSError", (name, result)
        assert "[Errno 28]" in result["error"], (name, result)
        assert f"at most {limit} MB" in result["error"] and "disk_mb" in result["error"], (name, result)
    assert int(results["fill the inodes"]["stdout"]) > 500  # files were made until none could be


def test_cpu_time_is_metered_over_all_threads(attacked):
    _, results = attacked
    result = results["busy threads"]
    assert result["status"] == "timeout", result
    assert "CPU time limit of 1 s" in result["error"], result
    assert 900 <= result["cpu_ms"] < 2500, result


def test_c_extensions_can_do_no_more_than_python(attacked):
    _, results = attacked
    outcome = _outcome(results, "c extensions")
    assert {key: value for key, value in outcome.items() if value != "EPERM"} == {}


@pytest.mark.parametrize("library", list(LIBRARIES))
def test_libraries_that_need_files_threads_and_event_loops_work(attacked, library):
    _, results = attacked
    result = results[library]
    assert result["status"] == "ok", result
    assert result["stdout"] == LIBRARIES[library][1], result


@pytest.mark.parametrize("name", list(CHANNEL))
def test_a_run_that_forges_or_tampers_with_its_result_channel_is_crashed(attacked, name):
    _, results = attacked
    wrong = []
    for n in range(CHANNEL_TRIES):
        result = results[f"{name} #{n}"]
        if result["status"] != "crashed" or "result channel" not in (result["error"] or "") or \
                "FORGED" in result["stdout"] or result["duration_ms"] == FORGED_MS:
            wrong.append(result)
    assert not wrong, f"{len(wrong)} of {CHANNEL_TRIES} tries: {wrong[0]}"


def test_concurrent_runs_share_no_lock():
    """Two runs at once, in two workers: a lock one takes on a file of the view (the same
    inode in every worker's jail) must not be seen by the other, or the two have a channel
    (the reason the allow list refuses shared futexes). With a root caller only: the view's
    files are the same inodes whoever started the workers."""
    hold = PRELUDE + '''
import fcntl, time
view = os.open(os.__file__, os.O_RDONLY)
fcntl.flock(view, fcntl.LOCK_EX)
time.sleep(3)
'''
    probe = PRELUDE + '''
import fcntl, struct
view = os.open(os.__file__, os.O_RDONLY)
OUT["flock"] = attempt(lambda: fcntl.flock(view, fcntl.LOCK_EX | fcntl.LOCK_NB))
''' + EPILOGUE
    with Sandbox(backend="jail", log_store=False, pool_size=2) as sandbox:
        # Both workers started first (two runs at once), so that neither run below waits
        # for a worker to start.
        warming = [threading.Thread(target=sandbox.run, args=("import time; time.sleep(1)",))
                   for _ in range(2)]
        for thread in warming:
            thread.start()
        for thread in warming:
            thread.join()
        holder = threading.Thread(target=sandbox.run, args=(hold,), kwargs={"limits": Limits(timeout_s=10)})
        holder.start()
        time.sleep(1.5)  # the holder's run has its lock by now
        result = sandbox.run(probe)
        holder.join()
    assert result.status == Status.OK, result
    assert json.loads(result.stdout)["flock"] == "allowed", result.stdout


UNDER_TMP = r'''
import json, os, sys
import numpy
seen = {"prefix": sys.prefix, "cwd": os.getcwd(), "numpy": int(numpy.arange(4).sum())}
for path in ("/sandbox/made.txt", "/tmp/made.txt"):
    with open(path, "w") as f:
        f.write("x")
    seen[path] = sorted(os.listdir(os.path.dirname(path)))
try:
    open(os.path.join(sys.prefix, "planted"), "w")
    seen["write the environment"] = "allowed"
except OSError as exc:
    seen["write the environment"] = exc.errno
# A package in the environment's site-packages that no run asked for: masked there as on
# the jail's root, so it is not importable from the run's /tmp either.
try:
    import jail_tier_unrequested
    seen["unrequested"] = "imported"
except ImportError:
    seen["unrequested"] = "absent"
print(json.dumps(seen))
'''


def test_a_python_installation_under_tmp_is_shown_on_the_runs_own_tmp():
    """A virtual environment under /tmp (a checkout in a temporary directory, as CI clones
    one): each run's /tmp is its own tmpfs, on which the environment is bound again,
    read-only; the run writes there and in /sandbox, and the next run finds neither."""
    from test_jail import _venv_under_tmp

    base = Path(tempfile.mkdtemp(prefix="jail-tier-venv-", dir="/tmp"))
    try:
        venv, purelib = _venv_under_tmp(base)
        (purelib / "jail_tier_unrequested.py").write_text("VALUE = 1\n")
        job = {"after": "import os\nprint(sorted(os.listdir('/sandbox')), sorted(os.listdir('/tmp')))",
               "attacks": [{"name": "under tmp", "code": UNDER_TMP}]}
        proc = subprocess.run([str(venv / "bin" / "python"), str(HERE / "jail_tier_probe.py")],
                              input=json.dumps(job), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-4000:]
        results = json.loads(proc.stdout)
        run = results["under tmp"]
        assert run["status"] == "ok", run
        seen = json.loads(run["stdout"])
        assert seen["prefix"] == str(venv) and seen["cwd"] == "/sandbox" and seen["numpy"] == 6
        assert seen["/sandbox/made.txt"] == ["made.txt"]
        # The mount points: this environment's, and the project's when it is under /tmp too.
        assert seen["/tmp/made.txt"] == sorted({"made.txt", base.name, *TMP_MOUNT_POINTS})
        assert seen["write the environment"] in (30, 13), seen  # EROFS, or EACCES
        assert seen["unrequested"] == "absent", seen
        assert (purelib / "jail_tier_unrequested.py").exists()  # (so "absent" means masked)
        assert run["after"]["status"] == "ok"
        assert run["after"]["stdout"] == f"[] {sorted({base.name, *TMP_MOUNT_POINTS})!r}\n", \
            run["after"]
        assert not (venv / "planted").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
