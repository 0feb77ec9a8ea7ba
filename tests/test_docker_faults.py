"""Faults of the Docker engine and of the host, against the real engine.

- A missing image says `runner images build`; an engine that does not answer says the
  engine is the problem (`runner doctor --fix`), never "the image is not built" or
  "reinstall the runner".
- An open Sandbox outlives its engine: runs while the engine is away are `crashed` with
  a message naming the engine, and the same Sandbox (and session) works again after.
  One test points the client at a socket nobody listens on (cheap, disturbs no one);
  `test_engine_stopped_and_started_under_an_open_sandbox` really stops the machine's
  engine and starts it again with sandbox_images/ensure-docker.sh right away, which must
  wait for the old daemon instead of switching the storage driver.
- A container killed mid-run is `crashed` and the next run works; a host process killed
  during a run leaves a container that the next Sandbox sweeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TEST_LABEL, TEST_SESSION
from runner import ExecutionResult, Limits, Sandbox, Status
from runner.backends.docker import Profile, container_config
from runner.docker import images
from runner.docker.engine import EngineUnavailableError, containers, docker, engine_info
from runner.docker.environments import Environment
from runner.errors import BackendUnavailableError

pytestmark = pytest.mark.docker

RUN_LABEL = "org.runner.test.faults"
RUN_ID = f"{os.getpid()}-{int(time.time())}"
LABELS = {TEST_LABEL: TEST_SESSION, RUN_LABEL: RUN_ID}
DEAD_SOCKET = "unix:///nonexistent/runner-test/docker.sock"
ENSURE_DOCKER = Path(__file__).resolve().parents[1] / "sandbox_images" / "ensure-docker.sh"
DAEMON_JSON = Path("/etc/docker/daemon.json")
PIDFILE = Path("/var/run/docker.pid")
LONG = Limits(timeout_s=60)


def _describe(r: ExecutionResult) -> str:
    return f"status={r.status!s} error={r.error!r} stdout={r.stdout[:200]!r}"


def ours(label: str = f"{RUN_LABEL}={RUN_ID}") -> list[str]:
    return [c["ID"] for c in containers(label)]


def assert_names_the_engine(r: ExecutionResult) -> None:
    assert r.status == Status.CRASHED and r.error is not None, _describe(r)
    message = r.error.message
    assert "Docker engine" in message and "runner doctor --fix" in message, _describe(r)
    assert "not built" not in message and "reinstall" not in message, _describe(r)


def assert_ok(r: ExecutionResult, stdout: str) -> None:
    assert r.status == Status.OK and r.stdout == stdout, _describe(r)


def run_in_thread(sandbox: Sandbox, code: str) -> tuple[threading.Thread, dict[str, ExecutionResult]]:
    box: dict[str, ExecutionResult] = {}
    thread = threading.Thread(target=lambda: box.update(result=sandbox.run(code, limits=LONG)))
    thread.start()
    return thread, box


@pytest.fixture
def sandbox(_isolated_runner_home: str) -> Iterator[Sandbox]:
    """A Sandbox of its own with one warm container (the faults here destroy containers)."""
    with Sandbox(backend="docker", labels=LABELS, pool_size=1) as sb:
        sb.warm()
        yield sb
    assert not ours(), "closing the Sandbox left containers behind"


# --- what the messages say ---------------------------------------------------------------


def test_containers_are_created_through_the_api_with_the_host_hidden():
    config = container_config(image="runner-sandbox:x", profile=Profile.of(Limits()),
                              env=Environment("", None, {}))
    host = config["HostConfig"]
    assert config["Image"] == "runner-sandbox:x" and config["User"] == "0:0"
    assert "/proc/cmdline" in host["MaskedPaths"] and "/proc/kcore" in host["MaskedPaths"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert config["Hostname"] == "sandbox" and host["CgroupnsMode"] == "private"


def test_an_image_that_is_not_built_says_run_runner_images_build():
    with pytest.raises(BackendUnavailableError) as caught:
        Sandbox(backend="docker", image="runner-sandbox:no-such-build", log_store=False)
    assert "not built" in caught.value.message
    assert "runner images build" in (caught.value.fix or "")


def test_an_image_removed_under_an_open_sandbox_says_run_runner_images_build(sandbox):
    """The container is started with --pull never, so the missing image is reported as
    missing (no pull from a registry that does not exist), with the fix."""
    temporary = f"runner-sandbox:faults-{RUN_ID}"
    docker(["tag", images.default_tag(), temporary])
    try:
        with Sandbox(backend="docker", image=temporary, labels=LABELS, pool_size=1,
                     log_store=False) as sb:
            assert_ok(sb.run("print(1)"), "1\n")
            docker(["image", "rm", temporary])  # untags only: the real tag keeps the image
            docker(["kill", *ours()], check=False)  # the next run needs a new container
            time.sleep(0.5)
            with pytest.raises(BackendUnavailableError) as caught:
                sb.run("print(2)")
    finally:
        docker(["image", "rm", temporary], check=False)
    assert "not in the Docker engine" in caught.value.message, caught.value
    assert "runner images build" in (caught.value.fix or ""), caught.value
    assert "reinstall" not in str(caught.value)


def test_an_unreachable_engine_is_named_at_open(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", DEAD_SOCKET)
    with pytest.raises(EngineUnavailableError) as caught:
        Sandbox(backend="docker", log_store=False)
    assert "Docker engine is not reachable" in caught.value.message
    assert "runner doctor --fix" in (caught.value.fix or "")
    assert "not built" not in str(caught.value)


def test_the_cli_and_the_doctor_name_an_unreachable_engine(tmp_path):
    env = dict(os.environ, DOCKER_HOST=DEAD_SOCKET, RUNNER_HOME=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "runner", "exec", "-", "--backend", "docker"],
                         input="print(1)", capture_output=True, text=True, env=env, timeout=60)
    assert run.returncode == 1
    assert "Docker engine is not reachable" in run.stderr and "runner doctor --fix" in run.stderr
    assert "Traceback" not in run.stderr and "not built" not in run.stderr
    doctor = subprocess.run([sys.executable, "-m", "runner", "doctor", "--no-self-test"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert doctor.returncode != 0
    assert "Docker engine is not reachable" in doctor.stdout + doctor.stderr
    assert "not built" not in doctor.stdout + doctor.stderr


# --- an open Sandbox outlives its engine ----------------------------------------------------


def test_runs_while_the_engine_is_unreachable_crash_naming_it_then_work_again(sandbox,
                                                                           monkeypatch):
    session = sandbox.session()
    assert_ok(session.run("x = 5\nprint(x)"), "5\n")
    real_env = dict(os.environ)
    original = os.environ.get("DOCKER_HOST")
    thread, box = run_in_thread(sandbox, "import time\ntime.sleep(30)")
    time.sleep(1.0)
    running = ours()  # the pool's container (busy with the run) and the session's
    assert len(running) == 2
    # The engine "goes away": the client can no longer reach it, and its containers die.
    monkeypatch.setenv("DOCKER_HOST", DEAD_SOCKET)
    subprocess.run(["docker", "kill", *running], env=real_env, capture_output=True, check=True)
    thread.join(timeout=60)
    assert_names_the_engine(box["result"])  # the run in progress
    down = sandbox.run("print(1)")  # a run that needs a new container
    assert_names_the_engine(down)
    assert down.error is not None and down.error.type == "EngineUnavailable"
    assert_names_the_engine(session.run("print(x)"))  # the session's container died too
    assert sandbox.log_store is not None
    assert sandbox.log_store.get_execution(down.id).result.status == Status.CRASHED

    if original is None:
        monkeypatch.delenv("DOCKER_HOST")
    else:
        monkeypatch.setenv("DOCKER_HOST", original)
    assert_ok(sandbox.run("print(2)"), "2\n")
    again = session.run("print(x)")
    assert again.status == Status.ERROR and again.error is not None
    assert again.error.type == "NameError"  # a fresh session: the state went with the engine
    assert session.restarts == 1
    assert_ok(session.run("x = 6\nprint(x)"), "6\n")
    session.close()


def _daemon_pid() -> int | None:
    try:
        pid = int(PIDFILE.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm == "dockerd" else None


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


def _engine_answers() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def _ensure_engine() -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ENSURE_DOCKER)], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.engine_restart
def test_engine_stopped_and_started_under_an_open_sandbox(sandbox):
    """Stops this machine's engine twice (a few seconds each) and always starts it again."""
    if os.geteuid() != 0:
        pytest.skip("stopping and starting the Docker engine needs root")
    pid = _daemon_pid()
    if pid is None:
        pytest.skip(f"the engine was not started with the pid file {PIDFILE} "
                    "(ensure-docker.sh starts it so); this test stops it by that pid")
    driver = engine_info()["Driver"]
    daemon_json = DAEMON_JSON.read_text() if DAEMON_JSON.exists() else None
    image = images.status()
    assert image.built
    session = sandbox.session()
    assert_ok(session.run("x = 5\nprint(x)"), "5\n")
    try:
        # 1. Restart right after a stop, while the old daemon is still exiting: the
        #    script must wait for it, and must not take its silence for a broken driver.
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: not _engine_answers(), 30, "the engine to stop answering")
        started = _ensure_engine()
        log = started.stderr
        print(log)  # shows whether the script found the old daemon still exiting (-s)
        assert started.returncode == 0, log
        assert "switching the storage driver" not in log, log
        assert engine_info()["Driver"] == driver, log
        assert (DAEMON_JSON.read_text() if DAEMON_JSON.exists() else None) == daemon_json, log
        assert images.status() == image, "the sandbox image is gone after the restart"
        assert_ok(sandbox.run("print(1)"), "1\n")  # the dead container is replaced

        # 2. Runs while the engine is down fail clearly; the same Sandbox works after.
        pid = _daemon_pid()
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
        _wait(lambda: not Path(f"/proc/{pid}").exists(), 60, "the old dockerd to exit")
        down = sandbox.run("print(2)")
        assert_names_the_engine(down)
        assert_names_the_engine(session.run("print(x)"))
        started = _ensure_engine()
        assert started.returncode == 0, started.stderr
        assert engine_info()["Driver"] == driver
        assert_ok(sandbox.run("print(3)"), "3\n")
        after = session.run("print(x)")
        assert after.error is not None and after.error.type == "NameError", _describe(after)
        assert session.restarts == 1
        assert sandbox.log_store is not None
        assert sandbox.log_store.get_execution(down.id).result.status == Status.CRASHED
    finally:
        if not _engine_answers():
            restored = _ensure_engine()
            assert restored.returncode == 0, f"could not start the engine again:\n{restored.stderr}"
        session.close()


