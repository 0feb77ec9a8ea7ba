"""The repository itself: no merge left its conflict markers in a tracked file, the
set-up `make test` runs waits for apt rather than tripping over it, and the README's
install lines install this distribution."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^(<<<<<<< |>>>>>>> |=======$)", re.M)


def test_no_tracked_file_holds_a_conflict_marker():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    marked = []
    for name in files:
        path = ROOT / name
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files
        if MARKER.search(text):
            marked.append(name)
    assert not marked, f"conflict markers in: {marked}"


def test_make_tests_apt_calls_wait_for_the_dpkg_lock():
    """`make chromium-ready` installs chromium with apt-get when it is missing; on a fresh
    machine another apt-get may hold the dpkg lock, so every call waits for it (apt's own
    lock timeout). `make -n` prints the recipe as it would run, without running it."""
    shown = subprocess.run(["make", "-n", "chromium-ready"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout
    commands = "\n".join(line for line in shown.splitlines() if "echo" not in line)  # not advice
    calls = re.findall(r"apt-get( -o DPkg::Lock::Timeout=\d+)? (install|update)", commands)
    assert len(calls) == 3, shown
    assert all(option for option, _ in calls), shown


def _install_lines() -> list[tuple[str, str]]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"pip install '([A-Za-z0-9_.-]+)\[([a-z0-9_-]+)\]'", readme)


def test_the_readmes_install_lines_name_this_distribution_and_its_extras():
    """An extra installed by the name the README writes must add to this runner, never
    fetch the unrelated package called `runner` on the public index."""
    from importlib import metadata

    # (an editable install is seen twice: its dist-info and the checkout's egg-info)
    names = sorted(set(metadata.packages_distributions()["runner"]))
    assert len(names) == 1 and names[0] != "runner", names
    distribution = metadata.distribution(names[0])
    extras = set(distribution.metadata.get_all("Provides-Extra") or [])
    lines = _install_lines()
    assert len(lines) >= 5, lines
    for name, extra in lines:
        assert name == distribution.metadata["Name"] and extra in extras, (name, extra)


def test_an_extra_installed_as_written_keeps_this_runner():
    """pip resolves `runner-sandbox[mcp]` against the installed distribution (the extra's
    packages are already here): nothing named runner is fetched or replaced."""
    import sys

    name, extra = next((name, extra) for name, extra in _install_lines() if extra == "mcp")
    shown = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run",
                            f"{name}[{extra}]"], capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert "Would install" not in shown.stdout or "runner" not in \
        shown.stdout.split("Would install", 1)[1], shown.stdout
    assert f"Requirement already satisfied: {name}" in shown.stdout, shown.stdout


def test_no_extra_names_the_unrelated_runner_on_the_index():
    """An extra that names the distribution itself must use its own name: `runner[...]`
    installs the index's unrelated `runner` 1.1 and none of the extras."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    own = project["name"]
    for extra, requirements in project["optional-dependencies"].items():
        for line in requirements:
            name = Requirement(line).name.lower().replace("_", "-")
            assert name != "runner", f"extra {extra!r} names 'runner': use {own!r}"
