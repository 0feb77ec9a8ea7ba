"""`runner math eval|evals|report`: evaluate a model on a dataset, list the evaluations, and
report one (or a training).

`eval` shows a progress bar on stderr and prints the table by type and level (or, with
`--json`, one JSON object); it exits 0 when every problem is done and 1 when it stopped
early (it says how to resume). Ctrl-C stops it within seconds (`cli_interrupt`): the
problems in progress stay pending, it prints the report (with `--json`, its one JSON
object, status interrupted) and the resume command, exit status 130.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .backends.registry import backend_names
from .cli_interrupt import JobStopping, ctrl_c
from .cli_math import _solve_options, _variant, math_group
from .cli_options import count_option, llm_options, model_options, number
from .errors import ConfigurationError
from .stopping import JobInterrupted
from .terminal import sanitize_for_terminal as clean_text
from .text_table import columns

_SEED = number(0, 2**63 - 1, integer=True)
_SEED = number(0, 2**63 - 1, integer=True)

class _ProgressBar:
    """The evaluation's progress on stderr: a bar with done/total, accuracy so far, elapsed
    time and the time left (rich; a plain final line where stderr is no terminal)."""

    def __init__(self, *, announce: bool = True) -> None:
        from rich.console import Console

        self.announce = announce  # a training's epochs are resumed with the training
        self.record_id: str | None = None  # the evaluation's, once it has one
        self.console = Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None
        self.done = 0
        self.correct = 0

    def _accuracy(self) -> str:
        return f"{self.correct / self.done * 100:5.1f}% ({self.correct}/{self.done})" \
            if self.done else "    -"

    def started(self, record: Any, *, done: int, correct: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.done, self.correct = done, correct
        self.record_id = record.id
        if self.announce:
            click.echo(f"evaluation {record.id}: {record.total} problems"
                       + (f", {done} done before" if done else "")
                       + f" (resume with: runner math eval --resume {record.id})", err=True)
        self.progress = Progress(
            TextColumn("solving"), BarColumn(), MofNCompleteColumn(),
            TextColumn("accuracy {task.fields[accuracy]}"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(), console=self.console)
        self.progress.start()
        self.task = self.progress.add_task("solving", total=record.total, completed=done,
                                           accuracy=self._accuracy())

    def item_done(self, item: Any, *, correct: bool) -> None:
        self.done += 1
        self.correct += int(correct)
        self.progress.update(self.task, advance=1, accuracy=self._accuracy())

    def finished(self, record: Any) -> None:
        if self.progress is not None:
            self.progress.stop()


def _print_report(report: Any, as_json: bool) -> None:
    from .math.report import render_text

    if as_json:
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    else:
        click.echo(render_text(report), nl=False)
    print_job_error(report.record.error, f"runner math eval --resume {report.id}")


def print_job_error(error: dict[str, Any] | None, resume: str) -> None:
    """What stopped an evaluation or a training, its fix, and the command that goes on
    (on stderr; nothing for Ctrl-C, which the command reports itself)."""
    if error and error.get("code") != "INTERRUPTED":
        click.echo(f"runner: error [{error.get('code')}]: {clean_text(str(error.get('message')))}",
                   err=True)
        if error.get("fix"):
            click.echo(f"runner: fix: {clean_text(str(error.get('fix')))}", err=True)
        click.echo(f"runner: then continue with: {resume}", err=True)


_RESUME_KEEPS = ("dataset", "split", "types", "levels", "limit", "seed", "method",
                 "variant", "functions_path", "backend", "max_turns", "timeout_s", "native_tools",
                 "on_bad_line", "temperature", "max_tokens")


@math_group.command("eval")
@click.option("--dataset", metavar="NAME|FILE.jsonl",
              help="math, math500, gsm8k (fetched by `runner math data`) or a MATH-format JSONL "
                   "file.")
@click.option("--split", help="The named dataset's split (math: test or train).")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help='Only problems of this type, e.g. "Number Theory". Repeatable.')
@click.option("--level", "levels", multiple=True, metavar="LEVEL",
              help="Only problems of this level (1-5). Repeatable.")
@click.option("--limit", type=number(1, 10**9, integer=True), help="At most this many problems.")
@click.option("--seed", type=_SEED, help="Draw the --limit problems at random with this seed "
                                         "(default: the first ones).")
@click.option("--concurrency", type=number(1, 64, integer=True), default=1,
              show_default=True, help="Problems solved at once, each in its own session.")
@_solve_options
@model_options
@click.option("--on-bad-line", "--on-error", "on_bad_line", type=click.Choice(["stop", "skip"]),
              default="stop", show_default=True,
              help="A dataset line that is not a usable problem: stop (listing the bad lines) "
                   "or skip it (listed in the report).")
@click.option("--resume", "resume_id", metavar="EVAL_ID",
              help="Continue an interrupted evaluation with its own settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def eval_command(ctx: click.Context, dataset: str | None, split: str | None,
                 types: tuple[str, ...], levels: tuple[str, ...], limit: int | None,
                 seed: int | None, concurrency: int, method: str, variant: str,
                 functions_path: str | None, backend: str, max_turns: int | None, timeout_s: float | None,
                 native_tools: bool, model: str | None, base_url: str | None,
                 api_key: str | None, temperature: float | None, max_tokens: int | None,
                 llm_timeout: float, retries: int, on_bad_line: str, resume_id: str | None,
                 as_json: bool) -> None:
    """Evaluate a model on a dataset: accuracy by type and level, every conversation logged.

    An interrupted evaluation (error, Ctrl-C, even a killed process) continues with
    `runner math eval --resume EVAL_ID`: done problems are never run or counted again.
    Ctrl-C stops it within seconds, the problems in progress left pending."""
    progress = _ProgressBar()
    stopping = JobStopping("eval", as_json, lambda: progress.record_id)
    with ctrl_c("the evaluation", stopping.quit):
        try:
            report = _evaluate(ctx, progress, dataset=dataset, split=split, types=types,
                               levels=levels, limit=limit, seed=seed, concurrency=concurrency,
                               method=method, variant=variant, functions_path=functions_path,
                               backend=backend,
                               max_turns=max_turns, timeout_s=timeout_s,
                               native_tools=native_tools, model=model, base_url=base_url,
                               api_key=api_key, temperature=temperature, max_tokens=max_tokens,
                               llm_timeout=llm_timeout, retries=retries,
                               on_bad_line=on_bad_line, resume_id=resume_id)
        except JobInterrupted as stopped:
            stopping.interrupted(stopped.report, _print_report)
        except KeyboardInterrupt:
            stopping.interrupted_early()
        _print_report(report, as_json)
    sys.exit(0 if report.pending == 0 else 1)


def _evaluate(ctx: click.Context, progress: _ProgressBar, *, dataset: str | None,
              split: str | None, types: tuple[str, ...], levels: tuple[str, ...],
              limit: int | None, seed: int | None, concurrency: int, method: str,
              variant: str, functions_path: str | None, backend: str, max_turns: int | None,
              timeout_s: float | None, native_tools: bool, model: str | None,
              base_url: str | None, api_key: str | None, temperature: float | None,
              max_tokens: int | None, llm_timeout: float, retries: int, on_bad_line: str,
              resume_id: str | None) -> Any:
    """The evaluation `runner math eval` asked for, new or resumed; its report."""
    from .math.evaluation import evaluate, resume_evaluation
    from .types import Limits

    if resume_id is not None:
        given = [name for name in _RESUME_KEEPS
                 if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
        if given:
            shown = ", ".join("--" + name.replace("_path", "").replace("_s", "").replace("_", "-")
                              .replace("types", "type").replace("levels", "level")
                              for name in given)
            raise click.UsageError(f"a resumed evaluation keeps its own settings; leave out "
                                   f"{shown} (only the model's address, key, timeouts and "
                                   "--concurrency may change)")
        options = llm_options(llm_timeout=llm_timeout, retries=retries)
        return resume_evaluation(
            resume_id, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options=options,
            concurrency=concurrency if ctx.get_parameter_source("concurrency")
            is click.core.ParameterSource.COMMANDLINE else None,
            progress=progress)
    if dataset is None:
        raise click.UsageError("give --dataset NAME|FILE.jsonl (or --resume EVAL_ID)")
    report = evaluate(
        dataset, model=model or None, base_url=base_url or None, api_key=api_key or None,
        llm_options=llm_options(temperature=temperature, max_tokens=max_tokens,
                                llm_timeout=llm_timeout, retries=retries),
        split=split, types=types or None, levels=levels or None, limit=limit, seed=seed,
        method=method, variant=_variant(method, variant), functions=functions_path,
        backend=backend, concurrency=concurrency,
        max_turns=max_turns, limits=Limits(timeout_s=timeout_s) if timeout_s is not None else None,
        native_tools=native_tools, on_bad_line="skip" if on_bad_line == "skip" else "stop",
        progress=progress)
    skipped = report.record.settings.get("sample", {}).get("skipped_lines") or []
    for line in skipped:
        click.echo(f"runner: skipped bad line {clean_text(line)}", err=True)
    return report


@math_group.command("evals")
@count_option()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def evals_command(count: int, as_json: bool) -> None:
    """Evaluations, newest first, with their progress (done/total) and accuracy."""
    from .logs.evaluations import EvaluationLog

    evaluations = EvaluationLog.for_reading()
    records = evaluations.list(limit=count)
    progress = evaluations.progress([record.id for record in records])
    rows: list[dict[str, Any]] = []
    for record in records:
        done, correct = progress[record.id]
        rows.append({"id": record.id, "created_at": record.created_at.isoformat(),
                     "status": str(record.status), "done": done, "total": record.total,
                     "correct": correct, "accuracy": correct / done if done else 0.0,
                     "model": record.model, "method": record.method, "backend": record.backend,
                     "dataset": record.dataset, "split": record.split})
    if as_json:
        click.echo(json.dumps(rows, ensure_ascii=False))
        return
    if not rows:
        click.echo("no evaluations")
        return
    header = ["ID", "CREATED", "STATUS", "DONE", "ACCURACY", "METHOD", "MODEL", "DATASET"]
    table = [[row["id"], records[i].created_at.astimezone().strftime("%Y-%m-%d %H:%M"),
              row["status"], f"{row['done']}/{row['total']}",
              f"{row['accuracy'] * 100:.1f}%" if row["done"] else "-", row["method"],
              clean_text(row["model"] or "-"),
              clean_text(row["dataset"] + (f" ({row['split']})" if row["split"] else ""))]
             for i, row in enumerate(rows)]
    click.echo("\n".join(columns(header, table)))


@math_group.command("rescore")
@click.argument("evaluation_id", metavar="EVAL_ID")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def rescore_command(evaluation_id: str, as_json: bool) -> None:
    """Judge an evaluation's recorded final answers again with this installation's answer
    checker (no model, no sandbox; nothing written): which verdicts change, right to wrong
    and wrong to right, and both checkers' versions. Exit status 0 when none changes."""
    from .math.rescore import rescore

    report = rescore(evaluation_id)
    if as_json:
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
        sys.exit(1 if report.changed else 0)
    click.echo(f"evaluation {report.evaluation_id}: {report.judged} answers judged again "
               f"({report.pending} pending, not judged)")
    click.echo(f"  judged with  {clean_text(report.judged_with)}")
    click.echo(f"  checker now  {clean_text(report.checker)}")
    click.echo(f"  unchanged {report.unchanged}, right -> wrong {len(report.right_to_wrong)}, "
               f"wrong -> right {len(report.wrong_to_right)}")
    total = report.judged or 1
    click.echo(f"  correct {report.correct_before} -> {report.correct_after} "
               f"({report.correct_before / total * 100:.1f}% -> "
               f"{report.correct_after / total * 100:.1f}%)")
    for title, changes in (("right -> wrong", report.right_to_wrong),
                           ("wrong -> right", report.wrong_to_right)):
        for change in changes:
            click.echo(f"{title}  #{change.position} {clean_text(change.problem_id)}: answer "
                       f"{clean_text(change.answer or '(none)')!s} vs gold "
                       f"{clean_text(change.gold)} ({clean_text(change.rule)}: "
                       f"{clean_text(change.reason)})")
    sys.exit(1 if report.changed else 0)


