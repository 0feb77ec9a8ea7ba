"""The restricted tier's jail: namespaces and a read-only view, set up once per worker.

A restricted worker puts itself in new user, mount, PID, IPC, network, UTS and cgroup
namespaces before anything else, in the manner of bubblewrap or nsjail, so that a run
that escapes the policy (and disarms the audit hook) still reaches nothing of the host:

- `enter`, in the worker's first process: unshare, have a helper outside write the user
  namespace's id maps, then fork the jail's first process (pid 1 of the new PID
  namespace), which carries on as the worker; the first process stays outside and only
  waits for it. When pid 1 ends, the kernel ends every process of the jail.
- `seal`, in pid 1 once the allowed libraries are imported: a fresh tmpfs becomes the
  root, holding exactly the Python installation and the packages the worker loaded
  (bound read-only at the paths Python knows them by), /dev/null, zero, full, random
  and urandom, a /proc of the new PID namespace (pids only), and an empty, read-only
  /tmp (holding only mount points, for a Python installation under the host's /tmp).
  The host's tree is then detached: `stat` of a host path finds nothing, and no run can
  leave a file for another.

Ids: inside, the worker is root of its namespace and children run as SANDBOX_UID. When
the caller is root, that id is the host's `nobody` (65534) and the worker stays uid 0
(it needs to read the Python installation wherever it is); an ordinary caller maps its
own id (a user namespace it may create unprivileged) and runs children as itself. Each
child then makes a user namespace of its own and drops every capability (privileges.py).

Why our own code rather than a tool such as bubblewrap launching the worker: the jail
must map a root caller's children to an unprivileged host id (bubblewrap maps the sandbox
user to the caller, so a root caller's children would be host root, for whom
RLIMIT_NPROC never binds); the fork-per-run design needs the worker itself inside the
namespaces; and a pip-installed package cannot count on a system tool being there.
Stdlib only (ctypes).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import signal
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass

from . import linux
from .linux import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MNT_DETACH,
    MS_BIND,
    MS_NOATIME,
    MS_NODEV,
    MS_NODIRATIME,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    MS_RELATIME,
    MS_REMOUNT,
    PR_SET_PDEATHSIG,
)

NAMESPACES = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET
              | CLONE_NEWUTS | CLONE_NEWCGROUP)
NAMESPACE_NAMES = ("user", "mnt", "pid", "ipc", "net", "uts", "cgroup")

# Who runs user code, inside the jail's user namespace; and, for a root caller, the host id
# that stands for it (nobody).
SANDBOX_UID = SANDBOX_GID = 1000
HOST_NOBODY = 65534
HOSTNAME = b"sandbox"
NEW_ROOT = "/tmp"  # where the new root is assembled, in the jail's own mount namespace
DEVICES = ("null", "zero", "full", "random", "urandom")
# The jail tier's working directory: a mount point in the jail's root, on which each run
# mounts a tmpfs of its own (see `enter_run`).
RUN_DIR = "/sandbox"

_libc = linux.libc


class JailError(Exception):
    """The jail could not be set up; the message says why and what to do."""


@dataclass(frozen=True)
class Identity:
    """How the caller's ids map into the jail: who the worker and its children are."""

    privileged: bool        # the caller is root: children become host `nobody`
    uid_map: str
    gid_map: str

    @classmethod
    def of_caller(cls) -> Identity:
        uid, gid = os.geteuid(), os.getegid()
        if uid == 0:
            return cls(True, f"0 0 1\n{SANDBOX_UID} {HOST_NOBODY} 1\n",
                       f"0 {gid} 1\n{SANDBOX_GID} {HOST_NOBODY} 1\n")
        return cls(False, f"{SANDBOX_UID} {uid} 1\n", f"{SANDBOX_GID} {gid} 1\n")


