"""The viewer shows what state a record is in as the CLI does: an interrupted evaluation's
unfinished problems are pending (not running), an evaluation with nothing judged has no
accuracy ("-", not "0 of 0"), a run stopped by Ctrl-C is interrupted (not crashed), and a
stop is said with its fix and how to go on, not as an exception's text alone."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from starlette.testclient import TestClient
from test_logstore import make_pair

from runner.agent.run import AgentRun, AgentStatus
from runner.ids import new_id
from runner.logs import LogStore
from runner.logs.agent import AgentLog
from runner.logs.evaluations import EvaluationLog, EvaluationRecord, NewItem
from runner.logs.job_status import JobStatus
from runner.logs.viewer import create_app
from runner.session import interrupted_result


def test_the_viewer_shows_each_state_as_it_is(tmp_path: Path):
    path = tmp_path / "runner.db"
    with LogStore(path) as store:
        evaluations = EvaluationLog(store)
        evaluation = EvaluationRecord(id=new_id(), dataset="d.jsonl", dataset_path="d.jsonl",
                                      dataset_sha256="0" * 64, method="mathchat",
                                      backend="restricted", checker_version="v", total=2)
        evaluations.create(evaluation, [NewItem(problem_id=f"p{n}", problem={"problem": "1+1",
                                                                            "answer": "2"})
                                        for n in range(2)])
        evaluations.start_item(evaluation.id, 0)  # begun, then Ctrl-C: still pending
        resume = f"runner math eval --resume {evaluation.id}"
        evaluations.set_status(evaluation.id, JobStatus.INTERRUPTED, error={
            "code": "INTERRUPTED", "message": "stopped by the user (Ctrl-C)", "fix": resume,
            "resume": resume})
        request, _ = make_pair()
        stopped = interrupted_result(new_id(), "restricted", request.limits, time.monotonic() - 1.5)
        store.record_execution(request, stopped)
        crashed = AgentRun(id=new_id(), task="t", protocol="code", status=AgentStatus.CRASHED,
                           stop_reason="the orchestrator failed: ValueError: boom",
                           error={"code": "CRASHED", "message": "ValueError: boom",
                                  "fix": "this is a bug in runner; please report it"},
                           finished_at=datetime.now(UTC))
        AgentLog(store).finish(crashed)
    viewer = TestClient(create_app(path), base_url="http://127.0.0.1")

    page = viewer.get(f"/evaluations/{evaluation.id}").text
    assert 'status-pending">pending' in page and 'status-running">running' not in page
    assert "0 of 0" not in page and "Accuracy -" in page and "2 pending" in page
    assert "interrupted: stopped by the user" in page and f"continue with: <code>{resume}" in page

    listed = viewer.get("/executions").text
    shown = viewer.get(f"/executions/{stopped.id}").text
    for html in (listed, shown):
        assert 'status-interrupted">interrupted' in html and "status-crashed" not in html

    run = viewer.get(f"/runs/{crashed.id}").text
    assert "a failure inside runner: ValueError: boom" in run
    assert "fix: this is a bug in runner" in run and "the orchestrator failed" not in run
