"""The viewer's pages: executions, one execution, agent runs, one run, function sets
(evaluations and trainings are in `math_pages`; what pages share is in `common`).

Each page is a handler `(request, store) -> response` wrapped by `page`, which opens the
log read-only for the request and closes it after. Queries come from `runner.logs.query`
and the record readers of `runner.logs`; no SQL lives here.

To add a page, write its handler and template here or in a module of its own (as
`math_pages` does), add its `Route`s to that module's `routes()` (the app gathers them; or
pass them to `create_app`), and, for a top-level page, a `Section` to `common.SECTIONS` so
the navigation bar shows it.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...errors import ConfigurationError, NotFoundError
from ...files import RASTER_IMAGES
from ...types import Limits, Status
from ..agent import AgentLog, load_executions
from ..functions import FunctionVersionLog
from ..query import (
    SORT_COLUMNS,
    Cursor,
    ExecutionFilter,
    Page,
    distinct_values,
    execution_links,
    list_executions,
    list_functions,
    list_runs,
    replays_of,
    run_statuses,
)
from ..search import parse_search
from ..store import LogStore
from . import html
from .common import page, param, render_page, time_param

# -- executions ------------------------------------------------------------------------------


def home(request: Request) -> Response:
    return RedirectResponse("/executions", 302)


def _search(request: Request) -> tuple[str | None, str | None]:
    """The page's search words, or (when they hold nothing to look for) why not: the page
    says so above an empty list, rather than listing everything."""
    query = param(request, "q")
    try:
        parse_search(query or "")
    except ConfigurationError as exc:
        return None, f"{exc.message}: {exc.fix}"
    return query, None


@page
def executions(request: Request, store: LogStore) -> Response:
    query, problem = _search(request)
    where = ExecutionFilter.of(
        status=param(request, "status"), backend=param(request, "backend"),
        source=param(request, "source"), function=param(request, "function"),
        since=time_param(request, "since"), until=time_param(request, "until"),
        query=query, agent_run=param(request, "run"))
    sort = param(request, "sort") or "started"
    if sort not in SORT_COLUMNS:
        raise ConfigurationError(f"cannot sort by {sort!r}", fix="sort by " + ", ".join(SORT_COLUMNS))
    order = param(request, "order") or "desc"
    if order not in ("asc", "desc"):
        raise ConfigurationError(f"order must be asc or desc, not {order!r}", fix="use asc or desc")
    after_text = param(request, "after")
    after = Cursor.decode(after_text) if after_text else None
    size = request.app.state.page_size
    result = Page(items=[], next_cursor=None) if problem else store.read(
        lambda conn: list_executions(conn, where, sort=sort, limit=size,
                                     descending=order == "desc", after=after))
    choices = store.read(lambda conn: {column: distinct_values(conn, column)
                                       for column in ("backend", "source", "function")})
    return render_page(request, "executions.html", {
        "page": result, "where": where, "sort": sort, "order": order, "first_page": after is None,
        "choices": choices, "statuses": [s.value for s in Status], "search_problem": problem,
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
        shown, left_out = html.cut(text, full=full)
        bodies[name] = {"text": shown, "left_out": left_out}
    limits = [(field, getattr(request_.limits, field), getattr(result.limits, field))
              for field in Limits.model_fields]
    return render_page(request, "execution.html", {
        "record": record, "result": result, "req": request_, "bodies": bodies, "limits": limits,
        "raster": RASTER_IMAGES,
        "agent_run_id": links[0], "agent_turn": links[1], "replay_of": links[2],
        "replays": store.read(lambda conn: replays_of(conn, record.id)),
        "full": full,
    })


# -- agent runs ------------------------------------------------------------------------------


@page
def runs(request: Request, store: LogStore) -> Response:
    after_text = param(request, "after")
    after = Cursor.decode(after_text) if after_text else None
    status = param(request, "status")
    query, problem = _search(request)
    size = request.app.state.page_size
    result = Page(items=[], next_cursor=None) if problem else store.read(
        lambda conn: list_runs(conn, status=status, query=query, after=after, limit=size))
    return render_page(request, "runs.html", {
        "page": result, "first_page": after is None, "search_problem": problem,
        "statuses": store.read(run_statuses),
        "form": {key: request.query_params.get(key, "") for key in ("q", "status")},
    })


@page
def run(request: Request, store: LogStore) -> Response:
    wanted = request.path_params["run_id"]
    agent_run = AgentLog(store).get(wanted)
    if agent_run.id != wanted:
        return RedirectResponse(f"/runs/{agent_run.id}", 302)
    return render_page(request, "run.html", {
        "run": agent_run, "executions": load_executions(store, agent_run),
        "last_turn": agent_run.turns[-1].number if agent_run.turns else None,
    })


# -- function sets ---------------------------------------------------------------------------


@page
def functions(request: Request, store: LogStore) -> Response:
    return render_page(request, "functions.html", {"functions": store.read(list_functions)})


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
    return render_page(request, "function.html", {
        "set_name": set_name, "function": function, "history": list(reversed(history))})


def routes() -> list[Route]:
    return [
        Route("/", home),
        Route("/executions", executions),
        Route("/executions/{execution_id}", execution),
        Route("/runs", runs),
        Route("/runs/{run_id}", run),
        Route("/functions", functions),
        Route("/functions/history", function_history),
    ]
