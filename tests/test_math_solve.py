"""MathChat solving with a scripted model (`runner.testing.ScriptedChat`), on both isolation
tiers, in the guided variant (MathChat's default variant, the paper's and AutoGen's rules,
has its own tests in test_math_mathchat.py): the endings (a boxed answer, TERMINATE, the turn limit, no answer), the feedback
(errors, no output, three failing blocks, timeouts, long output), one session per problem,
learned functions from a block and as a native tool, and the two baselines. A server that
refuses tool calls is a real HTTP server speaking the OpenAI protocol, through the SDK."""

from __future__ import annotations

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits
from runner.agent import AgentStatus, OpenAIChat
from runner.logs.agent import load_executions
from runner.math.mathchat import solve
from runner.testing import ScriptedChat, tool_call

PROBLEM = "Find the sum of all x with x^2-5x+6=0."


@pytest.fixture
def model():
    return ScriptedChat(model="fake-model")


def llm(server: FakeOpenAI) -> OpenAIChat:
    return OpenAIChat("fake-model", base_url=server.url, api_key="test-key", backoff_s=0.001)


def run(model, sandbox, *replies: str, **options):
    model.queue(*replies)
    options.setdefault("gold", "5")
    if options.get("method", "mathchat") == "mathchat":
        options.setdefault("variant", "guided")  # the variant whose feedback these tests read
    return solve(PROBLEM, llm=model, sandbox=sandbox, **options)


def codes(solution) -> list[list[str]]:
    return [turn.feedback_codes for turn in solution.run.turns]


def sent(model: ScriptedChat, index: int) -> list[dict]:
    return model.requests[index]["messages"]


def block(code: str) -> str:
    return f"Next step.\n```python\n{code}\n```"


def test_correct_answer_with_state_across_blocks(model, sandbox):
    solution = run(model, sandbox,
                   block("from sympy import symbols, solve\nx = symbols('x')\n"
                         "roots = solve(x**2 - 5*x + 6, x)\nprint(roots)"),
                   block("print(sum(roots))"),
                   "The roots sum to $\\boxed{5}$.")
    assert solution.status is AgentStatus.ANSWERED and solution.answer == "5"
    assert solution.correct is True and solution.verdict is not None and solution.verdict.equal
    assert solution.turns == 3 and solution.code_blocks == 2
    # the prompt is MathChat's, the problem comes as the user's message
    system, task = sent(model, 0)[:2]
    assert "\\boxed{}" in system["content"] and "print()" in system["content"]
    assert task == {"role": "user", "content": f"Problem: {PROBLEM}"}
    assert sent(model, 1)[-1]["content"] == "The block ran. Output:\n[2, 3]"
    assert sent(model, 2)[-1]["content"] == "The block ran. Output:\n5"
    # one session; the second request ran only the second block (nothing re-ran)
    records = load_executions(sandbox.log_store, solution.run)
    first, second = (records[i] for i in solution.run.execution_ids)
    assert first.meta["session"] == second.meta["session"]
    assert second.request.code.strip() == "print(sum(roots))"
    assert first.result.backend == sandbox.backend


def test_wrong_answer_is_judged_by_the_checker(model, sandbox):
    solution = run(model, sandbox, block("print(2 * 3)"), "So \\boxed{6}.")
    assert solution.status is AgentStatus.ANSWERED and solution.answer == "6"
    assert solution.correct is False and solution.verdict is not None
    assert solution.verdict.reason and not solution.verdict.failed


def test_code_error_then_fix(model, sandbox):
    solution = run(model, sandbox, block("print(5 / 0)"), block("print(10 // 2)"), "\\boxed{5}")
    assert solution.correct is True
    assert codes(solution)[:2] == [["EXECUTION_FAILED"], []]
    feedback = solution.run.turns[0].feedback_text
    assert feedback.startswith("[EXECUTION_FAILED] The block failed with ZeroDivisionError")
    assert "fix the cause" in feedback


def test_three_failing_blocks_then_reasoning(model, sandbox):
    solution = run(model, sandbox,
                   block("print(undefined_a)"),
                   block("y = 2"),  # prints nothing: counts as failing
                   block("print(undefined_b)"),
                   "Reasoning instead: the roots are 2 and 3, so the sum is \\boxed{5}.")
    assert solution.correct is True
    assert codes(solution)[:3] == [["EXECUTION_FAILED"], ["NO_OUTPUT"],
                                   ["EXECUTION_FAILED", "CODE_KEEPS_FAILING"]]
    assert "printed nothing" in solution.run.turns[1].feedback_text
    assert "print(x)" in solution.run.turns[1].feedback_text
    told = sent(model, 3)[-1]["content"]
    assert "[CODE_KEEPS_FAILING]" in told and "Solve this step by reasoning" in told
    assert "[CODE_KEEPS_FAILING]" not in sent(model, 2)[-1]["content"]


def test_a_block_that_works_resets_the_failure_count(model, sandbox):
    solution = run(model, sandbox, block("print(undefined_a)"), block("print(undefined_b)"),
                   block("print(1)"), block("print(undefined_c)"), "\\boxed{5}")
    assert "CODE_KEEPS_FAILING" not in [c for turn in codes(solution) for c in turn]


