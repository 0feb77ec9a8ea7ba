"""What every page of the viewer shares: the navigation, the templates and their filters,
the page wrapper that opens the log read-only per request, query parameters, and the
error pages.

`pages` (executions, agent runs, function sets) and `math_pages` (evaluations,
trainings) build on this; the app (`app.create_app`) puts their routes together.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ...errors import ConfigurationError, LogStoreError, NotFoundError, RunnerError
from ...files import format_size
from ..execution_text import format_duration, status_label
from ..query import parse_time
from ..store import LogStore
from . import html


@dataclass(frozen=True)
class Section:
    """An entry of the navigation bar."""

    title: str
    path: str


SECTIONS: list[Section] = [
    Section("Executions", "/executions"),
    Section("Agent runs", "/runs"),
    Section("Functions", "/functions"),
    Section("Evaluations", "/evaluations"),
    Section("Trainings", "/trainings"),
]


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _kb(kb: int) -> str:
    if kb <= 0:
        return "-"
    return f"{kb:,} kB" if kb < 10 * 1024 else f"{kb / 1024:,.1f} MB"


def _first_line(text: str, width: int = 80) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(no code)"
    first = lines[0]
    if len(first) > width:
        return first[: width - 1] + "…"
    return first + (" …" if len(lines) > 1 else "")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=True,  # every template, whatever its name
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        visible=html.visible, code=html.code_block, json_block=html.json_block,
        hits=html.hits, when=_when, duration=format_duration, kb=_kb, first_line=_first_line,
        to_json=lambda value: json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr),
        shown_status=status_label, filesize=format_size,
    )
    env.globals["stop_words"] = STOP_WORDS
    return env


# What an error code says to a reader of the "Stopped" row (the message and fix follow).
STOP_WORDS = {
    "INTERRUPTED": "interrupted",
    "LLM_UNAVAILABLE": "the model server could not be reached",
    "LLM_AUTHENTICATION": "the model server refused the key",
    "LLM_PROTOCOL": "the model server stopped speaking the OpenAI protocol",
    "LLM_REQUEST": "the model server refused the request",
    "LLM_ERROR": "the model server failed",
    "TOOLS_UNSUPPORTED": "the model server has no tool calls",
    "CRASHED": "a failure inside runner",
    "INTERNAL": "a failure inside runner",
    "RUN_LOST": "the backend lost a run",
    "JOB_RUNNING": "another process runs it",
}

TEMPLATES = Jinja2Templates(env=_environment())


def render_page(request: Request, name: str, context: Mapping[str, Any], status_code: int = 200
            ) -> Response:
    base = {"sections": SECTIONS, "current": request.url.path, "url_with": url_with(request)}
    return TEMPLATES.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def url_with(request: Request) -> Callable[..., str]:
    """`url_with(key=value, ...)`: this page's address with some parameters changed
    (None removes one). Any change but `after` itself starts again at the first page."""
    def build(**changes: Any) -> str:
        params = dict(request.query_params)
        if "after" not in changes:
            params.pop("after", None)
        for key, value in changes.items():
            if value is None or value == "":
                params.pop(key, None)
            else:
                params[key] = str(value)
        return request.url.path + (f"?{urlencode(params)}" if params else "")
    return build


Handler = Callable[[Request, LogStore], Response]


def page(handler: Handler) -> Callable[[Request], Response]:
    """The endpoint of a page: the log opened read-only for this request only."""
    @functools.wraps(handler)
    def endpoint(request: Request) -> Response:
        with LogStore(request.app.state.db_path, read_only=True) as store:
            return handler(request, store)
    return endpoint


def param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value.strip() if value and value.strip() else None


def time_param(request: Request, name: str) -> datetime | None:
    value = param(request, name)
    return parse_time(value) if value else None


# -- errors ----------------------------------------------------------------------------------


async def _runner_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunnerError)
    status = 404 if isinstance(exc, NotFoundError) else 400 \
        if isinstance(exc, ConfigurationError) else 503 if isinstance(exc, LogStoreError) else 500
    return render_page(request, "error.html", {"status": status, "message": exc.message,
                                           "fix": exc.fix}, status_code=status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return render_page(request, "error.html", {"status": exc.status_code, "message": message,
                                           "fix": None}, status_code=exc.status_code)


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Any]] = {
    RunnerError: _runner_error,
    HTTPException: _http_error,
}
