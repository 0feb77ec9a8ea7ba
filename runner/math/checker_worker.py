"""The checker worker: the functions a long-lived checker process runs for the host.

`runner.math.checker_pool` starts each process with `initialize` (limits, quiet output,
sympy and Math-Verify imported, the comparison paths warmed), then sends it `run` calls,
one `CompareRequest` at a time, and `warm` calls while it is idle.

Its own limits are a courtesy, not the guarantee: an interval timer raises inside Python
code at the request's soft deadline, and an address-space limit turns runaway allocation
(`10^{10^{10}}`) into a MemoryError. What a long C call or a crash escapes, the host
handles: it kills the process at the hard deadline and starts another.

The process is forked from the host, so it starts with the host's whole address space
mapped (other threads' stacks, malloc arenas, a Ray driver's object store: gigabytes that
are not the worker's own and mostly not even backed by memory). The address-space limit
is therefore what the worker may add to what it inherited, not a total, which a large
host would exceed before the worker's first import.

A process that cannot start (the libraries do not import, or the limit is too small for
them) does not end: it says why, to `started` (the host's probe) and to every `run`,
where pebble would have ended it with the reason sent nowhere.

`main()` does the same imports and first comparison in the foreground and prints the
library versions, or the error that stops them (`python -c 'from runner.math.checker_worker
import main; main()'`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import resource
import signal
import sys
from fractions import Fraction
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .numerals import (
    FLOAT_DIGITS,
    approximates,
    decimal_agrees,
    decimal_places,
    exact_decimals,
    literal_places,
    significant_digits,
    states_float,
)

# Parsed forms are shown to people, not re-parsed: a bounded excerpt is enough.
MAX_PARSED_CHARS = 300
# The rule of a reply from a process that could not start (its reason says why).
UNAVAILABLE = "unavailable"
_MIB = 1024 * 1024

# An integer written out (a program's printed `10**100000`) is read as an integer up to this
# many digits; reading one costs time quadratic in its length (0.1 s at 100,000 digits).
MAX_INTEGER_DIGITS = 200_000
# Both sides exact numbers: equal when they agree to this many significant digits, after
# exact arithmetic where it applies (rationals, factorials, powers of integers).
_EXACT_DIGITS = 60
# Beyond this size, agreeing to those digits leaves a difference of 1 or more undecided.
_LARGEST_COMPARED_NUMERICALLY = 10 ** (_EXACT_DIGITS - 20)
_INTEGER = re.compile(r"-?\d+")

# Why this process could not start (set by `initialize`), or None.
_start_failure: str | None = None


class CompareRequest(BaseModel):
    """Two normalised answers to compare, and the worker's own (soft) time limit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    gold: str
    candidate: str
    allow_decimal: bool = False
    # Not "are they equal" but "do two alternatives of one answer (`a \\approx b`) state the
    # same value", one of them possibly rounded: see `numerals.approximates`.
    agree: bool = False
    soft_timeout_s: float = Field(gt=0)


class CompareReply(BaseModel):
    """The worker's verdict on a request, size-capped where it quotes the answers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int
    equal: bool
    rule: str = Field(max_length=40)
    reason: str = Field(max_length=2000)
    gold_parsed: str | None = Field(default=None, max_length=MAX_PARSED_CHARS)
    candidate_parsed: str | None = Field(default=None, max_length=MAX_PARSED_CHARS)
    # The worker was interrupted mid-computation (timer, memory, recursion): the caches of
    # the libraries it uses may be half-built, so the host replaces it.
    retire: bool = False


class SoftTimeout(BaseException):
    """Raised by the interval timer. A BaseException, so that Math-Verify's broad
    `except Exception` handlers cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout


def _excerpt(value: object) -> str:
    from sympy import Integer

    if isinstance(value, Integer) and value.p.bit_length() > 4 * MAX_PARSED_CHARS:
        return f"an integer of about {int(value.p.bit_length() * 0.30103) + 1} digits"
    try:
        text = str(value)
    except Exception:
        return "<unprintable>"
    return text if len(text) <= MAX_PARSED_CHARS else text[:MAX_PARSED_CHARS - 3] + "..."


