"""MathChat as the paper and AutoGen's MathUserProxyAgent define it (the `default` and
`python` variants): one scripted conversation per rule of the user proxy agent, on both
isolation tiers, with a scripted model (`runner.testing.ScriptedChat`)."""

from __future__ import annotations

import pytest

from runner import FunctionSet, FunctionSpec
from runner.agent import AgentStatus
from runner.errors import ConfigurationError
from runner.math.mathchat import solve
from runner.math.mathchat_proxy import (
    CONTINUE,
    PROMPTS,
    REVISIT,
    SAME_RESULT,
    SYSTEM_MESSAGE,
    TOO_LONG,
    print_last_expression,
)
from runner.testing import ScriptedChat

PROBLEM = "Find the sum of all x with x^2-5x+6=0."


@pytest.fixture
def model():
    return ScriptedChat(model="fake-model")


def run(model, sandbox, *replies: str, **options):
    model.queue(*replies)
    options.setdefault("gold", "5")
    return solve(PROBLEM, llm=model, sandbox=sandbox, **options)


def told(model: ScriptedChat, index: int) -> str:
    """What the proxy answered the model's reply number `index` (from 0) with."""
    return model.requests[index + 1]["messages"][-1]["content"]


def block(code: str, language: str = "python") -> str:
    return f"Let me compute.\n```{language}\n{code}\n```"


def test_the_prompt_is_autogens_with_the_problem(model, sandbox):
    solution = run(model, sandbox, "The roots are 2 and 3, so \\boxed{5}.")
    assert solution.status is AgentStatus.ANSWERED and solution.correct is True
    assert solution.variant == "default" and solution.run.protocol == "mathchat"
    system, first = model.requests[0]["messages"]
    assert system == {"role": "system", "content": SYSTEM_MESSAGE}
    assert first == {"role": "user", "content": PROMPTS["default"] + PROBLEM}
    assert "Case 1:" in first["content"] and "Case 2:" in first["content"] \
        and "Case 3:" in first["content"]  # the paper's three strategies


def test_the_python_prompt(model, sandbox):
    solution = run(model, sandbox, "\\boxed{5}", variant="python")
    assert solution.variant == "python"
    first = model.requests[0]["messages"][1]["content"]
    assert first == PROMPTS["python"] + PROBLEM and "Case 1" not in first


def test_two_tools_needs_wolfram_alpha_and_says_so(model, sandbox):
    with pytest.raises(ConfigurationError) as refused:
        run(model, sandbox, "\\boxed{5}", variant="two_tools")
    assert "Wolfram Alpha" in refused.value.message and "network" in refused.value.message
    assert model.requests == []


def test_a_reply_without_code_or_answer_is_a_reasoning_step(model, sandbox):
    solution = run(model, sandbox, "First, the roots of a quadratic sum to -b/a.",
                   "So the sum is \\boxed{5}.")
    assert solution.correct is True and solution.turns == 2
    assert told(model, 0) == CONTINUE
    assert solution.run.turns[0].feedback_codes == []  # not refused as malformed


def test_the_last_expression_is_printed_when_the_block_prints_nothing(model, sandbox):
    solution = run(model, sandbox,
                   block("from sympy import symbols, solve\nx = symbols('x')\n"
                         "solve(x**2 - 5*x + 6, x)"),
                   block("y = 2"),
                   block("if y > 5:\n    print(y)"),
                   "\\boxed{5}")
    assert solution.correct is True
    assert told(model, 0) == "[2, 3]"
    assert told(model, 1) == "No output found. Make sure you print the results."
    assert told(model, 2) == "No output found."  # it has a print: a valid query


def test_errors_and_unknown_languages(model, sandbox):
    run(model, sandbox, block("print(1 / 0)"), block("echo 5", "bash"), "\\boxed{5}")
    error = told(model, 0)
    assert error.startswith("Error: Traceback") and error.endswith(
        "ZeroDivisionError: division by zero")
    assert 'File "' not in error  # file lines are removed, as AutoGen does
    assert told(model, 1) == "Error: Unknown language."


def test_output_over_the_limit_is_replaced_and_invalid(model, sandbox):
    # 2,000 characters at most, the printed newline included, as AutoGen counts them
    solution = run(model, sandbox, block("print('7' * 2000)"), block("print('7' * 1999)"),
                   "\\boxed{5}")
    assert told(model, 0) == TOO_LONG
    assert told(model, 1) == "7" * 1999 and solution.correct is True


