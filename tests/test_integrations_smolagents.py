"""runner in smolagents (runner.integrations.smolagents), with the real smolagents package and
the scripted OpenAI-compatible server: a CodeAgent reaching final_answer with state across
steps, tools and variables in the sandbox, authorised imports, the log and the viewer, and
hostile steps."""

from __future__ import annotations

import pytest

pytest.importorskip("smolagents", reason="the smolagents extra: pip install 'runner-sandbox[smolagents]'")

from fake_openai_server import FakeOpenAI  # noqa: E402
from integration_cases import HOSTILE, logged  # noqa: E402
from smolagents import CodeAgent, OpenAIServerModel, Tool, tool  # noqa: E402

from runner import Limits, Sandbox  # noqa: E402
from runner.errors import ConfigurationError  # noqa: E402
from runner.integrations.smolagents import (  # noqa: E402
    RunnerPythonExecutor,
    StepFailed,
    authorized_packages,
    variables_code,
)
from runner.logs import LogStore  # noqa: E402


@tool
def cube(n: int) -> int:
    """Cube a whole number.

    Args:
        n: the number to cube.
    """
    return n ** 3


class HostTool(Tool):
    name = "read_secret"
    description = "Reads a secret on the host."
    inputs = {"key": {"type": "string", "description": "which"}}
    output_type = "string"

    def forward(self, key: str) -> str:
        return self.secrets[key]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with LogStore(tmp_path_factory.mktemp("smolagents") / "log.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def sandbox(store):
    with Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=10)) as box:
        yield box


def step(thought: str, code: str) -> str:
    return f"Thought: {thought}\n<code>\n{code}\n</code>"


def agent(server: FakeOpenAI, executor: RunnerPythonExecutor, tools=(), **options) -> CodeAgent:
    model = OpenAIServerModel(model_id=server.model, api_base=server.url, api_key="k")
    return CodeAgent(tools=list(tools), model=model, executor=executor, max_steps=5, verbosity_level=0,
                     **options)


def test_code_agent_reaches_final_answer_with_state_tools_and_variables(sandbox, store):
    with FakeOpenAI() as server, RunnerPythonExecutor(sandbox, timeout=5) as executor:
        server.replies(step("Cube the base.", "volume = cube(side)\nprint(volume)"),
                       step("Add one.", "final_answer({'volume': volume, 'plus_one': volume + 1})"))
        result = agent(server, executor, tools=[cube]).run(
            "What is the cube of side, plus one?", additional_args={"side": 3})
        assert result == {"volume": 27, "plus_one": 28}
        # the second model request carried the first step's printed output
        assert "27" in str(server.requests[1]["messages"])
    steps = [r for r in store.list_executions(limit=None) if r.meta.get("smolagents") == "step"]
    assert [r.request.code for r in steps[::-1]][-2:] == [
        "volume = cube(side)\nprint(volume)", "final_answer({'volume': volume, 'plus_one': volume + 1})"]
    assert len({r.meta["session"] for r in steps[:2]}) == 1  # one session, state carried
    for record in steps[:2]:
        logged(store, record.id, "smolagents")


def test_a_failing_step_is_read_by_the_model_and_the_run_goes_on(sandbox):
    with FakeOpenAI() as server, RunnerPythonExecutor(sandbox, timeout=1) as executor:
        server.replies(step("Try.", "print(undefined_name)"),
                       step("Loop.", "while True:\n    pass"),
                       step("Import.", "import os\nos.listdir('/')"),
                       step("Answer.", "final_answer(42)"))
        assert agent(server, executor).run("Answer 42.") == 42
        sent = str(server.requests[-1]["messages"])
        assert "NameError" in sent and "Timeout" in sent and "import of 'os' is not allowed" in sent


