"""Where the runner keeps its data: `$RUNNER_HOME`, or a per-user data directory."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def runner_home() -> Path:
    """The data directory, created on first use."""
    configured = os.environ.get("RUNNER_HOME")
    home = Path(configured).expanduser() if configured else Path(platformdirs.user_data_dir("runner"))
    home.mkdir(parents=True, exist_ok=True)
    return home


def log_db_path() -> Path:
    return runner_home() / "runner.db"