def test_the_same_result_twice_gets_try_a_new_approach(model, sandbox):
    solution = run(model, sandbox, block("print(2 + 3)"), block("print(2 + 3)"), block("print(5)"),
                   "\\boxed{5}")
    assert told(model, 0) == "5"
    assert told(model, 1) == "5\n" + SAME_RESULT
    assert told(model, 2) == "5\n" + SAME_RESULT
    assert solution.status is AgentStatus.ANSWERED  # the conversation goes on


def test_invalid_replies_are_counted_as_autogen_counts_them(model, sandbox):
    # AutoGen: a valid reply does not reset the count, a repeated result is not counted, and
    # the fourth invalid reply is replaced by the revisit message (then counting restarts).
    solution = run(model, sandbox,
                   block("print(undefined_a)"),   # invalid 1
                   block("print(1)"),             # valid: the count stays
                   block("print(undefined_b)"),   # invalid 2
                   block("print(undefined_b)"),   # the same result: not counted
                   block("z = 1"),                # invalid 3 (no print, no output)
                   block("print('9' * 3000)"),    # invalid 4: replaced
                   block("print(undefined_c)"),   # invalid 1 again
                   "\\boxed{5}")
    assert solution.correct is True
    assert told(model, 3).endswith(SAME_RESULT)
    assert told(model, 4) == "No output found. Make sure you print the results."
    assert told(model, 5) == REVISIT
    assert told(model, 6).startswith("Error: ")


def test_a_reply_cut_at_the_token_limit_is_read_like_any_other(model, sandbox):
    cut_block = {"content": "Let me compute.\n```python\nprint(2 +", "finish_reason": "length"}
    cut_after = {"content": block("print(2 + 3)") + "\nNow the answer is \\boxed{",
                 "finish_reason": "length"}
    solution = run(model, sandbox, cut_block, cut_after, "\\boxed{5}")
    assert told(model, 0) == CONTINUE  # an open block is no query
    assert told(model, 1) == "5"  # the closed block ran; the open box is no answer
    assert solution.correct is True
    assert all(turn.feedback_codes == [] for turn in solution.run.turns)  # no TRUNCATED_REPLY


def test_a_box_with_code_is_not_the_answer(model, sandbox):
    solution = run(model, sandbox, block("print(2 + 3)") + "\nSo \\boxed{6}.", "\\boxed{5}")
    assert solution.answer == "5" and solution.turns == 2
    assert told(model, 0) == "5"


def test_the_conversation_ends_after_sixteen_model_messages(model, sandbox):
    solution = run(model, sandbox, *[block(f"print({n})") for n in range(20)])
    assert solution.status is AgentStatus.MAX_TURNS and solution.answer is None
    assert solution.turns == 16 and len(model.requests) == 16


def test_a_session_keeps_state_without_running_anything_twice(model, sandbox):
    solution = run(model, sandbox, block("a = 2"), block("a + 3"), "\\boxed{5}")
    assert told(model, 1) == "5"
    assert len(solution.run.execution_ids) == 2


def test_learned_functions_are_defined_listed_and_offered(model, sandbox):
    lcm = FunctionSpec.from_dict({
        "name": "lcm_of", "description": "The least common multiple of two positive integers.",
        "arguments": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "code": "def lcm_of(a, b):\n    from math import gcd\n    return a * b // gcd(a, b)\n"})
    model.queue(block("lcm_of(4, 6)"), "\\boxed{12}")
    solution = solve("lcm(4, 6)?", llm=model, sandbox=sandbox, gold="12",
                     functions=FunctionSet("learned", [lcm], log_store=False))
    assert solution.correct is True and told(model, 0) == "12"
    system = model.requests[0]["messages"][0]["content"]
    assert system.startswith(SYSTEM_MESSAGE) and "lcm_of" in system and "```json" not in system
    assert [tool["function"]["name"] for tool in model.requests[0]["tools"]] == ["lcm_of"]


@pytest.mark.parametrize("code, printed", [
    ("x = 6\nx * 7", "x = 6\nprint(x * 7)"),
    ("a = 1; a", "a = 1; print(a)"),
    ("solve(\n    x - 1,\n    x)", "print(solve(\n    x - 1,\n    x))"),
    ("a == b", "print(a == b)"),
    ("x = 1", "x = 1"),  # an assignment is not printed
    ("print(1)\nx", "print(1)\nx"),  # the block prints: nothing added
    ("for i in range(3):\n    i", "for i in range(3):\n    i"),
    ("print(1 +", "print(1 +"),  # not valid Python: left as it is
    ("é = 'ü'; é", "é = 'ü'; print(é)"),
])
def test_print_last_expression(code, printed):
    assert print_last_expression(code) == printed
