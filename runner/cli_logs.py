"""`runner logs ...`: list, show, search, export, import, replay, stats, prune, check,
recover and serve the log.

Thin like the rest of the CLI: the queries live in `runner.logs`, this module parses and
prints. Human output is sanitised for a terminal (program and model text cannot move the
cursor, set the title or the clipboard) unless `--raw`, and coloured only on a terminal
without NO_COLOR; `--json` output and the log itself keep the exact text.

Reading commands open the database read-only when nothing needs writing first (see
`LogStore.for_reading`), so a log on a read-only mount can still be read.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import click

from .backends.registry import backend_names
from .cli_options import count_option, number
from .errors import ConfigurationError
from .terminal import Style
from .types import Status


class TimeParam(click.ParamType):  # type: ignore[type-arg]
    """`30m`, `12h`, `7d`, `2w` (that long ago), or an ISO date or date-time."""

    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> datetime:
        if isinstance(value, datetime):
            return value
        from .logs.query import parse_time

        try:
            return parse_time(str(value))
        except ConfigurationError as exc:
            self.fail(f"{exc.message}; {exc.fix}", param, ctx)


TIME = TimeParam()


def _echo(text: str, *, nl: bool = True, err: bool = False) -> None:
    # color=True: click would otherwise strip escape sequences when not on a terminal,
    # including the ones --raw promises to keep; Style decides about colour instead.
    click.echo(text, nl=nl, err=err, color=True)


def _style(raw: bool, stream: IO[Any] | None = None) -> Style:
    return Style.for_stream(stream or sys.stdout, raw=raw)


_RAW = click.option("--raw", is_flag=True,
                    help="Print control characters from programs and models as they are "
                         "(by default they are shown escaped, e.g. \\x1b).")


@click.group("logs")
def logs_group() -> None:
    """Browse, search, export, replay and prune the log of executions."""


def _search_words(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A search with nothing to look for (no letter or digit) is a usage error, not a match
    of everything."""
    from .logs.search import parse_search

    if value is not None:
        try:
            parse_search(value)
        except ConfigurationError as exc:
            raise click.BadParameter(f"{exc.message}; {exc.fix}") from None
    return value


@logs_group.command("list")
@click.option("-q", "--query", metavar="WORDS", callback=_search_words,
              help='Full-text search in code, output and errors: every word (or "quoted '
                   'phrase") must occur, as a word or a part of one, in any script.')
@click.option("--status", type=click.Choice([s.value for s in Status]), help="Only this status.")
@click.option("--backend", help="Only this backend.")
@click.option("--source", help="Only runs from this source (cli, api, demo, agent, replay, ...).")
@click.option("--function", "function", help="Only calls of this function.")
@click.option("--since", type=TIME, help="Only since then: 30m, 12h, 7d, 2w, or a date.")
@click.option("--until", type=TIME, help="Only before then.")
@click.option("--run", "run_id", metavar="RUN_ID", help="Only the executions of this agent run.")
@count_option()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@_RAW
def logs_list(query: str | None, status: str | None, backend: str | None, source: str | None,
              function: str | None, since: datetime | None, until: datetime | None,
              run_id: str | None, count: int, as_json: bool, raw: bool) -> None:
    """Recent executions, newest first, filtered and searched."""
    from .logs import LogStore, render_execution_list

    with LogStore.for_reading() as store:
        records = store.list_executions(status=status, backend=backend, source=source,
                                        function=function, since=since, until=until,
                                        query=query, agent_run=run_id, limit=count)
    if as_json:
        _echo(json.dumps([record.model_dump(mode="json") for record in records], ensure_ascii=False))
    else:
        _echo(render_execution_list(records, style=_style(raw)), nl=False)


