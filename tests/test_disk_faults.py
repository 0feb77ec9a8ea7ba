"""The log on a full disk or a read-only RUNNER_HOME, on real file systems: a tmpfs of a few
MB filled to the last block, and a read-only bind mount (root writes through chmod, not
through these). Reading commands read; runs, the agent and `math solve` start and say in
one line why they are not logged; a full disk is named as such, with the fix; an export
that cannot be written leaves no file behind; an evaluation stopped by a disk that fills
says so, with the resume line, and resumes to the same counts. Mounting needs root (CI
runs the tests as root); elsewhere these tests skip and say so."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from test_logstore import make_pair
from test_math_eval import RIGHT, SAMPLE, cli, done_items, expected_tallies, scripted

from runner.logs import LogStore

Mount = Callable[..., Path]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    """mount(size_mb) -> a fresh tmpfs; mount(source=DIR, read_only=True) -> DIR bound
    read-only elsewhere. Unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a small tmpfs or a read-only bind mount")
    mounted: list[Path] = []

    def make(size_mb: int = 4, *, source: Path | None = None) -> Path:
        where = tmp_path / f"mount{len(mounted)}"
        where.mkdir()
        if source is None:
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                           check=True)
        else:
            subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(where)], check=True)
        mounted.append(where)
        return where

    yield make
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(directory: Path) -> None:
    """Use up every free block of the file system holding `directory`."""
    fd = os.open(directory / "fill", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                continue
    finally:
        os.close(fd)
    assert os.statvfs(directory).f_bfree == 0


def runner(home: Path, *args: str, input: str | None = None,
           server: FakeOpenAI | None = None) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "RUNNER_MODEL")}
    environment["RUNNER_HOME"] = str(home)
    model = ["--base-url", server.url, "--model", "fake-model"] if server is not None else []
    return subprocess.run([sys.executable, "-m", "runner", *args, *model], input=input, env=environment,
                          capture_output=True, text=True, timeout=300, check=False)


def agent_replies(body: dict) -> str:
    return "```python\nprint(2 + 2)\n```" if len(body["messages"]) < 3 else "so \\boxed{4}"


READERS = [["logs", "list", "--json"], ["logs", "runs", "--json"], ["logs", "stats", "--json"],
           ["math", "evals", "--json"], ["math", "trainings", "--json"],
           ["functions", "history", "--json"]]


def check_readers(home: Path, logged: str) -> None:
    """Every reading command answers, in JSON, with what is there, and says nothing about
    writing (no search index, no spool)."""
    for command in READERS:
        done = runner(home, *command)
        assert done.returncode == 0, (command, done.stderr)
        assert "search index" not in done.stderr and "Traceback" not in done.stderr, done.stderr
        json.loads(done.stdout)
    assert [r["result"]["id"] for r in json.loads(runner(home, "logs", "list", "--json").stdout)] \
        == [logged]
    shown = runner(home, "logs", "show", logged, "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["result"]["id"] == logged


def first_run(home: Path) -> str:
    done = runner(home, "exec", "-", "--json", input="print('before')")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["id"])


def test_a_full_disk_is_named_and_runs_still_start(mount: Mount):
    home = mount(4)
    logged = first_run(home)
    database = home / "runner.db"
    assert not (home / "runner.db-shm").exists()  # a clean shutdown: the WAL index is gone
    fill(home)

    ran = runner(home, "exec", "-", "--json", input="print(6 * 7)")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["stdout"] == "42\n"
    assert f"the disk holding {database} is full" in ran.stderr
    assert f"df -h {home}" in ran.stderr and "Traceback" not in ran.stderr
    # the spool beside the log cannot take it either: this user's spool elsewhere does
    assert f"saved it to {tempfile.gettempdir()}/runner-{os.getuid()}/unlogged/" in ran.stderr

    library = subprocess.run(
        [sys.executable, "-c", "from runner import Sandbox\n"
                               "with Sandbox() as box: r = box.run('print(1 + 1)'); print(r.stdout, r.id)"],
        env={**os.environ, "RUNNER_HOME": str(home)}, capture_output=True, text=True, timeout=120)
    assert library.returncode == 0 and library.stdout.split()[0] == "2", library.stderr
    assert "is full" in library.stderr

    with FakeOpenAI(responder=agent_replies) as server:
        agent = runner(home, "agent", "2+2", "--protocol", "code", "--json", server=server)
        solve = runner(home, "math", "solve", "2+2", server=server)
        evaluation = runner(home, "math", "eval", "--dataset", str(SAMPLE), server=server)
    assert agent.returncode == 0, agent.stderr
    answered = json.loads(agent.stdout.strip().splitlines()[-1])
    assert answered["status"] == "answered" and answered["not_logged"] is None  # spooled
    assert f"kept it in {tempfile.gettempdir()}/runner-{os.getuid()}/unlogged/" in agent.stderr
    assert solve.returncode == 0 and "Traceback" not in solve.stderr, solve.stderr
    # a job that lives in the log cannot start without it, and says why
    assert evaluation.returncode == 1 and "Traceback" not in evaluation.stderr
    assert f"the disk holding {database} is full" in evaluation.stderr
    assert "free space on that disk" in evaluation.stderr

    check_readers(home, logged)
    for done in (ran, library, agent, solve, evaluation):
        assert done.stderr.count("search index") <= 1
    (home / "fill").unlink()  # the log itself was never harmed
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    after = first_run(home)  # the next open takes in what waited: nothing was lost
    executions = {r["result"]["id"] for r in json.loads(
        runner(home, "logs", "list", "--json", "-n", "100").stdout)}
    ran_id, library_id = json.loads(ran.stdout)["id"], library.stdout.split()[1]
    assert {logged, after, ran_id, library_id} <= executions
    assert set(answered["execution_ids"] if "execution_ids" in answered else
               [i for turn in answered["turns"] for i in turn["execution_ids"]]) <= executions
    runs = {r["id"] for r in json.loads(runner(home, "logs", "runs", "--json").stdout)}
    assert answered["id"] in runs and len(runs) == 2  # the agent's and math solve's


