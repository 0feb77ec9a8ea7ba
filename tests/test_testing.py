"""`runner.testing`: fake chat models that script an agent without a model server. Their
replies go through the same reading as a server's, so the agent, its feedback and the log
see what a real reply would give."""

from __future__ import annotations

import pytest

from runner import FunctionSet, tool
from runner.agent import Agent, AgentStatus
from runner.errors import LLMError
from runner.testing import FunctionChat, ScriptedChat, tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def test_a_scripted_code_conversation_runs_in_the_sandbox(sandbox):
    chat = ScriptedChat(["```python\nprint(6 * 7)\n```", "So it is $\\boxed{42}$."])
    run = Agent(chat, protocol="code", sandbox=sandbox).run("What is 6 * 7?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "42"
    assert chat.pending == 0 and len(chat.requests) == 2
    assert chat.requests[1]["messages"][-1]["content"].endswith("42")  # the block's output
    assert run.turns[0].response["choices"][0]["message"]["content"].startswith("```python")
    assert run.model == "scripted-model"


def test_a_native_tool_call_and_the_tools_it_was_offered(sandbox):
    functions = FunctionSet("math_tools", [add], log_store=False)
    chat = ScriptedChat([tool_call("add", {"a": 2, "b": 3}, call_id="call_7"), "It is 5."])
    run = Agent(chat, functions=functions, protocol="tools", sandbox=sandbox).run("2 + 3?")
    assert run.status is AgentStatus.ANSWERED and run.final_answer == "It is 5."
    assert [t["function"]["name"] for t in chat.requests[0]["tools"]] == ["add"]
    answered = chat.requests[1]["messages"][-1]
    assert answered["role"] == "tool" and answered["tool_call_id"] == "call_7"
    assert "5" in answered["content"]


def test_a_function_of_the_conversation_answers_each_request():
    def answer(messages: list[dict], tools) -> str:
        return f"$\\boxed{{{len(messages)}}}$"

    chat = FunctionChat(answer, model="m")
    reply = chat.complete([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
    assert reply.content == "$\\boxed{2}$" and reply.finish_reason == "stop" and reply.model == "m"
    assert reply.message == {"role": "assistant", "content": "$\\boxed{2}$"}
    assert chat.requests == [{"messages": [{"role": "system", "content": "s"},
                                           {"role": "user", "content": "u"}]}]


def test_a_request_past_the_script_and_an_unknown_reply_key_are_errors():
    chat = ScriptedChat(["only one"])
    chat.complete([{"role": "user", "content": "1"}])
    with pytest.raises(LLMError, match="no reply left"):
        chat.complete([{"role": "user", "content": "2"}])
    with pytest.raises(ValueError, match="not delay_s"):
        ScriptedChat([{"content": "x", "delay_s": 1}]).complete([])
