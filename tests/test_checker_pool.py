"""The checker's worker processes: starting from a large parent, and telling a process that
could not start from one that ended later. Workers are forked, so a function patched in
the parent before a pool starts is what its workers run (the tests that patch `compare`
start in milliseconds: nothing imports sympy)."""

from __future__ import annotations

import mmap
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from runner.math import Checker, CheckerUnavailableError, checker_worker
from runner.math.checker_pool import CheckerPool, Failure
from runner.math.checker_worker import CompareReply, CompareRequest


def _request(n: int = 1) -> CompareRequest:
    return CompareRequest(id=n, gold="x+1", candidate="1+x", soft_timeout_s=5)


def _started_at_once(request: CompareRequest) -> CompareReply:
    """`compare` for a worker that needs no libraries: its start takes milliseconds."""
    return CompareReply(id=request.id, equal=True, rule="symbolic", reason="stub")


def _warms_nothing(forms: tuple[str, ...]) -> None:
    """`warm` that imports nothing either."""


def _dies_as_it_takes_the_request(request: CompareRequest) -> CompareReply:
    os._exit(7)


def _escapes(request: CompareRequest) -> CompareReply:
    raise checker_worker.SoftTimeout  # a BaseException, as a timer firing too late would be


def _cannot_import(request: CompareRequest) -> CompareReply:
    raise ModuleNotFoundError("No module named 'math_verify'")


@pytest.fixture
def stub_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers that start and warm up in milliseconds, and answer every pair as equal."""
    monkeypatch.setattr(checker_worker, "compare", _started_at_once)
    monkeypatch.setattr(checker_worker, "warm", _warms_nothing)


@pytest.fixture
def busy_parent() -> Iterator[None]:
    """Python threads busy in the parent, as a caller's are: pebble's threads then read
    the workers' messages late, which is when it confuses a crash with a failed start."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    threads = [threading.Thread(target=spin, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join()


def test_a_worker_forked_from_a_large_process_starts_and_keeps_a_memory_limit():
    # A parent with a lot of address space mapped (a Ray driver maps gigabytes, threads
    # map stacks and malloc arenas): reserved, never touched, so it costs no memory.
    reserved = mmap.mmap(-1, 1536 << 20, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    try:
        with Checker(workers=1, memory_mb=512) as checker:
            assert checker.check("x+1", "1+x").equal
            (pid,) = checker._pool.worker_pids()
            with open(f"/proc/{pid}/limits") as limits:
                line = next(row for row in limits if row.startswith("Max address space"))
            soft = int(line.split()[3])  # a number: there is a limit
            assert soft >= (1536 + 512) << 20  # what it inherited, and 512 MB more
    finally:
        reserved.close()


def test_a_worker_that_cannot_import_its_libraries_says_why(monkeypatch):
    monkeypatch.setattr(checker_worker, "compare", _cannot_import)
    with Checker(workers=1) as checker:
        with pytest.raises(CheckerUnavailableError) as caught:
            checker.check("x+1", "1+x")
        assert "No module named 'math_verify'" in str(caught.value)
        assert "math-verify" in (caught.value.fix or "")
        with pytest.raises(CheckerUnavailableError):  # and so does the next one
            checker.check("x+2", "2+x")


def test_a_worker_killed_while_idle_is_replaced_and_the_request_answered(stub_worker):
    # The OOM killer or a stray signal, not a failed start: pebble reports it the same way.
    pool = CheckerPool(1)
    try:
        assert isinstance(pool.compare(_request(1), hard_timeout_s=30), CompareReply)
        (pid,) = pool.worker_pids()
        (slot,) = pool._slots
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while slot.pool.active and time.monotonic() < deadline:  # until pebble has seen it
            time.sleep(0.05)
        reply = pool.compare(_request(2), hard_timeout_s=30)
        assert isinstance(reply, CompareReply) and reply.equal, reply
        assert pid not in pool.worker_pids()
    finally:
        pool.close()


def test_a_worker_that_dies_as_it_takes_a_request_is_a_crash_not_a_failed_start(
        stub_worker, monkeypatch, busy_parent):
    # pebble reads the worker's acknowledgement of the request and sees the process gone
    # in two threads; when the second comes first it reports a broken pool, as for a
    # process that never started (about one time in fifteen here, before the fix). When
    # it reads the previous task's result only after, it blames that task and the
    # request runs out its time: a timeout, within the limit.
    monkeypatch.setattr(checker_worker, "run", _dies_as_it_takes_the_request)
    pool = CheckerPool(1)
    try:
        for n in range(15):
            outcome = pool.compare(_request(n), hard_timeout_s=1.0)
            assert isinstance(outcome, Failure), outcome
            assert outcome.rule in ("crashed", "timeout"), outcome
    finally:
        pool.close()


def test_an_error_that_escapes_the_worker_is_a_verdict_not_an_exception(stub_worker,
                                                                       monkeypatch):
    monkeypatch.setattr(checker_worker, "run", _escapes)
    pool = CheckerPool(1)
    try:
        outcome = pool.compare(_request(), hard_timeout_s=30)
        assert isinstance(outcome, Failure) and outcome.rule == "error", outcome
        assert "SoftTimeout" in outcome.reason
        assert pool.replacements == 1  # that process is not trusted again
    finally:
        pool.close()
