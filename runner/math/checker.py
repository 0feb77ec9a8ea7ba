"""Answer equivalence: normalisation rules first, then Math-Verify in a guarded worker pool.

    >>> from runner.math import is_equivalent, check
    >>> is_equivalent("\\\\frac{1}{4}", "0.25")
    True
    >>> check("85\\\\text{ feet}", "85 inches").reason
    'different units: foot vs inch'

How a pair is decided (the first rule that applies wins; `Verdict.rule` names it):

1. `empty` / `too_long`: no candidate, or an answer over `MAX_ANSWER_CHARS` (then only an
   exact string match counts), except an integer written out, of up to
   `MAX_INTEGER_DIGITS` digits (a program's print of `10**100000`), which is read as one.
2. Both answers are normalised (`runner.math.normalize`); with `printed=True` the candidate
   is a program's printed output, read as Python's or sympy's forms (`[2, 3]` the
   solutions, `Interval.open(-oo, 3)`, `Matrix(...)`, `I`, `(3 < x) & (x < oo)`, `Poly(...)`);
   a printed `ImageSet(...)` (solveset's periodic solutions) is refused (`unread`,
   `failed=True`): no rule compares a family of solutions as a set yet. A gold answer stating
   alternatives (`\\frac23 \\approx 0.67`) matches when any alternative does. A candidate's
   alternatives must state one value (`hedge` otherwise): `\\frac13 \\approx 0.33` and
   `\\frac72 \\approx 4` agree (one is the other rounded or cut to its places), `5 \\approx 6`
   and `\\frac13 \\approx 0.5` count for neither value.
3. `choices`: multiple-choice letters compare as sets (`\\text{A,C,F}` = `A, C, F`). A
   letter written with its value (`\\text{(B) } 12`) equals that letter and, against a
   gold value, is its value: the checker has no list of options, so a letter and a value
   are each compared with what the gold states (a gold `13` rejects `(B) 12` whatever B is);
   a hedged one is no answer (rule 4 is applied first).
4. `hedge`: a candidate followed by words that name another value, hedge or negate it
   (`5 \\text{ (or 6)}`, `7 \\text{ (approximately 8)}`, `5 \\text{ (incorrect)}`) is not equal
   to anything; so is an `=` chain whose pieces disagree (`6=5`, `x=6=5`).
5. `text`: a text answer (`\\text{Evelyn}`) compares case-insensitively as words.
6. `unit`: both sides name a unit and the units differ (85 feet vs 85 inches): not equal.
   A unit on one side only is accepted (the problem fixed it).
7. `time`: a.m. vs p.m. differ; clock times (`4:30 p.m.`) compare as times of day.
8. `variable`: both answers are assignments to different variables (`x = 5`, `y = 5`).
9. `numeral`: a numeral with a base subscript (`1011_2`, `0.0011_{2}`) equals a numeral of
   the same value in any base, or the same digits written without a base (the problem
   named it); anything else is not an answer in that base.
   `identical`: the normalised forms are the same string.
10. `number` / `numbers`: both sides are plain numbers, or lists of them (integers,
   decimals, `a/b`): exact comparison, so `0.3333333` is not `1/3` and `0.25` is `1/4`.
   `float`: a decimal of 12 significant digits or more is a program's floating-point print
   and counts as the exact value it states to that many digits (`0.0833333333333333` for
   1/12), but not a rounding to fewer digits (`numerals.states_float`). A decimal comma
   (`1000,99`, `0,111`) in the candidate reads as one against a gold written with a point
   (`numerals.decimal_comma`); a gold `1,3` is two values. With `allow_decimal=True` (the problem asked for a
   decimal or a rounded answer) a decimal agrees with a value when it states that value to
   its own digits (see `numerals.decimal_agrees`). Lists: `1, 2` and `\\{1, 2\\}` are sets
   (order does not matter); `(1, 2)` and `[1, 2)` keep their order and their brackets (open
   and closed ends differ).
11. `exact`: both sides are exact numbers (no decimal, no variable): compared exactly,
   rationals by value (`\\frac{1}{2004!}` is not `\\frac{1}{2005!}`, which Math-Verify's
   rounding to six places would find equal), others to 50 significant digits.
12. `symbolic`: Math-Verify compares the normalised forms (intervals, sets, tuples, matrices,
   equations, radicals, `\\pi`, complex numbers). Decimals are rewritten as exact fractions
   first unless `allow_decimal` is set. The worker process has `timeout_s` to answer; a
   timeout, crash or parse failure gives `equal=False` with `failed=True` and the reason.
"""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from fractions import Fraction
from importlib import metadata
from itertools import count
from typing import Self

