"""Evaluations of the committed sample (tests/data) with a scripted model: exact accuracy by
type and level, what is logged per problem, the reports (JSON, Markdown, chart), a resume
after SIGKILL that ends with the same counts, and the errors a user can hit (no model
server, bad dataset lines, unknown type or level). The evaluation's own logic runs against
a fake model in-process (`runner.testing.FunctionChat`); what concerns the model server
(unreachable, dying mid-evaluation) and the command line runs against a real HTTP server
speaking the OpenAI protocol, through the SDK.

The scripted model answers by the conversation it is sent (the evaluation runs problems
concurrently, so a fixed order of replies would not do): a code block, a second block
that uses the first one's variable, then a boxed answer that is right for a known subset
of the problems and wrong for the rest."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner.agent import OpenAIChat
from runner.errors import LLMUnavailableError
from runner.logs.agent import AgentLog
from runner.logs.evaluations import EvaluationLog
from runner.logs.store import LogStore
from runner.math import load_jsonl
from runner.math.datasets import DatasetLineError, UnknownFilterError
from runner.math.evaluation import evaluate, evaluation_report, resume_evaluation
from runner.math.report import recorded_variant, render_markdown, render_text, write_chart
from runner.testing import FunctionChat

DATA = Path(__file__).parent / "data"
SAMPLE = DATA / "math_sample.jsonl"
GSM8K = DATA / "gsm8k_sample.jsonl"
PROBLEMS = list(load_jsonl(SAMPLE))
GOLD = {problem.problem: problem.answer for problem in PROBLEMS}
RIGHT = {problem.problem for index, problem in enumerate(PROBLEMS) if index % 3 != 0}


def task_of(body: dict) -> str:
    """The problem, after its prompt (MathChat's variants end theirs with "Problem:")."""
    return body["messages"][1]["content"].rpartition("Problem:")[2].lstrip(" \n")


def scripted(body: dict, delay_s: float = 0.0) -> dict:
    """Two code blocks, then the gold answer for problems in RIGHT, a wrong one otherwise."""
    task = task_of(body)
    step = sum(1 for message in body["messages"] if message["role"] == "assistant")
    if step == 0:
        content = f"First a value.\n```python\nn = {len(task)}\nprint(n)\n```"
    elif step == 1:
        content = "Check it.\n```python\nprint(n * 2)\n```"
    else:
        answer = GOLD[task] if task in RIGHT else "\\text{no idea}"
        content = f"So the answer is $\\boxed{{{answer}}}$."
    return {"content": content, "delay_s": delay_s}


def expected_tallies() -> tuple[dict, dict]:
    by_type: dict[str, list[int]] = {}
    by_level: dict[str, list[int]] = {}
    for problem in PROBLEMS:
        for key, groups in ((problem.type, by_type), (f"Level {problem.level}", by_level)):
            tally = groups.setdefault(key, [0, 0])
            tally[0] += problem.problem in RIGHT
            tally[1] += 1
    as_dicts = [{key: {"correct": c, "total": t, "accuracy": c / t} for key, (c, t) in groups.items()}
                for groups in (by_type, by_level)]
    return as_dicts[0], as_dicts[1]


def llm(server: FakeOpenAI) -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=server.url, api_key="test-key", backoff_s=0.001)


def fake(responder) -> FunctionChat:
    """The same script as a fake model: `responder` answers a request body."""
    def answer(messages: list[dict], tools) -> str:
        reply = responder({"messages": messages})
        return reply["content"] if isinstance(reply, dict) else reply

    return FunctionChat(answer, model="fake-model")


@pytest.fixture
def store(tmp_path: Path):
    with LogStore(tmp_path / "log.db") as opened:
        yield opened


