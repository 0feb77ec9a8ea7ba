"""Jail backend speed (the default local tier), as ratios against baselines measured in the same run.

Targets (issue: jail tier):
- a loop of user function and method calls (2x10^5) through Sandbox(backend="jail") <= 1.5x
  the same code in plain in-process CPython; the restricted tier is shown beside it (no
  target: its policy hooks every call, which is the point of the jail tier)
- a CPU-bound loop (10^6) through the jail <= 1.5x the same loop in plain CPython
- a trivial run (`pass`) through Sandbox, runs 20 ms apart (an agent's pace) <= 1.5x the
  floor of the design: a bare fork + exit + wait of a sympy-loaded process, measured here;
  back to back is shown beside it
- numpy import + a small array op through a warm jail Sandbox <= 1/4 of a fresh
  `python -c` importing numpy and doing the same
- shown, no target: a run that writes a 1 MB file in its directory and reads it back,
  against a trivial run at the same pace (the file should cost a few ms at most)

The workloads and the plain-CPython baselines are bench_restricted.py's own, so the two
benchmarks' numbers compare line for line.

Run: `make bench` (or `.venv/bin/python bench/bench_jail.py [--runs N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from bench_restricted import CALL_LOOP, CPU_LOOP, PACE_S, fresh_python, plain_exec
from ratios import Row, bench_main, fork_floor_seconds, median_seconds, paced_by

NUMPY_SNIPPET = "import numpy as np\nprint(np.arange(10).sum())\n"
NUMPY_FRESH = "import numpy\nprint(numpy.arange(10).sum())\n"
# 1 MiB written to the run's working directory (its own tmpfs) and read back whole; the
# check keeps the read from being anything but a real one.
FILE_ROUND_TRIP = ("data = bytes(range(256)) * 4096\n"
                   "with open('bench.bin', 'wb') as f:\n    f.write(data)\n"
                   "with open('bench.bin', 'rb') as f:\n    assert f.read() == data\n"
                   "print(len(data))\n")
FLOOR = "bare fork+exit+wait of a sympy-loaded process"


def through(sandbox: Any, code: str, expected: str | None = None) -> Callable[[], object]:
    """One run of `code` through `sandbox` (a runner.Sandbox), checked: a failed run timed
    as fast would be a lie."""
    def action() -> None:
        result = sandbox.run(code)
        assert result.ok, (result.status, result.error)
        assert expected is None or result.stdout == expected, result.stdout
    return action


def measure(runs: int) -> list[Row]:
    from runner import Sandbox

    loop_runs = max(5, runs // 4)  # as bench_restricted: the loops are the long runs (up to ~1 s restricted)
    rows: list[Row] = []
    with Sandbox(backend="jail") as jail:
        jail.warm()
        for _ in range(5):  # the pool's workers and their spare children ready
            through(jail, "pass")()

        call_run = median_seconds(through(jail, CALL_LOOP), loop_runs)
        call_base = median_seconds(lambda: plain_exec(CALL_LOOP), loop_runs)
        rows.append(("calls and methods 2e5", call_run, call_base, 1.5, "plain CPython exec"))

        loop_run = median_seconds(through(jail, CPU_LOOP), loop_runs)
        loop_base = median_seconds(lambda: plain_exec(CPU_LOOP), loop_runs)
        rows.append(("cpu loop 1e6", loop_run, loop_base, 1.5, "plain CPython exec"))

        trivial = median_seconds(through(jail, "pass"), runs)
        floor = fork_floor_seconds(runs * 3)
        # Back to back, every run also pays for forking and setting up the next spare child;
        # at an agent's pace that happens between runs, off the clock.
        rows.append(("trivial pass, back to back", trivial, floor, None, FLOOR))
        paced = median_seconds(paced_by(through(jail, "pass"), PACE_S), runs) - PACE_S
        rows.append(("trivial pass, 20 ms apart", paced, floor, 1.5, FLOOR))

        numpy_run = median_seconds(through(jail, NUMPY_SNIPPET, "45\n"), runs)
        numpy_base = median_seconds(lambda: fresh_python(NUMPY_FRESH), max(10, runs // 2))
        rows.append(("numpy import + arange sum", numpy_run, numpy_base, 1 / 4,
                     "fresh python -c + import numpy"))

        # Both at an agent's pace, so the difference is the file's, not the next spare's.
        file_run = median_seconds(paced_by(through(jail, FILE_ROUND_TRIP, "1048576\n"), PACE_S), runs) - PACE_S
        rows.append(("1 MB file write + read, 20 ms apart", file_run, paced, None,
                     "trivial pass, 20 ms apart"))

    # Its own Sandbox, opened after the jail's is closed: its idle workers do not share the
    # machine with the jail's measurements. Same baseline as the jail's row above.
    with Sandbox(backend="restricted") as restricted:
        restricted.warm()
        for _ in range(5):
            through(restricted, "pass")()
        restricted_call = median_seconds(through(restricted, CALL_LOOP), loop_runs)
        rows.insert(1, ("calls and methods 2e5, restricted", restricted_call, call_base, None,
                        "plain CPython exec (info: the policy's hooks)"))
    return rows


def main() -> int:
    return bench_main(measure)


if __name__ == "__main__":
    sys.exit(main())
