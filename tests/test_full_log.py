"""A log that cannot take a write (a full disk) costs an agent run one clear line, never a
traceback, and no command names a run id that is not in the log; a run the database
refused but its spool kept is in the log the next time the log is opened."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI

from runner.agent import Agent
from runner.logs import LogStore
from runner.logs.agent import AgentLog
from runner.logs.store import RUN_SPOOL_NAME
from runner.testing import ScriptedChat


def on_a_full_disk(directory: Path, commands: list[str]) -> subprocess.CompletedProcess[str]:
    """Run `commands` with RUNNER_HOME on a small tmpfs whose log was written once and whose
    free space was then used up (a process holds the log open, so its write-ahead log stays:
    opening works, writing does not)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a small file system")
    python = sys.executable
    ready = directory / "holding"
    hold = (f"{python} -c 'import sqlite3, time; c = sqlite3.connect(\"{directory}/runner.db\"); "
            f"c.execute(\"SELECT 1 FROM executions\").fetchall(); open(\"{ready}\", \"w\").close(); "
            "time.sleep(120)' & HOLDER=$!; ")
    # This user's spool under the temporary directory made read-only in the namespace too,
    # so that no spool anywhere can take a run (test_disk_faults has one that can).
    private = Path(tempfile.gettempdir()) / f"runner-{os.getuid()}"
    script = (f"mkdir -p {private} && mount -t tmpfs -o ro tmpfs {private} && "
              f"mount -t tmpfs -o size=4M tmpfs {directory} && "
              f"echo 'print(0)' | {python} -m runner exec - >/dev/null && {hold}"
              f"while [ ! -e {ready} ]; do sleep 0.1; done; "
              f"dd if=/dev/zero of={directory}/fill bs=4k 2>/dev/null; "
              + "; ".join(f"echo '=== {number}' >&2; {command}; echo \"rc=$?\" >&2"
                          for number, command in enumerate(commands))
              + "; kill $HOLDER")
    return subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=300,
                          env={**os.environ, "RUNNER_HOME": str(directory)})


def test_agent_and_solve_on_a_full_log_say_so_in_one_line(tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    with FakeOpenAI(responder=lambda body: "```python\nprint(2 + 2)\n```" if len(
            body["messages"]) < 3 else "so \\boxed{4}") as server:
        model = f"--base-url {server.url} --model fake-model"
        done = on_a_full_disk(home, [
            f"{sys.executable} -m runner agent 2+2 --protocol code {model}",
            f"{sys.executable} -m runner math solve 2+2 {model}",
            f"{sys.executable} -m runner agent 2+2 --protocol code --json {model}"])
    parts = done.stderr.split("=== ")[1:]
    assert len(parts) == 3, done.stderr
    for part in parts:
        assert "rc=0" in part and "Traceback" not in part, part
        assert part.count("is not in the log:") == 1, part
        assert "No space left on device" in part or "disk is full" in part, part
        assert "runner logs show" not in part, part
    answered = json.loads(done.stdout.strip().splitlines()[-1])
    assert answered["status"] == "answered" and "disk is full" in answered["not_logged"]


def test_a_run_the_database_refused_is_imported_from_the_spool(tmp_path: Path):
    path = tmp_path / "runner.db"
    with LogStore(path) as store:
        run = Agent(ScriptedChat(["so \\boxed{4}"]), protocol="code", log=False).run("2+2")
        assert AgentLog(store).spool(run) == tmp_path / RUN_SPOOL_NAME
        assert AgentLog(store).find(run.id) is None
    with LogStore(path) as store:  # the next open imports it, whole
        logged = AgentLog(store).get(run.id)
    assert logged.status == "answered" and logged.final_answer == "4"
    assert [turn.reply for turn in logged.turns] == [turn.reply for turn in run.turns]
    assert not (tmp_path / RUN_SPOOL_NAME).exists()