def test_a_read_only_runner_home_is_read_and_runs_still_start(mount: Mount, tmp_path: Path):
    source = tmp_path / "home"
    source.mkdir()
    logged = first_run(source)
    home = mount(source=source)
    database = home / "runner.db"

    check_readers(home, logged)
    ran = runner(home, "exec", "-", "--json", input="print(6 * 7)")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["stdout"] == "42\n"
    assert f"{database} cannot be written (a read-only file system" in ran.stderr
    assert "set RUNNER_HOME to a writable directory" in ran.stderr
    assert "Traceback" not in ran.stderr
    with FakeOpenAI(responder=agent_replies) as server:
        agent = runner(home, "agent", "2+2", "--protocol", "code", "--json", server=server)
    assert agent.returncode == 0, agent.stderr
    assert json.loads(agent.stdout.strip().splitlines()[-1])["status"] == "answered"
    assert runner(source, "logs", "list", "--json").stdout.count('"id"') >= 1
    assert not list(source.glob("unlogged*"))  # nothing written beside the log either


def test_an_export_that_cannot_be_written_leaves_no_file(mount: Mount, tmp_path: Path):
    home = tmp_path / "home"
    with LogStore(home / "runner.db") as store:
        for _ in range(40):
            request, result = make_pair()
            store.record_execution(request, result.model_copy(update={"stdout": "x" * 50_000}))
    disk = mount(1)
    target = disk / "out.jsonl"
    failed = runner(home, "logs", "export", "-o", str(target))
    assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr
    assert f"the disk holding {target} is full: the export stopped after" in failed.stderr
    assert f"nothing was written to {target}" in failed.stderr
    assert "exported" not in failed.stderr
    assert list(disk.iterdir()) == []  # neither the file nor its temporary

    target.write_text("an earlier export\n")
    again = runner(home, "logs", "export", "-o", str(target))
    assert again.returncode == 1 and target.read_text() == "an earlier export\n"
    assert [p.name for p in disk.iterdir()] == ["out.jsonl"]

    piped = subprocess.run(f"{sys.executable} -m runner logs export > {disk}/piped.jsonl",
                           shell=True, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "RUNNER_HOME": str(home)})
    assert piped.returncode == 1 and "Traceback" not in piped.stderr, piped.stderr
    assert "the disk holding standard output is full" in piped.stderr
    assert "what was written there is incomplete" in piped.stderr

    whole = runner(home, "logs", "export", "-o", str(tmp_path / "whole.jsonl"))
    assert whole.returncode == 0 and "exported 40 records" in whole.stderr
    assert len((tmp_path / "whole.jsonl").read_text().splitlines()) == 40


def test_a_disk_filling_during_an_evaluation_stops_it_resumably(mount: Mount):
    home = mount(8)
    database = home / "runner.db"
    with FakeOpenAI(responder=lambda body: scripted(body, delay_s=0.05)) as server:
        evaluation = cli(["math", "eval", "--dataset", str(SAMPLE), "--base-url", server.url,
                          "--model", "fake-model", "--concurrency", "2", "--json"], home)
        deadline = time.monotonic() + 120
        while len(done_items(database)) < 5:
            assert evaluation.poll() is None, evaluation.communicate()
            assert time.monotonic() < deadline, "the evaluation made no progress"
            time.sleep(0.05)
        fill(home)
        out, err = evaluation.communicate(timeout=300)
        assert evaluation.returncode == 1, err
        data = json.loads(out)
        assert data["status"] == "interrupted" and data["pending"] > 0
        assert f"the disk holding {database} is full" in data["error"]["message"]
        resume = f"runner math eval --resume {data['id']}"
        assert data["error"]["resume"] == resume
        assert f"runner: error [LOG_STORE]: the disk holding {database} is full" in err
        assert f"runner: then continue with: {resume}" in err
        assert "Traceback" not in err and err.count("could not update the search index") <= 1
        before = done_items(database)
        report = runner(home, "math", "report", data["id"], "--format", "json")  # a reader
        assert report.returncode == 0, report.stderr
        assert json.loads(report.stdout)["status"] == "interrupted"  # its process is gone
        assert "search index" not in report.stderr

        (home / "fill").unlink()
        resumed = cli(["math", "eval", "--resume", data["id"], "--base-url", server.url,
                       "--json"], home)
        out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    final = json.loads(out)
    assert (final["correct"], final["total"], final["pending"]) == (len(RIGHT), 35, 0)
    by_type, by_level = expected_tallies()
    assert final["by_type"] == by_type and final["by_level"] == by_level
    after = done_items(database)
    assert len(after) == 35 and all(after[position] == item for position, item in before.items())
