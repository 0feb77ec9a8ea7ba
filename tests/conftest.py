"""Shared fixtures: an isolated RUNNER_HOME per test session and warm sandboxes per backend.

The contract suite is written once and parametrised over BACKENDS. Everything that needs
the Docker engine carries the `docker` marker (the docker entry of BACKENDS carries it,
so every test parametrised over the backends gets it there): on a machine without a
usable engine those tests skip and say why, unless RUNNER_REQUIRE_DOCKER (set by
`make test`) or CI is set, which turns the missing engine into a failure.
"""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

# A shell starts a background job (`make test &`, a CI runner without a terminal) with
# SIGINT ignored, and an ignored signal stays ignored across exec: the Ctrl-C tests' own
# SIGINTs (to this process and to the commands they start) would then do nothing. Ctrl-C is
# what they test, so the suite restores it (a Python handler is reset to the default in
# children, where Python installs its own KeyboardInterrupt handler again).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

BACKENDS = ["jail", "restricted", pytest.param("docker", marks=pytest.mark.docker),
            pytest.param("ray", marks=pytest.mark.ray)]


@functools.cache
def docker_problem() -> str | None:
    """Why the Docker tier cannot run here (engine or image), or None; asked once."""
    from runner.backends.docker import check_available
    from runner.errors import RunnerError

    try:
        check_available()
    except RunnerError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any failure to ask is a reason to report
        return f"{type(exc).__name__}: {exc}"
    return None


def require_docker() -> None:
    """Skip (or, where the engine is required, fail) when the Docker tier is unavailable."""
    problem = docker_problem()
    if problem is None:
        return
    reason = f"no usable Docker engine here: {problem}"
    if os.environ.get("RUNNER_REQUIRE_DOCKER") or os.environ.get("CI"):
        pytest.fail(f"{reason}. RUNNER_REQUIRE_DOCKER (or CI) is set, so this is a failure; "
                    "`make docker-ready` starts the engine and builds the image", pytrace=False)
    pytest.skip(f"{reason} (`make docker-ready` sets it up)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture: a session-scoped docker Sandbox must not be attempted either.
    if item.get_closest_marker("docker") is not None:
        require_docker()


@pytest.fixture(scope="session", autouse=True)
def _isolated_runner_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = str(tmp_path_factory.mktemp("runner-home"))
    previous = os.environ.get("RUNNER_HOME")
    os.environ["RUNNER_HOME"] = home
    yield home
    if previous is None:
        os.environ.pop("RUNNER_HOME", None)
    else:
        os.environ["RUNNER_HOME"] = previous


TEST_LABEL = "org.runner.test"


def _tmp_mount_points() -> list[str]:
    from runner.worker import jail

    return sorted({Path(root).relative_to("/tmp").parts[0]
                   for root in jail.View.of_python(libraries=True).roots
                   if Path(root).is_relative_to("/tmp")})


# What a fresh jail-tier run's /tmp holds: the mount points of the interpreter's directories
# when it lives under the host's /tmp (a virtual environment in a temporary clone, as CI
# makes one), else nothing.
TMP_MOUNT_POINTS = _tmp_mount_points()
# One value per test session, so two sessions on one engine never sweep each other's.
TEST_SESSION = f"{os.getpid()}-{os.urandom(4).hex()}"


def backend_options(backend: str) -> dict[str, object]:
    """Containers made by tests carry a label, so the sweep below finds every one; ray
    sandboxes run on the session's local cluster (the `ray` marker starts it)."""
    if backend == "docker":
        return {"labels": {TEST_LABEL: TEST_SESSION}}
    if backend == "ray":
        assert _RAY_CLUSTER, "a ray test without the `ray` marker or the ray_cluster fixture"
        # One actor per node: the nodes' other CPU is left for a second driver (the CLI tests).
        return {"ray_address": _RAY_CLUSTER[0].address, "actors_per_node": 1}
    return {}


# The cluster nodes report a lost node within seconds (Ray's default takes about 15 s):
# a heartbeat a second, dead after five missed.
RAY_TEST_ENV = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "1000",
                "RAY_health_check_failure_threshold": "5", "RAY_health_check_initial_delay_ms": "1000"}
_RAY_CLUSTER: list[object] = []


@pytest.fixture(scope="session")
def ray_cluster():
    """A two-node Ray cluster on loopback (two CPUs per node), for the whole test session.

    Its files live in a short temporary directory (Ray's socket paths must fit), usage
    statistics are off, and every process of it is ended when the session ends, failed
    tests or not (by session id: other Ray processes on the machine are left alone)."""
    import shutil
    import tempfile

    from runner.backends.ray_cluster import LocalCluster

    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    try:
        with LocalCluster(temp, nodes=2, cpus_per_node=2, env=RAY_TEST_ENV) as cluster:
            _RAY_CLUSTER.append(cluster)
            saved = {key: os.environ.get(key) for key in cluster.driver_env}
            os.environ.update(cluster.driver_env)  # this process and the CLIs it starts may use it
            try:
                yield cluster
            finally:
                _RAY_CLUSTER.clear()
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(autouse=True)
def _ray_cluster_when_marked(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("ray") is not None:
        request.getfixturevalue("ray_cluster")


@pytest.fixture(scope="session", autouse=True)
def _sweep_test_containers():
    yield
    from runner.docker.engine import containers, remove_containers

    try:
        remove_containers([c["ID"] for c in containers(f"{TEST_LABEL}={TEST_SESSION}")])
    except Exception:  # no engine: nothing was created
        pass


@pytest.fixture(scope="session", params=BACKENDS)
def sandbox(request: pytest.FixtureRequest, _isolated_runner_home: str):
    """One warm Sandbox per backend, shared by the whole session (warm-up costs ~1 s)."""
    from runner import Sandbox

    if request.param == "ray":
        request.getfixturevalue("ray_cluster")
    with Sandbox(backend=request.param, **backend_options(request.param)) as sb:
        yield sb


@pytest.fixture(scope="session")
def docker_sandbox(_isolated_runner_home: str):
    from runner import Sandbox

    require_docker()
    with Sandbox(backend="docker", **backend_options("docker")) as sb:
        yield sb


@pytest.fixture(scope="session")
def restricted(_isolated_runner_home: str):
    from runner import Sandbox

    with Sandbox(backend="restricted") as sb:
        yield sb
