"""How evaluations and trainings stop, through the command line against the scripted server:
a model server that stops speaking the protocol (HTTP 200 with an HTML page, or with no
choices) stops an evaluation resumably, and a problem it cost is never counted as wrong;
an optimizer endpoint that does the same is an error of the training, shown on stderr, and
the training resumes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

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
    """Answers every problem right, until `broken` is set: then with `broken`."""

    def __init__(self, problems: Path, *, good_replies: int) -> None:
        self.gold = {p.problem: p.answer for p in load_jsonl(problems)}
        self.good_replies = good_replies
        self.count = 0
        self.broken: dict | None = None
        self.lock = threading.Lock()
        self.server = FakeOpenAI(responder=self.respond)

    def respond(self, body: dict) -> str | dict:
        with self.lock:
            self.count += 1
            if self.broken is not None and self.count > self.good_replies:
                return self.broken
        task = body["messages"][1]["content"].removeprefix("Problem: ")
        return f"So it is $\\boxed{{{self.gold[task]}}}$."


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