def _fail(what: str) -> JailError:
    code = ctypes.get_errno()
    reason = os.strerror(code) if code else "unknown error"
    hint = ""
    if what.startswith("unshare") and code in (errno.EPERM, errno.ENOSPC, errno.EINVAL):
        hint = (" The local backends (jail, restricted) need Linux user namespaces: enable them "
                "(sysctl user.max_user_namespaces=10000; on Debian/Ubuntu also "
                "kernel.unprivileged_userns_clone=1 or the AppArmor userns rule), run "
                "outside a container that forbids them, or use the docker backend "
                "(--backend docker).")
    return JailError(f"{what} failed: {reason}.{hint}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _map_ids(pid: int, identity: Identity) -> None:
    """Written from outside the new user namespace (only a process with privilege in the
    parent namespace may map more than its own id)."""
    if not identity.privileged:
        _write(f"/proc/{pid}/setgroups", "deny")  # required before an unprivileged gid map
    _write(f"/proc/{pid}/uid_map", identity.uid_map)
    _write(f"/proc/{pid}/gid_map", identity.gid_map)


def _unshare_with_ids(identity: Identity, flags: int = NAMESPACES,
                      what: str = "user, mount, pid, ipc, net, uts, cgroup namespaces") -> None:
    """unshare `flags` (a user namespace among them); a helper forked beforehand writes
    the id maps."""
    me = os.getpid()
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    helper = os.fork()
    if helper == 0:  # pragma: no cover - a short-lived helper process
        code = 1
        try:
            os.close(go_w)
            os.close(done_r)
            if os.read(go_r, 1) == b"1":
                _map_ids(me, identity)
                os.write(done_w, b"ok")
                code = 0
        except BaseException as exc:
            with contextlib.suppress(BaseException):
                os.write(done_w, f"writing the id maps failed: {exc}".encode()[:500])
        finally:
            os._exit(code)
    os.close(go_r)
    os.close(done_w)
    failure: JailError | None = None
    if _libc.unshare(flags) != 0:
        failure = _fail(f"unshare({what})")
    os.write(go_w, b"0" if failure else b"1")
    os.close(go_w)
    answer = os.read(done_r, 600)
    os.close(done_r)
    os.waitpid(helper, 0)
    if failure is not None:
        raise failure
    if answer != b"ok":
        raise JailError(answer.decode(errors="replace") or "the id-map helper failed")


def enter_user_namespace(uid: int, gid: int) -> None:
    """A container's worker: a user namespace of its own that maps only the sandbox user
    (`uid`, `gid`) to itself, in which the worker holds the capabilities to give each run
    namespaces and mounts of its own (the container gives it none of those). The worker's
    own ids stay unmapped there: it owns nothing in it but what it makes."""
    _unshare_with_ids(Identity(True, f"{uid} {uid} 1\n", f"{gid} {gid} 1\n"), CLONE_NEWUSER,
                      "user namespace")


def enter() -> None:
    """Put this (single-threaded) process's work into a new jail. Returns in the jail's
    pid 1; the calling process stays outside, waits for it, and exits with its status."""
    if platform.system() != "Linux":
        raise JailError("the restricted backend's jail needs Linux namespaces; use the docker "
                        "backend on other systems")
    _unshare_with_ids(Identity.of_caller())
    try:
        inside = os.fork()
    except OSError as exc:
        raise JailError(f"could not start the jail's first process: {exc}") from None
    if inside == 0:
        # Never outlive the process the host started (and waits for).
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if _libc.sethostname(HOSTNAME, len(HOSTNAME)) != 0:
            raise _fail("sethostname")
        # Nothing mounted from now on propagates back to the host.
        if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            raise _fail("making the mounts private")
        return
    _wait_outside(inside)


def _wait_outside(inside: int) -> None:
    """The host's process: hold nothing of the protocol (pid 1 has the pipes), wait."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.closerange(3, 1 << 16)
    while True:
        try:
            _, status = os.waitpid(inside, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


@dataclass(frozen=True)
class View:
    """What the jail's filesystem shows: `roots` bound read-only at their own paths,
    `masks` (directories inside a root) replaced by an empty directory first."""

    roots: tuple[str, ...]
    masks: tuple[str, ...] = ()

    @classmethod
    def of_python(cls, extra: Iterable[str] = (), *, libraries: bool = False) -> View:
        """The standard library, the top-level package (or module file) of every module
        this process has loaded, time zone data, and `extra`. The standard library's own
        site-packages is masked: packages come only from what was loaded. With
        `libraries`, also the directories of every shared library this process has
        mapped (the system's C and C++ runtimes, which C extensions loaded later need)."""
        stdlib = {os.path.normpath(sysconfig.get_path(key)) for key in ("stdlib", "platstdlib")}
        paths: set[str] = set(stdlib) | {"/usr/share/zoneinfo", "/etc/localtime"}
        paths.update(os.path.normpath(path) for path in extra)
        for name, module in list(sys.modules.items()):
            if "." in name or module is None:
                continue
            locations = list(getattr(module, "__path__", None) or [])
            file = getattr(module, "__file__", None)
            if not locations and isinstance(file, str):
                locations = [file]
            for location in locations:
                if isinstance(location, str) and os.path.isabs(location):
                    paths.add(os.path.normpath(location))
        if libraries:
            paths.update(_library_directories())
        paths = {path for path in paths if os.path.exists(path)}
        masks = {os.path.join(root, sub) for root in stdlib for sub in ("site-packages",
                                                                       "dist-packages")}
        masks = {mask for mask in masks if os.path.isdir(mask) and mask not in paths}
        return cls(tuple(sorted(paths)), tuple(sorted(masks)))

    def readable(self) -> tuple[str, ...]:
        """The roots as Landlock and the audit hook see them."""
        return self.roots


def _library_directories() -> set[str]:
    """The directories of the shared libraries mapped into this process, under the names
    the dynamic loader searches (a merged /usr shows /lib's as /usr/lib's)."""
    found: set[str] = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if path.startswith("/") and ".so" in os.path.basename(path):
                    found.add(os.path.dirname(path))
    except OSError:
        return found
    for directory in list(found):
        for alias in ("/lib", "/lib64", "/usr/lib"):
            for prefix in ("/usr/lib", "/lib"):
                if _inside(directory, prefix) and prefix != alias:
                    candidate = alias + directory[len(prefix):]
                    if os.path.isdir(candidate) and \
                            os.path.realpath(candidate) == os.path.realpath(directory):
                        found.add(candidate)
    return {os.path.normpath(directory) for directory in found}


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _mount(source: bytes | None, target: str, fstype: bytes | None, flags: int,
           data: bytes | None = None) -> None:
    if _libc.mount(source, target.encode(), fstype, flags, data) != 0:
        raise _fail(f"mounting {target}")


def _locked_flags(path: str) -> int:
    """The flags of the mount under `path` that a remount in a user namespace must keep."""
    flags = os.statvfs(path).f_flag
    kept = 0
    for st_flag, ms_flag in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV),
                             (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                             (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)):
        if flags & st_flag:
            kept |= ms_flag
    return kept


def _make_target(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, mode=0o755, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if not os.path.exists(target):
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))


