"""Small things the commands got wrong, as a user meets them: a chart to a path that cannot
be written, the history of a file that is not there, two trainings saving under one set
name, an empty problem, a model error said three times, an --out that cannot be written,
and "0 B free" in the statistics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet

SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"
SPEC = {"name": "helper", "description": "Gives x back.", "arguments": {"x": {"type": "integer"}},
        "code": "def helper(x):\n    return x\n"}


def cli(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    env["RUNNER_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "runner", *args], env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def answers(messages: list[dict], tools) -> str:
    return "TERMINATE" if messages[0]["content"].startswith("You improve") else "\\boxed{1}"


@pytest.fixture
def problems(tmp_path: Path) -> Path:
    path = tmp_path / "problems.jsonl"
    path.write_text("\n".join(SAMPLE.read_text().splitlines()[:2]) + "\n")
    return path


def test_a_chart_that_cannot_be_written_is_a_clear_error(tmp_path: Path, problems: Path):
    home = tmp_path / "home"
    with FakeOpenAI(responder=lambda body: "\\boxed{1}") as server:
        evaluated = cli(["math", "eval", "--dataset", str(problems), "--json", "--base-url",
                         server.url, "--model", "fake-model"], home)
    evaluation = json.loads(evaluated.stdout)["id"]
    missing = cli(["math", "report", evaluation, "--chart", "/nonexistent/x.png"], home)
    assert missing.returncode == 2 and "there is no directory /nonexistent" in missing.stderr
    assert missing.stdout == ""  # nothing printed before the usage error
    refused = cli(["math", "report", evaluation, "--chart", "/proc/x.png"], home)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "error [CONFIGURATION]: cannot write the chart to /proc/x.png" in refused.stderr


def test_the_history_of_a_file_that_is_not_there_says_so(tmp_path: Path):
    result = cli(["functions", "history", "/nope.json"], tmp_path / "home")
    assert result.returncode == 2 and "there is no file /nope.json" in result.stderr
    assert "no recorded changes" not in result.stdout


def test_two_trainings_saving_under_one_name_keep_their_histories_apart(tmp_path: Path,
                                                                        problems: Path):
    home = tmp_path / "home"
    starting = tmp_path / "start.json"
    FunctionSet("start", [SPEC], log_store=False).save(starting)
    ids = []
    with FakeOpenAI(responder=lambda body: answers(body["messages"], None)) as server:
        model = ["--base-url", server.url, "--model", "fake-model"]
        for folder in ("a", "b"):
            (tmp_path / folder).mkdir()
            done = cli(["math", "train", "--train", str(problems), "--epochs", "1", "--functions",
                        str(starting), "--out", str(tmp_path / folder / "learned.json"),
                        "--json", *model], home)
            assert done.returncode == 0, done.stderr
            ids.append(json.loads(done.stdout)["id"])
        taken = cli(["math", "train", "--train", str(problems), "--set-name", "learned", *model],
                    home)
    assert taken.returncode == 1 and "already has a set named 'learned'" in taken.stderr
    for folder, training, name in (("a", ids[0], "learned"), ("b", ids[1], "learned-2")):
        saved = FunctionSet.load(tmp_path / folder / "learned.json", log_store=False)
        assert saved.name == name
        shown = cli(["functions", "history", str(tmp_path / folder / "learned.json"), "--json"],
                    home)
        history = json.loads(shown.stdout)
        assert history and {entry["set_name"] for entry in history} == {name}
        assert {entry["author"]["name"] for entry in history} == {training}


def test_an_empty_problem_is_a_usage_error_and_a_model_error_is_said_once(tmp_path: Path):
    home = tmp_path / "home"
    with FakeOpenAI(responder=lambda body: {"status": 503, "message": "the GPU is on fire"}
                    ) as server:
        model = ["--base-url", server.url, "--model", "fake-model", "--retries", "0"]
        empty = cli(["math", "solve", "  ", *model], home)
        assert empty.returncode == 2 and "the problem is empty" in empty.stderr
        assert server.requests == []
        failed = [cli(["math", "solve", "What is 1 + 1?", *model], home),
                  cli(["agent", "What is 1 + 1?", "--protocol", "code", *model], home)]
    for result in failed:
        assert result.returncode == 1 and "Traceback" not in result.stderr
        assert result.stderr.count("the GPU is on fire") == 1, result.stderr
        assert "runner: error [LLM_UNAVAILABLE]" in result.stderr and "runner: fix:" in result.stderr


def test_an_out_that_cannot_be_written_is_refused_before_anything_runs(tmp_path: Path,
                                                                        problems: Path):
    with FakeOpenAI(responder=lambda body: "\\boxed{1}") as server:
        result = cli(["math", "train", "--train", str(problems), "--base-url", server.url,
                      "--model", "fake-model", "--out", "/proc/version"], tmp_path / "home")
        assert server.requests == []  # no problem was solved
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot save the trained set to /proc/version" in result.stderr
    assert "saved" not in result.stderr


def test_stats_of_a_log_with_no_free_pages_does_not_offer_to_free_them(tmp_path: Path):
    home = tmp_path / "home"
    cli(["exec", "-"], home)  # an empty program: the log exists
    stats = cli(["logs", "stats"], home)
    assert stats.returncode == 0 and "0 B free" not in stats.stdout
    numbers = json.loads(cli(["logs", "stats", "--json"], home).stdout)
    assert numbers["free_bytes"] == 0
