"""The final answer of a whole model output, wherever the model put it.

`read_answer(text)` is what `extract_answer(text, fallback=True)` returns: the answer of a
standalone output (an evaluation of any model, a pasted solution, a gold solution), read
in this order:

1. **Boxes and final statements.** The last box, together with the boxes just before it
   when the answer is split over several (`\\boxed{1}, \\boxed{2}` or `\\boxed{(2, 2)}
   \\text{ and } \\boxed{(6, 2)}` read `1, 2` and `(2, 2), (6, 2)`): an earlier box joins
   when less than 10 characters separate it from the next, or less than 70 with "and",
   "or", `,` or `;` between and a different content (latex2sympy2_extended's rule, which
   Math-Verify uses); a repeated box counts once. Or a final-answer statement ("The final
   answer is $x$", "Final Answer: The largest $n$ is 34."), when it comes after the last
   box. A last box that is cut off or empty means no answer, as in `extract_answer`.
2. **Answer statements**: the last "the answer is X", "Answer: X", "Answer $X$" or
   GSM8K's "#### X" whose X is there.
3. **The last piece of mathematics**: an output that is an answer by itself (`28 percent`,
   `$\\frac{1}{3}$ meters`, `x \\ge 5`) is read whole; otherwise the last math span
   (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`) or the last number (`1,000.99`, `2/3`, `100%`,
   `3 hours`) in the text, whichever ends later.

The text's last word on the answer counts: a box called wrong (`\\boxed{6} is wrong`,
`(incorrect)`) is no answer, only what follows it is read; a later "the answer is X" after
a correction ("Wait, actually", "instead", "mistake") wins over an earlier box; a box after
a correction is not joined to the one before it ("first guess \\boxed{3}; the answer is
\\boxed{4}" reads 4); "the answer is not X" with no answer after it, and an answer read
from prose whose sentence hedges ("5 (or possibly 6)", "either 5 or 6"), give none.

Inline math (`$...$`, `\\(...\\)`) stays on one line, as LaTeX's does; a span broken over
lines is not mathematics and nothing in it is read. A number is read only where it starts
a word (`AZYUK2A` holds none). A MathChat reply is read by the last box alone
(`extract_answer(text)`), never by these rules.

Everything is linear in the text's length: outputs are hostile and can be megabytes long.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Iterator
from itertools import islice
from typing import NamedTuple

from ..agent.boxed import BOX_COMMAND, TRAILING_PUNCTUATION, box_argument
from .normalize import unit_word

__all__ = ["read_answer"]


class _Found(NamedTuple):
    answer: str
    end: int  # where the answer's source ends in the text: the later one wins


# -- boxes -----------------------------------------------------------------------------------------

_BOX_SEPARATOR = re.compile(r"(?<![A-Za-z])(?:and|or)(?![A-Za-z])|[,;]")
_NEAR = 10  # characters between two boxes that join them whatever they are
# Words that make what follows a correction of what came before.
_CORRECTION = re.compile(r"(?<![A-Za-z])(?:answer|actually|wait|instead|correct(?:ion|ed)?|wrong"
                         r"|incorrect|mistake|guess|rather|sorry|oops|final)(?![A-Za-z])",
                         re.IGNORECASE)
# Words right after an answer that call it wrong: `\boxed{6} is wrong`, `\boxed{6} (incorrect)`.
_RETRACTED = re.compile(r"[ \t$.,:;]*\(?\s*(?:is|was)?\s*(?:not\s+(?:correct|right|the\s+answer)"
                        r"|(?:incorrect|wrong|false|a\s+mistake)(?![A-Za-z]))", re.IGNORECASE)
# A statement that the answer is not something: "The answer is not 5".
_NEGATED = re.compile(r"(?<![A-Za-z])answer\s+(?:is\s+not|isn't|is\s+never|cannot\s+be|can't\s+be"
                      r"|is\s+definitely\s+not)(?![A-Za-z])", re.IGNORECASE)
# Words in an answer's sentence that hedge it: "5 (or possibly 6)", "either 5 or 6".
_HEDGING = re.compile(r"(?<![A-Za-z])(?:possibly|maybe|perhaps|either|probably|unsure|not\s+sure)"
                      r"(?![A-Za-z])", re.IGNORECASE)
_FAR = 70  # ... or that join them when a separator is among them


def _box_group(text: str) -> _Found | None:
    """The last box and the boxes it continues (see the module docstring); None when there is
    no box, or the last one is cut off or empty. Each box is read only up to the next one,
    so the whole walk is linear."""
    commands = list(BOX_COMMAND.finditer(text))
    if not commands:
        return None
    last = box_argument(text, commands[-1].end())
    if last is None:
        return None
    contents, end = [last.content], last.end
    next_start = commands[-1].start()
    for command in reversed(commands[:-1]):
        box = box_argument(text, command.end(), next_start)
        if box is None:  # broken, or holding the later box
            break
        between = text[box.end:next_start]
        if _CORRECTION.search(between):
            break  # "first guess \boxed{3}; the answer is \boxed{4}": a correction, not a part
        if not (len(between) < _NEAR or (len(between) < _FAR and box.content != contents[-1]
                                         and _BOX_SEPARATOR.search(between))):
            break
        if box.content != contents[-1]:
            contents.append(box.content)
        next_start = command.start()
    return _Found(", ".join(reversed(contents)), end)


# -- statements ------------------------------------------------------------------------------------

_FINAL = re.compile(r"final\s+answer", re.IGNORECASE)
# "is" within the same line after "final answer": "Final Answer: The largest $n$ is 34."
_IS = re.compile(r"(?<![A-Za-z])is(?![A-Za-z])\s*:?", re.IGNORECASE)
_ANSWER = re.compile(r"(?<![A-Za-z])answer(?:\s+is|\s*=)?\s*:?|^[ \t]*####", re.IGNORECASE | re.MULTILINE)
_LEAD = re.compile(r"(?:[\s*_:\"“”']|\\\")*")
_STATEMENT_CHARS = 400  # how far a statement's answer may reach
_IS_WITHIN = 100
_MAX_STATEMENTS = 100  # statements tried from the last one back, at most


def _statement_answer(text: str, start: int, *, must_start: bool) -> _Found | None:
    """The answer a statement gives from `start` on: a math span, an answer-like text, or
    the last piece of mathematics in its sentence. With `must_start`, only an answer that
    starts right there (math, a number, a sign) counts ("To answer this, ..." gives none)."""
    lead = _LEAD.match(text, start)
    start = lead.end() if lead else start
    window = text[start:start + _STATEMENT_CHARS]
    span = _span_run(window, 0)
    if span is not None:
        return _Found(span.answer, start + span.end)
    if must_start and not _STARTS_ANSWER.match(window):
        return None
    sentence = _sentence(window)
    answer = _answer_like(sentence)
    if answer is not None:
        return _Found(answer, start + len(sentence))
    found = _last_math(sentence)
    return _Found(found.answer, start + found.end) if found else None


_STARTS_ANSWER = re.compile(r"[-+(\[{\\$\d.]")


def _final_statement(text: str) -> _Found | None:
    """The last "final answer" statement that gives an answer."""
    for match in islice(reversed(list(_FINAL.finditer(text))), _MAX_STATEMENTS):
        # "is" counts in the statement's own sentence ("Final Answer: Jane started 3 hours
        # ago. I hope it is correct." gives 3, not "correct")
        sentence_end = _SENTENCE_END.search(text, match.end(), match.end() + _IS_WITHIN)
        limit = sentence_end.start() if sentence_end else min(len(text), match.end() + _IS_WITHIN)
        verb = _IS.search(text, match.end(), limit)
        found = _statement_answer(text, verb.end() if verb else match.end(), must_start=False)
        if found is not None:
            return found
    return None


def _answer_statement(text: str) -> _Found | None:
    """The last "the answer is X", "Answer: X", "Answer $X$" or "#### X" with an X."""
    for match in islice(reversed(list(_ANSWER.finditer(text))), _MAX_STATEMENTS):
        found = _statement_answer(text, match.end(), must_start=True)
        if found is not None:
            return found
    return None


_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")


def _sentence(window: str) -> str:
    """The window up to the end of its sentence or line."""
    end = _SENTENCE_END.search(window)
    return (window[:end.start()] if end else window).strip().rstrip(TRAILING_PUNCTUATION).strip()


# -- mathematics in prose --------------------------------------------------------------------------

# Openers in the order they are tried at one position: display before inline.
_OPENERS = (("$$", "$$", True), ("\\[", "\\]", True), ("\\(", "\\)", False), ("$", "$", False))
_PERCENT = re.compile(r"\s*(?:\\?%|percent(?:age)?(?![A-Za-z])|pct(?![A-Za-z]))", re.IGNORECASE)
# A number where a word starts: `1,000.99`, `1000,99`, `.5`, `2/3`, `-7`, then `%` or a unit.
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.\\^])(-?(?:[1-9]\d{0,2}(?:,\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?|\.\d+)"
    r"(?:\s*/\s*\d+(?![.,]\d))?)")
_UNIT_AFTER = re.compile(r"[ \t]+([A-Za-z]+)(?:\^\{?[23]\}?)?(?![A-Za-z])")
# Unit words of two or three letters that are also common words are not read as units.
_SHORT_UNITS = frozenset({"cm", "mm", "km", "kg", "ml", "ft", "yd", "yds", "lb", "lbs", "oz",
                          "mph", "kph", "hrs", "hr"})


class _Span(NamedTuple):
    answer: str
    end: int


def _math_span_at(text: str, position: int) -> _Span | None:
    """The math span opening at `position` (content, and `%` after it), or None."""
    for opener, closer, display in _OPENERS:
        if not text.startswith(opener, position):
            continue
        body = position + len(opener)
        close = _closing(text, closer, body)
        if close < 0:
            return None
        content = text[body:close]
        if (not display and "\n" in content) or not content.strip():
            return None
        end = close + len(closer)
        percent = _PERCENT.match(text, end)
        if percent:
            return _Span(content.strip() + "\\%", percent.end())
        return _Span(content.strip(), end)
    return None


_JOIN = re.compile(r"\s*(?:,\s*(?:and|or)?|and|or)\s*", re.IGNORECASE)


def _span_run(text: str, position: int) -> _Span | None:
    """The math span at `position` and the spans joined to it by "and", "or" or commas
    (`$1$, $2$ and $3$` reads `1, 2, 3`), or None."""
    span = _math_span_at(text, position)
    if span is None:
        return None
    contents, end = [span.answer], span.end
    while True:
        joint = _JOIN.match(text, end)
        following = _math_span_at(text, joint.end()) if joint and joint.end() > end else None
        if following is None:
            return _Span(", ".join(contents), end)
        contents.append(following.answer)
        end = following.end


def _closing(text: str, closer: str, start: int) -> int:
    """Index of the unescaped `closer` after `start`, or -1 (`\\$` is a dollar sign)."""
    index = text.find(closer, start)
    while index > 0 and closer == "$" and text[index - 1] == "\\":
        index = text.find(closer, index + 1)
    return index


_OPENER = re.compile(r"\$\$|\\\[|\\\(|\$")


class _Closers:
    """Where each closer occurs, found once: scanning for a missing closer from every
    opener would be quadratic in the text's length."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.positions = {closer: [match.start() for match in re.finditer(re.escape(closer), text)]
                          for closer in ("$$", "\\]", "\\)", "$")}

    def after(self, closer: str, start: int) -> int:
        positions = self.positions[closer]
        index = bisect_left(positions, start)
        while index < len(positions):
            found = positions[index]
            if closer != "$" or self.text[found - 1:found] != "\\":
                return found
            index += 1
        return -1


