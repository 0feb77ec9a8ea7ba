"""Sessions: state shared across blocks, per-block limits, a total budget, restarts."""

from __future__ import annotations

import threading
import time

import pytest

from runner import Limits, Status
from runner.errors import SandboxClosedError


def test_state_carries_across_blocks_but_not_into_plain_runs(sandbox):
    with sandbox.session() as session:
        assert session.run("from sympy import symbols\nx = symbols('x')\ncount = 1").ok
        r = session.run("count += 1\nprint(count, x**2)")
        assert r.status == Status.OK and r.stdout == "2 x**2\n"
        r = session.run("def double(n):\n    return 2 * n\n")
        assert session.run("print(double(count))").stdout == "4\n"
    assert sandbox.run("print(count)").status == Status.ERROR


def test_each_block_reports_its_own_output_and_errors(sandbox):
    with sandbox.session() as session:
        first = session.run("print('one')")
        second = session.run("print('two')\n1/0")
        third = session.run("print('three')")
    assert (first.stdout, second.stdout, third.stdout) == ("one\n", "two\n", "three\n")
    assert second.status == Status.ERROR and second.error.type == "ZeroDivisionError"
    assert "1/0" in second.error.traceback
    assert third.ok


def test_a_timeout_ends_the_state_and_the_next_block_starts_fresh(sandbox):
    with sandbox.session(limits=Limits(timeout_s=1)) as session:
        assert session.run("kept = 42").ok
        killed = session.run("while True: pass")
        assert killed.status == Status.TIMEOUT
        assert "state is lost" in killed.error.message
        after = session.run("print(kept)")
        assert after.status == Status.ERROR and after.error.type == "NameError"
        # the block that misses the name says why it is missing, and what a model reads
        # (the traceback) ends with it too
        lost = "the session's state was lost: block 2 ended timeout: wall-clock time limit"
        assert lost in after.error.message and lost in after.error.traceback.splitlines()[-1]
        assert session.restarts == 1
        assert "state was lost" not in session.run("print(undefined_name)").error.message
        assert session.run("print('works')").stdout == "works\n"


def test_memory_limit_is_per_session_and_recoverable(sandbox):
    with sandbox.session(limits=Limits(memory_mb=64)) as session:
        big = session.run("x = bytearray(512 * 1024 * 1024)")
        assert big.status == Status.MEMORY_LIMIT
        assert session.run("print('still here')").stdout == "still here\n"


def test_denial_in_one_block_does_not_taint_the_next(restricted):
    with restricted.session() as session:
        assert session.run("import os").status == Status.DENIED
        assert session.run("print(1)").ok


def test_the_budget_stops_further_blocks(sandbox):
    with sandbox.session(limits=Limits(timeout_s=1), budget_s=1.5) as session:
        assert session.run("while True: pass").status == Status.TIMEOUT
        second = session.run("while True: pass")
        assert second.status == Status.TIMEOUT
        assert second.duration_ms < 900  # only the rest of the budget was granted
        third = session.run("print(1)")
        assert third.status == Status.TIMEOUT
        assert "budget" in third.error.message


def test_blocks_are_logged_with_the_session_id(sandbox):
    with sandbox.session() as session:
        r = session.run("print('logged')")
    record = sandbox.log_store.get_execution(r.id)
    assert record.meta["session"] == session.id
    assert record.meta["block"] == 0


def test_closed_session_refuses_blocks(sandbox):
    session = sandbox.session()
    session.close()
    with pytest.raises(SandboxClosedError):
        session.run("print(1)")


def test_sessions_never_starve_plain_runs_of_workers():
    from runner import Sandbox

    with Sandbox(log_store=False, pool_size=1) as sb:
        sessions = [sb.session(), sb.session()]
        for n, session in enumerate(sessions):
            assert session.run(f"x = {n}").ok
        # Both sessions hold workers, yet plain runs still get one.
        assert sb.run("print('plain')", limits=Limits(timeout_s=5)).stdout == "plain\n"
        assert [s.run("print(x)").stdout for s in sessions] == ["0\n", "1\n"]
        for session in sessions:
            session.close()


def test_closing_the_sandbox_closes_its_sessions_and_their_workers():
    import os

    from runner import Sandbox

    sb = Sandbox(log_store=False)
    session = sb.session()
    assert session.run("x = 1").ok
    worker = session._backend_session._worker
    sb.close()
    with pytest.raises(SandboxClosedError):
        session.run("print(x)")
    with pytest.raises(ProcessLookupError):
        os.kill(worker.pid, 0)


def test_a_worker_lost_mid_block_counts_its_time_and_one_restart():
    import os
    import signal
    import threading

    from runner import Sandbox
    from runner.backends import worker_backend

    with Sandbox(log_store=False) as sb:
        session = sb.session(limits=Limits(timeout_s=1), budget_s=60)
        assert session.run("x = 1").ok
        worker = session._backend_session._worker
        threading.Timer(0.3, os.killpg, (worker.pid, signal.SIGKILL)).start()
        lost = session.run("while True: pass", limits=Limits(timeout_s=3))
        assert lost.status == Status.CRASHED and "worker" in lost.error.message
        assert lost.duration_ms >= 250  # the time was spent, and the budget counts it
        assert session.used_s >= 0.25
        after = session.run("print(x)")
        assert after.status == Status.ERROR and after.error.type == "NameError"
        assert session.restarts == 1
        assert worker_backend.OUTER_GRACE_S > 0
        session.close()


# --- threads ---------------------------------------------------------------------------


def test_blocks_from_several_threads_are_serialised(sandbox):
    """Each block reads and writes the shared namespace; interleaved blocks would lose
    increments or fail (the worker serves one request at a time)."""
    threads, per_thread = 4, 8
    with sandbox.session() as session:
        assert session.run("n = 0\nseen = []").ok
        failures: list[str] = []

        def work(t: int) -> None:
            for i in range(per_thread):
                try:
                    r = session.run(f"n += 1\nseen.append(({t}, {i}))\nprint(n)")
                except Exception as exc:  # noqa: BLE001 - any exception is the failure here
                    failures.append(repr(exc))
                    continue
                if not r.ok:
                    failures.append(f"{r.status}: {r.error}")

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert failures == []
        final = session.run("print(n, len(set(seen)))")
        assert final.stdout == f"{threads * per_thread} {threads * per_thread}\n"
        assert session.blocks == threads * per_thread + 2
        assert session.restarts == 0


def test_close_from_another_thread_waits_for_the_block_in_progress(sandbox):
    session = sandbox.session()
    assert session.run("x = 1").ok
    started = threading.Event()
    box: dict[str, object] = {}

    def long_block() -> None:
        started.set()
        box["result"] = session.run("total = 0\nfor i in range(3_000_000):\n    total += i\n"
                                    "print(total)", limits=Limits(timeout_s=30))

    runner_thread = threading.Thread(target=long_block)
    runner_thread.start()
    started.wait()
    deadline = time.monotonic() + 10
    while not session._lock.locked() and time.monotonic() < deadline:  # the block has begun
        time.sleep(0.001)
    session.close()  # must not pull the worker from under the running block
    runner_thread.join()
    result = box["result"]
    assert result.status == Status.OK and result.stdout == f"{sum(range(3_000_000))}\n", result
    with pytest.raises(SandboxClosedError):
        session.run("print(x)")
