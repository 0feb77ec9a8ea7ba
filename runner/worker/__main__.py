"""Entry point of the worker program.

On the host (jail tier):         python -m runner.worker --executor jail [--path ENV] [--preload ...]
On the host (restricted tier):   python -m runner.worker --executor restricted
In a container (Docker tier):    python3 -m worker --executor plain --container --run-as 10001:10001
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn

from . import jail, linux
from .child import ChildConfig, Executor
from .supervisor import serve


def _user(text: str) -> tuple[int, int]:
    uid, _, gid = text.partition(":")
    return int(uid), int(gid or uid)


def main() -> None:
    parser = argparse.ArgumentParser(prog="runner-worker")
    parser.add_argument("--executor", choices=["jail", "restricted", "plain"], default="jail")
    parser.add_argument("--allow", default="", help="restricted: comma-separated allowed modules")
    parser.add_argument("--layers", choices=["full", "hook", "kernel"], default="full",
                        help="restricted: 'full' (policy, audit hook, kernel confinement); "
                             "for isolation tests only, 'hook' or 'kernel' run user code "
                             "with the real builtins under fewer layers")
    parser.add_argument("--preload", default=None,
                        help="plain, jail: comma-separated modules to import")
    parser.add_argument("--path", action="append", default=[],
                        help="plain, jail: a directory of installed packages to put on sys.path "
                             "(jail: also bound read-only into the jail)")
    parser.add_argument("--bind", action="append", default=[],
                        help="jail: a file or directory of the host's packages to bind "
                             "read-only into the jail")
    parser.add_argument("--container", action="store_true",
                        help="the worker owns its container: after each run, clear everything "
                             "the sandbox user left (processes, files, IPC)")
    parser.add_argument("--run-as", type=_user, default=None, metavar="UID:GID",
                        help="children switch to this user before reading a request (the "
                             "worker must be root)")
    args = parser.parse_args()
    ready: dict[str, object]
    executor: Executor
    own_pid_namespace = args.executor != "plain" and linux.SYS_PAUSE is not None
    if args.executor == "plain":
        from .plain import DEFAULT_PRELOAD, PlainExecutor

        # A container's worker gives each run namespaces and a directory of its own where
        # the engine lets it (before anything is imported: it forks to get there).
        per_run = args.container and args.run_as is not None and _per_run_in_container(args.run_as)
        own_pid_namespace = per_run
        preload = [n for n in args.preload.split(",") if n] if args.preload is not None \
            else list(DEFAULT_PRELOAD)
        plain = PlainExecutor(preload, args.path, run_as=args.run_as, per_run=per_run)
        ready = {"preloaded": plain.preload(), "versions": _versions()}
        executor = plain
    else:
        ready, executor = _jailed(args)
        # Root inside the jail (the caller was root): children become the sandbox user.
        if os.getuid() == 0:
            args.run_as = (jail.SANDBOX_UID, jail.SANDBOX_GID)
    # RLIMIT_NPROC counts each run alone only where it has a user namespace of its own.
    per_run_processes = not args.container or bool(getattr(executor, "own_user_namespaces",
                                                           False))
    if args.executor == "plain" and own_pid_namespace:
        from .forkserver import enter_base_pid_namespace

        enter_base_pid_namespace()
    config = ChildConfig(container=args.container, limit_processes=per_run_processes,
                         translate_pids=args.executor == "plain" and own_pid_namespace,
                         run_as=args.run_as,
                         # x86_64: each run in a PID namespace of its own (forkserver.py)
                         own_pid_namespace=own_pid_namespace)
    serve(executor, ready, config)


def _per_run_in_container(run_as: tuple[int, int]) -> bool:
    """Enter a user namespace of the worker's own (jail.enter_user_namespace), then try,
    in a process forked for it, what each run will do: PID, mount and IPC namespaces and
    a tmpfs of its own. False (and the container's shared /tmp, cleared after every run,
    as before) where the engine refuses any of it (an AppArmor profile that forbids
    mounts, a runtime without user namespaces); the result says which."""
    if linux.SYS_PAUSE is None:
        return False
    try:
        jail.enter_user_namespace(*run_as)
    except jail.JailError as exc:
        sys.stderr.write(f"runner worker: no namespaces per run in this container: {exc}\n")
        return False
    from .forkserver import pid_namespace_works

    probe = os.fork()
    if probe == 0:
        try:
            jail.enter_run(jail.RunPlan.for_container(run_as), 1)
            os._exit(0 if pid_namespace_works() else 1)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(probe, 0)
    works = os.waitstatus_to_exitcode(status) == 0
    if not works:
        sys.stderr.write("runner worker: no namespaces per run in this container (the engine "
                         "refuses mounts or PID namespaces here)\n")
    return works


def _jailed(args: argparse.Namespace) -> tuple[dict[str, object], Executor]:
    """A local tier's worker: into the jail first (returns in its pid 1), preload, seal the
    view, then what every child inherits."""
    try:
        jail.enter()
    except jail.JailError as exc:
        _jail_failed(exc)
    if args.executor == "jail":
        from .jail_executor import DEFAULT_PRELOAD, JailExecutor

        preload = [n for n in (args.preload or "").split(",") if n] + list(DEFAULT_PRELOAD)
        real = JailExecutor(preload, args.path)
        preloaded = real.preload()
        view = jail.View.of_python(extra=[*args.path, *args.bind], libraries=True)
        _seal(view)
        real.prepare_children(view)
        return {"preloaded": preloaded}, real
    from .restricted_executor import RestrictedExecutor

    allowed = [name for name in args.allow.split(",") if name]
    restricted = RestrictedExecutor(allowed, layers=args.layers) if allowed \
        else RestrictedExecutor(layers=args.layers)
    preloaded = restricted.preload()
    view = jail.View.of_python()
    _seal(view)
    restricted.prepare_children(view)
    return {"preloaded": preloaded, "allowed": list(restricted.policy.allowed),
            "layers": restricted.layers}, restricted


def _seal(view: jail.View) -> None:
    try:
        jail.seal(view)
    except jail.JailError as exc:
        _jail_failed(exc)


def _jail_failed(exc: Exception) -> NoReturn:
    sys.stderr.write(f"runner worker: the jail: {exc}\n")
    raise SystemExit(3) from None


def _versions() -> dict[str, str]:
    """Versions of every distribution the worker can import (the image's and the mounted)."""
    from importlib import metadata

    versions: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            versions[name.lower().replace("_", "-")] = dist.version
    return versions


if __name__ == "__main__":
    main()
