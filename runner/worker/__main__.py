"""Entry point of the worker program: `python -m runner.worker --executor restricted`."""

from __future__ import annotations

import argparse

from .zygote import serve


def main() -> None:
    parser = argparse.ArgumentParser(prog="runner-worker")
    parser.add_argument("--executor", choices=["restricted"], default="restricted")
    parser.add_argument("--allow", default="", help="comma-separated allowed modules")
    args = parser.parse_args()
    from .restricted import RestrictedExecutor

    allowed = [name for name in args.allow.split(",") if name] or None
    executor = RestrictedExecutor(allowed) if allowed else RestrictedExecutor()
    preloaded = executor.preload()
    serve(executor, {"preloaded": preloaded, "allowed": list(executor.policy.allowed)})


if __name__ == "__main__":
    main()