from pydantic import BaseModel, ConfigDict

from .checker_pool import DEFAULT_MEMORY_MB, CheckerPool, CheckerUnavailableError, Failure
from .checker_worker import MAX_INTEGER_DIGITS, CompareReply, CompareRequest, run_here
from .normalize import MAX_ANSWER_CHARS, Normalized, normalize_answer
from .numerals import (
    FLOAT_DIGITS,
    approximates,
    decimal_agrees,
    decimal_comma,
    decimal_places,
    literal_places,
    number_list,
    numeral_value,
    plain_number,
    significant_digits,
    states_float,
)
from .printed import printed_latex
from .reading import read_answer

__all__ = ["CHECKER_RULES_VERSION", "Checker", "Verdict", "asks_for_decimal", "check",
           "check_many", "checker_version", "is_equivalent"]

# Bumped whenever a rule here or in normalize.py changes what is equal, so that published
# numbers name the checker that produced them.
CHECKER_RULES_VERSION = "4"
DEFAULT_TIMEOUT_S = 5.0
# The worker's own interval timer fires at this share of the limit: a clean "timeout"
# verdict without the cost of killing and restarting a process, when Python code is slow.
_SOFT_SHARE = 0.8
# The host kills the worker this long before the limit, so that even a killed comparison
# (kill, reap) ends within `timeout_s`.
_KILL_MARGIN_S = 0.05


_ASKS_FOR_DECIMAL = re.compile(
    r"\b(?:decimal|nearest\s+(?:tenth|hundredth|thousandth|ten-thousandth|cent|percent)"
    r"|significant\s+(?:figure|digit)|approximate(?:ly)?|estimate|round(?:ed)?\s+to)",
    re.IGNORECASE)


def asks_for_decimal(problem: str) -> bool:
    """Whether a problem's text asks for a decimal or rounded answer ("Express your answer
    as a decimal", "to the nearest tenth"): the usual source of `allow_decimal`."""
    return bool(_ASKS_FOR_DECIMAL.search(problem))


def _package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"


def checker_version() -> str:
    """Which checker decided: the rules' version and Math-Verify's, e.g.
    `runner-math/4 math-verify/0.9.0 latex2sympy2_extended/1.11.0`."""
    return (f"runner-math/{CHECKER_RULES_VERSION} "
            f"math-verify/{_package_version('math-verify')} "
            f"latex2sympy2_extended/{_package_version('latex2sympy2_extended')}")


class Verdict(BaseModel):
    """Whether a candidate answer equals the gold answer, and why."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    equal: bool
    rule: str  # which rule decided (see the module docstring)
    reason: str  # one sentence for people
    failed: bool = False  # the checker could not decide (timeout, crash, unparseable)
    gold: str  # the normalised gold answer that was compared
    candidate: str  # the normalised candidate
    gold_parsed: str | None = None  # what the symbolic checker read, when it ran
    candidate_parsed: str | None = None
    allow_decimal: bool = False
    printed: bool = False  # the candidate was read as a program's printed output
    checker_version: str


@dataclass(frozen=True, slots=True)
class _Pending:
    """A pair that needs the symbolic checker."""

    gold: Normalized
    candidate: Normalized


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the symbolic step must do for one pair of answers: first confirm that the
    candidate's alternatives agree (`agreements`: each pair must state the same value), then
    return `decided` if the text rules found the answers equal, else compare `pairs` (the
    first equal one wins)."""

    agreements: tuple[_Pending, ...]
    pairs: tuple[_Pending, ...]
    decided: Verdict | None = None


def _show(form: Normalized) -> str:
    if form.choices is not None:
        letters = ",".join(sorted(form.choices))
        return f"({letters}) {form.latex}" if form.labelled else letters
    if form.words is not None:
        return form.words
    suffix = "".join(f" {part}" for part in (form.unit, form.meridiem) if part)
    return form.latex + suffix


