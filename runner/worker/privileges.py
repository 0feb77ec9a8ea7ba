"""A child gives up every privilege before its request arrives, for good.

In order: no capability left in the bounding set, no supplementary group, the sandbox
user's ids (all three of each), then a user namespace of the child's own, in which it
locks the securebits, clears every capability set (effective, permitted, inheritable,
ambient) and sets no_new_privs. Nothing it runs can gain a privilege back: no setuid
program (execve is refused anyway), no capability, no way to change ids.

The child's own user namespace is also what makes RLIMIT_NPROC a per-run limit: the
kernel counts processes per user per user namespace, so the run's threads are counted
alone (not with the worker's next child or another worker's runs), and since the child
is never host root, the limit always binds. Stdlib only (ctypes).
"""

from __future__ import annotations

import ctypes
import os

PR_SET_DUMPABLE = 4
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
CLONE_NEWUSER = 0x10000000
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off) and NO_CAP_AMBIENT_RAISE, each locked.
SECUREBITS_LOCKED = 0b1110_1111
_CAPABILITY_VERSION_3 = 0x20080522


def _last_capability() -> int:
    """The kernel's highest capability number (read once, in the worker)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as last:
            return int(last.read())
    except (OSError, ValueError):
        return 63  # past the kernel's last one, dropping fails harmlessly


LAST_CAPABILITY = _last_capability()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


class PrivilegeError(Exception):
    """A step of giving up privileges failed: the child must not run anything."""


def _prctl(*args: int) -> int:
    return int(_libc.prctl(*args))


def capabilities() -> tuple[int, int, int]:
    """(effective, permitted, inheritable) of this process, as 64-bit masks."""
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise PrivilegeError(f"capget failed: {os.strerror(ctypes.get_errno())}")
    low, high = data[0], data[1]
    return (low.effective | high.effective << 32, low.permitted | high.permitted << 32,
            low.inheritable | high.inheritable << 32)


def _clear_capabilities() -> None:
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero
    if _libc.capset(ctypes.byref(header), data) != 0:
        raise PrivilegeError(f"capset failed: {os.strerror(ctypes.get_errno())}")


def _drop_bounding_set() -> None:
    for cap in range(LAST_CAPABILITY + 1):
        _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)


def switch_user(uid: int, gid: int, *, bounding: bool = True) -> None:
    """Become (uid, gid) for good, with no supplementary group: with the capabilities to
    (root of the worker's namespace, or a container's worker in a user namespace of its
    own, where its own ids are not even mapped), or already that user (then nothing
    changes). `bounding`: empty the bounding set too (needless when a user namespace of
    its own follows, whose sets start full and are emptied there)."""
    if os.getresuid() == (uid, uid, uid) and os.getresgid() == (gid, gid, gid):
        return
    if bounding:
        _drop_bounding_set()
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise PrivilegeError(f"cannot switch to uid {uid}: {exc.strerror} (the worker lacks "
                             "the capabilities to)") from None
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PrivilegeError("the sandbox user could not be set")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_own_user_namespace() -> None:
    """A user namespace for this process alone, mapping only its own ids."""
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(CLONE_NEWUSER) != 0:
        raise PrivilegeError(f"the child's user namespace could not be made: "
                             f"{os.strerror(ctypes.get_errno())}")
    # A process that is not dumpable has /proc files owned by root, which it could not
    # write here: dumpable for these three writes, and not dumpable again right after.
    _prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{gid} {gid} 1\n")
    finally:
        _prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def drop_everything() -> None:
    """Lock the securebits, then clear the bounding, ambient and all three capability
    sets, and set no_new_privs. Checked afterwards: a child that still holds anything
    does not run."""
    if _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED, 0, 0, 0) != 0:
        raise PrivilegeError(f"securebits could not be locked: {os.strerror(ctypes.get_errno())}")
    _drop_bounding_set()
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _clear_capabilities()
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise PrivilegeError("no_new_privs could not be set")
    if any(capabilities()):
        raise PrivilegeError("capabilities remain after dropping them")


def unprivileged() -> bool:
    """No capability in any set, not root, no_new_privs: what `drop_everything` leaves."""
    try:
        effective, permitted, inheritable = capabilities()
    except PrivilegeError:
        return False
    no_new_privs = _prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1
    bounding = any(_prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1
                   for cap in range(LAST_CAPABILITY + 1))
    return (os.getuid() != 0 and not (effective or permitted or inheritable) and no_new_privs
            and not bounding)


def become_unprivileged(run_as: tuple[int, int] | None, *, own_namespace: bool = True) -> None:
    """Everything above, in order. `run_as` None: stay the current user (a worker started
    by an ordinary user runs its children as that user)."""
    if run_as is not None:
        switch_user(*run_as, bounding=not own_namespace)
    if own_namespace:
        enter_own_user_namespace()
    drop_everything()
