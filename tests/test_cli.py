"""The `runner` command as users type it: exit statuses, --json, logs, demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = [sys.executable, "-m", "runner"]


def run_cli(args: list[str], *, stdin: str = "", home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RUNNER_HOME=str(home))
    return subprocess.run(RUNNER + args, input=stdin, capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_exec_json_prints_exactly_one_result_object(home):
    proc = run_cli(["exec", "-", "--json"], stdin="print(2**10)\n", home=home)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # the whole stdout is one JSON document
    assert result["status"] == "ok"
    assert result["stdout"] == "1024\n"
    for key in ("id", "backend", "exit_code", "stderr", "stdout_truncated", "stderr_truncated",
                "error", "return_value", "duration_ms", "limits", "resources"):
        assert key in result
    assert set(result["resources"]) >= {"cpu_ms", "max_rss_kb"}
    assert result["backend"] == "jail"  # the default tier


@pytest.mark.parametrize("code, status, backend", [
    ("1/0", "error", "jail"),
    ("import os", "denied", "restricted"),
    ("while True: pass", "timeout", "jail"),
])
def test_exec_json_non_ok_statuses_exit_1_with_a_result(home, code, status, backend):
    proc = run_cli(["exec", "-", "--json", "--timeout", "1", "--backend", backend], stdin=code,
                   home=home)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == status
    assert result["error"]["message"]


def test_exec_limits_flags_are_applied_and_reported(home):
    proc = run_cli(["exec", "-", "--json", "--timeout", "2", "--memory", "128"],
                   stdin="print(1)", home=home)
    result = json.loads(proc.stdout)
    assert result["limits"]["timeout_s"] == 2
    assert result["limits"]["memory_mb"] == 128


def test_exec_file_human_output(home, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("print('from a file')\nraise ValueError('bad input')\n")
    proc = run_cli(["exec", str(script)], home=home)
    assert proc.returncode == 1
    assert proc.stdout == "from a file\n"
    assert "ValueError: bad input" in proc.stderr
    assert "status error" in proc.stderr


@pytest.mark.parametrize("args", [
    ["exec", "/no/such/file.py"],
    ["exec", "-", "--timeout", "-1"],
    ["exec", "-", "--backend", "nonsense"],
    ["exec", "-", "--memory", "abc"],
    ["nosuchcommand"],
])
def test_usage_errors_exit_2(home, args):
    proc = run_cli(args, home=home)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""


def test_non_utf8_file_is_a_usage_error(home, tmp_path):
    script = tmp_path / "latin1.py"
    script.write_bytes(b"print('caf\xe9')\n")
    proc = run_cli(["exec", str(script)], home=home)
    assert proc.returncode == 2
    assert "UTF-8" in proc.stderr


def test_package_refused_on_restricted_suggests_the_jail(home):
    proc = run_cli(["exec", "-", "--json", "--package", "numpy", "--backend", "restricted"],
                   stdin="print(1)", home=home)
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["status"] == "denied"
    assert "the jail tier (backend 'jail', the default)" in result["error"]["message"]


def test_logs_list_show_and_path(home):
    first = json.loads(run_cli(["exec", "-", "--json"], stdin="print('one')", home=home).stdout)
    second = json.loads(run_cli(["exec", "-", "--json"], stdin="1/0", home=home).stdout)

    listed = json.loads(run_cli(["logs", "list", "--json"], home=home).stdout)
    assert [r["result"]["id"] for r in listed] == [second["id"], first["id"]]
    assert listed[0]["source"] == "cli"

    errors = json.loads(run_cli(["logs", "list", "--json", "--status", "error"], home=home).stdout)
    assert [r["result"]["id"] for r in errors] == [second["id"]]
    assert json.loads(run_cli(["logs", "list", "--json", "-n", "1"], home=home).stdout)[0][
        "result"]["id"] == second["id"]

    table = run_cli(["logs", "list"], home=home).stdout
    assert first["id"] in table and second["id"] in table

    shown = run_cli(["logs", "show", second["id"][:12]], home=home)
    assert shown.returncode == 0
    assert "ZeroDivisionError" in shown.stdout and "1/0" in shown.stdout

    path = run_cli(["logs", "path"], home=home).stdout.strip()
    assert path == str(home / "runner.db")
    assert Path(path).is_file()


def test_logs_show_unknown_id_is_a_clear_error(home):
    proc = run_cli(["logs", "show", "NOPE"], home=home)
    assert proc.returncode == 1
    assert "NOPE" in proc.stderr


def test_python_dash_m_and_console_script_agree(home):
    script = Path(sys.executable).with_name("runner")
    proc = subprocess.run([str(script), "exec", "-", "--json"], input="print(3)",
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, RUNNER_HOME=str(home)))
    assert json.loads(proc.stdout)["stdout"] == "3\n"


def test_demo_runs_every_kind_of_snippet_and_lists_the_log(home):
    proc = run_cli(["demo"], home=home)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for expected in ("status=ok", "status=error", "status=timeout", "on the jail backend",
                     "[2, 3]", "861.51", "\\boxed{5*sqrt(2)}", "ZeroDivisionError",
                     "-x*cos(x) + sin(x)", "5 rows in /sandbox - at 5%: 1628.89",
                     "squares.png: b'\\x89PNG'", "Operation not permitted (the sandbox runs no "
                     "other program", "runner logs list"):
        assert expected in out, expected
    assert "'home'" not in out and "'bin'" not in out  # the view, not the host's root
    listed = json.loads(run_cli(["logs", "list", "--json", "--source", "demo"], home=home).stdout)
    # Each snippet ends the way it is meant to (newest first): the sympy algebra, the
    # function, the MathChat step, numpy with a file and the plot run; the bug, the loop
    # and the look for the host's programs do not.
    assert [row["result"]["status"] for row in reversed(listed)] == \
        ["ok", "ok", "ok", "ok", "ok", "error", "timeout", "error"], listed
