"""The viewer's pages: executions, one execution, agent runs, one run, function sets
(evaluations and trainings are in `math_pages`).

Each page is a handler `(request, store) -> response` wrapped by `page`, which opens the
log read-only for the request and closes it after. Queries come from `runner.logs.query`
and the record readers of `runner.logs`; no SQL lives here.

To add a page, write its handler and template here or in a module of its own (as
`math_pages` does), add its `Route`s to `routes()` (or pass them to `create_app`), and, for
a top-level page, a `Section` to `SECTIONS` so the navigation bar shows it.
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
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ...errors import ConfigurationError, LogStoreError, NotFoundError, RunnerError
from ...types import Limits, Status
from ..agent import AgentLog, load_executions
from ..functions import FunctionVersionLog
from ..query import (
    SORT_COLUMNS,
    Cursor,
    ExecutionFilter,
    distinct_values,
    execution_links,
    list_executions,
    list_functions,
    list_runs,
    parse_time,
    replays_of,
    run_statuses,
)
from ..render import format_duration
from ..store import LogStore
from . import render


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
        visible=render.visible, code=render.code_block, json_block=render.json_block,
        hits=render.hits, when=_when, duration=format_duration, kb=_kb, first_line=_first_line,
        to_json=lambda value: json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr),
    )
    return env


TEMPLATES = Jinja2Templates(env=_environment())


def _render(request: Request, name: str, context: Mapping[str, Any], status_code: int = 200
            ) -> Response:
    base = {"sections": SECTIONS, "current": request.url.path, "url_with": _url_with(request)}
    return TEMPLATES.TemplateResponse(request, name, {**base, **context}, status_code=status_code)


def _url_with(request: Request) -> Callable[..., str]:
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


def _param(request: Request, name: str) -> str | None:
    value = request.query_params.get(name)
    return value.strip() if value and value.strip() else None


def _time(request: Request, name: str) -> datetime | None:
    value = _param(request, name)
    return parse_time(value) if value else None


# -- executions ------------------------------------------------------------------------------


def home(request: Request) -> Response:
    return RedirectResponse("/executions", 302)


@page
def executions(request: Request, store: LogStore) -> Response:
    where = ExecutionFilter.of(
        status=_param(request, "status"), backend=_param(request, "backend"),
        source=_param(request, "source"), function=_param(request, "function"),
        since=_time(request, "since"), until=_time(request, "until"),
        query=_param(request, "q"), agent_run=_param(request, "run"))
    sort = _param(request, "sort") or "started"
    if sort not in SORT_COLUMNS:
        raise ConfigurationError(f"cannot sort by {sort!r}", fix="sort by " + ", ".join(SORT_COLUMNS))
    order = _param(request, "order") or "desc"
    if order not in ("asc", "desc"):
        raise ConfigurationError(f"order must be asc or desc, not {order!r}", fix="use asc or desc")
    after_text = _param(request, "after")
    after = Cursor.decode(after_text) if after_text else None
    size = request.app.state.page_size
    result = store.read(lambda conn: list_executions(conn, where, sort=sort, limit=size,
                                                     descending=order == "desc", after=after))
    choices = store.read(lambda conn: {column: distinct_values(conn, column)
                                       for column in ("backend", "source", "function")})
    return _render(request, "executions.html", {
        "page": result, "where": where, "sort": sort, "order": order, "first_page": after is None,
        "choices": choices, "statuses": [s.value for s in Status],
        "form": {key: request.query_params.get(key, "") for key in
                 ("q", "status", "backend", "source", "function", "since", "until", "run")},
    })


@page
def execution(request: Request, store: LogStore) -> Response:
    record = store.get_execution(request.path_params["execution_id"])
    if record.id != request.path_params["execution_id"]:
        return RedirectResponse(f"/executions/{record.id}", 302)  # a prefix: the real address
    full = request.query_params.get("full") == "1"
    result, request_ = record.result, record.request
    links = store.read(lambda conn: execution_links(conn, record.id))
    bodies = {}
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        shown, left_out = render.cut(text, full=full)
        bodies[name] = {"text": shown, "left_out": left_out}
    limits = [(field, getattr(request_.limits, field), getattr(result.limits, field))
              for field in Limits.model_fields]
    return _render(request, "execution.html", {
        "record": record, "result": result, "req": request_, "bodies": bodies, "limits": limits,
        "agent_run_id": links[0], "agent_turn": links[1], "replay_of": links[2],
        "replays": store.read(lambda conn: replays_of(conn, record.id)),
        "full": full,
    })


# -- agent runs ------------------------------------------------------------------------------


@page
def runs(request: Request, store: LogStore) -> Response:
    after_text = _param(request, "after")
    after = Cursor.decode(after_text) if after_text else None
    status = _param(request, "status")
    query = _param(request, "q")
    size = request.app.state.page_size
    result = store.read(lambda conn: list_runs(conn, status=status, query=query, after=after,
                                               limit=size))
    return _render(request, "runs.html", {
        "page": result, "first_page": after is None,
        "statuses": store.read(run_statuses),
        "form": {key: request.query_params.get(key, "") for key in ("q", "status")},
    })


@page
def run(request: Request, store: LogStore) -> Response:
    wanted = request.path_params["run_id"]
    agent_run = AgentLog(store).get(wanted)
    if agent_run.id != wanted:
        return RedirectResponse(f"/runs/{agent_run.id}", 302)
    return _render(request, "run.html", {
        "run": agent_run, "executions": load_executions(store, agent_run),
        "last_turn": agent_run.turns[-1].number if agent_run.turns else None,
    })


# -- function sets ---------------------------------------------------------------------------


@page
def functions(request: Request, store: LogStore) -> Response:
    return _render(request, "functions.html", {"functions": store.read(list_functions)})


@page
def function_history(request: Request, store: LogStore) -> Response:
    set_name = request.query_params.get("set")
    function = request.query_params.get("function")
    if not set_name or not function:
        raise ConfigurationError("which function? the address needs ?set=...&function=...",
                                 fix="pick one on the Functions page")
    history = FunctionVersionLog(store).history(set_name, function)
    if not history:
        raise NotFoundError(f"no history of function {function!r} in set {set_name!r}",
                            fix="pick one on the Functions page")
    return _render(request, "function.html", {
        "set_name": set_name, "function": function, "history": list(reversed(history))})


# -- errors ----------------------------------------------------------------------------------


async def _runner_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RunnerError)
    status = 404 if isinstance(exc, NotFoundError) else 400 \
        if isinstance(exc, ConfigurationError) else 503 if isinstance(exc, LogStoreError) else 500
    return _render(request, "error.html", {"status": status, "message": exc.message,
                                           "fix": exc.fix}, status_code=status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "no such page" if exc.status_code == 404 else str(exc.detail)
    return _render(request, "error.html", {"status": exc.status_code, "message": message,
                                           "fix": None}, status_code=exc.status_code)


EXCEPTION_HANDLERS: dict[Any, Callable[[Request, Exception], Any]] = {
    RunnerError: _runner_error,
    HTTPException: _http_error,
}


def routes() -> list[Route]:
    from . import math_pages

    return [
        Route("/", home),
        Route("/executions", executions),
        Route("/executions/{execution_id}", execution),
        Route("/runs", runs),
        Route("/runs/{run_id}", run),
        Route("/functions", functions),
        Route("/functions/history", function_history),
        *math_pages.routes(),
    ]
