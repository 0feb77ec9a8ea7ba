"""Any text a model or a program sends (lone surrogates, NUL, controls, every plane of
Unicode) goes through every stage without loss and without a crash: the model client, the
agent loop, the log, the JSON output, the terminal, the viewer, export and import, answer
extraction and the checker. What no encoding can carry (a lone surrogate) is kept as its
escape, `\\udXXX`; everything else is kept exactly.

A property test feeds the stages arbitrary Unicode in-process (hypothesis); the commands a
user types get the same text from the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from runner import Sandbox
from runner.agent import Agent
from runner.agent.llm import reply_from_completion
from runner.encodable import encodable_text
from runner.logs import LogStore
from runner.logs.agent import AgentLog
from runner.logs.agent_text import render_agent_run
from runner.logs.transfer import export_lines, import_lines
from runner.logs.viewer import create_app
from runner.math import extract_answer
from runner.terminal import PLAIN, json_text
from runner.testing import ScriptedChat

# Every code point, with the ones that break encoders drawn often.
ANY_TEXT = st.text(st.one_of(st.characters(exclude_categories=()),
                             st.sampled_from(["\ud800", "\udcff", "\udfff", "\x00", "\x1b", "\r"])),
                   max_size=40)
NASTY = "a\ud800b\x00c\udfff\x1b[2J\u202e😀"


def encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.store = LogStore(root / "runner.db")
        self.sandbox = Sandbox(log_store=self.store, source="test")
        self.viewer = TestClient(create_app(self.store.path), base_url="http://127.0.0.1")
        self.count = 0

    def close(self) -> None:
        self.sandbox.close()
        self.store.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    made = World(tmp_path_factory.mktemp("untrusted"))
    yield made
    made.close()


def test_a_reply_is_made_encodable_where_it_is_read():
    reply = reply_from_completion({"choices": [{"message": {"content": NASTY, "tool_calls": [
        {"id": "c\udc80", "function": {"name": "f\ud800", "arguments": "{\"x\": \"\udcff\"}"}}]}}]},
        latency_ms=1, retries=0)
    assert reply.content == encodable_text(NASTY) == "a\\ud800b\x00c\\udfff\x1b[2J\u202e😀"
    assert encodes(json.dumps(reply.model_dump(), ensure_ascii=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ANY_TEXT)
@example(text=NASTY)
def test_every_stage_takes_any_text(world: World, text: str):
    world.count += 1
    kept = encodable_text(text)
    # the model's reply, and a program's output, through the agent loop into the log
    reply = f"{text} so $\\boxed{{{text}}}$"
    run = Agent(ScriptedChat([reply]), protocol="text", sandbox=world.sandbox,
                log=AgentLog(world.store)).run(text)
    assert run.status != "crashed", run.error
    logged = AgentLog(world.store).get(run.id)
    assert logged.task == kept
    assert logged.turns[0].reply == run.turns[0].reply
    assert logged.turns[0].reply["content"] == encodable_text(reply)
    program = world.sandbox.run(f"print({text!r}, end='')")
    assert program.status == "ok", program.error
    assert world.store.get_execution(program.id).result.stdout == encodable_text(program.stdout)
    # the JSON the CLI prints, and the terminal's rendering
    shown = json_text(logged.summary_dict())
    assert encodes(shown) and json.loads(shown)["task"] == kept
    rendered = render_agent_run(logged, style=PLAIN)
    assert encodes(rendered) and not any(ord(c) < 32 and c not in "\n\t" for c in rendered)
    # the viewer's page of the run
    page = world.viewer.get(f"/runs/{run.id}")
    assert page.status_code == 200 and "\x00" not in page.text
    # export, then import into another log: the same lines come out again
    lines = list(export_lines(world.store, run_id=run.id))
    assert all(encodes(line) for line in lines)
    with LogStore(world.root / f"copy{world.count}.db") as copy:
        import_lines(copy, lines)
        assert list(export_lines(copy, run_id=run.id)) == lines
    # answers: extraction never raises (the checker: below, in a process of its own)
    extract_answer(text)
    extract_answer(reply, fallback=True)


# The checker forks worker processes under an address-space limit, which a test process
# that has connected to Ray cannot give them: its property test runs in a fresh process.
CHECKER_PROPERTY = """
from hypothesis import example, given, settings, strategies as st
from runner.math import Checker, extract_answer, is_equivalent

