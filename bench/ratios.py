"""What the benchmarks share: timing by median, and the ratio table with its verdicts."""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

# (name, sandbox seconds, baseline seconds, target ratio or None for information, baseline)
Row = tuple[str, float, float, "float | None", str]


def median_seconds(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def paired_medians(action: Callable[[], object], baseline: Callable[[], object],
                   runs: int) -> tuple[float, float]:
    """The medians of `action` and `baseline`, timed alternately (one of each per round), so
    that load from elsewhere falls on both alike."""
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(runs):
        for timed, samples in ((action, ours), (baseline, theirs)):
            started = time.perf_counter()
            timed()
            samples.append(time.perf_counter() - started)
    return statistics.median(ours), statistics.median(theirs)


def paced_by(action: Callable[[], object], pause_s: float) -> Callable[[], None]:
    """`action` after a pause (time a paced run's median, then subtract the pause)."""
    def paced() -> None:
        time.sleep(pause_s)
        action()
    return paced


def fork_floor_seconds(runs: int) -> float:
    """The floor of a fork-per-run design on this machine: a bare fork + exit + wait of a
    process that has sympy loaded (this one, once it imported sympy)."""
    import os

    import sympy  # noqa: F401 - the point: a parent as big as a warm worker

    def fork_exit_wait() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    for _ in range(5):
        fork_exit_wait()
    return median_seconds(fork_exit_wait, runs)


def report(rows: Sequence[Row]) -> int:
    """Print the table; the number of targets missed."""
    width = max(len(row[0]) for row in rows) + 2
    missed = 0
    print(f"{'benchmark':<{width}} {'sandbox':>10} {'baseline':>10} {'ratio':>7} {'target':>7}  "
          "baseline")
    for name, value, base, target, base_name in rows:
        ratio = value / base
        if target is None:
            verdict, shown = "", "-"
        else:
            ok = ratio <= target
            missed += not ok
            verdict, shown = ("OK" if ok else "MISSED"), "<=" + format(target, ".2g")
        print(f"{name:<{width}} {value * 1000:>8.1f}ms {base * 1000:>8.1f}ms {ratio:>7.3f} "
              f"{shown:>7}  {base_name} {verdict}".rstrip())
    return missed


@contextlib.contextmanager
def private_runner_home() -> Iterator[None]:
    """A RUNNER_HOME given by the caller is used (and kept); otherwise a temporary one, so a
    benchmark's logged runs never land in the user's log store. Unset and empty alike:
    runner reads an empty RUNNER_HOME as unset (the user's data directory), which
    setdefault would let through. Set before runner is imported; removed at the end, once
    every worker is gone."""
    home = None
    if not os.environ.get("RUNNER_HOME"):
        home = os.environ["RUNNER_HOME"] = tempfile.mkdtemp(prefix="runner-bench-")
    try:
        yield
    finally:
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)


def bench_main(measure: Callable[[int], Sequence[Row]], *, default_runs: int = 30) -> int:
    """A benchmark's command line: `--runs N`, measured with a private RUNNER_HOME, the
    rows reported; exit status 1 when a target was missed."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=default_runs)
    args = parser.parse_args()
    with private_runner_home():  # never the user's log store
        rows = measure(args.runs)
    return 1 if report(rows) else 0
