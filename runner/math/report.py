"""Evaluation reports: one JSON object, a Markdown page, a terminal table and a bar chart.

Every form states what a number depends on: the model (and its server and sampling
settings), the method and MathChat's variant, the backend, the dataset (with its file's SHA-256), the sample
(filters, limit, seed, size) and the checker's version. `total` counts the problems
judged so far (all of the sample once the evaluation has finished) and `accuracy` is
`correct / total`; `pending` says how many are still to run.

Names in a report (types, the model's name) come from data files and servers: they are
escaped for Markdown and cleaned of control characters for the terminal.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..logs.evaluations import NO_LEVEL, EvaluationRecord, Summary, Tally
from ..terminal import sanitize_for_terminal as clean_text
from ..text_table import columns

__all__ = ["EvaluationReport", "build_report", "chart_png", "recorded_variant", "render_markdown",
           "render_text", "write_chart"]


def recorded_variant(method: str, settings: dict[str, Any]) -> str | None:
    """The MathChat variant an evaluation ran with; one recorded before MathChat had
    variants ran what is now `guided`."""
    if "variant" in settings:
        variant = settings["variant"]
        return variant if isinstance(variant, str) else None
    return "guided" if method == "mathchat" else None


class EvaluationReport(BaseModel):
    """An evaluation's settings and its counts, as read from the log."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record: EvaluationRecord
    summary: Summary

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def correct(self) -> int:
        return self.summary.correct

    @property
    def total(self) -> int:
        return self.summary.done

    @property
    def pending(self) -> int:
        return self.record.total - self.summary.done

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    @property
    def variant(self) -> str | None:
        return recorded_variant(self.record.method, self.record.settings)

    @property
    def method_text(self) -> str:
        """`mathchat (variant default)`, or the method alone."""
        variant = self.variant
        return f"{self.record.method} (variant {variant})" if variant else self.record.method

    @property
    def by_type(self) -> dict[str, Tally]:
        return self.summary.by_type

    @property
    def by_level(self) -> dict[str, Tally]:
        return self.summary.by_level

    def sample_text(self) -> str:
        """The sample in words, e.g. "50 of 500 problems (the first 50; type Algebra)"."""
        sample = self.record.settings.get("sample") or {}
        available = sample.get("available", self.record.total)
        how = []
        if self.record.total < available:
            how.append(f"{self.record.total} drawn with seed {sample['seed']}"
                       if sample.get("seed") is not None else f"the first {self.record.total}")
        for key, value in (sample.get("filters") or {}).items():
            how.append(f"{key.rstrip('s')} {', '.join(str(v) for v in value)}")
        skipped = sample.get("skipped_lines") or []
        if skipped:
            how.append(f"{len(skipped)} bad line{'s' if len(skipped) != 1 else ''} skipped")
        text = f"{self.record.total} of {available} problems"
        return text + (f" ({'; '.join(how)})" if how else "")

    def to_json_dict(self) -> dict[str, Any]:
        """What `runner math eval --json` and `runner math report ID --format json` print."""
        record = self.record
        settings = dict(record.settings)
        sample = settings.pop("sample", {}) or {}
        functions = settings.pop("functions", None)
        return {
            "id": record.id, "status": str(record.status), "accuracy": self.accuracy,
            "correct": self.correct, "total": self.total, "pending": self.pending,
            "by_type": {key: tally.to_dict() for key, tally in self.by_type.items()},
            "by_level": {key: tally.to_dict() for key, tally in self.by_level.items()},
            "by_type_level": {kind: {level: tally.to_dict() for level, tally in levels.items()}
                              for kind, levels in self.summary.by_type_level.items()},
            "run_statuses": self.summary.run_statuses,
            "model": record.model, "base_url": record.base_url, "method": record.method,
            "variant": self.variant, "backend": record.backend,
            "dataset": {"name": record.dataset, "split": record.split, "path": record.dataset_path,
                        "sha256": record.dataset_sha256},
            "sample": {"size": record.total, "description": self.sample_text(), **sample},
            "checker_version": record.checker_version,
            "functions": None if not functions else {
                "name": functions.get("name"),
                "functions": [{"name": f.get("name"), "version": f.get("version")}
                              for f in functions.get("functions") or []]},
            "settings": settings,
            "created_at": record.created_at.isoformat(),
            "finished_at": record.finished_at.isoformat() if record.finished_at else None,
            "error": record.error,
            # how to go on with an evaluation that stopped early (None once it is finished)
            "resume": None if str(record.status) == "finished" else
            f"runner math eval --resume {record.id}",
        }


