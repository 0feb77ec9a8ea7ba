"""runner in AG2 0.9 (runner.integrations.ag2), with the real `ag2` package and the scripted
OpenAI-compatible server: the executor under the cases AG2's own suite applies to every
executor, a ConversableAgent round trip, the AgentOptimizer notebook's MathChat flow, one
AgentOptimizer step, the log and the viewer, and hostile blocks."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("autogen", reason="the ag2 extra: pip install 'runner-sandbox[ag2]'")

from autogen import AssistantAgent, ConversableAgent, UserProxyAgent  # noqa: E402
from autogen.agentchat.contrib.math_user_proxy_agent import MathUserProxyAgent  # noqa: E402
from autogen.coding import CodeBlock, CodeExecutor  # noqa: E402
from fake_openai_server import FakeOpenAI  # noqa: E402
from integration_cases import HOSTILE, TERMINAL_ATTACK, logged  # noqa: E402

from runner import FunctionSet, Limits, Sandbox  # noqa: E402
from runner.integrations.ag2 import (  # noqa: E402
    FunctionCallFailed,
    RunnerCodeExecutor,
    RunnerMathChat,
    SandboxedAgentOptimizer,
    function_map,
    print_last_expression,
    session_per_chat,
)
from runner.errors import ConfigurationError  # noqa: E402
from runner.logs import LogStore  # noqa: E402


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with LogStore(tmp_path_factory.mktemp("ag2") / "log.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def sandbox(store):
    with Sandbox(backend="restricted", log_store=store, limits=Limits(timeout_s=10)) as box:
        yield box


@pytest.fixture
def executor(sandbox):
    with RunnerCodeExecutor(sandbox, timeout=5) as made:
        yield made


def python(code: str, language: str = "python") -> CodeBlock:
    return CodeBlock(code=code, language=language)


def llm_config(server: FakeOpenAI) -> dict:
    return {"config_list": [{"model": server.model, "base_url": server.url, "api_key": "k"}],
            "cache_seed": None}


# -- the cases AG2's suite applies to every executor ------------------------------------------


def test_is_an_ag2_code_executor(executor):
    assert isinstance(executor, CodeExecutor)
    assert executor.code_extractor.extract_code_blocks("```python\nprint(1)\n```")[0].code == "print(1)"


@pytest.mark.parametrize("variant", ["python", "Python", "py"])
def test_single_and_several_blocks(executor, variant):
    result = executor.execute_code_blocks([python("import math; print('hello world!')", variant)])
    assert result.exit_code == 0 and "hello world!" in result.output
    result = executor.execute_code_blocks([python("print('hello world!')", variant),
                                           python("a = 100 + 100; print(a)", variant)])
    assert result.exit_code == 0 and "hello world!" in result.output and "200" in result.output
    assert len(result.execution_ids) == 2


def test_state_carries_between_calls_and_restart_ends_it(executor):
    executor.execute_code_blocks([python("a = 100 + 100")])
    assert executor.execute_code_blocks([python("print(a)")]).output == "200"
    first = executor.session_id
    executor.restart()
    result = executor.execute_code_blocks([python("print(a)")])
    assert result.exit_code == 1 and "NameError" in result.output
    assert executor.session_id != first


def test_blocks_stop_at_the_first_failure(executor):
    result = executor.execute_code_blocks([python("print(1 / 0)"), python("print('never')")])
    assert result.exit_code == 1 and "ZeroDivisionError" in result.output
    assert "never" not in result.output and len(result.execution_ids) == 1


def test_timeout_follows_ag2s_convention(sandbox):
    with RunnerCodeExecutor(sandbox, timeout=1) as executor:
        executor.execute_code_blocks([python("kept = 1")])
        result = executor.execute_code_blocks([python("while True:\n    pass\nprint('hello world!')")])
        assert result.exit_code == 124 and "Timeout" in result.output
        assert "hello world!" not in result.output
        after = executor.execute_code_blocks([python("print('usable')")])
        assert after.exit_code == 0 and after.output == "usable"


def test_other_languages_get_a_refusal_the_model_can_act_on(executor):
    # (the fixture's tier, the restricted one, starts no program: a shell block is refused
    # with what to write instead; on Docker it runs, see the shell test below)
    result = executor.execute_code_blocks([python("echo 'hello world!'", "bash")])
    assert result.exit_code == 1 and result.execution_ids == []
    assert result.output.startswith("bash blocks do not run here") and "```python" in result.output
    other = executor.execute_code_blocks([python("console.log(1)", "javascript")])
    assert other.exit_code == 1 and other.output.startswith("unknown language javascript")


def test_conversable_agent_round_trip(executor):
    agent = ConversableAgent("runner", code_execution_config={"executor": executor}, llm_config=False)
    assert agent.code_executor is executor
    reply = agent.generate_reply(
        [{"role": "user", "content": "Example:\n```python\nprint('hello extract code')\n```\n"}],
        sender=ConversableAgent("user", llm_config=False, code_execution_config=False))
    assert "exitcode: 0" in reply and "hello extract code" in reply


def test_assistant_and_executor_converse_through_the_model_server(sandbox, store):
    with FakeOpenAI() as server, RunnerCodeExecutor(sandbox) as executor:
        server.replies("```python\nanswer = 6 * 7\nprint(answer)\n```",
                       "```python\nprint(answer + 1)\n```", "It is 42. TERMINATE")
        assistant = AssistantAgent("assistant", llm_config=llm_config(server))
        runner_agent = UserProxyAgent("runner", human_input_mode="NEVER", llm_config=False,
                                      code_execution_config={"executor": executor},
                                      is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or ""))
        chat = runner_agent.initiate_chat(assistant, message="What is 6 * 7?", max_turns=3, silent=True)
        contents = [m["content"] for m in chat.chat_history]
        assert any("exitcode: 0" in c and "42" in c for c in contents)
        assert any(c.endswith("43") for c in contents)  # the second block saw the first's state
        # the model was sent the outputs it reads
        assert "42" in json.dumps(server.requests[1]["messages"])


def test_each_chat_of_an_agent_has_a_session_of_its_own(sandbox, store):
    """Two users' chats through one agent (AG2's initiate_chat, clear_history by default):
    with session_per_chat, the second cannot read the first's variables; turns within a
    chat still share state. Without it, AG2 gives the executor no sign of a new chat."""
    with FakeOpenAI() as server, RunnerCodeExecutor(sandbox) as executor:
        server.replies("```python\nsecret = 'first user'\nprint('kept')\n```",
                       "```python\nprint(secret)\n```", "Done. TERMINATE",
                       "```python\nprint(secret)\n```", "Done. TERMINATE")
        assistant = AssistantAgent("assistant", llm_config=llm_config(server))
        proxy = session_per_chat(UserProxyAgent(
            "runner", human_input_mode="NEVER", llm_config=False,
            code_execution_config={"executor": executor},
            is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or "")))
        first = proxy.initiate_chat(assistant, message="Keep a secret.", max_turns=3, silent=True)
        # (AG2 clears the history list in place for the next chat: read it first)
        first_outputs = [m["content"] for m in first.chat_history if "exitcode" in (m["content"] or "")]
        second = proxy.initiate_chat(assistant, message="What is the secret?", max_turns=2,
                                     silent=True)
    assert any("first user" in c for c in first_outputs), first_outputs  # within a chat: shared
    second_outputs = [m["content"] for m in second.chat_history if "exitcode" in (m["content"] or "")]
    assert second_outputs and all("first user" not in c for c in second_outputs)
    assert "NameError" in second_outputs[0]
    with pytest.raises(ConfigurationError) as refused:
        session_per_chat(AssistantAgent("plain", llm_config=False))
    assert "has no RunnerCodeExecutor" in str(refused.value)


# -- MathChat: the AgentOptimizer notebook's flow -------------------------------------------------


class NotebookMathProxy(RunnerMathChat, MathUserProxyAgent):
    """The notebook's subclass line, with the mixin added."""


