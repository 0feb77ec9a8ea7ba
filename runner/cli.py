"""The `runner` command. Thin: parses arguments, calls the library, prints.

Exit status: 0 when a run's status is `ok`, 1 otherwise (and for runner errors),
2 for usage errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from . import __version__
from .backends.base import DEFAULT_BACKEND
from .backends.registry import backend_names
from .cli_interrupt import ctrl_c
from .cli_options import (
    backend_options,
    count_option,
    file_options,
    files_argument,
    limit,
    ray_options,
    write_out,
)
from .cli_output import RAW_HELP, Printer
from .errors import RunnerError
from .logs.execution_text import render_files, status_label
from .stopping import RunInterrupted, stop_on_sigterm, stopped_by
from .terminal import json_text
from .terminal import status as status_text
from .types import ExecutionResult, Limits, Status


def _fail(exc: RunnerError) -> None:
    printer = Printer()  # error text may quote a model or a file: always made safe
    printer.text(f"runner: error [{exc.code}]: {exc.message}", err=True)
    if exc.fix:
        printer.text(f"runner: fix: {exc.fix}", err=True)
    sys.exit(1)


class _Group(click.Group):
    """Turns RunnerError into a clear message and exit status 1 for every command, and
    Ctrl-C into exit status 130 (what a shell reports for SIGINT) without a traceback;
    SIGTERM is taken as Ctrl-C (`runner.stopping.stop_on_sigterm`), exit status 130 too."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RunnerError as exc:
            _fail(exc)
        except KeyboardInterrupt:
            click.echo(f"runner: interrupted ({stopped_by()}); what ran so far is in the log "
                       "(runner logs list)", err=True)
            sys.exit(130)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="runner")
def main() -> None:
    """Run model-written Python in a sandbox, with limits, and review what ran."""
    # systemd, timeout(1), Kubernetes and Ray stop a process with SIGTERM: every command
    # stops then as on Ctrl-C (the run logged, the JSON printed, containers removed).
    stop_on_sigterm()
    _encodable_output()
    _say_installs()


def _say_installs() -> None:
    """A package set installed on first use takes a while: say so on stderr as it starts
    (runner.wheels logs it), whatever command asked for it."""
    import logging

    installs = logging.getLogger("runner.install")
    if not installs.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("runner: %(message)s"))
        installs.addHandler(handler)
        installs.setLevel(logging.INFO)
        installs.propagate = False


def _encodable_output() -> None:
    """Output that any text can go to: a character the stream's encoding cannot write (a lone
    surrogate from a command-line argument or a JSON file) is written as its escape (`\\udXXX`)
    instead of failing the command halfway through its output."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")


def _read_code(source: str) -> str:
    if source == "-":
        data = sys.stdin.buffer.read()
        where = "standard input"
    else:
        try:
            with open(source, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise click.BadParameter(f"cannot read {source}: {exc.strerror}", param_hint="FILE") from None
        where = source
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                                 param_hint="FILE") from None


def _print_result(result: ExecutionResult, *, show_return: bool = False, raw: bool = False) -> None:
    """Human rendering: the program's own output first, then what the runner saw."""
    printer = Printer(raw=raw)
    if result.stdout:
        printer.output(result.stdout, nl=not result.stdout.endswith("\n"))
    if show_return and result.status is Status.OK:
        printer.output(json_text(result.return_value))
    if result.stderr:
        printer.output(result.stderr, err=True, nl=not result.stderr.endswith("\n"))
    if result.error is not None:
        text = result.error.traceback.rstrip("\n") if result.error.traceback else \
            f"{result.error.type}: {result.error.message}"
        printer.text(text, err=True)
        if result.error.traceback and result.error.message not in text:
            printer.text(result.error.message, err=True)
    status = status_label(result.status, result.error.type if result.error else None)
    notes = [f"status {status_text(status, enabled=printer.colour(err=True))}",
             f"{result.duration_ms} ms", f"cpu {result.resources.cpu_ms} ms", f"id {result.id}"]
    if result.stdout_truncated or result.stderr_truncated:
        notes.append("output truncated")
    if show_return and result.return_is_repr:
        notes.append("return value has no JSON form: shown as its repr")
    if result.files or result.files_left_out:
        printer.text("-- files:\n" + render_files(result, str), err=True)  # made inert by text()
    printer.styled("-- " + " · ".join(notes), err=True)


