"""Schema version 4 against real SQLite files: an old log migrates without losing a field,
each execution's code and output is stored once, executions point at their agent run,
turn and original by foreign keys, and the full-text index keeps in step with the rows
(inserts, deletes, VACUUM)."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic_core import to_jsonable_python
from test_logstore import T0, full_pair, make_pair

from runner.ids import new_id
from runner.logs import MIGRATIONS, ExecutionRecord, LogStore
from runner.logs.agent import AgentLog, AgentRun, AgentTurn
from runner.logs.query import ExecutionFilter, count_executions
from runner.logs.store import INDEX_BATCH
from runner.types import (
    ErrorInfo,
    ExecutionRequest,
    ExecutionResult,
    FunctionCall,
    SourceFile,
    Status,
)


def raw(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def old_row(request: ExecutionRequest, result: ExecutionResult, source: str, meta: dict) -> dict:
    """A row as schema version 3 stored it: the columns, and the whole models again."""
    error = result.error
    return {
        "id": result.id, "started_at": result.started_at.isoformat(timespec="microseconds"),
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
        "return_value_json": json.dumps(result.return_value), "cpu_ms": result.resources.cpu_ms,
        "max_rss_kb": result.resources.max_rss_kb, "meta_json": json.dumps(meta),
        "request_json": json.dumps(to_jsonable_python(request)),
        "result_json": json.dumps(to_jsonable_python(result)),
    }


def call_pair() -> tuple[ExecutionRequest, ExecutionResult]:
    """A function call with a preamble, an error with structured detail and an image id."""
    request = ExecutionRequest(
        code="def f(x):\n    return g(x)\n", call=FunctionCall(name="f", arguments={"x": [1, "two"]}),
        preamble=(SourceFile(filename="<function g>", code="def g(x):\n    return x\n"),),
        filename="<function f>", packages=("sympy",))
    result = ExecutionResult(
        id=new_id(), backend="docker", status=Status.INVALID_ARGS, image="sha256:abc123",
        error=ErrorInfo(type="InvalidArguments", message="x must be a number",
                        detail={"wrong_type": ["x"]}),
        return_value=None, return_repr="<object>", return_is_repr=True, started_at=T0)
    return request, result


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runner.db"


def test_an_old_log_migrates_without_losing_a_field(db: Path):
    LogStore(db, migrations=MIGRATIONS[:3]).close()
    run_id = new_id()
    pairs = [full_pair(), call_pair(), make_pair(started_at=T0 + timedelta(seconds=5))]
    metas = [{"turn": 3}, {"agent_run": run_id, "agent_turn": 1}, {}]
    conn = raw(db)
    conn.execute("INSERT INTO agent_runs (id, started_at, task, protocol, status) "
                 "VALUES (?, ?, 'task', 'json', 'answered')", (run_id, T0.isoformat()))
    conn.execute("INSERT INTO agent_turns (run_id, number, started_at, messages_sent_json, reply_json, "
                 "feedback_text) VALUES (?, 1, ?, '[]', ?, 'the feedback words')",
                 (run_id, T0.isoformat(), json.dumps({"role": "assistant", "content": "migrated reply"})))
    for (request, result), meta in zip(pairs, metas, strict=True):
        row = old_row(request, result, "cli", meta)
        conn.execute(f"INSERT INTO executions ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                     list(row.values()))
    conn.close()

    with LogStore(db) as store:  # migrates to 4
        for (request, result), meta in zip(pairs, metas, strict=True):
            assert store.get_execution(result.id) == ExecutionRecord(request=request, result=result,
                                                                     source="cli", meta=meta)
        hits = store.read(lambda c: count_executions(c, ExecutionFilter(query="ValueError bad")))
        assert hits == 1  # the search index was back-filled
    conn = raw(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    linked = conn.execute("SELECT agent_run_id, agent_turn, function, image FROM executions WHERE id = ?",
                          (pairs[1][1].id,)).fetchone()
    assert linked == (run_id, 1, "f", "sha256:abc123")
    turns = conn.execute("SELECT rowid FROM agent_turns_fts WHERE agent_turns_fts MATCH 'migrated'").fetchall()
    assert len(turns) == 1


def test_code_and_output_are_stored_once(db: Path):
    request = ExecutionRequest(code="print('CODE-MARKER')")
    result = ExecutionResult(id=new_id(), backend="restricted", status=Status.ERROR,
                             stdout="STDOUT-MARKER\n", stderr="STDERR-MARKER\n",
                             error=ErrorInfo(type="E", message="MESSAGE-MARKER", traceback="TB-MARKER"),
                             return_value={"RETURN-MARKER": 1})
    with LogStore(db) as store:
        store.record_execution(request, result)
    conn = raw(db)
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM executions").fetchone())
    text = json.dumps(row)
    for marker in ("CODE-MARKER", "STDOUT-MARKER", "STDERR-MARKER", "MESSAGE-MARKER", "TB-MARKER",
                   "RETURN-MARKER"):
        assert text.count(marker) == 1, marker
    assert json.loads(row["request_extra_json"]) == {} and json.loads(row["result_extra_json"]) == {}
    assert "request_json" not in row and "result_json" not in row


def test_agent_executions_point_at_their_run_and_turn(db: Path):
    with LogStore(db) as store:
        log = AgentLog(store)
        run = AgentRun(id=new_id(), task="t", protocol="json")
        log.start(run)
        request, result = make_pair()
        store.record_execution(request, result, meta={"agent_run": run.id, "agent_turn": 1})
        conn = raw(db)
        # Written before its turn: the run is linked, the turn not yet.
        assert conn.execute("SELECT agent_run_id, agent_turn FROM executions").fetchone() == (run.id, None)
        log.add_turn(run.id, AgentTurn(number=1, started_at=T0, messages_sent=[],
                                       execution_ids=[result.id]))
        assert conn.execute("SELECT agent_run_id, agent_turn FROM executions").fetchone() == (run.id, 1)
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("DELETE FROM agent_runs")
        with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
            conn.execute("UPDATE executions SET agent_turn = 7")
        # An execution naming a run that is not in the log is still logged, unlinked.
        request, orphan = make_pair()
        store.record_execution(request, orphan, meta={"agent_run": "NOT-A-RUN", "agent_turn": 1})
        assert conn.execute("SELECT agent_run_id FROM executions WHERE id = ?",
                            (orphan.id,)).fetchone() == (None,)
        assert store.get_execution(orphan.id).meta["agent_run"] == "NOT-A-RUN"


def test_a_replay_points_at_its_original_until_the_original_is_deleted(db: Path):
    with LogStore(db) as store:
        request, original = make_pair()
        store.record_execution(request, original)
        _, replay = make_pair()
        store.record_execution(request, replay, meta={"replay_of": original.id})
    conn = raw(db)
    assert conn.execute("SELECT replay_of FROM executions WHERE id = ?", (replay.id,)).fetchone() == (original.id,)
    conn.execute("DELETE FROM executions WHERE id = ?", (original.id,))
    assert conn.execute("SELECT replay_of FROM executions WHERE id = ?", (replay.id,)).fetchone() == (None,)


def fts_check(db: Path) -> None:
    """FTS5's own integrity check: the index matches the table row for row."""
    conn = raw(db)
    conn.execute("INSERT INTO executions_fts (executions_fts, rank) VALUES ('integrity-check', 1)")
    conn.close()