def test_mathchat_two_problems_each_block_once_state_per_problem(sandbox, store):
    problem_one = ["Let me compute.\n```python\nx = 3\ny = x**2\ny\n```",
                   "```python\nprint(y + x)\n```",
                   "So the answer is $\\boxed{12}$."]
    problem_two = ["```python\ntry:\n    print(y)\nexcept NameError:\n    print('fresh session')\n```",
                   "```python\nz = 5; print(z * 2)\n```",
                   "The answer is $\\boxed{10}$."]
    with FakeOpenAI() as server:
        server.replies(*problem_one, *problem_two)
        assistant = AssistantAgent("assistant", system_message="You are a helpful assistant.",
                                   llm_config=llm_config(server))
        proxy = NotebookMathProxy(name="mathproxyagent", human_input_mode="NEVER",
                                  code_execution_config={"work_dir": "_output", "use_docker": False},
                                  sandbox=sandbox, timeout=5)
        before = {r.id for r in store.list_executions(limit=None)}
        outputs = []
        for problem in ("x is 3; what is x^2 + x?", "What is 5 times 2?"):
            chat = proxy.initiate_chat(assistant, message=MathUserProxyAgent.message_generator,
                                       problem=problem, silent=True)
            outputs.append([m["content"] for m in chat.chat_history if m["name"] == "mathproxyagent"])
        assert outputs[0][1:3] == ["9", "12"]  # the last expression printed; state carried
        assert outputs[1][1:3] == ["fresh session", "10"]  # problem two starts from nothing
        new = [r for r in store.list_executions(limit=None) if r.id not in before]
        # four blocks, each run exactly once: nothing replayed, nothing run twice
        assert sorted(r.request.code for r in new) == sorted([
            "x = 3\ny = x**2\nprint(y)", "print(y + x)",
            "try:\n    print(y)\nexcept NameError:\n    print('fresh session')", "z = 5; print(z * 2)"])
        assert len({r.meta["session"] for r in new}) == 2
        assert all(r.meta["integration"] == "ag2" and r.meta["mathchat"] for r in new)
        logged(store, new[0].id, "ag2")
        proxy.runner_executor.close()


