"""The checker worker: a long-lived process that compares normalised answers with Math-Verify.

Started by `runner.math.pool` as `python -m runner.math.checker_worker MEMORY_MB`. It reads
one `CompareRequest` per line on stdin and writes one `CompareReply` per line on a private
copy of stdout (file descriptor 1 itself is pointed at stderr, so a library that prints
cannot corrupt the channel).

Its own limits are a courtesy, not the guarantee: an interval timer raises inside Python
code at the request's soft deadline, and an address-space limit turns runaway allocation
(`10^{10^{10}}`) into a MemoryError. What a long C call or a crash escapes, the host
handles: it kills the worker at the hard deadline and starts another.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import select
import signal
import sys
from collections.abc import Iterator
from fractions import Fraction
from functools import lru_cache
from typing import Any, TextIO

from .normalize import (
    decimal_agrees,
    decimal_places,
    exact_decimals,
    significant_digits,
)
from .wire import MAX_PARSED_CHARS, CompareReply, CompareRequest, WorkerReady


class SoftTimeout(BaseException):
    """Raised by the interval timer. A BaseException, so that Math-Verify's broad
    `except Exception` handlers cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise SoftTimeout


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in ("math-verify", "latex2sympy2_extended", "sympy", "antlr4-python3-runtime"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def _excerpt(value: object) -> str:
    try:
        text = str(value)
    except Exception:
        return "<unprintable>"
    return text if len(text) <= MAX_PARSED_CHARS else text[:MAX_PARSED_CHARS - 3] + "..."


@lru_cache(maxsize=2048)
def _parse(latex: str) -> object | None:
    """The sympy form Math-Verify reads from `latex`, or None (cached: golds repeat)."""
    from math_verify import LatexExtractionConfig, parse
    from sympy import Basic, MatrixBase

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


def compare(request: CompareRequest) -> CompareReply:
    """Math-Verify's verdict on two normalised answers, with the decimal rules on top."""
    from math_verify import verify

    gold_text, candidate_text = request.gold, request.candidate
    if not request.allow_decimal:
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
    if request.allow_decimal:
        decided = _decimal_rule(request, gold, candidate)
        if decided is not None:
            return decided
    equal = verify(gold, candidate, timeout_seconds=None, float_rounding=6, strict=True)
    return CompareReply(
        id=request.id, equal=bool(equal), rule="symbolic",
        reason="Math-Verify finds them " + ("equal" if equal else "different"),
        gold_parsed=_excerpt(gold), candidate_parsed=_excerpt(candidate))


def _handle(line: str) -> CompareReply:
    request = CompareRequest.model_validate_json(line)
    signal.setitimer(signal.ITIMER_REAL, request.soft_timeout_s)
    try:
        return compare(request)
    except SoftTimeout:
        return CompareReply(id=request.id, equal=False, rule="timeout", retire=True,
                            reason=f"the symbolic check took longer than "
                                   f"{request.soft_timeout_s:g} s")
    except MemoryError:
        return CompareReply(id=request.id, equal=False, rule="error", retire=True,
                            reason="the symbolic check ran out of memory")
    except RecursionError:
        return CompareReply(id=request.id, equal=False, rule="error", retire=True,
                            reason="the answer is nested too deeply to check")
    except Exception as exc:
        return CompareReply(id=request.id, equal=False, rule="error",
                            reason=f"the symbolic check failed: {type(exc).__name__}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


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


def _warm(form: str) -> None:
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        with contextlib.suppress(SoftTimeout, Exception):  # warming is best effort
            _parse(form)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _lines(warm_up: list[str]) -> Iterator[str]:
    """Request lines from stdin; while none is waiting, warm the parser with `warm_up`."""
    pending = bytearray()
    while True:
        newline = pending.find(b"\n")
        if newline >= 0:
            line = bytes(pending[:newline])
            del pending[:newline + 1]
            yield line.decode("utf-8", errors="replace")
            continue
        if warm_up and not select.select([0], [], [], 0)[0]:
            _warm(warm_up.pop())
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return
        pending += chunk


def _private_channel() -> TextIO:
    """A copy of stdout for replies; fd 1 then points at stderr."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def main() -> None:
    memory_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if memory_mb > 0:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the host to handle
    channel = _private_channel()
    logging.disable(logging.CRITICAL)  # Math-Verify logs every timeout and parse failure
    # Warm the parser and the comparison paths, so the first real request is fast.
    compare(CompareRequest(id=0, gold="\\frac{1}{2}", candidate="0.5", soft_timeout_s=30))
    channel.write(WorkerReady(ready=True, versions=_versions()).model_dump_json() + "\n")
    warm_up = list(reversed(WARM_UP))
    for line in _lines(warm_up):
        try:
            reply = _handle(line)
        except ValueError as exc:  # a malformed request: the host's bug, reported as such
            reply = CompareReply(id=-1, equal=False, rule="error",
                                 reason=f"bad request: {str(exc)[:200]}")
        channel.write(json.dumps(reply.model_dump(), ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