@lru_cache(maxsize=2048)
def _parse(latex: str) -> object | None:
    """The sympy form Math-Verify reads from `latex`, or None (cached: golds repeat)."""
    from math_verify import LatexExtractionConfig, parse
    from sympy import Basic, Integer, MatrixBase

    if _INTEGER.fullmatch(latex):  # an integer written out: read as what it is, at any length
        integer: object = Integer(int(latex))
        return integer
    # LaTeX only: the plain-expression extractor reads a leading number out of text it
    # cannot parse ("2**3+1" -> 2). Python-style answers were made LaTeX by normalisation.
    parsed = parse("$" + latex + "$", extraction_config=[LatexExtractionConfig()],
                   parsing_timeout=None)  # the host keeps time
    for item in parsed:
        if isinstance(item, (Basic, MatrixBase)):
            found: object = item
            return found
    return None


def _numeric_value(expression: object) -> Fraction | None:
    """An exact-enough rational for a constant expression (40 digits), else None."""
    from sympy import Basic, N

    if not isinstance(expression, Basic) or expression.free_symbols:
        return None
    if not expression.is_number or expression.is_real is False:
        return None
    try:
        return Fraction(str(N(expression, 40)))
    except (ValueError, TypeError, ZeroDivisionError):
        return None


def _decimal_rule(request: CompareRequest, gold: object,
                  candidate: object) -> CompareReply | None:
    """With decimals allowed and one side a decimal literal: compare to its digits."""
    gold_places = decimal_places(request.gold)
    candidate_places = decimal_places(request.candidate)
    if gold_places is None and candidate_places is None:
        return None
    # A decimal literal's value is the literal itself, not its binary float.
    gold_value = Fraction(request.gold) if gold_places is not None else _numeric_value(gold)
    candidate_value = Fraction(request.candidate) if candidate_places is not None \
        else _numeric_value(candidate)
    if gold_value is None or candidate_value is None:
        return None
    agrees = decimal_agrees(gold_value, gold_places, candidate_value, candidate_places,
                            significant_digits(request.candidate))
    side = "the gold" if gold_places is not None else "the candidate"
    return CompareReply(
        id=request.id, equal=agrees, rule="decimal",
        reason=(f"decimals allowed: {side} is a decimal and the other value "
                f"{'agrees' if agrees else 'does not agree'} with it to its digits"),
        gold_parsed=_excerpt(gold), candidate_parsed=_excerpt(candidate))


def _exact_number(expression: object) -> bool:
    """A number with no decimal in it (no Float), no variable and no infinity."""
    from sympy import Expr, Float

    return isinstance(expression, Expr) and not expression.free_symbols \
        and bool(expression.is_number) and not expression.has(Float) \
        and expression.is_finite is not False


def _cheap_to_evaluate(expression: Any) -> bool:
    """Whether exact arithmetic on `expression` stays within integers of about
    `MAX_INTEGER_DIGITS` digits: every power has an integer exponent and a result of bounded
    size, every factorial a bounded argument (`10^{10^{10}}` is left to numeric evaluation)."""
    from sympy import Integer, factorial, preorder_traversal

    bits_limit = 4 * MAX_INTEGER_DIGITS
    for node in preorder_traversal(expression):
        if node.is_Pow:
            base, exponent = node.args
            if not isinstance(exponent, Integer):
                return False
            size = base.p.bit_length() if isinstance(base, Integer) else 64
            if abs(int(exponent)) * max(size, 1) > bits_limit:
                return False
        elif isinstance(node, factorial):
            argument = node.args[0]
            if not isinstance(argument, Integer) or int(argument) > MAX_INTEGER_DIGITS // 4:
                return False
    return True


def _rational(expression: Any) -> Any:
    """The expression as a sympy Rational when exact arithmetic makes it one (`1/2004!`,
    `10^{100000}`), else None."""
    if expression.is_Rational:
        return expression
    if not _cheap_to_evaluate(expression):
        return None
    value = expression.doit()
    return value if value.is_Rational else None


def _exact_equal(gold: Any, candidate: Any) -> bool | None:
    """Both sides exact numbers: whether they are equal, exactly for rationals, else to
    `_EXACT_DIGITS` significant digits (never Math-Verify's rounding to decimal places,
    which makes `\\frac{1}{2004!}` equal `\\frac{1}{2005!}`). None when a side is not an
    exact number or its value cannot be had."""
    from sympy import N

    if not (_exact_number(gold) and _exact_number(candidate)):
        return None
    gold_rational, candidate_rational = _rational(gold), _rational(candidate)
    if gold_rational is not None and candidate_rational is not None:
        return bool(gold_rational == candidate_rational)
    try:
        gold_value, candidate_value = N(gold, _EXACT_DIGITS), N(candidate, _EXACT_DIGITS)
        size = max(abs(gold_value), abs(candidate_value))
        difference = abs(gold_value - candidate_value)
        if not (size.is_Number and difference.is_Number):
            return None
        if size > _LARGEST_COMPARED_NUMERICALLY:
            # Too large for digits to tell apart (`10^{10^{10}}` and `10^{10^{10}}+1` agree
            # to any number of them, yet differ): equal only as written.
            return bool(gold == candidate)
        return bool(difference <= size * 10 ** -(_EXACT_DIGITS - 10))
    except (TypeError, ValueError, ArithmeticError):
        return None


