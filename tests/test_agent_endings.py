"""Agent runs always end with a status and are always logged: crashes, Ctrl-C, a killed
process, replies cut at the token limit, and conversations longer than the context budget.

Everything runs for real: the restricted backend, SQLite, the `openai` SDK against a
scripted OpenAI-compatible server, real signals and real processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits, Sandbox, Status
from runner.agent import Agent, AgentLog, AgentStatus, OpenAIChat
from runner.agent.context import fit
from runner.budget import TimeBudget
from runner.errors import ConfigurationError
from runner.logs import LogStore

RUNNER = [sys.executable, "-m", "runner"]
REPO = Path(__file__).parents[1]


def spec(name: str, code: str, properties: dict | None = None) -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "arguments": properties or {}, "code": code})


ADD = spec("add", "def add(a, b):\n    return a + b\n", {"a": {"type": "number"}, "b": {"type": "number"}})
SPIN = spec("spin", "def spin():\n    while True:\n        pass\n")
SHOUT = spec("shout", "def shout(n, letter):\n    print(letter * n)\n    return n\n",
             {"n": {"type": "integer"}, "letter": {"type": "string"}})
FUNCTIONS = FunctionSet("endings", [ADD, SPIN, SHOUT], log_store=False)


def action(function: str, arguments: dict | None = None) -> str:
    return json.dumps({"thought": "t", "action": {"function": function, "arguments": arguments or {}}})


@pytest.fixture
def store(tmp_path):
    with LogStore(tmp_path / "runner.db") as opened:
        yield opened


@pytest.fixture
def sandbox(store):
    with Sandbox(backend="restricted", log_store=store) as sb:
        yield sb


def llm(server: FakeOpenAI, **options) -> OpenAIChat:
    return OpenAIChat("m", base_url=server.url, api_key="k", backoff_s=0.001, **options)


# -- exceptions inside the loop ---------------------------------------------------------------------


def test_an_exception_mid_turn_ends_the_run_crashed_with_the_turn_logged(sandbox, store):
    """The sandbox goes away between turns (here: closed by the progress hook); the next
    call fails inside the loop. The run ends `crashed`, with the runner error's code and fix,
    and the turn that was in progress (its reply and parsed action) is in the log."""
    def close_after_first(turn):
        if turn.number == 1:
            sandbox.close()

    with FakeOpenAI() as server:
        server.replies(action("add", {"a": 1, "b": 2}), action("add", {"a": 3, "b": 4}))
        run = Agent(llm(server), FUNCTIONS, protocol="json", sandbox=sandbox,
                    on_turn=close_after_first, log=AgentLog(store)).run("add things")
    assert run.status is AgentStatus.CRASHED
    assert run.error["code"] == "SANDBOX_CLOSED" and run.error["fix"]
    logged = AgentLog(store).get(run.id)
    assert logged.status is AgentStatus.CRASHED and logged.finished_at is not None
    assert [t.number for t in logged.turns] == [1, 2]
    second = logged.turns[1]
    assert second.reply["content"] == action("add", {"a": 3, "b": 4})
    assert second.actions[0]["function"] == "add"
    assert second.error["code"] == "SANDBOX_CLOSED"


def test_ctrl_c_during_an_execution_is_logged_and_raised(tmp_path):
    """A real SIGINT while a call runs: the execution is logged as interrupted, the run as
    `interrupted` with its turn, and KeyboardInterrupt reaches the caller."""
    with LogStore(tmp_path / "runner.db") as store, \
            Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=30)) as sb, \
            FakeOpenAI() as server:
        server.reply(action("spin"))
        agent = Agent(llm(server), FUNCTIONS, protocol="json", sandbox=sb, log=AgentLog(store),
                      limits=Limits(timeout_s=30))
        timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        started = time.monotonic()
        try:
            with pytest.raises(KeyboardInterrupt):
                agent.run("spin")
        finally:
            timer.cancel()  # a run that ended early must not leave the signal to the test run
        assert time.monotonic() - started < 20
        run = agent.last_run
        assert run is not None and run.status is AgentStatus.INTERRUPTED
        logged = AgentLog(store).get(run.id)
        assert logged.status is AgentStatus.INTERRUPTED
        assert logged.turns[0].error["code"] == "INTERRUPTED"
        execution_id = logged.turns[0].execution_ids[0]
        execution = store.get_execution(execution_id)
        assert execution.result.status is Status.CRASHED
        assert execution.result.error.type == "Interrupted"
        assert execution.meta["agent_run"] == run.id
        assert sb.run("print(1)").status is Status.OK  # the sandbox still works


def test_ctrl_c_in_the_cli_exits_130_and_logs_the_run(tmp_path):
    home = tmp_path / "home"
    with FakeOpenAI() as server:
        server.reply("\\boxed{4}", delay_s=60)
        process = subprocess.Popen(RUNNER + ["agent", "2+2?", "--protocol", "code", "--base-url", server.url,
                                             "--model", "m"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=dict(os.environ, RUNNER_HOME=str(home)))
        _wait_for(lambda: len(server.requests) == 1)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    runs = json.loads(subprocess.run(RUNNER + ["logs", "runs", "--json"], capture_output=True, text=True,
                                     env=dict(os.environ, RUNNER_HOME=str(home))).stdout)
    assert runs[0]["status"] == "interrupted" and runs[0]["turn_count"] == 1


def test_ctrl_c_in_runner_exec_exits_130_and_logs_the_execution(tmp_path):
    home = tmp_path / "home"
    env = dict(os.environ, RUNNER_HOME=str(home))
    script = tmp_path / "spin.py"
    script.write_text("n = 0\nwhile True:\n    n += 1\n")
    process = subprocess.Popen(RUNNER + ["exec", str(script), "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(3)  # started and running
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "Traceback" not in err
    listed = json.loads(subprocess.run(RUNNER + ["logs", "list", "--json"], capture_output=True, text=True,
                                       env=env).stdout)
    assert listed[0]["result"]["status"] == "crashed"
    assert listed[0]["result"]["error"]["type"] == "Interrupted"


def test_a_run_whose_process_was_killed_is_closed_as_interrupted_on_the_next_open(tmp_path):
    database = tmp_path / "runner.db"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from runner import Sandbox
        from runner.agent import Agent, AgentLog, OpenAIChat
        from runner.logs import LogStore
        store = LogStore({str(database)!r})
        with Sandbox(log_store=store) as sb:
            llm = OpenAIChat("m", base_url=sys.argv[1], api_key="k", timeout_s=600)
            Agent(llm, protocol="code", sandbox=sb, log=AgentLog(store)).run("2+2?")
    """)
    with FakeOpenAI() as server:
        server.reply("\\boxed{4}", delay_s=120)
        process = subprocess.Popen([sys.executable, "-c", script, server.url], cwd=REPO)
        try:
            _wait_for(lambda: len(server.requests) == 1)
            running = AgentLog(database).list()  # opening it while the owner lives changes nothing
            assert [r.status for r in running] == [AgentStatus.RUNNING]
        finally:
            process.kill()
            process.wait(timeout=30)
    runs = AgentLog(database).list()
    assert [r.status for r in runs] == [AgentStatus.INTERRUPTED]
    assert f"pid {process.pid}" in runs[0].stop_reason and runs[0].finished_at is not None