class Checker:
    """Decides answer equivalence; owns the pool of checker processes.

    `workers`: processes for the symbolic step (default: the CPU count, at most 4);
    `timeout_s`: the limit for one symbolic comparison, enforced by killing the process;
    `memory_mb`: each process's address space beyond what it is forked with (a forked
    process starts with its parent's mappings); `in_process=True`: comparisons made on
    the main thread run in this process instead (`checker_worker.run_here`: no process
    start, which costs more than one comparison, but only the soft timer guards them: for
    a single check, as `runner math check GOLD CANDIDATE` makes). Use as a context manager,
    or call `close()`; the module-level functions share one lazily created Checker.
    """

    def __init__(self, *, workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 memory_mb: int = DEFAULT_MEMORY_MB, in_process: bool = False) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.timeout_s = timeout_s
        self.version = checker_version()
        self.in_process = in_process
        # Lazy: no process starts until a comparison needs one.
        self._pool = CheckerPool(self.workers, memory_mb=memory_mb)
        self._ids = count(1)
        self._ids_lock = threading.Lock()

    # -- public ---------------------------------------------------------------------------------

    def check(self, gold: str, candidate: str | None, *, allow_decimal: bool = False,
              printed: bool = False) -> Verdict:
        """The verdict on one pair (never raises for any answer text). `printed=True` when
        a program printed the candidate (Program of Thoughts): it is read as Python's or
        sympy's output (`[2, 3]` are the solutions, `I` the imaginary unit)."""
        decided = self._decide(gold, candidate, allow_decimal, printed)
        verdict = decided if isinstance(decided, Verdict) else self._symbolic(decided, allow_decimal)
        return verdict.model_copy(update={"printed": True}) if printed else verdict

    def is_equivalent(self, gold: str, candidate: str | None, *,
                      allow_decimal: bool = False, printed: bool = False) -> bool:
        return self.check(gold, candidate, allow_decimal=allow_decimal, printed=printed).equal

    def check_many(self, pairs: Iterable[tuple[str, str | None]], *,
                   allow_decimal: bool | Sequence[bool] = False,
                   printed: bool | Sequence[bool] = False) -> list[Verdict]:
        """Verdicts for many pairs, in order. Pairs that need the symbolic checker run on
        all workers at once; repeated pairs are decided once."""
        items = list(pairs)
        flags = _flags("allow_decimal", allow_decimal, len(items))
        printed_flags = _flags("printed", printed, len(items))
        results: list[Verdict | None] = [None] * len(items)
        pending: dict[tuple[str, str | None, bool, bool], list[int]] = {}
        for index, ((gold, candidate), flag, from_print) in enumerate(
                zip(items, flags, printed_flags, strict=True)):
            pending.setdefault((gold, candidate, flag, from_print), []).append(index)
        slow: list[tuple[bool, _Plan, list[int]]] = []
        for (gold, candidate, flag, from_print), indexes in pending.items():
            decided = self._decide(gold, candidate, flag, from_print)
            if isinstance(decided, Verdict):
                for index in indexes:
                    results[index] = _marked(decided, from_print)
            else:
                slow.append((flag, decided, indexes))
        if slow:
            with ThreadPoolExecutor(max_workers=self.workers,
                                    thread_name_prefix="runner-checker") as executor:
                verdicts = executor.map(lambda job: self._symbolic(job[1], job[0]), slow)
                for (_, _, indexes), verdict in zip(slow, verdicts, strict=True):
                    for index in indexes:
                        results[index] = _marked(verdict, printed_flags[index])
        return [verdict for verdict in results if verdict is not None]

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the rules -----------------------------------------------------------------------------

    def _verdict(self, equal: bool, rule: str, reason: str, gold: str, candidate: str,
                 allow_decimal: bool, **extra: object) -> Verdict:
        return Verdict(equal=equal, rule=rule, reason=reason, gold=gold, candidate=candidate,
                       allow_decimal=allow_decimal, checker_version=self.version,
                       **extra)  # type: ignore[arg-type]

    def _decide(self, gold: str, candidate: str | None, allow_decimal: bool,
                printed: bool = False) -> Verdict | _Plan:
        """A verdict from the text rules, or what the symbolic step must still do."""
        if candidate is None or not candidate.strip():
            return self._verdict(False, "empty", "there is no candidate answer",
                                 gold[:200], "", allow_decimal)
        long_forms = _long_forms(gold, candidate)
        if long_forms is None:
            same = gold.strip() == candidate.strip()
            return self._verdict(
                same, "too_long",
                f"an answer longer than {MAX_ANSWER_CHARS} characters (other than an integer "
                f"of up to {MAX_INTEGER_DIGITS:,} digits) is compared as text only: "
                f"{'identical' if same else 'they differ'}",
                gold[:200], candidate[:200], allow_decimal, failed=not same)
        if printed:
            candidate = _printed_answer(candidate)
            if _IMAGE_SET.search(candidate):
                return self._verdict(
                    False, "unread", "a printed ImageSet (a family of solutions over the "
                    "integers, as solveset prints them) is not compared with an answer: no "
                    "rule reads a family as a set yet", gold[:200], candidate[:200],
                    allow_decimal, failed=True)
        try:
            gold_forms = long_forms[0] or normalize_answer(gold)
            candidate_forms = long_forms[1] or normalize_answer(candidate, candidate=True,
                                                                printed=printed)
        except Exception as exc:
            return self._verdict(False, "error", f"normalisation failed: {type(exc).__name__}",
                                 gold[:200], candidate[:200], allow_decimal, failed=True)
        agreements = self._agreements(candidate_forms, gold_forms, allow_decimal)
        if isinstance(agreements, Verdict):
            return agreements
        first: Verdict | None = None
        pending: list[_Pending] = []
        for gold_form in gold_forms:
            for candidate_form in candidate_forms:
                decided = self._decide_forms(gold_form, candidate_form, allow_decimal)
                if isinstance(decided, Verdict):
                    if decided.equal:
                        return _Plan(agreements, (), decided) if agreements else decided
                    first = first or decided
                else:
                    pending.append(decided)
        if pending:
            return _Plan(agreements, tuple(pending))
        assert first is not None
        return first

    def _agreements(self, candidate_forms: list[Normalized], gold_forms: list[Normalized],
                    allow_decimal: bool) -> Verdict | tuple[_Pending, ...]:
        """A candidate that states alternatives (`\\frac{1}{3} \\approx 0.33`) counts only if
        they state one value: a verdict when the text rules find they do not, else the pairs
        of alternatives the symbolic step must confirm (none when the text rules could)."""
        if len(candidate_forms) < 2:
            return ()
        first, *others = candidate_forms
        pending: list[_Pending] = []
        for other in others:
            values = plain_number(first.latex), plain_number(other.latex)
            if values[0] is None or values[1] is None:
                pending.append(_Pending(first, other))
            elif not approximates(values[0], literal_places(first.latex), values[1],
                                  literal_places(other.latex)):
                return self._verdict(
                    False, "hedge", f"the answer hedges between values that differ: "
                                    f"{_show(first)} and {_show(other)}",
                    " | ".join(_show(form) for form in gold_forms),
                    " ≈ ".join(_show(form) for form in candidate_forms), allow_decimal)
        return tuple(pending)

    def _decide_forms(self, gold: Normalized, candidate: Normalized,
                      allow_decimal: bool) -> Verdict | _Pending:
        shown_gold, shown_candidate = _show(gold), _show(candidate)

        def verdict(equal: bool, rule: str, reason: str) -> Verdict:
            return self._verdict(equal, rule, reason, shown_gold, shown_candidate, allow_decimal)

        # Before the letters: a letter with its value can be hedged too (`(B) 12 \text{ (or C)}`).
        if candidate.hedge is not None:
            return verdict(False, "hedge", f"the answer is hedged ({candidate.hedge.strip()!r}): "
                                           "it names another value")
        if gold.choices is not None or candidate.choices is not None:
            equal = gold.choices == candidate.choices
            if equal and gold.labelled and candidate.labelled:  # the values must agree too
                return self._decide_forms(_unlabelled(gold), _unlabelled(candidate),
                                          allow_decimal)
            # A letter with its value against a value alone: the values decide.
            if gold.choices is None and candidate.labelled:
                return self._decide_forms(gold, _unlabelled(candidate), allow_decimal)
            if candidate.choices is None and gold.labelled:
                return self._decide_forms(_unlabelled(gold), candidate, allow_decimal)
            if gold.choices is None or candidate.choices is None:
                return verdict(False, "choices", "one answer is a set of choice letters and "
                                                 "the other is not")
            return verdict(equal, "choices",
                           "the same choice letters" if equal else "different choice letters")
        if gold.words is not None or candidate.words is not None:
            gold_words = gold.words if gold.words is not None else gold.plain
            candidate_words = candidate.words if candidate.words is not None \
                else candidate.plain
            equal = gold_words == candidate_words
            return verdict(equal, "text", "the same words" if equal else "different words")
        if gold.unit and candidate.unit and gold.unit != candidate.unit:
            return verdict(False, "unit", f"different units: {gold.unit} vs {candidate.unit}")
        if gold.meridiem and candidate.meridiem and gold.meridiem != candidate.meridiem:
            return verdict(False, "time", f"different times of day: {gold.meridiem} vs "
                                          f"{candidate.meridiem}")
        if gold.meridiem or candidate.meridiem or gold.clock is not None \
                or candidate.clock is not None:
            times = _time_of_day(gold), _time_of_day(candidate)
            if times[0] is not None and times[1] is not None:
                same = _same_time(gold, candidate, times[0], times[1])
                return verdict(same, "time", "the same time of day" if same
                               else "different times of day")
        if gold.variable and candidate.variable and gold.variable != candidate.variable:
            return verdict(False, "variable", f"different variables: {gold.variable} = ... vs "
                                              f"{candidate.variable} = ...")
        if gold.numeral is not None or candidate.numeral is not None:
            return verdict(*_compare_numerals(gold, candidate))
        if gold.key == candidate.key:
            return verdict(True, "identical", "the same after normalisation")
        # A decimal comma is read in the candidate only: a gold `-2,1` or `1,3` is two values.
        gold_number, candidate_number = plain_number(gold.latex), _number(candidate, gold)
        if gold_number is not None and candidate_number is not None:
            if gold_number == candidate_number:
                return verdict(True, "number", "the same number")
            if states_float(gold_number, candidate.latex) or \
                    states_float(candidate_number, gold.latex):
                return verdict(True, "float", f"a decimal of {FLOAT_DIGITS} significant digits or "
                                              "more states the exact value (a float's print)")
            if allow_decimal:
                agrees = decimal_agrees(gold_number, decimal_places(gold.latex),
                                        candidate_number, decimal_places(candidate.latex),
                                        significant_digits(candidate.latex))
                return verdict(agrees, "decimal",
                               "decimals allowed: " + ("agree to the decimal's digits"
                                                       if agrees else "do not agree"))
            return verdict(False, "number", "different numbers")
        gold_list, candidate_list = number_list(gold.latex), number_list(candidate.latex)
        if gold_list is not None and candidate_list is not None:
            decided = _compare_lists(gold_list, candidate_list)
            if decided[0] or not allow_decimal:  # with decimals allowed, Math-Verify rounds
                return verdict(*decided)
        return _Pending(gold, candidate)

    def _symbolic(self, plan: _Plan, allow_decimal: bool) -> Verdict:
        for agreement in plan.agreements:
            verdict = self._compare(agreement, allow_decimal, agree=True)
            if not verdict.equal:
                reason = ("the answer hedges between values that differ: "
                          f"{_show(agreement.gold)} and {_show(agreement.candidate)}")
                if verdict.failed:
                    reason = f"the answer's alternatives could not be compared ({verdict.reason})"
                return verdict.model_copy(update={"rule": "hedge", "reason": reason})
        if plan.decided is not None:
            return plan.decided
        first: Verdict | None = None
        for pair in plan.pairs:
            verdict = self._compare(pair, allow_decimal)
            if verdict.equal:
                return verdict
            first = first or verdict
        assert first is not None
        return first

    def _compare(self, pair: _Pending, allow_decimal: bool, *, agree: bool = False) -> Verdict:
        with self._ids_lock:
            request_id = next(self._ids)
        request = CompareRequest(id=request_id, gold=pair.gold.latex, candidate=pair.candidate.latex,
                                 allow_decimal=allow_decimal, agree=agree,
                                 soft_timeout_s=self.timeout_s * _SOFT_SHARE)
        outcome: CompareReply | Failure
        if self.in_process and threading.current_thread() is threading.main_thread():
            try:
                outcome = run_here(request)
            except ImportError as exc:
                raise CheckerUnavailableError(
                    f"the answer checker's libraries do not import ({exc})",
                    fix="install them: pip install 'math-verify[antlr4_13_2]'") from None
        else:
            outcome = self._pool.compare(request, max(self.timeout_s * _SOFT_SHARE,
                                                      self.timeout_s - _KILL_MARGIN_S))
        return self._from_outcome(outcome, pair, allow_decimal)

    def _from_outcome(self, outcome: CompareReply | Failure, pair: _Pending,
                      allow_decimal: bool) -> Verdict:
        shown_gold, shown_candidate = _show(pair.gold), _show(pair.candidate)
        if isinstance(outcome, Failure):
            return self._verdict(False, outcome.rule, outcome.reason, shown_gold,
                                 shown_candidate, allow_decimal, failed=True)
        failed = outcome.rule in ("timeout", "error", "unparsed")
        return self._verdict(outcome.equal, outcome.rule, outcome.reason, shown_gold,
                             shown_candidate, allow_decimal, failed=failed,
                             gold_parsed=outcome.gold_parsed,
                             candidate_parsed=outcome.candidate_parsed)


