"""The agent orchestrator: any OpenAI-compatible model, four reply protocols, forgiving
parsing, and every problem turned into a feedback turn.

    from runner.agent import Agent, OpenAIChat
    run = Agent(llm=OpenAIChat(model="m", base_url="http://127.0.0.1:8000/v1"),
                functions=function_set, protocol="json", sandbox=sandbox).run(task)
    run.status, run.final_answer, run.turns

- `llm`: `OpenAIChat` (the `openai` SDK; retries; errors translated) and the `ChatModel`
  interface;
- `protocols`: `tools`, `json`, `text` and `code` (system prompt, parser, feedback hook);
- `parsing`: forgiving readers of model replies;
- `feedback`: the error codes and the one renderer of what the model is told;
- `context`: the conversation as sent, kept within a context budget;
- `execution`: function calls and code blocks in the sandbox, within the time budget;
- `loop`: `Agent`, the loop and its limits;
- `run`: `AgentRun`, `AgentTurn` and `AgentStatus`, what a run returns.

Runs, turns and their executions are logged (`runner.logs.agent`); `runner logs show
RUN_ID` renders a conversation. Names are imported on first use, so that the log store
can read `runner.agent.run` without importing the SDK and the loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..logs.agent import AgentLog
    from .actions import AnswerAction, CallAction, CodeAction, ParsedReply, ReplyProblem
    from .feedback import ActionReport, ErrorCode, Feedback
    from .llm import ChatModel, ChatReply, OpenAIChat, ToolCall, Usage
    from .loop import Agent
    from .protocols import (
        PROTOCOLS,
        CodeProtocol,
        JsonProtocol,
        ReplyProtocol,
        TextProtocol,
        ToolsProtocol,
        get_protocol,
    )
    from .run import AgentRun, AgentStatus, AgentTurn

_WHERE = {
    "AgentLog": "runner.logs.agent",
    "AnswerAction": ".actions", "CallAction": ".actions", "CodeAction": ".actions",
    "ParsedReply": ".actions", "ReplyProblem": ".actions",
    "ErrorCode": ".feedback", "Feedback": ".feedback", "ActionReport": ".feedback",
    "ChatModel": ".llm", "ChatReply": ".llm", "OpenAIChat": ".llm", "ToolCall": ".llm",
    "Usage": ".llm",
    "Agent": ".loop",
    "PROTOCOLS": ".protocols", "CodeProtocol": ".protocols", "JsonProtocol": ".protocols",
    "ReplyProtocol": ".protocols", "TextProtocol": ".protocols", "ToolsProtocol": ".protocols",
    "get_protocol": ".protocols",
    "AgentRun": ".run", "AgentStatus": ".run", "AgentTurn": ".run",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'runner.agent' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "PROTOCOLS",
    "ActionReport",
    "Agent",
    "AgentLog",
    "AgentRun",
    "AgentStatus",
    "AgentTurn",
    "AnswerAction",
    "CallAction",
    "ChatModel",
    "ChatReply",
    "CodeAction",
    "CodeProtocol",
    "ErrorCode",
    "Feedback",
    "JsonProtocol",
    "OpenAIChat",
    "ParsedReply",
    "ReplyProblem",
    "ReplyProtocol",
    "TextProtocol",
    "ToolCall",
    "ToolsProtocol",
    "Usage",
    "get_protocol",
]
