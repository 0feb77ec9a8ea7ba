"""Training reports: what each epoch measured, what the optimizer did, what was rolled back.

`TrainingReport` is read from the log (`runner.logs.trainings`), so a report of a
training in progress, one resumed after a crash and one finished all read the same way.
It is what `runner.math.train` returns: `functions` is the best set (the one saved),
`history` the epochs. Forms: one JSON object (`runner math train --json`, `runner math
report TRAINING_ID --format json`), Markdown, a terminal table, and a PNG chart of the success
rate per epoch. Names and texts from models are escaped for Markdown and cleaned for the
terminal, as in `runner.math.report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..functions import FunctionSet
from ..logs.trainings import ActionRecord, EpochRecord, TrainingLog, TrainingRecord
from ..terminal import sanitize_for_terminal as clean_text
from ..text_table import columns
from .report import _md, _plain, _table, figure_png

__all__ = ["EpochSummary", "TrainingReport", "build_training_report", "render_training_markdown",
           "render_training_text", "training_chart_png", "write_training_chart"]


class EpochSummary(BaseModel):
    """One epoch: the set it measured, the optimizer's actions that made it, the decision."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    epoch: int
    status: str  # step, evaluate, done
    outcome: str | None = None  # baseline, improved, kept, rolled_back, unchanged
    success_rate: float | None = None
    correct: int | None = None
    total: int | None = None
    evaluation_id: str | None = None
    step_end: str | None = None
    functions: list[dict[str, Any]] = Field(default_factory=list)  # name, version
    actions: list[dict[str, Any]] = Field(default_factory=list)  # accepted
    rejected: list[dict[str, Any]] = Field(default_factory=list)  # with code and reason
    optimizer_runs: list[str] = Field(default_factory=list)

    @property
    def rolled_back(self) -> bool:
        return self.outcome == "rolled_back"

    def to_json_dict(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), "rolled_back": self.rolled_back}