_WORDS = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")
# solveset's periodic solutions: `ImageSet(Lambda(_n, 2*_n*pi + pi/2), Integers)`. Read as
# text they parse as a product of unknowns, or not at all: refused with the reason instead.
_IMAGE_SET = re.compile(r"\bImageSet\(")


def _printed_answer(candidate: str) -> str:
    """A program's printed output as its answer: a value Python or sympy printed as it
    is; a sentence the program printed ("The answer is 5") read as a whole output is."""
    if len(candidate) > MAX_ANSWER_CHARS or not _WORDS.search(candidate) \
            or printed_latex(candidate) is not None:
        return candidate
    return read_answer(candidate) or candidate


def _unlabelled(form: Normalized) -> Normalized:
    """The value of a choice letter written with it (`\\text{(B) } 12` -> `12`)."""
    return replace(form, choices=None, labelled=False)


def _marked(verdict: Verdict, printed: bool) -> Verdict:
    return verdict.model_copy(update={"printed": True}) if printed else verdict


def _flags(name: str, value: bool | Sequence[bool], count: int) -> list[bool]:
    flags = [value] * count if isinstance(value, bool) else list(value)
    if len(flags) != count:
        raise ValueError(f"{name} must be one flag or one per pair")
    return flags


_LONG_INTEGER = re.compile(r"\s*(-?\d+)\s*")