TEXT = st.lists(st.one_of(st.characters(exclude_categories=()),
                          st.sampled_from(["\\ud800", "\\udfff", "\\x00", "\\\\boxed{", "}",
                                           "\\\\frac{1}{2}", "x^2"])),
                max_size=20).map("".join)

@settings(max_examples=60, deadline=None)
@given(gold=TEXT, candidate=TEXT)
@example(gold="a\\ud800b\\x00", candidate="a\\ud800b\\x00")
def never_raises(gold, candidate):
    assert isinstance(is_equivalent(gold, candidate), bool)
    assert isinstance(is_equivalent(gold, extract_answer(candidate)), bool)

never_raises()
with Checker(workers=1) as checker:
    verdicts = checker.check_many([("\\ud800", "\\ud800"), ("1", "1\\x00\\udfff")])
print("ok", [verdict.equal for verdict in verdicts])
"""


def test_the_checker_takes_any_text():
    done = subprocess.run([sys.executable, "-c", CHECKER_PROPERTY], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().startswith("ok")


# -- the commands, with the scripted server sending the same kind of text ----------------------


def run_cli(args: list[str], home: Path, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    env["RUNNER_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "runner", *args], input=stdin, env=env,
                          capture_output=True, text=True, errors="strict", timeout=300,
                          check=False)


def no_crash(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "could not write" not in proc.stderr, proc.stderr


def test_the_commands_take_what_the_model_server_sends(tmp_path: Path):
    home = tmp_path / "home"
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"problem": f"What is {n} + 1?", "answer": str(n + 1),
                                        "type": "Algebra", "level": 1}) + "\n"
                            for n in range(3)), encoding="utf-8")
    answer = f"{NASTY} so $\\boxed{{4{NASTY}}}$"
    with FakeOpenAI(responder=lambda body: answer) as server:
        model = ["--base-url", server.url, "--model", "fake-model"]
        agent = run_cli(["agent", "2+2?", "--protocol", "code", *model], home)
        no_crash(agent)
        assert agent.returncode == 0 and agent.stdout.startswith("4a\\ud800b")
        solve = run_cli(["math", "solve", "2+2?", *model], home)
        no_crash(solve)
        assert solve.returncode == 0 and "\\ud800" in solve.stdout
        solved = run_cli(["math", "solve", "2+2?", "--json", *model], home)
        no_crash(solved)
        solution = json.loads(solved.stdout)
        assert solution["answer"] == "4" + encodable_text(NASTY)
        evaluated = run_cli(["math", "eval", "--dataset", str(data), "--json", *model], home)
        no_crash(evaluated)
        report = json.loads(evaluated.stdout)
        assert (report["status"], report["total"], report["pending"]) == ("finished", 3, 0)
    shown = run_cli(["logs", "show", solution["run_id"], "--json"], home)
    no_crash(shown)
    assert json.loads(shown.stdout)["final_answer"] == solution["answer"]
    exported = run_cli(["logs", "export"], home)
    no_crash(exported)
    assert exported.returncode == 0 and exported.stdout.count("\n") > 10


def test_math_check_and_extract_take_any_text(tmp_path: Path):
    home = tmp_path / "home"
    # An argument with a byte that is not UTF-8 arrives as a lone surrogate (\udcff).
    check = run_cli(["math", "check", "1\udcff", "1\udcff"], home)
    no_crash(check)
    assert check.returncode in (0, 1) and "\\udcff" in check.stdout
    pairs = "".join(json.dumps(pair) + "\n" for pair in (
        {"gold": "\ud800", "candidate": "\ud800"}, {"gold": "1", "candidate": "1\x00\udfff"},
        {"gold": "x", "candidate": "x", "id": "\udcff"}))
    checked = run_cli(["math", "check", "--pairs", "-"], home, stdin=pairs)
    no_crash(checked)
    assert [json.loads(line)["gold"] for line in checked.stdout.splitlines()] == [
        "\ud800", "1", "x"]
    replies = "".join(json.dumps({"reply": reply}) + "\n" for reply in (
        "\\boxed{\ud800}", "so \\boxed{1\x00}", "\udcff"))
    extracted = run_cli(["math", "extract"], home, stdin=replies)
    no_crash(extracted)
    assert [json.loads(line)["answer"] for line in extracted.stdout.splitlines()] == [
        "\ud800", "1\x00", None]