@pytest.mark.parametrize("backend", ["restricted", pytest.param("docker", marks=pytest.mark.docker)])
def test_an_evaluation_of_the_sample_has_the_known_accuracy(store, tmp_path, backend):
    from conftest import backend_options

    report = evaluate(SAMPLE, llm=fake(scripted), concurrency=3, backend=backend,
                      log_store=store, backend_options=backend_options(backend))
    data = report.to_json_dict()
    assert data["status"] == "finished" and data["pending"] == 0
    assert data["total"] == len(PROBLEMS) == 35
    assert data["correct"] == len(RIGHT) == 23
    assert data["accuracy"] == pytest.approx(23 / 35)
    by_type, by_level = expected_tallies()
    assert data["by_type"] == by_type and data["by_level"] == by_level
    assert data["run_statuses"] == {"answered": 35}
    assert data["model"] == "fake-model" and data["method"] == "mathchat"
    assert data["variant"] == "default" == data["settings"]["variant"]
    assert data["settings"]["max_turns"] == 16
    assert data["backend"] == backend and data["dataset"]["name"] == "math_sample.jsonl"
    assert len(data["dataset"]["sha256"]) == 64 and data["checker_version"].startswith("runner-math/")
    assert data["sample"]["size"] == 35 and data["settings"]["concurrency"] == 3

    # every problem: its conversation, its executions (one session each) and its verdict
    items = EvaluationLog(store).items(report.id)
    assert [item.status for item in items] == ["done"] * 35
    assert all(item.attempts == 1 for item in items)
    agent_log = AgentLog(store)
    sessions = set()
    for item in items:
        run = agent_log.get(item.agent_run_id)
        assert run.task == item.problem["problem"] and run.status == "answered"
        assert item.correct == (item.problem["problem"] in RIGHT)
        assert item.verdict["equal"] == item.correct and item.verdict["reason"]
        records = [store.get_execution(i) for i in run.execution_ids]
        assert [r.result.status for r in records] == ["ok", "ok"]
        assert records[1].result.stdout == f"{2 * len(item.problem['problem'])}\n"
        assert records[0].meta["session"] == records[1].meta["session"]
        sessions.add(records[0].meta["session"])
        assert records[0].result.backend == backend
    assert len(sessions) == 35
    # foreign keys hold: every item's run is in agent_runs
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        orphans = conn.execute("SELECT COUNT(*) FROM evaluation_items i LEFT JOIN agent_runs r "
                               "ON r.id = i.agent_run_id WHERE r.id IS NULL").fetchone()[0]
        assert orphans == 0


def test_reports_markdown_json_and_chart(store, tmp_path):
    report = evaluate(SAMPLE, llm=fake(scripted), concurrency=2, types=["algebra", "Geometry"],
                      limit=6, log_store=store)
    again = evaluation_report(report.id, log_store=store)
    assert again.to_json_dict() == report.to_json_dict()
    data = report.to_json_dict()
    assert data["total"] == 6 and set(data["by_type"]) <= {"Algebra", "Geometry"}
    assert data["sample"]["filters"] == {"types": ["Algebra", "Geometry"]}
    assert data["sample"]["description"].startswith("6 of 10 problems (the first 6")
    markdown = render_markdown(report)
    for fact in ("fake-model", "mathchat \\(variant default\\)", "jail",
                 "math\\_sample.jsonl", "6 of 10 problems",
                 "runner-math/", "## By type", "## By level", "| Algebra |"):
        assert fact in markdown, fact
    chart = write_chart(report, tmp_path / "accuracy.png")
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and chart.stat().st_size > 5000


def test_every_report_names_the_mathchat_variant(store):
    guided = evaluate(SAMPLE, llm=fake(scripted), variant="guided", limit=2, log_store=store)
    assert guided.correct == sum(1 for p in PROBLEMS[:2] if p.problem in RIGHT)
    assert guided.to_json_dict()["variant"] == "guided" and guided.record.settings["max_turns"] == 15
    assert "method mathchat (variant guided)" in render_text(guided)
    assert render_markdown(guided).count("variant guided") == 1
    pot = evaluate(SAMPLE, llm=fake(lambda body: "```python\nprint(1)\n```"), method="pot",
                   limit=1, log_store=store)
    assert pot.to_json_dict()["variant"] is None and "variant" not in render_text(pot)
    # an evaluation recorded before MathChat had variants ran what is now `guided`
    old = guided.record.model_copy(update={"settings": {
        key: value for key, value in guided.record.settings.items() if key != "variant"}})
    assert recorded_variant(old.method, old.settings) == "guided"


