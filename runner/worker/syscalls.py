"""The system calls a restricted child may make: one table, with a reason per group.

The restricted tier's seccomp filter (seccomp.py) is built from this table and nothing
else: a call is allowed only if a row below names it, so a system call Linux adds later
is refused by construction (ENOSYS for numbers this table does not know, EPERM for the
known ones it does not allow). The list was built from what children actually call
(the test suite and `runner demo` traced with strace), and each row says why a child
needs it and why it reaches nothing beyond the child. The README's security section
shows the same table (`runner.worker.syscalls.markdown_table`).

Stdlib only: the worker program imports it inside the sandbox images too.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import linux

# x86_64 numbers, in order from 0 and from 424 (the generic table's new calls); 335 and
# 336 are uretprobe and uprobe. Every name here is a call this project knows about; 470
# and beyond are not.
_FROM_0 = """
read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction
rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select
sched_yield mremap msync mincore madvise shmget shmat shmctl dup dup2 pause nanosleep
getitimer alarm setitimer getpid sendfile socket connect accept sendto recvfrom sendmsg
recvmsg shutdown bind listen getsockname getpeername socketpair setsockopt getsockopt clone
fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv
msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename
mkdir rmdir creat link unlink symlink readlink chmod fchmod chown fchown lchown umask
gettimeofday getrlimit getrusage sysinfo times ptrace getuid syslog getgid setuid setgid
geteuid getegid setpgid getppid getpgrp setsid setreuid setregid getgroups setgroups
setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid capget capset
rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib
personality ustat statfs fstatfs sysfs getpriority setpriority sched_setparam
sched_getparam sched_setscheduler sched_getscheduler sched_get_priority_max
sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall vhangup
modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot sync acct
settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname iopl ioperm
create_module init_module delete_module get_kernel_syms query_module quotactl nfsservctl
getpmsg putpmsg afs_syscall tuxcall security gettid readahead setxattr lsetxattr fsetxattr
getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr
fremovexattr tkill time futex sched_setaffinity sched_getaffinity set_thread_area io_setup
io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie epoll_create
epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall
semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete
clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl
tgkill utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend
mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl
ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages openat
mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat
fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list splice tee
sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd timerfd_create eventfd
fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 epoll_create1 dup3
pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init
fanotify_mark prlimit64 name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg
setns getcpu process_vm_readv process_vm_writev kcmp finit_module sched_setattr
sched_getattr renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat
userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc
pkey_free statx io_pgetevents rseq uretprobe uprobe
"""
_FROM_424 = """
pidfd_send_signal io_uring_setup io_uring_enter io_uring_register open_tree move_mount
fsopen fsconfig fsmount fspick pidfd_open clone3 close_range openat2 pidfd_getfd
faccessat2 process_madvise epoll_pwait2 mount_setattr quotactl_fd landlock_create_ruleset
landlock_add_rule landlock_restrict_self memfd_secret process_mrelease futex_waitv
set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack futex_wake futex_wait
futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr lsm_list_modules
mseal setxattrat getxattrat listxattrat removexattrat open_tree_attr file_getattr
file_setattr
"""

X86_64: dict[str, int] = {
    **{name: number for number, name in enumerate(_FROM_0.split())},
    **{name: number for number, name in enumerate(_FROM_424.split(), start=424)},
}
X86_64_NAMES: dict[int, str] = {number: name for name, number in X86_64.items()}
# The gap between the two ranges holds no x86_64 call; past the end nothing is known.
HIGHEST_KNOWN = max(X86_64.values())

# Argument checks the filter applies to some allowed calls (seccomp.py implements each).
SELF_ONLY = "self-only"          # kill/tgkill/tkill: the target is the caller itself
OWN_PID = "own-pid"              # getpgid/getsid/sched_getaffinity: pid 0 or its own
PRIVATE_FUTEX = "private-futex"  # futex: FUTEX_PRIVATE_FLAG set (never keyed by a file)
THREADS_ONLY = "threads-only"    # clone: CLONE_THREAD, no namespace flags
READ_LIMITS = "read-limits"      # prlimit64: its own limits, reading only
TERMINAL_QUERY = "terminal-query"  # ioctl: TCGETS, FIOCLEX, FIONCLEX only
DESCRIPTOR_FLAGS = "descriptor-flags"  # fcntl: F_DUPFD(_CLOEXEC), F_GETFD/SETFD, F_GETFL/SETFL
DESCRIPTORS_AND_LOCKS = "descriptors-and-locks"  # fcntl: the above; locks accepted, not taken
NOT_TAKEN = "not-taken"          # flock: answered with success, and nothing done
LOCAL_PAIR = "local-pair"        # socketpair: AF_UNIX only
DESCRIPTOR_IOCTLS = "descriptor-ioctls"  # ioctl: the terminal query, and non-blocking mode
NOT_IMPLEMENTED = "enosys"       # refused with ENOSYS, so the C library falls back


@dataclass(frozen=True)
class Group:
    """Calls allowed together, for one reason; `check` narrows their arguments."""

    reason: str
    calls: tuple[str, ...]
    check: str | None = None


RESTRICTED_CHILD: tuple[Group, ...] = (
    Group("reads and writes descriptors it already holds: its stdout, stderr and result "
          "pipes, and files it opened from the read-only view",
          ("read", "write", "readv", "writev", "pread64", "lseek", "close", "fstat", "dup",
           "dup3")),
    Group("descriptor flags (blocking, close-on-exec) and duplicates; never an owner for "
          "signals (F_SETOWN, F_SETSIG), which would let I/O signal another process",
          ("fcntl",), DESCRIPTOR_FLAGS),
    Group("finds and reads Python modules in its view, which holds only the Python "
          "installation and the allowed packages, mounted read-only (no host path exists "
          "there to be seen)",
          ("openat", "open", "newfstatat", "stat", "lstat", "statx", "getdents64",
           "readlink", "readlinkat", "access", "faccessat", "faccessat2", "getcwd")),
    Group("manages its own memory (the interpreter's allocator); bounded by RLIMIT_AS",
          ("brk", "mmap", "munmap", "mprotect", "mremap", "madvise")),
    Group("threads of its own process (no new process: clone needs CLONE_THREAD and no "
          "namespace flag); bounded by RLIMIT_NPROC in the child's own user namespace",
          ("clone",), THREADS_ONLY),
    Group("clone3 cannot be checked by a filter (its flags are in memory): ENOSYS makes "
          "the C library use clone, which is checked", ("clone3",), NOT_IMPLEMENTED),
    Group("what threads need: thread ids, restartable sequences, exit",
          ("set_robust_list", "set_tid_address", "rseq", "gettid", "sched_yield", "exit",
           "exit_group")),
    Group("locks between its own threads: private futexes only (a shared futex is keyed by a "
          "file's page, which every worker's jail maps alike: a channel between runs)",
          ("futex",), PRIVATE_FUTEX),
    Group("signal handling inside the process",
          ("rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
           "restart_syscall")),
    Group("signals to itself only (the child stops itself when its report is written)",
          ("kill", "tgkill", "tkill"), SELF_ONLY),
    Group("clocks and sleeping", ("clock_gettime", "clock_getres", "gettimeofday", "time",
                                  "nanosleep", "clock_nanosleep")),
    Group("waiting on its own descriptors", ("poll", "ppoll", "select", "pselect6")),
    Group("pipes inside the process (both ends are its own; no other process exists)",
          ("pipe", "pipe2")),
    Group("who it is: its own ids (an unprivileged user of its own user namespace), its "
          "capability sets (empty; the kernel lets any process read those of the processes "
          "it can see, here only the jail's own) and the jail's host name",
          ("getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getresuid",
           "getresgid", "getgroups", "getpgrp", "capget", "uname")),
    Group("its own process group, session and CPU set (pid 0 or its own pid only)",
          ("getpgid", "getsid", "sched_getaffinity"), OWN_PID),
    Group("its own resource usage", ("getrusage", "times")),
    Group("its own limits, read only (setting them is refused)", ("prlimit64",),
          READ_LIMITS),
    Group("whether its standard streams are terminals, and close-on-exec flags",
          ("ioctl",), TERMINAL_QUERY),
    Group("random numbers from the kernel (seeding random, hash randomisation)",
          ("getrandom",)),
)

# The jail tier's children run real Python with a writable directory of their own: what
# the restricted child may do, and what programs that write files, keep timers and run
# event loops need besides. Every one of these acts on the child's own process, its own
# descriptors or its own directory (a tmpfs of its own mount namespace: the rest of the
# view stays mounted read-only); none reaches another process or the kernel's shared
# state.
_JAIL_FCNTL = Group("descriptor flags and duplicates; record locks (sqlite takes them) are "
                    "answered with success and not taken: one process has no one to lock "
                    "against, and a real lock on a file of the view, the same inode in every "
                    "run, would be a channel between runs (F_GETLK asks the kernel, and no "
                    "run holds a lock); never an owner for signals (F_SETOWN, F_SETSIG), "
                    "which would let I/O signal another process",
                    ("fcntl",), DESCRIPTORS_AND_LOCKS)
_JAIL_EXTRA: tuple[Group, ...] = (
    Group("writes, makes, renames and removes files: only its own directory and /tmp (a "
          "tmpfs of the run's own mount namespace, gone with the run) are writable; the "
          "rest of the view is mounted read-only",
          ("pwrite64", "pwritev", "pwritev2", "preadv", "preadv2", "ftruncate", "truncate",
           "fsync", "fdatasync", "fallocate", "fadvise64", "mkdir", "mkdirat", "rmdir",
           "unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat",
           "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "utime",
           "utimes", "utimensat", "futimesat", "chdir", "fchdir", "umask", "statfs",
           "fstatfs", "sendfile", "copy_file_range", "msync", "mincore")),
    Group("whole-file locks, answered with success and not taken (as fcntl's record locks)",
          ("flock",), NOT_TAKEN),
    Group("timers and signal waits of its own process (an alarm a program sets on itself)",
          ("alarm", "setitimer", "getitimer", "timer_create", "timer_settime",
           "timer_gettime", "timer_getoverrun", "timer_delete", "timerfd_create",
           "timerfd_settime", "timerfd_gettime", "rt_sigpending", "rt_sigtimedwait",
           "rt_sigsuspend", "pause", "signalfd4")),
    Group("event loops over its own descriptors (asyncio, selectors)",
          ("epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
           "epoll_pwait2", "eventfd", "eventfd2")),
    Group("a connected pair of local sockets inside the process (asyncio's wake-up channel): "
          "no socket can be made, named, bound or connected otherwise, and the jail has no "
          "network", ("socketpair",), LOCAL_PAIR),
    Group("messages on the descriptors it holds (only such pairs exist)",
          ("sendto", "recvfrom", "sendmsg", "recvmsg", "shutdown", "getsockopt",
           "setsockopt", "getsockname", "getpeername")),
    Group("its own scheduling parameters and CPU, read only",
          ("sched_getparam", "sched_getscheduler", "sched_get_priority_max",
           "sched_get_priority_min", "getpriority", "getcpu")),
)
_JAIL_IOCTL = Group("whether its standard streams are terminals, close-on-exec flags, "
                    "non-blocking mode and the bytes waiting on its own descriptors (event "
                    "loops set sockets non-blocking this way)", ("ioctl",), DESCRIPTOR_IOCTLS)
_JAIL_REPLACES = {DESCRIPTOR_FLAGS: _JAIL_FCNTL, TERMINAL_QUERY: _JAIL_IOCTL}
JAIL_CHILD: tuple[Group, ...] = (*(_JAIL_REPLACES.get(group.check or "", group)
                                   for group in RESTRICTED_CHILD), *_JAIL_EXTRA)
# What the jail table changes from the restricted one: two rows replaced, the rest added
# (the README shows these below the restricted table).
JAIL_CHANGES: tuple[Group, ...] = (*_JAIL_REPLACES.values(), *_JAIL_EXTRA)

# Calls the kernel itself exempts from seccomp: only its uprobe trampolines may make them,
# and from anywhere else they fail or kill the caller (Linux 6.11 and later). No filter can
# refuse them; they reach nothing.
KERNEL_EXEMPT = ("uretprobe", "uprobe")
FUTEX_PRIVATE_FLAG = 128

# ioctl requests the TERMINAL_QUERY check lets through; DESCRIPTOR_IOCTLS adds the last two.
TCGETS, FIONCLEX, FIOCLEX = 0x5401, 0x5450, 0x5451
FIONBIO, FIONREAD = 0x5421, 0x541B
# fcntl commands the DESCRIPTOR_FLAGS check lets through.
F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_DUPFD_CLOEXEC = 0, 1, 2, 3, 4, 1030
# ... and the record locks DESCRIPTORS_AND_LOCKS adds (classic and open-file-description).
F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 5, 6, 7, 36, 37, 38
AF_UNIX = 1
# clone flags: CLONE_THREAD, and every namespace flag (refused with it).
CLONE_THREAD, CLONE_NAMESPACES = linux.CLONE_THREAD, linux.CLONE_NAMESPACES


def allowed_numbers(groups: tuple[Group, ...] = RESTRICTED_CHILD) -> dict[int, Group]:
    """Every allowed call's number, with the group that allows it."""
    table: dict[int, Group] = {}
    for group in groups:
        for name in group.calls:
            if name not in X86_64:
                raise ValueError(f"unknown system call {name!r} in the allow list")
            table[X86_64[name]] = group
    return table


def markdown_table(groups: tuple[Group, ...] = RESTRICTED_CHILD) -> str:
    """The allow list as a Markdown table (the README's security section shows it)."""
    rows = ["| system calls | why a child may make them | argument check |",
            "| --- | --- | --- |"]
    for group in groups:
        calls = ", ".join(f"`{name}`" for name in group.calls)
        rows.append(f"| {calls} | {group.reason} | {group.check or '-'} |")
    return "\n".join(rows)
