"""`runner math train|trainings`: train a function list with the AgentOptimizer, list the
trainings.

`train` shows a line per epoch and per optimizer action on stderr and prints the table of
epochs (or one JSON object) on stdout; exit 0 when it finished, 1 when it stopped early
(it says why, and how to resume), 130 for Ctrl-C (as `math eval`). `optimize` and
`optimizations`, the commands' names before "training" became the one word for it, still
work and are not listed.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import click

from .backends.base import DEFAULT_BACKEND
from .cli_interrupt import JobStopping, ctrl_c
from .cli_math import _variant, _variant_option, math_group
from .cli_math_eval import _SEED, _ProgressBar, print_job_error
from .cli_options import count_option, limit, llm_options, model_options, number
from .stopping import JobInterrupted
from .terminal import sanitize_for_terminal as clean_text
from .text_table import columns

# -- training a function list ------------------------------------------------------------------


def _backend_names() -> list[str]:
    from .backends.registry import backend_names

    return backend_names()


class _TrainingProgress:
    """A training's progress on stderr: a line per epoch (success rate, actions, decision),
    each optimizer conversation as it ends, and each epoch's evaluation as a progress bar."""

    def __init__(self, *, bars: bool) -> None:
        self.bars = bars
        self.record_id: str | None = None  # the training's, once it has one

    def started(self, record: Any, *, resumed: bool) -> None:
        self.record_id = record.id
        click.echo(f"training {record.id}: {clean_text(record.dataset)}"
                   + (f" ({record.split})" if record.split else "")
                   + f", up to {record.epochs} epoch{'s' if record.epochs != 1 else ''}"
                   + f", set {clean_text(record.set_name)}"
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
        if record.best_success_rate is None:
            return
        best = f"{record.best_success_rate * 100:.1f}% at epoch {record.best_epoch}"
        if str(record.status) != "finished":  # stopped: the error says what became of --out
            click.echo(f"best so far: {best}", err=True)
            return
        click.echo(f"best: {best}"
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
@click.option("--limit", type=number(1, 10**9, integer=True),
              help="At most this many training problems.")
@click.option("--seed", type=_SEED, help="Draw the --limit problems at random with this seed.")
@click.option("--epochs", type=number(1, 10_000, integer=True), default=5, show_default=True,
              help="Optimizer steps, each followed by a measurement (after epoch 0, the "
                   "starting set's).")
@click.option("--concurrency", type=number(1, 64, integer=True), default=1, show_default=True,
              help="Problems solved at once in each measurement.")
@click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
              help="The starting function set (default: none).")
@click.option("--method", type=click.Choice(["mathchat", "pot"]), default="mathchat",
              show_default=True, help="How the agent solves problems.")
@_variant_option
@click.option("--backend", type=click.Choice(_backend_names()), default=DEFAULT_BACKEND,
              show_default=True, help="Isolation tier.")
@click.option("--max-turns", type=number(1, 200, integer=True),
              help="Model messages per problem at most (default 16 for mathchat, 15 for its "
                   "guided variant).")
@click.option("--timeout", "timeout_s", type=limit("timeout_s"),
              help="Wall-clock limit of each code block in seconds (default 10; 5 for "
                   "mathchat's default and python variants, as AutoGen's proxy).")
@click.option("--native-tools/--no-native-tools", default=True, show_default=True,
              help="Also offer the functions as native tool calls to the agent.")
@model_options
@click.option("--optimizer-model", help="The optimizer's model (default: --model).")
@click.option("--optimizer-base-url", help="The optimizer's endpoint (default: --base-url).")
@click.option("--optimizer-api-key", envvar="RUNNER_OPTIMIZER_API_KEY", show_envvar=True,
              help="The optimizer's API key (default: --api-key).")
@click.option("--optimizer-protocol", type=click.Choice(["auto", "tools", "json"]),
              default="auto", show_default=True,
              help="tools: native tool calls; json: one JSON object per reply; auto: tool "
                   "calls, or JSON when the server has none.")
@click.option("--optimizer-max-tokens", type=number(1, 10_000_000, integer=True),
              help="Tokens per optimizer reply at most (default: --max-tokens).")
@click.option("--max-actions", type=number(1, 1000, integer=True), default=3,
              show_default=True, help="Accepted actions per optimizer step at most.")
@click.option("--max-tries", type=number(1, 1000, integer=True), default=3, show_default=True,
              help="Optimizer replies per action at most (each refusal is explained to it).")
@click.option("--patience", type=number(1, 10_000, integer=True), default=2,
              show_default=True, help="Stop after this many epochs without improvement.")
@click.option("--history-tokens", type=number(100, 10_000_000, integer=True), default=6000,
              show_default=True,
              help="Tokens of conversations and results in an optimizer request at most.")
@click.option("--show-rolled-back/--no-show-rolled-back", default=True, show_default=True,
              help="Show the optimizer the changes that were rolled back before.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, writable=True),
              help="Where to save the best function set (a file runner agent, runner call and "
                   "runner math eval --functions load).")
@click.option("--set-name", help="The trained set's name in the function history, one no "
                                 "other set has (default: the --out file's name, with -2, -3, "
                                 "... when that one is taken).")
@click.option("--resume", "resume_id", metavar="TRAINING_ID",
              help="Continue an interrupted training with its own settings.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.pass_context
def train_command(ctx: click.Context, train: str | None, types: tuple[str, ...],
                     levels: tuple[str, ...], limit: int | None, seed: int | None, epochs: int,
                     concurrency: int, functions_path: str | None, method: str, variant: str,
                     backend: str,
                     max_turns: int | None, timeout_s: float | None, native_tools: bool,
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

    progress = _TrainingProgress(bars=not as_json)
    stopping = JobStopping("train", as_json, lambda: progress.record_id)
    with ctrl_c("the training", stopping.quit):
        try:
            report = _train(ctx, progress, train=train, types=types, levels=levels, limit=limit,
                            seed=seed, epochs=epochs, concurrency=concurrency,
                            functions_path=functions_path, method=method, variant=variant,
                            backend=backend,
                            max_turns=max_turns, timeout_s=timeout_s, native_tools=native_tools,
                            model=model, base_url=base_url, api_key=api_key,
                            temperature=temperature, max_tokens=max_tokens,
                            llm_timeout=llm_timeout, retries=retries,
                            optimizer_model=optimizer_model,
                            optimizer_base_url=optimizer_base_url,
                            optimizer_api_key=optimizer_api_key,
                            optimizer_protocol=optimizer_protocol,
                            optimizer_max_tokens=optimizer_max_tokens, max_actions=max_actions,
                            max_tries=max_tries, patience=patience,
                            history_tokens=history_tokens, show_rolled_back=show_rolled_back,
                            out_path=out_path, set_name=set_name, resume_id=resume_id)
        except JobInterrupted as stopped:
            stopping.interrupted(stopped.report, _print_training)
        except KeyboardInterrupt:
            stopping.interrupted_early()
        _print_training(report, as_json)
    sys.exit(0 if str(report.record.status) == "finished" else 1)


def _print_training(report: Any, as_json: bool) -> None:
    from .math.training_report import render_training_text

    if as_json:
        click.echo(json.dumps(report.to_json_dict(), ensure_ascii=False))
    else:
        click.echo(render_training_text(report), nl=False)
    print_job_error(report.record.error, f"runner math train --resume {report.id}")


def _train(ctx: click.Context, progress: _TrainingProgress, *, train: str | None,
           types: tuple[str, ...], levels: tuple[str, ...], limit: int | None,
           seed: int | None, epochs: int, concurrency: int, functions_path: str | None,
           method: str, variant: str, backend: str, max_turns: int | None,
           timeout_s: float | None,
           native_tools: bool, model: str | None, base_url: str | None, api_key: str | None,
           temperature: float | None, max_tokens: int | None, llm_timeout: float,
           retries: int, optimizer_model: str | None, optimizer_base_url: str | None,
           optimizer_api_key: str | None, optimizer_protocol: str,
           optimizer_max_tokens: int | None, max_actions: int, max_tries: int, patience: int,
           history_tokens: int, show_rolled_back: bool, out_path: str | None,
           set_name: str | None, resume_id: str | None) -> Any:
    """The training `runner math train` asked for, new or resumed; its report."""
    from .math import training
    from .types import Limits

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
        return training.resume_training(
            resume_id, model=model or None, base_url=base_url or None, api_key=api_key or None,
            llm_options=llm_options(llm_timeout=llm_timeout, retries=retries),
            optimizer_model=optimizer_model, optimizer_base_url=optimizer_base_url,
            optimizer_api_key=optimizer_api_key,
            concurrency=concurrency if ctx.get_parameter_source("concurrency")
            is click.core.ParameterSource.COMMANDLINE else None, progress=progress)
    if train is None:
        raise click.UsageError("give --train NAME[:SPLIT[:TYPE]]|FILE.jsonl (or --resume TRAINING_ID)")
    options = llm_options(temperature=temperature, max_tokens=max_tokens,
                          llm_timeout=llm_timeout, retries=retries)
    optimizer_options = dict(options)
    if optimizer_max_tokens is not None:
        optimizer_options["max_tokens"] = optimizer_max_tokens
    return training.train(
        train, model=model or None, base_url=base_url or None, api_key=api_key or None,
        llm_options=options, optimizer_model=optimizer_model or None,
        optimizer_base_url=optimizer_base_url or None,
        optimizer_api_key=optimizer_api_key or None, optimizer_llm_options=optimizer_options,
        types=types or None, levels=levels or None, limit=limit, seed=seed, epochs=epochs,
        functions=functions_path, method=method, variant=_variant(method, variant),
        backend=backend, concurrency=concurrency,
        max_turns=max_turns, limits=Limits(timeout_s=timeout_s) if timeout_s is not None else None,
        native_tools=native_tools, max_actions=max_actions, max_tries=max_tries,
        patience=patience, show_rolled_back=show_rolled_back, history_tokens=history_tokens,
        optimizer_protocol=optimizer_protocol, out=out_path, set_name=set_name,
        progress=progress)


@math_group.command("trainings")
@count_option()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def trainings_command(count: int, as_json: bool) -> None:
    """Trainings (runner math train), newest first, with their best success rate."""
    from .logs.trainings import TrainingLog

    records = TrainingLog.for_reading().list(limit=count)
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
