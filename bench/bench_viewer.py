"""Log viewer and log writes at scale, against targets and baselines measured in the same run.

Targets (issue: the log viewer):
- with 100,000 executions in the log, the executions page and a full-text query each
  answer in under 100 ms of server time (median of 20 requests with an HTTP client
  against `runner logs serve`; the server reports its time in a Server-Timing header,
  and the time the client saw is printed beside it);
- writing executions stays at least as fast as with the schema before the search index
  and the single copy of each body (version 3, written the way it was then): the ratio of
  the time per write now to then is at most 1.0.

Run: `make bench` (or `.venv/bin/python bench/bench_viewer.py [--executions N]`).
Prints one line per benchmark and exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from pydantic_core import to_jsonable_python
from ratios import report

from runner.ids import new_id
from runner.logs import MIGRATIONS, ExecutionRecord, LogStore
from runner.logs.migrations import apply_migrations
from runner.logs.store import insert_records
from runner.types import (
    ErrorInfo,
    ExecutionRequest,
    ExecutionResult,
    FunctionCall,
    Limits,
    Resources,
    Status,
)

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "lambda", "sigma", "omega", "matrix", "vector", "solve", "integral", "series", "prime", "factor", "root", "sum", "product", "limit"]


def make_record(rng: random.Random, started: datetime) -> ExecutionRecord:
    """A plausible execution: a code block or a call, some output, now and then an error."""
    words = " ".join(rng.choices(WORDS, k=12))
    code = f"# {words}\nvalues = [i * i for i in range({rng.randint(5, 500)})]\nprint(sum(values))\n"
    call = None
    if rng.random() < 0.2:
        call = FunctionCall(name=rng.choice(["solve", "factor", "integrate"]),
                            arguments={"x": rng.randint(0, 99)})
    request = ExecutionRequest(code=code, call=call, limits=Limits(timeout_s=5))
    roll = rng.random()
    error = None
    status = Status.OK
    if roll < 0.05:
        status = Status.ERROR
        error = ErrorInfo(type="ZeroDivisionError", message="division by zero",
                          traceback='Traceback (most recent call last):\n  File "<code>", line 3, '
                                    "in <module>\nZeroDivisionError: division by zero\n")
    elif roll < 0.08:
        status = Status.TIMEOUT
        error = ErrorInfo(type="Timeout", message="the run took longer than 5 s")
    result = ExecutionResult(
        id=new_id(), backend=rng.choice(["restricted", "restricted", "docker"]), status=status,
        exit_code=0 if status is Status.OK else 1,
        stdout="\n".join(f"{w} {rng.random():.6f}" for w in rng.choices(WORDS, k=20)) + "\n",
        error=error, return_value=rng.randint(0, 10**6) if call else None,
        duration_ms=rng.randint(2, 3000), resources=Resources(cpu_ms=rng.randint(1, 900),
                                                              max_rss_kb=rng.randint(60_000, 90_000)),
        limits=Limits(timeout_s=5), started_at=started)
    return ExecutionRecord(request=request, result=result,
                           source=rng.choice(["cli", "api", "agent", "demo"]), meta={"n": 1})


def seed(path: Path, count: int) -> None:
    rng = random.Random(7)
    start = datetime.now(UTC) - timedelta(days=60)
    step = timedelta(days=60) / count
    with LogStore(path) as store:
        batch: list[ExecutionRecord] = []
        for index in range(count):
            batch.append(make_record(rng, start + step * index))
            if len(batch) == 5000 or index == count - 1:
                records = batch
                store.write(lambda conn, records=records: insert_records(conn, records))
                batch = []
        store.read(lambda conn: conn.execute("ANALYZE"))


# -- writes: now, and as schema version 3 wrote them -----------------------------------------


def _json(value: Any) -> str:
    return json.dumps(to_jsonable_python(value, fallback=repr))


def _v3_row(request: ExecutionRequest, result: ExecutionResult, source: str, meta: dict[str, Any]
            ) -> dict[str, Any]:
    """The row as schema version 3 wrote it (the code of that version, verbatim in substance)."""
    error = result.error
    return {
        "id": result.id, "started_at": result.started_at.astimezone(UTC).isoformat(
            timespec="microseconds"),
        "source": source, "backend": result.backend, "status": str(result.status),
        "exit_code": result.exit_code, "duration_ms": result.duration_ms, "code": request.code,
        "limits_json": result.limits.model_dump_json(),
        "request_limits_json": request.limits.model_dump_json(),
        "packages_json": json.dumps(list(request.packages)),
        "package_versions_json": json.dumps(result.packages, sort_keys=True),
        "stdout": result.stdout, "stderr": result.stderr,
        "stdout_truncated": int(result.stdout_truncated), "stderr_truncated": int(result.stderr_truncated),
        "error_type": error.type if error else None, "error_message": error.message if error else None,
        "error_traceback": error.traceback if error else None,
        "return_value_json": _json(result.return_value), "cpu_ms": result.resources.cpu_ms,
        "max_rss_kb": result.resources.max_rss_kb, "meta_json": _json(meta),
        "request_json": _json(request), "result_json": _json(result),
    }


class V3Writer:
    """One execution per autocommit INSERT under a lock, on a WAL database at version 3: what
    `LogStore.record_execution` did before this schema."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = NORMAL")
        self.conn.execute("PRAGMA foreign_keys = ON")
        apply_migrations(self.conn, path, MIGRATIONS[:3])
        self.lock = threading.RLock()
        columns = list(_v3_row(*_pair(make_record(random.Random(1), datetime.now(UTC)))))
        self.sql = (f"INSERT INTO executions ({', '.join(columns)}) "
                    f"VALUES ({', '.join(':' + c for c in columns)})")

    def record_execution(self, request: ExecutionRequest, result: ExecutionResult, *, source: str,
                         meta: dict[str, Any]) -> None:
        row = _v3_row(request, result, source, meta)
        with self.lock:
            self.conn.execute(self.sql, row)

    def close(self) -> None:
        self.conn.close()


