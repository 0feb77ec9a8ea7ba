"""The conversation as it is sent: kept within a context budget.

Every turn sends the whole conversation so far, and a few long outputs can push it past
what the model accepts (the server then refuses the request) or past what it reads well.
`fit` returns the messages to send: unchanged while their text fits `budget_chars`;
otherwise the longest stretches of older messages (replies and results of earlier turns)
are cut to their start and end around a marker, oldest first, before anything recent is
touched. The system prompt and the task are cut last. The conversation itself is never
changed: the log keeps every reply and result whole, and each turn's log row records
exactly what was sent.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from .feedback import clip
from .llm import Message

DEFAULT_CONTEXT_CHARS = 60_000  # about 15,000 tokens of English text
KEEP_CHARS = 600  # a cut message keeps at least this much of its start and end
_MARKER_CHARS = 200  # at least the length of the marker `clip` puts in place of the cut


def _size(message: Message) -> int:
    content = message.get("content")
    return len(content) if isinstance(content, str) else 0


def fit(messages: Sequence[Message], budget_chars: int) -> list[Message]:
    """A copy of `messages` whose contents add up to at most `budget_chars` where possible."""
    sent = copy.deepcopy(list(messages))
    excess = sum(_size(m) for m in sent) - budget_chars
    if excess <= 0:
        return sent
    last_reply = max((i for i, m in enumerate(sent) if m.get("role") == "assistant"), default=len(sent))
    older = list(range(2, last_reply))  # between the task and the latest exchange
    latest = list(range(last_reply, len(sent)))
    for group in (older, latest, [1, 0]):
        for index in group:
            if excess <= 0:
                return sent
            excess -= _cut(sent[index], excess)
    return sent


def _cut(message: Message, excess: int) -> int:
    """Cut `message`'s content by up to `excess` characters; how many it lost."""
    content = message.get("content")
    if not isinstance(content, str) or len(content) <= KEEP_CHARS:
        return 0
    # The marker that replaces the cut text has a length of its own: cut that much more.
    target = max(KEEP_CHARS, len(content) - excess - _MARKER_CHARS)
    shortened, cut = clip(content, target, where="the log of this run; it was cut here to keep "
                                                  "the conversation within its context budget")
    if not cut or len(shortened) >= len(content):
        return 0
    message["content"] = shortened
    return len(content) - len(shortened)
