"""A log with one of everything the viewer shows, made by the real components: executions
run in the restricted sandbox (ok, error, a function call, output with hostile markup and
terminal escapes), an agent run driven through the scripted OpenAI server (with hostile
model replies), function-set changes with diffs, and an AgentOptimizer training (with its
evaluations) on problems, answers, function descriptions and refusals that are hostile.

`HOSTILE` is what an attacker would put in program output or a model reply: markup that
would run script if pasted into a page, a `javascript:` link, and terminal escapes that
would clear the screen, set the title and write the clipboard.
"""

from __future__ import annotations

import json
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
    # An AgentOptimizer training of one epoch (the baseline, then an improvement) and its
    # evaluations, epoch by epoch: seeded with `training=True` only
    training: str | None = None
    evaluations: list[str] | None = None


def _training(path: Path, store: LogStore) -> tuple[str, list[str]]:
    """One epoch of training on three problems, one of them hostile in every field."""
    from runner.math.training import train

    problems = path.parent / "hostile_problems.jsonl"
    rows = [{"id": "p-hostile", "problem": f"Add one and one. {HOSTILE}", "answer": "2",
             "type": f"Algebra {HOSTILE}", "level": "Level 1"},
            {"id": "p-2", "problem": "What is 3 + 4?", "answer": "7", "type": "Algebra",
             "level": 2},
            {"id": "p-3", "problem": "What is 2 * 5?", "answer": "10", "type": "Prealgebra",
             "level": 3}]
    problems.write_text("".join(json.dumps(row) + "\n" for row in rows))
    gold = {row["problem"]: row["answer"] for row in rows}
    helper = {"name": "seed_helper", "description": f"Helps. {HOSTILE}",
              "arguments": {"x": {"type": "integer"}}, "packages": [],
              "code": "def seed_helper(x):\n    return x\n"}
    script = [{"revise_function": {**helper, "name": f"no_such_function {HOSTILE}"}},
              {"add_function": helper}]

    def respond(body: dict) -> str | dict:
        system = body["messages"][0]["content"]
        if system.startswith("You improve the list of functions"):
            if not script:
                return "TERMINATE"
            name, arguments = next(iter(script.pop(0).items()))
            return {"tool_calls": [FakeOpenAI.call(name, arguments)]}
        task = body["messages"][1]["content"].rpartition("Problem:")[2].lstrip(" \n")
        right = "seed_helper" in system or task == "What is 3 + 4?"
        return f"\\boxed{{{gold[task] if right else HOSTILE}}}"

    with FakeOpenAI(responder=respond) as server:
        llm = OpenAIChat("fake-model", base_url=server.url, api_key="k", backoff_s=0.001)
        report = train(problems, llm=llm, epochs=1, max_actions=1, log_store=store,
                          out=path.parent / "seeded_learned.json")
    return report.id, [epoch.evaluation_id for epoch in report.epochs if epoch.evaluation_id]


def _spec(name: str, code: str, description: str = "") -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "description": description or f"{name}.",
                                   "arguments": {"x": {"type": "integer"}}, "code": code})


def seed(path: Path, *, training: bool = False) -> Seeded:
    """Fill the log at `path` (created if missing); with `training`, also a training."""
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
        trained, evaluations = _training(path, store) if training else (None, None)
    return Seeded(path=path, ok=ok, error=error, hostile=hostile, call=call, run=run.id,
                  run_executions=run.execution_ids, set_name="seed_tools", function="double",
                  training=trained, evaluations=evaluations)


_SEED_SCRIPT = """
import dataclasses, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from logs_seed import seed
seeded = seed(Path(sys.argv[2]), training=sys.argv[3] == "1")
print(json.dumps({**dataclasses.asdict(seeded), "path": str(seeded.path)}))
"""


def seed_apart(path: Path, *, training: bool = False) -> Seeded:
    """`seed`, in a process of its own: a training's answer checker forks worker processes
    under an address-space limit, which a test process that has connected to Ray (and so
    mapped gigabytes) cannot give them."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SEED_SCRIPT, str(Path(__file__).parent),
                           str(path), "1" if training else "0"], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"seeding {path} failed:\n{done.stderr}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Seeded(**{**data, "path": Path(data["path"])})
