"""Sandbox behaviour beyond the contract: logging, packages, resilience, lifecycle."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time

import pytest

from runner import Limits, RunnerError, Sandbox, Status
from runner.errors import SandboxClosedError, UnknownBackendError
from runner.logs import LogStore


def test_every_run_is_logged_with_request_and_result(tmp_path):
    store = LogStore(tmp_path / "log.db")
    with Sandbox(log_store=store, source="test", package_allowlist=["numpy"]) as sb:
        ok = sb.run("print('logged')", limits=Limits(timeout_s=3))
        bad = sb.run("print('refused')", packages=["runner-not-on-the-list"])
    records = store.list_executions(limit=None)
    assert [r.id for r in records] == [bad.id, ok.id]
    record = store.get_execution(ok.id)
    assert record.request.code == "print('logged')"
    assert record.request.limits.timeout_s == 3
    assert record.result == ok
    assert record.source == "test"
    assert store.get_execution(bad.id).result.status == Status.DENIED
    store.close()


def test_a_log_write_failure_never_loses_the_result(tmp_path, monkeypatch):
    store = LogStore(tmp_path / "log.db")

    def broken(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    with Sandbox(log_store=store) as sb:
        monkeypatch.setattr(store, "record_execution", broken)
        result = sb.run("print('still here')")
    assert result.status == Status.OK and result.stdout == "still here\n"
    store.close()


def test_log_store_can_be_turned_off(tmp_path):
    with Sandbox(log_store=False) as sb:
        assert sb.log_store is None
        assert sb.run("print(1)").ok


def test_unknown_backend_is_a_runner_error_with_a_fix():
    with pytest.raises(UnknownBackendError) as info:
        Sandbox(backend="nope")
    assert isinstance(info.value, RunnerError)
    assert "restricted" in str(info.value)


def test_closed_sandbox_refuses_runs():
    sb = Sandbox(log_store=False)
    sb.close()
    with pytest.raises(SandboxClosedError):
        sb.run("print(1)")
    sb.close()  # idempotent


def test_close_stops_every_worker_process():
    sb = Sandbox(log_store=False, pool_size=2)
    barrier = threading.Barrier(2)

    def run():
        barrier.wait()
        sb.run("n = 0\nfor i in range(200000):\n    n += i\n")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pids = [w.pid for w in sb._backend.pools()[0]._idle]
    assert pids
    sb.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_killed_worker_is_replaced_and_the_run_reports_crashed():
    with Sandbox(log_store=False, pool_size=1) as sb:
        assert sb.run("print(1)").ok
        worker = sb._backend.pools()[0]._idle[0]
        killer = threading.Timer(0.5, os.killpg, (worker.pid, signal.SIGKILL))
        killer.start()
        result = sb.run("while True: pass", limits=Limits(timeout_s=5))
        killer.join()
        assert result.status == Status.CRASHED
        assert "worker" in result.error.message
        after = sb.run("print('replaced')")
        assert after.ok and after.stdout == "replaced\n"
        assert sb._backend.pools()[0]._idle[0].pid != worker.pid


def test_a_wedged_worker_hits_the_outer_deadline(monkeypatch):
    from runner.backends import worker_backend

    monkeypatch.setattr(worker_backend, "OUTER_GRACE_S", 0.5)
    with Sandbox(log_store=False, pool_size=1) as sb:
        assert sb.run("print(1)").ok
        worker = sb._backend.pools()[0]._idle[0]
        # The worker stops answering entirely (its process group: the process the host
        # started and, in the restricted tier's jail, the jail's processes inside it).
        os.killpg(worker.pid, signal.SIGSTOP)
        started = time.monotonic()
        result = sb.run("print(1)", limits=Limits(timeout_s=1))
        assert time.monotonic() - started < 10
        assert result.status == Status.CRASHED
        assert "stopped answering" in result.error.message
        assert sb.run("print(2)").stdout == "2\n"


@pytest.mark.parametrize("requirement, fragment", [
    ("numpy", "not available in the restricted backend"),
    ("--index-url=http://evil", "pip option"),
    ("sympy @ https://evil.example/sympy.whl", "URL"),
    ("git+https://evil.example/x.git", "not a valid requirement"),
    ("sympy==0.1", "has sympy"),
    ("", "empty"),
])
def test_refused_packages_are_denied_with_a_reason(restricted, requirement, fragment):
    result = restricted.run("print(1)", packages=[requirement])
    assert result.status == Status.DENIED
    assert fragment in result.error.message
    assert result.stdout == ""


def test_allowed_packages_record_the_version_that_ran(restricted):
    import sympy

    result = restricted.run("import sympy\nprint(sympy.__name__)", packages=["sympy>=1.0"])
    assert result.ok
    assert result.packages == {"sympy": sympy.__version__}


def test_runs_beyond_the_pool_size_queue_rather_than_fail():
    with Sandbox(log_store=False, pool_size=1) as sb:
        results: list = []
        threads = [threading.Thread(target=lambda i=i: results.append(sb.run(f"print({i})")))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(r.stdout for r in results) == [f"{i}\n" for i in range(4)]
        assert len({id(w) for w in sb._backend.pools()[0]._idle}) == 1


def test_no_child_process_outlives_a_timed_out_run(restricted):
    result = restricted.run("while True: pass", limits=Limits(timeout_s=1))
    assert result.status == Status.TIMEOUT
    workers = [(w.pid, w.info["forkserver"]) for w in restricted._backend.pools()[0]._idle]
    assert workers
    for pid, forkserver in workers:
        # At most the pre-forked spare child waits for the next request. Children of
        # earlier runs were killed when they reported; give the kernel a moment to
        # finish tearing them down, and do not count zombies the worker reaps lazily.
        def children(pid: int = pid, forkserver: int = forkserver) -> list[int]:
            return [c for c in _live_children_of(pid) if c != forkserver]  # it is permanent

        deadline = time.monotonic() + 3
        while len(children()) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(children()) <= 1, children()


def _live_children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            children = [int(p) for p in handle.read().split()]
    except FileNotFoundError:
        return []
    live = []
    for child in children:
        try:
            with open(f"/proc/{child}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            continue
        if state not in ("Z", "X"):
            live.append(child)
    return live


@pytest.mark.parametrize("code, limits, status", [
    ("import time\ntime.sleep(1.5)", Limits(), Status.OK),
    ("while True:\n    pass", Limits(timeout_s=1.5), Status.TIMEOUT),
])
def test_started_at_is_when_the_run_began_not_when_it_ended(tmp_path, code, limits, status):
    """A run of 1.5 s (ending ok, or at its time limit) started when it was asked for: its
    started_at is before the call returned by its duration, in the result and in the log."""
    from datetime import datetime, timezone

    with LogStore(tmp_path / "log.sqlite") as store, Sandbox(log_store=store) as box:
        box.warm()
        asked = datetime.now(timezone.utc)
        result = box.run(code, limits=limits)
        returned = datetime.now(timezone.utc)
        logged = store.get_execution(result.id).result
    assert result.status is status and result.duration_ms >= 1400
    for started in (result.started_at, logged.started_at):
        assert asked <= started <= returned
        # (generous: a loaded machine may wait before the run, never 1.4 s after its start)
        assert (returned - started).total_seconds() >= 1.4


@pytest.mark.parametrize("options, message, fix", [
    ({"backend": "dcoker"}, "unknown backend 'dcoker'", "did you mean 'docker'?"),
    ({"backend": "jail", "log": False}, "the jail backend has no option 'log'",
     "the jail backend takes: pool_size"),
    ({"backend": "docker", "use_docker": True}, "the docker backend has no option 'use_docker'",
     "backend='docker' runs blocks in Docker"),
])
def test_a_mistyped_tier_or_option_is_a_runner_error_before_anything_starts(options, message, fix):
    """Mistakes carried over from other tools' executors are said at construction, with
    the fix, for a Sandbox and for each framework's executor that would open one."""
    from runner.integrations.common import LazyBlocks

    with pytest.raises(RunnerError) as raised:
        Sandbox(**options)
    assert message in str(raised.value) and fix in raised.value.fix
    backend = options.pop("backend")
    with pytest.raises(RunnerError) as raised:
        LazyBlocks("ag2", None, backend, options, limits=Limits(), packages=(), functions=None)
    assert message in str(raised.value) and fix in raised.value.fix


