"""Kernel-enforced limits for the restricted tier's child, with Linux Landlock.

The guards and the audit hook live in the child's own Python; code that somehow got hold
of the real builtins could switch them off. Landlock cannot be switched off: once the
child restricts itself, the kernel refuses, for it and anything it forks, every file
access except reading the Python installation, every TCP bind/connect, and signals or
abstract sockets that reach outside the child. Files already open (its stdout, stderr
and result pipe) keep working. Unprivileged and irreversible.

Where the kernel has no Landlock (before 5.13, or disabled), `build` returns None and
the child relies on the other layers; `available()` tells which.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import platform
import stat
from collections.abc import Iterable

from . import linux

# Same numbers on x86_64 and aarch64 (the generic syscall table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = linux.PR_SET_NO_NEW_PRIVS

_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
# Below a writable root (the jail tier's own directory and /tmp): read, write, make and
# remove files, directories and links, rename across directories (REFER, ABI 2) and
# truncate (ABI 3). Never devices, FIFOs or sockets.
_FS_REMOVE_DIR, _FS_REMOVE_FILE, _FS_MAKE_DIR, _FS_MAKE_REG, _FS_MAKE_SYM = (
    1 << 4, 1 << 5, 1 << 7, 1 << 8, 1 << 12)
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_WRITABLE = (_FS_WRITE_FILE | _FS_READ_FILE | _FS_READ_DIR | _FS_REMOVE_DIR | _FS_REMOVE_FILE
                | _FS_MAKE_DIR | _FS_MAKE_REG | _FS_MAKE_SYM | _FS_REFER | _FS_TRUNCATE)
# Every filesystem right each ABI version knows (1..5), so all are handled (refused).
_FS_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1,
                  5: (1 << 16) - 1}
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = linux.libc


def abi_version() -> int:
    if platform.system() != "Linux":
        return 0
    version = _libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


def available() -> bool:
    return abi_version() > 0


class Ruleset:
    """A ruleset built ahead of time (once, in the worker: forked children inherit its fd);
    `apply` restricts the calling process with it in one system call."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def apply(self) -> bool:
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return bool(_libc.syscall(_RESTRICT_SELF, ctypes.c_int(self.fd), ctypes.c_uint32(0)) == 0)

    def close(self) -> None:
        os.close(self.fd)


def _new_ruleset(abi: int) -> int:
    fs_all = _fs_all(abi)
    attr = _RulesetAttr(handled_access_fs=fs_all,
                        handled_access_net=(_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        scoped=(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    return int(_libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                             ctypes.c_uint32(0)))


def _fs_all(abi: int) -> int:
    return _FS_ALL_BY_ABI.get(min(abi, 5), _FS_ALL_BY_ABI[5])


def _access(fd: int, write: bool, abi: int) -> int:
    is_dir = _is_dir_fd(fd)
    if write and is_dir:
        return _FS_WRITABLE & _fs_all(abi)
    return _FS_READ_FILE | (_FS_READ_DIR if is_dir else 0)


def _is_dir_fd(fd: int) -> bool:
    try:
        return stat.S_ISDIR(os.fstat(fd).st_mode)
    except OSError:
        return False


def _add(ruleset: int, fd: int, access: int) -> None:
    rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
    _libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                  ctypes.byref(rule), ctypes.c_uint32(0))


def _open_all(paths: Iterable[str]) -> list[int]:
    fds = []
    for path in paths:
        try:
            fds.append(os.open(path, os.O_PATH | os.O_CLOEXEC))
        except OSError:
            continue  # a root that does not exist grants nothing
    return fds


def build(readable: Iterable[str], writable: Iterable[str] = ()) -> Ruleset | None:
    """The ruleset for `readable` roots (read only) and `writable` ones (files and
    directories made, changed and removed below them), or None without Landlock."""
    abi = abi_version()
    if abi <= 0:
        return None
    ruleset = _new_ruleset(abi)
    if ruleset < 0:
        return None
    for write, paths in ((False, readable), (True, writable)):
        for fd in _open_all(paths):
            try:
                _add(ruleset, fd, _access(fd, write, abi))
            finally:
                os.close(fd)
    return Ruleset(ruleset)


class PreparedRules:
    """Rules whose read-only roots were opened once, in the worker (children inherit the
    descriptors), for children that add paths of their own: a rule holds an inode, and a
    run's own directory and /proc are mounts that exist only in its own mount namespace
    (a rule on the directory they are mounted on does not reach into them). `apply`, in a
    child, makes its ruleset from both and restricts the child with it, then closes every
    descriptor it used."""

    def __init__(self, readable: Iterable[str]) -> None:
        self.abi = abi_version()
        self.fds = _open_all(readable) if self.abi > 0 else []

    def move_above(self, floor: int) -> None:
        """Keep the descriptors above `floor` (the numbers a child gives its own pipes)."""
        moved = []
        for fd in self.fds:
            if fd < floor:
                high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor)
                os.close(fd)
                fd = high
            moved.append(fd)
        self.fds = moved

    def apply(self, writable: Iterable[str] = (), readable: Iterable[str] = ()) -> bool:
        if self.abi <= 0:
            return False
        ruleset = _new_ruleset(self.abi)
        own = [(fd, False) for fd in _open_all(readable)] + \
            [(fd, True) for fd in _open_all(writable)]
        try:
            if ruleset < 0:
                return False
            for fd, write in [(fd, False) for fd in self.fds] + own:
                _add(ruleset, fd, _access(fd, write, self.abi))
            return Ruleset(ruleset).apply()
        finally:
            for fd in (*self.fds, *(fd for fd, _ in own), *([ruleset] if ruleset >= 0 else [])):
                os.close(fd)
            self.fds = []
