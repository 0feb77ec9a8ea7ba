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
- `execution`: function calls and code blocks in the sandbox, within the time budget;
- `loop`: `Agent`, the loop and its limits.

Runs, turns and their executions are logged (`runner.logs.agent`); `runner logs show
RUN_ID` renders a conversation.
"""

from __future__ import annotations

from ..logs.agent import AgentLog, AgentRun, AgentStatus, AgentTurn
from .actions import AnswerAction, CallAction, CodeAction, ParsedReply, ReplyProblem
from .feedback import ErrorCode, Feedback, Observation
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

__all__ = [
    "PROTOCOLS",
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
    "Observation",
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