def _bind_read_only(fd: int, target: str, *, with_mounts: bool = False) -> None:
    """Bind what `fd` opened at `target` (`with_mounts`: with the mounts inside it, as
    the masks and package binds inside a root of the jail's view), then make those mounts
    read-only, no setuid, no devices (plus whatever flags the source mount has locked)."""
    source = f"/proc/self/fd/{fd}".encode()
    if with_mounts:
        _mount(source, target, None, MS_BIND | MS_REC)
    else:
        try:
            _mount(source, target, None, MS_BIND)
        except JailError:
            # A directory holding mounts of its own can only be bound with them.
            _mount(source, target, None, MS_BIND | MS_REC)
    # The source's mount is read through its fd: its path may lie under the new root's
    # tmpfs (a Python installation under /tmp) and so be hidden now.
    flags = (MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
             | _locked_flags(f"/proc/self/fd/{fd}"))
    _mount(None, target, None, flags)
    for sub in _mounts_below(target):
        _mount(None, sub, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV
               | _locked_flags(sub))


def _mounts_below(target: str) -> list[str]:
    """The mount points of the mounts inside the one on top at `target` (its descendants
    in the mount tree, by mount id: a path alone would also name mounts that a later one
    covers, as a run's own /tmp covers the jail's)."""
    entries = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as info:
        for line in info:
            fields = line.split()
            if len(fields) > 4:
                point = fields[4].encode().decode("unicode_escape")
                entries.append((fields[0], fields[1], point))
    tops = [mount_id for mount_id, _, point in entries if point == target]
    if not tops:
        return []
    found, inside = [], {tops[-1]}
    for mount_id, parent_id, point in entries:  # parents are listed before their children
        if parent_id in inside and mount_id not in inside and _inside(point, target):
            inside.add(mount_id)
            found.append(point)
    return found


