"""Answer checker speed: pairs per second in batch mode, and the slowest single pair.

Targets (issue: math agents):
- batch mode (`Checker.check_many`, as `runner math check --pairs` uses it) checks at least
  200 pairs per second;
- no single pair takes more than its time limit, hostile answers included.

The batch is a seeded mix of the answer shapes of MATH (fractions, radicals, pi, polynomials,
tuples, intervals, sets, complex numbers, matrices, units, choices), written equivalently and
wrongly; most pairs need the symbolic step. The baseline, measured in the same run, is the
same pairs through Math-Verify alone (parse + verify) in this process, one after another.

Run: `make bench` (or `.venv/bin/python bench/bench_checker.py [--pairs N] [--workers N]`).
Prints the numbers and exits non-zero if a target is missed.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from collections import Counter

Pair = tuple[str, str]


def _pairs(count: int, seed: int = 7, *, symbolic_only: bool = False) -> list[Pair]:
    """`count` pairs; with `symbolic_only`, only shapes that the text rules cannot decide."""
    rng = random.Random(seed)
    out: list[Pair] = []
    while len(out) < count:
        a, b, c = rng.randint(2, 60), rng.randint(2, 60), rng.randint(2, 9)
        shapes: list[Pair] = [
            (f"\\frac{{{a}}}{{{b}}}", f"\\dfrac{{{2 * a}}}{{{2 * b}}}"),
            (f"\\frac{{{a}}}{{{b}}}", f"\\frac{{{a + 1}}}{{{b}}}"),
            (f"{c}\\sqrt{{{b}}}", f"\\sqrt{{{c * c * b}}}"),
            (f"{c}\\sqrt{{{b}}}", f"{c + 1}\\sqrt{{{b}}}"),
            (f"\\frac{{{a}\\pi}}{{{b}}}", f"\\frac{{{a}}}{{{b}}}\\pi"),
            (f"(x+{a})^2", f"x^2+{2 * a}x+{a * a}"),
            (f"(x+{a})^2", f"x^2+{a}x+{a * a}"),
            (f"\\left( {a}, {b} \\right)", f"({a},{b})"),
            (f"({a},{b})", f"({b},{a + b})"),
            (f"[{a}, {a + b})", f"[{a},{a + b}]"),
            (f"{a}, {b}, {c}", f"{c}, {a}, {b}"),
            (f"{a} - {c}i", f"-{c}i + {a}"),
            (f"\\begin{{pmatrix}} {a} \\\\ {b} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}} {a} \\\\ {b + 1} \\end{{pmatrix}}"),
            (f"{a * 100 + b}\\text{{ feet}}", f"{a * 100 + b} inches"),
            (f"{a},\\!{100 + b}", f"{a}{100 + b}"),
            ("\\text{A,C,F}", "C, A, F"),
            (f"\\frac{{1}}{{{c}}}", f"{1 / c:.7f}"),
            (f"{a}", f"{a}"),
        ]
        symbolic = shapes[2:7] + shapes[11:13]
        out.append(rng.choice(symbolic if symbolic_only else shapes))
    return out


HOSTILE = ["10^{10^{10}}", "2^{2^{2^{2^{2^{2}}}}}", "(10^{8})!", "{" * 1990 + "1" + "}" * 1990,
           "\\sqrt{" * 500 + "2" + "}" * 500, "x^" * 1999 + "2"]


def _math_verify_alone(pairs: list[Pair]) -> float:
    from math_verify import parse, verify

    logging.disable(logging.CRITICAL)
    started = time.perf_counter()
    for gold, candidate in pairs:
        verify(parse(f"${gold}$", parsing_timeout=None), parse(f"${candidate}$",
                                                               parsing_timeout=None),
               timeout_seconds=None)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    from runner.math import Checker

    pairs = _pairs(args.pairs)
    missed = 0
    with Checker(workers=args.workers, timeout_s=args.timeout) as checker:
        checker.check("x+1", "1+x")  # workers up
        time.sleep(1.0)  # and warmed, as a long evaluation's workers are
        started = time.perf_counter()
        verdicts = checker.check_many(pairs)
        batch_s = time.perf_counter() - started
        rules = Counter(verdict.rule for verdict in verdicts)
        # A second, fresh batch of only what needs Math-Verify: the worst case for the pool.
        hard_pairs = _pairs(args.pairs // 2, seed=8, symbolic_only=True)
        started = time.perf_counter()
        hard_rules = Counter(verdict.rule for verdict in checker.check_many(hard_pairs))
        hard_s = time.perf_counter() - started

        latencies: list[tuple[float, str]] = []
        for gold, candidate in pairs[:300] + [("2", text) for text in HOSTILE]:
            begun = time.perf_counter()
            checker.check(gold, candidate)
            latencies.append((time.perf_counter() - begun, candidate[:30]))
        replaced = checker._pool.replacements

    baseline_pairs = pairs[:400]
    baseline_s = _math_verify_alone(baseline_pairs)

    rate = len(pairs) / batch_s
    baseline_rate = len(baseline_pairs) / baseline_s
    symbolic = rules.get("symbolic", 0) + rules.get("timeout", 0)
    slowest, which = max(latencies)
    print(f"batch: {len(pairs)} pairs in {batch_s:.2f} s = {rate:.0f} pairs/s "
          f"({checker.workers} workers; {symbolic / len(pairs):.0%} needed the symbolic step; "
          f"rules: {dict(rules.most_common())})")
    print(f"symbolic-only batch: {len(hard_pairs)} pairs in {hard_s:.2f} s = "
          f"{len(hard_pairs) / hard_s:.0f} pairs/s (rules: {dict(hard_rules.most_common())})")
    print(f"baseline: Math-Verify alone, in-process, sequential: {baseline_rate:.0f} pairs/s; "
          f"ratio checker/baseline = {rate / baseline_rate:.2f}")
    verdict = "OK" if rate >= 200 else "MISSED"
    missed += rate < 200
    print(f"target >= 200 pairs/s: {rate:.0f} {verdict}")
    ratio = slowest / args.timeout
    verdict = "OK" if ratio <= 1.0 else "MISSED"
    missed += ratio > 1.0
    print(f"slowest single pair: {slowest * 1000:.0f} ms ({which!r}) vs its limit "
          f"{args.timeout * 1000:.0f} ms = {ratio:.2f} of the limit (target <= 1.00) {verdict}; "
          f"workers replaced: {replaced}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
