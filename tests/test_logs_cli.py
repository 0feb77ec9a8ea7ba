"""`runner logs` from the command line on real log files: search and filters, show (ids
that fit several rows, terminal safety, abridged bodies), a log on a read-only mount,
stats, export and import, and prune."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from logs_seed import HOSTILE, Seeded, seed
from test_logstore import make_pair

from runner.cli import main
from runner.ids import new_id
from runner.logs import LogStore
from runner.agent.run import AgentRun, AgentTurn
from runner.logs.agent import AgentLog
from runner.types import ExecutionRequest, ExecutionResult, Limits, Status


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(tmp_path_factory.mktemp("logs-cli") / "runner.db")


def logs(home: Path, *args: str, input: str | None = None):
    result = CliRunner().invoke(main, ["logs", *args], env={"RUNNER_HOME": str(home), "NO_COLOR": None},
                                input=input, catch_exceptions=False)
    return result


# -- list ------------------------------------------------------------------------------------


def test_list_searches_filters_and_prints_json(seeded: Seeded):
    home = seeded.path.parent
    found = json.loads(logs(home, "list", "-q", "ZeroDivisionError", "--json").stdout)
    assert [r["result"]["id"] for r in found] == [seeded.error]
    errors = json.loads(logs(home, "list", "--status", "error", "--since", "1h", "--json").stdout)
    assert {r["result"]["id"] for r in errors} == {seeded.error, seeded.hostile}
    assert json.loads(logs(home, "list", "--since", "2000-01-01", "--until", "2000-02-01",
                           "--json").stdout) == []
    of_run = json.loads(logs(home, "list", "--run", seeded.run, "--json").stdout)
    assert sorted(r["result"]["id"] for r in of_run) == sorted(seeded.run_executions)
    calls = logs(home, "list", "--function", "double")
    assert seeded.call in calls.output and "call double" in calls.output
    table = logs(home, "list", "-q", '"seeded-ok-output"')
    assert seeded.ok in table.output and seeded.error not in table.output


def test_list_refuses_a_bad_time_as_a_usage_error(seeded: Seeded):
    result = logs(seeded.path.parent, "list", "--since", "yesterday-ish")
    assert result.exit_code == 2 and "cannot read 'yesterday-ish' as a time" in result.output


# -- show ------------------------------------------------------------------------------------


def test_a_prefix_of_runs_and_executions_lists_both_kinds(seeded: Seeded):
    home = seeded.path.parent
    prefix = os.path.commonprefix([seeded.run, seeded.ok, seeded.error])
    result = logs(home, "show", prefix)
    assert result.exit_code == 1
    assert "agent run" in result.output and seeded.run in result.output
    assert "execution" in result.output and seeded.ok[:len(prefix)] in result.output
    assert "type more characters" in result.output
    # A prefix of the run alone shows the run; a whole execution id shows the execution.
    assert "agent run  " + seeded.run in logs(home, "show", seeded.run.lower()).output
    assert "execution  " + seeded.ok in logs(home, "show", seeded.ok).output


def test_show_escapes_control_sequences_unless_raw(seeded: Seeded):
    home = seeded.path.parent
    for target in (seeded.hostile, seeded.run):
        shown = logs(home, "show", target).output
        assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
        assert "\\x1b]0;owned title\\x07" in shown
        raw = logs(home, "show", target, "--raw").output
        assert "\x1b]0;owned title\x07" in raw
        exact = json.loads(logs(home, "show", target, "--json").stdout)
        kept = exact["result"]["stdout"] if target == seeded.hostile else exact["task"]
        assert HOSTILE in kept  # --json keeps the exact text


def test_show_abridges_megabytes_unless_full(tmp_path: Path):
    body = "".join(f"line {n:07d}\n" for n in range(300_000))  # 3.6 MB
    request = ExecutionRequest(code="print('big')", limits=Limits(max_output_bytes=8_000_000))
    result = ExecutionResult(id=new_id(), backend="restricted", status=Status.OK, stdout=body,
                             limits=request.limits)
    with LogStore(tmp_path / "runner.db") as store:
        store.record_execution(request, result)
    short = logs(tmp_path, "show", result.id).output
    assert len(short) < 40_000
    assert "characters not shown; --full shows everything" in short
    assert "line 0000000" in short and "line 0299999" in short  # the start and the end
    full = logs(tmp_path, "show", result.id, "--full").output
    assert body.rstrip("\n") in full


# -- a read-only mount -----------------------------------------------------------------------


def _read_only_mount(directory: Path, command: str) -> subprocess.CompletedProcess[str]:
    """Run `command` where `directory` is mounted read-only (a private mount namespace)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a directory read-only")
    script = (f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} "
              f"&& {command}")
    return subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True, text=True, check=False,
                          env={**os.environ, "RUNNER_HOME": str(directory)}, timeout=120)