def record(store: LogStore, word: str) -> str:
    request, result = make_pair(code=f"print('{word}')")
    store.record_execution(request, result.model_copy(update={"stdout": f"{word}\n"}))
    return result.id


def test_the_search_index_follows_inserts_deletes_updates_and_vacuum(db: Path):
    with LogStore(db) as store:
        ids = [record(store, word) for word in ("alpha", "beta", "gamma", "alpha")]

        def search(words: str) -> list[str]:
            return [r.id for r in store.list_executions(query=words, limit=None)]

        assert sorted(search("alpha")) == sorted([ids[0], ids[3]])  # found before indexing
        for n in range(INDEX_BATCH):
            record(store, f"filler{n}")
        mark = store.read(lambda c: c.execute("SELECT indexed_up_to FROM executions_fts_state").fetchone()[0])
        assert mark >= INDEX_BATCH  # the batch went into the index
        assert sorted(search("alpha")) == sorted([ids[0], ids[3]])  # found in the index
        conn = raw(db)
        conn.execute("DELETE FROM executions WHERE id = ?", (ids[0],))
        assert search("alpha") == [ids[3]]
        conn.execute("UPDATE executions SET stdout = 'delta' WHERE id = ?", (ids[1],))
        assert search("delta") == [ids[1]] and search("gamma") == [ids[2]]
        conn.close()
        store.read(lambda c: c.execute("VACUUM"))
        # Row numbers survive VACUUM (an INTEGER PRIMARY KEY), so the index still fits.
        assert search("alpha") == [ids[3]] and search("gamma") == [ids[2]]
    fts_check(db)  # closing indexed the rest: index and table agree


def test_a_deleted_last_row_does_not_hide_the_next_one_from_the_index(db: Path):
    with LogStore(db) as store:
        for n in range(INDEX_BATCH):
            record(store, f"word{n}")
        last = record(store, "lastword")
    with LogStore(db) as store:  # closed and reopened: everything is indexed
        conn = raw(db)
        conn.execute("DELETE FROM executions WHERE id = ?", (last,))
        conn.close()
        # The next row takes the deleted row's number; it must still count as unindexed.
        fresh = record(store, "freshword")
        assert [r.id for r in store.list_executions(query="freshword")] == [fresh]
        assert store.list_executions(query="lastword") == []
    fts_check(db)
    with LogStore(db) as store:
        assert [r.id for r in store.list_executions(query="freshword")] == [fresh]


def test_rows_a_writer_left_unindexed_are_found_read_only_and_indexed_by_the_next_writer(db: Path):
    with LogStore(db) as store:
        first = record(store, "kept")
    conn = raw(db)  # a writer that died before indexing: rows after the mark
    conn.execute("UPDATE executions_fts_state SET indexed_up_to = 0")
    conn.execute("INSERT INTO executions_fts (executions_fts) VALUES ('delete-all')")
    conn.close()
    with LogStore(db, read_only=True) as reader:
        found = reader.list_executions(query="kept")
        assert [r.id for r in found] == [first]
    with LogStore(db):
        pass  # opening for writing indexes them
    fts_check(db)
