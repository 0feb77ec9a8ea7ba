"""Ctrl-C on the long commands, as a user presses it: `math eval` and `math train` against a
model that never answers stop within seconds (the requests in flight abandoned, none sent
after, the problems in progress pending), print their report (with `--json`, exactly one
JSON object: status interrupted and the resume command) and exit 130; a second Ctrl-C
quits at once, still printing one JSON object; `exec --json` prints the interrupted run.

Bounds are generous (tens of seconds against the minutes a silent model used to cost)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"
GENEROUS_S = 30


def start(args: list[str], home: Path, stdin: str | None = None) -> subprocess.Popen:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    process = subprocess.Popen([sys.executable, "-m", "runner", *args], env=environment,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    if stdin is not None:
        process.stdin.write(stdin)
    process.stdin.close()
    process.stdin = None  # communicate() must not flush it again
    return process


def wait_until(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert process.poll() is None, (what, process.stderr.read())
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def ctrl_c(process: subprocess.Popen) -> tuple[int, str, str, float]:
    """Press Ctrl-C once; (exit status, stdout, stderr, seconds it took to exit)."""
    pressed = time.monotonic()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=GENEROUS_S * 4)
    return process.returncode, out, err, time.monotonic() - pressed


@pytest.fixture
def silent():
    """A model server that takes every request and never answers (within the test)."""
    with FakeOpenAI(responder=lambda body: {"content": "...", "delay_s": 600}) as server:
        yield server


def model(server: FakeOpenAI) -> list[str]:
    return ["--base-url", server.url, "--model", "fake-model"]


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_ctrl_c_stops_an_evaluation_waiting_for_a_silent_model(silent, tmp_path, as_json):
    evaluation = start(["math", "eval", "--dataset", str(SAMPLE), "--limit", "4",
                        "--concurrency", "2", *(["--json"] if as_json else []),
                        *model(silent)], tmp_path / "home")
    wait_until(lambda: len(silent.requests) >= 2, evaluation, "no request reached the model")
    code, out, err, took = ctrl_c(evaluation)
    assert code == 130, err
    assert took < GENEROUS_S
    assert "Ctrl-C again to quit at once" in err and "Traceback" not in err
    sent = len(silent.requests)
    time.sleep(1)
    assert len(silent.requests) == sent == 2  # nothing sent after Ctrl-C, no retries
    if as_json:
        report = json.loads(out)  # the whole of stdout: one object
        assert report["status"] == "interrupted"
        assert (report["total"], report["pending"]) == (0, 4)
        assert report["resume"] == f"runner math eval --resume {report['id']}"
        assert f"continue with: {report['resume']}" in err
    else:
        assert "interrupted · 4 pending" in out
        assert "continue with: runner math eval --resume " in err


def test_a_second_ctrl_c_quits_at_once_with_one_json_object(tmp_path):
    """The first Ctrl-C waits for a code block in progress (up to its time limit); the
    second does not wait."""
    looping = "```python\nwhile True:\n    pass\n```"
    with FakeOpenAI(responder=lambda body: looping) as server:
        evaluation = start(["math", "eval", "--dataset", str(SAMPLE), "--limit", "1",
                            "--timeout", "20", "--json", *model(server)], tmp_path / "home")
        wait_until(lambda: len(server.requests) >= 1, evaluation, "no request reached the model")
        time.sleep(1)  # the block is running
        evaluation.send_signal(signal.SIGINT)
        time.sleep(1)
        assert evaluation.poll() is None  # waiting for the block (up to its 20 s)
        code, out, err, took = ctrl_c(evaluation)
    assert code == 130 and took < GENEROUS_S, err
    quit_at_once = json.loads(out)
    assert quit_at_once["status"] == "interrupted"
    assert quit_at_once["resume"] == f"runner math eval --resume {quit_at_once['id']}"
    assert "quit at once" in err


def test_ctrl_c_stops_a_training_with_one_json_object(silent, tmp_path):
    problems = tmp_path / "train.jsonl"
    problems.write_text("\n".join(SAMPLE.read_text().splitlines()[:3]) + "\n")
    training = start(["math", "train", "--train", str(problems), "--json", *model(silent)],
                     tmp_path / "home")
    wait_until(lambda: len(silent.requests) >= 1, training, "no request reached the model")
    code, out, err, took = ctrl_c(training)
    assert code == 130 and took < GENEROUS_S, err
    report = json.loads(out)
    assert report["status"] == "interrupted"
    assert report["resume"] == f"runner math train --resume {report['id']}"
    assert "Traceback" not in err


def test_ctrl_c_on_exec_json_prints_the_interrupted_run(tmp_path):
    run = start(["exec", "-", "--json", "--timeout", "20"], tmp_path / "home",
                stdin="print('started', flush=True)\nwhile True:\n    pass\n")
    time.sleep(2)  # the worker is up and the loop runs
    code, out, err, took = ctrl_c(run)
    assert code == 130 and took < GENEROUS_S, err
    result = json.loads(out)
    assert result["status"] == "crashed" and result["error"]["type"] == "Interrupted"
    assert result["duration_ms"] >= 500  # how long it ran before Ctrl-C, not 0
    assert f"logged as {result['id']}" in err


def test_ctrl_c_on_exec_says_interrupted_with_how_long_it_ran(tmp_path):
    run = start(["exec", "-", "--timeout", "20"], tmp_path / "home",
                stdin="print('started', flush=True)\nwhile True:\n    pass\n")
    time.sleep(2)
    code, out, err, took = ctrl_c(run)
    assert code == 130 and took < GENEROUS_S, err
    summary = next(line for line in err.splitlines() if line.startswith("-- status"))
    assert summary.startswith("-- status interrupted · "), summary
    assert int(summary.split(" · ")[1].removesuffix(" ms")) >= 500, summary
