"""runner in AutoGen 0.7 (runner.integrations.autogen), with the real autogen-core,
autogen-agentchat and autogen-ext packages and the scripted OpenAI-compatible server: the
cases AutoGen's suite applies to every executor (single and several blocks, state, a
timeout, cancellation, restart), a CodeExecutorAgent alone and in a team with an
AssistantAgent, the log and the viewer, and hostile blocks."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("autogen_agentchat", reason="the autogen extra: pip install 'runner-sandbox[autogen]'")

from autogen_agentchat.agents import AssistantAgent, CodeExecutorAgent  # noqa: E402
from autogen_agentchat.conditions import MaxMessageTermination, TextMentionTermination  # noqa: E402
from autogen_agentchat.messages import TextMessage  # noqa: E402
from autogen_agentchat.teams import RoundRobinGroupChat  # noqa: E402
from autogen_core import CancellationToken  # noqa: E402
from autogen_core.code_executor import CodeBlock, CodeExecutor  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402
from fake_openai_server import FakeOpenAI  # noqa: E402
from integration_cases import HOSTILE, logged  # noqa: E402

from runner import FunctionSet, Limits, Sandbox  # noqa: E402
from runner.integrations.autogen import RunnerCodeExecutor  # noqa: E402
from runner.logs import LogStore  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with LogStore(tmp_path_factory.mktemp("autogen") / "log.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def sandbox(store):
    with Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=10)) as box:
        yield box


def run(coroutine):
    return asyncio.run(coroutine)


def python(code: str, language: str = "python") -> CodeBlock:
    return CodeBlock(code=code, language=language)


async def execute(executor: RunnerCodeExecutor, *codes: str, language: str = "python"):
    return await executor.execute_code_blocks([python(c, language) for c in codes], CancellationToken())


def model_client(server: FakeOpenAI) -> OpenAIChatCompletionClient:
    return OpenAIChatCompletionClient(
        model=server.model, base_url=server.url, api_key="k",
        model_info={"vision": False, "function_calling": True, "json_output": False,
                    "family": "unknown", "structured_output": False})


def test_single_several_state_and_restart(sandbox):
    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=5) as executor:
            assert isinstance(executor, CodeExecutor)
            result = await execute(executor, "import math; print('hello world!')")
            assert result.exit_code == 0 and "hello world!" in result.output
            result = await execute(executor, "print('hello world!')", "a = 100 + 100; print(a)")
            assert result.exit_code == 0 and "hello world!" in result.output and "200" in result.output
            assert (await execute(executor, "print(a)")).output == "200"  # state carries
            await executor.restart()
            result = await execute(executor, "print(a)")
            assert result.exit_code == 1 and "NameError" in result.output
            result = await execute(executor, "echo 'hello world!'", language="sh")
            assert result.exit_code == 1 and result.output.startswith("sh blocks do not run here")

    run(scenario())


def test_timeout_is_a_result_with_autogens_convention(sandbox):
    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=1) as executor:
            result = await execute(executor, "while True:\n    pass\nprint('hello world!')")
            assert result.exit_code == 124 and "Timeout" in result.output
            assert (await execute(executor, "print('usable')")).output == "usable"

    run(scenario())


def test_cancellation_returns_at_once_stops_the_block_and_the_next_block_runs(sandbox, store):
    """A cancelled block under a 60 s limit returns at once and is stopped then: the log
    has it as cancelled within seconds (not a timeout a minute later)."""
    spin = "spin_marker = 1\nwhile True:\n    pass"

    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=60) as executor:
            await execute(executor, "kept = 1")
            token = CancellationToken()
            started = time.monotonic()
            pending = asyncio.ensure_future(executor.execute_code_blocks([python(spin)], token))
            await asyncio.sleep(0.5)
            token.cancel()
            result = await pending
            assert time.monotonic() - started < 5
            assert result.exit_code == 125 and "Cancelled" in result.output
            after = await execute(executor, "print('fresh' if 'kept' not in dir() else 'old')")
            assert after.exit_code == 0 and after.output == "fresh"

    run(scenario())
    deadline = time.monotonic() + 20
    while True:
        spun = [r for r in store.list_executions(limit=None) if r.request.code == spin]
        if spun or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert spun and spun[0].result.error.type == "Cancelled" and spun[0].result.duration_ms < 10_000


def test_a_cancelled_token_before_the_call(sandbox):
    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=2) as executor:
            token = CancellationToken()
            token.cancel()
            result = await executor.execute_code_blocks([python("print(1)")], token)
            assert result.exit_code == 125

    run(scenario())


def test_code_executor_agent_alone(sandbox, store):
    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=5) as executor:
            agent = CodeExecutorAgent("runner", code_executor=executor)
            message = TextMessage(content="```python\nsquares = [n * n for n in range(4)]\nprint(squares)\n```",
                                  source="user")
            response = await agent.on_messages([message], CancellationToken())
            assert "[0, 1, 4, 9]" in response.chat_message.content
            again = TextMessage(content="```python\nprint(sum(squares))\n```", source="user")
            response = await agent.on_messages([again], CancellationToken())
            assert response.chat_message.content.strip() == "14"

    run(scenario())


def test_assistant_and_code_executor_agent_team(sandbox, store):
    functions = FunctionSet("autogen-tools", [
        {"name": "cube", "description": "n cubed", "arguments": {"n": {"type": "integer"}},
         "code": "def cube(n):\n    return n ** 3\n"}], log_store=False)

    async def scenario() -> list[str]:
        with FakeOpenAI() as server:
            server.replies("```python\nvalue = cube(3)\nprint(value)\n```",
                           "```python\nprint(value + 1)\n```", "It is 28. TERMINATE")
            async with RunnerCodeExecutor(sandbox, timeout=5, functions=functions) as executor:
                team = RoundRobinGroupChat(
                    [AssistantAgent("assistant", model_client=model_client(server)),
                     CodeExecutorAgent("runner", code_executor=executor)],
                    termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(8))
                result = await team.run(task="What is 3 cubed, plus one?")
                return [str(m.content) for m in result.messages]

    contents = run(scenario())
    assert "27" in contents[2] and contents[4].strip() == "28" and contents[-1].endswith("TERMINATE")
    blocks = [r for r in store.list_executions(limit=None) if "cube(3)" in r.request.code]
    assert len(blocks) == 1
    logged(store, blocks[0].id, "autogen")


def test_an_executor_that_opens_its_own_sandbox_logs_the_integration_as_source():
    async def scenario() -> None:
        executor = RunnerCodeExecutor(timeout=5)
        try:
            result = await execute(executor, "print('logged')")
            store = executor.sandbox.log_store
            assert store is not None and store.get_execution(result.execution_ids[0]).source == "autogen"
            logged(store, result.execution_ids[0], "autogen")
        finally:
            await executor.stop()

    run(scenario())


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_blocks_give_a_normal_result_and_the_sandbox_stays_usable(sandbox, store, name):
    async def scenario() -> None:
        async with RunnerCodeExecutor(sandbox, timeout=1) as executor:
            result = await execute(executor, HOSTILE[name])
            assert result.exit_code != 0 or name == "flood"
            if name == "flood":
                assert "cut" in result.output and len(result.output) < 30_000
            after = await execute(executor, "print('still here')")
            assert after.exit_code == 0 and after.output == "still here"
            logged(store, result.execution_ids[0], "autogen")

    run(scenario())


def test_an_agent_with_the_executor_dumps_and_loads_as_autogens_own(tmp_path):
    """Declarative use (AutoGen Studio): an agent holding the executor dumps to JSON and
    loads again, with the tier, limits, packages, function set and work_dir it had."""
    import json

    from autogen_core import ComponentModel

    functions = FunctionSet("dumped", [{"name": "double", "description": "2x",
                                        "arguments": {"x": {"type": "number"}},
                                        "code": "def double(x):\n    return 2 * x\n"}],
                            log_store=False)
    executor = RunnerCodeExecutor(backend="jail", timeout=7, packages=["sympy"],
                                  functions=functions, work_dir=tmp_path / "work")
    agent = CodeExecutorAgent("runner", code_executor=executor)
    text = json.dumps(agent.dump_component().model_dump())
    config = json.loads(text)["config"]["code_executor"]
    assert config["provider"] == "runner.integrations.autogen.RunnerCodeExecutor"
    assert config["config"]["limits"]["timeout_s"] == 7 and config["config"]["packages"] == ["sympy"]
    loaded = CodeExecutorAgent.load_component(ComponentModel.model_validate_json(text))
    again = loaded._code_executor
    assert isinstance(again, RunnerCodeExecutor) and again is not executor
    try:
        result = asyncio.run(execute(again, "import sympy\nprint(double(21), sympy.__name__)\n"
                                            "open('made.txt', 'w').write('x')"))
    finally:
        asyncio.run(again.stop())
    assert result.exit_code == 0 and result.output.startswith("42 sympy\nFiles made: made.txt")
    assert again.limits.timeout_s == 7 and (tmp_path / "work" / "made.txt").read_text() == "x"


def add_two_numbers(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


def expand_square(x: str) -> str:
    """(x)^2 expanded."""
    return str(sympy.expand(sympy.sympify(x) ** 2))  # noqa: F821 (sympy: its global import)


def test_autogens_own_function_types_are_importable_from_the_functions_module():
    """functions=[...] in AutoGen's own types, as its executors take them: a plain
    callable, a FunctionWithRequirements with its package and global import, and one from
    a string; blocks import them from `functions`, the prompt lists them as AutoGen's
    executors do, and they survive dump and load."""
    from autogen_core import ComponentModel
    from autogen_core.code_executor import FunctionWithRequirements, ImportFromModule

    with_sympy = FunctionWithRequirements.from_callable(
        expand_square, python_packages=["sympy"], global_imports=["sympy"])
    from_text = FunctionWithRequirements.from_str(
        "def shout(text: str) -> str:\n    return text.upper()\n",
        global_imports=[ImportFromModule("math", ["pi"])])
    executor = RunnerCodeExecutor(timeout=20, functions=[add_two_numbers, with_sympy, from_text])
    prompt = executor.format_functions_for_prompt()
    assert "`from functions import foo`" in prompt and "def add_two_numbers(a: " in prompt
    assert '"""(x)^2 expanded."""' in prompt and "def shout(text: str) -> str:" in prompt
    code = ("from functions import add_two_numbers, expand_square, shout\n"
            "print(add_two_numbers(2, 3), expand_square('a+1'), shout('hi'))")
    loaded = RunnerCodeExecutor.load_component(
        ComponentModel.model_validate_json(executor.dump_component().model_dump_json()))
    try:
        for each in (executor, loaded):
            result = asyncio.run(execute(each, code))
            assert (result.exit_code, result.output) == (0, "5 a**2 + 2*a + 1 HI"), result.output
    finally:
        asyncio.run(executor.stop())
        asyncio.run(loaded.stop())


def test_a_team_reset_starts_the_next_task_in_a_fresh_session(sandbox):
    """With RunnerCodeExecutorAgent, team.reset() (AutoGen's way to start over) restarts
    the executor's session: the next task cannot read the previous one's variables. With
    AutoGen's own CodeExecutorAgent, whose reset leaves the executor, it could."""
    from runner.integrations.autogen import RunnerCodeExecutorAgent

    async def scenario(agent_class) -> str:
        with FakeOpenAI() as server:
            server.replies("```python\nsecret = 'first user'\nprint('kept')\n```", "Done. TERMINATE",
                           "```python\nprint(secret)\n```", "Done. TERMINATE")
            async with RunnerCodeExecutor(sandbox, timeout=5) as executor:
                team = RoundRobinGroupChat(
                    [AssistantAgent("assistant", model_client=model_client(server)),
                     agent_class("runner", code_executor=executor)],
                    termination_condition=TextMentionTermination("TERMINATE") | MaxMessageTermination(6))
                await team.run(task="Keep a secret.")
                await team.reset()
                result = await team.run(task="What is the secret?")
                return "\n".join(str(m.content) for m in result.messages)

    fresh = run(scenario(RunnerCodeExecutorAgent))
    assert "NameError" in fresh and "first user" not in fresh
    shared = run(scenario(CodeExecutorAgent))  # AutoGen's own agent: the state leaks across
    assert "first user" in shared