def test_mathchat_replies_follow_mathchats_wording(sandbox):
    proxy = NotebookMathProxy(name="proxy", human_input_mode="NEVER", sandbox=sandbox, timeout=1)
    assert proxy.execute_one_python_code("q = 1") == ("No output found. Make sure you print the results.",
                                                       False)
    assert proxy.execute_one_python_code("print(q + 1)") == ("2", True)
    output, ok = proxy.execute_one_python_code("print(undefined_name)")
    assert not ok and output.startswith("Error: ") and "NameError" in output
    assert proxy.execute_one_python_code("print('x' * 5000)")[1] is False
    output, ok = proxy.execute_one_python_code("while True:\n    pass")
    assert not ok and "Timeout" in output
    proxy.reset()
    assert proxy.execute_one_python_code("print(2 + 2)") == ("4", True)
    proxy.runner_executor.close()


@pytest.mark.parametrize(("code", "printed"), [
    ("x = 1\nx", "x = 1\nprint(x)"),
    ("s = 'a; b'\ns", "s = 'a; b'\nprint(s)"),
    ("y = 2\ny + \\\n  1", "y = 2\nprint(y + \\\n  1)"),
    ("print(1)\n3", "print(1)\n3"),  # MathChat leaves a block that prints as it is
    ("z = 3", "z = 3"),
    ("def f(:", "def f(:"),
])
def test_the_last_expression_is_printed(code, printed):
    assert print_last_expression(code) == printed


# -- learned functions and the AgentOptimizer -------------------------------------------------------

TRIPLE = {"name": "triple", "description": "Three times a whole number.",
          "arguments": json.dumps({"n": {"type": "integer", "description": "the number"}}),
          "packages": "", "code": "def triple(n):\n    return 3 * n\n"}
WRONG_NAME = {**TRIPLE, "code": "def thrice(n):\n    return 3 * n\n"}
NEEDS_A_PACKAGE = {**TRIPLE, "packages": "requests",
                   "code": "def triple(n):\n    import requests\n    return 3 * n\n"}