def _imaginary_unit(expression: object) -> object:
    """`expression` with the letter `i` read as the imaginary unit, when `i` is its only
    letter (`i^2`, `\\frac{2}{1-i}`, `e^{i\\pi/3}`); else unchanged.

    Math-Verify parses `i` as a variable. The rule: an answer that is a number apart from
    the letter `i` writes the imaginary unit, since an index or a variable `i` comes with
    other letters (`a_i`, `\\sum_{i=1}^n`, `x + i`). Decided per side, so that `-1`
    against `i^2` compares `-1` with `I**2`; an answer with another letter keeps `i` a
    variable on its side, and then the two differ as expressions do."""
    from sympy import Basic, I

    if not isinstance(expression, Basic):
        return expression
    symbols = expression.free_symbols
    if not symbols or any(getattr(symbol, "name", None) != "i" for symbol in symbols):
        return expression
    try:
        replaced: object = expression.xreplace(dict.fromkeys(symbols, I))
    except (TypeError, ValueError, ArithmeticError):
        return expression
    return replaced


def _literal_or_value(text: str, parsed: object) -> tuple[Fraction | None, int | None]:
    """(value, places): a literal number's own value and digits after its point, or an exact
    form's numeric value with no places."""
    places = literal_places(text)
    if places is not None:
        return Fraction(text.strip()), places
    return _numeric_value(parsed), None


def _agreement(request: CompareRequest, first: object, second: object) -> CompareReply:
    """Whether two alternatives of one answer state the same value (`agree` requests)."""
    from math_verify import verify

    first_value, first_places = _literal_or_value(request.gold, first)
    second_value, second_places = _literal_or_value(request.candidate, second)
    if first_value is not None and second_value is not None:
        agrees = approximates(first_value, first_places, second_value, second_places)
    else:
        agrees = bool(verify(first, second, timeout_seconds=None, float_rounding=6, strict=True))
    return CompareReply(id=request.id, equal=agrees, rule="agree",
                        reason="the alternatives state the same value" if agrees
                        else "the alternatives state different values",
                        gold_parsed=_excerpt(first), candidate_parsed=_excerpt(second))


def _float_rule(request: CompareRequest) -> CompareReply | None:
    """One side a decimal of `FLOAT_DIGITS` significant digits or more, the other an exact
    value it states to that many digits (`4.123105625617661` for `\\sqrt{17}`)."""
    for literal, other in ((request.candidate, request.gold), (request.gold, request.candidate)):
        if decimal_places(literal) is None or significant_digits(literal) < FLOAT_DIGITS:
            continue
        value = _numeric_value(_parse(exact_decimals(other)))
        if value is not None and states_float(value, literal):
            return CompareReply(id=request.id, equal=True, rule="float",
                                reason=f"a decimal of {FLOAT_DIGITS} significant digits or more "
                                       "states the exact value (a float's print)")
    return None


def compare(request: CompareRequest) -> CompareReply:
    """Math-Verify's verdict on two normalised answers, with the decimal rules on top, and
    exact numbers compared exactly."""
    from math_verify import verify

    gold_text, candidate_text = request.gold, request.candidate
    if not request.allow_decimal and not request.agree:
        # 0.3333333 must not pass for 1/3: decimals become the exact fractions they state.
        gold_text, candidate_text = exact_decimals(gold_text), exact_decimals(candidate_text)
    gold = _parse(gold_text)
    if gold is None:
        return CompareReply(id=request.id, equal=False, rule="unparsed",
                            reason="the gold answer could not be read as mathematics")
    candidate = _parse(candidate_text)
    if candidate is None:
        return CompareReply(id=request.id, equal=False, rule="unparsed",
                            reason="the candidate answer could not be read as mathematics",
                            gold_parsed=_excerpt(gold))
    gold, candidate = _imaginary_unit(gold), _imaginary_unit(candidate)
    if request.agree:
        return _agreement(request, gold, candidate)
    if request.allow_decimal:
        decided = _decimal_rule(request, gold, candidate)
        if decided is not None:
            return decided
    else:
        decided = _float_rule(request)
        if decided is not None:
            return decided
    exact = _exact_equal(gold, candidate)
    if exact is not None:
        return CompareReply(
            id=request.id, equal=exact, rule="exact",
            reason="both are exact numbers, compared exactly: " + ("equal" if exact else "different"),
            gold_parsed=_excerpt(gold), candidate_parsed=_excerpt(candidate))
    # A gold set and the equivalent relation are one answer both ways (`[-2, 7]` and
    # `-2 \le x \le 7`): Math-Verify reads a relation as its set only on the gold's side
    # unless told to (issue 32).
    equal = verify(gold, candidate, timeout_seconds=None, float_rounding=6, strict=True,
                   allow_set_relation_comp=True)
    return CompareReply(
        id=request.id, equal=bool(equal), rule="symbolic",
        reason="Math-Verify finds them " + ("equal" if equal else "different"),
        gold_parsed=_excerpt(gold), candidate_parsed=_excerpt(candidate))


