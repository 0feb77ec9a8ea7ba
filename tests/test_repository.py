"""The repository itself: no merge left its conflict markers in a tracked file, and the
set-up `make test` runs waits for apt rather than tripping over it."""

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
