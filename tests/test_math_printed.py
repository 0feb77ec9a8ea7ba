"""Program-of-Thoughts answers: what real sympy and Python calls print, checked against
the LaTeX golds of their problems, and the reader that never evaluates a program's output."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest
import sympy
from sympy import (
    Interval,
    Matrix,
    Rational,
    S,
    Union,
    factorial,
    oo,
    pi,
    solve,
    solveset,
    sqrt,
    symbols,
)

from runner.math import Checker
from runner.math.printed import printed_latex

x, y = symbols("x y")


@pytest.fixture(scope="module")
def checker():
    with Checker(workers=2, timeout_s=10) as shared:
        yield shared


# (what a program printed, made by the real call, the gold of the problem)
PRINTED_EQUAL = [
    (str(solve(x**2 - 5 * x + 6, x)), "2, 3"),  # [2, 3]: the solutions
    (str(solve(x**2 - 5 * x + 6, x)), "3, 2"),
    (str(solve(x**2 + 1, x)), "\\pm i"),  # [-I, I]
    (str(solve(x**2 + 1, x)), "i, -i"),
    (str(solve(x**2 + 2 * x + 5, x)), "-1 \\pm 2i"),  # [-1 - 2*I, -1 + 2*I]
    (str(solve(x**2 - 2, x)), "\\pm\\sqrt{2}"),
    (str(solve(x - 7, x)), "7"),  # [7]: one solution
    (str(solve([x + y - 3, x - y - 1], [x, y])), "(2, 1)"),  # {x: 2, y: 1}
    (str(solve([x**2 - y, x - y], [x, y])), "(0, 0), (1, 1)"),
    (str(solve(x**3 - x, x, dict=True)), "-1, 0, 1"),
    (str(Matrix([[1], [2]])), "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    (str(Matrix([[1, 2], [3, 4]])), "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
    (str(Matrix([[1, 2], [3, 4]]).inv()), "\\begin{pmatrix} -2 & 1 \\\\ 3/2 & -1/2 \\end{pmatrix}"),
    (str(Interval(0, 1)), "[0, 1]"),
    (str(Interval.open(-oo, 3)), "(-\\infty, 3)"),
    (str(Interval.Lopen(0, 1)), "(0, 1]"),
    (str(Interval(-oo, 1)), "(-\\infty, 1]"),  # an infinite end is open
    (str(Union(Interval(-oo, 1), Interval.open(2, oo))), "(-\\infty, 1] \\cup (2, \\infty)"),
    (str(solveset(x**2 - 1, x, S.Reals)), "\\{-1, 1\\}"),
    (sympy.srepr(Rational(1, 2)), "\\frac{1}{2}"),  # Rational(1, 2)
    (str(Rational(1, 2)), "\\frac12"),
    (str(sqrt(3) / 2), "\\frac{\\sqrt{3}}{2}"),
    (str(3 * sqrt(2) / 4), "\\frac{3\\sqrt2}{4}"),
    (str(pi / 4), "\\frac{\\pi}{4}"),
    (str(sympy.exp(2)), "e^2"),
    (str(sympy.E), "e"),
    (str(2 * sympy.I), "2i"),
    (str(sympy.I), "i"),  # the imaginary unit, not the choice letter I
    (str((x + 1)**2), "(x+1)^2"),
    (str(sympy.expand((x + 1)**2)), "(x+1)^2"),
    (str(sympy.root(2, 3)), "\\sqrt[3]{2}"),
    (str(factorial(5)), "120"),
    (str(1 / 12), "\\frac{1}{12}"),  # a float's print of an exact value
    (str(2**0.5), "\\sqrt{2}"),
    (str(Fraction(3, 4)), "\\frac34"),
    (str(complex(1, 2)), "1+2i"),
    (str(1e-05), "10^{-5}"),
    (str(sympy.Eq(y, 2 * x + 1)), "y = 2x + 1"),
]

PRINTED_DIFFERENT = [
    (str(solve(x**2 - 5 * x + 6, x)), "[2, 3]"),  # the solutions are not an interval
    (str(solve(x**2 - 5 * x + 6, x)), "2"),
    (str(solve(x**2 + 1, x)), "i"),
    (str(Interval.open(-oo, 3)), "(-\\infty, 3]"),
    (str(Matrix([[1], [2]])), "\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"),
    (str(Rational(1, 2)), "\\frac13"),
    (str(sympy.I), "\\text{(I)}"),
    (str(1 / 3), "\\frac{1}{3} + 10^{-10}"),
]


@pytest.mark.parametrize("printed, gold", PRINTED_EQUAL)
def test_printed_answers_match_their_latex_golds(checker, printed, gold):
    verdict = checker.check(gold, printed, printed=True)
    assert verdict.equal, verdict
    assert verdict.printed


@pytest.mark.parametrize("printed, gold", PRINTED_DIFFERENT)
def test_printed_answers_that_differ(checker, printed, gold):
    assert not checker.check(gold, printed, printed=True).equal


def test_without_the_flag_latex_readings_stay(checker):
    assert not checker.check("2, 3", "[2, 3]").equal  # LaTeX: a closed interval
    assert checker.check("\\text{(I)}", "I").equal  # a choice letter
    assert checker.check("\\frac{\\sqrt{3}}{2}", "sqrt(3)/2").equal  # only Python writes this


def test_batches_carry_the_flag_per_pair(checker):
    verdicts = checker.check_many([("2, 3", "[2, 3]"), ("2, 3", "[2, 3]")], printed=[True, False])
    assert [verdict.equal for verdict in verdicts] == [True, False]


def test_a_huge_printed_integer_against_its_power(checker):
    printed = "1" + "0" * 100_000  # print(10**100000), where the limit on digits is lifted
    assert checker.check("10^{100000}", printed, printed=True).equal
    assert not checker.check("10^{100000}", printed + "0", printed=True).equal


@pytest.mark.parametrize("text", [
    "__import__('os').system('touch /tmp/runner-printed-was-run')",
    "(lambda: 1)()",
    "open('/etc/passwd').read()",
    "Matrix.__class__",
    "[x for x in range(10**9)]",
    "sqrt(3).evalf()",
    "'a' * 10**9",
    "Poly(x**2 + 1, x, modulus=5)",  # over a finite field: no expression states it
    "Poly(x**2 + 1, x + 1)",
    "(1 < x) & (y < 5)",  # two variables
    "(1 < x) & (2 < x)",  # two lower ends
])
def test_printed_text_is_never_evaluated(text):
    assert printed_latex(text) is None


def test_hostile_printed_text_is_bounded():
    started = time.perf_counter()
    assert printed_latex("(" * 5000 + "1" + ")" * 5000) is None  # over the length bound
    assert printed_latex("[" * 90 + "1" + "]" * 90) is None  # deeper than the tree bound
    assert printed_latex("+".join(["x"] * 1999)) is None  # more nodes than the bound
    assert printed_latex("-" * 3999 + "1") is None
    assert time.perf_counter() - started < 5


# -- issue 32: a roots() dict maps each root to its multiplicity ---------------------------------

ROOTS = [
    (str(sympy.roots(x**2 - 2 * x + 1, x)), "1", True),  # {1: 2}: the double root 1
    (str(sympy.roots(x**2 - 2 * x + 1, x)), "2", False),  # not its multiplicity
    (str(sympy.roots(x**2 - 5 * x + 6, x)), "2, 3", True),  # {3: 1, 2: 1}
    (str(sympy.roots(x**2 - 5 * x + 6, x)), "1", False),
    (str(sympy.roots(x**2 + 1, x)), "\\pm i", True),  # {-I: 1, I: 1}
    (str(sympy.roots((x - 4)**3, x)), "3", False),  # {4: 3}
    (str(solve([x + y - 3, x - y - 1], [x, y])), "(2, 1)", True),  # {x: 2, y: 1}: values
]


@pytest.mark.parametrize("printed, gold, equal", ROOTS)
def test_a_roots_dict_is_its_roots(checker, printed, gold, equal):
    verdict = checker.check(gold, printed, printed=True)
    assert verdict.equal is equal, (printed, verdict)


# -- issue 32: forms numpy prints, and sentences programs print ----------------------------------


def printed_by(program: str) -> str:
    """What `program` prints (its last line), from a real run in this process."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {})  # the test's own program
    return out.getvalue().strip().splitlines()[-1]


