"""Final-answer extraction: the last box, nested braces, broken boxes, the opt-in fallback."""

from __future__ import annotations

import time

import pytest

from runner.agent.parsing import last_boxed as agent_last_boxed
from runner.math import extract_answer


@pytest.mark.parametrize("text, answer", [
    ("so the answer is \\boxed{5}.", "5"),
    ("\\boxed{1} first, then \\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),
    ("$\\boxed{\\frac{\\sqrt{3}}{2}}$", "\\frac{\\sqrt{3}}{2}"),
    ("\\[\\boxed{x^{2}+1}\\]", "x^{2}+1"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are content
    ("\\boxed{\\left\\{ 3 \\right\\}}", "\\left\\{ 3 \\right\\}"),
    ("\\fbox{42}", "42"),
    ("The result: \\boxed 5", "5"),
    ("The result: $\\boxed 12$.", "12"),
    ("\\boxed 7.", "7"),
    ("\\boxed {  8  }", "8"),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}"),
    ("\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
])
def test_the_last_box_is_the_answer(text, answer):
    assert extract_answer(text) == answer


@pytest.mark.parametrize("text", [
    "no box here, the answer is 5",
    "\\boxed{}",
    "\\boxed{   }",
    "\\boxed{5} and at the end \\boxed{6",  # the last box is cut off: no answer
    "\\boxed{5} then \\boxed{}",  # the last box is empty: no answer
    "\\boxed",
    "\\boxedx{3}",
    "\\boxed{\\}",
    "",
])
def test_broken_or_empty_boxes_are_no_answer(text):
    assert extract_answer(text) is None


@pytest.mark.parametrize("text, answer", [
    ("The answer is 5.", "5"),
    ("so the final answer is: $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("Work...\nAnswer: 12 apples", "12 apples"),
    ("Janet sells 9 eggs.\n#### 18", "18"),
    ("The answer is 3. Wait, no. The answer is 4.", "4"),
])
def test_fallback_reads_prose_only_when_asked(text, answer):
    assert extract_answer(text) is None
    assert extract_answer(text, fallback=True) == answer


def test_a_box_wins_over_the_fallback():
    assert extract_answer("The answer is 3. \\boxed{4}", fallback=True) == "4"
    assert extract_answer("The answer is 3. \\boxed{4", fallback=True) is None


def test_huge_hostile_replies_are_read_in_linear_time():
    started = time.perf_counter()
    assert extract_answer("\\boxed{" * 200_000) is None
    assert extract_answer("{" * 1_000_000 + "\\boxed{1}") == "1"
    assert extract_answer("\\boxed{" + "{" * 500_000 + "}" * 500_000 + "}") is not None
    assert extract_answer("the answer is " * 100_000, fallback=True) is not None
    # generous bound: a quadratic scan of these inputs would take minutes
    assert time.perf_counter() - started < 20


def test_the_agent_uses_the_same_rule():
    assert agent_last_boxed is not None
    assert agent_last_boxed("\\boxed{1} \\boxed{}") is None
    assert agent_last_boxed("x \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