def _pair(record: ExecutionRecord) -> tuple[ExecutionRequest, ExecutionResult, str, dict[str, Any]]:
    return record.request, record.result, record.source, record.meta


def time_writes(writer: Any, records: list[ExecutionRecord]) -> float:
    """Seconds per write."""
    started = time.perf_counter()
    for record in records:
        writer.record_execution(record.request, record.result, source=record.source, meta=record.meta)
    return (time.perf_counter() - started) / len(records)


def write_ratio(directory: Path, count: int, rounds: int) -> tuple[float, float]:
    """(seconds per write now, then): medians over alternating rounds on fresh files."""
    rng = random.Random(11)
    now_samples, then_samples = [], []
    for round_number in range(rounds):
        records = [make_record(rng, datetime.now(UTC)) for _ in range(count)]
        # Fresh ids per round, the same records for both schemas.
        then = V3Writer(directory / f"v3-{round_number}.db")
        with LogStore(directory / f"v4-{round_number}.db") as store:
            if round_number % 2:
                now_samples.append(time_writes(store, records))
                then_samples.append(time_writes(then, records))
            else:
                then_samples.append(time_writes(then, records))
                now_samples.append(time_writes(store, records))
        then.close()
    return statistics.median(now_samples), statistics.median(then_samples)


# -- the viewer ------------------------------------------------------------------------------


def serve(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "RUNNER_HOME": str(home)}
    process = subprocess.Popen([sys.executable, "-m", "runner", "logs", "serve", "--port", "0"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline() if process.stdout else ""
    match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
    if not match:
        process.kill()
        raise SystemExit(f"the viewer did not start: {line!r}")
    return process, match.group(1)


def page_times(client: httpx.Client, url: str, runs: int) -> tuple[float, float]:
    """(median server time, median client time) in seconds; the first request warms up."""
    client.get(url).raise_for_status()
    server, seen = [], []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        seen.append(time.perf_counter() - started)
        response.raise_for_status()
        timing = re.search(r"dur=([\d.]+)", response.headers.get("server-timing", ""))
        if timing is None:
            raise SystemExit(f"{url} sent no Server-Timing header")
        server.append(float(timing.group(1)) / 1000)
    return statistics.median(server), statistics.median(seen)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--writes", type=int, default=2000, help="writes per round of the write benchmark")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="runner-bench-viewer-"))
    os.environ["RUNNER_HOME"] = str(home)

    started = time.perf_counter()
    seed(home / "runner.db", args.executions)
    print(f"seeded {args.executions:,} executions in {time.perf_counter() - started:.1f} s "
          f"({(home / 'runner.db').stat().st_size / 2**20:.0f} MB)", file=sys.stderr)

    rows: list[tuple[str, float, float, float | None, str]] = []
    budget = 0.100  # the target, as a baseline: ratio <= 1 means under 100 ms
    process, url = serve(home)
    try:
        with httpx.Client(timeout=30) as client:
            for name, path in (("executions page", "/executions"),
                               ("full-text query", "/executions?q=ZeroDivisionError"),
                               ("query + filter", "/executions?q=matrix+solve&status=ok&backend=docker"),
                               ("sorted by duration", "/executions?sort=duration&order=desc"),
                               ("agent runs page", "/runs")):
                server, seen = page_times(client, url + path, args.runs)
                target = 1.0 if name in ("executions page", "full-text query") else None
                rows.append((f"{name} (server)", server, budget, target, "100 ms"))
                rows.append((f"{name} (client)", seen, budget, None, "100 ms"))
            # A page far down the list costs what the first does (keyset, not OFFSET).
            page = client.get(url + "/executions").text
            for _ in range(20):
                found = re.search(r'href="([^"]+)" rel="next"', page)
                assert found, "no next page"
                next_url = url + found.group(1).replace("&amp;", "&")
                page = client.get(next_url).text
            server, _ = page_times(client, next_url, args.runs)
            rows.append(("21st page (server)", server, budget, None, "100 ms"))
    finally:
        process.terminate()
        process.wait(timeout=10)

    now, then = write_ratio(home, args.writes, rounds=5)
    rows.append(("write one execution", now, then, 1.0, "schema 3 write path"))
    missed = report(rows)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
