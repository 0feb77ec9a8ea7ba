"""runner.terminal: what reaches a person's terminal from programs and models is inert."""

from __future__ import annotations

import io
import os
import pty

import pytest

from runner.terminal import Style, colour_enabled, is_terminal, sanitize_for_terminal


@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: window title
    ("\x1b]52;c;ZXZpbA==\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\"),  # OSC 52: the clipboard
    ("\x9b31m\x9d0;t\x9c", "\\x9b31m\\x9d0;t\\x9c"),  # C1 CSI, OSC, ST
    ("abc\rXYZ", "abc\\x0dXYZ"),  # a lone CR would overwrite the line
    ("a\bb\x7f", "a\\x08b\\x7f"),
    ("left\u202eright\u2066", "left\\u202eright\\u2066"),  # bidi overrides and isolates
    ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
])
def test_control_sequences_become_visible_text(text: str, shown: str):
    assert sanitize_for_terminal(text) == shown


def test_ordinary_text_is_unchanged():
    text = "line 1\n\tindented — ünïcödé ✓ 日本\nwindows\r\nend"
    assert sanitize_for_terminal(text) == text.replace("\r\n", "\n")
    assert sanitize_for_terminal("") == ""


def test_a_sanitised_text_can_be_printed_and_contains_no_control_character():
    nasty = "".join(chr(c) for c in range(0xA0)) + "\ud800\u202e"
    out = sanitize_for_terminal(nasty)
    out.encode("utf-8")  # lone surrogates would raise here
    assert all(ch in "\n\t" or (0x20 <= ord(ch) < 0x7F) or ord(ch) >= 0xA0 for ch in out)
    assert "\ud800" not in out and "\u202e" not in out


def test_style_raw_keeps_the_text_and_colour_only_when_asked():
    plain = Style()
    assert plain.text("\x1b[31m") == "\\x1b[31m"
    assert Style(raw=True).text("\x1b[31m") == "\x1b[31m"
    assert plain.status("error") == "error"
    painted = Style(colour=True).status("error")
    assert painted != "error" and "error" in painted and painted.startswith("\x1b[")
    assert Style(colour=True).diff_line("+added").startswith("\x1b[32m")


def test_colour_needs_a_terminal_and_no_NO_COLOR(monkeypatch):
    master, slave = pty.openpty()
    try:
        with os.fdopen(slave, "w", closefd=False) as tty:
            monkeypatch.delenv("NO_COLOR", raising=False)
            monkeypatch.setenv("TERM", "xterm-256color")
            assert is_terminal(tty) and colour_enabled(tty)
            assert Style.for_stream(tty).colour
            monkeypatch.setenv("NO_COLOR", "1")
            assert not colour_enabled(tty) and not Style.for_stream(tty).colour
            monkeypatch.delenv("NO_COLOR")
            monkeypatch.setenv("TERM", "dumb")
            assert not colour_enabled(tty)
    finally:
        os.close(master)
        os.close(slave)
    assert not is_terminal(io.StringIO()) and not colour_enabled(io.StringIO())
    closed = io.StringIO()
    closed.close()
    assert not is_terminal(closed) and not is_terminal(None)
