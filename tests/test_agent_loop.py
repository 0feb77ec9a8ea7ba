"""The agent loop through the real `openai` SDK against a scripted server on 127.0.0.1:
every protocol, every error code, every stop status, retries, the tools-rejected error,
and what is logged. The sandbox is the real restricted backend."""

from __future__ import annotations

import json

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits
from runner.agent import Agent, AgentLog, AgentStatus, OpenAIChat
from runner.errors import (
    ConfigurationError,
    LLMAuthenticationError,
    LLMUnavailableError,
    ToolsNotSupportedError,
)
from runner.logs.agent import find_agent_run, load_executions
from runner.logs.agent_text import render_agent_run


def spec(name: str, code: str, properties: dict | None = None, description: str = "",
         packages: str = "") -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "description": description,
                                   "arguments": properties or {}, "packages": packages, "code": code})


CALCULATE = spec("calculate", "def calculate(formula):\n"
                 "    if not set(formula) <= set('0123456789.+-*/() '):\n"
                 "        raise ValueError(f'not an arithmetic expression: {formula!r}')\n"
                 "    from sympy import sympify\n"
                 "    return float(sympify(formula))\n",
                 {"formula": {"type": "string", "description": "Python arithmetic such as '3.7 * 0.54'."}},
                 "Evaluate an arithmetic expression written in Python syntax.")
LOCATION = spec("get_current_location", "def get_current_location():\n    return {'city': 'Jakarta'}\n",
                description="Where the user is.")
SPIN = spec("spin", "def spin():\n    while True:\n        pass\n")
HOG = spec("hog", "def hog():\n    data = [0] * (10 ** 9)\n    return len(data)\n")
SHOUT = spec("shout", "def shout(n):\n    print('x' * n)\n    return n\n", {"n": {"type": "integer"}})
PEEK = spec("peek", "def peek():\n    import os\n    return os.getcwd()\n")
FUNCTIONS = FunctionSet("test_tools", [CALCULATE, LOCATION, SPIN, HOG, SHOUT, PEEK], log_store=False)
NUMPY = FunctionSet("numpy_tools", [spec("mean", "def mean(values):\n    import numpy\n    return float(numpy.mean(values))\n",
                                         {"values": {"type": "array", "items": {"type": "number"}}},
                                         packages="numpy")], log_store=False)


def action(function: str, arguments: dict | None = None, thought: str = "step") -> str:
    return json.dumps({"thought": thought, "action": {"function": function, "arguments": arguments or {}}})


def finish(answer: str) -> str:
    return action("finish_conversation", {"final_answer": answer}, "done")


@pytest.fixture
def server():
    with FakeOpenAI() as fake:
        yield fake


def make_llm(server: FakeOpenAI, **options) -> OpenAIChat:
    options.setdefault("backoff_s", 0.001)
    return OpenAIChat("fake-model", base_url=server.url, api_key="test-key", **options)


def make_agent(server: FakeOpenAI, sandbox, protocol: str = "json", functions=FUNCTIONS, **options) -> Agent:
    options.setdefault("limits", Limits(timeout_s=2))
    return Agent(make_llm(server), functions, protocol=protocol, sandbox=sandbox, **options)


def sent_messages(server: FakeOpenAI, index: int) -> list[dict]:
    return server.requests[index]["messages"]


def feedback_codes(run) -> list[list[str]]:
    return [turn.feedback_codes for turn in run.turns]


# -- protocols ------------------------------------------------------------------------------------


