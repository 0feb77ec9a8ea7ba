"""Runs attack code in the restricted tier with the kernel layer alone, and prints results.

The jail's promises rest on the kernel layer (namespaces, the view, an unprivileged user,
Landlock, seccomp, limits), so the attacks run with the real builtins: no policy, no
audit hook (the `layers="kernel"` test mode). Used by tests/test_jail.py as the caller
that started it: directly as root, and through tests/as_user.py as an ordinary user.

stdin: a JSON list of {"name", "code", "limits"}; they run in order in one worker (so a
later attack sees whatever an earlier one left). stdout: one JSON object, name -> result.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

os.environ["RUNNER_TEST_LAYERS"] = "1"
HOME = tempfile.mkdtemp(prefix="runner-probe-home-")
os.environ["RUNNER_HOME"] = HOME
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from runner import Limits, Sandbox  # noqa: E402


def main() -> None:
    attacks = json.load(sys.stdin)
    results = {}
    with Sandbox(backend="restricted", log_store=False, layers="kernel", pool_size=1) as sandbox:
        for attack in attacks:
            result = sandbox.run(attack["code"], limits=Limits(**attack.get("limits", {})))
            results[attack["name"]] = {
                "status": str(result.status), "stdout": result.stdout, "stderr": result.stderr,
                "error": result.error.message if result.error else None,
                "isolation": result.resources.isolation.model_dump()
                if result.resources.isolation else None}
        after = sandbox.run("print(6 * 7)")
        results["_next_run"] = {"status": str(after.status), "stdout": after.stdout}
    results["_caller"] = {"uid": os.getuid()}
    shutil.rmtree(HOME, ignore_errors=True)
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
