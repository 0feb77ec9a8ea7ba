"""Reply protocols: how the model is asked to reply, and how its replies are read.

- `tools`: native tool calls (`ToolsProtocol`);
- `json`: one JSON thought/action object (`JsonProtocol`);
- `text`: Thought / Tool / Tool Input, or Final Answer (`TextProtocol`);
- `code`: fenced python blocks in one session, final answer in \\boxed{} (`CodeProtocol`);
- `answer`: nothing runs, final answer in \\boxed{} (`AnswerProtocol`, a baseline).
"""

from __future__ import annotations

from ...errors import ConfigurationError
from .answer import AnswerProtocol
from .base import ReplyProtocol
from .code import CodeProtocol
from .json_action import FINISH, JsonProtocol
from .text import TextProtocol
from .tools import ToolsProtocol

PROTOCOLS: dict[str, type[ReplyProtocol]] = {
    "tools": ToolsProtocol,
    "json": JsonProtocol,
    "text": TextProtocol,
    "code": CodeProtocol,
    "answer": AnswerProtocol,
}


def get_protocol(protocol: str | ReplyProtocol) -> ReplyProtocol:
    """A protocol instance from its name (or the instance itself)."""
    if isinstance(protocol, ReplyProtocol):
        return protocol
    try:
        return PROTOCOLS[protocol]()
    except KeyError:
        raise ConfigurationError(f"unknown protocol {protocol!r}",
                                 fix=f"use one of: {', '.join(PROTOCOLS)}") from None


__all__ = ["FINISH", "PROTOCOLS", "AnswerProtocol", "CodeProtocol", "JsonProtocol", "ReplyProtocol", "TextProtocol",
           "ToolsProtocol", "get_protocol"]