def test_function_map_runs_each_function_in_the_sandbox_with_validated_arguments(sandbox, store):
    functions = FunctionSet("ag2-map", [
        {"name": "double", "description": "2x", "arguments": {"x": {"type": "number"}},
         "code": "def double(x):\n    return 2 * x\n"},
        {"name": "square", "description": "x^2", "arguments": {"x": {"type": "number"}},
         "code": "def square(x):\n    return x * x\n"}], log_store=store.path)
    calls = function_map(functions, sandbox)
    # one callable per function: the first is not the second's code (AG2's shared loop variable)
    assert calls["double"](x=5) == "10" and calls["square"](x=5) == "25"
    with pytest.raises(FunctionCallFailed) as refused:
        calls["double"](x="five")
    assert "INVALID_ARGUMENTS" in str(refused.value) and refused.value.result.status == "invalid_args"
    logged(store, refused.value.result.id, "ag2")


def test_agent_optimizer_step_checks_smoke_runs_and_the_agent_calls_the_function(sandbox, store,
                                                                                 capsys):
    functions = FunctionSet("ag2-learned", log_store=store.path)
    with FakeOpenAI() as server:
        # the optimizer: two refused proposals (AG2 asks again), then one that passes
        server.reply("", tool_calls=[FakeOpenAI.call("add_function", WRONG_NAME)])
        server.reply("", tool_calls=[FakeOpenAI.call("add_function", NEEDS_A_PACKAGE)])
        server.reply("", tool_calls=[FakeOpenAI.call("add_function", TRIPLE)])
        asked = len(server.requests)
        optimizer = SandboxedAgentOptimizer(max_actions_per_step=1, llm_config=llm_config(server),
                                            optimizer_model=server.model, functions=functions,
                                            sandbox=sandbox)
        optimizer.record_one_conversation([{"role": "user", "content": "What is 3 * 14?"},
                                           {"role": "assistant", "content": "\\boxed{41}"}],
                                          is_satisfied=False)
        register_for_llm, register_for_executor = optimizer.step()

        verdicts = [(v.accepted, v.code) for v in optimizer.proposals]
        assert verdicts == [(False, "INVALID_ARGUMENTS"), (False, "PACKAGE_UNAVAILABLE"), (True, None)]
        assert "thrice" in optimizer.proposals[0].reason
        assert optimizer.proposals[2].reason.startswith("a smoke call triple(")
        # each refusal is printed, and the next try tells the optimizer model why
        printed = capsys.readouterr().out
        assert "runner refused add_function('triple'): [INVALID_ARGUMENTS]" in printed
        assert "[PACKAGE_UNAVAILABLE]" in printed
        tries = [request["messages"] for request in server.requests[asked:asked + 3]]
        assert len(tries[0]) == 1 and "refused" not in json.dumps(tries[0])
        assert "Your last proposal was refused" in tries[1][-1]["content"]
        assert "thrice" in tries[1][-1]["content"] and "PACKAGE_UNAVAILABLE" in tries[2][-1]["content"]
        assert functions.names == ["triple"] and functions.version("triple") == 1
        assert [h.author.kind for h in functions.history()] == ["optimizer"]
        assert register_for_llm == [{"func_sig": {"name": "triple", "description": TRIPLE["description"],
                                                  "parameters": functions["triple"].parameters},
                                     "is_remove": False}]
        # the assistant is told of the function and calls it; the executor runs it in the sandbox
        assistant = AssistantAgent("assistant", llm_config=llm_config(server))
        for item in register_for_llm:
            assistant.update_tool_signature(
                {"type": "function", "function": item["func_sig"]}, is_remove=item["is_remove"])
        user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False,
                              max_consecutive_auto_reply=1)
        user.register_function(function_map=register_for_executor)
        server.reply("", tool_calls=[FakeOpenAI.call("triple", {"n": 14}, "call_1")])
        server.reply("So it is \\boxed{42}.")
        chat = user.initiate_chat(assistant, message="What is 3 * 14?", max_turns=2, silent=True)
        tool_reply = next(m for m in chat.chat_history if m.get("role") == "tool")
        assert tool_reply["content"] == "42"
        assert server.requests[-2]["tools"][0]["function"]["name"] == "triple"
    called = [r for r in store.list_executions(function="triple", limit=None)
              if r.meta.get("ag2_function_call") == "triple"]
    assert len(called) == 1 and called[0].result.return_value == 42
    logged(store, called[0].id, "ag2")
    smoke = [r for r in store.list_executions(limit=None) if r.meta.get("optimizer_smoke")]
    assert {r.meta["optimizer_smoke"] for r in smoke} == {"define", "call"}
    assert all(r.meta["integration"] == "ag2" for r in smoke)


