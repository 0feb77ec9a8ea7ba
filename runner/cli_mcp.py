"""`runner mcp`: runner as a Model Context Protocol server (runner.integrations.mcp).

stdio by default (what a desktop assistant starts; standard output carries the protocol,
so everything this command says goes to standard error); `--http` serves streamable HTTP
at http://HOST:PORT/mcp, on loopback unless told otherwise, with a token off loopback.
"""

from __future__ import annotations

import os
import signal
import sys
from contextlib import suppress
from types import FrameType
from typing import Any, NoReturn

import click

from .backends.base import DEFAULT_BACKEND
from .backends.registry import backend_names
from .cli_options import backend_options, limit, number, ray_options
from .errors import ConfigurationError
from .integrations.mcp_sessions import DEFAULT_IDLE_S, MAX_SESSIONS  # (needs no mcp package)
from .stopping import note_stop, stopped_by
from .types import Limits


@click.command("mcp")
@click.option("--http", "use_http", is_flag=True,
              help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="With --http: the address to listen on. Anything but loopback requires a "
                   "token (printed once, to standard error).")
@click.option("--port", type=number(0, 65535, integer=True), default=8000, show_default=True,
              help="With --http: the port (0 picks a free one).")
@click.option("--functions", "functions_path", type=click.Path(exists=True, dir_okay=False),
              help="A function-set file whose functions list_functions and call_function offer.")
@click.option("--backend", type=click.Choice(backend_names()), default=DEFAULT_BACKEND,
              show_default=True, help="Isolation tier.")
@click.option("--timeout", "timeout_s", type=limit("timeout_s"),
              help="Wall-clock limit of a run in seconds (default 10): the default and the "
                   "ceiling; a call may ask for less.")
@click.option("--memory", "memory_mb", type=limit("memory_mb"),
              help="Memory limit of a run in MB (default 256): the default and the ceiling; a "
                   "call may ask for less.")
@click.option("--max-sessions", type=number(1, 1024, integer=True), default=MAX_SESSIONS,
              show_default=True, help="Sessions open at once, over all clients (each holds a "
                                      "sandbox process).")
@click.option("--session-idle", "session_idle_s", type=number(1, 86400), default=DEFAULT_IDLE_S,
              show_default=True, help="Seconds without a block after which a session closes.")
@ray_options
def mcp_command(use_http: bool, host: str, port: int, functions_path: str | None, backend: str,
                timeout_s: float | None, memory_mb: int | None, max_sessions: int,
                session_idle_s: float, ray_address: str | None, ray_inner: str | None) -> None:
    """Serve runner's sandbox to MCP clients: run Python, sessions, a function set.

    Every run is logged with source `mcp` (`runner logs list --source mcp`).
    """
    if not use_http and (host != "127.0.0.1" or port != 8000):
        raise click.UsageError("--host and --port go with --http")
    try:
        from .integrations.mcp import RunnerMCP, serve_http, serve_stdio
    except ImportError as exc:
        raise ConfigurationError(f"the MCP server needs the mcp package ({exc})",
                                 fix="pip install 'runner-sandbox[mcp]'") from None
    from .functions import FunctionSet
    from .sandbox import Sandbox

    options = backend_options(backend, ray_address, ray_inner)
    # Reading a file changes no function, so nothing goes to the function history.
    functions = FunctionSet.load(functions_path, log_store=False) if functions_path else None
    limits = Limits().with_overrides(timeout_s=timeout_s, memory_mb=memory_mb)
    try:
        with Sandbox(backend=backend, source="mcp", limits=limits, **options) as sandbox:
            state = RunnerMCP(sandbox, functions, max_sessions=max_sessions,
                              session_idle_s=session_idle_s)
            try:
                if use_http:
                    serve_http(state, host=host, port=port,
                               announce=lambda line: click.echo(line, err=True))
                else:
                    _stop_stdio_at_once(state, sandbox)
                    serve_stdio(state)
            finally:
                state.close()
    except KeyboardInterrupt:
        if use_http:
            raise  # reported as every command's Ctrl-C
        _stopped_on_stdio()


def _stop_stdio_at_once(state: Any, sandbox: Any) -> None:
    """Ctrl-C and SIGTERM stop the stdio server from the signal handler itself: the runs in
    progress are cancelled and logged, the sandbox closed (a Docker container removed),
    and the process ends. A KeyboardInterrupt instead lands in whichever task of the
    server's event loop is running, whose shutdown then logs it as a crash and can wait
    forever for the thread blocked reading the client's pipe. A second signal during the
    stop quits at once; a signal the process inherited as ignored stays ignored."""
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        note_stop(signum)
        if stopping:
            os._exit(130)
        stopping = True
        with suppress(Exception):
            state.close()
        with suppress(Exception):
            sandbox.close()
        _stopped_on_stdio()

    for signum in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, stop)


def _stopped_on_stdio() -> NoReturn:
    """Ctrl-C or SIGTERM stopped the stdio server, its runs logged and its sandbox closed.
    The thread reading the client's standard input is blocked in a read that no signal
    wakes (and exiting normally waits for it until the client closes the pipe): the
    process ends here instead."""
    click.echo(f"runner: interrupted ({stopped_by()}); what ran so far is in the log "
               "(runner logs list --source mcp)", err=True)
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(130)