def test_a_log_on_a_read_only_mount_can_be_listed_and_shown(seeded: Seeded, tmp_path: Path):
    home = tmp_path / "ro"
    home.mkdir()
    shutil.copy(seeded.path, home / "runner.db")
    python = f"{sys.executable} -m runner logs"
    done = _read_only_mount(home, f"touch {home}/probe 2>/dev/null && echo WRITABLE; "
                                  f"{python} list -n 50 && {python} show {seeded.error} "
                                  f"&& {python} show {seeded.run} && {python} stats")
    assert done.returncode == 0, done.stderr
    assert "WRITABLE" not in done.stdout
    assert seeded.ok in done.stdout and "ZeroDivisionError" in done.stdout
    assert "agent run  " + seeded.run in done.stdout
    assert not (home / "probe").exists()


def test_a_read_only_log_with_unmerged_changes_says_so(tmp_path: Path):
    home = tmp_path / "ro"
    home.mkdir()
    db = home / "runner.db"
    with LogStore(db) as store:
        request, result = make_pair()
        store.record_execution(request, result)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("UPDATE executions SET source = 'changed'")
    conn.commit()
    # Copy the file and its write-ahead log without the shared-memory index, as a backup
    # taken mid-write would be; then the read-only open cannot see the last change.
    shutil.copy(db, tmp_path / "copy.db")
    shutil.copy(db.with_name("runner.db-wal"), tmp_path / "copy.db-wal")
    conn.close()
    for name in ("runner.db", "runner.db-wal", "runner.db-shm"):
        (home / name).unlink(missing_ok=True)
    shutil.copy(tmp_path / "copy.db", db)
    shutil.copy(tmp_path / "copy.db-wal", home / "runner.db-wal")
    done = _read_only_mount(home, f"{sys.executable} -m runner logs list")
    assert done.returncode == 1
    assert "write-ahead log" in done.stderr and "fix:" in done.stderr
    assert "Traceback" not in done.stderr


# -- stats, export and import, prune --------------------------------------------------------


def test_stats_counts_what_is_there(seeded: Seeded):
    numbers = json.loads(logs(seeded.path.parent, "stats", "--json").stdout)
    assert numbers["executions"] == sum(numbers["by_status"].values()) >= 7
    assert numbers["by_status"]["error"] == 2 and numbers["by_backend"] == {"restricted": numbers["executions"]}
    assert numbers["agent_runs"] == 1 and numbers["agent_turns"] == 3
    assert numbers["function_versions"] == 2 and numbers["database_bytes"] > 0
    text = logs(seeded.path.parent, "stats").output
    assert "by status" in text and "agent runs  1" in text