def run(request: CompareRequest) -> CompareReply:
    """Compare under the soft time limit; what interrupts the comparison is a verdict too."""
    if _start_failure is not None:
        return CompareReply(id=request.id, equal=False, rule=UNAVAILABLE, retire=True,
                            reason=_start_failure)
    # The timer may fire anywhere up to the moment it is disarmed, an except clause or the
    # `finally` included: the outer handler catches it wherever it lands.
    try:
        signal.setitimer(signal.ITIMER_REAL, request.soft_timeout_s)
        try:
            return _compare_guarded(request)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except SoftTimeout:
        return CompareReply(id=request.id, equal=False, rule="timeout", retire=True,
                            reason=f"the symbolic check took longer than "
                                   f"{request.soft_timeout_s:g} s")


def run_here(request: CompareRequest) -> CompareReply:
    """`run` in the calling process, for a single check (`runner math check GOLD CANDIDATE`):
    starting a worker process costs more than the comparison. Call it on the main thread
    (the soft timer is a signal). Only the soft timer guards it: a long C call is not
    stopped and no memory limit is set, which is why batches use the pool.
    ImportError when the checker's libraries are missing (the pool says the same as
    CheckerUnavailableError)."""
    import math_verify  # noqa: F401  # missing libraries: the caller's error, not a verdict

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    digits = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(MAX_INTEGER_DIGITS + 10)
    quiet = logging.getLogger("math_verify")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL + 1)  # it logs every parse failure and timeout
    try:
        return run(request)
    finally:
        quiet.setLevel(level)
        sys.set_int_max_str_digits(digits)
        signal.signal(signal.SIGALRM, previous)


def _compare_guarded(request: CompareRequest) -> CompareReply:
    """`compare`, with what goes wrong inside it as a reply (a SoftTimeout passes through)."""
    try:
        return compare(request)
    except MemoryError:
        return CompareReply(id=request.id, equal=False, rule="error", retire=True,
                            reason="the symbolic check ran out of memory")
    except RecursionError:
        return CompareReply(id=request.id, equal=False, rule="error", retire=True,
                            reason="the answer is nested too deeply to check")
    except Exception as exc:
        return CompareReply(id=request.id, equal=False, rule="error",
                            reason=f"the symbolic check failed: {type(exc).__name__}")