def seal(view: View) -> None:
    """In the jail's pid 1: assemble the view on a fresh tmpfs and make it the root."""
    sources = {}
    for path in view.roots:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)
    devices = {name: os.open(f"/dev/{name}", os.O_PATH | os.O_CLOEXEC) for name in DEVICES
               if os.path.exists(f"/dev/{name}")}
    try:
        _mount(b"tmpfs", NEW_ROOT, b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=0755,size=4m")
        # The jail's own /tmp first, so that roots under the host's /tmp (a virtual
        # environment there) are bound on it rather than hidden by it.
        os.makedirs(NEW_ROOT + "/tmp", mode=0o755, exist_ok=True)
        _mount(b"tmpfs", NEW_ROOT + "/tmp", b"tmpfs", MS_NOSUID | MS_NODEV,
               b"mode=0755,size=16m")
        operations = sorted([(path, "bind") for path in sources]
                            + [(mask, "mask") for mask in view.masks])
        bound: list[str] = []
        masked: list[str] = []
        for path, kind in operations:
            target = NEW_ROOT + path
            # The deepest mount already made above this path decides: a bound root shows
            # it already; a mask (or nothing) needs it made.
            above = max((entry for entry in (*bound, *masked) if _inside(path, entry)),
                        key=len, default=None)
            shown = above is not None and above in bound
            if kind == "mask":
                if shown:
                    # Writable until every mount point in it is made; read-only below.
                    _mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV,
                           b"mode=0755,size=64k")
                    masked.append(path)
                continue
            if shown:
                continue
            is_dir = os.path.isdir(f"/proc/self/fd/{sources[path]}")
            _make_target(target, is_dir)
            _bind_read_only(sources[path], target)
            bound.append(path)
        for mask in masked:
            _mount(None, NEW_ROOT + mask, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        # Runs touch no files: /tmp is read-only too, so that nothing in the view is
        # writable whoever owns it (a worker started by an ordinary user owns /tmp and the
        # mount points in it, and so do its children) and Landlock is depth only.
        _mount(None, NEW_ROOT + "/tmp", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        _make_devices(devices)
        # The jail tier's runs mount their own directory here (an empty, read-only
        # directory for the restricted tier's runs, which get none).
        if any(_inside(path, RUN_DIR) for path in view.roots):
            raise JailError(f"the Python installation or a package lies under {RUN_DIR}, "
                            "where each run's own directory is mounted; install them elsewhere")
        os.makedirs(NEW_ROOT + RUN_DIR, mode=0o755, exist_ok=True)
        os.makedirs(NEW_ROOT + "/proc", mode=0o555, exist_ok=True)
        _mount_proc(NEW_ROOT + "/proc")
        _mount(None, NEW_ROOT, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        _pivot(NEW_ROOT)
    finally:
        for fd in (*sources.values(), *devices.values()):
            os.close(fd)


def _make_devices(devices: dict[str, int]) -> None:
    os.makedirs(NEW_ROOT + "/dev", mode=0o755, exist_ok=True)
    _mount(b"tmpfs", NEW_ROOT + "/dev", b"tmpfs", MS_NOSUID | MS_NOEXEC, b"mode=0755,size=4k")
    for name, fd in devices.items():
        target = f"{NEW_ROOT}/dev/{name}"
        _make_target(target, False)
        _mount(f"/proc/self/fd/{fd}".encode(), target, None, MS_BIND)
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC
               | _locked_flags(f"/dev/{name}"))
    _mount(None, NEW_ROOT + "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)


def _mount_proc(target: str, *, worker_sees_all: bool = True) -> None:
    """A /proc of the calling process's PID namespace, showing process directories only.
    When the caller is root inside (the jail's caller was root), other users' processes
    are invisible; with `worker_sees_all`, not to gid 0 (the worker)."""
    options = [b"subset=pid"]
    if os.getuid() == 0:
        options.insert(0, b"hidepid=invisible,gid=0" if worker_sees_all else b"hidepid=invisible")
    flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
    for count in range(len(options), -1, -1):  # older kernels know fewer options
        data = b",".join(options[:count]) or None
        if _libc.mount(b"proc", target.encode(), b"proc", flags, data) == 0:
            return
    raise _fail("mounting /proc for the jail's PID namespace")


def _pivot(new_root: str) -> None:
    if linux.SYS_PIVOT_ROOT is None:
        raise JailError(f"pivot_root is not known on {platform.machine()}")
    os.chdir(new_root)
    if _libc.syscall(linux.SYS_PIVOT_ROOT, b".", b".") != 0:
        raise _fail("pivot_root")
    # The old root is stacked under the new one: detach it, and the host's tree is gone.
    if _libc.umount2(b".", MNT_DETACH) != 0:
        raise _fail("detaching the host's root")
    os.chdir("/")


@dataclass(frozen=True)
class RunPlan:
    """What each run gets of its own, made by its process (pid 2 of a PID namespace the
    forkserver made for it) before it gives up its privileges: kernel objects of its own
    rather than shared ones cleaned after use, so nothing one run sets (a file, a lock, an
    IPC object, the next pid or inode number, a directory's times) reaches the next.

    - a mount namespace and an IPC namespace of its own;
    - a /proc of its own PID namespace (only the run's processes, its pids from 1);
    - with `writable`: a tmpfs of `disk_mb` MB, whose `work` directory is mounted on
      RUN_DIR (the run's working directory) and whose `tmp` directory on /tmp, both owned
      by the sandbox user; `under_tmp` (the outermost view roots that lie under /tmp) are
      bound again, read-only, with the masks and binds inside them, on the run's /tmp.
      The kernel frees it all when the run's last process ends."""

    writable: bool = False
    under_tmp: tuple[str, ...] = ()
    # A /proc of the run's PID namespace (a container's masked /proc forbids mounting one:
    # its runs read the container's, which shows their processes by the container's pids).
    proc: bool = True
    # /dev/shm (POSIX shared memory, semaphores) on the run's tmpfs too, where there is one.
    shm: bool = False
    owner: tuple[int, int] = (SANDBOX_UID, SANDBOX_GID)

    @classmethod
    def for_view(cls, view: View, *, writable: bool) -> RunPlan:
        # The outermost roots only: each is bound again with what is mounted inside it.
        below = sorted(root for root in view.roots if _inside(root, "/tmp"))
        tops = [root for root in below
                if not any(other != root and _inside(root, other) for other in below)]
        return cls(writable, tuple(tops))

    @classmethod
    def for_container(cls, run_as: tuple[int, int]) -> RunPlan:
        return cls(writable=True, proc=False, shm=True, owner=run_as)


def enter_run(plan: RunPlan, disk_mb: int) -> None:
    """In a run's process, still privileged in the worker's user namespace: `plan`."""
    if _libc.unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0:
        raise _fail("unshare(mount, ipc namespaces) for the run")
    # Nothing mounted from here on propagates anywhere (a container's root may be shared).
    _mount(b"none", "/", None, MS_REC | MS_PRIVATE)
    if plan.proc:
        _mount_proc("/proc", worker_sees_all=False)
    if not plan.writable:
        return
    keep = {root: os.open(root, os.O_PATH | os.O_CLOEXEC) for root in plan.under_tmp}
    try:
        size = max(1, int(disk_mb))
        uid, gid = plan.owner
        # Owned by the run's user from the start (the worker may own nothing where it is:
        # a container's worker is not mapped in its own user namespace). Inodes cost
        # memory beyond the size: their number is bounded too.
        options = (f"mode=0755,uid={uid},gid={gid},size={size * 1024 * 1024},"
                   f"nr_inodes={max(1024, size * 128)}")
        _mount(b"tmpfs", RUN_DIR, b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())
        places = [("work", 0o700, RUN_DIR), ("tmp", 0o1777, "/tmp")]
        if plan.shm:
            places.append(("shm", 0o1777, "/dev/shm"))
        # Made as the run's user (a file system refuses to make inodes for an id it does
        # not map, as a container's worker is in its own user namespace).
        _libc.setfsgid(gid)
        _libc.setfsuid(uid)
        try:
            for name, mode, _ in places:
                os.mkdir(f"{RUN_DIR}/{name}")
                os.chmod(f"{RUN_DIR}/{name}", mode)
        finally:
            _libc.setfsuid(os.geteuid())
            _libc.setfsgid(os.getegid())
        # The run's directory last: it covers the tmpfs's root, through which the others
        # are reached.
        for name, _, target in sorted(places, key=lambda place: place[2] == RUN_DIR):
            _mount(f"{RUN_DIR}/{name}".encode(), target, None, MS_BIND)
        for root, fd in keep.items():
            _make_target(root, os.path.isdir(f"/proc/self/fd/{fd}"))
            _bind_read_only(fd, root, with_mounts=True)
    finally:
        for fd in keep.values():
            os.close(fd)
    os.chdir(RUN_DIR)
