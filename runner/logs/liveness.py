"""Whether the process that owns a `running` agent run is still alive.

A run is written as `running` when it starts and updated when it ends; a process killed
in between (or a machine rebooted) leaves it `running`. The run's row records its owner
(host, pid, the pid's start time, the boot id), so a later reader can tell a live owner
from a gone one, and a pid reused by another process from the one that wrote the run.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def current_owner() -> dict[str, Any]:
    """The process writing a run: enough to tell later whether it is still alive."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": _boot_id(),
            "started": _start_ticks(os.getpid())}


def owner_alive(recorded: dict[str, Any]) -> bool | None:
    """Whether a run's owner still runs: None when this machine cannot tell (another host)."""
    if recorded.get("host") != socket.gethostname():
        return None
    if recorded.get("boot_id") and _boot_id() and recorded.get("boot_id") != _boot_id():
        return False  # the machine has rebooted since
    pid = recorded.get("pid")
    if not isinstance(pid, int):
        return None
    started = _start_ticks(pid)
    if started is None:
        return False
    return recorded.get("started") in (None, started)
