"""Writing text that programs and models produced onto a person's terminal, safely.

Output of sandboxed code and replies of models are hostile: an escape sequence in them can
clear the reviewer's screen, rewrite lines already shown, set the window title, or (OSC 52)
put text on the clipboard. `sanitize_for_terminal` turns every such character into a
visible escape (`\\x1b`, `\\x9b`, `\\u202e`), so the sequence shows as inert text:

- C0 controls other than newline and tab (ESC starts CSI, OSC, DCS sequences; BEL ends
  OSC; backspace and a lone carriage return overwrite what is on screen), DEL;
- C1 controls (U+0080..U+009F: single-character CSI, OSC, DCS in 8-bit terminals);
- bidirectional overrides and isolates (text shown in another order than it runs);
- lone surrogates (they cannot be encoded, and printing them would fail).

Exact bytes stay where a program reads them: `--json` output and the log database. A
`--raw` flag passes text through unchanged, for a person who wants it.

`Style` bundles the two choices a renderer of human-facing text makes: whether to
sanitize (always, unless raw) and whether to colour (only on a terminal, and never when
`NO_COLOR` is set: https://no-color.org).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import IO, Any

import click

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def sanitize_for_terminal(text: str) -> str:
    """`text` with every control character shown as an escape; newlines and tabs kept.

    A Windows line end (CR LF) is a plain newline; a lone CR, which would move the
    cursor back over the line, is shown as `\\x0d`.
    """
    return _UNSAFE.sub(_visible, text.replace("\r\n", "\n"))


def is_terminal(stream: IO[Any] | None) -> bool:
    """True when `stream` is a terminal (not a pipe, file or closed stream)."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or unusual stream
        return False


def colour_enabled(stream: IO[Any] | None) -> bool:
    """Colour only on a terminal that can show it, and not when NO_COLOR is set."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


# Statuses of executions and agent runs, by what they mean for the reader.
_GOOD = {"ok", "answered", "identical"}
_BAD = {"error", "timeout", "memory_limit", "crashed", "llm_error", "different_status"}
_WARN = {"denied", "invalid_args", "install_failed", "gave_up", "max_turns", "budget",
         "interrupted", "different_output"}


@dataclass(frozen=True)
class Style:
    """How to write human-facing text: `raw` keeps control characters, `colour` paints."""

    colour: bool = False
    raw: bool = False

    @classmethod
    def for_stream(cls, stream: IO[Any] | None, *, raw: bool = False) -> Style:
        return cls(colour=colour_enabled(stream), raw=raw)

    def text(self, value: str) -> str:
        """Untrusted text, made safe for a terminal unless raw."""
        return value if self.raw else sanitize_for_terminal(value)

    def paint(self, value: str, **style: Any) -> str:
        """`value` (already safe) with click.style attributes, when colour is on."""
        return click.style(value, **style) if self.colour else value

    def status(self, value: str) -> str:
        """A status word coloured by what it means: green good, red bad, yellow refused."""
        if value in _GOOD:
            return self.paint(value, fg="green")
        if value in _BAD:
            return self.paint(value, fg="red", bold=True)
        if value in _WARN:
            return self.paint(value, fg="yellow")
        return self.paint(value, fg="cyan") if value == "running" else value

    def diff_line(self, line: str) -> str:
        """One line of a unified diff (already safe), coloured by its kind."""
        if line.startswith(("+++", "---")):
            return self.paint(line, bold=True)
        if line.startswith("+"):
            return self.paint(line, fg="green")
        if line.startswith("-"):
            return self.paint(line, fg="red")
        if line.startswith("@@"):
            return self.paint(line, fg="cyan")
        return line


PLAIN = Style()