def _wait_for(condition, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


# -- replies cut at the token limit ------------------------------------------------------------------


def test_a_tool_call_cut_at_the_token_limit_is_not_run(sandbox, store):
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[FakeOpenAI.call("add", '{"a": 1, "b":', "c1")], finish_reason="length")
        server.reply("", tool_calls=[FakeOpenAI.call("add", {"a": 1, "b": 2}, "c2")])
        server.reply("3")
        run = Agent(llm(server, max_tokens=20), FUNCTIONS, protocol="tools", sandbox=sandbox,
                    log=AgentLog(store)).run("1+2?")
        tool_message = server.requests[1]["messages"][-1]
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "3"
    first = run.turns[0]
    assert first.feedback_codes == ["TRUNCATED_REPLY"] and first.execution_ids == [] and first.actions == []
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "c1"
    assert "[TRUNCATED_REPLY]" in tool_message["content"] and "20 tokens" in tool_message["content"]
    assert run.turns[1].feedback_codes == [] and len(run.turns[1].execution_ids) == 1


def test_an_answer_cut_at_the_token_limit_is_not_the_answer(sandbox):
    with FakeOpenAI() as server:
        server.reply("Thought: the answer is\nFinal Answer: 12", finish_reason="length")
        server.reply("Thought: the answer is\nFinal Answer: 12", finish_reason="length")
        run = Agent(llm(server), FUNCTIONS, protocol="text", sandbox=sandbox).run("t")
    assert run.status is AgentStatus.GAVE_UP and run.final_answer is None
    assert run.turns[0].feedback_codes == ["TRUNCATED_REPLY"]
    assert "token limit" in run.stop_reason


