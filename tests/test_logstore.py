"""The log store against real SQLite files: schema, round trips, queries, concurrency,
crash safety, the spool for failed writes, and the text renderings."""

from __future__ import annotations

import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from runner.errors import ConfigurationError, LogStoreError, NotFoundError
from runner.ids import new_id
from runner.logs import (
    MIGRATIONS,
    SPOOL_NAME,
    ExecutionRecord,
    LogStore,
    Migration,
    render_execution,
    render_execution_list,
)
from runner.logs.migrations import check_migrations, latest_version, split_statements
from runner.types import ErrorInfo, ExecutionRequest, ExecutionResult, Limits, Resources, Status

T0 = datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)


def make_pair(
    *,
    id: str | None = None,
    status: Status = Status.OK,
    backend: str = "restricted",
    started_at: datetime = T0,
    code: str = "print('hi')",
) -> tuple[ExecutionRequest, ExecutionResult]:
    request = ExecutionRequest(code=code, limits=Limits(timeout_s=5), packages=())
    result = ExecutionResult(
        id=id or new_id(),
        backend=backend,
        status=status,
        exit_code=0,
        stdout="hi\n",
        started_at=started_at,
        limits=Limits(timeout_s=5),
    )
    return request, result


def full_pair() -> tuple[ExecutionRequest, ExecutionResult]:
    """Every field set to something other than its default."""
    request = ExecutionRequest(
        code="import math\nprint(math.pi)\nraise ValueError('bad')\n",
        limits=Limits(timeout_s=3.5, cpu_s=2, memory_mb=128, max_output_bytes=4096,
                      max_processes=4, max_open_files=32, max_file_size_mb=2),
        packages=("sympy>=1.12", "numpy==1.26.4"),
    )  # fmt: skip
    result = ExecutionResult(
        id=new_id(),
        backend="docker",
        status=Status.ERROR,
        exit_code=1,
        stdout="3.14159\n" + "ü" * 10,
        stderr="warn: ;'\" \x00 odd\n",
        stdout_truncated=True,
        stderr_truncated=True,
        error=ErrorInfo(type="ValueError", message="bad", traceback="Traceback (most recent call last):\n  bad"),
        return_value={"answer": [1, 2.5, None, "x"], "nested": {"ok": True}},
        duration_ms=1234,
        # The applied limits differ from the requested ones (policy may cap them).
        limits=Limits(timeout_s=3, cpu_s=2, memory_mb=128, max_output_bytes=4096,
                      max_processes=4, max_open_files=32, max_file_size_mb=2),
        resources=Resources(cpu_ms=987, max_rss_kb=54321),
        packages={"sympy": "1.12", "numpy": "1.26.4"},
        started_at=T0,
    )  # fmt: skip
    return request, result


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "runner.db"


@pytest.fixture
def store(db: Path) -> Iterator[LogStore]:
    with LogStore(db) as s:
        yield s


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- round trip and queries ------------------------------------------------------------


def test_full_result_round_trips_every_field(store: LogStore) -> None:
    request, result = full_pair()
    store.record_execution(request, result, source="cli", meta={"turn": 3, "tags": ["a"]})
    record = store.get_execution(result.id)
    assert record == ExecutionRecord(request=request, result=result, source="cli", meta={"turn": 3, "tags": ["a"]})
    # Field by field too, so a failure says which one broke.
    assert record.result.model_dump() == result.model_dump()
    assert record.request.model_dump() == request.model_dump()
    assert record.id == result.id


def test_defaults_round_trip(store: LogStore) -> None:
    request = ExecutionRequest(code="")
    result = ExecutionResult(id=new_id(), backend="restricted", status=Status.TIMEOUT)
    store.record_execution(request, result)
    record = store.get_execution(result.id)
    assert record.request == request
    assert record.result == result
    assert record.source == "api"
    assert record.meta == {}


