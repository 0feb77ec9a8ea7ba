"""Kernel-enforced confinement of a local tier's child: Landlock, then seccomp.

Two steps in the child: the files (Landlock) as soon as it is forked, before its request
arrives (it needs nothing outside the Python installation and its own directory from
then on); the system calls (seccomp) once its limits are set, since setting them is among
what the filter refuses. Afterwards nothing the child does, however it got its hands on
Python's internals, reaches files outside its view, the network, other processes or the
kernel's state. See landlock.py and seccomp.py for what each covers.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable

from . import landlock, seccomp, syscalls

# Where the Landlock descriptors live: above the numbers a child gives its own pipes.
RULESET_FD_FLOOR = 200


class Confinement:
    """Both layers, built once in the worker (children inherit the Landlock descriptors and
    the filter's template); `apply_files` and `apply_calls`, in a child, are a few system
    calls each.

    `readable` are the view's roots. `run_writable` and `run_readable` are paths of the
    run's own mounts (its directory, its /proc), which exist only in the child's mount
    namespace: with any, each child makes its ruleset from the roots opened here plus
    those paths opened there; without, one ruleset built here serves every child."""

    def __init__(self, readable: Iterable[str],
                 calls: tuple[syscalls.Group, ...] = syscalls.RESTRICTED_CHILD, *,
                 run_writable: Iterable[str] = (), run_readable: Iterable[str] = ()) -> None:
        self.abi = landlock.abi_version()
        self.run_writable = tuple(run_writable)
        self.run_readable = tuple(run_readable)
        self._prepared: landlock.PreparedRules | None = None
        self._ruleset: landlock.Ruleset | None = None
        if self.run_writable or self.run_readable:
            self._prepared = landlock.PreparedRules(readable)
            self._prepared.move_above(RULESET_FD_FLOOR)
        else:
            self._ruleset = landlock.build(readable)
            if self._ruleset is not None and self._ruleset.fd < RULESET_FD_FLOOR:
                high = fcntl.fcntl(self._ruleset.fd, fcntl.F_DUPFD, RULESET_FD_FLOOR)
                os.close(self._ruleset.fd)
                self._ruleset.fd = high
        self._filter = seccomp.build(calls)

    def inherited_fds(self) -> tuple[int, ...]:
        """Descriptors a child must keep open until it applies the confinement."""
        if self._prepared is not None:
            return tuple(self._prepared.fds)
        return (self._ruleset.fd,) if self._ruleset is not None else ()

    def apply_files(self) -> int:
        """Landlock (before the request); its descriptors are closed afterwards. The ABI
        version in force, or 0 when the kernel has none."""
        if self._prepared is not None:
            applied = self._prepared.apply(self.run_writable, self.run_readable)
            return self.abi if applied else 0
        if self._ruleset is None:
            return 0
        applied = self._ruleset.apply()
        os.close(self._ruleset.fd)
        return self.abi if applied else 0

    def apply_calls(self) -> bool:
        """The seccomp filter (once the limits are set)."""
        return self._filter.apply() if self._filter is not None else False

    def apply(self) -> bool:
        # Landlock first: seccomp then forbids nothing the Landlock call still needs.
        files = self.apply_files()
        return self.apply_calls() and bool(files)


def confine(readable: Iterable[str]) -> bool:
    """Confine this process for good. True when both layers are in place."""
    return Confinement(readable).apply()
