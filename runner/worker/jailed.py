"""What both local tiers' children do inside the jail, before their request arrives.

The jail (jail.py) is built once per worker; each run's child then, in order:

1. `enter_run` (still privileged in the jail's user namespace, pid 2 of a PID namespace
   the forkserver made for it): a mount and an IPC namespace of its own, a /proc of its
   own PID namespace and, for the jail tier, a size-limited directory of its own
   (jail.RunPlan);
2. gives up every privilege (child.prepare_child, privileges.py);
3. `confine`: the parent-death signal, Landlock (reads below the view, writes below its
   own directory), then the seccomp allow list of its tier (syscalls.py).

The restricted tier adds its policy and audit hook above this (restricted_executor.py);
the jail tier runs real Python on it (jail_executor.py). Both inherit what is built once
in the worker (the Landlock ruleset, the seccomp template) for free. Stdlib only.
"""

from __future__ import annotations

from typing import Any

from . import jail, privileges, syscalls
from .child import ChildConfig, set_parent_death_signal
from .confine import Confinement


class JailedChildren:
    """The jail's per-run steps, shared by the local tiers' executors."""

    tier = ""
    mounts_run_dir = False
    # Everything is in place before the request arrives (so none of it is on the run's
    # clock); the supervisor sets the limits, which a confined child may not set.
    confined_before_request = True

    def __init__(self) -> None:
        self._confinement: Confinement | None = None
        self._plan = jail.RunPlan()
        self.landlock_abi = 0
        self.seccomp = False
        self.unprivileged = False

    def prepare_jail(self, view: jail.View, calls: tuple[syscalls.Group, ...]) -> None:
        """Once the view is sealed, in the worker: what every child inherits."""
        own = self.mounts_run_dir
        self._plan = jail.RunPlan.for_view(view, writable=own)
        if not own:
            self._confinement = Confinement(view.readable(), calls)
            return
        # A run with a directory of its own writes there and in its /tmp, and reads the
        # jail's whole root: it holds exactly the view (and the run's own /proc, which
        # shows only the run's PID namespace), so one rule on it says the same as one per
        # root, at a few system calls per child instead of one per root.
        self._confinement = Confinement(("/",), calls, run_writable=(jail.RUN_DIR, "/tmp"))

    def inherited_fds(self) -> tuple[int, ...]:
        """Descriptors children keep until they confine themselves: the Landlock ruleset."""
        return self._confinement.inherited_fds() if self._confinement is not None else ()

    def enter_run(self, disk_mb: int) -> None:
        jail.enter_run(self._plan, disk_mb)

    def confine(self, config: ChildConfig) -> None:
        """In the child, privileges given up: the parent-death signal, Landlock, seccomp.
        (The worker's own processes never execute requests, so they are never confined.)"""
        set_parent_death_signal(config)
        if self._confinement is None:
            raise RuntimeError("the jail's confinement was not prepared in the worker")
        self.unprivileged = privileges.unprivileged()  # while prctl may still be asked
        self.landlock_abi = self._confinement.apply_files()
        self.before_calls_confined()
        self.seccomp = self._confinement.apply_calls()

    def before_calls_confined(self) -> None:
        """Between Landlock and seccomp: what needs calls the filter refuses."""

    def jail_isolation(self, **layers: Any) -> dict[str, Any]:
        """The layers confining this child (wire.ISOLATION_FIELDS)."""
        namespaces = list(jail.NAMESPACE_NAMES)
        return {"tier": self.tier, "namespaces": namespaces, "unprivileged": self.unprivileged,
                "landlock_abi": self.landlock_abi,
                "seccomp": "allow-list" if self.seccomp else None,
                "per_run": ["pid", "mnt", "ipc"] + (["dir"] if self.mounts_run_dir else []),
                "policy": False, "audit_hook": False, **layers}