def _long_forms(gold: str, candidate: str) -> tuple[list[Normalized] | None,
                                                    list[Normalized] | None] | None:
    """Answers over `MAX_ANSWER_CHARS`: an integer written out (up to `MAX_INTEGER_DIGITS`
    digits, as a program prints `10**100000`) becomes its form directly; None when a long
    answer is anything else (then only the text is compared). (None, None) when neither
    answer is long."""
    forms: list[list[Normalized] | None] = []
    for text in (gold, candidate):
        if len(text) <= MAX_ANSWER_CHARS:
            forms.append(None)
            continue
        match = _LONG_INTEGER.fullmatch(text) if len(text) <= MAX_INTEGER_DIGITS + 100 else None
        if match is None:
            return None
        digits = match.group(1)
        forms.append([Normalized(latex=digits, key=digits)])
    return forms[0], forms[1]


def _number(form: Normalized, other: Normalized) -> Fraction | None:
    """A plain candidate number's value; one written with a decimal comma (`1000,99`) counts
    as one only against a gold written with a point, which shows that the comma is one."""
    value = plain_number(form.latex)
    if value is not None or "." not in other.latex or plain_number(other.latex) is None:
        return value
    return decimal_comma(form.latex)


def _compare_numerals(gold: Normalized, candidate: Normalized) -> tuple[bool, str, str]:
    """Numerals with a base subscript (`1011_2`): equal in value to a numeral of any base,
    or to the same digits written without a base (the problem named it); anything else is
    not an answer in that base."""
    def value(form: Normalized, base: int) -> Fraction | None:
        if form.numeral is not None:
            return numeral_value(*form.numeral)
        return numeral_value(form.latex.strip(), base)

    base = (gold.numeral or candidate.numeral or ("", 10))[1]
    gold_value, candidate_value = value(gold, base), value(candidate, base)
    if gold_value is None or candidate_value is None:
        return False, "numeral", f"one answer is a base-{base} numeral and the other is not"
    equal = gold_value == candidate_value
    return equal, "numeral", ("the same value" if equal else "different values") + \
        f" as numerals (base {base})"


