"""SIGTERM, as systemd, `timeout`, Kubernetes and Ray send it, stops every command as the
first Ctrl-C does: the run logged as interrupted and printed (with `--json`, one JSON
object), an evaluation's report with its resume line, an agent's turn in progress kept,
the servers (`runner mcp`, `runner logs serve`) stopped without a traceback, and a Docker
container removed, not left running. Exit status 130, as for Ctrl-C. A library user gets
the same with `runner.stopping.stop_on_sigterm()`.

Each test sends a real SIGTERM to a real process; bounds are generous."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAI
from test_ctrl_c import GENEROUS_S, SAMPLE, model, start, wait_until

REPO = Path(__file__).resolve().parent.parent
SPIN = "print('started', flush=True)\nn = 0\nwhile True:\n    n += 1\n"


def sigterm(process: subprocess.Popen) -> tuple[int, str, str, float]:
    """Send SIGTERM once; (exit status, stdout, stderr, seconds it took to exit)."""
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=GENEROUS_S * 4)
    return process.returncode, out, err, time.monotonic() - sent


def runner_json(home: Path, *args: str) -> object:
    environment = dict(os.environ, RUNNER_HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "runner", *args], capture_output=True,
                          text=True, env=environment, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def silent():
    """A model server that takes every request and never answers (within the test)."""
    with FakeOpenAI(responder=lambda body: {"content": "...", "delay_s": 600}) as server:
        yield server


def test_sigterm_on_exec_json_prints_and_logs_the_interrupted_run(tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "spin.py"
    script.write_text(SPIN)
    run = start(["exec", str(script), "--json", "--timeout", "60"], home)
    time.sleep(3)  # the worker is up and the loop runs
    code, out, err, took = sigterm(run)
    assert code == 130 and took < GENEROUS_S, err
    assert "Traceback" not in err
    result = json.loads(out)  # the whole of stdout: one object
    assert result["status"] == "crashed" and result["error"]["type"] == "Interrupted"
    assert "SIGTERM" in result["error"]["message"]
    assert result["duration_ms"] >= 500
    assert "stopping the run (SIGTERM" in err
    assert f"interrupted (SIGTERM); the run is logged as {result['id']}" in err
    logged = runner_json(home, "logs", "list", "--json")
    assert [entry["result"]["id"] for entry in logged] == [result["id"]]
    assert logged[0]["result"]["error"]["type"] == "Interrupted"


def test_a_second_sigterm_quits_at_once_with_one_json_object(tmp_path):
    """Two SIGTERMs in a row (a supervisor that insists): whichever ends the process, the
    second does not kill it mid-print, and stdout still holds exactly one JSON object."""
    run = start(["exec", "-", "--json", "--timeout", "60"], tmp_path / "home", stdin=SPIN)
    time.sleep(3)
    run.send_signal(signal.SIGTERM)
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=GENEROUS_S * 4)
    assert run.returncode == 130, err
    assert json.loads(out)["status"] == "crashed"  # one object, whichever signal ended it
    assert "Traceback" not in err


def test_sigterm_stops_an_evaluation_with_its_report_and_resume_line(silent, tmp_path):
    home = tmp_path / "home"
    evaluation = start(["math", "eval", "--dataset", str(SAMPLE), "--limit", "4",
                        "--concurrency", "2", "--json", *model(silent)], home)
    wait_until(lambda: len(silent.requests) >= 2, evaluation, "no request reached the model")
    code, out, err, took = sigterm(evaluation)
    assert code == 130 and took < GENEROUS_S, err
    assert "Traceback" not in err
    sent = len(silent.requests)
    time.sleep(1)
    assert len(silent.requests) == sent == 2  # nothing sent after SIGTERM
    report = json.loads(out)
    assert report["status"] == "interrupted"
    assert (report["total"], report["pending"]) == (0, 4)
    assert report["resume"] == f"runner math eval --resume {report['id']}"
    assert f"interrupted (SIGTERM); continue with: {report['resume']}" in err
    listed = runner_json(home, "math", "evals", "--json")
    assert [(e["id"], e["status"]) for e in listed] == [(report["id"], "interrupted")]


def test_sigterm_on_an_agent_keeps_the_turn_in_progress(tmp_path):
    home = tmp_path / "home"
    with FakeOpenAI() as server:
        server.reply("\\boxed{4}", delay_s=60)
        agent = start(["agent", "2+2?", "--protocol", "code", "--json", *model(server)], home)
        wait_until(lambda: len(server.requests) == 1, agent, "no request reached the model")
        code, out, err, took = sigterm(agent)
    assert code == 130 and took < GENEROUS_S, err
    assert "Traceback" not in err and "interrupted (SIGTERM)" in err
    printed = json.loads(out)
    assert printed["status"] == "interrupted"
    runs = runner_json(home, "logs", "runs", "--json")
    assert [(r["id"], r["status"], r["turn_count"]) for r in runs] == \
        [(printed["id"], "interrupted", 1)]
    assert "SIGTERM" in runs[0]["stop_reason"]


def test_sigterm_stops_the_mcp_stdio_server_while_its_client_holds_the_pipe(tmp_path):
    """A client that keeps standard input open (as a supervisor does) must not keep the
    server alive after SIGTERM: the thread reading the pipe never wakes by itself."""
    server = subprocess.Popen([sys.executable, "-m", "runner", "mcp"],
                              env=dict(os.environ, RUNNER_HOME=str(tmp_path / "home")),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}
        server.stdin.write(json.dumps(hello) + "\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())  # serving, its reader thread blocked
        assert answer["id"] == 1 and "result" in answer, answer
        sent = time.monotonic()
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=GENEROUS_S)  # the pipe is still open
        took = time.monotonic() - sent
        err = server.stderr.read()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        server.stdin.close()
    assert code == 130 and took < GENEROUS_S, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err


def test_sigterm_stops_the_log_viewer(tmp_path):
    home = tmp_path / "home"
    viewer = start(["logs", "serve", "--port", "0"], home)
    line = viewer.stdout.readline()  # the address goes to stdout
    assert "runner logs viewer: http://127.0.0.1:" in line, line
    port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass  # serving
    code, _, err, took = sigterm(viewer)
    assert code == 130 and took < GENEROUS_S, err
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err


@pytest.mark.docker
@pytest.mark.parametrize("when_s", [0.0, 2.0], ids=["while-the-container-starts", "while-the-run-runs"])
def test_sigterm_on_docker_exec_removes_the_container(tmp_path, when_s):
    """The process removes its container itself (a sweep only runs once it is gone), both
    when SIGTERM comes as the container is created and its worker warms up, and when the
    run is going."""
    from runner.docker.engine import OWNER_LABEL, containers

    home = tmp_path / "home"
    run = start(["exec", "-", "--backend", "docker", "--json", "--timeout", "60"], home,
                stdin=SPIN)
    owner = f"{OWNER_LABEL}={socket.gethostname()}:{run.pid}"
    wait_until(lambda: containers(owner), run, "no container started")
    time.sleep(when_s)
    code, out, err, _ = sigterm(run)
    assert code == 130, err
    assert "Traceback" not in err
    result = json.loads(out)
    assert result["status"] == "crashed" and result["error"]["type"] == "Interrupted"
    assert containers(owner) == [], err
    logged = runner_json(home, "logs", "list", "--json")
    assert logged[0]["result"]["id"] == result["id"]


def test_a_library_user_opts_in_with_stop_on_sigterm(tmp_path):
    """A program using the library: after `stop_on_sigterm()`, SIGTERM while a run runs
    is logged as interrupted and raised as RunInterrupted, as Ctrl-C is."""
    program = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(REPO)!r})
        from runner import Limits, Sandbox
        from runner.logs import LogStore
        from runner.stopping import RunInterrupted, stop_on_sigterm
        assert stop_on_sigterm()
        with LogStore({str(tmp_path / 'runner.db')!r}) as store, Sandbox(log_store=store) as sb:
            try:
                sb.run({SPIN!r}, limits=Limits(timeout_s=60))
            except RunInterrupted as stopped:
                print(json.dumps({{"id": stopped.result.id,
                                   "message": stopped.result.error.message,
                                   "logged": store.get_execution(stopped.result.id) is not None}}))
    """)
    process = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    code, out, err, took = sigterm(process)
    assert code == 0 and took < GENEROUS_S, err
    stopped = json.loads(out)
    assert stopped["logged"] and "SIGTERM" in stopped["message"]


def test_the_ctrl_c_tests_work_from_a_background_job(tmp_path):
    """`make test &` (or a CI runner without a terminal) starts the suite with SIGINT
    ignored, which its processes inherit; the suite restores Ctrl-C so that its Ctrl-C
    tests test Ctrl-C instead of failing."""
    def ignore_sigint() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_ctrl_c.py::test_ctrl_c_on_exec_json_prints_the_interrupted_run",
         "tests/test_agent_endings.py::test_ctrl_c_during_an_execution_is_logged_and_raised"],
        cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=ignore_sigint,
        env=dict(os.environ, RUNNER_HOME=str(tmp_path / "home")))
    assert done.returncode == 0, done.stdout[-3000:]
    assert "2 passed" in done.stdout