def build_report(record: EvaluationRecord, summary: Summary) -> EvaluationReport:
    return EvaluationReport(record=record, summary=summary)


def _percent(tally: Tally) -> str:
    return f"{tally.accuracy * 100:.1f}%" if tally.total else "-"


def _levels(report: EvaluationReport) -> list[str]:
    return list(report.by_level)


# -- Markdown --------------------------------------------------------------------------------

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def _md(text: object) -> str:
    """Data as inert Markdown text: one line, special characters escaped."""
    flat = " ".join(clean_text(str(text)).split())
    return _MARKDOWN_SPECIAL.sub(r"\\\1", flat)


def _table(header: list[str], rows: list[list[str]], *, numbers: bool = True) -> list[str]:
    """A Markdown table; with `numbers`, every column after the first is right-aligned."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 or not numbers else "---:"
                            for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(report: EvaluationReport) -> str:
    record = report.record
    settings = record.settings
    functions = settings.get("functions") or {}
    function_names = ", ".join(f"{f.get('name')} v{f.get('version')}"
                               for f in functions.get("functions") or [])
    llm = settings.get("llm") or {}
    lines = [f"# Evaluation {record.id}", "",
             f"**Accuracy: {report.accuracy * 100:.1f}%** ({report.correct} of {report.total} "
             "problems correct" + (f"; {report.pending} still pending" if report.pending else "")
             + ")", ""]
    facts = [
        ["Model", _md(record.model or "-") + (f" at {_md(record.base_url)}" if record.base_url else "")],
        ["Sampling", _md(", ".join(f"{k} {v}" for k, v in llm.items()) or "the server's defaults")],
        ["Method", (_md(report.method_text) + f", at most {_md(settings.get('max_turns') or '-')} "
                    "model messages per problem")],
        ["Backend", _md(record.backend)],
        ["Functions", _md(f"{functions.get('name')}: {function_names}") if functions else "none"],
        ["Dataset", _md(record.dataset + (f" ({record.split})" if record.split else ""))
         + f", file {_md(record.dataset_path)}, sha256 {record.dataset_sha256}"],
        ["Sample", _md(report.sample_text())],
        ["Checker", _md(record.checker_version)],
        ["Status", _md(str(record.status)) + (f" at {record.finished_at:%Y-%m-%d %H:%M UTC}"
                                               if record.finished_at else "")],
    ]
    lines += _table(["Setting", "Value"], facts, numbers=False)
    if record.error:
        lines += ["", (f"Stopped early: [{_md(record.error.get('code'))}] "
                       f"{_md(record.error.get('message'))}")]
    lines += ["", "## By type", ""]
    lines += _table(["Type", "Correct", "Total", "Accuracy"],
                    [[_md(name), str(t.correct), str(t.total), _percent(t)]
                     for name, t in report.by_type.items()])
    lines += ["", "## By level", ""]
    lines += _table(["Level", "Correct", "Total", "Accuracy"],
                    [[_md(name), str(t.correct), str(t.total), _percent(t)]
                     for name, t in report.by_level.items()])
    levels = _levels(report)
    if len(report.by_type) > 1 or len(levels) > 1:
        lines += ["", "## By type and level (correct / total)", ""]
        rows = []
        for name, by_level in report.summary.by_type_level.items():
            rows.append([_md(name)] + [f"{by_level[level].correct}/{by_level[level].total}"
                                       if level in by_level else "-" for level in levels])
        lines += _table(["Type", *(_md(level) for level in levels)], rows)
    if report.summary.run_statuses:
        lines += ["", "## How the conversations ended", ""]
        lines += _table(["Ending", "Problems"], [[_md(status), str(count)] for status, count
                                                 in report.summary.run_statuses.items()])
    return "\n".join(lines) + "\n"


# -- terminal --------------------------------------------------------------------------------


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    """A name, then numbers aligned right."""
    return columns(header, rows, right=range(1, len(header)))


def render_text(report: EvaluationReport) -> str:
    """The final table for the terminal: accuracy by type and by level, then the settings."""
    record = report.record

    def rows(groups: dict[str, Tally]) -> list[list[str]]:
        return [[clean_text(name), str(t.correct), str(t.total), _percent(t)]
                for name, t in groups.items()]

    overall = Tally(correct=report.correct, total=report.total)
    lines = _columns(["TYPE", "CORRECT", "TOTAL", "ACCURACY"],
                     [*rows(report.by_type), ["all", str(overall.correct), str(overall.total),
                                              _percent(overall)]])
    lines.append("")
    lines += _columns(["LEVEL", "CORRECT", "TOTAL", "ACCURACY"], rows(report.by_level))
    lines += ["",
              f"evaluation {record.id} · {record.status}"
              + (f" · {report.pending} pending" if report.pending else ""),
              (f"model {clean_text(record.model or '-')} · method {report.method_text} · backend "
               f"{record.backend}"),
              (f"dataset {clean_text(record.dataset)}"
               + (f" ({record.split})" if record.split else "")
               + f" · {clean_text(report.sample_text())}"),
              f"checker {record.checker_version}"]
    if record.error:
        lines.append(f"stopped early: [{record.error.get('code')}] "
                     f"{clean_text(str(record.error.get('message')))}")
    return "\n".join(lines) + "\n"


# -- chart -------------------------------------------------------------------------------------


def _plain(text: object) -> str:
    """Data as literal chart text: `$` would start matplotlib's math mode."""
    return clean_text(str(text)).replace("$", r"\$")


