"""The Docker tier from the command line: exec, images list, doctor."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker

RUNNER = [sys.executable, "-m", "runner"]


def run_cli(args: list[str], home: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(RUNNER + args, input=stdin, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, RUNNER_HOME=str(home)))


def test_exec_on_docker_reports_image_and_package_versions(tmp_path):
    proc = run_cli(["exec", "-", "--backend", "docker", "--json", "--package", "mpmath>=1.3"],
                   tmp_path, "import sympy, mpmath\nprint(sympy.factorint(2**64 - 1))")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["backend"] == "docker"
    assert result["stdout"] == "{3: 1, 5: 1, 17: 1, 257: 1, 641: 1, 65537: 1, 6700417: 1}\n"
    assert result["image"].startswith("sha256:")
    assert result["packages"]["mpmath"].startswith("1.")


def test_exec_on_docker_has_unrestricted_python_but_no_network(tmp_path):
    code = ("import os, socket\nprint(os.getuid())\n"
            "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
            "    print('connected')\nexcept OSError as exc:\n    print('no network')\n")
    proc = run_cli(["exec", "-", "--backend", "docker", "--json"], tmp_path, code)
    result = json.loads(proc.stdout)
    assert result["status"] == "ok", result
    assert result["stdout"] == "10001\nno network\n"


def test_images_list_marks_the_image_this_version_uses(tmp_path):
    from runner.docker.images import default_tag

    proc = run_cli(["images", "list"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    marked = [line for line in proc.stdout.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and default_tag() in marked[0]


def test_images_build_is_cached_and_prints_the_tag(tmp_path):
    from runner.docker.images import default_tag

    proc = run_cli(["images", "build"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == default_tag()


def test_package_allowlist_policy_refuses_other_packages(tmp_path, monkeypatch):
    from runner import Sandbox, Status

    monkeypatch.setenv("RUNNER_HOME", str(tmp_path))
    with Sandbox(backend="docker", package_allowlist=["mpmath", "sympy"], log_store=False) as sb:
        allowed = sb.run("import mpmath\nprint(mpmath.mpf(2) ** 0.5)", packages=["mpmath>=1.0"])
        assert allowed.ok and allowed.stdout.startswith("1.414")
        refused = sb.run("print(1)", packages=["tabulate"])
        assert refused.status == Status.DENIED
        assert "tabulate" in refused.error.message and "allowlist" in refused.error.message
        assert refused.stdout == ""


def _use_tabulate(home: str, queue) -> None:  # runs in a separate process
    import os

    os.environ["RUNNER_HOME"] = home
    from runner import Sandbox

    with Sandbox(backend="docker", log_store=False, pool_size=1) as sb:
        results = [sb.run("import tabulate\nprint(tabulate.__name__)", packages=["tabulate"])
                   for _ in range(3)]
    queue.put([(r.status.value, r.stdout, r.packages.get("tabulate")) for r in results])


def test_two_processes_share_one_package_environment_build(tmp_path):
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_use_tabulate, args=(str(tmp_path), queue))
               for _ in range(2)]
    for process in workers:
        process.start()
    outcomes = [queue.get(timeout=300) for _ in workers]
    for process in workers:
        process.join(timeout=60)
    for outcome in outcomes:
        assert [status for status, _, _ in outcome] == ["ok"] * 3, outcome
        assert all(stdout == "tabulate\n" and version for _, stdout, version in outcome)
    envs = [p for p in (tmp_path / "envs").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(envs) == 1 and (envs[0] / ".complete").is_file()