def test_executor_protocol_directly(sandbox):
    with RunnerPythonExecutor(sandbox, timeout=5) as executor:
        executor.send_tools({})
        executor.send_variables({"numbers": [1, 2, 3], "label": "it's \"quoted\"\n'''"})
        out = executor("total = sum(numbers)\nprint(label)")
        assert not out.is_final_answer and out.output is None
        assert out.logs == "it's \"quoted\"\n'''\n"  # (its last newline kept, as smolagents' own)
        answer = executor("final_answer(total)")
        assert answer.is_final_answer and answer.output == 6
        with pytest.raises(StepFailed) as failed:
            executor("1 / 0")
        assert "ZeroDivisionError" in str(failed.value)
        caught = executor("try:\n    final_answer('x')\nexcept Exception:\n    print('not caught')")
        assert caught.is_final_answer and caught.output == "x"  # final_answer is not an Exception


RATE = 3


class Multiplier(Tool):
    name = "multiplier"
    description = "Multiplies by a factor."
    inputs = {"x": {"type": "integer", "description": "the number"}}
    output_type = "integer"

    def __init__(self, factor=3):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        import math
        return math.prod([x, self.factor])


@tool
def scaled(x: int) -> int:
    """Scales by the host module's rate.

    Args:
        x: the number
    """
    return x * RATE


def test_tool_subclasses_ship_as_smolagents_remote_executors_ship_them():
    """A Tool subclass runs in the sandbox (its class's source, an instance with its
    defaults), beside @tool functions; one that reads what it lacks fails there, in the
    sandbox, and the host's object is never reached."""
    with RunnerPythonExecutor(timeout=10) as executor:  # the default tier, the jail
        executor.send_tools({"multiplier": Multiplier(), "cube": cube, "read_secret": HostTool()})
        out = executor("print(multiplier(x=4), cube(2))\nmultiplier(5)")
        assert (out.output, out.logs) == (15, "12 8\n")
        with pytest.raises(StepFailed) as failed:
            executor("read_secret(key='token')")
        assert "AttributeError" in str(failed.value) and "secrets" in str(failed.value)


def test_tools_that_cannot_run_in_the_sandbox_are_refused_with_the_reason(sandbox):
    """A @tool that reads a module constant of the host passes smolagents and would fail
    with NameError at its first call in the sandbox: it is refused when the run starts."""
    with RunnerPythonExecutor(sandbox) as executor:
        with pytest.raises(ConfigurationError) as refused:
            executor.send_tools({"cube": cube, "scaled": scaled})
        assert "scaled reads RATE, which it does not define" in refused.value.message
        assert "cube" not in refused.value.message


def test_authorized_imports_map_onto_what_the_sandbox_allows():
    assert authorized_packages(["sympy", "math", "sympy.*"], "restricted") == ()
    with pytest.raises(ConfigurationError) as refused:
        authorized_packages(["numpy", "math", "os"], "restricted")
    assert "'numpy', 'os'" in refused.value.message and "jail" in refused.value.fix
    for tier in ("jail", "docker"):  # packages installed for the sandbox
        assert authorized_packages(["numpy.linalg", "json", "PIL"], tier) == ("numpy", "pillow")
        with pytest.raises(ConfigurationError):
            authorized_packages(["*"], tier)
    with pytest.raises(ConfigurationError):
        RunnerPythonExecutor(backend="restricted", additional_authorized_imports=["requests"])


def test_variables_are_data_never_code():
    hostile = {"x": "'); import os; os.system('id'); ('"}
    code = variables_code(hostile)
    assert code.splitlines()[1] == "x = _runner_json.loads('\"\\'); import os; os.system(\\'id\\'); (\\'\"')"
    for bad in ({"__import__": 1}, {"a b": 1}, {"class": 1}, {"v": object()}):
        with pytest.raises(ConfigurationError):
            variables_code(bad)


def test_an_executor_that_opens_its_own_sandbox_logs_the_integration_as_source():
    with RunnerPythonExecutor(timeout=5) as executor:
        executor("print('logged')")
        store = executor.sandbox.log_store
        assert store is not None
        record = store.list_executions(source="smolagents", limit=1)[0]
        logged(store, record.id, "smolagents")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_steps_and_the_sandbox_stays_usable(sandbox, store, name):
    with RunnerPythonExecutor(sandbox, timeout=1) as executor:
        executor("kept = 1")
        if name == "flood":
            out = executor(HOSTILE[name])
            assert "cut" in out.logs and len(out.logs) < 30_000
        else:
            with pytest.raises(StepFailed) as failed:
                executor(HOSTILE[name])
            logged(store, failed.value.result.id, "smolagents")
        assert executor("print('still here')").logs == "still here\n"


