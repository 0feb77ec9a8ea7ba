"""Shared fixtures: an isolated RUNNER_HOME per test session and warm sandboxes per backend.

The contract suite is written once and parametrised over BACKENDS; the Docker issue adds
"docker" to that list.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

BACKENDS = ["restricted"]


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


@pytest.fixture(scope="session", params=BACKENDS)
def sandbox(request: pytest.FixtureRequest, _isolated_runner_home: str):
    """One warm Sandbox per backend, shared by the whole session (warm-up costs ~1 s)."""
    from runner import Sandbox

    with Sandbox(backend=request.param) as sb:
        yield sb


@pytest.fixture(scope="session")
def restricted(_isolated_runner_home: str):
    from runner import Sandbox

    with Sandbox(backend="restricted") as sb:
        yield sb