def test_export_then_import_round_trips_exactly(seeded: Seeded, tmp_path: Path):
    exported = logs(seeded.path.parent, "export", "--format", "jsonl").stdout
    lines = exported.splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds.count("agent_run") == 1 and kinds.count("agent_turn") == 3
    assert kinds.count("execution") >= 7
    assert kinds.index("agent_run") < kinds.index("agent_turn")
    other = tmp_path / "other"
    imported = logs(other, "import", "-", input=exported)
    assert imported.exit_code == 0, imported.output
    assert (f"imported {kinds.count('execution')} executions, 1 agent runs, 3 turns, "
            f"{kinds.count('function_version')} function versions, 0 evaluations, 0 trainings "
            "(0 already") in imported.output
    assert logs(other, "export").stdout == exported
    again = logs(other, "import", "-", input=exported)
    assert f"({len(lines)} already in the log)" in again.output
    # The links are real foreign keys again on the other side.
    conn = sqlite3.connect(other / "runner.db")
    assert conn.execute("SELECT COUNT(*) FROM executions WHERE agent_run_id = ? AND agent_turn IS NOT NULL",
                        (seeded.run,)).fetchone()[0] == len(seeded.run_executions)
    one_run = logs(seeded.path.parent, "export", "--run", seeded.run).stdout.splitlines()
    assert sorted(json.loads(line)["kind"] for line in one_run) == \
        ["agent_run"] + ["agent_turn"] * 3 + ["execution"] * len(seeded.run_executions)


def test_a_damaged_import_imports_nothing(seeded: Seeded, tmp_path: Path):
    exported = logs(seeded.path.parent, "export").stdout.splitlines()
    broken = [*exported[:3], '{"kind": "execution", "request": {"code": 1}}', *exported[3:]]
    result = logs(tmp_path, "import", "-", input="\n".join(broken))
    assert result.exit_code == 1 and "line 4" in result.output and "nothing was imported" in result.output
    assert json.loads(logs(tmp_path, "list", "--json").stdout) == []
    assert logs(tmp_path, "export", "--run", "X", "--since", "1d").exit_code == 2


def test_prune_deletes_old_rows_with_their_index_and_vacuums(tmp_path: Path):
    old = datetime.now(UTC) - timedelta(days=40)
    db = tmp_path / "runner.db"
    with LogStore(db) as store:
        keep, drop = [], []
        for started, bucket in ((old, drop), (datetime.now(UTC), keep)):
            for _ in range(20):
                request, result = make_pair(started_at=started, code="print('prunable words')")
                result = result.model_copy(update={"stdout": "x" * 50_000})
                store.record_execution(request, result)
                bucket.append(result.id)
        log = AgentLog(store)
        run = AgentRun(id=new_id(), task="old run", protocol="json", started_at=old)
        log.start(run)
        request, in_run = make_pair(started_at=datetime.now(UTC))  # late, but in an old run
        store.record_execution(request, in_run, meta={"agent_run": run.id, "agent_turn": 1})
        log.add_turn(run.id, AgentTurn(number=1, started_at=old, messages_sent=[], execution_ids=[in_run.id]))
        # over (a `running` run of a live process, this one, would be kept)
        log.finish(run.model_copy(update={"status": "answered"}))
        _, replay = make_pair(started_at=datetime.now(UTC))
        store.record_execution(request, replay, meta={"replay_of": drop[0]})
    size_before = db.stat().st_size

    dry = logs(tmp_path, "prune", "--before", "30d", "--dry-run")
    assert "would delete 21 executions, 1 agent runs (1 turns)" in dry.output
    assert json.loads(logs(tmp_path, "stats", "--json").stdout)["executions"] == 42

    unasked = logs(tmp_path, "prune", "--before", "30d")  # no terminal to ask on, no --yes
    assert unasked.exit_code == 2 and "pass --yes" in unasked.output
    assert json.loads(logs(tmp_path, "stats", "--json").stdout)["executions"] == 42
    done = logs(tmp_path, "prune", "--before", "30d", "--yes")
    assert done.exit_code == 0 and "deleted 21 executions, 1 agent runs (1 turns)" in done.output
    with LogStore(db) as store:
        left = {r.id for r in store.list_executions(limit=None)}
        assert left == {*keep, replay.id}
        assert {r.id for r in store.list_executions(query="prunable", limit=None)} == set(keep)
        assert AgentLog(store).list(limit=None) == []
        assert store.get_execution(replay.id).meta == {"replay_of": drop[0]}
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT replay_of FROM executions WHERE id = ?", (replay.id,)).fetchone() == (None,)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()
    assert db.stat().st_size < size_before * 0.75  # VACUUM gave the space back
    assert logs(tmp_path, "prune").exit_code == 2  # --before is required