def test_gsm8k_with_the_program_of_thoughts(store):
    problems = list(load_jsonl(GSM8K))
    gold = {p.problem: p.answer for p in problems}

    def program(body: dict) -> str:
        task = task_of(body)
        answer = gold[task] if len(task) % 2 else f"{gold[task]} + 1"
        return f"```python\nprint({answer})\n```"

    model = fake(program)
    report = evaluate(GSM8K, llm=model, method="pot", concurrency=2, log_store=store)
    expected = sum(1 for p in problems if len(p.problem) % 2)
    assert (report.correct, report.total) == (expected, len(problems))
    assert report.to_json_dict()["by_type"] == {
        "(no type)": {"correct": expected, "total": len(problems), "accuracy": expected / len(problems)}}
    assert len(model.requests) == len(problems)  # one reply per problem


def test_an_unreachable_model_server_is_a_clear_error_before_anything_runs(store):
    dead = OpenAIChat("m", base_url="http://127.0.0.1:9/v1", api_key="k", max_retries=0)
    with pytest.raises(LLMUnavailableError) as caught:
        evaluate(SAMPLE, llm=dead, log_store=store)
    assert "cannot reach the model server at http://127.0.0.1:9/v1" in caught.value.message
    assert "--base-url" in caught.value.fix
    assert EvaluationLog(store).list() == []


def test_a_server_that_dies_mid_evaluation_stops_it_resumably(store):
    down = []

    def failing(body: dict) -> dict:
        return {"status": 503, "message": "the model is gone"} if down else scripted(body)

    server = FakeOpenAI(responder=failing)
    model = OpenAIChat("fake-model", base_url=server.url, api_key="k", max_retries=1,
                       backoff_s=0.001)

    class StopServer:
        def started(self, record, *, done, correct):
            pass

        def item_done(self, item, *, correct):
            if item.position == 3:
                down.append(True)

        def finished(self, record):
            pass

    report = evaluate(SAMPLE, llm=model, concurrency=1, log_store=store, progress=StopServer())
    assert report.record.status == "interrupted" and report.record.error["code"] == "LLM_UNAVAILABLE"
    assert report.total == 4 and report.pending == 31
    assert "HTTP 503" in report.record.error["message"] and "--resume" in report.record.error["resume"]
    server.close()
    with FakeOpenAI(responder=scripted) as again:
        resumed = resume_evaluation(report.id, base_url=again.url, api_key="k", log_store=store)
    assert resumed.record.status == "finished" and resumed.total == 35
    assert resumed.correct == len(RIGHT)


def test_bad_lines_stop_or_are_skipped_and_reported(store, tmp_path):
    lines = SAMPLE.read_text().splitlines()[:4]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{not json", lines[1], '{"problem": "no answer"}',
                              lines[2]]) + "\n")
    with pytest.raises(DatasetLineError) as caught:
        evaluate(bad, llm=fake(scripted), log_store=store)
    assert [error.line for error in caught.value.errors] == [2, 4]
    assert "bad.jsonl:2: not valid JSON" in caught.value.message
    assert "skip" in caught.value.fix
    report = evaluate(bad, llm=fake(scripted), on_bad_line="skip", log_store=store)
    assert report.total == 3
    skipped = report.to_json_dict()["sample"]["skipped_lines"]
    assert len(skipped) == 2 and skipped[0].endswith("bad.jsonl:2: not valid JSON: Expecting "
                                                     "property name enclosed in double quotes at "
                                                     "column 2")


def test_unknown_type_or_level_lists_the_valid_ones(store):
    with pytest.raises(UnknownFilterError) as caught:
        evaluate(SAMPLE, llm=fake(scripted), types=["Topology"], log_store=store)
    assert "has no type 'Topology'; it has: Algebra, Counting & Probability" in caught.value.message
    with pytest.raises(UnknownFilterError) as caught:
        evaluate(SAMPLE, llm=fake(scripted), levels=[7], log_store=store)
    assert "it has: 1, 2, 3, 4, 5" in caught.value.message
    assert EvaluationLog(store).list() == []


