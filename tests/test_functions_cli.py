"""`runner functions ...` and `runner call` as users type them: output, JSON, exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner import FunctionSet

RUNNER = [sys.executable, "-m", "runner"]
LEARNED = Path(__file__).parents[1] / "examples/learned_functions.json"


def run_cli(args: list[str], *, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RUNNER_HOME=str(home))
    return subprocess.run(RUNNER + args, capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_functions_show_lists_names_descriptions_arguments_and_packages(home):
    proc = run_cli(["functions", "show", str(LEARNED)], home=home)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("learned_functions (2 functions)\n")
    assert "simplify_expression  v1\n  Simplify a symbolic expression given as a string" in out
    assert "expression  string  required  An expression such as '(x**2 - 1)/(x - 1)'." in out
    assert "  packages: sympy\n" in out
    assert "principal    number   required  Amount borrowed." in out
    assert "months       integer  required\n" in out
    assert "  packages: none\n" in out
    assert "def loan_payment" not in out
    with_code = run_cli(["functions", "show", str(LEARNED), "--code"], home=home)
    assert "  code:\n    def loan_payment(principal, annual_rate, months):\n" in with_code.stdout


def test_functions_show_json_is_the_canonical_set(home):
    proc = run_cli(["functions", "show", str(LEARNED), "--json"], home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == FunctionSet.load(LEARNED, log_store=False).to_dict()


def test_functions_schema_openai_and_json(home):
    functions = FunctionSet.load(LEARNED, log_store=False)
    proc = run_cli(["functions", "schema", str(LEARNED), "--format", "openai"], home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == functions.to_openai_tools()

    proc = run_cli(["functions", "schema", str(LEARNED), "--format", "json"], home=home)
    assert json.loads(proc.stdout) == [
        {"name": s.name, "description": s.description, "parameters": s.parameters} for s in functions]

    proc = run_cli(["functions", "schema", str(LEARNED), "loan_payment"], home=home)
    assert json.loads(proc.stdout) == functions["loan_payment"].to_openai_tool()

    proc = run_cli(["functions", "schema", str(LEARNED), "nope"], home=home)
    assert proc.returncode == 2
    assert "simplify_expression, loan_payment" in proc.stderr


def test_call_json_prints_the_same_result_object_as_exec(home):
    proc = run_cli(["call", str(LEARNED), "simplify_expression",
                    "--args", '{"expression": "sqrt(8)"}', "--json"], home=home)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # the whole stdout is one JSON document
    assert result["status"] == "ok"
    assert result["return_value"] == "2*sqrt(2)"
    exec_proc = subprocess.run(RUNNER + ["exec", "-", "--json"], input="print(1)", capture_output=True,
                               text=True, env=dict(os.environ, RUNNER_HOME=str(home)), timeout=120)
    assert set(result) == set(json.loads(exec_proc.stdout))

    logged = run_cli(["logs", "show", result["id"], "--json"], home=home)
    record = json.loads(logged.stdout)
    assert record["source"] == "cli"
    assert record["meta"]["function"] == "simplify_expression"
    assert record["meta"]["arguments"] == {"expression": "sqrt(8)"}


def test_call_prints_the_return_value_for_people(home):
    proc = run_cli(["call", str(LEARNED), "loan_payment",
                    "--args", '{"principal": 1200, "annual_rate": 0, "months": 12}'], home=home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "100.0\n"
    assert "status ok" in proc.stderr


def test_call_with_invalid_arguments_exits_1_with_the_detail(home):
    proc = run_cli(["call", str(LEARNED), "loan_payment", "--args", '{"principal": "x"}', "--json"],
                   home=home)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == "invalid_args"
    assert result["error"]["detail"]["missing"] == ["annual_rate", "months"]
    human = run_cli(["call", str(LEARNED), "loan_payment", "--args", '{"principal": "x"}'], home=home)
    assert human.returncode == 1
    assert "missing required arguments 'annual_rate', 'months'" in human.stderr
    assert "status invalid_args" in human.stderr


def test_call_of_a_body_that_raises_exits_1(home, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "boom", "arguments": {}, "packages": "",
                                 "code": "def boom():\n    raise ValueError('no')\n"}]))
    proc = run_cli(["call", str(path), "boom"], home=home)
    assert proc.returncode == 1
    assert "ValueError: no" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize(("args", "words"), [
    (["--args", "{not json"], ["--args", "not valid JSON"]),
    (["--args", "[1, 2]"], ["--args", "JSON object"]),
])
def test_call_with_unusable_args_is_a_usage_error(home, args, words):
    proc = run_cli(["call", str(LEARNED), "loan_payment", *args], home=home)
    assert proc.returncode == 2
    for word in words:
        assert word in proc.stderr
    assert proc.stdout == ""


def test_call_of_an_unknown_function_or_file_is_a_usage_error(home, tmp_path):
    proc = run_cli(["call", str(LEARNED), "nope"], home=home)
    assert proc.returncode == 2
    assert "simplify_expression, loan_payment" in proc.stderr
    proc = run_cli(["call", str(tmp_path / "missing.json"), "f"], home=home)
    assert proc.returncode == 2


def test_a_broken_set_file_is_a_runner_error(home, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"name": "f", "arguments": "{oops", "code": "def f(): pass"}]')
    proc = run_cli(["functions", "show", str(path)], home=home)
    assert proc.returncode == 1
    assert "[FUNCTION_SPEC]" in proc.stderr and "arguments" in proc.stderr
    assert "fix:" in proc.stderr


def test_functions_history_shows_changes_with_diffs(home):
    home.mkdir(parents=True)
    from runner.logs import Author

    functions = FunctionSet.load(LEARNED, log_store=home / "runner.db")
    old = functions["loan_payment"]
    functions.replace(old.model_copy(update={"code": old.code.replace("r = annual_rate / 12",
                                                                      "r = annual_rate / 12.0")}),
                      by=Author.optimizer("opt-7"), note="float division")
    proc = run_cli(["functions", "history", "learned_functions"], home=home)
    assert proc.returncode == 0, proc.stderr
    assert "learned_functions.loan_payment v2  replace by optimizer opt-7  (float division)" in proc.stdout
    assert "-    r = annual_rate / 12\n    +    r = annual_rate / 12.0" in proc.stdout
    as_json = json.loads(run_cli(["functions", "history", "--json"], home=home).stdout)
    assert [(r["function"], r["version"], r["author"]) for r in as_json] == [
        ("loan_payment", 2, {"kind": "optimizer", "name": "opt-7"})]
    empty = run_cli(["functions", "history", "other"], home=home)
    assert empty.stdout == "no recorded changes\n"


def test_call_applies_the_limit_flags(home, tmp_path):
    path = tmp_path / "set.json"
    path.write_text(json.dumps([{"name": "spin", "arguments": {},
                                 "code": "def spin():\n    while True:\n        pass\n"}]))
    proc = run_cli(["call", str(path), "spin", "--timeout", "1", "--memory", "128", "--json"], home=home)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == "timeout"
    assert result["limits"]["timeout_s"] == 1 and result["limits"]["memory_mb"] == 128
