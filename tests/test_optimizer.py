"""The optimizer step through the real `openai` SDK against a scripted server on 127.0.0.1,
with the real restricted sandbox for the smoke runs and a real log: every kind of invalid
action refused with its reason fed back as the next turn, an accepted action ending its
conversation and showing in the next request's List B, TERMINATE, the JSON protocol for a
server without tool calling, the limits of a step, the request's budget, and a training
history read from logged agent runs."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits, Sandbox
from runner.agent import Agent, AgentStatus, OpenAIChat
from runner.agent.run import AgentRun
from runner.functions import validate_arguments
from runner.logs import LogStore
from runner.logs.agent import AgentLog
from runner.logs.functions import Author, FunctionVersionLog
from runner.optimizer import Conversation, Optimizer, Statistics, conversations_from_log
from runner.optimizer.prompt import build_task
from runner.optimizer.smoke import example_arguments

SQUARE = {"name": "square", "description": "The square of a whole number.",
          "arguments": {"n": {"type": "integer", "description": "The number."}},
          "packages": [], "code": "def square(n):\n    return n * n\n"}
HALF = FunctionSpec.from_dict({"name": "half", "description": "Half of a number.",
                               "arguments": {"x": {"type": "number"}},
                               "code": "def half(x):\n    return x / 2\n"})
CALLS_HALF = FunctionSpec.from_dict({"name": "quarter", "description": "A quarter of a number.",
                                     "arguments": {"x": {"type": "number"}},
                                     "code": "def quarter(x):\n    return half(half(x))\n"})


@pytest.fixture
def store(tmp_path):
    with LogStore(tmp_path / "log.db") as opened:
        yield opened


@pytest.fixture
def sandbox(store):
    with Sandbox(backend="restricted", log_store=store, source="optimizer",
                 limits=Limits(timeout_s=10)) as box:
        yield box


def llm(server: FakeOpenAI, **options) -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=server.url, api_key="k", backoff_s=0.001, **options)


def history() -> list[Conversation]:
    failed = AgentRun(id="01TESTRUNFAILED00000000000", task="What is 7 squared?", protocol="code",
                      status=AgentStatus.ANSWERED, final_answer="14")
    solved = AgentRun(id="01TESTRUNSOLVED00000000000", task="What is 2 + 2?", protocol="code",
                      status=AgentStatus.ANSWERED, final_answer="4")
    return [Conversation(run=solved, success=True, label="p2"),
            Conversation(run=failed, success=False, label="p1", detail="answered 14, expected 49")]


def optimizer(server: FakeOpenAI, sandbox: Sandbox, store: LogStore, **options) -> Optimizer:
    return Optimizer(llm(server), sandbox=sandbox, log=AgentLog(store), **options)


def call(name: str, arguments: dict | str) -> dict:
    return FakeOpenAI.call(name, arguments)


# -- every kind of invalid action -----------------------------------------------------------------

INVALID = [
    pytest.param("add_function", "this is { not json at all", "MALFORMED_RESPONSE",
                 "are not a JSON object", id="bad-json-arguments"),
    pytest.param("add_function", {**SQUARE, "arguments": '{"n": {"type": "integer"'},
                 "INVALID_ARGUMENTS", "`arguments` is a string but not valid JSON",
                 id="bad-json-schema-text"),
    pytest.param("add_function", {**SQUARE, "code": "def square(n)\n    return n * n\n"},
                 "INVALID_ARGUMENTS", "does not compile: SyntaxError at line 1", id="syntax-error"),
    pytest.param("add_function", {**SQUARE, "code": "def square(n):\nreturn n * n\n"},
                 "INVALID_ARGUMENTS", "does not compile: SyntaxError at line 2", id="indentation"),
    pytest.param("add_function", {**SQUARE, "name": "sq"}, "INVALID_ARGUMENTS",
                 "its code defines 'square', not 'sq'", id="name-differs"),
    pytest.param("add_function", {**SQUARE, "code": "def helper(n):\n    return n\n\n"
                                                    "def square(n):\n    return helper(n) ** 2\n"},
                 "INVALID_ARGUMENTS", "defines 2 top-level functions (helper, square)",
                 id="two-functions"),
    pytest.param("remove_function", {"name": "nowhere"}, "UNKNOWN_FUNCTION",
                 "there is no function 'nowhere' in List B; the functions are: half, quarter",
                 id="remove-missing"),
    pytest.param("revise_function", {**SQUARE}, "UNKNOWN_FUNCTION",
                 "there is no function 'square' in List B", id="revise-missing"),
    pytest.param("remove_function", {"name": "half"}, "INVALID_ARGUMENTS",
                 "quarter calls it: revise or remove it first", id="remove-used"),
    pytest.param("add_function", {**SQUARE, "arguments": {"type": "object", "properties": {
        "n": {"type": "integr"}}}}, "INVALID_ARGUMENTS", "it is not a valid JSON schema",
                 id="invalid-schema"),
    pytest.param("add_function", {**SQUARE, "arguments": {"m": {"type": "integer"}}},
                 "INVALID_ARGUMENTS", "the schema has argument 'm' that def square does not take",
                 id="schema-differs-from-def"),
    pytest.param("add_function", {**SQUARE, "packages": ['x; os_name=="posix"']},
                 "INVALID_ARGUMENTS", "has an environment marker", id="injected-marker"),
    pytest.param("add_function", {**SQUARE, "packages": 'sympy; os_name == "posix"'},
                 "INVALID_ARGUMENTS", "has an environment marker", id="injected-marker-text"),
    pytest.param("add_function", {**SQUARE, "packages": ["x @ https://evil.example/x.whl"]},
                 "INVALID_ARGUMENTS", "points at a URL or path", id="url"),
    pytest.param("add_function", {**SQUARE, "packages": ["--index-url=https://evil.example"]},
                 "INVALID_ARGUMENTS", "looks like a pip option", id="pip-option"),
    pytest.param("add_function", {**SQUARE, "packages": ["requests"]}, "PACKAGE_UNAVAILABLE",
                 "is not available in the restricted backend", id="package-not-offered"),
    pytest.param("add_function", {**SQUARE, "code": "import socket\n\ndef square(n):\n"
                                                    "    return n * n\n"},
                 "DENIED", "defining square was refused", id="refused-import"),
    pytest.param("add_function", {**SQUARE, "code": "def square(n):\n    return sqr(n)\n"},
                 "EXECUTION_FAILED", "NameError", id="undefined-name"),
    pytest.param("add_function", {**SQUARE, "code": "LIMIT = 1 / 0\n\ndef square(n):\n"
                                                    "    return n * n\n"},
                 "EXECUTION_FAILED", "ZeroDivisionError", id="fails-when-defined"),
    pytest.param("add_function", {"name": "square", "code": SQUARE["code"]}, "INVALID_ARGUMENTS",
                 "it lacks description", id="missing-field"),
    pytest.param("add_function", {**SQUARE, "name": "print", "code": "def print(n):\n    return n\n"},
                 "INVALID_ARGUMENTS", "'print' is a Python builtin", id="shadows-a-builtin"),
]


@pytest.mark.parametrize(("action", "arguments", "code", "reason"), INVALID)
def test_an_invalid_action_is_refused_and_the_reason_is_fed_back(store, sandbox, action,
                                                                  arguments, code, reason):
    start = FunctionSet("learned", [HALF, CALLS_HALF], log_store=False)
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[call(action, arguments)]).reply("TERMINATE")
        result = optimizer(server, sandbox, store).step(history(), None, start)
        sent = server.requests
    assert result.terminated and result.actions == []
    assert result.functions.names == ["half", "quarter"]  # List B unchanged
    (refused,) = result.rejected
    assert refused.code == code and reason in refused.reason, refused.reason
    # the next request answers the call with the refusal: its code, its reason, a reminder
    feedback = sent[1]["messages"][-1]
    assert feedback["role"] == "tool" and feedback["tool_call_id"] == sent[1]["messages"][-2][
        "tool_calls"][0]["id"]
    assert feedback["content"].startswith(f"[{code}]") and reason in feedback["content"]
    assert "Reminder:" in feedback["content"]
    run = AgentLog(store).get(result.runs[0].run_id)
    assert run.status == "terminated" and run.turns[0].feedback_codes[0] == code


def test_an_accepted_action_ends_its_conversation_and_list_b_shows_it_next(store, sandbox):
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[call("add_function", {**SQUARE, "name": "sq"})])
        server.reply("", tool_calls=[call("add_function", {**SQUARE, "thought": "why not"})])
        server.reply("", tool_calls=[call("remove_function", {"name": "half"})])
        server.reply("TERMINATE")
        result = optimizer(server, sandbox, store).step(
            history(), None, FunctionSet("learned", [HALF], log_store=False))
        sent = server.requests
    assert [(p.action, p.function, p.accepted) for p in result.proposals] == [
        ("add_function", "sq", False), ("add_function", "square", True),
        ("remove_function", "half", True)]
    assert result.functions.names == ["square"] and result.terminated
    assert [run.status for run in result.runs] == ["answered", "answered", "terminated"]
    accepted = result.actions[0]
    assert accepted.reason == 'a smoke call square({"n": 2}) returned 4'
    # the acceptance ends the first conversation; the next one is a fresh request whose
    # List B has the new function while List A stays as it was
    assert len(sent[1]["messages"]) == 4 and len(sent[2]["messages"]) == 2
    task = sent[2]["messages"][1]["content"]
    list_a, list_b = task.split("List B, ")[0], task.split("List B, ")[1].split("Results with")[0]
    assert "- name: half" in list_a and "- name: square" not in list_a
    assert "after the 1 action taken so far" in list_b and "- name: square" in list_b
    # the smoke runs are logged and linked to the optimizer's turn
    run = AgentLog(store).get(accepted.run_id)
    records = [store.get_execution(i) for i in run.turns[-1].execution_ids]
    assert [r.meta["optimizer_smoke"] for r in records] == ["define", "call"]
    assert records[1].result.return_value == 4 and records[1].meta["agent_run"] == run.id
    assert run.final_answer.startswith("add_function('square') was accepted")
    assert "ignored field: thought" in run.final_answer
    with sqlite3.connect(store.path) as conn:
        linked = conn.execute("SELECT COUNT(*) FROM executions WHERE agent_run_id = ?",
                              (run.id,)).fetchone()[0]
    assert linked == 2
    # step() changed nothing it was given; apply() carries the actions out, logged
    target = FunctionSet("applied", [HALF], log_store=store)
    Optimizer.apply(result.actions, target, by=Author.optimizer("T1"), note="epoch 1")
    assert target.names == ["square"]
    changes = FunctionVersionLog(store).history("applied")
    assert [(c.function, c.action, str(c.author), c.note) for c in changes] == [
        ("square", "add", "optimizer T1", "epoch 1"), ("half", "remove", "optimizer T1", "epoch 1")]


def test_a_step_takes_at_most_max_actions_and_max_tries(store, sandbox):
    with FakeOpenAI() as server:
        for index in range(3):
            server.reply("", tool_calls=[call("add_function", {
                **SQUARE, "name": f"f{index}", "code": f"def f{index}(n):\n    return n\n"})])
        result = optimizer(server, sandbox, store, max_actions=2).step(history(), None, [])
        assert server.pending == 1  # the third action was never asked for
    assert result.functions.names == ["f0", "f1"] and result.ended == "2 actions accepted"
    with FakeOpenAI() as server:
        server.reply("I think a function would help.")  # no action, no TERMINATE
        server.reply("", tool_calls=[call("remove_function", {"name": "gone"})])
        server.reply("", tool_calls=[call("remove_function", {"name": "gone"})])
        result = optimizer(server, sandbox, store, max_tries=2).step(history(), None, [])
        assert server.pending == 1
    assert result.actions == [] and not result.terminated
    assert result.ended == "no acceptable action in 2 replies (max_turns)"
    assert [(p.action, p.code) for p in result.rejected] == [
        (None, "MALFORMED_RESPONSE"), ("remove_function", "UNKNOWN_FUNCTION")]
    assert "the reply takes no action" in result.rejected[0].reason


def test_a_server_without_tool_calling_gets_the_json_protocol(store, sandbox):
    reply = json.dumps({"thought": "a square helps", "action": {
        "function": "add_function", "arguments": {**SQUARE, "arguments": json.dumps(SQUARE["arguments"])}}})
    with FakeOpenAI(reject_tools="this model does not support tools") as server:
        server.reply(reply).reply("Nothing more to change.\nTERMINATE")
        step = optimizer(server, sandbox, store)
        result = step.step(history(), None, [])
        sent = server.requests
    assert step.active_protocol == "json"
    assert [p.function for p in result.actions] == ["square"] and result.terminated
    assert "tools" in sent[0] and all("tools" not in body for body in sent[1:])
    assert '"action": {"function": "<add_function' in sent[1]["messages"][0]["content"]
    run = AgentLog(store).get(result.runs[0].run_id)
    assert run.protocol == "json"


def test_terminate_first_changes_nothing(store, sandbox):
    with FakeOpenAI() as server:
        server.reply("The list is fine as it is. TERMINATE")
        result = optimizer(server, sandbox, store).step(
            history(), None, FunctionSet("learned", [HALF], log_store=False))
    assert result.terminated and result.proposals == [] and result.functions.names == ["half"]
    assert result.ended.startswith("the optimizer answered TERMINATE")


def test_the_request_cuts_conversations_to_the_budget_failures_first():
    def run(index: int, length: int) -> AgentRun:
        return AgentRun(id=f"01TESTRUN{index:017d}", task=f"task {index} " + "x" * length,
                        protocol="code", status=AgentStatus.ANSWERED, final_answer=str(index))

    conversations = [Conversation(run=run(i, 3000), success=i % 2 == 0, label=f"p{i}")
                     for i in range(20)]
    functions = FunctionSet("learned", [HALF], log_store=False)
    task = build_task(current=functions, working=functions, actions_taken=0,
                      conversations=conversations, statistics=Statistics.of(conversations),
                      history_tokens=3000)
    shown = [line.split(":")[0].removeprefix("### ") for line in task.splitlines()
             if line.startswith("### ")]
    assert shown and all(int(label[1:]) % 2 == 1 for label in shown)  # failures first
    assert len(task) < 3000 * 4 + 2500  # the budget, and the lists around it
    assert f"Conversations with List A ({len(shown)} of 20, failures first; {20 - len(shown)} " \
           "left out for length)" in task
    assert "Results with List A: 10 of 20 tasks succeeded (success rate 50.0%)." in task
    assert task.index("- p1: FAILED") < task.index("- p0: succeeded")


def test_a_training_history_is_read_from_logged_agent_runs(store, sandbox):
    with FakeOpenAI() as server:
        server.replies("```python\nprint(6 * 7)\n```", "\\boxed{42}", "\\boxed{41}")
        agent = Agent(llm(server), None, protocol="code", sandbox=sandbox, log=AgentLog(store))
        first, second = agent.run("What is 6 times 7?"), agent.run("What is 6 times 7 again?")
    conversations = conversations_from_log({first.id: True, second.id: False}, log_store=store,
                                           labels={first.id: "first"})
    assert [(c.title, c.success, len(c.run.turns)) for c in conversations] == [
        ("first", True, 2), (second.id, False, 1)]
    statistics = Statistics.of(conversations)
    assert (statistics.solved, statistics.total, statistics.success_rate) == (1, 2, 0.5)
    task = build_task(current=FunctionSet("x", log_store=False),
                      working=FunctionSet("x", log_store=False), actions_taken=0,
                      conversations=conversations, statistics=statistics)
    assert "[assistant] ```python\nprint(6 * 7)\n```" in task and "The block ran. Output:\n42" in task


def test_example_arguments_fit_their_schema():
    schema = {"type": "object", "properties": {
        "n": {"type": "integer", "minimum": 5}, "x": {"type": "number", "exclusiveMaximum": 1},
        "mode": {"enum": ["fast", "exact"]}, "name": {"type": "string", "minLength": 3},
        "values": {"type": "array", "items": {"type": "number"}, "minItems": 2},
        "point": {"type": "object", "properties": {"y": {"type": ["null", "integer"]}},
                  "required": ["y"]},
        "flag": {"type": "boolean", "default": True}, "optional": {"type": "string"}},
        "required": ["n", "x", "mode", "name", "values", "point", "flag"]}
    arguments = example_arguments(schema)
    assert arguments == {"n": 5, "x": 0.0, "mode": "fast", "name": "222", "values": [2.0, 2.0],
                         "point": {"y": 2}, "flag": True}
    spec = FunctionSpec(name="f", parameters=schema, code="def f(**kw):\n    return kw\n")
    assert validate_arguments(spec, arguments)[1] is None