def _math_spans(text: str) -> list[tuple[int, int, str | None]]:
    """(start, end, content) of the math spans in order, paired as LaTeX pairs them; content
    None for an inline span broken over lines (not mathematics: nothing in it is read).
    Linear in the text's length."""
    closers = _Closers(text)
    spans: list[tuple[int, int, str | None]] = []
    position = 0
    while True:
        match = _OPENER.search(text, position)
        if match is None:
            return spans
        start, opener = match.start(), match.group(0)
        before = text[start - 1:start]
        if opener == "$" and (before == "\\" or before.isdigit()):
            position = start + 1  # `\$` or `5$`: a dollar sign
            continue
        closer, display = next((c, d) for o, c, d in _OPENERS if o == opener)
        close = closers.after(closer, start + len(opener))
        if close < 0:
            position = start + len(opener)  # unpaired
            continue
        end = close + len(closer)
        content = text[start + len(opener):close]
        if (not display and "\n" in content) or not content.strip():
            spans.append((start, end, None))
        else:
            percent = _PERCENT.match(text, end)
            if percent:
                spans.append((start, percent.end(), content.strip() + "\\%"))
                end = percent.end()
            else:
                spans.append((start, end, content.strip()))
        position = end


def _last_number(text: str, start: int, end: int) -> _Found | None:
    last = None
    for match in _NUMBER.finditer(text, start, end):
        last = match
    if last is None:
        return None
    answer, stop = last.group(1), last.end()
    percent = _PERCENT.match(text, stop, end)
    if percent:
        return _Found(answer + "\\%", percent.end())
    unit = _UNIT_AFTER.match(text, stop, end)
    if unit and unit_word(unit.group(1)) and (len(unit.group(1)) >= 4
                                             or unit.group(1).lower() in _SHORT_UNITS):
        return _Found(f"{answer} {unit.group(0).strip()}", unit.end())
    return _Found(answer, stop)


