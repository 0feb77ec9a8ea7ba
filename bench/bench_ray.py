"""Ray backend speed, as ratios against the inner backend measured in the same run.

Targets (issue: a Ray backend), on a local two-node cluster on loopback (one CPU per
node, so the ray backend has the same two cores the inner backend has on its own):
- a trivial run through the ray backend <= 3x the same run on the inner backend directly
- a batch of 400 sympy runs: throughput through ray >= 0.8x the inner backend's own
  (wall time <= 1.25x), both fed by the same number of threads

Both sides go through a `Sandbox` that logs every run, so the ratio is the cost of Ray
alone. Also printed: the overhead per run in ms, and what it adds to a 10,000-problem
evaluation.

Run: `make bench` (or `.venv/bin/python bench/bench_ray.py [--runs N] [--batch N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ratios import median_seconds, report

# About 30 ms of sympy work: long enough to be CPU-bound, short enough that Ray's cost shows.
SYMPY_SNIPPET = ("from sympy import symbols, factor, expand\n"
                 "x, y = symbols('x y')\nprint(factor(expand((x + y)**6 - (x - y)**6)))\n")


def batch_seconds(sandbox: Any, code: str, count: int, threads: int) -> float:
    def one(_: int) -> None:
        result = sandbox.run(code)
        assert result.ok, (result.status, result.error)

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.perf_counter() - started


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--batch", type=int, default=400)
    args = parser.parse_args()
    os.environ.setdefault("RUNNER_HOME", tempfile.mkdtemp(prefix="runner-bench-"))
    from runner import Sandbox
    from runner.backends.ray_cluster import LocalCluster

    cores = 2  # one per node below, and the inner backend's pool on its own
    temp = tempfile.mkdtemp(prefix="rb", dir="/tmp")  # short: Ray's socket paths must fit
    rows: list[tuple[str, float, float, float | None, str]] = []
    try:
        with LocalCluster(temp, nodes=2, cpus_per_node=1) as cluster, \
                _environment(cluster.driver_env), \
                Sandbox(backend="ray", ray_address=cluster.address) as through_ray, \
                Sandbox(backend="restricted", pool_size=cores) as inner:
            through_ray.warm()
            inner.warm()
            # Threads enough to keep every worker busy on both sides (ray: 2 actors x a queue of 2).
            threads = 2 * cores
            for sandbox in (through_ray, inner):  # warm every worker and actor
                batch_seconds(sandbox, SYMPY_SNIPPET, 2 * threads, threads)

            def trivial(sandbox: Any) -> Any:
                return lambda: sandbox.run("print(1)")

            ray_trivial = median_seconds(trivial(through_ray), args.runs)
            inner_trivial = median_seconds(trivial(inner), args.runs)
            rows.append(("trivial print(1)", ray_trivial, inner_trivial, 3.0, "restricted directly"))

            inner_batch = batch_seconds(inner, SYMPY_SNIPPET, args.batch, threads)
            ray_batch = batch_seconds(through_ray, SYMPY_SNIPPET, args.batch, threads)
            rows.append((f"{args.batch} sympy runs", ray_batch, inner_batch, 1 / 0.8,
                         "restricted directly (same cores)"))
            nodes = sorted(through_ray._backend.placement())  # type: ignore[attr-defined]
    finally:
        shutil.rmtree(temp, ignore_errors=True)

    missed = report(rows)
    overhead_ms = (ray_trivial - inner_trivial) * 1000
    print(f"\nnodes: {', '.join(nodes)}")
    print(f"per-run overhead of ray: {overhead_ms:.1f} ms (a trivial run: {ray_trivial * 1000:.1f} ms "
          f"through ray, {inner_trivial * 1000:.1f} ms on the inner backend)")
    print(f"batch throughput: {args.batch / ray_batch:.1f} runs/s through ray, "
          f"{args.batch / inner_batch:.1f} runs/s directly ({inner_batch / ray_batch:.2f}x)")
    print(f"a 10,000-problem evaluation with one run per problem: {overhead_ms * 10_000 / 1000:.0f} s "
          "of added latency in all, spread over the cluster's workers")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
