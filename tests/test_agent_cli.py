"""`runner agent` and `runner logs show RUN_ID` as users type them, against a scripted
OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

RUNNER = [sys.executable, "-m", "runner"]
LEARNED = Path(__file__).parents[1] / "examples/learned_functions.json"


def run_cli(args: list[str], *, home: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment.update(RUNNER_HOME=str(home), **(env or {}))
    return subprocess.run(RUNNER + args, capture_output=True, text=True, env=environment, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def server():
    with FakeOpenAI(model="served-model") as fake:
        yield fake


def action(function: str, arguments: dict) -> str:
    return json.dumps({"thought": "t", "action": {"function": function, "arguments": arguments}})


def test_agent_json_output_with_environment_settings(server, home):
    server.replies(action("loan_payment", {"principal": 1200, "annual_rate": 0, "months": 12}),
                   action("finish_conversation", {"final_answer": "100 a month"}))
    proc = run_cli(["agent", "Monthly payment on 1200 over a year at 0%?", "--functions", str(LEARNED),
                    "--protocol", "json", "--json"], home=home,
                   env={"OPENAI_BASE_URL": server.url, "RUNNER_MODEL": "env-model",
                        "OPENAI_API_KEY": "env-key"})
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)  # exactly one JSON object
    assert run["status"] == "answered" and run["final_answer"] == "100 a month"
    assert run["model"] == "env-model" and run["protocol"] == "json"
    assert [t["number"] for t in run["turns"]] == [1, 2]
    first = run["turns"][0]
    assert first["reply"]["content"].startswith('{"thought"')
    assert first["actions"][0]["function"] == "loan_payment"
    assert first["feedback_text"] == "Result of loan_payment(" \
        '{"principal": 1200, "annual_rate": 0, "months": 12}): 100.0'
    assert len(first["execution_ids"]) == 1
    assert server.requests[0]["model"] == "env-model"
    assert server.headers[0]["authorization"] == "Bearer env-key"

    shown = run_cli(["logs", "show", run["id"]], home=home)
    assert shown.returncode == 0, shown.stderr
    assert f"agent run  {run['id']}" in shown.stdout
    assert first["execution_ids"][0] in shown.stdout
    assert "returned 100.0" in shown.stdout and "100 a month" in shown.stdout
    full = json.loads(run_cli(["logs", "show", run["id"][:22], "--json"], home=home).stdout)
    assert full["turns"][1]["messages_sent"] == server.requests[1]["messages"]
    execution = json.loads(run_cli(["logs", "show", first["execution_ids"][0], "--json"], home=home).stdout)
    assert execution["meta"]["agent_run"] == run["id"]
    listed = run_cli(["logs", "runs"], home=home).stdout
    assert run["id"] in listed and "answered" in listed


def test_flags_override_the_environment_and_progress_goes_to_stderr(server, home):
    server.reply("", tool_calls=[FakeOpenAI.call("simplify_expression", {"expression": "(x**2 - 1)/(x - 1)"})])
    server.reply("It is x + 1.")
    proc = run_cli(["agent", "Simplify (x**2-1)/(x-1)", "--functions", str(LEARNED),
                    "--base-url", server.url, "--model", "flag-model", "--api-key", "flag-key"],
                   home=home, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "RUNNER_MODEL": "env-model",
                                   "OPENAI_API_KEY": "env-key"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "It is x + 1.\n"
    assert "[turn 1]" in proc.stderr and "call simplify_expression" in proc.stderr
    assert "status answered" in proc.stderr and "runner logs show" in proc.stderr
    assert server.requests[0]["model"] == "flag-model"
    assert server.headers[0]["authorization"] == "Bearer flag-key"
    tool_message = server.requests[1]["messages"][-1]
    assert tool_message["role"] == "tool" and '"x + 1"' in tool_message["content"]


def test_model_defaults_to_the_one_the_server_serves(server, home):
    server.reply("\\boxed{4}")
    proc = run_cli(["agent", "2+2?", "--protocol", "code", "--base-url", server.url, "--json"], home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"] == "served-model"


def test_tools_rejected_exits_1_and_suggests_the_json_protocol(home):
    with FakeOpenAI(reject_tools="this model does not support tools") as fake:
        proc = run_cli(["agent", "t", "--functions", str(LEARNED), "--base-url", fake.url,
                        "--model", "m"], home=home)
    assert proc.returncode == 1
    assert "runner: error [TOOLS_UNSUPPORTED]" in proc.stderr
    assert "--protocol json" in proc.stderr


def test_max_turns_exits_1(server, home):
    server.replies("Thought: hm\nTool: loan_payment\nTool Input: {\"principal\": 1}",
                   "Thought: hm\nTool: loan_payment\nTool Input: {\"principal\": 2}")
    proc = run_cli(["agent", "t", "--functions", str(LEARNED), "--protocol", "text", "--max-turns", "2",
                    "--base-url", server.url, "--model", "m", "--json"], home=home)
    assert proc.returncode == 1
    run = json.loads(proc.stdout)
    assert run["status"] == "max_turns" and len(run["turns"]) == 2
    assert run["turns"][0]["feedback"][0]["code"] == "INVALID_ARGUMENTS"


def test_no_server_configured_is_a_clear_error(home):
    proc = run_cli(["agent", "t"], home=home)
    assert proc.returncode == 1
    assert "OPENAI_API_KEY" in proc.stderr and "--base-url" in proc.stderr


def test_bad_protocol_is_a_usage_error(home):
    assert run_cli(["agent", "t", "--protocol", "xml"], home=home).returncode == 2
