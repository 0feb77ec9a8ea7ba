"""The Docker tier's own seccomp profile: an allow list, whatever the engine's version ships.

Docker's default profile differs between engine versions (older ones allow io_uring, for
example), so sandbox containers get this profile instead, built from the table below:
what a Python program, its subprocesses and the worker need, grouped with a reason per
group. Everything else is refused: the calls Docker's current default refuses (mounts,
namespaces other than the worker's per-run user namespace, kernel modules, keyrings,
BPF, perf, clocks, reboot, ...; the worker's own namespaces and mounts for each run are
allowed here and refused to runs by the filter each run's child stacks on this one,
`worker.seccomp.refuse_namespaces`), and what no run needs (io_uring, tracing and reading
other processes, page-cache probes, the new mount API, socket families beyond local,
IP and netlink). Unknown calls are refused too (runc answers ENOSYS for calls newer than
the profile, so a C library falls back).

The restricted tier's child filter (runner/worker/syscalls.py) is far narrower: there the
kernel layer alone must hold, with no container around it.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from typing import Any

from ..worker.syscalls import X86_64

EPERM = 1
ENOSYS = 38
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID = 0x20000, 0x08000000, 0x10000000, 0x20000000
CLONE_NAMESPACES = 0x7E020000  # every CLONE_NEW* flag that clone(2) can carry
# socket(2) families a run may use: local, IPv4, IPv6 (loopback only: no network), and
# netlink (what the C library asks about the container's own interfaces).
SOCKET_FAMILIES = (1, 2, 10, 16)
# personality(2): the values Docker's default allows (Linux, UNAME26, and the query).
PERSONALITIES = (0x0, 0x0008, 0x20000, 0x20008, 0xFFFFFFFF)


@dataclass(frozen=True)
class Allowed:
    reason: str
    calls: tuple[str, ...]


ALLOWED: tuple[Allowed, ...] = (
    Allowed("files inside the container (its read-only image, its tmpfs /tmp, the read-only "
            "package environment)",
            ("read", "write", "open", "openat", "openat2", "close", "close_range", "creat",
             "lseek", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev",
             "preadv2", "pwritev2", "stat", "fstat", "lstat", "newfstatat", "statx", "statfs",
             "fstatfs", "access", "faccessat", "faccessat2", "getdents", "getdents64",
             "readlink", "readlinkat", "getcwd", "chdir", "fchdir", "mkdir", "mkdirat", "rmdir",
             "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat",
             "symlink", "symlinkat", "truncate", "ftruncate", "fallocate", "fadvise64",
             "readahead", "fsync", "fdatasync", "sync", "syncfs", "sync_file_range", "flock",
             "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown",
             "fchownat", "umask", "utime", "utimes", "utimensat", "futimesat", "sendfile",
             "copy_file_range", "splice", "tee", "vmsplice", "mknod", "mknodat", "getxattr",
             "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr",
             "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
             "getxattrat", "setxattrat", "listxattrat", "removexattrat", "inotify_init",
             "inotify_init1", "inotify_add_watch", "inotify_rm_watch")),
    Allowed("descriptors, pipes, polling and events",
            ("dup", "dup2", "dup3", "fcntl", "ioctl", "pipe", "pipe2", "poll", "ppoll",
             "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait",
             "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "signalfd", "signalfd4",
             "timerfd_create", "timerfd_settime", "timerfd_gettime", "memfd_create")),
    Allowed("memory of its own processes",
            ("brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mincore", "msync",
             "mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier",
             "pkey_mprotect", "pkey_alloc", "pkey_free", "mbind", "set_mempolicy",
             "get_mempolicy", "set_mempolicy_home_node", "remap_file_pages",
             "map_shadow_stack", "mseal")),
    Allowed("processes and threads (bounded per run by RLIMIT_NPROC in the run's own user "
            "namespace, and by the container's pids limit); running programs",
            ("fork", "vfork", "execve", "execveat", "wait4", "waitid", "exit", "exit_group",
             "set_tid_address", "set_robust_list", "get_robust_list", "rseq", "futex",
             "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "gettid",
             "arch_prctl", "set_thread_area", "get_thread_area", "sched_yield",
             "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
             "sched_getscheduler", "sched_setscheduler", "sched_getattr", "sched_setattr",
             "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
             "getpriority", "setpriority", "ioprio_get", "prctl", "seccomp",
             "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
             "pidfd_open", "pidfd_send_signal", "getcpu", "restart_syscall")),
    Allowed("signals and timers",
            ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
             "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend",
             "sigaltstack", "kill", "tkill", "tgkill", "pause", "alarm", "getitimer",
             "setitimer", "timer_create", "timer_settime", "timer_gettime", "timer_getoverrun",
             "timer_delete", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
             "gettimeofday", "time")),
    Allowed("ids and limits: the worker switches each run to the sandbox user and lowers its "
            "limits; a run reads its own",
            ("getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
             "getresgid", "getgroups", "setuid", "setgid", "setreuid", "setregid", "setresuid",
             "setresgid", "setgroups", "setfsuid", "setfsgid", "capget", "capset", "getpgrp",
             "getpgid", "setpgid", "getsid", "setsid", "getrlimit", "setrlimit", "prlimit64",
             "getrusage", "times", "sysinfo", "uname", "getrandom")),
    Allowed("local sockets (the container has no network: only loopback)",
            ("connect", "accept", "accept4", "bind", "listen", "sendto", "recvfrom", "sendmsg",
             "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "getsockname", "getpeername",
             "socketpair", "setsockopt", "getsockopt")),
    Allowed("the worker's own work for each run, refused to runs by the filter their "
            "process stacks on this one: entering a run's PID namespace, and mounting its "
            "directory (a tmpfs) in the run's own mount namespace",
            ("setns", "mount", "umount2")),
    Allowed("System V and POSIX IPC inside the run's own IPC namespace (or the container's, "
            "cleared after every run)",
            ("shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
             "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
             "mq_timedreceive", "mq_notify", "mq_getsetattr")),
)


def _rule(names: tuple[str, ...] | list[str], action: str, **extra: Any) -> dict[str, Any]:
    return {"names": sorted(names), "action": action, **extra}


def _args(index: int, op: str, value: int, value_two: int = 0) -> dict[str, Any]:
    return {"index": index, "value": value, "valueTwo": value_two, "op": op}


def profile() -> dict[str, Any]:
    """The profile as the engine takes it (SecurityOpt "seccomp=<this, as JSON>")."""
    allowed = sorted({name for group in ALLOWED for name in group.calls})
    unknown = [name for name in allowed if name not in X86_64]
    if unknown:
        raise ValueError(f"unknown system calls in the Docker profile: {unknown}")
    rules = [_rule(allowed, "SCMP_ACT_ALLOW")]
    # socket: the families above only.
    rules += [_rule(["socket"], "SCMP_ACT_ALLOW", args=[_args(0, "SCMP_CMP_EQ", family)])
              for family in SOCKET_FAMILIES]
    rules += [_rule(["personality"], "SCMP_ACT_ALLOW", args=[_args(0, "SCMP_CMP_EQ", value)])
              for value in PERSONALITIES]
    # clone: no namespace flags (threads and processes), or a new PID namespace alone (the
    # holder of a run's PID namespace, made by the worker); clone3 keeps its flags in
    # memory, where no filter can read them: ENOSYS, so the C library uses clone.
    for flags in (0, CLONE_NEWPID):
        rules.append(_rule(["clone"], "SCMP_ACT_ALLOW",
                           args=[_args(0, "SCMP_CMP_MASKED_EQ", CLONE_NAMESPACES, flags)]))
    rules.append(_rule(["clone3"], "SCMP_ACT_ERRNO", errnoRet=ENOSYS))
    # unshare: a user namespace (the worker's own, and each run's, made before its code
    # starts, so RLIMIT_NPROC counts the run alone), and a run's mount and IPC namespaces;
    # the run's own filter then refuses it.
    for flags in (CLONE_NEWUSER, CLONE_NEWNS | CLONE_NEWIPC):
        rules.append(_rule(["unshare"], "SCMP_ACT_ALLOW", args=[_args(0, "SCMP_CMP_EQ", flags)]))
    # The native ABI only: i386 (int 0x80) and x32 calls are refused as a foreign ABI.
    native = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}.get(
        platform.machine(), "SCMP_ARCH_X86_64")
    return {"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": EPERM,
            "architectures": [native], "syscalls": rules}


def security_option() -> str:
    return "seccomp=" + json.dumps(profile(), separators=(",", ":"))


def refused_names() -> list[str]:
    """Every known x86_64 call the profile does not allow outright (for the docs and the
    census test); socket, personality, clone and unshare are allowed with arguments."""
    allowed = {name for group in ALLOWED for name in group.calls}
    conditional = {"socket", "personality", "clone", "unshare"}
    return sorted(name for name in X86_64 if name not in allowed and name not in conditional)
