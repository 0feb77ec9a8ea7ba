"""What an agent run returns: the run, its turns and how it ended.

These are the types `Agent.run` gives back and `--json` prints; the log store keeps them
as they are (`runner.logs.agent` writes and reads them), so the API, the CLI and
`runner logs show RUN_ID` all see one shape. `conversation_text` reads a turn as the
exchange a person (or the AgentOptimizer) follows: the model's words, then the runner's.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..types import OutputFile


class AgentStatus(StrEnum):
    """How a run ended (`running` while it has not)."""

    RUNNING = "running"
    ANSWERED = "answered"
    GAVE_UP = "gave_up"
    MAX_TURNS = "max_turns"
    BUDGET = "budget"
    LLM_ERROR = "llm_error"
    CRASHED = "crashed"  # an exception inside the orchestrator ended it; `error` says which
    INTERRUPTED = "interrupted"  # Ctrl-C, or its process was gone before it ended
    TERMINATED = "terminated"  # the model ended the conversation without an answer

    def __repr__(self) -> str:  # reads as the value it is: ('answered', ...)
        return repr(self.value)


class AgentTurn(BaseModel):
    """One request to the model, its reply, what was done about it and what was said back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    number: int
    started_at: datetime
    messages_sent: list[dict[str, Any]]  # exactly the messages of the request
    reply: dict[str, Any] | None = None  # the assistant message as received
    response: dict[str, Any] | None = None  # the whole response body
    actions: list[dict[str, Any]] = Field(default_factory=list)  # as parsed
    feedback: list[dict[str, Any]] = Field(default_factory=list)  # problems, as data
    # Exactly the messages that follow the reply (the last turn of a run that hit its turn
    # limit keeps what would have been sent).
    feedback_messages: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    execution_ids: list[str] = Field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: int = 0
    retries: int = 0
    error: dict[str, Any] | None = None  # an LLM error that ended the run at this turn

    @property
    def feedback_text(self) -> str | None:
        """The text of the feedback messages (None when there are none)."""
        if not self.feedback_messages:
            return None
        return "\n\n".join(str(m.get("content") or "") for m in self.feedback_messages)

    @property
    def feedback_codes(self) -> list[str]:
        return [str(item.get("code")) for item in self.feedback]


class AgentRun(BaseModel):
    """One conversation with a model, from the task to its end."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    task: str
    protocol: str
    model: str | None = None
    base_url: str | None = None
    backend: str | None = None
    function_set: str | None = None
    functions: list[str] = Field(default_factory=list)
    system_prompt: str = ""
    tools: list[dict[str, Any]] | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    status: AgentStatus = AgentStatus.RUNNING
    final_answer: str | None = None
    stop_reason: str | None = None
    error: dict[str, Any] | None = None
    started_at: datetime = Field(default_factory=lambda: datetime.now(timezone.utc))
    finished_at: datetime | None = None
    sandbox_ms: int = 0
    turns: list[AgentTurn] = Field(default_factory=list)
    # Why this run is not in the log, when neither the log nor its spool could take it
    # (None when it is there, or spooled to be imported the next time the log is opened).
    not_logged: str | None = None
    # The files the run's executions made, newest version by name. Not logged with the
    # run: its executions hold them (`runner logs files ID`).
    files: list[OutputFile] = Field(default_factory=list, exclude=True)

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens or 0 for t in self.turns)

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens or 0 for t in self.turns)

    @property
    def usage(self) -> dict[str, int]:
        """Tokens and sandbox time the run used, as `--json` prints them."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens,
                "sandbox_ms": self.sandbox_ms, "turns": len(self.turns)}

    @property
    def execution_ids(self) -> list[str]:
        return [i for t in self.turns for i in t.execution_ids]

    def summary_dict(self) -> dict[str, Any]:
        """The run as `runner agent --json` prints it: everything except the full message
        lists and response bodies of each turn (`runner logs show ID --json` has those)."""
        data = {key: value for key, value in self.model_dump(mode="json").items()
                if key not in ("turns", "tools", "system_prompt")}
        data["prompt_tokens"] = self.prompt_tokens
        data["completion_tokens"] = self.completion_tokens
        data["usage"] = self.usage
        data["files"] = [{"name": made.name, "size": made.size, "media_type": made.media_type,
                          "sha256": made.sha256} for made in self.files]
        data["turns"] = [{
            "number": t.number, "reply": t.reply, "actions": t.actions, "feedback": t.feedback,
            "feedback_text": t.feedback_text, "notes": t.notes, "execution_ids": t.execution_ids,
            "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
            "latency_ms": t.latency_ms, "retries": t.retries, "error": t.error,
        } for t in self.turns]
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """Everything, as plain JSON types."""
        data = self.model_dump(mode="json")
        for turn, source in zip(data["turns"], self.turns, strict=True):
            turn["feedback_text"] = source.feedback_text
        return data


def conversation_text(turn: AgentTurn) -> Sequence[tuple[str, str]]:
    """(speaker, text) pairs of one turn, for showing a conversation as it goes: the model's
    reply, then what the runner told it back (the outputs and feedback)."""
    shown: list[tuple[str, str]] = []
    if turn.error:
        shown.append(("error", f"[{turn.error.get('code')}] {turn.error.get('message')}"))
    reply = turn.reply or {}
    content = str(reply.get("content") or "")
    calls = reply.get("tool_calls") or []
    for call in calls:
        function = call.get("function") or {}
        content += f"\n[tool call] {function.get('name')}({function.get('arguments')})"
    if content.strip():
        shown.append(("model", content.strip()))
    for message in turn.feedback_messages:
        text = str(message.get("content") or "")
        if text.strip():
            shown.append(("runner", text.strip()))
    return shown
