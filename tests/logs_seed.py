"""A log with one of everything the viewer shows, made by the real components: executions
run in the restricted sandbox (ok, error, a function call, output with hostile markup and
terminal escapes), an agent run driven through the scripted OpenAI server (with hostile
model replies), and function-set changes with diffs.

`HOSTILE` is what an attacker would put in program output or a model reply: markup that
would run script if pasted into a page, a `javascript:` link, and terminal escapes that
would clear the screen, set the title and write the clipboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Limits, Sandbox
from runner.agent import Agent, OpenAIChat
from runner.logs import LogStore

HOSTILE = ('<script>alert("pwned")</script><img src=x onerror=alert(1)>'
           '<a href="javascript:alert(2)">click</a><svg onload=alert(3)>'
           "\x1b]0;owned title\x07\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b31m\u202e")


@dataclass
class Seeded:
    path: Path
    ok: str  # an execution that printed "seeded-ok-output"
    error: str  # a ZeroDivisionError
    hostile: str  # HOSTILE in the code, stdout and the error
    call: str  # a function call with arguments and a return value
    run: str  # an agent run
    run_executions: list[str]
    set_name: str
    function: str


def _spec(name: str, code: str, description: str = "") -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "description": description or f"{name}.",
                                   "arguments": {"x": {"type": "integer"}}, "code": code})


def seed(path: Path) -> Seeded:
    """Fill the log at `path` (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with LogStore(path) as store, Sandbox(backend="restricted", log_store=store, source="seed",
                                          limits=Limits(timeout_s=5)) as sandbox:
        ok = sandbox.run("print('seeded-ok-output')").id
        error = sandbox.run("numbers = [1, 2]\nprint(numbers[0] / 0)\n").id
        hostile = sandbox.run(
            f"# {HOSTILE}\ntext = {HOSTILE!r}\nprint(text)\nraise ValueError(text)\n").id
        functions = FunctionSet("seed_tools", [], log_store=store)
        functions.add(_spec("double", "def double(x):\n    return 2 * x\n"), by="author")
        functions.replace(_spec("double", "def double(x):\n    # now with a comment\n    return x + x\n",
                                description=f"Doubles x. {HOSTILE}"), by="reviewer", note=HOSTILE)
        call = sandbox.call(functions, "double", {"x": 21}).id
        with FakeOpenAI() as server:
            server.replies(
                f"I will compute it. {HOSTILE}\n```python\nprint(double(4))\nprint('{HOSTILE[:20]}')\n```",
                f"```python\nprint(double(5))\n```\nthen \\boxed{{10}} {HOSTILE}",
                "The answer is \\boxed{10}.")
            llm = OpenAIChat("fake-model", base_url=server.url, api_key="k", backoff_s=0.001)
            agent = Agent(llm, functions, protocol="code", sandbox=sandbox, limits=Limits(timeout_s=5))
            run = agent.run(f"Double four, then five. {HOSTILE}")
    return Seeded(path=path, ok=ok, error=error, hostile=hostile, call=call, run=run.id,
                  run_executions=run.execution_ids, set_name="seed_tools", function="double")

