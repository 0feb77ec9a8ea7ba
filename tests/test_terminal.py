"""Terminal safety: what programs and models print cannot drive the user's terminal.

`sanitize_for_terminal` is checked on every kind of control sequence; the commands are run
for real, under a pseudo-terminal (what a person sees), through a pipe (what a script
gets: a program's output exactly) and with --json and --raw.
"""

from __future__ import annotations

import io

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec
from runner.logs import Author, LogStore
from runner.terminal import colour_enabled, diff, json_text, sanitize_for_terminal, status, style

RUNNER = [sys.executable, "-m", "runner"]

OSC_TITLE_BEL = "\x1b]0;pwned\x07"
OSC_TITLE_ST = "\x1b]2;pwned\x1b\\"
OSC_CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
CSI_CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
HOSTILE = (OSC_TITLE_BEL + OSC_TITLE_ST + OSC_CLIPBOARD + CSI_CLEAR + C1_CSI + "safe\rEVIL"
           + "\u202eevil\u202c" + "\x1bP1$r\x1b\\" + "end\x1b")
# Every character that may start or hide a sequence, or reorder what is shown.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                    "\u2066-\u2069\ud800-\udfff]")


# -- the function ----------------------------------------------------------------------------


@pytest.mark.parametrize("text, shown", [
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    (OSC_TITLE_BEL, "\\x1b]0;pwned\\x07"),
    (OSC_TITLE_ST, "\\x1b]2;pwned\\x1b\\"),
    (OSC_CLIPBOARD, "\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\\x07"),
    ("\x9b2J", "\\x9b2J"),
    ("\x9d0;title\x9c", "\\x9d0;title\\x9c"),
    ("lone escape at the end\x1b", "lone escape at the end\\x1b"),
    ("safe\rEVIL", "safe\\rEVIL"),
    ("line\r\nnext", "line\nnext"),
    ("back\x08\x08space", "back\\x08\\x08space"),
    ("bell\x07 nul\x00 del\x7f", "bell\\x07 nul\\x00 del\\x7f"),
    ("a\u202eb\u202cc", "a\\u202eb\\u202cc"),
    ("\u2066isolate\u2069 \u200fmark\u200e \u061c", "\\u2066isolate\\u2069 \\u200fmark\\u200e \\u061c"),
    ("line\u2028separator", "line\\u2028separator"),
    ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
    ("tabs\tand\nnewlines stay", "tabs\tand\nnewlines stay"),
    ("ünïcödé, 中文, emoji 🙂, maths ∑", "ünïcödé, 中文, emoji 🙂, maths ∑"),
])
def test_sanitize_for_terminal(text, shown):
    assert sanitize_for_terminal(text) == shown


def test_no_unsafe_character_survives():
    every = "".join(chr(c) for c in range(0x3000)) + "".join(chr(c) for c in range(0xD800, 0xE000))
    assert UNSAFE.search(sanitize_for_terminal(every)) is None
    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0)]:
        if chr(code) not in "\n\t":
            assert chr(code) not in sanitize_for_terminal(chr(code)), hex(code)


def test_json_text_is_exact_and_safe():
    data = {"stdout": HOSTILE + "\udc80\u2028", "n": [1, 2.5, None, True]}
    text = json_text(data)
    assert json.loads(text) == data
    assert UNSAFE.search(text) is None


def test_colour_helpers(monkeypatch):
    assert style("ok", "ok", enabled=True) == "\x1b[32mok\x1b[0m"
    assert style("ok", "ok", enabled=False) == "ok"
    assert status("crashed", enabled=True) == "\x1b[31mcrashed\x1b[0m"
    assert status("something new", enabled=True) == "something new"
    coloured = diff("--- a\n+++ b\n@@ -1 +1 @@\n-old\n+new\n same", enabled=True)
    assert "\x1b[31m-old\x1b[0m" in coloured and "\x1b[32m+new\x1b[0m" in coloured
    assert coloured.endswith("\n same")
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty:
        monkeypatch.delenv("NO_COLOR", raising=False)
        monkeypatch.setenv("TERM", "xterm")
        assert colour_enabled(tty)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not colour_enabled(tty)
    os.close(master)
    assert not colour_enabled(sys.stdout if not sys.stdout.isatty() else open(os.devnull, "w"))


# -- the commands -------------------------------------------------------------------------------


def in_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run a command with stdout and stderr on a pseudo-terminal; (exit status, what it showed)."""
    master, slave = pty.openpty()
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the other side is closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return process.wait(timeout=120), shown.decode("utf-8", "replace")


def only_our_colours(text: str) -> bool:
    """Every ESC in `text` starts one of the CLI's own SGR colour codes."""
    return all(re.match(r"\x1b\[\d+m", text[i:]) for i in range(len(text)) if text[i] == "\x1b")


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    environment.update(RUNNER_HOME=str(tmp_path / "home"), TERM="xterm")
    return environment


@pytest.fixture
def hostile_program(tmp_path) -> Path:
    path = tmp_path / "hostile.py"
    path.write_text(f"print({HOSTILE!r})\nraise ValueError({HOSTILE!r})\n")
    return path


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_exec_on_a_terminal_shows_escapes_not_sequences(env, hostile_program):
    code, shown = in_terminal(RUNNER + ["exec", str(hostile_program)], env)
    assert code == 1
    assert "\\x1b]0;pwned\\x07" in shown and "\\x1b]52;c;" in shown and "safe\\rEVIL" in shown
    assert "\\x9b31m" in shown and "\\u202eevil" in shown
    assert "\x9b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert only_our_colours(shown)
    assert "\x1b[31merror\x1b[0m" in shown  # the status, in colour on a terminal


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_no_color_turns_colour_off(env, hostile_program):
    code, shown = in_terminal(RUNNER + ["exec", str(hostile_program)], {**env, "NO_COLOR": "1"})
    assert code == 1 and "\x1b" not in shown and "status error" in shown


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_raw_keeps_the_sequences(env, hostile_program):
    code, shown = in_terminal(RUNNER + ["exec", str(hostile_program), "--raw"], env)
    assert code == 1 and OSC_CLIPBOARD in shown and "\x9b31m" in shown