_BARE, _BRACES, _PARENTHESES = "", "\\{\\}", "()"


def _compare_lists(gold: tuple[str, list[Fraction]],
                   candidate: tuple[str, list[Fraction]]) -> tuple[bool, str, str]:
    """Lists of plain numbers. `1, 2` (MATH's "all solutions") and `\\{1, 2\\}` are sets;
    `(1, 2)` is an ordered pair (or an open interval) and `[1, 2)` an interval, whose order
    and brackets matter. A bare list read against a pair is read in order."""
    (gold_brackets, gold_values), (candidate_brackets, candidate_values) = gold, candidate

    def as_sets() -> tuple[bool, str, str]:
        equal = set(gold_values) == set(candidate_values)
        return equal, "numbers", "the same set of numbers" if equal else "different sets"

    def in_order() -> tuple[bool, str, str]:
        equal = gold_values == candidate_values
        return equal, "numbers", ("the same numbers in the same order" if equal
                                  else "different numbers or order")

    set_like = (_BARE, _BRACES)
    if gold_brackets in set_like and candidate_brackets in set_like:
        return as_sets()
    if gold_brackets == _BARE and candidate_brackets == _PARENTHESES:
        return as_sets()  # the solutions, written in parentheses
    if candidate_brackets == _BARE and gold_brackets == _PARENTHESES:
        return in_order()  # a pair, written without its parentheses
    if gold_brackets != candidate_brackets:
        return False, "numbers", (f"different kinds: {gold_brackets or 'a list'} vs "
                                  f"{candidate_brackets or 'a list'} (sets, tuples and "
                                  "open or closed intervals differ)")
    return in_order()


