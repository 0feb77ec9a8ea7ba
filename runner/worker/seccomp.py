"""A seccomp filter for the restricted tier's child: the system calls Landlock leaves open.

Landlock confines files, TCP and (on new kernels) signals. It does not stop a process
from creating sockets of other kinds (a Unix socket to the Docker daemon, UDP, raw),
starting processes, executing code from memory, or using privileges it has when the
worker runs as root. This filter refuses those calls outright (EPERM), so code holding
the real builtins still cannot: create any socket, create a process (threads are fine),
execute anything, signal or trace anything but itself, leave its process group, change
its own limits, or touch kernel state (mounts, modules, hostname, time, keys, BPF).

Built by hand as classic BPF with ctypes (stdlib only). x86_64 only for now; elsewhere
`build` returns None and the other layers remain.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
_CLONE_THREAD = 0x00010000

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_EPERM = 0x00050000 | 1
_RET_ENOSYS = 0x00050000 | 38

_LD_ABS_W = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_NR, _ARCH = 0, 4


def _arg(index: int, high: bool = False) -> int:
    return 16 + 8 * index + (4 if high else 0)  # little endian: low word first


# x86_64 numbers of calls refused outright.
_DENIED_X86_64 = {
    41: "socket", 53: "socketpair", 57: "fork", 58: "vfork", 59: "execve", 322: "execveat",
    319: "memfd_create", 112: "setsid", 109: "setpgid", 101: "ptrace",
    310: "process_vm_readv", 311: "process_vm_writev", 438: "pidfd_getfd",
    424: "pidfd_send_signal", 272: "unshare", 308: "setns", 165: "mount", 166: "umount2",
    155: "pivot_root", 161: "chroot", 169: "reboot", 170: "sethostname", 171: "setdomainname",
    175: "init_module", 313: "finit_module", 176: "delete_module", 246: "kexec_load",
    320: "kexec_file_load", 321: "bpf", 298: "perf_event_open", 323: "userfaultfd",
    250: "keyctl", 248: "add_key", 249: "request_key", 163: "acct", 167: "swapon",
    168: "swapoff", 164: "settimeofday", 227: "clock_settime", 159: "adjtimex", 172: "iopl",
    173: "ioperm", 105: "setuid", 106: "setgid", 113: "setreuid", 114: "setregid",
    117: "setresuid", 119: "setresgid", 116: "setgroups", 126: "capset", 135: "personality",
    179: "quotactl", 133: "mknod", 259: "mknodat", 303: "name_to_handle_at",
    304: "open_by_handle_at", 300: "fanotify_init", 425: "io_uring_setup",
    426: "io_uring_enter", 427: "io_uring_register", 428: "open_tree", 429: "move_mount",
    430: "fsopen", 431: "fsconfig", 432: "fsmount", 433: "fspick", 442: "mount_setattr",
    160: "setrlimit", 154: "modify_ldt",
    # Calls that reach other processes of the same user (or any, as root): priorities,
    # scheduling, memory placement, comparing their kernel objects, reading the kernel log.
    141: "setpriority", 251: "ioprio_set", 203: "sched_setaffinity", 144: "sched_setscheduler",
    142: "sched_setparam", 314: "sched_setattr", 256: "migrate_pages", 279: "move_pages",
    312: "kcmp", 440: "process_madvise", 448: "process_mrelease", 103: "syslog",
    122: "setfsuid", 123: "setfsgid", 305: "clock_adjtime", 153: "vhangup", 134: "uselib",
    212: "lookup_dcookie", 443: "quotactl_fd", 447: "memfd_secret", 301: "fanotify_mark",
    # System V and POSIX IPC: objects that outlive the run, shared host-wide.
    29: "shmget", 30: "shmat", 31: "shmctl", 67: "shmdt", 64: "semget", 65: "semop",
    66: "semctl", 220: "semtimedop", 68: "msgget", 69: "msgsnd", 70: "msgrcv", 71: "msgctl",
    240: "mq_open", 241: "mq_unlink", 242: "mq_timedsend", 243: "mq_timedreceive",
    244: "mq_notify", 245: "mq_getsetattr",
    # Metadata changes Landlock does not cover (as root they would reach any file).
    90: "chmod", 91: "fchmod", 268: "fchmodat", 452: "fchmodat2", 92: "chown", 93: "fchown",
    94: "lchown", 260: "fchownat", 188: "setxattr", 189: "lsetxattr", 190: "fsetxattr",
    197: "removexattr", 198: "lremovexattr", 199: "fremovexattr", 132: "utime",
    235: "utimes", 261: "futimesat", 280: "utimensat",
}
_CLONE, _CLONE3, _PRLIMIT64 = 56, 435, 302
_KILL_LIKE = (62, 129)  # kill, rt_sigqueueinfo: (pid, ...)
_TGKILL_LIKE = (234, 297, 200)  # tgkill, rt_tgsigqueueinfo (tgid, ...), tkill (tid, ...)


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _program(own_pid: int, negative_group: int) -> bytes:
    out = [
        _insn(_LD_ABS_W, _ARCH),
        _insn(_JEQ, _AUDIT_ARCH_X86_64, jt=1, jf=0),
        _insn(_RET, _RET_KILL_PROCESS),  # i386 or another ABI: different numbers, refuse
        _insn(_LD_ABS_W, _NR),
        _insn(_JGE, _X32_SYSCALL_BIT, jt=0, jf=1),
        _insn(_RET, _RET_KILL_PROCESS),
    ]
    for number in sorted(_DENIED_X86_64):
        out += [_insn(_JEQ, number, jt=0, jf=1), _insn(_RET, _RET_EPERM)]
    # clone3: "not implemented", so the C library falls back to clone, checked below.
    out += [_insn(_JEQ, _CLONE3, jt=0, jf=1), _insn(_RET, _RET_ENOSYS)]
    # clone: threads only.
    out += [_insn(_JEQ, _CLONE, jt=0, jf=4), _insn(_LD_ABS_W, _arg(0)),
            _insn(_JSET, _CLONE_THREAD, jt=0, jf=1), _insn(_RET, _RET_ALLOW),
            _insn(_RET, _RET_EPERM)]
    # prlimit64: reading limits is fine, setting them is not.
    out += [_insn(_JEQ, _PRLIMIT64, jt=0, jf=6), _insn(_LD_ABS_W, _arg(2)),
            _insn(_JEQ, 0, jt=0, jf=3), _insn(_LD_ABS_W, _arg(2, high=True)),
            _insn(_JEQ, 0, jt=0, jf=1), _insn(_RET, _RET_ALLOW), _insn(_RET, _RET_EPERM)]
    # Signals: only to itself (its pid, or its own process group).
    for number in _KILL_LIKE:
        out += [_insn(_JEQ, number, jt=0, jf=6), _insn(_LD_ABS_W, _arg(0)),
                _insn(_JEQ, own_pid, jt=3, jf=0), _insn(_JEQ, 0, jt=2, jf=0),
                _insn(_JEQ, negative_group, jt=1, jf=0), _insn(_RET, _RET_EPERM),
                _insn(_RET, _RET_ALLOW)]
    for number in _TGKILL_LIKE:
        out += [_insn(_JEQ, number, jt=0, jf=4), _insn(_LD_ABS_W, _arg(0)),
                _insn(_JEQ, own_pid, jt=1, jf=0), _insn(_RET, _RET_EPERM),
                _insn(_RET, _RET_ALLOW)]
    # The reload of the number is not needed above: every special block returns. Anything
    # else is allowed.
    out.append(_insn(_RET, _RET_ALLOW))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def supported() -> bool:
    return platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")


_PID_MARK = 0x13572468  # placeholders in the template, replaced by the child's own values
_GROUP_MARK = 0x24681357


class Filter:
    """The filter as a template built once (in the zygote); `apply` fills in the calling
    process's pid and installs it in one system call."""

    def __init__(self) -> None:
        template = _program(_PID_MARK, _GROUP_MARK)
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


_libc = ctypes.CDLL(None, use_errno=True)


def build() -> Filter | None:
    return Filter() if supported() else None
