"""Attacks on the caller's own process through model-written schemas and arguments.

Validation runs on the host, where no sandbox limit applies: a schema or an argument
written to exhaust it must come back as a clear `invalid_args` result (for arguments) or
a FUNCTION_SPEC error (for schemas, when the spec is loaded), quickly, without fetching
anything, and the next call must work. Each attack is tried through the public API, the
CLI and the agent (a real HTTP server speaking the OpenAI protocol).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fake_openai_server import FakeOpenAI

from runner import FunctionSet, FunctionSpec, Sandbox, Status
from runner.agent import Agent, OpenAIChat
from runner.errors import FunctionSpecError
from runner.functions import validate_arguments

RUNNER = [sys.executable, "-m", "runner"]
REDOS = "^(a+)+$"
EVIL = "a" * 40 + "!"  # 2**40 backtracking steps for `re`, a few microseconds for RE2
# Generous: the point is "not minutes". Attacks finish in milliseconds; the exponential
# schema below stops at the validation deadline (2 s).
QUICK_S = 1.5


def spec_with(parameters: dict[str, Any], name: str = "f") -> FunctionSpec:
    return FunctionSpec.from_dict({"name": name, "parameters": parameters,
                                   "code": f"def {name}(**kwargs):\n    return sorted(kwargs)\n"})


def deep_list(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def assert_healthy(sandbox: Sandbox) -> None:
    """The caller's process still validates and runs calls."""
    healthy = spec_with({"type": "object", "properties": {"x": {"type": "string", "pattern": "^a+$"}}},
                        name="healthy")
    result = sandbox.call(healthy, {"x": "aaa"})
    assert result.status is Status.OK, result
    assert result.return_value == ["x"]


def timed_call(sandbox: Sandbox, spec: FunctionSpec, arguments: Any):
    started = time.monotonic()
    result = sandbox.call(spec, arguments)
    return result, time.monotonic() - started


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="restricted") as sb:
        yield sb


# -- item 11: regular expressions that backtrack --------------------------------------------------


def test_a_backtracking_pattern_does_not_hang_the_caller(sandbox):
    spec = spec_with({"type": "object", "properties": {"x": {"type": "string", "pattern": REDOS}}})
    result, took = timed_call(sandbox, spec, {"x": EVIL})
    assert took < QUICK_S
    assert result.status is Status.INVALID_ARGS
    assert "does not match '^(a+)+$'" in result.error.message
    assert result.error.detail["invalid"][0]["argument"] == "x"
    assert sandbox.call(spec, {"x": "aaaa"}).status is Status.OK
    assert_healthy(sandbox)


@pytest.mark.parametrize("additional", [False, True, {"type": "integer"}])
def test_a_backtracking_pattern_property_does_not_hang_the_caller(sandbox, additional):
    spec = spec_with({"type": "object", "patternProperties": {REDOS: {"type": "integer"}},
                      "additionalProperties": additional})
    result, took = timed_call(sandbox, spec, {EVIL: "not an integer"})
    assert took < QUICK_S
    if additional is True:  # not matched, but allowed: it runs
        assert result.status is Status.OK, result
    else:
        assert result.status is Status.INVALID_ARGS
        assert EVIL in result.error.message
    matched = sandbox.call(spec, {"aaaa": "text"})  # matched: its schema applies
    assert matched.status is Status.INVALID_ARGS and "'aaaa' must be integer" in matched.error.message
    assert_healthy(sandbox)


def test_property_names_with_a_backtracking_pattern(sandbox):
    spec = spec_with({"type": "object", "propertyNames": {"pattern": REDOS},
                      "additionalProperties": True})
    result, took = timed_call(sandbox, spec, {EVIL: 1})
    assert took < QUICK_S and result.status is Status.INVALID_ARGS
    assert_healthy(sandbox)