def test_columns_are_plain_sql_values(store: LogStore, db: Path) -> None:
    """Other SQLite tools read the table, so the stored values must be the documented ones."""
    request, result = full_pair()
    store.record_execution(request, result, source="demo")
    with raw(db) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute("SELECT * FROM executions").fetchone()
    assert row["status"] == "error"
    assert row["source"] == "demo"
    assert row["started_at"] == "2024-05-01T12:00:00.123456+00:00"
    assert json.loads(row["packages_json"]) == ["sympy>=1.12", "numpy==1.26.4"]
    assert json.loads(row["package_versions_json"]) == {"numpy": "1.26.4", "sympy": "1.12"}
    assert json.loads(row["limits_json"])["timeout_s"] == 3
    assert row["stdout_truncated"] == 1
    assert row["cpu_ms"] == 987
    assert row["meta_json"] == "{}"


def test_non_utc_and_naive_start_times_are_stored_as_utc(store: LogStore) -> None:
    plus_two = timezone(timedelta(hours=2))
    _, aware = make_pair(started_at=datetime(2024, 5, 1, 14, 0, tzinfo=plus_two))
    _, naive = make_pair(started_at=datetime(2024, 5, 1, 11, 0))
    store.record_execution(ExecutionRequest(code="a"), aware)
    store.record_execution(ExecutionRequest(code="b"), naive)
    got = store.get_execution(aware.id).result.started_at
    assert got == aware.started_at and got.utcoffset() == timedelta(0)
    assert store.get_execution(naive.id).result.started_at == datetime(2024, 5, 1, 11, 0, tzinfo=timezone.utc)


def test_unserialisable_meta_and_return_value_are_stored_as_repr(store: LogStore) -> None:
    class Odd:
        def __repr__(self) -> str:
            return "<odd>"

    request, result = make_pair()
    result = result.model_copy(update={"return_value": Odd()})
    store.record_execution(request, result, meta={"obj": Odd()})
    record = store.get_execution(result.id)
    assert record.meta == {"obj": "<odd>"}
    assert record.result.return_value == "<odd>"
    assert not store.spool_path.exists()


def test_filters_by_status_backend_and_source(store: LogStore) -> None:
    cases = [
        (Status.OK, "restricted", "cli"),
        (Status.ERROR, "restricted", "api"),
        (Status.OK, "docker", "api"),
        (Status.TIMEOUT, "docker", "demo"),
    ]
    ids = {}
    for i, (status, backend, source) in enumerate(cases):
        request, result = make_pair(status=status, backend=backend, started_at=T0 + timedelta(seconds=i))
        store.record_execution(request, result, source=source)
        ids[(status, backend, source)] = result.id

    def found(**filters: object) -> set[str]:
        return {r.id for r in store.list_executions(**filters)}  # type: ignore[arg-type]

    assert found(status="ok") == {ids[cases[0]], ids[cases[2]]}
    assert found(status=Status.TIMEOUT) == {ids[cases[3]]}
    assert found(backend="docker") == {ids[cases[2]], ids[cases[3]]}
    assert found(source="api") == {ids[cases[1]], ids[cases[2]]}
    assert found(status="ok", backend="docker") == {ids[cases[2]]}
    assert found(status="ok", source="demo") == set()
    assert found() == set(ids.values())
    assert store.count_executions() == 4
    assert store.count_executions(status="ok") == 2
    assert store.count_executions(backend="docker", source="demo") == 1


def test_unknown_status_filter_and_bad_limit_are_refused(store: LogStore) -> None:
    with pytest.raises(ConfigurationError, match="memory_limit"):
        store.list_executions(status="fine")
    with pytest.raises(ConfigurationError):
        store.list_executions(limit=0)


def test_list_is_newest_first_and_limited(store: LogStore) -> None:
    # Inserted in shuffled time order: the order must come from started_at, not insertion.
    offsets = [3, 0, 4, 1, 2]
    by_offset = {}
    for offset in offsets:
        request, result = make_pair(started_at=T0 + timedelta(minutes=offset))
        store.record_execution(request, result)
        by_offset[offset] = result.id
    newest_first = [by_offset[o] for o in sorted(offsets, reverse=True)]
    assert [r.id for r in store.list_executions()] == newest_first
    assert [r.id for r in store.list_executions(limit=2)] == newest_first[:2]
    assert len(store.list_executions(limit=None)) == 5