# -- the log, and hostile input ---------------------------------------------------------------------


def test_an_executor_that_opens_its_own_sandbox_logs_the_integration_as_source():
    with RunnerCodeExecutor(timeout=5) as executor:
        result = executor.execute_code_blocks([python("print('logged')")])
        store = executor.sandbox.log_store
        assert store is not None
        assert store.get_execution(result.execution_ids[0]).source == "ag2"
        logged(store, result.execution_ids[0], "ag2")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_blocks_give_a_normal_result_and_the_sandbox_stays_usable(sandbox, store, name):
    with RunnerCodeExecutor(sandbox, timeout=1) as executor:
        executor.execute_code_blocks([python("kept = 'state'")])
        result = executor.execute_code_blocks([python(HOSTILE[name])])
        assert result.exit_code != 0 or name == "flood"
        if name == "flood":
            assert "cut" in result.output and len(result.output) < 30_000
        if name == "hang":
            assert result.exit_code == 124 and "Timeout" in result.output
        after = executor.execute_code_blocks([python("print('still here')")])
        assert after.exit_code == 0 and after.output == "still here"
        logged(store, result.execution_ids[0], "ag2")


def test_control_sequences_reach_the_model_and_terminal_inert(executor):
    result = executor.execute_code_blocks([python(TERMINAL_ATTACK)])
    assert result.exit_code == 0 and "\x1b" not in result.output and "\\x1b]0;pwned" in result.output


# -- the example: the notebook's training loop ------------------------------------------------------

LOG_BASE = {"name": "log_base", "description": "The logarithm of x in a base, exact.",
            "arguments": json.dumps({"x": {"type": "integer"}, "base": {"type": "integer"}}),
            "packages": "sympy",
            "code": "def log_base(x, base):\n    from sympy import log, nsimplify\n"
                    "    return str(nsimplify(log(x, base)))\n"}


def notebook_model(body: dict) -> dict | str:
    """The optimizer proposes log_base once; the assistant computes each logarithm with a
    block (or, once it is offered, with log_base) and answers in a box."""
    import re

    messages = body["messages"]
    tools = [t["function"]["name"] for t in body.get("tools") or []]
    if "add_function" in tools:
        if "log_base" in messages[-1]["content"]:
            return "TERMINATE"
        return {"content": "", "tool_calls": [FakeOpenAI.call("add_function", LOG_BASE)]}
    last = messages[-1]
    if last["role"] == "tool":
        return f"So the answer is $\\boxed{{{last['content']}}}$."
    content = last.get("content") or ""
    if "Correct" in content:
        return "TERMINATE"
    found = re.search(r"\\log_(\d)(\d+)", content)
    if found and "log_base" in tools:
        return {"content": "", "tool_calls": [FakeOpenAI.call(
            "log_base", {"x": int(found.group(2)), "base": int(found.group(1))})]}
    if found:
        return (f"```python\nfrom sympy import log, simplify\n"
                f"print(simplify(log({found.group(2)}, {found.group(1)})))\n```")
    return f"So the answer is $\\boxed{{{content.strip().splitlines()[-1]}}}$."


