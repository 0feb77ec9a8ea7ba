"""The language model: any OpenAI-compatible chat-completions server, through the `openai` SDK.

`OpenAIChat.complete(messages, tools=...)` sends one request and returns a `ChatReply`:
the assistant message as received (content, tool calls), the whole response body, token
usage, latency and how many retries it took. Transient failures (rate limits, 5xx, a
refused or dropped connection, a reply cut short, a timeout) are retried here with
exponential backoff, honouring a server's Retry-After; the SDK's own retries are switched
off so that there is one retry policy and it is visible in the log. A server that accepts
and never answers costs a minute per attempt (the read timeout), and is given up after
`TIMEOUT_RETRIES` such minutes; while a reply is slow, `on_slow` (the CLI prints it) is told
after `slow_after_s` seconds, with the most the request may still take. A request from a thread other than the main
one is made on a request thread (`request_threads`), so that `stop()` (a job that is
stopping) abandons every request in flight at once and sends no more; in the main thread,
Ctrl-C interrupts the request itself.

Every exception of the SDK is translated here, once, into the `LLMError` tree of
`runner.errors`: a caller never sees an `openai` exception. A server or model that rejects
the `tools` parameter becomes `ToolsNotSupportedError`, whose fix suggests `--protocol json`.

`ChatModel` is the interface the agent loop needs; tests and other clients may implement
it without the SDK.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..encodable import encodable
from ..errors import (
    ConfigurationError,
    LLMAuthenticationError,
    LLMError,
    LLMProtocolError,
    LLMRequestError,
    LLMUnavailableError,
    ToolsNotSupportedError,
)
from ..jsonlimits import JsonBounds, JsonBoundsError, loads
from ..ranges import Range, require
from ..stopping import Stopped
from .request_threads import REQUESTS

Message = dict[str, Any]

# Words in a 4xx error body that say the request was refused because of function calling.
_TOOL_WORDS = ("tool", "function call", "function_call", "functions")
# The valid values of the client's settings, stated once: the constructor checks them and
# the CLI's options take them (`runner.cli_options.model_options`).
TIMEOUT_RANGE = Range(0, True, 3600)
# A person waits about a minute for one reply before calling the server silent, and a server
# silent for three such minutes in a row is down, not busy: its timeouts are retried twice
# (rate limits, 5xx and dropped connections up to `max_retries`).
DEFAULT_TIMEOUT_S = 60.0
TIMEOUT_RETRIES = 2
SLOW_AFTER_S = 15.0
RETRIES_RANGE = Range(0, False, 100, integer=True)
TEMPERATURE_RANGE = Range(0, False, 2)
MAX_TOKENS_RANGE = Range(1, False, 10_000_000, integer=True)

_TOOLS_FIX = ("use a protocol that needs no native function calling: `--protocol json` "
              "(or text), i.e. Agent(protocol='json'); or enable tool calling on the server "
              "(vLLM: --enable-auto-tool-choice --tool-call-parser ...)")


class ToolCall(BaseModel):
    """One native function call in an assistant message; `arguments` is the raw JSON text."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: str = ""


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class ChatReply(BaseModel):
    """One assistant reply, as received."""

    model_config = ConfigDict(frozen=True)

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    message: Message = Field(default_factory=dict)  # the assistant message, to send back as history
    response: dict[str, Any] = Field(default_factory=dict)  # the whole response body
    finish_reason: str | None = None
    model: str | None = None
    usage: Usage = Field(default_factory=Usage)
    latency_ms: int = 0
    retries: int = 0


class ChatModel(Protocol):
    """What the agent loop needs from a model."""

    model: str

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict[str, Any]] | None = None
                 ) -> ChatReply: ...