@logs_group.command("show")
@click.argument("execution_id", metavar="ID")
@click.option("--json", "as_json", is_flag=True, help="Print the record as JSON.")
@click.option("--full", is_flag=True, help="Show long bodies whole (they are abridged otherwise).")
@_RAW
def logs_show(execution_id: str, as_json: bool, full: bool, raw: bool) -> None:
    """One execution: code, limits, output, error, timings (an id prefix is enough).

    Given an agent run's id, the conversation with the executions it caused, in order.
    A prefix that fits several ids lists them all, runs and executions."""
    from .logs import LogStore, render_execution
    from .logs.agent import find_agent_run, load_executions
    from .logs.agent_text import render_agent_run

    style = _style(raw)
    with LogStore.for_reading() as store:
        run = find_agent_run(store, execution_id)
        if run is not None:
            if as_json:
                _echo(json.dumps(run.to_json_dict(), ensure_ascii=False))
            else:
                _echo(render_agent_run(run, load_executions(store, run), style=style, full=full),
                      nl=False)
            return
        record = store.get_execution(execution_id)
    if as_json:
        _echo(json.dumps(record.model_dump(mode="json"), ensure_ascii=False))
    else:
        _echo(render_execution(record, style=style, full=full), nl=False)


@logs_group.command("files")
@click.argument("execution_id", metavar="ID")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Write the files into DIR (without it, list them).")
@click.option("--given", is_flag=True, help="The files handed to the run, not the ones it made.")
@click.option("--force", is_flag=True, help="With --out: replace files that are there already.")
@_RAW
def logs_files(execution_id: str, out: Path | None, given: bool, force: bool, raw: bool) -> None:
    """The files an execution made (or, with --given, was handed): listed, or written to
    DIR under their names (an id prefix is enough)."""
    from .files import format_size, output_file, save_files
    from .logs import LogStore

    with LogStore.for_reading() as store:
        record = store.get_execution(execution_id)
    files = [output_file(item.name, item.data) for item in record.request.files] if given \
        else list(record.result.files)
    if out is None:
        clean = _style(raw).text
        for item in files:
            note = "" if item.kept else "  (not kept: the log's cap for files was reached)"
            _echo(f"{clean(item.name)}  {format_size(item.size)}  {clean(item.media_type)}{note}")
        if not files:
            _echo(f"execution {record.id} has no files" + ("" if given else " it made"))
        return
    written = save_files(files, out, replace=force)
    missing = [item.name for item in files if not item.kept]
    click.echo(f"runner: wrote {len(written)} file(s) to {out}", err=True)
    if missing:
        click.echo(f"runner: {len(missing)} file(s) were recorded without their bytes (the log's "
                   "cap for files, RUNNER_LOG_FILES_MB, was reached)", err=True)


@logs_group.command("path")
def logs_path() -> None:
    """The SQLite file, for any SQLite tool."""
    from .paths import log_db_path

    _echo(str(log_db_path()))


@logs_group.command("export")
@click.option("--format", "output_format", type=click.Choice(["jsonl"]), default="jsonl",
              show_default=True,
              help="JSON Lines: one record per line (executions, agent runs and turns, function "
                   "versions, evaluations and their problems, trainings, epochs and actions).")
@click.option("--run", "run_id", metavar="RUN_ID", help="One agent run: it, its turns and executions.")
@click.option("--since", type=TIME, help="Everything started since then (30m, 7d, a date).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              default="-", help="Write to this file (default: standard output); it appears "
                                "only when the export is whole.")
def logs_export(output_format: str, run_id: str | None, since: datetime | None, output: Path) -> None:
    """Write the log (or part of it) as JSON Lines, for `runner logs import` elsewhere:
    everything it holds (executions, agent runs, the function history, evaluations and
    trainings), or what started since --since, or one agent run (--run)."""
    from .logs import LogStore
    from .logs.export_file import export_to_file, export_to_stream

    if run_id is not None and since is not None:
        raise click.UsageError("give --run or --since, not both")
    with LogStore.for_reading() as store:
        if str(output) == "-":
            count = export_to_stream(store, sys.stdout, run_id=run_id, since=since)
        else:
            count = export_to_file(store, output, run_id=run_id, since=since)
    _echo(f"exported {count} record{'' if count == 1 else 's'}", err=True)


