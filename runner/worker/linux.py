"""Linux's numbers, in one place: namespace, mount, prctl and clone flags, and the C library.

Every module of the worker that speaks to the kernel directly (the jail, the forkserver,
the privileges, seccomp, Landlock) takes its constants and its handle on libc from here,
so each number is written once, with its name. Stdlib only (ctypes); loading libc fails
quietly off Linux (`libc` is then None and the callers say what they cannot do).
"""

from __future__ import annotations

import ctypes
import platform
from typing import Any

# Namespaces (clone(2), unshare(2), setns(2)).
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWTIME = 0x00000080
# Other clone flags.
CLONE_VM = 0x00000100
CLONE_FILES = 0x00000400
CLONE_PARENT = 0x00008000
CLONE_THREAD = 0x00010000
# Every namespace flag clone(2) can carry (the seccomp checks refuse them all).
CLONE_NAMESPACES = (CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER
                    | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME)

# mount(2) flags.
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
MNT_DETACH = 2

# prctl(2) options.
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

MACHINE = platform.machine()
# System call numbers the worker makes itself (through libc's syscall()), per machine.
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(MACHINE)
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(MACHINE)
SYS_PAUSE = {"x86_64": 34}.get(MACHINE)  # aarch64 has no pause(2)


def _load_libc() -> Any:
    try:
        handle = ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):  # not a system with a C library to load this way
        return None
    handle.syscall.restype = ctypes.c_long
    handle.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                             ctypes.c_void_p]
    handle.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    handle.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    return handle


# One handle for the whole worker, loaded once in the parent: children inherit it (loading
# ctypes in every child would cost milliseconds).
libc: Any = _load_libc()


def errno_text() -> str:
    """What the last failed libc call's errno says."""
    import os

    code = ctypes.get_errno()
    return os.strerror(code) if code else "unknown error"
