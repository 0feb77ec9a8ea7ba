"""Options shared by the `runner` commands, and the one type of every numeric option.

click's FloatRange lets `nan` through (every comparison with nan is false) and knows
nothing of the library's own bounds. `Number` refuses nan and infinities, and states the
range in its usage error (exit 2); every numeric option of every command is a `Number`
(tests/test_cli_numbers.py walks the commands to hold that). `limit` reads the range from
the `Limits` field itself and `model_options` from the model client's own checks, so the
CLI and the Python API accept exactly the same values, and the options that several
commands share (the model's, `-n`) are defined here once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from .backends.base import RAY_INNER_BACKENDS
from .ranges import Range, field_range
from .types import Limits

F = TypeVar("F", bound=Callable[..., Any])


class Number(click.ParamType[float, Any]):
    """A finite number in `valid`; a usage error (exit 2) that states the range otherwise."""

    def __init__(self, valid: Range) -> None:
        self.valid = valid
        self.name = "integer" if valid.integer else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number: float = value
        else:
            try:
                number = int(str(value)) if self.valid.integer else float(str(value))
            except ValueError:
                self.fail(f"{value!r} is not {self.valid.text()}", param, ctx)
        if not self.valid.contains(float(number)):
            shown = number if math.isfinite(number) else str(number)
            self.fail(f"{shown} is not {self.valid.text()}", param, ctx)
        return number

    def __repr__(self) -> str:
        return f"Number({self.valid.text()})"


def limit(field: str) -> Number:
    """The type of the option that sets `Limits.<field>`."""
    return Number(field_range(Limits, field))


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           integer: bool = False) -> Number:
    return Number(Range(low, low_open, high, False, integer=integer))


def count_option(default: int | None = 20, *, what: str = "How many, newest first."
                 ) -> Callable[[F], F]:
    """`-n N`: how many rows a listing shows."""
    return click.option("-n", "count", type=number(1, 1_000_000, integer=True), default=default,
                        show_default=default is not None, help=what)


def model_options(command: F) -> F:
    """Which model to ask and how (`runner agent`, `math solve|eval|train`): the ranges are
    the client's own (`runner.agent.llm`)."""
    from .agent.llm import (
        DEFAULT_TIMEOUT_S,
        MAX_TOKENS_RANGE,
        RETRIES_RANGE,
        TEMPERATURE_RANGE,
        TIMEOUT_RANGE,
        TIMEOUT_RETRIES,
    )

    options = [
        click.option("--model", envvar="RUNNER_MODEL", show_envvar=True,
                     help="Model name (default: the only model the server serves)."),
        click.option("--base-url", envvar="OPENAI_BASE_URL", show_envvar=True,
                     help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1."),
        click.option("--api-key", envvar="OPENAI_API_KEY", show_envvar=True,
                     help="API key (local servers need none)."),
        click.option("--temperature", type=Number(TEMPERATURE_RANGE),
                     help="Sampling temperature (default: the server's)."),
        click.option("--max-tokens", type=Number(MAX_TOKENS_RANGE),
                     help="Tokens per reply at most (default: the server's)."),
        click.option("--llm-timeout", type=Number(TIMEOUT_RANGE), default=DEFAULT_TIMEOUT_S,
                     show_default=True,
                     help=f"Seconds to wait for one reply; a silent server is retried "
                          f"{TIMEOUT_RETRIES} times, then given up."),
        click.option("--retries", type=Number(RETRIES_RANGE), default=4, show_default=True,
                     help="Retries of a request on rate limits, 5xx, dropped connections and "
                          "replies cut short."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def llm_options(*, llm_timeout: float, retries: int, temperature: float | None = None,
                max_tokens: int | None = None) -> dict[str, Any]:
    """`OpenAIChat`'s settings from `model_options`, and a line on stderr while a reply is
    slow (above a progress bar, which passes stderr through)."""
    options: dict[str, Any] = {"timeout_s": llm_timeout, "max_retries": retries,
                               "on_slow": say_slow}
    if temperature is not None:
        options["temperature"] = temperature
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    return options


def say_slow(text: str) -> None:
    from .terminal import sanitize_for_terminal as clean_text

    click.echo(f"runner: {clean_text(text)}", err=True)


def ray_options(command: F) -> F:
    """--ray-address and --ray-inner, for the commands that take --backend."""
    command = click.option(
        "--ray-inner", type=click.Choice(RAY_INNER_BACKENDS),
        help="With --backend ray: the isolation tier on the cluster's nodes (default jail).")(command)
    return click.option(
        "--ray-address", metavar="ADDRESS",
        help="With --backend ray: the cluster, 'auto' (the one running here), host:port or "
             "ray://host:10001 (default: RAY_ADDRESS, else a local Ray).")(command)


def backend_options(backend: str, ray_address: str | None, ray_inner: str | None) -> dict[str, Any]:
    """The Sandbox options the backend flags ask for; a usage error for ray flags without ray."""
    if backend != "ray":
        if ray_address is not None or ray_inner is not None:
            raise click.UsageError("--ray-address and --ray-inner go with --backend ray")
        return {}
    options: dict[str, Any] = {}
    if ray_address is not None:
        options["ray_address"] = ray_address
    if ray_inner is not None:
        options["inner"] = ray_inner
    return options


def file_options(command: F) -> F:
    """--file (files handed to the run) and --out/--force (where the files it made go)."""
    command = click.option("--force", is_flag=True,
                           help="With --out: replace files that are there already.")(command)
    command = click.option(
        "--out", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
        help="Write the files the run made or changed into DIR.")(command)
    return click.option(
        "--file", "given", multiple=True, metavar="[NAME=]PATH",
        help="A file the run finds in its working directory (as NAME, or under its own name). "
             "Repeatable.")(command)


def files_argument(given: tuple[str, ...]) -> dict[str, Path]:
    """--file values as the files of a run: NAME=PATH, or PATH under its base name."""
    files: dict[str, Path] = {}
    for value in given:
        name, separator, path = value.partition("=")
        if not separator:
            name, path = Path(value).name, value
        if name in files:
            raise click.BadParameter(f"two files are named {name!r}", param_hint="--file")
        files[name] = Path(path)
    return files


def write_out(result: Any, out: Path | None, *, force: bool, again: str = "") -> None:
    """With --out: write the files a run made into `out`, and say where on stderr; without
    it, name them and say how to have them (`again`: a command that writes them later)."""
    if not result.files:
        return
    from .files import save_files
    from .terminal import sanitize_for_terminal

    if out is None:
        names = ", ".join(made.name for made in result.files[:8])
        more = f" and {len(result.files) - 8} more" if len(result.files) > 8 else ""
        how = f"--out DIR writes them{f'; so does {again}' if again else ''}"
        click.echo(sanitize_for_terminal(f"runner: {len(result.files)} file(s) made: {names}{more} "
                                         f"({how})"), err=True)
        return
    written = save_files(result.files, out, replace=force)
    click.echo(sanitize_for_terminal(f"runner: wrote {len(written)} file(s) to {out}: "
                                     + ", ".join(str(path) for path in written[:8])), err=True)
