"""Load and faults on every tier: many mixed runs from many threads, and a log database
that stops taking writes in the middle of them.

What must hold under load: every run gets its own status and its own output (no result
crosses to another run's caller), and every execution is in the log. The mix is fixed
by the run's index, so a failure names the run that went wrong. Timeouts are short and
few, so each tier's thousand runs stay well under a minute on two cores.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import BACKENDS, backend_options
from runner import ExecutionResult, Limits, Sandbox, Status
from runner.logs import LogStore
from runner.logs.store import SPOOL_NAME

RUNS = 1000
THREADS = 8
TIMEOUT = Limits(timeout_s=0.25)
SMALL_MEMORY = Limits(memory_mb=64)
REFUSED_PACKAGE = ("evil @ https://example.invalid/evil.whl",)  # refused before running


@dataclass(frozen=True)
class Case:
    """One run of the mix and what its result must be."""

    index: int
    kind: str
    code: str
    limits: Limits | None
    packages: tuple[str, ...]
    status: Status
    stdout: str
    error_type: str | None


def case(index: int, backend: str) -> Case:
    """Out of every 20 runs: 12 ok, 4 error, 2 denied, 1 timeout, 1 memory."""
    slot = index % 20
    if slot < 12:
        return Case(index, "ok", f"print({index} * 3)", None, (), Status.OK, f"{index * 3}\n", None)
    if slot < 16:
        return Case(index, "error", f"print('before {index}')\n1 / 0", None, (), Status.ERROR,
                    f"before {index}\n", "ZeroDivisionError")
    if slot < 18:
        if backend == "restricted":  # the policy refuses the import, so the print never runs
            return Case(index, "denied", f"import socket\nprint('never {index}')", None, (),
                        Status.DENIED, "", None)
        return Case(index, "denied", f"print('never {index}')", None, REFUSED_PACKAGE,
                    Status.DENIED, "", None)
    if slot == 18:
        # Output printed before the kill is kept; the restricted tier has no sleep to wait in.
        wait = "while True:\n    pass" if backend == "restricted" else "import time\ntime.sleep(30)"
        return Case(index, "timeout", f"print('start {index}', flush=True)\n{wait}", TIMEOUT, (),
                    Status.TIMEOUT, f"start {index}\n", None)
    return Case(index, "memory", f"print('alloc {index}', flush=True)\nx = bytearray(1 << 30)",
                SMALL_MEMORY, (), Status.MEMORY_LIMIT, f"alloc {index}\n", None)


def check(c: Case, r: ExecutionResult) -> str | None:
    """What is wrong with this result for this case, or None."""
    seen = (f"run {c.index} ({c.kind}): status={r.status!s} stdout={r.stdout[:100]!r} "
            f"error={r.error!r}"[:400])
    if r.status != c.status:
        return seen
    if r.stdout != c.stdout:  # also: refused code printed nothing
        return seen
    if c.error_type is not None and (r.error is None or r.error.type != c.error_type):
        return seen
    return None


def run_all(sandbox: Sandbox, cases: list[Case],
            during: Callable[[int], None] | None = None) -> list[ExecutionResult]:
    """Run the cases from THREADS threads; `during(i)` is called before case i starts."""
    def one(c: Case) -> ExecutionResult:
        if during is not None:
            during(c.index)
        return sandbox.run(c.code, limits=c.limits, packages=c.packages,
                           meta={"load_case": c.index})

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, cases))


@pytest.mark.slow
def test_a_thousand_mixed_runs_from_eight_threads(sandbox: Sandbox) -> None:
    cases = [case(i, sandbox.backend) for i in range(RUNS)]
    results = run_all(sandbox, cases)

    wrong = [problem for c, r in zip(cases, results, strict=True) if (problem := check(c, r))]
    assert not wrong, f"{len(wrong)} of {RUNS} runs came back wrong, e.g.:\n" + "\n".join(wrong[:10])
    assert len({r.id for r in results}) == RUNS

    store = sandbox.log_store
    assert store is not None
    unlogged = []
    for c, r in zip(cases, results, strict=True):
        try:
            record = store.get_execution(r.id)
        except Exception as exc:  # noqa: BLE001 - a missing record is the failure reported
            unlogged.append(f"run {c.index}: {exc}")
            continue
        if (record.result.status != r.status or record.result.stdout != r.stdout
                or record.meta.get("load_case") != c.index):
            unlogged.append(f"run {c.index}: logged as {record.result.status!s} "
                            f"{record.result.stdout[:60]!r} {record.meta}")
    assert not unlogged, f"{len(unlogged)} runs are missing or wrong in the log:\n" + \
        "\n".join(unlogged[:10])


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_survive_a_log_database_that_stops_taking_writes(backend: str, tmp_path: Path
                                                                 ) -> None:
    """Another process holds the write lock for a while in the middle of the runs: those
    results are spooled, the caller gets every result, and the next open imports them."""
    db = tmp_path / "log.sqlite"
    store = LogStore(db, busy_timeout_s=0.05)
    cases = [case(i, backend) for i in range(0, 240, 4)]  # ok, error and denied runs
    lock_at, unlock_at = 60, 180
    blocker: list[sqlite3.Connection] = []
    gate = threading.Lock()

    def lock_midway(index: int) -> None:
        with gate:
            if index >= lock_at and not blocker and index < unlock_at:
                conn = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
                conn.execute("BEGIN IMMEDIATE")  # the write lock, held until rollback
                blocker.append(conn)
            elif index >= unlock_at and blocker and blocker[0].in_transaction:
                blocker[0].rollback()

    try:
        with Sandbox(backend=backend, log_store=store, **backend_options(backend)) as sandbox:
            results = run_all(sandbox, cases, during=lock_midway)
    finally:
        for conn in blocker:
            conn.rollback()
            conn.close()
    store.close()
    assert blocker, "the database was never locked: the test did not test anything"

    wrong = [problem for c, r in zip(cases, results, strict=True) if (problem := check(c, r))]
    assert not wrong, "\n".join(wrong[:10])
    spool = db.parent / SPOOL_NAME
    assert spool.exists(), "nothing was spooled while the database was locked"
    spooled = len(spool.read_text().splitlines())
    assert 0 < spooled < len(cases)

    with LogStore(db) as reopened:  # imports the spool
        for c, r in zip(cases, results, strict=True):
            record = reopened.get_execution(r.id)
            assert record.result.status == r.status and record.result.stdout == r.stdout, c
            assert record.meta.get("load_case") == c.index
        assert reopened.count_executions() == len(cases)
    assert not spool.exists()