@pytest.mark.parametrize("pattern, reason", [
    ("(a)\\1", "backreferences"),
    ("(?=a)b", "lookaround"),
    ("x" * 1001, "at most 1000"),
])
def test_patterns_re2_cannot_run_are_refused_when_the_spec_is_loaded(pattern, reason):
    with pytest.raises(FunctionSpecError) as caught:
        spec_with({"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}})
    assert caught.value.code == "FUNCTION_SPEC"
    assert reason in str(caught.value)


def test_ecma_unicode_escapes_in_patterns_work():
    spec = spec_with({"type": "object", "properties": {"x": {"type": "string", "pattern": "^\\u0041+$"}}})
    assert validate_arguments(spec, {"x": "AAA"})[1] is None
    assert validate_arguments(spec, {"x": "aaa"})[1] is not None


def test_an_exponential_schema_stops_at_the_validation_deadline(sandbox):
    definitions: dict[str, Any] = {f"a{i}": {"anyOf": [{"$ref": f"#/$defs/a{i + 1}"}] * 2}
                                   for i in range(40)}
    definitions["a40"] = {"type": "integer"}
    spec = spec_with({"type": "object", "$defs": definitions,
                      "properties": {"x": {"$ref": "#/$defs/a0"}}})
    result, took = timed_call(sandbox, spec, {"x": "not an integer"})
    assert took < 10
    assert result.status is Status.INVALID_ARGS
    assert "took longer than 2 s" in result.error.message
    assert sandbox.call(spec, {"x": 3}).status is Status.OK  # valid values are quick
    assert_healthy(sandbox)


def test_unique_items_on_a_long_array_is_quick(sandbox):
    spec = spec_with({"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}})
    values: list[Any] = [[i, {"k": i}] for i in range(20_000)]
    result, took = timed_call(sandbox, spec, {"x": [*values, [7, {"k": 7}]]})
    assert took < 5 and result.status is Status.INVALID_ARGS
    assert "non-unique" in result.error.message
    assert sandbox.call(spec, {"x": [1, True, 1.5, "1"]}).status is Status.OK  # JSON equality
    assert sandbox.call(spec, {"x": [1, 1.0]}).status is Status.INVALID_ARGS


# -- item 12: references are never fetched ---------------------------------------------------------


class _Recorder(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Recorder.hits.append(self.path)
        body = b'{"type": "integer", "description": "SECRET-FROM-THE-SERVER"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def schema_server():
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Recorder.hits.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("where", ["property", "root", "defs", "dynamic"])
def test_a_remote_ref_is_an_invalid_schema_and_is_never_fetched(schema_server, where):
    ref = f"{schema_server}/x.json"
    parameters: dict[str, Any] = {
        "property": {"type": "object", "properties": {"x": {"$ref": ref}}},
        "root": {"type": "object", "allOf": [{"$ref": ref}]},
        "defs": {"type": "object", "$defs": {"d": {"$ref": ref}}, "properties": {"x": {"$ref": "#/$defs/d"}}},
        "dynamic": {"type": "object", "properties": {"x": {"$dynamicRef": ref}}},
    }[where]
    with pytest.raises(FunctionSpecError) as caught:
        spec_with(parameters)
    message = str(caught.value)
    assert "points outside the schema" in message and "never fetches" in message
    assert "SECRET-FROM-THE-SERVER" not in message
    assert _Recorder.hits == []


def test_file_and_other_schemes_are_refused_too(tmp_path):
    target = tmp_path / "schema.json"
    target.write_text('{"type": "integer"}')
    for ref in (target.as_uri(), "urn:example:x", "https://json-schema.org/draft/2020-12/schema#/$defs/x"):
        with pytest.raises(FunctionSpecError) as caught:
            spec_with({"type": "object", "properties": {"x": {"$ref": ref}}})
        assert "points outside the schema" in str(caught.value), ref


@pytest.mark.parametrize("parameters, words", [
    ({"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}}, "dangling"),
    ({"type": "object", "properties": {"x": {"$ref": "#nowhere"}}}, "dangling"),
    ({"type": "object", "$ref": "#"}, "loops"),
    ({"type": "object",
      "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}},
      "properties": {"x": {"$ref": "#/$defs/a"}}}, "loops"),
    ({"type": "object", "properties": {"x": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
     "only at the top"),
    ({"type": "object", "properties": {"x": {"type": "strin"}}}, "not a valid JSON schema"),
])
def test_unusable_schemas_are_function_spec_errors(parameters, words):
    with pytest.raises(FunctionSpecError) as caught:
        spec_with(parameters)
    assert words in str(caught.value)


def test_references_inside_the_schema_work(sandbox):
    children = {"type": "array", "items": {"$ref": "#/$defs/tree"}}
    tree = {"type": "object", "properties": {"value": {"type": "integer"}, "children": children},
            "additionalProperties": False}
    spec = spec_with({"type": "object", "$defs": {"tree": tree},
                      "properties": {"t": {"$ref": "#/$defs/tree"}}})
    good = {"t": {"value": 1, "children": [{"value": 2, "children": []}]}}
    assert sandbox.call(spec, good).status is Status.OK
    bad = sandbox.call(spec, {"t": {"value": 1, "children": [{"value": "two"}]}})
    assert bad.status is Status.INVALID_ARGS and "t.children[0].value" in bad.error.message


# -- item 13: arguments built to crash the caller --------------------------------------------------


ANY = spec_with({"type": "object", "properties": {"x": {}}}, name="anything")


@pytest.mark.parametrize("arguments, words", [
    ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper than 100 levels"),
    ({"x": deep_list(100_000)}, "nested deeper than 100 levels"),
    ('{"x": ' + "1" * 5000 + "}", "more than 300 digits"),
    ({"x": 10 ** 5000}, "more than 300 digits"),
    ({"x": -(10 ** 301)}, "more than 300 digits"),
    ({"x": "y" * 1_000_001}, "more than 1,000,000 characters"),
    ({"x": list(range(100_001))}, "more than 100,000 list items"),
])
def test_arguments_beyond_the_bounds_are_invalid_args(sandbox, arguments, words):
    result, took = timed_call(sandbox, ANY, arguments)
    assert took < 5
    assert result.status is Status.INVALID_ARGS
    assert words in result.error.message
    assert json.dumps(result.to_json_dict())  # the result (and its detail) is plain JSON
    logged = sandbox.log_store.get_execution(result.id)
    assert logged.result.status is Status.INVALID_ARGS
    assert_healthy(sandbox)


def test_a_list_that_contains_itself_is_invalid_args(sandbox):
    loop: list[Any] = []
    loop.append(loop)
    result = sandbox.call(ANY, {"x": loop})
    assert result.status is Status.INVALID_ARGS and "nested deeper" in result.error.message
    assert_healthy(sandbox)


def test_arguments_at_the_bounds_still_work(sandbox):
    # the arguments object is level 1, x level 2: 98 more levels are allowed
    result = sandbox.call(ANY, {"x": [deep_list(97), 10 ** 299, "y" * 500_000]})
    assert result.status is Status.OK, result


def test_many_problems_are_listed_up_to_a_limit(sandbox):
    spec = spec_with({"type": "object", "properties": {"x": {"type": "array", "items": {"type": "integer"}}}})
    result = sandbox.call(spec, {"x": ["no"] * 5000})
    assert result.status is Status.INVALID_ARGS
    assert len(result.error.detail["wrong_type"]) == 50
    assert "only the first 50 are listed" in result.error.message
    assert len(result.error.message) < 20_000


def test_deep_schemas_are_function_spec_errors():
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(5000):
        schema = {"type": "object", "properties": {"a": schema}}
    with pytest.raises(FunctionSpecError) as caught:
        spec_with(schema)
    assert "nested deeper than 64 levels" in str(caught.value)


# -- the same through the CLI and the agent -------------------------------------------------------


def run_cli(args: list[str], home: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    environment = dict(os.environ, RUNNER_HOME=str(home), **(env or {}))
    return subprocess.run(RUNNER + args, capture_output=True, text=True, env=environment, timeout=120)


def write_set(path: Path, parameters: Any) -> Path:
    path.write_text(json.dumps([{"name": "f", "parameters": parameters,
                                 "code": "def f(**kwargs):\n    return sorted(kwargs)\n"}]))
    return path


def test_cli_redos_and_deep_arguments_are_invalid_args(tmp_path):
    path = write_set(tmp_path / "set.json",
                     {"type": "object", "properties": {"x": {"type": "string", "pattern": REDOS}, "y": {}}})
    for arguments, words in ((json.dumps({"x": EVIL}), "does not match"),
                             # (an argv string has at most 128 KiB)
                             ('{"y": ' + "[" * 30_000 + "]" * 30_000 + "}", "nested deeper"),
                             ('{"y": ' + "9" * 5000 + "}", "more than 300 digits")):
        proc = run_cli(["call", str(path), "f", "--args", arguments, "--json"], tmp_path / "home")
        assert proc.returncode == 1, proc.stderr
        assert "Traceback" not in proc.stderr
        result = json.loads(proc.stdout)
        assert result["status"] == "invalid_args" and words in result["error"]["message"]


@pytest.mark.parametrize("command", [["functions", "show"], ["call"], ["agent", "task"]])
@pytest.mark.parametrize("kind", ["dangling", "remote", "deep"])
def test_cli_unusable_spec_files_are_function_spec_errors(tmp_path, schema_server, command, kind):
    if kind == "deep":
        nested = '{"type": "object", "properties": {"a": ' * 5000 + "{}" + "}}" * 5000
        text = '[{"name": "f", "code": "def f(): pass", "parameters": ' + nested + "}]"
        path = tmp_path / "set.json"
        path.write_text(text)
    else:
        ref = "#/$defs/missing" if kind == "dangling" else f"{schema_server}/x.json"
        path = write_set(tmp_path / "set.json", {"type": "object", "properties": {"x": {"$ref": ref}}})
    args = [*command, str(path)] if command[0] != "agent" else [*command, "--functions", str(path),
                                                                  "--base-url", "http://127.0.0.1:9/v1",
                                                                  "--model", "m"]
    if command == ["call"]:
        args.append("f")
    proc = run_cli(args, tmp_path / "home")
    assert proc.returncode == 1, proc.stderr
    assert "runner: error [FUNCTION_SPEC]" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _Recorder.hits == []


def test_the_agent_survives_hostile_tool_calls(sandbox):
    functions = FunctionSet("hostile", [spec_with(
        {"type": "object", "properties": {"x": {"type": "string", "pattern": REDOS}, "y": {}}})],
        log_store=False)
    deep_text = '{"y": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with FakeOpenAI() as server:
        server.reply("", tool_calls=[FakeOpenAI.call("f", {"x": EVIL}, "c1")])
        server.reply("", tool_calls=[FakeOpenAI.call("f", deep_text, "c2")])
        server.reply("", tool_calls=[FakeOpenAI.call("f", '{"y": ' + "7" * 5000 + "}", "c3")])
        server.reply("", tool_calls=[FakeOpenAI.call("f", {"x": "aaa"}, "c4")])
        server.reply("done")
        llm = OpenAIChat("m", base_url=server.url, api_key="k")
        started = time.monotonic()
        run = Agent(llm, functions, protocol="tools", sandbox=sandbox, max_turns=6).run("go")
        took = time.monotonic() - started
    assert took < 30
    assert str(run.status) == "answered" and run.final_answer == "done"
    codes = [turn.feedback_codes for turn in run.turns]
    assert codes[0] == ["INVALID_ARGUMENTS"]
    assert codes[1] == ["MALFORMED_RESPONSE"] or codes[1] == ["INVALID_ARGUMENTS"]
    assert "nested deeper than 100 levels" in run.turns[1].feedback_text
    assert codes[2] in (["MALFORMED_RESPONSE"], ["INVALID_ARGUMENTS"])
    assert "more than 300 digits" in run.turns[2].feedback_text
    assert codes[3] == []  # the next call ran
