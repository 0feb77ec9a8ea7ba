"""`runner logs export` and `runner logs import` of a log holding every kind of record
(executions, an agent run, the function history, evaluations and a training): a round trip
gives the same log, and an import checks every record as the log makes them (a file that
is not UTF-8, an id such as ../../etc/passwd, a negative duration, a start in the year
9999 are refused, naming the line, and nothing is imported)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from logs_seed import Seeded, seed_apart

from runner.cli import main

TABLES = ("executions", "agent_runs", "agent_turns", "function_versions", "evaluations",
          "evaluation_items", "trainings", "training_epochs", "training_actions")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed_apart(tmp_path_factory.mktemp("transfer") / "runner.db", training=True)


def logs(home: Path, *args: str, input: str | bytes | None = None):
    return CliRunner().invoke(main, ["logs", *args], env={"RUNNER_HOME": str(home)},
                              input=input, catch_exceptions=False)


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in TABLES}


def test_an_export_holds_everything_and_an_import_gives_the_same_log(seeded: Seeded,
                                                                       tmp_path: Path):
    exported = logs(seeded.path.parent, "export").stdout
    before = counts(seeded.path)
    assert all(before[table] > 0 for table in TABLES), before  # every kind of record is there
    kinds = [json.loads(line)["kind"] for line in exported.splitlines()]
    for kind, table in (("execution", "executions"), ("agent_run", "agent_runs"),
                        ("agent_turn", "agent_turns"), ("function_version", "function_versions"),
                        ("evaluation", "evaluations"), ("evaluation_item", "evaluation_items"),
                        ("training", "trainings"), ("training_epoch", "training_epochs"),
                        ("training_action", "training_actions")):
        assert kinds.count(kind) == before[table], kind
    other = tmp_path / "other"
    imported = logs(other, "import", "-", input=exported)
    assert imported.exit_code == 0, imported.output
    assert "0 already in the log" in imported.output
    assert counts(other / "runner.db") == before
    assert logs(other, "export").stdout == exported  # the same records, links and all
    with sqlite3.connect(other / "runner.db") as conn:
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        linked = conn.execute("SELECT COUNT(*) FROM training_actions WHERE outcome = 'accepted' "
                              "AND function_version_id IS NOT NULL").fetchone()[0]
    assert linked >= 1
    # what the commands show of them on the other side
    history = CliRunner().invoke(main, ["functions", "history", "--json"],
                                 env={"RUNNER_HOME": str(other)})
    assert len(json.loads(history.stdout)) == before["function_versions"]
    trainings = CliRunner().invoke(main, ["math", "trainings", "--json"],
                                   env={"RUNNER_HOME": str(other)})
    assert json.loads(trainings.stdout)[0]["id"] == seeded.training
    again = logs(other, "import", "-", input=exported)
    assert f"({len(kinds)} already in the log)" in again.output


def _line(exported: str, kind: str) -> dict:
    return next(json.loads(line) for line in exported.splitlines()
                if json.loads(line)["kind"] == kind)


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda line: {**line, "result": {**line["result"], "id": "../../etc/passwd"}},
     "'../../etc/passwd' is not a log id"),
    (lambda line: {**line, "result": {**line["result"], "duration_ms": -5}},
     "duration_ms is -5, which cannot be negative"),
    (lambda line: {**line, "result": {**line["result"], "started_at": "9999-01-01T00:00:00+00:00"}},
     "9999-01-01T00:00:00+00:00 is not a time the log could have recorded"),
], ids=["path-id", "negative-duration", "year-9999"])
def test_an_import_refuses_records_the_log_would_never_make(seeded: Seeded, tmp_path: Path,
                                                            damage, reason):
    exported = logs(seeded.path.parent, "export").stdout.splitlines()
    index = next(i for i, line in enumerate(exported) if json.loads(line)["kind"] == "execution")
    exported[index] = json.dumps(damage(json.loads(exported[index])))
    result = logs(tmp_path, "import", "-", input="\n".join(exported))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"line {index + 1} of standard input is not a log record" in result.output
    assert reason in result.output and "nothing was imported" in result.output
    assert not (tmp_path / "runner.db").exists() or counts(tmp_path / "runner.db")["executions"] == 0


def test_other_records_are_checked_too(seeded: Seeded, tmp_path: Path):
    exported = logs(seeded.path.parent, "export").stdout
    for kind, field, value in (("agent_run", "id", "../x"), ("evaluation", "id", "1; DROP"),
                               ("agent_turn", "latency_ms", -1),
                               ("training", "created_at", "9999-12-31T00:00:00+00:00")):
        line = {**_line(exported, kind), field: value}
        result = logs(tmp_path, "import", "-", input=json.dumps(line))
        assert result.exit_code == 1 and "is not a log record" in result.output, (kind, result.output)


def test_a_file_that_is_not_utf8_is_refused_with_its_line(seeded: Seeded, tmp_path: Path):
    exported = logs(seeded.path.parent, "export").stdout.encode()
    broken = tmp_path / "broken.jsonl"
    lines = exported.splitlines()
    broken.write_bytes(b"\n".join([lines[0], b'{"kind": "\xff\xfe"}', *lines[1:]]))
    result = logs(tmp_path / "home", "import", str(broken))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"line 2 of {broken} is not UTF-8 text" in result.output