def _last_math(text: str) -> _Found | None:
    """The last math span or number in `text`, whichever ends later (numbers are read only
    outside math spans)."""
    spans = _math_spans(text)
    best: _Found | None = None
    previous_end = 0
    run: list[str] = []  # contents of the spans joined to the last one so far
    for start, end, content in spans:
        number = _last_number(text, previous_end, start)
        if number is not None:
            best = number
        joined = bool(run) and number is None and _JOIN.fullmatch(text, previous_end, start) is not None
        if content is None:
            run = []
        else:
            run = [*run, content] if joined else [content]
            best = _Found(", ".join(run), end)
        previous_end = end
    number = _last_number(text, previous_end, len(text))
    return number if number is not None else best


_COMMAND = re.compile(r"\\[A-Za-z]+")
_ALPHANUMERIC = re.compile(r"[A-Za-z0-9]")
_WORD = re.compile(r"[A-Za-z]{2,}")
_MAX_ANSWER_LIKE = 300


def _answer_like(text: str) -> str | None:
    """`text` itself when it reads as an answer rather than prose: one math span (and a word
    after it), or at most one word, which is the whole text or comes after the answer
    (`28 percent`, `12 apples`, `Evelyn`, `W(x)=1orW(x)=-1`)."""
    text = text.strip().rstrip(TRAILING_PUNCTUATION).strip()
    if not text:
        return None
    span = _span_run(text, 0)
    if span is not None and (span.end == len(text) or _words_ok(text[span.end:], whole=False)):
        return span.answer + text[span.end:]
    if text.startswith(tuple(opener for opener, _, _ in _OPENERS)) or not _ALPHANUMERIC.search(text):
        return None  # math that does not close here, or no answer at all
    if len(text) > _MAX_ANSWER_LIKE or "$" in text.replace("\\$", ""):
        return None
    return text if _words_ok(text, whole=True) else None