class TrainingReport(BaseModel):
    """A training as the log has it; `functions` is its best set, `history` its epochs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record: TrainingRecord
    epochs: list[EpochSummary]

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def history(self) -> list[EpochSummary]:
        return self.epochs

    @property
    def best_success_rate(self) -> float | None:
        return self.record.best_success_rate

    @property
    def path(self) -> str | None:
        return self.record.out_path

    @property
    def functions(self) -> FunctionSet:
        """The best set (empty before the first measurement)."""
        data = self.record.best_functions or {"name": self.record.set_name, "functions": []}
        return FunctionSet.from_data(data, name=self.record.set_name,
                                     where=f"training {self.id}'s best set", log_store=False)

    def to_json_dict(self) -> dict[str, Any]:
        """What `runner math train --json` prints."""
        record = self.record
        return {
            "id": record.id, "status": str(record.status), "stop_reason": record.stop_reason,
            "epochs": [epoch.to_json_dict() for epoch in self.epochs],
            "best_success_rate": record.best_success_rate, "best_epoch": record.best_epoch,
            "path": record.out_path, "set_name": record.set_name,
            "functions": _names(record.best_functions),
            "model": record.model, "base_url": record.base_url,
            "optimizer_model": record.optimizer_model,
            "optimizer_base_url": record.optimizer_base_url, "method": record.method,
            "backend": record.backend,
            "dataset": {"name": record.dataset, "split": record.split,
                        "path": record.dataset_path, "sha256": record.dataset_sha256},
            "settings": record.settings, "created_at": record.created_at.isoformat(),
            "finished_at": record.finished_at.isoformat() if record.finished_at else None,
            "error": record.error,
            "resume": None if str(record.status) == "finished" else
            f"runner math train --resume {record.id}",
        }


def _names(functions: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "version": f.get("version")}
            for f in (functions or {}).get("functions") or []]


def _summary(epoch: EpochRecord, actions: list[ActionRecord]) -> EpochSummary:
    accepted, rejected, runs = [], [], []
    for action in actions:
        if action.agent_run_id and action.agent_run_id not in runs:
            runs.append(action.agent_run_id)
        if action.outcome == "accepted":
            accepted.append({"action": action.action, "function": action.function,
                             "note": action.reason, "agent_run_id": action.agent_run_id,
                             "function_version_id": action.function_version_id,
                             "rolled_back": action.rolled_back})
        elif action.outcome == "rejected":
            rejected.append({"action": action.action, "function": action.function,
                             "code": action.code, "reason": action.reason,
                             "agent_run_id": action.agent_run_id})
    return EpochSummary(
        epoch=epoch.epoch, status=epoch.status, outcome=epoch.outcome,
        success_rate=epoch.success_rate, correct=epoch.correct, total=epoch.total,
        evaluation_id=epoch.evaluation_id, step_end=epoch.step_end,
        functions=_names(epoch.functions), actions=accepted, rejected=rejected,
        optimizer_runs=runs)


def build_training_report(log: TrainingLog, record: TrainingRecord) -> TrainingReport:
    actions: dict[int, list[ActionRecord]] = {}
    for action in log.actions(record.id):
        actions.setdefault(action.epoch, []).append(action)
    return TrainingReport(record=record, epochs=[_summary(epoch, actions.get(epoch.epoch, []))
                                                 for epoch in log.epochs(record.id)])


def _versions_text(functions: dict[str, Any] | None) -> str:
    return ", ".join(f"{clean_text(str(f['name']))} v{f['version']}" for f in _names(functions))


def _rate(epoch: EpochSummary) -> str:
    if epoch.success_rate is None:
        return "-"
    return f"{epoch.success_rate * 100:.1f}% ({epoch.correct}/{epoch.total})"


def _action_text(action: dict[str, Any]) -> str:
    if not action.get("action"):
        return "(a reply without a readable action)"
    verb = str(action["action"]).removesuffix("_function")
    return f"{verb} {action.get('function') or '?'}"


def render_training_text(report: TrainingReport) -> str:
    """The table for the terminal: one line per epoch, then the outcome."""
    record = report.record
    header = ["EPOCH", "SUCCESS", "DECISION", "ACTIONS", "REJECTED"]
    rows = []
    for epoch in report.epochs:
        rows.append([str(epoch.epoch), _rate(epoch), epoch.outcome or epoch.status,
                     clean_text(", ".join(_action_text(a) for a in epoch.actions) or "-"),
                     str(len(epoch.rejected))])
    lines = columns(header, rows)
    best = ("-" if record.best_success_rate is None else
            f"{record.best_success_rate * 100:.1f}% at epoch {record.best_epoch}")
    lines += ["", f"training {record.id} · {record.status}"
              + (f" · {clean_text(record.stop_reason)}" if record.stop_reason else ""),
              f"best {best}: {_versions_text(record.best_functions) or 'no functions'}",
              (f"model {clean_text(record.model or '-')} · optimizer "
               f"{clean_text(record.optimizer_model or '-')} · method {record.method} · backend "
               f"{record.backend}"),
              f"training problems {clean_text(record.dataset)}"
              + (f" ({record.split})" if record.split else "")]
    if record.out_path:
        lines.append(f"saved to {clean_text(record.out_path)} (set {clean_text(record.set_name)})")
    if record.error:
        lines.append(f"stopped early: [{record.error.get('code')}] "
                     f"{clean_text(str(record.error.get('message')))}")
    return "\n".join(lines) + "\n"


def render_training_markdown(report: TrainingReport) -> str:
    record = report.record
    best = ("-" if record.best_success_rate is None else
            f"{record.best_success_rate * 100:.1f}% at epoch {record.best_epoch}")
    lines = [f"# Training {record.id}", "",
             f"**Best training success rate: {best}**" + (
                 f" ({_md(record.stop_reason)})" if record.stop_reason else ""), ""]
    facts = [
        ["Agent model", _md(record.model or "-") + (f" at {_md(record.base_url)}" if record.base_url else "")],
        ["Optimizer model", _md(record.optimizer_model or "-") + (
            f" at {_md(record.optimizer_base_url)}" if record.optimizer_base_url else "")],
        ["Method", _md(record.method)], ["Backend", _md(record.backend)],
        ["Training problems", _md(record.dataset + (f" ({record.split})" if record.split else ""))
         + f", file {_md(record.dataset_path)}, sha256 {record.dataset_sha256}"],
        ["Function set", _md(record.set_name) + (f", saved to {_md(record.out_path)}"
                                                  if record.out_path else "")],
        ["Status", _md(str(record.status))],
    ]
    lines += _table(["Setting", "Value"], facts, numbers=False)
    if record.error:
        lines += ["", (f"Stopped early: [{_md(record.error.get('code'))}] "
                       f"{_md(record.error.get('message'))}")]
    lines += ["", "## Epochs", ""]
    lines += _table(["Epoch", "Success rate", "Decision", "Actions", "Rejected"],
                    [[str(e.epoch), _rate(e), _md(e.outcome or e.status),
                      _md(", ".join(_action_text(a) for a in e.actions) or "-"),
                      str(len(e.rejected))] for e in report.epochs], numbers=False)
    refused = [(e.epoch, r) for e in report.epochs for r in e.rejected]
    if refused:
        lines += ["", "## Refused actions", ""]
        lines += _table(["Epoch", "Action", "Code", "Reason"],
                        [[str(epoch), _md(_action_text(r)), _md(r.get("code") or "-"),
                          _md(str(r.get("reason") or ""))] for epoch, r in refused],
                        numbers=False)
    return "\n".join(lines) + "\n"


# -- chart -------------------------------------------------------------------------------------

def training_chart_png(report: TrainingReport) -> bytes:
    """A PNG line chart of the success rate per epoch: kept epochs joined by the line, rolled
    back ones marked apart, the best rate as a dashed line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    measured = [e for e in report.epochs if e.success_rate is not None]
    figure = Figure(figsize=(max(5.0, 0.7 * len(report.epochs) + 3), 4.2), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    kept = [e for e in measured if not e.rolled_back]
    if kept:
        axes.plot([e.epoch for e in kept], [(e.success_rate or 0) * 100 for e in kept],
                  marker="o", color="#4c72b0", label="kept")
    dropped = [e for e in measured if e.rolled_back]
    if dropped:
        axes.scatter([e.epoch for e in dropped], [(e.success_rate or 0) * 100 for e in dropped],
                     marker="x", s=60, color="#c44e52", label="rolled back", zorder=3)
    if report.record.best_success_rate is not None:
        axes.axhline(report.record.best_success_rate * 100, linestyle="--", color="#55a868",
                     linewidth=1, label="best")
    axes.set_xticks([e.epoch for e in report.epochs] or [0])
    axes.set_xlabel("epoch")
    axes.set_ylim(0, 105)
    axes.set_ylabel("training success rate (%)")
    axes.set_title(f"{_plain(report.record.model or '-')} · {_plain(report.record.set_name)}",
                   fontsize=10)
    axes.grid(alpha=0.3)
    if measured:
        axes.legend(fontsize=7, loc="lower right", frameon=False)
    figure.tight_layout()
    return figure_png(figure)


def write_training_chart(report: TrainingReport, path: str | Path) -> Path:
    target = Path(path)
    target.write_bytes(training_chart_png(report))
    return target
