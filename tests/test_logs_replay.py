"""`runner logs replay`: a logged request runs again through the real restricted sandbox,
is logged as a replay of its original, and gets a verdict; an agent run's executions are
replayed in order, sessions included, without any model."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits, Sandbox
from runner.agent import Agent, OpenAIChat
from runner.cli import main
from runner.ids import new_id
from runner.logs import LogStore
from runner.logs.replay import NotReplayed, ReplayOutcome, ReplayVerdict, compare, replay
from runner.types import ExecutionRequest, ExecutionResult, Status


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def store(home: Path):
    with LogStore(home / "runner.db") as opened:
        yield opened


def cli(home: Path, *args: str):
    return CliRunner().invoke(main, ["logs", *args], env={"RUNNER_HOME": str(home)},
                              catch_exceptions=False)


def run_code(store: LogStore, code: str) -> str:
    with Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=5)) as sandbox:
        return sandbox.run(code).id


def test_a_deterministic_run_replays_identical_and_is_linked(home: Path, store: LogStore):
    original = run_code(store, "print(sum(range(10)))\nvalue = [i * i for i in range(5)]\nprint(value)")
    result = cli(home, "replay", original)
    assert result.exit_code == 0, result.output
    assert f"{original} -> " in result.stdout and "identical (ok)" in result.stdout
    replays = [r for r in store.list_executions(source="replay", limit=None)]
    assert len(replays) == 1 and replays[0].meta == {"replay_of": original}
    assert replays[0].result.stdout == store.get_execution(original).result.stdout
    conn = sqlite3.connect(home / "runner.db")
    assert conn.execute("SELECT replay_of FROM executions WHERE id = ?",
                        (replays[0].id,)).fetchone() == (original,)


def test_a_random_run_replays_with_different_output_and_a_diff(home: Path, store: LogStore):
    original = run_code(store, "import random\nprint(random.random())")
    result = cli(home, "replay", original, "--json")
    assert result.exit_code == 1
    outcome = json.loads(result.stdout)
    assert outcome["original"] == original and outcome["verdict"] == "different_output"
    assert outcome["replay"] != original and outcome["replay_status"] == "ok"
    assert "--- original stdout" in outcome["diff"] and "+++ replay stdout" in outcome["diff"]


def test_a_changed_status_is_different_status(home: Path, store: LogStore):
    # The log says this code failed; run again, it does not: the status changed.
    request = ExecutionRequest(code="print('fine')")
    logged = ExecutionResult(id=new_id(), backend="restricted", status=Status.TIMEOUT)
    store.record_execution(request, logged)
    outcomes = replay(store, logged.id)
    assert len(outcomes) == 1 and isinstance(outcomes[0], ReplayOutcome)
    assert outcomes[0].verdict is ReplayVerdict.DIFFERENT_STATUS
    assert (outcomes[0].original_status, outcomes[0].replay_status) == ("timeout", "ok")
    text = cli(home, "replay", logged.id).stdout
    assert "different_status (timeout -> ok)" in text and "+fine" in text


def test_compare_looks_at_output_return_value_and_error():
    base = ExecutionResult(id="a", backend="restricted", status=Status.OK, stdout="1\n", return_value=[1])
    assert compare(base, base.model_copy(update={"id": "b", "duration_ms": 99})) == (ReplayVerdict.IDENTICAL, "")
    verdict, diff = compare(base, base.model_copy(update={"return_value": [2]}))
    assert verdict is ReplayVerdict.DIFFERENT_OUTPUT and "return value" in diff
    verdict, _ = compare(base, base.model_copy(update={"stdout_truncated": True}))
    assert verdict is ReplayVerdict.DIFFERENT_OUTPUT


DOUBLE = FunctionSpec.from_dict({"name": "double", "description": "Double x.",
                                 "arguments": {"x": {"type": "integer"}},
                                 "code": "def double(x):\n    return 2 * x\n"})


def test_an_agent_run_replays_its_executions_in_order_without_a_model(home: Path, store: LogStore):
    functions = FunctionSet("replay_tools", [DOUBLE], log_store=False)
    with FakeOpenAI() as server, Sandbox(backend="restricted", log_store=store,
                                         limits=Limits(timeout_s=5)) as sandbox:
        server.replies(
            "```python\nbase = double(4)\nprint(base)\n```",
            # State from the block before, a call beside the block, and a refused call.
            "```python\nprint(base + 1)\n```\n```json\n"
            '{"function": "double", "arguments": {"x": 3}}\n```\n```json\n'
            '{"function": "double", "arguments": {"x": "not a number"}}\n```',
            "\\boxed{9}")
        llm = OpenAIChat("fake-model", base_url=server.url, api_key="k", backoff_s=0.001)
        run = Agent(llm, functions, protocol="code", sandbox=sandbox,
                    limits=Limits(timeout_s=5)).run("double things")
        requests_made = len(server.requests)
    # The model server is gone: a replay that asked it anything would fail.
    executions = run.execution_ids
    assert len(executions) == 5  # definitions, block, block, call, refused call

    result = cli(home, "replay", run.id, "--json")
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["original"] for line in lines] == executions[:4]
    assert [line["verdict"] for line in lines] == ["identical"] * 4
    assert "not replayed" in result.stderr and executions[4] in result.stderr
    assert result.exit_code == 0
    assert requests_made == 3
    replays = {r.meta["replay_of"]: r for r in store.list_executions(source="replay", limit=None)}
    assert set(replays) == set(executions[:4])
    assert replays[executions[2]].result.stdout == "9\n"  # `base` survived: one session again
    assert replays[executions[1]].meta["session"] == replays[executions[2]].meta["session"]
    assert all(r.meta["replay_of_run"] == run.id for r in replays.values())

    outcomes = replay(store, run.id)
    assert isinstance(outcomes[-1], NotReplayed) and "refused before running" in outcomes[-1].reason


def test_replaying_an_unknown_id_is_a_clear_error(home: Path, store: LogStore):
    result = cli(home, "replay", "ZZZZZZZZ")
    assert result.exit_code == 1 and "no execution with an id starting" in result.output


def test_a_docker_run_replays_in_the_same_image_or_says_it_changed(home: Path, store: LogStore):
    from conftest import backend_options

    options = backend_options("docker")
    with Sandbox(backend="docker", log_store=store, **options) as sandbox:
        original = sandbox.run("import sys\nprint(sys.version_info[:2], sum(range(100)))").id
    first = replay(store, original, sandbox_options=options)[0]
    assert isinstance(first, ReplayOutcome)
    assert first.verdict is ReplayVerdict.IDENTICAL and first.warnings == []
    assert store.get_execution(first.replay).result.backend == "docker"
    assert store.get_execution(first.replay).result.image == store.get_execution(original).result.image

    # The log says another image ran it: the replay says so.
    record = store.get_execution(original)
    moved = record.result.model_copy(update={"id": new_id(), "image": "sha256:" + "0" * 64})
    store.record_execution(record.request, moved)
    outcome = replay(store, moved.id, sandbox_options=options)[0]
    assert isinstance(outcome, ReplayOutcome) and outcome.verdict is ReplayVerdict.IDENTICAL
    assert any("the sandbox image changed" in warning for warning in outcome.warnings)


def test_an_agent_run_replays_turn_by_turn_and_stops_where_it_diverges(home: Path, store: LogStore):
    """Recorded on the jail tier: replayed there, every turn is identical; replayed on the
    strict tier, the turn whose block imports `os` comes back denied, the replay stops
    after it (the model would have read other feedback there) and says so."""
    from runner.testing import ScriptedChat

    with Sandbox(log_store=store, limits=Limits(timeout_s=10)) as sandbox:
        run = Agent(ScriptedChat(["```python\nprint(1 + 1)\n```",
                                  "```python\nimport os\nprint(os.sep)\n```",
                                  "```python\nprint(3)\n```", "so \\boxed{3}"]),
                    protocol="code", sandbox=sandbox).run("count")
    assert run.status == "answered" and len(run.execution_ids) == 3

    same = cli(home, "replay", run.id, "--json")
    assert same.exit_code == 0, same.output
    lines = [json.loads(line) for line in same.stdout.splitlines()]
    assert [(line["turn"], line["verdict"]) for line in lines] == [
        (1, "identical"), (2, "identical"), (3, "identical")]

    strict = cli(home, "replay", run.id, "--backend", "restricted", "--json")
    assert strict.exit_code == 1
    lines = [json.loads(line) for line in strict.stdout.splitlines()]
    assert [(line.get("turn"), line.get("verdict")) for line in lines[:2]] == [
        (1, "identical"), (2, "different_status")]
    assert lines[2] == {"diverged": {"run": run.id, "turn": 2, "turns": 4, "reason": lines[2][
        "diverged"]["reason"]}} and len(lines) == 3  # turn 3 was not replayed
    assert "replayed on restricted; the original ran on jail" in strict.stderr
    text = cli(home, "replay", run.id, "--backend", "restricted")
    assert f"run {run.id} diverges at turn 2 of 4" in text.stdout