def test_prune_drops_old_evaluations_and_keeps_what_newer_ones_point_at(tmp_path: Path):
    """An evaluation created before the cut goes with its items; an old conversation that a
    kept evaluation's verdict points at stays (with its turns and executions)."""
    from runner.logs.evaluations import EvaluationLog, EvaluationRecord, NewItem
    from runner.logs.job_status import JobStatus

    old = datetime.now(UTC) - timedelta(days=40)
    db = tmp_path / "runner.db"
    with LogStore(db) as store:
        runs, evaluations = AgentLog(store), EvaluationLog(store)
        old_runs = []
        for _ in range(2):
            run = AgentRun(id=new_id(), task="a problem", protocol="code", started_at=old)
            runs.start(run)
            request, result = make_pair(started_at=old)
            store.record_execution(request, result, meta={"agent_run": run.id, "agent_turn": 1})
            runs.add_turn(run.id, AgentTurn(number=1, started_at=old, messages_sent=[],
                                            execution_ids=[result.id]))
            runs.finish(run.model_copy(update={"status": "answered"}))
            old_runs.append((run.id, result.id))
        for created, (run_id, _) in zip((old, datetime.now(UTC)), old_runs, strict=True):
            record = EvaluationRecord(id=new_id(), created_at=created, dataset="x",
                                      dataset_path="x.jsonl", dataset_sha256="0", method="pot",
                                      backend="restricted", checker_version="v", total=1)
            evaluations.create(record, [NewItem(problem_id="p", problem={"problem": "?"})])
            evaluations.finish_item(record.id, 0, agent_run_id=run_id, run_status="answered",
                                    answer="1", correct=True, verdict=None, duration_ms=1)
            evaluations.set_status(record.id, JobStatus.FINISHED)  # a live one would be kept
    done = logs(tmp_path, "prune", "--before", "30d", "--yes")
    assert done.exit_code == 0, done.output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 1
        assert conn.execute("SELECT COUNT(*) FROM evaluation_items").fetchone()[0] == 1
        left_runs = {row[0] for row in conn.execute("SELECT id FROM agent_runs")}
        left_executions = {row[0] for row in conn.execute("SELECT id FROM executions")}
    assert left_runs == {old_runs[1][0]}, "the run a kept verdict points at must stay"
    assert left_executions == {old_runs[1][1]}


def _prune_on_a_terminal(home: Path, answer: str) -> str:
    """`runner logs prune --before 0d` with a terminal as its standard input, answering."""
    import pty
    import select

    main_fd, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "runner", "logs", "prune", "--before", "0d"],
                               stdin=follower, stdout=follower, stderr=follower,
                               env={**os.environ, "RUNNER_HOME": str(home)})
    os.close(follower)
    seen = b""
    try:
        while b"[y/N]" not in seen:
            ready, _, _ = select.select([main_fd], [], [], 60)
            assert ready, seen
            seen += os.read(main_fd, 4096)
        os.write(main_fd, answer.encode() + b"\n")
        while process.poll() is None or select.select([main_fd], [], [], 0.2)[0]:
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
        process.wait(timeout=60)
    finally:
        os.close(main_fd)
    return seen.decode(errors="replace")


def test_prune_asks_on_a_terminal_before_it_deletes(tmp_path: Path):
    with LogStore(tmp_path / "runner.db") as store:
        for _ in range(3):
            store.record_execution(*make_pair())
    shown = _prune_on_a_terminal(tmp_path, "n")
    assert "delete 3 executions, 0 agent runs (0 turns) started before" in shown
    assert "nothing was deleted" in shown
    assert json.loads(logs(tmp_path, "stats", "--json").stdout)["executions"] == 3
    shown = _prune_on_a_terminal(tmp_path, "y")
    assert "deleted 3 executions" in shown
    assert json.loads(logs(tmp_path, "stats", "--json").stdout)["executions"] == 0
