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
    assert extract_answer("the answer is " * 100_000, fallback=True) is None  # no mathematics
    # generous bound: a quadratic scan of these inputs would take minutes
    assert time.perf_counter() - started < 20


def test_the_agent_uses_the_same_rule():
    assert agent_last_boxed is not None
    assert agent_last_boxed("\\boxed{1} \\boxed{}") is None
    assert agent_last_boxed("x \\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"


# -- whole outputs (fallback=True): runner.math.reading ---------------------------------------


@pytest.mark.parametrize("text, answer", [
    # answers split over boxes
    ("\\boxed{1}\\boxed{2}", "1, 2"),
    ("$$\\boxed{2}, \\boxed{3}, \\boxed{5}$$", "2, 3, 5"),
    ("\\boxed{(2, 2)} \\quad \\text{and} \\quad \\boxed{(6, 2)}", "(2, 2), (6, 2)"),
    ("\\boxed{1} papers and \\boxed{2} bins", "1, 2"),
    ("\\boxed{1} no no no no no \\boxed{2}", "2"),  # far apart, no separator: the last
    ("the answer should be \\boxed{004}. But let me check again ... So, \\boxed{004} is "
     "correct.\n\n**Final Answer**\n\\boxed{004}", "004"),
    ("\\boxed{7} and \\boxed{7}", "7"),  # a repeated box counts once
    # final statements after the last box
    ("so $x = \\boxed{255}$. Final Answer: The final answer is $10,455$. I hope it is correct.",
     "10,455"),
    ("Final Answer: The largest $n$ is 34.", "34"),
    ("Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.", "120"),
    ("Final Answer: Jane started growing Sphere 3 hours ago. I hope it is correct.", "3 hours"),
    ("Final Answer: The final answer is \\\"$12 $ and $13 $\\\". I hope it is correct.", "12, 13"),
    # answer statements
    ("Answer $ 9 $", "9"),
    ("Answer \\( (9+1) \\)", "(9+1)"),
    ("Answer \\[ \n 9 \n \\]", "9"),  # display math may span lines
    # prose without a box
    ("the number is not 10 which is 1,000.99€", "1,000.99"),
    ("Soucis : 2,74 $ a..", "2,74"),
    ("Therefore $x \\geq 5$ is the solution.", "x \\geq 5"),
    ("The identity matrix is $ \\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix} $.",
     "\\begin{pmatrix}1 & 0 \\\\ 0 & 1\\end{pmatrix}"),
    ("So P(A) = 2/3 Therefore, the probability that Alice wins is 2/3. <|im_start|>user", "2/3"),
    ("the minimum error in the position increases by 100%.", "100\\%"),
    ("the length is 85 inches.", "85 inches"),
    ("$1$ and $2$ and $3$", "1, 2, 3"),
    # answers by themselves
    ("28 percent", "28 percent"),
    ("$\\frac{1}{3} \\textbf{meters}$", "\\frac{1}{3} \\textbf{meters}"),
    ("W(x)=1orW(x)=-1", "W(x)=1orW(x)=-1"),
    ("Evelyn", "Evelyn"),
])
def test_whole_outputs_are_read_where_the_answer_is(text, answer):
    assert extract_answer(text, fallback=True) == answer


@pytest.mark.parametrize("text", [
    "Answer $ \n 9 \n $",  # inline math broken over lines is not mathematics
    "Answer \\( \n 9 \n \\)",
    "AZYUK2A",  # a number inside a word is not one
    "no numbers at all here",
    "\\boxed{1} and then \\boxed{2",  # the last box is cut off
])
def test_whole_outputs_without_an_answer(text):
    assert extract_answer(text, fallback=True) is None


def test_a_mathchat_reply_is_still_read_by_its_last_box():
    assert extract_answer("\\boxed{1}\\boxed{2}") == "2"
    assert extract_answer("Final Answer: The final answer is $3$. \\boxed{2}") == "2"


def test_hostile_whole_outputs_are_read_in_linear_time():
    started = time.perf_counter()
    for text in ["\\boxed{" * 200_000, "\\(" * 200_000, "$" * 200_000, "$$" * 100_000 + "x",
                 "final answer is " * 100_000, "answer: " * 100_000, "1 " * 300_000,
                 "a$b\n" * 100_000, "\\boxed{1} " * 100_000, " " * 300_000 + "1"]:
        extract_answer(text, fallback=True)
    # generous bound: a quadratic scan of these inputs would take minutes
    assert time.perf_counter() - started < 20


# -- issue 32: the text's last word on the answer ----------------------------------------------

# (whole output, what it answers: None when its last word retracts, negates or hedges)
LAST_WORD = [
    ("The answer is \\boxed{5}. Wait, actually the answer is 6.", "6"),
    ("So \\boxed{5}. Sorry, I made a mistake: the answer is 7.", "7"),
    ("\\boxed{6} is wrong, the answer is 5.", "5"),
    ("\\boxed{6} (incorrect). The answer is $5$.", "5"),
    ("$\\boxed{6}$ is not correct.", None),
    ("first guess \\boxed{3}; the answer is \\boxed{4}", "4"),
    ("I guessed \\boxed{3}, but actually \\boxed{4}.", "4"),
    ("The answer is not 5", None),
    ("The answer isn't $5$.", None),
    ("The answer is 5 (or possibly 6).", None),
    ("It is either 5 or 6.", None),
    ("The answer is maybe 5.", None),
    # what stays: boxes that are parts of one answer, a box after a negation
    ("\\boxed{1}, \\boxed{2}", "1, 2"),
    ("The roots are \\boxed{2} and \\boxed{3}.", "2, 3"),
    ("The answer is not 4. It is \\boxed{5}.", "5"),
    ("Since x is not negative, the answer is \\boxed{5}.", "5"),
    ("\\boxed{5}. I hope the answer is correct.", "5"),
    ("The answer is 5.", "5"),
]


@pytest.mark.parametrize("text, answer", LAST_WORD)
def test_the_last_word_on_the_answer_counts(text, answer):
    assert extract_answer(text, fallback=True) == answer