@logs_group.command("import")
@click.argument("source", metavar="FILE|-")
def logs_import(source: str) -> None:
    """Read a `runner logs export` file into this log (all or nothing; existing rows stay).

    Every line is checked first, as the log's own records are made: a file that is not
    UTF-8, an id the log would not make, a negative duration or a time in the future is
    refused, naming the line, and nothing is imported."""
    from .logs import LogStore
    from .logs.transfer import import_lines

    if source == "-":
        handle, name = sys.stdin.buffer, "standard input"
    else:
        try:
            handle, name = open(source, "rb"), source  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise click.BadParameter(f"cannot read {source}: {exc.strerror}",
                                     param_hint="FILE") from None
    try:
        with LogStore() as store:
            report = import_lines(store, handle, source=name)
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
    _echo(f"imported {report.executions} executions, {report.agent_runs} agent runs, "
          f"{report.agent_turns} turns, {report.function_versions} function versions, "
          f"{report.evaluations} evaluations, {report.trainings} trainings "
          f"({report.already_present} already in the log)")


@logs_group.command("replay")
@click.argument("target", metavar="EXECUTION_ID|RUN_ID")
@click.option("--json", "as_json", is_flag=True,
              help="One JSON object per replayed execution: original, replay, verdict, ...")
@click.option("--backend", type=click.Choice(backend_names()),
              help="Replay on this tier (default: each execution's own).")
@click.option("--package", "packages", multiple=True, metavar="REQUIREMENT",
              help="Replay with this package set instead of the recorded one. Repeatable.")
@_RAW
def logs_replay(target: str, as_json: bool, backend: str | None, packages: tuple[str, ...],
                raw: bool) -> None:
    """Re-run a logged execution, or an agent run's executions turn by turn, and compare.

    Each replay is logged as a new execution linked to its original. The verdict is
    identical, different_output (with a diff) or different_status. An agent run's replay
    takes the model's part from the log (no model is contacted) and stops after the first
    turn that differs: the model would have read other feedback there. Exit status 0 when
    every replay is identical, 1 otherwise."""
    from .logs import LogStore
    from .logs.replay import Divergence, NotReplayed, Replayed, ReplayOutcome, replay

    style = _style(raw)
    err_style = _style(raw, sys.stderr)
    identical = True

    def show(item: Replayed) -> None:
        nonlocal identical
        if isinstance(item, NotReplayed):
            _echo(f"runner: not replayed: {item.original}: {item.reason}", err=True)
            return
        if isinstance(item, Divergence):
            identical = False
            if as_json:
                _echo(json.dumps({"diverged": item.model_dump(mode="json")}))
            else:
                _echo(f"run {item.run} diverges at turn {item.turn} of {item.turns}: "
                      f"{item.reason}")
            return
        identical = identical and item.verdict == "identical"
        for warning in item.warnings:
            _echo(f"runner: warning: {item.original}: {err_style.text(warning)}", err=True)
        if as_json:
            _echo(json.dumps(item.to_json_dict(), ensure_ascii=False))
            return
        statuses = (item.original_status if item.original_status == item.replay_status
                    else f"{item.original_status} -> {item.replay_status}")
        turn = f"turn {item.turn}: " if item.turn is not None else ""
        _echo(f"{turn}{item.original} -> {item.replay}: {style.status(str(item.verdict))} "
              f"({statuses})")
        for line in item.diff.splitlines():
            _echo("    " + style.diff_line(style.text(line)))

    with LogStore() as store:
        outcomes = replay(store, target, on_outcome=show, backend=backend,
                          packages=list(packages) if packages else None)
    if not any(isinstance(item, ReplayOutcome) for item in outcomes):
        _echo("runner: nothing was replayed", err=True)
        identical = False
    sys.exit(0 if identical else 1)


