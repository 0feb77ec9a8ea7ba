"""`runner math rescore EVAL_ID` and `runner math replay EVAL_ID`: an evaluation's recorded
answers judged again by this installation's checker, and its conversations replayed. The evaluation is a real one (a scripted model, real sandbox runs,
the real checker); one item's recorded verdict is then set to what the previous checker
rules (version 2) said of a real answer they judged wrongly (`5=4` accepted for `4`: an
`=` chain counted by its last piece), and the rescore reports exactly that change."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from test_math_eval import GOLD, PROBLEMS, SAMPLE, fake, task_of

from runner.logs.evaluations import EvaluationLog
from runner.logs.store import LogStore
from runner.math.evaluation import evaluate
from runner.math.rescore import rescore

CHAIN = PROBLEMS[1]  # its recorded answer becomes a chain whose pieces disagree


def answering(body: dict) -> dict:
    task = task_of(body)
    answer = f"{int(GOLD[task]) + 1}={GOLD[task]}" if task == CHAIN.problem else GOLD[task]
    return {"content": f"So the answer is $\\boxed{{{answer}}}$."}


def test_a_rescore_reports_exactly_the_verdict_the_checker_now_reads_differently(tmp_path: Path):
    assert CHAIN.answer.isdigit()  # (the sample's second problem has a whole-number gold)
    home = tmp_path / "home"
    home.mkdir()
    database = home / "runner.db"  # the log the CLI reads below
    with LogStore(database) as store:
        report = evaluate(SAMPLE, llm=fake(answering), limit=4, backend="restricted",
                          log_store=store)
        evaluation_id = report.id
        items = EvaluationLog(store).items(evaluation_id)
    chained = next(item for item in items if item.problem["problem"] == CHAIN.problem)
    assert chained.correct is False  # this checker: the pieces disagree, no answer
    assert report.correct == 3
    # What the previous rules recorded for this answer, and their version.
    with sqlite3.connect(database) as conn:
        conn.execute("UPDATE evaluation_items SET correct = 1 WHERE evaluation_id = ? AND "
                     "position = ?", (evaluation_id, chained.position))
        conn.execute("UPDATE evaluations SET checker_version = ? WHERE id = ?",
                     ("runner-math/2 (an earlier installation)", evaluation_id))

    again = rescore(evaluation_id, log_store=database)
    assert again.judged == 4 and again.pending == 0 and again.unchanged == 3
    assert again.wrong_to_right == []
    (change,) = again.right_to_wrong
    assert (change.position, change.was, change.now) == (chained.position, True, False)
    assert change.answer == chained.answer and change.gold == CHAIN.answer
    assert (again.correct_before, again.correct_after) == (4, 3)
    assert again.judged_with.startswith("runner-math/2") and again.checker.startswith("runner-math/")

    env = {**os.environ, "RUNNER_HOME": str(home)}
    shown = subprocess.run([sys.executable, "-m", "runner", "math", "rescore", evaluation_id[:12],
                            "--json"], env=env, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 1, shown.stderr  # a verdict changed
    data = json.loads(shown.stdout)
    assert data["changed"] == 1 and data["right_to_wrong"][0]["position"] == chained.position
    text = subprocess.run([sys.executable, "-m", "runner", "math", "rescore", evaluation_id],
                          env=env, capture_output=True, text=True, timeout=300)
    assert "unchanged 3, right -> wrong 1, wrong -> right 0" in text.stdout
    assert f"right -> wrong  #{chained.position}" in text.stdout


def test_an_evaluation_replays_offline_and_names_the_conversations_that_diverge(tmp_path: Path):
    """Every problem's conversation replayed from the log (no model): identical on the tier
    it ran on; on the strict tier the one whose block imports `os` diverges at that turn."""
    from runner.math.replay_eval import replay_evaluation

    os_task = PROBLEMS[0].problem

    def solving(body: dict) -> dict:
        task = task_of(body)
        step = sum(1 for message in body["messages"] if message["role"] == "assistant")
        if step == 0:
            code = "import os\nprint(os.sep)" if task == os_task else f"print({len(task)})"
            return {"content": f"First this.\n```python\n{code}\n```"}
        return {"content": f"So the answer is $\\boxed{{{GOLD[task]}}}$."}

    home = tmp_path / "home"
    home.mkdir()
    with LogStore(home / "runner.db") as store:
        report = evaluate(SAMPLE, llm=fake(solving), limit=3, backend="jail", log_store=store)
        assert report.correct == 3
        same = replay_evaluation(report.id, log_store=store, concurrency=2)
        assert (same.identical, same.diverged, same.not_replayed) == (3, 0, 0)
        assert all(problem.replayed >= 1 for problem in same.problems)

    env = {**os.environ, "RUNNER_HOME": str(home)}
    strict = subprocess.run([sys.executable, "-m", "runner", "math", "replay", report.id,
                             "--backend", "restricted", "--json"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert strict.returncode == 1, strict.stderr
    data = json.loads(strict.stdout)
    assert (data["identical"], data["diverged"], data["not_replayed"]) == (2, 1, 0)
    (diverged,) = [p for p in data["problems"] if p["outcome"] == "diverged"]
    assert diverged["position"] == 0  # the first problem of the sample: the `os` block
    assert diverged["diverged_at"] == 1
