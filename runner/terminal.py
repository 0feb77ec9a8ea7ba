"""Text for a person's terminal: hostile text made inert, and colour where it helps.

What a sandboxed program prints and what a model writes can hold control sequences: CSI
(`ESC [`) to move the cursor, clear the screen or recolour it; OSC (`ESC ]`) to retitle the
window (0, 2) or write the clipboard (52), ended by BEL or ST; DCS and other strings;
8-bit C1 controls (U+0080-U+009F, where U+009B is a one-character CSI); a carriage return
that overwrites what was shown before it; and bidirectional overrides that show text in
another order than it runs (the "Trojan Source" trick). `sanitize_for_terminal` writes
every such character as a visible escape (`\\x1b`, `\\x9b`, `\\r`, `\\u202e`), so no
sequence can start and a reader still sees that it was there. Newlines and tabs stay.

Callers decide when: the CLI sanitises what it renders (error messages, function
descriptions, code, diffs, authors, notes) and, when writing to a terminal, a program's
output and a model's answer; `--raw` keeps everything as it is; `--json` and the log keep
the exact text (`json_text` escapes the characters JSON would otherwise carry raw, which
changes no value).

Colour (`colour_enabled`, `style`, `status`, `diff`) is for statuses and diffs, only on a
terminal, and never with `NO_COLOR` set (https://no-color.org) or `TERM=dumb`. `Style`
bundles the two choices a renderer of human-facing text makes (sanitize unless raw;
colour only where it helps) for the log renderers.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import IO, Any

# C0 controls but newline and tab, DEL, C1 controls, the Arabic letter mark, left-to-right
# and right-to-left marks, line and paragraph separators, bidi embeddings, overrides and
# isolates, and lone surrogates (no encoding can write them; printing one fails).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                     "\u2066-\u2069\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def sanitize_for_terminal(text: str) -> str:
    """`text` with every control sequence and reordering character made visible and inert.

    Newlines and tabs are kept; a Windows line end (CR LF) is a newline; a lone CR (which
    would let later text overwrite earlier text) shows as `\\r`."""
    return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))


# JSON strings may carry these raw; escaped, they are the same value and safe to display.
_JSON_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                       "\ud800-\udfff]")


def json_text(data: Any, *, indent: int | None = None) -> str:
    """`data` as JSON that shows safely on a terminal and parses back to exactly `data`."""
    text = json.dumps(data, ensure_ascii=False, indent=indent)
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


# -- colour ------------------------------------------------------------------------------

_CODES = {"ok": "32", "error": "31", "warning": "33", "denied": "35", "muted": "2",
          "heading": "1", "added": "32", "removed": "31", "hunk": "36"}
# Statuses of executions, agent runs and replay verdicts, by what they mean for a reader.
_STATUS_ROLES = {
    "ok": "ok", "answered": "ok", "identical": "ok",
    "error": "error", "crashed": "error", "llm_error": "error", "install_failed": "error",
    "different_status": "error",
    "timeout": "warning", "memory_limit": "warning", "budget": "warning", "max_turns": "warning",
    "gave_up": "warning", "interrupted": "warning", "running": "warning", "terminated": "warning",
    "different_output": "warning",
    "denied": "denied", "invalid_args": "denied",
}


def is_terminal(stream: IO[Any] | None) -> bool:
    """True when `stream` is a terminal (not a pipe, a file or a closed stream)."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


def colour_enabled(stream: IO[Any] | None) -> bool:
    """Colour for `stream`: a terminal, without NO_COLOR (any non-empty value) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return is_terminal(stream)


def style(text: str, role: str, *, enabled: bool) -> str:
    """`text` in the colour of `role` (ok, error, warning, denied, muted, heading, added,
    removed, hunk) when `enabled`; as it is otherwise."""
    code = _CODES.get(role)
    return f"\x1b[{code}m{text}\x1b[0m" if enabled and code and text else text


def status(value: str, *, enabled: bool) -> str:
    """A status word (of a run or an agent run) in its colour."""
    return style(value, _STATUS_ROLES.get(value, ""), enabled=enabled)


def diff(text: str, *, enabled: bool) -> str:
    """A unified diff with added, removed and hunk lines coloured."""
    if not enabled:
        return text
    lines = []
    for line in text.split("\n"):
        body = line.lstrip(" ")  # diffs are often shown indented
        role = _diff_role(body)
        lines.append(line[:len(line) - len(body)] + style(body, role, enabled=True) if role else line)
    return "\n".join(lines)


def _diff_role(line: str) -> str:
    return ("heading" if line.startswith(("+++", "---")) else "added" if line.startswith("+")
            else "removed" if line.startswith("-") else "hunk" if line.startswith("@@") else "")


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

    def status(self, value: str) -> str:
        """A status word coloured by what it means."""
        return status(value, enabled=self.colour)

    def diff_line(self, line: str) -> str:
        """One line of a unified diff (already safe), coloured by its kind."""
        role = _diff_role(line)
        return style(line, role, enabled=self.colour) if role else line


PLAIN = Style()
