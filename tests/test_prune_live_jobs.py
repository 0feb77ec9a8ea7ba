"""`runner logs prune` beside a job that runs: a real `math eval` against a scripted model
server, and a real prune with a cut-off after the evaluation started. The evaluation, its
finished and in-flight conversations and their executions stay, prune says it kept them
and deletes the rest, and the evaluation ends as if nothing had happened; once it is over,
the next prune takes it."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fake_openai_server import FakeOpenAI
from test_logstore import make_pair
from test_math_eval import RIGHT, SAMPLE, cli, done_items, expected_tallies, scripted

from runner.agent.run import AgentRun
from runner.ids import new_id
from runner.logs import LogStore
from runner.logs.agent import AgentLog


def test_prune_keeps_a_running_evaluation_and_says_so(tmp_path: Path):
    home = tmp_path / "home"
    database = home / "runner.db"
    old = datetime.now(UTC) - timedelta(days=40)
    with LogStore(database) as store:  # what prune may take: an old run and an old conversation
        request, stale = make_pair(started_at=old)
        store.record_execution(request, stale)
        stale_run = AgentRun(id=new_id(), task="old", protocol="code", started_at=old)
        AgentLog(store).start(stale_run)
        AgentLog(store).finish(stale_run.model_copy(update={"status": "answered"}))

    with FakeOpenAI(responder=lambda body: scripted(body, delay_s=0.05)) as server:
        evaluation = cli(["math", "eval", "--dataset", str(SAMPLE), "--base-url", server.url,
                          "--model", "fake-model", "--concurrency", "2", "--json"], home)
        deadline = time.monotonic() + 120
        while len(done_items(database)) < 6:
            assert evaluation.poll() is None, evaluation.communicate()
            assert time.monotonic() < deadline, "the evaluation made no progress"
            time.sleep(0.05)
        with sqlite3.connect(database) as conn:
            (evaluation_id,), = conn.execute("SELECT id FROM evaluations").fetchall()

        dry = cli(["logs", "prune", "--before", "0d", "--dry-run"], home)
        out, err = dry.communicate(timeout=120)
        assert dry.returncode == 0, err
        assert "kept 1 job(s) that a live process still runs" in out
        assert f"evaluation {evaluation_id} (pid {evaluation.pid} on " in out

        pruned = cli(["logs", "prune", "--before", "0d", "--yes"], home)
        out, err = pruned.communicate(timeout=120)
        assert pruned.returncode == 0, err
        assert "deleted 1 executions, 1 agent runs (0 turns)" in out, out
        assert "evaluations" not in out.split("\n")[0]  # none of the evaluation went
        assert f"evaluation {evaluation_id} (pid {evaluation.pid} on " in out
        assert "agent runs of theirs" in out
        during = done_items(database)

        result, err = evaluation.communicate(timeout=300)
    assert evaluation.returncode == 0, err
    data = json.loads(result)
    assert data["id"] == evaluation_id and data["status"] == "finished"
    assert (data["correct"], data["total"], data["pending"]) == (len(RIGHT), 35, 0)
    by_type, by_level = expected_tallies()
    assert data["by_type"] == by_type and data["by_level"] == by_level

    # nothing of the evaluation was lost: every item once, its conversation and executions
    after = done_items(database)
    assert len(after) == 35 and all(attempts == 1 for _, _, attempts in after.values())
    assert all(after[position] == item for position, item in during.items())
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        runs = dict(conn.execute("SELECT id, status FROM agent_runs"))
        assert {run_id for run_id, _, _ in after.values()} <= set(runs)
        assert stale_run.id not in runs
        per_run = dict(conn.execute("SELECT agent_run_id, COUNT(*) FROM executions "
                                    "GROUP BY agent_run_id"))
        assert all(per_run.get(run_id) == 2 for run_id, _, _ in after.values())
        assert conn.execute("SELECT COUNT(*) FROM executions WHERE id = ?",
                            (stale.id,)).fetchone() == (0,)

    # over, it is no longer live: the next prune takes it whole
    again = cli(["logs", "prune", "--before", "0d", "--yes"], home)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert "1 evaluations" in out and "kept" not in out
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT COUNT(*) FROM evaluations").fetchone() == (0,)
        assert conn.execute("SELECT COUNT(*) FROM agent_runs").fetchone() == (0,)