NUMPY_AND_SENTENCES = [
    ("import numpy as np\nprint(np.roots([1, -5, 6]))", "2, 3", True),  # [3. 2.]
    ("import numpy as np\nprint(np.roots([1, -5, 6]))", "2, 4", False),
    ("import numpy as np\nprint(np.array([1, -2, 3]))", "1, -2, 3", True),  # [ 1 -2  3]
    ("import numpy as np\nprint([np.float64(2.0), np.float64(3.0)])", "2, 3", True),
    ("import numpy as np\nprint(np.float64(0.5))", "\\frac{1}{2}", True),
    ("import numpy as np\nprint(repr(np.float64(0.25)))", "\\frac{1}{4}", True),
    ("print(f'The answer is {2 + 3}')", "5", True),
    ("print(f'The answer is {2 + 3}')", "6", False),
    ("print('x =', 7)", "7", True),
]


@pytest.mark.parametrize("program, gold, equal", NUMPY_AND_SENTENCES)
def test_numpy_forms_and_printed_sentences(checker, program, gold, equal):
    printed = printed_by(program)
    verdict = checker.check(gold, printed, printed=True)
    assert verdict.equal is equal, (printed, verdict)


SCIENTIFIC_AND_WORDS = [
    ("10^{20}", "1e20", True), ("300000000", "3e8", True), ("3 \\cdot 10^{8}", "3e8", True),
    ("3e", "3e", True), ("2e", "2 \\cdot 10", False), ("0.0025", "2.5E-3", True),
    ("\\infty", "\\text{infinity}", True), ("-\\infty", "\\text{infinity}", False),
    ("(-\\infty, \\infty)", "\\text{all real numbers}", True), ("\\emptyset", "\\varnothing", True),
    ("\\emptyset", "\\text{no solution}", True),
]


