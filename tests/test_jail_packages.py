"""Package sets on the jail tier, as users ask for them: `packages=[...]`, `--package`.

- a package the host has (and what it requires) is bound read-only and imports;
- one the host lacks is downloaded as wheels with the user's pip configuration, installed
  once into a cached environment (the first use says so), and reused;
- C extensions work (pandas on numpy), and the package set stays its own: a run without
  it cannot import it;
- what cannot be had is `install_failed` with pip's reason, what the allowlist refuses is
  `denied`, and the next run is unharmed;
- a requested package's own code runs only inside a run, never in the worker (whose first
  steps in the jail still see the host): a package whose import writes a file on the host
  leaves nothing there.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runner import Sandbox, Status


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="jail", log_store=False) as sb:
        yield sb


def test_a_package_the_host_has_is_bound_with_what_it_requires(sandbox):
    r = sandbox.run("import pydantic\nclass M(pydantic.BaseModel):\n    x: int\nprint(M(x='3').x)",
                    packages=["pydantic>=2"])
    assert r.status == Status.OK and r.stdout == "3\n", r
    assert r.packages["pydantic"].startswith("2.")
    # Without asking for it, the run cannot import it, and is told how to get it.
    r = sandbox.run("import pydantic")
    assert r.status == Status.ERROR and r.error.type == "ModuleNotFoundError", r
    assert "not installed in this sandbox's package set" in r.error.message
    assert "--package" in r.error.message


def test_a_package_the_host_lacks_is_installed_once_and_reused(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RUNNER_HOME", str(tmp_path))  # no environment built before this test
    code = ("import pandas as pd\n"
            "frame = pd.DataFrame({'x': [1, 2, 3]})\n"
            "frame.to_csv('frame.csv', index=False)\n"
            "print(int(pd.read_csv('frame.csv').x.sum()), pd.__version__)\n")
    with Sandbox(backend="jail", log_store=False) as sandbox:
        _install_once_then_reuse(sandbox, code, caplog)


def _install_once_then_reuse(sandbox: Sandbox, code: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="runner.install"):
        first = sandbox.run(code, packages=["pandas"])
    assert first.status == Status.OK, first
    total, version = first.stdout.split()
    assert total == "6" and first.packages == {"pandas": version}
    installs = [record.getMessage() for record in caplog.records if "installing" in record.getMessage()]
    assert installs == ["installing pandas into a cached environment (first use of this package "
                        "set; later runs reuse it)"], installs
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="runner.install"):
        again = sandbox.run(code, packages=["pandas"])
    assert again.status == Status.OK and again.stdout == first.stdout, again
    assert not [record for record in caplog.records if "installing" in record.getMessage()]
    # The set is the run's own: the default set has no pandas.
    plain = sandbox.run("import pandas")
    assert plain.status == Status.ERROR and plain.error.type == "ModuleNotFoundError", plain


def test_what_cannot_be_installed_is_install_failed_with_pips_reason(sandbox):
    name = f"runner-no-such-package-{secrets.token_hex(4)}"
    r = sandbox.run("print(1)", packages=[name])
    assert r.status == Status.INSTALL_FAILED, r
    assert name in r.error.message and "No matching distribution" in r.error.message, r.error
    assert sandbox.run("print(2)").stdout == "2\n"


def test_the_allowlist_refuses_what_it_does_not_name():
    with Sandbox(backend="jail", log_store=False, package_allowlist=["numpy"]) as sb:
        r = sb.run("print(1)", packages=["pandas"])
        assert r.status == Status.DENIED, r
        assert "pandas is not on this sandbox's allowlist (numpy)" in r.error.message
        ok = sb.run("import numpy\nprint(numpy.ones(3).sum())", packages=["numpy"])
        assert ok.status == Status.OK and ok.stdout == "3.0\n", ok


def _wheel(directory: Path, name: str, module_source: str) -> Path:
    """A minimal pure-Python wheel of `name` (one module, importable as `name`)."""
    module = name.replace("-", "_")
    dist_info = f"{module}-1.0.dist-info"
    files = {
        f"{module}/__init__.py": module_source,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{dist_info}/RECORD,,")
    wheel = directory / f"{module}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    return wheel


def test_a_requested_packages_code_runs_only_inside_the_run(tmp_path, monkeypatch):
    """Its import code writes a marker on the host, where the worker's first steps could:
    it runs in the run (whose view has no such path), and the host stays untouched."""
    marker = Path(f"/var/tmp/runner-marker-{secrets.token_hex(6)}")
    name = f"runner-test-marker-{secrets.token_hex(4)}"
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, name, f"import os\nWROTE = False\ntry:\n    open({str(marker)!r}, 'w').write('x')\n"
                        "    WROTE = True\nexcept OSError as exc:\n    ERROR = exc.errno\n")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    try:
        with Sandbox(backend="jail", log_store=False) as sb:
            module = name.replace("-", "_")
            r = sb.run(f"import {module}\nprint({module}.WROTE, {module}.ERROR)", packages=[name])
            assert r.status == Status.OK, r
            assert r.stdout in ("False 2\n", "False 30\n", "False 13\n"), r.stdout
        assert not marker.exists()
    finally:
        marker.unlink(missing_ok=True)


def test_the_cli_says_when_it_installs_a_package_set(tmp_path):
    env = dict(os.environ, RUNNER_HOME=str(tmp_path / "home"))
    command = [sys.executable, "-m", "runner", "exec", "-", "--package", "tabulate"]
    code = "import tabulate\nprint(tabulate.tabulate([[1, 2]]))"
    first = subprocess.run(command, input=code, capture_output=True, text=True, timeout=600,
                           env=env)
    assert first.returncode == 0, first.stderr
    assert "runner: installing tabulate into a cached environment" in first.stderr
    assert "1  2" in first.stdout
    second = subprocess.run(command, input=code, capture_output=True, text=True, timeout=300,
                            env=env)
    assert second.returncode == 0 and "installing" not in second.stderr, second.stderr
