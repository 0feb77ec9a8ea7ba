"""Ctrl-C for the commands that run long jobs (`exec`, `math eval`, `math train`).

The first Ctrl-C stops the job cleanly: the library records what was stopped (a run as
interrupted, an evaluation's or a training's problems in progress as pending), abandons
the model requests in flight, and raises a KeyboardInterrupt that carries the record
(`runner.stopping`), which the command prints (with `--json`, its one JSON object) with
the command that resumes it. It says so at once, and that a second Ctrl-C quits at once:
the second one prints what the command knows so far (the job's id and how to resume it)
and ends the process there, exit status 130, without waiting for anything. SIGTERM is
taken as Ctrl-C (`runner.stopping.stop_on_sigterm`), exit status 130 too.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, NoReturn

import click

from .stopping import note_stop, stopped_by, stops_on_sigterm


@contextmanager
def ctrl_c(what: str, on_quit: Callable[[], None]) -> Iterator[None]:
    """Within the block, Ctrl-C stops `what` (the first time) or quits (the second time,
    after `on_quit` has printed what it can). SIGTERM does the same when
    `runner.stopping.stop_on_sigterm` is in force (the `runner` command puts it in force).

    A SIGINT the process inherited as ignored (a job started with `&` by a non-interactive
    shell, `nohup`) stays ignored: that shell means Ctrl-C in its terminal for the command in
    the foreground, not for this one; such a job is stopped with SIGTERM (`kill`), which
    stops it as cleanly."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; Ctrl-C stays as it is
        return
    signals = [signal.SIGINT] if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN else []
    if stops_on_sigterm():
        signals.append(signal.SIGTERM)

    def second(signum: int, frame: FrameType | None) -> None:
        try:
            on_quit()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with suppress(OSError, ValueError):
                    stream.flush()
            os._exit(130)

    def first(signum: int, frame: FrameType | None) -> None:
        note_stop(signum)
        for each in signals:
            signal.signal(each, second)
        again = "Ctrl-C again" if signum == signal.SIGINT else "SIGTERM; Ctrl-C or SIGTERM again"
        click.echo(f"runner: stopping {what} ({again} to quit at once)", err=True)
        raise KeyboardInterrupt

    previous = {each: signal.signal(each, first) for each in signals}
    try:
        yield
    finally:
        for each, handler in previous.items():
            signal.signal(each, handler)


class JobStopping:
    """What `math eval` and `math train` print when Ctrl-C stops their job (`command` is
    eval or train; `job_id` gives the job's id once it has one)."""

    def __init__(self, command: str, as_json: bool, job_id: Callable[[], str | None]) -> None:
        self.command = command
        self.as_json = as_json
        self.job_id = job_id
        self.printed = False

    def resume(self) -> str | None:
        job = self.job_id()
        return f"runner math {self.command} --resume {job}" if job else None

    def interrupted(self, report: Any, print_report: Callable[[Any, bool], None]) -> NoReturn:
        """The first Ctrl-C stopped the job and the library recorded it: print its report
        (the one JSON object with --json) and how to go on; exit status 130."""
        self.printed = True
        print_report(report, self.as_json)
        resume = self.resume()
        click.echo(f"runner: interrupted ({stopped_by()})"
                   + (f"; continue with: {resume}" if resume else ""), err=True)
        sys.exit(130)

    def quit(self, how: str = "quit at once (Ctrl-C twice)") -> None:
        """The second Ctrl-C (or a first one before the job was recorded): say what is known
        now; `--resume` finds whatever the log holds."""
        if self.printed:
            return
        self.printed = True
        resume = self.resume()
        if self.as_json:
            click.echo(json.dumps({"id": self.job_id(), "status": "interrupted",
                                   "resume": resume}))
        click.echo(f"runner: {how}" + (f"; continue with: {resume}" if resume else ""), err=True)

    def interrupted_early(self) -> NoReturn:
        """Ctrl-C before the library had a job to record (while it checked the server, say)."""
        self.quit(f"interrupted ({stopped_by()})")
        sys.exit(130)
