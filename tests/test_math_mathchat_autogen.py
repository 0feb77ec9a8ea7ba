"""runner's MathChat `default` variant beside AG2's own `MathUserProxyAgent`, on the same
scripted replies: the same replies end the conversation, with the same answer; the others
get the same message back ("Continue", a block's output, a timeout). AG2's proxy runs its
blocks on this host (`use_docker=False`); they are this file's own scripted code."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("autogen", reason="the ag2 extra: pip install 'runner-sandbox[ag2]'")

from autogen import AssistantAgent
from autogen.agentchat.contrib.math_user_proxy_agent import MathUserProxyAgent
from autogen.math_utils import get_answer
from fake_openai_server import FakeOpenAI

from runner.agent import AgentStatus
from runner.math.mathchat import solve
from runner.math.mathchat_proxy import BLOCK_TIMEOUT_S, CONTINUE, autogen_answer
from runner.testing import ScriptedChat

PROBLEM = "Find the sum of all x with x^2-5x+6=0."
FINAL = "\\boxed{5}"


def autogen_conversation(replies: list[str], work_dir: str) -> tuple[list[str], str | None]:
    """(what AG2's proxy answered each reply with, the answer if a reply ended the chat)."""
    with FakeOpenAI() as server:
        server.replies(*replies)
        assistant = AssistantAgent("assistant", system_message="You are a helpful assistant.",
                                   llm_config={"config_list": [{"model": server.model, "base_url": server.url,
                                                                "api_key": "k"}], "cache_seed": None})
        proxy = MathUserProxyAgent(name="mathproxyagent", human_input_mode="NEVER",
                                   code_execution_config={"work_dir": work_dir, "use_docker": False})
        chat = proxy.initiate_chat(assistant, message=MathUserProxyAgent.message_generator,
                                   problem=PROBLEM, silent=True)
    history = chat.chat_history
    told = [message["content"] for message in history[1:] if message["name"] == "mathproxyagent"]
    last = history[-1]
    ended = last["name"] == "assistant" and proxy._is_termination_msg(last)
    return told, get_answer(last["content"]) if ended else None


def runner_conversation(replies: list[str], sandbox) -> tuple[list[str], str | None]:
    model = ScriptedChat(model="fake-model")
    model.queue(*replies)
    solution = solve(PROBLEM, llm=model, sandbox=sandbox, gold="5")
    told = [request["messages"][-1]["content"] for request in model.requests[1:]]
    answer = solution.answer if solution.status is AgentStatus.ANSWERED else None
    return told, answer


# Each script: the model's replies, up to one that ends the conversation in both.
SCRIPTS = {
    "a box beside an untagged block ends it": ["```\nprint(2 + 3)\n```\nSo \\boxed{5}."],
    "a box beside a text block ends it": ["```text\nroots 2 and 3\n```\nSo \\boxed{5}."],
    "a box beside a py block ends it": ["```py\nprint(2 + 3)\n```\n\\boxed{5}"],
    "a python block runs, its box waits": ["```python\nprint(2 + 3)\n```\n\\boxed{6}", FINAL],
    "fbox is no answer": ["So \\fbox{5}.", FINAL],
    "boxed without a brace is no answer": ["So \\boxed 5.", FINAL],
    "boxed with a space before the brace is no answer": ["So \\boxed {5}.", FINAL],
    "an empty box is no answer": ["So \\boxed{}.", FINAL],
    "the last boxed wins over a later fbox": ["\\boxed{5}, or rather \\fbox{10}"],
    "an untagged block without a box runs": ["```\nprint(2 + 3)\n```", FINAL],
    "reasoning alone continues": ["The roots are 2 and 3.", FINAL],
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_default_variant_ends_and_continues_as_autogen(name, sandbox, tmp_path):
    replies = SCRIPTS[name]
    theirs = autogen_conversation(replies, str(tmp_path))
    ours = runner_conversation(replies, sandbox)
    assert ours == theirs
    assert theirs[1] is not None  # each script ends with an answer


def busy(seconds: int) -> str:
    """A block that runs for `seconds` (datetime, which the restricted tier allows too)."""
    return ("```python\nfrom datetime import datetime\nstart = datetime.now()\n"
            f"while (datetime.now() - start).total_seconds() < {seconds}:\n    pass\nprint(1)\n```")


def test_a_block_gets_autogens_five_seconds(sandbox, tmp_path):
    replies = [busy(7), FINAL]
    started = time.monotonic()
    theirs = autogen_conversation(replies, str(tmp_path))
    ours = runner_conversation(replies, sandbox)
    assert theirs == (["Error: Timeout"], "5")
    # The same message; runner adds that the live session was lost with the stopped block
    # (AutoGen re-runs every earlier block, so there it is not).
    (told,), answer = ours
    assert answer == "5" and told.startswith("Error: Timeout\n\nNote: the session's process")
    assert BLOCK_TIMEOUT_S == 5.0
    assert time.monotonic() - started < 2 * 7  # neither waited for the whole sleep


def test_a_block_within_five_seconds_is_not_stopped(sandbox):
    told, answer = runner_conversation([busy(3), FINAL], sandbox)
    assert (told, answer) == (["1"], "5")


@pytest.mark.parametrize("text", [
    "\\boxed{5}", "a \\boxed{\\frac{1}{2}} b", "\\boxed{6} \\fbox{10}", "\\fbox{3}", "\\boxed 3",
    "\\boxed {3}", "\\boxed{}", "\\boxed{3", "no box", "\\boxed{\\{1, 2\\}}", "}\\boxed{1}}",
    "\\boxed{1} then \\boxed{2", "\\fbox{1}\\boxed{2}", "\\boxed3}{",
])
def test_the_answer_is_read_as_autogen_reads_it(text):
    assert autogen_answer(text) == get_answer(text)


def test_continue_is_autogens():
    assert CONTINUE == MathUserProxyAgent.DEFAULT_REPLY
