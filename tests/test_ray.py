"""The ray backend on a real two-node Ray cluster on loopback (tests/conftest.py).

The contract suite, the sessions and the function calls run against `ray` through
BACKENDS; here: placement over the nodes, sessions pinned to an actor, a node lost in the
middle of a batch (crashed results naming it, no hang, nothing missing from the log, the
next runs on the node that is left, lost runs run again exactly once), new capacity taken
up, and the command line.

The test that kills a node adds a fresh one before it ends, so the cluster has two live
nodes again for whatever runs after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import backend_options
from starlette.testclient import TestClient

from runner import ExecutionResult, Sandbox, Status
from runner.backends.base import run_was_lost
from runner.errors import BackendUnavailableError
from runner.logs import LogStore
from runner.logs.execution_text import render_execution
from runner.logs.viewer import create_app

pytestmark = pytest.mark.ray
# A second of work (the restricted tier has no `time`): long enough to be in flight at the kill.
BUSY_SECOND = ("import datetime\nt0 = datetime.datetime.now()\n"
               "while (datetime.datetime.now() - t0).total_seconds() < 1:\n    pass\n")


def _nodes(results: list[ExecutionResult]) -> set[str | None]:
    return {r.resources.node for r in results}


def _wait_for(condition, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"still waiting after {timeout_s} s for {what}"
        time.sleep(0.2)


@pytest.fixture
def ray_sandbox(ray_cluster, tmp_path: Path):
    with Sandbox(backend="ray", log_store=LogStore(tmp_path / "log.sqlite"),
                 **backend_options("ray")) as sandbox:
        sandbox.warm()
        yield sandbox


def test_runs_spread_over_both_nodes_and_record_where_they_ran(ray_sandbox):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: ray_sandbox.run(f"print({i})"), range(12)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    nodes = _nodes(results)
    assert len(nodes) == 2 and None not in nodes, nodes
    assert all(node.startswith("127.0.0.1/") for node in nodes)
    assert ray_sandbox.backend_name == "ray"
    assert {r.backend for r in results} == {"jail"}  # the tier that ran the code (the default)
    store = ray_sandbox.log_store
    logged = store.get_execution(results[0].id)
    node = results[0].resources.node
    assert logged.result.resources.node == node
    # `runner logs show` and the viewer's execution page say where it ran.
    assert f"node       {node}\n" in render_execution(logged)
    page = TestClient(create_app(store.path), base_url="http://127.0.0.1").get(f"/executions/{logged.id}")
    assert page.status_code == 200 and f"<th>Node</th><td>{node}</td>" in page.text


def test_a_session_keeps_its_state_on_one_actor(ray_sandbox):
    with ray_sandbox.session() as session:
        first = session.run("total = 1")
        blocks = [session.run("total = total * 2\nprint(total)") for _ in range(5)]
    assert first.ok
    assert [b.stdout for b in blocks] == ["2\n", "4\n", "8\n", "16\n", "32\n"]
    assert len(_nodes([first, *blocks])) == 1  # pinned: every block ran where the first did
    assert session.restarts == 0


def test_a_node_lost_mid_batch(ray_cluster, tmp_path: Path):
    """Kill the second node (its raylet, then its other processes) while runs are in flight on it."""
    store = LogStore(tmp_path / "log.sqlite")
    with Sandbox(backend="ray", log_store=store, **backend_options("ray")) as sandbox:
        sandbox.warm()
        second = ray_cluster.nodes[1]
        second_label = next(n for n in sandbox._backend.placement() if n.endswith(second.node_id()[:12]))
        # Two sessions: least-pinned placement puts one on each node's actor.
        sessions = [sandbox.session(), sandbox.session()]
        firsts = [s.run("state = 'kept'") for s in sessions]
        assert len(_nodes(firsts)) == 2
        doomed = sessions[[f.resources.node for f in firsts].index(second_label)]
        survivor = sessions[1 - sessions.index(doomed)]

        count = 8
        results: list[ExecutionResult | None] = [None] * count

        def one(i: int) -> None:
            results[i] = sandbox.run(BUSY_SECOND + f"print({i})")

        threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)  # runs are in flight on both nodes
        second.kill()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a run hung after its node was lost"

        done = [r for r in results if r is not None]
        assert len(done) == count
        lost = [r for r in done if run_was_lost(r)]
        assert lost, "no run was in flight on the killed node"
        for r in lost:
            assert r.status is Status.CRASHED and r.error is not None
            assert r.error.type == "NodeLost"
            assert second_label in r.error.message
            assert r.resources.node == second_label
        for r in done:
            assert r.ok or run_was_lost(r), (r.status, r.error)
        for r in done:  # never a lost record: every result, crashed or not, is in the log
            assert store.get_execution(r.id).result.status is r.status

        # An evaluation runs each lost item again, once, and counts one outcome per item.
        final = {int(r.stdout): r for r in done if r.ok}
        for r in lost:
            index = results.index(r)
            again = sandbox.run(f"print({index})")
            assert again.ok, again.error
            final[index] = again
        assert sorted(final) == list(range(count))

        after = [sandbox.run(f"print({i})") for i in range(4)]
        assert all(r.ok for r in after)
        assert second_label not in _nodes(after)

        # The session on the lost node: its state is gone, as after a killed block.
        block = doomed.run("print(state)")
        if run_was_lost(block):  # the loss was found by this block: the next one starts afresh
            block = doomed.run("print(state)")
        assert block.status is Status.ERROR and block.error.type == "NameError", block
        assert doomed.restarts == 1
        kept = survivor.run("print(state)")
        assert kept.ok and kept.stdout == "kept\n"
        for session in sessions:
            session.close()

        # Capacity returns: a new node joins, and actors are placed on it.
        ray_cluster.add_node()
        _wait_for(lambda: len(sandbox._backend.placement()) == 2, 60, "an actor on the new node")
        with ThreadPoolExecutor(4) as pool:
            spread = list(pool.map(lambda i: sandbox.run(f"print({i})"), range(12)))
        assert all(r.ok for r in spread)
        assert len(_nodes(spread)) == 2
    store.close()
    ray_cluster.nodes.remove(second)


def test_an_evaluation_that_loses_a_node_counts_each_problem_once(ray_cluster, tmp_path: Path):
    """A math evaluation on the cluster, the second node killed while its blocks run: the
    conversations that lost a run end `crashed` (RUN_LOST, never shown to the model), their
    problems run once more on the node that is left, and each problem counts once."""
    import re

    from fake_openai_server import FakeOpenAI

    from runner.math import evaluate

    count = 8
    dataset = tmp_path / "sums.jsonl"
    dataset.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"Compute {i} + {i + 1}.",
                                           "answer": str(2 * i + 1), "type": "Algebra",
                                           "level": "Level 1"}) + "\n" for i in range(count)))

    def respond(body: dict) -> str:
        messages = body["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        a, b = (int(n) for n in re.findall(r"Compute (\d+) \+ (\d+)", task)[0])
        if not any(m["role"] == "assistant" for m in messages):  # first reply: a block
            return "Let me compute it.\n```python\n" + BUSY_SECOND + f"print({a} + {b})\n```"
        return f"So the sum is $\\boxed{{{a + b}}}$."

    store = LogStore(tmp_path / "log.sqlite")
    second = ray_cluster.nodes[1]
    outcome: dict[str, object] = {}
    options = {**backend_options("ray"), "pool_size": 1}
    with FakeOpenAI(model="m", responder=respond) as server, \
            Sandbox(backend="ray", log_store=False, **options) as warm:
        # The evaluation's Sandbox shares these actors (the same settings): both are up.
        warm.warm()
        _wait_for(lambda: len(warm._backend.placement()) == 2, 60, "an actor on each node")

        def run() -> None:
            outcome["report"] = evaluate(dataset, model="m", base_url=server.url, backend="ray",
                                         backend_options=options, concurrency=4,
                                         log_store=store)

        thread = threading.Thread(target=run)
        thread.start()
        _wait_for(lambda: len(server.requests) >= 4, 60, "blocks in flight on both nodes")
        time.sleep(0.5)
        second.kill()
        thread.join(timeout=300)
        assert not thread.is_alive(), "the evaluation hung after its node was lost"
    report = outcome["report"]
    assert (report.correct, report.total) == (count, count), report.to_json_dict()
    conn = store._connection()
    attempts = dict(conn.execute("SELECT problem_id, attempts FROM evaluation_items").fetchall())
    lost_runs = conn.execute("SELECT COUNT(*) FROM agent_runs WHERE status = 'crashed' AND "
                             "json_extract(error_json, '$.code') = 'RUN_LOST'").fetchone()[0]
    retried = [problem for problem, n in attempts.items() if n == 2]
    nodes = [json.loads(r).get("resources", {}).get("node") if r else None for (r,) in conn.execute(
        "SELECT result_extra_json FROM executions").fetchall()]
    assert retried, f"no conversation was running on the killed node: {nodes}"
    assert set(attempts.values()) <= {1, 2} and lost_runs == len(retried), (attempts, lost_runs)
    for run_id, messages in conn.execute(
            "SELECT run_id, messages_sent_json FROM agent_turns").fetchall():
        assert "NodeLost" not in messages, f"run {run_id} told the model about the cluster"
    store.close()
    ray_cluster.nodes.remove(second)
    ray_cluster.add_node()
    with Sandbox(backend="ray", log_store=False, **backend_options("ray")) as sandbox:
        _wait_for(lambda: len(sandbox._backend.placement()) == 2, 60, "an actor on the new node")


@pytest.mark.docker
def test_docker_as_the_inner_tier_on_the_nodes(ray_cluster):
    options = {**backend_options("ray"), **backend_options("docker")}
    with Sandbox(backend="ray", inner="docker", log_store=False, **options) as sandbox:
        results = [sandbox.run("import numpy\nprint(numpy.arange(3).sum())") for _ in range(4)]
    for r in results:
        assert r.ok and r.stdout == "3\n", (r.status, r.error)
        assert r.backend == "docker" and r.image and r.resources.node


@pytest.mark.docker
def test_a_node_that_lacks_the_image_says_so(ray_cluster):
    options = {**backend_options("ray"), **backend_options("docker")}
    with pytest.raises(BackendUnavailableError) as caught, \
            Sandbox(backend="ray", inner="docker", image="runner-sandbox:no-such-tag",
                    build_images=False, log_store=False, **options) as sandbox:
        sandbox.warm()
    message = caught.value.message
    assert "runner-sandbox:no-such-tag" in message and "not built" in message
    assert message.count("node 127.0.0.1/") == 2, message  # each node, by name
    assert "runner images build" in message


def _cli(*args: str, code: str = "print(6 * 7)", python: tuple[str, ...] = ("-m", "runner")
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *python, *args], input=code, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("client", [False, True], ids=["gcs-address", "ray-client"])
def test_the_command_line_runs_on_the_cluster(ray_cluster, client):
    address = ray_cluster.client_address if client else ray_cluster.address
    result = _cli("exec", "--backend", "ray", "--ray-address", address, "--json", "-")
    assert result.returncode == 0, result.stderr
    assert '"stdout": "42\\n"' in result.stdout
    assert '"node": "127.0.0.1/' in result.stdout


LOCAL_RAY = """
import json
import ray
from runner import Sandbox
with Sandbox(backend="ray", log_store=False) as sandbox:
    result = sandbox.run("print(6 * 7)")
    addresses = sorted({n["NodeManagerAddress"] for n in ray.nodes()})