def _time_of_day(form: Normalized) -> int | None:
    """Seconds after midnight on a 12- or 24-hour clock, from `9` or `9:30` (+ a.m./p.m.)."""
    if form.clock is not None:
        return form.clock
    number = plain_number(form.latex)
    if number is None or number.denominator != 1 or not 0 <= number <= 24:
        return None
    return int(number) * 3600


def _same_time(gold: Normalized, candidate: Normalized, gold_s: int, candidate_s: int) -> bool:
    def absolute(seconds: int, meridiem: str | None) -> int:
        hours = seconds // 3600
        if meridiem == "pm" and hours < 12:
            return seconds + 12 * 3600
        if meridiem == "am" and hours == 12:
            return seconds - 12 * 3600
        return seconds

    if gold.meridiem and candidate.meridiem:
        return absolute(gold_s, gold.meridiem) == absolute(candidate_s, candidate.meridiem)
    # One side says a.m./p.m., the other not: compare on a 12-hour dial.
    half_day = 12 * 3600
    return absolute(gold_s, gold.meridiem) % half_day == \
        absolute(candidate_s, candidate.meridiem) % half_day


# -- module-level convenience: one shared Checker ------------------------------------------------

_shared: Checker | None = None
_shared_lock = threading.Lock()


def _default_checker() -> Checker:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Checker()
            atexit.register(_shared.close)
        return _shared


def check(gold: str, candidate: str | None, *, allow_decimal: bool = False,
          printed: bool = False) -> Verdict:
    """The verdict on `candidate` against `gold`, with the reason (see `Verdict`);
    `printed=True` when a program printed the candidate (see `Checker.check`)."""
    return _default_checker().check(gold, candidate, allow_decimal=allow_decimal,
                                    printed=printed)


def is_equivalent(gold: str, candidate: str | None, *, allow_decimal: bool = False,
                  printed: bool = False) -> bool:
    """Whether `candidate` is the same answer as `gold`. Never raises for any answer text.

    `allow_decimal=True` when the problem asked for a decimal or rounded answer: then a
    decimal that states the exact value to its own digits counts (`0.333` for 1/3).
    `printed=True` when a program printed the candidate (`[2, 3]` is then the solutions)."""
    return check(gold, candidate, allow_decimal=allow_decimal, printed=printed).equal


def check_many(pairs: Iterable[tuple[str, str | None]], *,
               allow_decimal: bool | Sequence[bool] = False,
               printed: bool | Sequence[bool] = False) -> list[Verdict]:
    """Verdicts for many (gold, candidate) pairs, in order, using all checker workers."""
    return _default_checker().check_many(pairs, allow_decimal=allow_decimal, printed=printed)
