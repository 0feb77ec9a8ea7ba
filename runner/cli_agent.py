"""`runner agent TASK` and `runner logs runs`: drive a model through the sandbox, list the runs.

Thin like the rest of the CLI: it builds an `OpenAIChat`, a function set, a sandbox and an
`Agent`, runs the task and prints. Progress goes to stderr as the turns happen; stdout gets
the final answer (or, with `--json`, exactly one JSON object). Exit status 0 when the run
was answered, 1 for any other ending (and for runner errors), 2 for usage errors.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .backends.base import backend_names
from .types import Limits

_PROTOCOLS = ("tools", "json", "text", "code")


def _progress(turn: Any) -> None:
    reply = turn.reply or {}
    calls = [c.get("function", {}).get("name") for c in reply.get("tool_calls") or []]
    actions = ", ".join(
        f"{a.get('kind')} {a.get('function')}" if a.get("kind") == "call" else str(a.get("kind"))
        for a in turn.actions) or "nothing usable"
    codes = f" · {', '.join(turn.feedback_codes)}" if turn.feedback else ""
    error = f" · model error {turn.error.get('code')}" if turn.error else ""
    tools = f" · tool calls: {', '.join(map(str, calls))}" if calls else ""
    click.echo(f"[turn {turn.number}] {turn.latency_ms} ms · {actions}{tools}{codes}{error}",
               err=True)


@click.command("agent")
@click.argument("task")
@click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
              help="Function-set file (JSON): what the model may call.")
@click.option("--protocol", type=click.Choice(_PROTOCOLS), default="tools", show_default=True,
              help="How the model replies: native tool calls, one JSON object, "
                   "Thought/Tool/Tool Input text, or fenced python blocks.")
@click.option("--model", envvar="RUNNER_MODEL", show_envvar=True,
              help="Model name (default: the only model the server serves).")
@click.option("--base-url", envvar="OPENAI_BASE_URL", show_envvar=True,
              help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
@click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True,
              help="API key (local servers need none).")
@click.option("--max-turns", type=click.IntRange(min=1, max=1000), default=10, show_default=True,
              help="Model replies at most.")
@click.option("--max-failures", type=click.IntRange(min=1), default=3, show_default=True,
              help="Consecutive failures after which a function is disabled.")
@click.option("--budget", "budget_s", type=click.FloatRange(min=0.01), default=120.0,
              show_default=True, help="Seconds of sandbox time for the whole run.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.001, max=3600),
              help="Wall-clock limit of each execution in seconds (default 10).")
@click.option("--backend", type=click.Choice(backend_names()), default="restricted",
              show_default=True, help="Isolation tier.")
@click.option("--temperature", type=click.FloatRange(min=0, max=2),
              help="Sampling temperature (default: the server's).")
@click.option("--max-tokens", type=click.IntRange(min=1),
              help="Tokens per reply at most (default: the server's).")
@click.option("--llm-timeout", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
              help="Seconds to wait for one reply.")
@click.option("--retries", type=click.IntRange(min=0, max=20), default=4, show_default=True,
              help="Retries of a request on rate limits, 5xx and connection errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as one JSON object.")
def agent_command(task: str, functions_path: str | None, protocol: str, model: str | None,
                  base_url: str | None, api_key: str | None, max_turns: int, max_failures: int,
                  budget_s: float, timeout_s: float | None, backend: str,
                  temperature: float | None, max_tokens: int | None, llm_timeout: float,
                  retries: int, as_json: bool) -> None:
    """Let a model work on TASK, running what it asks for in the sandbox.

    Every turn is logged: `runner logs show RUN_ID` shows the conversation with the
    executions it caused. Exit status 0 when the model answered, 1 otherwise.
    """
    from .agent import Agent, OpenAIChat
    from .functions import FunctionSet
    from .sandbox import Sandbox

    # Reading a file changes no function, so nothing goes to the function history.
    functions = FunctionSet.load(functions_path, log_store=False) if functions_path else None
    llm = OpenAIChat(model or None, base_url=base_url or None, api_key=api_key or None,
                     timeout_s=llm_timeout, max_retries=retries, temperature=temperature,
                     max_tokens=max_tokens)
    limits = Limits().with_overrides(timeout_s=timeout_s)
    with Sandbox(backend=backend, source="agent", limits=limits) as sandbox:
        agent = Agent(llm, functions, protocol=protocol, sandbox=sandbox, max_turns=max_turns,
                      max_consecutive_failures=max_failures, budget_s=budget_s,
                      on_turn=None if as_json else _progress)
        run = agent.run(task)
    if as_json:
        click.echo(json.dumps(run.summary_dict(), ensure_ascii=False))
    else:
        if run.final_answer is not None:
            click.echo(run.final_answer)
        if run.error:
            click.echo(f"runner: error [{run.error.get('code')}]: {run.error.get('message')}", err=True)
            if run.error.get("fix"):
                click.echo(f"runner: fix: {run.error.get('fix')}", err=True)
        notes = [f"status {run.status}", f"{len(run.turns)} turns", f"id {run.id}"]
        if run.stop_reason and run.final_answer is None:
            notes.insert(1, run.stop_reason)
        click.echo("-- " + " · ".join(notes) + f" (runner logs show {run.id})", err=True)
    sys.exit(0 if run.status == "answered" else 1)


@click.command("runs")
@click.option("--status", type=click.Choice(["running", "answered", "gave_up", "max_turns",
                                              "budget", "llm_error", "terminated"]),
              help="Only this status.")
@click.option("-n", "count", type=click.IntRange(min=1), default=20, show_default=True,
              help="How many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def logs_runs(status: str | None, count: int, as_json: bool) -> None:
    """Recent agent runs, newest first (`runner logs show RUN_ID` for one)."""
    from .logs.agent import AgentLog, render_agent_run_list

    agent_log = AgentLog()
    runs = agent_log.list(limit=count, status=status)
    counts = agent_log.turn_counts([run.id for run in runs])
    if as_json:
        click.echo(json.dumps([{**run.summary_dict(), "turn_count": counts.get(run.id, 0)}
                               for run in runs], ensure_ascii=False))
    else:
        click.echo(render_agent_run_list(runs, counts), nl=False)
