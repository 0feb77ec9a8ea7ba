"""The viewer's math pages: evaluations and AgentOptimizer trainings.

- `/evaluations`: newest first, with progress and accuracy;
- `/evaluations/{id}`: the settings, accuracy by type, by level and by both, the chart
  (a PNG drawn on the server by the same code as `runner math report --chart`, inlined as
  a `data:` image, which the Content-Security-Policy allows for images only), and the
  problems, each with its verdict and a link to its conversation (filterable to the wrong
  or right ones, paginated by position);
- `/trainings`: newest first, with the best success rate;
- `/trainings/{id}`: the success rate per epoch (table and chart), every action the
  optimizer proposed with the reason it was refused or what its smoke call showed, the
  rollbacks, and links to each epoch's evaluation, each optimizer conversation and each
  function's history.

Everything a model or a dataset wrote (problems, answers, reasons, names) goes through
autoescaping like every page; the charts are images, so no text of theirs is markup.
"""

from __future__ import annotations

import base64
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...errors import ConfigurationError
from ..evaluations import EvaluationLog
from ..query import Cursor
from ..rows import to_iso
from ..store import LogStore
from ..trainings import TrainingLog
from .common import page, param, render_page


def _png(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _before(request: Request) -> tuple[Cursor | None, tuple[str, str] | None]:
    text = param(request, "after")
    if text is None:
        return None, None
    cursor = Cursor.decode(text)
    return cursor, (str(cursor.value), cursor.id)


def _next(records: list[Any], size: int) -> str | None:
    if len(records) <= size:
        return None
    last = records[size - 1]
    return Cursor(value=to_iso(last.created_at), id=last.id).encode()


# -- evaluations -----------------------------------------------------------------------------


@page
def evaluations(request: Request, store: LogStore) -> Response:
    size = request.app.state.page_size
    cursor, before = _before(request)
    log = EvaluationLog(store)
    records = log.list(limit=size + 1, before=before)
    shown = records[:size]
    return render_page(request, "evaluations.html", {
        "records": shown, "progress": log.progress([r.id for r in shown]),
        "trainings": {r.id: TrainingLog(store).for_evaluation(r.id) for r in shown},
        "page": {"next_cursor": _next(records, size)}, "first_page": cursor is None})


@page
def evaluation(request: Request, store: LogStore) -> Response:
    from ...math.report import build_report, chart_png

    wanted = request.path_params["evaluation_id"]
    log = EvaluationLog(store)
    record = log.get(wanted)
    if record.id != wanted:
        return RedirectResponse(f"/evaluations/{record.id}", 302)
    report = build_report(record, log.summary(record.id))
    verdict = param(request, "correct")
    if verdict not in (None, "0", "1"):
        raise ConfigurationError(f"correct must be 0 or 1, not {verdict!r}",
                                 fix="use correct=0 (wrong answers) or correct=1 (right ones)")
    after_text = param(request, "after")
    try:
        after = int(after_text) if after_text is not None else None
    except ValueError:
        raise ConfigurationError("the page link is damaged", fix="go back to the first page") from None
    size = request.app.state.page_size
    items = log.items(record.id, correct=None if verdict is None else verdict == "1",
                      after=after, limit=size + 1)
    return render_page(request, "evaluation.html", {
        "report": report, "record": record, "data": report.to_json_dict(),
        "chart": _png(chart_png(report)) if report.total else None,
        "items": items[:size], "next_after": items[size - 1].position if len(items) > size else None,
        "first_page": after is None, "correct": verdict,
        "training": TrainingLog(store).for_evaluation(record.id)})


# -- trainings -------------------------------------------------------------------------------


@page
def trainings(request: Request, store: LogStore) -> Response:
    size = request.app.state.page_size
    cursor, before = _before(request)
    records = TrainingLog(store).list(limit=size + 1, before=before)
    return render_page(request, "trainings.html", {
        "records": records[:size], "page": {"next_cursor": _next(records, size)},
        "first_page": cursor is None})


@page
def training(request: Request, store: LogStore) -> Response:
    from ...math.training_report import build_training_report, training_chart_png

    wanted = request.path_params["training_id"]
    log = TrainingLog(store)
    record = log.get(wanted)
    if record.id != wanted:
        return RedirectResponse(f"/trainings/{record.id}", 302)
    report = build_training_report(log, record)
    endings: dict[int, list[Any]] = {}
    for action in log.actions(record.id):
        if action.outcome in ("terminated", "ended"):
            endings.setdefault(action.epoch, []).append(action)
    measured = any(epoch.success_rate is not None for epoch in report.epochs)
    return render_page(request, "training.html", {
        "report": report, "record": record, "endings": endings,
        "chart": _png(training_chart_png(report)) if measured else None,
        "best": (record.best_functions or {}).get("functions") or []})


def routes() -> list[Route]:
    return [
        Route("/evaluations", evaluations),
        Route("/evaluations/{evaluation_id}", evaluation),
        Route("/trainings", trainings),
        Route("/trainings/{training_id}", training),
    ]