# -- the context budget --------------------------------------------------------------------------------


def test_the_conversation_sent_stays_within_the_context_budget(sandbox, store):
    calls = [action("shout", {"n": 20_000, "letter": letter}) for letter in "abcd"]
    with FakeOpenAI() as server:
        server.replies(*calls, action("finish_conversation", {"final_answer": "done"}))
        run = Agent(llm(server), FUNCTIONS, protocol="json", sandbox=sandbox, max_feedback_chars=30_000,
                    max_context_chars=12_000, log=AgentLog(store)).run("shout")
        requests = [request["messages"] for request in server.requests]
    assert run.status is AgentStatus.ANSWERED
    for messages in requests[1:]:
        size = sum(len(m["content"]) for m in messages)
        assert size <= 12_000 + 2_000, size  # the budget, plus the markers that replace text
        assert messages[0]["content"] == requests[0][0]["content"]  # system prompt kept whole
    last = requests[-1]
    assert any("cut here to keep the conversation within its context budget" in m["content"] for m in last)
    assert "d" * 2_000 in last[-1]["content"]  # the latest output is still there (most of it)
    logged = AgentLog(store).get(run.id)
    assert "a" * 20_000 in logged.turns[0].feedback_text  # the log keeps every output whole
    assert logged.turns[-1].messages_sent == last  # and records exactly what was sent


def test_fit_leaves_a_short_conversation_alone_and_cuts_oldest_first():
    messages = [{"role": "system", "content": "s" * 100}, {"role": "user", "content": "task"},
                {"role": "assistant", "content": "x" * 5000}, {"role": "user", "content": "y" * 5000},
                {"role": "assistant", "content": "z" * 5000}, {"role": "user", "content": "w" * 5000}]
    assert fit(messages, 100_000) == messages
    cut = fit(messages, 12_000)
    assert messages[2]["content"] == "x" * 5000  # the conversation itself is unchanged
    assert len(cut[2]["content"]) < 5000 and cut[4]["content"] == "z" * 5000


# -- one time budget ----------------------------------------------------------------------------------


def test_one_time_budget_for_sessions_and_agents(sandbox):
    with pytest.raises(ConfigurationError):
        TimeBudget(float("nan"))
    with sandbox.session(budget_s=0.5) as session:
        first = session.run("while True:\n    pass\n", limits=Limits(timeout_s=10))
        assert first.status is Status.TIMEOUT and first.limits.timeout_s <= 0.5
        second = session.run("print(1)")
        assert second.status is Status.TIMEOUT and "time budget of 0.5 s is used up" in second.error.message
    with FakeOpenAI() as server:
        server.replies(action("spin"), action("add", {"a": 1, "b": 2}))
        run = Agent(llm(server), FUNCTIONS, protocol="json", sandbox=sandbox, budget_s=0.5,
                    limits=Limits(timeout_s=10)).run("spin")
    assert run.status is AgentStatus.BUDGET
