"""Files and figures through the integrations, driven as each framework's users drive them,
on the default (jail) tier:

- AG2: an executor's `work_dir` is there for the blocks and gets what they save (a figure
  from `plt.show()` too), listed in `output_files`; a model in a two-agent chat reads the
  files' names; a host link is never read through nor written through;
- AutoGen: `output_files` on the `CodeResult`, in a CodeExecutorAgent's run;
- smolagents: a step's figure is its output as a PIL image and, with `attach_images`, goes
  to the model; `final_answer` carries images, tuples and long values; what the sandbox
  writes in that format is read as hostile;
- MCP: `run_python` takes files (text and base64) and returns images as image content,
  text as a text resource, other files as blob resources, and past its inline budget as
  links that read the bytes back from the log;
- `runner agent`: the files handed to the run are in its executions' directory, the files
  they made are on the run, `--out` writes them and the model can be shown the images.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from fake_openai_server import FakeOpenAI
from runner import Limits, Sandbox
from runner.logs import LogStore

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [2, 4, 1])\nplt.show()\n"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with LogStore(tmp_path_factory.mktemp("integration-files") / "log.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def sandbox(store):
    with Sandbox(backend="jail", log_store=store, limits=Limits(timeout_s=30)) as box:
        yield box


# -- AG2 ----------------------------------------------------------------------------------------


def test_ag2_work_dir_goes_in_and_what_blocks_save_comes_back(sandbox, store, tmp_path):
    pytest.importorskip("autogen")
    from autogen.coding import CodeBlock

    from runner.integrations.ag2 import RunnerCodeExecutor

    work = tmp_path / "work"
    work.mkdir()
    (work / "data.csv").write_text("x,y\n1,2\n3,4\n")
    with RunnerCodeExecutor(sandbox, timeout=20, work_dir=work) as executor:
        result = executor.execute_code_blocks([CodeBlock(language="python", code=(
            "import csv\nrows = list(csv.reader(open('data.csv')))\n"
            "open('summary.txt', 'w').write(f'{len(rows) - 1} rows')\n" + PLOT))])
        assert result.exit_code == 0, result.output
        assert sorted(Path(p).name for p in result.output_files) == ["figure-1.png", "summary.txt"]
        assert all(Path(p).parent == work.resolve() for p in result.output_files)
        assert (work / "summary.txt").read_text() == "2 rows"
        assert (work / "figure-1.png").read_bytes().startswith(PNG_MAGIC)
        assert "Files made: figure-1.png" in result.output and "summary.txt (6 B, text/plain)" in result.output
        # A file the user changes between calls is handed over again; an unchanged one is not.
        (work / "data.csv").write_text("x,y\n1,2\n")
        again = executor.execute_code_blocks([CodeBlock(language="python", code=(
            "print(len(open('data.csv').read().splitlines()), open('summary.txt').read())"))])
        assert again.output.startswith("2 2 rows"), again.output
        handed = store.get_execution(again.execution_ids[-1]).request.files
        assert [f.name for f in handed] == ["data.csv"]


def test_ag2_work_dir_links_are_never_followed(sandbox, tmp_path):
    pytest.importorskip("autogen")
    from autogen.coding import CodeBlock

    from runner.integrations.ag2 import RunnerCodeExecutor

    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("host data")
    (work / "peek").symlink_to(outside)  # would hand a host file over if read through
    (work / "target").symlink_to(outside)  # would write a host file if written through
    with RunnerCodeExecutor(sandbox, timeout=20, work_dir=work) as executor:
        result = executor.execute_code_blocks([CodeBlock(language="python", code=(
            "import os\nprint(sorted(os.listdir('.')))\nopen('target', 'w').write('from the sandbox')\n"))])
    assert result.exit_code == 0
    assert result.output.startswith("[]"), result.output  # neither link was handed over
    assert outside.read_text() == "host data"
    assert (work / "target").is_symlink()
    assert "could not be written to the working directory" in result.output
    assert result.output_files == []


def test_ag2_without_work_dir_saves_to_a_temporary_directory(sandbox):
    pytest.importorskip("autogen")
    from autogen.coding import CodeBlock

    from runner.integrations.ag2 import RunnerCodeExecutor

    with RunnerCodeExecutor(sandbox, timeout=20) as executor:
        assert executor.work_dir is None
        quiet = executor.execute_code_blocks([CodeBlock(language="python", code="print(1)")])
        assert quiet.output_files == [] and executor.work_dir is None  # nothing made, nothing made
        result = executor.execute_code_blocks([CodeBlock(language="python", code=PLOT)])
        assert executor.work_dir is not None and "runner-ag2-" in executor.work_dir.name
        assert [Path(p) for p in result.output_files] == [executor.work_dir / "figure-1.png"]


def test_ag2_two_agent_chat_the_model_reads_the_files_made(sandbox):
    pytest.importorskip("autogen")
    from autogen import AssistantAgent, UserProxyAgent

    from runner.integrations.ag2 import RunnerCodeExecutor

    with FakeOpenAI() as server, RunnerCodeExecutor(sandbox, timeout=20) as executor:
        server.replies(f"```python\n{PLOT}```", "The plot is saved. TERMINATE")
        assistant = AssistantAgent("assistant", llm_config={
            "config_list": [{"model": server.model, "base_url": server.url, "api_key": "k"}],
            "cache_seed": None})
        proxy = UserProxyAgent("runner", human_input_mode="NEVER", llm_config=False,
                               code_execution_config={"executor": executor},
                               is_termination_msg=lambda m: "TERMINATE" in (m.get("content") or ""))
        proxy.initiate_chat(assistant, message="Plot the points.", max_turns=2, silent=True)
        sent = json.dumps(server.requests[1]["messages"])
        assert "figure-1.png" in sent and "image/png" in sent


# -- AutoGen ------------------------------------------------------------------------------------


def test_autogen_code_result_has_the_output_files(sandbox, tmp_path):
    pytest.importorskip("autogen_agentchat")
    from autogen_agentchat.agents import CodeExecutorAgent
    from autogen_agentchat.messages import TextMessage
    from autogen_core import CancellationToken
    from autogen_core.code_executor import CodeBlock

    from runner.integrations.autogen import RunnerCodeExecutor

    work = tmp_path / "autogen"
    work.mkdir()
    (work / "numbers.txt").write_text("3\n4\n")
    executor = RunnerCodeExecutor(sandbox, timeout=20, work_dir=work)

    async def scenario():
        result = await executor.execute_code_blocks([CodeBlock(language="python", code=(
            "total = sum(int(x) for x in open('numbers.txt'))\nopen('total.txt', 'w').write(str(total))\n"
            + PLOT))], CancellationToken())
        agent = CodeExecutorAgent("runner", code_executor=executor)
        reply = await agent.on_messages(
            [TextMessage(content="```python\nprint(open('total.txt').read())\n```", source="user")],
            CancellationToken())
        await executor.stop()
        return result, reply

    result, reply = asyncio.run(scenario())
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in result.output_files) == ["figure-1.png", "total.txt"]
    assert all(isinstance(path, Path) and path.is_file() for path in result.output_files)
    assert (work / "total.txt").read_text() == "7"
    assert "7" in reply.chat_message.content


# -- smolagents ---------------------------------------------------------------------------------


def _step(code: str) -> str:
    return f"Thought: go.\n<code>\n{code}\n</code>"


def test_smolagents_figures_are_the_steps_images_and_reach_the_model(sandbox):
    pytest.importorskip("smolagents")
    from PIL import Image
    from smolagents import CodeAgent, OpenAIServerModel

    from runner.integrations.smolagents import RunnerPythonExecutor

    with FakeOpenAI() as server, RunnerPythonExecutor(sandbox, timeout=20) as executor:
        server.replies(_step(PLOT), _step("final_answer('plotted')"))
        model = OpenAIServerModel(model_id=server.model, api_base=server.url, api_key="k")
        agent = CodeAgent(tools=[], model=model, executor=executor, max_steps=3, verbosity_level=0,
                          step_callbacks=[executor.attach_images])
        assert agent.run("Plot it.") == "plotted"
        step = agent.memory.steps[1]
        assert isinstance(step.action_output, Image.Image) and step.action_output.size == (640, 480)
        assert "Files made: figure-1.png" in step.observations
        # The second request showed the model the figure.
        parts = [part for message in server.requests[1]["messages"]
                 if isinstance(message.get("content"), list) for part in message["content"]]
        urls = [part["image_url"]["url"] for part in parts if part.get("type") == "image_url"]
        assert len(urls) == 1 and urls[0].startswith("data:image/png;base64,")


def test_smolagents_final_answer_carries_images_types_and_long_values(sandbox):
    pytest.importorskip("smolagents")
    from PIL import Image

    from runner.integrations.smolagents import RunnerPythonExecutor

    with RunnerPythonExecutor(sandbox, timeout=20) as executor:
        executor.send_tools({})
        image = executor("from PIL import Image\nfinal_answer(Image.new('RGB', (3, 2), 'red'))")
        assert image.is_final_answer and isinstance(image.output, Image.Image)
        assert image.output.size == (3, 2) and image.output.getpixel((0, 0)) == (255, 0, 0)
        typed = executor("import datetime\nfinal_answer((1, {2}, b'x', datetime.date(2026, 1, 2)))")
        assert typed.output == (1, {2}, b"x", __import__("datetime").date(2026, 1, 2))
        long = executor("final_answer('y' * 300_000)")
        assert long.output == "y" * 300_000
        assert executor.work_dir is None  # the long answer's file is the executor's own


@pytest.mark.parametrize(("payload", "expected"), [
    ("[" * 5000 + "]" * 5000, str),  # nested past the bounds: the text, not a crash
    (json.dumps({"__type__": "ndarray", "data": [1, 2], "dtype": "U999999999"}), str),
    (json.dumps({"__type__": "ndarray", "data": [1, 2], "dtype": "O"}), str),
    (json.dumps({"__type__": "PIL.Image", "data": base64.b64encode(
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n").decode()}), dict),
    (json.dumps({"__type__": "timedelta", "total_seconds": 1e300}), str),
])
def test_smolagents_answers_are_read_as_hostile(payload, expected):
    pytest.importorskip("smolagents")
    from runner.integrations.smolagents_values import SAFE_PREFIX, decode_answer
    from runner.types import ExecutionResult

    result = ExecutionResult(id="x", backend="jail", status="error")
    decoded = decode_answer(SAFE_PREFIX + payload, result)
    assert isinstance(decoded, expected), decoded


# -- MCP ----------------------------------------------------------------------------------------


def test_mcp_run_python_takes_files_and_returns_images_and_resources(tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters

    runner_command = str(Path(sys.executable).with_name("runner"))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNNER_HOME": str(tmp_path / "home"),
           "HOME": os.environ.get("HOME", "/root")}
    # (the operator allows a minute: a first plot takes a while on a loaded machine)
    server = StdioServerParameters(command=runner_command, args=["mcp", "--timeout", "60"], env=env)
    code = ("print(open('in.txt').read(), len(open('raw.bin', 'rb').read()))\n"
            "open('out.txt', 'w').write('hello')\nopen('page.svg', 'w').write('<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(1)</script></svg>')\n"
            "open('big.bin', 'wb').write(bytes(9 * 1024 * 1024))\n" + PLOT)

    async def scenario():
        async with Client(server) as client:
            result = await client.call_tool("run_python", {"code": code, "timeout_s": 60, "files": [
                {"name": "in.txt", "text": "given"},
                {"name": "raw.bin", "base64": base64.b64encode(b"\x00\x01\x02").decode()}]})
            bad = await client.call_tool("run_python", {"code": "pass", "files": [
                {"name": "../escape.txt", "text": "x"}]})
            both = await client.call_tool("run_python", {"code": "pass", "files": [
                {"name": "a.txt", "text": "x", "base64": "eA=="}]})
            data = result.structured_content
            big = next(f for f in data["files"] if f["name"] == "big.bin")
            linked = await client.read_resource(big["uri"])
            return result, bad, both, linked

    result, bad, both, linked = anyio.run(scenario)
    data = result.structured_content
    assert data["status"] == "ok" and data["stdout"] == "given 3\n"
    assert {f["name"] for f in data["files"]} == {"out.txt", "page.svg", "big.bin", "figure-1.png"}
    assert all("data" not in f for f in data["files"])
    kinds = {block.type for block in result.content}
    assert kinds == {"text", "image", "resource", "resource_link"}
    images = [block for block in result.content if block.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data).startswith(PNG_MAGIC)
    resources = {block.resource.uri: block.resource for block in result.content if block.type == "resource"}
    texts = [r for r in resources.values() if getattr(r, "text", None) == "hello"]
    assert len(texts) == 1
    svg = [r for r in resources.values() if r.mime_type == "image/svg+xml"]
    assert len(svg) == 1 and hasattr(svg[0], "blob")  # never an image block, never text
    links = [block for block in result.content if block.type == "resource_link"]
    assert [link.name for link in links] == ["big.bin"]
    assert base64.b64decode(linked.contents[0].blob) == bytes(9 * 1024 * 1024)
    assert bad.is_error and "'..'" in bad.content[0].text
    assert both.is_error and "exactly one of text and base64" in both.content[0].text


def test_an_mcp_reply_stays_under_what_an_http_client_takes_in_one_event(sandbox):
    """What counts is a reply's size on the wire: 500 KB of control characters is 3 MB as
    JSON text (six bytes each), and 256 small files are 256 blocks; a reply keeps under
    1 MiB by linking what does not fit."""
    pytest.importorskip("mcp")
    from runner.integrations.mcp import RunnerMCP

    state = RunnerMCP(sandbox)
    try:
        controls = state.run_python("open('controls.txt', 'w').write('\\x01' * 500_000)")
        many = state.run_python("for n in range(256):\n    open(f'f{n:03}.txt', 'w').write('\\x01' * 4000)")
    finally:
        state.close()
    for result in (controls, many):
        assert not result.is_error
        assert len(result.model_dump_json(by_alias=True)) < 1024 * 1024
    assert [block.type for block in controls.content] == ["text", "resource_link"]
    kinds = [block.type for block in many.content]
    assert "resource" in kinds and "resource_link" in kinds  # as many inline as fit


# -- runner agent -------------------------------------------------------------------------------


def test_runner_agent_hands_files_in_writes_them_out_and_shows_images(tmp_path):
    data = tmp_path / "sales.csv"
    data.write_text("month,total\njan,3\nfeb,5\n")
    out = tmp_path / "out"
    code = ("import csv\nrows = list(csv.DictReader(open('sales.csv')))\n"
            "open('total.txt', 'w').write(str(sum(int(r['total']) for r in rows)))\n" + PLOT
            + "print('ok')\n")
    env = {**os.environ, "RUNNER_HOME": str(tmp_path / "home")}
    with FakeOpenAI() as server:
        server.replies(f"```python\n{code}```", "The total is \\boxed{8}.")
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("runner")), "agent", "Total the sales.",
             "--protocol", "code", "--base-url", server.url, "--api-key", "k", "--model", server.model,
             "--file", str(data), "--out", str(out), "--images", "--timeout", "60"],
            capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "8"
        assert (out / "total.txt").read_text() == "8"
        assert (out / "figure-1.png").read_bytes().startswith(PNG_MAGIC)
        assert f"wrote 2 file(s) to {out}" in proc.stderr
        second = server.requests[1]["messages"]
        shown = [part for message in second if isinstance(message.get("content"), list)
                 for part in message["content"]]
        assert [part["type"] for part in shown] == ["text", "image_url"]
        assert "figure-1.png" in shown[0]["text"]
        assert "Files made:" in json.dumps(second)
