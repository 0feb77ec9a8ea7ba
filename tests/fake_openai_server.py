"""A scripted OpenAI-compatible server on 127.0.0.1, for tests through the real `openai` SDK.

It speaks `POST /v1/chat/completions` and `GET /v1/models`, replays the replies a test
queued (assistant messages, HTTP errors, slow answers) in order, and records every request
body it received, so a test can check exactly what the orchestrator sent.

For conversations that run concurrently (an evaluation), where the order of requests is
not fixed, a `responder` can answer instead of the queue: a function of the request body
that returns the reply's content (a string), `{"content", "tool_calls", "delay_s"}`,
`{"status": 503, "message": ...}` for an HTTP error, `{"raw": b"<html>...", "content_type":
"text/html"}` for a body that is not a chat completion (HTTP 200 unless `status` says
otherwise), or `{"body": {...}}` for a JSON body of its own (`{"choices": []}`, say).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[dict[str, Any]], "str | dict[str, Any]"]


@dataclass
class _Reply:
    status: int = 200
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None  # sent as is, instead of `body` as JSON
    content_type: str = "application/json"
    cut_at: int | None = None  # send this many bytes of the body, no length, then close


class FakeOpenAI:
    """Use as a context manager; `url` is the base URL to give the client."""

    def __init__(self, *, model: str = "fake-model", models: list[str] | None = None,
                 reject_tools: str | None = None, models_page: tuple[int, str, bytes] | None = None,
                 responder: Responder | None = None) -> None:
        self.model = model
        self.responder = responder
        self.models = models if models is not None else [model]
        # (status, content type, body) answered to GET /models instead of the list
        self.models_page = models_page
        self.reject_tools = reject_tools  # an error message for requests that carry `tools`
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # lower-case names
        self._script: deque[_Reply] = deque()
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()  # reply ids, numbered by concurrent handlers too
        self._count = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None,
                      *, raw: bytes | None = None, content_type: str = "application/json",
                      cut_at: int | None = None) -> None:
                data = raw if raw is not None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if cut_at is not None:
                    # A reply cut short: no length, so only the closed connection ends it.
                    self.send_header("Connection", "close")
                    self.close_connection = True
                    data = data[:cut_at]
                else:
                    self.send_header("Content-Length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models") and fake.models_page is not None:
                    status, content_type, raw = fake.models_page
                    self._send(status, {}, raw=raw, content_type=content_type)
                elif self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                        for m in fake.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                body = json.loads(raw or b"{}")
                refused = fake.reject_tools is not None and bool(body.get("tools"))
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                    # A refused request uses up no reply: the script is for real answers.
                    reply = fake._script.popleft() if fake._script and not refused else None
                if refused:
                    self._send(400, {"error": {"message": fake.reject_tools, "type": "invalid_request_error"}})
                    return
                if reply is None and fake.responder is not None:
                    answer = fake.responder(body)
                    if isinstance(answer, str):
                        answer = {"content": answer}
                    if "raw" in answer or "body" in answer:  # not a chat completion
                        raw_body = answer.get("raw")
                        reply = _Reply(status=int(answer.get("status", 200)),
                                       body=answer.get("body") or {},
                                       raw=raw_body.encode() if isinstance(raw_body, str) else raw_body,
                                       content_type=str(answer.get("content_type")
                                                        or "application/json"),
                                       delay_s=float(answer.get("delay_s") or 0))
                    elif answer.get("status", 200) != 200:  # an HTTP error instead of a reply
                        reply = _Reply(status=int(answer["status"]), body={"error": {
                            "message": str(answer.get("message") or "error"), "type": "server_error"}})
                    else:
                        reply = fake._message(answer.get("content"), tool_calls=answer.get("tool_calls"),
                                              delay_s=float(answer.get("delay_s") or 0))
                if reply is None:
                    self._send(400, {"error": {"message": "the test script has no more replies"}})
                    return
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                self._send(reply.status, reply.body, reply.headers, raw=reply.raw,
                           content_type=reply.content_type, cut_at=reply.cut_at)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    # -- the script ------------------------------------------------------------------------

    def reply(self, content: str | None = "", *, tool_calls: list[dict[str, Any]] | None = None,
              prompt_tokens: int = 11, completion_tokens: int = 7, delay_s: float = 0.0,
              finish_reason: str | None = None) -> FakeOpenAI:
        """Queue an assistant message (`finish_reason` "length" for one cut at max_tokens)."""
        self._script.append(self._message(content, tool_calls=tool_calls, prompt_tokens=prompt_tokens,
                                          completion_tokens=completion_tokens, delay_s=delay_s,
                                          finish_reason=finish_reason))
        return self

    def _message(self, content: str | None, *, tool_calls: list[dict[str, Any]] | None = None,
                 prompt_tokens: int = 11, completion_tokens: int = 7, delay_s: float = 0.0,
                 finish_reason: str | None = None) -> _Reply:
        with self._count_lock:
            self._count += 1
            number = self._count
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        body = {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 1700000000,
                "model": self.model,
                "choices": [{"index": 0, "message": message,
                             "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop")}],
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}
        return _Reply(body=body, delay_s=delay_s)

    def cut(self, content: str = "", *, at: int = 40) -> FakeOpenAI:
        """Queue an assistant message whose body stops after `at` bytes: sent without a
        length, the connection closed (a proxy or server that died mid-reply)."""
        reply = self._message(content)
        reply.cut_at = at
        self._script.append(reply)
        return self

    def raw(self, body: bytes, content_type: str, *, status: int = 200) -> FakeOpenAI:
        """Queue a reply that is not a chat completion (an HTML page, a binary body)."""
        self._script.append(_Reply(status=status, raw=body, content_type=content_type))
        return self

    def replies(self, *contents: str) -> FakeOpenAI:
        for content in contents:
            self.reply(content)
        return self

    def error(self, status: int, message: str = "error", *, headers: dict[str, str] | None = None
              ) -> FakeOpenAI:
        """Queue an HTTP error answer."""
        self._script.append(_Reply(status=status, body={"error": {"message": message,
                                                                   "type": "server_error"}},
                                   headers=headers or {}))
        return self

    @staticmethod
    def call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
        """A tool call for `reply(tool_calls=[...])`."""
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return {"id": call_id or f"call_{name}_{abs(hash(text)) % 10000}", "type": "function",
                "function": {"name": name, "arguments": text}}

    @property
    def pending(self) -> int:
        return len(self._script)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
