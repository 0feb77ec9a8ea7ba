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
import os
import platform
from collections.abc import Iterable

# Same numbers on x86_64 and aarch64 (the generic syscall table).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

_FS_EXECUTE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 2, 1 << 3
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


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


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


def build(readable: Iterable[str]) -> Ruleset | None:
    """The ruleset for `readable` roots, or None without Landlock."""
    abi = abi_version()
    if abi <= 0:
        return None
    fs_all = _FS_ALL_BY_ABI.get(min(abi, 5), _FS_ALL_BY_ABI[5])
    attr = _RulesetAttr(handled_access_fs=fs_all,
                        handled_access_net=(_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        scoped=(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = _libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size),
                            ctypes.c_uint32(0))
    if ruleset < 0:
        return None
    for root in readable:
        try:
            fd = os.open(root, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            continue  # a root that does not exist grants nothing
        try:
            access = _FS_READ_FILE | (_FS_READ_DIR if os.path.isdir(root) else 0)
            rule = _PathBeneathAttr(allowed_access=access, parent_fd=fd)
            _libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                          ctypes.byref(rule), ctypes.c_uint32(0))
        finally:
            os.close(fd)
    return Ruleset(int(ruleset))
