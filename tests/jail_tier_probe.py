"""Runs attack code in the jail tier exactly as users get it, and prints results.

The jail tier (`backend="jail"`, the default) runs real CPython with the real builtins
and no policy: its promises rest on the kernel layer alone. This probe opens a sandbox
of one worker with default layers and runs every attack in it, in order, each followed
by the same check run (`after`), so that whatever an attack leaves behind is seen by the
next run of the same worker. Used by tests/test_jail_tier.py as the caller that started
the worker: directly as root, and through tests/as_user.py as an ordinary user.

stdin: a JSON object {"after": code, "attacks": [{"name", "code", "limits", "after"}]}
(an attack with "after": false is followed directly by the next attack). In every
code, __PROBE_HOME__ (this probe's RUNNER_HOME), __PROBE_PID__ (this process) and
__WORKER_PID__ (the worker's host process) are replaced before it runs.
stdout: one JSON object, name -> result (with "after": the check run's result, and
"workers": the pool's worker pids once the attack was over).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any

HOME = tempfile.mkdtemp(prefix="runner-jail-tier-home-")
os.environ["RUNNER_HOME"] = HOME
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runner import Limits, Sandbox  # noqa: E402


def _workers(sandbox: Sandbox) -> list[int]:
    """The host pids of the pool's workers (a test probe may look inside the backend)."""
    backend: Any = sandbox._backend
    return sorted(worker.pid for pool in backend.pools() for worker in pool._idle)


def _described(result: Any) -> dict[str, Any]:
    return {"status": str(result.status), "stdout": result.stdout, "stderr": result.stderr,
            "error_type": result.error.type if result.error else None,
            "error": result.error.message if result.error else None,
            "cpu_ms": result.resources.cpu_ms, "duration_ms": result.duration_ms,
            "isolation": result.resources.isolation.model_dump()
            if result.resources.isolation else None}


def main() -> None:
    job = json.load(sys.stdin)
    results: dict[str, Any] = {}
    with Sandbox(backend="jail", log_store=False, pool_size=1) as sandbox:
        results["_fresh"] = _described(sandbox.run(job["after"]))
        worker = _workers(sandbox)
        results["_fresh"]["workers"] = worker

        def filled(code: str) -> str:
            return (code.replace("__PROBE_HOME__", HOME).replace("__PROBE_PID__", str(os.getpid()))
                    .replace("__WORKER_PID__", str(worker[0] if worker else 0)))

        for attack in job["attacks"]:
            result = sandbox.run(filled(attack["code"]), limits=Limits(**attack.get("limits", {})))
            results[attack["name"]] = _described(result)
            if attack.get("after", True):
                results[attack["name"]]["after"] = _described(sandbox.run(job["after"]))
            results[attack["name"]]["workers"] = _workers(sandbox)
    results["_caller"] = {"uid": os.getuid(), "home": HOME, "pid": os.getpid()}
    shutil.rmtree(HOME, ignore_errors=True)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
