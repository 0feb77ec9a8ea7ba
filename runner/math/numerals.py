"""Numbers written alone: their exact values, and how decimals, approximations and bases read.

The text rules of the checker (`runner.math.checker`) decide most pairs of plain numbers
without the symbolic step, exactly, with these helpers:

- `plain_number`: an integer, decimal or simple fraction written alone (`-0.25`, `\\frac{3}{4}`,
  `3/4`), as a `Fraction`; `number_list`: two or more of them, bare or in brackets;
- `decimal_comma`: `1000,99` or `0,111`, a number written with a decimal comma where the
  comma cannot be a thousands separator (the part after it is not three digits, or the part
  before it is `0`); the checker reads it so only against a number written with a point;
- `numeral`: a numeral with a base subscript (`1011_2`, `0.0011_{2}`, `A5_{16}`), as its
  digits and base; `numeral_value` reads digits in a base;
- `decimal_agrees` (a decimal states a value to its digits, when the problem asked for a
  decimal) and `approximates` (two alternatives of one answer, `\\frac{7}{2} \\approx 4`,
  state the same value, one rounded or cut to its places);
- `states_float`: a decimal that is a program's print of a value (the double nearest it
  printed in full, `4.123105625617661` for `\\sqrt{17}`, or sympy's 15 correctly rounded
  digits, `0.0833333333333333` for 1/12) states that exact value; a shorter rounding or a
  wrong last digit does not;
- `exact_decimals`: decimal literals rewritten as exact fractions for the symbolic step.

All patterns are linear-time and lengths are capped: answers are hostile input.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Context, Decimal, localcontext
from fractions import Fraction

__all__ = ["FLOAT_DIGITS", "approximates", "decimal_agrees", "decimal_comma", "decimal_places", "exact_decimals",
           "literal_places", "number_list", "numeral", "numeral_value", "plain_number",
           "significant_digits", "states_float"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_FRACTION = re.compile(r"(-?)\\frac\{(-?\d+)\}\{(\d+)\}|(-?\d+)\s*/\s*(\d+)")
_DECIMAL_LITERAL = re.compile(r"(?<![\d.])(\d+)\.(\d+)(?![\d.])")
_DECIMAL_COMMA = re.compile(r"(-?)(\d+),(\d+)")
# `1011_2`, `0.0011_{2}`, `A5_{16}`, `4210_{5}`: digits (and capital letters for bases over
# ten), then the base as a subscript. At least one digit, so `x_1` is never a numeral.
_NUMERAL = re.compile(r"(?=[0-9A-Z.]*[0-9])([0-9A-Z]+(?:\.[0-9A-Z]+)?)_\{?\s*(\d{1,2})\s*\}?")
_DIGITS = re.compile(r"[0-9A-Z]+(?:\.[0-9A-Z]+)?")
_MAX_DIGITS = 200
# A decimal this long may be a floating-point print of a value rather than a rounding
# someone chose; `states_float` decides whether it is one.
FLOAT_DIGITS = 12
# sympy prints a Float to 15 significant digits: a decimal of that many digits or more,
# correctly rounded, is such a print.
PRINT_DIGITS = 15
# Exact decimal division for `states_float` (a value to 60 digits is ample for 17).
_DECIMALS = Context(prec=60)


def plain_number(latex: str) -> Fraction | None:
    """The exact value of an integer, decimal or simple fraction written alone, else None."""
    text = latex.strip()
    if len(text) > _MAX_DIGITS:
        return None
    if _NUMBER.fullmatch(text):
        return Fraction(text)
    match = _FRACTION.fullmatch(text)
    if match is None:
        return None
    if match.group(2) is not None:
        sign = -1 if match.group(1) else 1
        numerator, denominator = int(match.group(2)), int(match.group(3))
    else:
        sign, numerator, denominator = 1, int(match.group(4)), int(match.group(5))
    if denominator == 0:
        return None
    return sign * Fraction(numerator, denominator)


_BRACKETS = {"(": ")", "[": "]", "\\{": "\\}", "": ""}


def number_list(latex: str) -> tuple[str, list[Fraction]] | None:
    """A list of two or more plain numbers, bare or in brackets: (opening bracket, values).

    `1, 2, 3` and `\\{1, 2\\}` are sets, `(1, 2)` a tuple or an open interval, `[1, 2)` an
    interval: the caller compares them without the symbolic step. None for anything else."""
    text = latex.strip()
    if len(text) > 2000 or "," not in text:
        return None
    opening = next((mark for mark in ("\\{", "(", "[") if text.startswith(mark)), "")
    closing_marks = (")", "]") if opening in ("(", "[") else (_BRACKETS[opening],)
    body = text[len(opening):]
    if opening:
        closing = next((mark for mark in closing_marks if body.endswith(mark)), None)
        if closing is None:
            return None
        body = body[:len(body) - len(closing)]
        opening = opening + closing  # "(]" style: both ends matter for intervals
    values = []
    for item in body.split(","):
        value = plain_number(item)
        if value is None:
            return None
        values.append(value)
    return (opening, values) if len(values) >= 2 else None


def decimal_comma(latex: str) -> Fraction | None:
    """`1000,99` or `0,111` read with a decimal comma, when the comma cannot group thousands
    (a thousands group is one to three digits, not starting with 0, then exactly three).
    None otherwise: `1,000` is a thousand, `1, 2` a list. The caller decides whether the
    other answer makes this reading the one meant (a number written with a point does)."""
    text = latex.strip()
    if len(text) > _MAX_DIGITS:
        return None
    match = _DECIMAL_COMMA.fullmatch(text)
    if match is None:
        return None
    sign, whole, decimals = match.groups()
    if len(decimals) == 3 and 1 <= len(whole) <= 3 and not whole.startswith("0"):
        return None
    value = Fraction(f"{whole}.{decimals}")
    return -value if sign else value


def numeral(latex: str) -> tuple[str, int] | None:
    """(digits, base) of a numeral written with its base as a subscript, else None.

    The digits must be valid in the base (2 to 36; letters for digits over nine)."""
    text = latex.strip()
    if len(text) > _MAX_DIGITS:
        return None
    match = _NUMERAL.fullmatch(text)
    if match is None:
        return None
    digits, base = match.group(1), int(match.group(2))
    if numeral_value(digits, base) is None:
        return None
    return digits, base


def numeral_value(digits: str, base: int) -> Fraction | None:
    """The value of `digits` (`101.01`, `A5`) read in `base`, or None when they are not a
    numeral of that base."""
    if not 2 <= base <= 36 or len(digits) > _MAX_DIGITS or not _DIGITS.fullmatch(digits):
        return None
    whole, _, fraction = digits.partition(".")
    try:
        value = Fraction(int(whole, base))
        if fraction:
            value += Fraction(int(fraction, base), base ** len(fraction))
    except ValueError:  # a digit the base does not have
        return None
    return value


def decimal_places(latex: str) -> int | None:
    """Digits after the point when `latex` is a decimal literal alone (`-0.25` -> 2), else None."""
    text = latex.strip()
    if len(text) > _MAX_DIGITS or not _NUMBER.fullmatch(text) or "." not in text:
        return None
    return len(text.split(".", 1)[1])


def literal_places(latex: str) -> int | None:
    """Digits after the point of an integer or decimal literal alone (`12` -> 0), else None."""
    text = latex.strip()
    if len(text) > _MAX_DIGITS or not _NUMBER.fullmatch(text):
        return None
    return len(text.split(".", 1)[1]) if "." in text else 0


def _rounded(value: Fraction, places: int) -> tuple[Fraction, Fraction]:
    """`value` rounded half away from zero, and truncated, to `places` decimals."""
    scale = 10 ** places
    magnitude = abs(value) * scale
    sign = -1 if value < 0 else 1
    rounded = Fraction(sign * int(magnitude + Fraction(1, 2)), scale)
    truncated = Fraction(sign * int(magnitude), scale)
    return rounded, truncated


def significant_digits(latex: str) -> int:
    """Significant digits of a decimal literal (`0.00333` -> 3)."""
    return len(latex.strip().lstrip("-").replace(".", "").lstrip("0"))


def decimal_agrees(gold: Fraction, gold_places: int | None, candidate: Fraction,
                   candidate_places: int | None, candidate_significant: int = 0) -> bool:
    """When the problem asked for a decimal: does one side state the other to its digits?

    `*_places` are the digits after the point of a side written as a decimal literal (None
    for an exact value such as `\\frac{1}{3}` or `\\sqrt{2}`).
    - gold decimal (rounded by the problem's author), candidate anything: the candidate
      rounded or truncated to the gold's places gives the gold; a candidate decimal must
      have at least as many places as the gold;
    - gold exact, candidate decimal: the gold rounded or truncated to the candidate's
      places gives the candidate, which must have at least 3 significant digits.
    Exact equality always agrees.
    """
    if gold == candidate:
        return True
    if gold_places is not None:
        if candidate_places is not None and candidate_places < gold_places:
            return False
        return gold in _rounded(candidate, gold_places)
    if candidate_places is None or candidate_significant < 3:
        return False
    return candidate in _rounded(gold, candidate_places)


def approximates(first: Fraction, first_places: int | None, second: Fraction,
                 second_places: int | None) -> bool:
    """Whether two alternatives of one answer (`a \\approx b`) state the same value: equal, or
    one is a literal (`*_places` digits after its point; None for an exact form such as
    `\\frac{7}{2}`) that the other gives when rounded or cut to those places (`\\frac{7}{2}
    \\approx 4`, `\\frac{1}{3} \\approx 0.33`; not `5 \\approx 6`, not `\\frac{1}{3} \\approx 0.5`)."""
    if first == second:
        return True
    if second_places is not None and second in _rounded(first, second_places):
        return True
    return first_places is not None and first in _rounded(second, first_places)


def states_float(value: Fraction, literal: str) -> bool:
    """Whether `literal`, a decimal of at least `FLOAT_DIGITS` significant digits, is what a
    program prints for `value`: Python's (and numpy's) shortest print of the double nearest
    `value` (`4.123105625617661` for `\\sqrt{17}`), or `value` correctly rounded to the
    literal's digits when there are `PRINT_DIGITS` or more (sympy's 15-digit
    `0.0833333333333333` for 1/12). A decimal of 12 or 13 digits, or one whose last digit is
    off (`0.3333333333334`), is a rounding, not the exact value."""
    if decimal_places(literal) is None or significant_digits(literal) < FLOAT_DIGITS:
        return False
    stated = Fraction(literal.strip())
    try:
        if Fraction(repr(float(value))) == stated:
            return True
    except OverflowError:  # beyond any double: no program printed it as one
        return False
    digits = significant_digits(literal)
    if digits < PRINT_DIGITS or value == 0:
        return False
    with localcontext(_DECIMALS):
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
        return any(Fraction(exact.quantize(step, rounding=rounding)) == stated
                   for rounding in (ROUND_HALF_EVEN, ROUND_HALF_UP))


def exact_decimals(latex: str) -> str:
    """Decimal literals rewritten as exact fractions (`0.25` -> `{\\frac{25}{100}}`), so the
    symbolic checker compares `0.3333333` with `1/3` exactly instead of to six places."""
    def fraction(match: re.Match[str]) -> str:
        whole, decimals = match.group(1), match.group(2)
        return "{\\frac{" + (whole + decimals).lstrip("0").rjust(1, "0") + "}{1" + \
            "0" * len(decimals) + "}}"
    return _DECIMAL_LITERAL.sub(fraction, latex)
