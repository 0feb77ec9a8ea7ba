"""Files in and out of runs: what they cost, as ratios against baselines measured in the same run.

Targets (issue: files and figures in and out):
- a run with no files pays nothing measurable: what every run now does for files when it
  has none (the child's look at its empty directory before and after the code, the host's
  handling of an empty list) is timed on its own, in process, against a trivial run at an
  agent's pace: <= 2% of it;
- a 1 MB file handed in and a (different) 1 MB file returned, logged in SQLite with the
  run, costs at most a few milliseconds more than the run: the run that reads the file
  and writes the reversed bytes back <= the same work on bytes made in the run, with no
  file in or out, + 5 ms; both 20 ms apart on the jail tier (the default).

Run: `make bench` (or `.venv/bin/python bench/bench_files.py [--runs N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

from bench_restricted import PACE_S
from ratios import Row, bench_main, median_seconds, paced_by

MIB = 1024 * 1024
ROUND_TRIP = ("data = open('in.bin', 'rb').read()\n"
              "open('out.bin', 'wb').write(data[::-1])\n"
              "print(len(data))\n")
IN_MEMORY = ("data = bytes(range(256)) * 4096\n"
             "reversed_data = data[::-1]\n"
             "print(len(data))\n")
SLACK_S = 0.005  # "a few milliseconds"


def bookkeeping_seconds(runs: int) -> float:
    """What a run with no files does for them, in process: the worker's snapshot of its
    empty directory and its look for changes afterwards, and the host's handling of the
    empty lists (request and result)."""
    from runner.files import decode_outputs, input_files
    from runner.worker import run_files

    directory = tempfile.mkdtemp(prefix="bench-files-")
    here = os.getcwd()
    os.chdir(directory)
    try:
        def empty_run_bookkeeping() -> None:
            input_files(None)
            run_files.write_inputs([])
            before = run_files.snapshot()
            outcome = run_files.changed_files(before, 16 * MIB)
            decode_outputs(outcome.get("files", []), outcome.get("files_left_out", []), 16 * MIB)

        for _ in range(50):
            empty_run_bookkeeping()
        return median_seconds(empty_run_bookkeeping, runs * 20)
    finally:
        os.chdir(here)
        shutil.rmtree(directory, ignore_errors=True)


def measure(runs: int) -> list[Row]:
    from runner import Sandbox
    from runner.logs import LogStore

    rows: list[Row] = []
    given = os.urandom(MIB)
    home = tempfile.mkdtemp(prefix="bench-files-log-")
    try:
        with LogStore(os.path.join(home, "runner.db")) as store, Sandbox(log_store=store) as jail:
            jail.warm()

            def trivial() -> None:
                result = jail.run("pass")
                assert result.ok, result.error

            def in_memory() -> None:
                result = jail.run(IN_MEMORY)
                assert result.ok and result.stdout == f"{MIB}\n" and not result.files, result.error

            def round_trip() -> Any:
                result = jail.run(ROUND_TRIP, files={"in.bin": given})
                assert result.ok and result.stdout == f"{MIB}\n", (result.status, result.error)
                assert [f.name for f in result.files] == ["out.bin"]
                assert result.files[0].data == given[::-1]

            for _ in range(5):
                trivial()
                in_memory()
                round_trip()
            # Alternating halves, so that drift on the machine lands on all sides.
            paced, memory, files = [], [], []
            for _ in range(2):
                paced.append(median_seconds(paced_by(trivial, PACE_S), runs // 2) - PACE_S)
                memory.append(median_seconds(paced_by(in_memory, PACE_S), runs // 2) - PACE_S)
                files.append(median_seconds(paced_by(round_trip, PACE_S), runs // 2) - PACE_S)
            paced_s, memory_s, files_s = min(paced), min(memory), min(files)
        bookkeeping = bookkeeping_seconds(runs)
        rows.append(("no files: the per-run bookkeeping", bookkeeping, paced_s, 0.02,
                     "trivial pass, 20 ms apart"))
        rows.append(("1 MB in + 1 MB out, logged, 20 ms apart", files_s, memory_s,
                     (memory_s + SLACK_S) / memory_s, "the same bytes in memory, no files (+5 ms)"))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return rows


def main() -> int:
    return bench_main(measure)


if __name__ == "__main__":
    sys.exit(main())
