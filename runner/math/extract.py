"""Final answers out of model replies: the last `\\boxed{...}`, or a whole output's answer.

Rules (one definition, shared by the agent's code protocol and the math evaluation):

- The answer is the content of the LAST `\\boxed{...}` or `\\fbox{...}` in the text, wherever
  it stands (`$\\boxed{5}$`, `\\[\\boxed{5}\\]`, inside prose). Braces nest; escaped braces
  (`\\{`, `\\}`) are content, not structure. This is how a MathChat reply is read.
- `\\boxed 5` (a space instead of a brace, as LaTeX allows) boxes the run of characters up to
  the next whitespace or `$`; trailing sentence punctuation is dropped.
- When the last box is unbalanced (the reply was cut off) or empty, there is no answer: an
  earlier box is not promoted, because the model's final word is the broken one.
- `extract_answer(text, fallback=True)` reads a whole output the way a standalone check
  should (`runner.math.reading`): an answer split over several boxes, a final-answer
  statement after the last box, "the answer is X", "Answer: X", GSM8K's "#### X", and
  answers in prose with no box at all. Off by default: the reply of a conversation is read
  by its last box, and prose rules pick up intermediate claims, so an evaluation asks for
  them on purpose.

Everything here is linear in the text length (no backtracking-prone patterns), because
replies are hostile input and can be megabytes long.
"""

from __future__ import annotations

from ..agent.boxed import last_boxed
from .reading import read_answer

__all__ = ["extract_answer", "last_boxed"]


def extract_answer(text: str, *, fallback: bool = False) -> str | None:
    """The final answer in a model's reply: the last box (see the module docstring).

    With `fallback=True`, the answer of a whole output (`runner.math.reading.read_answer`):
    joined boxes, final statements, prose. Returns None when there is none.
    """
    if fallback:
        return read_answer(text)
    return last_boxed(text)