def test_a_sandbox_given_a_source_keeps_it_for_integration_runs(tmp_path):
    """A run whose meta names an integration is logged under it when the sandbox's source
    is the default; a sandbox the caller named keeps its own."""
    with LogStore(tmp_path / "log.sqlite") as store:
        with Sandbox(log_store=store) as plain, Sandbox(log_store=store, source="myapp") as named:
            through = plain.run("pass", meta={"integration": "ag2"})
            own = named.run("pass", meta={"integration": "ag2"})
            direct = plain.run("pass")
        sources = {r.id: r.source for r in store.list_executions(limit=None)}
    assert (sources[through.id], sources[own.id], sources[direct.id]) == ("ag2", "myapp", "api")


@pytest.mark.parametrize("backend", ["jail", "restricted"])
def test_a_cancelled_run_stops_at_once_and_is_logged_as_cancelled(tmp_path, backend):
    """Cancelled from another thread, a run that would spin for its whole 60 s limit is
    stopped then: crashed with the error type Cancelled, logged so (it reads as
    cancelled), and the sandbox's next run, and a session's next block, go on afresh."""
    from runner.cancellation import Cancellation
    from runner.logs.execution_text import status_label

    with LogStore(tmp_path / "log.sqlite") as store, Sandbox(backend, log_store=store) as box:
        box.warm()
        for target in ("run", "session"):
            cancel = Cancellation()
            timer = threading.Timer(1.0, cancel.cancel)
            timer.start()
            began = time.monotonic()
            if target == "run":
                result = box.run("while True:\n    pass", limits=Limits(timeout_s=60), cancel=cancel)
                after = box.run("print('next')")
            else:
                session = box.session(limits=Limits(timeout_s=60))
                session.run("kept = 1")
                result = session.run("while True:\n    pass", cancel=cancel)
                after = session.run("try:\n    print(kept == 1)\nexcept NameError:\n    print(False)")
                session.close()
            took = time.monotonic() - began
            timer.cancel()
            assert result.status is Status.CRASHED and result.error.type == "Cancelled", result
            assert 1.0 <= took < 30 and result.duration_ms >= 900
            logged = store.get_execution(result.id).result
            assert status_label(logged.status, logged.error.type) == "cancelled"
            assert after.ok and after.stdout == ("next\n" if target == "run" else "False\n")
        # cancelled before it starts: it never runs
        early = Cancellation()
        early.cancel()
        assert box.run("print('ran')", cancel=early).error.type == "Cancelled"
