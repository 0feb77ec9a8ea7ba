"""The jail tier's executor: real CPython, the real builtins, inside the jail.

The local tiers' promises rest on the jail (jail.py, jailed.py): namespaces, a read-only
view of the Python installation and the packages, an unprivileged user, Landlock and a
seccomp allow list, limits set from outside. This tier runs model-written code on that
alone, as the Docker tier runs it in a container: any module of the view imports
(C extensions included), each run has a writable directory of its own (its working
directory, and /tmp: a size-limited tmpfs that goes with the run), and calls cost what
they cost in CPython. The restricted tier is this plus a policy above it.

The worker imports the preloaded packages once (numpy, sympy, matplotlib with the backend
that saves `plt.show()`'s figures: preload.py), so every forked child finds them warm.
Stdlib only, apart from what it preloads.
"""

from __future__ import annotations

import ast
import builtins
import errno
import os
import sys
from collections.abc import Iterable
from typing import Any

from . import jail, preload, syscalls
from .child import ChildConfig, Reporter
from .execution import run_request
from .jailed import JailedChildren

# Imported in every jail worker when present (the package set's own packages come first).
DEFAULT_PRELOAD = ("numpy", "sympy", "mpmath", "matplotlib", "fractions", "decimal",
                   "statistics", "itertools", "functools", "collections", "json", "re", "math",
                   "random", "datetime", "csv", "io", "pathlib", "tempfile", "sqlite3")

# What a run's process sees in its environment: its own directory as home, its own /tmp,
# a headless plotting backend (plt.show() saves PNGs) whose cache lives in the run's /tmp.
RUN_ENVIRONMENT = {"HOME": jail.RUN_DIR, "TMPDIR": "/tmp", "MPLBACKEND": preload.FIGURES_BACKEND,
                   "MPLCONFIGDIR": "/tmp/.matplotlib", "USER": "sandbox", "LOGNAME": "sandbox"}


class JailExecutor(JailedChildren):
    name = tier = "jail"
    uses_files = True  # each run's directory is its working directory
    mounts_run_dir = True

    def __init__(self, preload: Iterable[str] = DEFAULT_PRELOAD,
                 extra_paths: Iterable[str] = ()) -> None:
        super().__init__()
        self.preload_names = tuple(dict.fromkeys(preload))
        # A package set's environments: first on a run's sys.path, never on the worker's
        # (their code runs only in children, once every privilege is gone).
        self.extra_paths = tuple(extra_paths)

    def preload(self) -> list[str]:
        """Import the preloaded packages once, in the worker, before the view is sealed
        (the host's tree is still there to import from), and warm them up."""
        return preload.load(self.preload_names)

    def prepare_children(self, view: jail.View) -> None:
        """Once the view is sealed: the Landlock ruleset (reads below the view, writes below
        the run's directory and /tmp) and the seccomp template, built once here."""
        self.prepare_jail(view, syscalls.JAIL_CHILD)

    def before_request(self, reporter: Reporter, config: ChildConfig) -> None:
        """In the child, before its request: its environment, the jail's confinement, and
        one trivial run (its first writes to the worker's pages copy them now, off the
        run's clock)."""
        os.environ.update(RUN_ENVIRONMENT)
        self.confine(config)
        sys.path[:0] = [path for path in self.extra_paths if path not in sys.path]
        run_request({"code": "pass", "filename": "<warm-up>"}, compile_source=_compile,
                    namespace=self.new_namespace(), refusal=_NeverRaised)

    def isolation(self) -> dict[str, Any]:
        return self.jail_isolation()

    def new_namespace(self) -> dict[str, Any]:
        return {"__name__": "__main__", "__builtins__": builtins}

    def execute(self, request: dict[str, Any], namespace: dict[str, Any],
                reporter: Reporter) -> dict[str, Any]:
        return run_request(request, compile_source=_compile, namespace=namespace,
                           refusal=_NeverRaised, explain=explain)


def explain(exc: BaseException, request: dict[str, Any]) -> str | None:
    """What the jail did when the code's exception comes from it, and what to do: the
    model reads this in its next turn, so it says what the code can change."""
    limits = request.get("limits") or {}
    if isinstance(exc, ModuleNotFoundError) and exc.name and "." not in exc.name:
        return (f"{exc.name!r} is not installed in this sandbox's package set; whoever runs "
                f"the sandbox can add it: packages=[...] (runner exec --package NAME)")
    if not isinstance(exc, OSError):
        return None
    if exc.errno == errno.ENOSPC:
        return (f"the run's directory and /tmp hold at most {limits.get('disk_mb')} MB in all "
                "(Limits(disk_mb=...), --disk)")
    if exc.errno == errno.EFBIG:
        return (f"a file may hold at most {limits.get('max_file_size_mb')} MB "
                "(Limits(max_file_size_mb=...))")
    if exc.errno == errno.EROFS or (exc.errno == errno.EACCES and exc.filename is not None):
        return (f"only the working directory ({jail.RUN_DIR}) and /tmp are writable here; "
                "everything else is the read-only Python installation")
    if exc.errno == errno.EPERM:
        return ("the sandbox runs no other program, opens no network connection and changes "
                "no system setting; compute in Python, in this process")
    return None


def _compile(tree: ast.Module, filename: str, context: dict[str, Any]) -> Any:
    return compile(tree, filename, "exec")


class _NeverRaised(Exception):
    """Nothing is refused at run time by this executor: the kernel refuses what it must."""
