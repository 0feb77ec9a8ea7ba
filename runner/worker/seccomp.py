"""The restricted child's seccomp filter: an allow list, default deny.

The filter is compiled from syscalls.RESTRICTED_CHILD (the table, with a reason per
group) and nothing else. A call the table allows passes (some only with the arguments
its row's check accepts); every other call is refused: EPERM for a call this project
knows, ENOSYS for a number it does not know, so a system call Linux adds later is
refused by construction. A call made through another ABI (i386's int 0x80, x32) kills
the process: its numbers mean other calls.

Built once in the worker as classic BPF (stdlib only, ctypes), installed by each child
in one prctl. x86_64 only for now; elsewhere `build` returns None and the namespaces,
Landlock and the limits remain.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

from . import linux, syscalls
from .syscalls import Group

_PR_SET_NO_NEW_PRIVS = linux.PR_SET_NO_NEW_PRIVS
_PR_SET_SECCOMP = linux.PR_SET_SECCOMP
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
RET_EPERM = 0x00050000 | 1
RET_ENOSYS = 0x00050000 | 38
RET_SUCCESS_UNDONE = 0x00050000  # SECCOMP_RET_ERRNO with 0: returns 0, the call not made

_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_NR, _ARCH = 0, 4
# The first number past the x86_64 calls below 424, and past the last known call.
_FIRST_GAP, _GAP_END = syscalls.X86_64["uprobe"] + 1, syscalls.X86_64["pidfd_send_signal"]


def _arg(index: int, high: bool = False) -> int:
    return 16 + 8 * index + (4 if high else 0)  # little endian: low word first


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _one_of(arg: int, values: tuple[int, ...], undone: tuple[int, ...] = ()) -> list[bytes]:
    """Allow when argument `arg` (all 64 bits) is one of `values`; answer success without
    making the call when it is one of `undone`; else EPERM."""
    out = [_insn(_LD_ABS_W, _arg(arg, high=True)), _insn(_JEQ, 0, jt=1, jf=0),
           _insn(_RET, RET_EPERM), _insn(_LD_ABS_W, _arg(arg))]
    # Jumps: past the remaining comparisons to [EPERM, SUCCESS_UNDONE, ALLOW].
    checks = [(value, 2) for value in values] + [(value, 1) for value in undone]
    for index, (value, target) in enumerate(checks):
        remaining = len(checks) - index - 1
        out.append(_insn(_JEQ, value, jt=remaining + target, jf=0))
    out += [_insn(_RET, RET_EPERM), _insn(_RET, RET_SUCCESS_UNDONE), _insn(_RET, RET_ALLOW)]
    return out


def _self_only(first_is_pid_or_zero: bool) -> list[bytes]:
    """kill(pid, ...) to its own pid, 0 (its group) or -pid; tgkill/tkill to its own id.
    The child is its group's and session's only process (it made both), and its pid
    is written into the template when it installs the filter."""
    if not first_is_pid_or_zero:
        return [_insn(_LD_ABS_W, _arg(0)), _insn(_JEQ, _PID_MARK, jt=1, jf=0),
                _insn(_RET, RET_EPERM), _insn(_RET, RET_ALLOW)]
    return [_insn(_LD_ABS_W, _arg(0)), _insn(_JEQ, _PID_MARK, jt=3, jf=0),
            _insn(_JEQ, 0, jt=2, jf=0), _insn(_JEQ, _GROUP_MARK, jt=1, jf=0),
            _insn(_RET, RET_EPERM), _insn(_RET, RET_ALLOW)]


def _checked(name: str, check: str) -> list[bytes]:
    """The instructions after a match on `name`'s number; every path returns."""
    if check == syscalls.NOT_IMPLEMENTED:
        return [_insn(_RET, RET_ENOSYS)]
    if check == syscalls.SELF_ONLY:
        return _self_only(name == "kill")
    if check == syscalls.OWN_PID:
        return [_insn(_LD_ABS_W, _arg(0, high=True)), _insn(_JEQ, 0, jt=1, jf=0),
                _insn(_RET, RET_EPERM), _insn(_LD_ABS_W, _arg(0)),
                _insn(_JEQ, 0, jt=2, jf=0), _insn(_JEQ, _PID_MARK, jt=1, jf=0),
                _insn(_RET, RET_EPERM), _insn(_RET, RET_ALLOW)]
    if check == syscalls.PRIVATE_FUTEX:
        return [_insn(_LD_ABS_W, _arg(1)),
                _insn(_JSET, syscalls.FUTEX_PRIVATE_FLAG, jt=0, jf=1),
                _insn(_RET, RET_ALLOW), _insn(_RET, RET_EPERM)]
    if check == syscalls.THREADS_ONLY:
        return [_insn(_LD_ABS_W, _arg(0)),
                _insn(_JSET, syscalls.CLONE_NAMESPACES, jt=2, jf=0),
                _insn(_JSET, syscalls.CLONE_THREAD, jt=0, jf=1),
                _insn(_RET, RET_ALLOW), _insn(_RET, RET_EPERM)]
    if check == syscalls.READ_LIMITS:
        # prlimit64(pid, resource, new, old): pid 0 or its own, and no new limit.
        return [_insn(_LD_ABS_W, _arg(0, high=True)), _insn(_JEQ, 0, jt=1, jf=0),
                _insn(_RET, RET_EPERM), _insn(_LD_ABS_W, _arg(0)),
                _insn(_JEQ, 0, jt=2, jf=0), _insn(_JEQ, _PID_MARK, jt=1, jf=0),
                _insn(_RET, RET_EPERM),
                _insn(_LD_ABS_W, _arg(2)), _insn(_JEQ, 0, jt=0, jf=2),
                _insn(_LD_ABS_W, _arg(2, high=True)), _insn(_JEQ, 0, jt=1, jf=0),
                _insn(_RET, RET_EPERM), _insn(_RET, RET_ALLOW)]
    if check == syscalls.TERMINAL_QUERY:
        return _one_of(1, (syscalls.TCGETS, syscalls.FIOCLEX, syscalls.FIONCLEX))
    if check == syscalls.DESCRIPTOR_IOCTLS:
        return _one_of(1, (syscalls.TCGETS, syscalls.FIOCLEX, syscalls.FIONCLEX,
                           syscalls.FIONBIO, syscalls.FIONREAD))
    if check in (syscalls.DESCRIPTOR_FLAGS, syscalls.DESCRIPTORS_AND_LOCKS):
        commands: tuple[int, ...] = (syscalls.F_DUPFD, syscalls.F_GETFD, syscalls.F_SETFD,
                                     syscalls.F_GETFL, syscalls.F_SETFL,
                                     syscalls.F_DUPFD_CLOEXEC)
        if check == syscalls.DESCRIPTOR_FLAGS:
            return _one_of(1, commands)
        return _one_of(1, (*commands, syscalls.F_GETLK, syscalls.F_OFD_GETLK),
                       undone=(syscalls.F_SETLK, syscalls.F_SETLKW, syscalls.F_OFD_SETLK,
                               syscalls.F_OFD_SETLKW))
    if check == syscalls.NOT_TAKEN:
        return [_insn(_RET, RET_SUCCESS_UNDONE)]
    if check == syscalls.LOCAL_PAIR:
        return _one_of(0, (syscalls.AF_UNIX,))
    raise ValueError(f"unknown argument check {check!r}")