@logs_group.command("stats")
@click.option("--days", type=number(1, 3660, integer=True), default=14, show_default=True,
              help="How many days the per-day counts cover.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def logs_stats(days: int, as_json: bool) -> None:
    """Counts by status, backend, source and day; agent runs; the database's size."""
    from .logs import LogStore
    from .logs.query import stats

    with LogStore.for_reading() as store:
        numbers = store.read(lambda conn: stats(conn, days=days))
        path = store.path
    if as_json:
        _echo(json.dumps({"path": str(path), **numbers.model_dump(mode="json")}, ensure_ascii=False))
        return
    style = _style(False)
    # Free pages are what VACUUM (run by `runner logs prune`) gives back; none, nothing to say.
    free = (f" ({_size(numbers.free_bytes)} free: `runner logs prune` gives it back)"
            if numbers.free_bytes else "")
    lines = [f"database    {path}",
             f"size        {_size(numbers.database_bytes)}{free}",
             f"executions  {numbers.executions:,}"
             + (f" from {numbers.oldest:%Y-%m-%d} to {numbers.newest:%Y-%m-%d}"
                if numbers.oldest and numbers.newest else ""),
             f"agent runs  {numbers.agent_runs:,} ({numbers.agent_turns:,} turns)",
             f"functions   {numbers.function_versions:,} recorded changes",
             f"replays     {numbers.replays:,}"]
    for title, counts in (("by status", numbers.by_status), ("by backend", numbers.by_backend),
                          ("by source", numbers.by_source),
                          (f"by day (UTC, last {days} days)", numbers.by_day),
                          ("agent runs by status", numbers.agent_runs_by_status)):
        if counts:
            lines += ["", title]
            width = max(len(key) for key in counts)
            for key, value in counts.items():
                name = style.status(key) if "status" in title else style.text(key)
                lines.append(f"  {name}{' ' * (width - len(key))}  {value:>9,}")
    _echo("\n".join(lines))


def _size(count: int) -> str:
    size = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return f"{size:,.1f} GB"


@logs_group.command("prune")
@click.option("--before", type=TIME, required=True,
              help="Delete what started before then: 30d (older than 30 days), 2w, a date.")
@click.option("--dry-run", is_flag=True, help="Only count what would be deleted.")
@click.option("--yes", "-y", "assume_yes", is_flag=True,
              help="Delete without asking (needed where standard input is not a terminal).")
def logs_prune(before: datetime, dry_run: bool, assume_yes: bool) -> None:
    """Delete old executions, agent runs (with their turns and search index), evaluations and
    trainings, then VACUUM.

    It says what it would delete and asks first, on a terminal; --yes skips the question
    (and is needed without a terminal); --dry-run only counts. Function versions are kept:
    they are the history of what the sets are now. What a kept record points at (an older
    conversation behind a newer evaluation's verdict) is kept."""
    from .logs import LogStore
    from .logs.maintenance import prune

    when = f"{before.astimezone():%Y-%m-%d %H:%M %Z}"
    with LogStore() as store:
        planned = prune(store, before, dry_run=True)
        if dry_run:
            _echo(f"would delete {_pruned(planned)} started before {when}")
            _echo_skipped(planned)
            return
        if not planned.total:
            _echo_skipped(planned)
            _echo(f"nothing {'else ' if planned.skipped else ''}started before {when}: "
                  "nothing to delete")
            return
        if not assume_yes:
            if not sys.stdin.isatty():
                raise click.UsageError(
                    f"this would delete {_pruned(planned)} started before {when}; without a "
                    "terminal to ask on, pass --yes to delete them (or --dry-run to count)")
            if not click.confirm(f"delete {_pruned(planned)} started before {when}?",
                                 default=False, err=True):
                _echo("nothing was deleted")
                return
        report = prune(store, before)
    _echo(f"deleted {_pruned(report)} started before {when}")
    _echo_skipped(report)
    _echo(f"database: {_size(report.bytes_before)} -> {_size(report.bytes_after)}")


def _echo_skipped(report: Any) -> None:
    """Name what prune left alone because a live process still runs it."""
    if not report.skipped:
        return
    own = f", with {report.skipped_runs:,} agent runs of theirs" if report.skipped_runs else ""
    _echo(f"kept {len(report.skipped)} job(s) that a live process still runs{own}:")
    for job in report.skipped:
        _echo(f"  {job.kind} {job.id} ({job.where})")


def _pruned(report: Any) -> str:
    return (f"{report.executions:,} executions, {report.agent_runs:,} agent runs "
            f"({report.agent_turns:,} turns)"
            + (f", {report.evaluations:,} evaluations and {report.trainings:,} trainings"
               if report.evaluations or report.trainings else ""))


@logs_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def logs_check(as_json: bool) -> None:
    """Whether the log is sound: it opens, SQLite's integrity check passes, and every row
    reads as a record. Exit status 1 when something is damaged (`runner logs recover`)."""
    from .logs.recovery import check
    from .paths import log_db_path

    report = check(log_db_path())
    if as_json:
        _echo(json.dumps({**report.model_dump(mode="json"), "ok": report.ok}, ensure_ascii=False))
    else:
        clean = _style(False).text
        lines = [f"database    {report.path}",
                 f"opens       {'yes' if report.open_error is None else 'no: ' + clean(report.open_error)}",
                 f"integrity   {clean('; '.join(report.integrity))}",
                 "rows        " + (", ".join(f"{table} {count:,}" for table, count in report.rows.items())
                                   or "none readable")]
        for row in report.damaged_rows:
            lines.append(f"damaged     {row.table} {row.id}: {clean(row.error)}")
        lines.append("the log is sound" if report.ok else
                     "the log is damaged: `runner logs recover` copies every readable row into "
                     "a new log and keeps this file beside it"
                     + ("; a damaged row alone can also be fixed or deleted with a SQLite tool"
                        if report.damaged_rows and report.open_error is None else ""))
        _echo("\n".join(lines))
    if not report.ok:
        sys.exit(1)


@logs_group.command("recover")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--force", is_flag=True,
              help="Recover even while other processes have the log open (what they write "
                   "meanwhile is lost).")
