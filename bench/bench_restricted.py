"""Restricted backend speed, as ratios against baselines measured in the same run.

Targets (issue: foundation):
- trivial run through Sandbox <= 1/5 of a fresh `python -c 'print(1)'`
- trivial run through Sandbox, runs 20 ms apart (an agent's pace) <= 1.5x the floor of
  the design: a bare fork + exit + wait of a sympy-loaded process, measured here (the
  jail in place); back to back is shown beside it
- sympy snippet through Sandbox <= 1/10 of a fresh `python -c` importing sympy and solving
- a CPU-bound loop (10^6) through Sandbox <= 1.2x the same loop in plain CPython
- a loop of 2x10^5 method calls each calling a function through Sandbox <= 3x plain
  CPython (issue: the strict tier; its checks compiled inline where the compiler can
  prove them, policy/inline.py); the same loop in the jail tier (no policy) and a sort
  with a user key are shown beside it

Run: `make bench` (or `.venv/bin/python bench/bench_restricted.py [--runs N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

from ratios import fork_floor_seconds, median_seconds, paced_by, paired_medians, report

# An agent's runs come between model calls: the spare child for the next run gets ready
# in between. Back to back, every run also pays for forking and setting up the next.
PACE_S = 0.02
SYMPY_SNIPPET = "from sympy import symbols, solve\nx = symbols('x')\nprint(solve(x**2 - 4, x))\n"
CPU_LOOP = "total = 0\nfor i in range(1_000_000):\n    total += i * i % 7\nprint(total)\n"
# User functions and methods (each checks its arguments as it starts), and a library
# calling back into user code.
CALL_LOOP = ("def step(a, b):\n    return (a * 31 + b) % 1009\n"
             "class Acc:\n    def __init__(self):\n        self.v = 0\n"
             "    def add(self, x):\n        self.v = step(self.v, x)\n"
             "acc = Acc()\nfor i in range(200_000):\n    acc.add(i)\nprint(acc.v)\n")
KEY_SORT = "values = [(i * 7919) % 10007 for i in range(100_000)]\nprint(sorted(values, key=lambda v: -v)[0])\n"


def fresh_python(code: str) -> None:
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def plain_exec(code: str) -> None:
    devnull = open(os.devnull, "w")
    saved, sys.stdout = sys.stdout, devnull
    try:
        exec(compile(code, "<bench>", "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        sys.stdout = saved
        devnull.close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("RUNNER_HOME", tempfile.mkdtemp(prefix="runner-bench-"))
    from runner import Sandbox

    rows: list[tuple[str, float, float, float, str]] = []
    with Sandbox(backend="restricted") as sandbox:
        sandbox.warm()

        def through(code: str) -> Callable[[], object]:
            def action() -> None:
                result = sandbox.run(code)
                assert result.ok, result.error
            return action

        for _ in range(5):
            through("print(1)")()
        trivial = median_seconds(through("print(1)"), args.runs)
        trivial_base = median_seconds(lambda: fresh_python("print(1)"), max(10, args.runs // 2))
        rows.append(("trivial print(1)", trivial, trivial_base, 1 / 5, "fresh python -c"))
        floor = fork_floor_seconds(args.runs * 3)
        rows.append(("trivial print(1), back to back", trivial, floor, None,
                     "bare fork+exit+wait of a sympy-loaded process"))
        paced = median_seconds(paced_by(through("print(1)"), PACE_S), args.runs) - PACE_S
        rows.append(("trivial print(1), 20 ms apart", paced, floor, 1.5,
                     "bare fork+exit+wait of a sympy-loaded process"))

        sympy_run = median_seconds(through(SYMPY_SNIPPET), args.runs)
        sympy_base = median_seconds(lambda: fresh_python(SYMPY_SNIPPET), 5)
        rows.append(("sympy solve", sympy_run, sympy_base, 1 / 10, "fresh python -c + import sympy"))

        loops = max(5, args.runs // 4)
        for name, code, target in (("cpu loop 1e6", CPU_LOOP, 1.2),
                                   ("calls and methods 2e5", CALL_LOOP, 3.0),
                                   ("sort with a lambda key 1e5", KEY_SORT, None)):
            # Sandbox and baseline alternate, run by run, so a noisy neighbour on a shared
            # machine weighs on both alike.
            run, base = paired_medians(through(code), lambda code=code: plain_exec(code), loops)
            rows.append((name, run, base, target, "plain CPython exec"))
    with Sandbox(backend="jail") as jail:
        jail.warm()

        def in_jail() -> None:
            result = jail.run(CALL_LOOP)
            assert result.ok, result.error
        in_jail()
        run, base = paired_medians(in_jail, lambda: plain_exec(CALL_LOOP), loops)
        # Shown, not a target: the same jail without the policy.
        rows.append(("calls and methods 2e5, jail tier", run, base, None, "plain CPython exec"))

    missed = report(rows)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