def program(groups: tuple[Group, ...] = syscalls.RESTRICTED_CHILD) -> bytes:
    """The filter for `groups`, with placeholders for the installing process's pid."""
    out = [
        _insn(_LD_ABS_W, _ARCH),
        _insn(_JEQ, _AUDIT_ARCH_X86_64, jt=1, jf=0),
        _insn(_RET, RET_KILL_PROCESS),  # i386 or another ABI: different numbers
        _insn(_LD_ABS_W, _NR),
        _insn(_JGE, _X32_SYSCALL_BIT, jt=0, jf=1),
        _insn(_RET, RET_KILL_PROCESS),  # x32
    ]
    plain: list[int] = []
    for group in groups:
        for name in group.calls:
            number = syscalls.X86_64[name]
            if group.check is None:
                plain.append(number)
                continue
            body = _checked(name, group.check)
            out += [_insn(_JEQ, number, jt=0, jf=len(body)), *body]
    for number in plain:
        out += [_insn(_JEQ, number, jt=0, jf=1), _insn(_RET, RET_ALLOW)]
    # Everything else: unknown numbers (past the table, or in its gap) are ENOSYS, known
    # ones EPERM.
    out += [_insn(_JGE, syscalls.HIGHEST_KNOWN + 1, jt=0, jf=1), _insn(_RET, RET_ENOSYS),
            _insn(_JGE, _GAP_END, jt=0, jf=1), _insn(_RET, RET_EPERM),
            _insn(_JGE, _FIRST_GAP, jt=0, jf=1), _insn(_RET, RET_ENOSYS),
            _insn(_RET, RET_EPERM)]
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


