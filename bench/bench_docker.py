"""Docker backend speed, as ratios against baselines measured in the same run.

Targets (issue: Docker backend):
- warm trivial run through Sandbox <= 1/10 of `docker exec CONTAINER python3 -c 'print(1)'`
  on the same image
- warm trivial run, runs 20 ms apart, <= 1.5x the floor of the design: a bare fork + exit +
  wait of a sympy-loaded process, measured here
- sympy snippet through Sandbox <= 1/10 of `docker exec CONTAINER python3 -c <snippet>`
- first run from a cold Sandbox (constructor to first result) <= 1.5x
  `docker run --rm IMAGE python3 -c <snippet>`
- second use of a package set <= 1/10 of the first (a fresh RUNNER_HOME for every first
  use, so it really downloads, installs and starts a container for the environment)

The `docker exec` baselines run in a plain long-lived container of the sandbox image
(`docker run -d IMAGE sleep 600`), removed at the end.

Run: `make bench` (or `.venv/bin/python bench/bench_docker.py [--runs N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from ratios import fork_floor_seconds, median_seconds, paced_by, report

SYMPY_SNIPPET = "from sympy import symbols, solve\nx = symbols('x')\nprint(solve(x**2 - 4, x))\n"
PACKAGE = "tabulate"  # not in the image; the host's pip index has it
PACKAGE_SNIPPET = f"import {PACKAGE}\nprint({PACKAGE}.__version__)\n"
BENCH_LABEL = "org.runner.bench"
PACE_S = 0.02  # an agent's runs come between model calls


def docker(*args: str) -> str:
    proc = subprocess.run(["docker", *args], check=True, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    return proc.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--package-runs", type=int, default=2,
                        help="cold first uses of the package set (each in a fresh RUNNER_HOME)")
    args = parser.parse_args()
    homes: list[str] = []

    def fresh_home() -> str:
        home = tempfile.mkdtemp(prefix="runner-bench-docker-")
        homes.append(home)
        os.environ["RUNNER_HOME"] = home
        return home

    fresh_home()
    from runner import Sandbox
    from runner.docker import images

    image = images.require().tag
    baseline = docker("run", "-d", "--rm", "--label", f"{BENCH_LABEL}=1", image, "sleep", "600")
    rows: list[tuple[str, float, float, float | None, str]] = []
    try:
        def docker_exec(code: str) -> None:
            subprocess.run(["docker", "exec", baseline, "python3", "-c", code], check=True,
                           capture_output=True, stdin=subprocess.DEVNULL)

        def docker_run(code: str) -> None:
            subprocess.run(["docker", "run", "--rm", image, "python3", "-c", code], check=True,
                           capture_output=True, stdin=subprocess.DEVNULL)

        with Sandbox(backend="docker") as sandbox:
            sandbox.warm()

            def through(code: str, packages: tuple[str, ...] = ()) -> Callable[[], object]:
                def action() -> None:
                    result = sandbox.run(code, packages=packages)
                    assert result.ok, (result.status, result.error)
                return action

            for _ in range(5):
                through("print(1)")()
            trivial = median_seconds(through("print(1)"), args.runs)
            trivial_base = median_seconds(lambda: docker_exec("print(1)"), max(10, args.runs // 2))
            rows.append(("warm trivial run", trivial, trivial_base, 1 / 10,
                         "docker exec python3 -c 'print(1)'"))
            floor = fork_floor_seconds(args.runs * 3)
            rows.append(("warm trivial run, back to back", trivial, floor, None,
                         "bare fork+exit+wait of a sympy-loaded process"))
            paced = median_seconds(paced_by(through("print(1)"), PACE_S), args.runs) - PACE_S
            rows.append(("warm trivial run, 20 ms apart", paced, floor, 1.5,
                         "bare fork+exit+wait of a sympy-loaded process"))

            sympy_run = median_seconds(through(SYMPY_SNIPPET), args.runs)
            sympy_base = median_seconds(lambda: docker_exec(SYMPY_SNIPPET), 5)
            rows.append(("sympy solve", sympy_run, sympy_base, 1 / 10,
                         "docker exec python3 -c <import sympy; solve>"))

        def timed_cold() -> float:
            """Constructor to first result; closing (removing the container) is not timed."""
            started = time.perf_counter()
            sandbox = Sandbox(backend="docker")
            try:
                result = sandbox.run(SYMPY_SNIPPET)
                elapsed = time.perf_counter() - started
                assert result.ok, (result.status, result.error)
            finally:
                sandbox.close()
            return elapsed

        cold_runs = max(3, args.runs // 6)
        cold = statistics.median([timed_cold() for _ in range(cold_runs)])
        cold_base = median_seconds(lambda: docker_run(SYMPY_SNIPPET), cold_runs)
        rows.append(("cold Sandbox, 1st run", cold, cold_base, 1.5,
                     "docker run --rm IMAGE python3 -c <snippet>"))

        firsts, seconds, new_sandbox = [], [], []
        for _ in range(max(1, args.package_runs)):
            fresh_home()
            with Sandbox(backend="docker") as sandbox:
                sandbox.warm()
                firsts.append(median_seconds(through_packages(sandbox), 1))
                seconds.append(median_seconds(through_packages(sandbox), 5))
            with Sandbox(backend="docker") as sandbox:  # same RUNNER_HOME: the cached environment
                sandbox.warm()
                new_sandbox.append(median_seconds(through_packages(sandbox), 1))
        first_use = statistics.median(firsts)
        rows.append((f"{PACKAGE}: 2nd use", statistics.median(seconds), first_use, 1 / 10,
                     "1st use (download, install, container)"))
        rows.append((f"{PACKAGE}: new Sandbox", statistics.median(new_sandbox), first_use, None,
                     "1st use; info: cached env, new container"))
    finally:
        subprocess.run(["docker", "rm", "-f", baseline], capture_output=True)
        for home in homes:
            shutil.rmtree(home, ignore_errors=True)

    missed = report(rows)
    return 1 if missed else 0


def through_packages(sandbox) -> Callable[[], object]:  # noqa: ANN001 - a runner.Sandbox
    def action() -> None:
        result = sandbox.run(PACKAGE_SNIPPET, packages=[PACKAGE])
        assert result.ok, (result.status, result.error)
    return action


if __name__ == "__main__":
    sys.exit(main())
