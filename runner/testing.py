"""Fake chat models, for tests and examples: an agent, a MathChat solve, an evaluation or
a training scripted without a model server.

    from runner.testing import FunctionChat, ScriptedChat, tool_call

    llm = ScriptedChat(["```python\nprint(6 * 7)\n```", "So it is $\\boxed{42}$."])
    llm = FunctionChat(lambda messages, tools: "$\\boxed{42}$")   # a reply per conversation
    llm = ScriptedChat([tool_call("add", {"a": 1, "b": 2}), "3"])  # a native tool call

Either one is a `ChatModel`: pass it as `llm=` wherever a model is taken (`Agent`,
`runner.math.solve`, `evaluate`, `train`). A reply is the text of the assistant message,
or a `dict` with `content`, `tool_calls` (each `{"name", "arguments"}`, arguments as an
object or as JSON text) and `finish_reason`. It becomes a chat-completion body, which is
read by the same code as a server's (`runner.agent.llm.reply_from_completion`), so the
agent sees, and the log keeps, exactly what a server's reply would give. `requests`
records what the model was sent, as a request body would hold it: `{"messages"}`, and
`"tools"` when there were any.

For testing the HTTP client itself (retries, errors, odd servers), use a real server.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .agent.llm import ChatReply, Message, reply_from_completion
from .errors import LLMError

__all__ = ["FunctionChat", "Reply", "ScriptedChat", "tool_call"]

Reply = str | dict[str, Any]
Tools = Sequence[dict[str, Any]] | None
_REPLY_KEYS = frozenset({"content", "tool_calls", "finish_reason"})


def tool_call(name: str, arguments: dict[str, Any] | str, *, call_id: str | None = None,
              content: str = "") -> dict[str, Any]:
    """A reply that calls one function natively (`call_id` is made up when not given)."""
    call: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id is not None:
        call["id"] = call_id
    return {"content": content, "tool_calls": [call]}


class _FakeChat:
    """What both fakes share: the model's name, the record of requests, replies as bodies."""

    base_url: str | None = None

    def __init__(self, model: str) -> None:
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._count = 0

    def _answer(self, messages: Sequence[Message], tools: Tools) -> Reply:
        raise NotImplementedError

    def complete(self, messages: Sequence[Message], *, tools: Tools = None) -> ChatReply:
        sent = copy.deepcopy(list(messages))
        request: dict[str, Any] = {"messages": sent}
        if tools:
            request["tools"] = copy.deepcopy(list(tools))
        with self._lock:
            self.requests.append(request)
            self._count += 1
            number = self._count
        return reply_from_completion(_completion(self._answer(sent, tools), self.model, number),
                                     latency_ms=0, retries=0, where=f"the fake model {self.model}")


class ScriptedChat(_FakeChat):
    """Replies from a list, in order, whatever is asked; one more request than there are
    replies is an LLMError (the test asked for a conversation it did not script)."""

    def __init__(self, replies: Iterable[Reply] = (), *, model: str = "scripted-model") -> None:
        super().__init__(model)
        self._replies = list(replies)
        self._next = 0

    def queue(self, *replies: Reply) -> ScriptedChat:
        """Add replies after the ones already scripted."""
        with self._lock:
            self._replies.extend(replies)
        return self

    @property
    def pending(self) -> int:
        """Replies not yet given."""
        return len(self._replies) - self._next

    def _answer(self, messages: Sequence[Message], tools: Tools) -> Reply:
        with self._lock:
            if self._next >= len(self._replies):
                raise LLMError(f"the scripted model has no reply left after {len(self._replies)}",
                               fix="script one reply per request the conversation makes")
            reply = self._replies[self._next]
            self._next += 1
        return reply


class FunctionChat(_FakeChat):
    """Replies from a function of the conversation: `function(messages, tools)` returns the
    reply. Called from the caller's threads (an evaluation runs several conversations at
    once), so it should not depend on the order of calls across conversations."""

    def __init__(self, function: Callable[[list[Message], Tools], Reply], *,
                 model: str = "function-model") -> None:
        super().__init__(model)
        self._function = function

    def _answer(self, messages: Sequence[Message], tools: Tools) -> Reply:
        return self._function(list(messages), tools)


def _completion(reply: Reply, model: str, number: int) -> dict[str, Any]:
    """The chat-completion body a server would have sent for `reply`."""
    if isinstance(reply, str):
        reply = {"content": reply}
    unknown = set(reply) - _REPLY_KEYS
    if unknown:
        raise ValueError(f"a fake reply takes {', '.join(sorted(_REPLY_KEYS))}, not "
                         f"{', '.join(sorted(unknown))}")
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
    calls = reply.get("tool_calls") or []
    if calls:
        message["tool_calls"] = [
            {"id": call.get("id") or f"call_{number}_{index}", "type": "function",
             "function": {"name": call["name"],
                          "arguments": call["arguments"] if isinstance(call["arguments"], str)
                          else json.dumps(call["arguments"])}}
            for index, call in enumerate(calls)]
    finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
    return {"id": f"fake-{number}", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