@pytest.mark.parametrize("gold, candidate, equal", SCIENTIFIC_AND_WORDS)
def test_scientific_notation_and_words_that_name_values(checker, gold, candidate, equal):
    assert checker.check(gold, candidate).equal is equal


# -- issue 32: inequality solutions, polynomials, 2-D arrays --------------------------------------


def printed_answer(program: str) -> str:
    """What a Program-of-Thoughts run takes as the answer of `program`: its real output,
    read as the agent reads it (the last value printed, over several lines if it spans them)."""
    import contextlib
    import io

    from runner.agent.protocols.code import last_printed_value

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {})  # the test's own program
    return last_printed_value([line.strip() for line in out.getvalue().splitlines()
                               if line.strip()])


_SYMPY = "from sympy import *\nx, y = symbols('x y')\n"
_NUMPY = "import numpy as np\n"

PRINTED_FORMS = [
    # sympy's inequality solutions, as the intervals they describe
    (_SYMPY + "print(solve(x - 3 > 0, x))", "(3, \\infty)", True),  # (3 < x) & (x < oo)
    (_SYMPY + "print(solve(x - 3 > 0, x))", "x > 3", True),
    (_SYMPY + "print(solve(x - 3 > 0, x))", "[3, \\infty)", False),
    (_SYMPY + "print(solve(x**2 - 3*x + 2 <= 0, x))", "[1, 2]", True),
    (_SYMPY + "print(solve(x**2 - 3*x + 2 <= 0, x))", "(1, 2)", False),
    (_SYMPY + "print(solve(x**2 - 3*x + 2 > 0, x))", "(-\\infty, 1) \\cup (2, \\infty)", True),
    (_SYMPY + "print(solve(x**2 - 3*x + 2 > 0, x))", "(-\\infty, 1] \\cup [2, \\infty)", False),
    (_SYMPY + "print(solve(x**2 >= 4, x))", "(-\\infty, -2] \\cup [2, \\infty)", True),
    (_SYMPY + "print(reduce_inequalities([x > 1, x < 5], x))", "(1, 5)", True),
    (_SYMPY + "print(reduce_inequalities([x > 1, x < 5], x))", "1 < x < 5", True),
    # a Poly is its expression
    (_SYMPY + "print(Poly(x**2 - 5*x + 6, x))", "x^2 - 5x + 6", True),
    (_SYMPY + "print(Poly(x**2 - 5*x + 6, x))", "(x-2)(x-3)", True),
    (_SYMPY + "print(Poly(x**2 - 5*x + 6, x))", "x^2 - 5x - 6", False),
    (_SYMPY + "print(Poly(x**2 + y, x, y))", "x^2 + y", True),
    (_SYMPY + "print(Poly(x**2 + sqrt(2), x))", "x^2 + \\sqrt{2}", True),
    (_SYMPY + "print(Poly(x**2 + I, x))", "x^2 + i", True),
    (_SYMPY + "print(Poly(x**2 + 1, x, modulus=5))", "x^2 + 1", False),
    # numpy's 2-D arrays, printed a row a line, read whole
    (_NUMPY + "print(np.array([[1, 2], [3, 4]]))",
     "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", True),
    (_NUMPY + "print(np.array([[1, 2], [3, 4]]))",
     "\\begin{pmatrix} 3 & 4 \\end{pmatrix}", False),
    (_NUMPY + "print(np.linalg.inv(np.array([[1, 2], [3, 4]])))",
     "\\begin{pmatrix} -2 & 1 \\\\ \\frac{3}{2} & -\\frac{1}{2} \\end{pmatrix}", True),
    (_NUMPY + "print(np.linalg.inv(np.array([[1, 2], [3, 4]])))",
     "\\begin{pmatrix} -2 & 1 \\\\ \\frac{3}{2} & \\frac{1}{2} \\end{pmatrix}", False),
    (_NUMPY + "print('inverse:')\nprint(np.eye(3))",
     "\\begin{pmatrix} 1 & 0 & 0 \\\\ 0 & 1 & 0 \\\\ 0 & 0 & 1 \\end{pmatrix}", True),
    (_NUMPY + "print(np.array([[1], [2]]))", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", True),
    (_NUMPY + "print(np.arange(2000).reshape(2, 1000))", "0", False),  # summarised: unread
]


@pytest.mark.parametrize("program, gold, equal", PRINTED_FORMS)
def test_inequalities_polynomials_and_2d_arrays(checker, program, gold, equal):
    printed = printed_answer(program)
    verdict = checker.check(gold, printed, printed=True)
    assert verdict.equal is equal, (printed, verdict)


def test_a_2d_array_is_read_over_its_lines():
    printed = printed_answer(_NUMPY + "print(np.array([[1, 2], [3, 4]]))")
    assert printed.count("\n") == 1  # both rows, not the last line alone
    assert printed_latex(printed) == "\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}"


@pytest.mark.parametrize("program, gold", [
    (_SYMPY + "print(solveset(sin(x) - 1, x))", "\\frac{\\pi}{2} + 2k\\pi"),
    (_SYMPY + "print(solveset(sin(x), x))", "k\\pi"),
    (_SYMPY + "print(solveset(tan(x) - 1, x))", "\\frac{\\pi}{4} + n\\pi"),
])
def test_a_printed_image_set_is_refused_with_the_reason(checker, program, gold):
    printed = printed_answer(program)  # ImageSet(Lambda(_n, 2*_n*pi + pi/2), Integers), ...
    assert "ImageSet(" in printed
    verdict = checker.check(gold, printed, printed=True)
    assert not verdict.equal and verdict.failed and verdict.rule == "unread", verdict
    assert "ImageSet" in verdict.reason