@main.command("exec")
@click.argument("source", metavar="[FILE|-]", default="-")
@click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
              show_default=True, help="Isolation tier.")
@click.option("--timeout", "timeout_s", type=limit("timeout_s"),
              help="Wall-clock limit in seconds (default 10).")
@click.option("--memory", "memory_mb", type=limit("memory_mb"),
              help="Memory limit in MB (default 256).")
@click.option("--cpu", "cpu_s", type=limit("cpu_s"),
              help="CPU-time limit in seconds (default: the timeout).")
@click.option("--max-output", "max_output_bytes", type=limit("max_output_bytes"),
              help="Bytes kept per output stream (default 1000000).")
@click.option("--disk", "disk_mb", type=limit("disk_mb"),
              help="MB the run's own directory and /tmp may hold (jail tier; default 128).")
@click.option("--package", "packages", multiple=True, metavar="REQ",
              help="A package requirement, e.g. 'pandas' or 'sympy>=1.12'. Repeatable.")
@file_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@ray_options
def exec_command(source: str, backend: str, timeout_s: float | None, memory_mb: int | None,
                 cpu_s: float | None, max_output_bytes: int | None, disk_mb: int | None,
                 packages: tuple[str, ...], given: tuple[str, ...], out: Path | None,
                 force: bool, as_json: bool, raw: bool, ray_address: str | None,
                 ray_inner: str | None) -> None:
    """Run Python code from FILE (or standard input, `-`) in the sandbox."""
    from .sandbox import Sandbox

    options = backend_options(backend, ray_address, ray_inner)
    code = _read_code(source)
    files = files_argument(given)
    limits = Limits().with_overrides(timeout_s=timeout_s, memory_mb=memory_mb, cpu_s=cpu_s,
                                     max_output_bytes=max_output_bytes, disk_mb=disk_mb)
    with ctrl_c("the run", _quit_run(as_json)), \
            Sandbox(backend=backend, source="cli", **options) as sandbox:
        try:
            result = sandbox.run(code, limits=limits, packages=packages, files=files)
        except RunInterrupted as stopped:
            _print_ending(stopped.result, as_json=as_json, raw=raw)
            click.echo(f"runner: interrupted ({stopped_by()}); the run is logged as "
                       f"{stopped.result.id}",
                       err=True)
            sys.exit(130)
    _print_ending(result, as_json=as_json, raw=raw)
    write_out(result, out, force=force, again=f"`runner logs files {result.id} --out DIR`")
    sys.exit(0 if result.status is Status.OK else 1)


def _print_ending(result: ExecutionResult, *, as_json: bool, raw: bool,
                  show_return: bool = False) -> None:
    if as_json:
        click.echo(json_text(result.to_json_dict()), color=True)
    else:
        _print_result(result, raw=raw, show_return=show_return)


def _quit_run(as_json: bool) -> Callable[[], None]:
    """What a second Ctrl-C prints before quitting: with --json, still one JSON object."""
    def quit_run() -> None:
        if as_json:
            click.echo(json_text({"id": None, "status": "crashed", "error": {
                "type": "Interrupted", "message": "quit at once (Ctrl-C twice)"}}), color=True)
        click.echo("runner: quit at once (Ctrl-C twice)", err=True)
    return quit_run


def _load_set(path: str) -> Any:
    from .functions import FunctionSet

    # Reading a file changes no function, so nothing goes to the function history.
    return FunctionSet.load(path, log_store=False)


_SET_FILE = click.Path(exists=True, dir_okay=False)