def test_same_start_time_orders_by_id(store: LogStore) -> None:
    ids = [new_id() for _ in range(3)]
    for id_ in (ids[1], ids[0], ids[2]):  # not in id order, so insertion order cannot pass
        store.record_execution(*make_pair(id=id_, started_at=T0))
    assert [r.id for r in store.list_executions()] == sorted(ids, reverse=True)


def test_prefix_lookup_unique_ambiguous_missing(store: LogStore) -> None:
    for id_ in ("01AAAA1", "01AAAA2", "01BBBB1"):
        request, result = make_pair(id=id_)
        store.record_execution(request, result)
    assert store.get_execution("01BBBB1").id == "01BBBB1"
    assert store.get_execution("01B").id == "01BBBB1"
    assert store.get_execution("01bb").id == "01BBBB1"  # people type ids in lower case
    with pytest.raises(NotFoundError) as ambiguous:
        store.get_execution("01AAAA")
    assert "01AAAA1" in str(ambiguous.value) and "01AAAA2" in str(ambiguous.value)
    assert "2 executions" in str(ambiguous.value)
    with pytest.raises(NotFoundError, match="runner logs list"):
        store.get_execution("01C")
    with pytest.raises(NotFoundError):
        store.get_execution("01BBBB_")  # LIKE wildcards are literal characters, not patterns
    with pytest.raises(NotFoundError):
        store.get_execution("  ")


def test_duplicate_id_keeps_the_first_and_does_not_raise(store: LogStore) -> None:
    request, result = make_pair()
    store.record_execution(request, result)
    store.record_execution(request, result.model_copy(update={"stdout": "second"}))
    assert store.count_executions() == 1
    assert store.get_execution(result.id).result.stdout == "hi\n"
    assert not store.spool_path.exists()


def test_default_path_is_under_runner_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNNER_HOME", str(tmp_path / "home"))
    with LogStore() as s:
        assert s.path == tmp_path / "home" / "runner.db"
        assert s.path.exists()


def test_a_row_edited_into_nonsense_is_reported_not_crashed_on(store: LogStore, db: Path) -> None:
    request, result = make_pair()
    store.record_execution(request, result)
    with raw(db) as conn:
        conn.execute("UPDATE executions SET status = 'fine', limits_json = '{'")
    with pytest.raises(LogStoreError, match=result.id):
        store.get_execution(result.id)


def test_closed_store_refuses_reads(store: LogStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(LogStoreError, match="closed"):
        store.list_executions()


# -- schema and migrations -------------------------------------------------------------


def test_migrations_run_on_open(store: LogStore, db: Path) -> None:
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version() == len(MIGRATIONS)
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        columns = {r[1] for r in conn.execute("PRAGMA table_info(executions)")}
    assert {"executions_status", "executions_started_at", "executions_function"} <= indexes
    assert {"id", "source", "meta_json", "package_versions_json", "error_traceback", "max_rss_kb"} <= columns


def test_reopen_is_idempotent_and_keeps_rows(db: Path) -> None:
    request, result = make_pair()
    with LogStore(db) as s:
        s.record_execution(request, result)
    for _ in range(2):
        with LogStore(db) as s:
            assert s.get_execution(result.id).result == result
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == latest_version()


def test_a_new_migration_is_applied_to_an_existing_database(db: Path) -> None:
    request, result = make_pair()
    with LogStore(db) as s:
        s.record_execution(request, result)
    extra = Migration(len(MIGRATIONS) + 1, "notes",
                      "CREATE TABLE notes (id TEXT REFERENCES executions(id), text TEXT);")
    with LogStore(db, migrations=[*MIGRATIONS, extra]) as s:
        assert s.get_execution(result.id).id == result.id
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) + 1
        assert conn.execute("SELECT COUNT(*) FROM notes").fetchone()[0] == 0


def test_a_failing_migration_changes_nothing(db: Path) -> None:
    LogStore(db).close()
    broken = Migration(len(MIGRATIONS) + 1, "broken", "CREATE TABLE half (a); CREATE TABLE executions (x);")
    with pytest.raises(LogStoreError, match=f"migration {len(MIGRATIONS) + 1}"):
        LogStore(db, migrations=[*MIGRATIONS, broken])
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'half'").fetchone() is None