print(json.dumps({"stdout": result.stdout, "node": result.resources.node, "addresses": addresses,
                  "connected": ray.is_initialized()}))
"""


def test_without_an_address_a_private_local_ray_starts_on_loopback_and_stops():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, "-c", LOCAL_RAY], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["stdout"] == "42\n"
    assert report["addresses"] == ["127.0.0.1"]  # Ray would otherwise take the machine's address
    assert report["node"].startswith("127.0.0.1/")
    assert report["connected"] is False  # closing the last Sandbox shut the private Ray down


def _without_ray_settings(home: Path) -> dict[str, str]:
    """A user's environment on a machine with no Ray set up: no RAY_* variables (the test
    session's cluster sets some), and a home of its own, to see what is written there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "HOME": str(home), "RUNNER_HOME": str(home / "runner-home")}


def test_the_readmes_first_ray_command_runs_on_a_private_local_ray(tmp_path: Path):
    """`runner exec job.py --backend ray` as the README has it, with no cluster and no Ray
    settings: a private local Ray starts (its token set before Ray is imported), runs the
    job, and stops; nothing is written to ~/.ray."""
    job = tmp_path / "job.py"
    job.write_text("print(6 * 7)\n")
    result = subprocess.run([sys.executable, "-m", "runner", "exec", str(job), "--backend", "ray"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path,
                            env=_without_ray_settings(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "42\n"
    assert "Traceback" not in result.stderr and "Authentication" not in result.stderr
    assert not (tmp_path / ".ray").exists()


@pytest.mark.parametrize("scheme", ["", "ray://"], ids=["gcs-address", "ray-client"])
def test_a_dead_ray_address_fails_in_seconds_naming_it(tmp_path: Path, scheme: str):
    from runner.backends.ray_cluster import free_port

    address = f"{scheme}127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "runner", "exec", "-", "--backend", "ray",
                             "--ray-address", address], input="print(1)", capture_output=True,
                            text=True, timeout=300, env=_without_ray_settings(tmp_path))
    assert time.monotonic() - started < 60  # Ray's own retries took minutes
    assert result.returncode == 1
    error, fix = result.stderr.strip().splitlines()  # one line, and its fix
    assert error == f"runner: error [BACKEND_UNAVAILABLE]: no Ray cluster at {address} " \
                    "(Connection refused)"
    assert fix.startswith("runner: fix: start the cluster")


def test_ray_flags_without_the_ray_backend_are_a_usage_error():
    result = _cli("exec", "--ray-address", "auto", "-")
    assert result.returncode == 2
    assert "--backend ray" in result.stderr


def test_without_ray_installed_the_error_says_how_to_install_it():
    hide_ray = "import sys; sys.modules['ray'] = None; from runner.cli import main; main()"
    result = _cli("exec", "--backend", "ray", "-", python=("-c", hide_ray))
    assert result.returncode == 1
    assert "BACKEND_UNAVAILABLE" in result.stderr
    assert "pip install 'runner-sandbox[ray]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_client_server_that_cannot_set_up_the_client_is_tried_again_then_named():
    """Ray Client starts a server process per client; one not ready in time (a loaded head
    node) fails the connection with a message whose reason is on its last line. The
    connection is tried once more, with a new client server, and the error names the
    reason, not only "Initialization failure from server:"."""
    import tempfile

    from runner.backends.ray_cluster import LocalCluster

    temp = tempfile.mkdtemp(prefix="rc", dir="/tmp")  # Ray's socket paths must be short
    try:
        # No time at all for the client's own server: every connection fails this way.
        with LocalCluster(temp, nodes=1, env={"RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "0"}
                          ) as cluster:
            # On a loaded machine the client proxy may not listen yet ("Connection refused",
            # said as such): wait for its port, so the failure tested is the hand-over's.
            host, port = cluster.client_address.removeprefix("ray://").rsplit(":", 1)
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection((host, int(port)), timeout=1).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the client proxy never listened"
                    time.sleep(0.2)
            result = subprocess.run(
                [sys.executable, "-m", "runner", "exec", "-", "--backend", "ray",
                 "--ray-address", cluster.client_address], input="print(1)",
                capture_output=True, text=True, timeout=300,
                # the client's wait after a failed connection: 30 s by default
                env={**os.environ, **cluster.driver_env, "RAY_CLIENT_RECONNECT_GRACE_PERIOD": "1"})
            logs = "".join(path.read_text(errors="replace")
                           for path in Path(temp).glob("session_*/logs/ray_client_server.err"))
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert result.returncode == 1, result.stderr
    error, fix = result.stderr.strip().splitlines()
    assert error.startswith("runner: error [BACKEND_UNAVAILABLE]: could not connect to the Ray "
                            f"cluster at {cluster.client_address}: Initialization failure from "
                            "server: RuntimeError: "), error
    assert fix.startswith("runner: fix: start the cluster")
    clients = set(re.findall(r"New data connection from client (\w+)", logs))
    assert len(clients) == 2  # two connections (a client reconnects under the same id)


def test_a_dead_actor_is_named_as_the_actor_and_rays_noise_stays_off_stderr(ray_cluster, tmp_path: Path):
    """`runner exec` on the cluster, its actor's process killed while the run runs (the
    node alive): the error names the actor that died, not a lost node, stderr holds
    runner's own lines only (Ray's warnings go to the log), and the next command runs."""
    env = {**os.environ, "RUNNER_HOME": str(tmp_path / "home")}
    command = [sys.executable, "-m", "runner", "exec", "--backend", "ray", "--ray-address",
               ray_cluster.address, "--json", "-"]
    run = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    assert run.stdin is not None
    run.stdin.write("print('started', flush=True)\n" + BUSY_SECOND * 30)
    run.stdin.close()
    run.stdin = None

    def running() -> bool:
        found = subprocess.run(["pgrep", "-f", "ray::SandboxActor.run"], capture_output=True)
        return found.returncode == 0

    _wait_for(running, 120, "the run to start on an actor")
    subprocess.run(["pkill", "-9", "-f", "ray::SandboxActor.run"], check=False)
    out, err = run.communicate(timeout=180)
    assert out.startswith("{"), (run.returncode, out[:3000], err[:3000])
    result = json.loads(out)
    assert run.returncode == 1 and result["status"] == "crashed", err
    message = result["error"]["message"]
    assert "the sandbox actor running this on Ray node 127.0.0.1/" in message and "died" in message
    assert "was lost while" not in message
    assert "Traceback" not in err and "(raylet)" not in err and "WARNING" not in err, err
    again = subprocess.run(command, env=env, input="print('next')", capture_output=True,
                           text=True, timeout=180)
    assert again.returncode == 0 and json.loads(again.stdout)["stdout"] == "next\n", again.stderr


def test_a_cancelled_run_on_the_cluster_is_stopped_on_its_actor(ray_sandbox):
    """A caller's cancel (an MCP client, AutoGen's token) reaches the run on its actor:
    it ends cancelled at once, not at its time limit, in a run and in a session's block,
    and the next run and the session's next block go on."""
    from runner import Limits
    from runner.cancellation import Cancellation

    spin = "n = 0\nwhile True:\n    n += 1\n"
    for where in ("run", "session"):
        cancel = Cancellation()
        timer = threading.Timer(3.0, cancel.cancel)
        timer.start()
        started = time.monotonic()
        if where == "run":
            result = ray_sandbox.run(spin, limits=Limits(timeout_s=60), cancel=cancel)
            after = ray_sandbox.run("print('next')")
        else:
            with ray_sandbox.session(limits=Limits(timeout_s=60)) as session:
                assert session.run("kept = 1").ok
                result = session.run(spin, cancel=cancel)
                after = session.run("print('next')")
        took = time.monotonic() - started
        timer.join()
        assert result.status is Status.CRASHED and result.error.type == "Cancelled", result.error
        assert took < 45, took  # far under the minute it was allowed
        assert after.stdout == "next\n", after.error