@main.group("functions")
def functions_group() -> None:
    """Function sets: show them, export their schemas, read their history.

    A set file is a JSON list of function specs (name, description, parameters or
    arguments, packages, code), as the AgentOptimizer writes it, or the object that
    FunctionSet.save writes: {"name": ..., "functions": [...]}.
    """


@functions_group.command("show")
@click.argument("path", metavar="FILE", type=_SET_FILE)
@click.option("--code", "show_code", is_flag=True, help="Also print each function's code.")
@click.option("--json", "as_json", is_flag=True, help="Print the set in canonical JSON.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
def functions_show(path: str, show_code: bool, as_json: bool, raw: bool) -> None:
    """Names, versions, descriptions, arguments and packages of the functions in FILE."""
    from .functions.set_text import render_function_set

    function_set = _load_set(path)
    if as_json:
        click.echo(json_text(function_set.to_dict(), indent=2), color=True)
    else:
        Printer(raw=raw).text(render_function_set(function_set, code=show_code), nl=False)


@functions_group.command("schema")
@click.argument("path", metavar="FILE", type=_SET_FILE)
@click.argument("name", required=False)
@click.option("--format", "output_format", type=click.Choice(["openai", "json"]), default="openai",
              show_default=True,
              help="openai: tool definitions for a chat API; json: name, description and "
                   "JSON Schema of each function.")
def functions_schema(path: str, name: str | None, output_format: str) -> None:
    """The schemas of the functions in FILE (of function NAME only, if given)."""
    function_set = _load_set(path)
    if name is not None and name not in function_set:
        raise click.BadParameter(f"{path} has no function {name!r}; it has: "
                                 f"{', '.join(function_set.names) or 'none'}", param_hint="NAME")
    specs = [function_set[name]] if name is not None else function_set.specs
    if output_format == "openai":
        items = [spec.to_openai_tool() for spec in specs]
    else:
        items = [{"name": spec.name, "description": spec.description,
                  "parameters": spec.parameters} for spec in specs]
    click.echo(json_text(items[0] if name is not None else items, indent=2), color=True)


@functions_group.command("history")
@click.argument("set_name", metavar="[SET|FILE]", required=False)
@click.argument("function", required=False)
@count_option(None, what="Only the last N changes.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
def functions_history(set_name: str | None, function: str | None, count: int | None,
                      as_json: bool, raw: bool) -> None:
    """Recorded changes of function sets (of one SET, or one FUNCTION of it), with diffs.

    SET may be a set file (e.g. the learned.json a training saved): its set's history.
    A version that a training measured shows the epochs and success rates it had."""
    from .functions.set_text import render_history
    from .logs import FunctionVersionLog
    from .logs.trainings import TrainingLog
    from .paths import log_db_path

    if set_name is not None and Path(set_name).is_file():
        set_name = _load_set(set_name).name
    elif set_name is not None and (set_name.endswith(".json") or "/" in set_name):
        # A set's name is a word; this was meant as a file, and there is none.
        raise click.BadParameter(f"there is no file {set_name}", param_hint="SET|FILE")
    records = FunctionVersionLog.for_reading(log_db_path()).history(set_name, function, limit=count)
    trainings = TrainingLog.for_reading(log_db_path())
    scores = {(name, *key): value for name in dict.fromkeys(r.set_name for r in records)
              for key, value in trainings.version_scores(name).items()}
    if as_json:
        click.echo(json_text([{**r.model_dump(mode="json"), "scores": [
            {"training": training, "epoch": epoch, "success_rate": rate}
            for training, epoch, rate in scores.get((r.set_name, r.function, r.version), [])]}
            for r in records]), color=True)
    else:
        printer = Printer(raw=raw)
        printer.styled(render_history(records, safe=not raw, colour=printer.colour(),
                                      scores=scores), nl=False)


def _parse_arguments(text: str) -> dict[str, Any] | str:
    """The --args object; JSON beyond the argument bounds stays text, so that the call is
    refused as invalid_args (and logged) like any other call with unusable arguments."""
    from .jsonlimits import ARGUMENT_BOUNDS, JsonBoundsError, loads

    try:
        value = loads(text, ARGUMENT_BOUNDS, what="the JSON", types=False)
    except JsonBoundsError as exc:
        if exc.kind != "syntax":
            return text
        raise click.BadParameter(str(exc), param_hint="--args") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object of argument names and values, e.g. "
                                 """'{"x": 1}'""", param_hint="--args")
    return value


@main.command("call")
@click.argument("path", metavar="FILE", type=_SET_FILE)
@click.argument("name")
@click.option("--args", "arguments_text", default="{}", show_default=True, metavar="JSON",
              help="The arguments, as one JSON object.")
@click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
              show_default=True, help="Isolation tier.")
