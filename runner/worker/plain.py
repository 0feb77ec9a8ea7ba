"""The Docker tier's executor: plain CPython, because the container is the boundary.

The code runs with the real builtins and may import anything installed in the image or
in the mounted package environment. Isolation comes from the container (no network, no
capabilities, read-only root, a non-root user, cgroup limits) and from the child's
rlimits; the worker only keeps runs apart and measures them. Stdlib only.
"""

from __future__ import annotations

import ast
import builtins
import os
import sys
from collections.abc import Iterable
from typing import Any

from . import jail, preload, privileges
from .child import ChildConfig, Reporter
from .execution import run_request

DEFAULT_PRELOAD = ("sympy", "numpy", "mpmath", "matplotlib", "fractions", "decimal", "statistics",
                   "itertools", "functools", "collections", "json", "re", "math", "random",
                   "datetime")


class PlainExecutor:
    name = "plain"

    def __init__(self, preload: Iterable[str] = DEFAULT_PRELOAD,
                 extra_paths: Iterable[str] = (), run_as: tuple[int, int] | None = None,
                 per_run: bool = False) -> None:
        self.preload_names = tuple(preload)
        self.run_as = run_as
        # Each run in PID, mount and IPC namespaces of its own, with its own directory
        # (jail.RunPlan.for_container), where the container allows it.
        self.mounts_run_dir = per_run
        self.own_user_namespaces = False
        for path in extra_paths:
            if path not in sys.path:
                sys.path.insert(0, path)

    def preload(self) -> list[str]:
        """Import the usual libraries once, so each run's child finds them warm."""
        self.own_user_namespaces = _user_namespaces_work(self.run_as)
        return preload.load(self.preload_names)

    confined_before_request = False  # the container is the boundary; limits set in the child
    uses_files = True  # each run gets a fresh working directory

    def enter_run(self, disk_mb: int) -> None:
        """Kernel objects of the run's own, where the container allows them; else nothing
        (the clean-up after the run clears what it left)."""
        if self.mounts_run_dir and self.run_as is not None:
            jail.enter_run(jail.RunPlan.for_container(self.run_as), disk_mb)

    def before_request(self, reporter: Reporter, config: ChildConfig) -> None:
        """Nothing to do ahead: the container is the boundary."""

    def isolation(self) -> dict[str, Any]:
        """The container is the boundary (asked before the child becomes the sandbox user,
        which it does when its request arrives)."""
        return {"tier": "docker", "container": True, "seccomp": "allow-list", "policy": False,
                "audit_hook": False, "unprivileged": True,
                "namespaces": ["user"] if self.own_user_namespaces else [],
                "per_run": ["pid", "mnt", "ipc", "dir"] if self.mounts_run_dir else []}

    def new_namespace(self) -> dict[str, Any]:
        return {"__name__": "__main__", "__builtins__": builtins}

    def _compile(self, tree: ast.Module, filename: str, context: dict[str, Any]) -> Any:
        return compile(tree, filename, "exec")

    def execute(self, request: dict[str, Any], namespace: dict[str, Any], reporter: Reporter
                ) -> dict[str, Any]:
        return run_request(request, compile_source=self._compile, namespace=namespace,
                           refusal=_NeverRaised)


def _user_namespaces_work(run_as: tuple[int, int] | None) -> bool:
    """Whether a child can make a user namespace of its own here (the engine's kernel and
    the container's profile allow it): asked once, by a process that does only that, as
    the sandbox user."""
    pid = os.fork()
    if pid == 0:
        try:
            if run_as is not None:
                privileges.switch_user(*run_as)
            privileges.enter_own_user_namespace()
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


class _NeverRaised(Exception):
    """The plain executor refuses nothing at run time."""
