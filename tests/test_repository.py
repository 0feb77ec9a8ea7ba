"""The repository itself: no merge left its conflict markers in a tracked file."""

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