class OpenAIChat:
    """A chat model behind an OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp, LiteLLM).

    `model`, `base_url` and `api_key` fall back to `RUNNER_MODEL`, `OPENAI_BASE_URL` and
    `OPENAI_API_KEY`. Without a model name, a server that serves exactly one model is asked
    for its name. Without an API key, a custom `base_url` gets a placeholder (local servers
    need none); the OpenAI service itself needs a real one.
    """

    def __init__(self, model: str | None = None, *, base_url: str | None = None,
                 api_key: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_retries: int = 4, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 temperature: float | None = None, max_tokens: int | None = None,
                 extra_body: dict[str, Any] | None = None,
                 slow_after_s: float = SLOW_AFTER_S,
                 on_slow: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        import openai

        require("timeout_s", timeout_s, TIMEOUT_RANGE, fix="pass a timeout in seconds, e.g. 120")
        require("max_retries", max_retries, RETRIES_RANGE, fix="pass 0 for no retries")
        require("backoff_s", backoff_s, Range(0, False, 3600), fix="pass seconds, e.g. 1")
        require("max_backoff_s", max_backoff_s, Range(0, False, 3600), fix="pass seconds, e.g. 30")
        require("slow_after_s", slow_after_s, Range(0, True, 3600), fix="pass seconds, e.g. 15")
        require("temperature", temperature, TEMPERATURE_RANGE, optional=True,
                fix="pass a sampling temperature from 0 to 2, or None for the server's")
        require("max_tokens", max_tokens, MAX_TOKENS_RANGE, optional=True,
                fix="pass a positive number of tokens, or None for the server's")
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or None
        if api_key is None:
            if self.base_url is None:
                raise ConfigurationError(
                    "no API key for the OpenAI service",
                    fix="set OPENAI_API_KEY or pass --api-key; for a local server, set "
                        "OPENAI_BASE_URL or pass --base-url")
            api_key = "not-needed"  # local servers ignore it, the SDK insists on one
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.slow_after_s = slow_after_s
        self.on_slow = on_slow
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self._sleep = sleep
        self._stopped = threading.Event()
        self._flight_lock = threading.Lock()
        self._in_flight: set[threading.Event] = set()
        self._client = openai.OpenAI(api_key=api_key, base_url=self.base_url,
                                     timeout=timeout_s, max_retries=0)
        if self.base_url is None:
            self.base_url = str(self._client.base_url)
        self.model = model or os.environ.get("RUNNER_MODEL") or self._only_served_model()

    def __repr__(self) -> str:
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    # -- requests --------------------------------------------------------------------------

    def request_body(self, messages: Sequence[Message],
                     tools: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON body sent for these messages (what the log keeps)."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages)}
        if tools:
            body["tools"] = list(tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        return body

    def complete(self, messages: Sequence[Message], *, tools: Sequence[dict[str, Any]] | None = None
                 ) -> ChatReply:
        """One assistant reply; retries transient failures, raises an LLMError otherwise."""
        body = self.request_body(messages, tools)
        arguments = dict(body)
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        retries = timeouts = 0
        started = time.monotonic()
        while True:
            try:
                with self._slow_notice(retries, timeouts):
                    # The raw response: its body is read here, as JSON, whatever the server
                    # sent (an HTML page at a wrong URL, a binary body, a reply cut short),
                    # not by the SDK's models.
                    raw = self._send(arguments)
                    data = self._body(raw.http_response, "POST /chat/completions",
                                      "a chat completion")
                break
            except Stopped:
                raise
            except Exception as exc:  # translated below, once
                error, transient, wait = self._translate(exc, tools=bool(tools))
                timeouts += _is_timeout(exc)
                if (not transient or retries >= self.max_retries
                        or timeouts > min(TIMEOUT_RETRIES, self.max_retries)):
                    if transient and retries:
                        error = type(error)(f"{error.message} (after {retries} retries)",
                                            fix=error.fix)
                    raise error from exc
                retries += 1
                self._pause(wait if wait is not None else self._backoff(retries))
        latency_ms = int((time.monotonic() - started) * 1000)
        return reply_from_completion(data, latency_ms=latency_ms, retries=retries, where=self._where)

    @contextmanager
    def _slow_notice(self, retries: int, timeouts: int) -> Iterator[None]:
        """Tell `on_slow`, once, when this attempt has had no answer for `slow_after_s`
        seconds: which attempt it is and the most the request may still take."""
        if self.on_slow is None or self.slow_after_s >= self.timeout_s:
            yield
            return
        tell = self.on_slow
        attempts = min(self.max_retries, TIMEOUT_RETRIES) + 1
        # This attempt's rest, then each attempt left at the full timeout plus its backoff.
        left = self.timeout_s - self.slow_after_s + sum(
            self.timeout_s + min(self.max_backoff_s, self.backoff_s * 2.0 ** (n - 1))
            for n in range(retries + 1, retries + attempts - timeouts))

        def notice() -> None:
            tell(f"{self._where} has not answered for {self.slow_after_s:g} s "
                 f"(attempt {retries + 1}, which waits {self.timeout_s:g} s for an answer): "
                 f"the request is given up within {_duration(left)} if it stays silent")

        timer = threading.Timer(self.slow_after_s, notice)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def stop(self) -> None:
        """Stop talking to the server, for good (a job that is stopping calls it): every
        request in flight is abandoned at once (its caller gets `Stopped`; the reply, if one
        comes, is dropped), and no request or retry is sent any more."""
        with self._flight_lock:
            self._stopped.set()
            for finished in self._in_flight:
                finished.set()

    def _send(self, arguments: dict[str, Any]) -> Any:
        """One request. From the main thread it is made there (Ctrl-C interrupts it); from
        any other thread (an evaluation's), on a request thread (`request_threads`), so that
        `stop` can end the wait without waiting for the server."""
        if threading.current_thread() is threading.main_thread():
            if self._stopped.is_set():
                raise Stopped("the model client was stopped")
            return self._client.chat.completions.with_raw_response.create(**arguments)
        with self._flight_lock:
            if self._stopped.is_set():
                raise Stopped("the model client was stopped")
            call = REQUESTS.submit(
                lambda: self._client.chat.completions.with_raw_response.create(**arguments))
            self._in_flight.add(call.finished)
        try:
            call.finished.wait()
        finally:
            with self._flight_lock:
                self._in_flight.discard(call.finished)
        if not call.done:
            raise Stopped("the model client was stopped while a request was in flight")
        if call.error is not None:
            raise call.error
        return call.value

    def _pause(self, seconds: float) -> None:
        """Wait before a retry; a stopped client does not retry."""
        if self._sleep is time.sleep:
            self._stopped.wait(seconds)
        else:  # a test's clock
            self._sleep(seconds)
        if self._stopped.is_set():
            raise Stopped("the model client was stopped")

    def _backoff(self, attempt: int) -> float:
        delay = min(float(self.max_backoff_s), self.backoff_s * 2.0 ** (attempt - 1))
        return delay * random.uniform(0.5, 1.0)  # jitter: clients that failed together spread out

    def check_server(self) -> None:
        """Ask the server for its models once, without retries: raises LLMUnavailableError
        (with the fix) when nothing answers at `base_url`, LLMAuthenticationError when the
        key is refused. A server that has no model list (or refuses it otherwise) passes:
        only the first real request can tell. For callers about to send many requests."""
        try:
            self._client.models.list()
        except Exception as exc:  # translated below, once
            error, transient, _ = self._translate(exc, tools=False)
            if transient or isinstance(error, LLMAuthenticationError):
                raise error from exc

    def _only_served_model(self) -> str:
        fix = f"pass --model or set RUNNER_MODEL; and check --base-url ({_BASE_URL_HINT})"
        try:
            raw = self._client.models.with_raw_response.list()
        except Exception as exc:
            import openai

            error, transient, _ = self._translate(exc, tools=False)
            if transient:  # the server is not there at all: that is the problem to report
                raise error from exc
            what = (f"HTTP {exc.status_code}: {_error_text(exc)}"
                    if isinstance(exc, openai.APIStatusError) else error.message)
            raise LLMError(f"no model name given, and {self._where} did not list its models "
                           f"(GET /models answered {what})", fix=fix) from exc
        data = self._body(raw.http_response, "GET /models", "a list of models", fix=fix)
        try:
            listing = _ModelList.model_validate(data)
        except ValidationError:
            raise LLMError(f"no model name given, and {self._where} answered GET /models with JSON "
                           f"that is not a list of models: {_snippet(raw.http_response.content)}",
                           fix=fix) from None
        served = [item.id for item in listing.data]
        if len(served) != 1:
            listed = ", ".join(served[:10]) or "none"
            raise ConfigurationError(f"no model name given, and {self._where} serves "
                                     f"{len(served)} models ({listed})",
                                     fix="pass --model or set RUNNER_MODEL")
        return served[0]

    @property
    def _where(self) -> str:
        return f"the model server at {self.base_url}"

    def _body(self, response: Any, request: str, expected: str, *, fix: str | None = None
              ) -> dict[str, Any]:
        """The JSON object a 2xx response carries; LLMError saying what came instead."""
        body: bytes = response.content
        kind = (response.headers.get("content-type") or "no content type").split(";")[0].strip()
        status = response.status_code
        problem: str | None = None
        try:
            data = loads(body.decode("utf-8"), RESPONSE_BOUNDS, what="the body", types=False)
        except UnicodeDecodeError:
            problem = "a body that is not text"
        except JsonBoundsError as exc:
            if exc.kind == "syntax" and _cut_short(response):
                raise LLMUnavailableError(
                    f"{self._where} cut its reply to {request} short: the connection closed "
                    f"after {len(body):,} bytes of JSON, with no length sent to tell",
                    fix="a transient fault of the server or a proxy between (retried); if it "
                        "persists, check the server's logs") from None
            problem = "a body that is not JSON" if exc.kind == "syntax" else str(exc)
        else:
            if isinstance(data, dict):
                return data
            problem = f"a JSON {_JSON_NAMES.get(type(data), 'value')}, not an object"
        raise LLMProtocolError(f"{self._where} answered {request} with HTTP {status} {kind}, {problem}, where "
                       f"{expected} was expected: {_snippet(body)}",
                       fix=fix or f"check --base-url / OPENAI_BASE_URL: {_BASE_URL_HINT}")

    # -- errors ----------------------------------------------------------------------------

    def _translate(self, exc: Exception, *, tools: bool) -> tuple[LLMError, bool, float | None]:
        """(the runner error, whether a retry may help, how long the server asked us to wait)."""
        import openai

        where = f"the model server at {self.base_url}"
        if isinstance(exc, LLMError):  # `_body`'s own: a reply cut short may come right
            return exc, isinstance(exc, LLMUnavailableError), None
        if isinstance(exc, openai.APITimeoutError):
            return (LLMUnavailableError(f"{where} did not answer within {self.timeout_s:g} s",
                                        fix="check that the server is up and not overloaded, or "
                                            "raise the timeout (--llm-timeout)"), True, None)
        if isinstance(exc, openai.APIConnectionError):
            return (LLMUnavailableError(f"cannot reach {where}: {_cause(exc)}",
                                        fix="check --base-url / OPENAI_BASE_URL and that the "
                                            "server is running"), True, None)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = _error_text(exc)
            wait = _retry_after(exc)
            if status == 429 or status >= 500:
                return (LLMUnavailableError(f"{where} answered HTTP {status}: {detail}",
                                            fix="wait and retry; check the server's logs and "
                                                "rate limits"), True, wait)
            if status in (401, 403):
                return (LLMAuthenticationError(f"{where} refused the API key (HTTP {status}): {detail}",
                                               fix="check OPENAI_API_KEY or --api-key"), False, None)
            if tools and status in (400, 404, 422, 501) and _mentions_tools(detail):
                return (ToolsNotSupportedError(
                    f"model {self.model!r} at {where} rejects native tool calls "
                    f"(HTTP {status}: {detail})", fix=_TOOLS_FIX), False, None)
            if status == 404:
                model = getattr(self, "model", None)  # unset while asking for the model list
                return (LLMRequestError(f"{where} answered 404 for model {model!r}: {detail}",
                                        fix="check --model / RUNNER_MODEL and that --base-url "
                                            f"is right ({_BASE_URL_HINT})"), False, None)
            return (LLMRequestError(f"{where} refused the request (HTTP {status}): {detail}",
                                    fix="check the model name and the server's limits (context "
                                        "length, parameters)"), False, None)
        if isinstance(exc, openai.OpenAIError):
            return (LLMError(f"the OpenAI SDK failed talking to {where}: {exc}",
                             fix="check the server's logs; retry"), False, None)
        return (LLMError(f"unexpected failure talking to {where}: {type(exc).__name__}: {exc}",
                         fix="this may be a bug in runner; please report it"), False, None)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class _WireFunction(_Lenient):
    name: Any = None
    arguments: Any = None


class _WireToolCall(_Lenient):
    id: Any = None
    function: _WireFunction | None = None


class _WireMessage(_Lenient):
    content: Any = None
    tool_calls: list[_WireToolCall] | None = None


class _WireChoice(_Lenient):
    message: _WireMessage | None = None
    finish_reason: str | None = None


class _WireUsage(_Lenient):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _WireCompletion(_Lenient):
    """A chat-completion body as servers send it: only what the agent reads is checked."""

    choices: list[_WireChoice] = Field(default_factory=list)
    model: str | None = None
    usage: _WireUsage | None = None


class _ModelId(_Lenient):
    id: str


class _ModelList(_Lenient):
    data: list[_ModelId]


def _text(content: Any) -> str:
    """Message content: a string, or (some servers) a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def reply_from_completion(data: dict[str, Any], *, latency_ms: int, retries: int,
                          where: str = "the model server") -> ChatReply:
    """The reply in a chat-completion body (as a server sends it), read as untrusted data.
    Its text is made encodable first (a lone surrogate, valid in JSON, becomes `\\udXXX`),
    so that the reply can be logged, printed and sent back whatever the server wrote."""
    data = encodable(data)
    try:
        completion = _WireCompletion.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(part) for part in first["loc"])
        raise LLMProtocolError(f"{where} answered with JSON that is not a chat completion ({place}: "
                       f"{first['msg']}): {_snippet(json.dumps(data).encode())}",
                       fix=f"check --base-url / OPENAI_BASE_URL: {_BASE_URL_HINT}") from None
    if not completion.choices:
        raise LLMProtocolError(f"{where} answered without a choice (an empty reply): "
                       f"{_snippet(json.dumps(data).encode())}",
                       fix="check the server's logs; the model may have failed to load, or "
                           f"--base-url points elsewhere ({_BASE_URL_HINT})")
    choice = completion.choices[0]
    message = choice.message or _WireMessage()
    content = _text(message.content)
    calls: list[ToolCall] = []
    history_calls: list[dict[str, Any]] = []
    for index, call in enumerate(message.tool_calls or []):
        function = call.function or _WireFunction()
        arguments = function.arguments
        if not isinstance(arguments, str):  # a few servers send an object, not JSON text
            arguments = json.dumps(arguments if arguments is not None else {}, default=repr)
        name = function.name if isinstance(function.name, str) else ""
        call_id = str(call.id or f"call_{index}")
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments))
        history_calls.append({"id": call_id, "type": "function",
                              "function": {"name": name, "arguments": arguments}})
    assistant: Message = {"role": "assistant", "content": content}
    if history_calls:
        assistant["tool_calls"] = history_calls
    usage = completion.usage or _WireUsage()
    return ChatReply(
        content=content, tool_calls=tuple(calls), message=assistant, response=data,
        finish_reason=choice.finish_reason, model=completion.model,
        usage=Usage(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens),
        latency_ms=latency_ms, retries=retries)


_JSON_NAMES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}
_BASE_URL_HINT = ("it must be the server's OpenAI-compatible API root, usually ending in /v1, "
                  "e.g. http://127.0.0.1:8000/v1")
RESPONSE_BOUNDS = JsonBounds(max_chars=32_000_000, max_depth=100, max_items=1_000_000)


def _snippet(body: bytes, limit: int = 200) -> str:
    """The start of a body as a person can read it: text (quoted, controls escaped) or, for
    binary, its size and first bytes in hex."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return f"{len(body):,} bytes of binary data, starting {body[:16].hex(' ')}"
    if not text.strip():
        return "an empty body"
    shown = " ".join(text.split())
    shown = shown if len(shown) <= limit else shown[:limit] + "..."
    return json.dumps(shown, ensure_ascii=True)


def _cut_short(response: Any) -> bool:
    """Whether a body that is not JSON is one cut short: it starts as a JSON object and
    came without a length (so only the connection's end ended it). A server's own broken
    JSON looks the same; a retry costs little and the error says both."""
    if response.headers.get("content-length") is not None:
        return False
    return bytes(response.content).lstrip().startswith(b"{")


def _is_timeout(exc: BaseException) -> bool:
    import openai

    return isinstance(exc, openai.APITimeoutError)


def _duration(seconds: float) -> str:
    """Seconds as a person reads them: `45 s`, `3 min 5 s`."""
    whole = max(1, round(seconds))
    minutes, rest = divmod(whole, 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc.__context__
    return f"{type(inner).__name__}: {inner}" if inner is not None else str(exc)


def _error_text(exc: Any) -> str:
    """The server's own words: the error body's message if it has one, else the raw body."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            body = inner
        message = body.get("message") or body.get("detail") or (inner if isinstance(inner, str) else None)
        if message:
            return str(message)[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    response = getattr(exc, "response", None)
    text = getattr(response, "text", None) if response is not None else None
    return (text or str(exc))[:500]


def _mentions_tools(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _TOOL_WORDS)


def _retry_after(exc: Any) -> float | None:
    """Seconds the server asked us to wait (Retry-After or retry-after-ms), capped at a minute."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
        if 0 <= seconds <= 60:
            return seconds
    return None