def _words_ok(text: str, *, whole: bool) -> bool:
    """At most one word (two letters or more, outside commands); when `text` is the whole
    answer, that word is all of it (a text answer) or comes after its start (a unit)."""
    bare = _COMMAND.sub(" ", text).strip()
    words = list(islice(_WORD.finditer(bare), 2))
    if len(words) > 1:
        return False
    if not words or not whole:
        return True
    word = words[0]
    return bare.strip("{}()[] .") == word.group(0) or word.start() > 0


# -- the reading -----------------------------------------------------------------------------------


def read_answer(text: str) -> str | None:
    """The final answer of a whole output (see the module docstring), or None."""
    last_box = max((match.end() for match in BOX_COMMAND.finditer(text)), default=None)
    boxes = _box_group(text)
    if boxes is not None:
        retraction = _RETRACTED.match(text, boxes.end)
        if retraction is not None:  # "\boxed{6} is wrong, ...": only what follows can answer
            return read_answer(text[retraction.end():])
    final = _final_statement(text)
    if last_box is not None and boxes is None and (final is None or final.end <= last_box):
        return None  # the last box is cut off or empty: the model's final word is broken
    chosen = max((found for found in (boxes, final) if found is not None),
                 key=lambda found: found.end, default=None)
    statement = _answer_statement(text)
    if chosen is not None and statement is not None and statement.end > chosen.end \
            and _CORRECTION.search(text, chosen.end, statement.end - len(statement.answer)):
        chosen = statement  # "... \boxed{5}. Wait, actually the answer is 6.": the correction
    boxed = chosen is not None
    chosen = chosen or statement
    negation = _last(_NEGATED.finditer(text))
    if negation is not None and (chosen is None or negation.start() >= chosen.end - len(chosen.answer)):
        return None  # "The answer is not 5": the text's last word on the answer denies one
    if chosen is None:
        whole = _answer_like(text)
        if whole is not None:
            return _unwrapped(whole)
        chosen = _last_math(text)
    if chosen is not None and not boxed and _HEDGING.search(_sentence_around(text, chosen.end)):
        return None  # "The answer is 5 (or possibly 6)": no one answer
    return _unwrapped(chosen.answer) if chosen is not None else None


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    found = None
    for found in matches:  # noqa: B007  # the last one is wanted
        pass
    return found


def _sentence_around(text: str, end: int) -> str:
    """The sentence (or line) in which an answer that ends at `end` stands."""
    start = max(0, end - _STATEMENT_CHARS)
    before = _last(_SENTENCE_END.finditer(text, start, max(start, end - 1)))
    after = _SENTENCE_END.search(text, end)
    return text[before.end() if before else start:after.start() if after else len(text)]


def _unwrapped(answer: str) -> str | None:
    answer = answer.strip().strip("*_").strip().rstrip(TRAILING_PUNCTUATION).strip()
    return answer or None