def test_the_agentoptimizer_notebook_example_runs_end_to_end(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "examples" / "ag2_agentoptimizer.py"
    spec = importlib.util.spec_from_file_location("ag2_agentoptimizer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "learned.json"
    with FakeOpenAI(responder=notebook_model) as server:
        after = module.main(["--base-url", server.url, "--model", server.model, "--dataset",
                             "tests/data/math_sample.jsonl", "--train", "2", "--test", "2",
                             "--epochs", "1", "--out", str(out)])
        assert after == 1.0
        offered = [r for r in server.requests if any(
            t["function"]["name"] == "log_base" for t in r.get("tools") or [])]
        assert offered  # the assistant was told of the learned function after the step
    learned = FunctionSet.load(out, log_store=False)
    assert learned.names == ["log_base"]
    with LogStore() as store:
        calls = [r for r in store.list_executions(source="ag2", limit=None)
                 if r.meta.get("ag2_function_call") == "log_base"]
        assert [r.result.return_value for r in calls][::-1] == ["3", "0"]
        blocks = [r for r in store.list_executions(source="ag2", limit=None) if r.meta.get("mathchat")]
        assert len(blocks) == 4  # two test problems before training, two training problems
        logged(store, calls[0].id, "ag2")


def test_a_cut_output_says_what_the_log_really_keeps(sandbox, store):
    """Output past the model's share is cut in the middle: the note says the whole text is
    in the log when it is, and what the log keeps when the sandbox's own limit cut it first."""
    with RunnerCodeExecutor(sandbox, timeout=5, max_output_chars=2_000) as executor:
        long = executor.execute_code_blocks([python("print('a' * 50_000)")])
        flood = executor.execute_code_blocks([python(
            "for _ in range(30):\n    print('b' * 100_000)")])
    assert long.exit_code == 0 and "the whole text is in runner's log" in long.output
    record = store.get_execution(long.execution_ids[0])
    assert record.result.stdout == "a" * 50_000 + "\n"
    limit = sandbox.limits.max_output_bytes
    assert f"runner's log (execution {flood.execution_ids[0]}) keeps the first {limit:,} bytes" \
        in flood.output and "whole" not in flood.output
    assert len(store.get_execution(flood.execution_ids[0]).result.stdout) < 3_000_000


def test_agent_optimizer_refuses_a_function_that_never_ends_and_removes_for_the_executor(
        sandbox, store):
    """A proposal whose smoke call runs past its limit is refused (every later call would
    cost the whole limit); a function the step removes is mapped to None for the executor,
    which is how AG2's register_function drops it."""
    functions = FunctionSet("ag2-spin", [{**TRIPLE, "arguments": {"n": {"type": "integer"}}}],
                            log_store=False)
    spin = {**TRIPLE, "name": "spin", "code": "def spin(n):\n    while True:\n        pass\n"}
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[FakeOpenAI.call("add_function", spin)])
        server.reply("", tool_calls=[FakeOpenAI.call("remove_function", {"name": "triple"})])
        optimizer = SandboxedAgentOptimizer(max_actions_per_step=1, llm_config=llm_config(server),
                                            optimizer_model=server.model, functions=functions,
                                            sandbox=sandbox, limits=Limits(timeout_s=1))
        optimizer.record_one_conversation([{"role": "user", "content": "What is 3 * 14?"},
                                           {"role": "assistant", "content": "\\boxed{41}"}],
                                          is_satisfied=False)
        register_for_llm, register_for_executor = optimizer.step()
    verdicts = [(v.accepted, v.action, v.function) for v in optimizer.proposals]
    assert verdicts == [(False, "add_function", "spin"), (True, "remove_function", "triple")]
    assert "time limit" in optimizer.proposals[0].reason or "timeout" in optimizer.proposals[0].reason
    assert functions.names == [] and register_for_executor == {"triple": None}
    assert register_for_llm == [{"func_sig": {"name": "triple"}, "is_remove": True}]
    user = UserProxyAgent("user", human_input_mode="NEVER", code_execution_config=False)
    user.register_function(function_map={"triple": lambda n: str(3 * n)})
    user.register_function(function_map=register_for_executor)
    assert "triple" not in user.function_map


@pytest.mark.docker
def test_shell_blocks_run_in_the_container_and_elsewhere_say_what_to_write(store):
    """AG2's models write sh and bash blocks (listings, pip). On the Docker tier they run in
    the run's container, under its limits, with their output and exit status; on a tier
    that starts no program the model reads what to write instead (no operator's flag)."""
    from conftest import backend_options

    with Sandbox(backend="docker", log_store=store, **backend_options("docker")) as box, \
            RunnerCodeExecutor(box, timeout=20) as executor:
        listed = executor.execute_code_blocks([python("echo hi && ls / | grep -c tmp", "sh")])
        failed = executor.execute_code_blocks([python("echo before; exit 3", "bash")])
        bomb = executor.execute_code_blocks([python(":(){ :|:& };: 2>/dev/null; sleep 1; echo done", "bash")])
        after = executor.execute_code_blocks([python("print('still here')")])
    assert (listed.exit_code, listed.output) == (0, "hi\n1"), listed.output
    assert failed.exit_code == 3 and "before" in failed.output
    assert after.exit_code == 0 and after.output == "still here"
    # a fork bomb meets the run's process limit; the session, and the next block, go on
    assert bomb.execution_ids and store.get_execution(bomb.execution_ids[0]).result.limits.max_processes
    with RunnerCodeExecutor(backend="jail", timeout=5) as executor:
        refused = executor.execute_code_blocks([python("pip install numpy", "sh")])
    assert refused.exit_code == 1 and "sh blocks do not run here" in refused.output
    assert "```python" in refused.output and "--backend" not in refused.output


@pytest.mark.parametrize("backend, packages, says", [
    ("restricted", ["pandas"], "not available in the restricted backend"),
    ("jail", ["not a requirement!"], "not a requirement"),
])
def test_packages_a_tier_cannot_have_are_refused_when_the_executor_is_made(backend, packages, says):
    """Not at the first block, in the middle of a conversation: when the executor is made,
    with the fix, and nothing installed or started."""
    pytest.importorskip("autogen")
    from runner.errors import ConfigurationError
    from runner.integrations.ag2 import RunnerCodeExecutor

    with Sandbox(backend=backend, log_store=False) as sandbox:
        with pytest.raises(ConfigurationError) as refused:
            RunnerCodeExecutor(sandbox, packages=packages)
        assert says in refused.value.message and "tier" in (refused.value.fix or "")
        with RunnerCodeExecutor(sandbox, packages=["sympy"]) as executor:
            assert executor is not None  # what the tier has is taken


def test_each_conversation_is_an_agent_run_with_its_blocks_as_turns(tmp_path):
    """`runner logs runs` and the viewer show an AG2 conversation as they show `runner
    agent`'s: each block a turn (the block, what the model was told, its execution), one
    run per conversation (a restart starts the next), ended when the executor closes."""
    from starlette.testclient import TestClient

    from runner.logs.agent import AgentLog
    from runner.logs.viewer import create_app

    with LogStore(tmp_path / "log.db") as store, Sandbox(log_store=store) as box:
        with RunnerCodeExecutor(box, timeout=10) as executor:
            first = executor.execute_code_blocks([python("x = 2"), python("print(x * 21)")])
            executor.restart()
            second = executor.execute_code_blocks([python("print('<b>new</b>')")])
        runs = sorted(AgentLog(store).list(limit=None), key=lambda run: run.started_at)
        assert len(runs) == 2
        whole = [AgentLog(store).get(run.id) for run in runs]
        page = TestClient(create_app(store.path), base_url="http://127.0.0.1").get(f"/runs/{runs[0].id}")
    assert first.exit_code == 0 and first.output.startswith("42")
    assert [run.status for run in whole] == ["terminated", "terminated"]
    assert all(run.settings["integration"] == "ag2" and run.protocol == "code" for run in whole)
    assert [t.reply["content"] for t in whole[0].turns] == ["```python\nx = 2\n```",
                                                          "```python\nprint(x * 21)\n```"]
    assert whole[0].turns[1].feedback_messages[0]["content"].startswith("42")
    assert [t.execution_ids[0] for t in whole[0].turns] == first.execution_ids
    assert [t.execution_ids[0] for t in whole[1].turns] == second.execution_ids
    assert page.status_code == 200 and "print(x * 21)" in page.text
    assert "<b>new</b>" not in page.text
