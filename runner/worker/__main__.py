"""Entry point of the worker program.

On the host (restricted tier):   python -m runner.worker --executor restricted
In a container (Docker tier):    python3 -m worker --executor plain --container
"""

from __future__ import annotations

import argparse

from .child import Executor
from .zygote import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="runner-worker")
    parser.add_argument("--executor", choices=["restricted", "plain"], default="restricted")
    parser.add_argument("--allow", default="", help="restricted: comma-separated allowed modules")
    parser.add_argument("--preload", default=None, help="plain: comma-separated modules to import")
    parser.add_argument("--path", action="append", default=[],
                        help="plain: a directory of installed packages to put on sys.path")
    parser.add_argument("--container", action="store_true",
                        help="the worker owns its process namespace: after each run, kill "
                             "every process it did not start itself")
    args = parser.parse_args()
    ready: dict[str, object]
    executor: Executor
    if args.executor == "plain":
        from .plain import DEFAULT_PRELOAD, PlainExecutor

        preload = [n for n in args.preload.split(",") if n] if args.preload is not None \
            else list(DEFAULT_PRELOAD)
        executor = PlainExecutor(preload, args.path)
        ready = {"preloaded": executor.preload(), "versions": _versions()}
    else:
        from .restricted import RestrictedExecutor

        allowed = [name for name in args.allow.split(",") if name]
        restricted = RestrictedExecutor(allowed) if allowed else RestrictedExecutor()
        ready = {"preloaded": restricted.preload(), "allowed": list(restricted.policy.allowed)}
        executor = restricted
    serve(executor, ready, container=args.container)


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