def test_piped_output_of_a_program_is_exact_and_json_is_exact(env, hostile_program, tmp_path):
    piped = subprocess.run(RUNNER + ["exec", str(hostile_program)], capture_output=True, env=env,
                           timeout=120)
    assert piped.returncode == 1
    assert piped.stdout.decode() == HOSTILE + "\n"  # a program's output, exactly
    assert "\x1b]" not in piped.stderr.decode()  # the error message is rendered: made safe
    as_json = subprocess.run(RUNNER + ["exec", str(hostile_program), "--json"], capture_output=True,
                             env=env, timeout=120)
    text = as_json.stdout.decode()
    assert UNSAFE.search(text.strip()) is None
    result = json.loads(text)
    assert result["stdout"] == HOSTILE + "\n" and HOSTILE in result["error"]["message"]
    with LogStore(Path(env["RUNNER_HOME"]) / "runner.db") as store:
        assert store.get_execution(result["id"]).result.stdout == HOSTILE + "\n"  # the log: exact


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_call_on_a_terminal(env, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "f", "code": f"def f():\n    print({HOSTILE!r})\n    return {HOSTILE!r}\n"}]))
    code, shown = in_terminal(RUNNER + ["call", str(path), "f"], env)
    assert code == 0
    assert "\\x1b]52;c;" in shown and only_our_colours(shown) and "\x9b" not in shown


def test_functions_show_and_errors_are_always_made_safe(env, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "f", "description": "Adds." + OSC_TITLE_BEL,
                                 "arguments": {"x": {"type": "string", "description": OSC_CLIPBOARD,
                                                     "enum": ["\u202eevil", "b"]}},
                                 "code": f"def f(x):\n    return {HOSTILE!r}\n"}]))
    shown = subprocess.run(RUNNER + ["functions", "show", str(path), "--code"], capture_output=True,
                           text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "Adds.\\x1b]0;pwned\\x07" in shown.stdout and "\\x1b]52;c;" in shown.stdout
    assert UNSAFE.search(shown.stdout.replace("\n", "").replace("\t", "")) is None
    raw = subprocess.run(RUNNER + ["functions", "show", str(path), "--raw"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert OSC_TITLE_BEL in raw.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "f", "code": "def f(): pass", "x\x1b]0;pwned\x07": 1}]))
    error = subprocess.run(RUNNER + ["functions", "show", str(bad)], capture_output=True, text=True,
                           env=env, timeout=120)
    assert error.returncode == 1 and "x\\x1b]0;pwned\\x07" in error.stderr
    assert "\x1b" not in error.stderr


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_functions_history_is_safe_and_coloured_on_a_terminal(env):
    database = Path(env["RUNNER_HOME"]) / "runner.db"
    functions = FunctionSet("hostile", log_store=database)
    functions.add(FunctionSpec.from_dict({"name": "f", "code": "def f():\n    return 1\n"}),
                  by=Author.person("eve" + OSC_TITLE_BEL), note="note" + CSI_CLEAR)
    functions.replace(FunctionSpec.from_dict({"name": "f", "code": f"def f():\n    return {HOSTILE!r}\n"}),
                      by="eve")
    code, shown = in_terminal(RUNNER + ["functions", "history", "hostile"], env)
    assert code == 0
    assert "person eve\\x1b]0;pwned\\x07" in shown and "note\\x1b[2J" in shown
    assert "\\x1b]52;c;" in shown and only_our_colours(shown)
    assert "\x1b[32m+" in shown and "\x1b[31m-" in shown  # the diff, in colour
    _, plain = in_terminal(RUNNER + ["functions", "history", "hostile"], {**env, "NO_COLOR": "1"})
    assert "\x1b" not in plain


@pytest.mark.slow  # drives the CLI on a pseudo-terminal: a few seconds each
def test_agent_answer_and_progress_on_a_terminal(env):
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[FakeOpenAI.call("nope" + OSC_TITLE_BEL, {})])
        server.reply("The answer" + OSC_CLIPBOARD + C1_CSI)
        code, shown = in_terminal(RUNNER + ["agent", "t", "--base-url", server.url, "--model", "m"], env)
    assert code == 0, shown
    assert "The answer\\x1b]52;c;" in shown and "\\x9b31m" in shown
    assert "nope\\x1b]0;pwned\\x07" in shown  # the progress line quotes the model's call
    assert only_our_colours(shown) and "\x9b" not in shown
    assert "\x1b[32manswered\x1b[0m" in shown


# -- Style, the log renderers' choice of sanitising and colour --------------------------

from runner.terminal import Style, is_terminal  # noqa: E402


@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clear the screen, cursor home
    ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),  # OSC: window title
    ("\x1b]52;c;ZXZpbA==\x1b\\", "\\x1b]52;c;ZXZpbA==\\x1b\\"),  # OSC 52: the clipboard
    ("\x9b31m\x9d0;t\x9c", "\\x9b31m\\x9d0;t\\x9c"),  # C1 CSI, OSC, ST
    ("abc\rXYZ", "abc\\rXYZ"),  # a lone CR would overwrite the line
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
