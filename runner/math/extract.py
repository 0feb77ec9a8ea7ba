"""Final answers out of model replies: the last `\\boxed{...}`, and an opt-in text fallback.

Rules (one definition, shared by the agent's code protocol and the math evaluation):

- The answer is the content of the LAST `\\boxed{...}` or `\\fbox{...}` in the text, wherever
  it stands (`$\\boxed{5}$`, `\\[\\boxed{5}\\]`, inside prose). Braces nest; escaped braces
  (`\\{`, `\\}`) are content, not structure.
- `\\boxed 5` (a space instead of a brace, as LaTeX allows) boxes the run of characters up to
  the next whitespace or `$`; trailing sentence punctuation is dropped.
- When the last box is unbalanced (the reply was cut off) or empty, there is no answer: an
  earlier box is not promoted, because the model's final word is the broken one.
- `extract_answer(text, fallback=True)` additionally reads "the (final) answer is X",
  "Answer: X" and GSM8K's "#### X" when the text has no box at all. Off by default: prose
  fallbacks pick up intermediate claims, so an evaluation should ask for them on purpose.

Everything here is linear in the text length (no backtracking-prone patterns), because
replies are hostile input and can be megabytes long.
"""

from __future__ import annotations

import re

from ..agent.boxed import BOX_COMMAND, TRAILING_PUNCTUATION, last_boxed

__all__ = ["extract_answer", "last_boxed"]

# "The final answer is $x$.", "the answer is: 12", "Answer: 5", "#### 72". The captured part
# runs to the end of its line; cleaning happens after the match, in linear time.
_FALLBACK = re.compile(
    r"(?:\bthe\s+(?:final\s+)?answer\s+is\s*:?|^[ \t*#_]*(?:final\s+)?answer\s*:|^####)"
    r"[ \t]*",
    re.IGNORECASE | re.MULTILINE)
_MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\[", "\\]"), ("\\(", "\\)"))


_SENTENCE_END = re.compile(r"\.\s")


def _clean_fallback(raw: str) -> str | None:
    answer = raw.strip().strip("*_").strip()
    sentence_end = _SENTENCE_END.search(answer)
    if sentence_end and not answer.startswith(("$", "\\[", "\\(")):
        answer = answer[:sentence_end.start()]
    for opener, closer in _MATH_DELIMITERS:
        if answer.startswith(opener):
            end = answer.find(closer, len(opener))
            if end > 0:
                answer = answer[len(opener):end]
            break
    answer = answer.strip().rstrip(TRAILING_PUNCTUATION).strip()
    return answer or None


def extract_answer(text: str, *, fallback: bool = False) -> str | None:
    """The final answer in a model's reply: the last box (see the module docstring).

    With `fallback=True` and no box anywhere in the text, the last "the answer is X",
    "Answer: X" or "#### X" line gives the answer instead. Returns None when there is none.
    """
    if BOX_COMMAND.search(text):
        return last_boxed(text)
    if not fallback:
        return None
    anchors = [match.end() for match in _FALLBACK.finditer(text)]
    # From the last anchor back: the first one followed by an answer on its line. A tail
    # that cleans to nothing holds no later anchor, so no text is scanned twice in a row.
    for start in reversed(anchors):
        end = text.find("\n", start)
        answer = _clean_fallback(text[start:end if end >= 0 else len(text)])
        if answer:
            return answer
    return None
