"""How the `runner` commands print: hostile text made inert, colour only for people.

Two kinds of text reach the screen. What the CLI renders (error messages, function
descriptions and code, diffs, authors, notes, progress lines) is always passed through
`sanitize_for_terminal`. What a sandboxed program or a model produced as *its* output (a
run's stdout and stderr, an agent's final answer) is passed through only when it goes to
a terminal: piped into a file or another program it stays exactly as produced. `--raw`
turns both off. Output is written without click's own ANSI stripping, so `--raw` and pipes
get every byte.
"""

from __future__ import annotations

import sys

import click

from .terminal import colour_enabled, sanitize_for_terminal


class Printer:
    """Prints for one command invocation; `raw` is the command's --raw flag."""

    def __init__(self, *, raw: bool = False) -> None:
        self.raw = raw

    def _stream_is_tty(self, err: bool) -> bool:
        stream = sys.stderr if err else sys.stdout
        try:
            return stream.isatty()
        except (AttributeError, ValueError):  # replaced by an object without it, or closed
            return False

    def colour(self, err: bool = False) -> bool:
        return not self.raw and colour_enabled(sys.stderr if err else sys.stdout)

    def text(self, text: str, *, err: bool = False, nl: bool = True) -> None:
        """Rendered text: always made safe (unless --raw)."""
        click.echo(text if self.raw else sanitize_for_terminal(text), err=err, nl=nl, color=True)

    def styled(self, text: str, *, err: bool = False, nl: bool = True) -> None:
        """Text that is already safe and may carry this program's own colour codes."""
        click.echo(text, err=err, nl=nl, color=True)

    def output(self, text: str, *, err: bool = False, nl: bool = True) -> None:
        """A program's or model's own output: made safe only on a terminal (unless --raw)."""
        safe = self.raw or not self._stream_is_tty(err)
        click.echo(text if safe else sanitize_for_terminal(text), err=err, nl=nl, color=True)


RAW_HELP = ("Print control characters and escape sequences from programs and models as they "
            "are (by default they are shown escaped on a terminal).")