def test_json_protocol_runs_a_call_feeds_back_the_result_and_finishes(server, restricted):
    server.replies(action("calculate", {"formula": "3.7 * 0.5"}), finish("2 knots"))
    run = make_agent(server, restricted).run("3.7 km/h in knots?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "2 knots"
    assert len(run.turns) == 2 and len(server.requests) == 2
    first = sent_messages(server, 0)
    assert [m["role"] for m in first] == ["system", "user"]
    assert "finish_conversation" in first[0]["content"] and "calculate" in first[0]["content"]
    assert first[1]["content"] == "3.7 km/h in knots?"
    assert "tools" not in server.requests[0]
    second = sent_messages(server, 1)
    assert second[2] == {"role": "assistant", "content": action("calculate", {"formula": "3.7 * 0.5"})}
    assert second[3]["role"] == "user"
    assert second[3]["content"] == 'Result of calculate({"formula": "3.7 * 0.5"}): 1.85'
    assert run.turns[0].feedback_text == second[3]["content"]
    assert run.turns[1].feedback_messages == []


def test_tools_protocol_runs_several_calls_and_answers_each_in_order(server, restricted):
    server.reply("", tool_calls=[FakeOpenAI.call("get_current_location", {}, "call_a"),
                                 FakeOpenAI.call("calculate", "{'formula': '2*21',}", "call_b")])
    server.reply("It is Jakarta, and 42.")
    run = make_agent(server, restricted, protocol="tools").run("Where am I and what is 2*21?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "It is Jakarta, and 42."
    request = server.requests[0]
    assert [t["function"]["name"] for t in request["tools"]] == FUNCTIONS.names
    assert request["tools"][0]["type"] == "function"
    second = sent_messages(server, 1)
    assert second[2]["tool_calls"][0]["id"] == "call_a"
    assert second[3] == {"role": "tool", "tool_call_id": "call_a",
                         "content": 'Result of get_current_location(): {"city": "Jakarta"}'}
    assert second[4]["role"] == "tool" and second[4]["tool_call_id"] == "call_b"
    assert second[4]["content"] == 'Result of calculate({"formula": "2*21"}): 42.0'
    assert len(run.turns[0].execution_ids) == 2


def test_tools_protocol_problem_of_one_call_goes_in_its_own_tool_message(server, restricted):
    server.reply("", tool_calls=[FakeOpenAI.call("calculate", "not json at all", "bad"),
                                 FakeOpenAI.call("calculate", {"formula": "1+1"}, "good")])
    server.reply("2")
    run = make_agent(server, restricted, protocol="tools").run("1+1?")
    assert run.status is AgentStatus.ANSWERED
    tool_messages = [m for m in sent_messages(server, 1) if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["bad", "good"]
    assert tool_messages[0]["content"].startswith("[MALFORMED_RESPONSE] the arguments of the call to calculate")
    assert tool_messages[1]["content"].startswith("Result of calculate")


def test_text_protocol_observations_and_final_answer(server, restricted):
    server.replies("Thought: first the place\nTool: get_current_location\nTool Input: {}\nObservation: Paris",
                   "Thought: I know it\nFinal Answer: Jakarta")
    run = make_agent(server, restricted, protocol="text").run("Where am I?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "Jakarta"
    assert "Tool Input:" in sent_messages(server, 0)[0]["content"]
    feedback = sent_messages(server, 1)[3]["content"]
    assert feedback.startswith('Observation: Result of get_current_location(): {"city": "Jakarta"}')
    assert "Note: the Observation you wrote was ignored" in feedback


def test_code_protocol_keeps_state_mixes_calls_and_ends_with_boxed(server, restricted):
    server.replies(
        "Let me set up.\n```python\nspeed = calculate('3.7 * 0.539957')\nprint(round(speed, 2))\n```",
        "```python\nprint(speed * 2)\n```\nand also\n```json\n"
        '{"function": "calculate", "arguments": {"formula": "1+1"}}\n```',
        "So the answer is $\\boxed{2.0}$.")
    run = make_agent(server, restricted, protocol="code").run("Convert 3.7 km/h to knots.")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "2.0"
    first_feedback = sent_messages(server, 1)[3]["content"]
    assert first_feedback == "The block ran. Output:\n2.0"
    second_feedback = sent_messages(server, 2)[5]["content"]
    assert "Block 1 ran. Output:\n3.9956818" in second_feedback
    assert 'Result of calculate({"formula": "1+1"}): 2.0' in second_feedback
    # turn 1: the set's definitions, then the block; all logged with the run's ids
    assert len(run.turns[0].execution_ids) == 2
    records = load_executions(restricted.log_store, run)
    setup = records[run.turns[0].execution_ids[0]]
    assert setup.meta["agent_setup"] is True and "def calculate" in setup.request.code
    assert all(records[i].meta["agent_run"] == run.id for i in run.execution_ids)
    assert records[run.turns[1].execution_ids[0]].meta["session"] == setup.meta["session"]


def test_code_protocol_boxed_with_code_is_not_accepted(server, restricted):
    server.replies("```python\nprint(6*7)\n```\nThe answer is \\boxed{41}.", "\\boxed{42}")
    run = make_agent(server, restricted, protocol="code", functions=None).run("6*7?")
    assert run.final_answer == "42" and len(run.turns) == 2
    assert "'41' was not accepted" in sent_messages(server, 1)[3]["content"]


def test_code_protocol_session_restart_redefines_the_functions(server, restricted):
    server.replies("```python\nx = 1\nwhile True:\n    pass\n```",
                   "```python\nprint(x)\n```",
                   "```python\nprint(calculate('2+3'))\n```",
                   "\\boxed{5}")
    run = make_agent(server, restricted, protocol="code", limits=Limits(timeout_s=1)).run("t")
    assert run.status is AgentStatus.ANSWERED
    assert feedback_codes(run)[:3] == [["TIMEOUT"], ["EXECUTION_FAILED"], []]
    assert "variables and imports from earlier blocks are gone" in run.turns[0].feedback_text
    assert "NameError" in run.turns[1].feedback_text  # x is gone with the old process
    assert "5.0" in run.turns[2].feedback_text  # but the functions were defined again


# -- error codes -------------------------------------------------------------------------------------


def test_malformed_response_gets_the_template(server, restricted):
    server.replies("I would compute 3.7 times 0.54.", finish("2"))
    run = make_agent(server, restricted).run("t")
    assert feedback_codes(run)[0] == ["MALFORMED_RESPONSE"]
    text = run.turns[0].feedback_text
    assert text.startswith("[MALFORMED_RESPONSE] the reply holds no JSON object")
    assert 'Reminder: Reply with exactly one JSON object and nothing else' in text


@pytest.mark.parametrize("function, arguments, code, words", [
    ("calc", {"formula": "1"}, "UNKNOWN_FUNCTION", "available: calculate, get_current_location"),
    ("calculate", {"expr": "1"}, "INVALID_ARGUMENTS", "missing: formula"),
    ("calculate", {"formula": "1 km/h = 0.54 knots, so 3.7 km/h"}, "EXECUTION_FAILED",
     "ValueError: not an arithmetic expression"),
    ("spin", {}, "TIMEOUT", "was stopped"),
    ("hog", {}, "MEMORY_LIMIT", "memory limit"),
    ("peek", {}, "DENIED", "import of 'os' is not allowed"),
])
def test_each_failure_code_reaches_the_model(server, restricted, function, arguments, code, words):
    server.replies(action(function, arguments), finish("done"))
    run = make_agent(server, restricted).run("t")
    assert run.status is AgentStatus.ANSWERED
    assert feedback_codes(run)[0] == [code]
    sent = sent_messages(server, 1)[-1]["content"]
    assert sent.startswith(f"[{code}]")
    assert words in sent
    if code == "EXECUTION_FAILED":  # the function's own description of a valid input
        assert "Python arithmetic such as '3.7 * 0.54'" in sent
    assert sent == run.turns[0].feedback_text


def test_package_unavailable(server, restricted):
    server.replies(action("mean", {"values": [1, 2]}), finish("1.5"))
    run = make_agent(server, restricted, functions=NUMPY).run("t")
    assert feedback_codes(run)[0] == ["PACKAGE_UNAVAILABLE"]
    assert "numpy" in run.turns[0].feedback_text


def test_output_truncated_for_the_model_but_whole_in_the_log(server, restricted):
    server.replies(action("shout", {"n": 20000}), finish("ok"))
    run = make_agent(server, restricted, max_feedback_chars=800).run("t")
    assert feedback_codes(run)[0] == ["OUTPUT_TRUNCATED"]
    text = run.turns[0].feedback_text
    assert "characters cut" in text and len(text) < 2000
    record = restricted.log_store.get_execution(run.turns[0].execution_ids[0])
    assert record.result.stdout == "x" * 20000 + "\n"


# -- limits and stop statuses ----------------------------------------------------------------------------


def test_gave_up_when_the_model_repeats_a_failing_call(server, restricted):
    server.replies(action("calculate", {"formula": "two plus two"}),
                   action("calculate", {"formula": "two plus two"}, "again"), finish("4"))
    run = make_agent(server, restricted).run("t")
    assert run.status is AgentStatus.GAVE_UP
    assert "repeated the failing call calculate" in run.stop_reason
    assert len(run.turns) == 2 and len(run.turns[1].execution_ids) == 0  # not run again
    assert server.pending == 1


def test_gave_up_when_the_same_malformed_reply_comes_twice(server, restricted):
    server.replies("no idea", "no idea", finish("x"))
    run = make_agent(server, restricted).run("t")
    assert run.status is AgentStatus.GAVE_UP and len(run.turns) == 2


def test_max_turns(server, restricted):
    server.replies(action("calculate", {"formula": "1"}), action("calculate", {"formula": "2"}),
                   action("calculate", {"formula": "3"}))
    run = make_agent(server, restricted, max_turns=2).run("t")
    assert run.status is AgentStatus.MAX_TURNS and run.final_answer is None
    assert len(run.turns) == 2 and server.pending == 1


def test_budget(server, restricted):
    server.replies(action("spin"), action("calculate", {"formula": "1"}), finish("x"))
    run = make_agent(server, restricted, budget_s=0.5).run("t")
    assert run.status is AgentStatus.BUDGET
    assert feedback_codes(run)[0] == ["TIMEOUT"]
    assert "budget of this conversation is used up" in run.turns[0].feedback_text
    assert run.sandbox_ms >= 500
    assert len(run.turns) == 2 and run.turns[1].execution_ids == []


def test_budget_leaves_room_for_an_answer(server, restricted):
    server.replies(action("spin"), finish("tired"))
    run = make_agent(server, restricted, budget_s=0.5).run("t")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "tired"


def test_a_function_failing_repeatedly_is_disabled(server, restricted):
    server.replies(action("calculate", {"formula": "a b"}), action("calculate", {"formula": "c d"}),
                   action("calculate", {"formula": "1"}), finish("gave up on it"))
    run = make_agent(server, restricted, max_consecutive_failures=2).run("t")
    assert run.status is AgentStatus.ANSWERED
    assert feedback_codes(run)[:3] == [["EXECUTION_FAILED"], ["EXECUTION_FAILED"], ["DENIED"]]
    assert "calculate has now failed 2 times in a row" in run.turns[1].feedback_text
    assert run.turns[2].execution_ids == []  # refused without running


def test_llm_error_after_retries_is_a_status_with_the_error(server, restricted):
    for _ in range(3):
        server.error(500, "boom")
    agent = Agent(make_llm(server, max_retries=2), FUNCTIONS, protocol="json", sandbox=restricted)
    run = agent.run("t")
    assert run.status is AgentStatus.LLM_ERROR
    assert run.error["code"] == "LLM_UNAVAILABLE" and "HTTP 500" in run.error["message"]
    assert "after 2 retries" in run.error["message"]
    assert len(server.requests) == 3 and run.turns[0].error == run.error


# -- the client -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried(server, status):
    server.error(status, "slow down", headers={"retry-after-ms": "5"}).reply("fine")
    reply = make_llm(server).complete([{"role": "user", "content": "hi"}])
    assert reply.content == "fine" and reply.retries == 1
    assert len(server.requests) == 2


def test_retry_after_is_honoured(server):
    waits: list[float] = []
    server.error(429, "later", headers={"retry-after": "0.25"}).error(500, "again").reply("ok")
    llm = make_llm(server, sleep=waits.append, backoff_s=0.5)
    assert llm.complete([{"role": "user", "content": "hi"}]).retries == 2
    assert waits[0] == 0.25 and 0.25 <= waits[1] <= 1.0  # the header, then our own backoff


def test_client_errors_are_not_retried(server):
    server.error(401, "bad key").reply("never")
    with pytest.raises(LLMAuthenticationError, match="refused the API key"):
        make_llm(server).complete([{"role": "user", "content": "hi"}])
    assert len(server.requests) == 1


def test_unreachable_server_is_unavailable():
    with FakeOpenAI() as fake:
        url = fake.url
    llm = OpenAIChat("m", base_url=url, max_retries=1, backoff_s=0.001)
    with pytest.raises(LLMUnavailableError, match="cannot reach"):
        llm.complete([{"role": "user", "content": "hi"}])


def test_tools_rejected_suggests_the_json_protocol(restricted):
    message = "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"
    with FakeOpenAI(reject_tools=message) as fake:
        with pytest.raises(ToolsNotSupportedError) as caught:
            make_llm(fake).complete([{"role": "user", "content": "hi"}], tools=FUNCTIONS.to_openai_tools())
        assert "--protocol json" in caught.value.fix and caught.value.code == "TOOLS_UNSUPPORTED"
        run = make_agent(fake, restricted, protocol="tools").run("t")
        assert run.status is AgentStatus.LLM_ERROR and run.error["code"] == "TOOLS_UNSUPPORTED"
        assert "--protocol json" in run.error["fix"]
        fake.replies(finish("fine without tools"))
        assert make_agent(fake, restricted, protocol="json").run("t").final_answer == "fine without tools"


def test_model_name_from_the_server_and_api_key_sent(server, monkeypatch):
    monkeypatch.delenv("RUNNER_MODEL", raising=False)
    llm = OpenAIChat(base_url=server.url, api_key="sekrit")
    assert llm.model == "fake-model"
    server.reply("hi")
    llm.complete([{"role": "user", "content": "x"}])
    assert server.headers[0]["authorization"] == "Bearer sekrit"
    with FakeOpenAI(models=["a", "b"]) as many:
        with pytest.raises(ConfigurationError, match="serves 2 models"):
            OpenAIChat(base_url=many.url)


def test_usage_latency_and_exact_messages_are_logged(server, restricted):
    server.reply(action("calculate", {"formula": "1+2"}), prompt_tokens=100, completion_tokens=20)
    server.reply(finish("3"), prompt_tokens=150, completion_tokens=10)
    run = make_agent(server, restricted).run("1+2?")
    logged = AgentLog(restricted.log_store).get(run.id)
    assert logged == run
    assert [t.messages_sent for t in logged.turns] == [r["messages"] for r in server.requests]
    assert (logged.prompt_tokens, logged.completion_tokens) == (250, 30)
    assert logged.turns[0].response["usage"]["prompt_tokens"] == 100
    assert logged.turns[0].actions == [{"kind": "call", "function": "calculate",
                                        "arguments": {"formula": "1+2"}, "call_id": None}]
    execution = restricted.log_store.get_execution(logged.turns[0].execution_ids[0])
    assert execution.meta["agent_run"] == run.id and execution.meta["agent_turn"] == 1
    assert execution.meta["function"] == "calculate"
    text = render_agent_run(logged, load_executions(restricted.log_store, logged))
    assert f"agent run  {run.id}" in text and "status     answered" in text
    assert text.index("turn 1") < text.index(execution.id) < text.index("feedback sent") < text.index("turn 2")
    assert find_agent_run(restricted.log_store, run.id[:20]) == logged
    assert find_agent_run(restricted.log_store, execution.id) is None


def test_tools_protocol_call_written_as_text_is_run_and_answered_in_a_user_message(server, restricted):
    server.replies('{"name": "calculate", "arguments": {"formula": "17+25"}}', "42")
    run = make_agent(server, restricted, protocol="tools").run("17+25?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "42"
    follow_up = sent_messages(server, 1)[3]
    assert follow_up["role"] == "user"
    assert follow_up["content"].startswith('Result of calculate({"formula": "17+25"}): 42.0')
    assert "tool-calling interface" in follow_up["content"]


def test_text_protocol_malformed_reply_is_no_observation(server, restricted):
    server.replies("I think it is 4.", "Final Answer: 4")
    run = make_agent(server, restricted, protocol="text").run("2+2?")
    assert run.final_answer == "4"
    assert sent_messages(server, 1)[3]["content"].startswith("[MALFORMED_RESPONSE] the reply has neither")


def test_an_orchestrator_failure_ends_the_run_crashed_and_logged(restricted):
    class Broken:
        model = "broken"

        def complete(self, messages, *, tools=None):
            raise RuntimeError("bug in a custom client")

    agent = Agent(Broken(), FUNCTIONS, protocol="json", sandbox=restricted)
    run = agent.run("t")
    assert run.status is AgentStatus.CRASHED
    assert run.error["code"] == "CRASHED" and "RuntimeError: bug in a custom client" in run.error["message"]
    assert "Traceback" in run.error["traceback"]
    latest = AgentLog(restricted.log_store).get(run.id)
    assert latest.model == "broken" and latest.status is AgentStatus.CRASHED
    assert latest.stop_reason.startswith("the orchestrator failed") and latest.finished_at is not None
    assert len(latest.turns) == 1 and latest.turns[0].error["code"] == "CRASHED"