def _short(text: str, width: int = 32) -> str:
    """A label that fits under its bar (the tables have the whole name)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def write_chart(report: EvaluationReport, path: str | Path) -> Path:
    """A PNG bar chart of accuracy by type: one bar for the type, then one per level."""
    target = Path(path)
    target.write_bytes(chart_png(report))
    return target


def chart_png(report: EvaluationReport) -> bytes:
    """The chart of `write_chart`, as PNG bytes (the viewer shows it inline)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    types = list(report.by_type)
    levels = [level for level in _levels(report) if level != NO_LEVEL] or _levels(report)
    series = ["all levels", *levels]
    width = 0.8 / len(series)
    figure = Figure(figsize=(max(6.0, 1.4 * len(types) + 2), 4.8), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    colours = ["#333333", "#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974", "#64b5cd",
               "#8c8c8c", "#e377c2"]
    for index, name in enumerate(series):
        values = []
        for kind in types:
            tally = report.by_type[kind] if name == "all levels" else \
                report.summary.by_type_level.get(kind, {}).get(name)
            values.append(tally.accuracy * 100 if tally is not None and tally.total else 0.0)
        positions = [i - 0.4 + width * (index + 0.5) for i in range(len(types))]
        bars = axes.bar(positions, values, width, label=_plain(name),
                        color=colours[index % len(colours)])
        if index == 0:  # the type's own accuracy, written on its bar
            axes.bar_label(bars, labels=[f"{value:.0f}" for value in values], fontsize=7,
                           padding=1)
    axes.set_xticks(range(len(types)))
    axes.set_xticklabels([_short(_plain(kind)) for kind in types], rotation=20, ha="right",
                         fontsize=8)
    axes.set_ylim(0, 118)  # headroom for the legend above the bars
    axes.set_yticks(range(0, 101, 20))
    axes.set_ylabel("accuracy (%)")
    record = report.record
    axes.set_title(f"{_plain(record.model or '-')} · {report.method_text} · "
                   f"{_plain(record.dataset)}: {report.accuracy * 100:.1f}% of {report.total}",
                   fontsize=10)
    axes.legend(fontsize=7, ncols=min(len(series), 7), loc="upper center", frameon=False)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    return figure_png(figure)


def figure_png(figure: Any) -> bytes:
    """A matplotlib figure as PNG bytes."""
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
