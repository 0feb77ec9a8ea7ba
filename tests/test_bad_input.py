"""Bad input, as users and programs give it: a clear error with the fix, never a traceback.

CLI usage errors exit 2 and state the valid range; the Python API raises RunnerError
subclasses (not pydantic's ValidationError); a model server that answers something other
than the OpenAI protocol is an LLM_PROTOCOL error (an LLMError) that says what came back; an unusable RUNNER_HOME
names the path and the fix.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner import Limits, RunnerError, Sandbox, Status
from runner.agent import Agent, OpenAIChat
from runner.errors import ConfigurationError, LLMError
from runner.functions import FunctionSpec
from runner.functions.spec import split_packages

RUNNER = [sys.executable, "-m", "runner"]


def run_cli(args: list[str], home: Path, *, stdin: str = "", env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, RUNNER_HOME=str(home), **(env or {}))
    return subprocess.run(RUNNER + args, input=stdin, capture_output=True, text=True,
                          env=environment, timeout=120)


# -- numbers on the command line ---------------------------------------------------------------


@pytest.mark.parametrize("args, words", [
    (["exec", "-", "--timeout", "nan"], "--timeout': nan is not a finite number greater than 0 and at most 3,600"),
    (["exec", "-", "--timeout", "inf"], "inf is not a finite number"),
    (["exec", "-", "--timeout", "0"], "greater than 0"),
    (["exec", "-", "--cpu", "nan"], "--cpu': nan is not a finite number greater than 0 and at most 3,600"),
    (["exec", "-", "--max-output", "999999999999"], "at least 1,024 and at most 256,000,000"),
    (["exec", "-", "--memory", "1.5"], "is not a whole number at least 16"),
    (["call", "FILE", "f", "--timeout", "nan"], "--timeout': nan is not a finite number"),
    (["agent", "t", "--budget", "nan"], "--budget': nan is not a finite number at least 0.01"),
    (["agent", "t", "--llm-timeout", "nan"], "--llm-timeout': nan is not a finite number"),
    (["agent", "t", "--temperature", "nan"], "--temperature': nan is not a finite number at least 0 and at most 2"),
    (["agent", "t", "--temperature", "2.5"], "at most 2"),
    (["agent", "t", "--max-tokens", "0"], "at least 1"),
    (["agent", "t", "--timeout", "-1"], "greater than 0"),
])
def test_numbers_out_of_range_are_usage_errors_that_state_the_range(tmp_path, args, words):
    functions = tmp_path / "set.json"
    functions.write_text('[{"name": "f", "code": "def f():\\n    return 1\\n"}]')
    proc = run_cli([str(functions) if a == "FILE" else a for a in args], tmp_path / "home",
                   stdin="print(1)\n")
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_cli_and_the_api_accept_the_same_range(tmp_path):
    proc = run_cli(["exec", "-", "--max-output", "256000000", "--timeout", "3600", "--json"],
                   tmp_path / "home", stdin="print(1)\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["limits"]["max_output_bytes"] == 256_000_000
    Limits(max_output_bytes=256_000_000, timeout_s=3600)


# -- the Python API ----------------------------------------------------------------------------


@pytest.mark.parametrize("fields, words", [
    ({"timeout_s": math.nan}, "timeout_s must be a finite number greater than 0 and at most 3,600, got nan"),
    ({"cpu_s": math.inf}, "cpu_s must be a finite number"),
    ({"memory_mb": "lots"}, "memory_mb must be a whole number at least 16"),
    ({"max_output_bytes": 10 ** 12}, "at most 256,000,000"),
    ({"timeout": 5}, "timeout is not a field of Limits"),
])
def test_bad_limits_raise_a_runner_error_naming_the_range(fields, words):
    with pytest.raises(ConfigurationError) as caught:
        Limits(**fields)
    assert words in str(caught.value)
    assert caught.value.fix


def test_with_overrides_is_checked_too():
    with pytest.raises(ConfigurationError, match="timeout_s"):
        Limits().with_overrides(timeout_s=math.nan)


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="restricted") as sb:
        yield sb


@pytest.mark.parametrize("call, words", [
    (lambda sb: sb.run(None), "code must be a string of Python source, got None"),
    (lambda sb: sb.run(b"print(1)"), "got bytes"),
    (lambda sb: sb.run("print(1)", limits="fast"), "limits must be a runner.Limits, got str"),
    (lambda sb: sb.run("print(1)", limits={"timeout_s": math.nan}), "timeout_s must be"),
    (lambda sb: sb.run("print(1)", packages=[3]), "packages must be requirement strings"),
    (lambda sb: sb.run("print(1)", meta=["x"]), "meta must be a dict"),
    (lambda sb: sb.execute("print(1)"), "execute() takes a runner.ExecutionRequest"),
    (lambda sb: sb.session(budget_s=math.nan), "a time budget must be a positive number"),
    (lambda sb: sb.session(budget_s=-1), "a time budget must be a positive number"),
])
def test_bad_arguments_to_the_api_raise_runner_errors(sandbox, call, words):
    with pytest.raises(RunnerError) as caught:
        call(sandbox)
    assert words in str(caught.value)
    assert sandbox.run("print(1)").status is Status.OK  # nothing was left half-done


def test_a_session_checks_its_arguments(sandbox):
    with sandbox.session() as session:
        with pytest.raises(ConfigurationError, match="code must be a string"):
            session.run(None)
        assert session.run("x = 1").status is Status.OK
        assert session.run("print(x)").stdout == "1\n"


def test_one_package_string_is_one_requirement(sandbox):
    result = sandbox.run("import sympy\nprint(1)", packages="sympy")
    assert result.status is Status.OK, result
    logged = sandbox.log_store.get_execution(result.id)
    assert logged.request.packages == ("sympy",)


@pytest.mark.parametrize("options, words", [
    ({"limits": 5}, "limits must be a runner.Limits"),
    ({"log_store": "yes"}, "log_store must be True, False or a LogStore"),
    ({"source": 1}, "source must be a string"),
])
def test_bad_sandbox_options_raise_runner_errors(options, words):
    with pytest.raises(ConfigurationError, match=words):
        Sandbox(**options)


@pytest.mark.parametrize("options, words", [
    ({"timeout_s": math.nan}, "timeout_s must be a finite number greater than 0"),
    ({"temperature": math.nan}, "temperature must be a finite number at least 0 and at most 2"),
    ({"max_tokens": 0}, "max_tokens must be a whole number at least 1"),
    ({"max_retries": -1}, "max_retries"),
])
def test_bad_model_options_raise_runner_errors(options, words):
    with pytest.raises(ConfigurationError, match=words):
        OpenAIChat("m", base_url="http://127.0.0.1:9/v1", **options)


@pytest.mark.parametrize("options, words", [
    ({"budget_s": math.nan}, "a time budget must be a positive number"),
    ({"max_turns": 0}, "max_turns must be a whole number at least 1"),
    ({"max_context_chars": math.inf}, "max_context_chars"),
])
def test_bad_agent_options_raise_runner_errors(options, words):
    llm = OpenAIChat("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigurationError, match=words):
        Agent(llm, **options)


def test_a_function_spec_built_directly_raises_a_function_spec_error():
    with pytest.raises(RunnerError) as caught:
        FunctionSpec(name="1bad", parameters={}, code="def f(): pass")
    assert caught.value.code == "FUNCTION_SPEC" and "not a usable function name" in str(caught.value)


@pytest.mark.parametrize("text, expected", [
    ('requests; os_name=="posix"', ['requests; os_name=="posix"']),
    ('requests; os_name == "posix" and python_version >= "3.8", numpy',
     ['requests; os_name == "posix" and python_version >= "3.8"', "numpy"]),
    ('a; (os_name == "nt" or sys_platform == "linux") b', ['a; (os_name == "nt" or sys_platform == "linux")', "b"]),
    ("pandas[excel]>=2; python-dateutil", ["pandas[excel]>=2", "python-dateutil"]),  # `;` as a separator
])
def test_package_strings_accept_environment_markers(text, expected):
    assert split_packages(text) == expected
    spec = FunctionSpec.from_dict({"name": "f", "code": "def f():\n    return 1\n", "packages": text})
    assert len(spec.packages) == len(expected)


# -- model servers that do not speak the protocol -------------------------------------------------

HTML = b"<html><head><title>Welcome to nginx!</title></head><body>It works</body></html>"


@pytest.mark.parametrize("body, content_type, words", [
    (HTML, "text/html", ["HTTP 200 text/html", "not JSON", "Welcome to nginx!"]),
    (bytes(range(256)) * 4, "application/octet-stream", ["not text", "1,024 bytes of binary data, starting 00 01 02"]),
    (b"[1, 2, 3]", "application/json", ["a JSON array, not an object"]),
    (b'{"choices": "none"}', "application/json", ["not a chat completion"]),
    (b'{"choices": []}', "application/json", ["without a choice"]),
])
def test_a_chat_reply_that_is_not_a_completion_is_an_llm_error(body, content_type, words):
    with FakeOpenAI() as server:
        server.raw(body, content_type)
        llm = OpenAIChat("m", base_url=server.url, api_key="k")
        with pytest.raises(LLMError) as caught:
            llm.complete([{"role": "user", "content": "hi"}])
    assert caught.value.code == "LLM_PROTOCOL"  # an LLMError: the server left the protocol
    for word in words:
        assert word in caught.value.message
    assert "--base-url" in caught.value.fix and "/v1" in caught.value.fix


@pytest.mark.parametrize("page, words", [
    ((200, "text/html", HTML), "GET /models with HTTP 200 text/html, a body that is not JSON"),
    ((404, "text/plain", b"Not Found"), "GET /models answered HTTP 404"),
    ((200, "application/json", b'{"object": "list"}'), "not a list of models"),
])
def test_a_server_without_a_model_list_is_an_llm_error(page, words):
    with FakeOpenAI(models_page=page) as server:
        with pytest.raises(LLMError) as caught:
            OpenAIChat(base_url=server.url, api_key="k")
    assert caught.value.code in ("LLM_ERROR", "LLM_PROTOCOL") and words in caught.value.message
    assert "--model" in caught.value.fix and "--base-url" in caught.value.fix


def test_the_cli_reports_an_html_server_without_a_traceback(tmp_path):
    with FakeOpenAI() as server:
        server.raw(HTML, "text/html")
        proc = run_cli(["agent", "hi", "--base-url", server.url, "--model", "m", "--protocol", "code"],
                       tmp_path / "home")
    assert proc.returncode == 1
    assert "runner: error [LLM_PROTOCOL]" in proc.stderr and "Welcome to nginx!" in proc.stderr
    assert "runner: fix: check --base-url" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_cli_reports_a_server_without_models_without_a_traceback(tmp_path):
    with FakeOpenAI(models_page=(404, "text/plain", b"Not Found")) as server:
        proc = run_cli(["agent", "hi", "--base-url", server.url], tmp_path / "home")
    assert proc.returncode == 1
    assert "runner: error [LLM_ERROR]" in proc.stderr and "HTTP 404" in proc.stderr
    assert "Traceback" not in proc.stderr and "AttributeError" not in proc.stderr


# -- RUNNER_HOME ------------------------------------------------------------------------------------


def _read_only_dir(tmp_path: Path) -> tuple[Path, list[str]]:
    """A directory this user cannot write, and the command prefix that makes it so: a
    read-only tmpfs in a mount namespace for root (who ignores permission bits), else
    permission bits."""
    target = tmp_path / "read-only"
    target.mkdir()
    if os.geteuid() == 0:
        assert shutil.which("unshare"), "root needs unshare(1) to make a read-only mount"
        return target, ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o ro tmpfs "{target}" && exec "$@"', "sh"]
    target.chmod(0o555)
    return target, []


@pytest.mark.parametrize("kind", ["file", "under-a-file", "proc", "sys", "read-only"])
def test_an_unusable_runner_home_is_a_runner_error_naming_it(tmp_path, kind):
    prefix: list[str] = []
    if kind in ("file", "under-a-file"):
        (tmp_path / "a-file").write_text("x")
        home = tmp_path / "a-file" if kind == "file" else tmp_path / "a-file" / "home"
    elif kind in ("proc", "sys"):
        home = Path(f"/{kind}/self/runner-home" if kind == "proc" else "/sys/runner-home")
    else:
        home, prefix = _read_only_dir(tmp_path)
    env = dict(os.environ, RUNNER_HOME=str(home))
    proc = subprocess.run(prefix + RUNNER + ["exec", "-"], input="print(1)\n", capture_output=True,
                          text=True, env=env, timeout=120)
    if kind == "read-only":
        # A directory that is there but cannot be written does not stop a run: it runs,
        # and one warning says why it is not logged and what to do.
        assert proc.returncode == 0 and proc.stdout == "1\n", proc.stderr
        assert "cannot be written" in proc.stderr and "(fix: " in proc.stderr
    else:
        assert proc.returncode == 1, proc.stderr
        assert "runner: fix:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(home) in proc.stderr and "RUNNER_HOME" in proc.stderr