@math_group.command("replay")
@click.argument("evaluation_id", metavar="EVAL_ID")
@click.option("--backend", type=click.Choice(backend_names()),
              help="Replay on this tier (default: as recorded).")
@click.option("--package", "packages", multiple=True, metavar="REQUIREMENT",
              help="Replay with this package set instead of the recorded one. Repeatable.")
@click.option("--concurrency", type=number(1, 64, integer=True), default=1, show_default=True,
              help="Conversations replayed at once.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def replay_command(evaluation_id: str, backend: str | None, packages: tuple[str, ...],
                   concurrency: int, as_json: bool) -> None:
    """Replay every conversation of an evaluation offline: the model's replies from the log,
    every block and call run again (on --backend / --package if given), each turn compared,
    up to the first that differs. Exit status 0 when every conversation replays identically."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from .logs.evaluations import EvaluationLog
    from .math.replay_eval import replay_evaluation

    total = sum(1 for item in EvaluationLog.for_reading().items(
        EvaluationLog.for_reading().get(evaluation_id).id) if item.status == "done")
    with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(),
                  console=Console(stderr=True), disable=as_json) as progress:
        task = progress.add_task("replaying", total=total)
        report = replay_evaluation(evaluation_id, backend=backend,
                                   packages=list(packages) if packages else None,
                                   concurrency=concurrency,
                                   on_problem=lambda _: progress.advance(task))
    if as_json:
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    else:
        click.echo(f"evaluation {report.evaluation_id}: {len(report.problems)} conversations "
                   f"replayed on {report.backend or 'their own tiers'}"
                   + (f" with {', '.join(report.packages)}" if report.packages else ""))
        click.echo(f"  identical {report.identical}, diverged {report.diverged}, not replayed "
                   f"{report.not_replayed}")
        for problem in report.problems:
            if problem.outcome == "diverged":
                click.echo(f"  #{problem.position} {clean_text(problem.problem_id)}: diverges at "
                           f"turn {problem.diverged_at} of {problem.turns} "
                           f"(runner logs replay {problem.run_id})")
            elif problem.outcome == "not_replayed":
                click.echo(f"  #{problem.position} {clean_text(problem.problem_id)}: not "
                           f"replayed: {problem.reason}")
    sys.exit(0 if report.diverged == 0 and report.not_replayed == 0 else 1)


@math_group.command("report")
@click.argument("report_id", metavar="EVAL_ID|TRAINING_ID")
@click.option("--format", "output_format", type=click.Choice(["md", "json", "text"]),
              default="md", show_default=True, help="Markdown, one JSON object, or the table.")
@click.option("--chart", "chart_path", type=click.Path(dir_okay=False, writable=True),
              callback=lambda ctx, param, value: _chart_target(value),
              help="Also write a PNG chart: accuracy by type and level (an evaluation), or the "
                   "success rate per epoch (a training).")
def report_command(report_id: str, output_format: str, chart_path: str | None) -> None:
    """The report of an evaluation (accuracy by type and level) or of a training (success
    rate per epoch, actions, rollbacks), finished or not."""
    from .logs.evaluations import EvaluationLog
    from .logs.trainings import TrainingLog

    if EvaluationLog.for_reading().find(report_id) is None and \
            TrainingLog.for_reading().find(report_id) is not None:
        _training_report(report_id, output_format, chart_path)
        return
    from .math.evaluation import evaluation_report
    from .math.report import render_markdown, render_text, write_chart

    report = evaluation_report(report_id)
    _show_report(report, output_format, render_text, render_markdown)
    if chart_path is not None:
        _write_chart(lambda: write_chart(report, chart_path), chart_path)


def _show_report(report: Any, output_format: str, text: Callable[[Any], str],
                 markdown: Callable[[Any], str]) -> None:
    """An evaluation's or a training's report in the format asked for."""
    if output_format == "json":
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    else:
        click.echo((text if output_format == "text" else markdown)(report), nl=False)


def _chart_target(path: str | None) -> str | None:
    """--chart names a file in a directory that exists (checked before the report is
    printed, so that a typo costs a usage error, not a report without its chart)."""
    if path is None:
        return None
    parent = Path(path).expanduser().parent
    if not parent.is_dir():
        raise click.BadParameter(f"cannot write {path}: there is no directory {parent}",
                                 param_hint="--chart")
    return path


def _write_chart(write: Callable[[], Path], path: str) -> None:
    try:
        written = write()
    except OSError as exc:
        raise ConfigurationError(f"cannot write the chart to {path}: {exc.strerror or exc}",
                                 fix="choose a file in a directory you can write to") from None
    click.echo(f"chart written to {written}", err=True)


def _training_report(training_id: str, output_format: str, chart_path: str | None) -> None:
    from .math.training import training_report
    from .math.training_report import (
        render_training_markdown,
        render_training_text,
        write_training_chart,
    )

    report = training_report(training_id)
    _show_report(report, output_format, render_training_text, render_training_markdown)
    if chart_path is not None:
        _write_chart(lambda: write_training_chart(report, chart_path), chart_path)