def test_timeout_in_a_block(model, sandbox):
    solution = run(model, sandbox, block("n = 0\nwhile True:\n    n += 1"), block("print(2 + 3)"),
                   "\\boxed{5}", limits=Limits(timeout_s=1))
    assert solution.correct is True
    assert codes(solution)[:2] == [["TIMEOUT"], []]
    assert "was stopped" in solution.run.turns[0].feedback_text
    assert "variables and imports from earlier blocks are gone" in solution.run.turns[0].feedback_text


def test_long_output_is_cut_with_a_warning(model, sandbox):
    solution = run(model, sandbox, block("print('7' * 20000)"), "\\boxed{5}",
                   max_output_chars=500)
    text = solution.run.turns[0].feedback_text
    assert "OUTPUT_TRUNCATED" in codes(solution)[0]
    assert "characters cut" in text and "print less" in text
    assert len(text) < 1500


def test_no_boxed_answer(model, sandbox):
    solution = run(model, sandbox, "The answer is 5.", "I am sure it is 5.", max_turns=2)
    assert solution.status is AgentStatus.MAX_TURNS and solution.answer is None
    assert solution.correct is False and solution.verdict is not None
    assert solution.verdict.rule == "empty"
    assert codes(solution)[0] == ["MALFORMED_RESPONSE"]
    assert "\\boxed{<answer>}" in solution.run.turns[0].feedback_text


def test_terminate_ends_without_an_answer(model, sandbox):
    solution = run(model, sandbox, block("print(1)"), "I cannot solve this. TERMINATE")
    assert solution.status is AgentStatus.TERMINATED and solution.answer is None
    assert solution.correct is False and solution.turns == 2
    assert model.pending == 0


def test_terminate_with_code_is_ignored_until_the_code_ran(model, sandbox):
    solution = run(model, sandbox, block("print(2 + 3)") + "\nTERMINATE", "\\boxed{5}")
    assert solution.status is AgentStatus.ANSWERED and solution.correct is True
    assert "TERMINATE was ignored" in solution.run.turns[0].feedback_text


def test_turn_limit_is_fifteen_model_messages(model, sandbox):
    solution = run(model, sandbox, *[block(f"print({n})") for n in range(20)])
    assert solution.status is AgentStatus.MAX_TURNS and solution.answer is None
    assert solution.turns == 15 and len(model.requests) == 15


LCM = FunctionSpec.from_dict({
    "name": "lcm_of", "description": "The least common multiple of two positive integers.",
    "arguments": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "code": "def lcm_of(a, b):\n    from math import gcd\n    return a * b // gcd(a, b)\n"})
LEARNED = FunctionSet("learned", [LCM], log_store=False)


def test_learned_functions_from_a_block_and_as_a_tool(model, sandbox):
    model.queue(block("print(lcm_of(4, 6))"),
                tool_call("lcm_of", {"a": 3, "b": 5}, call_id="call_1"), "\\boxed{12}")
    solution = solve("lcm(4, 6)?", llm=model, sandbox=sandbox, functions=LEARNED, gold="12")
    assert solution.correct is True
    first = model.requests[0]
    assert [tool["function"]["name"] for tool in first["tools"]] == ["lcm_of"]
    assert "lcm_of" in first["messages"][0]["content"]  # described in the prompt as well
    assert sent(model, 1)[-1]["content"] == "12"  # MathChat's default variant: the output alone
    tool_message = sent(model, 2)[-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert tool_message["content"] == 'Result of lcm_of({"a": 3, "b": 5}): 15'
    records = load_executions(sandbox.log_store, solution.run)
    setup, used, called = (records[i] for i in solution.run.execution_ids)
    assert setup.meta["agent_setup"] is True and "def lcm_of" in setup.request.code
    assert used.meta["session"] == setup.meta["session"]
    assert called.request.call is not None and called.request.call.name == "lcm_of"


def test_a_server_without_tool_calls_gets_the_functions_in_code_only(sandbox):
    with FakeOpenAI(reject_tools="tools are not supported by this model") as server:
        server.replies(block("print(lcm_of(4, 6))"), "\\boxed{12}")
        solution = solve("lcm(4, 6)?", llm=llm(server), sandbox=sandbox, functions=LEARNED,
                         gold="12")
    assert solution.correct is True
    assert "tools" in server.requests[0] and "tools" not in server.requests[1]
    assert "tools" not in server.requests[2]
    assert "refused by the server" in solution.run.settings["native_tools"]


def test_program_of_thoughts_takes_the_printed_answer(model, sandbox):
    solution = run(model, sandbox, "```python\nfrom sympy import Rational\n"
                   "print('working')\nprint(Rational(10, 2))\n```", method="pot")
    assert solution.status is AgentStatus.ANSWERED and solution.answer == "5"
    assert solution.correct is True and solution.turns == 1 and len(model.requests) == 1
    assert "prints only the final answer" in sent(model, 0)[0]["content"]


def test_program_of_thoughts_failing_has_no_answer(model, sandbox):
    solution = run(model, sandbox, "```python\nprint(1 / 0)\n```", method="pot")
    assert solution.status is AgentStatus.MAX_TURNS and solution.answer is None
    assert solution.correct is False


def test_vanilla_runs_no_code(model, sandbox):
    solution = run(model, sandbox, "```python\nprint(6)\n```\nBy Vieta, \\boxed{5}.",
                   method="vanilla")
    assert solution.status is AgentStatus.ANSWERED and solution.answer == "5"
    assert solution.correct is True and solution.run.execution_ids == []
    assert "without running any code" in sent(model, 0)[0]["content"]