def test_migration_numbers_must_be_consecutive() -> None:
    check_migrations(MIGRATIONS)
    with pytest.raises(ValueError):
        check_migrations([*MIGRATIONS, Migration(len(MIGRATIONS) + 2, "gap", "SELECT 1")])


def test_split_statements_respects_strings_and_triggers() -> None:
    sql = """
        CREATE TABLE t (a TEXT DEFAULT ';');  -- a comment; with a semicolon
        CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET a = 'x;y'; END;
    """
    statements = list(split_statements(sql))
    assert len(statements) == 2
    assert "CREATE TRIGGER" in statements[1] and statements[1].endswith("END;")
    conn = sqlite3.connect(":memory:")
    for statement in statements:
        conn.execute(statement)
    conn.execute("INSERT INTO t DEFAULT VALUES")
    assert conn.execute("SELECT a FROM t").fetchone()[0] == "x;y"


def test_wal_mode_and_connection_pragmas(store: LogStore, db: Path) -> None:
    with raw(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    own = store._conn  # the store's own connection: these pragmas are per connection
    assert own is not None
    assert own.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert own.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert own.execute("PRAGMA busy_timeout").fetchone()[0] >= 2000


def test_a_database_from_a_newer_runner_is_refused(db: Path) -> None:
    db.parent.mkdir(parents=True)
    with raw(db) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(LogStoreError) as err:
        LogStore(db)
    assert "newer" in str(err.value) and "99" in str(err.value)
    assert err.value.fix and "upgrade" in err.value.fix
    with raw(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99  # left alone


def test_a_file_that_is_not_a_database_is_refused(db: Path) -> None:
    db.parent.mkdir(parents=True)
    db.write_bytes(b"these are not the bytes you are looking for\n" * 200)
    with pytest.raises(LogStoreError) as err:
        LogStore(db)
    assert str(db) in str(err.value)
    assert "RUNNER_HOME" in str(err.value) and "move it away" in str(err.value)
    assert db.read_bytes().startswith(b"these are not")  # not overwritten


# -- concurrency and crashes -----------------------------------------------------------


def test_eight_threads_write_through_one_store(store: LogStore) -> None:
    per_thread = 40
    ids: list[list[str]] = [[] for _ in range(8)]
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def work(slot: int) -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                request, result = make_pair(started_at=datetime.now(timezone.utc))
                store.record_execution(request, result)
                ids[slot].append(result.id)
                store.list_executions(limit=3)  # reads interleaved with writes
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    expected = {i for slot in ids for i in slot}
    assert len(expected) == 8 * per_thread
    assert {r.id for r in store.list_executions(limit=None)} == expected
    assert not store.spool_path.exists()


_WRITER = textwrap.dedent(
    """
    import sys
    from datetime import datetime, timezone
    from runner.ids import new_id
    from runner.logs import LogStore
    from runner.types import ExecutionRequest, ExecutionResult, Status

    path, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go", so that several writers really overlap
    with LogStore(path) as store:
        n = 0
        while count < 0 or n < count:
            result = ExecutionResult(
                id=new_id(), backend="restricted", status=Status.OK,
                stdout="x" * size, started_at=datetime.now(timezone.utc),
            )
            store.record_execution(ExecutionRequest(code=f"print({n})"), result)
            print(result.id, flush=True)  # only after the write returned, i.e. committed
            n += 1
    """
)


def _start_writers(db: Path, n: int, count: int, size: int = 100) -> list[subprocess.Popen[str]]:
    """Start `n` writer processes, wait until they have imported everything, then release them."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(db), str(count), str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    return procs


def test_two_processes_write_the_same_fresh_file(db: Path) -> None:
    # Both open a file that does not exist yet, so they also race to create the schema.
    db.parent.mkdir(parents=True)
    procs = _start_writers(db, 2, count=300, size=2000)
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
        assert "could not log" not in err
    printed = {line for out, _ in outputs for line in out.split()}
    assert len(printed) == 600
    with LogStore(db) as s:
        assert {r.id for r in s.list_executions(limit=None)} == printed
    assert not (db.parent / SPOOL_NAME).exists()


def test_a_writer_killed_mid_stream_leaves_a_sound_database(db: Path) -> None:
    db.parent.mkdir(parents=True)
    # Big rows, so that the kill is likely to land inside a write.
    (proc,) = _start_writers(db, 1, count=-1, size=200_000)
    assert proc.stdout is not None
    committed = []
    try:
        for line in proc.stdout:
            committed.append(line.strip())
            if len(committed) == 150:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # Read what the killed process left, without LogStore (which might repair things).
    with raw(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        stored = {r[0] for r in conn.execute("SELECT id FROM executions")}
    assert set(committed) <= stored
    assert len(stored) >= 150
    assert not (db.parent / SPOOL_NAME).exists()


# -- the spool ---------------------------------------------------------------------------


def _lock_db(db: Path) -> sqlite3.Connection:
    """Another connection holding the write lock until it is closed."""
    blocker = raw(db)
    blocker.execute("BEGIN IMMEDIATE")
    return blocker


def test_a_failed_write_is_spooled_and_imported_on_next_open(db: Path, caplog: pytest.LogCaptureFixture) -> None:
    request, result = full_pair()
    store = LogStore(db, busy_timeout_s=0.05)
    blocker = _lock_db(db)
    try:
        with caplog.at_level(logging.WARNING, logger="runner.logs"):
            store.record_execution(request, result, source="cli", meta={"k": "v"})  # must not raise
        assert store.count_executions() == 0  # readers still work in WAL mode
    finally:
        blocker.rollback()
        blocker.close()
    store.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and SPOOL_NAME in warnings[0].getMessage()
    spool = db.parent / SPOOL_NAME
    assert len(spool.read_text().splitlines()) == 1

    with LogStore(db) as reopened:
        assert reopened.get_execution(result.id) == ExecutionRecord(
            request=request, result=result, source="cli", meta={"k": "v"}
        )
    assert not spool.exists()


def test_writes_to_a_closed_store_are_spooled(db: Path) -> None:
    store = LogStore(db)
    store.close()
    request, result = make_pair()
    store.record_execution(request, result)
    assert store.spool_path.exists()
    with LogStore(db) as s:
        assert s.get_execution(result.id).result == result


def test_spool_import_is_idempotent_and_sets_aside_broken_lines(db: Path) -> None:
    already, new = make_pair(), make_pair()
    with LogStore(db) as s:
        s.record_execution(*already)
        s.close()
        s.record_execution(*already)  # spooled although the row exists (e.g. import crashed)
        s.record_execution(*new)
    spool = db.parent / SPOOL_NAME
    with spool.open("a") as f:
        f.write('{"request": {"code": "half a li')  # a writer killed mid-append
    with LogStore(db) as s:
        assert s.count_executions() == 2
        assert s.get_execution(new[1].id).result == new[1]
    assert not spool.exists()
    rejected = (db.parent / "unlogged.rejected.jsonl").read_text()
    assert "half a li" in rejected


def test_a_spool_import_that_fails_keeps_the_spool(db: Path) -> None:
    request, result = make_pair()
    store = LogStore(db)
    store.close()
    store.record_execution(request, result)
    blocker = _lock_db(db)
    try:
        LogStore(db, busy_timeout_s=0.05).close()  # opens, but cannot import
    finally:
        blocker.rollback()
        blocker.close()
    assert (db.parent / SPOOL_NAME).exists()
    with LogStore(db) as s:
        assert s.count_executions() == 1
    assert not (db.parent / SPOOL_NAME).exists()


def test_spooling_while_another_store_imports_loses_nothing(db: Path) -> None:
    """Appenders and importers race on the spool file; every record must end up in the DB."""
    closed = LogStore(db)
    closed.close()  # every write to a closed store goes to the spool
    ids: list[str] = []
    done = threading.Event()

    def append(n: int) -> None:
        for _ in range(n):
            request, result = make_pair()
            closed.record_execution(request, result)
            ids.append(result.id)

    def import_repeatedly() -> None:
        while not done.is_set():
            LogStore(db).close()

    writers = [threading.Thread(target=append, args=(60,)) for _ in range(4)]
    importers = [threading.Thread(target=import_repeatedly) for _ in range(2)]
    for t in [*writers, *importers]:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in importers:
        t.join()
    with LogStore(db) as s:
        assert {r.id for r in s.list_executions(limit=None)} == set(ids)
        assert len(ids) == 240
    assert not (db.parent / SPOOL_NAME).exists()


def test_when_the_spool_beside_the_log_fails_a_private_one_keeps_the_record(
        db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    store = LogStore(db, busy_timeout_s=0.05)
    (db.parent / SPOOL_NAME).mkdir()  # appending to a directory fails
    blocker = _lock_db(db)
    request, result = make_pair()
    try:
        store.record_execution(request, result)
    finally:
        blocker.rollback()
        blocker.close()
        store.close()
    private = tmp_path / "tmp" / f"runner-{os.getuid()}"
    (kept,) = private.glob(f"unlogged/*/{SPOOL_NAME}")
    assert oct(private.stat().st_mode & 0o777) == "0o700"
    (db.parent / SPOOL_NAME).rmdir()
    with LogStore(db) as reopened:  # the next open looks there too
        assert reopened.get_execution(result.id).result == result
    assert not kept.exists()


def test_when_even_the_spool_fails_it_warns_and_returns(db: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # No private spool under the temporary directory either: its place is taken by a file.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / f"runner-{os.getuid()}").write_text("not a directory")
    store = LogStore(db, busy_timeout_s=0.05)
    (db.parent / SPOOL_NAME).mkdir()  # appending to a directory fails
    blocker = _lock_db(db)
    try:
        with caplog.at_level(logging.WARNING, logger="runner.logs"):
            store.record_execution(*make_pair())
    finally:
        blocker.rollback()
        blocker.close()
        store.close()
    assert any("lost" in r.getMessage() for r in caplog.records)


# -- rendering ---------------------------------------------------------------------------


def test_render_execution_shows_every_part(store: LogStore) -> None:
    request, result = full_pair()
    result = result.model_copy(update={"stdout": "3.14\n\x1b[2Jgone"})
    store.record_execution(request, result, source="cli", meta={"turn": 3})
    text = render_execution(store.get_execution(result.id))
    for expected in [
        result.id,
        "2024-05-01",
        "docker",
        "status     error",
        "exit code  1",
        "1.23 s",  # duration
        "987 ms",  # cpu
        "53.0 MB",  # max rss
        "timeout 3 s",  # applied limits
        "timeout 3.5 s",  # requested limits, shown because they differ
        "sympy>=1.12",
        "sympy 1.12",
        "1 | import math",
        "3 | raise ValueError('bad')",
        "--- stdout ---",
        "3.14",
        "--- stderr ---",
        "truncated",
        "ValueError: bad",
        "Traceback (most recent call last)",
        '"answer"',
        '"turn": 3',
    ]:
        assert expected in text, expected
    assert "\x1b" not in text and "\\x1b[2J" in text  # terminal escapes are defused
    assert "\x00" not in text


def test_render_execution_of_a_quiet_success(store: LogStore) -> None:
    request = ExecutionRequest(code="x = 1")
    result = ExecutionResult(id=new_id(), backend="restricted", status=Status.OK, exit_code=0)
    store.record_execution(request, result)
    text = render_execution(store.get_execution(result.id))
    assert "(empty)" in text
    assert "--- error ---" not in text and "--- return value ---" not in text
    assert "truncated" not in text


def test_render_execution_list(store: LogStore) -> None:
    long_line = "total = sum(i * i for i in range(10_000_000)) + some_really_long_name"
    for i, (status, code) in enumerate([(Status.OK, "print(1)\nprint(2)"), (Status.TIMEOUT, long_line)]):
        store.record_execution(*make_pair(status=status, code=code, started_at=T0 + timedelta(seconds=i)))
    records = store.list_executions()
    text = render_execution_list(records)
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0].split() == ["ID", "STARTED", "BACKEND", "STATUS", "DURATION", "CODE"]
    assert lines[1].startswith(records[0].id) and "timeout" in lines[1]
    assert long_line not in text and long_line[:30] in text and "..." in lines[1]
    assert "print(1) ..." in lines[2]
    local = T0.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    assert local in lines[2]
    assert render_execution_list([]) == "no executions\n"