# --- containers and hosts killed --------------------------------------------------------------


def test_a_container_killed_mid_run_is_crashed_and_the_next_run_works(sandbox):
    [killed] = ours()
    thread, box = run_in_thread(sandbox, "print('started', flush=True)\n"
                                         "import time\ntime.sleep(30)")
    time.sleep(1.0)
    docker(["kill", killed])
    thread.join(timeout=60)
    r = box["result"]
    assert r.status == Status.CRASHED and r.error is not None, _describe(r)
    assert r.error.type == "WorkerLost" and "replaced" in r.error.message, _describe(r)
    assert "Docker engine" not in r.error.message, "the engine is fine: it must not be blamed"
    assert_ok(sandbox.run("print(6 * 7)"), "42\n")
    assert killed not in ours() and len(ours()) == 1


CHILD = r"""
import json, sys
from runner import Limits, Sandbox
sandbox = Sandbox(backend="docker", log_store=False, labels=json.loads(sys.argv[1]))
print("open", flush=True)
sandbox.run("import time\ntime.sleep(120)", limits=Limits(timeout_s=300))
"""


def test_a_host_process_killed_during_a_run_leaves_no_container_after_the_next_open(
        _isolated_runner_home: str):
    label = f"org.runner.test.killed-host={RUN_ID}"
    labels = {TEST_LABEL: TEST_SESSION, "org.runner.test.killed-host": RUN_ID}
    host = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(labels)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert host.stdout is not None and host.stdout.readline() == "open\n"
        _wait(lambda: bool(ours(label)), 60, "the host's container")
        time.sleep(1.0)  # the run is in progress
    finally:
        host.kill()  # SIGKILL: no cleanup of any kind runs
        host.wait()
    left = ours(label)
    assert left, "the killed host's container is already gone: nothing is left to sweep"
    names = [c["Names"] for c in containers(label)]
    assert _docker_clients(names), "the orphan's docker client is not found: the check below is blind"
    with Sandbox(backend="docker", log_store=False, labels=LABELS):
        assert ours(label) == [], "the next Sandbox did not sweep the orphaned container"
    _wait(lambda: not _docker_clients(names), 30, "the orphan's docker client to exit")


def _docker_clients(names: list[str]) -> list[int]:
    """Docker client processes on the host attached to the containers named `names`."""
    wanted = {name.encode() for name in names}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 2 and cmd[0].endswith(b"docker") and wanted & set(cmd):
            found.append(int(entry))
    return found