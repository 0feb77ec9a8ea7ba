"""The container's own control group, as the worker inside it reads it (Docker tier).

A container's cgroup counts every process in it together: the worker reads how much
memory its warm processes hold (so the host can set the container's memory limit to
that plus one run's limit), how much CPU time the container has used (so a run's
processes together are stopped at the run's CPU limit), and how many processes the
kernel's out-of-memory killer has ended. cgroup v1 and v2, with a private cgroup
namespace (the container's group is the root of /sys/fs/cgroup). Stdlib only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

ROOT = "/sys/fs/cgroup"
_V1_MEMORY, _V2 = f"{ROOT}/memory", ROOT


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as source:
            return source.read()
    except (OSError, ValueError):
        return None


def _stat_value(text: str | None, key: str) -> int | None:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def memory_in_use() -> int | None:
    """Bytes of anonymous memory the group's processes hold (not the page cache, which the
    kernel reclaims before it kills anything)."""
    v2 = _stat_value(_read(f"{_V2}/memory.stat"), "anon")
    if v2 is not None:
        return v2
    return _stat_value(_read(f"{_V1_MEMORY}/memory.stat"), "total_rss")


def oom_kills() -> int | None:
    """How many processes the out-of-memory killer has ended in the group."""
    for path, key in ((f"{_V2}/memory.events", "oom_kill"),
                      (f"{_V1_MEMORY}/memory.oom_control", "oom_kill")):
        value = _stat_value(_read(path), key)
        if value is not None:
            return value
    return None


def cpu_used_ns() -> int | None:
    """CPU time the group's processes have used, in nanoseconds."""
    usec = _stat_value(_read(f"{_V2}/cpu.stat"), "usage_usec")
    if usec is not None:
        return usec * 1000
    for path in (f"{ROOT}/cpuacct/cpuacct.usage", f"{ROOT}/cpu,cpuacct/cpuacct.usage"):
        text = _read(path)
        if text is not None and text.strip().isdigit():
            return int(text)
    return None


def cpus() -> float:
    """How many CPUs the group may use at once (its quota, else the machine's)."""
    fields = (_read(f"{_V2}/cpu.max") or "").split()
    if len(fields) == 2 and fields[0] != "max":
        try:
            return max(0.01, int(fields[0]) / int(fields[1]))
        except ValueError:
            pass
    quota_text = _read(f"{ROOT}/cpu/cpu.cfs_quota_us") or \
        _read(f"{ROOT}/cpu,cpuacct/cpu.cfs_quota_us")
    period_text = _read(f"{ROOT}/cpu/cpu.cfs_period_us") or \
        _read(f"{ROOT}/cpu,cpuacct/cpu.cfs_period_us")
    try:
        quota, period = int(quota_text or "-1"), int(period_text or "0")
    except ValueError:
        quota, period = -1, 0
    if quota > 0 and period > 0:
        return max(0.01, quota / period)
    return float(os.cpu_count() or 1)


class CpuMeter:
    """A run's CPU budget for all of its threads and processes together, read by `read`
    (by default the container's group's usage; on the host, the run's process's). They
    cannot use more than `cpus()` seconds of CPU per second, so the next look is due when
    the rest of the budget could have been used at that rate."""

    def __init__(self, budget_s: float, read: Callable[[], int | None] = cpu_used_ns) -> None:
        self.budget_ns = int(budget_s * 1e9)
        self.rate = cpus()
        self.read = read
        self.start = read()
        self._due_at: float | None = None  # before this, the budget cannot be used up

    def used_ns(self) -> int:
        now = self.read()
        return 0 if now is None or self.start is None else max(0, now - self.start)

    def seconds_until_due(self) -> float | None:
        """How long until the budget could be used up; 0 when it is; None: no counter.
        The counter is read again only once the last answer's time has passed (a run
        that wakes its supervisor often, writing output, costs no reads meanwhile)."""
        if self.start is None:
            return None
        now = time.monotonic()
        if self._due_at is not None and now < self._due_at:
            return self._due_at - now
        left = self.budget_ns - self.used_ns()
        if left <= 0:
            return 0.0
        wait = max(0.005, left / 1e9 / self.rate)
        self._due_at = now + wait
        return wait
