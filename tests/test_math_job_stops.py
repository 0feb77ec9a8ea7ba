"""How evaluations and trainings stop, through the command line against the scripted server:
a model server that stops speaking the protocol (HTTP 200 with an HTML page, or with no
choices) stops an evaluation resumably, and a problem it cost is never counted as wrong;
an optimizer endpoint that does the same is an error of the training, shown on stderr, and
the training resumes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from starlette.testclient import TestClient

from runner.logs.viewer import create_app
from runner.math import load_jsonl

SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"
OPTIMIZER_PROMPT = "You improve the list of functions"
HTML = {"raw": "<!doctype html><html><body>Bad gateway, try later</body></html>",
        "content_type": "text/html"}
NO_CHOICES = {"body": {"id": "x", "object": "chat.completion", "choices": []}}


def cli(args: list[str], home: Path, **options) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    return subprocess.Popen([sys.executable, "-m", "runner", *args], env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **options)


@pytest.fixture
def problems(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(SAMPLE.read_text().splitlines()[:6]) + "\n")
    return path


class Server:
    """Answers every problem right (after `delay_s`), until `broken` is set: then, after
    `good_replies` replies, with `broken`."""

    def __init__(self, problems: Path, *, good_replies: int) -> None:
        self.gold = {p.problem: p.answer for p in load_jsonl(problems)}
        self.good_replies = good_replies
        self.count = 0
        self.delay_s = 0.0
        self.gate = threading.Event()  # cleared: replies wait until it is set again
        self.gate.set()
        self.hold_after: int | None = None  # after this many replies, the gate closes
        self.broken: dict | None = None
        self.lock = threading.Lock()
        self.server = FakeOpenAI(responder=self.respond)

    def respond(self, body: dict) -> str | dict:
        with self.lock:
            if self.hold_after is not None and self.count >= self.hold_after:
                self.gate.clear()
                self.hold_after = None
        self.gate.wait(timeout=120)
        with self.lock:
            self.count += 1
            if self.broken is not None and self.count > self.good_replies:
                return self.broken
        task = body["messages"][1]["content"].rpartition("Problem:")[2].lstrip(" \n")
        return {"content": f"So it is $\\boxed{{{self.gold[task]}}}$.", "delay_s": self.delay_s}


@pytest.mark.parametrize("broken", [HTML, NO_CHOICES], ids=["html", "no-choices"])
def test_a_server_that_stops_speaking_the_protocol_stops_the_evaluation_resumably(
        problems, tmp_path, broken):
    home = tmp_path / "home"
    server = Server(problems, good_replies=3)
    server.broken = broken
    with server.server:
        model = ["--base-url", server.server.url, "--model", "fake-model", "--retries", "0"]
        first = cli(["math", "eval", "--dataset", str(problems), "--json", *model], home)
        out, err = first.communicate(timeout=300)
        assert first.returncode == 1, err
        data = json.loads(out)
        assert data["status"] == "interrupted"
        assert (data["correct"], data["total"], data["pending"]) == (3, 3, 3)  # none counted wrong
        assert "runner: error [LLM_PROTOCOL]" in err and "Traceback" not in err
        assert f"runner math eval --resume {data['id']}" in err
        text = cli(["math", "report", data["id"], "--format", "text"], home)
        shown, _ = text.communicate(timeout=120)
        assert "interrupted · 3 pending" in shown and "stopped early: [LLM_PROTOCOL]" in shown

        server.broken = None  # the server is back
        second = cli(["math", "eval", "--resume", data["id"], "--json", *model], home)
        out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    resumed = json.loads(out)
    assert (resumed["status"], resumed["correct"], resumed["total"], resumed["pending"]) == (
        "finished", 6, 6, 0)


def test_an_optimizer_endpoint_that_answers_html_is_an_error_of_the_training(problems, tmp_path):
    home = tmp_path / "home"
    agent = Server(problems, good_replies=0)
    optimizer = FakeOpenAI(responder=lambda body: HTML)
    fixed = FakeOpenAI(responder=lambda body: "TERMINATE")
    with agent.server, optimizer, fixed:
        first = cli(["math", "train", "--train", str(problems), "--base-url", agent.server.url,
                     "--model", "fake-model", "--optimizer-base-url", optimizer.url,
                     "--retries", "0", "--epochs", "2", "--json"], home)
        out, err = first.communicate(timeout=300)
        assert first.returncode == 1, err
        data = json.loads(out)
        assert data["status"] == "interrupted"
        # epoch 1's step is open: nothing decided, nothing counted as "unchanged"
        assert [(e["epoch"], e["outcome"]) for e in data["epochs"]] == [(0, "baseline"), (1, None)]
        assert "runner: error [LLM_PROTOCOL]" in err and "text/html" in err
        assert f"runner math train --resume {data['id']}" in err and "Traceback" not in err
        second = cli(["math", "train", "--resume", data["id"], "--optimizer-base-url", fixed.url,
                      "--json"], home)
        out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    resumed = json.loads(out)
    assert resumed["status"] == "finished"
    assert [(e["epoch"], e["outcome"]) for e in resumed["epochs"]] == [
        (0, "baseline"), (1, "unchanged")]


# -- the owner rule: one live process per job; a dead one's job reads as interrupted ----------


def job_row(database: Path, table: str) -> tuple[str | None, int]:
    """(the job's id, its done items) as far as the log has them."""
    if not database.exists():
        return None, 0
    try:
        with sqlite3.connect(database, timeout=10) as conn:
            row = conn.execute(f"SELECT id FROM {table}").fetchone()
            done = conn.execute("SELECT COUNT(*) FROM evaluation_items WHERE status = 'done'"
                                ).fetchone()[0]
    except sqlite3.OperationalError:  # the tables are not there yet
        return None, 0
    return (row[0] if row else None), int(done)


def wait_for(condition, process: subprocess.Popen, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_live_evaluation_is_not_resumed_twice_and_a_killed_one_reads_interrupted(
        problems, tmp_path):
    home = tmp_path / "home"
    database = home / "runner.db"
    server = Server(problems, good_replies=0)
    server.hold_after = 1
    with server.server:
        model = ["--base-url", server.server.url, "--model", "fake-model"]
        first = cli(["math", "eval", "--dataset", str(problems), "--json", *model], home,
                    start_new_session=True)
        # one problem done, and the first process waits for its next reply meanwhile
        wait_for(lambda: job_row(database, "evaluations")[1] >= 1, first, "no progress")
        evaluation_id = job_row(database, "evaluations")[0]
        again = cli(["math", "eval", "--resume", evaluation_id, *model], home)
        _, err = again.communicate(timeout=120)
        assert again.returncode == 1 and "Traceback" not in err
        assert "error [JOB_RUNNING]" in err and f"pid {first.pid} on " in err
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        server.gate.set()

        listed = cli(["math", "evals", "--json"], home)
        assert json.loads(listed.communicate(timeout=120)[0])[0]["status"] == "interrupted"
        viewer = TestClient(create_app(database), base_url="http://127.0.0.1")
        assert "interrupted" in viewer.get("/evaluations").text
        page = viewer.get(f"/evaluations/{evaluation_id}").text
        assert "interrupted" in page and f"pid {first.pid}" in page

        # two resumes at once: one runs the pending problems, the other is refused (the
        # server holds the winner's first reply until the other one has given up)
        server.gate.clear()
        both = [cli(["math", "eval", "--resume", evaluation_id, "--json", *model], home)
                for _ in range(2)]
        deadline = time.monotonic() + 120
        while all(process.poll() is None for process in both):
            assert time.monotonic() < deadline, "neither resume ended"
            time.sleep(0.05)
        server.gate.set()
        outcomes = [(process.wait(timeout=300), *process.communicate()) for process in both]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 1], outcomes
    winner = next(json.loads(out) for code, out, _ in outcomes if code == 0)
    assert (winner["status"], winner["correct"], winner["total"]) == ("finished", 6, 6)
    assert any("error [JOB_RUNNING]" in err for code, _, err in outcomes if code == 1)
    with sqlite3.connect(database) as conn:
        answered = conn.execute("SELECT COUNT(*) FROM agent_runs WHERE status = 'answered'"
                                ).fetchone()[0]
    assert answered == 6  # each problem solved once


def test_a_live_training_is_not_resumed_twice_and_a_killed_one_reads_interrupted(
        problems, tmp_path):
    home = tmp_path / "home"
    database = home / "runner.db"
    server = Server(problems, good_replies=0)
    server.hold_after = 1
    with server.server:
        model = ["--base-url", server.server.url, "--model", "fake-model"]
        first = cli(["math", "train", "--train", str(problems), "--json", *model], home,
                    start_new_session=True)
        # one problem done, and the first process waits for its next reply meanwhile
        wait_for(lambda: job_row(database, "trainings")[1] >= 1, first, "no progress")
        training_id = job_row(database, "trainings")[0]
        again = cli(["math", "train", "--resume", training_id, *model], home)
        _, err = again.communicate(timeout=120)
        assert again.returncode == 1 and "Traceback" not in err
        assert "error [JOB_RUNNING]" in err and f"pid {first.pid} on " in err
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        server.gate.set()
    listed = cli(["math", "trainings", "--json"], home)
    assert json.loads(listed.communicate(timeout=120)[0])[0]["status"] == "interrupted"
    viewer = TestClient(create_app(database), base_url="http://127.0.0.1")
    assert "interrupted" in viewer.get(f"/trainings/{training_id}").text