# -- through the command line: a resume after SIGKILL ----------------------------------------------


def cli(args: list[str], home: Path, **options) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "runner", *args], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


def done_items(database: Path) -> dict[int, tuple[str, str, int]]:
    if not database.exists():
        return {}
    with sqlite3.connect(database, timeout=10) as conn:
        try:
            rows = conn.execute("SELECT position, agent_run_id, finished_at, attempts FROM "
                                "evaluation_items WHERE status = 'done'").fetchall()
        except sqlite3.OperationalError:  # the tables are not there yet
            return {}
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def test_resume_after_sigkill_ends_with_the_same_counts(tmp_path):
    home = tmp_path / "home"
    database = home / "runner.db"
    with FakeOpenAI(responder=lambda body: scripted(body, delay_s=0.05)) as server:
        first = cli(["math", "eval", "--dataset", str(SAMPLE), "--base-url", server.url,
                     "--model", "fake-model", "--concurrency", "2", "--json"], home,
                    start_new_session=True)
        deadline = time.monotonic() + 120
        while len(done_items(database)) < 8:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the evaluation made no progress"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        before = done_items(database)
        assert 8 <= len(before) < 35
        with sqlite3.connect(database) as conn:
            (evaluation_id, status), = conn.execute("SELECT id, status FROM evaluations").fetchall()
        assert status == "running"  # it never got to say otherwise

        second = cli(["math", "eval", "--resume", evaluation_id, "--base-url", server.url,
                      "--json"], home)
        out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    data = json.loads(out)
    assert data["id"] == evaluation_id and data["status"] == "finished"
    assert (data["correct"], data["total"], data["pending"]) == (len(RIGHT), 35, 0)
    by_type, by_level = expected_tallies()
    assert data["by_type"] == by_type and data["by_level"] == by_level
    after = done_items(database)
    assert len(after) == 35
    for position, (run_id, finished_at, attempts) in before.items():
        assert after[position] == (run_id, finished_at, attempts) and attempts == 1  # not redone
    with sqlite3.connect(database) as conn:
        statuses = dict(conn.execute("SELECT status, COUNT(*) FROM agent_runs GROUP BY status"))
        redone = conn.execute("SELECT SUM(attempts - 1) FROM evaluation_items").fetchone()[0]
    # the conversations the kill cut short stay in the log as `running`; their problems ran
    # again, once each, and only the new conversation counts
    assert statuses["answered"] == 35
    # the conversations the kill cut short were closed as interrupted when the log was reopened;
    # an item claimed in the instant before its conversation was recorded was redone without
    # one, so there are at most as many interrupted conversations as redone items, and no
    # more items were redone than there were threads
    assert statuses.get("interrupted", 0) <= redone <= 2 and "running" not in statuses
    assert f"evaluation {evaluation_id}: 35 problems, {len(before)} done before" in err


def test_cli_errors_say_how_to_fix_them(tmp_path):
    home = tmp_path / "home"
    dead = cli(["math", "eval", "--dataset", str(SAMPLE), "--base-url", "http://127.0.0.1:9/v1",
                "--model", "m", "--retries", "0"], home)
    _, err = dead.communicate(timeout=120)
    assert dead.returncode == 1 and "Traceback" not in err
    assert "error [LLM_UNAVAILABLE]: cannot reach the model server" in err and "fix:" in err
    unknown = cli(["math", "eval", "--dataset", str(SAMPLE), "--level", "9", "--model", "m",
                   "--base-url", "http://127.0.0.1:9/v1"], home)
    _, err = unknown.communicate(timeout=120)
    assert unknown.returncode == 1 and "has no level '9'; it has: 1, 2, 3, 4, 5" in err
    mixed = cli(["math", "eval", "--resume", "01ABC", "--dataset", "math"], home)
    _, err = mixed.communicate(timeout=120)
    assert mixed.returncode == 2 and "keeps its own settings; leave out --dataset" in err