def logs_recover(as_json: bool, force: bool) -> None:
    """Copy every readable row of a damaged log into a new log that takes its place; the
    damaged file is kept beside it (runner.db.damaged-<time>). Refused while other
    processes have the log open (it names them)."""
    from .logs.recovery import check, recover
    from .paths import log_db_path

    path = log_db_path()
    before = check(path)
    if before.ok:
        if as_json:
            _echo(json.dumps({"path": str(path), "recovered": False, "reason": "the log is sound"}))
        else:
            _echo(f"{path} is sound: nothing to recover")
        return
    report = recover(path, force=force)
    if as_json:
        _echo(json.dumps({**report.model_dump(mode="json"), "recovered": True,
                          "copied": report.copied}, ensure_ascii=False))
        return
    _echo(f"recovered {report.copied:,} rows into {report.path}")
    for table in report.tables:
        if table.copied or table.unreadable:
            lost = f" ({table.unreadable:,} unreadable, lost)" if table.unreadable else ""
            _echo(f"  {table.table:<22} {table.copied:>9,}{lost}")
    _echo(f"the damaged file is kept as {report.damaged_copy}")


@logs_group.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but loopback requires a token (printed once).")
@click.option("--port", type=number(0, 65535, integer=True), default=8765, show_default=True,
              help="Port (0 picks a free one).")
def logs_serve(host: str, port: int) -> None:
    """A read-only web viewer of the log: executions, search, agent runs, function sets."""
    from .logs import LogStore
    from .logs.viewer import serve

    with LogStore.for_reading() as store:  # brings an older log up to date first, if it can
        path = store.path
    serve(path, host=host, port=port, announce=_echo)
