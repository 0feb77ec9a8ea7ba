"""The README's Python examples run as printed, and show what their comments say.

Every ```python block of README.md runs from the repository's root (where the example
files it loads live), in a fresh RUNNER_HOME. A line `expression  # expected` (or an
expression followed by a comment line) whose comment shows a value is checked: the
value's repr (or its JSON) must match the comment, where `...` stands for anything. The agent example talks to a real
HTTP server speaking the OpenAI protocol; its address is the one thing changed.
"""

from __future__ import annotations

import ast
import json
import re
import runpy
from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAI

REPO = Path(__file__).parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.S | re.M)
PRINTED_URL = "http://127.0.0.1:8000/v1"


def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in expected.split("...")), re.S)


def check(value: Any, expected: str) -> None:
    """The value as the README's comment shows it (as its repr, or as JSON)."""
    pattern = _pattern(expected.strip())
    shown = [repr(value)]
    try:
        shown.append(json.dumps(value))
    except (TypeError, ValueError):
        pass
    assert any(pattern.fullmatch(text) for text in shown), f"README says {expected!r}, got {shown[0]!r}"


def _is_expression(code: str) -> bool:
    try:
        ast.parse(code.strip(), mode="eval")
    except SyntaxError:
        return False
    return True


def with_checks(source: str) -> tuple[str, int]:
    """The block with each commented expression turned into a check; (source, checks)."""
    lines = source.splitlines()
    out: list[str] = []
    checks = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        # Only comments that show a value (a literal) are checked; prose is left alone.
        inline = re.match(r"^(\s*)(\S.*?)\s{2,}# ([(\[{'\"0-9].*)$", line)
        following = lines[index + 1] if index + 1 < len(lines) else ""
        below = re.match(r"^(\s*)# ([(\[{'\"0-9].*)$", following)
        if inline and _is_expression(inline.group(2)):
            out.append(f"{inline.group(1)}check(({inline.group(2)}), {inline.group(3)!r})")
            checks += 1
        elif below and _is_expression(line) and not line.lstrip().startswith("#"):
            indent = line[:len(line) - len(line.lstrip())]
            out.append(f"{indent}check(({line.strip()}), {below.group(2)!r})")
            checks += 1
            index += 1
        else:
            out.append(line)
        index += 1
    return "\n".join(out) + "\n", checks


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_a_readme_example_runs_as_printed(number, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("RUNNER_HOME", str(tmp_path / "home"))
    source, checks = with_checks(BLOCKS[number])
    # Run from a file, as a user's script would (@tool reads the function's source).
    script = tmp_path / f"readme_example_{number + 1}.py"

    def run(text: str) -> None:
        script.write_text(text)
        runpy.run_path(str(script), init_globals={"check": check}, run_name="__main__")

    if PRINTED_URL not in source:
        run(source)
        return
    if "runner.optimizer" in source:  # an agent that answers 42, an optimizer adding a function
        def respond(body: dict) -> str | dict:
            if body["messages"][0]["content"].startswith("You improve the list of functions"):
                return {"tool_calls": [FakeOpenAI.call("add_function", {
                    "name": "times", "description": "The product of two numbers.",
                    "arguments": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "packages": [], "code": "def times(a, b):\n    return a * b\n"})]}
            return "So it is $\\boxed{42}$."

        with FakeOpenAI(model="m", responder=respond) as server:
            run(source.replace(PRINTED_URL, server.url))
            asked = [b for b in server.requests if "add_function" in json.dumps(b.get("tools"))]
            assert asked and "What is 6 * 7?" in asked[0]["messages"][1]["content"]
        return
    if "runner.math" in source:  # a model that answers every problem with 42
        with FakeOpenAI(model="m", responder=lambda body: "So it is $\\boxed{42}$.") as server:
            run(source.replace(PRINTED_URL, server.url))
            assert len(server.requests) >= 5  # solve, then one conversation per problem
        return
    with FakeOpenAI(model="m") as server:
        server.replies(
            json.dumps({"thought": "17% first", "action": {"function": "percent_of",
                                                           "arguments": {"value": 2500000, "percent": 17}}}),
            json.dumps({"thought": "now in words", "action": {"function": "number_in_words",
                                                              "arguments": {"n": 425000}}}),
            json.dumps({"thought": "done", "action": {"function": "finish_conversation",
                                                      "arguments": {"final_answer": "four hundred twenty-five thousand"}}}))
        run(source.replace(PRINTED_URL, server.url))
        tool_results = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"]
    assert any("425000.0" in text for text in tool_results)
    assert any("four hundred twenty-five thousand" in text for text in tool_results)
    assert checks >= 1