@click.option("--timeout", "timeout_s", type=limit("timeout_s"),
              help="Wall-clock limit in seconds (default 10).")
@click.option("--memory", "memory_mb", type=limit("memory_mb"),
              help="Memory limit in MB (default 256).")
@file_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--raw", is_flag=True, help=RAW_HELP)
@ray_options
def call_command(path: str, name: str, arguments_text: str, backend: str,
                 timeout_s: float | None, memory_mb: int | None, given: tuple[str, ...],
                 out: Path | None, force: bool, as_json: bool, raw: bool,
                 ray_address: str | None, ray_inner: str | None) -> None:
    """Call function NAME of the set in FILE with --args, in the sandbox.

    The arguments are checked against the function's schema first (status invalid_args
    if they do not fit). Exit status 0 only when the status is ok.
    """
    from .sandbox import Sandbox

    options = backend_options(backend, ray_address, ray_inner)
    arguments = _parse_arguments(arguments_text)
    function_set = _load_set(path)
    if name not in function_set:
        raise click.BadParameter(f"{path} has no function {name!r}; it has: "
                                 f"{', '.join(function_set.names) or 'none'}", param_hint="NAME")
    limits = Limits().with_overrides(timeout_s=timeout_s, memory_mb=memory_mb)
    files = files_argument(given)
    with ctrl_c("the call", _quit_run(as_json)), \
            Sandbox(backend=backend, source="cli", limits=limits, **options) as sandbox:
        try:
            result = sandbox.call(function_set, name, arguments, files=files)
        except RunInterrupted as stopped:
            _print_ending(stopped.result, as_json=as_json, raw=raw)
            click.echo(f"runner: interrupted ({stopped_by()}); the call is logged as "
                       f"{stopped.result.id}",
                       err=True)
            sys.exit(130)
    _print_ending(result, as_json=as_json, raw=raw, show_return=True)
    write_out(result, out, force=force, again=f"`runner logs files {result.id} --out DIR`")
    sys.exit(0 if result.status is Status.OK else 1)


@main.command("demo")
@click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
              show_default=True)
def demo_command(backend: str) -> None:
    """Run a handful of model-written snippets through the sandbox, then list the log."""
    from .demo import run_demo

    run_demo(backend=backend, echo=click.echo)
    from .cli_logs import logs_list

    ctx = click.get_current_context()
    click.echo("\n$ runner logs list -n 10 --source demo")
    ctx.invoke(logs_list, query=None, status=None, backend=None, source="demo", function=None,
               since=None, until=None, run_id=None, count=10, as_json=False, raw=False)


def _register_docker_commands() -> None:
    from .cli_docker import doctor_command, images_group

    main.add_command(doctor_command)
    main.add_command(images_group)


_register_docker_commands()


def _register_logs_commands() -> None:
    from .cli_logs import logs_group

    main.add_command(logs_group)


_register_logs_commands()


def _register_agent_commands() -> None:
    from .cli_agent import agent_command, logs_runs
    from .cli_logs import logs_group

    main.add_command(agent_command)
    logs_group.add_command(logs_runs)


_register_agent_commands()


def _register_math_commands() -> None:
    from .cli_math import math_group

    main.add_command(math_group)


_register_math_commands()


def _register_mcp_command() -> None:
    from .cli_mcp import mcp_command

    main.add_command(mcp_command)


_register_mcp_command()
