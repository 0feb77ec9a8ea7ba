"""`runner agent TASK` and `runner logs runs`: drive a model through the sandbox, list the runs.

Thin like the rest of the CLI: it builds an `OpenAIChat`, a function set, a sandbox and an
`Agent`, runs the task and prints. Progress goes to stderr as the turns happen; stdout gets
the final answer (or, with `--json`, exactly one JSON object). Exit status 0 when the run
was answered, 1 for any other ending (and for runner errors), 2 for usage errors.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from .agent.context import DEFAULT_CONTEXT_CHARS
from .agent.run import AgentStatus
from .backends.base import DEFAULT_BACKEND
from .backends.registry import backend_names
from .cli_options import (
    backend_options,
    count_option,
    file_options,
    files_argument,
    limit,
    llm_options,
    model_options,
    number,
    ray_options,
    write_out,
)
from .cli_output import RAW_HELP, Printer
from .stopping import stopped_by
from .terminal import json_text, sanitize_for_terminal
from .terminal import status as status_text
from .types import Limits

_PROTOCOLS = ("tools", "json", "text", "code")


def _progress(turn: Any) -> None:
    """One line per turn on stderr; names and codes come from the model: made safe."""
    Printer().text(_progress_line(turn), err=True)


def _progress_line(turn: Any) -> str:
    reply = turn.reply or {}
    calls = [c.get("function", {}).get("name") for c in reply.get("tool_calls") or []]
    actions = ", ".join(
        f"{a.get('kind')} {a.get('function')}" if a.get("kind") == "call" else str(a.get("kind"))
        for a in turn.actions) or "nothing usable"
    codes = f" · {', '.join(turn.feedback_codes)}" if turn.feedback else ""
    error = f" · model error {turn.error.get('code')}" if turn.error else ""
    tools = f" · tool calls: {', '.join(map(str, calls))}" if calls else ""
    return f"[turn {turn.number}] {turn.latency_ms} ms · {actions}{tools}{codes}{error}"


@click.command("agent")
@click.argument("task")
@click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
              help="Function-set file (JSON): what the model may call.")
@click.option("--protocol", type=click.Choice(_PROTOCOLS), default="tools", show_default=True,
              help="How the model replies: native tool calls, one JSON object, "
                   "Thought/Tool/Tool Input text, or fenced python blocks.")
@click.option("--max-turns", type=number(1, 1000, integer=True), default=10, show_default=True,
              help="Model replies at most.")
@click.option("--max-failures", type=number(1, 100_000, integer=True), default=3,
              show_default=True,
              help="Consecutive failures after which a function is disabled.")
@click.option("--budget", "budget_s", type=number(0.01, 86_400), default=120.0,
              show_default=True, help="Seconds of sandbox time for the whole run.")
@click.option("--timeout", "timeout_s", type=limit("timeout_s"),
              help="Wall-clock limit of each execution in seconds (default 10).")
@click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
              show_default=True, help="Isolation tier.")
@model_options
@click.option("--context-chars", type=number(1000, 100_000_000, integer=True),
              default=DEFAULT_CONTEXT_CHARS, show_default=True,
              help="Characters of conversation sent per request at most: older long replies and "
                   "outputs are cut in what is sent (never in the log).")
@click.option("--images", "attach_images", is_flag=True,
              help="Show the model the images its code made (for a model that reads images).")
@file_options
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON object.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@ray_options
def agent_command(task: str, functions_path: str | None, protocol: str, model: str | None,
                  base_url: str | None, api_key: str | None, max_turns: int, max_failures: int,
                  budget_s: float, timeout_s: float | None, backend: str,
                  temperature: float | None, max_tokens: int | None, llm_timeout: float,
                  retries: int, context_chars: int, attach_images: bool, given: tuple[str, ...],
                  out: Path | None, force: bool, as_json: bool, raw: bool,
                  ray_address: str | None, ray_inner: str | None) -> None:
    """Let a model work on TASK, running what it asks for in the sandbox.

    Every turn is logged: `runner logs show RUN_ID` shows the conversation with the
    executions it caused. Exit status 0 when the model answered, 1 otherwise.
    """
    from .agent import Agent, OpenAIChat
    from .functions import FunctionSet
    from .sandbox import Sandbox

    options = backend_options(backend, ray_address, ray_inner)
    # Reading a file changes no function, so nothing goes to the function history.
    functions = FunctionSet.load(functions_path, log_store=False) if functions_path else None
    llm = OpenAIChat(model or None, base_url=base_url or None, api_key=api_key or None,
                     **llm_options(temperature=temperature, max_tokens=max_tokens,
                                   llm_timeout=llm_timeout, retries=retries))
    limits = Limits().with_overrides(timeout_s=timeout_s)
    files = files_argument(given)
    with Sandbox(backend=backend, source="agent", limits=limits, **options) as sandbox:
        agent = Agent(llm, functions, protocol=protocol, sandbox=sandbox, max_turns=max_turns,
                      max_consecutive_failures=max_failures, budget_s=budget_s,
                      max_context_chars=context_chars, on_turn=None if as_json else _progress,
                      attach_images=attach_images)
        try:
            run = agent.run(task, files=files)
        except KeyboardInterrupt:
            stopped = agent.last_run  # logged as interrupted before Ctrl-C went on
            if stopped is None:
                raise
            if as_json:  # still exactly one JSON object
                click.echo(json_text(stopped.summary_dict()), color=True)
            else:
                _print_ending(stopped, Printer(raw=raw))
            click.echo(f"runner: interrupted ({stopped_by()})", err=True)
            sys.exit(130)
    if as_json:
        click.echo(json_text(run.summary_dict()), color=True)
    else:
        printer = Printer(raw=raw)
        if run.final_answer is not None:
            printer.output(run.final_answer)
        if run.error:
            printer.text(f"runner: error [{run.error.get('code')}]: {run.error.get('message')}", err=True)
            if run.error.get("fix"):
                printer.text(f"runner: fix: {run.error.get('fix')}", err=True)
        _print_ending(run, printer)
    write_out(run, out, force=force)
    sys.exit(0 if run.status == "answered" else 1)


def _print_ending(run: Any, printer: Printer) -> None:
    notes = [f"status {status_text(str(run.status), enabled=printer.colour(err=True))}",
             f"{len(run.turns)} turns", f"id {run.id}"]
    if run.stop_reason and run.final_answer is None and not run.error:  # (errors: said above)
        notes.insert(1, sanitize_for_terminal(run.stop_reason) if not printer.raw else run.stop_reason)
    printer.styled("-- " + " · ".join(notes) + logged_hint(run), err=True)


def logged_hint(run: Any) -> str:
    """Where to see a run again: `runner logs show ID`, or why it is not in the log."""
    if run.not_logged:  # the reason was printed when the run ended
        return " (not in the log)"
    return f" (runner logs show {run.id})"


@click.command("runs")
@click.option("--status", type=click.Choice([value.value for value in AgentStatus]),
              help="Only this status.")
@count_option()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def logs_runs(status: str | None, count: int, as_json: bool) -> None:
    """Recent agent runs, newest first (`runner logs show RUN_ID` for one)."""
    from .logs.agent import AgentLog
    from .logs.agent_text import render_agent_run_list

    agent_log = AgentLog.for_reading()
    runs = agent_log.list(limit=count, status=status)
    counts = agent_log.turn_counts([run.id for run in runs])
    if as_json:
        click.echo(json_text([{**run.summary_dict(), "turn_count": counts.get(run.id, 0)}
                              for run in runs]), color=True)
    else:
        click.echo(render_agent_run_list(runs, counts), nl=False)
