"""Math-Verify's own test suite (its 276 gold/prediction pairs, tests/data/math_verify) through
this project's pipeline: the answer read from each whole text (`extract_answer(...,
fallback=True)`), then `check`. Every pair gets the verdict Math-Verify's tests expect,
except where the two follow different conventions (`CONVENTIONS`, each with its reason;
the README lists them). Then the score of the pipeline beside Math-Verify's own with its
defaults (`verify(parse(gold), parse(prediction))`), measured here on the same pairs."""

from __future__ import annotations

import json
import logging
from functools import cache
from pathlib import Path

import pytest

from runner.math import Checker, Verdict, extract_answer

PAIRS = [json.loads(line) for line in
         (Path(__file__).parent / "data" / "math_verify" / "pairs.jsonl").read_text().splitlines()]

_HEDGE = ("an answer that hedges between values that differ (`a \\approx b`) counts for neither; "
          "Math-Verify reads its last equation")
_DECIMALS = ("a decimal is the exact value it writes unless the problem asks for a decimal; the "
             "upstream test asks Math-Verify to round to {} places")
_CHAIN = ("an `=` chain is an answer only when its pieces agree (issue 32: `6=5` is no answer "
          "for 5); Math-Verify reads its last piece")
# Pairs where this project's verdict is the opposite of the upstream test's, and why.
CONVENTIONS = {
    "test_all:411": _HEDGE + " (`1/3 \\approx 11`)",
    "test_all:429": _HEDGE + " (`1/3 \\approx 1.3`)",
    "test_yujianll:28": "`1 + 1/e` is not `1 - 1/e`: this project reads `\\mathrm{e}` as Euler's "
                        "number; Math-Verify cannot read it and finds the two equal",
    "test_all:592": _DECIMALS.format(2),
    "test_all:611": _DECIMALS.format(2),
    "test_all:564": _DECIMALS.format(4),
    "test_all:913": "the same pair as test_all:907, which expects the opposite; the upstream test "
                    "turns allow_set_relation_comp off, this project compares a gold interval "
                    "with the equivalent inequality both ways (issue 32)",
    "test_strict:8#2": "the same pair as test_strict:8, which expects the opposite; the upstream "
                       "test turns strict comparison off, this project keeps variables apart",
    "test_all:138": _CHAIN + " (`\\frac{1}{2} \\$ = \\frac{10}{9}`)",
    "test_all:394": _CHAIN + " (`x = 5+5+1 = 7 = 11`)",
    "test_all:405": _CHAIN + " (`x = 5+5+1 = 7 = 11`)",
    "test_all:467": _CHAIN + " (`z = 3+3 = 2`)",
    "test_all:468": _CHAIN + " (`z = 3+3 = 2`)",
    "test_all:71": "a gold list is never a decimal (issue 32: MATH's golds `-2,1` and `1,3` are two "
                   "values); the upstream test reads the gold `1,22` with a decimal comma",
    "test_numina_cases:121": "the gold's last box is cut off (no closing brace): this project reads "
                             "a cut-off last box as no answer, Math-Verify reads the rest of the text",
}


@cache
def _verdicts() -> dict[str, Verdict]:
    with Checker(workers=2, timeout_s=30) as checker:
        pairs = [(extract_answer(pair["gold"], fallback=True) or pair["gold"],
                  extract_answer(pair["prediction"], fallback=True)) for pair in PAIRS]
        return {pair["id"]: verdict for pair, verdict in zip(PAIRS, checker.check_many(pairs),
                                                            strict=True)}


def test_the_data_is_the_whole_suite():
    assert len(PAIRS) == 276
    assert len({pair["id"] for pair in PAIRS}) == 276
    assert set(CONVENTIONS) <= {pair["id"] for pair in PAIRS}


@pytest.mark.parametrize("pair", PAIRS, ids=[pair["id"] for pair in PAIRS])
def test_pair(pair):
    verdict = _verdicts()[pair["id"]]
    expected = bool(pair["expected"])
    if pair["id"] in CONVENTIONS:
        expected = not expected
    assert verdict.equal is expected, (verdict.rule, verdict.reason, verdict.gold, verdict.candidate)
    assert not verdict.failed or not verdict.equal


def _math_verify_defaults() -> list[bool]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    return [bool(verify(parse(pair["gold"]), parse(pair["prediction"]))) for pair in PAIRS]


def _score(verdicts: list[bool], labels: list[bool]) -> tuple[int, int]:
    """(right, false accepts)."""
    right = sum(verdict == label for verdict, label in zip(verdicts, labels, strict=True))
    false_accepts = sum(verdict and not label for verdict, label in zip(verdicts, labels, strict=True))
    return right, false_accepts


def test_the_pipeline_against_math_verify_defaults():
    ours = [_verdicts()[pair["id"]].equal for pair in PAIRS]
    theirs = _math_verify_defaults()
    labels = [bool(pair["expected"]) for pair in PAIRS]
    ours_right, ours_false = _score(ours, labels)
    _, theirs_false = _score(theirs, labels)
    # As labelled upstream, with math-verify 0.9.0: the pipeline 261 right, Math-Verify's
    # defaults 269 right and 2 false accepts. (267 before issue 32: the six pairs it turned
    # are chains whose pieces disagree and a gold list read as a decimal, which its rules
    # name false accepts.) The pipeline's one "false accept" by those labels is
    # test_all:913, the very pair test_all:907 expects equal (`x \in [-2,7]` and
    # `-2 \le x \le 7`): one of the two is wrong whatever a checker says.
    false_accepts = [pair["id"] for pair, verdict, label in zip(PAIRS, ours, labels, strict=True)
                     if verdict and not label]
    assert false_accepts == ["test_all:913"] and ours_false <= theirs_false
    assert ours_right == len(PAIRS) - len(CONVENTIONS)
    # The labels that are wrong by either reading: an answer hedging between values that
    # disagree, and 1 + 1/e for 1 - 1/e. Counted as not equal, the pipeline is ahead.
    # So are the chains whose pieces disagree (`x = 5+5+1 = 7 = 11`, `z = 3+3 = 2`).
    wrong = {"test_all:411", "test_all:429", "test_yujianll:28", "test_all:138", "test_all:394",
             "test_all:405", "test_all:467", "test_all:468"}
    fixed = [False if pair["id"] in wrong else label for pair, label in zip(PAIRS, labels, strict=True)]
    assert _score(ours, fixed)[0] >= _score(theirs, fixed)[0]