_PID_MARK = 0x13572468  # placeholders in the template, replaced by the child's own values
_GROUP_MARK = 0x24681357


class Filter:
    """The filter as a template built once (in the worker); `apply` fills in the calling
    process's pid and installs it in one system call."""

    def __init__(self, groups: tuple[Group, ...] = syscalls.RESTRICTED_CHILD) -> None:
        template = program(groups)
        # The program's buffer and header are made here, once: a child only writes its own
        # pid into the marked places (copy-on-write gives it its own copy of the buffer).
        self._buffer = ctypes.create_string_buffer(template, len(template))
        self._fprog = _SockFprog(len(template) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))
        self._pid_at = _offsets(template, struct.pack("=I", _PID_MARK))
        self._group_at = _offsets(template, struct.pack("=I", _GROUP_MARK))

    def apply(self) -> bool:
        pid = os.getpid()
        for places, value in ((self._pid_at, pid), (self._group_at, (-pid) & 0xFFFFFFFF)):
            for offset in places:
                struct.pack_into("=I", self._buffer, offset, value)
        if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return bool(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(self._fprog),
                                0, 0) == 0)


def _offsets(program: bytes, mark: bytes) -> list[int]:
    found, start = [], program.find(mark)
    while start >= 0:
        found.append(start)
        start = program.find(mark, start + 1)
    return found


_libc = linux.libc


def build(groups: tuple[Group, ...] = syscalls.RESTRICTED_CHILD) -> Filter | None:
    """The filter for `groups` (the restricted child's table by default), where this
    module knows the machine's numbers."""
    return Filter(groups) if supported() else None


# The Docker tier's children: their container's profile is the allow list; this filter,
# stacked on it, takes away what the profile leaves to the worker: the namespaces and
# mounts it makes for each run. Numbers: (arch, clone, unshare, setns, mount, umount2).
_NAMESPACE_CALLS = {"x86_64": (0xC000003E, 56, 272, 308, 165, 166),
                    "aarch64": (0xC00000B7, 220, 97, 268, 40, 39)}


def refusing_namespaces(machine: str) -> bytes | None:
    """unshare, setns, mount and umount2 refused, clone refused with any namespace flag;
    the rest allowed. None on a machine this module has no numbers for."""
    numbers = _NAMESPACE_CALLS.get(machine)
    if numbers is None:
        return None
    arch, clone, *refused = numbers
    out = [_insn(_LD_ABS_W, _ARCH), _insn(_JEQ, arch, jt=1, jf=0), _insn(_RET, RET_KILL_PROCESS),
           _insn(_LD_ABS_W, _NR)]
    for number in refused:
        out += [_insn(_JEQ, number, jt=0, jf=1), _insn(_RET, RET_EPERM)]
    out += [_insn(_JEQ, clone, jt=0, jf=3), _insn(_LD_ABS_W, _arg(0)),
            _insn(_JSET, syscalls.CLONE_NAMESPACES, jt=0, jf=1), _insn(_RET, RET_EPERM),
            _insn(_RET, RET_ALLOW)]
    return b"".join(out)


def refuse_namespaces() -> bool:
    """Install `refusing_namespaces` on this process (and what it starts)."""
    program = refusing_namespaces(platform.machine())
    if program is None:
        return False
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    return bool(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) == 0)
