"""A damaged log, made by flipping bytes in a copy of a real one: damaged schema bytes are a
clear error naming the file and the fix from every command that reads (never a
UnicodeDecodeError), runs still run and spool, the viewer says so, and `runner logs
recover` copies every row into a new log with the damaged file kept beside it; a damaged
row is named and skipped, and the rest are listed and exported."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from starlette.testclient import TestClient

from runner import Sandbox
from runner.agent import Agent
from runner.logs import LogStore
from runner.logs.viewer import create_app
from runner.testing import ScriptedChat


LOCAL = "http://127.0.0.1"


def runner(home: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], input=input, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "RUNNER_HOME": str(home)})


@pytest.fixture(scope="module")
def real_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], str]:
    """A log written by real runs: five executions and an agent run (with its own)."""
    home = tmp_path_factory.mktemp("real")
    ids = []
    for number in range(5):
        done = runner(home, "exec", "-", "--json", input=f"print('row {number}')")
        assert done.returncode == 0, done.stderr
        ids.append(json.loads(done.stdout)["id"])
    with LogStore(home / "runner.db") as store, \
            Sandbox(backend="restricted", log_store=store) as box:
        run = Agent(ScriptedChat(["```python\nprint(6 * 7)\n```", "so \\boxed{42}"]),
                    protocol="code", sandbox=box).run("6 * 7?")
        ids += run.execution_ids
    assert run.status == "answered" and len(run.execution_ids) == 1
    return home / "runner.db", ids, run.id


def damaged_copy(source: Path, home: Path, find: bytes, offset: int, flipped: bytes, *,
                 after: bytes = b"") -> Path:
    """A copy of the log in `home`, `flipped` written `offset` bytes into the first `find`
    (after the first `after`)."""
    home.mkdir()
    data = bytearray(source.read_bytes())
    at = data.find(find, data.find(after) if after else 0)
    assert at > 0, find
    data[at + offset:at + offset + len(flipped)] = flipped
    (home / "runner.db").write_bytes(bytes(data))
    return home / "runner.db"


def listed(home: Path) -> list[str]:
    done = runner(home, "logs", "list", "--json", "-n", "100")
    assert done.returncode == 0, done.stderr
    return [record["result"]["id"] for record in json.loads(done.stdout)]


def test_damaged_schema_bytes_are_named_and_recover_keeps_every_row(real_log, tmp_path: Path):
    source, ids, run_id = real_log
    # a name in the schema table, made bytes that are not text
    database = damaged_copy(source, tmp_path / "home", b"indexagent_runs_status", 5, b"\xff\xfe\xff")
    home = database.parent
    damaged = database.read_bytes()

    for command in (["logs", "list", "--json"], ["logs", "stats", "--json"], ["logs", "runs"],
                    ["math", "evals"], ["functions", "history"], ["logs", "show", ids[0]],
                    ["logs", "serve", "--port", "0"]):
        done = runner(home, *command)
        assert done.returncode == 1, (command, done.stderr)
        assert "Traceback" not in done.stderr and "UnicodeDecodeError" not in done.stderr
        assert f"runner: error [LOG_STORE]: {database} is damaged" in done.stderr, done.stderr
        assert "runner logs recover" in done.stderr and done.stdout == ""

    # runs do not stop: they run, and wait in the spool
    ran = runner(home, "exec", "-", "--json", input="print('during')")
    assert ran.returncode == 0 and json.loads(ran.stdout)["stdout"] == "during\n", ran.stderr
    assert f"{database} is damaged" in ran.stderr and "unlogged.jsonl" in ran.stderr
    spooled = json.loads(ran.stdout)["id"]
    library = subprocess.run(
        [sys.executable, "-c", "from runner import Sandbox\n"
                               "with Sandbox() as box: r = box.run('print(2)'); print(r.stdout, r.id)"],
        env={**os.environ, "RUNNER_HOME": str(home)}, capture_output=True, text=True, timeout=120)
    assert library.returncode == 0 and library.stdout.split()[0] == "2", library.stderr
    spooled_too = library.stdout.split()[1]
    with FakeOpenAI(responder=lambda body: "```python\nprint(2 + 2)\n```"
                    if len(body["messages"]) < 3 else "so \\boxed{4}") as server:
        agent = runner(home, "agent", "2+2", "--protocol", "code", "--json", "--base-url",
                       server.url, "--model", "fake-model")
    assert agent.returncode == 0, agent.stderr
    conversation = json.loads(agent.stdout.strip().splitlines()[-1])
    assert conversation["status"] == "answered" and "unlogged_runs.jsonl" in agent.stderr

    # a viewer already serving the file says what is wrong, with the fix
    viewed = tmp_path / "viewed" / "runner.db"
    viewed.parent.mkdir()
    shutil.copy(source, viewed)
    client = TestClient(create_app(viewed), base_url=LOCAL, raise_server_exceptions=False)
    assert client.get("/executions").status_code == 200
    viewed.write_bytes(damaged)  # damaged while it serves
    shown = client.get("/executions")
    assert shown.status_code == 503 and "is damaged" in shown.text and "logs recover" in shown.text

    checked = runner(home, "logs", "check", "--json")
    assert checked.returncode == 1
    report = json.loads(checked.stdout)
    assert report["ok"] is False and "is damaged" in report["open_error"]
    assert report["integrity"] != ["ok"]

    recovered = runner(home, "logs", "recover", "--json")
    assert recovered.returncode == 0, recovered.stderr
    result = json.loads(recovered.stdout)
    copied = {table["table"]: table["copied"] for table in result["tables"]}
    assert copied["executions"] == len(ids) and copied["agent_runs"] == 1
    assert copied["agent_turns"] == 2
    assert Path(result["damaged_copy"]).read_bytes() == damaged  # kept as it was

    assert runner(home, "logs", "check").returncode == 0
    # every row, and the runs that waited in the spool
    assert sorted(listed(home)) == sorted([*ids, spooled, spooled_too,
                                           *(i for turn in conversation["turns"]
                                             for i in turn["execution_ids"])])
    runs = json.loads(runner(home, "logs", "runs", "--json").stdout)
    assert sorted(r["id"] for r in runs) == sorted([run_id, conversation["id"]])
    run = json.loads(runner(home, "logs", "show", run_id, "--json").stdout)
    assert run["status"] == "answered" and len(run["turns"]) == 2
    found = runner(home, "logs", "list", "-q", "row 3", "--json")
    assert [r["result"]["id"] for r in json.loads(found.stdout)] == [ids[3]]  # re-indexed


def test_a_damaged_row_is_named_and_skipped_and_the_rest_are_listed(real_log, tmp_path: Path):
    source, ids, run_id = real_log
    # the first byte of one execution's JSON limits, made a byte that is not text
    database = damaged_copy(source, tmp_path / "home", b'{"timeout_s"', 0, b"\xff",
                            after=b"print('row 2')")
    home = database.parent

    checked = runner(home, "logs", "check", "--json")
    assert checked.returncode == 1
    (bad,) = json.loads(checked.stdout)["damaged_rows"]
    assert bad["table"] == "executions" and bad["id"] in ids
    rest = [i for i in ids if i != bad["id"]]

    shown = runner(home, "logs", "list", "--json", "-n", "100")
    assert shown.returncode == 0 and "Traceback" not in shown.stderr
    assert sorted(r["result"]["id"] for r in json.loads(shown.stdout)) == sorted(rest)
    assert f"skipped: execution {bad['id']} in the log database is damaged" in shown.stderr
    assert "runner logs check" in shown.stderr

    exported = runner(home, "logs", "export", "-o", str(tmp_path / "out.jsonl"))
    assert exported.returncode == 0, exported.stderr
    assert f"execution {bad['id']}" in exported.stderr
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert sorted(line["result"]["id"] for line in lines if line["kind"] == "execution") \
        == sorted(rest)
    assert any(line["kind"] == "agent_run" and line["id"] == run_id for line in lines)

    one = runner(home, "logs", "show", bad["id"])
    assert one.returncode == 1 and "Traceback" not in one.stderr
    assert f"execution {bad['id']} in the log database is damaged" in one.stderr

    ran = runner(home, "exec", "-", "--json", input="print('after')")  # the log still logs
    assert ran.returncode == 0
    assert json.loads(ran.stdout)["id"] in listed(home)


def test_a_damaged_turn_is_skipped_and_the_run_shown(real_log, tmp_path: Path):
    source, ids, run_id = real_log
    # the answer turn's reply, its first byte made one that is not text
    database = damaged_copy(source, tmp_path / "home", b'{"role": "assistant", "content": "so', 0,
                            b"\xff")
    shown = runner(database.parent, "logs", "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    run = json.loads(shown.stdout)
    assert run["status"] == "answered" and [turn["number"] for turn in run["turns"]] == [1]
    assert f"skipped: turn 2 of agent run {run_id} in the log database is damaged" in shown.stderr
    checked = runner(database.parent, "logs", "check")
    assert checked.returncode == 1 and "the log is damaged" in checked.stdout



def test_recover_refuses_while_another_process_has_the_log_open(real_log, tmp_path: Path):
    """A viewer or an evaluation left running would write to the damaged file while it is
    copied (and lose it): recover names the process and waits to be asked again;
    --force recovers anyway."""
    source, ids, _ = real_log
    database = damaged_copy(source, tmp_path / "home", b"indexagent_runs_status", 5, b"\xff\xfe\xff")
    home = database.parent
    holder = subprocess.Popen([sys.executable, "-c",
                               f"import sys, time\nf = open({str(database)!r}, 'rb')\n"
                               "print('open', flush=True)\ntime.sleep(120)\n"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "open\n"
        refused = runner(home, "logs", "recover")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert f"have {database} open (pid {holder.pid})" in refused.stderr, refused.stderr
        assert "runner logs recover --force" in refused.stderr
        assert not list(home.glob("runner.db.damaged-*"))  # nothing was moved
        forced = runner(home, "logs", "recover", "--force", "--json")
        assert forced.returncode == 0, forced.stderr
        assert json.loads(forced.stdout)["recovered"] is True
    finally:
        holder.kill()
        holder.wait()
    assert set(ids) <= set(listed(home))