@pytest.mark.docker
def test_on_docker_authorized_imports_become_sandbox_packages(store):
    from conftest import backend_options

    with Sandbox(backend="docker", log_store=store, **backend_options("docker")) as box, \
            RunnerPythonExecutor(box, additional_authorized_imports=["numpy.linalg", "statistics"],
                                 timeout=30) as executor:
        assert executor.packages == ("numpy",)
        out = executor("import numpy\nfinal_answer(int(numpy.linalg.matrix_rank(numpy.eye(3))))")
        assert out.is_final_answer and out.output == 3


@pytest.mark.parametrize("code", [
    "x = 40\nx + 2",
    "print('tool gave', 84)",
    "values = (1, 2)\nvalues",
    "{1: 'x', 2: {3, 4}}",
    "import math\nmath.pi  # the last line is an expression",
    "total = 0\nfor i in range(3):\n    total += i",
])
def test_a_step_reads_as_smolagents_own_executor_reads_it(code):
    """Side by side with smolagents' LocalPythonExecutor: a step ending in an expression
    has its value as the output, and the printed logs keep their last newline (smolagents
    follows them with "Last output from code snippet:")."""
    from smolagents.local_python_executor import LocalPythonExecutor

    local = LocalPythonExecutor(["math"])
    local.send_tools({})
    expected = local(code)
    with RunnerPythonExecutor(timeout=10) as executor:  # the default tier, the jail
        executor.send_tools({})
        got = executor(code)
    assert (got.output, got.logs, got.is_final_answer) == \
        (expected.output if "=" not in code.splitlines()[-1] else None, expected.logs, False)


def test_variables_keep_their_types_as_smolagents_remote_executors_send_them():
    """additional_args holding a tuple, int keys, a set, a date and bytes used to fail the
    run; they arrive as themselves (smolagents' own safe serialization), and plain JSON
    data still arrives as JSON text, on any tier."""
    import datetime

    values = {"pair": (1, 2), "keys": {1: "x"}, "tags": {"a", "b"},
              "when": datetime.date(2026, 11, 28), "raw": b"hi", "n": 3}
    with RunnerPythonExecutor(timeout=10) as executor:  # the default tier, the jail
        executor.send_tools({})
        executor.send_variables(values)
        out = executor("final_answer([pair, keys, tags, when, raw, n])")
    assert out.output == [(1, 2), {1: "x"}, {"a", "b"}, datetime.date(2026, 11, 28), b"hi", 3]
    assert variables_code({"n": 3}).splitlines()[1] == "n = _runner_json.loads('3')"


def test_a_code_agents_steps_are_the_turns_of_one_agent_run(tmp_path):
    """The model's code of each step is a turn (not the wrapper that returns its last
    value, nor the plumbing that defines tools and variables), ended with the executor."""
    from runner import Sandbox
    from runner.logs.agent import AgentLog

    with LogStore(tmp_path / "log.db") as store, Sandbox(log_store=store) as box:
        with FakeOpenAI() as server, RunnerPythonExecutor(box, timeout=5) as executor:
            server.replies(step("Cube the base.", "volume = cube(side)\nprint(volume)"),
                           step("Done.", "final_answer(volume + 1)"))
            assert agent(server, executor, tools=[cube]).run(
                "Cube plus one?", additional_args={"side": 3}) == 28
        (run,) = AgentLog(store).list(limit=None)
        run = AgentLog(store).get(run.id)
    assert run.settings["integration"] == "smolagents" and run.status == "terminated"
    assert [t.reply["content"] for t in run.turns] == [
        "```python\nvolume = cube(side)\nprint(volume)\n```",
        "```python\nfinal_answer(volume + 1)\n```"]
    assert "27" in run.turns[0].feedback_messages[0]["content"]