# Representative answer forms. ANTLR builds its parsing automaton lazily, so the first
# answers of each shape parse several times slower than later ones; an idle worker parses
# these, one at a time between requests, so that real requests find the automaton built.
WARM_UP = (
    "\\frac{1}{2}", "-\\frac{3}{4}", "\\frac{\\sqrt{3}}{2}", "2\\sqrt{5}", "3+2\\sqrt{2}",
    "\\sqrt[3]{2}", "\\frac{\\pi}{6}", "2\\pi", "\\frac{5\\pi}{4}", "\\pi r^2", "0.25",
    "12", "-7", "x^2+2x+1", "(x+1)^2", "(a+5)(b+2)", "x^5 - x^4 + x^3 - 1", "p - q",
    "\\frac{x+1}{x-1}", "3x - 2y", "y = 2x + 1", "x^2 + y^2 = 25", "5x - 7y + 11z + 4 = 0",
    "(1, 2)", "(-2, 3, 5)", "\\left( 3, \\frac{\\pi}{2} \\right)", "[1, 2]", "(3, 4]",
    "(-\\infty, 0]", "(2, \\infty)", "(-\\infty, 1) \\cup (2, \\infty)", "\\{1, 2, 3\\}",
    "1, -2", "3, 5, 7", "1 \\pm \\sqrt{19}", "\\frac{-1 \\pm \\sqrt{5}}{2}", "6 - 5i",
    "2 + 3i", "\\frac{i}{5}", "-1 + i\\sqrt{3}", "e^{i\\pi/4}",
    "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
    "\\begin{bmatrix} 2 & -1 \\\\ 3 & 4 \\end{bmatrix}", "\\sin (\\frac{\\pi}{6})",
    "\\cos 2x", "\\tan^{-1} 2", "\\log_2 8", "\\ln 2", "e^2", "2^{10}", "10^{-3}", "\\binom{5}{2}",
    "5!", "|x - 1|", "\\lfloor x \\rfloor", "4210_{5}", "x \\ge 3", "-2 < x < 5",
    "\\frac{1}{x^2}", "\\sqrt{x^2 + 1}", "a^2 b", "\\frac{a}{b} + \\frac{c}{d}", "1 \\cdot {7}",
    "{\\frac{25}{100}}", "\\frac{2469}{20000}", "\\infty", "\\emptyset", "\\text{(C)}",
)


def warm(forms: tuple[str, ...]) -> None:
    """Parse representative answers (best effort, two seconds each), so that later requests
    of those shapes find the parser's automaton built."""
    if _start_failure is not None:
        return
    for form in forms:
        # As in `run`: a timer that fires after the parse, before it is disarmed, is caught.
        with contextlib.suppress(SoftTimeout):
            signal.setitimer(signal.ITIMER_REAL, 2.0)
            try:
                with contextlib.suppress(Exception):
                    _parse(form)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)


def started() -> str | None:
    """Why this process could not start, or None: it is ready (the host's probe)."""
    return _start_failure


def _address_space_bytes() -> int:
    """This process's virtual size now (0 where /proc cannot say)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[0])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _limit_address_space(memory_mb: int) -> int:
    """Let this process map `memory_mb` more than it has now (what it inherited from the
    host it was forked from), within any hard limit it was given; returns the size it
    inherited. Soft limit only, so that a process that cannot start can lift it to say so
    (the limit is against runaway answers, not against this code)."""
    inherited = _address_space_bytes()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = inherited + memory_mb * _MIB
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    return inherited


def initialize(memory_mb: int) -> None:
    """Set up a fresh checker process before its first request. Never raises: a failure
    is kept in `_start_failure` for `started` and `run` to report."""
    global _start_failure
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.set_int_max_str_digits(MAX_INTEGER_DIGITS + 10)
    # The host stops a worker with SIGTERM at the hard deadline, often while it is inside a
    # long C call, where a Python-level handler would not run until the call returns: the
    # default action ends the process at once.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the host to handle
    # Whatever a library prints goes nowhere: the host's own output is not the worker's.
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    os.close(quiet)
    logging.disable(logging.CRITICAL)  # Math-Verify logs every timeout and parse failure
    inherited = 0
    try:
        if memory_mb > 0:
            inherited = _limit_address_space(memory_mb)
        # Import, and warm the parser and the comparison paths, so the first request is fast.
        compare(CompareRequest(id=0, gold="\\frac{1}{2}", candidate="0.5", soft_timeout_s=30))
    except BaseException as exc:  # whatever stops the start is the reason
        if memory_mb > 0:  # room to report it in
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        _start_failure = _start_failure_reason(exc, memory_mb, inherited)


def _start_failure_reason(exc: BaseException, memory_mb: int, inherited: int) -> str:
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    reason = reason[:600]
    if isinstance(exc, MemoryError) and memory_mb > 0:
        reason += (f" (out of address space: the memory limit lets a worker map {memory_mb} MB "
                   f"beyond the {inherited // _MIB} MB it inherited)")
    return reason


def versions() -> dict[str, str]:
    """The versions of the libraries the symbolic step uses (read without importing them)."""
    from importlib import metadata

    found = {}
    for name in ("math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def main() -> None:
    """For diagnosing a worker that does not start: the same work, with its errors shown."""
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.set_int_max_str_digits(MAX_INTEGER_DIGITS + 10)
    logging.disable(logging.CRITICAL)
    compare(CompareRequest(id=0, gold="\\frac{1}{2}", candidate="0.5", soft_timeout_s=30))
    sys.stdout.write("".join(f"{name} {version}\n" for name, version in versions().items()))
