"""Shared fixtures: an isolated RUNNER_HOME per test session and warm sandboxes per backend.

The contract suite is written once and parametrised over BACKENDS; the Docker issue adds
"docker" to that list.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

BACKENDS = ["restricted", "docker"]


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
# One value per test session, so two sessions on one engine never sweep each other's.
TEST_SESSION = f"{os.getpid()}-{os.urandom(4).hex()}"


def backend_options(backend: str) -> dict[str, object]:
    """Containers made by tests carry a label, so the sweep below finds every one."""
    return {"labels": {TEST_LABEL: TEST_SESSION}} if backend == "docker" else {}


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

    with Sandbox(backend=request.param, **backend_options(request.param)) as sb:
        yield sb


@pytest.fixture(scope="session")
def docker_sandbox(_isolated_runner_home: str):
    from runner import Sandbox

    with Sandbox(backend="docker", **backend_options("docker")) as sb:
        yield sb


@pytest.fixture(scope="session")
def restricted(_isolated_runner_home: str):
    from runner import Sandbox

    with Sandbox(backend="restricted") as sb:
        yield sb
